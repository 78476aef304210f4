"""The end of a reducing backward pass.

When the last hooked parameter's gradient arrives (hooks.py), this rank's
part of the end-of-backward round is known (every parameter got one), so
the round (round_vector.py) goes in the same batch: float32, like the
gradients, it is fused into their last allreduce (one round per step).
That last batch is waited for at once, so it does not wake the engine
thread: the waiting training thread runs the engine's cycle itself.  Then
the gradients only other ranks produced are filled in, rank 0's
hyperparameters and k taken, split mode's shares corrected.  Ranks dying
meanwhile (HVDSHIM_ELASTIC): the survivors start the step's reduction over
from their own gradients (_start_over)."""
import ctypes

import torch

from .. import checkpoints
from .. import elastic as _elastic
from .. import grow as _grow
from .. import rng as _rng
from ..capi import SUM, debug
from ..collectives import GRAD_DTYPES, Pending, allreduce_now
from ..data import same_batches
from ..data.roles import _EV
from ..data.same_batches import _FP
from ..errors import HvdShimError, MembershipChanged
from ..state import _S, _warn_once
from . import round_vector
from .accumulation import _A, _adopt_k, _propose_k
from .hyperparams import _apply_hyper, _hyper_slots
from .loss_shares import _L, _share_correction, _share_pieces
from .params import _P
from .submit import _H, _drop_gather, _finish_sparse, _submit_grad


def _end_of_backward():
    _A.in_backward = False
    _A.bw_window += 1
    if _A.skip_bw:
        _A.skip_bw = False
        _A.deferred = True
        _rng.diverge()
        return
    _reduce_round()


def _submit_round():
    """This rank's part of the end-of-backward round (round_vector.py), sent
    with the gradients batched so far."""
    slots = _hyper_slots()
    n, m = len(_P.used), len(slots)
    rank0 = ([v for _g, _k, _i, v in slots], _propose_k(), _grow.proposal()) if _S.rank == 0 else None
    shares = _share_pieces(_L.share) if _S.shares else None  # (split mode: this rank's denominator, if it weighed)
    vec = _round_buffer(round_vector.pack(_P.used, m, rank0, shares))
    flags = Pending()
    _H.batch.add(b"hvdshim.round.%d.%d" % (n, m), vec, SUM, flags, "agreeing on used parameters and hyperparameters")
    _H.batch.flush(waited=True)  # the end of backward waits for it next
    _H.round = (vec, slots, flags)


def _round_buffer(vals):
    """A float32 tensor holding vals: one kept for each length (the round of
    the step before has been read back when the next is packed), written
    through the ctypes array it shares its memory with (a new tensor from a
    list each step costs several times as long)."""
    kept = _ROUNDS.get(len(vals))
    if kept is None:
        arr = (ctypes.c_float * len(vals))()
        kept = _ROUNDS[len(vals)] = (arr, torch.frombuffer(arr, dtype=torch.float32))
    kept[0][:] = vals
    return kept[1]


_ROUNDS = {}  # the round's length -> (ctypes array, the tensor on its memory)


def _reduce_round(imminent=False):
    """End of a reducing backward (or accumulated gradients needed now,
    imminent: the step comes next): the round (_submit_round) unless the last gradient sent it already, the
    gradients only other ranks produced, rank 0's hyperparameters and k.
    Ranks dying meanwhile (HVDSHIM_ELASTIC): the survivors start the
    step's reduction over from their own gradients (_start_over)."""
    try:
        for attempt in range(_elastic._RETRIES + 1):
            try:
                ranks = _reduce_round_once(imminent)
                break
            except MembershipChanged:
                if attempt == _elastic._RETRIES:
                    raise
                _start_over()
        _S.reductions += 1
        checkpoints.settled()  # (rank 0 has finished the saves this rank made before this step)
        if _S.reductions == 3 and _FP.compare_batches:
            same_batches.check_same_batches(ranks == _S.size)
    finally:
        _H.submitted.clear()
        _H.early.clear()
        _P.used[:] = bytes(len(_P.used))
        _A.deferred = False
        _H.round = None
        _H.copied.clear()
        _L.share, _L.share_s = None, 1.0


def _reduce_round_once(imminent):
    """One attempt at the end of a reducing pass; returns how many ranks
    took part in its round (fewer than the job's once ranks have finished)."""
    if _H.round is None:
        _submit_round()
    vec, slots, flags = _H.round
    n, m = len(_P.used), len(slots)
    if len(_H.submitted) == n and not _H.batch.items:  # nothing to add after the round: one wait for all
        flags.wait_with(_H.pending)
    else:
        flags.wait()
    got = round_vector.Round(vec.tolist(), n, m)
    if len(_H.submitted) < n:  # (every parameter submitted here: nothing to look for)
        for i, used in enumerate(got.used):
            if used > 0 and i not in _H.submitted:  # used elsewhere, or only in a backward that accumulated
                _submit_grad(_P.params[i])
    _H.batch.flush(waited=True)
    if _S.data_mode == "split" and _EV.loader_trained and got.ranks < _S.size:  # (no loader: split cut nothing)
        _ranks_left(_S.size - got.ranks)
    elif got.ranks < _S.size:
        _ranks_gone(got.ranks, got.rank0)
    f = _share_correction(got.shares, got.ranks) if _S.shares else 1.0
    if got.rank0:  # rank 0 took part
        _apply_hyper(slots, got.hyperparameters())
        _adopt_k(got.k)
        _grow.agreed(got.grow)
    else:
        _adopt_k(1)
    _H.pending.wait()
    _finish_sparse()
    if f != 1.0:
        _reweigh(f)
    _rng.diverge()
    if imminent or _step_next():
        _rng.window_open()  # until the step ends: what the script draws on the averaged gradients, every rank draws
    else:
        _rng.withhold()
    return got.ranks


