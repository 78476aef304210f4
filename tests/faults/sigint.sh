#!/bin/sh
# Ctrl-C, `timeout`, and a launcher killed: SIGINT, SIGTERM, then SIGKILL,
# to mpirun in the middle of training (np=3, two DataLoader worker processes
# per rank): mpirun, every rank and every worker are gone within 30 s, and
# nothing is left behind: no process, nothing in the job's own TMPDIR (Open
# MPI's session folder, multiprocessing's and torch's, the ranks' private
# folders; torch's compile cache aside), none of the MPI library's
# shared-memory files the ranks mapped (/dev/shm/vader_segment.*,
# sm_segment.*).  Open MPI 4.1's mpirun, sent SIGTERM, can exit while its
# ranks still run (about 1 run in 6 with `timeout` here), and one sent
# SIGKILL always does, leaving its session folder and the ranks' segments to
# no one: the ranks' reapers remove them (shim/reaper.c; Open MPI 5 names
# the folder prterun.HOST.PID.UID).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
# SIGINT_SHORT=1 (check-stacks on sid: each case 3 ranks and their workers
# starting torch 2.14, about 25 s of CPU): SIGTERM and SIGKILL to the
# launcher, hvdrun's process group sent SIGTERM, and the second SIGTERM;
# SIGINT to the launcher, Ctrl-C in hvdrun's terminal and SIGTERM to hvdrun
# alone (hvdrun's own relay) run on Debian 12 and on trixie's prterun
sigs="INT TERM KILL" hows="ctrl-c term group"
[ "${SIGINT_SHORT:-0}" = 1 ] && sigs="TERM KILL" hows=group
for sig in $sigs; do
  tag="sig$sig-$$"
  mkdir -p "$TMP/tmp-$sig"
  # (SIGKILL: each rank started by a wrapper shell's exec, whose image armed
  # the reaper that the rank's MPI notes its files to)
  wrap=
  [ $sig = KILL ] && wrap="$TMP/wrap.sh" && printf '#!/bin/sh\nexec "$@"\n' >"$wrap" && chmod +x "$wrap"
  TMPDIR="$TMP/tmp-$sig" T=120 shim 3 $wrap "$PYTHON" "$FAULT_TRAIN" --steps 100000 --step-sleep 0.02 --workers 2 \
    --tag "$tag" >"$TMP/out-$sig" 2>&1 &
  wait_for "$TMP/out-$sig" "\[rank 2\] step 20" 90
  mp= segs=
  for p in $(pgrep -f -- "--tag $tag"); do
    case $(cat "/proc/$p/comm" 2>/dev/null) in mpirun | orterun | prterun) mp=$p ;; esac
    segs="$segs $(grep -o '/dev/shm/\(vader\|sm\)_segment\.[^ ]*' "/proc/$p/maps" 2>/dev/null)"
  done
  segs=$(echo $segs | tr ' ' '\n' | sort -u | tr '\n' ' ')
  [ -n "$mp" ] || fail "SIG$sig: mpirun not found"
  n=$(pgrep -f -- "--tag $tag" | wc -l)
  t0=$(now_ms)
  kill -$sig "$mp"
  wait
  # (SIGKILL: mpirun is gone at once; its ranks end by themselves)
  while pgrep -f -- "--tag $tag" >/dev/null && [ $(($(now_ms) - t0)) -lt 30000 ]; do sleep 0.05; done
  took=$(($(now_ms) - t0))
  [ "$took" -lt 30000 ] || fail "SIG$sig: the job took $took ms to end"
  no_leftovers "$tag"
  _i=0
  while :; do
    left=$(tmp_left "$TMP/tmp-$sig")
    for f in $segs; do [ -e "$f" ] && left="$left$f "; done
    [ -n "$left" ] && [ $_i -lt 30 ] || break
    sleep 0.1
    _i=$((_i + 1))
  done
  [ -z "$left" ] || fail "SIG$sig to mpirun: left behind: $left"
  pass "SIG$sig to mpirun$([ $sig = KILL ] && echo ", each rank a wrapper shell's exec"): $n processes (mpirun, ranks, workers) gone after $took ms, none left, nor files ($(echo $segs | wc -w) MPI shared-memory segments)"
