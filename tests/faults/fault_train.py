"""An ordinary single-process training script (an MLP, a shuffling
DataLoader, SGD) for the fault tests.  It knows nothing of distribution; the
fault injector below reads the launcher's rank variable only to pick the
process it breaks, as an outside tool would.

    python fault_train.py [--steps N] [--step-sleep S] [--checksums] [--workers W [--start METHOD]] [--detached]
                          [--tempdir [--slow-cleanup S]]
                          [--fault KIND --fault-rank R --fault-at K ...]

Prints "step K" to stderr after each optimizer step ("[rank r] " prefixed
under the shim), "ck K VALUE" with --checksums, and "done K" at the end.

Faults (on rank --fault-rank, -1 every rank, at step --fault-at):
  raise         an uncaught RuntimeError
  exit          sys.exit(--exit-code) in the middle of the epoch
  sleep         time.sleep(--sleep-seconds): stops submitting, stays alive
  complex       the model has a complex parameter (every rank; at start)
  stop-on-loss  no injection: half the samples are (0, 0), which a
                bias-free model fits exactly; each process stops at its
                first batch with loss 0 (a local early-stopping rule), so
                under the shim the ranks stop at different steps
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--checksums", action="store_true")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--start", default=None, choices=["fork", "spawn", "forkserver"],
                    help="how the loader starts its workers (multiprocessing's start method; default: Python's)")
    ap.add_argument("--detached", action="store_true",
                    help="start a helper program in a session of its own (it outlives the script unless ended)")
    ap.add_argument("--fault", default="none", choices=["none", "raise", "exit", "sleep", "complex", "stop-on-loss"])
    ap.add_argument("--fault-rank", type=int, default=1, help="-1: every rank")
    ap.add_argument("--fault-at", type=int, default=3)
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--sleep-seconds", type=float, default=1000.0)
    ap.add_argument("--tag", default="", help="ignored; lets a test find its processes")
    ap.add_argument("--slow-end", type=float, default=0.0,
                    help="rank 0's end takes this many seconds more (an atexit handler: an uploader's flush)")
    ap.add_argument("--tempdir", action="store_true",
                    help="train inside `with tempfile.TemporaryDirectory()`, its checkpoint there every 10 steps")
    ap.add_argument("--slow-cleanup", type=float, default=0.0,
                    help="with --tempdir: the way out of training (a `finally`) takes this many seconds before the "
                    "folder is removed; 'cleanup S FOLDER' is printed as it starts")
    args = ap.parse_args()

    me = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", os.environ.get("PMI_RANK", "0"))))
    if args.slow_end and me == 0:
        import atexit
        atexit.register(time.sleep, args.slow_end)
    torch.manual_seed(0)
    n = 512
    X = torch.randn(n, 8)
    Y = X[:, :2].sum(1, keepdim=True)
    batch = 4
    if args.fault == "stop-on-loss":
        batch = 1
        zero = torch.rand(n) < 0.08  # ~8% of the samples are exactly fittable
        X[zero] = 0
        Y[zero] = 0
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=batch, shuffle=True,
                                         num_workers=args.workers,
                                         multiprocessing_context=args.start if args.workers else None)
    bias = args.fault != "stop-on-loss"
    model = nn.Sequential(nn.Linear(8, 16, bias=bias), nn.Tanh(), nn.Linear(16, 1, bias=bias))
    if args.fault == "complex":
        model.register_parameter("phase", nn.Parameter(torch.zeros(3, dtype=torch.complex64)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    if args.detached:  # as a script starting a monitor or an uploader: a program in a session of its own
        import subprocess
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def checksum():
        return sum(float(p.detach().double().sum()) for p in model.parameters())

    if args.tempdir:  # (as pytorch/tutorials' transfer learning keeps its best weights)
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            try:
                train(args, me, loader, model, opt, checksum, d)
            finally:
                if args.slow_cleanup:
                    print("cleanup %g %s" % (args.slow_cleanup, d), file=sys.stderr, flush=True)
                    time.sleep(args.slow_cleanup)
    else:
        train(args, me, loader, model, opt, checksum, None)


def train(args, me, loader, model, opt, checksum, ckdir):
    step = 0
    stopped = False
    while step < args.steps and not stopped:
        for x, y in loader:
            if args.fault in ("raise", "exit", "sleep") and args.fault_rank in (me, -1) and step == args.fault_at:
                if args.fault == "raise":
                    raise RuntimeError("injected fault at step %d" % step)
                if args.fault == "exit":
                    print("exiting at step %d with status %d" % (step, args.exit_code), file=sys.stderr, flush=True)
                    sys.exit(args.exit_code)
                time.sleep(args.sleep_seconds)
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            if args.fault == "stop-on-loss" and float(loss) == 0.0:
                print("stopping at step %d: loss 0" % step, file=sys.stderr, flush=True)
                stopped = True
                break
            loss.backward()
            opt.step()
            step += 1
            print("step", step, file=sys.stderr, flush=True)
            if args.checksums:
                print("ck %d %.9f" % (step, checksum()), file=sys.stderr, flush=True)
            if ckdir and step % 10 == 0:
                torch.save(model.state_dict(), os.path.join(ckdir, "best.pt"))
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if step >= args.steps:
                break
    print("done", step, file=sys.stderr, flush=True)


# a __main__ guard: DataLoader workers started by spawn or forkserver (the
# default from Python 3.14) import this file again
if __name__ == "__main__":
    main()
