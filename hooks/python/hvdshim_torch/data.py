"""DataLoaders: sharded by use (HVDSHIM_DATA).

Every map-style DataLoader that makes batches gets a _ShardedBatches in
place of its batch sampler, whatever its sampler (random, sequential, a
custom Sampler yielding indices) or batch sampler (a custom one yielding
lists of indices).  Each iteration is sharded or whole as its loader's Role
decides when it starts (roles.py, which also says what len() answers: the
iteration in progress, or the one that follows):
  * in training: sharded.  Every rank draws the epoch's order as the
    plain script would (random state advances alike), rank 0's is broadcast,
    and this rank takes its part: shard = every N-th sample (padded as
    DistributedSampler pads, so every rank runs the same number of batches),
    split = slice r of every global batch.  A custom batch sampler's batches
    are dealt out whole (shard: every N-th batch, padded) or cut (split).
    The order is drawn, agreed and dealt a window at a time (_WINDOW
    indices), as the batches are consumed: memory and start-up do not grow
    with the epoch, and an endless sampler (replacement=True with a huge
    num_samples, or one with no len) starts at once.
  * otherwise (evaluation under no_grad/inference_mode, or the models'
    layers in eval mode): the whole loader on every rank, exactly as plain.
Loaders without a batch sampler (an IterableDataset, batch_size=None) are
dealt (HVDSHIM_DATA_ITERABLE=deal, default): every rank iterates the loader
drawing from rank 0's random state (its worker seeds, and every draw a
dataset iterated in this process makes: the stream is rank 0's, which is the
plain run's) and takes its batches: shard = whole batches
round-robin (padded from the epoch's first, so every rank runs the same
number), split = slice r of every batch.  Where training itself draws
random numbers between batches (dropout) on rank 0, another rank's data
draws (noise, augmentation) differ from rank 0's: the samples dealt stay
the same.  whole: every rank
reads and trains on all of it, with a warning naming where it was made.
"""
import array
import collections
import itertools
import os
import sys
import weakref

import torch

from .lib import HvdShimError, _Pending, _broadcast_bytes, _debug, _warn
from .state import _S, _warn_once
from .lifecycle import _start
from .rng import window_close
from .roles import Role, role_of, training_now

_HERE = os.path.dirname(os.path.abspath(__file__))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def _created_at():
    """file:line of the script code that made the loader."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith((_HERE, _TORCH_DIR)):
            return "%s:%d" % (os.path.basename(fn), f.f_lineno)
        f = f.f_back
    return "?"


# ------------------------------------------------------------------ arithmetic (pure)
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


# ------------------------------------------------------------------ broadcasting an epoch
def _as_ints(seq):
    try:
        return [int(i) for i in seq]
    except (TypeError, ValueError):
        return None


def _broadcast_ints(name, values, what):
    """Rank 0's `values` (ints: a list, or an array of int64) on every rank, as a list."""
    from .elastic import retrying
    buf = values if isinstance(values, array.array) else array.array("q", values)
    t = torch.frombuffer(buf, dtype=torch.int64) if len(buf) else torch.zeros(0, dtype=torch.int64)

    def broadcast():
        pending = _Pending()
        _broadcast_bytes(name, t, pending, what)
        pending.wait()
    retrying(broadcast)
    return buf.tolist()


def _int64s(seq):
    """seq's indices as an array of int64 (one C loop where they are ints),
    or None where they are not integers."""
    try:
        return array.array("q", seq)
    except (TypeError, OverflowError):
        ints = _as_ints(seq)
        return array.array("q", ints) if ints is not None else None


def _window_message(ints, count, more, expected):
    """[count, more, indices..., padding] as int64 (with the broadcast's copy
    out, a window of 65536 indices took 11 ms instead of 15 through a list
    and torch.tensor)."""
    msg = array.array("q", (count, more))
    if ints is not None:
        msg += ints
    msg += array.array("q", bytes(8 * (expected - count)))
    return msg


# Indices drawn, agreed and dealt per broadcast: a window of the epoch's
# order (512 KiB of int64), so no rank ever holds an epoch.
_WINDOW = 1 << 16


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



