#!/bin/sh
# Output, checkpoints, threads and learning rate under the shim, and the shim
# preloaded where it must change nothing (no mpirun; one rank).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
cd "$TMP"
# stdout: rank 0 only; stderr: every rank, prefixed; checkpoint: rank 0 only
shim 2 "$PYTHON" "$TRAIN" --stderr-line --out "$TMP/ck-%p.pt" >out 2>err || { cat out err; fail "np=2 run failed"; }
[ "$(grep -c '^epoch' out)" = 2 ] || { cat out; fail "expected 2 epoch lines (rank 0 only) on stdout"; }
# (not anchored: rank 0's progress line ends without a newline, and the
# launcher may put rank 1's line right after it; seen once under load)
grep -q '\[rank 1\] a line on stderr' err && grep -q '\[rank 0\] a line on stderr' err ||
  { cat err; fail "stderr lines not kept with a rank prefix"; }
# a line redrawn in place (a progress bar): rank 0's keeps the prefix after
# each carriage return, the other ranks' is dropped
[ "$(tr '\r' '\n' <err | grep -c '^\[rank 0\] progress [12]/2$')" = 2 ] && ! grep -q '^\[rank 0\] *$' err &&
  ! grep -q 'rank 1.*progress' err || { cat -A err; fail "progress bar: expected rank 0's alone, prefixed after each return"; }
[ "$(ls ck-*.pt | wc -l)" = 1 ] || { ls; fail "expected one checkpoint (rank 0)"; }
pass "stdout and checkpoint from rank 0 only, stderr prefixed, a progress bar from rank 0 only"
# logging to the console, configured before `import torch` and after: rank
# 0's records prefixed, the other ranks' below WARNING dropped; a file
# handler's left alone
cat >logs.py <<'EOF_PY'
import logging
import sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
import torch
logging.getLogger("file").addHandler(logging.FileHandler(sys.argv[1]))
logging.getLogger("file").propagate = False
late = logging.getLogger("late")
late.addHandler(logging.StreamHandler())
late.propagate = False
out = logging.getLogger("out")
out.addHandler(logging.StreamHandler(sys.stdout))
out.propagate = False
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    loss = m(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()
    logging.info("step %d loss %.4f", step, loss.item())
logging.getLogger("file").info("to the file")
late.info("late info")
late.warning("late warning")
out.info("out info")
out.warning("out warning")
EOF_PY
shim 2 "$PYTHON" logs.py "$TMP/log-%p.txt" >out 2>err || { cat out err; fail "logging run failed"; }
[ "$(grep -c '^\[rank 0\] INFO step [0-2] loss' err)" = 3 ] && [ "$(grep -c '^\[rank 0\] late info$' err)" = 1 ] &&
  [ "$(grep -c 'late warning$' err)" = 2 ] && [ "$(grep -c 'INFO\|late info' err)" = 4 ] &&
  [ "$(grep -c '^\[rank 1\] late warning$' err)" = 1 ] || { cat err; fail "logging: expected rank 0's records, rank 1's warnings"; }
grep -q "^to the file$" "$TMP/log-"*.txt || { cat "$TMP/log-"*.txt; fail "logging: the file handler lost a record"; }
# a handler on stdout: rank 0's records on stdout; rank 1's warning on the prefixed stderr, its info nowhere
[ "$(grep -c '^out info$' out)" = 1 ] && [ "$(grep -c '^out warning$' out)" = 1 ] &&
  [ "$(grep -c '^\[rank 1\] out warning$' err)" = 1 ] && ! grep -q 'out info' err ||
  { cat out err; fail "logging to stdout: expected rank 0's records on stdout and rank 1's warning on stderr"; }
HVDSHIM_WORKER_STDOUT=1 shim 2 "$PYTHON" logs.py "$TMP/log-%p.txt" >out 2>err || { cat out err; fail "logging run failed"; }
[ "$(grep -c '^\[rank 1\] INFO step [0-2] loss' err)" = 3 ] || { cat err; fail "HVDSHIM_WORKER_STDOUT=1: expected rank 1's records"; }
[ "$(grep -c '^\[rank [01]\] out info$' out)" = 2 ] && ! grep -q '^out info' out ||
  { cat out; fail "HVDSHIM_WORKER_STDOUT=1: a handler on stdout: expected every rank's records prefixed"; }
pass "console logging (configured before and after import torch): rank 0's records prefixed, the others' warnings only (all with HVDSHIM_WORKER_STDOUT=1); a handler on stdout: rank 0's on stdout, the others' warnings on stderr (every rank's, prefixed, with HVDSHIM_WORKER_STDOUT=1)"
# a warning torch raises naming its caller (stacklevel=2) names torch's
# line, as in the plain run: torch 2.x's pin_memory without an accelerator,
# from the DataLoader iterator's __init__ (it named the adapter's wrapper
# of that __init__, which users took for hvdshim's own warning)
cat >warnloc.py <<'EOF_PY'
import warnings
import torch
m = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
ds = torch.utils.data.TensorDataset(torch.randn(8, 2))
with warnings.catch_warnings(record=True) as got:
    warnings.simplefilter("always")
    for epoch in range(2):
        for (x,) in torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True, pin_memory=True):
            opt.zero_grad()
            m(x).sum().backward()
            opt.step()
