#!/bin/sh
# The served horovod package's arithmetic and bookkeeping against a stub
# library (tests/horovod/unit_hvd.py): no MPI, no shim.
. "$(dirname "$0")/../lib.sh"
need_torch
"$PYTHON" "$top_srcdir/tests/horovod/unit_hvd.py" "$top_srcdir/python" >"$TMP/out" 2>&1 ||
  { cat "$TMP/out"; fail "horovod package unit tests"; }
pass "horovod package unit tests: $(grep -E '^Ran [0-9]+ tests' "$TMP/out")"
