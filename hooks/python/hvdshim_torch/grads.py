"""Gradients: each accumulated gradient goes to the engine as it is ready; the
end of backward agrees on which parameters got one anywhere and waits;
optimizer steps are wrapped (closure loss, metrics, hyperparameters).

Gradient accumulation (k backward passes per optimizer step): once k has
been the same for two steps, rank 0 proposes it in the round that ends a
reducing backward, every rank adopts it, and the first k-1 backward passes
of each step only accumulate locally; the k-th reduces the accumulated
gradients (averaging is linear: the same result as reducing every pass).
A step (or a clipping or unscaling call) that comes while gradients are
still local reduces them first: a wrong guess costs one reduction without
overlap, never a wrong result.

Gradients go to the engine in batches (one call and one engine wake-up
each): of HVDSHIM_BUCKET bytes, by default each gradient alone.  When the
last hooked parameter's gradient arrives, this rank's part of the
end-of-backward round is known (every parameter got one), so the round goes
in the same batch: float32, like the gradients, it is fused into their last
allreduce (one round per step).  That last batch is waited for at once, so
it does not wake the engine thread: the waiting training thread runs the
engine's cycle itself (hvd_eng_help).  Where a rank has a single core
(HVDSHIM_OVERLAP auto), host-memory gradients all wait for that batch: the
engine thread would only take the core backward needs, and two thread
switches per gradient cost more than the overlap gains."""
import contextlib
import ctypes
import functools
import struct
import weakref
import torch

from . import data as _data
from . import elastic as _elastic
from . import resize as _resize
from . import lib as _libmod
from . import rng as _rng
from .lib import (_AVG, _SUM, HvdShimError, _is_number, _MembershipChanged, _wrap, _GRAD_DTYPES, _Pending,
                  _allgather_finish, _allgather_start, _allreduce, _allreduce_now, _debug)
from .state import _S, _info_once, _warn_once


_HAS_POST_ACCUMULATE = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
# torch's own (install.py wraps the method for the script's hooks: _accumulated_grad)
_POST_ACCUMULATE = getattr(torch.Tensor, "register_post_accumulate_grad_hook", None)


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


class _Param:
    __slots__ = ("index", "name", "bname", "what", "ref", "hooked", "acc", "handle", "sparse", "kind", "__weakref__")

    def __init__(self, index, name, p, sparse):
        self.index = index
        self.name = name
        self.bname = name.encode()
        self.what = "averaging the gradient of '%s'" % name
        self.ref = weakref.ref(p)
        self.hooked = False
        self.acc = None
        self.kind = None  # torch 1.x: (dtype, device) when hooked
        self.sparse = sparse  # gradient is a sparse COO tensor (embedding with sparse=True)

    def hook(self):
        p = self.ref()
        idx = self.index
        ready = functools.partial(_grad_ready, idx)  # (called from C: no Python frame of its own)
        if _HAS_POST_ACCUMULATE:  # torch >= 2.1
            self.handle = _POST_ACCUMULATE(p, ready)
        else:  # torch 1.x: a post-hook on the AccumulateGrad node (kept alive here)
            self.acc = _accumulator(p)
            self.handle = self.acc.register_hook(ready)
            self.kind = (p.dtype, p.device)
        self.hooked = True
        _S.nhooked += 1

    def unhook(self):
        if self.hooked:
            self.handle.remove()
            self.hooked, self.acc, self.handle = False, None, None
            _S.nhooked -= 1

    def moved(self):
        """torch 1.x: the parameter was converted to another dtype or device
        (Module.to, .double(), .cuda()): autograd made it a new
        AccumulateGrad node, and the hooked one is no longer reached."""
        p = self.ref() if self.hooked and self.acc is not None else None
        return p is not None and (p.dtype, p.device) != self.kind and _accumulator(p) is not self.acc


_NOT_INFERENCE = getattr(torch, "inference_mode", None)


def _accumulator(p):
    """p's AccumulateGrad node (made by a view's backward), also where the
    model's first forward runs under torch.inference_mode(), in which
    enable_grad alone records nothing."""
    with (_NOT_INFERENCE(False) if _NOT_INFERENCE is not None else contextlib.nullcontext()), torch.enable_grad():
        return p.expand_as(p).grad_fn.next_functions[0][0]


def _grad_ready(idx, *_hook_args):
    if not _S.in_backward:
        _S.in_backward = True
        # not inside a step (an LBFGS closure's backward reduces: the step needs it now)
        _S.skip_bw = _S.k > 1 and _S.in_step == 0 and _S.bw_window + 1 < _S.k
        if _S.bw_depth > 1:  # inside a backward that another's runs (a reentrant checkpoint): it ends with the outer
            _S.end_outer = True
        else:
            torch.autograd.Variable._execution_engine.queue_callback(_end_of_backward)
    if _S.skip_bw:  # accumulate only: reduced by the window's last backward
        _S.used[idx] = 1
        return
    if idx in _S.submitted:  # a second accumulation in one backward (retain_graph tricks)
        _S.batch.flush(waited=True)
        _S.pending.wait()
        _S.submitted.clear()
    _S.used[idx] = 1
    _submit_grad(_S.params[idx])
    if len(_S.submitted) == _S.nhooked and _S.round is None:  # the last one: the round goes with it
        _submit_round()
    elif _S.batch.bytes >= _S.bucket and _S.batch.items and (_S.overlap or _S.batch.items[-1][1].is_cuda):
        _S.batch.flush()  # (HVDSHIM_OVERLAP off: host-memory gradients wait for the end of backward, in one batch)


