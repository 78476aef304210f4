#!/bin/sh
# Horovod's elastic API on the served package: elastic_hvd.py (an elastic
# script in the style of Horovod's examples/elastic/pytorch: ElasticSampler,
# TorchState, a commit every 2 batches, a reset callback that scales the
# learning rate by hvd.size(), float64), each run against the single-process
# emulation of what Horovod's semantics prescribe (elastic_hvd.py --emulate:
# the state restored to the last commit, then trained over the ranks there
# are), tolerance 1e-12 (float64; measured 0 to 1e-15).
#   fixed size (every stack): under hvdrun -np 2 the decorated function runs
#     once; the weights equal the emulation at 2 ranks, and where Horovod
#     0.28.1 itself is importable (Debian 12) the printed lines and the
#     weights are real Horovod's (tolerance 0);
#   a rank's death (ULFM: hvdrun --min-np; sid): rank 2, then rank 0,
#     SIGKILLed mid-epoch at np=3, and rank 1 at np=2 (the survivor goes on
#     alone, its optimizer's hooks still reducing): status 0, the survivors restore the last
#     commit, the reset callback runs once, the function is called twice,
#     every sample of the epoch not committed is processed once after the
#     restore (and none committed is), the weights equal the emulation; the
#     emulation of no rollback (the zero-code elastic's way) differs;
#   a survivor's failure after a death (sid): at np=2 under --min-np 1 rank
#     1 dies, the survivor ends with sys.exit(3): hvdrun's status is 3, three
#     runs (Open MPI 6's prterun answered the survivor's MPI_Abort with 0 in
#     3 of 4 runs, and hvdrun passed that on);
#   hosts joining (hvdrun --host-discovery-script, 2 -> 3; sid): the job
#     stops at the commit after the discovery script lists a third slot and
#     starts again over 3; the reset callback runs once, the new rank trains
#     from the commit, every sample of that epoch is processed once over both
#     jobs, the weights equal the emulation.
#   hosts leaving (2 -> 1; Debian 12, or ELASTIC_HVD=all): the job starts again
#     over 1 rank, which takes the state at the commit and saves its weights
#     on disk, equal to the emulation.
# ELASTIC_TORCH=mpi (trixie's Open MPI 5, check-stacks) runs the fixed-size
# case only: the death and the join are the served package's Python over
# the engine's recovery and hvdrun's restart, which tests/mpi/elastic.sh and
# tests/torch/grow.sh test there.  ELASTIC_HVD=all runs the join where the MPI
# has no ULFM too (it needs none).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
S="$top_srcdir/tests/horovod/elastic_hvd.py"
HVDRUN="$top_builddir/launcher/hvdrun"
[ -n "${MPIRUN:-}" ] && export HVDRUN_MPIRUN="$MPIRUN"
export OMP_NUM_THREADS=1
warm_start
emulate() { # OUT PHASES: the single-process emulation's weights in OUT
  py "$S" --emulate "$2" --save "$1" >"$TMP/emu.out" 2>&1 || { cat "$TMP/emu.out"; fail "the emulation $2 failed"; }
}
# samples LOG_PREFIX EPOCH SIZE PHASE_BEFORE PHASE_AFTER BATCH: in EPOCH, the
# samples processed in PHASE_BEFORE ("job J call C") at batches before BATCH
# and those processed in PHASE_AFTER: disjoint, all of the epoch together,
# each after-sample once but for the padding the ElasticSampler adds for SIZE
# ranks; none processed in PHASE_BEFORE at BATCH or later is kept (checked by
# the weights)
samples() {
  "$PYTHON" - "$@" <<'PY'
import glob, sys
prefix, epoch, size, before, after, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
done, redone = set(), []
for name in glob.glob(prefix + ".*"):
    for line in open(name):
        f = line.split()
        phase, e, b, idx = " ".join(f[0:4]), int(f[7]), int(f[9]), [int(i) for i in f[11].split(",")]
        if e != epoch:
            continue
        if phase == before and b < batch:
            done.update(idx)
        elif phase == after:
            redone += idx
n = 96
rest = n - len(done)
pad = (-rest) % size
assert not done & set(redone), "samples processed before the change processed again: %s" % sorted(done & set(redone))[:8]
assert done | set(redone) == set(range(n)), "samples never processed: %s" % sorted(set(range(n)) - done - set(redone))[:8]
assert len(redone) == rest + pad, "%d processed after the change, %d left (+%d padding)" % (len(redone), rest, pad)
print("%d samples before, %d after (%d padding), each once" % (len(done), rest, pad))
PY
}

