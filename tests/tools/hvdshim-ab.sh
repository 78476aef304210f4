#!/bin/sh
# tools/hvdshim-ab end to end: the native example (two setting variants,
# SVG plots), a fixed-epochs PyTorch script (examples/train.py: the same
# samples in every run, the baseline counted by observation) and a
# fixed-steps one (tests/tools/ab_steps.py: samples grow with the ranks, so
# throughput must come from each run's own count); the report files exist,
# the plots are PNG or well-formed SVG, the numbers in the Markdown table
# agree with results.json; the script's metrics (loss, val_loss, acc) and
# the time to a --target; oversubscription flagged; no library warnings;
# the HTML rendered in headless chromium with its images loaded.  The
# metrics read from recorded outputs of each kind of script
# (tests/tools/ab_printers.py: GPT-style, a print loop, Hugging Face
# Trainer dicts, Keras, tqdm postfixes, settings echoed with warnings): the
# exact set of series; an A/B on the GPT-style one with --target reached
# (the target line and crossings on the plot), and with a --target no
# configuration prints or only some do (an error line, status 1).  Also:
# wrong uses are one line with status 2; failed runs give FAILED or PARTIAL
# with their reason; Ctrl-C (SIGINT) leaves a partial report and no stray
# process.
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
err "--target: expected METRIC=VALUE" --target loss -- true
err "--metric: expected the name of a metric" --metric " " -- true
pass "wrong uses: one line, status 2"

# check_report DIR NCONFIG UNIT: files, plots, table numbers vs results.json
check_report() {
  for f in report.md report.html results.json; do [ -s "$1/$f" ] || fail "$1/$f missing"; done
  "$PY" - "$@" <<'PYEOF' || fail "report in $1"
import json, os, sys, xml.etree.ElementTree as ET
d, nconf, unit = sys.argv[1], int(sys.argv[2]), sys.argv[3]
want_metrics = sys.argv[4] if len(sys.argv) > 4 else None
res = json.load(open(os.path.join(d, "results.json")))
an = res["analysis"]
assert res["status"] == "complete" and res["status_word"] == "complete", res["status"]
assert an["unit"] == unit, (an["unit"], unit)
plots = [p for p in os.listdir(d) if p.endswith((".png", ".svg"))]
assert sorted(os.path.splitext(p)[0] for p in plots) == ["metric", "speedup", "throughput"], plots
for p in plots:
    if p.endswith(".svg"):
        ET.parse(os.path.join(d, p))  # well-formed XML
    else:
        assert open(os.path.join(d, p), "rb").read(8) == b"\x89PNG\r\n\x1a\n", p
rows = [l for l in open(os.path.join(d, "report.md")) if l.startswith("| ") and not l.startswith("| configuration")]
assert len(rows) == nconf, (len(rows), nconf)
for line, c in zip(rows, an["configs"]):
    cells = [x.strip() for x in line.strip().strip("|").split("|")]
    wall, thr, speed, eff = float(cells[3]), float(cells[5]), float(cells[7]), float(cells[9])
    assert wall > 0 and thr > 0 and speed > 0 and eff > 0, cells
    assert abs(wall - c["wall_s"]) < 1e-3 and abs(speed - c["speedup"]) < 1e-3, (cells, c)
    assert abs(thr - c["throughput"]) <= 1e-3 * c["throughput"], (cells, c)
    assert abs(eff - c["speedup"] / c["ranks"]) < 2e-3, (cells, c)
    lo, hi = (float(x) for x in cells[8].split("-"))
    assert lo <= speed + 1e-3 and speed <= hi + 1e-3, cells
base = an["configs"][0]
assert base["kind"] == "baseline" and abs(base["speedup"] - 1) < 1e-9, base
if want_metrics is None:
    assert an["primary"], "no metric found in the command's output"
else:
    assert ", ".join(an["metrics"]) == want_metrics, (an["metrics"], want_metrics)
    assert (an["primary"] in an["metrics"]) if an["metrics"] else an["primary"] is None, an["primary"]
print("report: %d configurations, plots %s, metrics %s" % (nconf, sorted(plots), an["metrics"]))
PYEOF
}

