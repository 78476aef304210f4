"""Horovod's PyTorch collectives on hvdshim's engine.

Every operation is one request to libhvdshim.so (through the adapter's
ctypes layer, hvdshim_torch.lib): negotiated by name across ranks, fused,
reduced by MPI (or NCCL for CUDA tensors).  A handle names an operation in
flight; synchronize() waits for it and returns its output.  Scaling
(prescale/postscale factors) and compression are arithmetic on the tensor
before and after; no data moves in Python."""
import ctypes
import itertools
import os
import sys
import threading
import time
import warnings
import weakref

import torch

from horovod.common.exceptions import HorovodInternalError
from horovod.common import process_sets as _process_sets
from horovod.common.process_sets import _add as _add_process_set, _check as _check_process_set, global_process_set
from horovod.torch.compression import Compression


def _adapter_lib():
    """hvdshim's ctypes layer (the adapter's lib module), loaded from beside
    this package when `import torch` has not already loaded it."""
    mod = sys.modules.get("hvdshim_torch.lib")
    if mod is None:
        import importlib.util
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        pkg = os.path.join(here, "hvdshim_torch")
        if "hvdshim_torch" not in sys.modules:
            spec = importlib.util.spec_from_file_location("hvdshim_torch", os.path.join(pkg, "__init__.py"),
                                                          submodule_search_locations=[pkg])
            parent = importlib.util.module_from_spec(spec)
            sys.modules["hvdshim_torch"] = parent
            spec.loader.exec_module(parent)
        import importlib
        mod = importlib.import_module("hvdshim_torch.lib")
    if mod._lib is None:
        mod._lib = mod._load_library()
    return mod


_L = _adapter_lib()
_lib = _L._lib
for _name, _res, _args in (("hvd_rank", ctypes.c_int, []), ("hvd_size", ctypes.c_int, []),
                           ("hvd_local_rank", ctypes.c_int, []), ("hvd_local_size", ctypes.c_int, []),
                           ("hvd_initialized", ctypes.c_int, []), ("hvd_shutdown", None, []),
                           ("hvd_barrier", ctypes.c_int, [ctypes.c_double]),
                           ("hvd_join", ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]),
                           ("hvd_next_shape", None, [ctypes.POINTER(ctypes.c_int64), ctypes.c_int]),
                           ("hvd_next_process_set", None, [ctypes.c_int]),
                           ("hvd_process_set_add", ctypes.c_int,
                            [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.POINTER(ctypes.c_int)]),
                           ("hvd_process_set_remove", ctypes.c_int, [ctypes.c_int]),
                           ("hvd_reducescatter_async", ctypes.c_int,
                            [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                             ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_int64)]),
                           ("hvd_alltoall_async", ctypes.c_int,
                            [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t,
                             ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_int64)]),
                           ("hvd_timeline_start", ctypes.c_int, [ctypes.c_char_p, ctypes.c_int]),
                           ("hvd_timeline_stop", ctypes.c_int, []),
                           ("hvd_test", ctypes.c_int, [ctypes.c_int64, ctypes.POINTER(ctypes.c_int)]),
                           ("hvd_gpu_status", ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t])):
    _fn = getattr(_lib, _name)
    _fn.restype, _fn.argtypes = _res, _args

# ------------------------------------------------------------------ reduction ops
# Horovod's values for its ops; Adasum is refused.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_ENGINE_OP = {Sum: 0, Average: 1, Min: 2, Max: 3, Product: 4}
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}

_ENGINE_DTYPE = _L._HVD_DTYPES
_UINT8 = 6


def _engine_op(op):
    if op == Adasum:
        raise NotImplementedError("Adasum is not served by hvdshim: use op=hvd.Average (the default) or hvd.Sum")
    if op not in _ENGINE_OP:
        raise ValueError("unknown reduction op %r (hvd.Average, hvd.Sum, hvd.Min, hvd.Max or hvd.Product)" % (op,))
    return _ENGINE_OP[op]


