"""Gradient accumulation: k backward passes per optimizer step.

Once k has been the same for two steps, rank 0 proposes it in the round that
ends a reducing backward (reduction.py), every rank adopts it, and the first
k-1 backward passes of each step only accumulate locally; the k-th reduces
the accumulated gradients (averaging is linear: the same result as reducing
every pass).  A step (or a clipping or unscaling call) that comes while
gradients are still local reduces them first (reduction._reduce_deferred): a
wrong guess costs one reduction without overlap, never a wrong result.

Its state: _A, the window of backward passes since the last optimizer step."""
from .. import rng as _rng
from ..state import _S, _info_once


class _Window:
    def __init__(self):
        self.k = 1                  # the agreed k (rank 0's proposal, carried by the last reducing round)
        self.bw_window = 0          # backward passes since the last optimizer step
        self.windows = []           # the last two window lengths (backward passes per step)
        self.in_backward = False    # a backward pass has delivered a gradient and not ended
        self.skip_bw = False        # this backward only accumulates (a later one of the window reduces)
        self.deferred = False       # gradients accumulated locally and not reduced yet
        self.in_step = 0            # optimizer.step depth (a subclass may call its parent's step)


_A = _Window()


def _propose_k():
    """Rank 0: backward passes per step for the coming steps.  A length seen
    for two steps in a row; one odd step (an epoch's short last window) keeps
    the current k; otherwise 1 (reduce every backward)."""
    w = _A.windows
    if not _S.accumulate:
        return 1
    if len(w) >= 2 and w[-1] == w[-2] and w[-1] > 1:
        return w[-1]
    if _A.k > 1 and _A.k in w[-2:]:
        return _A.k
    return 1


def _adopt_k(k):
    if k > 1 and k != _A.k:
        _info_once("accumulate-%d" % k, "%d backward passes per optimizer step: gradients are reduced once per step, "
                   "by the last one (HVDSHIM_ACCUMULATE=off reduces at every backward)" % k)
    _A.k = max(1, k)


def note_zero_grad():
    """zero_grad (an optimizer's or a module's) between backward passes of
    one step: their gradients are thrown away, not accumulated for the step
    (SAM's first step reads them, perturbs the weights and zeroes them, then
    backward runs again before the step).  The window of backward passes
    starts again, so k is not taken for their number; where passes were
    only accumulated on that guess, the guess was wrong: k is 1 again on
    every rank (each calls zero_grad at the same place)."""
    _rng.window_close()
    if not _A.bw_window or _A.in_backward:
        return
    _A.bw_window = 0
    if _A.k > 1:
        _A.k, _A.windows = 1, []


def _end_window():
    """An optimizer step ended: the backward passes since the last one form a window."""
    if _A.bw_window:
        _A.windows = (_A.windows + [_A.bw_window])[-2:]
        _A.bw_window = 0