# the native example (weak scaling: every rank trains --steps steps; samples unknown: runs/min)
. "$top_srcdir/tests/native/native-lib.sh"
build_lib "$BIN"
build_train "$BIN" train
HVDSHIM_HOOKS="$EX/mlp.hooks" $AB -np 1,2 --repeat 1 --variant default: --variant f1m:HVDSHIM_FUSION_THRESHOLD=1M \
  --plots svg --out "$TMP/native" -- "$BIN/train" --steps 100 --log-every 20 >"$TMP/native.log" 2>&1 ||
  { cat "$TMP/native.log"; fail "hvdshim-ab on the native example"; }
cat "$TMP/native.log"
check_report "$TMP/native" 5 runs/min
grep -q '"fusion_threshold": 1048576' "$TMP/native/results.json" || fail "variant setting not in the metrics"
pass "native example: report, SVG plots (throughput, speedup, metric), numbers parse"

# a failing command: FAILED with the reason, status 1
$AB -np 1 --repeat 1 --no-baseline --out "$TMP/failing" -- sh -c 'echo loss 1.0; echo "it broke"; exit 3' >"$TMP/f.log" 2>&1 && fail "a failing command gave status 0"
grep -q "FAILED (status 3; last line: it broke" "$TMP/f.log" || { cat "$TMP/f.log"; fail "no FAILED line with the reason"; }
grep -q "hvdshim-ab: FAILED (every run failed" "$TMP/f.log" || { cat "$TMP/f.log"; fail "the console does not say FAILED"; }
grep -q "^Status: FAILED" "$TMP/failing/report.md" && grep -q "status 3; last line: it broke" "$TMP/failing/report.md" ||
  { cat "$TMP/failing/report.md"; fail "report: no FAILED status or reason"; }
# one of two configurations failing: PARTIAL
$AB -np 1 --repeat 1 --out "$TMP/half" -- sh -c 'echo loss 0.5; [ -z "${OMPI_COMM_WORLD_RANK-}" ]' >"$TMP/h.log" 2>&1 && fail "a half-failing experiment gave status 0"
grep -q "^Status: PARTIAL (1 of 2 runs failed)" "$TMP/half/report.md" || { cat "$TMP/half/report.md"; fail "no PARTIAL status"; }
pass "failing runs: FAILED or PARTIAL with each run's reason, status 1"

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
grep -q "^Status: PARTIAL (interrupted" "$TMP/int/report.md" || { cat "$TMP/int/report.md"; fail "no PARTIAL status in the report"; }
grep -q "all ok" "$TMP/int.log" && { cat "$TMP/int.log"; fail "the console says 'all ok' after an interrupt"; }
grep -q "hvdshim-ab: PARTIAL (interrupted" "$TMP/int.log" || { cat "$TMP/int.log"; fail "the console does not say PARTIAL"; }
"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["status"]=="interrupted"' "$TMP/int/results.json" ||
  fail "results.json not marked interrupted"
sleep 0.5
pgrep -f "sleep 3600" >/dev/null && { pkill -f "sleep 3600"; fail "a run's process survived the interrupt"; }
pass "SIGINT: partial report, status 130, the run's processes killed"

