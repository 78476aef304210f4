#!/bin/sh
# Fusion off, tiny (many buffers), default; pipelining off and in small
# pieces.  Every variant must give the reference results at np=3.
. "$(dirname "$0")/../lib.sh"
need_mpirun
run() { # label, then env assignments
  label=$1
  shift
  (
    for kv in "$@"; do export "$kv"; done
    mpi 3 "$ENGINE_TEST" random 7 80 2 2
  ) >"$TMP/$label" 2>&1 || { cat "$TMP/$label"; fail "$label"; }
  expect_ok_lines "$TMP/$label" 3
}
run off HVDSHIM_FUSION_THRESHOLD=0
[ "$(stat_of "$TMP/off" fused)" = 0 ] || fail "fusion threshold 0 still fused tensors"
run tiny HVDSHIM_FUSION_THRESHOLD=4K
run default
[ "$(stat_of "$TMP/default" fused)" -gt 0 ] || fail "default fusion fused nothing"
[ "$(stat_of "$TMP/tiny" groups)" -gt "$(stat_of "$TMP/default" groups)" ] || fail "a 4K threshold should make more groups than the default"
run nopipe HVDSHIM_PIPELINE_CHUNK=0
run smallpipe HVDSHIM_PIPELINE_CHUNK=4K
run horovod_alias HOROVOD_FUSION_THRESHOLD=65536
pass "fusion off/tiny/default, pipeline off/4K, Horovod alias"
