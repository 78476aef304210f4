"""Benchmark workload: an ordinary single-process training loop (a small CNN,
an MLP, a tiny MLP or a small transformer encoder on synthetic data) that reports its own throughput.  With --ddp it
is the same model converted to DistributedDataParallel (gloo) by hand, as a
user would without hvdshim; with --horovod, converted to Horovod by hand
(hvd.init, a DistributedSampler, DistributedOptimizer, rank 0's weights
broadcast), run on real Horovod or on hvdshim's served package.

    python3 bench/torch_train.py --model cnn            # plain / under hvdshim
    mpirun -np 2 python3 bench/torch_train.py --model cnn --ddp STORE
    PYTHONPATH=HOROVOD mpirun -np 2 -x PYTHONPATH python3 bench/torch_train.py --model cnn --horovod

Prints "samples/s <local>": samples this process trained per second over the
timed steps (after --warmup steps).  --accumulate K: K backward passes (a
batch each, loss / K) per optimizer step, as gradient accumulation scripts
do; DDP skips its reduction in the first K-1 (model.no_sync(), as a DDP
user writes it).  A step counts one batch either way.  --switches: each
thread's voluntary and involuntary context switches per timed step, and
the process's CPU time per step.  --flat engine|mpi: the floor of any
data-parallel job on this machine: the model distributed by hand with
nothing per gradient, its gradients kept in one flat buffer and reduced
with the loss in one call a step after backward (engine: hvdshim's engine
through its served horovod package, under LD_PRELOAD with
HVDSHIM_HOROVOD=on; mpi: a raw MPI_Allreduce through ctypes)."""
import contextlib
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from flat_floor import MpiAllreduce, flat_gradients, reduce_flat


ap = argparse.ArgumentParser()
ap.add_argument("--model", choices=["cnn", "mlp", "small", "bn", "tiny", "transformer"], default="cnn")
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--warmup", type=int, default=10)
ap.add_argument("--accumulate", type=int, default=1, metavar="K")
ap.add_argument("--ddp", metavar="STORE_FILE", help="distribute with DDP (gloo), rendezvous through this file")
ap.add_argument("--switches", action="store_true",
                help="also print each thread's context switches per timed step (rank 0): counts are stable where "
                     "timings on a shared machine are not")
ap.add_argument("--horovod", action="store_true", help="distribute with Horovod (horovod.torch), converted by hand")
ap.add_argument("--flat", choices=["engine", "mpi"],
                help="distribute by hand: one allreduce a step of every gradient and the loss in one flat buffer")
ap.add_argument("--step-times", metavar="FILE", help="write the time (s) each timed step ended, one a line")
args = ap.parse_args()

rank, size = 0, 1
if args.flat == "mpi":
    flat_mpi = MpiAllreduce()
    rank, size = flat_mpi.rank, flat_mpi.size
elif args.flat == "engine":
    args.horovod = True
if args.horovod:
    import horovod.torch as hvd
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
elif args.ddp:
    import torch.distributed as dist
    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="file://" + args.ddp, rank=rank, world_size=size)

torch.manual_seed(0)
n = 4096
if args.model == "cnn":
    X, Y = torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,))
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 10))
elif args.model == "small":  # an ordinary small CNN (MNIST-sized, ~70 k parameters): steps of a few ms
    X, Y = torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 7 * 7, 40), nn.ReLU(), nn.Linear(40, 10))
elif args.model == "bn":  # the small CNN with BatchNorm after each hidden layer (3), as ResNets have it
    X, Y = torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 7 * 7, 40), nn.BatchNorm1d(40), nn.ReLU(), nn.Linear(40, 10))
elif args.model == "tiny":  # the small CNN's 70 k parameters in a 2-layer MLP: steps of about a millisecond,
    # where the reduction, not the compute, sets the pace (a fast CPU's small CNN)
    X, Y = torch.randn(n, 784), torch.randint(0, 10, (n,))
    model = nn.Sequential(nn.Linear(784, 88), nn.ReLU(), nn.Linear(88, 10))
