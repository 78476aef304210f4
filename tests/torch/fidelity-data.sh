#!/bin/sh
# Zero-code fidelity, the data and the decisions: ordinary scripts
# (tests/torch/fidelity.py) that draw unseeded random numbers, take decisions
# on their own loss, use samplers of their own, evaluate under no_grad, load
# with forkserver workers, diverge (the replica guard), compile: run plain and
# under the shim, compared.  Python over torch: run on Debian 12's torch and
# sid's, not again on trixie's (tests/stacks/check-stacks.sh); the cases the
# launcher and the MPI take part in are in fidelity.sh.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
. "$(dirname "$0")/fidelity_common.sh"
# FIDELITY_SKIP: case names not run here (check-stacks sets it on sid: the
# adapter's own logic, run on Debian 12, not again on torch 2.14):
# plateau, early-shard (early stopping sharded), samplers (the sequential
# and custom samplers; the custom batch sampler stays), dealing (shard
# mode's dealt batches at np=3 and shuffle=False), guard (the replica
# guard's message; its checks, at every step, run in accumulate.sh and grow.sh)
wants() { case " ${FIDELITY_SKIP-} " in *" $1 "*) return 1 ;; esac; }

# --- an unseeded script (random target): every rank fits the same function
T=120 HVDSHIM_WORKER_STDOUT=1 run_shim 2 "$PYTHON" "$F" unseeded
grep -q "^\[rank 0\] converged" "$TMP/shim.out" || { cat "$TMP/shim.out"; fail "unseeded regression did not converge"; }
[ "$(grep -c '^\[rank .\] target' "$TMP/shim.out")" = 2 ] &&
  [ "$(sed -n 's/^\[rank .\] target //p' "$TMP/shim.out" | sort -u | wc -l)" = 1 ] ||
  { cat "$TMP/shim.out"; fail "the ranks drew different targets"; }
pass "unseeded regression converges; both ranks drew one target ($(grep -m1 '^\[rank 0\] converged' "$TMP/shim.out"))"

# --- unseeded generators: one state on every rank of a job, another per job
draw='import random, numpy, torch; print("draw", torch.initial_seed(), random.random(), numpy.random.rand())'
HVDSHIM_WORKER_STDOUT=1 run_shim 2 "$PYTHON" -c "$draw"
sed -n 's/^\[rank .\] draw //p' "$TMP/shim.out" >"$TMP/draw1"
HVDSHIM_WORKER_STDOUT=1 run_shim 2 "$PYTHON" -c "$draw"
sed -n 's/^\[rank .\] draw //p' "$TMP/shim.out" >"$TMP/draw2"
[ "$(wc -l <"$TMP/draw1")" = 2 ] && [ "$(sort -u "$TMP/draw1" | wc -l)" = 1 ] && [ "$(sort -u "$TMP/draw2" | wc -l)" = 1 ] &&
  ! cmp -s "$TMP/draw1" "$TMP/draw2" || { cat "$TMP/draw1" "$TMP/draw2"; fail "torch/random/numpy draws: expected equal per job, different across jobs"; }
pass "unseeded torch, random and numpy: one state on both ranks, a different one in the next job"

# --- ReduceLROnPlateau on each rank's own loss: ranks stay identical
if wants plateau; then
  HVDSHIM_WORKER_STDOUT=1 run_shim 2 "$PYTHON" "$F" plateau --epochs 6
  [ "$(sed -n 's/^\[rank .\] \(lr\|checksum\) //p' "$TMP/shim.out" | sort -u | wc -l)" = 2 ] ||
    { cat "$TMP/shim.out"; fail "plateau: the ranks' lr or weights differ"; }
  pass "plateau scheduler on local losses: lr and weights identical on both ranks"
fi

# --- early stopping on each rank's own epoch loss (loss.item() after
# backward): split, the plain run's epoch, loss and weights; sharded, one
# decision on every rank (with HVDSHIM_LOSS=local the ranks of the split
# run stop at epochs 18 and 19, the plain run at 54)
mkdir -p "$TMP/ep" "$TMP/es" "$TMP/eh"
run_plain early-stop --dir "$TMP/ep" --out "$TMP/p-early.pt"
stop=$(grep "^stopped at" "$TMP/plain.out")
HVDSHIM_DATA=split HVDSHIM_WORKER_STDOUT=1 run_shim 2 "$PYTHON" "$F" early-stop --dir "$TMP/es" --out "$TMP/s-early.pt"
[ "$(sed -n 's/^\[rank .\] stopped at //p' "$TMP/shim.out" | sort | uniq -c | sed 's/^ *//')" = "2 ${stop#stopped at }" ] ||
  { cat "$TMP/plain.out" "$TMP/shim.out"; fail "early stopping, split: expected both ranks to say '$stop'"; }
