"""One rank of bench/run-small-allreduce.sh: a served-horovod script that
allreduces one float in a loop (hvd.allreduce_, Average), as a script
averaging a scalar metric every step does.  Rank 0 prints "us/call U cpu
us/call C" over --calls calls after 500 warm-up calls.  The latency of a
small operation is what the engine's waits cost: the data moved is 4 bytes."""
import argparse
import time

import torch
import horovod.torch as hvd

ap = argparse.ArgumentParser()
ap.add_argument("--calls", type=int, default=5000)
args = ap.parse_args()
hvd.init()
t = torch.zeros(1)
for _ in range(500):
    hvd.allreduce_(t, op=hvd.Average)
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(args.calls):
    hvd.allreduce_(t, op=hvd.Average)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
if hvd.rank() == 0:
    print("us/call %.1f cpu us/call %.1f" % (wall * 1e6 / args.calls, cpu * 1e6 / args.calls), flush=True)
