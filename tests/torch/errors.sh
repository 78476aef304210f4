#!/bin/sh
# What goes wrong gets one clear message on every rank, and no hang.
# ERRORS_SHORT=1 (check-stacks on sid) leaves out the cases that are the
# adapter's own decisions over any torch (a loader only evaluated, an
# iterable kept whole, an unused branch, split mode's different paths and
# its no-loader case, a complex parameter): run on Debian 12.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
T=120
# models that differ across ranks: the first difference is named
LD_PRELOAD="$LIB" mpi 2 -x LD_PRELOAD "$(by_rank "$PYTHON $TRAIN --out $TMP/a.pt --hidden 32" \
  "$PYTHON $TRAIN --out $TMP/a.pt --hidden 24")" >"$TMP/out" 2>&1 &&
  { cat "$TMP/out"; fail "different models were accepted"; }
msg="model 0 (Sequential) differs across ranks: entry 0: rank 0 has 'p 0.weight 32x10 float32', rank 1 has 'p 0.weight 24x10 float32'"
ranks_said "$TMP/out" "$msg" 2 || { cat "$TMP/out"; fail "expected the difference named"; }
pass "different models: $msg"
# split mode with a batch size not divisible by the ranks
HVDSHIM_DATA=split shim 4 "$PYTHON" "$TRAIN" --batch 30 --out "$TMP/a.pt" >"$TMP/out" 2>&1 &&
  { cat "$TMP/out"; fail "batch 30 at np=4 was accepted in split mode"; }
grep -q "HVDSHIM_DATA=split needs the DataLoader batch size (30) to be divisible by the number of ranks (4)" "$TMP/out" ||
  { cat "$TMP/out"; fail "no clear split-mode error"; }
# an hvdshim error the script does not catch: its message and the script's
# line (one write: both or neither), no traceback through torch and the
# adapter.  (The launcher may end the other ranks before they print: each
# rank that printed is counted.)
said=$(grep -c "^\[rank [0-3]\] hvdshim: HVDSHIM_DATA=split needs the DataLoader batch size (30)" "$TMP/out")
[ "$said" -ge 1 ] && [ "$(grep -c "^\[rank [0-3]\]   (raised at .*train.py:[0-9]*, in [a-z_]*; HVDSHIM_LOG_LEVEL=debug prints the traceback)$" "$TMP/out")" = "$said" ] &&
  ! grep -q "Traceback" "$TMP/out" || { cat "$TMP/out"; fail "expected two lines per rank, no traceback"; }
HVDSHIM_LOG_LEVEL=debug HVDSHIM_DATA=split shim 2 "$PYTHON" "$TRAIN" --batch 31 --out "$TMP/a.pt" >"$TMP/out" 2>&1 &&
  { cat "$TMP/out"; fail "batch 31 at np=2 was accepted in split mode"; }
grep -q "^\[rank [01]\] Traceback" "$TMP/out" && ! grep -q "(raised at" "$TMP/out" ||
  { cat "$TMP/out"; fail "HVDSHIM_LOG_LEVEL=debug: expected the traceback"; }
pass "split mode: indivisible batch size named, with the script's line (the traceback at debug)"
if [ "${ERRORS_SHORT:-0}" != 1 ]; then
# ... but a loader only evaluated is never cut: its batch size need not
# divide (pytorch/examples' mnist: a test batch of 1000 at np=3)
cat >"$TMP/evalbatch.py" <<'PY'
import torch
from torch.utils.data import DataLoader, TensorDataset
X, Y = torch.randn(64, 3), torch.randn(64, 1)
train = DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True)
test = DataLoader(TensorDataset(X, Y), batch_size=1001)
m = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for epoch in range(2):
    m.train()
    for x, y in train:
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    m.eval()
    with torch.no_grad():
        print("epoch", epoch, "test", sum(float(torch.nn.functional.mse_loss(m(x), y)) for x, y in test))
PY
HVDSHIM_DATA=split shim 2 "$PYTHON" "$TMP/evalbatch.py" >"$TMP/out" 2>&1 && [ "$(grep -c "^epoch" "$TMP/out")" = 2 ] ||
  { cat "$TMP/out"; fail "split mode, an evaluation loader of batch 1001 at np=2: refused"; }