def dealt_batches(it):
    """A dealt iteration's batches (this rank's part of each): each drawn
    with this rank's own random state (the step window closed first, even
    where no step closed it since the last backward: the sampler's order
    and a dataset's random augmentation are drawn as the plain run draws
    them), and noted as parts of a batch (_S.whole_batches: BatchNorm
    syncs over ranks)."""
    it = iter(it)
    while True:
        if _S.rng_window is not None:
            window_close()
        try:
            x = next(it)
        except StopIteration:
            return
        _S.whole_batches = False
        yield x

class _ShardedBatches:
    """In place of a DataLoader's batch sampler (see the module's text)."""

    def __init__(self, inner, tag, mode, where, role=None):
        from torch.utils.data import BatchSampler
        self._inner = inner
        self._tag = tag
        self._mode = mode
        self._where = where
        self._role = role if role is not None else Role(tag)
        self._by_index = type(inner) is BatchSampler  # sampler, batch_size and drop_last are known

    def __getattr__(self, name):  # sampler, batch_size, drop_last, set_epoch ... of the original
        return getattr(self._inner, name)

    def __setattr__(self, name, value):
        # a library that swaps the sampler (Accelerate puts a seedable one in
        # `loader.batch_sampler.sampler`) reaches the original, as in the plain run
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._inner, name, value)

    def _sharding(self):
        """The iteration being made is sharded: its loader's decision (Role.begin),
        or where the batch sampler is iterated by itself, the mode now."""
        making = self._role.making
        return making if making is not None else training_now()

    def __len__(self):
        if not self._role.for_len():
            return len(self._inner)
        size = _S.size
        if self._by_index:
            n, b = len(self._inner.sampler), self._inner.batch_size
            if self._mode == "shard":
                return shard_count(n, size, b, self._inner.drop_last)
            return n // b if self._inner.drop_last else -(-n // b)
        nb = len(self._inner)
        return -(-nb // size) if self._mode == "shard" else nb

    def __iter__(self):
        # Sharded or whole is decided here, when the loader's iterator is made;
        # the epoch is drawn at the first batch, as the plain batch sampler
        # draws it (after the loader's worker seed: random state stays in step).
        if not self._sharding() or not _start():
            return iter(self._inner)
        live = _Handout() if _S.elastic else None
        if self._mode == "split":
            _S.nominal_rows = getattr(self._inner, "batch_size", None)
        pads = _S.pads_last = collections.deque() if self._mode == "split" else None  # (PaddedSlices takes it)
        if self._by_index:
            skip = take_skip(self._inner.batch_size)
            gen = self._lazy(lambda: self._by_index_batches(skip, live, pads))
        else:
            skip = take_skip()
            it = iter(self._inner)  # made now, as the plain loader makes it (a sampler may draw here)
            gen = self._lazy(lambda: self._dealt_batches(it, skip, live, pads))
        gen = dealt_batches(gen)
        if live is not None:
            gen = _Resumable(gen, live)
        return gen if skip is None else _Primed(gen)

    @staticmethod
    def _lazy(make):
        yield from make()

    def _what(self):
        return "DataLoader %d (%s)" % (self._tag, self._where)

    def _order_windows(self):
        """The sampler's order, drawn on every rank as the plain loader draws it
        (lazily, and to its end, as BatchSampler runs it: random state
        advances as in the plain run), rank 0's agreed a window at a time.
        Each message: [count, more, indices..., padding]; `more` is rank 0's
        finding that its sampler yields past this window (a probe of one
        item, kept for the next), so every rank stops where rank 0's does."""
        inner = self._inner
        b = inner.batch_size
        step = max(1, _WINDOW // b) * b  # whole global batches per window
        try:
            left = len(inner.sampler)
        except TypeError:
            left = None  # no len: every window reserves a full step
        it = iter(inner.sampler)
        name = b"hvdshim.data.%d" % self._tag
        what = "broadcasting the epoch's sample order of " + self._what()
        agreed, probed, end = None, [], object()
        while True:
            expected = step if not left else min(step, left)
            window = probed + list(itertools.islice(it, expected - len(probed)))
            probed = []
            if len(window) == expected:
                nxt = next(it, end)
                if nxt is not end:
                    probed = [nxt]
            more = int(bool(probed))
            ints = _int64s(window)
            if agreed is None:
                agreed = window == [] or ints is not None
                if not agreed:
                    _warn_once(("noint", self._tag), "%s: its sampler yields %s, not integer indices; each rank "
                               "uses its own order (they agree only if the sampler is deterministic)"
                               % (self._what(), type(window[0]).__name__))
            if agreed:
                got = _broadcast_ints(b"%s.w%d" % (name, expected), _window_message(ints, len(window), more, expected),
                                      what)
                window, more = got[2:2 + got[0]], got[1]
            if window:
                yield window
            if not more:
                return
            if left is not None:
                left = max(0, left - len(window))  # 0: past its len, sized as if it had none


    def _by_index_batches(self, skip=None, live=None, pads=None):
        windows = self._order_windows() if not skip else _skip_items(self._order_windows(), skip)
        items = itertools.chain.from_iterable(windows)
        if live is not None:  # (elastic: what was asked for ahead may be put back; a Python call per index)
            items = _Pushback(items)
            live.items, live.again = items, lambda: self._deal_indices(items, live, pads)
        return self._deal_indices(items, live, pads)

    @staticmethod
    def _sliced(batch, pads):
        """This rank's slice of a batch (split mode), its padding flag queued
        for when the loader hands the batch out (PaddedSlices)."""
        n, r = _place()  # the place when the batch is taken
        pads.append(padding_only(len(batch), n, r))
        return split_slice(batch, n, r)

    def _deal_indices(self, items, live, pads):
        """This rank's batches of the order's indices (an iterator)."""
        inner = self._inner
        b = inner.batch_size
        if self._mode == "shard":
            for run, n, r, full in _runs(items, b, None, None):  # (shard_stream's, a run noted as handed)
                mine = run[r::n]
                if full or (mine and not (inner.drop_last and len(mine) < b)):
                    if live is not None:
                        live.note(run)
                    yield mine
            return
        while True:
            rest = list(itertools.islice(items, b))
            if len(rest) < b:
                break
            if live is not None:
                live.note(rest)
            yield self._sliced(rest, pads)
        if rest and not inner.drop_last:
            if len(rest) % _S.size and _S.rank == 0:  # (the same on every rank: said once)
                _warn_once("split-tail", "HVDSHIM_DATA=split: the last batch of an epoch has %d samples, not a "
                           "multiple of %d ranks: its slices are unequal.  Each rank's gradient is weighed by its "
                           "share where the loss is a mean hvdshim recognises (cross-entropy, MSE and the other "
                           "losses with reduction='mean', a .mean(), a sum divided by len(batch)); other losses "
                           "average per-rank means there"
                           % (len(rest), _S.size))
            if live is not None:
                live.note(rest)
            yield self._sliced(rest, pads)

    def _batch_windows(self, it):
        """A custom batch sampler's batches, rank 0's agreed a window at a
        time (up to _WINDOW indices or _WINDOW batches each)."""
        name = b"hvdshim.data.%d" % self._tag
        what = "broadcasting the epoch's batches of " + self._what()
        agreed = None
        it = iter(it)
        while True:
            batches, total = [], 0
            for bt in it:
                batches.append(list(bt))
                total += len(batches[-1])
                if total >= _WINDOW or len(batches) >= _WINDOW:
                    break
            more = int(bool(batches) and (total >= _WINDOW or len(batches) >= _WINDOW))
            flat = [i for bt in batches for i in bt]
            if agreed is None:
                agreed = not flat or _as_ints(flat) is not None
                if not agreed:
                    _warn_once(("noint", self._tag), "%s: its batch sampler yields batches of %s, not integer "
                               "indices; each rank uses its own batches" % (self._what(), type(flat[0]).__name__))
            if agreed:
                head = _broadcast_ints(name + b".h", [len(batches), len(flat), more], what)
                body = [len(bt) for bt in batches] + _as_ints(flat)  # rank 0's, or a buffer for it
                if len(body) != head[0] + head[1]:
                    body = [0] * (head[0] + head[1])
                if head[0]:
                    body = _broadcast_ints(b"%s.b%d.%d" % (name, head[0], head[1]), body, what)
                lengths, flat, more, batches, at = body[:head[0]], body[head[0]:], head[2], [], 0
                for n in lengths:
                    batches.append(flat[at:at + n])
                    at += n
            yield from batches
            if not more:
                return

    def _dealt_batches(self, it, skip=None, live=None, pads=None):
        batches = self._batch_windows(it)
        if skip:  # a restarted job (resize.py): the batches the job had used
            batches = itertools.islice(batches, skip, None)
        if live is not None:
            batches = _Pushback(batches)
            live.items, live.again = batches, lambda: self._deal_batches(batches, live, pads)
        return self._deal_batches(batches, live, pads)

    def _deal_batches(self, batches, live, pads):
        """This rank's batches of a custom batch sampler's (an iterator)."""
        if self._mode == "shard":  # whole batches dealt out (every_nth_stream's, a run noted as handed)
            for run, _n, r, _full in _runs(batches, 1, None, None):
                if live is not None:
                    live.note(run)
                yield run[r]
            return
        for bt in batches:
            if bt:
                if live is not None:
                    live.note([bt])
                yield self._sliced(bt, pads)


class _Pushback:
    """An iterator that takes items back to give them again first."""

    def __init__(self, it):
        self._it, self._front = iter(it), collections.deque()

    def __iter__(self):
        return self

    def __next__(self):
        return self._front.popleft() if self._front else next(self._it)

    def push(self, items):
        self._front.extendleft(reversed(items))

    def pending(self):
        return bool(self._front)


class _Handout:
    """HVDSHIM_ELASTIC: one sharded iteration of a loader whose workers are
    asked for batches ahead (prefetch).  The global units of the batches
    handed out (split: global batches; shard: runs of ranks x batch
    indices, or of ranks whole batches of a custom batch sampler) are noted, so that after a change of ranks those the workers
    were asked for and the script has not had go back into the order, to be
    dealt again over the survivors, and their results in the old split are
    dropped (_Redealt).  No sample of the epoch is lost or seen twice."""

    def __init__(self):
        self.units = collections.deque(maxlen=4096)  # the last units handed, in order
        self.handed = 0     # batches handed to the loader
        self.drop = 0       # results of the loader to drop (asked for in the old split)
        self.items = None   # the order's _Pushback
        self.again = None   # a new dealing of what is in items (once the first has ended: _Resumable)
        self.loader_iter = None  # the DataLoader's iterator (weak): its _num_yielded
        _S.live_last = self

    def note(self, unit):
        self.units.append(unit)
        self.handed += 1

    def redeal(self):
        it = self.loader_iter() if self.loader_iter is not None else None
        given = getattr(it, "_num_yielded", None)
        if given is None or self.items is None:
            return
        stale = self.handed - given - self.drop  # asked for in the old split, not given yet
        if stale <= 0:
            return
        units = list(self.units)[-stale:]
        self.items.push([i for u in units for i in u])
        self.handed -= stale
        for _ in range(stale):
            self.units.pop()
        self.drop += stale


class _Resumable:
    """A sharded iteration's batches (HVDSHIM_ELASTIC) that go on after they
    ended when a change of ranks puts batches back (the workers may have
    been asked for the epoch's last ones when a rank dies)."""

    def __init__(self, gen, live):
        self._gen, self._live = gen, live

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            try:
                return next(self._gen)
            except StopIteration:
                live = self._live
                if live.items is None or not live.items.pending() or live.again is None:
                    raise
                self._gen = live.again()


class _LoaderIter:
    """A DataLoader's iterator, wrapped: its length and attributes are the
    inner one's; subclasses say what happens as it hands a batch out."""

    def __init__(self, inner):
        self._inner = inner

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._inner)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _Redealt(_LoaderIter):
    """A DataLoader's iterator (HVDSHIM_ELASTIC, workers): results asked
    for before a change of ranks are dropped (_Handout)."""

    def __init__(self, inner, live):
        super().__init__(inner)
        self._live = live
        live.loader_iter = weakref.ref(inner)
        _S.live.add(live)

    def __next__(self):
        while self._live.drop > 0:
            self._live.drop -= 1
            next(self._inner)
        return next(self._inner)


class PaddedSlices(_LoaderIter):
    """A split DataLoader's iterator: as it hands a batch out, whether this
    rank's slice of it is padding (_S.pad_slice, the flag its batch sampler
    queued when it cut the batch: with workers, batches are cut ahead)."""

    def __init__(self, inner, pads):
        super().__init__(inner)
        self._pads = pads

    def __next__(self):
        x = next(self._inner)
        _S.pad_slice = self._pads.popleft() if self._pads else False
        return x


def padded_slices(it):
    """DataLoader.__iter__'s iterator, where its batch sampler cuts batches
    (split mode): one that says which slices are padding (PaddedSlices)."""
    pads, _S.pads_last = _S.pads_last, None
    return it if pads is None else PaddedSlices(it, pads)


def redealt(loader, it):
    """DataLoader.__iter__'s iterator, in an elastic job whose loader has
    workers and is dealt here by index: one that drops what a change of
    ranks left in the old split."""
    live, _S.live_last = _S.live_last, None
    if live is None or not _S.elastic or not getattr(loader, "num_workers", 0) or not hasattr(it, "_num_yielded"):
        return it
    return _Redealt(it, live)


def _redeal_all():
    """A change of ranks (elastic.recover): every live iteration deals again
    what its loader's workers had been asked for."""
    for live in list(_S.live):
        live.redeal()


_S.on_change.append(_redeal_all)


class _Primed:
    """An iterator that can take its first item ahead of use (so a loader's
    epoch is drawn, and the part already trained on skipped, while the
    random state is the one the epoch was drawn from: resize.py)."""

    def __init__(self, inner):
        self._inner, self._first = inner, []
        _S.primer = self

    def prime(self):
        if not self._first:
            self._first.append(next(self._inner, _Primed))

    def __iter__(self):
        return self

    def __next__(self):
        x = self._first.pop() if self._first else next(self._inner)
        if x is _Primed:
            raise StopIteration
        return x


def take_skip(batch=None):
    """What the loader iteration being made skips: in a job started again to
    grow, at the call where the job stopped, the part of the stream the job
    had used (_S.skip, in global batches; times `batch` when the stream is
    of indices), else None."""
    if _S.skip is None:
        return None
    _S.skip_taken = True  # (a DataLoader with workers asks twice: its first batch sampler iterator is dropped)
    return _S.skip * (batch or 1)


def _skip_items(windows, n):
    """The windows of an order without its first n items."""
    for w in windows:
        if n >= len(w):
            n -= len(w)
            continue
        yield w[n:]
        n = 0


def dealt_by_rank(loader):
    """This rank gets whole batches of the loader's stream, one in _S.size
    (shard), in the iteration just made (resize.py counts the stream used)."""
    role = role_of(loader)
    if role is None or not role.sharded:
        return False
    if isinstance(loader.batch_sampler, _ShardedBatches):
        return _S.data_mode == "shard"
    return getattr(loader, "_hvdshim_deal", None) is not None and \
        not (_S.data_mode == "split" and loader.batch_size is not None)


# ------------------------------------------------------------------ loaders without a batch sampler
def _first_rows(x):
    """Rows (dim 0) of the first tensor in a collated batch, else None."""
    if isinstance(x, torch.Tensor):
        return x.shape[0] if x.dim() else None
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (list, tuple)):
        for v in x:
            n = _first_rows(v)
            if n is not None:
                return n
    return None


