"""A small, ordinary PyTorch training script: a CNN on synthetic 16x16
images (no download), SGD with momentum, a step LR schedule, a checkpoint at
the end.  It knows nothing of distribution; run it plain or under hvdshim:

    python3 examples/train.py
    LD_PRELOAD=$PWD/.libs/libhvdshim.so mpirun -np 2 -x LD_PRELOAD python3 examples/train.py
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=5)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--checkpoint", default="example-checkpoint.pt")
args = ap.parse_args()

torch.manual_seed(0)
# Ten classes, each a very noisy copy of its own random template.
templates = torch.randn(10, 1, 16, 16)
labels = torch.randint(0, 10, (2048,))
images = templates[labels] + 2.0 * torch.randn(2048, 1, 16, 16)
train = DataLoader(TensorDataset(images[:1536], labels[:1536]), batch_size=args.batch, shuffle=True)
test = DataLoader(TensorDataset(images[1536:], labels[1536:]), batch_size=256)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
for epoch in range(args.epochs):
    start, seen = time.time(), 0
    model.train()
    for x, y in train:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        seen += len(x)
    sched.step()
    model.eval()
    with torch.no_grad():
        correct = sum((model(x).argmax(1) == y).sum().item() for x, y in test)
    print("epoch %d  loss %.4f  test accuracy %.3f  %d samples in %.2f s"
          % (epoch, loss.item(), correct / 512, seen, time.time() - start))
torch.save(model.state_dict(), args.checkpoint)
print("saved", args.checkpoint)
