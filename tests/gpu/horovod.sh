#!/bin/sh
# hvdshim's horovod package on CUDA tensors (needs a CUDA GPU, PyTorch with
# CUDA and mpirun; otherwise skips, saying which is missing): every
# collective against a formula, and the DistributedOptimizer recipe against
# the whole-batch run in the same process (tests/gpu/horovod_gpu.py).  One
# GPU: NCCL at np=1; several ranks share it through MPI staging.  With the
# default HVDSHIM_GPU_OPERATIONS=auto the first GPU operation picks one and
# says which (checked at np=1: NCCL, np=2: MPI).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
"$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  skip "no CUDA GPU visible to PyTorch here: the horovod package's GPU tests not run"
S="$top_srcdir/tests/gpu/horovod_gpu.py"
HVDRUN="$top_builddir/launcher/hvdrun"
[ -n "${MPIRUN:-}" ] && export HVDRUN_MPIRUN="$MPIRUN"
for c in "1 NCCL" "2 MPI" "3 MPI" "1 auto NCCL" "2 auto MPI"; do
  set -- $c
  HVDSHIM_GPU_OPERATIONS=$2 HVDSHIM_LOG_LEVEL=info HVDRUN_LIB="$LIB" timeout -k 5 300 "$HVDRUN" -np "$1" --oversubscribe \
    "$PYTHON" "$S" >"$TMP/out" 2>&1 </dev/null || { cat "$TMP/out"; fail "np=$1 ($2): the horovod package on CUDA tensors"; }
  grep -q "^ok every rank holds the same weights" "$TMP/out" || { cat "$TMP/out"; fail "np=$1: the script did not finish"; }
  said=""
  if [ $# = 3 ]; then
    said=$(grep -o "GPU operations: .*" "$TMP/out" | head -1)
    case $3:$said in
    NCCL:"GPU operations: NCCL (HVDSHIM_GPU_OPERATIONS=auto: every rank has a GPU of its own)") ;;
    MPI:"GPU operations: MPI through pinned host memory (HVDSHIM_GPU_OPERATIONS=auto: ranks 0 and 1 share GPU "*) ;;
    *) cat "$TMP/out"; fail "np=$1, auto: expected $3, the log says: ${said:-nothing}" ;;
    esac
    said="; $said"
  fi
  pass "horovod package on CUDA tensors, np=$1 ($2): $(grep -c '^ok' "$TMP/out") checks, $(sed -n 's/^ok DistributedOptimizer.*: largest/largest/p' "$TMP/out")$said"
done
