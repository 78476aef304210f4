"""Horovod's PyTorch API served by hvdshim, call by call, at any np.

Every rank computes what each call must return from the formula (values
are small integers, exact in every dtype) and compares; a difference raises
naming the case.  Rank 0 prints "ok CASE" per case, "api done N" at the end.
Errors are checked to raise on every rank.  Usage: api.py [--case NAME]."""
import sys

import torch
import horovod
import horovod.torch as hvd

hvd.init()
hvd.init()  # again: a no-op
R, N = hvd.rank(), hvd.size()
DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
ONLY = sys.argv[sys.argv.index("--case") + 1] if "--case" in sys.argv else None
done = []


def case(fn):
    if ONLY is None or ONLY == fn.__name__:
        fn()
        done.append(fn.__name__)
        if R == 0:
            print("ok", fn.__name__, flush=True)
    return fn


def check(cond, what):
    if not cond:
        raise AssertionError("rank %d: %s" % (R, what))


def same(got, want, what):
    check(got.dtype == want.dtype, "%s: dtype %s, expected %s" % (what, got.dtype, want.dtype))
    check(tuple(got.shape) == tuple(want.shape), "%s: shape %s, expected %s" % (what, tuple(got.shape),
                                                                               tuple(want.shape)))
    if got.dtype.is_floating_point:  # an average multiplies by 1/N: within an ulp or two of the exact quotient
        tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(got.dtype, 1e-6)
        ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=0)
    else:
        ok = torch.equal(got, want)
    check(ok, "%s:\n got  %s\n want %s" % (what, got, want))


def raises(exc, fn, what, words=()):
    try:
        fn()
    except exc as e:
        for w in words:
            check(w in str(e), "%s: message %r lacks %r" % (what, str(e), w))
        return str(e)
    raise AssertionError("rank %d: %s did not raise %s" % (R, what, exc.__name__))


def vals(r, dtype, n=6):
    """Rank r's tensor: small values (-1..4 at np 3, 0..5 unsigned), so that
    sums and products stay exact and in range in every dtype."""
    base = torch.arange(n, dtype=torch.float64) % 4 + r + (0 if dtype == torch.uint8 else -1)
    return base.to(dtype)


def expect(dtype, n, op):
    s = torch.stack([vals(r, dtype, n).double() for r in range(N)])
    if op == hvd.Sum:
        out = s.sum(0)
    elif op == hvd.Average:
        out = s.sum(0)
        out = out / N if dtype.is_floating_point else torch.trunc(out / N)
    elif op == hvd.Min:
        out = s.min(0).values
    elif op == hvd.Max:
        out = s.max(0).values
    else:
        out = s.prod(0)
    return out.to(dtype)


