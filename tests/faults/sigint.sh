#!/bin/sh
# Ctrl-C: SIGINT to mpirun in the middle of training (np=3, two DataLoader
# worker processes per rank): mpirun, every rank and every worker are gone
# within 30 s; nothing is left behind.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
tag="sigint-$$"
T=120 shim 3 "$PYTHON" "$FAULT_TRAIN" --steps 100000 --step-sleep 0.02 --workers 2 --tag "$tag" >"$TMP/out" 2>&1 &
wait_for "$TMP/out" "\[rank 2\] step 20" 90
mp=
for p in $(pgrep -f -- "--tag $tag"); do
  case $(cat "/proc/$p/comm" 2>/dev/null) in mpirun | orterun | prterun) mp=$p ;; esac
done
[ -n "$mp" ] || fail "mpirun not found"
n=$(pgrep -f -- "--tag $tag" | wc -l)
t0=$(now_ms)
kill -INT "$mp"
wait
took=$(($(now_ms) - t0))
[ "$took" -lt 30000 ] || fail "the job took $took ms to end after SIGINT"
no_leftovers "$tag"
pass "SIGINT to mpirun: $n processes (mpirun, ranks, workers) gone after $took ms, none left"
