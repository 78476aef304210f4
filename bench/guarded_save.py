"""What keeping the old file aside costs rank 0's torch.save (the adapter's
checkpoints.py): a state_dict saved over an existing file, in place (plain)
and through checkpoints.save, alternating, in one process; the library's
two calls (the watcher, whether writes are real) stubbed, as the rank's
watcher starts once and the check is one call.  Prints the medians and
their ratio (lower is better for the second):

    python3 bench/guarded_save.py [--mib 256] [--rounds 16] [--dir DIR]"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from hvdshim_torch import capi, checkpoints  # noqa: E402
from hvdshim_torch.state import _S  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--mib", type=int, default=256)
ap.add_argument("--rounds", type=int, default=16)
ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
opts = ap.parse_args()


class Lib:
    def hvd_restore_at_end(self, backup, path):
        return 0

    def hvd_overlay_write_path(self, path, out, n):
        return 0

    def hvd_log_message(self, *args):
        pass


capi.LIB, _S.rank = Lib(), 0
save = torch.save
state = {"w": torch.randn(opts.mib << 18)}
path = os.path.join(opts.dir, "guarded-save-%d.pt" % os.getpid())
save(state, path)
times = {"in place": [], "kept aside": []}
ways = {"in place": lambda: save(state, path), "kept aside": lambda: checkpoints.save(save, state, path)}
try:
    for i in range(opts.rounds):
        for name in (("in place", "kept aside") if i % 2 else ("kept aside", "in place")):
            t = time.perf_counter()
            ways[name]()
            times[name].append(time.perf_counter() - t)
finally:
    os.unlink(path)
a, b = statistics.median(times["in place"]), statistics.median(times["kept aside"])
print("%d MiB saved over an existing file in %s, %d rounds: in place %.3f s, kept aside %.3f s (ratio %.3f)"
      % (opts.mib, opts.dir, opts.rounds, a, b, b / a))
