#!/bin/sh
# A rank killed with SIGKILL in the middle of training (an unmodified
# script under the shim, np=3): every other rank is gone within 30 s, the
# lost rank is named, no process is left behind.
#  1. mpirun's default policy (it aborts the job itself; it names the rank;
#     under Hydra the job runs through hvdrun: lib.sh's hvdrun_job);
#  2. mpirun --enable-recovery (Hydra: -disable-auto-cleanup; it does not
#     abort: the shim's watchdog must notice, name the rank and end the job);
#  3. as 2, the victim is rank 0 (coordinator, timeline writer): the
#     timeline it was writing is still valid JSON.
# Under MPICH's Hydra the launcher names no rank in 1 (its banner gives one
# process's pid) and may end the job itself in 2 and 3.
# The victim's reaper is titled as such in ps (not the rank's command line).
# The script trains inside `with tempfile.TemporaryDirectory()`: no rank's
# is left in the job's TMPDIR, though the launcher ends the survivors with
# SIGKILL (no `with` runs).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
run() { # run NAME VICTIM MPIRUN-OPTIONS...
  _name=$1 _victim=$2
  shift 2
  tag="kill-$_name-$$"
  mkdir -p "$TMP/tmp-$_name"
  TMPDIR="$TMP/tmp-$_name" T=120 $launch 3 "$@" "$PYTHON" "$FAULT_TRAIN" --steps 100000 --step-sleep 0.02 --tempdir \
    --tag "$tag" >"$TMP/$_name" 2>&1 &
  job=$!
  wait_for "$TMP/$_name" "\[rank $_victim\] step 20" 60
  pid=$(rank_pid "$tag" "$_victim") || { cat "$TMP/$_name"; fail "$_name: rank $_victim not found"; }
  # (the victim's reaper shows as such, not as a second copy of the rank)
  grep -qzx "hvdshim-reaper (of rank pid $pid)" $(for p in $(job_processes); do echo "/proc/$p/cmdline"; done) 2>/dev/null ||
    { ps -eo pid,ppid,comm,args; fail "$_name: no process titled 'hvdshim-reaper (of rank pid $pid)'"; }
  t0=$(now_ms)
  kill -9 "$pid"
  wait "$job"
  rc=$?
  took=$(($(now_ms) - t0))
  [ "$took" -lt 30000 ] || { cat "$TMP/$_name"; fail "$_name: the job took $took ms to end"; }
  no_leftovers "$tag"
  _left=$(tmp_settled "$TMP/tmp-$_name")
  [ -z "$_left" ] || { ls -lR "$TMP/tmp-$_name"; fail "$_name: left in the job's TMPDIR: $_left"; }
  echo "$_name: rank $_victim (pid $pid) killed; job ended after $took ms, mpirun status $rc"
}
RECOVER=--enable-recovery
[ "$MPI_KIND" = hydra ] && RECOVER=-disable-auto-cleanup
# (MPICH 4.2's Hydra may end 0 after a rank's SIGKILL: hvdrun_job there)
launch=shim
[ "$MPI_KIND" = hydra ] && launch=hvdrun_job
run default 1
launch=shim
[ "$rc" != 0 ] || { cat "$TMP/default"; fail "default: mpirun exited 0"; }
# the launcher's line may wrap (Open MPI 5+): read the output as one line
# (Hydra names no rank: its banner gives the pid of the first process it
# saw end, often a survivor it killed; only the job's end is checked there)
[ "$MPI_KIND" = hydra ] || tr -s '\n ' '  ' <"$TMP/default" | grep -q "process rank 1 with PID .* exited on signal 9\|lost rank 1 " ||
  { cat "$TMP/default"; fail "default: the lost rank is not named"; }
run recovery 1 $RECOVER
# (Hydra's proxy answers the death with SIGUSR1 to every rank's process
# group, which the ranks bear (reaper.h), and in about half the runs with
# SIGKILL right after it, -disable-auto-cleanup or not: MPICH 4.2.1, seen
# with perf's signal:signal_generate; then it names no rank, as in 1)
grep -q "lost rank 1 (pid $pid on .*): the process is gone" "$TMP/recovery" ||
  { [ "$MPI_KIND" = hydra ] && grep -q "EXIT STRING: Killed (signal 9)" "$TMP/recovery"; } ||
  { cat "$TMP/recovery"; fail "recovery: the shim did not name the lost rank"; }
! grep -q "User defined signal 1" "$TMP/recovery" || { cat "$TMP/recovery"; fail "recovery: a rank ended by Hydra's SIGUSR1"; }
# (rank 2 waits a second for rank 0 to end the job; where it still runs
# then, it names the rank found gone, not rank 0, which ended the job)
! grep -q "lost rank 0" "$TMP/recovery" || { cat "$TMP/recovery"; fail "recovery: rank 0, which ended the job, named as lost"; }
export HVDSHIM_TIMELINE="$TMP/timeline.json"
run coordinator 0 $RECOVER
# (Hydra ends the job itself when rank 0 dies, even without auto-cleanup:
# "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)")
grep -q "lost rank 0 (pid $pid on .*): the process is gone" "$TMP/coordinator" ||
  { [ "$MPI_KIND" = hydra ] && grep -q "EXIT STRING: Killed (signal 9)" "$TMP/coordinator"; } ||
  { cat "$TMP/coordinator"; fail "coordinator: the shim did not name the lost rank"; }
"$PYTHON" - "$TMP/timeline.json" <<'PY' || fail "the timeline of the killed rank 0 is not valid JSON"
import json, sys
ev = json.load(open(sys.argv[1]))
assert len(ev) > 10, len(ev)
print("timeline of the killed writer: valid JSON, %d events" % len(ev))
PY
pass "SIGKILL: ranks ended within 30 s, lost rank named, no leftovers, no rank's TemporaryDirectory left (default and $RECOVER)"
