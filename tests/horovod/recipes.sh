#!/bin/sh
# Scripts written the Horovod way run unmodified under hvdrun on the served
# horovod package and match their single-process reference: the same script
# at np=1 with the whole batch (N x the per-rank batch; the script scales
# its learning rate by hvd.size() itself), which is the split-equivalent run
# (DistributedSampler's step i on N ranks is the np=1 run's batch i, and
# hvd.SyncBatchNorm normalizes over the whole batch); and, where Horovod
# 0.28.1 itself is importable (../shared/reference, Debian 12), each recipe
# and each DistributedOptimizer option (options_hvd.py) ends with the very
# weights it ends with on real Horovod.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
H="$top_srcdir/tests/horovod"
HVDRUN="$top_builddir/launcher/hvdrun"
[ -n "${MPIRUN:-}" ] && export HVDRUN_MPIRUN="$MPIRUN"
run() { # NP OUT SCRIPT ARGS...
  _np=$1 _out=$2
  shift 2
  HVDRUN_LIB="$LIB" timeout -k 5 300 "$HVDRUN" -np "$_np" --oversubscribe "$PYTHON" "$@" >"$_out" 2>&1 </dev/null ||
    { cat "$_out"; fail "np=$_np $*"; }
}

# --- MNIST-style: the canonical recipe; weights and the averaged test
# metrics.  In float64 (--double) the runs agree to rounding (measured
# 5.6e-17); in float32, a convolution over 16 samples rounds differently from
# one over 32, and once in a while such a 1e-8 difference crosses a ReLU or
# max-pool kink (on torch 2.14 at step 9: 1.5e-8 -> 7.5e-6, 2.5e-3 after two
# epochs; on 1.13 none: 7.5e-8), so float32 is compared at 1e-2.
for np in 2 3; do
  run 1 "$TMP/ref.out" "$H/mnist_hvd.py" --double --batch-size $((16 * np)) --lr "0.0$np" --save "$TMP/ref.pt"
  run $np "$TMP/np.out" "$H/mnist_hvd.py" --double --batch-size 16 --lr 0.01 --save "$TMP/np.pt"
  same "$TMP/ref.pt" "$TMP/np.pt" 1e-12 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "mnist np=$np differs from np=1"; }
  grep "^Test set" "$TMP/ref.out" >"$TMP/ref.metrics"
  grep "^Test set" "$TMP/np.out" >"$TMP/np.metrics"
  [ -s "$TMP/ref.metrics" ] && cmp -s "$TMP/ref.metrics" "$TMP/np.metrics" ||
    { cat "$TMP/ref.out" "$TMP/np.out"; fail "mnist np=$np: the averaged test metrics differ from np=1"; }
  pass "mnist recipe (float64) np=$np vs np=1 with the whole batch: $(cat "$TMP/cmp"); test metrics identical"
done
run 1 "$TMP/ref.out" "$H/mnist_hvd.py" --batch-size 32 --lr 0.02 --save "$TMP/ref32.pt"
run 2 "$TMP/np.out" "$H/mnist_hvd.py" --batch-size 16 --lr 0.01 --save "$TMP/np32.pt"
same "$TMP/ref32.pt" "$TMP/np32.pt" 1e-2 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "mnist float32 np=2 differs from np=1"; }
pass "mnist recipe (float32) np=2 vs np=1: $(cat "$TMP/cmp")"
# fp16 compression and a predivide factor: the same model within float16's precision
run 2 "$TMP/np.out" "$H/mnist_hvd.py" --batch-size 16 --lr 0.01 --fp16-allreduce --gradient-predivide-factor 2 \
  --save "$TMP/fp16.pt"
same "$TMP/ref32.pt" "$TMP/fp16.pt" 2e-2 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "mnist fp16 compression differs"; }
pass "mnist np=2 with Compression.fp16 and gradient_predivide_factor=2: $(cat "$TMP/cmp")"
# Adasum is refused with one clear line, on every rank, and the job ends non-zero
HVDRUN_LIB="$LIB" timeout -k 5 120 "$HVDRUN" -np 2 "$PYTHON" "$H/mnist_hvd.py" --use-adasum >"$TMP/out" 2>&1 </dev/null &&
  { cat "$TMP/out"; fail "Adasum ran"; }
grep -q "NotImplementedError: Adasum is not served by hvdshim" "$TMP/out" || { cat "$TMP/out"; fail "no Adasum line"; }
pass "Adasum: a clear NotImplementedError, job ends non-zero"

# --- ResNet-style synthetic benchmark: SyncBatchNorm, clipping the Horovod
# way (synchronize, clip, skip_synchronize), with and without autocast
run 1 "$TMP/ref.out" "$H/resnet_hvd.py" --batch-size 16 --lr 0.1 --save "$TMP/r1.pt"
run 2 "$TMP/np.out" "$H/resnet_hvd.py" --batch-size 8 --lr 0.05 --save "$TMP/r2.pt"
same "$TMP/r1.pt" "$TMP/r2.pt" 1e-5 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "resnet np=2 differs from np=1"; }
grep -q "Img/sec per rank" "$TMP/np.out" || { cat "$TMP/np.out"; fail "resnet: no throughput line"; }
pass "resnet-style np=2 vs np=1: $(cat "$TMP/cmp")"
# autocast (bfloat16 on a CPU, float16 with a GradScaler on a GPU): a convolution
# over 8 samples rounds differently from one over 16 in bfloat16 (8-bit
# mantissa, 4e-3 relative), so the tolerance is bfloat16's
run 1 "$TMP/ref.out" "$H/resnet_hvd.py" --batch-size 16 --lr 0.1 --amp --save "$TMP/r1.pt"
run 2 "$TMP/np.out" "$H/resnet_hvd.py" --batch-size 8 --lr 0.05 --amp --save "$TMP/r2.pt"
same "$TMP/r1.pt" "$TMP/r2.pt" 3e-2 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "resnet --amp np=2 differs from np=1"; }
pass "resnet-style --amp np=2 vs np=1: $(cat "$TMP/cmp")"

