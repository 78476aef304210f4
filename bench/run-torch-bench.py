"""hvdshim vs hand-written DDP (gloo) and vs the plain script, same run.

    python3 bench/run-torch-bench.py [--repeats 5] [--steps 60] [--accumulate K]
    (make bench-torch)

For each model (cnn, mlp), alternating runs of:
  shim2  LD_PRELOAD=libhvdshim.so mpirun -np 2 python bench/torch_train.py
  ddp2   mpirun -np 2 python bench/torch_train.py --ddp STORE
  hvd2   the model converted to Horovod by hand, on real Horovod
         (--horovod DIR, by default ../shared/reference/horovod-0.28.1 beside
         the checkout: PYTHONPATH=DIR mpirun -np 2 ... --horovod, no preload)
  floor2 the floor of any data-parallel job here: the model distributed by
         hand with nothing per gradient (its gradients views of one flat
         buffer), reduced with the loss in one hvdshim engine call a step
         (its served horovod: torch_train.py --flat engine)
  mpi2   the same floor through one raw MPI_Allreduce a step (--flat mpi)
  shim1  LD_PRELOAD=libhvdshim.so mpirun -np 1 python bench/torch_train.py
  plain  python bench/torch_train.py
  shim2every  shim2 with HVDSHIM_ACCUMULATE=off (with --accumulate K: the
              reduction at every backward, against shim2's once per step)
  before2     shim2 on another build (--lib-before): a change's before and after
  limit2 the physical limit: 2 independent plain processes started together,
              one pinned to each core (taskset), their samples/s summed
              (limit3, limit4: more processes, round robin over the cores).
              Also printed: the lockstep bound, what the same processes
              would reach had each step waited for the slowest (their
              steps' durations paired by index, each pair at its longer):
              a synchronous job pays every core's slow step, whatever its
              communication costs, and a virtual machine's cores differ in
              speed and stall at random
  KIND@NAME=VALUE  KIND with HVDSHIM_NAME=VALUE (several joined by +), e.g.
              shim2@BUCKET=0: two settings compared in the same run
Throughput is global samples/s (ranks x per-rank samples/s, same per-rank
batch); medians over the repeats; ratios shim2/ddp2 (target >= 1.05) and
shim1/plain (target >= 0.99).  OMP_NUM_THREADS=1 on every side."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
top = os.path.dirname(here)
ap = argparse.ArgumentParser()
ap.add_argument("--repeats", type=int, default=5)
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--python", default=os.environ.get("PYTHON", "/usr/bin/python3"))
ap.add_argument("--lib", default=os.path.join(os.environ.get("top_builddir", top), ".libs", "libhvdshim.so"))
ap.add_argument("--lib-before", metavar="LIB", help="another build's libhvdshim.so for the kinds beforeN (shimN on it): "
                "a change's before and after in the same run")
ap.add_argument("--models", default="cnn,mlp,small")
ap.add_argument("--batch", type=int, default=64, help="batch per rank (the small CNN is usually run with 32)")
ap.add_argument("--kinds", default="shim2,ddp2,shim1,plain",
                help="which of shim2,ddp2,hvd2,floor2,mpi2,shim1,plain,shim2every,limit2 (shimN, ddpN, hvdN, floorN, mpiN, "
                "limitN for other N) to run")
ap.add_argument("--horovod", metavar="DIR", default=os.path.join(top, "..", "shared", "reference", "horovod-0.28.1"),
                help="a directory holding a real Horovod package, for the kinds hvdN")
ap.add_argument("--accumulate", type=int, default=1, metavar="K", help="K backward passes per optimizer step")
ap.add_argument("--script", choices=["bench", "ordinary"], default="bench",
                help="bench: bench/torch_train.py's models; ordinary: bench/ordinary_train.py, an ordinary short-step "
                "training script (its loader, clipping, scheduler and evaluations; --steps are each rank's steps a "
                "run, --models is ignored)")
args = ap.parse_args()
if args.script == "ordinary":
    args.models = "ordinary"
    if args.accumulate != 1:
        sys.exit("--script ordinary: --accumulate is not supported")

env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
mpirun = ["mpirun", "--oversubscribe", "-x", "OMP_NUM_THREADS"]
for var in sorted(v for v in env if v.startswith("HVDSHIM_")):  # settings being compared
    mpirun += ["-x", var]
script = os.path.join(here, "torch_train.py")


def limit(n, cmd, e):
    """n copies of the plain script at once, one per core: what n ranks could
    at best do with no communication at all (samples/s summed)."""
    cores = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        files = [os.path.join(tmp, "steps%d" % i) for i in range(n)]
        procs = [subprocess.Popen(["taskset", "-c", str(cores[i % len(cores)])] + cmd + ["--step-times", files[i]],
                                  env=e, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for i in range(n)]
        rates = []
        for p in procs:
            out, err = p.communicate(timeout=600)
            m = re.search(r"samples/s ([\d.]+)", out)
            if p.returncode or not m:
                sys.exit("limit%d failed (exit %d):\n%s%s" % (n, p.returncode, out, err))
            rates.append(float(m.group(1)))
        lockstep[n].append(sum(rates) * stepped_together(files))
    return sum(rates)


def stepped_together(files):
    """The share of their own pace that processes keep when each step waits
    for the slowest: their steps' durations (from --step-times) paired by
    index, the mean of a pair's against its longest, summed over the steps."""
    durations = []
    for name in files:
        with open(name) as f:
            ends = [float(line) for line in f]
        durations.append([b - a for a, b in zip(ends, ends[1:])])
    pairs = list(zip(*durations))
    return sum(sum(d) / len(d) for d in pairs) / sum(max(d) for d in pairs)