print("pin_memory warnings named:", " ".join(sorted({w.filename for w in got if "pin_memory" in str(w.message)})) or "none")
EOF_PY
shim 2 "$PYTHON" warnloc.py >out 2>err || { cat out err; fail "warning location run failed"; }
named=$(sed -n 's/^pin_memory warnings named: //p' out)
case $named in
  none) echo "no pin_memory warning from this torch ($("$PYTHON" -c 'import torch; print(torch.__version__)')): the location not checked" ;;
  */torch/utils/data/dataloader.py) pass "a warning torch raises in a DataLoader iterator's __init__ names torch's line ($named), not the adapter's" ;;
  *) cat out err; fail "torch's pin_memory warning names $named, not torch's dataloader.py" ;;
esac
rm -f ck-*.pt
HVDSHIM_WORKER_STDOUT=1 HVDSHIM_SAVE_RANKS=all shim 2 "$PYTHON" "$TRAIN" --stderr-line --out "$TMP/ck-%p.pt" >out 2>&1 ||
  { cat out; fail "np=2 run with WORKER_STDOUT/SAVE_RANKS failed"; }
# (not anchored: mpirun forwards each rank's output in chunks of its own,
# and a line of rank 0's can land inside rank 1's bar before its newline)
grep -q "\[rank 1\] epoch 1" out && grep -q "\[rank 0\] epoch 1" out && [ "$(ls ck-*.pt | wc -l)" = 2 ] &&
  [ "$(grep -o '\[rank 1\] progress [12]/2' out | wc -l)" = 2 ] ||
  { cat out; ls; fail "HVDSHIM_WORKER_STDOUT=1 / HVDSHIM_SAVE_RANKS=all not honoured"; }
pass "HVDSHIM_WORKER_STDOUT=1 keeps every rank's stdout and progress bars, prefixed; HVDSHIM_SAVE_RANKS=all saves on both"
# threads: cores / local ranks unless the user chose
cores=$("$PYTHON" -c 'import torch; print(torch.get_num_threads())')
want=$(( $(nproc --all) / 2 )); [ "$want" -ge 1 ] || want=1; [ "$want" -le "$cores" ] || want=$cores
(unset OMP_NUM_THREADS; shim 2 "$PYTHON" "$TRAIN" --epochs 1 --print-threads --out ck.pt) >out 2>&1 ||
  { cat out; fail "threads run failed"; }
grep -q "^threads $want\$" out || { cat out; fail "expected $want intra-op threads per rank (2 local ranks)"; }
OMP_NUM_THREADS=2 shim 2 "$PYTHON" "$TRAIN" --epochs 1 --print-threads --out ck.pt >out 2>&1
grep -q "^threads 2\$" out || { cat out; fail "a user-set OMP_NUM_THREADS=2 was overridden"; }
pass "intra-op threads: $want per rank by default, the user's OMP_NUM_THREADS kept"
# learning rate scaling
shim 2 "$PYTHON" "$TRAIN" --epochs 1 --print-lr --out ck.pt 2>&1 | grep -q '^lr 0.1$' || fail "lr changed without HVDSHIM_SCALE_LR"
HVDSHIM_SCALE_LR=1 shim 2 "$PYTHON" "$TRAIN" --epochs 1 --print-lr --out ck.pt 2>&1 | grep -q '^lr 0.2$' ||
  fail "HVDSHIM_SCALE_LR=1 did not double the lr at np=2"
pass "HVDSHIM_SCALE_LR"
# SIGTERM in a rank raises KeyboardInterrupt (the launcher's stop runs the
# script's cleanup: tests/faults/sigint.sh); processes forked from the rank
# keep Python's default: `with Pool()` ends its workers with SIGTERM
# (Pool.terminate), quietly (each printed a KeyboardInterrupt traceback)
cat >pool.py <<'EOF_PY'
import multiprocessing
import signal
import torch
def square(x):
    return x * x
if __name__ == "__main__":
    with multiprocessing.get_context("fork").Pool(2) as pool:
        print("sum", sum(pool.map(square, range(100))))
    m = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        m(torch.randn(8, 4)).sum().backward()
        opt.step()
    print("sigterm handled", signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL)
EOF_PY
shim 2 "$PYTHON" pool.py >out 2>err || { cat out err; fail "Pool run failed"; }
grep -q "^sum 328350$" out && grep -q "^sigterm handled True$" out && ! grep -q "Traceback\|KeyboardInterrupt" err ||
  { cat out err; fail "with Pool(): expected its workers ended quietly (and the rank's SIGTERM handled)"; }
pass "SIGTERM: the rank's handled (KeyboardInterrupt), its forks' Python's default (a Pool's workers end quietly)"
# changes nothing: preloaded without mpirun, and at one rank
"$PYTHON" "$TRAIN" --out plain.pt >plain.out 2>plain.err || fail "plain run failed"
LD_PRELOAD="$LIB" "$PYTHON" "$TRAIN" --out pre.pt >pre.out 2>pre.err || fail "preloaded run failed"
cmp -s plain.out pre.out && cmp -s plain.err pre.err && same plain.pt pre.pt 0 >/dev/null ||
  { diff plain.out pre.out; cat pre.err; fail "preloading without mpirun changed the run"; }
pass "preloaded without mpirun: identical output and weights"
shim 1 "$PYTHON" "$TRAIN" --out one.pt >one.out 2>one.err || { cat one.err; fail "np=1 run failed"; }
cmp -s plain.out one.out && same plain.pt one.pt 0 >/dev/null ||
  { diff plain.out one.out; cat one.err; fail "np=1 under the shim changed the run"; }
pass "np=1: identical output and weights"
