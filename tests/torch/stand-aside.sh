#!/bin/sh
# A script that already distributes itself (DDP, Horovod) is left alone, with
# one info line saying so.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
export HVDSHIM_LOG_LEVEL=info
shim 2 "$PYTHON" "$TORCH_DIR/ddp_train.py" "$TMP/store" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "DDP script failed under the shim"; }
# its own DistributedSampler: 64 samples per rank = 4 batches; both ranks print
# (stdout untouched). Not anchored: mpirun forwards each rank's output in
# chunks of its own, so two ranks' lines can meet on one line (seen in CI).
grep -q "rank 0 of 2 batches 4" "$TMP/out" && grep -q "rank 1 of 2 batches 4" "$TMP/out" ||
  { cat "$TMP/out"; fail "DDP script did not run as written"; }
[ "$(grep -c 'hvdshim stands aside' "$TMP/out")" = 1 ] || { cat "$TMP/out"; fail "expected one stand-aside line"; }
grep -q "engine started" "$TMP/out" && { cat "$TMP/out"; fail "the engine started in a DDP script"; }
pass "DDP script left alone"
# A (stand-in) Horovod import
mkdir -p "$TMP/fake/horovod"
: >"$TMP/fake/horovod/__init__.py"
cat >"$TMP/hvd.py" <<'PY'
import torch, horovod
m = torch.nn.Linear(2, 1)
m(torch.ones(1, 2)).sum().backward()
import sys
sys.stdout.write("hvd-script-done\n")  # one write: lines of two ranks stay whole
sys.stdout.flush()
PY
PYTHONPATH="$TMP/fake" shim 2 -x PYTHONPATH "$PYTHON" "$TMP/hvd.py" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "horovod script failed"; }
grep -q "Horovod is imported: the script distributes itself; hvdshim stands aside" "$TMP/out" &&
  [ "$(grep -o 'hvd-script-done' "$TMP/out" | wc -l)" = 2 ] || { cat "$TMP/out"; fail "Horovod script not left alone"; }
pass "Horovod script left alone"
