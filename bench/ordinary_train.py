"""An ordinary short-step PyTorch training script, for the speed benchmarks
(issue 56): what a user's small CNN trainer looks like, not a bench loop.

A 70 k-parameter CNN in 10 tensors (two 3x3 convolutions, GroupNorm, two
linear layers) on 3x16x16 inputs, batch 32 from a shuffled TensorDataset,
SGD with momentum and weight decay, clip_grad_norm_ every step, a StepLR
stepped per epoch, an evaluation of 256 samples under no_grad after each
epoch (sums read with .item()) and a print per epoch.  The script measures
its own throughput over the whole loop (evaluations included):

    python3 bench/ordinary_train.py [--samples N] [--epochs E] [--batch B]
    prints "samples/s X": samples this process trained per second

Run unmodified under the shim (hvdrun -np 2 python3 bench/ordinary_train.py
--samples 2N: each rank trains N a epoch, its shard).  --ddp STORE and
--horovod are the same script distributed by hand, as a user would, with
DistributedDataParallel (gloo) or Horovod: DistributedSampler, weights
from rank 0, the optimizer wrapped (bench/run-torch-bench.py --script
ordinary runs them side by side).  --flat engine|mpi: the floor of any
data-parallel job of this script: distributed by hand with nothing per
gradient, every gradient a view of one flat buffer, reduced with the loss
in one call a step after backward (engine: hvdshim's engine through its
served horovod package, under LD_PRELOAD with HVDSHIM_HOROVOD=on; mpi: a
raw MPI_Allreduce; bench/flat_floor.py)."""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--samples", type=int, default=8192, help="training samples an epoch (the whole dataset)")
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--ddp", metavar="STORE_FILE", help="distributed by hand with DDP (gloo), rendezvous through this file")
ap.add_argument("--horovod", action="store_true", help="distributed by hand with Horovod (horovod.torch)")
ap.add_argument("--flat", choices=["engine", "mpi"],
                help="distributed by hand: one allreduce a step of every gradient and the loss in one flat buffer")
ap.add_argument("--threads", action="store_true",
                help="also print each thread's CPU time and context switches per step (from /proc/self/task)")
ap.add_argument("--step-times", metavar="FILE", help="write the time (s) each training step ended, one a line")
args = ap.parse_args()

rank, size = 0, 1
if args.flat:
    from flat_floor import MpiAllreduce, flat_gradients, reduce_flat
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
    import os
    import torch.distributed as dist
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
    dist.init_process_group("gloo", init_method="file://" + args.ddp, rank=rank, world_size=size)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.norm = nn.GroupNorm(4, 16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.norm(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


torch.manual_seed(0)
g = torch.Generator().manual_seed(1)
teacher = torch.randn(3 * 4 * 4, 10, generator=g)
x_all = torch.randn(args.samples + 256, 3, 16, 16, generator=g)
y_all = (F.avg_pool2d(x_all, 4).flatten(1) @ teacher).argmax(1)  # a label the model can learn
train = torch.utils.data.TensorDataset(x_all[:args.samples], y_all[:args.samples])
test_x, test_y = x_all[args.samples:], y_all[args.samples:]

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
sampler = None
if args.flat:  # (the same seed: every rank starts from the same weights)
    sampler = torch.utils.data.distributed.DistributedSampler(train, num_replicas=size, rank=rank)
    flat, nflat = flat_gradients(list(model.parameters()))
elif args.horovod:
    sampler = torch.utils.data.distributed.DistributedSampler(train, num_replicas=size, rank=rank)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
elif args.ddp:
    sampler = torch.utils.data.distributed.DistributedSampler(train, num_replicas=size, rank=rank)
    model = nn.parallel.DistributedDataParallel(model)
loader = torch.utils.data.DataLoader(train, batch_size=args.batch, shuffle=sampler is None, sampler=sampler)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)



def thread_stats():
    """{tid: (name, cpu seconds, voluntary, involuntary switches)} of this process."""
    import os
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                st = f.read()
            with open("/proc/self/task/%s/status" % tid) as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        out[tid] = (st[st.index("(") + 1:st.rindex(")")], (int(fields[11]) + int(fields[12])) / tick,
                    int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"]))
    return out


trained = steps = 0
ends = []  # (--step-times)
before = thread_stats() if args.threads else None
start = time.perf_counter()
for epoch in range(args.epochs):
    if sampler is not None:
        sampler.set_epoch(epoch)
    model.train()
    for x, y in loader:
        opt.zero_grad(set_to_none=False) if args.flat else opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if args.flat:
            reduce_flat(flat, nflat, loss, **({"hvd": hvd} if args.flat == "engine" else {"mpi": flat_mpi}))
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        elif args.horovod:
            opt.synchronize()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with opt.skip_synchronize():
                opt.step()
        else:
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        trained += len(x)
        steps += 1
        if args.step_times:
            ends.append(time.perf_counter())
    sched.step()
    model.eval()
    correct = total_loss = 0.0
    with torch.no_grad():
        for i in range(0, len(test_x), 64):
            out = model(test_x[i:i + 64])
            total_loss += F.cross_entropy(out, test_y[i:i + 64], reduction="sum").item()
            correct += (out.argmax(1) == test_y[i:i + 64]).sum().item()
    if rank == 0:
        print("epoch %d  loss %.4f  test loss %.4f  test accuracy %.3f"
              % (epoch, loss.item(), total_loss / len(test_x), correct / len(test_x)), flush=True)
elapsed = time.perf_counter() - start
print("samples/s %.1f" % (trained / elapsed), flush=True)
if args.step_times:
    with open(args.step_times, "w") as f:
        f.write("".join("%.6f\n" % t for t in [start] + ends))
if args.threads:
    for tid, (name, cpu, vol, invol) in sorted(thread_stats().items()):
        b = before.get(tid, (name, 0.0, 0, 0))
        print("rank %d thread %-16s cpu ms/step %6.3f  switches/step voluntary %6.2f involuntary %6.2f  (wall ms/step %.3f)"
              % (rank, name, (cpu - b[1]) * 1e3 / steps, (vol - b[2]) / steps, (invol - b[3]) / steps,
                 elapsed * 1e3 / steps), flush=True)
if args.ddp:
    dist.destroy_process_group()
if args.flat == "mpi":
    flat_mpi.lib.MPI_Finalize()
