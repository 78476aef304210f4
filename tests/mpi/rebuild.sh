#!/bin/sh
# The engine's rebuild path (engine_members.c hvd_eng_rebuild), the one a
# job that loses ranks takes: at an engine cycle one rank leaves
# (HVDSHIM_TEST_LEAVE, a setting for tests) and the others rebuild the
# communicator, the control vector, the cache, the coordinator, the process
# sets, the shared-memory transport and the watchdog over the rest, in the
# same cycle, and go on.  engine_test checks every sum against the
# membership it completed in, the renumbering (rank, size, an allgather),
# and that operations caught in flight fail naming the change.  Rank 0
# leaving, a middle rank leaving, and the last one; the job ends 0.
. "$(dirname "$0")/../lib.sh"
need_mpirun
for case in "3 0" "3 1" "4 3"; do
  set -- $case
  np=$1 leaving=$2
  T=90 mpi $np -x HVDSHIM_TEST_LEAVE=$leaving@30 -x HVDSHIM_LOG_LEVEL=info \
    "$ENGINE_TEST" leave $leaving 20 >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "np=$np, rank $leaving leaves: non-zero exit"; }
  expect_ok_lines "$TMP/out" $np
  grep -q "engine_test\[$leaving\]: left the job after" "$TMP/out" || { cat "$TMP/out"; fail "np=$np: rank $leaving did not leave"; }
  [ "$(grep -c "was rank [0-9]* of $np, now [0-9]* of $((np - 1))" "$TMP/out")" = $((np - 1)) ] ||
    { cat "$TMP/out"; fail "np=$np: not every survivor went on over $((np - 1)) ranks"; }
  [ "$(grep -c "the job goes on over $((np - 1)) rank(s) (was $np" "$TMP/out")" = $((np - 1)) ] ||
    { cat "$TMP/out"; fail "np=$np: no rebuild line on every survivor"; }
  pass "np=$np, rank $leaving leaves at a cycle: the $((np - 1)) others rebuild and go on (sums, ranks, allgather right; ended 0)"
done
