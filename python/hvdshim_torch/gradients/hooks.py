"""The parameter hooks: each followed parameter's gradient goes to the engine
as it is accumulated (_grad_ready), the last one with the end-of-backward
round (reduction.py).  Where a rank has a single core (HVDSHIM_OVERLAP
auto), host-memory gradients all wait for that batch: the engine thread
would only take the core backward needs, and two thread switches per
gradient cost more than the overlap gains.  A hook of the script's on a
parameter's gradient sees the average (_hooked_grad, _accumulated_grad),
and gradients torch.autograd.grad returns are noticed (note_grad_call).

Its state: _K, the backward calls in progress."""
import contextlib
import functools
import weakref
import torch

from ..collectives import GRAD_DTYPES, allreduce_now
from ..state import _S, _warn_once
from .accumulation import _A
from .params import _P
from .reduction import _end_of_backward, _submit_round
from .submit import _H, _private, _submit_grad


class _Calls:
    def __init__(self):
        self.bw_depth = 0           # torch.autograd.backward calls running (more than 1: one inside another's backward)
        self.end_outer = False      # a nested backward took the first gradient: the outermost call ends the backward
        self.grad_calls = 0         # torch.autograd.grad calls on averaged parameters before any reduction (-1: done)


_K = _Calls()

_HAS_POST_ACCUMULATE = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
# torch's own (install.py wraps the method for the script's hooks: _accumulated_grad)
_POST_ACCUMULATE = getattr(torch.Tensor, "register_post_accumulate_grad_hook", None)


class _Param:
    __slots__ = ("index", "name", "bname", "what", "ref", "hooked", "acc", "handle", "sparse", "kind", "__weakref__")

    def __init__(self, index, name, p, sparse):
        self.index = index
        self.rename(name)
        self.ref = weakref.ref(p)
        self.hooked = False
        self.acc = None
        self.kind = None  # torch 1.x: (dtype, device) when hooked
        self.sparse = sparse  # gradient is a sparse COO tensor (embedding with sparse=True)

    def rename(self, name):
        """The name its gradient's allreduces, the timeline and the messages
        use (the same on every rank, as every rank runs the same code)."""
        self.name = name
        self.bname = name.encode()
        self.what = "averaging the gradient of '%s'" % name

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
        _P.nhooked += 1

    def unhook(self):
        if self.hooked:
            self.handle.remove()
            self.hooked, self.acc, self.handle = False, None, None
            _P.nhooked -= 1

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
    if not _A.in_backward:
        _A.in_backward = True
        # not inside a step (an LBFGS closure's backward reduces: the step needs it now)
        _A.skip_bw = _A.k > 1 and _A.in_step == 0 and _A.bw_window + 1 < _A.k
        if _K.bw_depth > 1:  # inside a backward that another's runs (a reentrant checkpoint): it ends with the outer
            _K.end_outer = True
        else:
            torch.autograd.Variable._execution_engine.queue_callback(_end_of_backward)
    if _A.skip_bw:  # accumulate only: reduced by the window's last backward
        _P.used[idx] = 1
        return
    if idx in _H.submitted:  # a second accumulation in one backward (retain_graph tricks)
        _H.batch.flush(waited=True)
        _H.pending.wait()
        _H.submitted.clear()
    _P.used[idx] = 1
    _submit_grad(_P.params[idx])
    if len(_H.submitted) == _P.nhooked and _H.round is None:  # the last one: the round goes with it
        _submit_round()
    elif _H.batch.bytes >= _S.bucket and _H.batch.items and (_S.overlap or _H.batch.items[-1][1].is_cuda):
        _H.batch.flush()  # (HVDSHIM_OVERLAP off: host-memory gradients wait for the end of backward, in one batch)


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
    prm = _P.by_param.get(p) if p is not None else None
    if prm is None or not prm.hooked or not (_S.enabled and _S.started) or g is None or g.is_sparse \
            or g.dtype not in GRAD_DTYPES or g.device.type not in ("cpu", "cuda"):
        return None
    return prm


def _average_early(prefix, prm, buf):
    """buf (contiguous) averaged in place now, and the parameter marked so
    the end of backward does not average it again."""
    allreduce_now(prefix + prm.bname, buf, _S.grad_op, prm.what)
    _H.early.add(prm.index)


def _accumulated_grad(ref, _p):
    """A post-accumulate-grad hook of the script's on a parameter (torch >=
    2.1: the optimizer step fused into backward, one optimizer per
    parameter, as PyTorch's tutorial does it) sees the average over ranks,
    as it sees the whole batch's gradient in one process: this hook, put
    before the script's, averages p.grad in place there and then (one
    blocking allreduce; every rank reaches it in the same backward), and
    the end of backward does not average that gradient again."""
    p = ref()
    g = p.grad if p is not None and not _A.skip_bw else None  # (an accumulating pass: reduced by the window's last)
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
    if _K.grad_calls < 0 or not _S.enabled:
        return
    if _S.reductions:
        _K.grad_calls = -1
        return
    first = None
    for t in (inputs,) if isinstance(inputs, torch.Tensor) else inputs:
        prm = _P.by_param.get(t) if isinstance(t, torch.Tensor) else None
        if prm is not None and prm.hooked:
            first = prm.name
            break
    if first is None:
        return
    _K.grad_calls += 1
    if _K.grad_calls < 16:
        return
    _K.grad_calls = -1
    if _S.rank == 0:
        _warn_once("autograd-grad", "torch.autograd.grad has returned gradients of the model's parameters (first "
                   "'%s') 16 times and backward() has not run: hvdshim averages the gradients backward() "
                   "accumulates, not those torch.autograd.grad returns, so a script that updates its weights "
                   "with them trains a separate model on each rank.  Use loss.backward() and read p.grad "
                   "(docs/PYTORCH.md, 'Gradients')" % first)
