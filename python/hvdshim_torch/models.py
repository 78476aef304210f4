"""Models: the first forward of a root module checks that every rank has the
same parameters and buffers, broadcasts rank 0's, and hooks the gradients;
the parameters are followed from then on (conversions, replacements, lazy
modules, unfreezing, parameters only an optimizer holds, re-initialised
ones).  A global forward pre-hook sees the module calls while something is
left to see.

Its state: _M."""
import sys
import weakref

import torch

from .capi import debug, info
from .collectives import GRAD_DTYPES, Pending, allgather_finish, allgather_start, broadcast_bytes
from .data.same_batches import _FP, _note_batch, note_root_call
from .errors import HvdShimError
from .gradients.hooks import _Param
from .gradients.params import _P
from .gradients.replicas import differing
from . import elastic as _elastic
from . import rng as _rng
from .lifecycle import _check_stand_aside, _start
from .resize import free_state, model_state
from .state import _S, _warn_once


class _Models:
    def __init__(self):
        self.known = weakref.WeakSet()      # every module of a registered root
        self.paramless = weakref.WeakSet()  # roots without parameters or buffers
        self.lazy_wait = weakref.WeakSet()  # the modules of a root in its first forward, registered after it (lazy)
        self.fresh = weakref.WeakSet()      # modules made and not yet seen known or parameterless
        self.frozen = []            # _Param not yet hooked (requires_grad False)
        self.adopt = False          # a registered root has parameters not yet followed (adopt_new)
        self.applying = 0           # Module._apply depth (conversions: the hooks follow at the outermost)


_M = _Models()

_is_lazy = getattr(torch.nn.parameter, "is_lazy", lambda t: False)


def _tensor_entries(module):
    """The parameters and buffers of a module that exist: not those of lazy
    modules (nn.LazyLinear, ...) before their first forward makes them."""
    out = [("p", n, t) for n, t in module.named_parameters() if not _is_lazy(t)]
    out += [("b", n, t) for n, t in module.named_buffers() if not _is_lazy(t)]
    return out


def _has_lazy(module):
    return any(_is_lazy(t) for t in module.parameters()) or any(_is_lazy(t) for t in module.buffers())


def _register_after_forward(module):
    """A model with lazy modules makes their parameters in its first forward
    (each lazy module's own pre-hook, after this one): it is registered when
    that forward returns, before any backward (its modules are let through
    meanwhile).  The engine starts first, so every rank makes them from
    rank 0's random state; rank 0's values are broadcast then as at any
    model's first forward."""
    if not _start():
        return
    _M.lazy_wait.update(module.modules())

    def registered(mod, inputs, _output):
        handle.remove()
        for m in mod.modules():
            _M.lazy_wait.discard(m)
        _register_root(mod)
        _count_samples(mod, inputs)
    handle = module.register_forward_hook(registered)


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
    h = allgather_start(("hvdshim.sig.%s" % tag).encode(), data, "checking %s" % what)
    allsig = allgather_finish(h, data, "checking %s" % what)
    parts = bytes(allsig.tolist()).split(b"\0")[:-1]
    ref = parts[0].decode()
    for r, p in enumerate(parts[1:], start=1):
        diff = _first_difference(ref, p.decode(), r)
        if diff:
            raise HvdShimError("hvdshim: %s differs across ranks: %s" % (what, diff))


