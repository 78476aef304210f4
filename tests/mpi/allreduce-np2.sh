#!/bin/sh
# Random tensors (every dtype and op, sizes 0..300k) submitted in a different
# random order on each rank from 3 threads, 3 iterations, checked against the
# reference each rank computes: np=2.
. "$(dirname "$0")/../lib.sh"
need_mpirun
mpi 2 "$ENGINE_TEST" random 22 60 3 3 >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "engine_test random at np=2"; }
expect_ok_lines "$TMP/out" 2
pass "random allreduce at np=2"