def _submit_grad(prm):
    p = prm.ref()
    if p is None:
        return
    if prm.index in _S.early:  # averaged in backward, before the script's own hook (_hooked_grad)
        _S.submitted.add(prm.index)
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
    if _S.elastic and prm.index not in _S.copied:  # this rank's own, should a death make the step start over
        _keep_local(prm.index, g)
    if _S.share_s != 1.0:  # split mode: weighed by its share (_note_share), in a copy: AccumulateGrad can make a
        # gradient of the one backward is passing on (_sharing_test), which a write in place would change
        buf = g.mul(_S.share_s).contiguous()
    else:  # reduced while backward runs (overlap, GPU): into a copy where its memory is shared
        buf = _private(g) if _S.overlap or g.is_cuda else g
        if not buf.is_contiguous():
            buf = buf.contiguous()
    _S.batch.add(prm.bname, buf, _S.grad_op, _S.pending, prm.what, on_done=None if buf is g else lambda: g.copy_(buf))


def _hooked_grad(ref, g):
    """A hook of the script's on a parameter's gradient (p.register_hook:
    clamping, scaling, logging) runs on the average over ranks, as it runs
    on the whole batch's gradient in the single process: this hook, put
    before the script's, averages this backward's gradient of the
    parameter there and then (one blocking allreduce; every rank reaches it
    in the same backward), and the end of backward does not average that
    gradient again.  Returns None (the gradient unchanged) where the shim
    does not average this tensor's gradients."""
    prm = _early_param(ref(), g)
    if prm is None:
        return None
    buf = g.detach().clone(memory_format=torch.contiguous_format)
    _average_early(b"hvdshim.hooked.", prm, buf)
    return buf


def _early_param(p, g):
    """The followed parameter p whose gradient g a hook of the script's is
    about to see, or None where the shim does not average it (not followed,
    not started, no gradient, sparse, another dtype or device)."""
    prm = _S.by_param.get(p) if p is not None else None
    if prm is None or not prm.hooked or not (_S.enabled and _S.started) or g is None or g.is_sparse \
            or g.dtype not in _GRAD_DTYPES or g.device.type not in ("cpu", "cuda"):
        return None
    return prm


def _average_early(prefix, prm, buf):
    """buf (contiguous) averaged in place now, and the parameter marked so
    the end of backward does not average it again."""
    _allreduce_now(prefix + prm.bname, buf, _S.grad_op, prm.what)
    _S.early.add(prm.index)


def _accumulated_grad(ref, _p):
    """A post-accumulate-grad hook of the script's on a parameter (torch >=
    2.1: the optimizer step fused into backward, one optimizer per
    parameter, as PyTorch's tutorial does it) sees the average over ranks,
    as it sees the whole batch's gradient in one process: this hook, put
    before the script's, averages p.grad in place there and then (one
    blocking allreduce; every rank reaches it in the same backward), and
    the end of backward does not average that gradient again."""
    p = ref()
    g = p.grad if p is not None and not _S.skip_bw else None  # (an accumulating pass: reduced by the window's last)
    prm = _early_param(p, g)
    if prm is None:
        return
    own = _private(g)
    if own is not g:  # (shared with a gradient backward still passes on: the parameter gets the copy)
        p.grad = own
    buf = own if own.is_contiguous() else own.contiguous()
    _average_early(b"hvdshim.accumulated.", prm, buf)
    if buf is not own:
        own.copy_(buf)


def note_grad_call(inputs):
    """torch.autograd.grad (wrapped) returns gradients the shim does not see:
    a script that trains on them (p -= lr * g) trains a model per rank.
    After 16 such calls on averaged parameters with no reducing backward
    yet, rank 0 says so once (calls with create_graph, a meta-learning
    inner loop's or a penalty's, are not counted: a backward follows
    them)."""
    if _S.grad_calls < 0 or not _S.enabled:
        return
    if _S.reductions:
        _S.grad_calls = -1
        return
    first = None
    for t in (inputs,) if isinstance(inputs, torch.Tensor) else inputs:
        prm = _S.by_param.get(t) if isinstance(t, torch.Tensor) else None
        if prm is not None and prm.hooked:
            first = prm.name
            break
    if first is None:
        return
    _S.grad_calls += 1
    if _S.grad_calls < 16:
        return
    _S.grad_calls = -1
    if _S.rank == 0:
        _warn_once("autograd-grad", "torch.autograd.grad has returned gradients of the model's parameters (first "
                   "'%s') 16 times and backward() has not run: hvdshim averages the gradients backward() "
                   "accumulates, not those torch.autograd.grad returns, so a script that updates its weights "
                   "with them trains a separate model on each rank.  Use loss.backward() and read p.grad "
                   "(README, 'Gradients')" % first)


def _keep_local(idx, g):
    """A copy of this rank's gradient, in a buffer kept from step to step
    (a fresh one every step costs page faults that, on some machines, take
    longer than the step)."""
    buf = _S.local.get(idx)
    if buf is None or buf.shape != g.shape or buf.dtype != g.dtype or buf.device != g.device:
        buf = _S.local[idx] = torch.empty_like(g, memory_format=torch.contiguous_format)
    buf.copy_(g)
    _S.copied.add(idx)


