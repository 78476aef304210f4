"""Horovod's collectives on tensors, each one request to the engine
(through hvdshim_torch's ctypes binding): allreduce (grouped, sparse),
allgather, broadcast, alltoall and reducescatter, in the forms Horovod has
(async with a handle, in place, differentiable).  Scaling and compression
are arithmetic on the tensor before and after (tensors.py); no data moves
in Python.  An operation refused while a rank has joined: _join_guard."""
import ctypes

import torch

from horovod.common.exceptions import HorovodInternalError
from horovod.common.process_sets import _check as _check_process_set, global_process_set
from horovod.torch.basics import _lib, _need_init, rank
from horovod.torch.compression import Compression
from horovod.torch.handles import _claim, _name, _next, _ops, _register, _submit, _track, _unnumber, synchronize
from horovod.torch.tensors import (_ENGINE_DTYPE, _ENGINE_OP, _OP_NAMES, _UINT8, Average, Sum, _as_bytes,
                                   _average_as_sum, _check_tensor, _engine_buffer, _engine_op, _even_splits,
                                   _postscale, _reduce_dtype, _resolve_op, _scale, _set_rank, _set_size,
                                   _wants_grad)
from hvdshim_torch import collectives, errors


def _start_allreduce(buf, name, op, what, psid=0):
    """buf: contiguous; reduced in place by the engine."""
    eop = _engine_op(op)
    dt = _reduce_dtype(buf, what)
    _claim(name, what)
    _next(buf.shape, psid)
    if buf.is_cuda:
        return _submit(_lib.hvd_allreduce_gpu_async, what, name, buf.data_ptr(), buf.numel(), dt, eop,
                       buf.get_device(), collectives.stream_of(buf), None, None)
    return _submit(_lib.hvd_allreduce_async, what, name, buf.data_ptr(), buf.numel(), dt, eop, None, None)


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set, what):
    _check_tensor(tensor, what)
    _need_init(what + "()")
    psid = _check_process_set(process_set, what)
    _engine_op(op)  # Adasum or an unknown op: refused before anything moves
    op, divisor = _average_as_sum(op, process_set)
    ename = _name("allreduce", name, psid)
    _claim(ename, what)
    buf = _engine_buffer(output, psid)
    if buf.data_ptr() != tensor.data_ptr():
        buf.copy_(tensor)
    _scale(buf, prescale_factor)
    h = _start_allreduce(buf, ename, op, what, psid)

    def finish():
        _postscale(buf, divisor, postscale_factor)
        if buf is not output:
            output.copy_(buf)
        return output
    return _register([h], finish, (tensor, output, buf), (tuple(tensor.shape),))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Reduce `tensor` over every rank into a new tensor; returns a handle."""
    op = _resolve_op(op, average)
    return _allreduce_async(tensor, torch.empty_like(tensor, memory_format=torch.contiguous_format), name, op,
                            prescale_factor, postscale_factor, process_set, "allreduce_async")


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Reduce `tensor` in place over every rank; returns a handle."""
    op = _resolve_op(op, average)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set,
                            "allreduce_async_")


