#!/bin/sh
# Trainer libraries, unmodified scripts in their quick-start style, under
# the shim at np=2 (shard): torch-ignite (create_supervised_trainer and
# create_supervised_evaluator, the evaluator run after each epoch) and
# skorch (NeuralNetClassifier.fit with its validation split).  Their
# evaluations begin with the model in training mode and switch it to eval
# inside each step: they must be whole on every rank (the plain run's
# batches), training sharded (half the plain run's batches), every rank
# printing the same metrics.  Skips where they are not installed (Debian 12
# has neither; make check-stacks runs this in the sid chroot).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
"$PYTHON" -c 'import ignite, skorch' 2>/dev/null ||
  skip "torch-ignite and skorch are not importable by $PYTHON (apt-get install python3-torch-ignite python3-skorch: Debian 13 and later)"
warm_start
export HVDSHIM_WORKER_STDOUT=1
cat >"$TMP/ignite_qs.py" <<'PY'
import torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from ignite.engine import create_supervised_trainer, create_supervised_evaluator, Events
from ignite.metrics import Accuracy, Loss
torch.manual_seed(0)
x, y = torch.randn(512, 10), torch.randint(0, 3, (512,))
x[:, 0] += y  # (something to learn)
train_loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
val_loader = DataLoader(TensorDataset(x[:200], y[:200]), batch_size=64)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
crit = nn.CrossEntropyLoss()
trainer = create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), crit)
evaluator = create_supervised_evaluator(model, metrics={"acc": Accuracy(), "loss": Loss(crit)})

@trainer.on(Events.EPOCH_COMPLETED)
def validate(engine):
    evaluator.run(val_loader)
    m = evaluator.state.metrics
    print("epoch %d: %d training iterations, %d validation iterations, accuracy %.4f loss %.6f"
          % (engine.state.epoch, engine.state.iteration, evaluator.state.iteration, m["acc"], m["loss"]))

trainer.run(train_loader, max_epochs=3)
PY
cat >"$TMP/skorch_qs.py" <<'PY'
import numpy as np, torch, torch.nn as nn
from skorch import NeuralNetClassifier
torch.manual_seed(0)
rng = np.random.RandomState(0)
X = rng.randn(600, 10).astype(np.float32)
y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x):
        return self.layers(x)

net = NeuralNetClassifier(Net, criterion=nn.CrossEntropyLoss, max_epochs=3, lr=0.1, batch_size=32, verbose=0)
net.fit(X, y)
for h in net.history:
    print("epoch %d: %d training batches, %d validation batches, accuracy %.4f loss %.6f"
          % (h["epoch"], sum("train_loss" in b for b in h["batches"]), sum("valid_loss" in b for b in h["batches"]),
             h["valid_acc"], h["valid_loss"]))
PY
# the plain run's batches an epoch: ignite 512 / 32 training, 200 / 64
# validation; skorch 480 / 32 training, 120 / 32 (its 20 % validation split)
for case in "ignite 16 4" "skorch 15 4"; do
  set -- $case
  shim 2 "$PYTHON" "$TMP/${1}_qs.py" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "$1 at np=2: the job failed"; }
  "$PYTHON" - "$TMP/out" "$@" <<'PY' || { cat "$TMP/out"; fail "$1 at np=2: see above"; }
import re, sys
pat = re.compile(r"\[rank (\d)\] epoch (\d): (\d+) training \w+, (\d+) validation \w+, (.*)")
shim = {}
for line in open(sys.argv[1]):
    m = pat.match(line.strip())
    if m:
        shim.setdefault(int(m.group(1)), []).append((int(m.group(3)), int(m.group(4)), m.group(5)))
lib, ptrain, pval = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
assert sorted(shim) == [0, 1] and len(shim[0]) == 3, "expected 3 epochs on each rank: %r" % shim
assert shim[0] == shim[1], "the ranks printed different metrics: %r" % shim
for e, (strain, sval, _) in enumerate(shim[0]):
    if lib == "ignite":  # (its count runs over the epochs)
        strain //= e + 1
    assert sval == pval, "epoch %d: %d validation batches, the plain run's %d (validation sharded)" % (e + 1, sval, pval)
    assert strain == (ptrain + 1) // 2, "epoch %d: %d training batches of the plain run's %d (not sharded)" % (e + 1, strain, ptrain)
print("%s: validation whole (%d batches), training sharded (%d of %d)" % (lib, sval, strain, ptrain))
PY
  ! grep -q "hvdshim\[0\]: warning" "$TMP/out" || { cat "$TMP/out"; fail "$1 at np=2: a warning"; }
done
pass "torch-ignite's and skorch's quick starts at np=2: validation whole on every rank each epoch (the same metrics on both), training sharded, no warning"
