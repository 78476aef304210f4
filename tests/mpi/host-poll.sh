#!/bin/sh
# Host allreduces submitted one at a time (engine_test host-poll, np=2):
# - one submitted alone and tested at once is still running: it gathers, as
#   in Horovod (whose test_horovod_reducescatter_async_fused asserts that
#   hvd.poll is not always True right after submitting), until a thread asks
#   for a result; a polled one then completes at once (0.2 ms), not at the
#   idle engine's tick;
# - a wait that starts after the engine thread has already completed its
#   handle does not run a cycle of its own: that cycle's control round waited
#   for idle peers until their tick (3-6 of 10 such waits took the tick
#   before the fix; Horovod's test_global_barrier_op then measured 4.9 s of 5).
# - while a thread runs the cycle itself every step (a training step's
#   batch, waited for at once), the engine thread runs no cycle of its own:
#   its idle tick counts from the last cycle, whoever ran it (16 of 300
#   5-ms steps' cycles were the engine thread's before, each a round the
#   peer joined only at its next step; at most 4 allowed here, for a
#   machine that stalls a step past the 100 ms tick).
# The idle tick is made 20 s here (HVDSHIM_TEST_IDLE_TICK; 100 ms in a job),
# so that what completes only at the tick is told apart from what completes
# at once by thousands of times, not by a timing margin a slow machine could
# cross: a poll or a wait that took half the tick took the tick.
. "$(dirname "$0")/../lib.sh"
need_mpirun
n=50
HVDSHIM_TEST_IDLE_TICK=20 mpi 2 "$ENGINE_TEST" host-poll $n >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "engine_test host-poll at np=2"; }
expect_ok_lines "$TMP/out" 2
lines=$(grep -c "host poll $n:" "$TMP/out")
[ "$lines" = 2 ] || { cat "$TMP/out"; fail "$lines ranks of 2 said how their polls went"; }
grep "host poll $n:" "$TMP/out" | while read -r line; do
  at_once=$(echo "$line" | sed -n 's/.*done at once \([0-9]*\),.*/\1/p')
  med=$(echo "$line" | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
  slow=$(echo "$line" | sed -n 's/.*waits over half the idle tick ([0-9]* ms): \([0-9]*\).*/\1/p')
  [ "$at_once" -le $((n / 2)) ] ||
    { echo "$line"; fail "$at_once of $n allreduces submitted alone were done at the first hvd_test: not gathered"; }
  awk -v m="$med" 'BEGIN { exit !(m < 10000) }' ||
    { echo "$line"; fail "a polled allreduce submitted alone took $med ms (median) to complete, the idle tick: the poll did not end its gathering"; }
  [ "$slow" = 0 ] ||
    { echo "$line"; fail "$slow of 10 waits took the idle tick: a waiting thread ran a cycle for a handle already done"; }
done || exit 1
mpi 2 "$ENGINE_TEST" helped-steps 300 >"$TMP/out2" 2>&1 || { cat "$TMP/out2"; fail "engine_test helped-steps at np=2"; }
expect_ok_lines "$TMP/out2" 2
[ "$(grep -c "helped steps 300:" "$TMP/out2")" = 2 ] || { cat "$TMP/out2"; fail "not every rank said how its cycles went"; }
own=$(sed -n 's/.*helped steps 300: [0-9]* cycles, the engine thread.s \([0-9]*\)$/\1/p' "$TMP/out2" | sort -n | tail -1)
[ -n "$own" ] && [ "$own" -le 4 ] ||
  { cat "$TMP/out2"; fail "the engine thread ran ${own:-?} cycles of its own during 300 steps whose waiting thread ran each step's cycle (its idle tick did not count from their cycles)"; }
pass "300 steps whose waiting thread runs the cycle: the engine thread ran at most $own of its own"
pass "host allreduces submitted alone gather, complete at once when polled, and waits run no cycle for a done handle ($(grep -m1 -o 'done at once.*' "$TMP/out"))"
