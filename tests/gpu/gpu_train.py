"""An unmodified single-GPU training script (tests/gpu/device.sh): an MLP on
synthetic data, SGD, a shuffling DataLoader; --hooks: a hook of the script's on every parameter's
gradient (clamping); prints a checksum of the final
weights.  --amp: autocast + GradScaler; --mixed: one layer kept on the CPU;
--compile: the model through torch.compile (inductor, Triton kernels);
--late-cuda: the model built and called once on the CPU, then moved with
model.cuda() (parameters converted after the shim first saw them); --sliced:
batches cut from the tensors by the script (X[i:i+64] on the GPU), no
DataLoader; --bn: a BatchNorm layer (split mode syncs its statistics over
the ranks, so the run is the plain run's); --maxnorm: an embedding with
max_norm (renormalizes the rows it looks up, in place, in forward);
--noise: Gaussian noise drawn on the GPU added to the gradients between
backward and the step (the shim draws it from one stream on every rank);
--aliased: a bias added through a view after a layer whose backward reads
its gradient late (with one row per rank, torch keeps a view of the
gradient backward passes on as the bias's gradient: the shim reduces it in
a copy); --batch N: the batch size (512 samples);
--emulate-ranks N: the test's reference run, the single-process emulation of
a split run over N ranks (split_ref.py)."""
import argparse
import contextlib
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--amp", action="store_true")
ap.add_argument("--mixed", action="store_true")
ap.add_argument("--compile", action="store_true")
ap.add_argument("--late-cuda", action="store_true")
ap.add_argument("--device", default="cuda")  # cpu: tests/torch/split.sh's float16 case, where torch runs it on the CPU
ap.add_argument("--sliced", action="store_true")
ap.add_argument("--hooks", action="store_true")
ap.add_argument("--bn", action="store_true")
ap.add_argument("--maxnorm", action="store_true")
ap.add_argument("--noise", action="store_true")
ap.add_argument("--aliased", action="store_true")
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--epochs", type=int, default=2)
ap.add_argument("--emulate-ranks", type=int, default=0)  # the test's reference run only (split_ref.py)
args = ap.parse_args()

torch.manual_seed(0)
X = torch.randn(512, 32)
Y = (X[:, :4].sum(1) > 0).long()
loader = DataLoader(TensorDataset(X, Y), batch_size=args.batch, shuffle=True, generator=torch.Generator().manual_seed(1))


class SlowBackward(torch.autograd.Function):
    """A layer whose backward reads its gradient 5 ms after it is handed
    it, once the GPU has run everything queued before (a big layer's)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        torch.cuda.synchronize() if g.is_cuda else None
        time.sleep(0.005)
        return g * 1.0


class ViewBias(nn.Module):
    """A bias added through a view, as custom layers write it."""

    def __init__(self, n):
        super().__init__()
        self.b = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return SlowBackward.apply(x) + self.b.view(1, -1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        dev = "cpu" if args.late_cuda else args.device
        width = 32 + (8 if args.maxnorm else 0)
        norm = [nn.BatchNorm1d(64)] if args.bn else [ViewBias(64)] if args.aliased else []
        self.body = nn.Sequential(nn.Linear(width, 64), *norm, nn.ReLU(), nn.Linear(64, 64), nn.ReLU()).to(dev)
        self.emb = nn.Embedding(16, 8, max_norm=1.0).to(dev) if args.maxnorm else None
        self.head = nn.Linear(64, 2)
        if not args.mixed:
            self.head = self.head.to(dev)

    def forward(self, x):
        x = x.to(self.body[0].weight.device)
        if self.emb is not None:  # an index of 16 from the signs of 4 features
            idx = ((x[:, 4:8] > 0).long() * torch.tensor([1, 2, 4, 8], device=x.device)).sum(1)
            x = torch.cat([x, self.emb(idx)], 1)
        h = self.body(x)
        return self.head(h.cpu() if args.mixed else h)


model = Net()
if args.late_cuda:
    with torch.no_grad():
        model(X[:2])  # a shape check on the CPU, as scripts do before moving the model
    model.cuda()
if args.hooks:
    for p in model.parameters():
        p.register_hook(lambda g: g.clamp(-0.01, 0.01))
if args.sliced:
    Xg, Yg = X.to(args.device), Y.to(args.device)
    loader = [(Xg[i:i + args.batch], Yg[i:i + args.batch]) for i in range(0, len(X), args.batch)]
def autocast():  # torch 1.13 refuses float16 autocast on the CPU even when disabled
    return torch.autocast(args.device, dtype=torch.float16) if args.amp else contextlib.nullcontext()


fwd = torch.compile(model) if args.compile else model
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scaler = (torch.amp.GradScaler(args.device, enabled=args.amp) if hasattr(torch.amp, "GradScaler")
          else torch.cuda.amp.GradScaler(enabled=args.amp))
for epoch in range(args.epochs):
    for x, y in loader:
        opt.zero_grad()
        if args.emulate_ranks:
            from split_ref import backward_split

            def loss_of(xp, yp):
                with autocast():
                    out = fwd(xp)
                    return nn.functional.cross_entropy(out.float(), yp.to(out.device))
            loss = backward_split(args.emulate_ranks, x, y, model.parameters(), loss_of, scaler)
        else:
            with autocast():
                out = fwd(x)
                loss = nn.functional.cross_entropy(out.float(), y.to(out.device))
            scaler.scale(loss).backward()
        if args.noise:
            for p in model.parameters():
                p.grad.add_(torch.randn_like(p.grad), alpha=1e-3)
        scaler.step(opt)
        scaler.update()
    print("epoch", epoch, "loss %.5f" % loss.item(), flush=True)
print("checksum", " ".join("%.7f" % float(p.detach().double().sum()) for p in model.parameters()), flush=True)
