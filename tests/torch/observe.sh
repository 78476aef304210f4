#!/bin/sh
# HVDSHIM_OBSERVE=1 (hvdshim-ab's baseline): the library preloaded into one
# plain process (no launcher), and into a one-rank job, changes nothing
# (the same output, byte for byte, and the same weights, exactly) and
# writes one metrics line per optimizer step with the samples the script
# trained (2 epochs x 256 samples in 16 steps; with 2 backward passes per
# step, 8 steps of 64).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
warm_start
count() { "$PYTHON" -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(len(r), sum(x["samples"] for x in r), r[-1]["ranks"])' "$1"; }
for case in full accumulate own-optimizer; do  # (own-optimizer: the script's own optimizer class)
  # (stdout and stderr each compared: the plain run's come from the warm
  # interpreter through two pipes, whose lines interleave as scheduled)
  py "$TRAIN" --case $case --out "$TMP/plain.pt" >"$TMP/plain.out" 2>"$TMP/plain.err" ||
    { cat "$TMP/plain.out" "$TMP/plain.err"; fail "plain $case"; }
  LD_PRELOAD="$LIB" HVDSHIM_OBSERVE=1 HVDSHIM_METRICS="$TMP/m.jsonl" "$PYTHON" "$TRAIN" --case $case --out "$TMP/obs.pt" \
    >"$TMP/obs.out" 2>"$TMP/obs.err" || { cat "$TMP/obs.out" "$TMP/obs.err"; fail "observed $case"; }
  for s in out err; do
    cmp "$TMP/plain.$s" "$TMP/obs.$s" || { diff "$TMP/plain.$s" "$TMP/obs.$s"; fail "$case: the std$s differs"; }
  done
  same "$TMP/plain.pt" "$TMP/obs.pt" 0 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "$case: the weights differ"; }
  want="16 512 1"
  [ $case = accumulate ] && want="8 512 1"
  [ "$(count "$TMP/m.jsonl")" = "$want" ] || { cat "$TMP/m.jsonl"; fail "$case: metrics '$(count "$TMP/m.jsonl")', expected '$want' (steps samples ranks)"; }
  pass "$case: observed plain process: same output and weights ($(cat "$TMP/cmp")), metrics $want (steps, samples, ranks)"
done
rm -f "$TMP/m.jsonl"
HVDSHIM_OBSERVE=1 HVDSHIM_METRICS="$TMP/m.jsonl" shim 1 "$PYTHON" "$TRAIN" --case full --out "$TMP/np1.pt" >"$TMP/np1.out" 2>&1 ||
  { cat "$TMP/np1.out"; fail "observed np=1"; }
py "$TRAIN" --case full --out "$TMP/plain.pt" >/dev/null 2>&1
same "$TMP/plain.pt" "$TMP/np1.pt" 0 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "np=1: the weights differ"; }
[ "$(count "$TMP/m.jsonl")" = "16 512 1" ] || { cat "$TMP/m.jsonl"; fail "np=1 metrics: $(count "$TMP/m.jsonl")"; }
pass "observed one-rank job (hvdrun -np 1): same weights, metrics 16 512 1"
# without HVDSHIM_OBSERVE nothing is written
LD_PRELOAD="$LIB" HVDSHIM_METRICS="$TMP/none.jsonl" "$PYTHON" "$TRAIN" --case full --out "$TMP/x.pt" >/dev/null 2>&1
[ ! -e "$TMP/none.jsonl" ] || fail "a plain process without HVDSHIM_OBSERVE wrote metrics"
pass "not observed: no metrics file"
