"""A synthetic ResNet-style benchmark written the Horovod way (after Horovod's
pytorch_synthetic_benchmark.py): residual blocks with hvd.SyncBatchNorm,
DistributedOptimizer, mixed precision with a GradScaler and gradient
clipping the Horovod way (optimizer.synchronize(), unscale, clip, then
step() under optimizer.skip_synchronize()), images/sec per rank.
Unmodified under hvdrun; --save writes rank 0's weights."""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--num-iters", type=int, default=6)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--amp", action="store_true")
parser.add_argument("--clip", type=float, default=1.0)
parser.add_argument("--bn", choices=["sync", "plain"], default="sync",
                    help="plain: nn.BatchNorm2d on each rank's batch (real Horovod's SyncBatchNorm runs on GPUs only)")
parser.add_argument("--save", default=None)
args = parser.parse_args()

hvd.init()
torch.manual_seed(7)
cuda = torch.cuda.is_available()
device = torch.device("cuda", hvd.local_rank()) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(hvd.local_rank())
torch.set_num_threads(1)


BN = hvd.SyncBatchNorm if args.bn == "sync" else nn.BatchNorm2d


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = BN(c)
        self.c2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = BN(c)

    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x))))))


model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), Block(16), nn.MaxPool2d(2), Block(16),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

# the whole job's batches, the same on every rank; each rank takes its slice
g = torch.Generator().manual_seed(3)
total = args.batch_size * hvd.size()
images = torch.randn(args.num_iters, total, 3, 16, 16, generator=g)
labels = torch.randint(0, 10, (args.num_iters, total), generator=g)
mine = slice(hvd.rank() * args.batch_size, (hvd.rank() + 1) * args.batch_size)

amp_dtype = torch.float16 if cuda else torch.bfloat16
if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
    try:
        scaler = torch.amp.GradScaler(device.type, enabled=args.amp, init_scale=1024.0)
    except (TypeError, RuntimeError):
        scaler = torch.cuda.amp.GradScaler(enabled=args.amp and cuda, init_scale=1024.0)
else:
    scaler = torch.cuda.amp.GradScaler(enabled=args.amp and cuda, init_scale=1024.0)

start = time.time()
for it in range(args.num_iters):
    data, target = images[it, mine].to(device), labels[it, mine].to(device)
    optimizer.zero_grad()
    with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=args.amp):
        loss = F.cross_entropy(model(data), target)
    scaler.scale(loss).backward()
    optimizer.synchronize()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
    with optimizer.skip_synchronize():
        scaler.step(optimizer)
    scaler.update()
    if hvd.rank() == 0:
        print("iter %d loss %.6f" % (it, loss.item()), flush=True)
rate = args.batch_size * args.num_iters / (time.time() - start)
rates = hvd.allgather(torch.tensor([rate]))
if hvd.rank() == 0:
    print("Img/sec per rank: %.1f; total on %d rank(s): %.1f" % (rate, hvd.size(), float(rates.sum())), flush=True)
    if args.save:
        torch.save({k: v.detach().float().cpu() for k, v in model.state_dict().items()}, args.save)
