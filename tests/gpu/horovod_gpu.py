"""hvdshim's horovod package on CUDA tensors (tests/gpu/horovod.sh).

Every check compares with a value computed in the same process: the
collectives against a formula of every rank's input, and a training loop
(model on the GPU, hvd.DistributedOptimizer, broadcast_parameters) against
the same model trained in this process on every rank's batches at once
with plain SGD (the split-equivalent run).  Ranks may share one GPU
(HVDSHIM_GPU_OPERATIONS=MPI).  Prints "ok <what>" per check; exits 1 on the
first failure."""
import sys

import torch
import horovod.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
dev = torch.device("cuda")


def check(cond, what):
    if not cond:
        print("FAIL rank %d: %s" % (rank, what), flush=True)
        sys.exit(1)
    if rank == 0:
        print("ok " + what, flush=True)


# allreduce: every dtype the GPU path moves, sum, average, min, max
for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64):
    x = (torch.arange(1000, device=dev) % 7 + rank + 1).to(dt)
    want = sum((torch.arange(1000) % 7 + r + 1).to(torch.float64) for r in range(size))
    got = hvd.allreduce(x, op=hvd.Sum, name="sum.%s" % dt)
    check(got.is_cuda and got.dtype == dt, "allreduce keeps device and dtype (%s)" % dt)
    check(torch.equal(got.cpu().to(torch.float64), want), "allreduce Sum %s" % dt)
    if dt.is_floating_point:
        got = hvd.allreduce(x, op=hvd.Average, name="avg.%s" % dt)
        tol = 1e-2 if dt in (torch.float16, torch.bfloat16) else 1e-6
        check(torch.allclose(got.cpu().to(torch.float64), want / size, rtol=tol), "allreduce Average %s" % dt)
    got = hvd.allreduce(x, op=hvd.Max, name="max.%s" % dt)
    check(torch.equal(got.cpu().to(torch.float64), (torch.arange(1000) % 7 + size).to(torch.float64)),
          "allreduce Max %s" % dt)
# in place, grouped, async
y = torch.full((513,), float(rank + 1), device=dev)
hvd.allreduce_(y, op=hvd.Sum, name="inplace")
check(torch.all(y == size * (size + 1) / 2).item(), "allreduce_ in place")
ts = [torch.full((n,), float(rank), device=dev) for n in (3, 1000, 70000)]
outs = hvd.grouped_allreduce(ts, op=hvd.Average, name="grouped")
check(all(torch.allclose(o, torch.full_like(o, (size - 1) / 2)) for o in outs), "grouped_allreduce Average")
h = hvd.allreduce_async(torch.ones(4096, device=dev) * rank, op=hvd.Sum, name="async")
check(torch.all(hvd.synchronize(h) == size * (size - 1) / 2).item(), "allreduce_async + synchronize")
# broadcast from the last rank, allgather of uneven rows
b = torch.full((1000,), float(rank), device=dev)
hvd.broadcast_(b, root_rank=size - 1, name="bcast")
check(torch.all(b == size - 1).item(), "broadcast_ from rank %d" % (size - 1))
g = hvd.allgather(torch.full((rank + 1, 3), float(rank), device=dev), name="gather")
want = torch.cat([torch.full((r + 1, 3), float(r)) for r in range(size)])
check(g.is_cuda and torch.equal(g.cpu(), want), "allgather of uneven rows comes back on the GPU")

# training: the Horovod recipe against every rank's batches in one process
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4)).to(dev)
ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4)).to(dev)
if rank != 0:  # different starting weights: broadcast_parameters must fix them
    for p in model.parameters():
        p.data.add_(1.0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
ref.load_state_dict(model.state_dict())
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
gen = torch.Generator().manual_seed(1)
for step in range(20):
    xs = [torch.randn(8, 32, generator=gen) for _ in range(size)]
    ys = [torch.randn(8, 4, generator=gen) for _ in range(size)]
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(xs[rank].to(dev)), ys[rank].to(dev)).backward()
    opt.step()
    ref_opt.zero_grad()
    torch.nn.functional.mse_loss(ref(torch.cat(xs).to(dev)), torch.cat(ys).to(dev)).backward()
    ref_opt.step()
diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
check(diff < 1e-5, "DistributedOptimizer on the GPU, 20 steps: largest weight difference from the "
      "whole-batch run %.2g (tolerance 1e-5)" % diff)
same = hvd.allreduce(torch.cat([p.detach().flatten() for p in model.parameters()]), op=hvd.Max, name="same")
mine = torch.cat([p.detach().flatten() for p in model.parameters()])
check(torch.equal(same, mine), "every rank holds the same weights")
