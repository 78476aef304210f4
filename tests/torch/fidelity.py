"""Ordinary single-process scripts for the zero-code fidelity cases of
tests/torch/fidelity.sh.  Nothing here knows about hvdshim or ranks (except
the 'diverge' case, which fakes a rank-local bug on purpose)."""
import argparse
import io
import os
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Sampler, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("case")
ap.add_argument("--dir", default=".")
ap.add_argument("--out", default=None)
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--scaler", action="store_true")
args = ap.parse_args()


def mlp():
    return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))


def data(n=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 10, generator=g)
    return X, (X[:, :3].sum(1, keepdim=True) > 0).float()


def checksum(model):
    return "%.9e" % float(sum(p.double().sum() for p in model.parameters()))


def finish(model):
    print("checksum", checksum(model), flush=True)
    if args.out:
        torch.save(model.state_dict(), args.out)


def setup(n=128, batch=16, lr=0.1, momentum=0.0):
    """The common start: seeded, an MLP, SGD and a shuffled loader of n samples."""
    torch.manual_seed(0)
    X, Y = data(n)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    return model, opt, DataLoader(TensorDataset(X, Y), batch_size=batch, shuffle=True)


def c_realpath(path):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.realpath.restype = ctypes.c_void_p
    libc.realpath.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    p = libc.realpath(path.encode(), None)
    if not p:
        raise OSError(ctypes.get_errno(), "realpath(%s) failed" % path)
    out = ctypes.string_at(p).decode()
    libc.free(ctypes.c_void_p(p))
    return out


def train_epoch(model, opt, loader):
    total, n = 0.0, 0
    for x, y in loader:
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        opt.step()
        total += float(loss) * len(x)
        n += len(x)
    return total / n


if args.case == "checkpoints":
    # every checkpoint idiom of ordinary scripts, each epoch
    model, opt, loader = setup(momentum=0.9)
    ckdir = os.path.join(args.dir, "checkpoints", "run")
    resume = os.path.join(ckdir, "last.pt")
    start = 0
    if os.path.exists(resume):  # resume-if-exists
        state = torch.load(resume)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["epoch"] + 1
        print("resumed at epoch", start)
    for epoch in range(start, args.epochs):
        train_epoch(model, opt, loader)
        os.makedirs(ckdir, exist_ok=True)
        # 1. open('wb') + torch.save(model, f), then load by path (word_language_model)
        with open(os.path.join(args.dir, "model.pt"), "wb") as f:
            torch.save(model, f)
        with open(os.path.join(args.dir, "model.pt"), "rb") as f:
            model.load_state_dict(torch.load(f, weights_only=False).state_dict())  # a whole model (torch >= 2.6)
        # 2. save then reload by path
        torch.save(model.state_dict(), os.path.join(args.dir, "state.pt"))
        model.load_state_dict(torch.load(os.path.join(args.dir, "state.pt")))
        # 3. in-memory snapshot
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        buf.seek(0)
        model.load_state_dict(torch.load(buf))
        # 4. tmp + os.replace into a folder made with os.makedirs
        tmp = resume + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}, tmp)
        os.replace(tmp, resume)
        assert not os.path.exists(tmp)
        assert sorted(os.listdir(ckdir)) == ["last.pt"], os.listdir(ckdir)
        # 6. a library canonicalizing a path it just wrote (safetensors' Rust
        # code, C++'s filesystem::canonical): libc's realpath
        fresh = os.path.join(ckdir, "fresh.bin")
        with open(fresh, "wb") as f:
            f.write(b"x")
        assert c_realpath(fresh) == os.path.realpath(fresh), (c_realpath(fresh), os.path.realpath(fresh))
        os.remove(fresh)
        # ... and in a folder it just made that no other process makes (whether
        # ckdir above is this process's own depends on which process made it first)
        own = os.path.join(args.dir, "own-%d" % os.getpid(), "sub")
        os.makedirs(own)
        fresh = os.path.join(own, "fresh.bin")
        with open(fresh, "wb") as f:
            f.write(b"x")
        assert c_realpath(fresh) == os.path.realpath(fresh), (c_realpath(fresh), os.path.realpath(fresh))
        os.remove(fresh)
        os.rmdir(own)
        os.rmdir(os.path.dirname(own))
        # 5. rotate: keep the previous epoch's copy, remove the one before
        prev = os.path.join(ckdir, "..", "epoch-%d.pt" % (epoch - 1))
        if os.path.exists(prev):
            os.remove(prev)
        torch.save(model.state_dict(), os.path.join(ckdir, "..", "epoch-%d.pt" % epoch))
        with open(os.path.join(args.dir, "log.txt"), "a") as f:
            f.write("epoch %d %s\n" % (epoch, checksum(model)))
    finish(model)

