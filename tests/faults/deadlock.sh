#!/bin/sh
# A deadlock ends the job; a slow rank does not.  The ranks take different
# paths (rank 0 goes on to an allgather, as a script that caught an
# exception on one rank does, while the others wait in a barrier): every
# rank waits and nothing can complete, so within HVDSHIM_DEADLOCK_SECONDS
# the job ends non-zero with one line naming what each rank waits for,
# instead of idling until the stall shutdown (30 minutes by default).  A
# rank that is merely slow (computing, not waiting) gets the stall warning
# and the job completes.
. "$(dirname "$0")/../lib.sh"
need_mpirun
export HVDSHIM_DEADLOCK_SECONDS=2
t0=$(now_ms)
T=60 mpi 3 -x HVDSHIM_DEADLOCK_SECONDS "$ENGINE_TEST" deadlock >"$TMP/dead" 2>&1 &&
  { cat "$TMP/dead"; fail "the deadlocked job exited 0"; }
took=$(($(now_ms) - t0))
[ "$took" -lt 20000 ] || { cat "$TMP/dead"; fail "the deadlocked job took $took ms"; }
grep -q "deadlock: every rank has waited on hvdshim for HVDSHIM_DEADLOCK_SECONDS=2 without submitting, and none of the 2 operation(s) in flight can complete: rank 0 waits for allgather 'after.the.failure'; rank 1 waits for barrier 'hvdshim.barrier.0.0'; rank 2 waits for barrier 'hvdshim.barrier.0.0'" "$TMP/dead" ||
  { cat "$TMP/dead"; fail "no line naming what each rank waits for"; }
grep -q "wait returned" "$TMP/dead" && { cat "$TMP/dead"; fail "a wait returned instead of the job ending"; }
pass "deadlock (rank 0 in an allgather, ranks 1 and 2 in a barrier): ended in $took ms, naming what each rank waits for"
export HVDSHIM_STALL_WARNING_SECONDS=2
T=60 mpi 3 -x HVDSHIM_DEADLOCK_SECONDS -x HVDSHIM_STALL_WARNING_SECONDS "$ENGINE_TEST" slow 6 >"$TMP/slow" 2>&1 ||
  { cat "$TMP/slow"; fail "the job with a slow rank failed"; }
[ "$(grep -c "the slow rank's allreduce completed" "$TMP/slow")" = 3 ] || { cat "$TMP/slow"; fail "not every rank completed"; }
grep -q "stall: allreduce 'slow.rank' submitted by rank(s) 0,1 has waited" "$TMP/slow" || { cat "$TMP/slow"; fail "no stall warning for the slow rank"; }
grep -q "deadlock" "$TMP/slow" && { cat "$TMP/slow"; fail "a slow rank was taken for a deadlock"; }
pass "slow rank (computing 6 s, the others waiting, HVDSHIM_DEADLOCK_SECONDS=2): stall warning, no deadlock, the job completes"
