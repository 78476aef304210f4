#!/bin/sh
# Loaders without a batch sampler are dealt (HVDSHIM_DATA_ITERABLE=deal): an
# IterableDataset (with and without a worker that adds noise from its own
# seed) and a dataset of whole batches read with batch_size=None.  split:
# every sample of each epoch trained once, on one rank, and the weights equal
# the plain run's (1e-4); batch_size=None: whole batches round-robin (as in
# shard mode), every sample in each epoch, twice only in the padding of the
# last round (13 batches over 2 ranks: the first batch again).  HVDSHIM_DATA_ITERABLE=whole (every rank
# reads all of it, with a warning): tests/torch/errors.sh.
. "$(dirname "$0")/../lib.sh"
need_mpirun
need_torch
warm_start
S="$TORCH_DIR/iterable.py"
export HVDSHIM_WORKER_STDOUT=1
# ids_check LOG MODE: per epoch, the ids the ranks trained on together
ids_check() {
  "$PYTHON" - "$1" "$2" <<'PY'
import sys
from collections import Counter
per = {}
for line in open(sys.argv[1]):
    line = line.split("] ", 1)[-1]  # "[rank 1] " prefix on other ranks
    if line.startswith("ids "):
        f = line.split()
        per.setdefault(int(f[1]), []).append([int(v) for v in f[2:]])
ok = len(per) == 2 and all(len(r) == 2 for r in per.values())
for e, ranks in per.items():
    c = Counter(i for r in ranks for i in r)
    twice = sorted(i for i, n in c.items() if n > 1)
    if sys.argv[2] == "split":
        ok = ok and sorted(c) == list(range(200)) and not twice and len(ranks[0]) == len(ranks[1]) == 100
    else:  # whole batches; an odd count of them: the epoch's first batch pads the last round
        ok = ok and sorted(c) == list(range(200)) and len(twice) <= 16 and sum(map(len, ranks)) == 200 + len(twice)
print("epochs %s: ok=%s" % (sorted(per), ok))
sys.exit(0 if ok else 1)
PY
}
for args in "" "--workers 1" "--prebatched"; do
  py "$S" --out "$TMP/plain.pt" $args >"$TMP/plain.log" 2>&1 || { cat "$TMP/plain.log"; fail "plain run ($args)"; }
  mode=split
  [ "$args" = --prebatched ] && mode=shard # batch_size=None: whole batches dealt in either mode
  HVDSHIM_DATA=split shim 2 "$PYTHON" "$S" --out "$TMP/split.pt" $args >"$TMP/split.log" 2>&1 ||
    { cat "$TMP/split.log"; fail "np=2 split ($args)"; }
  ids_check "$TMP/split.log" $mode >"$TMP/ids" || { cat "$TMP/ids" "$TMP/split.log"; fail "np=2 split ($args): samples not dealt as expected"; }
  if [ $mode = split ]; then
    same "$TMP/plain.pt" "$TMP/split.pt" 1e-4 >"$TMP/cmp" 2>&1 || { cat "$TMP/cmp" "$TMP/split.log"; fail "np=2 split ($args) differs from the plain run"; }
    pass "IterableDataset ${args:-(no workers)}, split at np=2: every sample once per epoch, weights equal the plain run's ($(cat "$TMP/cmp"))"
  else
    [ "$(grep -c "HVDSHIM_DATA=split: DataLoader 0 (made at .*) has batch_size=None, so its items are not batches" "$TMP/split.log")" = 1 ] ||
      { cat "$TMP/split.log"; fail "batch_size=None in split mode: expected one warning that the items are dealt whole"; }
    pass "batch_size=None (whole batches), np=2: batches dealt round-robin, every sample per epoch, one warning"
  fi
done
