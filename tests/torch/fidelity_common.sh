# Shared by tests/torch/fidelity.sh and fidelity-data.sh (sourced after
# tests/lib.sh): the script, the overlay folders' place, and the runners.
F="$TORCH_DIR/fidelity.py"
export TMPDIR="$TMP/tmpdir" # the overlay folders of this test's ranks land here
mkdir -p "$TMPDIR"
warm_start # (after TMPDIR: its plain runs see it as a fresh process would)
no_overlay_left() { # the ranks' private folders are gone (within 5 s: the watcher's)
  _i=0
  while ls -d "$TMPDIR"/hvdshim-rank* >/dev/null 2>&1; do
    _i=$((_i + 1))
    [ "$_i" -le 50 ] || { ls -la "$TMPDIR"; fail "$1: an overlay folder was left behind"; }
    sleep 0.1
  done
}
run_plain() { py "$F" "$@" >"$TMP/plain.out" 2>&1 || { cat "$TMP/plain.out"; fail "plain $*"; }; }
run_shim() { shim "$@" >"$TMP/shim.out" 2>&1 || { cat "$TMP/shim.out"; fail "np=$1 ${3-} ${4-}"; }; }
