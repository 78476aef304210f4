#!/bin/sh
# A slow or lossy network between two hosts (network namespaces, as
# multihost.sh): every packet delayed 20 ms each way, then 1% of them
# dropped each way (`tc qdisc ... netem` where the kernel has sch_netem;
# this VM's kernel, and so the stacks' chroots, has not: then
# tests/launcher/wire.c carries the packets between two TUN devices with
# the same delay and loss).  An unmodified PyTorch script
# (partition_train.py, HVDSHIM_DATA=split) at 2 ranks, one per host, with
# the watchdog and the stall report made strict (HVDSHIM_PEER_TIMEOUT_SECONDS
# =10, HVDSHIM_STALL_WARNING_SECONDS=3): status 0, no death, stall or
# timeout line, weights equal the single-process run (the split's
# emulation: the same global batch).  Prints each run's speed (steps 2-40 per
# second) and what the link carried and dropped.  Without ULFM (Debian 12)
# the job unimpaired, delayed, then delayed and lossy; under ULFM (Open MPI
# 6, sid) only an elastic job (hvdrun --min-np 1: ULFM's heartbeat detector
# on, with that timeout) over the delayed and lossy link: no rank found
# dead.  Costs (2 cores): 25-66 s on Debian 12 (a quiet or a loaded
# machine), 20-27 s on sid.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_open_mpi "the launch agent (plm_rsh_agent) and TCP settings"
need_torch
. "$top_srcdir/tests/launcher/netns-lib.sh"
CC=${CC:-cc}
command -v "${CC%% *}" >/dev/null 2>&1 || skip "no C compiler ($CC) to build tests/launcher/wire.c"
WIRE=$TMP/wire
$CC -O2 -o "$WIRE" "$top_srcdir/tests/launcher/wire.c" || fail "cannot build wire.c"
impaired_up 0 0
echo "link: $LINK_KIND"
TRAIN="$top_srcdir/tests/launcher/partition_train.py"
STEPS=40
export OMP_NUM_THREADS=1
py "$TRAIN" "$TMP/plain.pt" --steps $STEPS >/dev/null 2>&1 || fail "the plain run failed"

run() { # NAME DELAY LOSS [hvdrun options]: the job over the link so impaired; $speed, $carried
  _n=$1
  impaired_set "$2" "$3"
  shift 3
  rc=0
  HVDSHIM_DATA=split HVDSHIM_PEER_TIMEOUT_SECONDS=10 HVDSHIM_STALL_WARNING_SECONDS=3 HVDSHIM_LOG_LEVEL=info \
    timeout -k 5 150 "$ON_A" "$HVDRUN" -np 2 -H $A:1,$IPB:1 "$@" -- "$PYTHON" "$TRAIN" "$TMP/$_n.pt" --steps $STEPS \
    </dev/null >"$TMP/$_n.out" 2>&1 || rc=$?
  [ $rc = 0 ] || { cat "$TMP/$_n.out"; fail "$_n: status $rc"; }
  ! grep -E "hvdshim.*(warning|error)|stall|no progress|died|lost rank|goes on over" "$TMP/$_n.out" ||
    { cat "$TMP/$_n.out"; fail "$_n: a false death, stall or timeout report"; }
  same "$TMP/plain.pt" "$TMP/$_n.pt" 1e-5 >"$TMP/cmp" 2>&1 || { cat "$TMP/$_n.out" "$TMP/cmp"; fail "$_n: weights differ from the plain run"; }
  speed=$(sed -n 's/^done on .*(\(.*\) steps\/s)$/\1/p' "$TMP/$_n.out")
  carried=
  case $LINK_KIND in wire*) # (its counts, once it has ended)
    kill $WIRE_PID && wait $WIRE_PID 2>/dev/null
    WIRE_PID=
    carried=$(sed -n 's/^wire: \(.*\)/\1/p' "$TMP/wire.err") ;;
  esac
}
if nm -D "$top_builddir/.libs/libhvdshim.so" 2>/dev/null | grep -q " U MPIX_Comm_shrink" && ! "$MPIRUN" --version 2>&1 | grep -q "(Open MPI) 5\."; then
  run elastic 20 1 --min-np 1
  pass "elastic (hvdrun --min-np 1, ULFM's detector at 10 s) at 20 ms and 1% loss each way: no rank found dead, weights = the plain run ($(cat "$TMP/cmp")); $speed steps/s (${carried:-tc netem})"
  exit 0
fi
run plain-link 0 0
s0=$speed
run delay 20 0
s1=$speed
run loss 20 1
s2=$speed
pass "np=2 across hosts, split mode: weights = the plain run ($(cat "$TMP/cmp")), no death or stall line; steps/s: $s0 unimpaired, $s1 at 20 ms each way, $s2 at 20 ms and 1% loss each way (the lossy run's link: ${carried:-tc netem})"