@case
def basics():
    check(getattr(horovod, "__hvdshim__", False), "the served package is hvdshim's")
    check(hvd.is_initialized(), "is_initialized")
    check(0 <= R < N and 0 <= hvd.local_rank() < hvd.local_size() <= N, "ranks")
    check(hvd.cross_size() * hvd.local_size() == N and hvd.cross_rank() == R // hvd.local_size(), "cross ranks")
    check(hvd.is_homogeneous(), "one host: homogeneous")
    check(hvd.mpi_built() and hvd.mpi_enabled() and hvd.mpi_threads_supported(), "MPI queries")
    check(not hvd.gloo_built() and not hvd.gloo_enabled() and not hvd.ddl_built() and not hvd.ccl_built()
          and not hvd.rocm_built(), "absent backends")
    check(bool(hvd.nccl_built()) == bool(hvd.cuda_built()), "nccl_built and cuda_built agree")
    check(hvd.global_process_set.size() == N and hvd.global_process_set.included(), "global process set")


@case
def allreduce_every_dtype_and_op():
    for dt in DTYPES:
        for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
            t = vals(R, dt)
            got = hvd.allreduce(t, op=op, name="ar.%s.%d" % (dt, op))
            want = expect(dt, 6, op)
            same(got, want, "allreduce %s %s" % (dt, op))
            same(t, vals(R, dt), "allreduce leaves its input (%s)" % dt)
            t2 = vals(R, dt)
            out = hvd.allreduce_(t2, op=op, name="ar_.%s.%d" % (dt, op))
            check(out is t2, "allreduce_ returns its tensor")
            same(t2, want, "allreduce_ %s %s" % (dt, op))


@case
def float16_sums():
    t = torch.full((1000,), 0.5 + R, dtype=torch.float16)
    same(hvd.allreduce(t, op=hvd.Sum), torch.full((1000,), sum(0.5 + r for r in range(N)), dtype=torch.float16),
         "float16 sum")


@case
def scale_factors():
    t = torch.full((5,), float(R + 1))
    got = hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    same(got, torch.full((5,), float(sum(range(1, N + 1)))), "prescale 2, postscale 0.5")
    got = hvd.allreduce(t, op=hvd.Average, prescale_factor=3.0)
    same(got, torch.full((5,), 3.0 * sum(range(1, N + 1)) / N), "average with prescale 3")


@case
def average_argument():
    import warnings
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = hvd.allreduce(torch.ones(3) * R, average=False)
    same(got, torch.ones(3) * sum(range(N)), "average=False sums")


@case
def strided_and_async():
    base = torch.arange(12, dtype=torch.float32).view(3, 4) + R
    t = base.t()  # not contiguous
    h = hvd.allreduce_async_(t, op=hvd.Sum, name="strided")
    out = hvd.synchronize(h)
    want = (torch.arange(12, dtype=torch.float32).view(3, 4) * N + sum(range(N))).t()
    same(out, want, "in-place allreduce of a transposed tensor")
    check(out is t, "allreduce_async_ returns its tensor")
    hs = [hvd.allreduce_async(torch.full((100,), float(R)), op=hvd.Sum, name="async.%d" % i) for i in range(5)]
    while not all(hvd.poll(h) for h in hs):
        pass
    for h in hs:
        same(hvd.synchronize(h), torch.full((100,), float(sum(range(N)))), "async allreduce")
    try:
        hvd.synchronize(hs[0])
        check(False, "synchronize of a finished handle raises")
    except ValueError:
        pass


@case
def unnamed_in_order():
    outs = [hvd.allreduce(torch.full((3,), float(i + R)), op=hvd.Sum) for i in range(4)]
    for i, o in enumerate(outs):
        same(o, torch.full((3,), float(N * i + sum(range(N)))), "unnamed allreduce %d" % i)


@case
def grouped():
    ts = [torch.full((k + 1,), float(R + k)) for k in range(4)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum, name="grp")
    for k, o in enumerate(outs):
        same(o, torch.full((k + 1,), float(sum(range(N)) + N * k)), "grouped_allreduce %d" % k)
    hvd.grouped_allreduce_(ts, op=hvd.Average)
    for k, t in enumerate(ts):
        same(t, torch.full((k + 1,), float(sum(range(N))) / N + k), "grouped_allreduce_ %d" % k)
    g = hvd.grouped_allgather([torch.full((R + 1, 2), R), torch.tensor([R])])
    same(g[1], torch.arange(N), "grouped_allgather")
    check(g[0].shape == (sum(range(1, N + 1)), 2), "grouped_allgather rows")


@case
def allgather_every_dtype():
    for dt in DTYPES + [torch.bool]:
        t = (torch.arange((R + 1) * 3).view(R + 1, 3) % 2).to(dt) if dt == torch.bool else \
            torch.full((R + 1, 3), R, dtype=torch.float64).to(dt)
        got = hvd.allgather(t, name="ag.%s" % dt)
        want = torch.cat([(torch.arange((r + 1) * 3).view(r + 1, 3) % 2).to(dt) if dt == torch.bool else
                          torch.full((r + 1, 3), r, dtype=torch.float64).to(dt) for r in range(N)])
        same(got, want, "allgather %s" % dt)
    same(hvd.allgather(torch.tensor(float(R))), torch.arange(N, dtype=torch.float32), "allgather of scalars")
    h = hvd.allgather_async(torch.full((2,), R), name="ag.async")
    same(hvd.synchronize(h), torch.arange(N).repeat_interleave(2), "allgather_async")


@case
def broadcast_every_dtype():
    for root in range(N):
        for dt in DTYPES + [torch.bool]:
            t = (torch.ones(4) * (R % 2)).to(dt) if dt == torch.bool else torch.full((4,), R + 1, dtype=dt)
            want = (torch.ones(4) * (root % 2)).to(dt) if dt == torch.bool else torch.full((4,), root + 1, dtype=dt)
            same(hvd.broadcast(t, root, name="bc.%d.%s" % (root, dt)), want, "broadcast from %d %s" % (root, dt))
            hvd.broadcast_(t, root)
            same(t, want, "broadcast_ from %d %s" % (root, dt))
    h = hvd.broadcast_async(torch.full((3,), float(R)), N - 1)
    same(hvd.synchronize(h), torch.full((3,), float(N - 1)), "broadcast_async")


@case
def autograd():
    x = torch.full((3,), float(R + 1), requires_grad=True)
    y = hvd.allreduce(x, op=hvd.Sum)
    y.sum().backward()
    same(x.grad, torch.full((3,), float(N)), "gradient of allreduce(Sum)")
    # Horovod 0.28.1 averages the gradients of allgather and broadcast over the ranks
    x = torch.full((R + 1, 2), 1.0, requires_grad=True)
    (hvd.allgather(x) * 2).sum().backward()
    same(x.grad, torch.full((R + 1, 2), 2.0), "gradient of allgather")
    x = torch.full((2,), float(R), requires_grad=True)
    hvd.broadcast(x, 0).sum().backward()
    same(x.grad, torch.full((2,), 1.0 if R == 0 else 0.0), "gradient of broadcast")


@case
def alltoall():
    t = torch.arange(N * 2) + 100 * R  # two rows to each rank
    got = hvd.alltoall(t)
    same(got, torch.cat([torch.arange(2 * R, 2 * R + 2) + 100 * r for r in range(N)]), "alltoall even")
    splits = torch.tensor([j + 1 for j in range(N)], dtype=torch.int32)  # j+1 rows to rank j
    t = torch.full((int(splits.sum()), 2), float(R))
    out, rsplits = hvd.alltoall(t, splits=splits)
    same(out, torch.cat([torch.full((R + 1, 2), float(r)) for r in range(N)]), "alltoall with splits")
    same(rsplits, torch.full((N,), R + 1, dtype=torch.int32), "received splits")
    # rows of two dimensions, nothing to some ranks (rank j gets j rows from every rank), bool moved as bytes
    sp = [j for j in range(N)]
    t = torch.full((sum(sp), 2, 3), float(R)) + torch.arange(sum(sp)).view(-1, 1, 1)
    out, rsplits = hvd.alltoall(t, splits=sp, name="a2a.2d")
    start = sum(sp[:R])
    same(out, torch.cat([torch.full((R, 2, 3), float(r)) + torch.arange(start, start + R).view(-1, 1, 1).float()
                         for r in range(N)]), "alltoall of 2-D rows with empty splits")
    same(rsplits, torch.full((N,), R, dtype=torch.int32), "received splits (empty ones)")
    b = (torch.arange(N * 3) % 2 == R % 2).view(N, 3)
    same(hvd.alltoall(b), torch.cat([(torch.arange(N * 3) % 2 == r % 2).view(N, 3)[R:R + 1] for r in range(N)]),
         "alltoall of bool")


@case
def reducescatter():
    rows = 2 * N + 1
    t = torch.arange(rows * 2, dtype=torch.float32).view(rows, 2) + R
    got = hvd.reducescatter(t, op=hvd.Sum)
    full = torch.arange(rows * 2, dtype=torch.float32).view(rows, 2) * N + sum(range(N))
    sp = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
    same(got, full[sum(sp[:R]):sum(sp[:R + 1])], "reducescatter sum")
    got = hvd.reducescatter(t)
    same(got, (full / N)[sum(sp[:R]):sum(sp[:R + 1])], "reducescatter average")
    g = hvd.grouped_reducescatter([t, t * 2], op=hvd.Sum)
    same(g[1], 2 * full[sum(sp[:R]):sum(sp[:R + 1])], "grouped_reducescatter")
    for dt in (torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8):
        got = hvd.reducescatter(t.to(dt), op=hvd.Sum, name="rs.%s" % dt)
        same(got, full[sum(sp[:R]):sum(sp[:R + 1])].to(dt), "reducescatter sum %s" % dt)
    got = hvd.reducescatter(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
    same(got, full[sum(sp[:R]):sum(sp[:R + 1])] / 2, "reducescatter with scale factors")
    same(t, torch.arange(rows * 2, dtype=torch.float32).view(rows, 2) + R, "reducescatter leaves its input")
    few = torch.ones(N - 1 if N > 1 else 1, 2) * (R + 1)  # fewer rows than ranks: the last rank gets none
    got = hvd.reducescatter(few, op=hvd.Sum)
    check(got.shape == ((1 if R < few.shape[0] else 0), 2), "reducescatter of fewer rows than ranks: %s" % (got.shape,))


@case
def objects():
    obj = hvd.broadcast_object({"rank": R, "list": list(range(R + 3))}, root_rank=N - 1)
    check(obj == {"rank": N - 1, "list": list(range(N + 2))}, "broadcast_object: %r" % (obj,))
    got = hvd.allgather_object(("r", R, "x" * R))
    check(got == [("r", r, "x" * r) for r in range(N)], "allgather_object: %r" % (got,))


@case
def parameters_and_optimizer_state():
    torch.manual_seed(R)  # every rank starts different
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    opt = torch.optim.Adam(m.parameters(), lr=0.01 * (R + 1))
    m(torch.randn(5, 4)).sum().backward()
    opt.step()
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    sd = [t.clone() for t in m.state_dict().values()]
    st = opt.state_dict()
    for i, t in enumerate(sd):
        same(hvd.broadcast(t, 0, name="psd.%d" % i), t, "state_dict entry %d equals rank 0's" % i)
    check(st["param_groups"][0]["lr"] == 0.01, "optimizer lr is rank 0's")
    for k, s in st["state"].items():
        for key, v in s.items():
            if isinstance(v, torch.Tensor):
                same(hvd.broadcast(v, 0, name="ost.%s.%s" % (k, key)), v, "optimizer state %s %s" % (k, key))
    hvd.broadcast_parameters(list(m.named_parameters()), root_rank=0)


@case
def elastic_state_and_objects():
    """Horovod's pytorch_cifar10_elastic.py: a TorchState holding the
    DistributedOptimizer's learning-rate scheduler, synced at the decorated
    function's call; and objects that hold the optimizer, broadcast whole
    (its class is made at run time, so cloudpickle copies it by value, the
    step hvdshim wraps in it too)."""
    m = torch.nn.Linear(2, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1 * (R + 1), momentum=0.5),
                                   named_parameters=m.named_parameters())  # (momentum: a state to sync on torch 2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    state = hvd.elastic.TorchState(model=m, optimizer=opt, scheduler=sched, epoch=R)

    @hvd.elastic.run
    def train(st):
        return st.epoch, st.scheduler.base_lrs[0], st.optimizer.param_groups[0]["lr"]
    epoch, base, lr = train(state)
    check((epoch, round(base, 6), round(lr, 6)) == (0, 0.1, 0.1), "the state after its sync: rank 0's (%r)"
          % ((epoch, base, lr),))
    check(state.scheduler is sched and sched.optimizer is opt, "the scheduler stays the script's, on its optimizer")
    m(torch.ones(1, 2)).sum().backward()
    opt.step()
    sched.step()
    check(round(opt.param_groups[0]["lr"], 6) == 0.05, "the scheduler steps the script's optimizer")
    got = hvd.broadcast_object(sched, root_rank=0, name="sched")
    check(type(got).__name__ == "StepLR" and round(got.optimizer.param_groups[0]["lr"], 6) == 0.05
          and type(got.optimizer).__name__ == type(opt).__name__, "a scheduler broadcast whole")
    if R > 0:  # the copy's class is a copy of the DistributedOptimizer's; its step works
        check(got.optimizer is not opt and getattr(type(got.optimizer).step, "hvdshim_step", False),
              "the copy's step is hvdshim's wrapper, made again")


@case
def join():
    for rnd in range(2):  # rank r has r+1 batches; join is reusable
        for s in range(R + 1):
            got = hvd.allreduce(torch.full((2,), float(R + 1)), op=hvd.Sum, name="join.%d.%d" % (rnd, s))
            same(got, torch.full((2,), float(sum(r + 1 for r in range(s, N)))), "sum over the ranks still stepping")
            avg = hvd.allreduce(torch.full((2,), float(R + 1)), name="join.avg.%d.%d" % (rnd, s))
            # Horovod's Average divides by the whole size: joined ranks add zeros
            same(avg, torch.full((2,), sum(r + 1 for r in range(s, N)) / N), "average counting joined ranks")
            if s == 1:  # Horovod refuses allgather and broadcast while a rank has joined (rank 0 joins)
                raises(RuntimeError, lambda: hvd.allgather(torch.ones(1), name="join.ag.%d" % rnd),
                       "allgather with a joined rank", ("joined",))
                raises(RuntimeError, lambda: hvd.broadcast(torch.ones(1), 1, name="join.bc.%d" % rnd),
                       "broadcast with a joined rank", ("joined",))
        check(hvd.join() == N - 1, "join returns the last rank to join")
    same(hvd.allreduce(torch.ones(1), op=hvd.Sum, name="join.after"), torch.full((1,), float(N)), "after join")


@case
def timeline():
    import json
    import os
    import tempfile
    d = hvd.broadcast_object(tempfile.mkdtemp(prefix="hvd-tl-") if R == 0 else None, 0)
    path = os.path.join(d, "tl.json")
    hvd.start_timeline(path, mark_cycles=True)
    for i in range(3):
        hvd.allreduce(torch.ones(8), name="traced.%d" % i)
    hvd.stop_timeline()
    if R == 0:
        events = json.load(open(path))
        names = {e.get("args", {}).get("name") for e in events if e.get("ph") == "M"}
        check("allreduce.traced.2" in names, "the timeline names the traced tensors: %r" % sorted(n for n in names if n))
        check(any(e.get("name") == "CYCLE_START" for e in events), "mark_cycles adds cycle markers")
        n = len(events)
    hvd.allreduce(torch.ones(8), name="untraced")
    hvd.barrier()
    if R == 0:
        check(len(json.load(open(path))) == n, "nothing is written after stop_timeline")
        raises(ValueError, lambda: hvd.start_timeline(os.path.join(d, "missing", "tl.json")), "a timeline in a "
               "missing folder", ("missing",))
        import shutil
        shutil.rmtree(d)
    else:
        hvd.start_timeline("/nonexistent/other-ranks-do-not-open-it.json")  # only rank 0 writes
        hvd.stop_timeline()


@case
def distributed_optimizer():
    """DistributedOptimizer's options against a reference that computes every
    rank's gradients in this process (each rank's data is known to all)."""
    def data(r, k):
        g = torch.Generator().manual_seed(100 * r + k)
        return torch.randn(3, 4, generator=g), torch.randint(0, 6, (3,), generator=g)

    def make():
        torch.manual_seed(5)
        return torch.nn.ModuleDict({"emb": torch.nn.Embedding(6, 4, sparse=True), "lin": torch.nn.Linear(4, 2)})

    def loss(m, x, idx):
        return (m["lin"](x + m["emb"](idx)) ** 2).mean()

    for opts in ({}, {"backward_passes_per_step": 2}, {"op": hvd.Sum}, {"sparse_as_dense": True},
                 {"groups": 2}, {"compression": hvd.Compression.fp16}):
        m, ref = make(), make()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
                                       **opts)
        ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
        passes = opts.get("backward_passes_per_step", 1)
        scale = 1.0 if opts.get("op") == hvd.Sum else 1.0 / N
        for step in range(3):
            opt.zero_grad()
            ropt.zero_grad()
            for k in range(passes):
                loss(m, *data(R, 10 * step + k)).backward()
                for r in range(N):
                    (loss(ref, *data(r, 10 * step + k)) * scale).backward()
            opt.step()
            ropt.step()
        tol = 1e-3 if opts.get("compression") is hvd.Compression.fp16 else 1e-6
        for (n, p), q in zip(m.named_parameters(), ref.parameters()):
            check(torch.allclose(p, q, atol=tol), "DistributedOptimizer(%s): %s differs by %g"
                  % (opts, n, (p - q).abs().max()))
    # the Horovod guards
    m = make()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters())
    loss(m, *data(R, 0)).backward()
    raises(AssertionError, opt.zero_grad, "zero_grad between backward and step", ("zero_grad",))
    opt.step()
    raises(ValueError, lambda: hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                                        named_parameters=[("a", m["lin"].weight)]),
           "named_parameters that miss parameters", ("not named",))
    raises(ValueError, lambda: hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                                        named_parameters=[("a", p) for p in m.parameters()]),
           "duplicate names", ("unique",))
    # a parameter unused on one rank still gets the others' gradient
    lin = torch.nn.ModuleList([torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)])
    opt = hvd.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=1.0), named_parameters=lin.named_parameters())
    before = lin[1].weight.detach().clone()
    (lin[0](torch.ones(1, 2)).sum() + (lin[1](torch.ones(1, 2)).sum() if R == 0 else 0)).backward()
    opt.step()
    same(lin[1].weight.detach(), before - 1.0 / N, "a parameter used on rank 0 only: its gradient averaged over all")


