# hvdshim's PyTorch adapter: makes an unmodified single-process script train
# data-parallel.  Loaded by sitecustomize.py right after `import torch` in a
# rank process.  It only manipulates Python objects (hooks, samplers, streams);
# every byte of tensor data moves in libhvdshim.so, called through ctypes.
#
#   models     first forward of a root module: check the parameter lists
#              agree on all ranks, broadcast parameters and buffers from 0,
#              hook each trainable parameter's gradient accumulation
#   gradients  each accumulated gradient goes to the engine as it is ready
#              (averaged in place); the end-of-backward callback agrees on
#              which parameters got gradients anywhere, fills in the rest and
#              waits, so everything after backward() sees averaged gradients
#   data       shuffling DataLoaders are sharded (HVDSHIM_DATA)
#   effects    stdout of ranks > 0 dropped, stderr prefixed, torch.save on
#              rank 0 only, intra-op threads per rank, optional LR scaling
#
# See docs/ARCHITECTURE.md ("PyTorch adapter") for the reasoning.
import ctypes
import math
import os
import sys
import weakref

import torch

__all__ = ["install", "HvdShimError"]


class HvdShimError(RuntimeError):
    """Raised on every rank when the job cannot go on correctly."""


# ------------------------------------------------------------------ library
_HVD_DTYPES = {
    torch.float32: 0,
    torch.float64: 1,
    torch.float16: 2,
    torch.bfloat16: 3,
    torch.int32: 4,
    torch.int64: 5,
    torch.uint8: 6,
}
_GRAD_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_UINT8, _INT64 = 6, 5
_SUM, _AVG, _MAX = 0, 1, 3
_ROOT_FIRST_ACTIVE = -1  # hvdshim.h HVD_ROOT_FIRST_ACTIVE
_ERR_TIMEOUT = 4


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
        "hvd_wait": (ctypes.c_int, [c_handle, ctypes.c_double]),
        "hvd_allgather_wait": (ctypes.c_int, [c_handle, ctypes.c_double, ctypes.POINTER(ctypes.c_void_p),
                                              ctypes.POINTER(ctypes.c_size_t)]),
        "hvd_free": (None, [ctypes.c_void_p]),
        "hvd_step_mark": (None, [ctypes.c_int64]),
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


def _setting(name):
    v = _lib.hvd_config_value(name.encode())
    return v.decode() if v is not None else None


def _check(status, what):
    if status != 0:
        detail = (_lib.hvd_last_error() or b"").decode("utf-8", "replace")
        raise HvdShimError("hvdshim: %s failed: %s" % (what, detail or "status %d" % status))


class _Pending:
    """Operations in flight, waited for together."""

    def __init__(self):
        self.items = []  # (handle, what, on_done or None); keeps tensors alive

    def add(self, handle, what, keep=None, on_done=None):
        self.items.append((handle, what, keep, on_done))

    def wait(self):
        items, self.items = self.items, []
        first_error = None
        for handle, what, _keep, on_done in items:
            st = _lib.hvd_wait(handle, -1.0)
            if st != 0 and first_error is None:
                first_error = "%s: %s" % (what, (_lib.hvd_last_error() or b"").decode("utf-8", "replace"))
            elif st == 0 and on_done is not None:
                on_done()
        if first_error:
            raise HvdShimError("hvdshim: " + first_error)


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
    if st != 0:
        raise HvdShimError("hvdshim: %s: %s" % (what, (_lib.hvd_last_error() or b"").decode("utf-8", "replace")))
    try:
        result = torch.empty((rows.value,) + tuple(like.shape[1:]), dtype=like.dtype)
        if result.numel():
            ctypes.memmove(result.data_ptr(), out.value, result.numel() * result.element_size())
    finally:
        _lib.hvd_free(out)
    return result


# ------------------------------------------------------------------ state
class _State:
    def __init__(self):
        self.rank = self.size = self.local_rank = self.local_size = 0
        self.enabled = False        # distributing this script (False: stood aside, or 1 rank)
        self.started = False        # hvd_init done
        self.aside_reason = None
        self.data_mode = "shard"
        self.save_ranks = "0"
        self.scale_lr = False
        self.models = []            # registered root modules (weak)
        self.known = weakref.WeakSet()      # every module of a registered root
        self.roots = weakref.WeakSet()      # the registered roots
        self.paramless = weakref.WeakSet()  # roots without parameters or buffers
        self.by_param = weakref.WeakKeyDictionary()  # parameter -> _Param
        self.params = []            # _Param, index = position in the used-bitmap
        self.frozen = []            # _Param not yet hooked (requires_grad False)
        self.in_backward = False
        self.used = bytearray()
        self.pending = _Pending()
        self.sparse = []            # (param, handles) gathered at the end of backward
        self.submitted = set()
        self.hook_handles = []
        self.loaders = 0
        self.warned = set()
        self.stdout_saved = None
        self.stderr_orig = None
        self.samples = 0            # training samples seen by the roots since the last optimizer step
        self.in_step = 0            # optimizer.step depth (a subclass may call its parent's step)


