#!/bin/sh
# Ranks disagreeing on count, dtype, op or root: every rank's handle fails
# with a message naming the tensor and the ranks; then the engine goes on.
. "$(dirname "$0")/../lib.sh"
need_mpirun
mpi 3 "$ENGINE_TEST" mismatch >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "mismatch"; }
expect_ok_lines "$TMP/out" 3
grep -q "allreduce 'bad_count': ranks disagree on the count: 10 elements on ranks 0,1; 11 elements on rank 2" "$TMP/out" ||
  { cat "$TMP/out"; fail "count mismatch message"; }
pass "mismatches reported on every rank"
