#!/bin/sh
# Hosts joining and leaving (hvdrun --host-discovery-script, --max-np): an
# unmodified script (grow_train.py: SGD with momentum, a StepLR, a log opened for
# writing at its start, a checkpoint and a stdout line per epoch) starts on
# 2 ranks; the discovery script lists a third slot after a few calls; the
# job stops at an optimizer step, saves its state, and hvdrun starts it
# again over 3 ranks, which go on from that step.
#   split: the weights equal the plain single-process run (tolerance 1e-5:
#     every global batch is the plain run's, split 2 ways then 3), with and
#     without loader workers; the log holds its header and one line per
#     epoch once, the epochs after the join as in the plain run; stdout
#     says each epoch once.
#   shard: every sample read exactly once per epoch over both jobs (the
#     rest of the stopped epoch dealt over 3), but for the one batch a
#     rank of each epoch the restarted job replays on its way back to where
#     the job stopped (the script's code after a loop reads what the loop
#     left: each epoch's line divides by the batches it counted and prints
#     the last batch's loss); replicas checked every step.
#   leaving and joining: 2 ranks, the script then lists 1 slot, later 2:
#     the job starts again over 1 at an optimizer step (one rank still
#     follows the discovery script, and writes its files for real), then
#     over 2; the weights and the log equal the plain run's.
#   a script that calls no DataLoader cannot stop where a restarted job
#     could come back: one line says so and the job goes on.
#   a restarted job whose script never comes back to where the job stopped
#     ends non-zero with one line saying so.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
warm_start
# GROW_SKIP: case names not run here (check-stacks sets it on sid, which runs
# the restarts with forkserver workers, the GradScaler and shard mode's
# dealing on torch 2.14, and leaves to Debian 12 the adapter's own logic:
# epoch-end, the stop at an epoch's last step; no-loader, a script that
# calls no DataLoader)
wants() { case " ${GROW_SKIP-} " in *" $1 "*) return 1 ;; esac; }
S="$TORCH_DIR/grow_train.py"
HVDRUN="$top_builddir/launcher/hvdrun"
cat >"$TMP/disc.sh" <<EOD
#!/bin/sh
# localhost:2 until rank 0 has made \$GROW_AT optimizer steps (GROW_PROGRESS), then localhost:3
# for good (the restarted job's count starts again at 0: a slot gone again would shrink it)
n=\$(cat "$TMP/progress" 2>/dev/null); [ "\${n:-0}" -ge "\$GROW_AT" ] 2>/dev/null && touch "$TMP/progress.passed"
[ -e "$TMP/progress.passed" ] && echo localhost:3 || echo localhost:2
EOD
chmod +x "$TMP/disc.sh"
seed=${GROW_SEED:-$(date +%s)}
echo "join points: GROW_SEED=$seed"
k=0
# grow NAME [ENV...]: the script under hvdrun, 2 ranks growing to 3 once rank
# 0 has made GROW_AT optimizer steps (default 3 to 18, from the seed; the job
# stops at the step after the next poll, 0.2 s later). The join point follows
# the script's progress, not a count of polls: on a loaded machine a job
# could finish before its 12th poll (CI, 2026-11-27).
grow() {
  _n=$1
  shift
  rm -f "$TMP/progress" "$TMP/progress.passed"
  k=$((k + 1))
  env HVDRUN_LIB="$LIB" HVDRUN_MPIRUN="$MPIRUN" HVDSHIM_ELASTIC_INTERVAL=0.2 GROW_AT=$(((seed / k + k) % 16 + 3)) GROW_PROGRESS="$TMP/progress" "$@" timeout 240 "$HVDRUN" -np 2 --oversubscribe --max-np 3 \
    --host-discovery-script "$TMP/disc.sh" "$PYTHON" "$S" "$TMP/$_n.pt" >"$TMP/$_n.out" 2>&1 ||
    { cat "$TMP/$_n.out"; fail "$_n: the growing job failed"; }
  grep -q "hvdrun: the job stopped to grow; starting it again over 3 rank(s) (was 2)" "$TMP/$_n.out" &&
    grep -q "the job started again over 3 rank(s) (was 2) and goes on from optimizer step" "$TMP/$_n.out" ||
    { cat "$TMP/$_n.out"; fail "$_n: the job did not grow"; }
  [ "$(grep -c "hvdrun: the job stopped" "$TMP/$_n.out")" = 1 ] || { cat "$TMP/$_n.out"; fail "$_n: the job restarted more than once"; }
  step=$(sed -n 's/.*goes on from optimizer step \([0-9]*\).*/\1/p' "$TMP/$_n.out")
}
# the plain runs (no pause: the same steps); the one without workers counts
# its own steps (`while steps < 70`: the restarted job, which runs the script
# from its start, goes on with its count, loss sums and epoch as they were)
GROW_PAUSE=0 GROW_GENERATOR=1 GROW_MAX_STEPS=70 py "$S" "$TMP/plaing.pt" >"$TMP/plain.out" 2>&1 || { cat "$TMP/plain.out"; fail "plain run"; }
# torch 2.3+ has a CPU GradScaler: the workers case runs with one (its scale is saved and restored)
scaler=0
py -c 'import torch; torch.amp.GradScaler("cpu")' >/dev/null 2>&1 && scaler=1
[ "${GROW_SHORT:-0}" = 1 ] || GROW_PAUSE=0 GROW_SCALER=$scaler py "$S" "$TMP/plains.pt" >"$TMP/plains.out" 2>&1 ||
  { cat "$TMP/plains.out"; fail "plain run"; }