_S = _State()


def _warn_once(key, msg):
    if key not in _S.warned:
        _S.warned.add(key)
        _warn(msg)


def _start():
    """Activate the engine (MPI, thread) on first real use.  False when the
    script turned out to distribute itself."""
    if _S.started:
        return True
    _check_stand_aside()
    if not _S.enabled:
        return False
    _check(_lib.hvd_init(), "starting the engine (hvd_init)")
    _S.started = True
    return True


# ------------------------------------------------------------------ stand aside
def _other_distribution():
    if "horovod" in sys.modules or any(m.startswith("horovod.") for m in list(sys.modules)):
        return "Horovod is imported"
    dist = getattr(torch, "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return "torch.distributed is initialized"
    except Exception:
        pass
    return None


def _check_stand_aside(reason=None):
    if not _S.enabled:
        return
    reason = reason or _other_distribution()
    if reason:
        _stand_aside(reason)


def _stand_aside(reason):
    if _S.started and _S.models:
        raise HvdShimError("hvdshim: %s after hvdshim started distributing this script; "
                           "run it with HVDSHIM_DISABLE=1 to leave the distribution to the script" % reason)
    _S.enabled = False
    _S.aside_reason = reason
    for h in _S.hook_handles:
        h.remove()
    _S.hook_handles = []
    _restore_output()
    if _S.rank == 0:
        _info("%s: the script distributes itself; hvdshim stands aside" % reason)


# ------------------------------------------------------------------ models
def _tensor_entries(module):
    out = [("p", n, t) for n, t in module.named_parameters()]
    out += [("b", n, t) for n, t in module.named_buffers()]
    return out


def _signature(entries):
    return "\n".join("%s %s %s %s" % (k, n, "x".join(map(str, t.shape)) or "scalar", str(t.dtype).replace("torch.", ""))
                     for k, n, t in entries)


def _first_difference(mine, theirs, rank):
    a, b = mine.split("\n") if mine else [], theirs.split("\n") if theirs else []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return "entry %d: rank 0 has '%s', rank %d has '%s'" % (i, x, rank, y)
    if len(a) != len(b):
        extra = a[len(b)] if len(a) > len(b) else b[len(a)]
        return "rank 0 has %d parameters and buffers, rank %d has %d (first unmatched: '%s')" % (
            len(a), rank, len(b), extra)
    return None


def _verify_same_everywhere(tag, what, sig):
    """Every rank stops with the same message when any rank's `sig` differs
    from rank 0's."""
    data = torch.tensor(list(sig.encode()) + [0], dtype=torch.uint8)
    h = _allgather_start(("hvdshim.sig.%s" % tag).encode(), data, "checking %s" % what)
    allsig = _allgather_finish(h, data, "checking %s" % what)
    parts = bytes(allsig.tolist()).split(b"\0")[:-1]
    ref = parts[0].decode()
    for r, p in enumerate(parts[1:], start=1):
        diff = _first_difference(ref, p.decode(), r)
        if diff:
            raise HvdShimError("hvdshim: %s differs across ranks: %s" % (what, diff))


def _register_root(module):
    if not _start():
        return
    k = len(_S.models)
    what = "model %d (%s)" % (k, type(module).__name__)
    entries = _tensor_entries(module)
    for kind, n, t in entries:
        if t.device.type not in ("cpu", "cuda"):
            raise HvdShimError("hvdshim: %s: '%s' is on %s; hvdshim handles CPU and CUDA tensors"
                               % (what, n, t.device))
        if t.layout != torch.strided:
            raise HvdShimError("hvdshim: %s: '%s' has layout %s; only dense parameters are supported"
                               % (what, n, t.layout))
        if kind == "p" and t.requires_grad and t.dtype not in _GRAD_DTYPES:
            raise HvdShimError("hvdshim: %s: parameter '%s' is %s; hvdshim averages float32, float64, float16 and "
                               "bfloat16 gradients (freeze it with requires_grad=False, or keep it out of the model)"
                               % (what, n, str(t.dtype).replace("torch.", "")))
    _verify_same_everywhere("m%d" % k, what, _signature(entries))
    pending = _Pending()
    copies = []
    with torch.no_grad():
        for kind, n, t in entries:
            if t in _S.by_param:  # shared with a model registered earlier
                continue
            buf = t if t.is_contiguous() else t.contiguous()
            if buf is not t:
                copies.append((buf, t))
            _broadcast_bytes(("m%d.%s.%s" % (k, kind, n)).encode(), buf, pending, "broadcasting %s" % n)
        pending.wait()
        for buf, t in copies:
            t.copy_(buf)
    _S.models.append(weakref.ref(module))
    _S.roots.add(module)
    _S.known.update(module.modules())
    sparse = set()
    for m in module.modules():
        if getattr(m, "sparse", False) is True and isinstance(getattr(m, "weight", None), torch.nn.Parameter):
            sparse.add(m.weight)
    for n, p in module.named_parameters():
        if p in _S.by_param:
            continue
        prm = _Param(len(_S.params), "m%d.%s" % (k, n), p, p in sparse)
        _S.by_param[p] = prm
        _S.params.append(prm)
        _S.used.append(0)
        if p.requires_grad:
            prm.hook()
        else:
            _S.frozen.append(prm)
    if _S.rank == 0:
        _info("%s: %d parameters and buffers broadcast from rank 0, %d gradients hooked"
              % (what, len(entries), sum(1 for p in _S.params if p.hooked)))


def _hook_unfrozen():
    still = []
    for prm in _S.frozen:
        p = prm.ref()
        if p is None:
            continue
        if p.requires_grad:
            prm.hook()
        else:
            still.append(prm)
    _S.frozen = still


def _count_samples(module, inputs):
    """A training forward of a model: its batch counts toward the step's samples."""
    if module in _S.roots and module.training and inputs and torch.is_grad_enabled():
        x = inputs[0]
        if isinstance(x, torch.Tensor) and x.dim() > 0:
            _S.samples += x.shape[0]


def _forward_pre_hook(module, inputs):
    _count_samples(module, inputs)
    if module in _S.known:
        if _S.frozen and module in _S.roots:  # parameters unfrozen since the last forward
            _hook_unfrozen()
        return None
    if not _S.enabled or module in _S.paramless:
        return None
    if next(module.parameters(), None) is None and next(module.buffers(), None) is None:
        _S.paramless.add(module)
        return None
    _check_stand_aside()
    if not _S.enabled:
        return None
    _register_root(module)
    _count_samples(module, inputs)
    return None


# ------------------------------------------------------------------ gradients
_HAS_POST_ACCUMULATE = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")


class _Param:
    __slots__ = ("index", "name", "bname", "ref", "hooked", "acc", "handle", "sparse", "__weakref__")

    def __init__(self, index, name, p, sparse):
        self.index = index
        self.name = name
        self.bname = name.encode()
        self.ref = weakref.ref(p)
        self.hooked = False
        self.acc = None
        self.sparse = sparse  # gradient is a sparse COO tensor (embedding with sparse=True)

    def hook(self):
        p = self.ref()
        idx = self.index
        if _HAS_POST_ACCUMULATE:  # torch >= 2.1
            self.handle = p.register_post_accumulate_grad_hook(lambda _p: _grad_ready(idx))
        else:  # torch 1.x: a post-hook on the AccumulateGrad node (kept alive here)
            with torch.enable_grad():
                self.acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self.handle = self.acc.register_hook(lambda *_: _grad_ready(idx))
        self.hooked = True


def _grad_ready(idx):
    if not _S.in_backward:
        _S.in_backward = True
        torch.autograd.Variable._execution_engine.queue_callback(_end_of_backward)
    if idx in _S.submitted:  # a second accumulation in one backward (retain_graph tricks)
        _S.pending.wait()
        _S.submitted.clear()
    _S.used[idx] = 1
    _submit_grad(_S.params[idx])


def _submit_grad(prm):
    p = prm.ref()
    if p is None:
        return
    g = p.grad
    if g is None:  # used on another rank, not here: contribute nothing (zeros)
        if prm.sparse:
            g = torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.int64),
                                        torch.zeros((0,) + tuple(p.shape[1:]), dtype=p.dtype), p.shape)
        else:
            g = p.grad = torch.zeros_like(p)
    if g.device.type not in ("cpu", "cuda"):
        raise HvdShimError("hvdshim: parameter '%s' has its gradient on %s; hvdshim handles CPU and CUDA tensors"
                           % (prm.name, g.device))
    _S.submitted.add(prm.index)
    if g.is_sparse:
        _submit_sparse(prm, p, g)
        return
    if g.dtype not in _GRAD_DTYPES:
        raise HvdShimError("hvdshim: parameter '%s' has a %s gradient; hvdshim averages float32, float64, "
                           "float16 and bfloat16 gradients" % (prm.name, str(g.dtype).replace("torch.", "")))
    if g.is_contiguous():
        _allreduce(prm.bname, g, _AVG, _S.pending, "averaging the gradient of '%s'" % prm.name)
    else:
        buf = g.contiguous()
        _allreduce(prm.bname, buf, _AVG, _S.pending, "averaging the gradient of '%s'" % prm.name,
                   on_done=lambda: g.copy_(buf))


