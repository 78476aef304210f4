"""The job as Horovod's API shows it: rank, size, local and cross places,
what is built, the timeline, and the engine side of process sets; one
state, _state, that init (mpi_ops.py) fills."""
import ctypes
import os
import threading

import torch

from horovod.common import process_sets as _process_sets
from horovod.common.exceptions import HorovodInternalError
from hvdshim_torch import capi

_lib = capi.load()
_state = {"init": False, "cross": None, "elastic": False}
_lock = threading.Lock()
_at_init = []  # called once the engine has started (horovod.torch.elastic.restart)


def _last_error():
    return (_lib.hvd_last_error() or b"").decode("utf-8", "replace")


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
            kind = ValueError if st in (capi.ERR_INVALID, capi.ERR_MISMATCH) else HorovodInternalError
            raise kind("hvd.%s: %s" % (what, _last_error()))
        return new_id.value

    @staticmethod
    def remove(set_id, what):
        if _lib.hvd_process_set_remove(set_id) != 0:
            raise HorovodInternalError("hvd.%s: %s" % (what, _last_error()))


_process_sets._setup(_SetEngine)


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
