"""A plain training script (no distribution code) for tests/torch/grow.sh:
deterministic data, SGD with momentum and a StepLR, a log opened for
writing at the start with one line per epoch, a checkpoint per epoch, a
line on stdout per epoch, and a pause per step (GROW_PAUSE seconds) so a
host can join while it trains.  Argument: the weights file to write.
GROW_EPOCHS, GROW_BATCH, GROW_WORKERS: the loop's epochs, the batch size,
the loader's workers.  GROW_GENERATOR=1: the loader draws its order from a
generator of its own.  GROW_SCALER=1: a CPU GradScaler (torch 2.3+) whose
scale doubles every 3 steps, printed at the end.  GROW_SEEN=DIR: each
process appends the loop's epoch and the index of every sample it reads
to DIR/<its pid>.
GROW_PROGRESS=FILE: the optimizer steps this process has made, rewritten
after each (the test's discovery script lists the new slot once rank 0's
count reaches a step it chose).  GROW_HOLD=STEP:SECONDS: a pause that long
after that step (the discovery script sees it there).  GROW_MAX_STEPS=N: the loop counts its own
steps (`while steps < N`, over as many epochs as that takes) and ends at N,
in the middle of an epoch.  Each epoch's log line and stdout line read
what its loop left (the batches it counted, the last batch's loss).
Prints the steps it made last."""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


EPOCH = [0]  # the loop's epoch now (GROW_SEEN)


class Seen(TensorDataset):
    """GROW_SEEN: every sample read, "EPOCH INDEX" lines, one file per process
    (HVDSHIM_SAVE_RANKS=all)."""

    def __getitem__(self, i):
        with open(os.path.join(os.environ["GROW_SEEN"], str(os.getpid())), "a") as f:
            f.write("%d %d\n" % (EPOCH[0], i))
        return super().__getitem__(i)


def main():
    torch.manual_seed(0)
    epochs = int(os.environ.get("GROW_EPOCHS", "4"))
    batch = int(os.environ.get("GROW_BATCH", "12"))
    pause = float(os.environ.get("GROW_PAUSE", "0.05"))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(240, 8, generator=g)
    y = (x @ torch.randn(8, 1, generator=g)).tanh() + 0.1 * torch.randn(240, 1, generator=g)
    data = TensorDataset(x, y)
    if os.environ.get("GROW_SEEN"):
        data = Seen(x, y)
    gen = torch.Generator().manual_seed(3) if os.environ.get("GROW_GENERATOR") == "1" else None  # the loader's own
    loader = DataLoader(data, batch_size=batch, shuffle=True, num_workers=int(os.environ.get("GROW_WORKERS", "0")),
                        generator=gen)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    scale = torch.nn.Parameter(torch.ones(()))  # a parameter no model holds (a learnable output scale)
    opt = torch.optim.SGD(list(model.parameters()) + [scale], lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=3) \
        if os.environ.get("GROW_SCALER") == "1" else None
    log = open(sys.argv[1] + ".log", "w")
    log.write("epoch,loss,lr\n")
    progress, steps = os.environ.get("GROW_PROGRESS"), 0
    hold_at, _, hold_s = os.environ.get("GROW_HOLD", "0:0").partition(":")
    hold_at, hold_s = int(hold_at), float(hold_s)
    max_steps, epoch = int(os.environ.get("GROW_MAX_STEPS", "0")), 0
    while (steps < max_steps) if max_steps else (epoch < epochs):
        total, n = 0.0, 0
        EPOCH[0] = epoch
        for xb, yb in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb) * scale, yb)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            total += loss.item()
            n += 1
            steps += 1
            if progress:
                with open(progress, "w") as f:
                    f.write("%d\n" % steps)
            time.sleep(pause + (hold_s if steps == hold_at else 0))
            if max_steps and steps >= max_steps:
                break
        log.write("%d,%.6f,%g\n" % (epoch, total / n, sched.get_last_lr()[0]))  # (what the epoch's loop left:
        log.flush()                                                              # n batches, the last loss)
        sched.step()
        torch.save(model.state_dict(), sys.argv[1] + ".ckpt")
        print("epoch %d done, last loss %.4f" % (epoch, loss.item()), flush=True)
        epoch += 1
    print("steps %d" % steps, flush=True)
    torch.save(dict(model.state_dict(), scale=scale.detach()), sys.argv[1])
    if scaler is not None:
        print("scale %g" % scaler.get_scale(), flush=True)
    log.close()


if __name__ == "__main__":  # (DataLoader workers may start by importing this file: forkserver, spawn)
    main()
