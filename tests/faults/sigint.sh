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
for sig in INT TERM KILL; do
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