elif args.case == "fail-after-write":
    # writes a file on every rank, then the run fails (on rank 0 under the shim)
    torch.save({"x": 1}, os.path.join(args.dir, "partial.pt"))
    model = mlp()
    model(torch.randn(4, 10))  # the engine starts here
    if os.environ.get("FAIL_HERE") == "1":
        raise SystemExit("failing on purpose")
    print("done")

elif args.case == "unseeded":
    # pytorch/examples regression: an unseeded random target, fit until the
    # loss is small (the run would never stop if each rank fitted its own)
    W_target = torch.randn(4, 1) * 5
    b_target = torch.randn(1) * 5
    noise_scale = random.random() * 0  # draws from Python's random too

    def features(x):
        x = x.unsqueeze(1)
        return torch.cat([x ** i for i in range(1, 5)], 1)

    def get_batch(batch_size=32):
        x = torch.randn(batch_size)
        f = features(x)
        return f, f.mm(W_target) + b_target.item() + noise_scale

    fc = nn.Linear(4, 1)
    for idx in range(1, 20001):
        bx, by = get_batch()
        fc.zero_grad()
        loss = F.smooth_l1_loss(fc(bx), by)
        loss.backward()
        for p in fc.parameters():
            p.data.add_(-0.1 * p.grad)
        if float(loss) < 1e-3:
            print("converged after %d batches" % idx)
            break
    else:
        print("did not converge")
        sys.exit(3)
    print("target", " ".join("%.6f" % float(v) for v in torch.cat([W_target.flatten(), b_target])))

elif args.case == "plateau":
    # ReduceLROnPlateau fed the epoch's (per-rank) loss
    model, opt, loader = setup(n=256, lr=0.5)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=0, threshold=0.2)
    for epoch in range(args.epochs):
        loss = train_epoch(model, opt, loader)
        sched.step(loss)
    print("lr %.6g" % opt.param_groups[0]["lr"])
    finish(model)

elif args.case in ("sequential", "custom-sampler", "custom-batches"):
    torch.manual_seed(0)
    X, Y = data(96)
    ds = TensorDataset(X, Y)

    class EveryThirdFirst(Sampler):
        """A custom order: 0, 3, 6, ..., then 1, 4, ..., then 2, 5, ..."""

        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter([i for r in range(3) for i in range(r, self.n, 3)])

        def __len__(self):
            return self.n

    class Buckets(Sampler):
        """Batches of 8 from a shuffled order, then regrouped (a bucketing
        batch sampler)."""

        def __init__(self, ds):
            self.ds = ds

        def __iter__(self):
            order = torch.randperm(len(self.ds)).tolist()
            return iter([order[i:i + 8] for i in range(0, len(order), 8)])

        def __len__(self):
            return len(self.ds) // 8

    if args.case == "sequential":
        loader = DataLoader(ds, batch_size=8)  # shuffle=False
    elif args.case == "custom-sampler":
        loader = DataLoader(ds, batch_size=8, sampler=EveryThirdFirst(len(ds)))
    else:
        loader = DataLoader(ds, batch_sampler=Buckets(ds))
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps_per_epoch = len(loader)  # sized before training, as schedules are
    steps = 0
    for epoch in range(args.epochs):
        for x, y in loader:
            opt.zero_grad()
            F.binary_cross_entropy_with_logits(model(x), y).backward()
            opt.step()
            steps += 1
    print("len %d steps %d" % (steps_per_epoch, steps))
    assert steps == steps_per_epoch * args.epochs, (steps, steps_per_epoch)
    finish(model)