# GROW_SHORT=1 (check-stacks on MPICH, whose launcher is what differs
# there): without loader workers only, no shard case, no stop at an
# epoch's end and no script without a DataLoader (the adapter's logic)
cases="0 2"
[ "${GROW_SHORT:-0}" = 1 ] && cases=0
for w in $cases; do
  mkdir -p "$TMP/state$w"
  late=GROW_AT=$((21 + (seed + w) % 20)) # (after epoch 0, 20 steps: the loader's generator and the scaler have moved)
  # (workers 0: the loader draws its order from a generator of its own, and the script counts its steps)
  total=80 max=0
  [ $w = 0 ] && total=70 max=70
  grow split$w HVDSHIM_DATA=split GROW_WORKERS=$w GROW_GENERATOR=$((1 - w / 2)) GROW_SCALER=$((scaler * w / 2)) GROW_MAX_STEPS=$max ${late:-} HVDSHIM_ELASTIC_STATE="$TMP/state$w" HVDSHIM_METRICS="$TMP/m$w.jsonl" \
    HVDSHIM_TIMELINE="$TMP/t$w.json"
  # the metrics and the timeline go on where the job before left them
  "$PYTHON" - "$TMP/m$w.jsonl" "$TMP/t$w.json" $total <<'PY' >"$TMP/files" 2>&1 || { cat "$TMP/files"; fail "split (workers $w): the metrics or the timeline did not go on after the restart"; }
import json, sys
steps = [json.loads(line)["step"] for line in open(sys.argv[1])]
assert steps == list(range(1, int(sys.argv[3]) + 1)), "metrics steps: %s" % steps
ev = json.load(open(sys.argv[2]))
names = [e.get("name") for e in ev]
assert names.count("RESTART") == 1, "no RESTART marker"
at = names.index("RESTART")
ts = [e["ts"] for e in ev if "ts" in e]
assert any(e.get("ph") == "X" for e in ev[:at]) and any(e.get("ph") == "X" for e in ev[at:]), "events on one side only"
assert ev[at]["ts"] >= max(e["ts"] + e.get("dur", 0) for e in ev[:at] if "ts" in e), "times go back"
print("metrics: steps 1..%s once; timeline: %d events, the restart after the first job's" % (sys.argv[3], len(ev)))
PY
  ref="$TMP/plains.pt"
  [ $w = 0 ] && ref="$TMP/plaing.pt"
  if [ $w = 2 ] && [ $scaler = 1 ]; then
    [ "$(grep '^scale ' "$TMP/split$w.out")" = "$(grep '^scale ' "$TMP/plains.out")" ] ||
      { grep '^scale ' "$TMP/split$w.out" "$TMP/plains.out"; fail "split (workers $w): the GradScaler's scale differs from the plain run's"; }
  fi
  same "$ref" "$TMP/split$w.pt" 1e-5 >"$TMP/cmp" 2>&1 || { cat "$TMP/cmp" "$TMP/split$w.out"; fail "split (workers $w): the grown job's weights differ from the plain run"; }
  grep -q "^steps $total\$" "$TMP/split$w.out" || { grep "^steps" "$TMP/split$w.out"; fail "split (workers $w): the script's own step count is not $total at its end"; }
  [ "$(sed -n 1p "$TMP/split$w.pt.log")" = "epoch,loss,lr" ] && [ "$(wc -l <"$TMP/split$w.pt.log")" = 5 ] ||
    { cat "$TMP/split$w.pt.log"; fail "split (workers $w): the log is not its header and one line per epoch"; }
  # every epoch's line as in the plain run, the one the job stopped in too
  # (its mean loss: the script's sum over its batches, from before the
  # restart and after; the restarted job's sum started at 0 before the
  # script's variables were put back)
  e=$(grep -c "^epoch .* done" "$TMP/split$w.out")
  [ "$e" = 4 ] && [ "$(grep -c "^epoch 0 done" "$TMP/split$w.out")" = 1 ] || { cat "$TMP/split$w.out"; fail "split (workers $w): stdout does not say each epoch once"; }
  # (to 1e-5: the losses printed to 6 decimals, summed over 2 and then 3 ranks' slices)
  "$PYTHON" -c '
