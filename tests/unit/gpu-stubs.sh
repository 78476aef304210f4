#!/bin/sh
# A build without CUDA headers keeps the GPU interface as stubs that refuse
# device buffers: compile that branch of gpu.c here too (this machine has
# the headers, so `make` alone never sees it).
. "$(dirname "$0")/../lib.sh"
CC=${CC:-cc}
MPI_INC=$(mpicc --showme:compile 2>/dev/null || true)
$CC -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -fsyntax-only -DHVD_GPU_STUBS \
  -I"$top_builddir" -I"$top_builddir/collectives" -I"$top_srcdir/collectives" -I"$top_srcdir/base" $MPI_INC \
  "$top_srcdir/collectives/gpu.c" 2>"$TMP/err" || { cat "$TMP/err"; fail "the no-CUDA branch of gpu.c does not compile"; }
pass "the no-CUDA branch of gpu.c compiles"
