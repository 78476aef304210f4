#!/bin/sh
# Stall inspector with shortened limits: (1) a rank 2.5 s late gets a
# warning naming the tensor and the missing rank, uncached and cached, and
# the job completes; (2) a rank that never submits ends the job at the
# shutdown limit, non-zero, with the report, well inside 30 s.
. "$(dirname "$0")/../lib.sh"
need_mpirun
export HVDSHIM_STALL_WARNING_SECONDS=1
mpi 3 "$ENGINE_TEST" stall-warn 2.5 >"$TMP/warn" 2>&1 || { cat "$TMP/warn"; fail "stall-warn run"; }
expect_ok_lines "$TMP/warn" 3
grep -q "stall: allreduce 'late_tensor' submitted by rank(s) 0,1 has waited .* for rank(s) 2" "$TMP/warn" || { cat "$TMP/warn"; fail "no stall warning for late_tensor"; }
grep -q "stall: allreduce 'late_cached' submitted by rank(s) 0,1 .* for rank(s) 2" "$TMP/warn" || { cat "$TMP/warn"; fail "no stall warning for the cached tensor"; }

export HVDSHIM_STALL_SHUTDOWN_SECONDS=3
start=$(date +%s)
T=60 mpi 3 "$ENGINE_TEST" stall-abort >"$TMP/abort" 2>&1 && { cat "$TMP/abort"; fail "stall-abort exited 0"; }
took=$(($(date +%s) - start))
[ "$took" -lt 30 ] || fail "the stalled job took $took s to end"
grep -q "never_everywhere.*ending the job after HVDSHIM_STALL_SHUTDOWN_SECONDS=3" "$TMP/abort" || { cat "$TMP/abort"; fail "no shutdown report"; }
grep -q "FAIL" "$TMP/abort" && { cat "$TMP/abort"; fail "a rank outlived the shutdown"; }
pass "stall warning names ranks; shutdown limit ended the job in $took s"