@case
def barrier():
    for _ in range(3):
        hvd.barrier()


@case
def sync_batch_norm():
    torch.manual_seed(7)
    whole = torch.randn(4 * N, 3, 5)
    bn = hvd.SyncBatchNorm(3)
    ref = torch.nn.BatchNorm1d(3)
    mine = whole[4 * R:4 * R + 4].clone().requires_grad_()
    out = bn(mine)
    (out * torch.arange(5.0)).sum().backward()
    ref_in = whole.clone().requires_grad_()
    ref_out = ref(ref_in)
    (ref_out * torch.arange(5.0)).sum().backward()
    check(torch.allclose(out, ref_out[4 * R:4 * R + 4], atol=1e-5), "SyncBatchNorm output")
    check(torch.allclose(mine.grad, ref_in.grad[4 * R:4 * R + 4], atol=1e-5), "SyncBatchNorm input gradient")
    check(torch.allclose(bn.running_var, ref.running_var, atol=1e-5), "SyncBatchNorm running variance")
    wg = hvd.allreduce(bn.weight.grad, op=hvd.Sum)
    check(torch.allclose(wg, ref.weight.grad, atol=1e-4), "SyncBatchNorm weight gradient (summed)")


@case
def compression_fp16():
    t = torch.full((10,), 0.25 * (R + 1), dtype=torch.float32)
    got = hvd.allreduce(t, op=hvd.Sum, compression=hvd.Compression.fp16)
    same(got, torch.full((10,), 0.25 * sum(range(1, N + 1))), "fp16 compression sum, back in float32")