pass "split mode: a loader only evaluated may have any batch size (1001 at np=2)"
# an iterable dataset kept whole (HVDSHIM_DATA_ITERABLE=whole): one warning
# per rank, the run completes (dealt by default: tests/torch/iterable.sh)
HVDSHIM_DATA_ITERABLE=whole shim 2 "$PYTHON" "$TRAIN" --case iterable --out "$TMP/a.pt" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "iterable run failed"; }
[ "$(grep -c "DataLoader 0 (made at train.py:[0-9]*) is iterated in training but not sharded: it reads an IterableDataset and HVDSHIM_DATA_ITERABLE=whole" "$TMP/out")" = 2 ] || { cat "$TMP/out"; fail "expected one warning per rank"; }
pass "iterable dataset kept whole: warned once per rank"
# a parameter without gradient on some ranks in some steps: no hang, same weights
HVDSHIM_WORKER_STDOUT=1 shim 2 "$PYTHON" "$TRAIN" --case unused --epochs 3 --out "$TMP/a.pt" >"$TMP/out" 2>&1 ||
  { cat "$TMP/out"; fail "unused-branch run failed"; }
[ "$(grep -o 'checksum .*' "$TMP/out" | sort -u | wc -l)" = 1 ] || { cat "$TMP/out"; fail "ranks ended with different weights"; }
pass "unused branch: finished, ranks agree"
fi
# the same with a hook of the script's on each gradient (averaged inside
# backward, before the hook): a rank whose backward skips a hooked parameter
# leaves the others waiting for it; the deadlock check ends the job, naming
# the gradient each rank waits for
HVDSHIM_DEADLOCK_SECONDS=2 shim 2 "$PYTHON" "$TRAIN" --case unused --clamp-hooks --epochs 3 --out "$TMP/a.pt" >"$TMP/out" 2>&1 &&
  { cat "$TMP/out"; fail "hooked gradients of a branch some ranks skip: the run did not fail"; }
grep -q "deadlock: .* rank [01] waits for allreduce 'hvdshim.hooked.m0.[ab].\(weight\|bias\)'" "$TMP/out" ||
  { cat "$TMP/out"; fail "hooked gradients of a branch some ranks skip: no line naming the gradient waited for"; }
pass "hooked gradients of a branch some ranks skip: the job ends after HVDSHIM_DEADLOCK_SECONDS, naming the gradient waited for"
if [ "${ERRORS_SHORT:-0}" != 1 ]; then
# split mode: a loop that ends on a value of the rank's own slice (an
# outlier row: one rank's slice holds it) ends on one rank only; the others
# trained on alone, silently or with a misleading line about the loss; the
# job now ends, saying the ranks took different paths
HVDSHIM_DATA=split shim 2 "$PYTHON" "$TRAIN" --epochs 1 --stop-above 2.6 --out "$TMP/a.pt" >"$TMP/out" 2>&1 &&
  { cat "$TMP/out"; fail "split mode, a rank ending its loop alone: the run did not fail"; }
grep -q "^\[rank [01]\] hvdshim: split mode: 1 of 2 ranks finished the script while this rank still trains" "$TMP/out" ||
  { cat "$TMP/out"; fail "split mode, a rank ending its loop alone: no line saying so"; }
pass "split mode, a loop ended on one rank's own slice: the job ends, saying the ranks took different paths"
# split mode with no DataLoader in training (batches the script draws, as
# pytorch/examples' regression does, until a value of its own): nothing was
# cut, so a rank that stops first leaves the others to train on, as in shard
# mode (one warning, status 0); the rank left alone is not told that every
# rank trained on the same batches (it compared itself with itself)
cat >"$TMP/noloader.py" <<'PY'
import os
import torch
m = torch.nn.Linear(1, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
stop = 1 if os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK")) == "1" else 6
for i in range(stop):
    x = torch.randn(4, 1)
    opt.zero_grad()
    (m(x) - x).pow(2).mean().backward()
    opt.step()
print("stopped after", stop)
PY
HVDSHIM_DATA=split shim 2 "$PYTHON" "$TMP/noloader.py" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "split mode, no DataLoader, a rank stopping first: the job failed"; }
grep -q "1 of 2 ranks finished the script while this rank still trains (its backward after optimizer step 1)" "$TMP/out" &&
  ! grep -q "trained on the same batches\|split mode: 1 of 2" "$TMP/out" ||
  { cat "$TMP/out"; fail "split mode, no DataLoader, a rank stopping first: expected shard mode's warning alone"; }
pass "split mode with no DataLoader in training, a rank stopping first: the others train on, one warning, status 0"
fi
# a script that trains on torch.autograd.grad's gradients (no backward):
# they are not averaged, and rank 0 says so once; one whose gradient
# penalty takes torch.autograd.grad with create_graph (a backward follows)
# hears nothing
cat >"$TMP/agrad.py" <<'PY'
import sys
import torch
torch.manual_seed(0)
X, Y = torch.randn(256, 8), torch.randn(256, 1)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
params = list(model.parameters())
for x, y in torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=8):
    if sys.argv[1] == "grad":
        loss = torch.nn.functional.mse_loss(model(x), y)
        with torch.no_grad():
            for p, g in zip(params, torch.autograd.grad(loss, params)):
                p -= 0.05 * g
    else:
        x.requires_grad_(True)
        out = model(x)
        g, = torch.autograd.grad(out.sum(), x, create_graph=True)
        (torch.nn.functional.mse_loss(out, y) + 0.1 * g.pow(2).mean()).backward()
        with torch.no_grad():
            for p in params:
                p -= 0.05 * p.grad
                p.grad = None