same "$TMP/p-early.pt" "$TMP/s-early.pt" 1e-4 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "early stopping: weights differ"; }
same "$TMP/ep/best.pt" "$TMP/es/best.pt" 1e-4 >/dev/null || fail "early stopping: the best-model file differs from plain's"
sharded=
if wants early-shard; then
  for scaler in "" --scaler; do
    HVDSHIM_WORKER_STDOUT=1 run_shim 2 "$PYTHON" "$F" early-stop --dir "$TMP/eh" $scaler
    [ "$(sed -n 's/^\[rank .\] \(stopped at\|checksum\) //p' "$TMP/shim.out" | sort -u | wc -l)" = 2 ] ||
      { cat "$TMP/shim.out"; fail "early stopping, sharded ${scaler}: the ranks stopped at different epochs or differ"; }
  done
  sharded="; sharded, with and without GradScaler: one decision on both ranks"
fi
pass "early stopping on the loss read after backward: split at np=2 = plain ($stop; $(cat "$TMP/cmp"))$sharded"

# --- samplers of every kind are sharded (split mode = the plain run)
samplers="sequential custom-sampler custom-batches"
wants samplers || samplers=custom-batches
for c in $samplers; do
  run_plain "$c" --out "$TMP/p-$c.pt"
  HVDSHIM_DATA=split run_shim 2 "$PYTHON" "$F" "$c" --out "$TMP/s-$c.pt"
  same "$TMP/p-$c.pt" "$TMP/s-$c.pt" 1e-4 >"$TMP/cmp" || { cat "$TMP/cmp" "$TMP/shim.out"; fail "$c differs"; }
  pass "$c sampler, split at np=2: $(cat "$TMP/cmp")"
done
if wants dealing; then
  run_shim 3 "$PYTHON" "$F" custom-batches --epochs 2
  grep -q "^len 4 steps 8" "$TMP/shim.out" || { cat "$TMP/shim.out"; fail "custom batches at np=3: expected 4 per epoch"; }
  run_shim 2 "$PYTHON" "$F" sequential --epochs 1
  grep -q "^len 6 steps 6" "$TMP/shim.out" || { cat "$TMP/shim.out"; fail "shuffle=False at np=2: expected 6 batches"; }
  pass "shard mode: 12 custom batches dealt 4 per rank at np=3; shuffle=False sharded (6 of 12 batches per rank)"
fi

# --- a shuffled validation loader under no_grad stays whole
run_plain eval
HVDSHIM_DATA=split run_shim 2 "$PYTHON" "$F" eval
for w in before after; do
  a=$(grep "^$w " "$TMP/plain.out") b=$(grep "^$w " "$TMP/shim.out")
  [ -n "$a" ] && [ "$a" = "$b" ] || { cat "$TMP/plain.out" "$TMP/shim.out"; fail "evaluation $w training differs"; }
done
pass "no_grad evaluation of a shuffled loader: the plain run's metric ($(grep '^before' "$TMP/plain.out"))"

# --- len(loader) and the batches that follow agree (fidelity.py lengths: a
# wrapper module holding the loss, len before or after eval()/train() and
# inference_mode/no_grad, inside and after the loop, a schedule sized from
# len at setup, the training loader evaluated too).  Sharded: every loop's
# told, inside and iterated counts equal on both ranks; evaluations whole
# (the plain run's counts), training 4 of the plain run's 8 batches, the
# schedule's lr the plain run's at every epoch's end (it is sized from the
# sharded len); the shuffled loader evaluated before any model ran (len
# taken for training, kept) is sharded, 3 of 5, with one warning.  (Split
# mode keeps no answer, the count being the same: adapter_unit.py.)  Costs
# one plain run and one np=2 launch (Debian 12: 5 s; sid: 15 s, nearly all
# the launch).
run_plain lengths
cp "$TMP/plain.out" "$TMP/plain-len.out"
HVDSHIM_WORKER_STDOUT=1 run_shim 2 "$PYTHON" "$F" lengths
"$PYTHON" - "$TMP/plain-len.out" "$TMP/shim.out" <<'PY' || { cat "$TMP/plain-len.out" "$TMP/shim.out"; fail "lengths: len(loader) and the batches disagree"; }
import re, sys
loop = re.compile(r"(?:\[rank (\d)\] )?(\S+(?: \d+)?) iterated (\d+) told (\d+) inside (\S+) after (\d+) last (\d+)$")
def read(path):
    loops, lines = {}, {}
    for line in open(path):
        line = line.rstrip("\n")
        m = loop.match(line)
        if m:
            loops[(int(m.group(1) or 0), m.group(2))] = (int(m.group(3)), int(m.group(4)), m.group(5), int(m.group(6)), int(m.group(7)))
        m = re.match(r"(?:\[rank (\d)\] )?(lr|sizes) (.*)", line)
        if m:
            lines.setdefault((int(m.group(1) or 0), m.group(2)), []).append(m.group(3))
    return loops, lines
(plain, plines), (shim, slines) = read(sys.argv[1]), read(sys.argv[2])
assert len(plain) == 14 and set(shim) == {(r, t) for r in (0, 1) for _, t in plain}, sorted(shim)
for (r, tag), (n, told, inside, after, last) in sorted(shim.items()):
    want = 3 if tag == "probe" else 4 if tag.startswith("train ") else plain[(0, tag)][0]
    assert (n, told, inside, last) == (want, want, str(want), 1), (r, tag, shim[(r, tag)], want)
    assert after == (5 if tag == "probe" else n), (r, tag, after)  # (after the probe: the next evaluation, whole)
