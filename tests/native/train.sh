#!/bin/sh
# The native example (examples/native) under the shim at 1, 2 and 3 ranks
# against the plain trainer with an N-times larger batch: the hook spec
# shards the batches (rank r reads batch step*N + r), averages the gradient
# before each update and broadcasts rank 0's initial weights, so the final
# parameters must match within $TOL.
. "$(dirname "$0")/../lib.sh"
need_mpirun
. "$(dirname "$0")/native-lib.sh"
build_lib "$BIN"
build_train "$BIN" train
SPEC="$EX/mlp.hooks"
STEPS=200
B=16
for np in 1 2 3; do
  "$BIN/train" --steps $STEPS --batch $((np * B)) --out "$TMP/ref$np.bin" >"$TMP/ref$np.log" || fail "plain run, batch $((np * B))"
  native $np "$SPEC" "$BIN/train" --steps $STEPS --batch $B --out "$TMP/np$np.bin" >"$TMP/np$np.log" 2>&1 ||
    { cat "$TMP/np$np.log"; fail "np=$np under the shim"; }
  same "$TMP/ref$np.bin" "$TMP/np$np.bin" || fail "np=$np differs from the plain run with batch $((np * B))"
  pass "np=$np matches the plain run with batch $((np * B))"
  # rank 0's console only
  n=$(grep -c '^final loss' "$TMP/np$np.log")
  [ "$n" = 1 ] || { cat "$TMP/np$np.log"; fail "np=$np: expected one 'final loss' line (rank 0's), got $n"; }
done

# Ranks that start from different seeds still train rank 0's model
# (the broadcast after mlp_init).  Each rank writes its own file on purpose:
# HVDSHIM_SAVE_RANKS=all (otherwise rank 1's write goes to its private overlay).
LD_PRELOAD="$LIB" HVDSHIM_HOOKS=$SPEC HVDSHIM_SAVE_RANKS=all T=120 mpi 2 -x LD_PRELOAD -x HVDSHIM_HOOKS -x HVDSHIM_SAVE_RANKS \
  "$(by_rank "$BIN/train --steps $STEPS --batch $B --seed 1 --out $TMP/seeds.bin" \
    "$BIN/train --steps $STEPS --batch $B --seed 99 --out $TMP/seeds-r1.bin")" >"$TMP/seeds.log" 2>&1 ||
  { cat "$TMP/seeds.log"; fail "ranks with different seeds"; }
same "$TMP/ref2.bin" "$TMP/seeds.bin" || fail "rank 0 did not train from its own initial weights"
same "$TMP/seeds.bin" "$TMP/seeds-r1.bin" || fail "rank 1's parameters differ from rank 0's"
pass "ranks started with seeds 1 and 99 end with the same parameters as the plain run with seed 1"

# Negative control: without the allreduce the ranks train apart, and the
# comparison above notices.
grep -v 'grad: allreduce' "$SPEC" | sed 's/^void sgd_update.*$//' >"$TMP/no-allreduce.hooks"
native 2 "$TMP/no-allreduce.hooks" "$BIN/train" --steps $STEPS --batch $B --out "$TMP/noar.bin" >"$TMP/noar.log" 2>&1 ||
  { cat "$TMP/noar.log"; fail "np=2 without the allreduce hook"; }
differ "$TMP/ref2.bin" "$TMP/noar.bin" || fail "a run without gradient averaging matched the reference: the comparison cannot fail"
pass "without the allreduce hook the result differs (the comparison can fail)"
