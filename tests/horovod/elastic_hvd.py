"""An elastic training script on Horovod's API, in the style of Horovod's
examples/elastic/pytorch (synthetic data, float64 for exact comparisons):
an ElasticSampler, a TorchState with the model, the optimizer, the sampler,
the epoch and the batch, a commit every --batches-per-commit batches (at
the start of a batch, as Horovod's imagenet example), a reset callback that
scales the learning rate by hvd.size(), the function decorated with
hvd.elastic.run called once; rank 0 prints a line every --log-interval
batches and the final weights' sum, and saves the weights (--save).

Test hooks (nothing Horovod or hvdshim knows of):
  --kill RANK:EPOCH:BATCH  the rank launched as RANK SIGKILLs itself when it
      has that batch (not in a job hvdrun started again to grow);
  --grow-file F --grow-at EPOCH:BATCH  rank 0 makes F when it has that
      batch (a discovery script lists one more slot once F exists);
  --log PREFIX  each rank appends "job J call C size S epoch E batch B
      idx I,..." per step to PREFIX.<launch rank> (J: 2 in a job started
      again to grow, C: the decorated function's call);
  --pause S  seconds per step;
  --emulate PHASES  no Horovod: the single-process emulation of what
      Horovod's semantics prescribe, PHASES "S0;S1@E:B:P;..." = S0 ranks
      from the start, S1 from epoch E batch B with P samples of the epoch
      processed (the state committed there), ...: each step's gradient is the
      average of the ranks' own batches' mean-loss gradients, the ranks'
      batches dealt as the ElasticSampler deals them (Horovod 0.28.1:
      the order range(N) shuffled by random.Random(seed + epoch), the first
      P done, the rest padded to a multiple of the ranks, rank r takes every
      S-th from the r-th), the rate --lr x ranks."""
import argparse
import math
import os
import random
import signal
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description="PyTorch elastic example (synthetic)")
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--samples", type=int, default=96)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--batches-per-commit", type=int, default=2)
parser.add_argument("--log-interval", type=int, default=4)
parser.add_argument("--save", default=None)
parser.add_argument("--kill", default=None)
parser.add_argument("--grow-file", default=None)
parser.add_argument("--grow-at", default=None)
parser.add_argument("--log", default=None)
parser.add_argument("--pause", type=float, default=0.0)
parser.add_argument("--emulate", default=None)
args = parser.parse_args()

torch.manual_seed(args.seed)
torch.set_num_threads(1)


class Synthetic(torch.utils.data.Dataset):
    """Noisy linear-regression-like classification; each sample carries its index."""

    def __init__(self, n):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 12, generator=g, dtype=torch.float64)
        w = torch.randn(12, 5, generator=g, dtype=torch.float64)
        self.y = (self.x @ w + 0.3 * torch.randn(n, 5, generator=g, dtype=torch.float64)).argmax(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        return F.log_softmax(self.fc2(torch.tanh(self.fc1(x))), dim=1)


train_dataset = Synthetic(args.samples)
model = Net().double()


def emulate(phases):
    """Horovod's semantics in one process (see the docstring)."""
    sizes = [(int(p.split("@")[0]), tuple(int(v) for v in p.split("@")[1].split(":")) if "@" in p else None)
             for p in phases.split(";")]
    size = sizes[0][0]
    changes = [(at, s) for s, at in sizes[1:]]
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=args.momentum)
    for epoch in range(args.epochs):
        order = list(range(len(train_dataset)))
        random.Random(args.seed + epoch).shuffle(order)
        processed, batch = 0, 0
        while True:
            rest = order[processed:]
            per = int(math.ceil(len(rest) / size))
            dealt = list(rest)
            while dealt and len(dealt) < per * size:
                dealt += dealt[:per * size - len(dealt)]
            ranks = [dealt[r::size] for r in range(size)]
            steps = int(math.ceil(per / args.batch_size))
            changed = False
            for j in range(steps):
                if changes and changes[0][0][:2] == (epoch, batch):
                    (_, _, p), size = changes.pop(0)
                    assert p == processed, "the change's processed count %d, the emulation's %d" % (p, processed)
                    for group in opt.param_groups:
                        group["lr"] = args.lr * size
                    changed = True
                    break
                opt.zero_grad()
                loss = 0
                for r in range(size):
                    idx = ranks[r][j * args.batch_size:(j + 1) * args.batch_size]
                    x, y, _ = zip(*[train_dataset[i] for i in idx])
                    loss = loss + F.nll_loss(model(torch.stack(x)), torch.stack(y)) / size
                loss.backward()
                opt.step()
                processed += args.batch_size * size
                batch += 1
            if not changed:
                break
    return model