done

# hvdrun returns once the job's processes are gone (launcher/supervise.c):
# Ctrl-C typed in a terminal (script(1)'s pseudo-terminal: the kernel sends
# SIGINT to the foreground process group, hvdrun and mpirun), SIGTERM
# sent to hvdrun alone, and SIGTERM sent to its process group, as `timeout`
# (after one to hvdrun), a batch system or a tool that started hvdrun in a
# session of its own sends it: the launcher gets it twice (itself, and
# from hvdrun), and Open MPI 4.1's mpirun ended at once at the second,
# leaving the ranks to hvdrun's SIGKILL 20 s later.  Open MPI 6's prterun
# returned 60-100 ms before its ranks' reapers had finished; under Open MPI
# 4.1 the reapers too outlived mpirun.  Checked at the moment hvdrun
# returns: no process of the job (reapers and loader workers included); its
# status is the signal's (130, 143) and one line says what ended the job.
# The script trains inside `with tempfile.TemporaryDirectory()`, as
# pytorch/tutorials' transfer learning keeps its best weights there: the
# launcher's SIGTERM to the ranks raises KeyboardInterrupt, as Ctrl-C does
# in the plain run, and the folder is removed (it was left in the job's
# TMPDIR, rank 0's checkpoint in it: python/hvdshim_torch/output.py).
HVDRUN="$top_builddir/launcher/hvdrun"
for how in $hows; do
  tag="hv-$how-$$" st=
  mkdir -p "$TMP/tmp-hv-$how"
  out="$TMP/out-hv-$how"
  if [ $how = ctrl-c ]; then
    fifo="$TMP/tty-in"
    mkfifo "$fifo"
    # (HVDCHECK_TMP, which marks the job's processes, not in script's or its shell's environment)
    script -qfec "TMPDIR='$TMP/tmp-hv-$how' HVDCHECK_TMP='$TMP' HVDRUN_MPIRUN='$MPIRUN' '$HVDRUN' -np 2 -x HVDCHECK_TMP \
-- '$PYTHON' '$FAULT_TRAIN' --steps 100000 --step-sleep 0.02 --workers 2 --tempdir --tag $tag; echo HVDRUN-STATUS=\$?" /dev/null \
      <"$fifo" >"$out" 2>&1 &
    hv=$!
    exec 7>"$fifo"
  else
    # (group: setsid, not forking here, makes hvdrun a process group's leader)
    TMPDIR="$TMP/tmp-hv-$how" HVDCHECK_TMP="$TMP" HVDRUN_MPIRUN="$MPIRUN" $([ $how = group ] && echo setsid) "$HVDRUN" \
      -np 2 -x HVDCHECK_TMP -- "$PYTHON" "$FAULT_TRAIN" --steps 100000 --step-sleep 0.02 --workers 2 --tempdir \
      --tag "$tag" >"$out" 2>&1 &
    hv=$!
  fi
  wait_for "$out" "\[rank 1\] step 20" 90
  n=$(job_processes | wc -w)
  t0=$(now_ms)
  case $how in ctrl-c) printf '\003' >&7 ;; term) kill -TERM $hv ;; group) kill -TERM -- -$hv ;; esac
  if [ $how = ctrl-c ]; then
    while ! grep -q "HVDRUN-STATUS=" "$out" && [ $(($(now_ms) - t0)) -lt 30000 ]; do sleep 0.01; done
    left=$(job_processes)
    st=$(sed -n 's/.*HVDRUN-STATUS=\([0-9]*\).*/\1/p' "$out")
    exec 7>&-
    wait $hv
  else
    while kill -0 $hv 2>/dev/null && [ $(($(now_ms) - t0)) -lt 30000 ]; do sleep 0.01; done
    left=$(job_processes)
    kill -0 $hv 2>/dev/null || { wait $hv; st=$?; }
  fi
  took=$(($(now_ms) - t0))
  [ -n "${st-}" ] && [ "$took" -lt 30000 ] || { cat "$out"; fail "hvdrun, $how: it had not returned after $took ms"; }
  [ -z "$(echo $left)" ] || { ps -o pid,ppid,stat,args -p "$(echo $left | tr ' ' ',')"; fail "hvdrun, $how: returned (status $st) while processes of the job still ran: $left"; }
  want=143 line="hvdrun: SIGTERM: the job has ended, none of its processes left"
  [ $how = ctrl-c ] && want=130 line="hvdrun: SIGINT (Ctrl-C): the job has ended, none of its processes left"
  [ "$st" = $want ] && grep -q "$line" "$out" || { cat "$out"; fail "hvdrun, $how: status $st (expected $want, as the signal's) or no line '$line'"; }
  no_leftovers "$tag"
  # (Open MPI 5 and 6's prterun ends the ranks with SIGKILL at once, no
  # SIGTERM first: nothing of the script's runs, and the library's watcher
  # removes the folder once the rank is gone, a moment after hvdrun returns)
  left=$(tmp_settled "$TMP/tmp-hv-$how")
  [ -z "$left" ] || { ls -lR "$TMP/tmp-hv-$how"; fail "hvdrun, $how: left in the job's TMPDIR: $left (the script's TemporaryDirectory not removed)"; }
  [ "$(grep -c "Traceback\|KeyboardInterrupt" "$out")" = 0 ] || { cat "$out"; fail "hvdrun, $how: a traceback printed"; }
  case $how in ctrl-c) what="Ctrl-C in a terminal" ;; term) what="SIGTERM to hvdrun" ;; group) what="SIGTERM to hvdrun's process group" ;; esac
  pass "hvdrun, $what: returned after $took ms with status $st, when none of the job's $n processes was left, nor the script's TemporaryDirectory"
