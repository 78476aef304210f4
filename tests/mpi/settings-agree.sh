#!/bin/sh
# Settings that shape the collectives must be equal on every rank: a rank
# started with another fusion threshold (GPU backend, autotune) makes hvd_init fail
# on every rank with one line naming the setting and both values, instead of
# mismatched MPI calls later.
. "$(dirname "$0")/../lib.sh"
need_mpirun
export LD_PRELOAD="$LIB"
for kv in HVDSHIM_FUSION_THRESHOLD=1M HVDSHIM_GPU_OPERATIONS=MPI HVDSHIM_CACHE_CAPACITY=64 HVDSHIM_AUTOTUNE=1; do
  T=60 mpi 2 -x LD_PRELOAD "$(by_rank "$ENGINE_TEST collectives" "env $kv $ENGINE_TEST collectives")" \
    >"$TMP/out" 2>&1 && { cat "$TMP/out"; fail "$kv on rank 1 only: the job succeeded"; }
  name=${kv%%=*}
  ranks_said "$TMP/out" "hvd_init failed: $name differs across ranks" 2 ||
    { cat "$TMP/out"; fail "$kv on rank 1 only: expected the error line"; }
  pass "$kv on rank 1 only: $(grep -m1 -o "$name differs.*" "$TMP/out")"
done
# The same value spelled differently (1M vs 1048576) is the same setting.
T=60 mpi 2 -x LD_PRELOAD "$(by_rank "env HVDSHIM_FUSION_THRESHOLD=1M $ENGINE_TEST collectives" \
  "env HVDSHIM_FUSION_THRESHOLD=1048576 $ENGINE_TEST collectives")" >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "1M vs 1048576"; }
pass "1M and 1048576 agree"
