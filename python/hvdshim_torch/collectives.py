"""Tensors through the engine: the collectives the adapter (and the served
horovod package) submits, every byte moved in libhvdshim.so.  Pending waits
for operations together; Batch hands many allreduces to the engine in one
call; allreduce, broadcast_bytes and the allgather pair submit one."""
import ctypes
import math
import struct

import torch

from . import capi, errors
from .errors import HvdShimError

HVD_DTYPES = {  # torch dtype -> hvdshim.h hvd_dtype_t
    torch.float32: capi.FLOAT32,
    torch.float64: capi.FLOAT64,
    torch.float16: capi.FLOAT16,
    torch.bfloat16: capi.BFLOAT16,
    torch.int32: capi.INT32,
    torch.int64: capi.INT64,
    torch.uint8: capi.UINT8,
    torch.int8: capi.INT8,
    torch.int16: capi.INT16,
}
GRAD_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)  # the gradients the engine averages


class Pending:
    """Operations in flight, waited for together."""

    def __init__(self):
        self.items = []  # (handle, what, on_done or None); keeps tensors alive
        self.refused = None  # an operation the engine refused because the ranks changed (its `what`)

    def add(self, handle, what, keep=None, on_done=None):
        self.items.append((handle, what, keep, on_done))

    def wait(self):
        """One call waits for all (hvd_wait_all); on_done runs once every
        operation succeeded, else the first failure is raised."""
        items, self.items = self.items, []
        refused, self.refused = self.refused, None
        if not items:
            if refused:
                raise errors.membership_error(refused)
            return
        handles = (ctypes.c_int64 * len(items))(*[h for h, _w, _k, _d in items])
        failed = ctypes.c_size_t(0)
        st = capi.LIB.hvd_wait_all(handles, len(items), ctypes.byref(failed))
        if st == 0 and refused:
            raise errors.membership_error(refused)
        if st == capi.ERR_MEMBERSHIP:  # a rank died (HVDSHIM_ELASTIC)
            raise errors.membership_error(items[failed.value][1])
        if st != 0:
            raise HvdShimError("hvdshim: %s: %s" % (items[failed.value][1], capi.last_error()))
        for _h, _what, _keep, on_done in items:
            if on_done is not None:
                on_done()

    def wait_with(self, other):
        """Wait for this and `other` in one call (`other` is left empty)."""
        self.items += other.items
        self.refused = self.refused or other.refused
        other.items, other.refused = [], None
        self.wait()

    def drain(self):
        """Forget what is here (every operation of it has ended: a change of
        ranks failed or completed it), releasing the handles."""
        items, self.items, self.refused = self.items, [], None
        if items:
            handles = (ctypes.c_int64 * len(items))(*[h for h, _w, _k, _d in items])
            capi.LIB.hvd_wait_all(handles, len(items), None)


def _item_layout():
    """hvd_allreduce_item as a struct (one pack_into a gradient, where setting
    the ctypes fields one by one costs three times as long), checked against
    capi.AllreduceItem's offsets ("0X" aligns without adding an X)."""
    codes = "PPNiiiP"
    got = [struct.calcsize("@%s0%s" % (codes[:i], c)) for i, c in enumerate(codes)]
    want = [getattr(capi.AllreduceItem, n).offset for n, _t in capi.AllreduceItem._fields_]
    fmt = struct.Struct("@" + codes)
    if got != want or fmt.size != ctypes.sizeof(capi.AllreduceItem):
        raise ImportError("hvdshim: hvd_allreduce_item's layout is not %s (offsets %s)" % (got, want))
    return fmt


_ITEM = _item_layout()
_NAMES = {}  # a name (bytes) -> (the bytes object kept, the address of its characters)


def _name_address(name):
    """The address of a name's characters (valid while the name is kept:
    the engine copies names it takes).  The names a step submits are few and
    the same from step to step; past 65536 new ones are not kept."""
    got = _NAMES.get(name)
    if got is None:
        got = (name, ctypes.cast(ctypes.c_char_p(name), ctypes.c_void_p).value)
        if len(_NAMES) < 65536:
            _NAMES[name] = got
    return got[1]


