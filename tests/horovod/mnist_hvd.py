"""An MNIST-style script written the Horovod way (the canonical recipe of
Horovod's PyTorch guide, on synthetic digits so that no download is needed):
init, pin the GPU, scale the learning rate by size(), DistributedSampler,
broadcast parameters and optimizer state, DistributedOptimizer, metrics
averaged with allreduce, rank 0 saves.  Unmodified under hvdrun."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data.distributed

import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--test-batch-size", type=int, default=40)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--fp16-allreduce", action="store_true")
parser.add_argument("--use-adasum", action="store_true")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--double", action="store_true", help="float64 model and data (a test's exact comparison)")
parser.add_argument("--save", default=None)
args = parser.parse_args()

hvd.init()
torch.manual_seed(args.seed)
if torch.cuda.is_available():
    torch.cuda.set_device(hvd.local_rank())
    torch.cuda.manual_seed(args.seed)
torch.set_num_threads(1)


def digits(n, seed):
    """Synthetic 28x28 digits: a class-dependent pattern plus noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    proto = torch.randn(10, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    images = proto[labels] + 0.5 * torch.randn(n, 1, 28, 28, generator=g)
    return torch.utils.data.TensorDataset(images.double() if args.double else images, labels)


train_dataset = digits(960, 1)
test_dataset = digits(240, 2)
train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset, num_replicas=hvd.size(),
                                                                rank=hvd.rank())
train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
test_sampler = torch.utils.data.distributed.DistributedSampler(test_dataset, num_replicas=hvd.size(),
                                                               rank=hvd.rank(), shuffle=False)
test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size, sampler=test_sampler)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


model = Net().double() if args.double else Net()
lr_scaler = hvd.size() if not args.use_adasum else 1
if torch.cuda.is_available():
    model.cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression,
                                     op=hvd.Adasum if args.use_adasum else hvd.Average,
                                     gradient_predivide_factor=args.gradient_predivide_factor)


def train(epoch):
    model.train()
    train_sampler.set_epoch(epoch)
    for batch_idx, (data, target) in enumerate(train_loader):
        if torch.cuda.is_available():
            data, target = data.cuda(), target.cuda()
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
    if hvd.rank() == 0:
        print("Train Epoch: %d\tLoss: %.6f" % (epoch, loss.item()), flush=True)


def metric_average(val, name):
    return hvd.allreduce(torch.tensor(val), name=name).item()


def test():
    model.eval()
    test_loss = test_accuracy = 0.
    with torch.no_grad():
        for data, target in test_loader:
            if torch.cuda.is_available():
                data, target = data.cuda(), target.cuda()
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            test_accuracy += output.max(1)[1].eq(target).float().sum().item()
    test_loss /= len(test_sampler)
    test_accuracy /= len(test_sampler)
    test_loss = metric_average(test_loss, "avg_loss")
    test_accuracy = metric_average(test_accuracy, "avg_accuracy")
    if hvd.rank() == 0:
        print("Test set: Average loss: %.6f, Accuracy: %.2f%%" % (test_loss, 100. * test_accuracy), flush=True)


for epoch in range(1, args.epochs + 1):
    train(epoch)
    test()
if hvd.rank() == 0 and args.save:
    torch.save(model.state_dict(), args.save)
