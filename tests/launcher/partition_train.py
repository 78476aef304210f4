"""An ordinary training script in the style of a trainer's loop
(tests/launcher/partition.sh, netem.sh): an MLP regression over a shuffled
DataLoader, SGD with momentum, a progress line per step on stdout, a line
per step appended to OUT.log (opened at the start) and a checkpoint OUT.ckpt
saved every 5 steps (torch.save of the weights, the step and the host name),
the weights saved at the end to OUT, and the speed of steps 2 to N.  Each
line names the host it was written on.  Nothing in it knows of
distribution.

    python partition_train.py OUT [--steps N] [--pause S] [--workers W]

DROP=STEP:LO:HI (elastic.sh's emulation): rows LO..HI-1 of that step's batch
left out."""
import argparse
import os
import socket
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--pause", type=float, default=0.0)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    host = socket.gethostname()
    torch.manual_seed(0)
    X = torch.randn(480, 6)
    Y = X @ torch.randn(6, 1) + 0.1 * torch.randn(480, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=12, shuffle=True,
                                         generator=torch.Generator().manual_seed(1), num_workers=args.workers)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    drop = [int(v) for v in os.environ["DROP"].split(":")] if os.environ.get("DROP") else None
    log = open(args.out + ".log", "a")
    step = 0
    t1 = None
    while step < args.steps:
        for x, y in loader:
            if drop and step == drop[0]:
                keep = [i for i in range(len(x)) if not drop[1] <= i < drop[2]]
                x, y = x[keep], y[keep]
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            if step == 1:
                t1 = time.time()
            print("step %d loss %.6f on %s" % (step, loss.item(), host), flush=True)
            log.write("step %d loss %.6f on %s\n" % (step, loss.item(), host))
            log.flush()
            if step % 5 == 0:
                torch.save({"step": step, "host": host, "model": model.state_dict()}, args.out + ".ckpt")
            if args.pause:
                time.sleep(args.pause)
            if step >= args.steps:
                break
    torch.save(model.state_dict(), args.out)
    took = time.time() - t1
    print("done on %s: steps 2-%d in %.2f s (%.1f steps/s)" % (host, step, took, (step - 1) / took), flush=True)


if __name__ == "__main__":
    main()
