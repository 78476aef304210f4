#!/bin/sh
# tools/hvdshim-ab end to end: the native example and the bundled PyTorch
# example (examples/train.py) as baseline and under the shim at np 1-2 with
# two setting variants; the report files exist, the SVG plots are XML, the
# numbers in the Markdown table parse and agree with results.json.  Also:
# wrong uses are one line with status 2; a failing command is reported;
# Ctrl-C (SIGINT) leaves a partial report and no stray process.
. "$(dirname "$0")/../lib.sh"
need_mpirun
PY=$(command -v python3 || true)
[ -n "$PY" ] || skip "python3 not found (hvdshim-ab is a Python 3 script)"
AB="$PY $top_srcdir/tools/hvdshim-ab --hvdrun $top_builddir/launcher/hvdrun"

err() {
  _want=$1
  shift
  $AB "$@" >"$TMP/out" 2>"$TMP/err" && fail "hvdshim-ab $* succeeded"
  _rc=$?
  [ $_rc = 2 ] || { cat "$TMP/err"; fail "hvdshim-ab $*: status $_rc, expected 2"; }
  grep -qF -- "hvdshim-ab: $_want" "$TMP/err" || { cat "$TMP/err"; fail "hvdshim-ab $*: expected '$_want'"; }
}
err "no command to run" -np 1,2
err "-np: 'one' is not a comma-separated list" -np one -- true
err "-np: rank counts must be 1 or more" -np 0 -- true
err "--variant 'x': expected NAME:VAR=VALUE" --variant x -- true
err "--variant 'a:FOO=1': 'FOO=1' is not VAR=VALUE with an HVDSHIM_* or HOROVOD_* variable" --variant a:FOO=1 -- true
err "--variant: the name 'a' is used twice" --variant a: --variant a: -- true
err "--threads: 'x' is neither" --threads x -- true
pass "wrong uses: one line, status 2"

# check_report DIR NCONFIG UNIT: files, XML plots, table numbers vs results.json
check_report() {
  for f in report.md report.html results.json; do [ -s "$1/$f" ] || fail "$1/$f missing"; done
  "$PY" - "$@" <<'PYEOF' || fail "report in $1"
import json, os, sys, xml.etree.ElementTree as ET
d, nconf, unit = sys.argv[1], int(sys.argv[2]), sys.argv[3]
res = json.load(open(os.path.join(d, "results.json")))
an = res["analysis"]
assert res["status"] == "complete", res["status"]
assert an["unit"] == unit, (an["unit"], unit)
plots = [p for p in ("throughput.png", "loss.png", "throughput.svg", "loss.svg") if os.path.exists(os.path.join(d, p))]
assert len(plots) == 2, plots
for p in plots:
    if p.endswith(".svg"):
        ET.parse(os.path.join(d, p))  # well-formed XML
    else:
        assert open(os.path.join(d, p), "rb").read(8) == b"\x89PNG\r\n\x1a\n", p
rows = [l for l in open(os.path.join(d, "report.md")) if l.startswith("| ") and not l.startswith("| configuration")]
assert len(rows) == nconf, (len(rows), nconf)
for line, c in zip(rows, an["configs"]):
    cells = [x.strip() for x in line.strip().strip("|").split("|")]
    wall, thr, speed, eff = float(cells[3]), float(cells[5]), float(cells[6]), float(cells[8])
    assert wall > 0 and thr > 0 and speed > 0 and eff > 0, cells
    assert abs(wall - c["wall_s"]) < 1e-3 and abs(speed - c["speedup"]) < 1e-3, (cells, c)
    assert abs(eff - c["speedup"] / c["ranks"]) < 2e-3, (cells, c)
    lo, hi = (float(x) for x in cells[7].split("-"))
    assert lo <= speed + 1e-3 and speed <= hi + 1e-3, cells
base = an["configs"][0]
assert base["kind"] == "baseline" and abs(base["speedup"] - 1) < 1e-9, base
losses = [r for r in res["state"]["runs"] if r["losses"]]
assert losses, "no loss lines collected"
print("report: %d configurations, plots %s, %d runs with loss lines" % (nconf, plots, len(losses)))
PYEOF
}

# the native example (weak scaling: every rank trains --steps steps)
. "$top_srcdir/tests/native/native-lib.sh"
build_lib "$BIN"
build_train "$BIN" train
HVDSHIM_HOOKS="$EX/mlp.hooks" $AB -np 1,2 --repeat 1 --variant default: --variant f1m:HVDSHIM_FUSION_THRESHOLD=1M \
  --plots svg --out "$TMP/native" -- "$BIN/train" --steps 100 --log-every 20 >"$TMP/native.log" 2>&1 ||
  { cat "$TMP/native.log"; fail "hvdshim-ab on the native example"; }
cat "$TMP/native.log"
check_report "$TMP/native" 5 runs/min
grep -q '"fusion_threshold": 1048576' "$TMP/native/results.json" || fail "variant setting not in the metrics"
pass "native example: report, SVG plots, numbers parse"

# a failing command: reported, status 1
$AB -np 1 --repeat 1 --no-baseline --out "$TMP/failing" -- sh -c 'echo loss 1.0; exit 3' >"$TMP/f.log" 2>&1 && fail "a failing command gave status 0"
grep -q "FAILED (status 3" "$TMP/f.log" || { cat "$TMP/f.log"; fail "no FAILED line"; }
grep -q "## Failed runs" "$TMP/failing/report.md" || fail "report does not list the failed run"
pass "a failing command: FAILED line, listed in the report, status 1"

# Ctrl-C after the first runs: partial report, status 130, no stray process
$AB -np 1 --repeat 20 --no-baseline --out "$TMP/int" -- sh -c 'echo loss 0.5; sleep 0.3; echo loss 0.25; exec sleep 3600 </dev/null' \
  >"$TMP/int.log" 2>&1 &
pid=$!
i=0
while [ $i -lt 300 ] && ! grep -q "\[ 1/20\]" "$TMP/int.log" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
sleep 1
kill -INT $pid
wait $pid
rc=$?
[ $rc = 130 ] || { cat "$TMP/int.log"; fail "status $rc after SIGINT, expected 130"; }
grep -q "PARTIAL (interrupted)" "$TMP/int/report.md" || { cat "$TMP/int/report.md"; fail "no PARTIAL status in the report"; }
"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["status"]=="interrupted"' "$TMP/int/results.json" ||
  fail "results.json not marked interrupted"
sleep 0.5
pgrep -f "sleep 3600" >/dev/null && { pkill -f "sleep 3600"; fail "a run's process survived the interrupt"; }
pass "SIGINT: partial report, status 130, the run's processes killed"

# the bundled PyTorch example at np 1-2 (samples/s from the metrics)
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" -c 'import torch' 2>/dev/null || { echo "SKIP (part): PyTorch not importable by $PYTHON"; exit 0; }
# run by the torch interpreter: PNG plots when its python3-matplotlib imports
"$PYTHON" "$top_srcdir/tools/hvdshim-ab" --hvdrun "$top_builddir/launcher/hvdrun" -np 1,2 --repeat 1 --out "$TMP/torch" -- "$PYTHON" "$top_srcdir/examples/train.py" --epochs 1 \
  --checkpoint "$TMP/ck.pt" >"$TMP/torch.log" 2>&1 || { cat "$TMP/torch.log"; fail "hvdshim-ab on examples/train.py"; }
cat "$TMP/torch.log"
check_report "$TMP/torch" 3 samples/s
pass "examples/train.py: report in samples/s, plots ($(ls "$TMP/torch" | grep -E 'png|svg' | tr '\n' ' '))"