done

# A second SIGTERM while a rank unwinds from the first (its `finally` takes
# 2 s) is ignored, and the script's TemporaryDirectory is removed: Open MPI
# 4.1's mpirun, sent two, can pass one to the ranks and exit, and hvdrun
# then sends each rank it left one more; the rank had restored SIGTERM's
# default and died in its cleanup (3 of 24 such stops in a helper's trials
# left the folder or an atexit handler's file undone).
tag="twice-$$"
mkdir -p "$TMP/tmp-twice"
TMPDIR="$TMP/tmp-twice" shim 2 "$PYTHON" "$FAULT_TRAIN" --steps 100000 --step-sleep 0.02 --tempdir --slow-cleanup 2 \
  --tag "$tag" >"$TMP/out-twice" 2>&1 &
job=$!
wait_for "$TMP/out-twice" "\[rank 1\] step 20" 90
r0=
for p in $(job_processes); do # rank 0: its parent is the launcher, not a rank (a reaper's parent is)
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=0" || continue
  pp=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)
  [ -n "$pp" ] && ! tr '\0' '\n' <"/proc/$pp/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=0" && r0=$p
done
[ -n "$r0" ] || { ps -ef; fail "twice: rank 0's process not found"; }
kill -TERM "$r0"
wait_for "$TMP/out-twice" "\[rank 0\] cleanup 2 " 30
kill -TERM "$r0"
wait $job
dir=$(sed -n 's/^\[rank 0\] cleanup 2 //p' "$TMP/out-twice")
[ -n "$dir" ] && [ ! -e "$dir" ] || { ls -lR "$TMP/tmp-twice"; cat "$TMP/out-twice"; fail "twice: rank 0's TemporaryDirectory $dir left by a second SIGTERM during its cleanup"; }
no_leftovers "$tag"
rm -rf "$TMP/tmp-twice" # (rank 1's, where the launcher ended it at once)
pass "a second SIGTERM during a rank's cleanup is ignored: its TemporaryDirectory removed"
