#!/bin/sh
# GPU tests (need a CUDA GPU, PyTorch with CUDA and mpirun; otherwise they
# skip, saying which is missing).  One GPU: NCCL at one rank; several ranks
# share it through HVDSHIM_GPU_OPERATIONS=MPI (device buffers staged through
# pinned host memory).  Split mode makes the distributed run the
# single-process run, step for step: final weights compared to the plain run.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
"$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  skip "no CUDA GPU visible to PyTorch here ($("$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo no torch)): GPU tests not run"
G="$top_srcdir/tests/gpu/gpu_train.py"
export HVDSHIM_DATA=split
# same_sums A B TOL: the checksum lines of two outputs agree within TOL
same_sums() {
  "$PYTHON" - "$1" "$2" "$3" <<'PY'
import sys
def sums(p):
    line = [l for l in open(p) if l.startswith("checksum")][-1]
    return [float(v) for v in line.split()[1:]]
a, b, tol = sums(sys.argv[1]), sums(sys.argv[2]), float(sys.argv[3])
d = max(abs(x - y) for x, y in zip(a, b))
print("max difference %.3g (tolerance %g)" % (d, tol))
sys.exit(0 if len(a) == len(b) and d <= tol else 1)
PY
}
run_case() { # NAME NP TOL SETTINGS... -- SCRIPT ARGS
  name=$1 np=$2 tol=$3
  shift 3
  "$PYTHON" "$G" "$@" >"$TMP/plain" 2>&1 || { cat "$TMP/plain"; fail "$name: plain run failed"; }
  shim "$np" "$PYTHON" "$G" "$@" >"$TMP/shim" 2>&1 || { cat "$TMP/shim"; fail "$name: run under the shim failed"; }
  same_sums "$TMP/plain" "$TMP/shim" "$tol" || { cat "$TMP/shim"; fail "$name: weights differ from the plain run"; }
  pass "$name"
}
HVDSHIM_GPU_OPERATIONS=NCCL run_case "np=1, NCCL: same weights as the plain run" 1 1e-6
HVDSHIM_GPU_OPERATIONS=MPI run_case "np=2 on one GPU, MPI staging, split mode: same weights as the plain run" 2 1e-5
HVDSHIM_GPU_OPERATIONS=MPI run_case "np=2, AMP with GradScaler, unmodified" 2 2e-3 --amp
HVDSHIM_GPU_OPERATIONS=MPI run_case "np=2, CPU and GPU parameters in one model" 2 1e-5 --mixed
HVDSHIM_GPU_OPERATIONS=MPI HVDSHIM_FUSION_THRESHOLD=0 run_case "np=2, no fusion (one tensor at a time)" 2 1e-5
HVDSHIM_GPU_OPERATIONS=MPI HVDSHIM_COMPRESSION=fp16 run_case "np=2, fp16 compression" 2 5e-2
# NCCL refuses ranks that share a GPU; the shim says so before NCCL does
[ "$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())')" = 1 ] || exit 0
HVDSHIM_GPU_OPERATIONS=NCCL shim 2 "$PYTHON" "$G" --epochs 1 >"$TMP/out" 2>&1 && { cat "$TMP/out"; fail "NCCL with a shared GPU ran"; }
grep -q "share GPU .*HVDSHIM_GPU_OPERATIONS=MPI" "$TMP/out" || { cat "$TMP/out"; fail "no clear error for ranks sharing a GPU"; }
pass "NCCL with two ranks on one GPU: clear error naming the fix"
