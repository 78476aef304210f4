"""An unmodified CUDA training script of the usual shape (tests/gpu/device.sh):
a small ResNet (residual blocks of 3x3 convolutions) on synthetic images,
SGD with momentum and weight decay, AMP (autocast + GradScaler), gradient
clipping on the unscaled gradients, a checkpoint (model, optimizer, scaler)
saved after each epoch and reloaded into fresh objects to finish the run.
Prints a checksum of the final weights.

The blocks use GroupNorm: its statistics are per sample, so the run split
over ranks is the single-process run step for step.  BatchNorm's are per
batch, per rank (as in DDP without SyncBatchNorm), which no split can match.

  --amp        autocast float16 + GradScaler
  --clip C     clip the gradient norm to C (after scaler.unscale_)
  --epochs N   epochs (a checkpoint after each; the last one is resumed from)
  --ckpt PATH  where the checkpoint goes (default: a file in the working dir)
  --deterministic  cuDNN's deterministic algorithms (its float32 weight
               gradients otherwise add with atomics: two plain runs differ)
  --emulate-ranks N  (the test's reference run only) the single-process
               emulation of a split run over N ranks (split_ref.py)
"""
import argparse
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--amp", action="store_true")
ap.add_argument("--clip", type=float, default=0.0)
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--ckpt", default="resnet_ckpt.pt")
ap.add_argument("--deterministic", action="store_true")
ap.add_argument("--emulate-ranks", type=int, default=0)
args = ap.parse_args()
dev = "cuda" if torch.cuda.is_available() else "cpu"
use_amp = args.amp and dev == "cuda"
if args.deterministic:
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.n1 = nn.GroupNorm(8, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.n2 = nn.GroupNorm(8, cout)
        self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.GroupNorm(8, cout))

    def forward(self, x):
        h = torch.relu(self.n1(self.c1(x)))
        return torch.relu(self.n2(self.c2(h)) + self.skip(x))


class ResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.GroupNorm(8, 32), nn.ReLU())
        self.layers = nn.Sequential(Block(32, 32, 1), Block(32, 64, 2), Block(64, 64, 1), Block(64, 128, 2))
        self.fc = nn.Linear(128, classes)

    def forward(self, x):
        h = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


def make():
    model = ResNet().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=5e-4)
    scaler = (torch.amp.GradScaler("cuda", enabled=use_amp) if hasattr(torch.amp, "GradScaler")
              else torch.cuda.amp.GradScaler(enabled=use_amp))
    return model, opt, scaler


torch.manual_seed(0)
X = torch.randn(384, 3, 32, 32)
Y = ((X[:, 0, :8, :8].mean((1, 2)) * 40).long().clamp(-5, 4) + 5)  # learnable labels
loader = DataLoader(TensorDataset(X, Y), batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(1))
model, opt, scaler = make()
for epoch in range(args.epochs):
    if epoch == args.epochs - 1 and epoch > 0:  # resume the last epoch from the checkpoint, into fresh objects
        model, opt, scaler = make()
        ck = torch.load(args.ckpt, map_location=dev)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        scaler.load_state_dict(ck["scaler"])
        print("resumed from epoch", ck["epoch"], flush=True)
    model.train()
    for x, y in loader:
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        if args.emulate_ranks:
            from split_ref import backward_split

            def loss_of(xp, yp):
                with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
                    return nn.functional.cross_entropy(model(xp), yp)
            loss = backward_split(args.emulate_ranks, x, y, model.parameters(), loss_of, scaler)
        else:
            with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
                loss = nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
        if args.clip:
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        scaler.step(opt)
        scaler.update()
    print("epoch", epoch, "loss %.5f" % loss.item(), "scale %g" % scaler.get_scale(), flush=True)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "scaler": scaler.state_dict(),
                "epoch": epoch}, args.ckpt)
print("checkpoint", os.path.basename(args.ckpt), os.path.getsize(args.ckpt), "bytes", flush=True)
print("checksum", " ".join("%.7f" % float(p.detach().double().sum()) for p in model.parameters()), flush=True)