class Batch:
    """Allreduces queued here, then handed to the engine in one call
    (hvd_allreduce_batch_async: one wake-up of the engine thread)."""

    def __init__(self):
        self.items = []  # (name, tensor, op, pending, what, on_done, stream)
        self.bytes = 0
        self.arr = self.handles = None  # the ctypes arrays of the last flush, reused while large enough

    def _arrays(self, n):
        if self.arr is None or len(self.arr) < n:
            size = max(n, 2 * len(self.arr)) if self.arr is not None else max(n, 16)
            self.arr, self.handles = (capi.AllreduceItem * size)(), (ctypes.c_int64 * size)()
        return self.arr, self.handles

    def add(self, name, tensor, op, pending, what, on_done=None):
        """Queue an allreduce whose handle goes to `pending` at the flush."""
        stream = stream_of(tensor) if tensor.is_cuda else None  # the stream that produced it, now
        self.items.append((name, tensor, op, pending, what, on_done, stream))
        self.bytes += tensor.numel() * tensor.element_size()

    def forget(self, pending):
        """Take back every queued item bound for `pending`."""
        keep = [it for it in self.items if it[3] is not pending]
        self.items = keep
        self.bytes = sum(it[1].numel() * it[1].element_size() for it in keep)

    def drop(self, tensor):
        """Take back a queued item (not handed over yet)."""
        for i, it in enumerate(self.items):
            if it[1] is tensor:
                del self.items[i]
                self.bytes -= tensor.numel() * tensor.element_size()
                return

    def flush(self, waited=False):
        """Hand the queued items to the engine.  waited: the caller waits for
        them next (the end of backward), so the engine thread is not woken:
        the wait runs the engine's cycle itself where it can."""
        items, self.items, self.bytes = self.items, [], 0
        if not items:
            return
        n = len(items)
        arr, handles = self._arrays(n)
        for i, (name, t, op, _pending, _what, _done, stream) in enumerate(items):
            _ITEM.pack_into(arr, i * _ITEM.size, _name_address(name), t.data_ptr(), t.numel(), HVD_DTYPES[t.dtype],
                            op, t.get_device() if stream is not None else -1, stream or 0)
        st = capi.LIB.hvd_allreduce_batch_async_ex(arr, n, handles, capi.BATCH_CALLER_WAITS if waited else 0)
        bad = None
        for h, (_name, t, _op, pending, what, on_done, _stream) in zip(handles[:n], items):
            if h >= 0:
                pending.add(h, what, t, on_done)
            elif st == capi.ERR_MEMBERSHIP and errors.following:
                pending.refused = pending.refused or what  # raised by its wait (this may run in a gradient hook)
            elif bad is None:
                bad = what
        if st != capi.ERR_MEMBERSHIP or not errors.following:
            errors.check(st, bad or "submitting allreduces")


def _submit(fn, what, *args):
    h = ctypes.c_int64(-1)
    errors.check(fn(*args, ctypes.byref(h)), what)
    return h.value


def stream_of(tensor):
    """The CUDA stream that produced `tensor` (the current one on its device:
    the autograd thread's, in a gradient hook) and will consume the result."""
    return torch.cuda.current_stream(tensor.device).cuda_stream


def allreduce(name, tensor, op, pending, what, on_done=None):
    if tensor.is_cuda:  # the engine orders itself after this stream, and the stream after the result
        h = _submit(capi.LIB.hvd_allreduce_gpu_async, what, name, tensor.data_ptr(), tensor.numel(),
                    HVD_DTYPES[tensor.dtype], op, tensor.get_device(), stream_of(tensor), None, None)
    else:
        h = _submit(capi.LIB.hvd_allreduce_async, what, name, tensor.data_ptr(), tensor.numel(),
                    HVD_DTYPES[tensor.dtype], op, None, None)
    pending.add(h, what, tensor, on_done)


def allreduce_now(name, tensor, op, what):
    """One allreduce in place, waited for at once: the waiting thread runs
    the engine's cycle itself (HVD_BATCH_CALLER_WAITS) instead of waiting
    for its tick (what that saves a split-mode BatchNorm CNN:
    docs/BENCHMARKS.md, "BatchNorm over ranks")."""
    pending = Pending()
    _NOW.add(name, tensor, op, pending, what)
    _NOW.flush(waited=True)  # (handed over here: the batch is empty again for the next call)
    pending.wait()


_NOW = Batch()  # allreduce_now's, its ctypes arrays reused


def broadcast_bytes(name, tensor, pending, what):
    """Broadcast a contiguous tensor as raw bytes from rank 0, or from the
    lowest rank still running when rank 0 has finished (joined)."""
    nbytes = tensor.numel() * tensor.element_size()
    if tensor.is_cuda:
        h = _submit(capi.LIB.hvd_broadcast_gpu_async, what, name, tensor.data_ptr(), nbytes, capi.UINT8,
                    capi.ROOT_FIRST_ACTIVE, tensor.get_device(), stream_of(tensor), None, None)
    else:
        h = _submit(capi.LIB.hvd_broadcast_async, what, name, tensor.data_ptr(), nbytes, capi.UINT8,
                    capi.ROOT_FIRST_ACTIVE, None, None)
    pending.add(h, what, tensor)


def allgather_start(name, tensor, what):
    """tensor: contiguous [rows, ...]; returns a handle."""
    rows = tensor.shape[0] if tensor.dim() > 0 else 1
    row_elems = tensor.numel() // rows if rows else int(math.prod(tensor.shape[1:]))
    return _submit(capi.LIB.hvd_allgather_async, what, name, tensor.data_ptr(), rows, row_elems,
                   HVD_DTYPES[tensor.dtype], None, None)


def allgather_finish(handle, like, what):
    """Wait for an allgather; returns a new tensor [total_rows, *like.shape[1:]]."""
    out = ctypes.c_void_p()
    rows = ctypes.c_size_t()
    st = capi.LIB.hvd_allgather_wait(handle, -1.0, ctypes.byref(out), ctypes.byref(rows))
    if st == capi.ERR_MEMBERSHIP:
        raise errors.membership_error(what)
    if st != 0:
        raise HvdShimError("hvdshim: %s: %s" % (what, capi.last_error()))
    try:
        result = torch.empty((rows.value,) + tuple(like.shape[1:]), dtype=like.dtype)
        if result.numel():
            ctypes.memmove(result.data_ptr(), out.value, result.numel() * result.element_size())
    finally:
        capi.LIB.hvd_free(out)
    return result