class HorovodAllreduce(torch.autograd.Function):
    """allreduce with a gradient: the gradient is reduced the same way (same
    op and factors), as in Horovod."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op, ctx.pre, ctx.post, ctx.ps = op, prescale_factor, postscale_factor, process_set
        return synchronize(allreduce_async(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                           postscale_factor=postscale_factor, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        g = allreduce(grad_output, op=ctx.op, prescale_factor=ctx.pre, postscale_factor=ctx.post,
                      process_set=ctx.ps)
        return g, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """The reduction of `tensor` over every rank (a new tensor; differentiable)."""
    op = _resolve_op(op, average)
    compressed, cctx = compression.compress(tensor)
    if _wants_grad([compressed]):
        out = HorovodAllreduce.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    else:
        out = synchronize(allreduce_async(compressed, name=name, op=op, prescale_factor=prescale_factor,
                                          postscale_factor=postscale_factor, process_set=process_set))
    return compression.decompress(out, cctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place reduction of `tensor` over every rank; returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                        process_set))


def _grouped(tensors, name, start, process_set):
    """Submit every tensor of a group (the engine fuses them); one handle.
    Member i is named '<name>.i' ('grouped.noname.<n>.i' without a name,
    numbered per process set).  A member refused at submission (a duplicate
    name, a bad tensor) leaves the members before it in flight, under their
    own handles, which this group's handle then waits for."""
    tensors = list(tensors)
    if name is None:
        name = _name("grouped", None, _check_process_set(process_set, "grouped operation")).decode()
    names = ["%s.%d" % (name, i) for i in range(len(tensors))]
    subs = [start(t, n) for t, n in zip(tensors, names)]
    ops = [_ops.pop(h) for h in subs]

    def finish():
        return [o.finish() for o in ops]
    return _register([h for o in ops for h in o.handles], finish, tuple(o.keep for o in ops))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    op = _resolve_op(op, average)
    return _grouped(tensors, name, lambda t, n: allreduce_async(t, name=n, op=op, prescale_factor=prescale_factor,
                                                                postscale_factor=postscale_factor,
                                                                process_set=process_set), process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(op, average)
    return _grouped(tensors, name, lambda t, n: allreduce_async_(t, name=n, op=op, prescale_factor=prescale_factor,
                                                                 postscale_factor=postscale_factor,
                                                                 process_set=process_set), process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """grouped_allreduce with a gradient: each gradient reduced as its tensor was."""

    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op, ctx.pre, ctx.post, ctx.ps = op, prescale_factor, postscale_factor, process_set
        return tuple(synchronize(grouped_allreduce_async(list(tensors), name=name, op=op,
                                                         prescale_factor=prescale_factor,
                                                         postscale_factor=postscale_factor,
                                                         process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        reduced = grouped_allreduce([g.contiguous() for g in grads], op=ctx.op, prescale_factor=ctx.pre,
                                    postscale_factor=ctx.post, process_set=ctx.ps)
        return (None, None, None, None, None) + tuple(reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(op, average)
    pairs = [compression.compress(t) for t in tensors]
    sent = [c for c, _ in pairs]
    if _wants_grad(sent):
        outs = list(HorovodGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set, *sent))
    else:
        outs = synchronize(grouped_allreduce_async(sent, name=name, op=op, prescale_factor=prescale_factor,
                                                   postscale_factor=postscale_factor, process_set=process_set))
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduce a sparse COO tensor over every rank, as Horovod does: its
    indices and values are allgathered (so the result holds every rank's
    entries, uncoalesced) and, for Average, the values divided by the size of
    the set.  Returns a callable handle: call it (or synchronize() it) for
    the result."""
    what = "sparse_allreduce_async"
    if op not in (Average, Sum):
        raise ValueError("hvd.%s: op must be hvd.Average or hvd.Sum" % what)
    t = tensor
    hi = allgather_async(t._indices().transpose(0, 1).contiguous(), name="%s.indices" % name,
                         process_set=process_set)
    hv = allgather_async(t._values(), name="%s.values" % name, process_set=process_set)

    def handle():
        values = synchronize(hv)
        indices = synchronize(hi)
        if op == Average:
            values = values / _set_size(process_set)
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size())
    return handle


def _join_guard(ename, psid, what):
    """Horovod refuses allgather, broadcast, alltoall and reducescatter while
    a rank of the job has joined (hvd.join): the engine lets a joined rank
    take part without data, so each such operation carries a one-element Sum
    that every submitting rank sets to 1 and a joined rank leaves at 0.
    Returns (handle, check), check() raising when a rank was missing."""
    flag = torch.ones(1, dtype=torch.int32)
    gname = ename + b".joined"
    _claim(gname, what)
    _next((1,), psid)
    h = _submit(_lib.hvd_allreduce_async, what, gname, flag.data_ptr(), 1, _ENGINE_DTYPE[torch.int32],
                _ENGINE_OP[Sum], None, None)
    n = _lib.hvd_size() if not psid else _lib.hvd_process_set_size(psid)

    def check():
        if int(flag[0]) != n:
            _unnumber(ename)
            raise HorovodInternalError("hvd.%s: not supported while a rank has joined (hvd.join): %d of %d ranks "
                                       "submitted it" % (what, int(flag[0]), n))
    return h, check, flag


def _rows_back(got, host, src, tensor):
    """What the engine gathered or exchanged (host memory, as bytes where
    the dtype went as bytes) as the caller's: host's dtype, rows of src's
    shape, on tensor's device."""
    if got.dtype != host.dtype:
        got = got.view(host.dtype)
    got = got.reshape((-1,) + tuple(src.shape[1:]))
    return got.to(tensor.device) if tensor.is_cuda else got


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Concatenate every rank's `tensor` along the first dimension (which may
    differ per rank); returns a handle."""
    what = "allgather_async"
    _check_tensor(tensor, what)
    _need_init(what + "()")
    psid = _check_process_set(process_set, what)
    src = tensor if tensor.dim() > 0 else tensor.reshape(1)
    host = src.detach().cpu().contiguous()  # the engine gathers host memory; a CUDA tensor comes back to its device
    raw = _as_bytes(host).contiguous()
    ename = _name("allgather", name, psid)
    _claim(ename, what)
    _next(src.shape[1:], psid)
    try:
        gh = collectives.allgather_start(ename, raw, "hvd.allgather")
    except errors.HvdShimError as e:  # (the engine refused it: a change of ranks, a rank shut down)
        raise HorovodInternalError(str(e))
    _track(ename, gh)
    jh, joined, flag = _join_guard(ename, psid, "allgather")
    out = []

    def finish():
        joined()
        return _rows_back(out[0], host, src, tensor)
    return _register([(gh, raw, "hvd.allgather", out), jh], finish, (tensor, raw, flag), (tuple(src.shape[1:]),))


def _gathered_slice(grad, process_set, dim):
    """This rank's rows of an allgather's averaged gradient (Horovod's
    allgather backward: the gradient is averaged over the set's ranks)."""
    dims = allgather(torch.tensor([dim], dtype=torch.int32), process_set=process_set)
    offset = int(dims[:_set_rank(process_set)].sum())
    return grad.narrow(0, offset, dim)


class HorovodAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0] if tensor.dim() else 1
        ctx.ps = process_set
        return synchronize(allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.ps)
        return _gathered_slice(grad, ctx.ps, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    if _wants_grad([tensor]):
        return HorovodAllgather.apply(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name=name, process_set=process_set))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    return _grouped(tensors, name, lambda t, n: allgather_async(t, name=n, process_set=process_set), process_set)


class HorovodGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] if t.dim() else 1 for t in tensors]
        ctx.ps = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name=name, process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        reduced = grouped_allreduce([g.contiguous() for g in grads], op=Average, process_set=ctx.ps)
        return (None, None) + tuple(_gathered_slice(g, ctx.ps, d) for g, d in zip(reduced, ctx.dims))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    tensors = list(tensors)
    if _wants_grad(tensors):
        return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))
    return synchronize(grouped_allgather_async(tensors, name=name, process_set=process_set))


