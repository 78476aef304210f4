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
run1 "$PY" "$src/bench/bench_gpu.py" nccl || echo "run-gpu-bench: the nccl benchmark failed"
# plain and under the shim alternately, 3 rounds each; medians of the step times
step_ms() { sed -n 's/^script[-a-z]*: step \([0-9.]*\) ms/\1/p'; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
for mode in script script-amp; do
  p="" s=""
  for r in 1 2 3; do
    p="$p $("$PY" "$src/bench/bench_gpu.py" $mode | step_ms)"
    s="$s $(run1 "$PY" "$src/bench/bench_gpu.py" $mode | step_ms)"
  done
  pm=$(echo $p | tr ' ' '\n' | median) sm=$(echo $s | tr ' ' '\n' | median)
  echo "$mode: unmodified CUDA training loop, np=1, median of 3: plain $pm ms/step ($p), under the shim $sm ms/step ($s), ratio plain/shim $(echo "$pm $sm" | awk '{printf "%.3f", $1/$2}')"
done