import sys
a, b = [[line.strip().split(",") for line in open(f)] for f in sys.argv[1:]]
assert a[0] == b[0] and len(a) == len(b) and all(x[0] == y[0] and x[2] == y[2] and abs(float(x[1]) - float(y[1])) <= 1e-5
                                                  for x, y in zip(a[1:], b[1:]))' "$ref.log" "$TMP/split$w.pt.log" ||
    { diff "$ref.log" "$TMP/split$w.pt.log"; fail "split (workers $w): the log's epochs differ from the plain run's"; }
  pass "split, workers $w$([ $max = 0 ] || echo ", the script counting its steps to $max"): 2 -> 3 ranks at optimizer step $step (the job restarted), weights equal the plain run ($(cat "$TMP/cmp")); the log as the plain run's, stdout once per epoch, the script's count $total; $(cat "$TMP/files")"
done

if [ "${GROW_SHORT:-0}" != 1 ] && wants epoch-end; then
  # the job stops at the end of an epoch (shard): the step that agreed to
  # grow is the epoch's last (10 steps over 2 ranks; the script holds 2 s
  # after step 9, where the discovery script sees the third slot), so the
  # loader's iteration has nothing left when the job stops; the restarted
  # job comes back into that iteration, and the code after the loop reads
  # the loop's variables as they were (the batches it counted, the last
  # batch's loss): epoch 0's lines are the first job's
  grow end GROW_AT=9 GROW_HOLD=9:2 GROW_PAUSE=0 HVDSHIM_DATA=shard GROW_WORKERS=0 GROW_MAX_STEPS=30
  [ "$step" = 11 ] || { cat "$TMP/end.out"; fail "epoch's end: the job went on from optimizer step $step, not 11 (the discovery script was not run during the 2 s after step 9)"; }
  [ "$(grep -c "^epoch 0 done, last loss [0-9.]*$" "$TMP/end.out")" = 1 ] && [ "$(sed -n 2p "$TMP/end.pt.log" | cut -d, -f1)" = 0 ] &&
    [ "$(wc -l <"$TMP/end.pt.log")" = $(($(grep -c "^epoch [0-9]* done" "$TMP/end.out") + 1)) ] && grep -q "^steps 30$" "$TMP/end.out" ||
    { cat "$TMP/end.out" "$TMP/end.pt.log"; fail "epoch's end: epoch 0's lines are not there once, or the script did not count its 30 steps"; }
  # (its optimizer has stepped: torch's check at the scheduler's step says nothing, as in the plain run)
  ! grep -q "Detected call of .lr_scheduler.step(). before" "$TMP/end.out" || { cat "$TMP/end.out"; fail "epoch's end: torch warned that the scheduler stepped before the optimizer"; }
  pass "shard: 2 -> 3 ranks at the end of epoch 0 (optimizer step 10, its loader's iteration used up): epoch 0's lines once (the loop's count and last loss put back), the script's count 30, no warning from torch"
fi
if [ "${GROW_SHORT:-0}" != 1 ]; then
  mkdir -p "$TMP/seen"
  grow shard GROW_PAUSE=0.12 HVDSHIM_DATA=shard HVDSHIM_CHECK_STEPS=1 HVDSHIM_SAVE_RANKS=all GROW_SEEN="$TMP/seen"
  # every sample once per epoch over both jobs; besides, in each epoch the
  # restarted job replayed (before the one it stopped in: 10 steps an epoch
  # over 2 ranks), each rank's first batch (12 samples) read once more
  "$PYTHON" - "$TMP/seen" "$step" <<'PY' >"$TMP/seen.txt" 2>&1 || { cat "$TMP/seen.txt"; fail "shard: the samples read over both jobs are not every sample once per epoch and the replayed batches"; }
