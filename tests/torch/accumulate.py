"""Gradient accumulation as scripts write it: K backward passes per
optimizer step (each loss divided by K), an epoch whose batch count K does
not divide (a short last step), gradient clipping before every step, and a
parameter used only in some backward passes; with --noise, noise drawn and
added to the gradients before clipping.  Float64; saves the final
state_dict to --out."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.side = nn.Linear(8, 1)  # used by every third batch only

    def forward(self, x, use_side):
        out = self.body(x)
        return out + self.side(x) if use_side else out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float64)
    n = args.batches * args.batch
    X = torch.randn(n, 8)
    Y = X[:, :2].sum(1, keepdim=True) + 0.1 * torch.randn(n, 1)
    loader = DataLoader(TensorDataset(X, Y), batch_size=args.batch, shuffle=True,
                        generator=torch.Generator().manual_seed(1))
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(args.epochs):
        total = 0.0
        for i, (x, y) in enumerate(loader):
            loss = ((model(x, i % 3 == 0) - y) ** 2).mean() / args.k
            loss.backward()
            total += float(loss)
            if (i + 1) % args.k == 0 or i + 1 == len(loader):
                for p in model.parameters() if args.noise else ():
                    if p.grad is not None:
                        p.grad.add_(args.noise * torch.randn_like(p.grad))
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad()
        print("epoch %d loss %.6f" % (epoch, total * args.k / len(loader)), flush=True)
    torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