def _broadcast_async(tensor, output, root_rank, name, process_set, what):
    _check_tensor(tensor, what)
    _need_init(what + "()")
    psid = _check_process_set(process_set, what)
    n = _lib.hvd_size()
    if not isinstance(root_rank, int) or not 0 <= root_rank < n:
        raise ValueError("hvd.%s: root_rank %r is not a rank (0..%d)" % (what, root_rank, n - 1))
    if psid and root_rank not in process_set.ranks:
        raise ValueError("hvd.%s: root_rank %d is not in %r" % (what, root_rank, process_set))
    ename = _name("broadcast", name, psid)
    _claim(ename, what)
    buf = _engine_buffer(output, psid)
    if buf.data_ptr() != tensor.data_ptr():
        buf.copy_(tensor)
    dt = _ENGINE_DTYPE.get(buf.dtype)
    count = buf.numel()
    if dt is None:  # moved as bytes
        dt, count = _UINT8, buf.numel() * buf.element_size()
    _next(buf.shape, psid)
    if buf.is_cuda:
        h = _submit(_lib.hvd_broadcast_gpu_async, what, ename, buf.data_ptr(), count, dt, root_rank,
                    buf.get_device(), collectives.stream_of(buf), None, None)
    else:
        h = _submit(_lib.hvd_broadcast_async, what, ename, buf.data_ptr(), count, dt, root_rank, None, None)
    jh, joined, flag = _join_guard(ename, psid, "broadcast")

    def finish():
        joined()
        if buf is not output:
            output.copy_(buf)
        return output
    return _register([h, jh], finish, (tensor, output, buf, flag), (tuple(tensor.shape),))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, torch.empty_like(tensor, memory_format=torch.contiguous_format), root_rank,
                            name, process_set, "broadcast_async")


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, tensor, root_rank, name, process_set, "broadcast_async_")


