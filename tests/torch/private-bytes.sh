#!/bin/sh
# Rank-private files at checkpoint sizes (issue 52): a rank > 0 keeps about
# HVDSHIM_PRIVATE_BYTES (64 MiB) of its private files in $TMPDIR, not a copy
# of every checkpoint; what it reads back is rank 0's file when that holds
# the same bytes.  $TMPDIR is a private tmpfs of 1.5 checkpoints (a mount
# namespace, as tests/mpi/shm.sh makes for /dev/shm):
#  1. np=4, a 200 MiB checkpoint every epoch (tests/torch/big_checkpoint.py:
#     epoch-N.pt by path, loaded back, rotated keeping the last 2; a
#     temporary os.replace'd into last.pt, loaded back; the rank's own
#     random state, loaded back; last.pt copied to best.pt with
#     shutil.copyfile, one sendfile of it all, loaded back; a log
#     appended), 3 epochs: the job
#     succeeds, every read-back is exact (the script compares each), the
#     ranks agree, the real files are rank 0's, no overlay folder is left,
#     $TMPDIR never filled (no rank fell back to dropping bytes); the peak
#     of $TMPDIR's use is printed against the checkpoint's size;
#  2. the negative control: the same with every byte kept
#     (HVDSHIM_PRIVATE_BYTES=0, the overlay before) fails, out of room;
#  3. rank 0's real path full (a 1 MiB tmpfs) while it rewrites a small
#     checkpoint: plain's error on rank 0, the job ends non-zero, no rank > 0
#     failed; plain leaves a partial file, the shim the old checkpoint whole
#     and no temporary (the adapter's checkpoints.py).
# Cost: 120-150 s on this 2-core VM, loaded (4 ranks of torch saving and
# loading 200 MiB 6 times each: 4 times plain's 20-36 s; run 2 stops at its
# first save; run 3, 20 s).  Debian 12 only (check-stacks: sid's torch
# writer and the Trainer's checkpoints are tests/torch/hf.sh's, with every
# byte freed).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
command -v unshare >/dev/null && unshare -m true 2>/dev/null || skip "no mount namespace here (unshare -m)"
MB=200
SIZE=300 # MiB: 1.5 checkpoints (the overlay before needs 3 per save: one per rank > 0)
mkdir "$TMP/priv"
# run NAME SETTINGS...: big_checkpoint.py at np=4 in $TMP/NAME with $TMPDIR the
# private tmpfs; its output in $TMP/NAME.out, the tmpfs's peak use (bytes) in $TMP/NAME.peak
export TMP SIZE PYTHON TORCH_DIR MB
# (the functions of tests/lib.sh, for the shell in the namespace)
shim_def=$(sed -n '/^mpi() {/,/^}/p; /^shim() {/,/^}/p' "$top_srcdir/tests/lib.sh")
run() {
  _n=$1
  shift
  mkdir -p "$TMP/$_n"
  # shellcheck disable=SC2016
  env "$@" N="$_n" LIB="$LIB" MPIRUN="$MPIRUN" MPI_KIND="$MPI_KIND" HVDSHIM_WORKER_STDOUT=1 HVDSHIM_LOG_LEVEL=debug \
    unshare -m sh -c "$shim_def"'
    mount -t tmpfs -o size=${SIZE}M tmpfs "$TMP/priv" || exit 90
    "$PYTHON" -c "
import os, sys, time
p, out = sys.argv[1], sys.argv[2]
peak = 0
while not os.path.exists(out + \".stop\"):
    s = os.statvfs(p)
    peak = max(peak, (s.f_blocks - s.f_bfree) * s.f_frsize)
    time.sleep(0.002)
open(out, \"w\").write(str(peak))
" "$TMP/priv" "$TMP/$N.peak" &
    _s=$!
    TMPDIR="$TMP/priv" shim 4 "$PYTHON" "$TORCH_DIR/big_checkpoint.py" --dir "$TMP/$N" --mb $MB --epochs $EPOCHS
    _rc=$?
    _i=0
    while ls -d "$TMP/priv"/hvdshim-rank* >/dev/null 2>&1 && [ $_i -lt 50 ]; do sleep 0.1; _i=$((_i + 1)); done
    ls -d "$TMP/priv"/hvdshim-rank* 2>/dev/null && echo "an overlay folder was left behind"
    touch "$TMP/$N.peak.stop"
    wait $_s
    exit $_rc' >"$TMP/$_n.out" 2>&1
}
mib() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1048576 }'; }

# 1. the default
T=400 run ok EPOCHS=3 || { grep -v "debug" "$TMP/ok.out" | tail -40; fail "np=4, ${MB} MiB checkpoints, a ${SIZE} MiB TMPDIR: the job failed"; }
grep -q "overlay folder was left" "$TMP/ok.out" && fail "an overlay folder was left behind"
grep "TMPDIR is full" "$TMP/ok.out" && fail "TMPDIR filled up: ranks > 0 held more than their cap while rank 0 wrote (peak $(cat "$TMP/ok.peak") bytes)"
[ "$(grep -c '^\[rank [0-3]\] checksum' "$TMP/ok.out")" = 4 ] &&
  [ "$(grep '^\[rank [0-3]\] checksum' "$TMP/ok.out" | awk '{print $3}' | sort -u | wc -l)" = 1 ] ||
  { grep checksum "$TMP/ok.out"; fail "the ranks' checksums: expected 4, all equal"; }
[ "$(cd "$TMP/ok" && find . -type f | sort | tr '\n' ' ')" = \
  "./best.pt ./checkpoints/epoch-1.pt ./checkpoints/epoch-2.pt ./checkpoints/last.pt ./log.txt ./rng.pt " ] &&
  [ "$(wc -l <"$TMP/ok/log.txt")" = 3 ] || { (cd "$TMP/ok" && find .); fail "the real files are not rank 0's alone"; }
peak=$(cat "$TMP/ok.peak")
kept=$(grep -o "at most [0-9]* bytes kept" "$TMP/ok.out" | awk '{s += $3} END {print s + 0}')
# (each rank > 0 keeps at most the cap plus one 16 MiB piece: 80 MiB; a
# whole copy of the 200 MiB file, as one sendfile of shutil.copyfile kept,
# fills the tmpfs, which the bytes layer then survives by dropping bytes)
[ "$kept" -le $((3 * 80 * 1048576)) ] && [ "$peak" -lt $((SIZE * 1048576)) ] ||
  fail "ranks > 0 kept $(mib "$kept") MiB together (at most 3 x 80 MiB), TMPDIR's peak $(mib "$peak") MiB of $SIZE"
served=$(grep -o "given rank 0's file [0-9]*, a memfd [0-9]*" "$TMP/ok.out" | awk '{f += $5; m += $8} END {print f + 0, m + 0}')
pass "np=4, 3 epochs of a ${MB} MiB checkpoint (2 saves and a copy, 3 read-backs each) in a ${SIZE} MiB TMPDIR: every read-back exact, ranks agree; peak use of TMPDIR $(mib "$peak") MiB for a ${MB} MiB checkpoint (ranks > 0 at most $(mib "$kept") MiB together; read-backs from rank 0's file, from memory: $served)"

# 2. negative control: every byte kept, as before issue 52
T=400 run all EPOCHS=1 HVDSHIM_PRIVATE_BYTES=0 && { tail -20 "$TMP/all.out"; fail "negative control: HVDSHIM_PRIVATE_BYTES=0 succeeded in a ${SIZE} MiB TMPDIR"; }
grep -qi "no space left\|failed writing" "$TMP/all.out" || { grep -v debug "$TMP/all.out" | tail -20; fail "negative control: failed, but not out of room"; }
pass "negative control: every byte kept (HVDSHIM_PRIVATE_BYTES=0) fails out of room, as the overlay did before"

# 3. rank 0's real path full (a 1 MiB tmpfs; TMPDIR elsewhere) while it
# rewrites a small checkpoint: the script gets plain's error on rank 0 and
# the job ends non-zero, no rank > 0 failed; plain leaves a partial file at
# the path, the shim the old checkpoint whole and nothing else
mkdir "$TMP/full" "$TMP/full-tmp"
CODE='import torch; torch.save({"old": 1}, "ck.pt"); torch.save({"w": torch.zeros(1 << 20)}, "ck.pt")'
LOAD='import torch; print(torch.load("ck.pt").get("old"))'
export CODE LOAD
# shellcheck disable=SC2016
LIB="$LIB" MPIRUN="$MPIRUN" MPI_KIND="$MPI_KIND" unshare -m sh -c "$shim_def"'
  mount -t tmpfs -o size=1M tmpfs "$TMP/full" || exit 90
  cd "$TMP/full" || exit 90
  left() { echo "$1 $(stat -c %s ck.pt 2>/dev/null) $("$PYTHON" -c "$LOAD" 2>/dev/null || echo broken) $(ls -A | grep -v -x ck.pt | tr "\n" ,)"; }
  timeout 60 "$PYTHON" -c "$CODE" >"$TMP/full-plain.out" 2>&1
  left $? >"$TMP/full.plain"
  rm -f ck.pt
  TMPDIR="$TMP/full-tmp" T=120 shim 2 "$PYTHON" -c "$CODE" >"$TMP/full-shim.out" 2>&1
  rc=$?
  sleep 1 # (the watcher of a temporary: it would remove one a killed rank left)
  left $rc >"$TMP/full.shim"' || fail "rank 0's disk full: no mount namespace"
read -r prc psize pold pother <"$TMP/full.plain"
read -r src ssize sold sother <"$TMP/full.shim"
want=$(grep -m1 "^RuntimeError: " "$TMP/full-plain.out")
[ "$prc" != 0 ] && [ -n "$want" ] || { cat "$TMP/full-plain.out"; fail "rank 0's disk full: plain did not fail as expected"; }
[ "$src" != 0 ] && grep -q -F -x "[rank 0] $want" "$TMP/full-shim.out" ||
  { tail -30 "$TMP/full-shim.out"; fail "rank 0's disk full: the job (status $src) did not end with plain's error: $want"; }
grep "^\[rank [1-9]\].*Error" "$TMP/full-shim.out" && fail "rank 0's disk full: a rank > 0 failed too"
[ "$pold" = broken ] || fail "rank 0's disk full: plain left a checkpoint that loads ($pold, $psize bytes): no partial file to compare with"
[ "$sold" = 1 ] && [ -z "$sother" ] ||
  fail "rank 0's disk full: the shim left ${sold:-no} checkpoint (${ssize:-no} bytes; plain's partial $psize) and '${sother}' beside it, not the old one whole and nothing else"
i=0
while ls -d "$TMP/full-tmp"/hvdshim-rank* >/dev/null 2>&1 && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
ls -d "$TMP/full-tmp"/hvdshim-rank* 2>/dev/null && fail "rank 0's disk full: an overlay folder was left behind"
pass "rank 0's disk full: the job ends (status $src; plain $prc) with plain's error on rank 0 ($want), the ranks > 0 did not fail; left at the path: the old checkpoint whole ($ssize bytes; plain leaves a partial file of $psize), no temporary, no overlay folder"
