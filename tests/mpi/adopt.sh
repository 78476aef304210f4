#!/bin/sh
# A program that initializes and finalizes MPI itself: MPI_Init is upgraded
# to MPI_THREAD_MULTIPLE, the engine adopts MPI and stops at MPI_Finalize.
. "$(dirname "$0")/../lib.sh"
need_mpirun
mpi 2 "$ENGINE_TEST" adopt >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "adopt"; }
expect_ok_lines "$TMP/out" 2
pass "adopted MPI"
