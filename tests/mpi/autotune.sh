#!/bin/sh
# HVDSHIM_AUTOTUNE=1 end to end (the search itself is unit-tested on a noisy
# synthetic landscape: tests/unit "autotune search"): at 3 ranks every
# candidate pair is applied on all ranks in the same cycle (engine_test
# checks every reduced value while the settings change), the search ends
# after its 52 measurements, the choice is logged once and stays fixed, and
# a setting given explicitly is never changed.
. "$(dirname "$0")/../lib.sh"
need_mpirun
PY=$(command -v python3 || true)
[ -n "$PY" ] || skip "python3 not found (needed to read JSON)"
CHECK="$top_srcdir/tests/mpi/metrics-check.py"
# 52 measurements x 2 steps = 104 steps of tuning; 300 steps in all
export HVDSHIM_AUTOTUNE=1 HVDSHIM_AUTOTUNE_STEPS_PER_SAMPLE=2
HVDSHIM_METRICS="$TMP/a.jsonl" shim 3 "$ENGINE_TEST" steps 300 64 1024 >"$TMP/a.log" 2>&1 || { cat "$TMP/a.log"; fail "autotuned run"; }
"$PY" "$CHECK" "$TMP/a.jsonl" || fail "metrics while tuning"
n=$(grep -c "autotune: fixed HVDSHIM_FUSION_THRESHOLD=" "$TMP/a.log")
[ "$n" = 1 ] || { cat "$TMP/a.log"; fail "expected one 'autotune: fixed' line, got $n"; }
grep "autotune: fixed" "$TMP/a.log"
"$PY" - "$TMP/a.jsonl" <<'PYEOF' || fail "autotune's course"
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
states = [x["autotune"] for x in m]
first_fixed = states.index("fixed")
assert all(s == "tuning" for s in states[:first_fixed]), "tuning after fixed"
assert all(s == "fixed" for s in states[first_fixed:]), "fixed, then tuning again"
assert 100 <= first_fixed <= 140, "fixed after %d steps (52 measurements of 2 steps expected)" % first_fixed
pairs = {(x["fusion_threshold"], x["cycle_time_ms"]) for x in m[:first_fixed]}
assert len(pairs) >= 10, "only %d pairs tried: %s" % (len(pairs), pairs)
final = {(x["fusion_threshold"], x["cycle_time_ms"]) for x in m[first_fixed:]}
assert len(final) == 1, "settings changed after fixing: %s" % final
print("tried %d pairs, fixed at step %d on %s" % (len(pairs), first_fixed + 1, final.pop()))
PYEOF
pass "3 ranks: pairs applied everywhere, values correct, fixed after the search"

# explicit fusion threshold: never changed; the cycle time is tuned
HVDSHIM_FUSION_THRESHOLD=3M HVDSHIM_METRICS="$TMP/e.jsonl" shim 2 "$ENGINE_TEST" steps 80 16 256 >"$TMP/e.log" 2>&1 ||
  { cat "$TMP/e.log"; fail "run with an explicit threshold"; }
"$PY" "$CHECK" "$TMP/e.jsonl" fusion_threshold=3145728 || fail "explicit fusion threshold changed"
grep -q "autotune: fixed HVDSHIM_FUSION_THRESHOLD=3M " "$TMP/e.log" || { cat "$TMP/e.log"; fail "no fixed line"; }
pass "an explicit HVDSHIM_FUSION_THRESHOLD stays; the cycle time is tuned"

# both explicit: nothing to tune, one warning, settings as given
HVDSHIM_FUSION_THRESHOLD=2M HVDSHIM_CYCLE_TIME=3 HVDSHIM_METRICS="$TMP/b.jsonl" shim 2 "$ENGINE_TEST" steps 5 4 16 \
  >"$TMP/b.log" 2>&1 || { cat "$TMP/b.log"; fail "run with both explicit"; }
grep -q "HVDSHIM_AUTOTUNE=1 has nothing to tune" "$TMP/b.log" || { cat "$TMP/b.log"; fail "no nothing-to-tune warning"; }
"$PY" "$CHECK" "$TMP/b.jsonl" fusion_threshold=2097152 cycle_time_ms=3 autotune=fixed || fail "both explicit"
pass "both explicit: a warning, nothing changes"
