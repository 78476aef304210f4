#!/bin/sh
# The engine start fails at each of its steps (HVDSHIM_TEST_FAIL_START=N,
# a setting for tests): every rank reports the step's reason, the job ends
# with a non-zero status (no hang), and the start undid what it had done:
# no hvdshim thread is left (engine_test counts threads named hvd-*).
# Under MPICH's Hydra, whose proxy does not remove its topology file
# (/tmp/hydra_hwloc_xmlfile_*) when the job is aborted: the ranks' reapers
# remove it (shim/reaper.c).
# make check-sanitize runs it under ASan, and under valgrind (VALGRIND set to
# the memcheck command, ENGINE_TEST to the uninstalled binary): any report fails.
. "$(dirname "$0")/../lib.sh"
need_mpirun
hydra_files() { ls /tmp 2>/dev/null | grep '^hydra_hwloc_xmlfile_' | sort; }
# hydra_left BEFORE: the files not in BEFORE that no process holds open, once
# the reapers have had 3 s (a job of another test running meanwhile holds
# its own)
hydra_left() {
  _i=0
  while :; do
    _left=$(hydra_files | comm -13 "$1" - | while read -r _f; do
      ls -l /proc/[0-9]*/fd 2>/dev/null | grep -q -F "/tmp/$_f" || echo "$_f"; done)
    [ -n "$_left" ] && [ $_i -lt 30 ] || break
    sleep 0.1
    _i=$((_i + 1))
  done
  echo $_left
}
for step in 1 2 3 4 5 6 7 8 9; do
  hydra_files >"$TMP/hydra-before"
  T=60 mpi 2 -x HVDSHIM_TEST_FAIL_START=$step ${VALGRIND:-} "$ENGINE_TEST" collectives >"$TMP/out" 2>&1 &&
    { cat "$TMP/out"; fail "step $step: the job succeeded"; }
  ranks_said "$TMP/out" "hvd_init failed: HVDSHIM_TEST_FAIL_START=$step: the engine start fails at this step" 2 ||
    { cat "$TMP/out"; fail "step $step: no error line naming the step"; }
  grep "hvdshim threads left: [1-9]" "$TMP/out" && { cat "$TMP/out"; fail "step $step: threads left behind"; }
  grep -q "hvdshim threads left: 0" "$TMP/out" || { cat "$TMP/out"; fail "step $step: no thread count"; }
  if [ -n "${VALGRIND:-}" ] && grep "^==[0-9]*==" "$TMP/out"; then
    cat "$TMP/out"
    fail "step $step: valgrind found an error"
  fi
  left=
  [ "$MPI_KIND" = hydra ] && left=$(hydra_left "$TMP/hydra-before")
  [ -z "$left" ] || fail "step $step: Hydra's topology file left in /tmp: $left"
  pass "start fails at step $step: reason on every rank, job ends non-zero, no thread left$([ "$MPI_KIND" = hydra ] && echo ", no Hydra topology file")"
done