def _warn_scripted_norms(module, what):
    """BatchNorm layers inside TorchScript call torch's own batch_norm, out
    of reach of the whole batch's statistics (norms.py): said once, naming
    them, since their outputs then differ from the plain run's."""
    scripted = [n for n, m in module.named_modules()
                if isinstance(m, torch.jit.ScriptModule) and "BatchNorm" in (getattr(m, "original_name", "") or "")]
    if scripted:
        _warn_once("scripted-bn", "%s: BatchNorm layer(s) %s run under TorchScript, where hvdshim cannot normalize "
                   "over the whole batch (HVDSHIM_SYNC_BN): each rank normalizes by its own slice, so the run differs "
                   "from the plain one (script the model after training, or leave BatchNorm out of torch.jit.script)"
                   % (what, ", ".join("'%s'" % n for n in scripted[:4]) + (" ..." if len(scripted) > 4 else "")))


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
        if kind == "p" and t.requires_grad and t.dtype not in GRAD_DTYPES:
            raise HvdShimError("hvdshim: %s: parameter '%s' is %s; hvdshim averages float32, float64, float16 and "
                               "bfloat16 gradients (freeze it with requires_grad=False, or keep it out of the model)"
                               % (what, n, str(t.dtype).replace("torch.", "")))
    _verify_same_everywhere("m%d" % k, what, _signature(entries))
    saved = model_state(k)  # a restarted job: the state it saved (every rank has it)
    if saved is not None:
        module.load_state_dict(saved)
    fresh = [("m%d.%s.%s" % (k, kind, n), n, t) for kind, n, t in entries
             if t not in _P.by_param]  # (one shared with a model registered earlier has them)
    _rank0_values(fresh)
    # parameters followed before as an optimizer's that no model held (the
    # optimizer was made, and another model ran, before this one's first
    # forward: a GAN's generator) are this model's: named so from now on
    adopted = [(n, _P.by_param[p]) for n, p in module.named_parameters()
               if p in _P.by_param and _P.by_param[p].name.startswith("free")]
    for n, prm in adopted:
        prm.rename("m%d.%s" % (k, n))
    _S.models.append(weakref.ref(module))
    _S.roots.add(module)
    _M.known.update(module.modules())
    _follow_params(module, k)
    if _S.sync_bn and _S.rank == 0:
        _warn_scripted_norms(module, what)
    if _S.rank == 0:
        hooked = sum(1 for p in module.parameters() if p in _P.by_param and _P.by_param[p].hooked)
        info("%s: %d parameters and buffers broadcast from rank 0%s, %d gradients hooked" % (
            what, len(fresh), " (%d more were at an optimizer's first use, as parameters no model run so far held)"
            % len(adopted) if adopted else "", hooked))
    if _S.free_pending:  # (an optimizer made before this first forward: its other parameters, before they are used)
        adopt_free()


def _rank0_values(named, in_backward=False):
    """Every tensor of `named` (wire name, name, tensor) takes rank 0's
    values (one broadcast each, waited for together).  in_backward: written
    without bumping their version (values a running backward's forward
    used: autograd would refuse them)."""
    pending, copies = Pending(), []
    with torch.no_grad():
        for wire, n, t in named:
            buf = t if t.is_contiguous() else t.contiguous()
            if buf is not t:
                copies.append((buf, t))
            broadcast_bytes(wire.encode(), buf, pending, "broadcasting %s" % n)
        pending.wait()
        for buf, t in copies:
            (t.data if in_backward else t).copy_(buf)


def to_eval(module):
    """A registered model leaves training mode (model.eval()) where each rank
    keeps its own buffers (HVDSHIM_SYNC_BN off: shard mode's default): its
    buffers (BatchNorm's running statistics, updated from each rank's own
    batches) take rank 0's values, as DistributedDataParallel's
    broadcast_buffers does at every forward, so every rank evaluates the
    same model: an evaluation that decides (early stopping, the best
    checkpoint) decides alike on every rank."""
    if _S.sync_bn or not (_S.enabled and _S.started) or _S.size < 2:
        return
    k = next((i for i, ref in enumerate(_S.models) if ref() is module), None)
    if k is None:
        return
    named = [("m%d.b.%s" % (k, n), n, t) for n, t in module.named_buffers()
             if not _is_lazy(t) and t.device.type in ("cpu", "cuda")]
    if named:
        _elastic.retrying(_rank0_values, named)


# torch.nn.init's functions that draw random numbers (reset_parameters calls them)
RANDOM_INITS = ("uniform_", "normal_", "trunc_normal_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
                "kaiming_normal_", "orthogonal_", "sparse_")


def reinitialised(t):
    """A torch.nn.init function filled `t` with random numbers.  Where `t`
    is a followed parameter (itself or its .data: a layer re-initialised
    mid-training, reset_parameters(), a head reset each epoch), each rank
    drew it from its own stream: every rank takes rank 0's values, which
    the plain run drew.  Every rank re-initialises at the same place in the
    script, as every rank runs the same code.  A parameter not followed yet
    (a module being built) is left alone: its model's registration
    broadcasts it."""
    if not (_S.enabled and _S.started and isinstance(t, torch.Tensor)):
        return
    prm = _P.by_param.get(t)
    if prm is None and t.layout == torch.strided and t.numel():  # its .data, or a part of it
        prm = next((q for q in _P.params if _within(t, q.ref())), None)
    p = prm.ref() if prm is not None else None
    if p is not None:
        _rank0_values([("hvdshim.init.%s" % prm.name, prm.name, p)])


