#!/bin/sh
# Only the public API (hvd_*), the interposed MPI and CUDA runtime entry
# points, and the libc file calls of the rank-private overlay
# (hooks/overlay.c, listed in shim/hvdshim.map) and _exit leave the library
# (-fvisibility=hidden plus the version script).
. "$(dirname "$0")/../lib.sh"
command -v nm >/dev/null || skip "nm not found (binutils)"
[ -f "$LIB" ] || fail "$LIB not built"
nm -D --defined-only "$LIB" | awk '$2 ~ /[TDBRW]/ {print $3}' | sort >"$TMP/syms"
libc=$(sed -n '/overlay.c/,/local:/p' "$top_srcdir/shim/hvdshim.map" | grep -v '^ *\(/\*\|local\)' | tr -d ' \n' | tr ';' '|' | sed 's/|$//')
[ -n "$libc" ] || fail "no libc names found in shim/hvdshim.map"
bad=$(grep -v -E "^(hvd_[a-z_]+|MPI_Init|MPI_Init_thread|MPI_Finalize|cudaLaunchKernel|cudaLaunchKernelExC|cudaMemcpyAsync|cudaMemsetAsync|__cudaLaunchKernel|__cudaLaunchKernel_ptsz|$libc)\$" "$TMP/syms" || true)
[ -z "$bad" ] || fail "unexpected exports: $bad"
grep -q '^hvd_allreduce_async$' "$TMP/syms" || fail "hvd_allreduce_async not exported"
for f in open64 fopen64 stat64 rename unlink mkdir opendir readdir64 _exit; do
  grep -qx "$f" "$TMP/syms" || fail "$f is not interposed (missing from the exports)"
done
# the Debian package's symbols file lists exactly these (dpkg-gensymbols
# fails the package build on any difference; this finds it without one)
sym="$top_srcdir/debian/libhvdshim0.symbols"
if [ -f "$sym" ]; then
  sed -n 's/^ \([^@]*\)@Base .*/\1/p' "$sym" | LC_ALL=C sort >"$TMP/debian"
  LC_ALL=C sort "$TMP/syms" >"$TMP/syms.c"
  d=$(diff "$TMP/debian" "$TMP/syms.c" | grep '^[<>]' | tr '\n' ' ')
  [ -z "$d" ] || fail "debian/libhvdshim0.symbols disagrees with the library's exports (< only in the file, > only exported): $d"
fi
pass "$(wc -l <"$TMP/syms") exported symbols, all public"
