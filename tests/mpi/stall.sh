#!/bin/sh
# Stall inspector with shortened limits: (1) a rank 2.5 s late gets a
# warning naming the tensor and the missing rank, uncached and cached, and
# the job completes; (2) a rank that never submits ends the job at the
# shutdown limit, non-zero, with the report, well inside 30 s; (3) a rank
# that submits something else is told from a late one, one line per group.
. "$(dirname "$0")/../lib.sh"
need_mpirun
export HVDSHIM_STALL_WARNING_SECONDS=1
mpi 3 "$ENGINE_TEST" stall-warn 2.5 >"$TMP/warn" 2>&1 || { cat "$TMP/warn"; fail "stall-warn run"; }
expect_ok_lines "$TMP/warn" 3
grep -q "stall: allreduce 'late_tensor' submitted by rank(s) 0,1 has waited .* for rank(s) 2; rank(s) 2 submitted nothing else: late" "$TMP/warn" || { cat "$TMP/warn"; fail "no stall warning for late_tensor"; }
grep -q "stall: allreduce 'late_cached' submitted by rank(s) 0,1 .* for rank(s) 2" "$TMP/warn" || { cat "$TMP/warn"; fail "no stall warning for the cached tensor"; }

export HVDSHIM_STALL_SHUTDOWN_SECONDS=3
start=$(date +%s)
T=60 mpi 3 "$ENGINE_TEST" stall-abort >"$TMP/abort" 2>&1 && { cat "$TMP/abort"; fail "stall-abort exited 0"; }
took=$(($(date +%s) - start))
[ "$took" -lt 30 ] || fail "the stalled job took $took s to end"
grep -q "never_everywhere.*ending the job after HVDSHIM_STALL_SHUTDOWN_SECONDS=3" "$TMP/abort" || { cat "$TMP/abort"; fail "no shutdown report"; }
grep -q "FAIL" "$TMP/abort" && { cat "$TMP/abort"; fail "a rank outlived the shutdown"; }
pass "stall warning names ranks; shutdown limit ended the job in $took s"

# (3) one rank submits something else: one line per group of stalled
# operations (not one per tensor), saying the ranks disagree
T=60 mpi 3 "$ENGINE_TEST" stall-other >"$TMP/other" 2>&1 && { cat "$TMP/other"; fail "stall-other exited 0"; }
grep -q "warning.*stall: 4 operations submitted by rank(s) 0,1 have waited up to [0-9.]* s for rank(s) 2 (allreduce 'expected_[a-d]', allreduce 'expected_[a-d]', allreduce 'expected_[a-d]', ...); rank(s) 2 submitted other operations instead (allreduce 'something_else'): the ranks disagree" "$TMP/other" ||
  { cat "$TMP/other"; fail "no grouped 'disagree' stall line"; }
grep -q "warning.*stall: allreduce 'something_else' submitted by rank(s) 2 has waited .* for rank(s) 0,1; rank(s) 0,1 submitted other operations instead" "$TMP/other" ||
  { cat "$TMP/other"; fail "no stall line for the odd rank's operation"; }
lines=$(grep -c "warning.*stall: " "$TMP/other")
[ "$lines" -le 6 ] || { cat "$TMP/other"; fail "$lines stall warning lines in 3 s (one per group per second expected)"; }
pass "a rank submitting something else: $lines grouped stall lines, 'the ranks disagree'"