def _within(t, p):
    """t's first element lies in parameter p's memory."""
    if p is None or p.layout != torch.strided or p.device != t.device:
        return False
    lo = p.data_ptr()
    return lo <= t.data_ptr() < lo + p.numel() * p.element_size()


def _follow_params(module, k):
    """Every parameter of root k not followed yet gets its place in the used
    bitmap and its gradient hook (or waits, frozen)."""
    sparse = set()
    for m in module.modules():
        if getattr(m, "sparse", False) is True and isinstance(getattr(m, "weight", None), torch.nn.Parameter):
            sparse.add(m.weight)
    for n, p in module.named_parameters():
        if p in _P.by_param:
            continue
        if _is_lazy(p):  # a lazy module not called yet: adopted once it has been (adopt_new)
            _M.adopt = True
            continue
        _follow("m%d.%s" % (k, n), p, p in sparse)


def _follow(name, p, sparse):
    """Parameter p, followed from now on: its place in the used bitmap, and
    its gradient hook (or a place among the frozen, until unfrozen)."""
    prm = _Param(len(_P.params), name, p, sparse)
    _P.by_param[p] = prm
    _P.params.append(prm)
    _P.used.append(0)
    if p.requires_grad:
        prm.hook()
    else:
        _M.frozen.append(prm)


def converted():
    """Module._apply ended (to(), cuda(), double(), ...; at the outermost
    call): torch 1.x gives a parameter converted to another dtype or device
    a new AccumulateGrad node, so its hook goes there; a conversion that
    makes new Parameter objects
    (torch.__future__.set_overwrite_module_params_on_conversion) leaves
    parameters to adopt."""
    for prm in _P.params:
        if prm.moved():
            prm.unhook()
            prm.hook()
    note_new_params()


def note_new_params():
    """A parameter may have joined a registered root (a conversion, or
    `module.weight = nn.Parameter(...)` on one of its modules): it is
    adopted at the next forward of a root (adopt_new), which the global
    forward pre-hook must see."""
    for ref in _S.models:
        root = ref()
        if root is not None and any(p not in _P.by_param for p in root.parameters()):
            _M.adopt = True
            if _S.fwd_hook is None and _S.fwd_hook_fn is not None:
                hook_forwards(_S.fwd_hook_fn)
            return


def adopt_new():
    """At a root's forward: parameters that joined registered roots since
    their registration (every rank runs the same code, so they join on every
    rank before the same forward) take rank 0's values, as a root's do at
    its first forward, and are followed from now on; those they replaced
    (freed) are no longer waited for."""
    _M.adopt, _S.recheck = False, True  # (the global forward pre-hook may come off again)
    for prm in _P.params:
        if prm.hooked and prm.ref() is None:
            prm.unhook()
    for k, ref in enumerate(_S.models):
        root = ref()
        if root is None:
            continue
        new = [("p", n, p) for n, p in root.named_parameters() if p not in _P.by_param and not _is_lazy(p)]
        _M.adopt = _M.adopt or any(_is_lazy(p) for p in root.parameters())  # (looked for again at the next forward)
        if not new:
            continue
        what = "model %d (%s): parameters set after its first forward" % (k, type(root).__name__)
        _verify_same_everywhere("m%d.new%d" % (k, len(_P.params)), what, _signature(new))
        _rank0_values([("m%d.new.%s" % (k, n), n, t) for _kind, n, t in new])
        _follow_params(root, k)
        if _S.rank == 0:
            info("%s: %s broadcast from rank 0 and followed" % (what, ", ".join(n for _k, n, _p in new)))
    if _S.free_pending:
        adopt_free()