def _step_next():
    """Whether the optimizer step, not another backward pass, is what comes
    after this reducing one: where more passes follow first (gradient
    accumulation whose k is not agreed yet, or this pass not the agreed
    k-th), the next pass's batch and dropout masks are drawn there, and
    drawn in the step window they would be the same on every rank.  By the
    window's agreed k, else the last step's number of passes, else (the
    first step) the first pass only; for a script that updates its weights
    by hand (no optimizer), as decided at its first training forward after
    a backward whose ranks drew (models.decide_manual_window)."""
    if _A.in_step:
        return True
    if not _S.optimizers:
        return _rng.manual_window()
    if _A.k > 1:
        return _A.bw_window >= _A.k
    if _A.windows:
        return _A.bw_window >= _A.windows[-1]
    return _A.bw_window == 1


def _where():
    """This rank's place in training, for a message: its optimizer steps,
    or, for a script with no optimizer, its reducing backward passes."""
    if _S.optimizers:
        return "its backward after optimizer step %d" % _S.steps
    return "its reducing backward pass %d" % (_S.reductions + 1)


def _ranks_left(gone):
    """Split mode: ranks have finished the script while this one trains.
    Every rank holds a part of every batch a DataLoader gives there, so the
    job can no longer be the single process's run: it ends, saying why.
    (A script that trains on no DataLoader has nothing cut: shard mode's
    rule, _ranks_gone.)"""
    raise HvdShimError(
        "hvdshim: split mode: %d of %d ranks finished the script while this rank still trains (%s): the "
        "ranks took different paths, and each holds a part of every batch. A loop that "
        "ends, or a step skipped, on a value each rank computes from its own slice (an accuracy or a count summed "
        "by the script, a NaN check of the loss before backward) decides differently on each rank; end loops on "
        "a fixed count or on the loss read after backward (averaged over ranks), or use HVDSHIM_DATA=shard"
        % (gone, _S.size, _where()))


def _ranks_gone(ranks, rank0_here):
    """Shard mode: ranks have finished the script while this one trains.
    Said once for each count, by rank 0 (by every rank still training once
    rank 0 has finished: its console is gone): the rest of training is the
    ranks left's, a part of the data each, and rank 0's log alone does not
    show it."""
    if _S.rank == 0 or not rank0_here:
        _warn_once("ranks-gone-%d" % ranks,
                   "%d of %d ranks finished the script while this rank still trains (%s): training goes on over "
                   "the %d left, each on its own part of the data. Ranks stop at "
                   "different points when a decision is taken on a value each rank computes alone (an early stop on "
                   "its own loss or accuracy, a count of its own batches)" % (_S.size - ranks, _S.size, _where(), ranks))


def _start_over():
    """Ranks died during this step's reduction: every survivor is here (the
    engine fails an operation on all of them or none).  Take the change in,
    forget what was handed over (ended: failed, or averaged with the dead),
    put back this rank's own gradients and hand them over again."""
    _elastic.recover()
    _H.pending.drain()
    if _H.round is not None:
        _H.round[2].drain()
        _H.round = None
    _H.batch.forget(_H.pending)
    for _prm, _p, _idx, _vals, hi, hv, _shape in _H.sparse:  # gathered again below from p.grad (still its own)
        _drop_gather(hi)
        _drop_gather(hv)
    _H.sparse = []
    done, _H.submitted = sorted(_H.submitted), set()
    for idx in done:
        prm = _P.params[idx]
        p, mine = prm.ref(), _H.local.get(idx) if idx in _H.copied else None
        if p is not None and mine is not None and p.grad is not None:
            with torch.no_grad():
                p.grad.copy_(mine)
        _submit_grad(prm)
    _elastic.redone(_S.steps + 1)


def resync_if_drawn():
    """At the start of a step whose last reducing backward opened no step
    window (it seemed not the last of the step: the first step of gradient
    accumulation, whose pass count was not known yet): where any rank drew
    from torch's generators since then (noise added to the gradients), each
    rank drew its own, so every rank's gradients are averaged again and the
    replicas step alike.  One small agreement (every rank has the same
    withheld window: it follows from the agreed counts), once or twice in
    a run."""
    drew = _rng.drew_since_withheld()
    if drew is None:
        return
    hi, _lo = _elastic.extremes(b"hvdshim.rng.withheld", torch.tensor([1.0 if drew else 0.0], dtype=torch.float64),
                                "agreeing whether the ranks drew before the step")
    if float(hi[0]) == 0.0:
        return
    debug("random numbers were drawn between the last backward and the step before the step's pass count was known; "
          "each rank drew its own: the gradients are averaged again")
    for prm in _P.params:
        p = prm.ref()
        g = p.grad if p is not None else None
        if g is None or g.is_sparse or g.dtype not in GRAD_DTYPES or not (g.is_cpu or g.is_cuda):
            continue
        buf = g if g.is_contiguous() else g.contiguous()
        allreduce_now(b"hvdshim.resync." + prm.bname, buf, _S.grad_op, prm.what)
        if buf is not g:
            g.copy_(buf)


def _reduce_deferred(why):
    """Gradients that only accumulated are needed now (a step, clipping, an
    unscale): reduce them before going on."""
    if _A.deferred and _S.enabled and _S.started and not _A.in_backward:
        debug("reducing accumulated gradients before %s (the step came sooner than %d backward passes)"
              % (why, _A.k))
        _reduce_round(imminent=True)


def _reweigh(f):
    """The averaged gradients of this reduction times f (and the loss, read
    after backward)."""
    _L.share_f = f
    with torch.no_grad():
        for idx in _H.submitted:
            p = _P.params[idx].ref()
            if p is not None and p.grad is not None:
                p.grad.mul_(f)