import collections, os, sys
reads = collections.defaultdict(collections.Counter)
for name in os.listdir(sys.argv[1]):
    for line in open(os.path.join(sys.argv[1], name)):
        e, i = map(int, line.split())
        reads[e][i] += 1
replayed = (int(sys.argv[2]) - 2) // 10  # (stopped at step 10, the end of epoch 0: back in its used-up iteration)
assert sorted(reads) == [0, 1, 2, 3], "epochs read: %s" % sorted(reads)
for e, c in sorted(reads.items()):
    extra = sum(c.values()) - 240
    assert set(c) == set(range(240)), "epoch %d: %d samples never read" % (e, 240 - len(c))
    assert extra == (36 if e < replayed else 0) and max(c.values()) <= 2, \
        "epoch %d (%d replayed): %d reads more than the 240 samples" % (e, replayed, extra)
print("%d epoch(s) replayed" % replayed)
PY
  pass "shard: 2 -> 3 ranks at optimizer step $step, every sample read once per epoch over both jobs (and $(cat "$TMP/seen.txt"), one batch a rank each), replicas agree at every step"
fi

# hosts leaving, then joining: the discovery script lists 2 slots, then 1
# (as Horovod's driver, the job gives up the slot the script no longer
# lists), then 2 again once the job has made 12 more steps: the job stops
# at an optimizer step and starts again over 1 rank, which goes on from that
# step, writes its files for real and still follows the discovery script,
# then over 2 again; the weights and the log equal the plain run's
cat >"$TMP/disc21.sh" <<EOD
#!/bin/sh
n=\$(cat "$TMP/progress" 2>/dev/null); n=\${n:-0}
[ "\$n" -ge "\$GROW_AT" ] 2>/dev/null && [ ! -e "$TMP/left" ] && echo \$n >"$TMP/left"
[ -e "$TMP/left" ] && [ "\$n" -ge \$((\$(cat "$TMP/left") + 12)) ] && touch "$TMP/back"
if [ -e "$TMP/back" ]; then echo localhost:2; elif [ -e "$TMP/left" ]; then echo localhost:1; else echo localhost:2; fi
EOD
chmod +x "$TMP/disc21.sh"
rm -f "$TMP/progress" "$TMP/left" "$TMP/back"
env HVDRUN_LIB="$LIB" HVDRUN_MPIRUN="$MPIRUN" HVDSHIM_ELASTIC_INTERVAL=0.2 GROW_AT=$((seed % 30 + 5)) GROW_PROGRESS="$TMP/progress" \
  HVDSHIM_DATA=split GROW_WORKERS=0 GROW_GENERATOR=1 GROW_MAX_STEPS=70 timeout 240 "$HVDRUN" -np 2 --max-np 2 \
  --host-discovery-script "$TMP/disc21.sh" "$PYTHON" "$S" "$TMP/shrink.pt" >"$TMP/shrink.out" 2>&1 ||
  { cat "$TMP/shrink.out"; fail "shrink: the job failed"; }
grep -q "hosts left: the job stops after optimizer step [0-9]*, its state saved in .*, and starts again over 1 rank(s) (was 2)" "$TMP/shrink.out" &&
  grep -q "hvdrun: the job stopped to shrink; starting it again over 1 rank(s) (was 2)" "$TMP/shrink.out" &&
  grep -q "the job started again over 1 rank(s) (was 2) and goes on from optimizer step" "$TMP/shrink.out" ||
  { cat "$TMP/shrink.out"; fail "shrink: the job did not start again over the 1 slot left"; }
grep -q "hvdrun: the job stopped to grow; starting it again over 2 rank(s) (was 1)" "$TMP/shrink.out" &&
  grep -q "the job started again over 2 rank(s) (was 1) and goes on from optimizer step" "$TMP/shrink.out" ||
  { cat "$TMP/shrink.out"; fail "shrink: the job on 1 rank did not grow back to 2"; }