# --- Real Horovod's numbers: each recipe run on the served package ends with
# the very weights it ends with on Horovod 0.28.1 itself (../shared/reference,
# built for the Debian 12 host's torch 1.13), on every rank, tolerance 0.  Both
# sum two ranks' gradients (a + b rounds the same in either order), average
# by a postscale of 1/size and scale float16 in float32, so nothing can round
# differently at np=2; the process-set recipe also at np=3 (its sets have at
# most two ranks).  ResNet-style runs with per-rank nn.BatchNorm2d here: real
# Horovod's SyncBatchNorm runs on GPUs only.
REAL="$top_srcdir/../shared/reference/horovod-0.28.1"
if [ -d "$REAL/horovod" ] && PYTHONPATH="$REAL" "$PYTHON" -c 'import horovod.torch' >/dev/null 2>&1; then
  real() { # NP OUT SCRIPT ARGS...: the script on real Horovod, no preload
    _np=$1 _out=$2
    shift 2
    PYTHONPATH="$REAL" T=300 mpi "$_np" -x PYTHONPATH -x OMP_NUM_THREADS "$PYTHON" "$@" >"$_out" 2>&1 ||
      { cat "$_out"; fail "real Horovod np=$_np $*"; }
  }
  vs_real() { # NAME NP SCRIPT ARGS...: served and real runs, every saved rank's weights identical
    _name=$1 _np=$2
    shift 2
    run "$_np" "$TMP/served.out" "$@" --save "$TMP/s-$_name"
    real "$_np" "$TMP/real.out" "$@" --save "$TMP/r-$_name"
    if [ -f "$TMP/r-$_name" ]; then set -- "$TMP/r-$_name"; else set -- "$TMP/r-$_name".*.pt; fi
    for _r in "$@"; do
      _s=$(echo "$_r" | sed "s|/r-$_name|/s-$_name|")
      same "$_r" "$_s" 0 >"$TMP/cmp" || { cat "$TMP/cmp"; fail "$_name np=$_np: the served run differs from real Horovod"; }
    done
    pass "$_name np=$_np: the same weights as real Horovod 0.28.1 on every saved rank ($(cat "$TMP/cmp"))"
  }
  vs_real mnist 2 "$H/mnist_hvd.py" --batch-size 16 --lr 0.01
  vs_real mnist-fp16-predivide 2 "$H/mnist_hvd.py" --batch-size 16 --lr 0.01 --fp16-allreduce \
    --gradient-predivide-factor 2
  vs_real resnet-clip 2 "$H/resnet_hvd.py" --bn plain
  vs_real resnet-amp-clip 2 "$H/resnet_hvd.py" --bn plain --amp
  for case in wd bpps fp16 sparse dense pset; do
    vs_real "options-$case" 2 "$H/options_hvd.py" --case $case
  done
  vs_real options-pset 3 "$H/options_hvd.py" --case pset
else
  echo "SKIP (comparison with real Horovod): $REAL is not importable here (it is built for the Debian 12 host)"
fi

# --- HVDSHIM_HOROVOD: on serves hvdshim's package over an installed one; off
# serves nothing; auto (above) serves it when none is installed
mkdir -p "$TMP/fake/horovod"
echo 'raise ImportError("the installed Horovod was imported")' >"$TMP/fake/horovod/__init__.py"
cat >"$TMP/which.py" <<'PY'
import sys
try:
    import horovod
    sys.stdout.write("served=%s\n" % getattr(horovod, "__hvdshim__", False))
except ImportError as e:
    sys.stdout.write("import failed: %s\n" % e)
PY
for mode in on off auto; do
  PYTHONPATH="$TMP/fake" HVDSHIM_HOROVOD=$mode shim 1 -x PYTHONPATH "$PYTHON" "$TMP/which.py" >"$TMP/out.$mode" 2>&1 ||
    { cat "$TMP/out.$mode"; fail "HVDSHIM_HOROVOD=$mode"; }
done
grep -q "served=True" "$TMP/out.on" && grep -q "the installed Horovod was imported" "$TMP/out.off" &&
  grep -q "the installed Horovod was imported" "$TMP/out.auto" ||
  { cat "$TMP/out.on" "$TMP/out.off" "$TMP/out.auto"; fail "HVDSHIM_HOROVOD did not choose as documented"; }
HVDSHIM_HOROVOD=off shim 1 "$PYTHON" "$TMP/which.py" >"$TMP/out" 2>&1
grep -q "import failed: No module named 'horovod'" "$TMP/out" || { cat "$TMP/out"; fail "HVDSHIM_HOROVOD=off served it"; }
HVDSHIM_HOROVOD=maybe shim 1 "$PYTHON" "$TMP/which.py" >"$TMP/out" 2>&1 && { cat "$TMP/out"; fail "a bad HVDSHIM_HOROVOD was accepted"; }
grep -q "HVDSHIM_HOROVOD" "$TMP/out" || { cat "$TMP/out"; fail "a bad HVDSHIM_HOROVOD was not named"; }
pass "HVDSHIM_HOROVOD=on serves over an installed Horovod, off and auto leave it; a bad value is named"
