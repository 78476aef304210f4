"""torch.autograd.backward wrapped (so Tensor.backward too): the loss a
rank reads after backward is the mean over ranks, and a backward run inside
another's is part of the outer one.  Also the other losses averaged so: a
step closure's and the metric fed to ReduceLROnPlateau (_average_loss).

Its state: _B."""
import weakref
import torch

from .. import elastic as _elastic
from .. import rng as _rng
from ..collectives import Pending, allreduce
from ..data.roles import _EV
from ..errors import MembershipChanged
from ..state import _S
from .accumulation import _A
from .hooks import _K
from .loss_shares import _L, _check_summed, _note_share, _root
from .reduction import _end_of_backward
from .submit import _H


class _Losses:
    def __init__(self):
        self.averaged = None        # weak reference to the last loss averaged that way
        self.scaled = None          # (scaled, loss) weak references: the last GradScaler.scale(loss)
        self.lib_loss = None        # the loss given to Accelerator.backward, during that call (install.py)
        self.loss_bufs = {}         # (device, dtype, shape) -> the float32/64 buffer the loss is averaged in


_B = _Losses()


def _loss_to_average(tensors, retain_graph, create_graph, inputs):
    """The tensor whose value becomes the mean over ranks when this backward
    ends, or None: a computed floating-point scalar whose graph this
    backward frees (under retain_graph or create_graph its own node may keep
    its value for a later pass).  `scaler.scale(loss)` stands for `loss`, and
    so does `loss / k` inside `Accelerator.backward(loss)` (the HuggingFace
    Trainer returns and logs `loss`)."""
    if not (_S.enabled and _S.started and _S.average_loss) or _A.in_backward or retain_graph or create_graph \
            or inputs is not None:
        return None
    tensors = _root(tensors)
    if not _averageable(tensors):
        return None
    outer = _B.lib_loss  # Accelerator.backward(loss) backwards `loss / k` (or its scaled copy): `loss` is read
    if outer is not None and outer is not tensors and _averageable(outer) and outer.device == tensors.device:
        return outer
    scaled = _B.scaled
    if scaled is not None and scaled[0]() is tensors:
        unscaled = scaled[1]()
        if unscaled is not None and _averageable(unscaled) and unscaled.device == tensors.device:
            return unscaled
    return tensors


def _averageable(t):
    """A computed scalar of its own: not a leaf (a parameter), not a view
    (writing it would change the tensor it views)."""
    return isinstance(t, torch.Tensor) and t.numel() == 1 and t.is_floating_point() and t.grad_fn is not None \
        and not t._is_view() and (t.is_cpu or t.is_cuda)