def _resolve_op(op, average, default=Average):
    if average is not None:
        if op is not None:
            raise ValueError("the op and average arguments are mutually exclusive")
        warnings.warn("the average argument is deprecated in Horovod: use op=hvd.Average or op=hvd.Sum",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return default if op is None else op


# ------------------------------------------------------------------ basics
_state = {"init": False, "cross": None, "elastic": False}
_lock = threading.Lock()
_at_init = []  # called once the engine has started (horovod.torch.elastic.restart)


def init(comm=None, process_sets=None):
    """Start hvdshim's engine (MPI, background thread); again is a no-op."""
    if comm is not None and comm != [] and not _is_world(comm):
        raise NotImplementedError("hvd.init(comm=...): hvdshim runs on every rank of the job (MPI_COMM_WORLD)")
    from horovod.common.process_sets import ProcessSet
    if isinstance(process_sets, str):
        if process_sets != "dynamic":
            raise ValueError("hvd.init: process_sets is a list of ProcessSet, or 'dynamic'")
        process_sets = None  # hvdshim adds sets at any time
    static = [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in (process_sets or [])]
    with _lock:
        if _state["init"]:
            return
        st = _lib.hvd_init()
        if st != 0:
            raise HorovodInternalError("hvd.init failed: %s" % _last_error())
        if _L._setting("HVDSHIM_ELASTIC") == "1":  # ranks may die: this package takes each change in (_take_change)
            _lib.hvd_elastic_follow()
            _L._following[0] = True
            _state["elastic"] = True
        _state["init"] = True
        global_process_set._global(_lib.hvd_size())
    _cross_info()
    for fn in _at_init:
        fn()
    for ps in static:  # Horovod's static process sets: added on every rank, in the order given
        if ps.process_set_id is None:
            _add_process_set(ps, "init")


def _take_change():
    """hvd.elastic.run, after a HorovodInternalError, on every rank at the
    same point (the engine completes each operation on every rank or fails
    it on every one): every operation this rank has in flight is finished
    (failed by the change, or done before it) and forgotten, with the
    DistributedOptimizers' reductions in flight and the numbering of unnamed
    operations, as Horovod's shutdown() and init() forget them; then, in an
    elastic job (HVDSHIM_ELASTIC), the change of ranks is taken in: this
    rank's place among the survivors, the global set's size, process sets
    other than the global one removed (the engine ended them).  Returns the
    changes taken in (0: none)."""
    deadline = time.monotonic() + 10  # (a failed one returns at once; bounded either way)
    for op in list(_ops.values()):
        for h in op.handles:
            eh = h[0] if isinstance(h, tuple) else h
            if isinstance(eh, int) and eh >= 0:
                _lib.hvd_wait(eh, max(0.0, deadline - time.monotonic()))
    _ops.clear()
    _inflight.clear()
    _name_of.clear()
    _auto_names.clear()
    for opt in list(_optimizers):
        opt._hvdshim_forget()
    if not _state["elastic"]:
        return 0
    r, n, lost0 = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    what = ctypes.create_string_buffer(1024)
    changes = _lib.hvd_elastic_ack(ctypes.byref(r), ctypes.byref(n), ctypes.byref(lost0), what,
                                      ctypes.sizeof(what))
    if changes <= 0:
        return 0
    # the engine thread counts the change (what ack returns) before it has
    # rebuilt itself over the survivors: the ranks' operations wait for that
    deadline = time.monotonic() + 60
    while (_lib.hvd_rank(), _lib.hvd_size()) != (r.value, n.value):
        if time.monotonic() > deadline:
            raise HorovodInternalError("hvdshim: the engine has not rebuilt itself over the %d surviving rank(s) after "
                                       "60 s (%s)" % (n.value, what.value.decode("utf-8", "replace")))
        time.sleep(0.001)
    before = global_process_set.size()
    global_process_set._global(n.value)
    _process_sets._retire_all()
    _cross_info()
    if r.value == 0:
        _L._warn("%s: hvd.elastic.run restores the state committed last and calls the function again over %d "
                 "rank(s) (was %d)" % (what.value.decode("utf-8", "replace").split("; the job goes on")[0], n.value,
                                       before))
    return changes


def _is_world(comm):
    try:
        from mpi4py import MPI
        return comm == MPI.COMM_WORLD
    except ImportError:
        return False


def shutdown():
    """Stop this rank's engine (the job's collectives end here for this rank).
    A later init() cannot restart it."""
    if _state["init"]:
        _lib.hvd_shutdown()


def is_initialized():
    return bool(_state["init"]) and bool(_lib.hvd_initialized())


def _need_init(what):
    if not _state["init"]:
        raise ValueError("Horovod has not been initialized; use hvd.init() (called %s)" % what)


def size():
    _need_init("size()")
    return _lib.hvd_size()


def rank():
    _need_init("rank()")
    return _lib.hvd_rank()


def local_size():
    _need_init("local_size()")
    return _lib.hvd_local_size()


def local_rank():
    _need_init("local_rank()")
    return _lib.hvd_local_rank()


class _SetEngine:
    """What horovod.common.process_sets needs from the engine (it imports no
    framework module: the dependency runs one way, torch -> common)."""

    @staticmethod
    def need_init(what):
        _need_init(what)

    @staticmethod
    def rank():
        return rank()

    @staticmethod
    def add(ranks, what):
        n = len(ranks)
        new_id = ctypes.c_int(-1)
        st = _lib.hvd_process_set_add((ctypes.c_int * max(n, 1))(*ranks), n, ctypes.byref(new_id))
        if st != 0:
            raise (ValueError if st in (1, 2) else HorovodInternalError)("hvd.%s: %s" % (what, _last_error()))
        return new_id.value

    @staticmethod
    def remove(set_id, what):
        if _lib.hvd_process_set_remove(set_id) != 0:
            raise HorovodInternalError("hvd.%s: %s" % (what, _last_error()))


_process_sets._setup(_SetEngine)


def _cross_info():
    """cross_rank/cross_size as Horovod defines them: the ranks with this
    rank's local rank, one per host; homogeneous when every host runs as
    many ranks.  One allgather of (local rank, local size) at init."""
    mine = torch.tensor([[_lib.hvd_local_rank(), _lib.hvd_local_size()]], dtype=torch.int64)
    table = synchronize(allgather_async(mine, name="hvdshim.horovod.cross_info"))
    me = _lib.hvd_rank()
    same = [r for r in range(table.shape[0]) if table[r, 0] == table[me, 0]]
    _state["cross"] = (same.index(me), len(same), bool((table[:, 1] == table[0, 1]).all()))


def cross_rank():
    _need_init("cross_rank()")
    return _state["cross"][0]


def cross_size():
    _need_init("cross_size()")
    return _state["cross"][1]


def is_homogeneous():
    _need_init("is_homogeneous()")
    return _state["cross"][2]


def mpi_threads_supported():
    """The engine asks MPI for MPI_THREAD_MULTIPLE; Open MPI and MPICH give it."""
    _need_init("mpi_threads_supported()")
    return True


def mpi_enabled():
    return True


def mpi_built():
    return True


def gloo_enabled():
    return False


def gloo_built():
    return False


def _nccl_version():
    if not torch.cuda.is_available():
        return 0
    buf = ctypes.create_string_buffer(1024)
    if not _lib.hvd_gpu_status(buf, len(buf)):
        return 0
    try:
        v = torch.cuda.nccl.version()
        return v[0] * 1000 + v[1] * 100 + v[2] if isinstance(v, tuple) else int(v)
    except Exception:
        return 1


def nccl_built():
    """The NCCL version as Horovod encodes it (2.28.9 -> 2289... as major*1000
    + minor*100 + patch), when CUDA tensors can be reduced here; 0 otherwise."""
    return _nccl_version()


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return bool(torch.cuda.is_available() and _nccl_version())


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Write the timeline (a Chrome trace, by rank 0) into file_path from now
    on, replacing the current one if any."""
    _need_init("start_timeline()")
    if _lib.hvd_timeline_start(os.fsencode(os.fspath(file_path)), 1 if mark_cycles else 0) != 0:
        raise ValueError("hvd.start_timeline: %s" % _last_error())


def stop_timeline():
    """Close the timeline file (valid JSON)."""
    _need_init("stop_timeline()")
    if _lib.hvd_timeline_stop() != 0:
        raise HorovodInternalError("hvd.stop_timeline: %s" % _last_error())


# ------------------------------------------------------------------ handles
class _Op:
    __slots__ = ("handles", "finish", "keep", "shapes")

    def __init__(self, handles, finish, keep, shapes=()):
        self.handles = handles  # engine handles, waited in order
        self.finish = finish    # () -> output, run once every handle completed
        self.keep = keep        # tensors the engine reads or writes, alive until then
        self.shapes = shapes    # this rank's tensor shapes, for a shape mismatch's message


_ops = {}
_next_handle = itertools.count(1)
_auto_names = {}
_optimizers = weakref.WeakSet()  # the DistributedOptimizers made (their reductions in flight: _take_change)


def _last_error():
    return (_lib.hvd_last_error() or b"").decode("utf-8", "replace")


def _name(kind, name, psid=0):
    """Engine name of an operation: Horovod's '<kind>.<name>', or
    '<kind>.noname.<n>' numbered per kind (the same on every rank that
    issues its unnamed operations in the same order); on a process set other
    than the global one, '<kind>.ps<id>...' (numbered per set: only its
    members count)."""
    if psid:
        kind = "%s.ps%d" % (kind, psid)
    if name is None or name == "":
        n = _auto_names[kind] = _auto_names.get(kind, 0) + 1
        return ("%s.noname.%d" % (kind, n)).encode()
    return ("%s.%s" % (kind, name)).encode()


def _unnumber(ename):
    """An unnamed operation refused because a rank has joined never happened
    on the joined ranks, whose count did not move: give its number back (when
    it is still its kind's last), so that every rank names the next one alike."""
    kind, sep, n = ename.decode("utf-8", "replace").rpartition(".noname.")
    if sep and n.isdigit() and _auto_names.get(kind) == int(n):
        _auto_names[kind] = int(n) - 1


# Names in flight on this rank: engine name -> engine handle.  As in Horovod,
# a second operation under a name this rank has in flight is refused at once
# (ValueError) on the rank that submits it; the engine's own check would
# only fail the second handle later, in synchronize().  A name is in flight
# until its handle is synchronized, or polled done: asking the engine
# whether it completed would make the refusal depend on timing (a peer that
# was waiting completes it at once).
_inflight = {}
_name_of = {}  # engine handle -> engine name


def _claim(ename, what):
    """Refuse a name this rank has in flight."""
    if ename in _inflight:
        raise ValueError("hvd.%s: duplicate name: '%s' is already in flight on this rank; synchronize() it before "
                         "submitting that name again" % (what, ename.decode("utf-8", "replace")))


def _track(ename, h):
    _inflight[ename] = h
    _name_of[h] = ename


def _release(h):
    ename = _name_of.pop(h, None)
    if ename is not None and _inflight.get(ename) == h:
        del _inflight[ename]


def _submit(fn, what, ename, *args):
    _claim(ename, what)
    h = ctypes.c_int64(-1)
    st = fn(ename, *args, ctypes.byref(h))
    if st != 0:
        msg = _last_error()
        if st == 1:  # HVD_ERR_INVALID: this call's arguments
            raise ValueError("hvd.%s: %s" % (what, msg))
        raise HorovodInternalError("hvd.%s: %s" % (what, msg))
    _track(ename, h.value)
    return h.value


def _register(handles, finish, keep, shapes=()):
    h = next(_next_handle)
    _ops[h] = _Op(handles, finish, keep, shapes)
    return h


def _next(dims, psid):
    """The next submission's shape (compared across ranks) and process set."""
    dims = [int(d) for d in dims]
    _lib.hvd_next_shape((ctypes.c_int64 * max(len(dims), 1))(*dims), len(dims))
    _lib.hvd_next_process_set(psid)


def poll(handle):
    """True when the operation has completed (synchronize() will not block)."""
    op = _ops.get(handle)
    if op is None:
        raise ValueError("hvd.poll: unknown handle %r (already synchronized?)" % (handle,))
    done = ctypes.c_int(0)
    for h in op.handles:
        eh = h[0] if isinstance(h, tuple) else h
        if _lib.hvd_test(eh, ctypes.byref(done)) != 0:
            return True  # failed: synchronize() raises at once
        if not done.value:
            return False
    for h in op.handles:  # done: its names may be used again, as after synchronize()
        _release(h[0] if isinstance(h, tuple) else h)
    return True


def synchronize(handle):
    """Wait for an operation and return its output.  A callable handle (from
    sparse_allreduce_async) is called."""
    if callable(handle):
        return handle()
    op = _ops.pop(handle, None)
    if op is None:
        raise ValueError("hvd.synchronize: unknown handle %r (already synchronized?)" % (handle,))
    first_error = None
    for h in op.handles:
        if isinstance(h, tuple):  # an allgather: (handle, like, what, out list)
            gh, like, what, out = h
            try:
                out.append(_L._allgather_finish(gh, like, what))
            except Exception as e:
                first_error = first_error or str(e)
            _release(gh)
            continue
        if _lib.hvd_wait(h, -1.0) != 0 and first_error is None:
            first_error = _last_error()
        _release(h)
    if first_error:
        if "disagree on the shape" in first_error and op.shapes:
            first_error += " (this rank: %s)" % ", ".join(str(list(s)) for s in op.shapes)
        raise HorovodInternalError(first_error)
    return op.finish()


def join(device=-1):
    """This rank has no more batches: until every rank has joined, it takes
    part in the others' allreduces without data (it adds zeros: an Average
    still divides by the whole size, as in Horovod); an allgather, broadcast,
    alltoall or reducescatter meanwhile raises on the ranks that submit it.
    Returns the last rank to join; then every rank goes on."""
    _need_init("join()")
    last = ctypes.c_int(-1)
    if _lib.hvd_join(ctypes.byref(last)) != 0:
        raise HorovodInternalError("hvd.join: %s" % _last_error())
    return last.value


def barrier(process_set=global_process_set):
    _need_init("barrier()")
    _lib.hvd_next_process_set(_check_process_set(process_set, "barrier"))
    if _lib.hvd_barrier(-1.0) != 0:
        raise HorovodInternalError("hvd.barrier: %s" % _last_error())


# ------------------------------------------------------------------ tensors
def _check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("hvd.%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError("hvd.%s: tensors on %s are not supported (CPU and CUDA are)" % (what, tensor.device))
    if tensor.is_sparse:
        raise ValueError("hvd.%s: sparse tensors are not supported; use sparse_as_dense or allgather its "
                         "indices and values" % what)


def _reduce_dtype(tensor, what):
    dt = _ENGINE_DTYPE.get(tensor.dtype)
    if dt is None:
        raise ValueError("hvd.%s: tensor type %s is not supported (uint8, int8, int16, int32, int64, float16, "
                         "bfloat16, float32, float64)" % (what, str(tensor.dtype).replace("torch.", "")))
    return dt


def _scale(tensor, factor):
    """Horovod's pre/post scaling, in Horovod's arithmetic: float32 and
    float64 in their own type, float16 and bfloat16 on a CPU in float32 (one
    rounding), integers in float64 truncated toward zero."""
    if factor == 1.0:
        return
    if tensor.dtype in (torch.float16, torch.bfloat16) and not tensor.is_cuda:
        tensor.copy_(tensor.float().mul_(factor))
    elif tensor.dtype.is_floating_point:
        tensor.mul_(factor)
    else:
        tensor.copy_((tensor.double() * factor).to(tensor.dtype))


def _set_size(process_set):
    return (process_set or global_process_set).size()


def _set_rank(process_set):
    """This rank's index in the set (its place in gathered and scattered rows)."""
    return (process_set or global_process_set).rank()


def _average_as_sum(op, process_set):
    """Average runs as a Sum divided afterwards by the size of the process
    set, as Horovod's does: ranks that have joined count (they add zeros).
    Returns (op for the engine, divisor)."""
    if op == Average:
        return Sum, _set_size(process_set)
    return op, 1


def _postscale(tensor, divisor, factor):
    """After the reduction: Average's division by the set's size, then the
    postscale factor.  Horovod multiplies once by factor/size; dividing gives
    the same bits whenever the size is a power of two and the correctly
    rounded average otherwise (what Horovod's own tests expect at np=3, which
    its multiplication misses by an ulp).  float16 and bfloat16 on a CPU in
    float32 with one rounding at the end; integers truncated toward zero."""
    if divisor == 1 and factor == 1.0:
        return
    if tensor.dtype in (torch.float16, torch.bfloat16) and not tensor.is_cuda:
        tensor.copy_(tensor.float().div_(divisor).mul_(factor))
    elif tensor.dtype.is_floating_point:
        if divisor != 1:
            tensor.div_(divisor)
        if factor != 1.0:
            tensor.mul_(factor)
    elif factor == 1.0:
        tensor.copy_(torch.div(tensor, divisor, rounding_mode="trunc"))
    else:
        tensor.copy_((tensor.double() / divisor * factor).to(tensor.dtype))


def _start_allreduce(buf, name, op, what, psid=0):
    """buf: contiguous; reduced in place by the engine."""
    eop = _engine_op(op)
    dt = _reduce_dtype(buf, what)
    _claim(name, what)
    _next(buf.shape, psid)
    if buf.is_cuda:
        return _submit(_lib.hvd_allreduce_gpu_async, what, name, buf.data_ptr(), buf.numel(), dt, eop,
                       buf.get_device(), _L._stream_of(buf), None, None)
    return _submit(_lib.hvd_allreduce_async, what, name, buf.data_ptr(), buf.numel(), dt, eop, None, None)


def _engine_buffer(output, psid):
    """The contiguous buffer the engine works on in place: the output itself,
    or a contiguous copy of a strided in-place tensor (copied back at the
    end); a host copy of a CUDA tensor on a process set other than the global
    one (those run in host memory: NCCL has no communicator per set here)."""
    if psid and output.is_cuda:
        return torch.empty(output.shape, dtype=output.dtype)
    return output if output.is_contiguous() else output.contiguous()


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


def _wants_grad(tensors):
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


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


# ------------------------------------------------------------------ join guard
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


# ------------------------------------------------------------------ allgather
def _as_bytes(t):
    """A view the engine can move as raw data when its dtype is not a reduction
    type (bool, complex): gathered and broadcast data are only copied."""
    if t.dtype in _ENGINE_DTYPE:
        return t
    flat = t.reshape(t.shape[0], -1) if t.dim() > 0 else t.reshape(1, -1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty((flat.shape[0], 0), dtype=torch.uint8)


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
        gh = _L._allgather_start(ename, raw, "hvd.allgather")
    except _L.HvdShimError as e:  # (the engine refused it: a change of ranks, a rank shut down)
        raise HorovodInternalError(str(e))
    _track(ename, gh)
    jh, joined, flag = _join_guard(ename, psid, "allgather")
    out = []

    def finish():
        joined()
        got = out[0]
        if got.dtype != host.dtype:
            got = got.view(host.dtype)
        got = got.reshape((-1,) + tuple(src.shape[1:]))
        return got.to(tensor.device) if tensor.is_cuda else got
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


# ------------------------------------------------------------------ broadcast
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
                    buf.get_device(), _L._stream_of(buf), None, None)
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


# ------------------------------------------------------------------ alltoall, reducescatter
def _even_splits(rows, n):
    """Horovod's split of `rows` over n ranks: the first rows % n get one more."""
    return [rows // n + (1 if r < rows % n else 0) for r in range(n)]


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
        got = out[0]
        if got.dtype != host.dtype:
            got = got.view(host.dtype)
        got = got.reshape((-1,) + tuple(src.shape[1:]))
        return (got.to(tensor.device) if tensor.is_cuda else got), torch.tensor(list(recv), dtype=torch.int32)
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
