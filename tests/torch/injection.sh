#!/bin/sh
# The bootstrap: an existing sitecustomize keeps working, PYTHONPATH looks as
# the user set it, nothing happens until torch is imported, and an
# interpreter with a shared libpython is handled like Debian's static one.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
mkdir -p "$TMP/user"
echo 'import sys; print("user sitecustomize ran", file=sys.stderr)' >"$TMP/user/sitecustomize.py"
cat >"$TMP/probe.py" <<'PY'
import os, sys
print("PYTHONPATH=%s" % os.environ.get("PYTHONPATH"))
print("watchers=%s" % [type(f).__name__ for f in sys.meta_path if "Watcher" in type(f).__name__])
if len(sys.argv) > 1:
    import torch
    torch.nn.Linear(2, 1)(torch.ones(1, 2)).sum().backward()
    print("adapter=%s" % ("hvdshim_torch" in sys.modules))
PY
PYTHONPATH="$TMP/user" HVDSHIM_LOG_LEVEL=info shim 2 -x PYTHONPATH "$PYTHON" "$TMP/probe.py" >"$TMP/out" 2>&1 ||
  { cat "$TMP/out"; fail "probe failed"; }
# Both ranks print here (no training program yet), and with PYTHONUNBUFFERED
# a line reaches mpirun in two writes: the ranks' lines may interleave, so
# count occurrences instead of anchoring lines.
count() { grep -o "$1" "$TMP/out" | wc -l; }
[ "$(count "PYTHONPATH=$TMP/user")" = 2 ] && [ "$(count 'user sitecustomize ran')" = 2 ] &&
  [ "$(count "watchers=\['_ImportWatcher'\]")" = 2 ] && [ "$(count "watchers=")" = 2 ] ||
  { cat "$TMP/out"; fail "bootstrap/chaining wrong"; }
grep -q "engine started" "$TMP/out" && { cat "$TMP/out"; fail "the engine started without torch"; }
pass "user sitecustomize chained, PYTHONPATH restored, nothing started without torch"
HVDSHIM_LOG_LEVEL=info shim 2 "$PYTHON" "$TMP/probe.py" torch >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "probe with torch failed"; }
grep -q "PYTHONPATH=None" "$TMP/out" && grep -q "adapter=True" "$TMP/out" &&
  grep -q "model 0 (Linear): 2 parameters and buffers broadcast" "$TMP/out" || { cat "$TMP/out"; fail "adapter not loaded on import torch"; }
pass "adapter loaded on import torch (static libpython: $PYTHON)"
# an installed layout, moved elsewhere: the library finds ../share/hvdshim/python
mkdir -p "$TMP/prefix/lib" "$TMP/prefix/share/hvdshim/python"
cp "$LIB" "$TMP/prefix/lib/libhvdshim.so"
cp -r "$top_srcdir"/python/sitecustomize.py "$top_srcdir"/python/hvdshim_torch "$TMP/prefix/share/hvdshim/python/"
HVDSHIM_LOG_LEVEL=debug LIB="$TMP/prefix/lib/libhvdshim.so" shim 2 "$PYTHON" "$TMP/probe.py" torch >"$TMP/out" 2>&1 ||
  { cat "$TMP/out"; fail "probe with the installed layout failed"; }
grep -q "python: bootstrap from $TMP/prefix/lib/../share/hvdshim/python" "$TMP/out" && grep -q "adapter=True" "$TMP/out" ||
  { cat "$TMP/out"; fail "installed layout: bootstrap not found next to the library"; }
pass "installed layout: bootstrap found at <libdir>/../share/hvdshim/python"
# the same with an interpreter linked against the shared libpython
PYSHARED="$top_builddir/tests/torch/pyshared"
[ -x "$PYSHARED" ] || skip "tests/torch/pyshared not built (no shared libpython: apt-get install libpython3-dev); the static case passed"
ldd "$PYSHARED" | grep -q libpython || fail "$PYSHARED is not linked against a shared libpython"
"$PYTHON" "$TRAIN" --out "$TMP/plain.pt" >/dev/null 2>&1 || fail "plain run failed"
HVDSHIM_DATA=split shim 2 "$PYSHARED" "$TRAIN" --out "$TMP/shared.pt" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "run with $PYSHARED failed"; }
same "$TMP/plain.pt" "$TMP/shared.pt" 1e-4 >"$TMP/cmp" || { cat "$TMP/cmp" "$TMP/out"; fail "shared-libpython run differs"; }
pass "shared libpython ($PYSHARED): split np=2 reproduces the plain run ($(cat "$TMP/cmp"))"
