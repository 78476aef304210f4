#!/bin/sh
# GPU tests (need a CUDA GPU, PyTorch with CUDA and mpirun; otherwise they
# skip, saying which is missing).  One GPU: NCCL at one rank; several ranks
# share it through HVDSHIM_GPU_OPERATIONS=MPI (device buffers staged through
# pinned host memory).  Split mode makes the distributed run the
# single-process run, step for step: final weights compared to the plain run
# (np=1), or at np=N to the plain script's exact emulation of an N-way split
# (--emulate-ranks N, split_ref.py: each part's gradients computed alone with
# the shapes a rank has, then averaged).  Measured on an H100 (2026-11-22):
# every emulated case agrees to the last printed digit.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
"$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  skip "no CUDA GPU visible to PyTorch here ($("$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo no torch)): GPU tests not run"
G="$top_srcdir/tests/gpu/gpu_train.py"
R="$top_srcdir/tests/gpu/resnet_train.py"
export HVDSHIM_DATA=split
# same_sums A B TOL: the checksum lines of two outputs agree within TOL
# (|a - b| / max(1, |a|), per parameter sum); with a 4th argument "losses",
# the printed epoch losses too (the loss read after backward is the mean
# over ranks: the emulation's mean of the parts' losses); MIN_DIFF=D: the
# difference must also be at least D (a lossy setting that changes nothing
# is not in effect)
same_sums() {
  "$PYTHON" - "$1" "$2" "$3" "${4:-}" <<'PY'
import os, sys
def sums(p):
    line = [l for l in open(p) if l.startswith("checksum")][-1]
    return [float(v) for v in line.split()[1:]]
def losses(p):
    return [float(l.split()[-1]) for l in open(p) if l.startswith("epoch ") and " loss " in l]
a, b, tol = sums(sys.argv[1]), sums(sys.argv[2]), float(sys.argv[3])
d = max(abs(x - y) / max(1.0, abs(x)) for x, y in zip(a, b))
ok = len(a) == len(b) and d <= tol
if sys.argv[4] == "losses":
    la, lb = losses(sys.argv[1]), losses(sys.argv[2])
    dl = max([abs(x - y) for x, y in zip(la, lb)] or [float("inf")])
    print("epoch losses %s vs %s" % (la, lb))
    ok = ok and len(la) == len(lb) and dl <= 2e-5
print("max difference %.3g (tolerance %g)" % (d, tol))
low = float(os.environ.get("MIN_DIFF") or 0)
if d < low:
    print("difference below %g: the setting had no effect" % low)
    ok = False
sys.exit(0 if ok else 1)
PY
}
# GPU_SHARD=I/N: run only the cases whose number is I modulo N (and the
# checks after them with I = 0), so that N copies of this script share a
# machine of many cores in parallel
shard=${GPU_SHARD:-0/1}
shard_i=${shard%/*} shard_n=${shard#*/} case_no=0
run_case() { # NAME NP TOL ARGS (of gpu_train.py, or SCRIPT=path; REF=plain: no emulation)
  name=$1 np=$2 tol=$3
  shift 3
  case_no=$((case_no + 1))
  [ $((case_no % shard_n)) = "$shard_i" ] || return 0
  emulate=""
  [ "$np" -gt 1 ] && [ "${REF:-}" != plain ] && emulate="--emulate-ranks $np"
  "$PYTHON" "${SCRIPT:-$G}" "$@" $emulate >"$TMP/plain" 2>&1 || { cat "$TMP/plain"; fail "$name: plain run failed"; }
  shim "$np" "$PYTHON" "${SCRIPT:-$G}" "$@" >"$TMP/shim" 2>&1 || { cat "$TMP/shim"; fail "$name: run under the shim failed"; }
  same_sums "$TMP/plain" "$TMP/shim" "$tol" ${emulate:+${LOSSES:-}} ||
    { cat "$TMP/shim"; fail "$name: weights${LOSSES:+ or losses} differ from the plain run"; }
  pass "$name"
}
HVDSHIM_GPU_OPERATIONS=NCCL run_case "np=1, NCCL: same weights as the plain run" 1 1e-6
HVDSHIM_GPU_OPERATIONS=MPI run_case "np=2 on one GPU, MPI staging, split mode: same weights as the emulated split" 2 1e-6
HVDSHIM_GPU_OPERATIONS=MPI REF=plain run_case "np=2, MPI staging: same weights as the plain run (float32 rounding only)" 2 1e-5
HVDSHIM_GPU_OPERATIONS=auto run_case "np=2 on one GPU, the default (auto: MPI staging, the GPU is shared), split mode: same weights as the emulated split" 2 1e-6
HVDSHIM_GPU_OPERATIONS=MPI LOSSES=losses run_case "np=2, AMP with GradScaler, unmodified (and the loss read after scaler.scale(loss).backward() is the emulation's mean)" 2 1e-6 --amp
HVDSHIM_GPU_OPERATIONS=MPI run_case "np=2, CPU and GPU parameters in one model" 2 1e-6 --mixed
HVDSHIM_GPU_OPERATIONS=MPI HVDSHIM_FUSION_THRESHOLD=0 run_case "np=2, no fusion (one tensor at a time)" 2 1e-6
# parameters converted after the shim first saw them: built and called on
# the CPU, then model.cuda() (the hooks and rank 0's values follow them)
HVDSHIM_GPU_OPERATIONS=MPI run_case "np=2, model.cuda() after a first forward on the CPU, split mode: same weights as the emulated split" 2 1e-6 --late-cuda
# hooks of the script's on the gradients (clamping) run on the average over
# ranks, as on the whole batch's gradient in the plain run
HVDSHIM_GPU_OPERATIONS=MPI REF=plain run_case "np=2, MPI staging, hooks on the gradients (clamping): same weights as the plain run (float32 rounding only)" 2 1e-5 --hooks
# BatchNorm in split mode: its statistics synced over the ranks (on the GPU:
# the sums staged through host memory), so the run is the plain run's; a
# last batch of 2 rows (512 = 5 x 102 + 2) leaves one row per rank at np=2
# (torch 2 may then keep a gradient that backward still reads: the
# weighing works on a copy) and a padded rank at np=3, which counts for
# nothing (BatchNorm over 2 rows: plain and split differ by ~2e-5 on the CPU)
HVDSHIM_GPU_OPERATIONS=MPI REF=plain run_case "np=2, BatchNorm synced, one row per rank in the last batch: same weights as the plain run" 2 1e-4 --bn --batch 102
HVDSHIM_GPU_OPERATIONS=MPI REF=plain run_case "np=3, BatchNorm synced, a last batch of 2 rows for 3 ranks (one padded): same weights as the plain run" 3 1e-4 --bn --batch 102
# an embedding with max_norm renormalizes the rows it looks up in place, in
# forward: every rank renormalizes the rows of every rank's slice
HVDSHIM_GPU_OPERATIONS=MPI REF=plain run_case "np=2, embedding with max_norm: same weights as the plain run" 2 1e-5 --maxnorm
# a bias added through a view, one row per rank (batch 2 at np=2): torch
# keeps a view of the gradient backward passes on as the bias's gradient;
# the reduction, overlapping backward on the GPU, works on a copy (written
# into the passing gradient, the layer before's weights would differ)
HVDSHIM_GPU_OPERATIONS=MPI HVDSHIM_OVERLAP=on run_case "np=2, a bias added through a view, one row per rank (the gradient's memory shared with backward's): same weights as the emulated split" 2 1e-6 --aliased --batch 2 --epochs 1
# compression: within 1e-2 of the plain run (relative, per parameter sum,
# after 16 steps; measured on an H100: fp16 5.5e-4, bf16 1.7e-3), and not
# equal to it (at least 1e-6 apart, where the uncompressed run is within
# 3e-7): the gradients did travel in 16 bits
HVDSHIM_GPU_OPERATIONS=MPI HVDSHIM_COMPRESSION=fp16 MIN_DIFF=1e-6 REF=plain run_case "np=2, fp16 compression vs the plain run" 2 1e-2
HVDSHIM_GPU_OPERATIONS=MPI HVDSHIM_COMPRESSION=bf16 MIN_DIFF=1e-6 REF=plain run_case "np=2, bf16 compression vs the plain run" 2 1e-2
# torch.compile (inductor: Triton kernels, a compiled backward)
HVDSHIM_GPU_OPERATIONS=NCCL run_case "np=1, NCCL, torch.compile: same weights as the plain compiled run" 1 1e-6 --compile
HVDSHIM_GPU_OPERATIONS=MPI run_case "np=2, MPI staging, torch.compile, split mode: same weights as the emulated split" 2 1e-6 --compile
# the usual CUDA script: ResNet blocks, AMP + GradScaler, clipping on unscaled
# gradients, a checkpoint saved each epoch and resumed from (GroupNorm, so the
# split run is the single-process run)
SCRIPT=$R HVDSHIM_GPU_OPERATIONS=NCCL run_case "ResNet, AMP, clipping, checkpoint resumed: np=1 (NCCL) vs plain" 1 1e-6 --amp --clip 1 --ckpt "$TMP/rn.pt"
SCRIPT=$R HVDSHIM_GPU_OPERATIONS=MPI run_case "ResNet, float32 (cuDNN deterministic), clipping, checkpoint resumed: np=2 (MPI staging) vs the emulated split" 2 1e-6 --deterministic --clip 1 --ckpt "$TMP/rn.pt"
SCRIPT=$R HVDSHIM_GPU_OPERATIONS=MPI run_case "ResNet, AMP, clipping, checkpoint resumed: np=2 (MPI staging) vs the emulated split" 2 1e-6 --amp --clip 1 --ckpt "$TMP/rn.pt"
SCRIPT=$R HVDSHIM_GPU_OPERATIONS=MPI run_case "ResNet, AMP, clipping, checkpoint resumed: np=4 (MPI staging) vs the emulated split (MPI adds 4 parts in another order)" 4 2e-3 --amp --clip 1 --ckpt "$TMP/rn.pt"
[ "$shard_i" = 0 ] || exit 0
# the timeline names the device backend's phases
HVDSHIM_GPU_OPERATIONS=MPI HVDSHIM_TIMELINE="$TMP/tl.json" shim 2 "$PYTHON" "$G" --epochs 1 >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "timeline run failed"; }
for phase in MPI_ALLREDUCE_STAGED MPI_BCAST_STAGED; do
  grep -q "\"$phase\"" "$TMP/tl.json" || { head -c 2000 "$TMP/tl.json"; fail "the timeline has no $phase phase"; }
done
pass "timeline of a staged run: MPI_ALLREDUCE_STAGED and MPI_BCAST_STAGED phases"
# noise drawn on the GPU and added to the gradients between backward and
# the step: every rank draws it from one stream (the CUDA generator swapped
# in the step window), so the replicas agree at every step (drawn per rank,
# the replica guard ends the job at its first check)
HVDSHIM_GPU_OPERATIONS=MPI HVDSHIM_CHECK_STEPS=1 shim 2 "$PYTHON" "$G" --noise >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "gradient noise drawn on the GPU: the replicas disagree (or the run failed)"; }
pass "gradient noise drawn on the GPU between backward and the step: the replicas agree at every step"
# batches a script cuts itself from GPU tensors: every rank trains on the same
# ones, and rank 0 says so once (the check sums GPU inputs)
HVDSHIM_DATA=shard HVDSHIM_GPU_OPERATIONS=MPI shim 2 "$PYTHON" "$G" --sliced >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "sliced GPU batches: the run failed"; }
[ "$(grep -c "every rank trained on the same batches" "$TMP/out")" = 1 ] || { cat "$TMP/out"; fail "sliced GPU batches: not one same-batches warning"; }
pass "batches cut by the script from GPU tensors, shard mode: one same-batches warning"
# NCCL refuses ranks that share a GPU; the shim says so before NCCL does
[ "$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')" = 1 ] || exit 0
HVDSHIM_GPU_OPERATIONS=NCCL shim 2 "$PYTHON" "$G" --epochs 1 >"$TMP/out" 2>&1 && { cat "$TMP/out"; fail "NCCL with a shared GPU ran"; }
grep -q "share GPU .*HVDSHIM_GPU_OPERATIONS=MPI" "$TMP/out" || { cat "$TMP/out"; fail "no clear error for ranks sharing a GPU"; }
pass "NCCL with two ranks on one GPU: clear error naming the fix"