elif args.case == "eval":
    # a shuffled validation loader evaluated under no_grad, before and after training
    torch.manual_seed(0)
    X, Y = data(200)
    Xv, Yv = data(150, seed=1)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(X, Y), batch_size=20, shuffle=True)
    val = DataLoader(TensorDataset(Xv, Yv), batch_size=20, shuffle=True)

    def evaluate(tag):
        model.eval()
        correct, batches = 0, 0
        with torch.no_grad():
            for x, y in val:
                correct += int(((model(x) > 0).float() == y).sum())
                batches += 1
        print("%s correct %d of %d in %d batches (len %d)" % (tag, correct, len(val.dataset), batches, len(val)))
        model.train()

    evaluate("before")
    for epoch in range(args.epochs):
        train_epoch(model, opt, train)
    evaluate("after")
    finish(model)

elif args.case == "os-exit":
    model, opt, loader = setup()
    train_epoch(model, opt, loader)
    finish(model)
    sys.stdout.flush()
    os._exit(0)

elif args.case == "hogwild":
    # pytorch/examples mnist_hogwild: children train a shared model
    import torch.multiprocessing as mp
    torch.manual_seed(0)
    X, Y = data(64)

    def worker(model, seed):
        torch.manual_seed(seed)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        train_epoch(model, opt, DataLoader(TensorDataset(X, Y), batch_size=16, shuffle=True))

    if __name__ == "__main__":
        model = mlp()
        model.share_memory()
        procs = [mp.Process(target=worker, args=(model, s)) for s in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        test = DataLoader(TensorDataset(X, Y), batch_size=16, shuffle=True)
        with torch.no_grad():
            n = sum(len(x) for x, _ in test)
            model(X)
        print("tested %d samples" % n)
        finish(model)

elif args.case == "diverge":
    # a rank-local change to the weights (a bug the replica guard must catch)
    model, opt, loader = setup(batch=8)
    for epoch in range(args.epochs):
        for i, (x, y) in enumerate(loader):
            opt.zero_grad()
            F.binary_cross_entropy_with_logits(model(x), y).backward()
            opt.step()
            if epoch == 0 and i == 2 and os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK")) == "1":
                with torch.no_grad():
                    model[2].bias.add_(1e-3)
    finish(model)

elif args.case == "early-stop":
    # early stopping on the epoch's mean training loss (read with .item()
    # after backward: each rank's own batches under a launcher), and a
    # "best model" file written when it improves; --scaler: the backward of
    # torch.amp's GradScaler (torch >= 2.3 on CPU)
    model, opt, loader = setup(n=256, batch=32, lr=0.2)
    scaler = None
    if args.scaler:
        try:
            scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        except (AttributeError, TypeError, RuntimeError):
            print("no GradScaler for CPU in torch %s" % torch.__version__)
    best, bad = float("inf"), 0
    for epoch in range(100):
        total = 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = F.binary_cross_entropy_with_logits(model(x), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            total += loss.item()
        total /= len(loader)
        if not total == total:
            sys.exit("loss is NaN")
        if total < best - 1e-3:
            best, bad = total, 0
            torch.save(model.state_dict(), os.path.join(args.dir, "best.pt"))
        else:
            bad += 1
            if bad >= 2:
                break
    print("stopped at epoch %d loss %.4f best %.4f" % (epoch, total, best))
    finish(model)

elif args.case == "lengths":
    # len(loader) against the batches that follow, as trainers use it: the
    # model inside a wrapper module that holds the loss (timm's train.py
    # style: the wrapper stays in train mode while the inner model
    # evaluates), len asked before the loop on either side of eval()/train()
    # and of inference_mode/no_grad (timm's order, and PyTorch's ImageNet
    # example's: len first), inside it and after it, a schedule sized from
    # len at setup, the training loader evaluated too, an evaluation before
    # any training, and a shuffled loader evaluated before any model ran.
    # Each loop prints: TAG iterated N told M inside I after A last L.
    class Task(nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model, self.loss = model, nn.BCEWithLogitsLoss()

        def forward(self, x, y):
            return self.loss(self.model(x), y)

    torch.manual_seed(0)
    model = mlp()
    task = Task(model)
    train = DataLoader(TensorDataset(*data(60)), batch_size=8, shuffle=True)
    val = DataLoader(TensorDataset(*data(36, seed=1)), batch_size=8)
    test = DataLoader(TensorDataset(*data(28, seed=2)), batch_size=8)
    probe = DataLoader(TensorDataset(*data(40, seed=3)), batch_size=8, shuffle=True)
    opt = torch.optim.SGD(task.parameters(), lr=0.1)
    total = args.epochs * len(train)  # a schedule sized from len at setup
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s / total)
    print("sizes train %d val %d test %d" % (len(train), len(val), len(test)))
    no_grad = getattr(torch, "inference_mode", torch.no_grad)

    def loop(tag, loader, last_idx, body):
        n, inside, correct, last = 0, set(), 0, 0
        for batch_idx, (x, y) in enumerate(loader):
            inside.add(len(loader))
            correct += body(x, y)
            last += batch_idx == last_idx  # (timm prints its last progress line here)
            n += 1
        print("%s iterated %d told %d inside %s after %d last %d" % (
            tag, n, last_idx + 1, ",".join(map(str, sorted(inside))), len(loader), last))
        return correct

    def step(x, y):
        opt.zero_grad()
        task(x, y).backward()
        opt.step()
        sched.step()
        return 0

    def right(x, y):
        return int(((model(x) > 0).float() == y).sum())

    def validate(tag, loader, order):
        if order == "timm":  # eval(), len, then inference_mode
            model.eval()
            last_idx = len(loader) - 1
        else:  # len first, then eval() (PyTorch's ImageNet example), then no_grad
            last_idx = len(loader) - 1
            model.eval()
        with no_grad():
            correct = loop(tag, loader, last_idx, right)
        print("%s correct %d" % (tag, correct))

    last_idx = len(probe) - 1  # a shuffled loader, before any model ran (an optimizer made): taken for training
    with torch.no_grad():
        print("probe correct %d" % loop("probe", probe, last_idx, right))
    validate("first", test, "imagenet")  # before any training
    for epoch in range(args.epochs):
        last_idx = len(train) - 1  # len before train() (the ImageNet example's order)
        task.train()
        loop("train %d" % epoch, train, last_idx, step)
        print("lr %.6f" % sched.get_last_lr()[0])
        validate("train-eval %d" % epoch, train, "timm")  # the training loader evaluated
        validate("val %d" % epoch, val, "timm")
        validate("test %d" % epoch, test, "imagenet")
    finish(model)

elif args.case == "compile":
    # torch.compile (torch >= 2.0): a compiled model trains data-parallel
    if not hasattr(torch, "compile"):
        print("no torch.compile")
        sys.exit(0)
    model, opt, loader = setup()
    cmodel = torch.compile(model, backend=os.environ.get("COMPILE_BACKEND", "inductor"))
    train_epoch(cmodel, opt, loader)
    finish(model)

elif args.case == "func":
    tf = getattr(torch, "func", None)
    if tf is None:
        print("no torch.func")
        sys.exit(0)
    torch.manual_seed(0)
    X, Y = data()
    model = mlp()
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_fn(p, x, y):
        return F.binary_cross_entropy_with_logits(tf.functional_call(model, p, (x,)), y)

    for _ in range(5):
        g = tf.grad(loss_fn)(params, X, Y)
        params = {k: params[k] - 0.1 * g[k] for k in params}
    print("func done %.6f" % float(loss_fn(params, X, Y)))

else:
    sys.exit("unknown case " + args.case)
