"""A script that distributes itself with DistributedDataParallel (gloo),
reading its rank from Open MPI's environment.  hvdshim must leave it alone.

    mpirun -np 2 python ddp_train.py STORE_FILE"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=rank, world_size=size)
torch.manual_seed(0)
X = torch.randn(128, 10)
Y = (X[:, :3].sum(1, keepdim=True) > 0).float()
data = TensorDataset(X, Y)
loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data))
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.binary_cross_entropy_with_logits(model(x), y).backward()
        opt.step()
sys.stdout.write("rank %d of %d batches %d\n" % (rank, size, len(loader)))  # one write
sys.stdout.flush()
dist.barrier()
os._exit(0)  # torch 1.13 + gloo can deadlock at interpreter exit
