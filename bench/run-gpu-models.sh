#!/bin/sh
# Real models on one GPU (bench/gpu_models.py): each unmodified script plain
# and under the shim at np=1, alternately, R rounds (default 2), the ratio of
# the medians of samples/s (target >= 0.99); then np=2 on the one GPU (MPI
# staging: the GPU is shared) against the plain run, reported as it is
# (aggregate samples/s = 2 x rank 0's: the ranks step together).
# Usage, from the build directory: bench/run-gpu-models.sh [R] [MODEL...]
#   (PYTHON: an interpreter with CUDA torch and torchvision)
set -e
build=${top_builddir:-$(pwd)}
src=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
LIB="$build/.libs/libhvdshim.so"
R=${1:-2}
[ $# -gt 0 ] && shift
configs=${*:-"gpt gpt:--amp resnet50 resnet50:--amp"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
  { echo "run-gpu-models: SKIPPED (no CUDA GPU visible to $PY)"; exit 0; }
shim() { np=$1; shift; LD_PRELOAD="$LIB" mpirun --oversubscribe -np "$np" -x LD_PRELOAD "$@" </dev/null; }
rate() { sed -n 's/.*samples\/s \([0-9.]*\).*/\1/p' | tail -1; }
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for c in $configs; do
  model=${c%%:*} flags=""
  [ "$model" = "$c" ] || flags=${c#*:}
  p="" s=""
  for r in $(seq "$R"); do
    p="$p $("$PY" "$src/bench/gpu_models.py" "$model" $flags | tee /dev/stderr | rate)"
    s="$s $(shim 1 "$PY" "$src/bench/gpu_models.py" "$model" $flags | tee /dev/stderr | rate)"
  done
  pm=$(echo $p | median) sm=$(echo $s | median)
  two=$(HVDSHIM_GPU_OPERATIONS=MPI shim 2 -x HVDSHIM_GPU_OPERATIONS "$PY" "$src/bench/gpu_models.py" "$model" $flags | rate)
  echo "$model${flags:+ $flags}: np=1 samples/s plain $pm ($p), under the shim $sm ($s), shim/plain $(echo "$sm $pm" | awk '{printf "%.3f", $1/$2}');" \
    "np=2 on the one GPU (MPI staging) $(echo "$two" | awk '{printf "%.1f", 2*$1}') aggregate, $(echo "$two $pm" | awk '{printf "%.3f", 2*$1/$2}') x plain"
done
