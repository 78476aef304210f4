#!/bin/sh
# Hooks in a library loaded with dlopen after the program started
# (tests/native/dl_main.c loads examples/native/train.c built as a plugin,
# RTLD_LOCAL, which pulls in libmlp): at np=2 the result must match the
# plain run with a 2x batch.  The bare-name dlopen only works through the
# program's own RUNPATH, so this also checks that the shim's dlopen wrapper
# searches as the caller would.
. "$(dirname "$0")/../lib.sh"
need_mpirun
. "$(dirname "$0")/native-lib.sh"
P="$TMP/plugin"
build_lib "$P"
$CC -O2 -g -fPIC -shared -Dmain=plugin_main -I"$EX" -o "$P/libplugin.so" "$EX/train.c" -L"$P" -lmlp \
  -Wl,-rpath,'$ORIGIN' -lm || fail "cannot build libplugin.so"
$CC -O2 -g -o "$P/dl_main" "$top_srcdir/tests/native/dl_main.c" -Wl,--enable-new-dtags -Wl,-rpath,'$ORIGIN' -ldl ||
  fail "cannot build dl_main"
readelf -dW "$P/dl_main" | grep -q 'RUNPATH.*\$ORIGIN' || fail "dl_main has no RUNPATH \$ORIGIN"
readelf -dW "$P/dl_main" | grep -q 'NEEDED.*libmlp' && fail "dl_main must not link libmlp"

"$P/dl_main" --steps 150 --batch 32 --out "$TMP/ref.bin" >/dev/null || fail "plain run of dl_main"
HVDSHIM_LOG_LEVEL=debug native 2 "$EX/mlp.hooks" "$P/dl_main" --steps 150 --batch 16 --out "$TMP/np2.bin" \
  >"$TMP/np2.log" 2>&1 || { cat "$TMP/np2.log"; fail "dl_main under the shim"; }
grep -q "hook sgd_update: patched a PLT slot in .*/libplugin.so" "$TMP/np2.log" ||
  { cat "$TMP/np2.log"; fail "the plugin's slot was not patched after dlopen"; }
grep -q "HVDSHIM_HOOKS: dl_main calls none of the spec's 3 function(s) through a GOT/PLT slot" "$TMP/np2.log" ||
  { cat "$TMP/np2.log"; fail "no warning that nothing was hooked at start"; }
same "$TMP/ref.bin" "$TMP/np2.bin" || fail "the dlopen'ed trainer differs from the plain run"
pass "a trainer loaded with dlopen after start is hooked; np=2 matches the plain run with a 2x batch"
