#!/bin/sh
# hvdrun across several hosts on one machine: two network namespaces joined
# by a veth pair stand for two hosts (10.77.R.1 and 10.77.R.2).  hvdrun runs
# in the first with -H (the first host by its name: Open MPI 5.0's mapper
# gives the local host one slot when -H names it by an address); mpirun
# starts the second host's daemon through a launch agent that enters that
# namespace with an empty environment (as ssh would give a fresh login), so
# LD_PRELOAD and the HVDSHIM_* settings reach the remote rank only if hvdrun
# forwards them.  The native example at 2 ranks (one per host, TCP over the
# veth) must match the plain trainer with a 2x batch, and both ranks must
# report their own host.  Then 2 ranks per host (shared memory within a
# host, MPI between) against a 4x batch.  Runs in the stacks' chroots too
# (Open MPI 5 and 6): namespaces are entered with nsenter.
# Skips, with the reason, where namespaces cannot be made (not root, no
# iproute2, a container without CAP_SYS_ADMIN).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_open_mpi "the launch agent (plm_rsh_agent) and TCP settings"
. "$top_srcdir/tests/launcher/netns-lib.sh"
netns_up

. "$top_srcdir/tests/native/native-lib.sh"
build_lib "$BIN"
build_train "$BIN" train
"$BIN/train" --steps 100 --batch 32 --out "$TMP/ref.bin" >"$TMP/ref.log" || fail "plain run"
HVDSHIM_HOOKS="$EX/mlp.hooks" HVDSHIM_LOG_LEVEL=info timeout -k 5 120 $ON_A "$HVDRUN" --verbose -np 2 -H $A:1,$IPB:1 -- "$BIN/train" --steps 100 --batch 16 --out "$TMP/np2.bin" \
  </dev/null >"$TMP/np2.log" 2>&1 || { cat "$TMP/np2.log"; fail "hvdrun across two namespaces"; }
grep "^hvdrun: " "$TMP/np2.log" | head -1
[ "$(cat "$TMP/agent.calls" 2>/dev/null)" = "$IPB" ] ||
  { cat "$TMP/np2.log"; fail "the launch agent was not called (only) for the second host: $(cat "$TMP/agent.calls" 2>/dev/null)"; }
grep -q "hvdshim\[1\]: .*engine started: 2 rank(s)" "$TMP/np2.log" ||
  { cat "$TMP/np2.log"; fail "rank 1 (the other host) did not start the engine: settings not forwarded?"; }
same "$TMP/ref.bin" "$TMP/np2.bin" || fail "2 hosts differ from the plain run with batch 32"
pass "2 hosts (network namespaces, TCP over veth, launch agent with an empty environment): matches the plain run"

# 2 ranks on each host: the shared-memory allreduce within a host and MPI
# (TCP) between the hosts, one allreduce per slice (the hierarchical path)
HVDSHIM_HOOKS="$EX/mlp.hooks" HVDSHIM_LOG_LEVEL=info timeout -k 5 180 $ON_A "$HVDRUN" --verbose -np 4 -H $A:2,$IPB:2 -- "$BIN/train" --steps 100 --batch 8 --out "$TMP/np4.bin" \
  </dev/null >"$TMP/np4.log" 2>&1 || { cat "$TMP/np4.log"; fail "hvdrun with 2 ranks on each of two namespaces"; }
grep -q "hvdshim\[0\]: .*shared memory 2 rank(s) per host x 2 host(s)" "$TMP/np4.log" ||
  { cat "$TMP/np4.log"; fail "2 x 2: the shared-memory path across hosts was not used"; }
same "$TMP/ref.bin" "$TMP/np4.bin" || fail "2 hosts x 2 ranks differ from the plain run with batch 32"
pass "2 hosts x 2 ranks: shared memory within each, MPI between them: matches the plain run"

# A whole host lost under an elastic job (hvdrun --min-np: ULFM, Open MPI 5+):
# 3 ranks, 2 on the first host and 1 on the second, an unmodified PyTorch
# script (tests/torch/elastic_train.py, HVDSHIM_DATA=split).  When rank 2
# reaches a random step it waits there, and every process of the second
# host's namespace (its daemon, its rank, the agent's shell) is SIGKILLed at
# once, as a host that dies.  The 2 ranks of the first host go on: status
# 0, the script's log has each epoch's line once, and the weights equal the
# single-process emulation without rank 2's slice (rows 8 to 11 of 12) of
# the step the survivors averaged again.
if ! nm -D "$top_builddir/.libs/libhvdshim.so" 2>/dev/null | grep -q " U MPIX_Comm_shrink"; then
  echo "a host lost under --min-np: not run (this MPI has no ULFM; tests/mpi/elastic.sh checks the refusal)"