def adopt_free(in_backward=False):
    """Parameters an optimizer updates that no registered model holds: a
    learnable loss weight or temperature made as a bare nn.Parameter (or a
    tensor with requires_grad), a model only ever called through
    functional calls.  Followed as a model's are (rank 0's values
    broadcast, gradients averaged, the replica guard), named by their place
    in the list of followed parameters (free<i>: the same on every rank,
    never reused).  Looked for after an optimizer was made or given a
    group: at a model's first forward, before it runs, or else when an
    outermost backward begins (before its first gradient: a model used only
    through functional calls; in_backward, values the forward used are
    written without bumping their version, so autograd does not refuse
    them)."""
    _S.free_pending = False
    if not _S.enabled:
        return
    new, seen = [], set()
    for ref in _S.optimizers:
        opt = ref()
        for g in (opt.param_groups if opt is not None else ()):
            for p in g["params"]:
                if isinstance(p, torch.Tensor) and p not in _P.by_param and p not in seen and not _is_lazy(p) \
                        and p.device.type in ("cpu", "cuda") and p.layout == torch.strided \
                        and p.dtype in GRAD_DTYPES:
                    seen.add(p)
                    new.append(p)
    if not new or not _start():
        return
    base = len(_P.params)
    entries = [("p", "free%d" % (base + i), p) for i, p in enumerate(new)]
    what = "the optimizers' parameters that no model holds"
    _verify_same_everywhere("free%d" % base, what, _signature(entries))
    with torch.no_grad():
        for _kind, n, t in entries:
            saved = free_state(n)  # a restarted job: the value it saved (every rank has it)
            if saved is not None:
                (t.data if in_backward else t).copy_(saved)
    _rank0_values([("hvdshim.%s" % n, n, t) for _kind, n, t in entries], in_backward)
    for _kind, n, p in entries:
        _follow(n, p, False)
    if _S.rank == 0:
        info("%d parameter(s) of an optimizer that no model run so far holds (first: shape %s): broadcast from "
             "rank 0 and followed" % (len(new), tuple(new[0].shape)))


def _hook_unfrozen():
    still = []
    for prm in _M.frozen:
        p = prm.ref()
        if p is None:
            continue
        if p.requires_grad:
            prm.hook()
        else:
            still.append(prm)
    _M.frozen = still


def _count_samples(module, inputs):
    """A training forward of a model: its batch counts toward the step's samples."""
    if module in _S.roots:
        _count_batch(module, inputs)


def _count_batch(module, inputs):
    """A root's forward.  In training mode with gradients enabled it adds
    its batch (the first input's first dimension) to the step's samples, and
    the batch counts in the first steps' fingerprint (same_batches.py)."""
    if _FP.same_batches is not None:
        note_root_call()
    if module.training and torch.is_grad_enabled():
        if _rng.manual_undecided():
            decide_manual_window()
        # (a training forward inside the step window: another pass of an accumulation
        # window begins; its masks are this rank's own, and its batch, perhaps drawn
        # in the window, is not compared)
        in_window = _rng.window_close()
        x = inputs[0] if inputs else _first_keyword_tensor()
        if isinstance(x, torch.Tensor) and x.dim() > 0:
            _S.samples += x.shape[0]
            if _FP.same_batches is not None and 1 <= _S.reductions < 3 and not in_window:
                _note_batch(x)


_MANUAL_LOOKS = 8  # training forwards without a draw since the backward after which the window is opened


def decide_manual_window():
    """A script with no optimizer (it updates its weights by hand after
    backward), at a training forward after a reducing backward that opened
    no step window.  Where a rank drew from torch's generators since, it
    drew either its next batch (random data the script makes itself: each
    rank's own, as the plain run's next batch is another) or noise its
    update put into the weights, which every rank must draw alike.  The
    ranks' weights tell which: the same everywhere, the draws stay each
    rank's own (the window never opens for this script); else every rank
    takes rank 0's weights now and the window opens after every reducing
    backward (the noise drawn there is the same everywhere).  Decided once:
    at the first forward that finds a draw on any rank, or after
    _MANUAL_LOOKS forwards that found none (the window).  Every rank comes
    here at the same forward (the withheld backward and the count are the
    same everywhere)."""
    drew = _rng.drew_since_withheld()
    _S.recheck = True  # (the global forward pre-hook may come off once decided)
    hi, _lo = _elastic.extremes(b"hvdshim.rng.manual", torch.tensor([1.0 if drew else 0.0], dtype=torch.float64),
                                "agreeing whether the ranks drew since the backward")
    if float(hi[0]) == 0.0:
        _rng._R.manual_looks += 1
        if _rng._R.manual_looks >= _MANUAL_LOOKS:
            _rng._R.manual = "window"
        return
    got = differing(b"hvdshim.rng.manual.weights")
    if got is None or not got[3]:
        _rng._R.manual = "own"
        debug("no optimizer: what the script drew between its backward and its next forward left the weights alike "
              "on every rank (its own batches): those draws stay each rank's own")
        return
    _rng._R.manual = "window"
    followed = [(prm, prm.ref()) for prm in _P.params]
    _elastic.retrying(_rank0_values, [("hvdshim.manual.%s" % prm.name, prm.name, p) for prm, p in followed
                                      if p is not None])
    debug("no optimizer: the ranks' weights differed after the script's own update (noise drawn by each rank): "
          "every rank took rank 0's, and what the script draws after each backward is the same everywhere from now on")


