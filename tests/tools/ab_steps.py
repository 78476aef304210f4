"""A fixed-steps training script (each process trains --steps optimizer
steps of --batch samples, whatever the number of ranks: the work grows with
the ranks), printing its metrics as scripts do: "step 5 loss 0.52" every 5
steps, "val_loss: 0.41" and "acc=0.87" every 10 (series, as hvdshim-ab
reads metrics), and "final acc 0.87" once at the end (no series)."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--batch", type=int, default=16)
args = ap.parse_args()
torch.manual_seed(0)
X = torch.randn(4096, 10)
Y = (X[:, :2].sum(1) > 0).long()
loader = DataLoader(TensorDataset(X, Y), batch_size=args.batch, shuffle=True)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
while step < args.steps:
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        step += 1
        if step % 5 == 0:
            print("step %d loss %.4f" % (step, float(loss)), flush=True)
        if step % 10 == 0:
            with torch.no_grad():
                out = model(X)
                print("val_loss: %.4f" % float(nn.functional.cross_entropy(out, Y)))
                print("acc=%.4f" % float((out.argmax(1) == Y).double().mean()), flush=True)
        if step == args.steps:
            break
print("final acc %.4f" % float((model(X).argmax(1) == Y).double().mean()))