def _submit_sparse(prm, p, g):
    g = g.coalesce()
    idx = g._indices().t().contiguous().cpu()  # gathered through host memory (rows differ per rank)
    vals = g._values().contiguous().cpu()
    what = "gathering the sparse gradient of '%s'" % prm.name
    hi = _allgather_start(prm.bname + b".idx", idx, what)
    hv = _allgather_start(prm.bname + b".val", vals, what)
    _S.sparse.append((prm, p, idx, vals, hi, hv, g.shape))


def _finish_sparse():
    items, _S.sparse = _S.sparse, []
    for prm, p, idx, vals, hi, hv, shape in items:
        what = "gathering the sparse gradient of '%s'" % prm.name
        all_idx = _allgather_finish(hi, idx, what)
        all_vals = _allgather_finish(hv, vals, what)
        with torch.no_grad():
            p.grad = torch.sparse_coo_tensor(all_idx.t(), all_vals / _S.size, shape).coalesce().to(p.device)


def _end_of_backward():
    _S.in_backward = False
    try:
        # Which parameters got a gradient on any rank in this backward: the
        # ones that did not here contribute their current gradient (or zeros).
        mine = torch.frombuffer(bytearray(_S.used), dtype=torch.uint8) if _S.used else None
        if mine is not None:
            anywhere = mine.clone()
            flags = _Pending()
            _allreduce(b"hvdshim.used.%d" % anywhere.numel(), anywhere, _MAX, flags, "agreeing on used parameters")
            flags.wait()
            missing = (anywhere > mine).nonzero().flatten().tolist()
            for i in missing:
                _submit_grad(_S.params[i])
        _S.pending.wait()
        _finish_sparse()
    finally:
        _S.submitted.clear()
        _S.used[:] = bytes(len(_S.used))