# the metrics of recorded outputs: exactly the series a person would name
PRINT="$top_srcdir/tests/tools/ab_printers.py"
series_of() { # FORMAT EXPECTED: the "series:" line hvdshim-ab reads from the format's recorded output
  "$PY" "$PRINT" "$1" >"$TMP/rec.$1" 2>&1 || fail "ab_printers.py $1"
  _got=$($AB --parse-output "$TMP/rec.$1" | sed -n 1p)
  [ "$_got" = "series: $2" ] || { cat "$TMP/rec.$1"; $AB --parse-output "$TMP/rec.$1"; fail "$1: '$_got', expected 'series: $2'"; }
}
series_of gpt "train loss, val loss, loss, time, mfu"
series_of loop "loss"
series_of hf "loss, grad_norm, learning_rate, eval_loss, eval_accuracy, eval_runtime, eval_samples_per_second, eval_steps_per_second"
series_of keras "loss, accuracy, val_loss, val_accuracy"
series_of tqdm "loss, acc"
series_of settings "loss, accuracy"
$AB --parse-output "$TMP/rec.gpt" >"$TMP/parse.gpt"
grep -q "^  time (ms): 21 values, lower is better, first 1514.16, final 52.11, best 50.11, steps 0-20$" "$TMP/parse.gpt" &&
  grep -q "^  mfu (%): 21 values, higher is better" "$TMP/parse.gpt" &&
  grep -q "^  val loss: 3 values, lower is better, first 4.25, final 0.9341, best 0.9341, steps 0-20$" "$TMP/parse.gpt" &&
  grep -q "^printed once or constant (not metrics): eval_interval, .*batch_size.*, vocab_size, parameters$" "$TMP/parse.gpt" ||
  { cat "$TMP/parse.gpt"; fail "gpt: units, steps, best or the settings left out"; }
$AB --parse-output "$TMP/rec.gpt" --target "test loss=1" >/dev/null 2>"$TMP/parse.err" && fail "--parse-output: a missing target gave status 0"
[ "$(cat "$TMP/parse.err")" = "hvdshim-ab: error: no metric 'test loss' in the output; series seen: train loss, val loss, loss, time, mfu" ] ||
  { cat "$TMP/parse.err"; fail "--parse-output: no error line for a missing target"; }
$AB --parse-output "$TMP/rec.keras" --metric val_acc >/dev/null 2>"$TMP/parse.err" && fail "--parse-output: a missing --metric gave status 0"
[ "$(cat "$TMP/parse.err")" = "hvdshim-ab: error: no metric 'val_acc' in the output; series seen: loss, accuracy, val_loss, val_accuracy" ] ||
  { cat "$TMP/parse.err"; fail "--parse-output: no error line for a missing --metric"; }
$AB --parse-output "$TMP/rec.settings" --target "lr=0.01" >/dev/null 2>"$TMP/parse.err" && fail "--parse-output: a setting taken for a metric"
grep -qF "no metric 'lr' in the output; series seen: loss, accuracy ('lr' is printed, but once or always with the same value: not a series)" "$TMP/parse.err" ||
  { cat "$TMP/parse.err"; fail "--parse-output: no word that lr is printed but is no series"; }
pass "recorded outputs: the series of GPT-style, print-loop, HF Trainer, Keras, tqdm and settings-echoing scripts, nothing else; units, steps, best; a missing --target or --metric is an error (a setting printed once says so)"

# an A/B on the GPT-style script: --target "val loss=1.5" reached, on the plot
$AB -np 1,2 --repeat 1 --target "val loss=1.5" --plots svg --out "$TMP/gpt" -- "$PY" "$PRINT" gpt --sleep 0.02 \
  >"$TMP/gpt.log" 2>&1 || { cat "$TMP/gpt.log"; fail "hvdshim-ab on the GPT-style script"; }
cat "$TMP/gpt.log"
grep -q "error" "$TMP/gpt.log" && fail "an error on the console with a target every run prints"
unit=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["analysis"]["unit"])' "$TMP/gpt/results.json")
check_report "$TMP/gpt" 3 "$unit" "train loss, val loss, loss, time, mfu"
"$PY" - "$TMP/gpt" <<'PYEOF' || fail "GPT-style: target, columns or plot"
import json, os, sys
d = sys.argv[1]
an = json.load(open(os.path.join(d, "results.json")))["analysis"]
assert an["primary"] == "val loss" and an["shown"] == ["val loss", "train loss", "loss", "time"], an["shown"]
assert an["errors"] == [], an["errors"]
for c in an["configs"]:
    assert c["to_target"] is not None and 0 < c["to_target"] < c["wall_s"], c
    assert c["final"]["val loss"][0] < 1.5 and c["best"]["mfu"][0] > 0, c
md = open(os.path.join(d, "report.md")).read()
for col in ("| val loss: final / best (lower is better) |", "| time (ms): final / best (lower is better) |",
            "| time to val loss <= 1.5 (s) |"):
    assert col in md, (col, md)
