"""Cost of the rank-private overlay and the replica guard.

  python3 bench/overlay_bench.py saves DIR   -- a checkpoint-heavy loop:
      torch.save of a ~4 MB state_dict to a temporary, os.replace, then
      torch.load, 40 times; prints saves/s.  bench/run-overlay-bench.sh runs
      it plain, as a rank 1 with the overlay and as a rank 1 writing real
      files (HVDSHIM_SAVE_RANKS=all), alternating, in one process each (a
      faked rank environment: the engine never starts), so only the
      overlay's cost differs.
  python3 bench/overlay_bench.py steps      -- 400 optimizer steps of a small
      MLP; prints ms/step.  Run at np=2 with HVDSHIM_CHECK_STEPS=1 (a check
      every step) and =0: the difference is the guard's cost per check.
  python3 bench/overlay_bench.py bigsaves DIR MB  -- a large checkpoint (an
      MB MiB state_dict): 4 times torch.save to a temporary + os.replace,
      then torch.load; prints seconds per save and per load (the median).
      Run plain first (rank 0's files, in DIR), then as a rank 1 keeping
      every byte (HVDSHIM_PRIVATE_BYTES=0) and freeing them (the default):
      rank 1's temporary is compared with rank 0's file (renamed already:
      rank 0 ahead), its load served by rank 0's file once checked.
  python3 bench/overlay_bench.py reads FILE -- 200000 os.pread of 4 KiB from
      FILE; prints ns per call (the fd calls the overlay interposes, on an
      fd that is none of its copies: what a training step's I/O pays).
"""
import os
import sys
import time

import torch
import torch.nn as nn

mode = sys.argv[1]
torch.manual_seed(0)
if mode == "saves":
    d = sys.argv[2]
    os.makedirs(d, exist_ok=True)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512))  # ~4 MB
    # no forward: run as a faked rank 1 (no launcher), the engine never starts
    n = 40
    t = time.perf_counter()
    for i in range(n):
        path = os.path.join(d, "ckpt.pt")
        torch.save(model.state_dict(), path + ".tmp")
        os.replace(path + ".tmp", path)
        model.load_state_dict(torch.load(path))
    dt = time.perf_counter() - t
    print("saves/s %.1f (save + replace + load of %.1f MB)" % (
        n / dt, sum(p.numel() for p in model.parameters()) * 4 / 1e6), flush=True)
elif mode == "bigsaves":
    d, mb = sys.argv[2], int(sys.argv[3])
    os.makedirs(d, exist_ok=True)
    state = {"table": torch.randn(mb * (1 << 20) // 4), "w": torch.randn(16, 16)}
    saves, loads = [], []
    for i in range(4):
        path = os.path.join(d, "ckpt.pt")
        t = time.perf_counter()
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
        t2 = time.perf_counter()
        back = torch.load(path)
        t3 = time.perf_counter()
        assert torch.equal(back["table"], state["table"])
        del back
        saves.append(t2 - t)
        loads.append(t3 - t2)
    print("s/save %.3f s/load %.3f (%d MiB)" % (sorted(saves)[2], sorted(loads)[2], mb), flush=True)
elif mode == "reads":
    fd = os.open(sys.argv[2], os.O_RDONLY)
    n = 200000
    t = time.perf_counter()
    for i in range(n):
        os.pread(fd, 4096, 0)
    print("ns/read %.1f" % ((time.perf_counter() - t) / n * 1e9), flush=True)
else:
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for i in range(450):
        if i == 50:
            t = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    print("ms/step %.4f" % ((time.perf_counter() - t) / 400 * 1e3), flush=True)
os._exit(0)