[ "$(grep -c "hvdrun: the job stopped" "$TMP/shrink.out")" = 2 ] || { cat "$TMP/shrink.out"; fail "shrink: the job did not restart exactly twice"; }
steps=$(sed -n 's/.*goes on from optimizer step \([0-9]*\).*/\1/p' "$TMP/shrink.out" | paste -sd, -)
same "$TMP/plaing.pt" "$TMP/shrink.pt" 1e-5 >"$TMP/cmp" 2>&1 || { cat "$TMP/cmp" "$TMP/shrink.out"; fail "shrink: the weights differ from the plain run"; }
grep -q "^steps 70\$" "$TMP/shrink.out" || { grep "^steps" "$TMP/shrink.out"; fail "shrink: the script's own step count is not 70 at its end"; }
"$PYTHON" -c '
import sys
a, b = [[line.strip().split(",") for line in open(f)] for f in sys.argv[1:]]
assert a[0] == b[0] and len(a) == len(b) and all(x[0] == y[0] and x[2] == y[2] and abs(float(x[1]) - float(y[1])) <= 1e-5
                                                  for x, y in zip(a[1:], b[1:]))' "$TMP/plaing.pt.log" "$TMP/shrink.pt.log" ||
  { diff "$TMP/plaing.pt.log" "$TMP/shrink.pt.log"; cat "$TMP/shrink.out"; fail "shrink: the log differs from the plain run's"; }
pass "split: 2 -> 1 -> 2 ranks as the discovery script lists 1 slot, then 2, going on from optimizer steps $steps (two restarts), weights equal the plain run ($(cat "$TMP/cmp")), the log as the plain run's, the script's count 70"

# (GROW_SHORT: left to the other stacks, the adapter's logic)
if [ "${GROW_SHORT:-0}" != 1 ] && wants no-loader; then
  # a script that calls no DataLoader (its batches cut from its tensors): the
  # job cannot stop where a restarted script could come back; rank 0 says so
  # once, two steps after the stop was agreed, and the job goes on over its ranks
  cat >"$TMP/noloader.py" <<'PY'
import os, time, torch
x, y = torch.randn(96, 8), torch.randn(96, 1)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(40):
    i = step % 8 * 12
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x[i:i + 12]), y[i:i + 12]).backward()
    opt.step()
    with open(os.environ["GROW_PROGRESS"], "w") as f:
        f.write("%d\n" % (step + 1))
    time.sleep(0.1)
print("steps 40")
PY
  rm -f "$TMP/progress" "$TMP/progress.passed"
  env HVDRUN_LIB="$LIB" HVDRUN_MPIRUN="$MPIRUN" HVDSHIM_ELASTIC_INTERVAL=0.2 GROW_AT=5 GROW_PROGRESS="$TMP/progress" timeout 120 \
    "$HVDRUN" -np 2 --oversubscribe --max-np 3 --host-discovery-script "$TMP/disc.sh" "$PYTHON" "$TMP/noloader.py" \
    >"$TMP/noloader.out" 2>&1 || { cat "$TMP/noloader.out"; fail "no DataLoader: the job failed"; }
  [ "$(grep -c "hosts joined, but the job cannot stop to start again over 3 rank(s): this script has called no DataLoader for 2 optimizer steps" "$TMP/noloader.out")" = 1 ] &&
    ! grep -q "hvdrun: the job stopped" "$TMP/noloader.out" && grep -q "^steps 40$" "$TMP/noloader.out" ||
    { cat "$TMP/noloader.out"; fail "no DataLoader: not one line saying the job cannot stop to grow, and the job going on"; }
  pass "a script with no DataLoader: one line, the job cannot stop to grow; it goes on over its 2 ranks to its end"
fi

# the state kept (HVDSHIM_ELASTIC_STATE given): a restart whose script runs no epoch never comes back
rc=0
GROW_EPOCHS=0 HVDSHIM_ELASTIC_RESUME=1 HVDSHIM_ELASTIC_STATE="$TMP/state0" T=60 shim 3 "$PYTHON" "$S" "$TMP/never.pt" >"$TMP/never.out" 2>&1 || rc=$?
[ $rc != 0 ] && [ $rc != 124 ] || { cat "$TMP/never.out"; fail "a restart that never came back: status $rc"; }
grep -q "the restarted job ended before its script was back where the job stopped (its loaders never iterated)" "$TMP/never.out" ||
  { cat "$TMP/never.out"; fail "a restart that never came back: no line saying so"; }
pass "a restarted job whose script never comes back ends with status $rc and a line saying so"
