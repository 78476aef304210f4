#!/bin/sh
# HVDSHIM_DATA=shard (the default): each rank sees 1/N of every epoch, the
# epochs are reshuffled identically everywhere, every rank runs the same
# number of batches (padded like DistributedSampler), and training learns.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
export HVDSHIM_WORKER_STDOUT=1
for np in 2 3; do
  # 100 samples: not divisible by 3
  shim $np "$PYTHON" "$TRAIN" --case seen --samples 100 --batch 16 --epochs 4 --out "$TMP/ck.pt" \
    >"$TMP/out$np" 2>&1 || { cat "$TMP/out$np"; fail "np=$np shard run failed"; }
  "$PYTHON" - "$TMP/out$np" $np 100 <<'PY' || { cat "$TMP/out$np"; fail "np=$np sharding is wrong"; }
import re, sys
lines, n, samples = open(sys.argv[1]).read().splitlines(), int(sys.argv[2]), int(sys.argv[3])
seen = {}  # (rank, epoch) -> indices
for line in lines:
    m = re.match(r"(?:\[rank (\d+)\] )?seen (\d+) (.*)", line)
    if m:
        seen.setdefault((int(m.group(1) or 0), int(m.group(2))), []).extend(map(int, m.group(3).split()))
per_rank = -(-samples // n)
orders = []
for epoch in range(4):
    union = set()
    for r in range(n):
        got = seen.get((r, epoch), [])
        assert len(got) == per_rank, "rank %d epoch %d saw %d samples, expected %d" % (r, epoch, len(got), per_rank)
        union |= set(got)
    assert union == set(range(samples)), "epoch %d: union of ranks misses %s" % (epoch, set(range(samples)) - union)
    orders.append(seen[(0, epoch)])
assert len(set(map(tuple, orders))) == 4, "epochs were not reshuffled"
losses = {}
sums = set()
for line in lines:
    m = re.match(r"(?:\[rank (\d+)\] )?epoch (\d+) loss (\S+)", line)
    if m:
        losses.setdefault(int(m.group(1) or 0), []).append(float(m.group(3)))
    m = re.match(r"(?:\[rank (\d+)\] )?checksum (.*)", line)
    if m:
        sums.add(m.group(2))
assert len(sums) == 1, "ranks ended with different weights: %s" % sums
assert losses[0][-1] < losses[0][0], "loss did not go down: %s" % losses[0]
print("np=%d: %d samples per rank per epoch, union complete, reshuffled, loss %.3f -> %.3f, weights equal"
      % (n, per_rank, losses[0][0], losses[0][-1]))
PY
  pass "np=$np shard"
done
# HVDSHIM_DATA=off: loaders untouched, every rank reads the whole epoch
HVDSHIM_DATA=off shim 2 "$PYTHON" "$TRAIN" --case seen --samples 100 --batch 16 --epochs 1 --out "$TMP/ck.pt" \
  >"$TMP/off" 2>&1 || { cat "$TMP/off"; fail "HVDSHIM_DATA=off run failed"; }
for r in 0 1; do
  n=$(grep "^\[rank $r\] seen 0 " "$TMP/off" | sed 's/^\[rank [0-9]*\] seen 0 //' | wc -w)
  [ "$n" = 100 ] || { cat "$TMP/off"; fail "HVDSHIM_DATA=off: rank $r saw $n samples, expected all 100"; }
done
pass "HVDSHIM_DATA=off: every rank reads the whole epoch"
# DataLoader workers' random draws (augmentation: crop offsets, flips) are
# each rank's own from the first epoch: the base seed torch draws for a
# loader's workers when the iteration begins comes, before the first
# backward, from the state every rank shares, and rank 1's k-th worker drew
# what rank 0's k-th did (for the whole run with persistent workers).
# Rank 0's draws stay the plain run's; HVDSHIM_RNG=same keeps them alike
cat >"$TMP/augdraw.py" <<'PY'
import torch, torch.nn as nn
class Drawing(torch.utils.data.Dataset):  # each sample with one number drawn in the worker, as RandomCrop draws
    def __len__(self): return 32
    def __getitem__(self, i): return torch.randint(0, 1 << 30, (1,))
if __name__ == "__main__":  # (workers started by spawn or forkserver import this file)
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(Drawing(), batch_size=8, shuffle=True, num_workers=2, persistent_workers=True)
    net = nn.Linear(1, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    for epoch in range(2):
        for b, x in enumerate(loader):
            print("draws %d %d %s" % (epoch, b, " ".join(map(str, x.view(-1).tolist()))), flush=True)
            opt.zero_grad()
            net(x.float() / (1 << 30)).pow(2).mean().backward()
            opt.step()
PY
# (the plain run's multiprocessing leaves its pymp-* folders: in the test's own folder)
TMPDIR="$TMP" "$PYTHON" "$TMP/augdraw.py" >"$TMP/aug-plain" 2>&1 || { cat "$TMP/aug-plain"; fail "loader workers' draws: the plain run failed"; }
shim 2 "$PYTHON" "$TMP/augdraw.py" >"$TMP/aug-shim" 2>&1 || { cat "$TMP/aug-shim"; fail "loader workers' draws: the shim's run failed"; }
HVDSHIM_RNG=same shim 2 "$PYTHON" "$TMP/augdraw.py" >"$TMP/aug-same" 2>&1 ||
  { cat "$TMP/aug-same"; fail "loader workers' draws, HVDSHIM_RNG=same: the run failed"; }
"$PYTHON" - "$TMP/aug-plain" "$TMP/aug-shim" "$TMP/aug-same" <<'PY' || fail "loader workers' draws are not each rank's own (or not alike under HVDSHIM_RNG=same)"
import re, sys
def draws(path):
    out = {}
    for line in open(path):
        m = re.match(r"(?:\[rank (\d+)\] )?draws (\d+) (\d+) (.*)", line)
        if m:
            out[(int(m.group(1) or 0), int(m.group(2)), int(m.group(3)))] = m.group(4).split()
    return out
plain, shim, same = draws(sys.argv[1]), draws(sys.argv[2]), draws(sys.argv[3])
assert len(shim) == len(same) == 8, "expected 2 batches a rank an epoch: %s %s" % (sorted(shim), sorted(same))
assert shim[(0, 0, 0)] == plain[(0, 0, 0)], "rank 0's first batch drew %s, the plain run's %s" % (shim[(0, 0, 0)], plain[(0, 0, 0)])
for key in [k for k in shim if k[0] == 0]:
    mine, other = shim[key], shim[(1,) + key[1:]]
    assert not set(mine) & set(other), "epoch %d batch %d: ranks 0 and 1 drew alike: %s / %s" % (key[1], key[2], mine, other)
    assert same[key] == same[(1,) + key[1:]], "HVDSHIM_RNG=same, epoch %d batch %d: the ranks drew differently" % key[1:]
print("rank 0's first batch drew the plain run's; ranks 0 and 1 drew apart in all 4 batches; alike under HVDSHIM_RNG=same")
PY
pass "DataLoader workers' random draws (persistent workers) are each rank's own from the first epoch, rank 0's the plain run's; alike under HVDSHIM_RNG=same"

# A DataLoader in a checkpoint (torch.save of an object holding it) is
# pickled as the plain one: it loads without hvdshim; loaded under the
# shim it is sharded again, len and iteration agreeing; a deep copy of a
# loader stays sharded.
cat >"$TMP/loader_ckpt.py" <<'PY'
import copy, sys, torch
if __name__ == "__main__":
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    if sys.argv[1] == "save":
        loader = torch.utils.data.DataLoader(torch.arange(32.).view(-1, 1), batch_size=4, shuffle=True)
    else:
        loader = torch.load(sys.argv[2], weights_only=False) if "weights_only" in torch.load.__code__.co_varnames \
            else torch.load(sys.argv[2])
        loader = loader["loader"]
    for name in ("loader", "copy"):
        ld = loader if name == "loader" else copy.deepcopy(loader)  # (a copy made after an epoch)
        told, n = len(ld), 0
        for x in ld:
            opt.zero_grad()
            model(x).mean().backward()
            opt.step()
            n += 1
        print("%s: len %d, %d batches" % (name, told, n), flush=True)
    if sys.argv[1] == "save":
        torch.save({"loader": loader}, sys.argv[2])
PY
(cd "$TMP" && shim 2 "$PYTHON" loader_ckpt.py save "$TMP/loader.pt") >"$TMP/lc1" 2>&1 || { cat "$TMP/lc1"; fail "a loader saved in a checkpoint: the job failed"; }
"$PYTHON" -c "import sys, torch; print(type(torch.load(sys.argv[1], **({'weights_only': False} if 'weights_only' in torch.load.__code__.co_varnames else {}))['loader'].batch_sampler).__name__)" "$TMP/loader.pt" >"$TMP/lc2" 2>&1 &&
  grep -qx BatchSampler "$TMP/lc2" || { cat "$TMP/lc2"; fail "a loader saved under the shim does not load plain"; }
(cd "$TMP" && shim 2 "$PYTHON" loader_ckpt.py load "$TMP/loader.pt") >"$TMP/lc3" 2>&1 || { cat "$TMP/lc3"; fail "a loader loaded under the shim: the job failed"; }
for f in lc1 lc3; do
  [ "$(grep -c "^\(\[rank [01]\] \)\?\(loader\|copy\): len 4, 4 batches$" "$TMP/$f")" = 4 ] || { cat "$TMP/$f"; fail "a loader saved or loaded in a checkpoint, or its copy: not 4 of 8 batches a rank"; }
done
pass "a DataLoader in a checkpoint loads without hvdshim (its plain batch sampler); loaded under the shim, and deep-copied, it is sharded (4 of 8 batches a rank, len agreeing)"
# SHARD_SHORT=1: the jobs above only (check-stacks' trixie and sid stacks);
# the cases below are the adapter's logic over torch's
# random state and modules, run on Debian 12 (about 3 minutes on sid)
[ "${SHARD_SHORT:-}" = 1 ] && exit 0
# no DataLoader: batches cut from the data by the script are the same on
# every rank (named once, by rank 0); batches drawn at random are not (each
# rank's stream is its own after the first backward).  (A loader iterated in
# training: nothing is compared; every other test here has one.)  Also with
# gradient accumulation (4 passes a step, each drawing the next batch after
# its forward, as nanoGPT does): the passes before the agreed k must not draw
# in the step window (they did: every rank drew the same batches, named as
# the same batches, and from then on every rank drew rank 0's stream)
cat >"$TMP/nodl.py" <<'EOF_PY'
import sys
import torch
import torch.nn.functional as F
torch.manual_seed(0)
X, mode, k = torch.randn(256, 10), sys.argv[1], int(sys.argv[2])
Y = (X[:, 0] > 0).long()
m = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
def batch(i):
    ix = torch.arange(16 * i, 16 * i + 16) % 256 if mode == "sliced" else torch.randint(256, (16,))
    return X[ix], Y[ix], int(ix.sum())
x, y, tag = batch(0)
for step in range(12 // k):
    opt.zero_grad()
    for micro in range(k):
        loss = F.cross_entropy(m(x), y) / k
        print("step %d pass %d batch %d" % (step, micro, tag))
        x, y, tag = batch(step * k + micro + 1)
        loss.backward()
    opt.step()
print("done")
EOF_PY
for run in sliced:1 random:1 sliced:4 random:4; do
  mode=${run%:*} k=${run#*:}
  HVDSHIM_WORKER_STDOUT=1 shim 2 "$PYTHON" "$TMP/nodl.py" $mode $k >"$TMP/nodl" 2>&1 || { cat "$TMP/nodl"; fail "no-DataLoader run ($mode, k=$k) failed"; }
  want=0; [ $mode = sliced ] && want=1
  [ "$(grep -c 'warning (torch): every rank trained on the same batches in its first steps, and no DataLoader was iterated in training: the 2 ranks compute what one process does' "$TMP/nodl")" = $want ] &&
    ! grep -q "^hvdshim\[1\].*same batches" "$TMP/nodl" || { cat "$TMP/nodl"; fail "no DataLoader, $mode batches, k=$k: expected $want line(s) naming the same batches"; }
  [ $mode = random ] || continue
  # each rank's own batches from the first backward on: only those drawn before it are the same
  same=$(sed -n 's/^\(\[rank [01]\] \)\{0,1\}\(step [0-9]* pass [0-9]*\) batch \([0-9]*\)$/\2 \3/p' "$TMP/nodl" | sort | uniq -d | cut -d' ' -f1-4 | tr '\n' ',')
  want="step 0 pass 0,step 0 pass 1,"  # (each drawn before the first backward ended: rank 0's stream)
  [ $k = 1 ] && want="step 0 pass 0,step 1 pass 0,"
  [ "$same" = "$want" ] || { cat "$TMP/nodl"; fail "random batches, k=$k: the same on both ranks at: $same (expected: $want)"; }
done
pass "no DataLoader: batches the script cuts itself named once as the same on every rank; random batches not, and drawn per rank from the first backward on (also with 4 passes a step)"
# the same batches, but a second model fed what a per-rank draw shaped (a
# seq2seq decoder under teacher forcing): still named once (the step's first
# forward alone is compared; every forward's was, and the draw hid it)
cat >"$TMP/twomodels.py" <<'EOF_PY'
import torch
torch.manual_seed(0)
X, Y = torch.randn(64, 8), torch.randn(64, 1)
enc, dec = torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)
opt = torch.optim.SGD([*enc.parameters(), *dec.parameters()], lr=0.01)
for i in range(8):
    h = enc(X[8 * i:8 * i + 8]) * (1 + 0.1 * torch.rand(1))
    loss = ((dec(h) - Y[8 * i:8 * i + 8]) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
EOF_PY
shim 2 "$PYTHON" "$TMP/twomodels.py" >"$TMP/nodl" 2>&1 || { cat "$TMP/nodl"; fail "two-model run failed"; }
[ "$(grep -c 'every rank trained on the same batches in its first steps' "$TMP/nodl")" = 1 ] ||
  { cat "$TMP/nodl"; fail "no DataLoader, the same batches, a second model fed a per-rank draw: expected one line naming the same batches"; }
pass "no DataLoader, the same batches, a second model fed what a per-rank draw shaped: named once (the step's first forward compared)"
# HVDSHIM_DATA=split with random batches and no loader (nanoGPT): split mode
# has nothing to cut, and the job is not the plain run: said once, by rank 0
HVDSHIM_DATA=split shim 2 "$PYTHON" "$TMP/nodl.py" random 1 >"$TMP/nodl" 2>&1 || { cat "$TMP/nodl"; fail "no-DataLoader run (random, split) failed"; }
[ "$(grep -c 'warning (torch): HVDSHIM_DATA=split, but no DataLoader was iterated in training: this script draws its batches itself, each rank its own, so a step trains on 2 such batches' "$TMP/nodl")" = 1 ] &&
  ! grep -q "same batches" "$TMP/nodl" || { cat "$TMP/nodl"; fail "no DataLoader, random batches, HVDSHIM_DATA=split: expected one line saying split mode cut nothing"; }
pass "no DataLoader, random batches, HVDSHIM_DATA=split: one line says split mode had no loader to cut"
# no optimizer (pytorch/examples' regression: a random batch drawn at the top
# of each step, the weights updated by hand after backward): the batches are
# each rank's own from the first backward on (they were drawn in the step
# window, the same everywhere, and named as the same batches), and noise the
# update adds to the weights is the same on every rank (the replicas stay
# equal: the first forward after a draw compares the weights)
cat >"$TMP/nodl_manual.py" <<'EOF_PY'
import sys
import torch
import torch.nn.functional as F
torch.manual_seed(0)
noise = float(sys.argv[1])
W = torch.randn(4, 1)
fc = torch.nn.Linear(4, 1)
for step in range(12):
    x = torch.randn(16, 4)
    print("step %d batch %.6f" % (step, float(x.sum())))
    fc.zero_grad()
    F.smooth_l1_loss(fc(x), x.mm(W)).backward()
    with torch.no_grad():
        for p in fc.parameters():
            p.add_(-0.1 * p.grad)
            if noise:
                p.add_(torch.randn_like(p) * noise)
print("weights %.8f %.8f" % (float(fc.weight.sum()), float(fc.bias.sum())))
EOF_PY
for noise in 0 0.01; do
  HVDSHIM_WORKER_STDOUT=1 shim 2 "$PYTHON" "$TMP/nodl_manual.py" $noise >"$TMP/manual" 2>&1 || { cat "$TMP/manual"; fail "no optimizer, noise $noise: the run failed"; }
  ! grep -q "same batches" "$TMP/manual" || { cat "$TMP/manual"; fail "no optimizer, noise $noise: random batches named as the same on every rank"; }
  [ "$(grep -c '^\[rank [01]\] weights' "$TMP/manual")" = 2 ] && [ "$(sed -n 's/^\[rank [01]\] weights //p' "$TMP/manual" | sort -u | wc -l)" = 1 ] ||
    { cat "$TMP/manual"; fail "no optimizer, noise $noise: the ranks' weights differ at the end"; }
  same=$(sed -n 's/^\[rank [01]\] \(step [0-9]*\) batch \(.*\)$/\1 \2/p' "$TMP/manual" | sort | uniq -d | cut -d' ' -f1-2 | tr '\n' ',')
  want="step 0,"  # (drawn before the first backward: rank 0's stream); with noise, the step
  # window's from the third on (the second batch, drawn with the first noise before the weights were compared, each rank's own)
  [ $noise = 0 ] || want=$(seq 0 11 | grep -v -x 1 | sed 's/^/step /' | sort | tr '\n' ',')
  [ "$same" = "$want" ] || { cat "$TMP/manual"; fail "no optimizer, noise $noise: batches the same on both ranks at: $same (expected: $want)"; }
done
pass "no optimizer, weights updated by hand: random batches each rank's own from the first backward on; noise in the update the same on every rank (weights equal)"
# ...and where they are the same, every rank draws rank 0's random numbers
# once that is seen (after the third step), so a model with dropout draws
# the plain run's masks from then on: here, a slowly trained model, its
# losses from step 4 on stay near the plain run's; with HVDSHIM_RNG=per-rank
# set, each rank keeps its own masks, and they drift (20 times as far,
# 0.0005 against 0.012 on average)
cat >"$TMP/nodl_drop.py" <<'EOF_PY'
import torch
import torch.nn.functional as F
torch.manual_seed(0)
X = torch.randn(512, 10)
Y = (X[:, 0] > 0).long()
m = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(30):
    opt.zero_grad()
    loss = F.cross_entropy(m(X[16 * step:16 * step + 16]), Y[16 * step:16 * step + 16])
    loss.backward()
    opt.step()
    print("step %d loss %.8f" % (step, loss.item()))
EOF_PY
"$PYTHON" "$TMP/nodl_drop.py" >"$TMP/drop-plain" 2>&1 || { cat "$TMP/drop-plain"; fail "dropout, no DataLoader: the plain run failed"; }
shim 2 "$PYTHON" "$TMP/nodl_drop.py" >"$TMP/drop-shim" 2>&1 || { cat "$TMP/drop-shim"; fail "dropout, no DataLoader: the shim's run failed"; }
HVDSHIM_RNG=per-rank shim 2 "$PYTHON" "$TMP/nodl_drop.py" >"$TMP/drop-own" 2>&1 ||
  { cat "$TMP/drop-own"; fail "dropout, no DataLoader, HVDSHIM_RNG=per-rank: the run failed"; }
grep -q "same batches.*From here on every rank draws rank 0's random numbers" "$TMP/drop-shim" &&
  ! grep -q "From here on" "$TMP/drop-own" || { cat "$TMP/drop-shim" "$TMP/drop-own"; fail "dropout, no DataLoader: the line on following rank 0's random numbers (expected by default, not with HVDSHIM_RNG=per-rank)"; }
"$PYTHON" - "$TMP/drop-plain" "$TMP/drop-shim" "$TMP/drop-own" <<'PY' || fail "dropout, no DataLoader: the shim's losses did not stay near the plain run's"
import re, sys
runs = [{int(a): float(b) for a, b in re.findall(r"step (\d+) loss ([0-9.]+)", open(f).read())} for f in sys.argv[1:]]
plain, follow, own = runs
if not all(len(r) == 30 for r in runs):
    sys.exit("a run did not print 30 steps")
far = [sum(abs(r[k] - plain[k]) for k in range(4, 30)) / 26 for r in (follow, own)]
print("mean |loss - plain's| over steps 4-29: following rank 0 %.2e, per-rank %.2e" % tuple(far))
sys.exit(0 if far[0] < far[1] / 4 else "following rank 0's random numbers is not nearer the plain run")
PY
pass "no DataLoader, the same batches, dropout: every rank draws rank 0's random numbers from step 4; this slowly trained model's losses stay near the plain run's"

# BatchNorm's running statistics follow each rank's own batches in shard
# mode: at model.eval() they take rank 0's (as DDP's broadcast_buffers
# does), so every rank evaluates the same model and an early stop on the
# validation loss stops every rank at the same epoch (each rank's own
# statistics: the values differ in the 4th digit, and the stop diverged in
# 2 of 10 seeds, one rank training on alone)
cat >"$TMP/bn_eval.py" <<'PY'
import torch, torch.nn as nn
torch.manual_seed(5)
model = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(256, 4) * 3 + 1, torch.randn(256, 1)),
                                    batch_size=32, shuffle=True)
val_x, val_y = torch.randn(128, 4) * 3 + 1, torch.randn(128, 1)
best = float("inf")
for epoch in range(8):
    model.train()
    for x, y in train:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        val = nn.functional.mse_loss(model(val_x), val_y).item()
    print("epoch %d val %.9f mean %.9f" % (epoch, val, model[1].running_mean.sum().item()))
    if val > best:
        break
    best = val
print("stopped after epoch %d" % epoch)
PY
shim 2 "$PYTHON" "$TMP/bn_eval.py" >"$TMP/bn" 2>&1 || { cat "$TMP/bn"; fail "shard mode, BatchNorm evaluated each epoch: the job failed"; }
r0=$(sed -n 's/^\[rank 0\] //p' "$TMP/bn")
r1=$(sed -n 's/^\[rank 1\] //p' "$TMP/bn")
[ -n "$r0" ] && [ "$r0" = "$r1" ] && echo "$r0" | grep -q "^stopped after epoch" ||
  { cat "$TMP/bn"; fail "shard mode, BatchNorm: the ranks evaluated different models (their lines differ)"; }
pass "shard mode, BatchNorm: at model.eval() every rank takes rank 0's running statistics: the same validation loss on both ranks each epoch, one early stop ($(echo "$r0" | tail -n 1))"

# An evaluation that begins in training mode with gradients on and switches
# the model inside each step (ignite's supervised evaluator, skorch's
# validation) is whole on every rank from the first epoch, in shard and in
# split mode: every rank counts all 100 validation samples, and len() agrees
cat >"$TMP/eval_in_step.py" <<'PY'
import torch, torch.nn as nn
torch.manual_seed(3)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = lambda n: torch.utils.data.TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,)))
train = torch.utils.data.DataLoader(data(128), batch_size=16, shuffle=True)
val = torch.utils.data.DataLoader(data(100), batch_size=16)
for epoch in range(3):
    for x, y in train:
        model.train()
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    told, seen, right = len(val), 0, 0
    for x, y in val:
        model.eval()
        with torch.no_grad():
            seen += len(y)
            right += (model(x).argmax(1) == y).sum().item()
    print("epoch %d len %d seen %d right %d" % (epoch, told, seen, right))
PY
for mode in shard split; do
  HVDSHIM_DATA=$mode shim 2 "$PYTHON" "$TMP/eval_in_step.py" >"$TMP/eis" 2>&1 ||
    { cat "$TMP/eis"; fail "$mode mode, evaluation switched inside each step: the job failed"; }
  for r in 0 1; do
    got=$(sed -n "s/^\[rank $r\] epoch [0-9] len 7 seen 100 right [0-9]*$/ok/p" "$TMP/eis" | wc -l)
    [ "$got" = 3 ] || { cat "$TMP/eis"; fail "$mode mode, evaluation switched inside each step: rank $r did not evaluate all 100 samples in 7 batches each epoch"; }
  done
  [ "$(sed -n 's/^\[rank 0\] //p' "$TMP/eis")" = "$(sed -n 's/^\[rank 1\] //p' "$TMP/eis")" ] &&
    ! grep -q "len() was asked\|taken for an" "$TMP/eis" ||
    { cat "$TMP/eis"; fail "$mode mode, evaluation switched inside each step: ranks differ, or a warning"; }
done
pass "an evaluation begun in training mode that switches the model inside each step (ignite's, skorch's) is whole on every rank from the first epoch, shard and split mode"
