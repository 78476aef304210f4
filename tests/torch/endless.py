"""An unmodified trainer in the style of a widely used minimal GPT
repository's: batches come from RandomSampler(replacement=True,
num_samples=int(1e10)), an effectively endless epoch, and training ends at
max_iters.  Prints the loss every 10 iterations, then the process's peak
resident memory ("peak_rss_mb N"); saves the final weights.

    python endless.py --out final.pt [--iters N] [--batch B] [--workers W]"""
import argparse
import resource

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, TensorDataset


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(1000, 16)
    y = (x[:, :3].sum(1, keepdim=True) > 0).float()
    ds = TensorDataset(x, y)
    loader = DataLoader(ds, sampler=RandomSampler(ds, replacement=True, num_samples=int(1e10)), shuffle=False,
                        batch_size=args.batch, num_workers=args.workers)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    it = iter(loader)
    for i in range(args.iters):
        try:
            xb, yb = next(it)
        except StopIteration:
            it = iter(loader)
            xb, yb = next(it)
        loss = nn.functional.binary_cross_entropy_with_logits(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i % 10 == 0:
            print("iter %d: loss %.5f" % (i, loss.item()), flush=True)
    torch.save(model.state_dict(), args.out)
    print("peak_rss_mb %d" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024), flush=True)


if __name__ == "__main__":  # DataLoader workers under spawn or forkserver import this file
    main()