def slice_batch(x, rows, idx):
    """The rows `idx` (a list of ints: a range, or padded) of every tensor in
    a collated batch of `rows` rows; lists of `rows` items (strings, ids)
    likewise; anything else as it is."""
    if isinstance(x, torch.Tensor):
        if not x.dim() or x.shape[0] != rows:
            return x
        if idx == list(range(idx[0], idx[0] + len(idx))):
            return x[idx[0]:idx[0] + len(idx)]
        return x[torch.tensor(idx, dtype=torch.long, device=x.device)]
    if isinstance(x, dict):
        return type(x)((k, slice_batch(v, rows, idx)) for k, v in x.items())
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        return type(x)(*[slice_batch(v, rows, idx) for v in x])
    if isinstance(x, (list, tuple)):
        if len(x) == rows and not any(isinstance(v, (torch.Tensor, list, tuple, dict)) for v in x):
            return type(x)(x[i] for i in idx)
        return type(x)(slice_batch(v, rows, idx) for v in x)
    return x


def _split_stream(batches, what):
    for b in batches:
        rows = _first_rows(b)
        if rows is None:
            raise HvdShimError("hvdshim: HVDSHIM_DATA=split: %s yields %s with no tensor rows to split; use "
                               "HVDSHIM_DATA=shard (whole batches dealt out) or HVDSHIM_DATA_ITERABLE=whole"
                               % (what, type(b).__name__))
        n, r = _place()
        part = slice_batch(b, rows, split_slice(range(rows), n, r))
        _S.pad_slice = padding_only(rows, n, r)
        yield part


