"""libhvdshim.so through ctypes: the library's functions, logging, settings,
and the collectives the adapter uses (every byte moves in C)."""
import ctypes
import importlib.util
import math
import sys
import torch



class HvdShimError(RuntimeError):
    """Raised on every rank when the job cannot go on correctly."""


class _MembershipChanged(HvdShimError):
    """An operation failed because ranks died (HVDSHIM_ELASTIC, the adapter
    following the change): the caller takes the change in (elastic.recover)
    and submits again over the ranks left."""


_HVD_DTYPES = {
    torch.float32: 0,
    torch.float64: 1,
    torch.float16: 2,
    torch.bfloat16: 3,
    torch.int32: 4,
    torch.int64: 5,
    torch.uint8: 6,
    torch.int8: 7,
    torch.int16: 8,
}
_GRAD_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_UINT8, _INT64 = 6, 5
_SUM, _AVG, _MAX = 0, 1, 3
_ROOT_FIRST_ACTIVE = -1  # hvdshim.h HVD_ROOT_FIRST_ACTIVE
_ERR_TIMEOUT = 4
_CALLER_WAITS = 1  # hvdshim.h HVD_BATCH_CALLER_WAITS


class _AllreduceItem(ctypes.Structure):
    """hvdshim.h hvd_allreduce_item."""
    _fields_ = [("name", ctypes.c_char_p), ("buf", ctypes.c_void_p), ("count", ctypes.c_size_t),
                ("dtype", ctypes.c_int), ("op", ctypes.c_int), ("device", ctypes.c_int), ("stream", ctypes.c_void_p)]


def _load_library():
    lib = ctypes.CDLL(None)  # the preloaded libhvdshim.so is in the global scope
    c_handle = ctypes.c_int64
    sigs = {
        "hvd_init": (ctypes.c_int, []),
        "hvd_role_now": (ctypes.c_char_p, []),
        "hvd_config_value": (ctypes.c_char_p, [ctypes.c_char_p]),
        "hvd_launch_info": (None, [ctypes.POINTER(ctypes.c_int)] * 4),
        "hvd_log_message": (None, [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p]),
        "hvd_abort_job": (None, [ctypes.c_char_p]),
        "hvd_last_error": (ctypes.c_char_p, []),
        "hvd_allreduce_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                               ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                               ctypes.POINTER(c_handle)]),
        "hvd_broadcast_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                               ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                               ctypes.POINTER(c_handle)]),
        "hvd_allgather_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                               ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                               ctypes.POINTER(c_handle)]),
        "hvd_allreduce_gpu_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                   ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                                   ctypes.c_void_p, ctypes.POINTER(c_handle)]),
        "hvd_broadcast_gpu_async": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                   ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                                   ctypes.c_void_p, ctypes.POINTER(c_handle)]),
        "hvd_allreduce_batch_async_ex": (ctypes.c_int, [ctypes.POINTER(_AllreduceItem), ctypes.c_size_t,
                                                        ctypes.POINTER(c_handle), ctypes.c_uint]),
        "hvd_wait": (ctypes.c_int, [c_handle, ctypes.c_double]),
        "hvd_wait_all": (ctypes.c_int, [ctypes.POINTER(c_handle), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
        "hvd_allgather_wait": (ctypes.c_int, [c_handle, ctypes.c_double, ctypes.POINTER(ctypes.c_void_p),
                                              ctypes.POINTER(ctypes.c_size_t)]),
        "hvd_free": (None, [ctypes.c_void_p]),
        "hvd_step_mark": (None, [ctypes.c_int64]),
        "hvd_step_count_set": (None, [ctypes.c_uint64]),
        "hvd_overlay_off": (None, []),
        "hvd_overlay_promote": (None, []),
        "hvd_overlay_resume": (None, []),
        "hvd_elastic_follow": (None, []),
        "hvd_elastic_ack": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)] * 3 + [ctypes.c_char_p, ctypes.c_size_t]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)  # AttributeError: not preloaded, caught by install()
        fn.restype = res
        fn.argtypes = args
    return lib


_lib = None


def _log(level, msg):
    _lib.hvd_log_message(level, b"torch", msg.encode("utf-8", "replace"))


def _error(msg):
    _log(0, msg)


def _warn(msg):
    _log(1, msg)


def _info(msg):
    _log(2, msg)


def _debug(msg):
    _log(3, msg)


def _is_number(v):
    """A plain int or float (a hyperparameter's value), not a bool flag."""
    return type(v) is float or (isinstance(v, (int, float)) and not isinstance(v, bool))  # (floats: most, first)


def _setting(name):
    v = _lib.hvd_config_value(name.encode())
    return v.decode() if v is not None else None


