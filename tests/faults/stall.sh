#!/bin/sh
# A rank that stops submitting (its script sleeps in the middle of an
# epoch, the process stays alive): the others get a stall warning naming the
# gradient tensor and the missing rank at the warning limit, and the job is
# ended at the shutdown limit (both shortened here), non-zero, well inside 30 s.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
tag="stall-$$"
export HVDSHIM_STALL_WARNING_SECONDS=2 HVDSHIM_STALL_SHUTDOWN_SECONDS=6
t0=$(now_ms)
T=120 shim 3 "$PYTHON" "$FAULT_TRAIN" --fault sleep --fault-rank 2 --fault-at 5 --tag "$tag" >"$TMP/out" 2>&1 &&
  { cat "$TMP/out"; fail "the stalled job exited 0"; }
took=$(($(now_ms) - t0))
[ "$took" -lt 30000 ] || { cat "$TMP/out"; fail "the stalled job took $took ms"; }
grep -q "warning.*stall: \([0-9]* operations\|allreduce 'm0\.[^']*'\) submitted by rank(s) 0,1 \(has waited\|have waited up to\) [0-9.]* s for rank(s) 2.*allreduce 'm0\..*rank(s) 2 submitted nothing else: late" "$TMP/out" ||
  { cat "$TMP/out"; fail "no stall warning naming a gradient and rank 2"; }
grep -q "ending the job after HVDSHIM_STALL_SHUTDOWN_SECONDS=6" "$TMP/out" || { cat "$TMP/out"; fail "no shutdown at the limit"; }
no_leftovers "$tag"
pass "sleeping rank: warned at 2 s naming the tensor and rank 2, job ended at the 6 s limit ($took ms in all)"
