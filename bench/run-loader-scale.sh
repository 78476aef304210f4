#!/bin/sh
# Loaders of any length: bench/loader_scale.py at N = 10^3 and 10^7 samples,
# plain and under the shim at np=2 (sharded; rank 0's figures), in the same
# run.  Usage, from the build directory: bench/run-loader-scale.sh [LIB]
#   LIB: the libhvdshim.so to measure (default: this build's)
set -e
build=${top_builddir:-$(pwd)}
src=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
LIB=${1:-$build/.libs/libhvdshim.so}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for n in 1e3 1e7; do
  echo "plain:        $("$PY" "$src/bench/loader_scale.py" $n)"
  echo "shim np=2:    $(LD_PRELOAD="$LIB" mpirun --oversubscribe -np 2 -x LD_PRELOAD -x OMP_NUM_THREADS "$PY" "$src/bench/loader_scale.py" $n </dev/null)"
done