assert "mfu:" not in md and "Shown: val loss, train loss, loss, time (the primary, plotted: val loss); all 5 in results.json" in md
svg = open(os.path.join(d, "metric.svg")).read()
assert "val loss (the command" in svg and ">target 1.5<" in svg, "no target line"
assert svg.count("reaches it at") == 3 and svg.count("<path d='M") == 3, "not 3 crossing points"
print("GPT-style: val loss reached by every configuration, shown %s, the target and 3 crossings on the plot" % an["shown"])
PYEOF
pass "A/B on the GPT-style script: --target 'val loss=1.5' reached in every configuration, final and best columns, the target line and crossings on metric.svg"

# a --target no configuration prints, and one only some print: an error line first in the report and on the console, status 1
$AB -np 1 --repeat 1 --no-baseline --target "test loss=1" --out "$TMP/nometric" -- "$PY" "$PRINT" gpt \
  >"$TMP/nometric.log" 2>&1 && { cat "$TMP/nometric.log"; fail "a missing target metric gave status 0"; }
msg="no metric 'test loss' in the output; series seen: train loss, val loss, loss, time, mfu"
grep -qxF "hvdshim-ab: error: $msg" "$TMP/nometric.log" || { cat "$TMP/nometric.log"; fail "no error line on the console"; }
[ "$(sed -n 3p "$TMP/nometric/report.md")" = "**Error: $msg.**" ] || { head -5 "$TMP/nometric/report.md"; fail "the report does not open with the error"; }
grep -q "not reached" "$TMP/nometric/report.md" || fail "no 'not reached' cell"
$AB -np 1 --repeat 1 --target "val loss=1.5" --out "$TMP/somemetric" -- "$PY" "$PRINT" gpt --no-val-under-mpi \
  >"$TMP/somemetric.log" 2>&1 && { cat "$TMP/somemetric.log"; fail "a target only some configurations print gave status 0"; }
msg="no metric 'val loss' in the output of default np=1 (other configurations print it); series seen there: loss, time, mfu"
grep -qxF "hvdshim-ab: error: $msg" "$TMP/somemetric.log" && grep -qxF "**Error: $msg.**" "$TMP/somemetric/report.md" ||
  { cat "$TMP/somemetric.log"; head -5 "$TMP/somemetric/report.md"; fail "no error for a target only the baseline prints"; }
pass "a --target no run prints, or only some configurations do: 'hvdshim-ab: error: no metric ...' on the console and first in the report, status 1"