@case
def errors():
    # a count that differs across ranks: every rank raises
    msg = raises(hvd.HorovodInternalError, lambda: hvd.allreduce(torch.ones(3 + R), name="bad.count"),
                 "allreduce with different counts", ("bad.count",))
    if N > 1:
        check("count" in msg, "the message names the count: %r" % msg)
        raises(hvd.HorovodInternalError,
               lambda: hvd.allreduce(torch.ones(3, dtype=torch.float32 if R == 0 else torch.float64),
                                     name="bad.dtype"), "allreduce with different dtypes", ("dtype",))
        raises(hvd.HorovodInternalError,
               lambda: hvd.allgather(torch.ones(2, 2 + R), name="bad.rows"), "allgather with different rows")
        raises(hvd.HorovodInternalError, lambda: hvd.allreduce(torch.ones(2, 3) if R == 0 else torch.ones(3, 2),
                                                               name="bad.shape"),
               "allreduce with the same count in another shape",
               ("disagree on the shape (the same element count): shape [2, 3] on rank 0; shape [3, 2] on rank",))
        raises(hvd.HorovodInternalError, lambda: hvd.broadcast(torch.ones(6) if R == 0 else torch.ones(2, 3), 0,
                                                               name="bad.bshape"), "broadcast in another shape",
               ("shape",))
        raises(hvd.HorovodInternalError, lambda: hvd.allgather(torch.ones(1, 2, 3) if R == 0 else
                                                               torch.ones(1, 3, 2), name="bad.gshape"),
               "allgather rows of another shape", ("shape",))
    # the same name twice in flight (rank 0's first one waits for the others,
    # who submit it after the barrier): the second is refused at the call
    # (ValueError, as in Horovod), the first completes
    t = torch.ones(4)
    if R == 0:
        h = hvd.allreduce_async(t, name="dup", op=hvd.Sum)
        raises(ValueError, lambda: hvd.allreduce_async(torch.ones(4), name="dup", op=hvd.Sum),
               "a duplicate name in flight", ("dup", "already in flight"))
    hvd.barrier()
    if R != 0:
        h = hvd.allreduce_async(t, name="dup", op=hvd.Sum)
    same(hvd.synchronize(h), torch.full((4,), float(N)), "the first of two same-named submissions")
    raises(NotImplementedError, lambda: hvd.allreduce(t, op=hvd.Adasum), "Adasum", ("Adasum",))
    import horovod
    def train():
        pass
    raises(NotImplementedError, lambda: horovod.run(train, num_proc=2), "horovod.run",
           ("horovod.run", "train", "hvdrun -np N"))
    raises(ValueError, lambda: hvd.broadcast(t, N), "a root that is not a rank", ("root",))
    raises(ValueError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64)), "complex allreduce",
           ("complex64",))
    raises(ValueError, lambda: hvd.alltoall(torch.ones(N + 1, 2) if N > 1 else torch.ones(1, 2), splits=[1] * 7),
           "alltoall splits of the wrong length", ("splits",))
    # the job goes on after every error above
    same(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.errors"), torch.full((2,), float(N)), "after errors")


def set_expect(members, dtype, n, op):
    s = torch.stack([vals(r, dtype, n).double() for r in members])
    out = {hvd.Sum: lambda: s.sum(0), hvd.Min: lambda: s.min(0).values, hvd.Max: lambda: s.max(0).values,
           hvd.Product: lambda: s.prod(0)}.get(op, lambda: s.sum(0) / len(members))()
    if op == hvd.Average and not dtype.is_floating_point:
        out = torch.trunc(out)
    return out.to(dtype)


@case
def process_sets():
    """Horovod's process sets: even and odd ranks (Horovod's own test), and
    at np >= 3 two overlapping sets; each collective checked over its
    members, with global operations in between; errors; removal."""
    even = hvd.add_process_set([r for r in range(N) if r % 2 == 0])
    odd = hvd.add_process_set(hvd.ProcessSet([r for r in range(N) if r % 2 == 1]))
    mine, other = (even, odd) if R % 2 == 0 else (odd, even)
    m = mine.ranks
    check(mine.included() and not other.included() and mine.size() == len(m) and mine.rank() == m.index(R)
          and other.rank() == -1, "set queries")
    for dt in DTYPES:
        for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
            same(hvd.allreduce(vals(R, dt), op=op, process_set=mine), set_expect(m, dt, 6, op),
                 "allreduce %s %s on %r" % (dt, op, mine))
    for root in m:  # a broadcast's root is a rank of the job in the set
        same(hvd.broadcast(torch.full((3,), R + 1), root, process_set=mine), torch.full((3,), root + 1),
             "broadcast from %d on %r" % (root, mine))
    got = hvd.allgather(torch.full((R + 1, 2), R), process_set=mine)
    same(got, torch.cat([torch.full((r + 1, 2), r) for r in m]), "allgather on %r" % (mine,))
    g = hvd.grouped_allreduce([torch.ones(2) * R, torch.ones(3)], op=hvd.Sum, process_set=mine)
    same(g[0], torch.ones(2) * sum(m), "grouped_allreduce on a set")
    t = torch.arange(len(m) * 2) + 100 * R
    same(hvd.alltoall(t, process_set=mine), torch.cat([torch.arange(2 * mine.rank(), 2 * mine.rank() + 2) + 100 * r
                                                        for r in m]), "alltoall on a set")
    rows = 2 * len(m) + 1
    full = torch.arange(rows, dtype=torch.float32) * len(m) + sum(m)
    sp = [rows // len(m) + (1 if i < rows % len(m) else 0) for i in range(len(m))]
    k = mine.rank()
    same(hvd.reducescatter(torch.arange(rows, dtype=torch.float32) + R, op=hvd.Sum, process_set=mine),
         full[sum(sp[:k]):sum(sp[:k + 1])], "reducescatter on a set")
    check(hvd.allgather_object(R, process_set=mine) == m, "allgather_object on a set")
    hvd.barrier(process_set=mine)
    # interleaved with global operations, unnamed (numbered per set), async, many times (cached)
    for i in range(10):
        ha = hvd.allreduce_async(torch.full((4,), float(R)), op=hvd.Sum, process_set=mine)
        hg = hvd.allreduce_async(torch.full((4,), float(R)), op=hvd.Sum)
        same(hvd.synchronize(hg), torch.full((4,), float(sum(range(N)))), "global among set operations")
        same(hvd.synchronize(ha), torch.full((4,), float(sum(m))), "set among global operations")
    if N >= 3:  # overlapping sets: {0, 1} and {1, 2}, rank 1 in both, submitting in either order
        lo, hi = hvd.add_process_set([0, 1]), hvd.add_process_set([2, 1])
        for i in range(10):
            hs = []
            for ps in ((lo, hi) if (i + R) % 2 else (hi, lo)):
                if ps.included():
                    hs.append((ps, hvd.allreduce_async(torch.full((5,), float(R + 1)), op=hvd.Average,
                                                       name="ov.%d" % i, process_set=ps)))
            for ps, h in hs:
                same(hvd.synchronize(h), torch.full((5,), sum(r + 1 for r in ps.ranks) / 2.0), "overlapping sets")
        opt_model = torch.nn.Linear(3, 1)
        torch.manual_seed(0)
        torch.nn.init.constant_(opt_model.weight, 1.0)
        if hi.included():  # DistributedOptimizer averages over the set only
            opt = hvd.DistributedOptimizer(torch.optim.SGD(opt_model.parameters(), lr=1.0),
                                           named_parameters=opt_model.named_parameters(), process_set=hi)
            (opt_model(torch.ones(1, 3)) * (R + 1)).sum().backward()
            opt.step()
            same(opt_model.weight.detach(), torch.full((1, 3), 1.0 - 2.5), "DistributedOptimizer on a set")
        check(hvd.remove_process_set(lo) and hvd.remove_process_set(hi), "remove_process_set")
    # errors, on the ranks that make them; then removal
    raises(ValueError, lambda: hvd.allreduce(torch.ones(1), process_set=other), "a non-member's allreduce",
           ("not in",))
    raises(ValueError, lambda: hvd.broadcast(torch.ones(1), other.ranks[0], process_set=mine),
           "a root outside the set", ("root_rank",))
    raises(ValueError, lambda: hvd.add_process_set(list(m)), "a set that exists", ("exists already",))
    raises(ValueError, lambda: hvd.allreduce(torch.ones(1), process_set=hvd.ProcessSet([0])), "a set never added",
           ("has not been added",))
    check(hvd.remove_process_set(hvd.global_process_set) is False, "removing the global set returns False (Horovod)")
    raises(ValueError, lambda: hvd.add_process_set([0, 0]), "a rank listed twice", ("twice",))
    if N >= 3:  # (sets that do not exist: [0, 1] and [1, 2] were removed)
        raises(ValueError, lambda: hvd.add_process_set([1, 2] if R == 0 else [0, 1]),
               "ranks that disagree on the members", ("ranks disagree on the member list",))
    check(hvd.remove_process_set(odd) and hvd.remove_process_set(even), "remove_process_set")
    check(not hvd.remove_process_set(even), "removing twice returns False")
    raises(ValueError, lambda: hvd.allreduce(torch.ones(1), process_set=mine), "a removed set",
           ("has not been added",))


if R == 0:
    print("api done %d" % len(done), flush=True)