def _submit_sparse(prm, p, g):
    g = g.coalesce()
    idx = g._indices().t().contiguous().cpu()  # gathered through host memory (rows differ per rank)
    vals = g._values().contiguous().cpu()
    if _S.share_s != 1.0:
        vals = vals * _S.share_s
    what = "gathering the sparse gradient of '%s'" % prm.name
    hi = hv = None
    try:
        hi = _allgather_start(prm.bname + b".idx", idx, what)
        hv = _allgather_start(prm.bname + b".val", vals, what)
    except _MembershipChanged:  # refused (ranks died): raised at the end of backward, not through autograd
        _S.pending.refused = _S.pending.refused or what
    _S.sparse.append((prm, p, idx, vals, hi, hv, g.shape))


def _finish_sparse():
    """Every gather first, then the gradients: when ranks die a gather fails
    with every p.grad still this rank's own (_start_over gathers again)."""
    if not _S.sparse:
        return
    done = []
    for k, (prm, p, idx, vals, hi, hv, shape) in enumerate(_S.sparse):
        what = "gathering the sparse gradient of '%s'" % prm.name
        _S.sparse[k] = (prm, p, idx, vals, None, hv, shape)  # (a handle waited for has ended, failed or not)
        all_idx = _allgather_finish(hi, idx, what)
        _S.sparse[k] = (prm, p, idx, vals, None, None, shape)
        done.append((p, all_idx, _allgather_finish(hv, vals, what), shape))
    _S.sparse = []
    with torch.no_grad():
        for p, all_idx, all_vals, shape in done:
            vals = all_vals / _S.size if _S.grad_op == _AVG else all_vals
            p.grad = torch.sparse_coo_tensor(all_idx.t(), vals, shape).coalesce().to(p.device)


def _drop_gather(h):
    """Release an allgather's handle whose result is not wanted."""
    if h is None:
        return
    out, rows = ctypes.c_void_p(), ctypes.c_size_t()
    if _libmod._lib.hvd_allgather_wait(h, -1.0, ctypes.byref(out), ctypes.byref(rows)) == 0 and out.value:
        _libmod._lib.hvd_free(out)


def _end_of_backward():
    _S.in_backward = False
    _S.bw_window += 1
    if _S.skip_bw:
        _S.skip_bw = False
        _S.deferred = True
        _rng.diverge()
        return
    _reduce_round()


def _submit_round():
    """This rank's part of the end-of-backward round, sent with the gradients
    batched so far.  One float32 sum (fused with float32 gradients) carries:
    which parameters got a gradient on any rank since the last reduction
    (those not submitted here then contribute their current gradient, or
    zeros); rank 0's scalar hyperparameters, each as four 16-bit pieces of
    its float64 bits (the other ranks add zeros: exact), which every rank
    takes before its optimizer step; a 1 from rank 0 (0 when rank 0 has
    finished: the others keep their own); rank 0's proposal of k
    (backward passes per step); and 1 from rank 0 when the job is to grow
    (resize.py: hosts joined); a 1 from every rank (how many take part).
    Every entry is an integer below 2**24, so float32 sums are exact in any
    order."""
    slots = _hyper_slots()
    n, m = len(_S.used), len(slots)
    vals = list(_S.used)  # one tensor made from one list: a few small torch operations cost more than the list
    if _S.rank == 0:
        vals += _hyper_pieces([v for _g, _k, _i, v in slots]) if m else ()
        vals += (1, _propose_k(), _resize.proposal(), 1)
    else:
        vals += [0] * (4 * m + 3) + [1]
    if _S.shares:  # split mode: this rank's denominator in its own 4 slots, and 1 if it weighed (_note_share)
        vals += _share_pieces(_S.share)
    vec = torch.tensor(vals, dtype=torch.float32)
    flags = _Pending()
    _S.batch.add(b"hvdshim.round.%d.%d" % (n, m), vec, _SUM, flags, "agreeing on used parameters and hyperparameters")
    _S.batch.flush(waited=True)  # the end of backward waits for it next
    _S.round = (vec, slots, flags)


def _hyper_pieces(values):
    """Each float64 as four integers (16 bits of its bit pattern each, low first)."""
    return struct.unpack("<%dH" % (4 * len(values)), struct.pack("<%dd" % len(values), *map(float, values)))


