"""libhvdshim.so through ctypes: the one binding of collectives/hvdshim.h.

Both packages call the library through this module: the adapter
(hvdshim_torch) and the served horovod package.  It declares every function
either calls (argument and result types), holds the header's constants
(tests/torch/adapter_unit.py checks them against the header), and gives the
library's settings and logger.  No torch here: tensors meet the library in
collectives.py.  (sitecustomize.py, which runs before any package is
imported, looks up the two functions it needs itself.)"""
import ctypes

# hvdshim.h: hvd_status_t
OK, ERR_INVALID, ERR_MISMATCH, ERR_SHUTDOWN, ERR_TIMEOUT, ERR_NOT_INIT, ERR_INTERNAL, ERR_MEMBERSHIP = range(8)
# hvd_dtype_t
FLOAT32, FLOAT64, FLOAT16, BFLOAT16, INT32, INT64, UINT8, INT8, INT16 = range(9)
# hvd_op_t
SUM, AVG, MIN, MAX, PROD = range(5)
ROOT_FIRST_ACTIVE = -1  # HVD_ROOT_FIRST_ACTIVE: a broadcast's root is the lowest rank still running
BATCH_CALLER_WAITS = 1  # HVD_BATCH_CALLER_WAITS: the caller waits for the batch next (the engine thread sleeps on)


class AllreduceItem(ctypes.Structure):
    """hvd_allreduce_item."""
    _fields_ = [("name", ctypes.c_char_p), ("buf", ctypes.c_void_p), ("count", ctypes.c_size_t),
                ("dtype", ctypes.c_int), ("op", ctypes.c_int), ("device", ctypes.c_int), ("stream", ctypes.c_void_p)]


_int, _size, _ptr, _str, _double = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_double
_handle = ctypes.c_int64
_out_handle = ctypes.POINTER(_handle)
_SIGNATURES = {  # name: (result, arguments)
    # the job
    "hvd_init": (_int, []),
    "hvd_shutdown": (None, []),
    "hvd_shutdown_ends_job": (None, [ctypes.c_int]),
    "hvd_initialized": (_int, []),
    "hvd_role_now": (_str, []),
    "hvd_launch_info": (None, [ctypes.POINTER(_int)] * 4),
    "hvd_rank": (_int, []),
    "hvd_size": (_int, []),
    "hvd_local_rank": (_int, []),
    "hvd_local_size": (_int, []),
    "hvd_config_value": (_str, [_str]),
    "hvd_log_message": (None, [_int, _str, _str]),
    "hvd_abort_job": (None, [_str]),
    "hvd_mpi_early": (_int, []),
    "hvd_failing_grace": (None, []),
    "hvd_remove_at_end": (_int, [_str]),
    "hvd_restore_at_end": (_int, [_str, _str]),
    "hvd_overlay_write_path": (_int, [_str, ctypes.c_char_p, _size]),
    "hvd_overlay_hold": (_int, [_str, _int]),
    "hvd_overlay_saves_settled": (None, []),
    "hvd_last_error": (_str, []),
    "hvd_gpu_status": (_int, [_str, _size]),
    # operations
    "hvd_allreduce_async": (_int, [_str, _ptr, _size, _int, _int, _ptr, _ptr, _out_handle]),
    "hvd_broadcast_async": (_int, [_str, _ptr, _size, _int, _int, _ptr, _ptr, _out_handle]),
    "hvd_allgather_async": (_int, [_str, _ptr, _size, _size, _int, _ptr, _ptr, _out_handle]),
    "hvd_allreduce_gpu_async": (_int, [_str, _ptr, _size, _int, _int, _int, _ptr, _ptr, _ptr, _out_handle]),
    "hvd_broadcast_gpu_async": (_int, [_str, _ptr, _size, _int, _int, _int, _ptr, _ptr, _ptr, _out_handle]),
    "hvd_allreduce_batch_async_ex": (_int, [ctypes.POINTER(AllreduceItem), _size, _out_handle, ctypes.c_uint]),
    "hvd_reducescatter_async": (_int, [_str, _ptr, _ptr, _size, _size, _int, _int, _ptr, _ptr, _out_handle]),
    "hvd_alltoall_async": (_int, [_str, _ptr, ctypes.POINTER(ctypes.c_int64), _size, _int,
                                  ctypes.POINTER(ctypes.c_int64), _ptr, _ptr, _out_handle]),
    "hvd_next_shape": (None, [ctypes.POINTER(ctypes.c_int64), _int]),
    "hvd_next_process_set": (None, [_int]),
    "hvd_barrier": (_int, [_double]),
    "hvd_join": (_int, [ctypes.POINTER(_int)]),
    # handles
    "hvd_wait": (_int, [_handle, _double]),
    "hvd_wait_all": (_int, [_out_handle, _size, ctypes.POINTER(_size)]),
    "hvd_test": (_int, [_handle, ctypes.POINTER(_int)]),
    "hvd_allgather_wait": (_int, [_handle, _double, ctypes.POINTER(_ptr), ctypes.POINTER(_size)]),
    "hvd_free": (None, [_ptr]),
    # process sets
    "hvd_process_set_add": (_int, [ctypes.POINTER(_int), _int, ctypes.POINTER(_int)]),
    "hvd_process_set_remove": (_int, [_int]),
    "hvd_process_set_size": (_int, [_int]),
    # metrics and the timeline
    "hvd_step_mark": (None, [ctypes.c_int64]),
    "hvd_step_count_set": (None, [ctypes.c_uint64]),
    "hvd_timeline_start": (_int, [_str, _int]),
    "hvd_timeline_stop": (_int, []),
    # the rank-private file overlay
    "hvd_overlay_off": (None, []),
    "hvd_overlay_promote": (None, []),
    "hvd_overlay_resume": (None, []),
    "hvd_overlay_console": (None, [ctypes.c_int]),
    "hvd_overlay_console_back": (ctypes.c_int, []),
    # ranks dying (HVDSHIM_ELASTIC)
    "hvd_elastic_follow": (None, []),
    "hvd_elastic_ack": (_int, [ctypes.POINTER(_int)] * 3 + [_str, _size]),
}

LIB = None  # the library once load() found it (a unit test puts a stub of it here instead)


def load():
    """The library preloaded into this process (CDLL(None): it is in the
    global scope), its functions declared once.  AttributeError where it is
    not preloaded."""
    global LIB
    if LIB is None:
        lib = ctypes.CDLL(None)
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        LIB = lib
    return LIB


def last_error():
    """The engine's message for the last failure on this thread ('' if none)."""
    return (LIB.hvd_last_error() or b"").decode("utf-8", "replace")


def setting(name):
    """A setting as the library resolved it (environment, config file), or None."""
    v = LIB.hvd_config_value(name.encode())
    return v.decode() if v is not None else None


def log(level, msg):
    LIB.hvd_log_message(level, b"torch", msg.encode("utf-8", "replace"))


def error(msg):
    log(0, msg)


def warn(msg):
    log(1, msg)


def info(msg):
    log(2, msg)


def debug(msg):
    log(3, msg)