elif args.model == "transformer":  # many small parameter tensors (75), as language models have
    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(1000, 128)
            layer = nn.TransformerEncoderLayer(128, 4, dim_feedforward=256, dropout=0.0, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 6)
            self.head = nn.Linear(128, 10)

        def forward(self, x):
            return self.head(self.enc(self.emb(x)).mean(1))
    X, Y = torch.randint(0, 1000, (n, 32)), torch.randint(0, 10, (n,))
    model = Encoder()
else:
    X, Y = torch.randn(n, 784), torch.randint(0, 10, (n,))
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
data = TensorDataset(X, Y)
if args.ddp or args.horovod or args.flat:
    loader = DataLoader(data, batch_size=args.batch, sampler=DistributedSampler(data, size, rank), drop_last=True)
else:
    loader = DataLoader(data, batch_size=args.batch, shuffle=True, drop_last=True)
if args.ddp:
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if args.horovod:  # (--flat engine too)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
if args.flat:  # every gradient a view of one buffer, with one more float for the loss
    flat, nflat = flat_gradients([p for p in model.parameters() if p.requires_grad])
elif args.horovod:
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   backward_passes_per_step=args.accumulate)



def thread_switches():
    """{thread name and id: [voluntary, involuntary]} from /proc (Linux)."""
    out = {}
    if not args.switches:
        return out
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/status" % tid) as f:
                st = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
            out["%s/%s" % (st["Name"].strip(), tid)] = [int(st["voluntary_ctxt_switches"]),
                                                      int(st["nonvoluntary_ctxt_switches"])]
        except (OSError, KeyError, ValueError):
            pass
    return out


step, epoch, start = 0, 0, None
ends = []  # (--step-times)
while step < args.warmup + args.steps:
    if args.ddp or args.horovod or args.flat:
        loader.sampler.set_epoch(epoch)
    for x, y in loader:
        if step == args.warmup:
            start = time.perf_counter()
            switches0, cpu0 = thread_switches(), time.process_time()
        last = (step + 1) % args.accumulate == 0
        sync = model.no_sync() if args.ddp and not last else contextlib.nullcontext()
        with sync:
            loss = F.cross_entropy(model(x), y) / args.accumulate
            loss.backward()
        if last and args.flat:
            reduce_flat(flat, nflat, loss, **({"hvd": hvd} if args.flat == "engine" else {"mpi": flat_mpi}))
        if last:
            opt.step()
            opt.zero_grad(set_to_none=False) if args.flat else opt.zero_grad()
        step += 1
        if args.step_times and step > args.warmup:
            ends.append(time.perf_counter())
        if step == args.warmup + args.steps:
            break
    epoch += 1
elapsed = time.perf_counter() - start
if args.step_times:
    with open(args.step_times, "w") as f:
        f.write("".join("%.6f\n" % t for t in [start] + ends))
if rank == 0:
    print("samples/s %.1f" % (args.batch * args.steps / elapsed), flush=True)
    if args.switches:
        print("cpu ms/step %.3f (every thread of this process)" % ((time.process_time() - cpu0) * 1e3 / args.steps))
    for name, (vol, invol) in sorted(thread_switches().items()):
        v0, i0 = switches0.get(name, (0, 0))
        print("switches/step %-24s voluntary %7.2f  involuntary %7.2f" % (name, (vol - v0) / args.steps,
                                                                          (invol - i0) / args.steps), flush=True)
if args.flat == "mpi":
    flat_mpi.lib.MPI_Finalize()
if args.horovod:
    hvd.allreduce(torch.zeros(1), name="bench.end")  # every rank finished before any leaves
if args.ddp:
    dist.barrier()
    os._exit(0)  # torch 1.13 + gloo can deadlock at interpreter exit
