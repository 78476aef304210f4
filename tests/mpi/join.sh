#!/bin/sh
# A rank that finishes early joins (hvd_shutdown, or a normal exit): the
# others' collectives complete without it, averages over the ranks still
# running, a broadcast from it fails on every rank, every process exits 0.
# Run with the last rank and with rank 0 (the coordinator) finishing early.
# After its hvd_shutdown the early rank has no thread left but its main one.
. "$(dirname "$0")/../lib.sh"
need_mpirun
for j in 2 0; do
  mpi 3 "$ENGINE_TEST" join $j >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "join $j: non-zero exit"; }
  expect_ok_lines "$TMP/out" 3
  grep -q "'j.deadroot': root rank $j has finished" "$TMP/out" || { cat "$TMP/out"; fail "join $j: no broadcast error"; }
  grep -q "engine_test\[$j\]: 1 thread left after hvd_shutdown" "$TMP/out" || { cat "$TMP/out"; fail "join $j: threads left"; }
done
pass "a rank finishing early (last, and the coordinator) joins; the job ends with 0"