elif "$MPIRUN" --version 2>&1 | grep -q "(Open MPI) 5\."; then
  # (tried: PRRTE 3.0 says "We cannot recover from this failure, and
  # therefore will terminate the job", and mpirun then exits 0)
  echo "a host lost under --min-np: not run (Open MPI 5.0's launcher ends the job when it loses a host's daemon; Open MPI 6 goes on)"
elif ! have_torch; then
  echo "a host lost under --min-np: not run (no torch for $PYTHON)"
else
  TRAIN="$top_srcdir/tests/torch/elastic_train.py"
  seed=${ELASTIC_SEED:-$(date +%s)}
  at=$((seed % 50 + 4))
  hold=/dev/shm/hvdshim-test-hold.$$ # (outside the rank-private files: rank 2 makes it)
  rm -f "$hold"
  OMP_NUM_THREADS=1 HVDSHIM_DATA=split timeout -k 5 180 $ON_A "$HVDRUN" --verbose -np 3 --min-np 2 -H $A:2,$IPB:1 -- "$PYTHON" "$TRAIN" "$TMP/host.pt" 2:$at "$hold" \
    </dev/null >"$TMP/host.log" 2>&1 &
  job=$!
  i=0
  until [ -f "$hold" ]; do
    i=$((i + 1))
    [ $i -le 1200 ] || { kill $job; cat "$TMP/host.log"; fail "a host lost: rank 2 did not reach step $at within 120 s"; }
    sleep 0.1
  done
  rm -f "$hold"
  pids=$("$IP" netns pids $B)
  case " $(for p in $pids; do cat /proc/$p/comm; done | tr '\n' ' ')" in *" prted "* | *" orted "*) ;;
    *) kill $job; cat "$TMP/host.log"; fail "a host lost: no daemon among the second host's processes ($pids)" ;; esac
  # shellcheck disable=SC2086
  kill -9 $pids
  rc=0
  wait $job || rc=$?
  # (what the dead host leaves on its disk: every process there was killed,
  # its rank's cleaners too; removed here, as that host's reboot would)
  for p in $pids; do rm -rf "/tmp/prted.$p" /tmp/hvdshim-rank*-"$p"-*; done
  [ $rc = 0 ] || { cat "$TMP/host.log"; fail "a host lost at step $at (ELASTIC_SEED=$seed): status $rc"; }
  grep -q "rank(s) 2 died: this script goes on from optimizer step [0-9]* over 2 rank(s) (was 3)" "$TMP/host.log" ||
    { cat "$TMP/host.log"; fail "a host lost: no line saying the script goes on over 2"; }
  redone=$(sed -n 's/.*optimizer step \([0-9]*\): its gradients averaged again over the 2 surviving.*/\1/p' "$TMP/host.log" | head -1)
  [ -n "$redone" ] || { cat "$TMP/host.log"; fail "a host lost: no line naming the step averaged again"; }
  for e in 0 1 2; do
    [ "$(grep -c "^epoch $e: loss" "$TMP/host.pt.log")" = 1 ] || { cat "$TMP/host.pt.log"; fail "a host lost: epoch $e's line is not in the log once"; }
  done
  OMP_NUM_THREADS=1 DROP=$((redone - 1)):8:12 "$PYTHON" "$TRAIN" "$TMP/emulated.pt" >/dev/null 2>&1 || fail "the emulation failed"
  "$PYTHON" "$top_srcdir/tests/torch/compare.py" "$TMP/host.pt" "$TMP/emulated.pt" 1e-4 >"$TMP/cmp" 2>&1 || { cat "$TMP/host.log" "$TMP/cmp"; fail "a host lost: weights differ from the emulation"; }
  pass "a host lost (its daemon and rank SIGKILLed at step $at) under hvdrun --min-np 2 -H A:2,B:1: the first host's 2 ranks go on (status 0), the log whole, weights = the emulation without rank 2's slice of step $((redone - 1)) ($(cat "$TMP/cmp"))"
fi