def _backward_averaging(orig, tensors, grad_tensors, retain_graph, create_graph, args, kwargs):
    """torch.autograd.backward (so Tensor.backward too): a loss it is given
    is averaged over ranks in place once backward ends, so what the script
    reads from it afterwards (`loss.item()`, a running sum, a printed value)
    is the same on every rank, and an early stop, a NaN check or a "best
    loss" taken on it is the same decision everywhere: the mean of the
    ranks' losses, as their gradients are averaged (in split mode, the
    plain run's loss of the whole batch).  The value rides in the first
    batch of gradients; a backward that reduces nothing (one that only
    accumulates) sends it alone.  HVDSHIM_LOSS=local leaves it alone."""
    if _K.bw_depth:  # called in another backward (a reentrant checkpoint recomputing its part): part of that one
        return orig(tensors, grad_tensors, retain_graph, create_graph, *args, **kwargs)
    if _L.sum_check:
        _check_summed(tensors)
    if _S.shares:
        _note_share(tensors, grad_tensors, retain_graph, create_graph, kwargs.get("inputs"))
    loss = _loss_to_average(tensors, retain_graph, create_graph, kwargs.get("inputs"))
    if loss is None:
        return orig(tensors, grad_tensors, retain_graph, create_graph, *args, **kwargs)
    src = loss.detach()
    key = (src.device, src.dtype, src.shape)
    buf = _B.loss_bufs.get(key)  # one per kind of loss, reused: waited for before backward returns
    if buf is None:
        buf = _B.loss_bufs[key] = torch.empty_like(src, dtype=torch.float64 if src.dtype == torch.float64
                                                   else torch.float32)
    scale = _L.share_s  # (as the gradients: times d_r / c)
    buf.copy_(src)
    if scale != 1.0:
        buf.mul_(scale)
    pending = Pending()
    _H.batch.add(b"hvdshim.loss", buf, _S.grad_op, pending, "averaging the loss over ranks")
    try:
        result = orig(tensors, grad_tensors, retain_graph, create_graph, *args, **kwargs)
    except BaseException:
        _H.batch.drop(buf)  # not handed over yet: this rank's backward failed before any gradient
        raise
    _H.batch.flush(waited=True)  # still here when no gradient was reduced (an accumulating pass)
    try:
        pending.wait()
    except MembershipChanged:  # ranks died (HVDSHIM_ELASTIC): the survivors average theirs
        pending.drain()

        def again():
            buf.copy_(src)
            if scale != 1.0:
                buf.mul_(scale)
            allreduce(b"hvdshim.loss", buf, _S.grad_op, pending, "averaging the loss over ranks")
            pending.wait()
        _elastic.retrying(again)
    if _L.share_f != 1.0:
        buf.mul_(_L.share_f)
    src.copy_(buf)
    _B.averaged = weakref.ref(loss)
    return result


def counted(orig, *args, **kwargs):
    """torch.autograd.backward, its calls counted (install.py gives
    _backward_averaging torch's backward through this): a backward run inside
    another's (a reentrant torch.utils.checkpoint recomputes its part and
    calls backward on it from the outer backward) is part of the outer one.
    Where the first gradient comes in such an inner call, the end of
    backward runs when the outermost call returns (a callback queued there
    would end the step's backward with the inner one)."""
    if not _K.bw_depth:
        _EV.data_events += 1  # (a len() answer is no longer kept for the next loader iteration: data/roles.py)
        _EV.backwards += 1  # (a loader iteration during which one runs trains: data/roles.py)
        if _rng._R.window is not None:
            _rng.window_close()  # (a script with no optimizer step: its update is done when backward comes again)
    _K.bw_depth += 1
    try:
        result = orig(*args, **kwargs)
    finally:
        _K.bw_depth -= 1
        outer_ends = _K.bw_depth == 0 and _K.end_outer
        if outer_ends:
            _K.end_outer = False
    if outer_ends:
        _end_of_backward()
    return result


def _note_scaled(outputs, scaled):
    """GradScaler.scale(loss): backward on the result averages `loss`."""
    if isinstance(outputs, torch.Tensor) and isinstance(scaled, torch.Tensor) and scaled is not outputs:
        _B.scaled = (weakref.ref(scaled), weakref.ref(outputs))


def _average_loss(loss):
    """A loss averaged over ranks: the closure's (LBFGS compares loss values
    to decide how many evaluations a step takes: every rank must see the
    same) and the metric fed to ReduceLROnPlateau."""
    if not _S.enabled or not _S.started:
        return loss
    if _B.averaged is not None and _B.averaged() is loss:  # its backward averaged it already
        return loss
    if isinstance(loss, torch.Tensor):
        if loss.numel() != 1 or loss.dtype not in (torch.float32, torch.float64):
            return loss
        out = loss.detach().to("cpu", copy=True).contiguous()
    elif isinstance(loss, (int, float)):
        out = torch.tensor([float(loss)], dtype=torch.float64)
    else:
        return loss
    mine = out.clone()

    def average():
        out.copy_(mine)
        pending = Pending()
        allreduce(b"hvdshim.closure-loss", out, _S.grad_op, pending, "averaging the closure's loss")
        pending.wait()
    _elastic.retrying(average)
    return out.to(loss.device) if isinstance(loss, torch.Tensor) else float(out)
