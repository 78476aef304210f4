#!/bin/sh
# Response cache on (default), off, and tiny (constant eviction) at np=4.
. "$(dirname "$0")/../lib.sh"
need_mpirun
for cap in 1024 0 3; do
  HVDSHIM_CACHE_CAPACITY=$cap mpi 4 "$ENGINE_TEST" random 5 40 2 4 >"$TMP/c$cap" 2>&1 || { cat "$TMP/c$cap"; fail "cache capacity $cap"; }
  expect_ok_lines "$TMP/c$cap" 4
done
[ "$(stat_of "$TMP/c0" cache_hits)" = 0 ] || fail "cache capacity 0 still hit the cache"
[ "$(stat_of "$TMP/c1024" cache_hits)" -gt 0 ] || fail "the cache was never used"
[ "$(stat_of "$TMP/c1024" slow_rounds)" -lt "$(stat_of "$TMP/c0" slow_rounds)" ] || fail "the cache did not save coordinator rounds"
pass "cache on ($(stat_of "$TMP/c1024" cache_hits) hits), off, tiny"
