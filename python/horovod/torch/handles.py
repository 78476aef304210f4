"""Operations in flight: a Horovod handle maps to the engine's handles and
a finish step (poll, synchronize); every operation is named
'<kind>.<name>' (unnamed ones numbered per kind), and a name this rank has
in flight is refused.  join and barrier, which carry no tensor, are here
too."""
import ctypes
import itertools
import weakref

from horovod.common.exceptions import HorovodInternalError
from horovod.common.process_sets import _check as _check_process_set, global_process_set
from hvdshim_torch import capi, collectives
from horovod.torch.basics import _last_error, _lib, _need_init


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
        if st == capi.ERR_INVALID:  # this call's arguments
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
                out.append(collectives.allgather_finish(gh, like, what))
            except Exception as e:
                first_error = first_error or str(e)
            _release(gh)
            continue
        if _lib.hvd_wait(h, -1.0) != 0 and first_error is None:
            first_error = _last_error()
        _release(h)
    if first_error:
        if "disagree on the shape" in first_error and "shape #" in first_error and op.shapes:  # (a large one, hashed)
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