def command(model, ranks):
    """The script's command line for a job of `ranks` ranks (an ordinary
    script's dataset holds each rank's steps, so every kind runs as many
    steps a rank)."""
    if model == "ordinary":
        return [args.python, os.path.join(here, "ordinary_train.py"), "--batch", str(args.batch),
                "--samples", str(args.steps * args.batch * ranks // 3), "--epochs", "3"]
    return [args.python, script, "--model", model, "--steps", str(args.steps), "--accumulate", str(args.accumulate),
            "--batch", str(args.batch)]


def run(kind, model):
    e = dict(env)
    kind, _, extra = kind.partition("@")
    digits = re.search(r"\d+$", kind)
    common = command(model, int(digits.group()) if digits and not kind.startswith("limit") else 1)
    extra_x = []
    for pair in filter(None, extra.split("+")):
        name, value = pair.split("=", 1)
        e["HVDSHIM_" + name] = value
        extra_x += ["-x", "HVDSHIM_" + name]
    if kind.endswith("every"):
        kind, e["HVDSHIM_ACCUMULATE"] = kind[:-len("every")], "off"
    if kind.startswith("limit"):
        return limit(int(kind[5:]), common, e)
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "plain":
            cmd, ranks = common, 1
        elif kind.startswith("shim") or kind.startswith("before"):
            ranks = int(kind[4:] if kind.startswith("shim") else kind[6:])
            e["LD_PRELOAD"] = args.lib if kind.startswith("shim") else args.lib_before
            cmd = mpirun + ["-np", str(ranks), "-x", "LD_PRELOAD", "-x", "HVDSHIM_ACCUMULATE"] + extra_x + common
            e.setdefault("HVDSHIM_ACCUMULATE", "auto")
        elif kind.startswith("floor"):
            ranks = int(kind[5:])
            e["LD_PRELOAD"], e["HVDSHIM_HOROVOD"] = args.lib, "on"
            cmd = mpirun + ["-np", str(ranks), "-x", "LD_PRELOAD", "-x", "HVDSHIM_HOROVOD"] + common + ["--flat", "engine"]
        elif kind.startswith("mpi"):
            ranks = int(kind[3:])
            cmd = mpirun + ["-np", str(ranks)] + common + ["--flat", "mpi"]
        elif kind.startswith("hvd"):
            ranks = int(kind[3:])
            if not os.path.isdir(os.path.join(args.horovod, "horovod", "torch")):
                sys.exit("%s: no Horovod package under %s (--horovod DIR names one)" % (kind, args.horovod))
            e["PYTHONPATH"] = os.path.abspath(args.horovod)
            cmd = mpirun + ["-np", str(ranks), "-x", "PYTHONPATH"] + common + ["--horovod"]
        else:
            ranks = int(kind[3:])
            cmd = mpirun + ["-np", str(ranks)] + common + ["--ddp", os.path.join(tmp, "store")]
        out = subprocess.run(cmd, env=e, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    m = re.search(r"samples/s ([\d.]+)", out.stdout)
    if out.returncode or not m:
        sys.exit("%s %s failed (exit %d):\n%s%s" % (kind, model, out.returncode, out.stdout, out.stderr))
    return float(m.group(1)) * ranks


print("hvdshim PyTorch benchmark: %d repeats x %d timed steps, batch %d per rank, %d backward pass(es) per "
      "optimizer step, OMP_NUM_THREADS=1" % (args.repeats, args.steps, args.batch, args.accumulate))
for model in args.models.split(","):
    results = {k: [] for k in args.kinds.split(",")}
    lockstep = {n: [] for n in range(1, 65)}  # limitN's lockstep bounds
    for i in range(args.repeats):
        order = list(results) if i % 2 == 0 else list(reversed(results))
        for kind in order:
            results[kind].append(run(kind, model))
        print("  %s repeat %d: %s" % (model, i + 1, "  ".join("%s %.0f" % (k, v[-1]) for k, v in results.items())),
              flush=True)
    med = {k: statistics.median(v) for k, v in results.items()}

    def paired(a, b):
        """The median of a's and b's ratios within each repeat (run next to
        each other): steadier than the ratio of medians where the VM's speed
        drifts over the run."""
        return statistics.median(x / y for x, y in zip(results[a], results[b]))
    spread = {k: (min(v), max(v)) for k, v in results.items()}
    print("%s medians (samples/s): %s" % (model, "  ".join("%s %.0f [%.0f-%.0f]" % (k, med[k], *spread[k])
                                                           for k in results)))
    if "shim2" in med and "ddp2" in med:
        print("%s ratio shim np=2 / DDP np=2: %.3f (target >= 1.05)" % (model, med["shim2"] / med["ddp2"]))
    for k in (k for k in med if "@" in k and k.partition("@")[0] in med):
        print("%s ratio %s / %s: %.3f" % (model, k.partition("@")[0], k, med[k.partition("@")[0]] / med[k]))
    if "shim2" in med and "shim2every" in med:
        print("%s ratio shim np=2 / shim np=2 reducing every backward: %.3f" % (model, med["shim2"] / med["shim2every"]))
    for n in (2, 3, 4):
        if "shim%d" % n in med and "before%d" % n in med:
            print("%s ratio shim np=%d / before np=%d: %.3f (repeat by repeat: median %.3f)"
                  % (model, n, n, med["shim%d" % n] / med["before%d" % n], paired("shim%d" % n, "before%d" % n)))
        lim = med.get("limit%d" % n)
        bound = statistics.median(lockstep[n]) if lockstep[n] else None
        if lim:
            print("%s lockstep bound at np=%d (the plain processes, each step at the slowest's duration; median): "
                  "%.0f = %.3f of the limit" % (model, n, bound, bound / lim))
        if "shim%d" % n in med and "floor%d" % n in med:
            print("%s ratio shim np=%d / the floor (one engine call a step, nothing per gradient): %.3f"
                  % (model, n, med["shim%d" % n] / med["floor%d" % n]))
        for k in ("shim%d" % n, "floor%d" % n, "mpi%d" % n):  # (what a job with nothing per gradient reaches)
            if k in med and "ddp%d" % n in med and k != "shim2":
                print("%s ratio %s / DDP np=%d: %.3f" % (model, k, n, med[k] / med["ddp%d" % n]))
            if k in med and "hvd%d" % n in med:
                print("%s ratio %s / Horovod np=%d: %.3f" % (model, k, n, med[k] / med["hvd%d" % n]))
        for k in ("shim%d" % n, "before%d" % n, "ddp%d" % n, "hvd%d" % n, "floor%d" % n, "mpi%d" % n):
            if lim and k in med:
                print("%s ratio %s / the limit (%d plain processes, one per core): %.3f%s; / the lockstep bound: %.3f; "
                      "repeat by repeat: median %.3f of the limit"
                      % (model, k, n, med[k] / lim, " (target >= 0.85)" if k == "shim%d" % n else "",
                         med[k] / bound, paired(k, "limit%d" % n)))
    if "shim1" in med and "plain" in med:
        print("%s ratio shim np=1 / plain:    %.3f (target >= 0.99)" % (model, med["shim1"] / med["plain"]))
