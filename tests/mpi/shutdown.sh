#!/bin/sh
# A rank that leaves early: the others' pending handle fails naming it (no
# hang), later submissions are refused, every process exits 0.
. "$(dirname "$0")/../lib.sh"
need_mpirun
mpi 3 "$ENGINE_TEST" shutdown >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "shutdown"; }
expect_ok_lines "$TMP/out" 3
grep -q "'orphan' cannot complete: rank(s) 2 shut down" "$TMP/out" || { cat "$TMP/out"; fail "message"; }
pass "early leaver handled"
