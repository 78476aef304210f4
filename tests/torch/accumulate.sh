#!/bin/sh
# Gradient accumulation (HVDSHIM_ACCUMULATE): 4 backward passes per
# optimizer step, a short last step per epoch, clipping before each step,
# a parameter used only in some passes (tests/torch/accumulate.py).  Once k
# has repeated, gradients are reduced once per step; a step that comes
# sooner (the short one) reduces first.  Checked: split mode against the
# plain run and against reducing every backward (float64), the ranks
# identical at every step (replica guard), and fewer reductions.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
A="$TORCH_DIR/accumulate.py"
export HVDSHIM_DATA=split HVDSHIM_CHECK_STEPS=1 HVDSHIM_LOG_LEVEL=info
"$PYTHON" "$A" --out "$TMP/plain.pt" >"$TMP/plain.out" 2>&1 || { cat "$TMP/plain.out"; fail "plain run"; }
for mode in off auto; do
  HVDSHIM_ACCUMULATE=$mode HVDSHIM_METRICS="$TMP/m-$mode.jsonl" shim 2 "$PYTHON" "$A" --out "$TMP/$mode.pt" \
    >"$TMP/$mode.out" 2>&1 || { cat "$TMP/$mode.out"; fail "np=2 HVDSHIM_ACCUMULATE=$mode"; }
  same "$TMP/plain.pt" "$TMP/$mode.pt" 1e-9 >"$TMP/cmp-$mode" || { cat "$TMP/cmp-$mode" "$TMP/$mode.out"; fail "$mode differs from plain"; }
done
same "$TMP/off.pt" "$TMP/auto.pt" 1e-9 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "auto differs from reducing every backward"; }
grep -q "4 backward passes per optimizer step: gradients are reduced once per step" "$TMP/auto.out" ||
  { cat "$TMP/auto.out"; fail "auto: k=4 was not adopted"; }
grep -q "backward passes per optimizer step" "$TMP/off.out" && { cat "$TMP/off.out"; fail "off: k adopted"; }
# bytes, not tensors: every backward also averages its loss (a scalar, HVDSHIM_LOSS)
count() { "$PYTHON" -c 'import json,sys; print(sum(json.loads(l)["bytes_reduced"] for l in open(sys.argv[1])))' "$1"; }
t_off=$(count "$TMP/m-off.jsonl") t_auto=$(count "$TMP/m-auto.jsonl")
[ $((t_auto * 10)) -lt $((t_off * 6)) ] || fail "auto reduced $t_auto bytes, off $t_off: expected under 60%"
pass "k=4 at np=2 (split): same weights as plain ($(cat "$TMP/cmp-auto")) and as reducing every backward ($(cat "$TMP/cmp")); $t_auto bytes reduced instead of $t_off"
# shard mode at np=3, k=3 with a short last step: ranks identical at every step (the guard), k adopted
HVDSHIM_DATA=shard shim 3 "$PYTHON" "$A" --k 3 --batches 21 --out "$TMP/s3.pt" >"$TMP/s3.out" 2>&1 ||
  { cat "$TMP/s3.out"; fail "np=3 shard k=3"; }
grep -q "3 backward passes per optimizer step" "$TMP/s3.out" || { cat "$TMP/s3.out"; fail "np=3: k=3 not adopted"; }
pass "k=3 at np=3 (shard): ranks identical at every step, k adopted"
# noise added to the gradients between the last backward and the step: drawn
# alike on every rank, also in the first step, whose last backward could not
# know it was the last (the replicas step alike: the guard at every step)
HVDSHIM_DATA=shard shim 2 "$PYTHON" "$A" --noise 0.05 --epochs 2 --batches 20 --out "$TMP/noise.pt" >"$TMP/noise.out" 2>&1 ||
  { cat "$TMP/noise.out"; fail "np=2 shard k=4 with gradient noise"; }
grep -q "4 backward passes per optimizer step" "$TMP/noise.out" || { cat "$TMP/noise.out"; fail "gradient noise: k=4 not adopted"; }
pass "k=4 at np=2 (shard), noise drawn and added to the gradients before each step: ranks identical at every step"
