"""What a per-step barrier costs two plain processes (no hvdshim), by how
they wait: the floor under any synchronous data-parallel step on this
machine, and why hvdshim's waits spin while the training thread waits.

    python3 bench/barrier_cost.py [--repeats 4] [--steps 3000] [--model tiny|mlp] [--python /usr/bin/python3]

Runs, alternately, `mpirun -np 2` of this script as a worker in three
modes: none (no barrier: the anchor), spin (each step, both ranks meet at a
flag in shared memory, polling it) and nap (the same, sleeping 20 us
between polls).  Each worker trains the tiny model (784-88-10, batch 32;
--model mlp: the torch bench's 784-1024-1024-10, batch 64; OMP_NUM_THREADS=1) and rank 0 reports its mean step; the driver prints the
medians and each mode's cost per step against none in the same run."""
import argparse
import mmap
import os
import statistics
import struct
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--repeats", type=int, default=4)
ap.add_argument("--steps", type=int, default=3000)
ap.add_argument("--python", default=os.environ.get("PYTHON", "/usr/bin/python3"), help="the workers' interpreter (torch)")
ap.add_argument("--model", choices=["tiny", "mlp"], default="tiny")
ap.add_argument("--worker", choices=["none", "spin", "nap"], help=argparse.SUPPRESS)
ap.add_argument("--flag-file", help=argparse.SUPPRESS)
args = ap.parse_args()

if args.worker is None:  # the driver
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("LD_PRELOAD", None)
    flag = "/dev/shm/hvdshim-barrier-bench-%d" % os.getpid()
    steps = {m: [] for m in ("none", "spin", "nap")}
    try:
        for i in range(args.repeats):
            for mode in (list(steps) if i % 2 == 0 else list(reversed(list(steps)))):
                with open(flag, "wb") as f:
                    f.write(b"\0" * 4096)
                out = subprocess.run(["mpirun", "-np", "2", "-x", "OMP_NUM_THREADS", args.python, __file__,
                                      "--worker", mode, "--flag-file", flag, "--steps", str(args.steps),
                                      "--model", args.model],
                                     env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
                line = [l for l in out.stdout.splitlines() if l.startswith("us/step ")]
                if out.returncode or not line:
                    sys.exit("%s failed (exit %d):\n%s%s" % (mode, out.returncode, out.stdout, out.stderr))
                steps[mode].append(float(line[0].split()[1]))
            print("  repeat %d: %s" % (i + 1, "  ".join("%s %.1f us/step" % (m, v[-1]) for m, v in steps.items())),
                  flush=True)
    finally:
        if os.path.exists(flag):
            os.unlink(flag)
    med = {m: statistics.median(v) for m, v in steps.items()}
    print("medians (us/step): %s" % "  ".join("%s %.1f" % kv for kv in med.items()))
    for m in ("spin", "nap"):
        print("barrier by %s: +%.1f us/step, %.3f x the step without a barrier" % (m, med[m] - med["none"],
                                                                                     med[m] / med["none"]))
    sys.exit(0)

import torch  # noqa: E402  (the workers only)
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
fd = os.open(args.flag_file, os.O_RDWR)
mm = mmap.mmap(fd, 4096)


def barrier(k):
    mm[rank * 64:rank * 64 + 8] = struct.pack("q", k)
    while struct.unpack("q", mm[(1 - rank) * 64:(1 - rank) * 64 + 8])[0] < k:
        if args.worker == "nap":
            time.sleep(20e-6)


torch.manual_seed(0)
X, Y = torch.randn(4096, 784), torch.randint(0, 10, (4096,))
if args.model == "mlp":
    model = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 10))
else:
    model = torch.nn.Sequential(torch.nn.Linear(784, 88), torch.nn.ReLU(), torch.nn.Linear(88, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loader = DataLoader(TensorDataset(X, Y), batch_size=64 if args.model == "mlp" else 32, shuffle=True, drop_last=True)
step, start = 0, None
if args.worker != "none":
    barrier(1)
while step < args.steps + 10:
    for x, y in loader:
        if step == 10:
            start = time.perf_counter()
        F.cross_entropy(model(x), y).backward()
        if args.worker != "none":
            barrier(step + 2)
        opt.step()
        opt.zero_grad()
        step += 1
        if step == args.steps + 10:
            break
if rank == 0:
    print("us/step %.1f" % ((time.perf_counter() - start) * 1e6 / args.steps), flush=True)