PY
for kind in grad penalty; do
  shim 2 "$PYTHON" "$TMP/agrad.py" $kind >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "autograd.grad ($kind): the run failed"; }
  want=0; [ $kind = grad ] && want=1
  [ "$(grep -c "torch.autograd.grad has returned gradients of the model's parameters (first 'm0.0.weight') 16 times and backward() has not run" "$TMP/out")" = $want ] ||
    { cat "$TMP/out"; fail "autograd.grad ($kind): expected $want warning(s)"; }
done
pass "training on torch.autograd.grad's gradients: rank 0 warns once that they are not averaged (a gradient penalty's create_graph call: no warning)"
if [ "${ERRORS_SHORT:-0}" != 1 ]; then
# a parameter of a dtype the shim cannot average (complex): named, before training
shim 2 "$PYTHON" "$top_srcdir/tests/faults/fault_train.py" --fault complex >"$TMP/out" 2>&1 &&
  { cat "$TMP/out"; fail "a complex parameter was accepted"; }
ranks_said "$TMP/out" "parameter 'phase' is complex64; hvdshim averages float32" 2 ||
  { cat "$TMP/out"; fail "expected the complex parameter named"; }
grep -q "\] step 1$" "$TMP/out" && fail "training started despite the complex parameter"
pass "complex parameter named before the first step"
fi
# an interpreter started with -I (or -E, -S) never loads the bootstrap
# (PYTHONPATH, the site module): the job ends with one line before the
# script runs, not with every rank training alone; other options (-u,
# -W ARG, -X ARG before the script) distribute as usual
shim 2 "$PYTHON" -u -W ignore -I "$TRAIN" --out "$TMP/i.pt" >"$TMP/out" 2>&1 &&
  { cat "$TMP/out"; fail "python -I: the job exited 0"; }
msg="this Python was started with -I, which makes it ignore PYTHONPATH"
ranks_said "$TMP/out" "$msg" 2 && [ ! -e "$TMP/i.pt" ] ||
  { cat "$TMP/out"; fail "python -I: expected the line (rank 0's; rank 1's too if the launcher had not ended it) and no checkpoint"; }
shim 2 "$PYTHON" -u -W ignore -X faulthandler "$TRAIN" --out "$TMP/i.pt" >"$TMP/out" 2>&1 && [ -e "$TMP/i.pt" ] &&
  ! grep -q "started with" "$TMP/out" || { cat "$TMP/out"; fail "python -u -W ignore -X faulthandler: not run as usual"; }
pass "python -I: one line (\"$msg ...\"), the job ended before the script; -u -W ARG -X ARG run as usual"
# a Horovod script whose hvd.init() fails (the engine's start: a setting,
# the MPI): Horovod's HorovodInternalError, which the script can catch, and
# uncaught the two lines, the cause and the script's own line, not a
# traceback through the served package on every rank
cat >"$TMP/hvd_init.py" <<'PY'
import sys
import horovod.torch as hvd
try:
    hvd.init()
except hvd.HorovodInternalError as e:
    sys.stdout.write("caught: %s\n" % type(e).__name__)  # (one write: both ranks print, through one launcher)
    sys.stdout.flush()
hvd.init()
PY
HVDSHIM_TEST_FAIL_START=1 shim 2 "$PYTHON" "$TMP/hvd_init.py" >"$TMP/out" 2>&1 && { cat "$TMP/out"; fail "hvd.init failing: the job exited 0"; }
said=$(grep -c "^\(\[rank [01]\] \)\?hvdshim: hvd.init failed: HVDSHIM_TEST_FAIL_START=1: the engine start fails at this step" "$TMP/out")
grep -q "caught: HorovodInternalError" "$TMP/out" && [ "$said" -ge 1 ] &&
  [ "$(grep -c "^\(\[rank [01]\] \)\?  (raised at .*hvd_init.py:8, in <module>; HVDSHIM_LOG_LEVEL=debug prints the traceback)$" "$TMP/out")" = "$said" ] &&
  ! grep -q "Traceback" "$TMP/out" || { cat "$TMP/out"; fail "hvd.init failing: expected HorovodInternalError caught, then the cause and the script's line, no traceback"; }
pass "a Horovod script's hvd.init() failing: HorovodInternalError (caught by the script), and uncaught the cause and the script's line"