for r in (0, 1):
    assert slines[(r, "lr")] == plines[(0, "lr")], (r, slines[(r, "lr")])
    assert slines[(r, "sizes")] == ["train 4 val 5 test 4"], slines[(r, "sizes")]
said = [l for l in open(sys.argv[2]) if "len() was asked" in l]
assert len(said) == 1 and "DataLoader 3 (made at fidelity.py" in said[0] and "before this evaluation" in said[0], said
print("ok")
PY
pass "len(loader) = the batches that follow (wrapper module, len before/after eval() and inference_mode, inside and after the loop, schedule from len, training loader evaluated), np=2: 14 loops agree on both ranks, evaluations whole, training sharded, lr = plain's"

# --- DataLoader workers from a forkserver, batches passed by file descriptor
# (the workers bind in the multiprocessing folder the rank made: it must be
# real, not in the rank's overlay; Python 3.14's default start method).
# Slow, not stuck: Python 3.13's forkserver never preloads the main script
# (it asks spawn for 'main_path', spawn names it 'init_main_from_path'), so
# every worker of every epoch imports torch itself, 8 imports in the np=2
# job, about 12 s of CPU (trixie, MPICH or Open MPI: 14 s on a quiet 2-core
# machine, 20-40 s beside two or three busy loops, as long as the plain run
# or 1.5 times it; once past 180 s on a machine running another long job).
# So the bound follows this machine's load: 6 times the plain run, at least
# 180 s.
t0=$(date +%s)
py "$TORCH_DIR/workers.py" "$TMP/w-plain.pt" >"$TMP/plain.out" 2>&1 || { cat "$TMP/plain.out"; fail "plain workers.py"; }
bound=$((6 * ($(date +%s) - t0 + 1)))
[ $bound -ge 180 ] || bound=180
T=$bound HVDSHIM_DATA=split run_shim 2 "$PYTHON" "$TORCH_DIR/workers.py" "$TMP/w-shim.pt"
same "$TMP/w-plain.pt" "$TMP/w-shim.pt" 1e-4 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "forkserver workers: differs from plain"; }
pass "forkserver DataLoader workers passing batches by file descriptor, split at np=2: same weights as plain ($(cat "$TMP/cmp"))"

# --- the replica guard stops a job whose ranks diverged
if wants guard; then
  HVDSHIM_CHECK_STEPS=4 shim 2 "$PYTHON" "$F" diverge >"$TMP/out" 2>&1 && { cat "$TMP/out"; fail "diverged ranks not caught"; }
  grep -q "models diverged by optimizer step 4: parameter 'm0.2.bias' differs across ranks" "$TMP/out" ||
    { cat "$TMP/out"; fail "no clear divergence message"; }
  HVDSHIM_CHECK_STEPS=0 run_shim 2 "$PYTHON" "$F" diverge
  pass "replica guard: divergence named at step 4 (HVDSHIM_CHECK_STEPS=4); off with 0"
fi

# --- torch.compile and torch.func (torch >= 2.0)
if py -c 'import torch.func' 2>/dev/null; then
  # dynamo traces the model (and would trace the adapter's hook); aot_eager
  # needs no C++ toolchain (Debian's torch ships no inductor headers)
  export COMPILE_BACKEND=${COMPILE_BACKEND:-aot_eager}
  run_plain compile --epochs 1 --out "$TMP/p-compile.pt"
  # (TORCH_LOGS=recompiles: dynamo never compiles the adapter's hook
  # wrapper, patching.untraced; it recompiled it for each module type and
  # dtype until torch's limit, warning each time)
  T=300 TORCH_LOGS=recompiles HVDSHIM_DATA=split run_shim 2 "$PYTHON" "$F" compile --epochs 1 --out "$TMP/s-compile.pt"
  same "$TMP/p-compile.pt" "$TMP/s-compile.pt" 1e-4 >"$TMP/cmp" || { cat "$TMP/cmp" "$TMP/shim.out"; fail "compile differs"; }
  ! grep -q "hvdshim_torch/patching.py" "$TMP/shim.out" || { cat "$TMP/shim.out"; fail "compile: dynamo compiled the adapter's hook wrapper"; }
  pass "torch.compile'd model, split at np=2: $(cat "$TMP/cmp"); the adapter's hooks never compiled"
  run_shim 2 "$PYTHON" "$F" func
  [ "$(grep -c 'torch.func transform.*stands aside; rank 0 runs it alone' "$TMP/shim.out")" = 1 ] &&
    [ "$(grep -c 'torch.func transform.*this rank exits' "$TMP/shim.out")" = 1 ] || { cat "$TMP/shim.out"; fail "torch.func not stood aside"; }
  pass "torch.func script: one warning, run once by rank 0, rank 1 exits 0 with one line"
else
  echo "note: torch $("$PYTHON" -c 'import torch; print(torch.__version__)') has no torch.func or torch.compile; those cases run on torch 2.x only"
fi
