#!/bin/sh
# hvdshim-info: version, build line, what it finds at run time (the library
# hvdrun would preload, the MPI library and its version, GPU/NCCL, libffi,
# Python and torch), and the settings table with each value's source.
. "$(dirname "$0")/../lib.sh"
INFO="$top_builddir/tools/hvdshim-info"
[ -x "$INFO" ] || fail "tools/hvdshim-info not built"
HVDSHIM_CYCLE_TIME=2.5 HOROVOD_FUSION_THRESHOLD=1048576 "$INFO" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "hvdshim-info failed"; }
cat "$TMP/out" | sed -n 1,12p
want() { grep -qE -- "$1" "$TMP/out" || { cat "$TMP/out"; fail "hvdshim-info: no line matching '$1'"; }; }
want "^hvdshim [0-9]+\.[0-9]+\.[0-9]+$"
want "^build: MPI backend yes; CUDA headers (yes|no); NCCL headers (yes|no); libffi (yes|no)$"
want "^found at run time:$"
lib=$(cd "$top_builddir/.libs" && pwd)/libhvdshim.so
want "^  library   $lib$"
want "^  MPI       (Open MPI|MPICH|Intel).* \(/.*libmpi[^ ]*\.so[.0-9]*\)$"
want "^  GPU       (usable|not usable): "
want "^  NCCL      "
want "^  libffi    .*libffi\.so"
if have_torch; then
  tv=$("$PYTHON" -c 'import re, torch; print(re.escape(torch.__version__))')
  want "^  Python    $PYTHON: Python [0-9.]+; torch $tv "
fi
# sources: default, env, alias
want "^HVDSHIM_CYCLE_TIME +2\.5 +env "
want "^HVDSHIM_FUSION_THRESHOLD +1048576 +alias "
want "^HVDSHIM_DATA +shard +default "
pass "run-time findings and settings with their sources"
# the library elsewhere: said so, the rest still printed
HVDRUN_LIB="$TMP/none.so" "$INFO" >"$TMP/out2" 2>&1 || true
grep -q "^  library   not found (HVDRUN_LIB=$TMP/none.so: No such file or directory)" "$TMP/out2" ||
  { cat "$TMP/out2"; fail "missing library not reported"; }
grep -q "^HVDSHIM_DISABLE" "$TMP/out2" || fail "settings table missing when the library is not found"
pass "a missing library is reported; the settings table still printed"
# a bad value: named, status 1
HVDSHIM_AUTOTUNE=maybe "$INFO" >"$TMP/out3" 2>&1 && fail "a malformed setting gave status 0"
grep -q "settings: INVALID: invalid HVDSHIM_AUTOTUNE='maybe'" "$TMP/out3" || { cat "$TMP/out3"; fail "malformed setting not named"; }
pass "a malformed setting: named, status 1"
