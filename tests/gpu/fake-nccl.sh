#!/bin/sh
# The engine's GPU path and its NCCL backend without a GPU: a stand-in CUDA
# runtime whose device memory is host memory (fake_device.c) and a stand-in
# NCCL over shared memory (fake_nccl.c), found first on LD_LIBRARY_PATH.
#  1. np=3: HVDSHIM_GPU_OPERATIONS=auto picks NCCL (every rank "has a GPU of
#     its own"), one communicator per rank, allreduces of device memory
#     (1000 floats, then 3 M in pieces) are the sums over the ranks;
#  2. 100 device allreduces submitted one at a time are gathered into few
#     fused groups, with one stream wait per producing stream a group; one
#     submitted alone and polled (no thread waits) completes at once, not
#     at the idle engine's tick;
#  3. HVDSHIM_ELASTIC=1 (ULFM: Open MPI 5+): rank 1, then rank 0, SIGKILLs
#     itself in a run of device allreduces; the survivors abort the NCCL
#     communicator of three, make one of two (the new rank 0's unique id)
#     and go on, every sum the survivors' (a communicator kept over the dead
#     fails its next operation and ends the job).
# Skips where this hvdshim has no GPU path (built without the CUDA and NCCL
# headers) or no C compiler; part 2 only where the MPI has ULFM.
. "$(dirname "$0")/../lib.sh"
need_mpirun
CC=${CC:-cc}
command -v "$CC" >/dev/null 2>&1 || skip "no C compiler ($CC) to build the stand-in runtime"
inc=$(sed -n 's/^CUDA_CPPFLAGS = //p' "$top_builddir/Makefile" 2>/dev/null)
ninc=$(sed -n 's/^NCCL_CPPFLAGS = //p' "$top_builddir/Makefile" 2>/dev/null)
strings "$top_builddir/.libs/libhvdshim.so" 2>/dev/null | grep -q ncclCommInitRank && [ -n "$inc" ] ||
  skip "this hvdshim has no NCCL path (configured without the CUDA and NCCL headers)"
# shellcheck disable=SC2086
$CC -std=c11 -shared -fPIC $inc -o "$TMP/libcudart.so.13" -Wl,-soname,libcudart.so.13 \
  "$top_srcdir/tests/gpu/fake_device.c" -lpthread || fail "building the stand-in CUDA runtime"
# shellcheck disable=SC2086
$CC -std=c11 -shared -fPIC $inc $ninc -o "$TMP/libnccl.so.2" -Wl,-soname,libnccl.so.2 \
  "$top_srcdir/tests/gpu/fake_nccl.c" -lrt || fail "building the stand-in NCCL"
export LD_LIBRARY_PATH="$TMP${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

mpi 3 -x LD_LIBRARY_PATH -x HVDSHIM_LOG_LEVEL=debug "$ENGINE_TEST" gpu-sums 10 >"$TMP/out" 2>&1 ||
  { cat "$TMP/out"; fail "device allreduces over the stand-in NCCL"; }
expect_ok_lines "$TMP/out" 3
grep -q "GPU operations: NCCL (HVDSHIM_GPU_OPERATIONS=auto" "$TMP/out" || { cat "$TMP/out"; fail "NCCL was not picked"; }
[ "$(grep -c "NCCL 22800 communicator ready" "$TMP/out")" = 3 ] || { cat "$TMP/out"; fail "not one NCCL communicator per rank"; }
pass "np=3: NCCL picked, one communicator per rank, 10 allreduces of device memory right (1000 floats; 3 M in pieces)"

# GPU tensors submitted one at a time (the Horovod API's allreduce_async)
# are gathered for up to a cycle into one fused group, and the engine's
# stream waits once for a thread's stream, not once per tensor: at most 10
# groups for 100 tensors, at most 2 stream waits a group (the engine's on the
# producer, the caller's on the result).  Before: np=1 made 100 groups and
# np=3 one group with 101 waits.
said=""
for np in 1 3; do
  mpi $np -x LD_LIBRARY_PATH "$ENGINE_TEST" gpu-gather 100 >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "np=$np: gathered device allreduces"; }
  expect_ok_lines "$TMP/out" $np
  sed -n 's/.*gather 100 tensors: \([0-9]*\) groups, \([0-9]*\) stream waits/\1 \2/p' "$TMP/out" | {
    n=0
    while read -r groups waits; do
      n=$((n + 1))
      [ "$groups" -le 10 ] && [ "$waits" -le $((2 * groups)) ] ||
        { cat "$TMP/out"; fail "np=$np: $groups groups and $waits stream waits for 100 tensors submitted one at a time"; }
    done
    [ "$n" = "$np" ] || { cat "$TMP/out"; fail "np=$np: $n ranks said how they gathered"; }
  } || exit 1
  said="$said np=$np: $(grep -m1 -o '[0-9]* groups, [0-9]* stream waits' "$TMP/out");"
done
pass "100 device allreduces submitted one at a time: gathered into few groups, one stream wait per producer stream a group ($said)"
# No thread waits (polled with hvd_test): a poll of a handle not done ends
# the gathering and wakes the engine, which runs the cycle then, not at its
# idle tick (100 ms; median 97 ms when nothing woke it)
mpi 1 -x LD_LIBRARY_PATH "$ENGINE_TEST" gpu-poll 20 >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "polled device allreduces"; }
expect_ok_lines "$TMP/out" 1
med=$(sed -n 's/.*median \([0-9.]*\) ms to completion/\1/p' "$TMP/out")
[ -n "$med" ] && awk -v m="$med" 'BEGIN { exit !(m < 20) }' ||
  { cat "$TMP/out"; fail "a polled device allreduce submitted alone took ${med:-?} ms (median) to complete: the gathering outlived its cycle"; }
pass "a device allreduce submitted alone and polled completes without waiting for the idle tick (median $med ms of 20)"

if ! nm -D "$top_builddir/.libs/libhvdshim.so" 2>/dev/null | grep -q " U MPIX_Comm_shrink"; then
  echo "a death under HVDSHIM_ELASTIC=1: not run (this MPI has no ULFM)"
  exit 0
fi
[ "${MPI_KIND:-ompi}" = hydra ] && exit 0
for dying in 1 0; do
  T=120 mpi 3 --with-ft ulfm -x LD_LIBRARY_PATH -x HVDSHIM_ELASTIC=1 -x HVDSHIM_LOG_LEVEL=debug \
    "$ENGINE_TEST" gpu-survive $dying 10 20 >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "rank $dying killed: the survivors' job failed"; }
  [ "$(grep -c "went on as [0-9]* of 2 after rank $dying died" "$TMP/out")" = 2 ] ||
    { cat "$TMP/out"; fail "rank $dying killed: not every survivor went on"; }
  # 3 communicators before the death, 2 after it
  [ "$(grep -c "NCCL 22800 communicator ready" "$TMP/out")" = 5 ] ||
    { cat "$TMP/out"; fail "rank $dying killed: the survivors did not make a new NCCL communicator"; }
  pass "HVDSHIM_ELASTIC=1, rank $dying SIGKILLed among device allreduces: the 2 survivors abort the NCCL communicator of 3, make one of 2 and go on (sums right, ended 0)"
done
