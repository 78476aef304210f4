#!/bin/sh
# HuggingFace scripts, unmodified (tests/torch/hf_train.py: a tiny BERT from a
# config, synthetic data): Trainer(...).train() and a plain
# Accelerator().prepare(...) loop, plain and under the shim at np=2.
#  - split: the same weights as the plain run (the saved model.safetensors),
#    one set of logs, the model saved once, samples counted per step
#    (the model is called with keyword arguments);
#  - shard (default): each rank half the steps, identical weights; with an
#    evaluation after each epoch, each epoch's steps read every sample once
#    over the ranks (the Trainer makes the epoch's iterator before
#    training_step calls model.train(), the model still in eval mode from
#    the evaluation: the loader's past says it trains);
#  - use_cpu=True: Accelerate starts torch.distributed itself from the MPI
#    environment; the shim stands aside and the run completes.
# Skips where transformers and accelerate are not installed (Debian 12 has
# neither; make check-stacks runs this in the sid chroot).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
"$PYTHON" -c 'import transformers, accelerate' 2>/dev/null ||
  skip "transformers and accelerate are not importable by $PYTHON (apt-get install python3-transformers python3-accelerate: Debian 13 and later)"
H="$TORCH_DIR/hf_train.py"
warm_start
export TMPDIR="$TMP/tmpdir" # the ranks' overlay folders land here
mkdir -p "$TMPDIR"
weights() { # weights DIR1 DIR2: their model.safetensors agree within 1e-5
  "$PYTHON" - "$1/model.safetensors" "$2/model.safetensors" <<'PY'
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
worst = max(float((a[k].double() - b[k].double()).abs().max()) for k in a)
print("%d tensors, largest difference %.2e (tolerance 1e-5)" % (len(a), worst))
sys.exit(0 if worst <= 1e-5 else 1)
PY
}
for kind in trainer accelerate; do
  py "$H" $kind --out "$TMP/$kind-plain" --batch 16 >"$TMP/plain.out" 2>&1 || { cat "$TMP/plain.out"; fail "plain $kind"; }
  HVDSHIM_DATA=split HVDSHIM_METRICS="$TMP/$kind.jsonl" T=240 shim 2 "$PYTHON" "$H" $kind --out "$TMP/$kind-split" \
    --batch 16 >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "$kind, split at np=2"; }
  weights "$TMP/$kind-plain" "$TMP/$kind-split" >"$TMP/cmp" || { cat "$TMP/cmp" "$TMP/out"; fail "$kind: split differs from plain"; }
  [ "$(ls "$TMP/$kind-split" | tr '\n' ' ')" = "$(ls "$TMP/$kind-plain" | tr '\n' ' ')" ] ||
    { ls "$TMP/$kind-split" "$TMP/$kind-plain"; fail "$kind: other files saved than in the plain run"; }
  logs=$(grep -c "'loss'\|^step .* loss" "$TMP/plain.out")
  [ "$(grep -c "'loss'\|^step .* loss" "$TMP/out")" = "$logs" ] || { cat "$TMP/out"; fail "$kind: expected $logs log lines (rank 0's)"; }
  [ "$(grep -o 'checksum [0-9.]*' "$TMP/out" | sort -u | wc -l)" = 1 ] || { cat "$TMP/out"; fail "$kind: the ranks' weights differ"; }
  # the losses logged are the plain run's (Accelerator.backward backwards loss / k: `loss` is averaged, which the
  # Trainer returns and logs; rank 0's own before, up to 0.01 apart), to the 4 digits printed
  "$PYTHON" - "$TMP/plain.out" "$TMP/out" >"$TMP/cmp-loss" <<'PY' || { cat "$TMP/cmp-loss" "$TMP/plain.out" "$TMP/out"; fail "$kind: the logged losses differ from the plain run's"; }
import re, sys
def losses(path):
    return [float(m) for m in re.findall(r"(?:'loss': '?|^step \d+ loss )([0-9.]+)", open(path).read(), re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert a and len(a) == len(b), (a, b)
worst = max(abs(x - y) for x, y in zip(a, b))
print("%d logged losses, largest difference %.1e (tolerance 5e-4)" % (len(a), worst))
sys.exit(0 if worst <= 5e-4 else 1)
PY
  logged=$(cat "$TMP/cmp-loss")
  # samples per step: the whole batch (16), the model called with keyword inputs
  "$PYTHON" - "$TMP/$kind.jsonl" <<'PY' || fail "$kind: samples per step not counted"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 16 and all(r["samples"] == 16 for r in rows), [r["samples"] for r in rows]
PY
  pass "$kind, split at np=2: same weights as plain ($(cat "$TMP/cmp")), $logged, one set of logs, saved once, 16 samples a step"
  ls -d "$TMPDIR"/hvdshim-rank* >/dev/null 2>&1 && { sleep 1; ls -d "$TMPDIR"/hvdshim-rank* 2>/dev/null && fail "overlay left"; }
done
# shard (default): each rank trains on half the batches, the replicas agree
HVDSHIM_WORKER_STDOUT=1 HVDSHIM_METRICS="$TMP/shard.jsonl" T=240 shim 2 "$PYTHON" "$H" trainer --out "$TMP/shard" \
  --batch 8 --eval-each-epoch >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "trainer, shard at np=2"; }
[ "$(grep -o 'checksum [0-9.]*' "$TMP/out" | sort -u | wc -l)" = 1 ] || { cat "$TMP/out"; fail "shard: the ranks' weights differ"; }
[ "$(wc -l <"$TMP/shard.jsonl")" = 16 ] || { cat "$TMP/shard.jsonl"; fail "shard: expected 16 steps (32 plain, halved)"; }
"$PYTHON" - "$TMP/out" <<'PY' || { cat "$TMP/out"; fail "shard, evaluating each epoch: an epoch's steps did not read every sample once"; }
import re, sys
read = {}
for line in open(sys.argv[1]):
    m = re.match(r"\[rank (\d)\] epoch (\d) trained (.*)", line)
    if m:
        read.setdefault(int(m.group(2)), []).extend(map(int, m.group(3).split()))
assert sorted(read) == [0, 1] and all(sorted(v) == list(range(128)) for v in read.values()), read
PY
pass "trainer, shard at np=2, evaluating each epoch: 16 steps (half of plain's 32), every epoch reads each sample once over the ranks, the ranks agree"
# use_cpu=True: Accelerate distributes the script itself (gloo); the shim stands aside
HVDSHIM_LOG_LEVEL=info T=240 shim 2 "$PYTHON" "$H" trainer --out "$TMP/cpu" --batch 16 --use-cpu >"$TMP/out" 2>&1 ||
  { cat "$TMP/out"; fail "trainer with use_cpu=True at np=2"; }
grep -q "torch.distributed.init_process_group was called: the script distributes itself; hvdshim stands aside" "$TMP/out" ||
  { cat "$TMP/out"; fail "use_cpu=True: the shim did not stand aside"; }
[ "$(grep -o 'checksum [0-9.]*' "$TMP/out" | sort -u | wc -l)" = 1 ] || { cat "$TMP/out"; fail "use_cpu=True: the ranks' weights differ"; }
pass "trainer with use_cpu=True: Accelerate distributes it, the shim stands aside, the ranks agree"
