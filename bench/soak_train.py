"""A plain training script for the soak benchmark (bench/soak.py): a small
CNN over a synthetic image set, a DataLoader with worker processes, SGD with
momentum and a step schedule, a progress line every 50 steps, a log line
and a checkpoint (torch.save) every epoch, the weights at the end.  It knows
nothing of distribution.

    python soak_train.py OUT --steps N [--pause S] [--workers W]

--pause: seconds slept per step (a long run at little CPU).  DROP=S:LO:HI,...
(the soak's emulation): rows LO..HI-1 of the batch of each step S left out.
SLICES=N (the emulation of HVDSHIM_DATA=split over N ranks, to the bit):
the batch's loss is the mean of its N slices' losses, each weighed by its
rows, as the ranks' slices are averaged (the same number; only the float
rounding differs, and over thousands of steps training amplifies it: 1.4e-4
after 3428 steps against the loss of the whole batch at once)."""
import argparse
import os
import time

import torch
import torch.nn as nn


class Images(torch.utils.data.Dataset):
    """2048 8x8 images from a fixed seed; each item a fresh tensor (a worker's allocation per sample)."""

    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(2048, 1, 8, 8, generator=g)
        self.y = (self.x.mean((1, 2, 3)) > 0).long()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i].clone(), self.y[i]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--pause", type=float, default=0.0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(1)
    loader = torch.utils.data.DataLoader(Images(), batch_size=16, shuffle=True, num_workers=args.workers,
                                         generator=torch.Generator().manual_seed(2))
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.9)
    slices = int(os.environ.get("SLICES", "1"))
    drops = {}
    for d in filter(None, os.environ.get("DROP", "").split(",")):
        s, lo, hi = (int(v) for v in d.split(":"))
        drops[s] = (lo, hi)
    log = open(args.out + ".log", "a")
    step, epoch, t0 = 0, 0, time.time()
    while step < args.steps:
        total, n = 0.0, 0
        for x, y in loader:
            if step in drops:
                lo, hi = drops[step]
                keep = [i for i in range(len(x)) if not lo <= i < hi]
                x, y = x[keep], y[keep]
            opt.zero_grad()
            if slices > 1:
                cuts = [len(x) * i // slices for i in range(slices + 1)]
                loss = sum(nn.functional.cross_entropy(model(x[a:b]), y[a:b]) * (b - a)
                           for a, b in zip(cuts, cuts[1:])) / len(x)
            else:
                loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            total, n, step = total + loss.item(), n + 1, step + 1
            if step % 50 == 0:
                print("step %d loss %.4f (%.1f steps/s)" % (step, loss.item(), step / (time.time() - t0)), flush=True)
            if args.pause:
                time.sleep(args.pause)
            if step >= args.steps:
                break
        sched.step()
        log.write("epoch %d loss %.6f\n" % (epoch, total / max(n, 1)))
        log.flush()
        torch.save({"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict()}, args.out + ".ckpt")
        epoch += 1
    torch.save(model.state_dict(), args.out)
    print("done: %d steps" % step, flush=True)


if __name__ == "__main__":
    main()
