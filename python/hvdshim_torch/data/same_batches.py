"""Every rank training on the same batches is named once: a script that cuts
its batches itself (x[i:i + batch]) computes on N ranks what one process
does, no faster.  The batches of the first training steps are fingerprinted
(models.py feeds the roots' forwards in) and compared once, after the third
reducing backward (reduction.py).

Its state: _FP."""
import torch

from .. import elastic as _elastic
from .. import rng as _rng
from ..capi import warn
from ..state import _S
from .roles import _EV


class _Fingerprint:
    def __init__(self):
        # the training batches of reducing backward passes 2 and 3, summed; None
        # once compared, where nothing is compared, or given up (inference)
        self.same_batches = None
        self.compare_batches = False  # the comparison is ahead (the same on every rank)
        self.root_calls = 0         # root forwards before the first reducing backward (while compared)
        self.noted_at = -1          # the reducing passes done when a batch was last noted (one a step)


_FP = _Fingerprint()

_BEFORE_TRAINING = 64  # root forwards before the first reducing backward after which nothing is compared


def _note_batch(x):
    """A root's training forward between the first and the third reducing
    backward pass: its batch (the first input) counts in this rank's
    fingerprint, the step's first such forward only (a later one may be fed
    what a per-rank draw decided, as teacher forcing feeds a decoder: the
    data alike on every rank, the fingerprints not).  A script that makes
    no training forward for _BEFORE_TRAINING root calls (inference) is not
    followed further."""
    if _FP.noted_at == _S.reductions:
        return
    _FP.noted_at = _S.reductions
    fp = _FP.same_batches
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
        _FP.root_calls += 1
        if _FP.root_calls > _BEFORE_TRAINING:
            _FP.same_batches = None
            _S.recheck = True


def check_same_batches(all_ranks=True):
    """After the third reducing backward pass, where no DataLoader was
    iterated in training: one float64 MAX over [fp, -fp] of every rank's
    fingerprint of the batches of passes 2 and 3 (after the first, random
    streams are per rank).  The same everywhere: every rank trained on the
    same batches (a script that cuts its data itself, X[i:i+bs]; random
    batches drawn under HVDSHIM_RNG=same), so N ranks compute what one
    does, no faster: named once, by rank 0.  Different under
    HVDSHIM_DATA=split: split mode, which cuts loaders' batches, had none
    to cut, and the job is not the plain run: named once, by rank 0.  (The decision to compare is
    the same on every rank: the count of reducing passes and whether a
    loader was iterated in training are; a rank that gave up its
    fingerprint still takes part.)  Not where ranks have finished already
    (all_ranks false, from the round every rank read): those left are
    not the job's ranks, and a lone rank would find itself alike."""
    fp, _FP.same_batches, _FP.compare_batches = _FP.same_batches, None, False
    _S.recheck = True  # (the global forward pre-hook may come off now)
    if _EV.loader_trained or not _S.enabled or not all_ranks or _S.size < 2:  # (one rank of a job that may grow)
        return
    mine = torch.tensor(fp if fp is not None else [0.0, 0.0, 0, 0], dtype=torch.float64)  # (given up: nothing said)
    hi, lo = (v.tolist() for v in _elastic.extremes(b"hvdshim.same-batches", mine, "comparing the ranks' first training batches"))
    if not (lo[2] >= 1 and lo[3] == 1):
        return
    if hi != lo:  # each rank's own batches (drawn at random, as nanoGPT's get_batch draws them)
        if _S.data_mode == "split" and _S.rank == 0:
            warn("HVDSHIM_DATA=split, but no DataLoader was iterated in training: this script draws its batches "
                 "itself, each rank its own, so a step trains on %d such batches (%d times the plain run's), as in "
                 "shard mode, not on the plain run's batch cut in %d.  Split mode cuts only DataLoaders' batches "
                 "(docs/PYTORCH.md, 'Data')" % (_S.size, _S.size, _S.size))
        return
    follow = _S.rng_mode == "per-rank" and _S.rng_default
    if follow:  # (decided alike on every rank: the reduced fingerprints and the settings are)
        _elastic.retrying(_rng.follow_rank0, b"hvdshim.rng.same-batches")
    if _S.rank == 0:
        warn("every rank trained on the same batches in its first steps, and no DataLoader was iterated in "
             "training: the %d ranks compute what one process does, no faster (slower by each step's reduction: "
             "run it on one rank, or give it a DataLoader).  hvdshim shards DataLoaders; "
             "batches a script cuts from its data itself (x[i:i + batch]) are the same on every rank (docs/PYTORCH.md, "
             "'Data')%s" % (_S.size, ".  From here on every rank draws rank 0's random numbers (dropout masks, "
                            "noise), as the plain run does; HVDSHIM_RNG=same set from the start reproduces the "
                            "plain run exactly" if follow else ""))