def _hyper_values(pieces):
    return struct.unpack("<%dd" % (len(pieces) // 4), struct.pack("<%dH" % len(pieces), *[int(x) for x in pieces]))


def _reduce_round():
    """End of a reducing backward (or accumulated gradients needed now):
    the round (_submit_round) unless the last gradient sent it already, the
    gradients only other ranks produced, rank 0's hyperparameters and k.
    Ranks dying meanwhile (HVDSHIM_ELASTIC): the survivors start the
    step's reduction over from their own gradients (_start_over)."""
    try:
        for attempt in range(_elastic._RETRIES + 1):
            try:
                _reduce_round_once()
                break
            except _MembershipChanged:
                if attempt == _elastic._RETRIES:
                    raise
                _start_over()
        _S.reductions += 1
        if _S.reductions == 3 and _S.compare_batches:
            _data.check_same_batches()
    finally:
        _S.submitted.clear()
        _S.early.clear()
        _S.used[:] = bytes(len(_S.used))
        _S.deferred = False
        _S.round = None
        _S.copied.clear()
        _S.share, _S.share_s = None, 1.0


def _reduce_round_once():
    if _S.round is None:
        _submit_round()
    vec, slots, flags = _S.round
    n, m = len(_S.used), len(slots)
    if len(_S.submitted) == n and not _S.batch.items:  # nothing to add after the round: one wait for all
        flags.wait_with(_S.pending)
    else:
        flags.wait()
    got = vec.tolist()  # (one read: a slice of a tensor costs more than the list's)
    if len(_S.submitted) < n:  # (every parameter submitted here: nothing to look for)
        for i, used in enumerate(got[:n]):
            if used > 0 and i not in _S.submitted:  # used elsewhere, or only in a backward that accumulated
                _submit_grad(_S.params[i])
    _S.batch.flush(waited=True)
    tail = got[n:n + 4 * m + 4]  # rank 0's hyperparameters, whether it took part, its k, whether to grow; how many did
    if _S.data_mode == "split" and tail[-1] < _S.size:
        _ranks_left(_S.size - int(tail[-1]))
    f = _share_correction(got[n + 4 * m + 4:]) if _S.shares else 1.0
    if tail[-4] > 0:  # rank 0 took part
        _apply_hyper(slots, _hyper_values(tail[:4 * m]))
        _adopt_k(int(tail[-3]))
        _resize.agreed(tail[-2])
    else:
        _adopt_k(1)
    _S.pending.wait()
    _finish_sparse()
    if f != 1.0:
        _reweigh(f)
    _rng.diverge()
    _rng.window_open()  # until the step ends: what the script draws on the averaged gradients, every rank draws


def _ranks_left(gone):
    """Split mode: ranks have finished the script while this one trains.
    Every rank holds a part of every batch there, so the job can no longer
    be the single process's run: it ends, saying why."""
    raise HvdShimError(
        "hvdshim: split mode: %d of %d ranks finished the script while this rank still trains (its backward after "
        "optimizer step %d): the ranks took different paths, and each holds a part of every batch. A loop that "
        "ends, or a step skipped, on a value each rank computes from its own slice (an accuracy or a count summed "
        "by the script, a NaN check of the loss before backward) decides differently on each rank; end loops on "
        "a fixed count or on the loss read after backward (averaged over ranks), or use HVDSHIM_DATA=shard"
        % (gone, _S.size, _S.steps))


def _start_over():
    """Ranks died during this step's reduction: every survivor is here (the
    engine fails an operation on all of them or none).  Take the change in,
    forget what was handed over (ended: failed, or averaged with the dead),
    put back this rank's own gradients and hand them over again."""
    _elastic.recover()
    _S.pending.drain()
    if _S.round is not None:
        _S.round[2].drain()
        _S.round = None
    _S.batch.forget(_S.pending)
    for _prm, _p, _idx, _vals, hi, hv, _shape in _S.sparse:  # gathered again below from p.grad (still its own)
        _drop_gather(hi)
        _drop_gather(hv)
    _S.sparse = []
    done, _S.submitted = sorted(_S.submitted), set()
    for idx in done:
        prm = _S.params[idx]
        p, mine = prm.ref(), _S.local.get(idx) if idx in _S.copied else None
        if p is not None and mine is not None and p.grad is not None:
            with torch.no_grad():
                p.grad.copy_(mine)
        _submit_grad(prm)
    _elastic.redone(_S.steps + 1)


# ------------------------------------------------------------------ gradient accumulation
def _propose_k():
    """Rank 0: backward passes per step for the coming steps.  A length seen
    for two steps in a row; one odd step (an epoch's short last window) keeps
    the current k; otherwise 1 (reduce every backward)."""
    w = _S.windows
    if not _S.accumulate:
        return 1
    if len(w) >= 2 and w[-1] == w[-2] and w[-1] > 1:
        return w[-1]
    if _S.k > 1 and _S.k in w[-2:]:
        return _S.k
    return 1


def _adopt_k(k):
    if k > 1 and k != _S.k:
        _info_once("accumulate-%d" % k, "%d backward passes per optimizer step: gradients are reduced once per step, "
                   "by the last one (HVDSHIM_ACCUMULATE=off reduces at every backward)" % k)
    _S.k = max(1, k)


def _reduce_deferred(why):
    """Gradients that only accumulated are needed now (a step, clipping, an
    unscale): reduce them before going on."""
    if _S.deferred and _S.enabled and _S.started and not _S.in_backward:
        _debug("reducing accumulated gradients before %s (the step came sooner than %d backward passes)"
               % (why, _S.k))
        _reduce_round()


def note_zero_grad():
    """zero_grad (an optimizer's or a module's) between backward passes of
    one step: their gradients are thrown away, not accumulated for the step
    (SAM's first step reads them, perturbs the weights and zeroes them, then
    backward runs again before the step).  The window of backward passes
    starts again, so k is not taken for their number; where passes were
    only accumulated on that guess, the guess was wrong: k is 1 again on
    every rank (each calls zero_grad at the same place)."""
    _rng.window_close()
    if not _S.bw_window or _S.in_backward:
        return
    _S.bw_window = 0
    if _S.k > 1:
        _S.k, _S.windows = 1, []


def _end_window():
    """An optimizer step ended: the backward passes since the last one form a window."""
    if _S.bw_window:
        _S.windows = (_S.windows + [_S.bw_window])[-2:]
        _S.bw_window = 0


# ------------------------------------------------------------------ split mode: each rank's share of a mean
# A loss that is a mean is a sum divided by what it is a mean over: the
# targets that count (cross-entropy with ignore_index or class weights), or
# the elements (a .mean(), MSE).  The plain run divides the whole batch's
# sum by the whole batch's count D; a rank divides its slice's sum by its
# own count d_r, so averaging the ranks' gradients is exact only when every
# d_r is the same (equal slices, no ignored targets).  So the rank's
# gradients are multiplied by d_r / c as they are handed over (c: an agreed
# guess of D / N, the last weighed reduction's), the round carries every
# d_r, and the averaged gradients and loss are multiplied by N c / D: the
# plain run's, to float rounding.  When the guess holds (equal counts), the
# factor is 1 and nothing is multiplied: the same arithmetic as without
# weighing.  (The accumulated gradients are multiplied, not backward's
# seed: a seed far from 1 would overflow a float16 backward under a
# GradScaler where the plain run's does not.)
_SCALINGS = ("MulBackward0", "MulBackward1", "DivBackward0", "DivBackward1", "NegBackward0")


_SUMMED = "summed"  # (_loss_kind: a sum over the batch)


def _through_scalings(fn):
    """(node, divisor): the node under the constant factors and divisions
    on top of a loss (the last division's divisor, or None), or (None,
    None) where a node on the way has more than one input."""
    divisor = None
    for _ in range(8):
        if fn is None or type(fn).__name__ not in _SCALINGS:
            break
        inputs = [nf for nf, _ in fn.next_functions if nf is not None]
        if len(inputs) != 1:
            return None, None
        if type(fn).__name__.startswith("DivBackward"):
            divisor = getattr(fn, "_saved_other", None)
        fn = inputs[0]
    return fn, divisor


def _loss_kind(fn, depth=0):
    """What the scalar loss whose node is `fn` is: a mean over a count on
    this rank (that count, a float: a loss with reduction='mean' (an NLL
    loss's saved total weight, else its input's numel), a .mean(), a sum
    divided by a count such as (l * mask).sum() / mask.sum()); _SUMMED (a
    loss with reduction='sum', a .sum()); or None (not known).  Constant
    factors (GradScaler, 1/k, label smoothing's 1 - eps) are looked through;
    terms of one kind (label smoothing's two, a VAE's BCE + KLD) are one.
    A sum of terms of which some are means is a mean over the first mean's
    count: weighed by it, a term that is the same on every rank (a penalty
    on the weights) comes out exact after the correction, and so do means
    whose counts keep one ratio on every rank (a loss per row plus a mean
    over the activations); the kinds come from the graph's shape, so every
    rank running the same code recognises the same loss."""
    fn, divisor = _through_scalings(fn)
    if fn is None:
        return None
    name = type(fn).__name__
    if name.startswith("SumBackward"):
        return _SUMMED if divisor is None else _count(divisor)
    if name in ("AddBackward0", "SubBackward0") and depth < 4:
        kinds = [_loss_kind(nf, depth + 1) for nf, _ in fn.next_functions if nf is not None]
        counts = [k for k in kinds if isinstance(k, float)]
        if counts:
            return counts[0]
        return kinds[0] if kinds and all(k is kinds[0] for k in kinds) else None
    if name == "MeanBackward0":
        numel = getattr(fn, "_saved_self_sym_numel", getattr(fn, "_saved_self_numel", None))
        return float(numel) if numel is not None else None
    reduction = getattr(fn, "_saved_reduction", None)
    if reduction == 2:  # (reduction='sum', divided by a count: F.nll_loss(..., reduction='sum') / len(x))
        return _SUMMED if divisor is None else _count(divisor)
    if reduction != 1:
        return None
    if name.startswith("NllLoss"):
        return float(fn._saved_total_weight)
    self_ = getattr(fn, "_saved_self", None)
    return float(self_.numel()) if isinstance(self_, torch.Tensor) else None


def _count(divisor):
    """A sum's divisor as the count it is a mean over (a float), or None."""
    if isinstance(divisor, torch.Tensor):
        return float(divisor) if divisor.numel() == 1 else None
    return float(divisor) if _is_number(divisor) else None


def _divided_by_batch(fn):
    """(c, rows) where the loss is a sum divided by c, the loader's batch
    size in split mode, while the sum runs over this rank's slice of `rows`
    rows (`.sum() / batch_size`: a sum over the batch times a constant, whose
    average over ranks is 1/N of the plain run's); else None.  A count that
    only happens to equal the batch size looks the same, so this only warns."""
    fn, divisor = _through_scalings(fn)
    if fn is None:
        return None
    c = _count(divisor) if divisor is not None else None
    if c is None or not _S.nominal_rows or c != _S.nominal_rows:
        return None
    if type(fn).__name__.startswith("SumBackward"):
        sizes = getattr(fn, "_saved_self_sym_sizes", None) or getattr(fn, "_saved_self_sizes", None)
        rows = int(sizes[0]) if sizes else None
    elif getattr(fn, "_saved_reduction", None) == 2:
        self_ = getattr(fn, "_saved_self", None)
        rows = int(self_.shape[0]) if isinstance(self_, torch.Tensor) and self_.dim() else None
    else:
        return None
    return (int(c), rows) if rows is not None and rows != c else None


def _share_of(fn):
    """What the loss is a mean over on this rank, or None: not a mean."""
    kind = _loss_kind(fn)
    return kind if isinstance(kind, float) else None


def _looks_summed(fn):
    return _loss_kind(fn) is _SUMMED


def _root(tensors):
    """backward's tensors: the one tensor, if one."""
    return tensors[0] if isinstance(tensors, (list, tuple)) and len(tensors) == 1 else tensors


def _note_share(tensors, grad_tensors, retain_graph, create_graph, inputs):
    """Split mode, at backward: this rank's count d_r and factor d_r / c for
    a loss recognised as a mean, in the first backward since the optimizer
    step (the gradients hold nothing yet that the correction would scale),
    when every backward reduces (k = 1) and no hook of the script's sees a
    gradient before the correction."""
    _S.share, _S.share_s, _S.share_f = None, 1.0, 1.0
    if _S.bw_window or _S.k != 1 or grad_tensors is not None or retain_graph or create_graph or inputs is not None \
            or _S.in_backward or len(_S.early_hooked) or len(_S.early_acc) or not _S.started:
        return
    t = _root(tensors)
    fn = getattr(t, "grad_fn", None)
    if fn is None or t.numel() != 1:
        return
    d = _share_of(fn)
    if d is not None:
        if _S.pad_slice:  # this rank's slice only repeats rows of a batch shorter than the ranks: none of it counts
            d = 0.0
        _S.share, _S.share_s = d, d / _S.share_c


def _share_pieces(d):
    """This rank's round slots for its denominator d (None: not weighed);
    the last ones are kept (d is the same from step to step)."""
    key = (d, _S.size, _S.rank)
    if _S.share_slots[0] != key:
        pieces = [0] * (4 * _S.size + 1)
        if d is not None:
            pieces[4 * _S.rank:4 * _S.rank + 4] = _hyper_pieces([d])
            pieces[-1] = 1
        _S.share_slots = (key, pieces)
    return _S.share_slots[1]


def _share_correction(pieces):
    """The round's share slots: N c / D where every rank weighed (and the
    next guess c = D / N); 1 where none did, or where every count is the
    last weighed reduction's (c is then D / N already)."""
    if pieces == _S.share_seen:
        return 1.0
    weighed = int(pieces[-1])
    if weighed == 0:
        return 1.0
    if weighed != _S.size:  # (the same script on every rank recognises the same loss)
        raise HvdShimError("hvdshim: split mode: %d of %d ranks recognised this backward's loss as a mean; the "
                           "ranks' losses differ in kind" % (weighed, _S.size))
    shares = _hyper_values(pieces[:-1])
    total = sum(shares)
    if total <= 0:
        return 1.0
    f = _S.size * _S.share_c / total
    _S.share_c = total / _S.size
    _S.share_seen = pieces
    return f


def _reweigh(f):
    """The averaged gradients of this reduction times f (and the loss, read
    after backward)."""
    _S.share_f = f
    with torch.no_grad():
        for idx in _S.submitted:
            p = _S.params[idx].ref()
            if p is not None and p.grad is not None:
                p.grad.mul_(f)


# ------------------------------------------------------------------ the loss a rank reads after backward
def _loss_to_average(tensors, retain_graph, create_graph, inputs):
    """The tensor whose value becomes the mean over ranks when this backward
    ends, or None: a computed floating-point scalar whose graph this
    backward frees (under retain_graph or create_graph its own node may keep
    its value for a later pass).  `scaler.scale(loss)` stands for `loss`, and
    so does `loss / k` inside `Accelerator.backward(loss)` (the HuggingFace
    Trainer returns and logs `loss`)."""
    if not (_S.enabled and _S.started and _S.average_loss) or _S.in_backward or retain_graph or create_graph \
            or inputs is not None:
        return None
    tensors = _root(tensors)
    if not _averageable(tensors):
        return None
    outer = _S.lib_loss  # Accelerator.backward(loss) backwards `loss / k` (or its scaled copy): `loss` is read
    if outer is not None and outer is not tensors and _averageable(outer) and outer.device == tensors.device:
        return outer
    scaled = _S.scaled
    if scaled is not None and scaled[0]() is tensors:
        unscaled = scaled[1]()
        if unscaled is not None and _averageable(unscaled) and unscaled.device == tensors.device:
            return unscaled
    return tensors


def _check_summed(tensors):
    """Split mode, gradients averaged: once, at the first backward, rank 0
    says so where the loss looks like a sum over the batch (its gradient is
    then 1/N of the plain run's)."""
    _S.sum_check = False
    if not (_S.enabled and _S.data_mode == "split" and _S.grad_op == _AVG and _S.rank == 0):
        return
    t = _root(tensors)
    if not (isinstance(t, torch.Tensor) and t.numel() == 1):
        return
    if _looks_summed(t.grad_fn):
        _warn_once("summed-loss", "the loss given to backward() looks like a sum over the batch (reduction='sum' "
                   "or .sum()): split mode averages the ranks' gradients, which gives 1/%d of the plain run's "
                   "gradient for a summed loss.  HVDSHIM_GRADIENTS=sum sums them (the plain run's gradient, "
                   "and the loss read after backward its sum)" % _S.size)
        return
    by_batch = _divided_by_batch(t.grad_fn)
    if by_batch is not None:
        _warn_once("summed-loss", "the loss given to backward() looks like a sum divided by %d, the DataLoader's "
                   "batch size, while this rank's slice has %d rows: if %d is a constant of the script (its batch "
                   "size), the loss is a sum over the batch, and split mode averaging the ranks' gradients gives "
                   "1/%d of the plain run's gradient; HVDSHIM_GRADIENTS=sum then sums them (divide by len(x) "
                   "instead, or use a mean, and nothing needs changing)" % (by_batch[0], by_batch[1], by_batch[0],
                                                                            _S.size))


def _averageable(t):
    """A computed scalar of its own: not a leaf (a parameter), not a view
    (writing it would change the tensor it views)."""
    return isinstance(t, torch.Tensor) and t.numel() == 1 and t.is_floating_point() and t.grad_fn is not None \
        and not t._is_view() and (t.is_cpu or t.is_cuda)


def _backward_averaging(orig, tensors, grad_tensors, retain_graph, create_graph, args, kwargs):
    """torch.autograd.backward (so Tensor.backward too): a loss it is given
    is averaged over ranks in place once backward ends, so what the script
    reads from it afterwards (`loss.item()`, a running sum, a printed value)
    is the same on every rank, and an early stop, a NaN check or a "best
    loss" taken on it is the same decision everywhere: the mean of the
    ranks' losses, as their gradients are averaged (in split mode, the
    plain run's loss of the whole batch).  The value rides in the first
    batch of gradients; a backward that reduces nothing (one that only
    accumulates) sends it alone.  HVDSHIM_LOSS=local leaves it alone."""
    if _S.bw_depth:  # called in another backward (a reentrant checkpoint recomputing its part): part of that one
        return orig(tensors, grad_tensors, retain_graph, create_graph, *args, **kwargs)
    if _S.sum_check:
        _check_summed(tensors)
    if _S.shares:
        _note_share(tensors, grad_tensors, retain_graph, create_graph, kwargs.get("inputs"))
    loss = _loss_to_average(tensors, retain_graph, create_graph, kwargs.get("inputs"))
    if loss is None:
        return orig(tensors, grad_tensors, retain_graph, create_graph, *args, **kwargs)
    src = loss.detach()
    key = (src.device, src.dtype, src.shape)
    buf = _S.loss_bufs.get(key)  # one per kind of loss, reused: waited for before backward returns
    if buf is None:
        buf = _S.loss_bufs[key] = torch.empty_like(src, dtype=torch.float64 if src.dtype == torch.float64
                                                   else torch.float32)
    scale = _S.share_s  # (as the gradients: times d_r / c)
    buf.copy_(src)
    if scale != 1.0:
        buf.mul_(scale)
    pending = _Pending()
    _S.batch.add(b"hvdshim.loss", buf, _S.grad_op, pending, "averaging the loss over ranks")
    try:
        result = orig(tensors, grad_tensors, retain_graph, create_graph, *args, **kwargs)
    except BaseException:
        _S.batch.drop(buf)  # not handed over yet: this rank's backward failed before any gradient
        raise
    _S.batch.flush(waited=True)  # still here when no gradient was reduced (an accumulating pass)
    try:
        pending.wait()
    except _MembershipChanged:  # ranks died (HVDSHIM_ELASTIC): the survivors average theirs
        pending.drain()

        def again():
            buf.copy_(src)
            if scale != 1.0:
                buf.mul_(scale)
            _allreduce(b"hvdshim.loss", buf, _S.grad_op, pending, "averaging the loss over ranks")
            pending.wait()
        _elastic.retrying(again)
    if _S.share_f != 1.0:
        buf.mul_(_S.share_f)
    src.copy_(buf)
    _S.averaged = weakref.ref(loss)
    return result


def counted(orig, *args, **kwargs):
    """torch.autograd.backward, its calls counted (install.py gives
    _backward_averaging torch's backward through this): a backward run inside
    another's (a reentrant torch.utils.checkpoint recomputes its part and
    calls backward on it from the outer backward) is part of the outer one.
    Where the first gradient comes in such an inner call, the end of
    backward runs when the outermost call returns (a callback queued there
    would end the step's backward with the inner one)."""
    if not _S.bw_depth:
        _S.data_events += 1  # (a len() answer is no longer kept for the next loader iteration: roles.py)
        if _S.rng_window is not None:
            _rng.window_close()  # (a script with no optimizer step: its update is done when backward comes again)
    _S.bw_depth += 1
    try:
        result = orig(*args, **kwargs)
    finally:
        _S.bw_depth -= 1
        outer_ends = _S.bw_depth == 0 and _S.end_outer
        if outer_ends:
            _S.end_outer = False
    if outer_ends:
        _end_of_backward()
    return result


def _note_scaled(outputs, scaled):
    """GradScaler.scale(loss): backward on the result averages `loss`."""
    if isinstance(outputs, torch.Tensor) and isinstance(scaled, torch.Tensor) and scaled is not outputs:
        _S.scaled = (weakref.ref(scaled), weakref.ref(outputs))


# ------------------------------------------------------------------ hyperparameters
def _note_optimizer(opt):
    if not any(ref() is opt for ref in _S.optimizers):
        _S.optimizers.append(weakref.ref(opt))
    _S.free_pending = True  # (its parameters that no model holds are followed at the next backward: models.adopt_free)


def _hyper_slots():
    """(group, key, index, value) for every scalar hyperparameter of every
    optimizer alive, in creation order: numbers, tuples of numbers (betas) and
    one-element tensors (a tensor lr).  Flags (bool) and None are left out."""
    out, alive = [], []
    for ref in _S.optimizers:
        opt = ref()
        if opt is None:
            continue
        alive.append(ref)
        for g in opt.param_groups:
            for k in sorted(g):
                v = g[k]
                if k == "params" or v is None:
                    continue
                if _is_number(v):
                    out.append((g, k, None, v))
                elif isinstance(v, tuple) and v and all(_is_number(x) for x in v):
                    out.extend((g, k, i, x) for i, x in enumerate(v))
                elif isinstance(v, torch.Tensor) and v.numel() == 1 and not v.requires_grad and v.is_floating_point():
                    out.append((g, k, "tensor", float(v)))
    _S.optimizers = alive
    return out


def _apply_hyper(slots, values):
    """Every rank takes rank 0's values (a no-op on rank 0)."""
    changed = []
    for (g, k, i, old), new in zip(slots, values):
        if new == old or (new != new and old != old):
            continue
        typed = type(old)(new) if i != "tensor" else new
        if i is None:
            g[k] = typed
        elif i == "tensor":
            with torch.no_grad():
                g[k].fill_(new)
        else:
            t = list(g[k])
            t[i] = typed
            g[k] = tuple(t)
        changed.append(k)
    if changed:
        _info_once("hyper", "rank %d's optimizer %s differed from rank 0's (a decision taken on this rank's own data, "
                   "such as ReduceLROnPlateau fed its own loss); every rank follows rank 0's values"
                   % (_S.rank, "/".join(sorted(set(changed)))))


# ------------------------------------------------------------------ replica guard
def _check_replicas():
    """Every HVDSHIM_CHECK_STEPS optimizer steps: one float64 max over
    [sums, -sums] of every hooked parameter; where max and min differ the
    replicas have diverged, and every rank stops with the same message."""
    if not _S.check_steps or _S.steps % _S.check_steps or not _S.params:
        return
    names, tensors = [], []
    for prm in _S.params:
        p = prm.ref()
        if p is not None:
            names.append(prm.name)
            tensors.append(p.detach().sum(dtype=torch.float64).cpu())  # (summed in float64, with no float64 copy)
    if not tensors:
        return
    sums = torch.nan_to_num(torch.stack(tensors), nan=1.0e308, posinf=1.5e308, neginf=-1.5e308)
    hi, lo = _elastic.extremes(b"hvdshim.guard.%d" % len(names), sums, "comparing parameter checksums across ranks")
    bad = (hi != lo).nonzero().flatten().tolist()
    if bad:
        i = bad[0]
        raise HvdShimError("hvdshim: the ranks' models diverged by optimizer step %d: parameter '%s' differs across "
                           "ranks (checksums from %.17g to %.17g; %d of %d parameters differ).  Something in the "
                           "script made a rank-local change to the weights or the update, such as noise drawn from "
                           "Python's random or NumPy, which stay per-rank (HVDSHIM_RNG=same makes them agree; "
                           "HVDSHIM_CHECK_STEPS=0 turns this check off)"
                           % (_S.steps, names[i], float(lo[i]), float(hi[i]), len(bad), len(names)))


def _average_loss(loss):
    """A loss averaged over ranks: the closure's (LBFGS compares loss values
    to decide how many evaluations a step takes: every rank must see the
    same) and the metric fed to ReduceLROnPlateau."""
    if not _S.enabled or not _S.started:
        return loss
    if _S.averaged is not None and _S.averaged() is loss:  # its backward averaged it already
        return loss
    if isinstance(loss, torch.Tensor):
        if loss.numel() != 1 or loss.dtype not in (torch.float32, torch.float64):
            return loss
        out = loss.detach().to("cpu", copy=True).contiguous()
    elif isinstance(loss, (int, float)):
        out = torch.tensor([float(loss)], dtype=torch.float64)
    else:
        return loss
    mine = out.clone()

    def average():
        out.copy_(mine)
        pending = _Pending()
        _allreduce(b"hvdshim.closure-loss", out, _S.grad_op, pending, "averaging the closure's loss")
        pending.wait()
    _elastic.retrying(average)
    return out.to(loss.device) if isinstance(loss, torch.Tensor) else float(out)


def _mark_step():
    """An optimizer step ended: one line of HVDSHIM_METRICS, a tick for autotune."""
    if (_S.enabled and _S.started) or _S.observe:
        _libmod._lib.hvd_step_mark(_S.samples if _S.samples else -1)
    _S.samples = 0


def _wrap_step(cls):
    def make_step(orig):
        def step(self, closure=None, *args, **kwargs):
            if _S.in_step == 0:
                _reduce_deferred("the optimizer step")
            _S.in_step += 1
            try:
                if closure is None:  # (not passed on: a script's own optimizer may take none)
                    result = orig(self, *args, **kwargs)
                elif not _S.enabled:
                    result = orig(self, closure, *args, **kwargs)
                else:
                    def averaged():
                        return _average_loss(closure())
                    result = orig(self, averaged, *args, **kwargs)
            finally:
                _S.in_step -= 1
                if _S.in_step == 0:
                    if _S.rng_window is not None:
                        _rng.window_close()
                    _mark_step()
            if _S.in_step == 0 and _S.enabled and _S.started:
                _end_window()
                _S.steps += 1
                _S.bn_calls = 0
                _check_replicas()
            return result
        step.hvdshim_step = True
        return step
    orig = _wrap(cls, "step", make_step)
    if getattr(orig, "hooked", False):  # torch's profiling wrapper, which a class gets once (Optimizer.__init__)
        cls.step.hooked = True
