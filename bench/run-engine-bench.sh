#!/bin/sh
# Engine benchmark at np=2 (see bench/bench_engine.c).  Usage:
#   bench/run-engine-bench.sh [MAX_MIB]      (from the build directory)
# Extra HVDSHIM_* settings in the environment are passed to the ranks.
set -e
build=${top_builddir:-$(pwd)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec mpirun -np "${NP:-2}" "$build/bench/bench_engine" "${1:-256}" </dev/null
