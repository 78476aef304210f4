"""What the loss given to backward is, and split mode's weighing by each
rank's share of a mean.

A loss that is a mean is a sum divided by what it is a mean over: the
targets that count (cross-entropy with ignore_index or class weights), or
the elements (a .mean(), MSE).  The plain run divides the whole batch's
sum by the whole batch's count D; a rank divides its slice's sum by its
own count d_r, so averaging the ranks' gradients is exact only when every
d_r is the same (equal slices, no ignored targets).  So the rank's
gradients are multiplied by d_r / c as they are handed over (submit.py; c:
an agreed guess of D / N, the last weighed reduction's), the round carries
every d_r, and the averaged gradients and loss are multiplied by N c / D
(reduction.py): the plain run's, to float rounding.  When the guess holds
(equal counts), the factor is 1 and nothing is multiplied: the same
arithmetic as without weighing.  (The accumulated gradients are
multiplied, not backward's seed: a seed far from 1 would overflow a
float16 backward under a GradScaler where the plain run's does not.)

The same look at the loss's graph warns, once, where a loss summed over
the batch meets split mode's averaging (_check_summed).

Its state: _L."""
import torch

from ..capi import AVG
from ..errors import HvdShimError
from ..state import _S, _warn_once, is_number
from . import round_vector
from .accumulation import _A
from .params import _P


class _Shares:
    def __init__(self):
        self.share = None           # this reduction's denominator of the loss on this rank (None: not weighed)
        self.share_s = 1.0          # this reduction's factor for this rank's gradients: share / share_c
        self.share_c = 1.0          # the factor's divisor: the last weighed reduction's mean denominator (agreed)
        self.share_f = 1.0          # this reduction's correction, applied to the averaged gradients and loss
        self.share_slots = (None, None)  # (count, size, rank) and this rank's round slots for it (kept)
        self.share_seen = None      # the last weighed reduction's slots (the same again: no correction)
        self.sum_check = True       # split mode, average: the first backward's loss is looked at (_looks_summed)


_L = _Shares()

# A loss that is a mean is a sum divided by what it is a mean over: the
# targets that count (cross-entropy with ignore_index or class weights), or
# the elements (a .mean(), MSE).  The plain run divides the whole batch's
# sum by the whole batch's count D; a rank divides its slice's sum by its
# own count d_r, so averaging the ranks' gradients is exact only when every
# d_r is the same (equal slices, no ignored targets).  So the rank's
# gradients are multiplied by d_r / c as they are handed over (c: an agreed
# guess of D / N, the last weighed reduction's), the round carries every
# d_r, and the averaged gradients and loss are multiplied by N c / D: the
# plain run's, to float rounding.  When the guess holds (equal counts), the
# factor is 1 and nothing is multiplied: the same arithmetic as without
# weighing.  (The accumulated gradients are multiplied, not backward's
# seed: a seed far from 1 would overflow a float16 backward under a
# GradScaler where the plain run's does not.)
_SCALINGS = ("MulBackward0", "MulBackward1", "DivBackward0", "DivBackward1", "NegBackward0")
_SUMMED = "summed"  # (_loss_kind: a sum over the batch)


def _through_scalings(fn):
    """(node, divisor): the node under the constant factors and divisions
    on top of a loss (the last division's divisor, or None), or (None,
    None) where a node on the way has more than one input."""
    divisor = None
    for _ in range(8):
        if fn is None or type(fn).__name__ not in _SCALINGS:
            break
        inputs = [nf for nf, _ in fn.next_functions if nf is not None]
        if len(inputs) != 1:
            return None, None
        if type(fn).__name__.startswith("DivBackward"):
            divisor = getattr(fn, "_saved_other", None)
        fn = inputs[0]
    return fn, divisor


