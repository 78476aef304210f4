#!/bin/sh
# A native CUDA program through a hook spec, on the real CUDA runtime (needs
# an NVIDIA GPU, nvcc and mpirun; otherwise skips, saying which is missing).
# cutrain.c is a legacy single-GPU trainer in C: parameters, gradient and
# batches in device memory, the math in libcumlp (cumlp.cu, kernels on a
# stream of the library's own, launched through nvcc's __cudaLaunchKernel).
# The spec broadcasts the initial device parameters, shards the batch index
# and averages the device gradient before each update: hvdshim sees device
# pointers (cudaPointerGetAttributes), sends them down the GPU path, and
# orders that work after the library's stream as the runtime hooks saw it.
# Reference: the plain trainer's emulation of N ranks (--emulate-ranks N:
# each step averages the gradients of batches step*N .. step*N+N-1).
. "$(dirname "$0")/../lib.sh"
need_mpirun
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA/bin/nvcc}
[ -x "$NVCC" ] || skip "no nvcc ($NVCC; set NVCC or CUDA_HOME) to build the CUDA trainer"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
  skip "no NVIDIA GPU (nvidia-smi -L lists none): the native CUDA program not run"
"$NVCC" -shared -Xcompiler -fPIC -cudart shared -o "$TMP/libcumlp.so" "$top_srcdir/tests/gpu/cumlp.cu" ||
  fail "building libcumlp with nvcc"
${CC:-cc} -std=c11 -O2 -o "$TMP/cutrain" "$top_srcdir/tests/gpu/cutrain.c" -I"$CUDA/include" \
  -L"$TMP" -lcumlp -Wl,-rpath,"$TMP" -L"$CUDA/lib64" -lcudart -Wl,-rpath,"$CUDA/lib64" || fail "building cutrain"
# NCCL for np=1 (a C program loads none itself): the system's, else the
# copy a PyTorch install carries
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  d=$("${PYTHON:-python3}" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null) &&
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
cat >"$TMP/cumlp.hooks" <<'SPEC'
# every rank starts from rank 0's device parameters
void cumlp_init(float *dparams, long n, unsigned seed)
  dparams: broadcast count=n after
# rank r of N reads batch step*N + r
void cumlp_batch(long index, int batch, float *x, float *y)
  index: shard stride
# the update sees the device gradient averaged over the ranks
void cumlp_update(float *dparams, const float *dgrad, long n, float lr)
  dgrad: allreduce count=n op=avg
SPEC
STEPS=150
# sums A B: the largest difference between the checksum lines of two runs
sums() {
  "${PYTHON:-python3}" - "$1" "$2" <<'PY'
import sys
a, b = ([float(v) for v in [l for l in open(p) if l.startswith("checksum")][-1].split()[1:]] for p in sys.argv[1:3])
print("%.3g" % (max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) and a else float("inf")))
PY
}
run() { # NP OPERATIONS SPEC OUT ARGS
  _np=$1 _ops=$2 _spec=$3 _out=$4
  shift 4
  LD_PRELOAD="$LIB" HVDSHIM_HOOKS=$_spec HVDSHIM_GPU_OPERATIONS=$_ops HVDSHIM_WORKER_STDOUT=1 HVDSHIM_LOG_LEVEL=info \
    T=180 mpi "$_np" -x LD_PRELOAD -x HVDSHIM_HOOKS -x HVDSHIM_GPU_OPERATIONS -x HVDSHIM_WORKER_STDOUT \
    -x HVDSHIM_LOG_LEVEL ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} "$@" >"$_out" 2>&1 || { cat "$_out"; fail "np=$_np ($_ops) under the shim failed"; }
}
"$TMP/cutrain" --steps $STEPS >"$TMP/ref1" || fail "plain run"
"$TMP/cutrain" --steps $STEPS --emulate-ranks 2 >"$TMP/ref2" || fail "plain run, 2 ranks emulated"

run 1 auto "$TMP/cumlp.hooks" "$TMP/np1" "$TMP/cutrain" --steps $STEPS
d=$(sums "$TMP/ref1" "$TMP/np1")
awk "BEGIN { exit !($d <= 1e-6) }" || { cat "$TMP/np1"; fail "np=1: parameters differ from the plain run by $d"; }
ops=$(grep -o "GPU operations: [A-Z]*" "$TMP/np1" | head -1)
pass "np=1 ($ops): device parameters equal the plain run's (difference $d)"

# ranks start from different device parameters (seed + 1000 * rank): rank
# 0's are broadcast; both ranks print their checksum
run 2 auto "$TMP/cumlp.hooks" "$TMP/np2" "$TMP/cutrain" --steps $STEPS --seed-by-rank
[ "$(grep -c '^checksum' "$TMP/np2")" = 2 ] || { cat "$TMP/np2"; fail "np=2: expected a checksum line from each rank"; }
grep '^checksum' "$TMP/np2" | head -1 >"$TMP/np2.r0"
grep '^checksum' "$TMP/np2" | tail -1 >"$TMP/np2.r1"
d=$(sums "$TMP/ref2" "$TMP/np2.r0")
awk "BEGIN { exit !($d <= 1e-6) }" || { cat "$TMP/np2"; fail "np=2: parameters differ from the emulated split by $d"; }
[ "$(sums "$TMP/np2.r0" "$TMP/np2.r1")" = 0 ] || { cat "$TMP/np2"; fail "np=2: the ranks' parameters differ"; }
ops=$(grep -o "GPU operations: [A-Z]*" "$TMP/np2" | head -1)
pass "np=2 on one GPU ($ops), ranks seeded apart: both equal the plain emulation of 2 ranks (difference $d)"

# negative control: without the allreduce the ranks train apart
grep -v 'dgrad: allreduce' "$TMP/cumlp.hooks" | sed 's/^void cumlp_update.*$//' >"$TMP/noar.hooks"
run 2 auto "$TMP/noar.hooks" "$TMP/noar" "$TMP/cutrain" --steps $STEPS
d=$(sums "$TMP/ref2" "$(grep '^checksum' "$TMP/noar" | head -1 >"$TMP/noar.r0"; echo "$TMP/noar.r0")")
awk "BEGIN { exit !($d > 1e-4) }" || fail "without the allreduce the result still matched ($d): the comparison cannot fail"
pass "negative control: without the allreduce the result differs ($d)"
