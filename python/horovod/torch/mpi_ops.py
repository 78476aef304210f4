"""horovod.torch.mpi_ops: Horovod's PyTorch operations on hvdshim's engine.

As in Horovod, this module has them all: the basics (basics.py), the
handles (handles.py), the collectives (ops.py), and here init and the
elastic API's reset, which gather every rank's local place (an allgather,
so they sit above the collectives).  Every byte moves in libhvdshim.so."""
import ctypes
import time

import torch

from horovod.common import process_sets as _process_sets
from horovod.common.exceptions import HorovodInternalError
from horovod.common.process_sets import _add as _add_process_set, global_process_set
from hvdshim_torch import capi, errors
from hvdshim_torch import lifecycle as _lifecycle
from horovod.torch.compression import Compression
# Horovod's horovod.torch.mpi_ops has every one of these names
from horovod.torch.basics import (
    _at_init, _is_world, _last_error, _lib, _lock, _state, ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
    gloo_built, gloo_enabled, is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size, start_timeline, stop_timeline)
from horovod.torch.handles import _auto_names, _inflight, _name_of, _ops, _optimizers, barrier, join, poll, synchronize
from horovod.torch.ops import (
    HorovodAllgather, HorovodAllreduce, HorovodAlltoall, HorovodBroadcast, HorovodGroupedAllgather,
    HorovodGroupedAllreduce, HorovodGroupedReducescatter, HorovodReducescatter, allgather, allgather_async, allreduce,
    allreduce_, allreduce_async, allreduce_async_, alltoall, alltoall_async, broadcast, broadcast_, broadcast_async,
    broadcast_async_, grouped_allgather, grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
    grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter, grouped_reducescatter_async,
    reducescatter, reducescatter_async, sparse_allreduce_async)
from horovod.torch.tensors import Adasum, Average, Max, Min, Product, Sum


class _InitFailed(HorovodInternalError, errors.HvdShimError):
    """hvd.init could not start the engine (a setting, the MPI): Horovod's
    exception, which uncaught ends the rank with hvdshim's two lines (the
    cause and the script's line) instead of a traceback on every rank."""


_InitFailed.__name__ = _InitFailed.__qualname__ = "HorovodInternalError"  # (what a script prints of it)
_InitFailed.__module__ = HorovodInternalError.__module__


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
        _lifecycle.horovod_init()  # (the zero-code adapter stands aside: the script distributes itself)
        st = _lib.hvd_init()
        if st != 0:
            raise _InitFailed("hvd.init failed: %s" % _last_error())
        if capi.setting("HVDSHIM_ELASTIC") == "1":  # ranks may die: this package takes each change in (_take_change)
            _lib.hvd_elastic_follow()
            errors.following = True
            _state["elastic"] = True
        else:  # Horovod's end: a rank that finishes ends the others' collectives (not a join)
            _lib.hvd_shutdown_ends_job(1)
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
        capi.warn("%s: hvd.elastic.run restores the state committed last and calls the function again over %d "
                  "rank(s) (was %d)" % (what.value.decode("utf-8", "replace").split("; the job goes on")[0], n.value,
                                        before))
    return changes


def _cross_info():
    """cross_rank/cross_size as Horovod defines them: the ranks with this
    rank's local rank, one per host; homogeneous when every host runs as
    many ranks.  One allgather of (local rank, local size) at init."""
    mine = torch.tensor([[_lib.hvd_local_rank(), _lib.hvd_local_size()]], dtype=torch.int64)
    table = synchronize(allgather_async(mine, name="hvdshim.horovod.cross_info"))
    me = _lib.hvd_rank()
    same = [r for r in range(table.shape[0]) if table[r, 0] == table[me, 0]]
    _state["cross"] = (same.index(me), len(same), bool((table[:, 1] == table[0, 1]).all()))
