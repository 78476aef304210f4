#!/bin/sh
# The engine start fails at each of its steps (HVDSHIM_TEST_FAIL_START=N,
# a setting for tests): every rank reports the step's reason, the job ends
# with a non-zero status (no hang), and the start undid what it had done:
# no hvdshim thread is left (engine_test counts threads named hvd-*).
# make check-sanitize runs it under ASan, and under valgrind (VALGRIND set to
# the memcheck command, ENGINE_TEST to the uninstalled binary): any report fails.
. "$(dirname "$0")/../lib.sh"
need_mpirun
for step in 1 2 3 4 5 6 7 8 9; do
  T=60 mpi 2 -x HVDSHIM_TEST_FAIL_START=$step ${VALGRIND:-} "$ENGINE_TEST" collectives >"$TMP/out" 2>&1 &&
    { cat "$TMP/out"; fail "step $step: the job succeeded"; }
  ranks_said "$TMP/out" "hvd_init failed: HVDSHIM_TEST_FAIL_START=$step: the engine start fails at this step" 2 ||
    { cat "$TMP/out"; fail "step $step: no error line naming the step"; }
  grep "hvdshim threads left: [1-9]" "$TMP/out" && { cat "$TMP/out"; fail "step $step: threads left behind"; }
  grep -q "hvdshim threads left: 0" "$TMP/out" || { cat "$TMP/out"; fail "step $step: no thread count"; }
  if [ -n "${VALGRIND:-}" ] && grep "^==[0-9]*==" "$TMP/out"; then
    cat "$TMP/out"
    fail "step $step: valgrind found an error"
  fi
  pass "start fails at step $step: reason on every rank, job ends non-zero, no thread left"
done