def _loss_kind(fn, depth=0):
    """What the scalar loss whose node is `fn` is: a mean over a count on
    this rank (that count, a float: a loss with reduction='mean' (an NLL
    loss's saved total weight, else its input's numel), a .mean(), a sum
    divided by a count such as (l * mask).sum() / mask.sum()); _SUMMED (a
    loss with reduction='sum', a .sum()); or None (not known).  Constant
    factors (GradScaler, 1/k, label smoothing's 1 - eps) are looked through;
    terms of one kind (label smoothing's two, a VAE's BCE + KLD) are one.
    A sum of terms of which some are means is a mean over the first mean's
    count: weighed by it, a term that is the same on every rank (a penalty
    on the weights) comes out exact after the correction, and so do means
    whose counts keep one ratio on every rank (a loss per row plus a mean
    over the activations); the kinds come from the graph's shape, so every
    rank running the same code recognises the same loss."""
    fn, divisor = _through_scalings(fn)
    if fn is None:
        return None
    name = type(fn).__name__
    if name.startswith("SumBackward"):
        return _SUMMED if divisor is None else _count(divisor)
    if name in ("AddBackward0", "SubBackward0") and depth < 4:
        kinds = [_loss_kind(nf, depth + 1) for nf, _ in fn.next_functions if nf is not None]
        counts = [k for k in kinds if isinstance(k, float)]
        if counts:
            return counts[0]
        return kinds[0] if kinds and all(k is kinds[0] for k in kinds) else None
    if name == "MeanBackward0":
        numel = getattr(fn, "_saved_self_sym_numel", getattr(fn, "_saved_self_numel", None))
        return float(numel) if numel is not None else None
    reduction = getattr(fn, "_saved_reduction", None)
    if reduction == 2:  # (reduction='sum', divided by a count: F.nll_loss(..., reduction='sum') / len(x))
        return _SUMMED if divisor is None else _count(divisor)
    if reduction != 1:
        return None
    if name.startswith("NllLoss"):
        return float(fn._saved_total_weight)
    self_ = getattr(fn, "_saved_self", None)
    return float(self_.numel()) if isinstance(self_, torch.Tensor) else None


def _count(divisor):
    """A sum's divisor as the count it is a mean over (a float), or None."""
    if isinstance(divisor, torch.Tensor):
        return float(divisor) if divisor.numel() == 1 else None
    return float(divisor) if is_number(divisor) else None


def _divided_by_batch(fn):
    """(c, rows) where the loss is a sum divided by c, the loader's batch
    size in split mode, while the sum runs over this rank's slice of `rows`
    rows (`.sum() / batch_size`: a sum over the batch times a constant, whose
    average over ranks is 1/N of the plain run's); else None.  A count that
    only happens to equal the batch size looks the same, so this only warns."""
    fn, divisor = _through_scalings(fn)
    if fn is None:
        return None
    c = _count(divisor) if divisor is not None else None
    if c is None or not _S.nominal_rows or c != _S.nominal_rows:
        return None
    if type(fn).__name__.startswith("SumBackward"):
        sizes = getattr(fn, "_saved_self_sym_sizes", None) or getattr(fn, "_saved_self_sizes", None)
        rows = int(sizes[0]) if sizes else None
    elif getattr(fn, "_saved_reduction", None) == 2:
        self_ = getattr(fn, "_saved_self", None)
        rows = int(self_.shape[0]) if isinstance(self_, torch.Tensor) and self_.dim() else None
    else:
        return None
    return (int(c), rows) if rows is not None and rows != c else None


def _share_of(fn):
    """What the loss is a mean over on this rank, or None: not a mean."""
    kind = _loss_kind(fn)
    return kind if isinstance(kind, float) else None


def _looks_summed(fn):
    return _loss_kind(fn) is _SUMMED


def _root(tensors):
    """backward's tensors: the one tensor, if one."""
    return tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1 else tensors


