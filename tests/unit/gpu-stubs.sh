#!/bin/sh
# A build without the CUDA headers compiles collectives/gpu/gpu_stubs.c (picked
# by Makefile.am) instead of the GPU path; one with the CUDA headers but no
# nccl.h compiles backend_nccl_none.c.  This machine's build may have both
# headers, so `make` alone never sees those files: compile them here (the
# stubs with no CUDA include path at all).
. "$(dirname "$0")/../lib.sh"
CC=${CC:-cc}
MPI_INC=$(mpicc --showme:compile 2>/dev/null || mpicc -compile-info 2>/dev/null | tr ' ' '\n' | grep '^-I' | tr '\n' ' ' || true)
flags="-std=gnu11 -Wall -Wextra -Werror -fsyntax-only -I$top_builddir -I$top_builddir/collectives -I$top_srcdir/collectives -I$top_srcdir/base"
$CC $flags $MPI_INC "$top_srcdir/collectives/gpu/gpu_stubs.c" 2>"$TMP/err" || { cat "$TMP/err"; fail "gpu_stubs.c (the no-CUDA build) does not compile"; }
pass "gpu_stubs.c (the build without CUDA headers) compiles"
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -f "$cuda/include/cuda_runtime_api.h" ] || { echo "note: no CUDA headers under $cuda: backend_nccl_none.c not compiled"; exit 0; }
$CC $flags -I"$cuda/include" $MPI_INC "$top_srcdir/collectives/gpu/backend_nccl_none.c" 2>"$TMP/err" ||
  { cat "$TMP/err"; fail "backend_nccl_none.c (CUDA without nccl.h) does not compile"; }
pass "backend_nccl_none.c (the build with CUDA headers and no nccl.h) compiles"