def _dealing(loader):
    """A loader without a batch sampler, in an iteration being made that trains: where it was made."""
    deal, role = getattr(loader, "_hvdshim_deal", None), role_of(loader)
    return deal if deal and role is not None and role.making else None


def _in_states(it, st):
    """Items of `it`, each drawn with the generators in the states `st` (which
    then advance), this rank's own states put back around every draw."""
    from .rng import _set_states, _states
    while True:
        mine = _states(cuda=False)
        _set_states(st)
        try:
            x = next(it)
        except StopIteration:
            return
        finally:
            st = _states(cuda=False)
            _set_states(mine)
        yield x


def _agreed_iter(loader, orig):
    """orig(loader) drawing from rank 0's CPU random states: the iterator's
    worker seeds, and every draw of a dataset iterated in this process, are
    rank 0's on every rank.  Rank 0's own states advance as in the plain run;
    another rank keeps a private copy for the loader and its own for the rest."""
    from .rng import _set_states, _states, rank0_states
    st = rank0_states(b"hvdshim.data.rng", cuda=False)
    if _S.rank == 0:
        return orig(loader)
    mine = _states(cuda=False)
    _set_states(st)
    try:
        it = orig(loader)
        st = _states(cuda=False)
    finally:
        _set_states(mine)
    return _in_states(it, st)


