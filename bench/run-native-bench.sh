#!/bin/sh
# Native hook specs: steps per second of examples/native/train.c
#   - plain (one process, no shim) vs under the shim at np=1: the cost of the
#     hooks themselves (libffi closure, a broadcast and an allreduce per step
#     through the engine at one rank);
#   - at np=2: under the shim with examples/native/mlp.hooks vs the same
#     trainer ported to MPI by hand (bench/native_mpi.c: MPI_Allreduce of
#     the gradient).
# Two model sizes (MLP_IN x MLP_HIDDEN): small (577 parameters, 2.3 KB of
# gradient per step: latency) and large (256 x 1024: 1 MB per step).
# Time per step = (time of 2S steps - time of S steps) / S, so process and
# MPI start-up cancel out.  Usage: make bench-native
set -eu
top_builddir=${top_builddir:-$(pwd)}
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
CC=${CC:-cc}
MPI_CFLAGS=${MPI_CFLAGS-$(mpicc --showme:compile 2>/dev/null || true)}
MPI_LIBS=${MPI_LIBS-$(mpicc --showme:link 2>/dev/null || true)}
MPIRUN=${MPIRUN:-mpirun}
LIB="$top_builddir/.libs/libhvdshim.so"
EX="$top_srcdir/examples/native"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
now() { date +%s.%N; }
# secs CMD...: wall seconds of one run
secs() {
  _t0=$(now)
  "$@" >/dev/null 2>"$TMP/err" || { cat "$TMP/err"; echo "bench: failed: $*" >&2; exit 1; }
  echo "$_t0 $(now)" | awk '{printf "%.4f", $2 - $1}'
}
# rate S CMD...: steps per second, from runs of S and 2S steps (best of 3 each)
rate() {
  _s=$1
  shift
  _a=999999 _b=999999
  for _i in 1 2 3; do
    _x=$(secs "$@" --steps "$_s")
    _y=$(secs "$@" --steps $((2 * _s)))
    _a=$(echo "$_a $_x" | awk '{print ($2 < $1) ? $2 : $1}')
    _b=$(echo "$_b $_y" | awk '{print ($2 < $1) ? $2 : $1}')
  done
  echo "$_s $_a $_b" | awk '{d = $3 - $2; if (d <= 0) d = 1e-9; printf "%.1f", $1 / d}'
}
printf '%-8s %-10s %14s %14s %8s   %14s %14s %8s\n' model params "plain np=1" "shim np=1" ratio "by hand np=2" "shim np=2" ratio
for size in "16 32 2000" "256 1024 60"; do
  set -- $size
  in=$1 hid=$2 steps=$3
  d="$TMP/m$in"
  mkdir -p "$d"
  $CC -O2 -fPIC -shared -DMLP_IN=$in -DMLP_HIDDEN=$hid -o "$d/libmlp.so" "$EX/mlp.c" -lm
  $CC -O2 -DMLP_IN=$in -DMLP_HIDDEN=$hid -I"$EX" -o "$d/train" "$EX/train.c" -L"$d" -lmlp -Wl,-rpath,"$d" -lm
  $CC -O2 $MPI_CFLAGS -DMLP_IN=$in -DMLP_HIDDEN=$hid -I"$EX" -o "$d/by_hand" "$top_srcdir/bench/native_mpi.c" \
    -L"$d" -lmlp -Wl,-rpath,"$d" $MPI_LIBS -lm
  np=$(( in * hid + 2 * hid + 1 ))
  plain=$(rate $steps "$d/train" --batch 32)
  shim1=$(rate $steps env LD_PRELOAD="$LIB" HVDSHIM_HOOKS="$EX/mlp.hooks" "$MPIRUN" -np 1 -x LD_PRELOAD -x HVDSHIM_HOOKS "$d/train" --batch 32 </dev/null)
  hand=$(rate $steps "$MPIRUN" -np 2 "$d/by_hand" --batch 32 </dev/null)
  shim2=$(rate $steps env LD_PRELOAD="$LIB" HVDSHIM_HOOKS="$EX/mlp.hooks" "$MPIRUN" -np 2 -x LD_PRELOAD -x HVDSHIM_HOOKS "$d/train" --batch 32 </dev/null)
  printf '%-8s %-10s %14s %14s %8s   %14s %14s %8s\n' "${in}x$hid" $np "$plain/s" "$shim1/s" \
    "$(echo "$shim1 $plain" | awk '{printf "%.2f", $1 / $2}')" "$hand/s" "$shim2/s" \
    "$(echo "$shim2 $hand" | awk '{printf "%.2f", $1 / $2}')"
done
echo "(steps per second, best of 3; ratio = shim / anchor, higher is better)"