if args.emulate:
    emulate(args.emulate)
    print("final: %.12f" % sum(float(p.detach().sum()) for p in model.parameters()))
    if args.save:
        torch.save(model.state_dict(), args.save)
    raise SystemExit(0)

import horovod.torch as hvd  # noqa: E402

# Horovod: initialize library.
hvd.init()
launch_rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", hvd.rank())))
job = 2 if os.environ.get("HVDSHIM_ELASTIC_RESUME") == "1" else 1
kill = [int(v) for v in args.kill.split(":")] if args.kill and job == 1 else None
grow_at = tuple(int(v) for v in args.grow_at.split(":")) if args.grow_at else None
log = open("%s.%d" % (args.log, launch_rank), "a") if args.log else None

# Elastic Horovod: ElasticSampler deals what is left of the epoch over the ranks there are.
train_sampler = hvd.elastic.ElasticSampler(train_dataset, shuffle=True, seed=args.seed)
train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)

# Horovod: scale learning rate by the number of ranks.
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
calls = [0]
resets = [0]


def train(state):
    model.train()
    batch_offset = state.batch
    for idx, (data, target, index) in enumerate(train_loader):
        # Elastic Horovod: the batch of this epoch we are at; commit (which checks for hosts joining)
        state.batch = batch_idx = batch_offset + idx
        if args.batches_per_commit > 0 and state.batch % args.batches_per_commit == 0:
            state.commit()
        if kill and [launch_rank, state.epoch, batch_idx] == kill:
            os.kill(os.getpid(), signal.SIGKILL)
        if grow_at and hvd.rank() == 0 and (state.epoch, batch_idx) == grow_at:
            open(args.grow_file, "w").close()
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        # Elastic Horovod: record the samples processed, so that a reset does not process them again
        state.train_sampler.record_batch(idx, args.batch_size)
        if log:
            log.write("job %d call %d size %d epoch %d batch %d idx %s\n"
                      % (job, calls[0], hvd.size(), state.epoch, batch_idx, ",".join(str(int(i)) for i in index)))
            log.flush()
        if batch_idx % args.log_interval == 0 and hvd.rank() == 0:
            print("Train Epoch: {} [{}/{}]\tLoss: {:.6f}".format(state.epoch, batch_idx, len(train_loader) + batch_offset,
                                                                 loss.item()))
        if args.pause:
            time.sleep(args.pause)


def end_epoch(state):
    state.epoch += 1
    state.batch = 0
    state.train_sampler.set_epoch(state.epoch)
    state.commit()


@hvd.elastic.run
def full_train(state):
    calls[0] += 1
    while state.epoch < args.epochs:
        train(state)
        end_epoch(state)


# adjust learning rate on reset
def on_state_reset():
    resets[0] += 1
    for param_group in optimizer.param_groups:
        param_group["lr"] = args.lr * hvd.size()
    if hvd.rank() == 0:
        print("reset: size %d epoch %d batch %d processed %d"
              % (hvd.size(), state.epoch, state.batch, state.train_sampler.processed_num))


state = hvd.elastic.TorchState(model, optimizer, train_sampler=train_sampler, epoch=0, batch=0)
state.register_reset_callbacks([on_state_reset])
full_train(state)
if hvd.rank() == 0:
    print("calls %d resets %d" % (calls[0], resets[0]))
    print("final: %.12f" % sum(float(p.detach().sum()) for p in model.parameters()))
    if args.save:
        torch.save(model.state_dict(), args.save)