def _note_share(tensors, grad_tensors, retain_graph, create_graph, inputs):
    """Split mode, at backward: this rank's count d_r and factor d_r / c for
    a loss recognised as a mean, in the first backward since the optimizer
    step (the gradients hold nothing yet that the correction would scale),
    when every backward reduces (k = 1) and no hook of the script's sees a
    gradient before the correction."""
    _L.share, _L.share_s, _L.share_f = None, 1.0, 1.0
    if _A.bw_window or _A.k != 1 or grad_tensors is not None or retain_graph or create_graph or inputs is not None \
            or _A.in_backward or len(_P.early_hooked) or len(_P.early_acc) or not _S.started:
        return
    t = _root(tensors)
    fn = getattr(t, "grad_fn", None)
    if fn is None or t.numel() != 1:
        return
    d = _share_of(fn)
    if d is not None:
        if _S.pad_slice:  # this rank's slice only repeats rows of a batch shorter than the ranks: none of it counts
            d = 0.0
        _L.share, _L.share_s = d, d / _L.share_c


def _share_pieces(d):
    """This rank's round slots for its denominator d (None: not weighed);
    the last ones are kept (d is the same from step to step)."""
    key = (d, _S.size, _S.rank)
    if _L.share_slots[0] != key:
        pieces = [0] * (4 * _S.size + 1)
        if d is not None:
            pieces[4 * _S.rank:4 * _S.rank + 4] = round_vector.pieces([d])
            pieces[-1] = 1
        _L.share_slots = (key, pieces)
    return _L.share_slots[1]


def _share_correction(pieces, ranks):
    """The round's share slots: N c / D where every rank weighed (and the
    next guess c = D / N); 1 where none did, or where every count is the
    last weighed reduction's (c is then D / N already).  N: the ranks that
    took part in the round (those still training: the engine averages over
    them)."""
    if pieces == _L.share_seen:
        return 1.0
    weighed = int(pieces[-1])
    if weighed == 0:
        return 1.0
    if weighed != ranks:  # (the same script on every rank recognises the same loss)
        raise HvdShimError("hvdshim: split mode: %d of %d ranks recognised this backward's loss as a mean; the "
                           "ranks' losses differ in kind" % (weighed, ranks))
    shares = round_vector.values(pieces[:-1])
    total = sum(shares)
    if total <= 0:
        return 1.0
    f = ranks * _L.share_c / total
    _L.share_c = total / ranks
    _L.share_seen = pieces
    return f


def _check_summed(tensors):
    """Split mode, gradients averaged: once, at the first backward, rank 0
    says so where the loss looks like a sum over the batch (its gradient is
    then 1/N of the plain run's)."""
    _L.sum_check = False
    if not (_S.enabled and _S.data_mode == "split" and _S.grad_op == AVG and _S.rank == 0):
        return
    t = _root(tensors)
    if not (isinstance(t, torch.Tensor) and t.numel() == 1):
        return
    if _looks_summed(t.grad_fn):
        _warn_once("summed-loss", "the loss given to backward() looks like a sum over the batch (reduction='sum' "
                   "or .sum()): split mode averages the ranks' gradients, which gives 1/%d of the plain run's "
                   "gradient for a summed loss.  HVDSHIM_GRADIENTS=sum sums them (the plain run's gradient, "
                   "and the loss read after backward its sum)" % _S.size)
        return
    by_batch = _divided_by_batch(t.grad_fn)
    if by_batch is not None:
        _warn_once("summed-loss", "the loss given to backward() looks like a sum divided by %d, the DataLoader's "
                   "batch size, while this rank's slice has %d rows: if %d is a constant of the script (its batch "
                   "size), the loss is a sum over the batch, and split mode averaging the ranks' gradients gives "
                   "1/%d of the plain run's gradient; HVDSHIM_GRADIENTS=sum then sums them (divide by len(x) "
                   "instead, or use a mean, and nothing needs changing)" % (by_batch[0], by_batch[1], by_batch[0],
                                                                            _S.size))