# --- fixed size: the function runs once, as on Horovod under mpirun
HVDRUN_LIB="$LIB" timeout -k 5 120 "$HVDRUN" -np 2 --oversubscribe "$PYTHON" "$S" --save "$TMP/fixed.pt" \
  >"$TMP/fixed.out" 2>&1 </dev/null || { cat "$TMP/fixed.out"; fail "np=2: the elastic script failed"; }
grep -q "^calls 1 resets 0$" "$TMP/fixed.out" || { cat "$TMP/fixed.out"; fail "np=2: the function was not called once"; }
emulate "$TMP/emu2.pt" 2
same "$TMP/fixed.pt" "$TMP/emu2.pt" 1e-12 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "np=2: the weights differ from the emulation"; }
pass "np=2, fixed size: hvd.elastic.run calls the function once; weights = the emulation ($(cat "$TMP/cmp"))"
REAL="$top_srcdir/../shared/reference/horovod-0.28.1"
if [ -d "$REAL/horovod" ] && PYTHONPATH="$REAL" "$PYTHON" -c 'import horovod.torch' >/dev/null 2>&1; then
  PYTHONPATH="$REAL" T=120 mpi 2 -x PYTHONPATH -x OMP_NUM_THREADS "$PYTHON" "$S" --save "$TMP/real.pt" \
    >"$TMP/real.out" 2>&1 || { cat "$TMP/real.out"; fail "real Horovod np=2 failed"; }
  grep -E '^(Train|calls|final)' "$TMP/real.out" >"$TMP/real.lines"
  grep -E '^(Train|calls|final)' "$TMP/fixed.out" >"$TMP/fixed.lines"
  [ -s "$TMP/real.lines" ] && cmp -s "$TMP/real.lines" "$TMP/fixed.lines" ||
    { diff "$TMP/real.lines" "$TMP/fixed.lines"; fail "np=2: the printed lines differ from real Horovod's"; }
  same "$TMP/real.pt" "$TMP/fixed.pt" 0 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "np=2: the weights differ from real Horovod's"; }
  pass "np=2, fixed size: the same $(wc -l <"$TMP/real.lines") printed lines and weights as real Horovod 0.28.1 ($(cat "$TMP/cmp"))"
else
  echo "SKIP (comparison with real Horovod): $REAL is not importable here (it is built for the Debian 12 host)"
fi

ulfm=0
nm -D "$top_builddir/.libs/libhvdshim.so" 2>/dev/null | grep -q " U MPIX_Comm_shrink" && ulfm=1
if [ "${ELASTIC_TORCH:-all}" = mpi ]; then
  echo "SKIP (a rank's death, hosts joining): ELASTIC_TORCH=mpi: left to sid"
  exit 0
fi

