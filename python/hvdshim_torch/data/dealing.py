"""Dealing arithmetic: which samples or batches are this rank's.

shard: every N-th sample (or whole batch) of the epoch's order, padded from
its start as DistributedSampler pads, so every rank runs the same number of
batches; split: slice r of every global batch (equal parts, a batch shorter
than the ranks padded from its start).  The stream forms deal an order
given a window at a time, and, without a fixed size and rank, read this
rank's place at every run, so a stream deals the rest of its epoch over
the ranks left after a death (HVDSHIM_ELASTIC)."""
import itertools

from ..state import _S


def shard_count(n, size, batch, drop_last):
    """Batches per rank of a sharded epoch of n samples."""
    per_rank = -(-n // size)
    return per_rank // batch if drop_last else -(-per_rank // batch)


def every_nth(items, size, rank):
    """Items rank, rank+size, ... of the list padded (repeating from its
    start, as DistributedSampler pads) to a multiple of size, so every rank
    gets the same count."""
    items = list(items)
    if not items:
        return []
    total = -(-len(items) // size) * size
    while len(items) < total:
        items += items[:total - len(items)]
    return items[rank::size]


def shard_indices(order, size, rank, batch, drop_last):
    """This rank's batches: its every_nth part of the order, in batches of
    `batch`."""
    mine = every_nth(order, size, rank)
    out = []
    for i in range(0, len(mine), batch):
        b = mine[i:i + batch]
        if len(b) < batch and drop_last:
            break
        out.append(b)
    return out


def split_slice(batch, size, rank):
    """Slice `rank` of one global batch: equal parts (sizes differ by at most
    one; a batch shorter than size is padded from its start)."""
    batch = list(batch)
    while len(batch) < size:
        batch = batch + batch[:size - len(batch)]
    q, r = divmod(len(batch), size)
    start = rank * q + min(rank, r)
    return batch[start:start + q + (1 if rank < r else 0)]


def padding_only(n, size, rank):
    """Slice `rank` of a batch of n items is only padding (split_slice pads
    a batch shorter than `size` with its first items, so no rank's slice is
    empty: many models fail on an empty batch)."""
    return n < size and rank >= n


def _place():
    """This rank's place now: (ranks, rank).  HVDSHIM_ELASTIC: the ranks left
    after a death, so a stream dealt by run deals the rest of its epoch over
    them from its next run on."""
    return _S.size, _S.rank


def _padded(run, n, head):
    """A run padded to a multiple of n from the epoch's first items (as
    DistributedSampler pads)."""
    pad = itertools.cycle(head)
    return run + [next(pad) for _ in range(-len(run) % n)]


def _runs(items, unit, size, rank):
    """Consecutive runs of n * unit items, each with this rank's (n, r): size
    and rank, or without them its place when the run is taken (_place).  The
    last run is padded to a multiple of n from the first items; `full` says
    the run is whole."""
    it, head = iter(items), []
    while True:
        n, r = (size, rank) if size is not None else _place()
        run = list(itertools.islice(it, n * unit))
        head += run[:n - len(head)]
        if not run:
            return
        full = len(run) == n * unit
        yield (run if full else _padded(run, n, head)), n, r, full
        if not full:
            return


def every_nth_stream(items, size=None, rank=None):
    """every_nth over an iterable, as a generator: of each run of `size`
    items, the one at `rank` (the last run padded from the start).  Without
    size and rank: this rank's place, read at every run."""
    for run, _n, r, _full in _runs(items, 1, size, rank):
        yield run[r]


def shard_stream(windows, size, rank, batch, drop_last):
    """shard_indices over an order given in consecutive windows (lists), as a
    generator: the same batches, padded at the end from the epoch's start.
    Batch k of every rank comes from the k-th run of size * batch indices;
    size None: this rank's place, read at every run."""
    for run, n, r, full in _runs(itertools.chain.from_iterable(windows), batch, size, rank):
        mine = run[r::n]
        if full or (mine and not (drop_last and len(mine) < batch)):
            yield mine


def _skip_items(windows, n):
    """The windows of an order without its first n items."""
    for w in windows:
        if n >= len(w):
            n -= len(w)
            continue
        yield w[n:]
        n = 0