have_torch || { echo "SKIP (part): PyTorch not importable by $PYTHON"; exit 0; }
ABT="$PYTHON $top_srcdir/tools/hvdshim-ab --hvdrun $top_builddir/launcher/hvdrun"
samples() { "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(" ".join("%s=%s" % (c["key"], c["samples"]) for c in r["analysis"]["configs"]))' "$1"; }

# fixed epochs (examples/train.py): every configuration trains the same samples
$ABT -np 1,2 --repeat 1 --out "$TMP/torch" -- "$PYTHON" "$top_srcdir/examples/train.py" --epochs 1 \
  --checkpoint "$TMP/ck.pt" >"$TMP/torch.log" 2>"$TMP/torch.err" || { cat "$TMP/torch.log" "$TMP/torch.err"; fail "hvdshim-ab on examples/train.py"; }
cat "$TMP/torch.err"
check_report "$TMP/torch" 3 samples/s ""  # one epoch: its one "loss" line is no series
[ "$(samples "$TMP/torch/results.json")" = "baseline=1536 default.np1=1536 default.np2=1536" ] ||
  fail "fixed epochs: samples per run $(samples "$TMP/torch/results.json"), expected 1536 everywhere"
pass "fixed epochs (examples/train.py): 1536 samples in every run, the baseline counted by observation; plots $(ls "$TMP/torch" | grep -E 'png|svg' | tr '\n' ' ')"

# fixed steps (tests/tools/ab_steps.py): the work grows with the ranks; oversubscribed at np=3 (2-core machines)
cpus=$(cpus)
$ABT -np 1,2,3 --repeat 1 --target val_loss=10 --out "$TMP/steps" -- "$PYTHON" "$top_srcdir/tests/tools/ab_steps.py" --steps 30 --batch 16 \
  >"$TMP/steps.log" 2>"$TMP/steps.err" || { cat "$TMP/steps.log" "$TMP/steps.err"; fail "hvdshim-ab on ab_steps.py"; }
cat "$TMP/steps.err"
check_report "$TMP/steps" 4 samples/s
[ "$(samples "$TMP/steps/results.json")" = "baseline=480 default.np1=480 default.np2=960 default.np3=1440" ] ||
  fail "fixed steps: samples per run $(samples "$TMP/steps/results.json"), expected 480, 480, 960, 1440"
"$PY" - "$TMP/steps" <<'PYEOF' || fail "fixed steps: throughput, metrics or target"
import json, os, sys
d = sys.argv[1]
an = json.load(open(os.path.join(d, "results.json")))["analysis"]
runs = {r["config"]: r for r in json.load(open(os.path.join(d, "results.json")))["state"]["runs"]}
for c in an["configs"]:
    r = runs[c["key"]]
    assert abs(c["throughput"] - r["metrics"]["samples"] / r["wall_s"]) < 1e-6 * c["throughput"], c  # its own samples
    assert abs(c["speedup"] - c["throughput"] / an["configs"][0]["throughput"]) < 1e-9, c
    for m in ("val_loss", "acc", "loss"):
        assert m in c["final"] and m in c["best"], (m, c["final"])
    assert c["to_target"] is not None and c["to_target"] <= c["wall_s"], c
assert an["metrics"] == ["loss", "val_loss", "acc"] and an["primary"] == "val_loss", (an["metrics"], an["primary"])
md = open(os.path.join(d, "report.md")).read()
for col in ("val_loss: final / best (lower is better)", "acc: final / best (higher is better)",
            "loss: final / best (lower is better)", "time to val_loss <= 10 (s)", "steady samples/s"):
    assert col in md, col
print("fixed steps: throughput from each run's own samples, metrics %s, time to target" % an["metrics"])
PYEOF
if [ "$cpus" -lt 3 ]; then
  grep -q "default np=3 (oversubscribed)" "$TMP/steps/report.md" && grep -q "Oversubscribed" "$TMP/steps/report.md" &&
    grep -q "warning: -np 3 oversubscribes this machine's $cpus cores" "$TMP/steps.err" ||
    { cat "$TMP/steps.err"; fail "np=3 on $cpus cores not flagged as oversubscribed"; }
fi
grep -qE "UserWarning|DeprecationWarning|[Mm]atplotlib|Fontconfig" "$TMP/steps.err" "$TMP/torch.err" 2>/dev/null &&
  { cat "$TMP/steps.err"; fail "library warnings on the console"; }
pass "fixed steps (ab_steps.py): samples 480/480/960/1440 from each run, speedup from throughput, val_loss/acc/loss columns (final, best), time to target, oversubscription flagged, no library warnings"

# the HTML report in a browser: tables and images load
if command -v chromium >/dev/null 2>&1; then
  timeout 120 chromium --headless --no-sandbox --disable-gpu --virtual-time-budget=10000 --dump-dom \
    "file://$TMP/steps/report.html" >"$TMP/dom.html" 2>"$TMP/chromium.err" || { tail -5 "$TMP/chromium.err"; fail "chromium could not render the report"; }
  grep -q 'data-images-loaded="yes"' "$TMP/dom.html" || { grep -o 'data-images-loaded="[a-z]*"' "$TMP/dom.html"; fail "the report's images did not load in chromium"; }
  [ "$(grep -o '<tr>' "$TMP/dom.html" | wc -l)" = 5 ] || fail "the rendered report does not have 5 table rows"
  pass "report.html in headless chromium: 3 images loaded, the table has its 4 configurations"
else
  echo "SKIP (part): chromium not installed (apt-get install chromium): the report was not rendered in a browser"
fi
