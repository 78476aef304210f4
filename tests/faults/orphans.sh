#!/bin/sh
# A rank that dies leaves nothing behind (HVDSHIM_REAP, shim/reaper.c).  An
# unmodified script whose DataLoader has 2 worker processes, started by each
# of multiprocessing's methods (fork; spawn and forkserver, which add a
# forkserver and the resource tracker), np=3, one rank SIGKILLed in the
# middle of training; in the spawn case without elastic the script has also started a
# program in a session of its own (subprocess.Popen(start_new_session=True):
# out of the rank's process group).  The job's processes are found by a
# variable only this job's environment holds (every process it started
# inherits it).
#  1. Not elastic: the job ends non-zero within 30 s of the
#     kill, and nothing of it is left 3 s after its end (the reaper's
#     SIGTERM, then SIGKILL after 2 s).
#  1b. The rank killed together with its reaper (forkserver): the job still
#     ends and nothing is left (the forkserver dies with the rank).
#  2. Elastic (HVDSHIM_ELASTIC=1 under ULFM: sid, trixie's Open MPI 5;
#     hvdrun --min-np 2): the survivors train on and finish, the job ends 0
#     within 15 s of its last line (1-7 s measured on sid: the survivors'
#     exit, then their own forkservers' ending with Python, as in a plain
#     run; before, it never ended: Open MPI 5 and 6 count a process as gone
#     once its output pipes close, and the dead rank's workers held them),
#     nothing left.
#  3. Negative control: with HVDSHIM_REAP=0 the dead rank's processes are
#     still there after the same time (and, under ULFM, the job has not
#     ended: it is ended by the test).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
export OMP_NUM_THREADS=1
n=0
# family JOB: the pids of the processes whose environment holds ORPHANS_JOB=JOB
family() { grep -l -a -x -z "ORPHANS_JOB=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -v -x "$$" || true; }
# victim JOB R: the pid of rank R (the job's Python process whose parent is not a Python process)
victim() {
  for _p in $(family "$1"); do
    case $(cat "/proc/$_p/comm" 2>/dev/null) in python*) ;; *) continue ;; esac
    _pp=$(ps -o ppid= -p "$_p" 2>/dev/null | tr -d ' ')
    case $(cat "/proc/$_pp/comm" 2>/dev/null) in python* | '') continue ;; esac
    tr '\0' '\n' <"/proc/$_p/environ" 2>/dev/null | grep -q -x -E "(OMPI_COMM_WORLD_RANK|PMIX_RANK|PMI_RANK)=$2" &&
      { echo "$_p"; return 0; }
  done
  return 1
}
# sems JOB: the named semaphores the job's processes map (multiprocessing's
# locks and queues under spawn and forkserver: /dev/shm/sem.mp-*, unlinked
# by its resource tracker once their users are gone)
sems() { for _p in $(family "$1"); do grep -a -o '/dev/shm/sem\.mp-[^ ]*' "/proc/$_p/maps" 2>/dev/null; done | sort -u | tr '\n' ' '; }
# sems_left: those of $job_sems still in /dev/shm
sems_left() { for _f in $job_sems; do [ -e "$_f" ] && echo "$_f"; done | wc -l; }
# temp_left: what the job left in its own $TMPDIR ($TMP/tmpN) 3 s after its
# processes were gone, or nothing (multiprocessing's pymp-* folders of the
# ranks and workers the job's end killed, the rank-private folders: their
# watchers remove them, base/remover.c); torch's compile cache aside (tmp_left).
temp_left() { tmp_settled "$TMP/tmp$n" 3; }
# gone_within JOB SECONDS: until no process of JOB is left; sets $left (ms waited, or the pids left)
gone_within() {
  _t0=$(now_ms)
  while [ -n "$(family "$1")" ]; do
    [ $(($(now_ms) - _t0)) -lt $(($2 * 1000)) ] || { left=$(family "$1" | tr '\n' ' '); return 1; }
    sleep 0.1
  done
  left=$(($(now_ms) - _t0))
}
# run MODE START VICTIM [NAME=VALUE...]: the script under the shim (MODE plain
# or elastic: $STEPS steps), rank VICTIM SIGKILLed at its step 10; sets $job, $rc, $took
# (ms from the kill to the job's end), $tail_ms (ms from its last line to its end)
run() {
  _mode=$1 _start=$2 _v=$3
  shift 3
  DETACHED=
  [ "$_start" = spawn ] && [ "$_mode" = plain ] && DETACHED=--detached
  n=$((n + 1))
  job="orphans-$$-$n"
  _out="$TMP/out$n"
  mkdir -p "$TMP/tmp$n"
  (
    export ORPHANS_JOB="$job" TMPDIR="$TMP/tmp$n" "$@"
    if [ "$_mode" = elastic ]; then
      HVDRUN_LIB="$LIB" exec timeout -k 5 120 "$top_builddir/launcher/hvdrun" -np 3 --oversubscribe --min-np 2 \
        "$PYTHON" "$FAULT_TRAIN" --steps $STEPS --step-sleep 0.05 --workers 2 --start "$_start" $DETACHED
    else
      T=120 shim 3 "$PYTHON" "$FAULT_TRAIN" --steps 100000 --step-sleep 0.02 --workers 2 --start "$_start" $DETACHED
    fi
  ) >"$_out" 2>&1 </dev/null &
  _pid=$!
  wait_for "$_out" "\[rank $_v\] step 10" 120
  _vp=$(victim "$job" "$_v") || { cat "$_out"; fail "$_mode, $_start: rank $_v not found"; }
  job_sems=$(sems "$job")
  echo "$job_sems" >"$_out.sems" # (for the cases that run it in the background)
  _t0=$(now_ms)
  [ -n "${RUN_NOKILL-}" ] || kill -9 "$_vp" # (RUN_NOKILL: the caller kills, run in the background)
  rc=0
  wait "$_pid" || rc=$?
  _end=$(now_ms)
  took=$((_end - _t0))
  tail_ms=$((_end - $(stat -c %.3Y "$_out" | tr -d .)))
  out=$_out
}
export HVDSHIM_LOG_LEVEL=warn
STEPS=40

