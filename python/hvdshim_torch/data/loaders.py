"""DataLoaders as the script makes and uses them (HVDSHIM_DATA): each one
made gets its tag, its role (roles.py) and, where it makes batches by a
batch sampler, a _ShardedBatches in its place (sharded.py); one without a
batch sampler is dealt as a stream (iterable.py), or left whole with a
warning where it trains.  A loader pickled (to a file, or for a DataLoader
worker started by spawn or forkserver where its collate_fn is a method of
the loader, as PyG's NeighborLoader's is) goes as the plain one, and one
unpickled here is prepared at its first use (ensure_prepared)."""
import os
import sys
import weakref

import torch

from ..capi import debug
from ..grow import _G
from ..state import _S, _warn_once
from .roles import Role, role_of, training_now
from .sharded import _ShardedBatches

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # hvdshim_torch/
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def _created_at():
    """file:line of the script code that made the loader."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith((_PACKAGE, _TORCH_DIR)):
            return "%s:%d" % (os.path.basename(fn), f.f_lineno)
        f = f.f_back
    return "?"


def _prepare_loader(loader):
    from torch.utils.data import IterableDataset
    tag = _S.loaders
    _S.loaders += 1
    object.__setattr__(loader, "_hvdshim_tag", tag)
    _S.loader_refs[tag] = weakref.ref(loader)
    if not _S.enabled or _S.data_mode == "off" or (_S.size == 1 and not _G.tracking):  # (one rank of a job that
        return                                                                           # may grow: resize.py)
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
        object.__setattr__(loader, "batch_sampler", _ShardedBatches(bs, tag, _S.data_mode, where, role))
        object.__setattr__(loader, "_hvdshim_role", role)
        if _S.rank == 0:
            debug("DataLoader %d (%s): %s across %d ranks when iterated in training"
                  % (tag, where, _S.data_mode, _S.size))
        return
    object.__setattr__(loader, "_hvdshim_alone", (tag, where, reason))


def ensure_prepared(loader):
    """A loader this process did not make (unpickled: torch.load of a
    checkpoint that holds it), before its first iteration or len: prepared
    as if made here (it was pickled as the plain loader: _ShardedBatches'
    and Role's __reduce_ex__).  A copy keeps its original's role."""
    if role_of(loader) is not None or not getattr(loader, "_DataLoader__initialized", False):
        return
    ref = _S.loader_refs.get(getattr(loader, "_hvdshim_tag", None))
    if ref is None or ref() is not loader:
        _prepare_loader(loader)


def _warn_if_alone(loader):
    """An iteration of a loader hvdshim left alone, in training: once."""
    alone = getattr(loader, "_hvdshim_alone", None)
    if alone and training_now():
        tag, where, reason = alone
        _warn_once(("alone", tag), "DataLoader %d (%s) is iterated in training but not sharded: %s; every rank "
                   "reads all of it (HVDSHIM_DATA=off silences this)" % (tag, where, reason))


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
