#!/bin/sh
# Random tensors (every dtype and op, sizes 0..300k) submitted in a different
# random order on each rank from 3 threads, 3 iterations, checked against the
# reference each rank computes: np=4.
. "$(dirname "$0")/../lib.sh"
need_mpirun
mpi 4 "$ENGINE_TEST" random 44 60 3 3 >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "engine_test random at np=4"; }
expect_ok_lines "$TMP/out" 4
pass "random allreduce at np=4"