# --- a rank's death: NP KILL SURVIVOR0 RESET(epoch batch processed)
dies() {
  _np=$1 _kill=$2 _r0=$3 _e=$4 _b=$5 _p=$6
  _left=$((_np - 1)) _what="np=$1, rank ${2%%:*} killed"
  rm -f "$TMP"/log.*
  rc=0
  HVDRUN_LIB="$LIB" timeout -k 5 180 "$HVDRUN" -np "$_np" --oversubscribe --min-np "$_left" "$PYTHON" "$S" --kill "$_kill" \
    --log "$TMP/log" --save "$TMP/dies.pt" >"$TMP/dies.out" 2>&1 </dev/null || rc=$?
  [ $rc = 0 ] || { cat "$TMP/dies.out"; fail "$_what: status $rc"; }
  grep -q "^reset: size $_left epoch $_e batch $_b processed $_p$" "$TMP/dies.out" &&
    [ "$(grep -c '^reset:' "$TMP/dies.out")" = 1 ] && grep -q "^calls 2 resets 1$" "$TMP/dies.out" ||
    { cat "$TMP/dies.out"; fail "$_what: not one restore to the commit at epoch $_e batch $_b"; }
  grep -q "hvd.elastic.run restores the state committed last and calls the function again over $_left rank(s) (was $_np)" \
    "$TMP/dies.out" || { cat "$TMP/dies.out"; fail "$_what: no line saying so"; }
  samples "$TMP/log" "$_e" "$_left" "job 1 call 1" "job 1 call 2" "$_b" >"$TMP/samples" 2>&1 ||
    { cat "$TMP/samples"; fail "$_what: the epoch's samples"; }
  emulate "$TMP/emu.pt" "$_np;$_left@$_e:$_b:$_p"
  same "$TMP/dies.pt" "$TMP/emu.pt" 1e-12 >"$TMP/cmp" ||
    { cat "$TMP/cmp"; fail "$_what: the weights differ from the emulation"; }
  # the negative control: the rolled-back steps kept (no restore) is another run
  emulate "$TMP/keep.pt" "$_np;$_left@$_e:$((${_kill##*:})):$(((${_kill##*:}) * 4 * _np))"
  same "$TMP/dies.pt" "$TMP/keep.pt" 1e-6 >/dev/null &&
    fail "$_what: the emulation without the restore is the same run (the test cannot tell)"
  pass "np=$_np under hvdrun --min-np $_left, rank ${_kill%%:*} SIGKILLed at epoch $_e batch ${_kill##*:}: status 0, rank $_r0's state restored to the commit at batch $_b, the reset callback once, the function called twice, $(cat "$TMP/samples"); weights = the emulation ($(cat "$TMP/cmp")), not the one without the restore"
}
if [ $ulfm = 1 ]; then
  dies 3 2:1:5 0 1 4 48
  dies 3 0:1:3 1 1 2 24
  dies 2 1:1:5 0 1 4 32
  cat >"$TMP/exit3.py" <<'PY'
import os, signal, sys, torch, horovod.torch as hvd
hvd.init()
@hvd.elastic.run
def steps(state):
    for state.i in range(state.i, 8):
        if state.i == 4 and hvd.rank() == 1 and hvd.size() == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        hvd.allreduce(torch.ones(1), name="one")
        state.commit()
steps(hvd.elastic.ObjectState(i=0))
print("survivor of size %d exits 3" % hvd.size(), flush=True)
sys.exit(3)
PY
  for _run in 1 2 3; do
    rc=0
    HVDRUN_LIB="$LIB" timeout -k 5 120 "$HVDRUN" -np 2 --oversubscribe --min-np 1 "$PYTHON" "$TMP/exit3.py" \
      >"$TMP/exit3.out" 2>&1 </dev/null || rc=$?
    [ $rc = 3 ] && grep -q "^survivor of size 1 exits 3" "$TMP/exit3.out" ||
      { cat "$TMP/exit3.out"; fail "np=2 -> 1, the survivor's sys.exit(3): hvdrun's status $rc (run $_run), not 3"; }
  done
  pass "np=2 -> 1 under --min-np 1, the survivor's sys.exit(3): hvdrun's status 3 in 3 runs of 3"
else
  echo "SKIP (a rank's death): this MPI has no ULFM fault tolerance (hvdrun --min-np needs Open MPI 5+)"
fi

