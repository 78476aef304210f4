"""Workload of bench/run-elastic-bench.py: an ordinary training loop (the
bench's MLP, 784-1024-1024-10, batch 64, synthetic data) that prints when
each optimizer step ended ("step I T", wall clock) and, given RANK:STEP,
has that rank (OMPI_COMM_WORLD_RANK) print the time to stderr and SIGKILL
itself when it has its batch of STEP."""
import os
import signal
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

steps = int(sys.argv[1])
die = [int(v) for v in sys.argv[2].split(":")] if len(sys.argv) > 2 else None
me = int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1"))
torch.manual_seed(0)
X, Y = torch.randn(4096, 784), torch.randint(0, 10, (4096,))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=64, shuffle=True)
model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
step = 0
while step < steps:
    for x, y in loader:
        if die and me == die[0] and step == die[1]:
            sys.stderr.write("killed %.6f\n" % time.time())
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        print("step %d %.6f" % (step, time.time()), flush=True)
        step += 1
        if step == steps:
            break
