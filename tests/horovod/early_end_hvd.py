"""A Horovod script whose last rank runs out of work first (tests/horovod/
early-end.sh): it does --short steps, the others --steps.  Every step
averages a tensor and prints what came of it on this rank, the error's type
where one was raised (caught: the script goes on).  --join: the short rank
calls hvd.join() before it ends, and the others join after their steps, as
Horovod's docs ask of uneven data.  Each rank writes its lines to OUT.RANK
(the errors' words to OUT.err.RANK)."""
import argparse

import torch
import horovod.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--short", type=int, default=3)
p.add_argument("--join", action="store_true")
p.add_argument("out")
a = p.parse_args()
hvd.init()
r, n = hvd.rank(), hvd.size()
out = open("%s.%d" % (a.out, r), "w", buffering=1)
err = open("%s.err.%d" % (a.out, r), "w", buffering=1)
for i in range(a.short if r == n - 1 else a.steps):
    try:
        v = hvd.allreduce(torch.full((4,), float(r + 1 + i)), name="step%d" % i)
        print("step %d ok %s" % (i, " ".join("%.4f" % x for x in v.tolist())), file=out)
    except Exception as e:  # (Horovod's HorovodInternalError is a RuntimeError)
        print("step %d %s" % (i, type(e).__name__), file=out)
        print("step %d: %s" % (i, e), file=err)
if a.join:
    last = hvd.join()  # (rank 0 or 1: whichever ends its steps last)
    print("joined; the last to join ran every step: %s" % (0 <= last < n - 1), file=out)
print("end", file=out)
