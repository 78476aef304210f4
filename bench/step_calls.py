"""The Python a training step runs: counts the main thread's calls of
Python functions and of C functions (sys.setprofile) over optimizer steps
[FROM, TO) of a script, run plain or under the shim, and prints per step
the totals and the most called (rank 0's, and the plain run's, on stdout):

    python3 bench/step_calls.py [--from 20] [--to 120] SCRIPT [ARGS...]
    hvdrun -np 2 python3 bench/step_calls.py bench/ordinary_train.py --samples 8192 --epochs 1

Steps are counted at the step of each torch.optim optimizer class."""
import argparse
import atexit
import collections
import os
import runpy
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--from", dest="first", type=int, default=20)
ap.add_argument("--to", dest="last", type=int, default=120)
ap.add_argument("--top", type=int, default=12)
ap.add_argument("script")
ap.add_argument("args", nargs=argparse.REMAINDER)
opts = ap.parse_args()

calls, c_calls = collections.Counter(), collections.Counter()


def where(code):
    f = code.co_filename
    for mark in ("/hvdshim_torch/", "/torch/"):
        if mark in f:
            return mark.strip("/") + ":" + f.split(mark, 1)[1]
    return os.path.basename(f)


def profile(frame, event, arg):
    if event == "call":
        calls[(where(frame.f_code), frame.f_code.co_name)] += 1
    elif event == "c_call":
        c_calls[getattr(arg, "__qualname__", str(arg))] += 1


import torch  # noqa: E402  (after the arguments: the shim's adapter loads here)

steps = [0]
for cls in [torch.optim.Optimizer] + torch.optim.Optimizer.__subclasses__():
    if "step" in vars(cls):  # (each optimizer's own step, wrapped)
        def make(orig):
            def step(self, *args, **kwargs):
                steps[0] += 1
                if steps[0] == opts.first:
                    sys.setprofile(profile)
                elif steps[0] == opts.last:
                    sys.setprofile(None)
                return orig(self, *args, **kwargs)
            return step
        cls.step = make(vars(cls)["step"])


@atexit.register
def report():
    sys.setprofile(None)
    n = min(steps[0], opts.last) - opts.first
    if n <= 0 or os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")) != "0":
        return
    print("step_calls: %d steps: %.1f Python calls and %.1f C calls a step"
          % (n, sum(calls.values()) / n, sum(c_calls.values()) / n))
    for (w, name), v in calls.most_common(opts.top):
        print("  %7.2f %s %s" % (v / n, w, name))
    for name, v in c_calls.most_common(opts.top):
        print("  %7.2f C %s" % (v / n, name))


sys.argv = [opts.script] + opts.args
runpy.run_path(opts.script, run_name="__main__")
