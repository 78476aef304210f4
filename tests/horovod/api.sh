#!/bin/sh
# Horovod's PyTorch API served by hvdshim (tests/horovod/api.py): every call,
# dtype and op, async/poll/synchronize, in-place, autograd, objects, optimizer
# state, SyncBatchNorm, process sets (even/odd and overlapping), and the
# errors, at np 2 and 3.  The script checks each
# result against its formula on every rank; a rank that finds a difference
# fails the job.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
for np in 2 3; do
  shim $np "$PYTHON" "$top_srcdir/tests/horovod/api.py" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "np=$np: the API suite failed"; }
  grep -q "^api done 24$" "$TMP/out" || { cat "$TMP/out"; fail "np=$np: not every case ran"; }
  # the errors named their cause on every rank (api.py checks each message),
  # and the job went on; the script caught them, so nothing else said them
  # (as in Horovod: the engine's own line is at HVDSHIM_LOG_LEVEL=info)
  ! grep -q "ranks disagree" "$TMP/out" || { cat "$TMP/out"; fail "np=$np: a mismatch the script caught was printed"; }
  pass "np=$np: $(grep -c '^ok ' "$TMP/out") API cases match their formulas; mismatches raise on every rank"
done
