#!/bin/sh
# Broadcast from every root, allgather with per-rank row counts (some zero),
# barrier, callbacks, hvd_test and bounded waits: np 1..4.
. "$(dirname "$0")/../lib.sh"
need_mpirun
for np in 1 2 3 4; do
  mpi $np "$ENGINE_TEST" collectives >"$TMP/o$np" 2>&1 || { cat "$TMP/o$np"; fail "collectives at np=$np"; }
  expect_ok_lines "$TMP/o$np" $np
done
pass "broadcast, allgather, barrier, callbacks at np 1..4"
