#!/bin/sh
# pytorch/examples-style scripts (tests/torch/examples_style.py: mnist with
# torch.accelerator falling back to the CPU, a VAE, a DCGAN with two
# optimizers) on fake data, plain and under the shim at np=2 (shard): the job
# ends cleanly, the ranks' weights agree, rank 0 prints one set of lines, the
# test pass covers the whole test set, the models are saved once, and the
# result is within a stated margin of the plain run with the global batch
# (dropout, noise and batch statistics differ per rank, so no exact match).
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
warm_start
py -c 'import torch; torch.accelerator.is_available' 2>/dev/null ||
  skip "torch $("$PYTHON" -c 'import torch; print(torch.__version__)') has no torch.accelerator (torch >= 2.6; make check-stacks runs these on trixie and sid)"
E="$TORCH_DIR/examples_style.py"
export TMPDIR="$TMP/tmpdir"
mkdir -p "$TMPDIR"
"$PYTHON" - "$TMP/data.pt" <<'PY' || fail "fake data"
import sys, torch
g = torch.Generator().manual_seed(7)
templates = torch.randn(10, 1, 28, 28, generator=g)  # one pattern per class, under noise
def make(n):
    y = torch.randint(0, 10, (n,), generator=g)
    return templates[y] + 1.5 * torch.randn(n, 1, 28, 28, generator=g), y
x, y = make(512)
tx, ty = make(200)
torch.save({"x": x, "y": y, "tx": tx, "ty": ty}, sys.argv[1])
PY
for ex in mnist vae dcgan; do
  py "$E" $ex --data "$TMP/data.pt" --batch-size 64 --save "$TMP/p-$ex" >"$TMP/plain" 2>&1 || { cat "$TMP/plain"; fail "plain $ex"; }
  T=240 shim 2 "$PYTHON" "$E" $ex --data "$TMP/data.pt" --batch-size 32 --save "$TMP/s-$ex" >"$TMP/out" 2>&1 ||
    { cat "$TMP/out"; fail "$ex at np=2"; }
  [ "$(grep -c '^\[rank [01]\] checksum' "$TMP/out")" = 2 ] && [ "$(grep -o 'checksum .*' "$TMP/out" | sort -u | wc -l)" = 1 ] ||
    { cat "$TMP/out"; fail "$ex: the ranks' weights differ"; }
  [ "$(ls "$TMP/s-$ex" | tr '\n' ' ')" = "$(ls "$TMP/p-$ex" | tr '\n' ' ')" ] || { ls "$TMP/s-$ex"; fail "$ex: saved files"; }
  case $ex in
    mnist) lines='^Test set: .*/200 ' n=2 ;;
    vae) lines='^====> Test set loss' n=2 ;;
    dcgan) lines='^fixed-noise sample' n=1 ;;
  esac
  [ "$(grep -c "$lines" "$TMP/out")" = $n ] || { cat "$TMP/out"; fail "$ex: expected $n lines '$lines' (rank 0's, whole test set)"; }
  p=$(sed -n 's/^final //p' "$TMP/plain") s=$(sed -n 's/^final //p' "$TMP/out")
  "$PYTHON" -c "import sys; p, s = $p, $s; sys.exit(0 if abs(s - p) <= 0.25 * abs(p) + 0.05 else 1)" ||
    { cat "$TMP/out"; fail "$ex: final $s under the shim, $p plain with the global batch (margin 25% + 0.05)"; }
  pass "$ex at np=2: ranks agree, one set of lines, saved once, final $s (plain with the global batch: $p)"
done
