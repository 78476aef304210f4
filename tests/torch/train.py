"""An ordinary single-process training script (it knows nothing of ranks),
with options that switch on the features the hvdshim tests exercise.

    python train.py --out final.pt [--case NAME] [--epochs N] ...

Prints one "epoch E loss L" line per epoch and saves the final state_dict(s)
to --out.  The tests run it plain and under the shim and compare."""
import argparse
import copy
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset


class Indexed(Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


class Stream(IterableDataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __iter__(self):
        return iter(zip(self.x, self.y))


class SAM(torch.optim.Optimizer):
    """Sharpness-aware minimisation as scripts copy it (github.com/davda54/sam):
    first_step reads the gradients, moves the weights along them and zeroes
    them; backward runs again there; second_step restores the weights and
    steps the base optimizer."""

    def __init__(self, params, base_optimizer, rho=0.05, **kwargs):
        super().__init__(params, dict(rho=rho, **kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self):
        norm = torch.norm(torch.stack([p.grad.norm(p=2) for g in self.param_groups for p in g["params"]
                                       if p.grad is not None]), p=2)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.state[p]["old_p"] = p.data.clone()
                    p.add_(p.grad * (group["rho"] / (norm + 1e-12)))
        self.zero_grad()

    @torch.no_grad()
    def second_step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        self.zero_grad()


class SignMomentum(torch.optim.Optimizer):
    """A script's own optimizer (Lion-like), its step taking no closure."""

    def __init__(self, params, lr=1e-3, beta=0.9):
        super().__init__(params, dict(lr=lr, beta=beta))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    m = self.state[p].setdefault("m", torch.zeros_like(p))
                    p.add_((m * group["beta"] + p.grad * (1 - group["beta"])).sign(), alpha=-group["lr"])
                    m.mul_(group["beta"]).add_(p.grad, alpha=1 - group["beta"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="checkpoint path; %%p is replaced by the process id")
    ap.add_argument("--case", default="full",
                    choices=["full", "no-optimizer", "lbfgs", "accumulate", "gan", "unused", "sparse", "frozen",
                             "seen", "iterable", "noncontig", "late", "convert", "shared", "hooked", "tokens", "bn", "checkpoint", "sam", "own-optimizer", "lazy", "maxnorm", "gradnoise", "swa", "linprobe", "free", "optbw", "manualbn",
                             "reinit", "aliased"])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--sum", action="store_true")  # the loss summed over the batch (reduction='sum')
    ap.add_argument("--sum-by", choices=["len", "batch"])  # reduction='sum' / len(y), or / --batch
    ap.add_argument("--clamp-hooks", action="store_true")  # p.register_hook(clamp) on every parameter
    ap.add_argument("--branch-bn", action="store_true")  # --case unused: a BatchNorm layer in each branch
    ap.add_argument("--noise-out")  # --case gradnoise: save the noise drawn at every step
    ap.add_argument("--noise-in")  # --case gradnoise: add these (saved) instead of drawing
    ap.add_argument("--d-first", action="store_true")  # --case gan: the discriminator's forward on the real batch first (dcgan)
    ap.add_argument("--penalty", action="store_true")  # the loss plus an L2 penalty by hand and a mean over the hidden activations
    ap.add_argument("--stop-above", type=float)  # training ends at a batch holding a row whose first feature is above this
    ap.add_argument("--print-lr", action="store_true")
    ap.add_argument("--print-threads", action="store_true")
    ap.add_argument("--stderr-line", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    X = torch.randn(args.samples, 10)
    Y = (X[:, :3].sum(1, keepdim=True) > 0).float()

    if args.case == "seen":
        data = Indexed(X, Y)
    elif args.case == "iterable":
        data = Stream(X, Y)
    else:
        data = TensorDataset(X, Y)
    shuffle = args.case != "iterable"
    loader = DataLoader(data, batch_size=args.batch, shuffle=shuffle, num_workers=args.workers)
    if args.print_threads:
        print("threads", torch.get_num_threads(), flush=True)
    if args.stderr_line:
        print("a line on stderr", file=sys.stderr)
        for i in (1, 2):  # a progress bar's way: the line redrawn after a carriage return
            sys.stderr.write("\rprogress %d/2" % i)
            sys.stderr.flush()
        sys.stderr.write("\n")

    class Branchy(nn.Module):
        """Takes branch a or b depending on the batch: some parameters get no
        gradient in some steps (on some ranks and not others)."""

        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(10, args.hidden)
            self.a = nn.Linear(args.hidden, 1)
            self.b = nn.Linear(args.hidden, 1)
            if args.branch_bn:  # a BatchNorm layer in each branch
                self.a = nn.Sequential(nn.BatchNorm1d(args.hidden), self.a)
                self.b = nn.Sequential(nn.BatchNorm1d(args.hidden), self.b)

        def forward(self, x):
            h = torch.relu(self.inp(x))
            return self.a(h) if x[:, 0].mean() > 0 else self.b(h)

    class SlowBackward(torch.autograd.Function):
        """A layer whose backward takes long (a big layer's, on a busy
        machine): it reads its gradient 50 ms after it is handed it."""

        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            time.sleep(0.05)
            return g * 1.0

    class ViewBias(nn.Module):
        """A bias added through a view, as custom layers write it: over one
        row there is no sum, and torch 2's AccumulateGrad may keep as the
        bias's gradient a view of the gradient backward passes on."""

        def __init__(self, n):
            super().__init__()
            self.b = nn.Parameter(torch.zeros(n))

        def forward(self, x):
            return SlowBackward.apply(x) + self.b.view(1, -1)

    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            # (--case maxnorm: rows looked up renormalized in place in forward)
            self.emb = nn.Embedding(16, 8, sparse=args.case == "sparse", max_norm=1.0 if args.case == "maxnorm" else None)
            self.fc = nn.Linear(8, 1)

        def forward(self, x):
            ids = (x[:, :2 if args.case == "sparse" else 4].abs() * 4).long().clamp(max=15)
            return self.fc(self.emb(ids).mean(1))

    def mlp():
        return nn.Sequential(nn.Linear(10, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 1))

    def bce(out, y):
        if args.sum_by:  # a sum divided by the slice's rows (a mean), or by the script's batch size (a constant)
            return F.binary_cross_entropy_with_logits(out, y, reduction="sum") / \
                (len(y) if args.sum_by == "len" else args.batch)
        if args.sum:  # a loss summed over the batch, scaled by a constant (the learning rate stays sensible)
            return F.binary_cross_entropy_with_logits(out, y, reduction="sum") * (1.0 / args.batch)
        return F.binary_cross_entropy_with_logits(out, y)

    def batches():
        if args.case == "manualbn":  # batches the script cuts itself (no DataLoader: the same on every rank)
            for i in range(0, len(X), args.batch):
                yield X[i:i + args.batch], Y[i:i + args.batch]
            return
        for b in loader:
            if args.case == "seen":
                x, y, idx = b
                print("seen", epoch, " ".join(str(int(i)) for i in idx))
                yield x, y
            else:
                yield b

    models = {}
    if args.case == "late":  # modules made after the first steps: a deep copy (Module.__setstate__), a new head
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        head = None
        for epoch in range(args.epochs):
            if epoch == 1:  # go on with a copy of the model and a new optimizer
                model = copy.deepcopy(model)
                opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            if epoch == 2:  # a head on top of it, set by hand (no random draw)
                head = nn.Linear(1, 1)
                with torch.no_grad():
                    head.weight.fill_(0.5)
                    head.bias.fill_(0.1)
                opt.add_param_group({"params": list(head.parameters())})
            for x, y in batches():
                opt.zero_grad()
                out = model(x)
                loss = bce(head(out) if head is not None else out, y)
                loss.backward()
                opt.step()
            # global forward pre-hooks now (hvdshim takes its own off once every module made has been seen)
            print("epoch", epoch, "loss", float(loss), "forward-hooks",
                  len(torch.nn.modules.module._global_forward_pre_hooks))
        models = {"model": model} if head is None else {"model": model, "head": head}
    elif args.case == "convert":  # a model converted, then a parameter replaced, after the first steps
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        dtype = torch.float32
        for epoch in range(args.epochs):
            if epoch == 1:  # float64 from now on (torch 1.x: new AccumulateGrad nodes)
                model.double()
                dtype = torch.float64
            if epoch == 2:  # a new output weight, drawn at random (rank 0's on every rank)
                model[2].weight = nn.Parameter(torch.randn(1, args.hidden, dtype=dtype) * 0.1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            for x, y in batches():
                opt.zero_grad()
                loss = bce(model(x.to(dtype)), y.to(dtype))
                loss.backward()
                opt.step()
            print("epoch", epoch, "loss", float(loss))
        models = {"model": model}
    elif args.case == "shared":  # two models sharing their first layer, each called as a model
        first = nn.Linear(10, args.hidden)
        A = nn.Sequential(first, nn.ReLU(), nn.Linear(args.hidden, 1))
        B = nn.Sequential(first, nn.Tanh(), nn.Linear(args.hidden, 1))
        opt = torch.optim.SGD(list(A.parameters()) + list(B[2].parameters()), lr=0.1)
        models = {"A": A, "B": B}
        for epoch in range(args.epochs):
            for x, y in batches():
                opt.zero_grad()
                loss = bce(A(x), y) + bce(B(x), y)
                loss.backward()
                opt.step()
            print("epoch", epoch, "loss", float(loss))
    elif args.case == "gan":
        G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 10))
        D = nn.Sequential(nn.Linear(10, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
        optG = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.999))
        optD = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.999))
        gen = torch.Generator().manual_seed(1)
        models = {"G": G, "D": D}
        for epoch in range(args.epochs):
            for x, _ in batches():
                z = torch.tanh(x[:, :4] * 3 + torch.randn(4, generator=gen))  # noise per sample, from the data
                if args.d_first:  # pytorch/examples' dcgan: D's first forward comes before G's (G's optimizer made)
                    optD.zero_grad()
                    bce(D(x), torch.ones(x.shape[0], 1)).backward()
                    fake = G(z)
                    lossD = bce(D(fake.detach()), torch.zeros(x.shape[0], 1))
                else:
                    fake = G(z)
                    optD.zero_grad()
                    lossD = bce(D(x), torch.ones(x.shape[0], 1)) + bce(D(fake.detach()), torch.zeros(x.shape[0], 1))
                lossD.backward()
                optD.step()
                optG.zero_grad()
                lossG = bce(D(fake), torch.ones(x.shape[0], 1))
                lossG.backward()
                optG.step()
            print("epoch", epoch, "loss", lossD.item(), lossG.item())
    else:
        model = Branchy() if args.case == "unused" else Bag() if args.case in ("sparse", "maxnorm") else mlp()
        if args.case == "tokens":  # 3 tokens of 3 classes per sample, some ignored (padding), label smoothing
            model = nn.Sequential(nn.Linear(10, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 9))
        if args.case in ("bn", "swa", "linprobe", "manualbn"):  # BatchNorm over channels (2d) and over features (1d, a cumulative average)
            model = nn.Sequential(nn.Linear(10, 16), nn.Unflatten(1, (4, 2, 2)), nn.BatchNorm2d(4), nn.Flatten(),
                                  nn.ReLU(), nn.Linear(16, args.hidden), nn.BatchNorm1d(args.hidden, momentum=None),
                                  nn.ReLU(), nn.Linear(args.hidden, 1))
        if args.case == "aliased":  # --case aliased: a bias added through a view after a slow layer
            model = nn.Sequential(nn.Linear(10, args.hidden), ViewBias(args.hidden), nn.ReLU(), nn.Linear(args.hidden, 1))
        if args.case == "lazy":  # lazy modules: their parameters made by the first forward
            model = nn.Sequential(nn.LazyLinear(args.hidden), nn.ReLU(), nn.LazyLinear(1))
        if args.case == "checkpoint":
            model = nn.Sequential(nn.Linear(10, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                                  nn.Linear(args.hidden, 1))
        if args.case == "noncontig":  # a weight stored transposed: parameter and gradient not contiguous
            w = model[0].weight
            model[0].weight = nn.Parameter(w.detach().t().contiguous().t())
            assert not model[0].weight.is_contiguous()
        models = {"model": model}
        if args.case == "linprobe":
            for p in model[:8].parameters():
                p.requires_grad_(False)
        if args.case == "frozen":
            for p in model[0].parameters():
                p.requires_grad_(False)
        if args.case == "hooked" or args.clamp_hooks:  # the script's own hooks on the gradients: clamping,
            for p in model.parameters():
                p.register_hook(lambda g: g.clamp(-0.01, 0.01))
        if args.case == "hooked":  # and one that only looks
            seen = []
            model[0].weight.register_hook(lambda g: seen.append(float(g.abs().max())))
        opt = None
        if args.case == "lbfgs":
            opt = torch.optim.LBFGS(model.parameters(), lr=0.05, max_iter=3, history_size=5)
        elif args.case == "sparse":
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
        elif args.case == "sam":
            opt = SAM(model.parameters(), torch.optim.SGD, lr=0.1, momentum=0.9)
        elif args.case == "own-optimizer":
            opt = SignMomentum(model.parameters(), lr=0.01)
        elif args.case == "optbw":  # the optimizer step fused into backward (torch >= 2.1), as PyTorch's tutorial does
            steppers = {p: torch.optim.SGD([p], lr=0.1, momentum=0.9) for p in model.parameters()}

            def step_in_backward(p):
                steppers[p].step()
                steppers[p].zero_grad()
            for p in model.parameters():
                p.register_post_accumulate_grad_hook(step_in_backward)
        elif args.case == "free":  # parameters no model holds: a learnable loss weight, a scale as a bare tensor
            log_var, scale = nn.Parameter(torch.zeros(())), torch.ones(1, requires_grad=True)
            opt = torch.optim.SGD(list(model.parameters()) + [log_var, scale], lr=0.1, momentum=0.9)
        elif args.case != "no-optimizer":
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.7) if args.case in ("full", "frozen") else None
        if args.print_lr:
            print("lr", opt.param_groups[0]["lr"])
        noise, noise_in = [], torch.load(args.noise_in) if args.noise_in else None
        for epoch in range(args.epochs):
            if args.case == "frozen" and epoch == 1:
                for p in model[0].parameters():
                    p.requires_grad_(True)
            if args.case == "reinit" and epoch == 1:  # a layer re-initialised mid-training, part of another by hand
                model[-1].reset_parameters()
                nn.init.normal_(model[0].weight.data[2:6], std=0.5)
            loss = torch.zeros(())  # (--stop-above: a rank may end before its first step)
            for step, (x, y) in enumerate(batches()):
                if args.stop_above is not None and bool((x[:, 0] > args.stop_above).any()):
                    break  # (an outlier: a value of the batch decides)
                if args.case == "lbfgs":
                    def closure():
                        opt.zero_grad()
                        loss = bce(model(x), y)
                        loss.backward()
                        return loss
                    loss = opt.step(closure)
                    continue
                if args.case == "sam":  # two backward passes per step, zero_grad between them
                    bce(model(x), y).backward()
                    opt.first_step()
                    loss = bce(model(x), y)
                    loss.backward()
                    opt.second_step()
                    continue
                if args.case in ("accumulate", "hooked"):  # two half batches per step
                    if step % 2 == 0:
                        opt.zero_grad()
                    loss = bce(model(x), y) / 2
                    loss.backward()
                    if step % 2 == 1:
                        opt.step()
                    continue
                if opt is not None:
                    opt.zero_grad()
                if args.case == "tokens":  # a mean over the tokens that count: their number differs by slice
                    tokens = (x[:, :3] > 0).long() + (x[:, 3:6] > 0).long()
                    tokens[x[:, 6:9] < -0.7] = -100
                    loss = F.cross_entropy(model(x).reshape(-1, 3), tokens.reshape(-1), label_smoothing=0.1)
                elif args.case == "checkpoint":  # activation checkpointing, reentrant (torch's default before 2.4): a
                    # part recomputed and backwarded inside the step's backward, the last layer's after it on even
                    # steps, in it on odd steps
                    from torch.utils.checkpoint import checkpoint
                    if step % 2 == 0:
                        out = model[4](checkpoint(lambda h: model[3](model[2](model[1](h))), model[0](x),
                                                  use_reentrant=True))
                    else:
                        out = checkpoint(lambda h: model[4](model[3](model[2](model[1](h)))), model[0](x),
                                         use_reentrant=True)
                    loss = bce(out, y)
                elif args.case == "free":
                    loss = bce(model(x) * scale, y) * torch.exp(-log_var) + log_var
                elif args.case == "linprobe":  # a frozen backbone run under no_grad, its BatchNorm in train mode
                    with torch.no_grad():
                        features = model[:8](x)
                    loss = bce(model[8](features), y)
                elif args.penalty:  # terms of other kinds: the same on every rank, and a mean over another count
                    hidden = model[1](model[0](x))
                    loss = bce(model[2](hidden), y) + 1e-2 * sum(p.pow(2).sum() for p in model.parameters()) \
                        + 1e-2 * hidden.abs().mean()
                else:
                    loss = bce(model(x), y)
                loss.backward()
                if args.case == "optbw":
                    continue
                if args.case == "full":
                    nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                if args.case == "gradnoise":  # noise on the gradient, drawn between backward and the step
                    with torch.no_grad():
                        for p in model.parameters():
                            n = noise_in.pop(0) if noise_in is not None else 0.05 * torch.randn_like(p.grad)
                            noise.append(n)
                            p.grad.add_(n)
                if opt is None:  # manual SGD
                    with torch.no_grad():
                        for p in model.parameters():
                            p.data.add_(p.grad, alpha=-0.1)
                            p.grad = None
                else:
                    opt.step()
            if sched is not None:
                sched.step()
            print("epoch", epoch, "loss", float(loss))

    if args.case == "free":
        models["free"] = nn.ParameterList([log_var, nn.Parameter(scale.detach())])
    if args.noise_out:
        torch.save(noise, args.noise_out)
    if args.case == "swa":  # an average of the weights, its BatchNorm statistics recomputed over the data
        from torch.optim.swa_utils import AveragedModel, update_bn
        swa = AveragedModel(model)
        swa.update_parameters(model)
        update_bn(loader, swa)  # (under no_grad, in train mode, over the whole loader)
        models["swa"] = swa.module
    state = {name: m.state_dict() for name, m in models.items()}
    print("checksum", " ".join("%.6f" % float(sum(t.double().sum() for t in sd.values())) for sd in state.values()))
    torch.save(state, args.out.replace("%p", str(os.getpid())))


# a __main__ guard: DataLoader workers started by spawn or forkserver (the
# default from Python 3.14) import this file again
if __name__ == "__main__":
    main()
