#!/bin/sh
# Carries a build to a machine with a GPU but no build tools or network (a
# lent GPU machine: PyTorch with CUDA, nvcc and a C compiler; Open MPI may be
# missing) and runs the GPU suite and benchmarks there.
#
#   here:  tests/gpu/bundle.sh make DIR        DIR: Debian's Open MPI .debs and
#                                              this build tree (at its own path,
#                                              its check programs built)
#   there: tests/gpu/bundle.sh run DIR OUT [suite] [bench] ...
#
# `run` puts Open MPI in place (tests/gpu/unpack-mpi.sh; an MPI already
# there stays), unpacks the tree at the path it was built at (libtool's
# wrappers hold it), then runs each step, writing logs under OUT:
#   suite   tests/gpu/suite.sh with $SHARDS shards (default 8: 201 s on an
#           H100 with 16 cores)
#   bench   bench/run-gpu-bench.sh (make bench-gpu), skipped once
#           $BENCH_BY seconds (default 330) have passed
# The interpreter is $PYTHON, else python3 (the tests take it by its path:
# tests/lib.sh).
set -u
verb=${1:?usage: bundle.sh make DIR | run DIR OUT [suite] [bench]}
dir=${2:?bundle folder}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
case $verb in
make)
  mkdir -p "$dir/debs"
  (cd "$dir/debs" && apt-get download openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libhwloc15 \
    libhwloc-plugins libevent-2.1-7 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 \
    ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200 libnuma1 libmunge2 \
    libltdl7 libatomic1 libxnvctrl0 >/dev/null) || { echo "bundle: apt-get download failed" >&2; exit 1; }
  # the suite runs the check programs too (no-gpu.sh: tests/mpi/engine_test)
  make -C "$top" -j"$(nproc)" check TESTS= >/dev/null || { echo "bundle: building the check programs failed" >&2; exit 1; }
  abs=$(cd "$dir" && pwd)
  skip=./.git
  case $abs in "$top"/*) skip="./${abs#"$top"/}" ;; esac # the bundle itself, when it is in the tree
  (cd "$top" && tar cf - --exclude=./.git --exclude=./stacks-cache --exclude="$skip" .) >"$abs/tree.tar"
  echo "$top" >"$dir/tree.path"
  du -sh "$dir"
  ;;
run)
  out=${3:?OUT folder}
  shift 3
  t0=$(date +%s)
  mkdir -p "$out"
  sh "$here/unpack-mpi.sh" "$dir/debs" >"$out/setup.log" 2>&1 || { cat "$out/setup.log"; exit 1; }
  tree=$(cat "$dir/tree.path")
  mkdir -p "$tree" && tar xf "$dir/tree.tar" -C "$tree" || exit 1
  cd "$tree" || exit 1
  PYTHON=${PYTHON:-python3}
  export PYTHON OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  mpirun --version | head -1
  rc=0
  for step in "$@"; do
    case $step in
    suite)
      sh tests/gpu/suite.sh "$out/suite" "${SHARDS:-8}" >"$out/suite.txt" 2>&1 || rc=1
      cat "$out/suite.txt" ;;
    bench)
      if [ $(($(date +%s) - t0)) -gt "${BENCH_BY:-330}" ]; then echo "bench: skipped, no time left"; continue; fi
      top_builddir=$tree sh bench/run-gpu-bench.sh 2>&1 | tee "$out/bench.txt" ;;
    *) echo "bundle: unknown step $step" >&2; rc=2 ;;
    esac
    echo "after $step: $(($(date +%s) - t0)) s"
  done
  exit $rc
  ;;
*) echo "usage: bundle.sh make DIR | run DIR OUT [suite] [bench]" >&2; exit 2 ;;
esac
