"""Loaders without a batch sampler (an IterableDataset, batch_size=None),
dealt (HVDSHIM_DATA_ITERABLE=deal, the default): every rank iterates the
loader drawing from rank 0's random state (its worker seeds, and every draw
a dataset iterated in this process makes: the stream is rank 0's, which is
the plain run's) and takes its batches: shard = whole batches round-robin
(padded from the epoch's first, so every rank runs the same number), split
= slice r of every batch.  Where training itself draws random numbers
between batches (dropout) on rank 0, another rank's data draws (noise,
augmentation) differ from rank 0's: the samples dealt stay the same.
whole: every rank reads and trains on all of it, with a warning naming
where it was made (loaders.py)."""
import itertools

import torch

from .. import rng as _rng
from ..capi import debug
from ..errors import HvdShimError
from ..lifecycle import _start
from ..state import _S, _warn_once
from .dealing import _place, every_nth_stream, padding_only, split_slice
from .iteration import _Primed, dealt_batches, take_skip
from .roles import role_of


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
    while True:
        mine = _rng._states(cuda=False)
        _rng._set_states(st)
        try:
            x = next(it)
        except StopIteration:
            return
        finally:
            st = _rng._states(cuda=False)
            _rng._set_states(mine)
        yield x


def _agreed_iter(loader, orig):
    """orig(loader) drawing from rank 0's CPU random states: the iterator's
    worker seeds, and every draw of a dataset iterated in this process, are
    rank 0's on every rank.  Rank 0's own states advance as in the plain run;
    another rank keeps a private copy for the loader and its own for the rest."""
    st = _rng.rank0_states(b"hvdshim.data.rng", cuda=False)
    if _S.rank == 0:
        return orig(loader)
    mine = _rng._states(cuda=False)
    _rng._set_states(st)
    _rng._R.rank0_seeds += 1  # (its workers' seeds too: own_worker_seeds leaves them)
    try:
        it = orig(loader)
        st = _rng._states(cuda=False)
    finally:
        _rng._R.rank0_seeds -= 1
        _rng._set_states(mine)
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
        debug("%s: dealt across %d ranks (%s)" % (what, _S.size, _S.data_mode))
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
