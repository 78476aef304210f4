#!/bin/sh
# hvd_reducescatter_async and hvd_alltoall_async: every dtype and op with a
# row count the ranks do not divide (Horovod's split), uneven alltoall splits
# with zeros, over every rank and over a process set; with the last rank
# joined (identity contribution, averages over the others, nothing sent);
# mismatched row sizes and negative splits; at np 2, 3 and 4.
. "$(dirname "$0")/../lib.sh"
need_mpirun
for np in 2 3 4; do
  mpi $np "$ENGINE_TEST" scatter >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "np=$np: non-zero exit"; }
  expect_ok_lines "$TMP/out" $np
  [ "$(grep -c 'reducescatter and alltoall done' "$TMP/out")" = $np ] || { cat "$TMP/out"; fail "np=$np: not every rank finished"; }
done
pass "reducescatter (9 dtypes x 5 ops) and alltoall at np 2, 3, 4, over every rank, a process set and with a joined rank"