_HVD_ERR_MEMBERSHIP = 7  # hvdshim.h
_following = [False]  # hvd_elastic_follow called: a change of ranks raises _MembershipChanged


def _membership_error(what):
    if _following[0]:
        return _MembershipChanged("hvdshim: %s" % _died(what))
    return HvdShimError("hvdshim: %s; this script does not follow changes of ranks (HVDSHIM_ELASTIC is off): "
                        "ending the job" % _died(what))


def _check(status, what):
    if status == _HVD_ERR_MEMBERSHIP:
        raise _membership_error(what)
    if status != 0:
        detail = (_lib.hvd_last_error() or b"").decode("utf-8", "replace")
        raise HvdShimError("hvdshim: %s failed: %s" % (what, detail or "status %d" % status))


def _died(what):
    """The engine's line for an operation the ranks' change failed, cut to
    what happened: "rank(s) 1 died (...) while averaging ..."."""
    err = (_lib.hvd_last_error() or b"").decode("utf-8", "replace")
    cause = err.split("cannot complete: ", 1)[-1]
    cause = cause.split("; the job goes on")[0]
    return "%s while %s" % (cause, what)


class _Pending:
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
                raise _membership_error(refused)
            return
        handles = (ctypes.c_int64 * len(items))(*[h for h, _w, _k, _d in items])
        failed = ctypes.c_size_t(0)
        st = _lib.hvd_wait_all(handles, len(items), ctypes.byref(failed))
        if st == 0 and refused:
            raise _membership_error(refused)
        if st == _HVD_ERR_MEMBERSHIP:  # a rank died (HVDSHIM_ELASTIC)
            raise _membership_error(items[failed.value][1])
        if st != 0:
            raise HvdShimError("hvdshim: %s: %s" % (items[failed.value][1],
                                                    (_lib.hvd_last_error() or b"").decode("utf-8", "replace")))
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
            _lib.hvd_wait_all(handles, len(items), None)


class _Batch:
    """Allreduces queued here, then handed to the engine in one call
    (hvd_allreduce_batch_async: one wake-up of the engine thread)."""

    def __init__(self):
        self.items = []  # (name, tensor, op, pending, what, on_done, stream)
        self.bytes = 0
        self.arr = self.handles = None  # the ctypes arrays of the last flush, reused while large enough

    def _arrays(self, n):
        if self.arr is None or len(self.arr) < n:
            size = max(n, 2 * len(self.arr)) if self.arr is not None else max(n, 16)
            self.arr, self.handles = (_AllreduceItem * size)(), (ctypes.c_int64 * size)()
        return self.arr, self.handles

    def add(self, name, tensor, op, pending, what, on_done=None):
        """Queue an allreduce whose handle goes to `pending` at the flush."""
        stream = _stream_of(tensor) if tensor.is_cuda else None  # the stream that produced it, now
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
        for it, (name, t, op, _pending, _what, _done, stream) in zip(arr, items):
            it.name, it.buf, it.count, it.dtype, it.op = name, t.data_ptr(), t.numel(), _HVD_DTYPES[t.dtype], op
            it.device, it.stream = (t.get_device(), stream) if t.is_cuda else (-1, None)
        st = _lib.hvd_allreduce_batch_async_ex(arr, n, handles, _CALLER_WAITS if waited else 0)
        bad = None
        for h, (_name, t, _op, pending, what, on_done, _stream) in zip(handles[:n], items):
            if h >= 0:
                pending.add(h, what, t, on_done)
            elif st == _HVD_ERR_MEMBERSHIP and _following[0]:
                pending.refused = pending.refused or what  # raised by its wait (this may run in a gradient hook)
            elif bad is None:
                bad = what
        if st != _HVD_ERR_MEMBERSHIP or not _following[0]:
            _check(st, bad or "submitting allreduces")


def _submit(fn, what, *args):
    h = ctypes.c_int64(-1)
    _check(fn(*args, ctypes.byref(h)), what)
    return h.value


def _stream_of(tensor):
    """The CUDA stream that produced `tensor` (the current one on its device:
    the autograd thread's, in a gradient hook) and will consume the result."""
    return torch.cuda.current_stream(tensor.device).cuda_stream


def _allreduce(name, tensor, op, pending, what, on_done=None):
    if tensor.is_cuda:  # the engine orders itself after this stream, and the stream after the result
        h = _submit(_lib.hvd_allreduce_gpu_async, what, name, tensor.data_ptr(), tensor.numel(),
                    _HVD_DTYPES[tensor.dtype], op, tensor.get_device(), _stream_of(tensor), None, None)
    else:
        h = _submit(_lib.hvd_allreduce_async, what, name, tensor.data_ptr(), tensor.numel(),
                    _HVD_DTYPES[tensor.dtype], op, None, None)
    pending.add(h, what, tensor, on_done)


