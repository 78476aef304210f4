"""An ordinary script that checkpoints every epoch and reads its checkpoints
back (tests/torch/private-bytes.sh): a small model that trains, plus a
large buffer (--mb MiB) that changes every epoch, saved

  1. by path as checkpoints/epoch-N.pt and loaded back, keeping the last 2
     (rotation), the folder listed,
  2. to a temporary, os.replace'd into checkpoints/last.pt, loaded back,
     and copied to best.pt with shutil.copyfile (one sendfile of the whole
     file: pytorch/examples' ImageNet trainer's model_best.pth.tar),
     loaded back,
  3. with its random state (different on every rank under the shim) in
     rng.pt, loaded back,

and a line appended to log.txt.  Every load is compared with what was
saved, exactly: a wrong read-back ends the run (status 3).  With --resume
it starts from checkpoints/last.pt.  Plain Python and torch, no hvdshim."""
import argparse
import hashlib
import os
import shutil
import sys

import torch

p = argparse.ArgumentParser()
p.add_argument("--dir", required=True)
p.add_argument("--mb", type=int, default=64)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--resume", action="store_true")
args = p.parse_args()

torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self, mb):
        super().__init__()
        self.lin = torch.nn.Linear(16, 1)
        # a large state that is not trained: an embedding table, frozen features...
        self.register_buffer("table", torch.randn(mb * (1 << 20) // 4))


model = Net(args.mb)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
loader = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True)
ck = os.path.join(args.dir, "checkpoints")
os.makedirs(ck, exist_ok=True)


def digest(state):
    h = hashlib.sha256()
    for k in sorted(state):
        v = state[k]
        h.update(k.encode())
        h.update(v.numpy().tobytes() if torch.is_tensor(v) else repr(v).encode())
    return h.hexdigest()[:16]


def check(what, saved, loaded):
    same = sorted(saved) == sorted(loaded) and all(torch.equal(saved[k], loaded[k]) for k in saved)
    if not same:
        print("wrong read-back of %s" % what, file=sys.stderr, flush=True)
        sys.exit(3)


start = 0
last = os.path.join(ck, "last.pt")
if args.resume and os.path.exists(last):
    state = torch.load(last)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["epoch"] + 1
    print("resumed at epoch", start)
for epoch in range(start, args.epochs):
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model.lin(x), y).backward()
        opt.step()
    with torch.no_grad():
        model.table.mul_(0.5).add_(model.lin.weight.sum())
    state = model.state_dict()
    # 1. by path, loaded back; rotation: keep the last 2
    path = os.path.join(ck, "epoch-%d.pt" % epoch)
    torch.save(state, path)
    check(path, state, torch.load(path))
    old = os.path.join(ck, "epoch-%d.pt" % (epoch - 2))
    if os.path.exists(old):
        os.remove(old)
    # 2. a temporary replaced into place
    tmp = last + ".tmp"
    torch.save({"model": state, "opt": opt.state_dict(), "epoch": epoch}, tmp)
    os.replace(tmp, last)
    check("last.pt", state, torch.load(last)["model"])
    best = os.path.join(args.dir, "best.pt")
    shutil.copyfile(last, best)
    check("best.pt", state, torch.load(best)["model"])
    want = sorted(["epoch-%d.pt" % e for e in range(max(0, epoch - 1), epoch + 1)] + ["last.pt"])
    if sorted(os.listdir(ck)) != want:
        print("listing %s, expected %s" % (sorted(os.listdir(ck)), want), file=sys.stderr, flush=True)
        sys.exit(3)
    # 3. this process's random state
    rng = {"torch": torch.get_rng_state()}
    torch.save(rng, os.path.join(args.dir, "rng.pt"))
    check("rng.pt", rng, torch.load(os.path.join(args.dir, "rng.pt")))
    with open(os.path.join(args.dir, "log.txt"), "a") as f:
        f.write("epoch %d %.6f\n" % (epoch, float(model.lin.weight.sum())))
print("checksum", digest(model.state_dict()), flush=True)