def _average_loss(loss):
    """The closure's loss averaged over ranks (LBFGS compares loss values to
    decide how many evaluations a step takes: every rank must see the same)."""
    if not _S.enabled or not _S.started:
        return loss
    if isinstance(loss, torch.Tensor):
        if loss.numel() != 1 or loss.dtype not in (torch.float32, torch.float64):
            return loss
        out = loss.detach().to("cpu", copy=True).contiguous()
    elif isinstance(loss, (int, float)):
        out = torch.tensor([float(loss)], dtype=torch.float64)
    else:
        return loss
    pending = _Pending()
    _allreduce(b"hvdshim.closure-loss", out, _AVG, pending, "averaging the closure's loss")
    pending.wait()
    return out.to(loss.device) if isinstance(loss, torch.Tensor) else float(out)


def _mark_step():
    """An optimizer step ended: one line of HVDSHIM_METRICS, a tick for autotune."""
    if _S.enabled and _S.started:
        _lib.hvd_step_mark(_S.samples if _S.samples else -1)
    _S.samples = 0


def _wrap_step(cls):
    def make_step(orig):
        def step(self, closure=None, *args, **kwargs):
            _S.in_step += 1
            try:
                if closure is None or not _S.enabled:
                    return orig(self, closure, *args, **kwargs)

                def averaged():
                    return _average_loss(closure())
                return orig(self, averaged, *args, **kwargs)
            finally:
                _S.in_step -= 1
                if _S.in_step == 0:
                    _mark_step()
        return step
    _wrap(cls, "step", make_step)


# ------------------------------------------------------------------ data
def _shuffling_sampler(sampler):
    from torch.utils.data import RandomSampler, SubsetRandomSampler, WeightedRandomSampler
    return isinstance(sampler, (RandomSampler, SubsetRandomSampler, WeightedRandomSampler))


