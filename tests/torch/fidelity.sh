#!/bin/sh
# Zero-code fidelity, what the launcher and the MPI take part in: ordinary
# scripts (tests/torch/fidelity.py) that save and reload checkpoints in
# every idiom, fail half-way, end in os._exit, train hogwild: run plain and
# under the shim, compared.  The data and decision cases (unseeded random
# numbers, decisions on a rank's own loss, samplers, no_grad evaluation,
# DataLoader workers, the replica guard, torch.compile) are in
# fidelity-data.sh.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
. "$(dirname "$0")/fidelity_common.sh"

# --- checkpoints: open('wb')+torch.save(model, f)+load, save+reload by path,
# BytesIO, tmp + os.replace into os.makedirs' folder, rotation, an appended
# log, resume-if-exists (a second run); twice (the race this guards against
# lost 8 of 9 runs before its fix: two runs catch it 99 times in 100)
mkdir "$TMP/p"
run_plain checkpoints --dir "$TMP/p" --epochs 2 --out "$TMP/p1.pt"
run_plain checkpoints --dir "$TMP/p" --epochs 4 --out "$TMP/p.pt"
grep -q "resumed at epoch 2" "$TMP/plain.out" || fail "plain run did not resume"
for i in 1 2; do
  rm -rf "$TMP/s" && mkdir "$TMP/s"
  HVDSHIM_DATA=split run_shim 2 "$PYTHON" "$F" checkpoints --dir "$TMP/s" --epochs 2 --out "$TMP/s1.pt"
  HVDSHIM_DATA=split run_shim 2 "$PYTHON" "$F" checkpoints --dir "$TMP/s" --epochs 4 --out "$TMP/s.pt"
  grep -q "resumed at epoch 2" "$TMP/shim.out" || { cat "$TMP/shim.out"; fail "shim run $i did not resume"; }
  same "$TMP/p.pt" "$TMP/s.pt" 1e-4 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "checkpoint loop $i differs from plain"; }
  [ "$(wc -l <"$TMP/s/log.txt")" = 4 ] || { cat "$TMP/s/log.txt"; fail "log.txt: expected 4 lines (rank 0's)"; }
  [ "$(cd "$TMP/s" && find . -type f | sort | tr '\n' ' ')" = \
    "./checkpoints/epoch-3.pt ./checkpoints/run/last.pt ./log.txt ./model.pt ./state.pt " ] ||
    { (cd "$TMP/s" && find .); fail "unexpected real files after run $i"; }
  no_overlay_left "checkpoint loop $i"
done
pass "checkpoint idioms twice at np=2: same weights as plain ($(cat "$TMP/cmp")), files written once, overlay removed"

# --- a failing run: rank 1's private folder is removed all the same
rm -rf "$TMP/f" && mkdir "$TMP/f"
FAIL_HERE=1 shim 2 -x FAIL_HERE "$PYTHON" "$F" fail-after-write --dir "$TMP/f" >"$TMP/out" 2>&1 &&
  { cat "$TMP/out"; fail "the failing run exited 0"; }
[ -f "$TMP/f/partial.pt" ] || fail "rank 0's file is missing after the failure"
no_overlay_left "failed run"
pass "failed run: non-zero status, rank 0's file kept, overlay removed"

# --- os._exit(0) at the end
run_shim 2 "$PYTHON" "$F" os-exit
grep -q "^checksum" "$TMP/shim.out" || { cat "$TMP/shim.out"; fail "os._exit run printed nothing"; }
pass "os._exit(0) on every rank: the job exits 0"

# --- hogwild: stood aside with one warning; rank 0 runs it alone (its
# output once, its work once), the other rank exits 0 with one line
run_shim 2 "$PYTHON" "$F" hogwild
[ "$(grep -c 'hogwild training): hvdshim cannot distribute this script and stands aside; rank 0 runs it alone' "$TMP/shim.out")" = 1 ] &&
  [ "$(grep -c "^tested 64 samples" "$TMP/shim.out")" = 1 ] && [ "$(grep -c "^checksum" "$TMP/shim.out")" = 1 ] &&
  [ "$(grep -c 'this rank exits (status 0)' "$TMP/shim.out")" = 1 ] || { cat "$TMP/shim.out"; fail "hogwild: not run once"; }
pass "hogwild script at np=2: one warning, run once by rank 0, rank 1 exits 0 with one line"
