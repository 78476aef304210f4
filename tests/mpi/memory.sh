#!/bin/sh
# Steady state: 10,000 steps of 20 tensors after 1,000 of warm-up, at np=2
# (each step waits for its tensors, so >= 10,000 engine cycles);
# RSS after the steps may not exceed RSS after warm-up by more than 1 MiB.
. "$(dirname "$0")/../lib.sh"
need_mpirun
HVDSHIM_CYCLE_TIME=0.05 mpi 2 "$ENGINE_TEST" memory 10000 >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "memory growth"; }
expect_ok_lines "$TMP/out" 2
grep "memory:" "$TMP/out"
pass "no growth over 10,000 steps"
