#!/bin/sh
# hvd_join (Horovod's join): ranks with fewer steps join early and take part
# in the others' allreduces and allgathers without data; every rank's join
# returns the last rank to join, then all go on (twice: join is reusable).
# A rank that joins while the others exit gets HVD_ERR_SHUTDOWN, no hang.
. "$(dirname "$0")/../lib.sh"
need_mpirun
for np in 2 3 4; do
  mpi $np "$ENGINE_TEST" hvd-join >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "np=$np: non-zero exit"; }
  expect_ok_lines "$TMP/out" $np
  grep -q "hvd_join with uneven steps, twice, last rank $((np - 1))" "$TMP/out" || { cat "$TMP/out"; fail "np=$np: no join line"; }
done
pass "hvd_join at np 2, 3, 4: uneven steps complete over the ranks still stepping; join returns the last rank, twice"
T=60 mpi 3 "$ENGINE_TEST" join-vs-exit >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "join vs exit: non-zero exit"; }
expect_ok_lines "$TMP/out" 3
grep -q "hvd_join failed as expected: hvd_join: a rank has finished (hvd_shutdown or exit)" "$TMP/out" ||
  { cat "$TMP/out"; fail "join vs exit: no shutdown line"; }
pass "hvd_join while the other ranks exit: fails with a line naming why, no hang"