class _ShardedBatchSampler:
    """Replaces a shuffling DataLoader's BatchSampler.  Each epoch: the inner
    sampler draws its order (on every rank, so random state advances as in
    the plain run), rank 0's order is broadcast, and this rank takes its part:
    shard: indices[rank::N] of the order padded to a multiple of N (as
    DistributedSampler), batched by batch_size; split: slice `rank` of each
    global batch of batch_size."""

    def __init__(self, inner, tag, mode):
        self.inner = inner
        self.sampler = inner.sampler
        self.batch_size = inner.batch_size
        self.drop_last = inner.drop_last
        self.tag = tag
        self.mode = mode

    def __len__(self):
        n, b, size = len(self.sampler), self.batch_size, _S.size
        if self.mode == "shard":
            per_rank = -(-n // size)
            return per_rank // b if self.drop_last else -(-per_rank // b)
        return n // b if self.drop_last else -(-n // b)

    def _order(self):
        order = torch.tensor(list(iter(self.sampler)), dtype=torch.int64)
        if not _S.enabled or not _start():
            return order
        pending = _Pending()
        _broadcast_bytes(("hvdshim.data.%d.%d" % (self.tag, order.numel())).encode(), order, pending,
                         "broadcasting the epoch's sample order of DataLoader %d" % self.tag)
        pending.wait()
        return order

    def __iter__(self):
        order = self._order().tolist()
        size, rank, b = _S.size, _S.rank, self.batch_size
        if self.mode == "shard":
            total = -(-len(order) // size) * size
            while len(order) < total:  # pad by repeating from the start
                order += order[:total - len(order)]
            mine = order[rank::size]
            for i in range(0, len(mine), b):
                batch = mine[i:i + b]
                if len(batch) < b and self.drop_last:
                    return
                yield batch
            return
        part = b // size
        for i in range(0, len(order), b):
            batch = order[i:i + b]
            if len(batch) == b:
                yield batch[rank * part:(rank + 1) * part]
                continue
            if self.drop_last:
                return
            _warn_once("split-tail", "HVDSHIM_DATA=split: the last batch of an epoch has %d samples, not a multiple "
                       "of %d ranks; that step averages per-rank means of unequal slices" % (len(batch), size))
            while len(batch) < size:
                batch = batch + batch[:size - len(batch)]
            q, r = divmod(len(batch), size)
            start = rank * q + min(rank, r)
            yield batch[start:start + q + (1 if rank < r else 0)]


def _prepare_loader(loader):
    from torch.utils.data import BatchSampler, IterableDataset
    tag = _S.loaders
    _S.loaders += 1
    if not _S.enabled or _S.data_mode == "off" or _S.size == 1:
        return
    if isinstance(loader.dataset, IterableDataset):
        _warn_once("iterable", "DataLoader over an IterableDataset: hvdshim cannot shard it; every rank reads "
                   "the whole stream (shard it in the dataset, or set HVDSHIM_DATA=off to silence this)")
        return
    bs = loader.batch_sampler
    if bs is None or type(bs) is not BatchSampler or not _shuffling_sampler(bs.sampler):
        if bs is None and _shuffling_sampler(loader.sampler):
            _warn_once("nobatch", "DataLoader with batch_size=None: not sharded by hvdshim")
        return
    if _S.data_mode == "split" and bs.batch_size % _S.size:
        raise HvdShimError("hvdshim: HVDSHIM_DATA=split needs the DataLoader batch size (%d) to be divisible by "
                           "the number of ranks (%d); choose a multiple of %d or use HVDSHIM_DATA=shard"
                           % (bs.batch_size, _S.size, _S.size))
    object.__setattr__(loader, "batch_sampler", _ShardedBatchSampler(bs, tag, _S.data_mode))
    if _S.rank == 0:
        _debug("DataLoader %d: %s across %d ranks" % (tag, _S.data_mode, _S.size))


# ------------------------------------------------------------------ side effects
class _PrefixedStream:
    """Text stream wrapper: every line starts with a prefix and reaches the
    file in one write (so lines of different ranks interleave whole)."""

    def __init__(self, stream, prefix):
        self._stream = stream
        self._prefix = prefix
        self._partial = ""

    def write(self, text):
        if not text:
            return 0
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        if lines:
            self._stream.write("".join(self._prefix + line + "\n" for line in lines))
            self._stream.flush()
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if self._partial:
            self._stream.write(self._prefix + self._partial)
            self._partial = ""
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _redirect_output(worker_stdout):
    prefix = "[rank %d] " % _S.rank
    if sys.stderr is not None:
        _S.stderr_orig = sys.stderr
        sys.stderr = _PrefixedStream(sys.stderr, prefix)
    if worker_stdout:  # every rank's stdout, each line prefixed
        if sys.stdout is not None:
            _S.stdout_saved = ("wrap", sys.stdout)
            sys.stdout = _PrefixedStream(sys.stdout, prefix)
        return
    if _S.rank == 0:
        return
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        saved = os.dup(1)
        os.dup2(devnull, 1)
        os.close(devnull)
        _S.stdout_saved = ("fd", saved)
    except OSError as e:
        _warn("could not silence stdout of rank %d: %s" % (_S.rank, e))


def _restore_output():
    if _S.stderr_orig is not None:
        sys.stderr.flush()
        sys.stderr = _S.stderr_orig
        _S.stderr_orig = None
    saved, _S.stdout_saved = _S.stdout_saved, None
    if saved is None:
        return
    if saved[0] == "wrap":
        sys.stdout.flush()
        sys.stdout = saved[1]
    else:
        try:
            sys.stdout.flush()
        except Exception:
            pass
        os.dup2(saved[1], 1)
        os.close(saved[1])


def _set_threads():
    if _S.local_size <= 1 or any(os.environ.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")):
        return
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    n = max(1, min(cores, (os.cpu_count() or 1) // _S.local_size))
    if n < torch.get_num_threads():
        torch.set_num_threads(n)
        _debug("intra-op threads: %d (%d local ranks)" % (n, _S.local_size))


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


def _patch():
    from torch.utils.data import DataLoader

    def make_loader_init(orig):
        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            _prepare_loader(self)
        return __init__
    _wrap(DataLoader, "__init__", make_loader_init)

    if _S.scale_lr:
        def make_add_group(orig):
            def add_param_group(self, param_group):
                orig(self, param_group)
                group = self.param_groups[-1]
                if _S.enabled and "lr" in group:
                    group["lr"] = group["lr"] * _S.size
            return add_param_group
        _wrap(torch.optim.Optimizer, "add_param_group", make_add_group)

    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and "step" in vars(cls):
            _wrap_step(cls)

    dist = getattr(torch, "distributed", None)
    if dist is not None and hasattr(dist, "init_process_group"):
        def make_init_pg(orig):
            def init_process_group(*args, **kwargs):
                _check_stand_aside("torch.distributed.init_process_group was called")
                return orig(*args, **kwargs)
            return init_process_group
        _wrap(dist, "init_process_group", make_init_pg)

    _S.hook_handles.append(torch.nn.modules.module.register_module_forward_pre_hook(_forward_pre_hook))


class _HorovodWatcher:
    """Stands aside the moment a script imports Horovod."""

    def find_spec(self, name, path=None, target=None):
        if name == "horovod" and _S.enabled:
            _check_stand_aside("Horovod is imported")
        return None


# ------------------------------------------------------------------ entry
def install():
    global _lib
    try:
        _lib = _load_library()
    except (OSError, AttributeError):
        return  # libhvdshim.so is not preloaded in this process
    if _lib.hvd_role_now() not in (b"armed", b"active"):
        return
    os.environ["HVDSHIM_ACTIVE_PID"] = str(os.getpid())  # this process is the rank
    vals = [ctypes.c_int() for _ in range(4)]
    _lib.hvd_launch_info(*[ctypes.byref(v) for v in vals])
    _S.rank, _S.size, _S.local_rank, _S.local_size = (v.value for v in vals)
    _S.data_mode = _setting("HVDSHIM_DATA") or "shard"
    _S.save_ranks = _setting("HVDSHIM_SAVE_RANKS") or "0"
    _S.scale_lr = _setting("HVDSHIM_SCALE_LR") == "1"
    if _S.size <= 1:
        _info("one rank: nothing to distribute")
        return
    _S.enabled = True
    reason = _other_distribution()
    if reason:
        _stand_aside(reason)
        return
    _redirect_output(_setting("HVDSHIM_WORKER_STDOUT") == "1")
    _set_threads()
    _patch()
    sys.meta_path.insert(0, _HorovodWatcher())
    _debug("PyTorch %s adapter installed (rank %d of %d, %s gradient hooks)"
           % (torch.__version__, _S.rank, _S.size,
              "post-accumulate" if _HAS_POST_ACCUMULATE else "AccumulateGrad"))
