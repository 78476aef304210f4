#!/bin/sh
# The PyTorch adapter's pure parts against a stub library: no MPI, no shim.
. "$(dirname "$0")/../lib.sh"
need_torch
"$PYTHON" "$TORCH_DIR/adapter_unit.py" "$top_srcdir/python" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "adapter unit tests"; }
pass "adapter unit tests: $(grep -E '^Ran [0-9]+ tests' "$TMP/out")"
