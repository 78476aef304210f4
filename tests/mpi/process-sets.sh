#!/bin/sh
# Process sets (hvd_process_set_add/remove, hvd_next_process_set): two
# overlapping sets and a one-rank set, their operations interleaved with
# global ones in a different order on every rank, 30 times (the cache answers
# them after the first); results against formulas over the members;
# broadcast, allgather and barrier within a set; errors (a non-member, an
# unknown set, a root outside the set, member lists that differ); members
# that joined; removal; at np 3, 4 and 5.
. "$(dirname "$0")/../lib.sh"
need_mpirun
for np in 3 4 5; do
  mpi $np "$ENGINE_TEST" process-sets >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "np=$np: non-zero exit"; }
  expect_ok_lines "$TMP/out" $np
  [ "$(grep -c 'process sets done' "$TMP/out")" = $np ] || { cat "$TMP/out"; fail "np=$np: not every rank finished"; }
done
pass "process sets at np 3, 4, 5: overlapping sets interleaved with global operations, cached, joined members, errors, removal"