def _dealt_iter(loader, orig):
    """DataLoader.__iter__ of a loader without a batch sampler, in training:
    this rank's batches of the stream (see the module's text); else None."""
    deal = _dealing(loader)
    if deal is None or not _start():
        return None
    tag, where = deal
    what = "DataLoader %d (%s)" % (tag, where)
    if _S.rank == 0:
        _debug("%s: dealt across %d ranks (%s)" % (what, _S.size, _S.data_mode))
    it = dealt_batches(_agreed_iter(loader, orig))
    skip = take_skip()
    if skip:  # a restarted job (resize.py): the batches the job had used
        it = itertools.islice(it, skip, None)
    if _S.data_mode == "split" and loader.batch_size is not None:
        _S.nominal_rows = loader.batch_size
        it = _split_stream(it, what)
    else:
        if _S.data_mode == "split" and _S.rank == 0:
            _warn_once(("whole-items", tag), "HVDSHIM_DATA=split: %s has batch_size=None, so its items are not "
                       "batches hvdshim can cut: they are dealt whole, one to each rank in turn, and a step "
                       "averages %d items where the plain run's takes one (as in shard mode; the run is not "
                       "the plain one)" % (what, _S.size))
        it = every_nth_stream(it)
    return it if skip is None else _Primed(it)


