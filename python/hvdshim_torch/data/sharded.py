"""The batch sampler put in place of a map-style DataLoader's
(_ShardedBatches), whatever its sampler (random, sequential, a custom
Sampler yielding indices) or batch sampler (a custom one yielding lists of
indices).  Each iteration is sharded or whole as its loader's Role decides
when it starts (roles.py):
  * in training: sharded.  Every rank draws the epoch's order as the plain
    script would, rank 0's is agreed a window at a time (epoch_order.py),
    and this rank takes its part (dealing.py): shard = every N-th sample,
    split = slice r of every global batch.  A custom batch sampler's
    batches are dealt out whole (shard: every N-th batch, padded) or cut
    (split).
  * otherwise (evaluation under no_grad/inference_mode, or the models'
    layers in eval mode): the whole loader on every rank, exactly as plain."""
import collections
import copy
import itertools

from ..errors import HvdShimError
from ..lifecycle import _start
from ..state import _S, _warn_once
from .dealing import _place, _runs, _skip_items, padding_only, shard_count, split_slice
from .epoch_order import batch_windows, order_windows
from .iteration import _IT, _Primed, dealt_batches, take_skip
from .redeal import _Handout, _Pushback, _Resumable
from .roles import Role, training_now


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
        self._split_checked = False  # (split mode's batch size, at the first iteration that trains)

    def __getattr__(self, name):  # sampler, batch_size, drop_last, set_epoch ... of the original
        if name == "_inner":  # (not set yet)
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __reduce_ex__(self, protocol):
        """Pickled (a checkpoint holding the loader; a worker started by spawn
        or forkserver sent the loader itself): as the batch sampler it stands
        for, which loads without hvdshim (loaders.ensure_prepared shards it
        again under the shim)."""
        return list.__getitem__, ([self._inner], 0)

    def __copy__(self):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo):
        new = memo[id(self)] = object.__new__(type(self))
        for k, v in self.__dict__.items():
            object.__setattr__(new, k, copy.deepcopy(v, memo))
        return new

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
        gave = self._role.gave_after_change()  # (elastic: right after a loop during which ranks changed)
        if gave is not None:
            return gave
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
        if not self._sharding():
            return iter(self._inner)
        self._check_split()
        if not _start():
            return iter(self._inner)
        live = _Handout() if _S.elastic else None
        if self._mode == "split":
            _S.nominal_rows = getattr(self._inner, "batch_size", None)
        pads = _IT.pads_last = collections.deque() if self._mode == "split" else None  # (PaddedSlices takes it)
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

    def _check_split(self):
        """Split mode cuts each batch in N equal slices: a batch size that N
        does not divide ends the job at the loader's first iteration that
        trains (a loader only evaluated is never cut: any size; after ranks
        died, elastic, the slices may be unequal: weighed by their shares)."""
        if self._split_checked:
            return
        self._split_checked = True
        b = self._inner.batch_size if self._by_index else 0
        if self._mode == "split" and self._by_index and b % _S.size:  # (another batch sampler's batches: cut as they come)
            raise HvdShimError("hvdshim: HVDSHIM_DATA=split needs the DataLoader batch size (%d) to be divisible by "
                               "the number of ranks (%d) of a loader that trains (%s); choose a multiple of %d or use "
                               "HVDSHIM_DATA=shard" % (b, _S.size, self._what(), _S.size))

    @staticmethod
    def _lazy(make):
        yield from make()

    def _what(self):
        return "DataLoader %d (%s)" % (self._tag, self._where)

    def _order_windows(self):
        return order_windows(self._inner, self._tag, self._what())

    def _batch_windows(self, it):
        return batch_windows(it, self._tag, self._what())

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
