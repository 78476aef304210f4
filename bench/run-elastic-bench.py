"""Elastic (HVDSHIM_ELASTIC=1) in figures, on an MPI with ULFM (Open MPI 5+:
run it in the trixie or sid stack).

1. Steady state: bench/torch_train.py (--model, np=2) under the shim as it
   runs by default, and under --with-ft ulfm with HVDSHIM_ELASTIC=1, runs
   alternated; the median samples/s of each and their ratio (elastic mode
   has no shared-memory transport, holds each completion one round, and
   copies the gradients once per step).  HVDSHIM_SHM=off is printed beside
   them: the share of the cost that is the transport.
2. Recovery: bench/elastic_steps.py at np=3, rank 1 SIGKILLed at step K;
   the time from its kill to the survivors' next completed step, median and
   max over --kills runs, beside the median step time before the kill.

    top_builddir=. python3 bench/run-elastic-bench.py [--repeats 5] [--kills 10]"""
import argparse
import os
import re
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
top = os.path.dirname(here)
ap = argparse.ArgumentParser()
ap.add_argument("--repeats", type=int, default=5)
ap.add_argument("--kills", type=int, default=10)
ap.add_argument("--model", default="mlp")
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--python", default=os.environ.get("PYTHON", "/usr/bin/python3"))
ap.add_argument("--lib", default=os.path.join(os.environ.get("top_builddir", top), ".libs", "libhvdshim.so"))
args = ap.parse_args()

env = dict(os.environ, LD_PRELOAD=args.lib, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
base = ["mpirun", "--oversubscribe", "-x", "LD_PRELOAD", "-x", "OMP_NUM_THREADS"]


def run(cmd, extra_env=None, timeout=600):
    e = dict(env, **(extra_env or {}))
    for k in (extra_env or {}):
        cmd = cmd[:1] + ["-x", k] + cmd[1:]
    p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


kinds = {
    "default": ([], {}),
    "shm off": ([], {"HVDSHIM_SHM": "off"}),
    "elastic": (["--with-ft", "ulfm"], {"HVDSHIM_ELASTIC": "1"}),
}
train = [args.python, os.path.join(here, "torch_train.py"), "--model", args.model, "--steps", str(args.steps)]
got = {k: [] for k in kinds}
for r in range(args.repeats):
    for k, (flags, extra) in kinds.items():
        rc, out, err = run(base + flags + ["-np", "2"] + train, extra)
        m = re.search(r"samples/s ([0-9.]+)", out)
        if rc or not m:
            sys.exit("%s failed (status %d):\n%s%s" % (k, rc, out, err))
        got[k].append(2 * float(m.group(1)))  # rank 0's rate, both ranks train alike
print("steady state, %s, np=2, %d steps, medians of %d (samples/s of both ranks):" % (args.model, args.steps,
                                                                                       args.repeats))
ref = statistics.median(got["default"])
for k, v in got.items():
    print("  %-8s %9.1f  %.3f of default   (runs: %s)" % (k, statistics.median(v), statistics.median(v) / ref,
                                                       " ".join("%.0f" % x for x in v)))

gaps, steps_ms = [], []
for i in range(args.kills):
    k = 20 + 7 * i % 30
    rc, out, err = run(base + ["--with-ft", "ulfm", "-np", "3", args.python, os.path.join(here, "elastic_steps.py"),
                               str(k + 20), "1:%d" % k], {"HVDSHIM_ELASTIC": "1"})
    ends = [(int(a), float(b)) for a, b in re.findall(r"^step (\d+) ([0-9.]+)$", out, re.M)]
    killed = re.search(r"killed ([0-9.]+)", err)
    if rc or not killed or len(ends) < k + 20:
        sys.exit("kill run %d failed (status %d):\n%s%s" % (i, rc, out[-2000:], err[-3000:]))
    t = float(killed.group(1))
    after = [e for _s, e in ends if e > t]
    gaps.append(after[0] - t)
    before = [b - a for (_s, a), (_s2, b) in zip(ends, ends[1:]) if b < t][5:]
    steps_ms.append(statistics.median(before) * 1e3)
print("recovery, np=3 -> 2, rank 1 SIGKILLed (%d runs): kill to the survivors' next completed step: median %.0f ms, "
      "max %.0f ms (a step before the kill: median %.1f ms)" % (args.kills, statistics.median(gaps) * 1e3,
                                                                max(gaps) * 1e3, statistics.median(steps_ms)))
