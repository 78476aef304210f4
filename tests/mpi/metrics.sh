#!/bin/sh
# HVDSHIM_METRICS: rank 0 writes one JSON object per step, with the schema
# of docs/OBSERVABILITY.md (tests/mpi/metrics-check.py), for the C API (engine_test
# marks its steps), the native example (a hooked call that reduces is a
# step) and the PyTorch example (an optimizer step; samples from the batch).
. "$(dirname "$0")/../lib.sh"
need_mpirun
PY=$(command -v python3 || true)
[ -n "$PY" ] || skip "python3 not found (needed to read JSON)"
CHECK="$top_srcdir/tests/mpi/metrics-check.py"

# C API: 20 steps of 8 tensors x 100 float32 at 3 ranks; every step reduces
# exactly 3200 bytes in 8 tensors, samples = 32 per rank x 3
HVDSHIM_METRICS="$TMP/c.jsonl" shim 3 "$ENGINE_TEST" steps 20 8 100 >"$TMP/c.log" 2>&1 || { cat "$TMP/c.log"; fail "engine_test steps"; }
"$PY" "$CHECK" "$TMP/c.jsonl" ranks=3 samples=96 bytes_reduced=3200 tensors=8 autotune=off \
  fusion_threshold=134217728 cycle_time_ms=1 || fail "C API metrics"
[ "$(wc -l <"$TMP/c.jsonl")" = 20 ] || fail "expected 20 lines (one per step, rank 0 only), got $(wc -l <"$TMP/c.jsonl")"
pass "C API: 20 steps, exact bytes and tensor counts"

# an explicit setting shows in every line
HVDSHIM_METRICS="$TMP/f.jsonl" HVDSHIM_FUSION_THRESHOLD=1M HVDSHIM_CYCLE_TIME=2.5 shim 2 "$ENGINE_TEST" steps 5 8 100 >"$TMP/f.log" 2>&1 ||
  { cat "$TMP/f.log"; fail "engine_test steps with settings"; }
"$PY" "$CHECK" "$TMP/f.jsonl" fusion_threshold=1048576 cycle_time_ms=2.5 || fail "settings in metrics"

# a path that cannot be written: one warning line naming it; the job runs
HVDSHIM_METRICS="$TMP/no/such/dir/m.jsonl" shim 2 "$ENGINE_TEST" steps 3 2 10 >"$TMP/bad.log" 2>&1 ||
  { cat "$TMP/bad.log"; fail "a bad metrics path ended the job"; }
n=$(grep -c "HVDSHIM_METRICS: cannot open '$TMP/no/such/dir/m.jsonl': No such file or directory; metrics disabled" "$TMP/bad.log")
[ "$n" = 1 ] || { cat "$TMP/bad.log"; fail "expected one warning about the metrics path, got $n"; }
pass "unwritable path: one warning, job runs"

# native example: one line per training step (sgd_update), samples unknown
. "$top_srcdir/tests/native/native-lib.sh"
build_lib "$BIN"
build_train "$BIN" train
HVDSHIM_METRICS="$TMP/n.jsonl" native 2 "$EX/mlp.hooks" "$BIN/train" --steps 30 >"$TMP/n.log" 2>&1 || { cat "$TMP/n.log"; fail "native run"; }
"$PY" "$CHECK" "$TMP/n.jsonl" ranks=2 samples=null || fail "native metrics"
[ "$(wc -l <"$TMP/n.jsonl")" = 30 ] || fail "native: expected 30 lines, got $(wc -l <"$TMP/n.jsonl")"
pass "native example: one line per step"

# PyTorch example: 1536 training samples, batch 64, 2 ranks -> 12 steps of 128
have_torch || { echo "SKIP (part): PyTorch not importable by $PYTHON"; exit 0; }
export OMP_NUM_THREADS=1
HVDSHIM_METRICS="$TMP/t.jsonl" shim 2 "$PYTHON" "$top_srcdir/examples/train.py" --epochs 1 --checkpoint "$TMP/ck.pt" \
  >"$TMP/t.log" 2>&1 || { cat "$TMP/t.log"; fail "torch example"; }
"$PY" "$CHECK" "$TMP/t.jsonl" ranks=2 samples=128 || fail "torch metrics"
[ "$(wc -l <"$TMP/t.jsonl")" = 12 ] || fail "torch: expected 12 lines, got $(wc -l <"$TMP/t.jsonl")"
pass "PyTorch example: 12 optimizer steps of 128 samples"