def _dealt_len(loader, n):
    """len() of a dealt loader: in an iteration that trains, or before one,
    its share of the batches (roles.py)."""
    role = role_of(loader)
    if getattr(loader, "_hvdshim_deal", None) is None or role is None or not role.for_len() or \
            (_S.data_mode == "split" and loader.batch_size is not None):
        return n
    return -(-n // _S.size)


def _prepare_loader(loader):
    from torch.utils.data import IterableDataset
    tag = _S.loaders
    _S.loaders += 1
    object.__setattr__(loader, "_hvdshim_tag", tag)
    _S.loader_refs[tag] = weakref.ref(loader)
    if not _S.enabled or _S.data_mode == "off" or _S.size == 1:
        return
    where = "made at %s" % _created_at()
    # (split mode: a sharded iteration has the whole one's count, but for items dealt whole)
    role = Role(tag, "DataLoader %d (%s)" % (tag, where), loader,
                same_count=_S.data_mode == "split" and (loader.batch_sampler is not None or loader.batch_size is not None))
    if isinstance(loader.dataset, IterableDataset) or loader.batch_sampler is None:
        if _S.data_iterable == "deal":
            object.__setattr__(loader, "_hvdshim_deal", (tag, where))
            object.__setattr__(loader, "_hvdshim_role", role)
            return
        reason = ("it reads an IterableDataset" if isinstance(loader.dataset, IterableDataset)
                  else "it has batch_size=None") + " and HVDSHIM_DATA_ITERABLE=whole"
    else:
        bs = loader.batch_sampler
        if isinstance(bs, _ShardedBatches):  # a loader made from another's batch sampler (Accelerate's prepare)
            bs = bs._inner
        if _S.data_mode == "split" and type(bs).__name__ == "BatchSampler" and bs.batch_size % _S.size:
            raise HvdShimError("hvdshim: HVDSHIM_DATA=split needs the DataLoader batch size (%d) to be divisible by "
                               "the number of ranks (%d); choose a multiple of %d or use HVDSHIM_DATA=shard"
                               % (bs.batch_size, _S.size, _S.size))
        object.__setattr__(loader, "batch_sampler", _ShardedBatches(bs, tag, _S.data_mode, where, role))
        object.__setattr__(loader, "_hvdshim_role", role)
        if _S.rank == 0:
            _debug("DataLoader %d (%s): %s across %d ranks when iterated in training"
                   % (tag, where, _S.data_mode, _S.size))
        return
    object.__setattr__(loader, "_hvdshim_alone", (tag, where, reason))


def _warn_if_alone(loader):
    """An iteration of a loader hvdshim left alone, in training: once."""
    alone = getattr(loader, "_hvdshim_alone", None)
    if alone and training_now():
        tag, where, reason = alone
        _warn_once(("alone", tag), "DataLoader %d (%s) is iterated in training but not sharded: %s; every rank "
                   "reads all of it (HVDSHIM_DATA=off silences this)" % (tag, where, reason))


# ------------------------------------------------------------------ the same batches on every rank
_BEFORE_TRAINING = 64  # root forwards before the first reducing backward after which nothing is compared


def _note_batch(x):
    """A root's training forward between the first and the third reducing
    backward pass: its batch (the first input) counts in this rank's
    fingerprint.  A script that makes no training forward for
    _BEFORE_TRAINING root calls (inference) is not followed further."""
    fp = _S.same_batches
    try:
        with torch.no_grad():
            d = x.detach().to(torch.float64)
            fp[0] += float(d.sum())
            fp[1] += float((d * d).sum())
        fp[2] += 1
    except Exception:  # (a batch that cannot be summed: nothing is said)
        fp[3] = 0


def note_root_call():
    """A root's forward (training or not) before any reducing backward."""
    if _S.reductions == 0:
        _S.root_calls += 1
        if _S.root_calls > _BEFORE_TRAINING:
            _S.same_batches = None
            _S.recheck = True


def check_same_batches():
    """After the third reducing backward pass, where no DataLoader was
    iterated in training: one float64 MAX over [fp, -fp] of every rank's
    fingerprint of the batches of passes 2 and 3 (after the first, random
    streams are per rank).  The same everywhere: every rank trained on the
    same batches (a script that cuts its data itself, X[i:i+bs]; random
    batches drawn under HVDSHIM_RNG=same), so N ranks compute what one
    does, no faster: named once, by rank 0.  (The decision to compare is
    the same on every rank: the count of reducing passes and whether a
    loader was iterated in training are; a rank that gave up its
    fingerprint still takes part.)"""
    fp, _S.same_batches, _S.compare_batches = _S.same_batches, None, False
    _S.recheck = True  # (the global forward pre-hook may come off now)
    if _S.loader_trained or not _S.enabled:
        return
    mine = torch.tensor(fp if fp is not None else [0.0, 0.0, 0, 0], dtype=torch.float64)  # (given up: nothing said)
    from .elastic import extremes  # (elastic imports nothing of data)
    hi, lo = (v.tolist() for v in extremes(b"hvdshim.same-batches", mine, "comparing the ranks' first training batches"))
    if hi == lo and lo[2] >= 1 and lo[3] == 1 and _S.rank == 0:
        _warn("every rank trained on the same batches in its first steps, and no DataLoader was iterated in "
              "training: the %d ranks compute what one process does, no faster.  hvdshim shards DataLoaders; "
              "batches a script cuts from its data itself (x[i:i + batch]) are the same on every rank (README, "
              "'Data')" % _S.size)