class HorovodBroadcast(torch.autograd.Function):
    """broadcast with a gradient: Horovod's, the gradients averaged over the
    set and kept on the root rank (zeros elsewhere)."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.ps = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.ps)
        if rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    if _wants_grad([tensor]):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name=name, process_set=process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name=name, process_set=process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Rank r sends splits[j] rows (first dimension) to the j-th rank of the
    set and receives what every rank sends it, in rank order.  Returns a
    handle whose result is (output, received_splits).  One MPI_Alltoallv in
    the engine (hvd_alltoall_async): each rank moves only its own rows."""
    what = "alltoall"
    _check_tensor(tensor, what)
    _need_init(what + "()")
    psid = _check_process_set(process_set, what)
    n = _set_size(process_set)
    src = tensor if tensor.dim() else tensor.reshape(1)
    rows = src.shape[0]
    if splits is None:
        if rows % n:
            raise ValueError("hvd.alltoall: the first dimension (%d) is not divisible by the number of ranks (%d); "
                             "pass splits" % (rows, n))
        sp = [rows // n] * n
    else:
        if isinstance(splits, torch.Tensor) and splits.dtype != torch.int32:
            raise ValueError("hvd.alltoall: splits must be a tensor of 32-bit integers (torch.int32), got %s"
                             % splits.dtype)
        sp = [int(x) for x in (splits.tolist() if isinstance(splits, torch.Tensor) else splits)]
        if len(sp) != n or any(x < 0 for x in sp) or sum(sp) != rows:
            raise ValueError("hvd.alltoall: splits %r must be %d non-negative counts summing to the first "
                             "dimension (%d)" % (sp, n, rows))
    ename = _name("alltoall", name, psid)
    _claim(ename, what)
    host = src.detach().cpu().contiguous()  # the engine moves host memory; a CUDA tensor comes back to its device
    raw = _as_bytes(host).contiguous()
    row_elems = raw.shape[1:].numel()
    send, recv = (ctypes.c_int64 * n)(*sp), (ctypes.c_int64 * n)()
    _next(src.shape[1:], psid)
    h = _submit(_lib.hvd_alltoall_async, what, ename, raw.data_ptr(), send, row_elems, _ENGINE_DTYPE[raw.dtype], recv,
                None, None)
    jh, joined, flag = _join_guard(ename, psid, what)
    out = []

    def finish():
        joined()
        return _rows_back(out[0], host, src, tensor), torch.tensor(list(recv), dtype=torch.int32)
    return _register([(h, raw, "hvd.alltoall", out), jh], finish, (tensor, raw, send, recv, flag),
                     (tuple(src.shape[1:]),))


class HorovodAlltoall(torch.autograd.Function):
    """alltoall with a gradient: the gradients go back the way the rows came
    (an alltoall with the received splits)."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.ps, ctx.received = process_set, received
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *_received_grad):
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received, process_set=ctx.ps)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Horovod's alltoall: the output, and with `splits` also the received
    splits (differentiable)."""
    if _wants_grad([tensor]):
        return HorovodAlltoall.apply(tensor, splits, name, process_set)
    out, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return out if splits is None else (out, received)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Reduce `tensor` over the set's ranks and keep this rank's slice of the
    first dimension (the first rows % size ranks get one more row).  One
    MPI_Reduce_scatter in the engine (hvd_reducescatter_async)."""
    what = "reducescatter"
    if op not in (Average, Sum):  # Horovod's engine refuses it: HorovodInternalError (a RuntimeError)
        raise HorovodInternalError("hvd.reducescatter: reducescatter supports only op=hvd.Average and hvd.Sum, "
                                   "not %s" % _OP_NAMES.get(op, op))
    _check_tensor(tensor, what)
    if tensor.dim() == 0:
        raise ValueError("hvd.reducescatter: a tensor with at least one dimension is needed")
    _need_init(what + "()")
    psid = _check_process_set(process_set, what)
    dt = _reduce_dtype(tensor, what)
    op, divisor = _average_as_sum(op, process_set)
    ename = _name("reducescatter", name, psid)
    _claim(ename, what)
    n, me = _set_size(process_set), _set_rank(process_set)
    rows = tensor.shape[0]
    sp = _even_splits(rows, n)
    buf = tensor.detach().cpu().contiguous()  # read by the engine; host memory
    if prescale_factor != 1.0:
        buf = buf.clone() if buf.data_ptr() == tensor.data_ptr() else buf
        _scale(buf, prescale_factor)
    out = torch.empty((sp[me],) + tuple(tensor.shape[1:]), dtype=tensor.dtype)
    row_elems = tensor.shape[1:].numel()
    _next(tensor.shape[1:], psid)
    h = _submit(_lib.hvd_reducescatter_async, what, ename, buf.data_ptr(),
                out.data_ptr() if out.numel() else None, rows, row_elems, dt, _engine_op(op), None, None)
    jh, joined, flag = _join_guard(ename, psid, what)

    def finish():
        joined()
        _postscale(out, divisor, postscale_factor)
        return out.to(tensor.device) if tensor.is_cuda else out
    return _register([h, jh], finish, (tensor, buf, out, flag), (tuple(tensor.shape),))


def _reducescatter_grad(grad, op, process_set, pre, post):
    """Horovod's reducescatter backward: the gradient slices gathered back,
    times the set's size for Sum and times the scale factors."""
    if op == Sum:
        grad = grad * _set_size(process_set)
    if pre != 1.0:
        grad = grad * pre
    if post != 1.0:
        grad = grad * post
    return grad.contiguous()


class HorovodReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op, ctx.ps, ctx.pre, ctx.post = op, process_set, prescale_factor, postscale_factor
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        g = _reducescatter_grad(grad_output, ctx.op, ctx.ps, ctx.pre, ctx.post)
        return allgather(g, process_set=ctx.ps), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    compressed, cctx = compression.compress(tensor)
    if _wants_grad([compressed]):
        out = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor, postscale_factor)
    else:
        out = synchronize(reducescatter_async(compressed, name, op, process_set, prescale_factor,
                                              postscale_factor))
    return compression.decompress(out, cctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    return _grouped(tensors, name, lambda t, n: reducescatter_async(t, n, op, process_set, prescale_factor,
                                                                    postscale_factor), process_set)


class HorovodGroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op, ctx.ps, ctx.pre, ctx.post = op, process_set, prescale_factor, postscale_factor
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set, prescale_factor,
                                                             postscale_factor)))

    @staticmethod
    def backward(ctx, *grads):
        gs = [_reducescatter_grad(g, ctx.op, ctx.ps, ctx.pre, ctx.post) for g in grads]
        return (None, None, None, None, None) + tuple(grouped_allgather(gs, process_set=ctx.ps))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    pairs = [compression.compress(t) for t in tensors]
    sent = [c for c, _ in pairs]
    if _wants_grad(sent):
        outs = list(HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor, postscale_factor,
                                                      *sent))
    else:
        outs = synchronize(grouped_reducescatter_async(sent, name, op, process_set, prescale_factor,
                                                       postscale_factor))
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]
