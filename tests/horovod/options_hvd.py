"""Small scripts written the Horovod way, one per DistributedOptimizer option
(--case): each trains a few steps and saves every rank's weights (--save
PREFIX: PREFIX.<rank>.pt), so that a run on the served package can be
compared with the same run on real Horovod, bit for bit.

  wd       SGD with momentum, Nesterov and weight decay; broadcast_parameters
           and broadcast_optimizer_state (Horovod's zero-gradient step that
           creates the momentum buffers); synchronize(), clip_grad_norm_,
           step() under skip_synchronize()
  bpps     Adam with backward_passes_per_step=2: two backward passes
           accumulate locally, one reduction per step
  fp16     Compression.fp16 with gradient_predivide_factor=2
  sparse   an nn.Embedding(sparse=True) beside a dense layer, SGD: the
           sparse gradient is allgathered (indices and values) and averaged
  dense    the same with sparse_as_dense=True: reduced dense, sparse again
           for the optimizer
  pset     two process sets (even and odd ranks), each with its own
           DistributedOptimizer; a metric averaged over the set"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument("--case", required=True, choices=["wd", "bpps", "fp16", "sparse", "dense", "pset"])
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--save", default=None)
args = parser.parse_args()

os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"  # real Horovod adds sets after init only with it
hvd.init()
torch.set_num_threads(1)
torch.manual_seed(11)
R, N = hvd.rank(), hvd.size()


class Dense(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 6, sparse=True)
        self.fc = nn.Linear(6, 4)

    def forward(self, idx):
        return self.fc(self.emb(idx).mean(1))


# every rank draws the whole job's batches from one generator and takes its own
g = torch.Generator().manual_seed(5)
steps = args.steps * (2 if args.case == "bpps" else 1)
if args.case in ("sparse", "dense"):
    data = torch.randint(0, 20, (steps, N, 4, 5), generator=g)
else:
    data = torch.randn(steps, N, 4, 12, generator=g)
target = torch.randint(0, 4, (steps, N, 4), generator=g)

process_set = hvd.global_process_set
if args.case == "pset":
    even = hvd.add_process_set([r for r in range(N) if r % 2 == 0])
    odd = hvd.add_process_set([r for r in range(N) if r % 2 == 1])
    process_set = even if R % 2 == 0 else odd
    torch.manual_seed(100 + R % 2)  # each set its own initial weights

model = Embed() if args.case in ("sparse", "dense") else Dense()
if args.case == "wd":
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)
elif args.case == "bpps":
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
else:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
if args.case != "pset":  # a set's ranks start alike (its seed); Horovod broadcasts parameters on every rank
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
if args.case not in ("sparse", "dense", "pset"):  # Horovod cannot broadcast sparse state (momentum of a sparse grad)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                               compression=hvd.Compression.fp16 if args.case == "fp16" else hvd.Compression.none,
                               gradient_predivide_factor=2.0 if args.case == "fp16" else 1.0,
                               backward_passes_per_step=2 if args.case == "bpps" else 1,
                               sparse_as_dense=args.case == "dense", process_set=process_set)

for step in range(args.steps):
    opt.zero_grad()
    passes = 2 if args.case == "bpps" else 1
    for k in range(passes):
        i = step * passes + k
        loss = F.cross_entropy(model(data[i, R]), target[i, R])
        loss.backward()
    if args.case == "wd":
        opt.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        with opt.skip_synchronize():
            opt.step()
    else:
        opt.step()
    avg = hvd.allreduce(loss.detach(), name="loss", process_set=process_set)
    if R == 0:
        print("step %d loss %.6f" % (step, avg.item()), flush=True)
hvd.barrier()  # real Horovod shuts down once a rank has finished: none ends while another set still works
if args.save:
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, "%s.%d.pt" % (args.save, R))
