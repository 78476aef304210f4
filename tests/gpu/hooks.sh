#!/bin/sh
# The CUDA runtime hooks without a GPU: a stand-in libcudart.so.13 (with its
# version node, as the real one) reached through a library loaded with
# RTLD_LOCAL.  Calls must pass through unchanged, the shim must see the
# stream, and the same holds in a dormant process and in a rank.
. "$(dirname "$0")/../lib.sh"
need_mpirun
CC=${CC:-cc}
command -v "$CC" >/dev/null 2>&1 || skip "no C compiler ($CC) to build the stand-in runtime"
printf 'libcudart.so.13 { global: *; };\n' >"$TMP/cudart.map"
$CC -shared -fPIC -o "$TMP/libcudart.so.13" -Wl,-soname,libcudart.so.13 -Wl,--version-script="$TMP/cudart.map" \
  "$top_srcdir/tests/gpu/fake_cudart.c" || fail "building the stand-in libcudart"
$CC -shared -fPIC -o "$TMP/libfakefw.so" "$top_srcdir/tests/gpu/fake_fw.c" "$TMP/libcudart.so.13" \
  -Wl,-rpath,"$TMP" || fail "building the stand-in framework"
objdump -T "$TMP/libfakefw.so" | grep -q 'cudaLaunchKernel' || fail "framework does not import cudaLaunchKernel"
$CC -o "$TMP/hook_probe" "$top_srcdir/tests/gpu/hook_probe.c" -ldl || fail "building the probe"

want="probe calls=2 stream=0x1234 grid=123 rc=7"
# nvcc 13 compiles kernel<<<...>>> into __cudaLaunchKernel (and _ptsz, where
# stream 0 is the thread's default stream: cudaStreamPerThread, 0x2)
want13="nvcc13 calls=3 stream=0x5678 grid=7 rc=0"
out=$("$TMP/hook_probe" "$TMP/libfakefw.so") || fail "probe without the shim failed"
case $out in "$want hooked=-1 seen=(nil)
$want13 seen=(nil) ptsz stream=(nil) rc=0 seen=(nil)") ;; *) fail "without the shim: $out" ;; esac
pass "stand-in runtime works without the shim: $(echo $out)"

out=$(LD_PRELOAD="$LIB" "$TMP/hook_probe" "$TMP/libfakefw.so") || fail "probe under the shim (dormant) failed"
case $out in "$want hooked=2 seen=0x1234
$want13 seen=0x5678 ptsz stream=(nil) rc=0 seen=0x2") ;; *) fail "dormant process under the shim: $out" ;; esac
pass "dormant process: calls pass through (nvcc 13's launches too), stream seen ($(echo $out))"

out=$(LD_PRELOAD="$LIB" mpi 1 -x LD_PRELOAD "$TMP/hook_probe" "$TMP/libfakefw.so" 2>&1) || fail "probe as a rank failed: $out"
case $out in *"$want hooked=2 seen=0x1234
$want13 seen=0x5678 ptsz stream=(nil) rc=0 seen=0x2"*) ;; *) fail "rank process: $out" ;; esac
pass "rank process: calls pass through, stream seen"

# No CUDA runtime in the process at all: a CUDA call that only the shim
# defines is refused with cudaErrorInitializationError (3) and one error
# line, and the program goes on (it is never killed for it).
cat >"$TMP/noruntime.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
  int (*ms)(void *, int, size_t, void *) = (int (*)(void *, int, size_t, void *))dlsym(RTLD_DEFAULT, "cudaMemsetAsync");
  if (!ms) return 2;
  int a = ms(NULL, 0, 0, NULL), b = ms(NULL, 0, 0, NULL);
  printf("rc=%d,%d\n", a, b);
  return 0;
}
C
$CC -o "$TMP/noruntime" "$TMP/noruntime.c" -ldl || fail "building the no-runtime probe"
out=$(LD_PRELOAD="$LIB" "$TMP/noruntime" 2>&1) || fail "no runtime: the program was ended: $out"
[ "$(echo "$out" | grep -c "cudaMemsetAsync was called, but no CUDA runtime")" = 1 ] || fail "no runtime: expected one error line: $out"
echo "$out" | grep -qx "rc=3,3" || fail "no runtime: expected cudaErrorInitializationError twice: $out"
pass "no CUDA runtime: the call is refused (3) with one error line, the program goes on"