# restart NAME NEW WORD [OPTS]: the script under hvdrun over 2 ranks, the
# discovery script listing NEW slots once rank 0 has epoch 1's batch 2 (WORD:
# grow or shrink; OPTS: hvdrun's); the restart said, one reset callback in the
# restarted job; sets `at` to the commit it went on from (epoch batch processed)
restart() {
  _n=$1 _new=$2 _word=$3
  shift 3
  cat >"$TMP/disc.sh" <<EOD
#!/bin/sh
[ -f "$TMP/change" ] && echo localhost:$_new || echo localhost:2
EOD
  chmod +x "$TMP/disc.sh"
  rm -f "$TMP"/log.* "$TMP/change"
  rc=0
  HVDRUN_LIB="$LIB" HVDSHIM_ELASTIC_INTERVAL=0.2 timeout -k 5 240 "$HVDRUN" -np 2 --oversubscribe "$@" \
    --host-discovery-script "$TMP/disc.sh" "$PYTHON" "$S" --grow-file "$TMP/change" --grow-at 1:2 --pause 0.05 \
    --log "$TMP/log" --save "$TMP/$_n.pt" >"$TMP/$_n.out" 2>&1 </dev/null || rc=$?
  [ $rc = 0 ] || { cat "$TMP/$_n.out"; fail "2 -> $_new: status $rc"; }
  grep -q "hvdrun: the job stopped to $_word; starting it again over $_new rank(s) (was 2)" "$TMP/$_n.out" &&
    grep -q "the job started again over $_new rank(s) (was 2): hvd.elastic.run goes on" "$TMP/$_n.out" ||
    { cat "$TMP/$_n.out"; fail "2 -> $_new: the job did not $_word"; }
  # (mpirun relays stdout and stderr apart: a warning may come before the line's end)
  at=$(sed -n "s/^reset: size $_new epoch \([0-9]*\) batch \([0-9]*\) processed \([0-9]*\).*/\1 \2 \3/p" "$TMP/$_n.out")
  [ "$(echo $at | wc -w)" = 3 ] && [ "$(grep -c '^reset:' "$TMP/$_n.out")" = 1 ] && grep -q "^calls 1 resets 1$" "$TMP/$_n.out" ||
    { cat "$TMP/$_n.out"; fail "2 -> $_new: not one reset callback in the restarted job"; }
}

# --- hosts joining: 2 -> 3
if [ $ulfm = 1 ] || [ "${ELASTIC_HVD:-}" = all ]; then
  minnp=
  [ $ulfm = 1 ] && minnp="--min-np 2"
  # shellcheck disable=SC2086
  restart join 3 grow $minnp --max-np 3
  # shellcheck disable=SC2086
  set -- $at
  grep -q "^job 2 call 1 size 3 epoch $1 batch $2 " "$TMP/log.2" ||
    { cat "$TMP/join.out" "$TMP/log.2"; fail "2 -> 3: the new rank did not go on from the commit (epoch $1, batch $2)"; }
  samples "$TMP/log" "$1" 3 "job 1 call 1" "job 2 call 1" "$2" >"$TMP/samples" 2>&1 ||
    { cat "$TMP/samples"; fail "2 -> 3: the epoch's samples"; }
  emulate "$TMP/emu.pt" "2;3@$1:$2:$3"
  same "$TMP/join.pt" "$TMP/emu.pt" 1e-12 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "2 -> 3: the weights differ from the emulation"; }
  pass "hosts joining, 2 -> 3$([ -n "$minnp" ] && echo " under --min-np 2"): HostsUpdatedInterrupt at the commit of epoch $1 batch $2, the job restarted over 3, the reset callback once, the new rank from that commit, $(cat "$TMP/samples"); weights = the emulation ($(cat "$TMP/cmp"))"
else
  echo "SKIP (hosts joining): run on sid (ELASTIC_HVD=all runs it here)"
fi

# --- hosts leaving: 2 -> 1 (where the join is not run: the restart is the
# same; this one ends on one rank, which still takes the state and writes
# its files; not on MPICH (GROW_SHORT, as grow.sh's): Hydra's restart over
# one rank is grow.sh's 2 -> 1 -> 2 there)
if { [ $ulfm = 0 ] && [ "${GROW_SHORT:-0}" != 1 ]; } || [ "${ELASTIC_HVD:-}" = all ]; then
  restart leave 1 shrink --max-np 2
  # shellcheck disable=SC2086
  set -- $at
  [ -s "$TMP/leave.pt" ] || { cat "$TMP/leave.out"; fail "2 -> 1: the weights rank 0 saved after the restart are not on disk"; }
  emulate "$TMP/emu.pt" "2;1@$1:$2:$3"
  same "$TMP/leave.pt" "$TMP/emu.pt" 1e-12 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "2 -> 1: the weights differ from the emulation"; }
  pass "hosts leaving, 2 -> 1: HostsUpdatedInterrupt at the commit of epoch $1 batch $2, the job restarted over 1, the reset callback once, the weights rank 0 saved on disk and = the emulation ($(cat "$TMP/cmp"))"
fi
