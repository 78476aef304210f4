#!/bin/sh
# GPU benchmarks (bench/bench_gpu.py) on one GPU, one rank, each with its
# anchor in the same run.  Usage, from the build directory:
#   bench/run-gpu-bench.sh            (PYTHON: an interpreter with CUDA torch)
set -e
build=${top_builddir:-$(pwd)}
src=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
LIB="$build/.libs/libhvdshim.so"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
  { echo "run-gpu-bench: SKIPPED (no CUDA GPU visible to $PY)"; exit 0; }
run1() { LD_PRELOAD="$LIB" mpirun -np 1 -x LD_PRELOAD "$@" </dev/null; }
run1 "$PY" "$src/bench/bench_gpu.py" copy-in
run1 "$PY" "$src/bench/bench_gpu.py" nccl
plain=$("$PY" "$src/bench/bench_gpu.py" script | sed -n 's/^script: step \([0-9.]*\) ms/\1/p')
shimmed=$(run1 "$PY" "$src/bench/bench_gpu.py" script | sed -n 's/^script: step \([0-9.]*\) ms/\1/p')
echo "script: unmodified CUDA training loop, np=1: plain $plain ms/step, under the shim $shimmed ms/step, ratio plain/shim $(echo "$plain $shimmed" | awk '{printf "%.3f", $1/$2}')"