def _allreduce_now(name, tensor, op, what):
    """One allreduce in place, waited for at once: the waiting thread runs
    the engine's cycle itself (HVD_BATCH_CALLER_WAITS) instead of waiting
    for its tick (a split-mode BatchNorm CNN: 1.29x slower through the
    tick, 1.09x this way)."""
    pending = _Pending()
    _NOW.add(name, tensor, op, pending, what)
    _NOW.flush(waited=True)  # (handed over here: the batch is empty again for the next call)
    pending.wait()


_NOW = _Batch()  # _allreduce_now's, its ctypes arrays reused


def _broadcast_bytes(name, tensor, pending, what):
    """Broadcast a contiguous tensor as raw bytes from rank 0, or from the
    lowest rank still running when rank 0 has finished (joined)."""
    nbytes = tensor.numel() * tensor.element_size()
    if tensor.is_cuda:
        h = _submit(_lib.hvd_broadcast_gpu_async, what, name, tensor.data_ptr(), nbytes, _UINT8, _ROOT_FIRST_ACTIVE,
                    tensor.get_device(), _stream_of(tensor), None, None)
    else:
        h = _submit(_lib.hvd_broadcast_async, what, name, tensor.data_ptr(), nbytes, _UINT8, _ROOT_FIRST_ACTIVE,
                    None, None)
    pending.add(h, what, tensor)


def _allgather_start(name, tensor, what):
    """tensor: contiguous [rows, ...]; returns a handle."""
    rows = tensor.shape[0] if tensor.dim() > 0 else 1
    row_elems = tensor.numel() // rows if rows else int(math.prod(tensor.shape[1:]))
    return _submit(_lib.hvd_allgather_async, what, name, tensor.data_ptr(), rows, row_elems,
                   _HVD_DTYPES[tensor.dtype], None, None)


def _allgather_finish(handle, like, what):
    """Wait for an allgather; returns a new tensor [total_rows, *like.shape[1:]]."""
    out = ctypes.c_void_p()
    rows = ctypes.c_size_t()
    st = _lib.hvd_allgather_wait(handle, -1.0, ctypes.byref(out), ctypes.byref(rows))
    if st == _HVD_ERR_MEMBERSHIP:
        raise _membership_error(what)
    if st != 0:
        raise HvdShimError("hvdshim: %s: %s" % (what, (_lib.hvd_last_error() or b"").decode("utf-8", "replace")))
    try:
        result = torch.empty((rows.value,) + tuple(like.shape[1:]), dtype=like.dtype)
        if result.numel():
            ctypes.memmove(result.data_ptr(), out.value, result.numel() * result.element_size())
    finally:
        _lib.hvd_free(out)
    return result


def _wrap(owner, name, make):
    orig = getattr(owner, name)
    wrapped = make(orig)
    wrapped.__wrapped__ = orig
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(wrapped, attr, getattr(orig, attr))
        except (AttributeError, TypeError):
            pass
    setattr(owner, name, wrapped)
    return orig


def _dynamo_disabled(fn):
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    if disable is None:
        disable = getattr(getattr(torch, "_dynamo", None), "disable", None)
    return disable(fn) if disable is not None else fn


_UNTRACED = []  # (fn, cell) of the hooks made before torch._dynamo was imported


class _AfterImport:
    """Runs fn(module) once the module `name` has run (a post-import hook
    on its loader), then leaves sys.meta_path."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then(module):
            exec_module(module)
            self.fn(module)
        loader.exec_module = exec_then
        return spec


def after_import(name, fn):
    """fn(module) once the script has imported `name` (now, if it has)."""
    if name in sys.modules:
        fn(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, fn))


def _mark_untraced(_module):
    for fn, cell in _UNTRACED:
        cell[0] = _dynamo_disabled(fn)


def _untraced(fn):
    """torch.compile must not trace the adapter's hooks (dynamo fails on their
    module bookkeeping): they run eagerly, outside the compiled graph.  Marking
    them so imports torch._dynamo (and sympy: 1.5 s of every rank's start on
    torch 2.14), so a script that never compiles never pays it: until it
    imports torch._dynamo the hook calls fn through a cell that is then
    pointed at the marked fn."""
    if not hasattr(torch, "compile"):  # torch 1.x: nothing traces Python
        return fn
    if "torch._dynamo" in sys.modules:
        return _dynamo_disabled(fn)
    cell = [fn]

    def untraced(*args, **kwargs):
        return cell[0](*args, **kwargs)
    if not _UNTRACED:  # the first: one watcher for them all (torch.compile imports it at its first call)
        after_import("torch._dynamo", _mark_untraced)
    _UNTRACED.append((fn, cell))
    return untraced