def _first_keyword_tensor():
    """A model called with keyword arguments only (model(**batch), as the
    HuggingFace Trainer does): a global forward pre-hook gets no inputs, so
    the batch is the first tensor among the keywords of the Module call
    being hooked (a hook of its own on the model would be pickled with it
    by torch.save(model))."""
    f = sys._getframe(2)
    for _ in range(8):
        if f is None:
            return None
        if f.f_code.co_name == "_call_impl" and "kwargs" in f.f_code.co_varnames:
            kw = f.f_locals.get("kwargs")
            for v in (kw.values() if isinstance(kw, dict) else ()):
                if isinstance(v, torch.Tensor):
                    return v
            return None
        f = f.f_back
    return None


_TRACING = torch.jit.is_tracing  # (looked up once: the pre-hook runs at every module call while it is on)


def _forward_pre_hook(module, inputs):
    if _TRACING():  # torch.jit.trace (SummaryWriter.add_graph's): what it runs is traced and run again to check, and
        return None  # the first forward's broadcast would differ between the two; the next real forward is the first
    if module in _M.known:  # (every forward of every module comes here while it is on: the known ones first)
        if module in _S.roots:
            if _M.adopt:
                adopt_new()
            _count_batch(module, inputs)
            if _M.frozen:  # parameters unfrozen since the last forward
                _hook_unfrozen()
            if _S.recheck:
                _unhook_if_done()
        return None
    if not _S.enabled or module in _M.paramless or module in _M.lazy_wait:
        return None
    _S.recheck = True
    if next(module.parameters(), None) is None and next(module.buffers(), None) is None:
        _M.paramless.add(module)
        return None
    _check_stand_aside()
    if _S.enabled and _in_functorch_transform():
        _check_stand_aside("a model's first forward runs under a torch.func transform (grad, vjp, vmap); its "
                           "gradients are returned by the transform and never reach .grad", undistributed=True)
    if not _S.enabled:
        return None
    if _has_lazy(module):
        _register_after_forward(module)
        return None
    _register_root(module)
    _count_samples(module, inputs)
    return None


def hook_forwards(hook):
    """Install the global forward pre-hook (every module call comes to it)."""
    _S.fwd_hook_fn = hook
    _S.fwd_hook = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    _S.hook_handles.append(_S.fwd_hook)


def module_made(module):
    """A module was made (Module.__init__; __setstate__ for copies and
    unpickled ones): its first forward must reach the hook, which goes back
    on if it was off."""
    _M.fresh.add(module)
    if _S.fwd_hook is None and _S.enabled and _S.fwd_hook_fn is not None:
        hook_forwards(_S.fwd_hook_fn)


def new_model_to_train():
    """A model made and not run yet, in training mode, holding a trainable
    parameter: 'optimized' where an optimizer holds one of them (a student
    next to a teacher in eval mode), 'made' where none does, None where
    there is no such model (data/roles.py: what an iteration is for)."""
    held, made = None, None
    for m in list(_M.fresh):
        if not m.training or m in _M.known:
            continue
        ps = [p for p in m._parameters.values() if p is not None and p.requires_grad]
        if not ps:
            continue
        made = "made"
        if held is None:
            held = {id(p) for ref in _S.optimizers if ref() is not None
                    for g in ref().param_groups for p in g["params"]}
        if any(id(p) in held for p in ps):
            return "optimized"
    return made


def _unhook_if_done():
    """Take the global forward pre-hook off once every module made so far has
    been seen (registered with a root, or parameterless), no parameter is
    frozen, no samples are counted and the first training batches are
    compared (same_batches.check_same_batches): a module call with a global hook
    takes torch's slow path (the tiny model's 4 calls a step: 15-20 us)."""
    _S.recheck = False
    if _S.fwd_hook is None or _M.frozen or _S.count_samples or _FP.same_batches is not None or _M.adopt \
            or _rng.manual_pending():
        return
    for m in list(_M.fresh):
        if m in _M.known or m in _M.paramless:
            _M.fresh.discard(m)
    if not _M.fresh:
        _S.fwd_hook.remove()
        _S.hook_handles = [h for h in _S.hook_handles if h is not _S.fwd_hook]
        _S.fwd_hook = None


def _in_functorch_transform():
    level = getattr(getattr(torch._C, "_functorch", None), "maybe_current_level", None)
    try:
        return level is not None and level() is not None
    except Exception:
        return False
