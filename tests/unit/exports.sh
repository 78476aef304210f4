#!/bin/sh
# Only the public API (hvd_*) and the interposed MPI and CUDA runtime entry
# points leave the
# library (-fvisibility=hidden plus the version script).
. "$(dirname "$0")/../lib.sh"
command -v nm >/dev/null || skip "nm not found (binutils)"
[ -f "$LIB" ] || fail "$LIB not built"
nm -D --defined-only "$LIB" | awk '$2 ~ /[TDBRW]/ {print $3}' | sort >"$TMP/syms"
bad=$(grep -v -E '^(hvd_[a-z_]+|MPI_Init|MPI_Init_thread|MPI_Finalize|cudaLaunchKernel|cudaLaunchKernelExC|cudaMemcpyAsync|cudaMemsetAsync)$' "$TMP/syms" || true)
[ -z "$bad" ] || fail "unexpected exports: $bad"
grep -q '^hvd_allreduce_async$' "$TMP/syms" || fail "hvd_allreduce_async not exported"
pass "$(wc -l <"$TMP/syms") exported symbols, all public"
