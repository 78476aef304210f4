#!/bin/sh
# Where no GPU can be used (this CI): a GPU buffer is refused with a clear
# reason on every rank and CPU work is unaffected; pinning leaves
# CUDA_VISIBLE_DEVICES alone without a driver and picks from a user list.
. "$(dirname "$0")/../lib.sh"
need_mpirun
LD_PRELOAD="$LIB" mpi 2 -x LD_PRELOAD "$ENGINE_TEST" gpu-refused >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "gpu-refused"; }
if grep -q "a GPU is usable here" "$TMP/out"; then
  pass "a GPU is usable on this machine: the refusal path does not apply (run tests/gpu/device.sh)"
else
  expect_ok_lines "$TMP/out" 2
  grep -m1 "refused:" "$TMP/out"
  grep -q "GPU buffer: \(no CUDA runtime\|CUDA runtime .* found, but\|this build of hvdshim has no GPU path\)" "$TMP/out" ||
    { cat "$TMP/out"; fail "the refusal does not say why"; }
  pass "GPU buffer refused with the reason; CPU allreduce after it correct"
fi

# Pinning: a user list is honoured per local rank; without a list or driver nothing is set.
cat >"$TMP/env.sh" <<'SH'
echo "rank ${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID-}} CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
SH
# /bin/sh is the rank process here (armed): the shim's constructor pins it.
CUDA_VISIBLE_DEVICES=4,6 LD_PRELOAD="$LIB" mpi 2 -x LD_PRELOAD -x CUDA_VISIBLE_DEVICES \
  /bin/sh "$TMP/env.sh" >"$TMP/pin" 2>&1 || true
grep -q "rank 0 CUDA_VISIBLE_DEVICES=4$" "$TMP/pin" && grep -q "rank 1 CUDA_VISIBLE_DEVICES=6$" "$TMP/pin" ||
  { cat "$TMP/pin"; fail "pinning within the user's list"; }
pass "pinning: local ranks 0,1 get entries 4 and 6 of CUDA_VISIBLE_DEVICES=4,6"
HVDSHIM_PIN_GPU=0 CUDA_VISIBLE_DEVICES=4,6 LD_PRELOAD="$LIB" mpi 2 -x LD_PRELOAD -x CUDA_VISIBLE_DEVICES \
  -x HVDSHIM_PIN_GPU /bin/sh "$TMP/env.sh" >"$TMP/pin" 2>&1 || true
[ "$(grep -c 'CUDA_VISIBLE_DEVICES=4,6$' "$TMP/pin")" = 2 ] || { cat "$TMP/pin"; fail "HVDSHIM_PIN_GPU=0 changed the list"; }
pass "HVDSHIM_PIN_GPU=0 leaves the list alone"
if [ ! -d /proc/driver/nvidia/gpus ]; then
  (unset CUDA_VISIBLE_DEVICES; LD_PRELOAD="$LIB" mpi 2 -x LD_PRELOAD /bin/sh "$TMP/env.sh") >"$TMP/pin" 2>&1 || true
  [ "$(grep -c 'CUDA_VISIBLE_DEVICES=unset$' "$TMP/pin")" = 2 ] || { cat "$TMP/pin"; fail "pinned without a driver"; }
  pass "no NVIDIA driver: CUDA_VISIBLE_DEVICES left unset"
fi
