"""An unmodified script on an IterableDataset (or a dataset that yields
whole batches, read with batch_size=None): each sample carries its id; the
workers (if any) split the stream by worker id, as the PyTorch docs show, and
add noise from their own seeds.  Prints, per epoch, the sample ids this
process trained on ("ids EPOCH id id ..."), saves the final weights.

    python iterable.py --out final.pt [--workers W] [--prebatched] [--epochs E]"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

N, B = 200, 16


class Stream(IterableDataset):
    def __init__(self, prebatched):
        self.prebatched = prebatched
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(N, 8, generator=g)
        self.y = (self.x[:, :2].sum(1, keepdim=True) > 0).float()

    def samples(self):
        info = get_worker_info()
        for i in range(N):
            if info is None or i % info.num_workers == info.id:
                yield i, self.x[i] + 0.01 * torch.randn(8), self.y[i]  # noise from the process's (worker's) seed

    def __iter__(self):
        if not self.prebatched:
            yield from self.samples()
            return
        rows = []
        for s in self.samples():
            rows.append(s)
            if len(rows) == B:
                yield tuple(torch.stack([torch.as_tensor(r[k]) for r in rows]) for k in range(3))
                rows = []
        if rows:
            yield tuple(torch.stack([torch.as_tensor(r[k]) for r in rows]) for k in range(3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--prebatched", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    ds = Stream(args.prebatched)
    loader = DataLoader(ds, batch_size=None if args.prebatched else B, num_workers=args.workers)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(args.epochs):
        seen = []
        for ids, x, y in loader:
            seen += ids.tolist()
            loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print("ids %d %s" % (epoch, " ".join(map(str, seen))), flush=True)
    torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
