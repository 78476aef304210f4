#!/bin/sh
# Loaders of any length: a trainer whose sampler is RandomSampler(replacement=
# True, num_samples=int(1e10)) (an endless epoch, ended by max_iters) runs
# under the shim as plain: split mode equals the plain run (tolerance 1e-4),
# with and without DataLoader workers (shard mode's windows: the adapter's
# unit tests, tests/torch/adapter_unit.py); and a rank's peak
# resident memory stays within 150 MB of the plain run's (the epoch's order
# is agreed a window at a time: drawing it whole would need 80 GB).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
S="$TORCH_DIR/endless.py"
rss() { sed -n 's/^peak_rss_mb //p' "$1" | tail -1; }
"$PYTHON" "$S" --out "$TMP/plain.pt" >"$TMP/plain.log" 2>&1 || { cat "$TMP/plain.log"; fail "plain run"; }
plain_rss=$(rss "$TMP/plain.log")
for w in 0 1; do
  HVDSHIM_DATA=split T=240 shim 2 "$PYTHON" "$S" --out "$TMP/split$w.pt" --workers $w >"$TMP/split$w.log" 2>&1 ||
    { cat "$TMP/split$w.log"; fail "np=2 split (workers $w): the endless sampler's run failed"; }
  same "$TMP/plain.pt" "$TMP/split$w.pt" 1e-4 >"$TMP/cmp" 2>&1 || { cat "$TMP/cmp" "$TMP/split$w.log"; fail "np=2 split (workers $w) differs from the plain run"; }
  r=$(rss "$TMP/split$w.log")
  [ -n "$r" ] && [ "$r" -le $((plain_rss + 150)) ] ||
    { cat "$TMP/split$w.log"; fail "np=2 split (workers $w): peak RSS ${r:-?} MB, plain $plain_rss MB (bound: plain + 150)"; }
  pass "np=2 split, workers $w, endless sampler: equals the plain run ($(cat "$TMP/cmp")); peak RSS $r MB (plain $plain_rss MB)"
done
