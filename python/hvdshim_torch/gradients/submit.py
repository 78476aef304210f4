"""A gradient handed to the engine: dense ones queued in a batch
(HVDSHIM_BUCKET bytes, by default each alone: one call and one engine
wake-up per batch), this rank's share weighed in (split mode,
loss_shares.py), a copy kept where ranks may die (HVDSHIM_ELASTIC); sparse
ones gathered (indices and values).

Its state: _H, this reduction's hand-over."""
import ctypes
import torch

from .. import capi
from ..capi import AVG
from ..collectives import GRAD_DTYPES, Batch, Pending, allgather_finish, allgather_start
from ..errors import HvdShimError, MembershipChanged
from ..state import _S
from .loss_shares import _L


class _Handover:
    def __init__(self):
        self.pending = Pending()    # the gradients' allreduces in flight
        self.batch = Batch()        # gradients not yet handed to the engine
        self.submitted = set()      # param indices handed over in this reduction
        self.early = set()          # param indices averaged in backward, before a script's hook (hooks._hooked_grad)
        self.sparse = []            # sparse gradients being gathered: (param, p, idx, vals, handles..., shape)
        self.local = {}             # param index -> a buffer for a copy of this rank's gradient (kept)
        self.copied = set()         # param indices whose copy holds this step's gradient
        self.round = None           # the end-of-backward round in flight: (vector, slots, pending) (reduction.py)


_H = _Handover()


def _sharing_test():
    """A test of whether a gradient's memory is also another tensor's, or
    None where torch gives no way to tell.  Where a parameter is used
    through a view (a bias added as b.view(1, -1)) and no sum makes a new
    tensor (one row), AccumulateGrad may keep as p.grad a view of the
    gradient that backward is still passing on to the layers before it: a
    write into p.grad before backward ends (an overlapped reduction, an
    average in a hook) would change theirs.  The count of the holders of its
    storage tells: more than a tensor alone has."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    storage = getattr(torch.Tensor, "untyped_storage", None) or getattr(torch.Tensor, "_storage", None)
    if count is not None:
        def users(t):
            return count(t.untyped_storage()._cdata)
    elif storage is not None:  # (torch 1.13 to 2.6) c10::StorageImpl starts with a vtable, then its use count:
        def users(t):          # read there, once it has counted a view made and let go below
            return ctypes.c_size_t.from_address(storage(t)._cdata + ctypes.sizeof(ctypes.c_void_p)).value
    else:
        return None
    try:
        t = torch.zeros(2)
        alone = users(t)
        view = t[1:]
        seen = users(t)
        del view
        if seen != alone + 1 or users(t) != alone:
            return None
    except Exception:  # pylint: disable=broad-except
        return None
    return lambda t: users(t) > alone


_shared = _sharing_test()


def _private(g):
    """g, or a copy of it where its memory is shared (_sharing_test)."""
    return g.clone(memory_format=torch.contiguous_format) if _shared is not None and _shared(g) else g


def _submit_grad(prm):
    p = prm.ref()
    if p is None:
        return
    if prm.index in _H.early:  # averaged in backward, before the script's own hook (_hooked_grad)
        _H.submitted.add(prm.index)
        return
    g = p.grad
    if g is None:  # used on another rank, not here: contribute nothing (zeros)
        if prm.sparse:
            g = torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.int64),
                                        torch.zeros((0,) + tuple(p.shape[1:]), dtype=p.dtype), p.shape)
        else:
            g = p.grad = torch.zeros_like(p)
    if not (g.is_cpu or g.is_cuda):
        raise HvdShimError("hvdshim: parameter '%s' has its gradient on %s; hvdshim handles CPU and CUDA tensors"
                           % (prm.name, g.device))
    _H.submitted.add(prm.index)
    if g.is_sparse:
        _submit_sparse(prm, p, g)
        return
    if g.dtype not in GRAD_DTYPES:
        raise HvdShimError("hvdshim: parameter '%s' has a %s gradient; hvdshim averages float32, float64, "
                           "float16 and bfloat16 gradients" % (prm.name, str(g.dtype).replace("torch.", "")))
    if _S.elastic and prm.index not in _H.copied:  # this rank's own, should a death make the step start over
        _keep_local(prm.index, g)
    if _L.share_s != 1.0:  # split mode: weighed by its share (_note_share), in a copy: AccumulateGrad can make a
        # gradient of the one backward is passing on (_sharing_test), which a write in place would change
        buf = g.mul(_L.share_s).contiguous()
    else:  # reduced while backward runs (overlap, GPU): into a copy where its memory is shared
        buf = _private(g) if _S.overlap or g.is_cuda else g
        if not buf.is_contiguous():
            buf = buf.contiguous()
    _H.batch.add(prm.bname, buf, _S.grad_op, _H.pending, prm.what, on_done=None if buf is g else lambda: g.copy_(buf))


def _keep_local(idx, g):
    """A copy of this rank's gradient, in a buffer kept from step to step
    (a fresh one every step costs page faults that, on some machines, take
    longer than the step)."""
    buf = _H.local.get(idx)
    if buf is None or buf.shape != g.shape or buf.dtype != g.dtype or buf.device != g.device:
        buf = _H.local[idx] = torch.empty_like(g, memory_format=torch.contiguous_format)
    buf.copy_(g)
    _H.copied.add(idx)


def _submit_sparse(prm, p, g):
    g = g.coalesce()
    idx = g._indices().t().contiguous().cpu()  # gathered through host memory (rows differ per rank)
    vals = g._values().contiguous().cpu()
    if _L.share_s != 1.0:
        vals = vals * _L.share_s
    what = "gathering the sparse gradient of '%s'" % prm.name
    hi = hv = None
    try:
        hi = allgather_start(prm.bname + b".idx", idx, what)
        hv = allgather_start(prm.bname + b".val", vals, what)
    except MembershipChanged:  # refused (ranks died): raised at the end of backward, not through autograd
        _H.pending.refused = _H.pending.refused or what
    _H.sparse.append((prm, p, idx, vals, hi, hv, g.shape))


def _finish_sparse():
    """Every gather first, then the gradients: when ranks die a gather fails
    with every p.grad still this rank's own (_start_over gathers again)."""
    if not _H.sparse:
        return
    done = []
    for k, (prm, p, idx, vals, hi, hv, shape) in enumerate(_H.sparse):
        what = "gathering the sparse gradient of '%s'" % prm.name
        _H.sparse[k] = (prm, p, idx, vals, None, hv, shape)  # (a handle waited for has ended, failed or not)
        all_idx = allgather_finish(hi, idx, what)
        _H.sparse[k] = (prm, p, idx, vals, None, None, shape)
        done.append((p, all_idx, allgather_finish(hv, vals, what), shape))
    _H.sparse = []
    with torch.no_grad():
        for p, all_idx, all_vals, shape in done:
            vals = all_vals / _S.size if _S.grad_op == AVG else all_vals
            p.grad = torch.sparse_coo_tensor(all_idx.t(), vals, shape).coalesce().to(p.device)


def _drop_gather(h):
    """Release an allgather's handle whose result is not wanted."""
    if h is None:
        return
    out, rows = ctypes.c_void_p(), ctypes.c_size_t()
    if capi.LIB.hvd_allgather_wait(h, -1.0, ctypes.byref(out), ctypes.byref(rows)) == 0 and out.value:
        capi.LIB.hvd_free(out)