ulfm=0
nm -D "$top_builddir/.libs/libhvdshim.so" 2>/dev/null | grep -q " U MPIX_Comm_shrink" && [ "${MPI_KIND:-ompi}" != hydra ] && ulfm=1

# 1. not elastic: the launcher ends the job; the dead rank's family goes with
# it.  Each start method where the MPI has no ULFM (Debian 12's Open MPI 4,
# whose launcher ends the job and leaves the orphans; MPICH); once where it
# has (its launcher waits on their pipes, as in the elastic cases below)
cases="fork:1 spawn:0 forkserver:1"
[ $ulfm = 1 ] && cases="forkserver:0"
for c in $cases; do
  start=${c%:*} v=${c#*:}
  run plain "$start" "$v"
  [ "$rc" != 0 ] || { cat "$out"; fail "not elastic, $start, rank $v killed: the job exited 0"; }
  [ "$took" -lt 30000 ] || { cat "$out"; fail "not elastic, $start: the job took $took ms to end"; }
  gone_within "$job" 3 || { ps -o pid,ppid,pgid,stat,args -p "$(echo $left | tr ' ' ',')"; fail "not elastic, $start, rank $v killed: processes left 3 s after the job ended: $left"; }
  # (the launcher SIGKILLs each survivor's process group: the resource
  # tracker, out of it, still unlinks their semaphores; 2 of the 3 ranks'
  # were left when it was in it)
  [ "$(sems_left)" = 0 ] || fail "not elastic, $start, rank $v killed: $(sems_left) of the job's $(echo $job_sems | wc -w) named semaphores left in /dev/shm"
  tl=$(temp_left)
  [ -z "$tl" ] || { ps -eo pid,ppid,stat,args | grep -v grep | grep "read _"; fail "not elastic, $start, rank $v killed: left in the job's TMPDIR: $tl"; }
  pass "not elastic, loader workers by $start, rank $v SIGKILLed: the job ended (status $rc) $took ms after the kill, nothing of it left ${left} ms later (processes, $(echo $job_sems | wc -w) named semaphores, temporary folders)"
done

# 1b. the rank killed together with its reaper (a user taking both pids):
# nothing reaps its family, but a forkserver the rank started dies with it
# (PR_SET_PDEATHSIG), and its workers follow (they watch it) within their 5 s
# check: the job ends and nothing is left (before, they and the forkserver
# lived on, and Open MPI 5 and 6 never ended the job)
# (run in the background must not kill rank 1 itself: when it did first,
# the rank or its reaper was not found below, a sid flake)
RUN_NOKILL=1 run plain forkserver 1 2>/dev/null &
bg=$!
n=$((n + 1)) # (run's, in the background)
job="orphans-$$-$n"
wait_for "$TMP/out$n" "\[rank 1\] step 10" 120
_i=0
until _vp=$(victim "$job" 1); do # (retried: the job's processes may not all be there at the first look)
  _i=$((_i + 1))
  [ $_i -lt 50 ] || { ps -o pid,ppid,comm,args -p "$(family "$job" | tr '\n' ',')0"; cat "$TMP/out$n"; fail "rank and reaper: rank 1 not found"; }
  sleep 0.1
done
_rp=$(pgrep -f "^hvdshim-reaper \(of rank pid $_vp\)") || {
  # (what the job's processes were then, to trace it)
  ps -o pid,ppid,pgid,comm,args -p "$(family "$job" | tr '\n' ',')0"
  fail "rank and reaper: the reaper of rank 1 (pid $_vp) not found"
}
kill -9 "$_vp" "$_rp"
wait "$bg"
gone_within "$job" 12 || { ps -o pid,ppid,pgid,stat,args -p "$(echo $left | tr ' ' ',')"; fail "rank 1 and its reaper killed: processes left 12 s after the job ended: $left"; }
# (the named semaphores: unlinked by rank 1's resource tracker once the
# workers are gone, unless the launcher ended it first; counted, and removed)
job_sems=$(cat "$TMP/out$n.sems")
sl=$(sems_left)
rm -f $job_sems
pass "rank 1 SIGKILLed with its reaper (loader workers by forkserver): the job ended, no process of it left $left ms later ($sl of its $(echo $job_sems | wc -w) named semaphores left, removed by the test)"

# 2. elastic, where the MPI survives a death: each start method, a rank > 0
# and rank 0 (ELASTIC_TORCH=mpi: two of them, for a stack that runs only
# what its MPI takes part in; check-stacks runs this script on sid, whole
# but for ORPHANS_SHORT, and not on trixie)
if [ $ulfm = 1 ]; then
  cases="fork:1 spawn:0 forkserver:1 forkserver:0"
  [ "${ELASTIC_TORCH:-all}" = mpi ] && cases="spawn:1 forkserver:0"
  # ORPHANS_SHORT=1 (check-stacks on sid, where each case is about 30 s of
  # CPU, every rank's workers importing torch 2.14): workers forked from the
  # rank and from a forkserver, a rank > 0 and rank 0; spawn (a forkserver's
  # resource tracker as well, from a fresh interpreter) runs in case 1 on
  # Debian 12
  [ "${ORPHANS_SHORT:-0}" = 1 ] && cases="fork:1 forkserver:0"
  for c in $cases; do
    start=${c%:*} v=${c#*:}
    run elastic "$start" "$v"
    [ "$rc" = 0 ] || { cat "$out"; fail "elastic, $start, rank $v killed: status $rc (124: it did not end in 120 s)"; }
    grep -q "done $STEPS" "$out" || { cat "$out"; fail "elastic, $start, rank $v killed: the survivors did not finish"; }
    [ "$tail_ms" -lt 15000 ] || { cat "$out"; fail "elastic, $start, rank $v killed: the job ended $tail_ms ms after its last line"; }
    gone_within "$job" 3 || { ps -o pid,ppid,pgid,stat,args -p "$(echo $left | tr ' ' ',')"; fail "elastic, $start, rank $v killed: processes left: $left"; }
    [ "$(sems_left)" = 0 ] || fail "elastic, $start, rank $v killed: $(sems_left) of the job's $(echo $job_sems | wc -w) named semaphores left in /dev/shm"
    tl=$(temp_left)
    [ -z "$tl" ] || fail "elastic, $start, rank $v killed: left in the job's TMPDIR: $tl"
    pass "elastic (hvdrun --min-np 2), loader workers by $start, rank $v SIGKILLed: the survivors finished, the job ended 0 $tail_ms ms after its last line, nothing left ($(echo $job_sems | wc -w) named semaphores unlinked, no temporary folder)"
  done
fi

# 3. negative control: the same without the reaper
if [ $ulfm = 1 ]; then
  run elastic forkserver 1 HVDSHIM_REAP=0 &
  ctl=$!
  n=$((n + 1)) # (run's, in the background)
  wait_for "$TMP/out$n" "done $STEPS" 120
  sleep 5
  left=$(family "orphans-$$-$n" | wc -l)
  ended=0
  kill -0 "$ctl" 2>/dev/null || ended=1
  ctl_sems=$(sems "orphans-$$-$n")
  for p in $(family "orphans-$$-$n"); do kill -9 "$p" 2>/dev/null; done
  wait "$ctl"
  rm -f $ctl_sems $(cat "$TMP/out$n.sems" 2>/dev/null) # (this test's own SIGKILL of the tracker left them)
  [ $ended = 0 ] || { cat "$TMP/out$n"; fail "negative control: with HVDSHIM_REAP=0 the elastic job ended anyway: the test cannot tell"; }
  pass "negative control: with HVDSHIM_REAP=0 the elastic job had not ended 5 s after its survivors finished ($left of its processes alive; ended by the test)"
else
  run plain forkserver 1 HVDSHIM_REAP=0
  sleep 3
  left=$(family "$job" | wc -l)
  ctl_sems=$(sems "$job")
  for p in $(family "$job"); do kill -9 "$p" 2>/dev/null; done
  sleep 0.5
  rm -f $ctl_sems $(cat "$TMP/out$n.sems" 2>/dev/null) # (this test's own SIGKILL of the tracker left them)
  [ "$left" -gt 0 ] || fail "negative control: with HVDSHIM_REAP=0 nothing of the job was left either: the test cannot tell"
  pass "negative control: with HVDSHIM_REAP=0, $left processes of the job were left 3 s after it ended"
fi
