"""Entry: patching torch and installing the adapter in a rank process."""
import ctypes
import functools
import os
import sys
import weakref
import torch

from . import capi
from .capi import debug, info, setting
from .patching import after_import, untraced, wrap
from . import tempdir as _tempdir
from . import checkpoints as _checkpoints
from .state import _S, _warn_once
from .output import _redirect_output, _set_threads, _short_errors, _stop_gracefully, cores_per_rank
from .lifecycle import HOROVOD, _check_stand_aside, _other_distribution, _stand_aside
from .gradients.accumulation import note_zero_grad
from .gradients.backward import _B, _average_loss, _backward_averaging, _note_scaled, counted
from .gradients.hooks import _HAS_POST_ACCUMULATE, _K, _accumulated_grad, _hooked_grad, note_grad_call
from .gradients.hyperparams import _note_optimizer
from .gradients.params import _P
from .gradients.reduction import _reduce_deferred
from .gradients.step import _wrap_step
from . import rng as _rng
from .rng import seed_torch_at_import as _seed_torch
from .models import (_M, RANDOM_INITS, _count_batch, _forward_pre_hook, adopt_free, converted, hook_forwards,
                     module_made, new_model_to_train, note_new_params, reinitialised, to_eval)
from .data.iterable import _dealt_iter, _dealt_len
from .data.iteration import _IT, padded_slices
from .data.loaders import _prepare_loader, _warn_if_alone, ensure_prepared
from .data.redeal import redealt
from .data.roles import _EV, iteration_begins, iteration_made, note_switch, role_of
from .data.same_batches import _FP
from . import norms as _norms
from . import grow as _grow
from . import files as _files
from . import resize as _resize


def _patch():
    from torch.utils.data import DataLoader

    def make_loader_init(orig):
        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            _prepare_loader(self)
        return __init__
    wrap(DataLoader, "__init__", make_loader_init)

    def make_loader_iter(orig):
        def made(self):
            dealt = _dealt_iter(self, orig)
            if dealt is not None:
                return dealt
            _warn_if_alone(self)
            _IT.pads_last = None
            return padded_slices(redealt(self, orig(self)))

        def __iter__(self):
            ensure_prepared(self)
            _rng.window_close()  # (the iterator's seeds drawn from this rank's own state, as the plain run's)
            _S.whole_batches = True  # (until a dealt iteration's batch comes: iteration.dealt_batches)
            _S.pad_slice = False
            role = iteration_begins(self)  # (sharded or whole: now, or as a len() just before said: data/roles.py)
            it = None
            try:
                if _grow._G.tracking:  # hosts may join (resize.py): the loaders' places are counted
                    it = _resize.iterate(self, lambda: made(self))
                else:
                    it = made(self)
            finally:
                it = iteration_made(role, it)
            return it
        return __iter__
    wrap(DataLoader, "__iter__", make_loader_iter)

    def make_iterator_init(orig):
        def __init__(self, loader, *args, **kwargs):
            orig(self, loader, *args, **kwargs)  # (its workers start after this, in the subclass's __init__)
            role = role_of(loader)
            if role is not None and role.making:  # an iteration that trains: its workers' seeds this rank's own
                _rng.own_worker_seeds(self)
        return __init__
    base_iterator = getattr(torch.utils.data.dataloader, "_BaseDataLoaderIter", None)
    if base_iterator is not None:
        wrap(base_iterator, "__init__", make_iterator_init)

    def make_loader_len(orig):
        def __len__(self):
            ensure_prepared(self)
            return _dealt_len(self, orig(self))
        return __len__
    wrap(DataLoader, "__len__", make_loader_len)

    def make_add_group(orig):
        def add_param_group(self, param_group):
            orig(self, param_group)
            _note_optimizer(self)
            group = self.param_groups[-1]
            if _S.scale_lr and _S.enabled and "lr" in group:
                group["lr"] = group["lr"] * _S.size
        return add_param_group
    wrap(torch.optim.Optimizer, "add_param_group", make_add_group)

    # HVDSHIM_SCALE_LR in an elastic job: the schedulers' base_lrs (taken from
    # the scaled lr) are rescaled with it when ranks die (elastic._rescale_lr)
    base = getattr(torch.optim.lr_scheduler, "LRScheduler", None) or \
        getattr(torch.optim.lr_scheduler, "_LRScheduler", None)
    # Hosts joining (resize.py): every scheduler's state is saved
    if (_S.scale_lr or _grow._G.tracking) and base is not None:
        def make_scheduler_init(orig):
            def __init__(self, *args, **kwargs):
                orig(self, *args, **kwargs)
                _S.schedulers.append(weakref.ref(self))
            return __init__
        wrap(base, "__init__", make_scheduler_init)
        plateau = getattr(torch.optim.lr_scheduler, "ReduceLROnPlateau", None)
        if _grow._G.tracking and isinstance(plateau, type) and not issubclass(plateau, base):  # torch < 2.2
            wrap(plateau, "__init__", make_scheduler_init)

    # ReduceLROnPlateau fed a rank's own loss: it gets the mean over ranks
    # (the loss of the whole epoch, as in the plain run), so every rank's
    # scheduler takes the same decisions (hyperparameters also follow rank 0
    # at every backward, for decisions the script takes by itself).
    plateau = getattr(torch.optim.lr_scheduler, "ReduceLROnPlateau", None)
    if plateau is not None:
        def make_plateau_step(orig):
            def step(self, metrics, *args, **kwargs):
                return orig(self, _average_loss(metrics), *args, **kwargs)
            return step
        wrap(plateau, "step", make_plateau_step)

    # Hogwild: the script trains a shared model in its own child processes,
    # which hvdshim cannot reach; distributing only the parent would mix a
    # broadcast and sharded evaluation into an undistributed run.
    def make_share_memory(orig):
        def share_memory(self):
            reason = "the script shares a model with its own child processes (Module.share_memory(), hogwild training)"
            if _S.started and _S.models:  # too late to stand aside: say so and go on
                _warn_once("share-memory", reason + " after hvdshim started distributing it; what the children "
                           "do to the model is not distributed")
            else:
                _check_stand_aside(reason, undistributed=True)
            return orig(self)
        return share_memory
    wrap(torch.nn.Module, "share_memory", make_share_memory)

    # Module.train()/eval(): when the script switches its models (data/roles.py:
    # a mode set just before a loop, or before len(loader), is its word)
    switched = untraced(note_switch)

    def make_module_train(orig):
        def train(self, mode=True):
            switched()
            return orig(self, mode)
        return train
    wrap(torch.nn.Module, "train", make_module_train)

    _wrap_optimizers()
    _files.install()
    _EV.new_model = new_model_to_train  # (data/roles.py: a layer below models)

    # what reads gradients between backward and step: accumulated gradients are reduced first
    def make_needs_grads(orig):
        def needs_grads(*args, **kwargs):
            _reduce_deferred(getattr(orig, "__name__", "reading gradients"))
            return orig(*args, **kwargs)
        needs_grads.hvdshim_reads_grads = True
        return needs_grads
    import torch.nn.utils.clip_grad as clip_mod
    for owner in (torch.nn.utils, clip_mod):
        for fn in ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "get_total_norm"):
            if hasattr(owner, fn) and not getattr(getattr(owner, fn), "hvdshim_reads_grads", False):
                wrap(owner, fn, make_needs_grads)
    # GradScaler: unscale_ reads gradients; backward on scale(loss)'s result averages loss
    def make_scale(orig):
        def scale(self, outputs, *args, **kwargs):
            result = orig(self, outputs, *args, **kwargs)
            _note_scaled(outputs, result)
            return result
        scale.hvdshim_scale = True
        return scale
    def make_scaler_init(orig):
        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            _resize.note_scaler(self)
        __init__.hvdshim_noted = True
        return __init__
    for amp_mod in ("torch.cuda.amp", "torch.amp", "torch.cpu.amp"):
        scaler = getattr(sys.modules.get(amp_mod) or _import_quiet(amp_mod), "GradScaler", None)
        if not isinstance(scaler, type):
            continue
        if "unscale_" in vars(scaler) and not getattr(scaler.unscale_, "hvdshim_reads_grads", False):
            wrap(scaler, "unscale_", make_needs_grads)
        if "scale" in vars(scaler) and not getattr(scaler.scale, "hvdshim_scale", False):
            wrap(scaler, "scale", make_scale)
        if _grow._G.tracking and "__init__" in vars(scaler) and not getattr(scaler.__init__, "hvdshim_noted", False):
            wrap(scaler, "__init__", make_scaler_init)  # (hosts joining: its state is saved and restored)

    # a loss given to backward reads as the mean over ranks afterwards
    # (Tensor.backward calls torch.autograd.backward)
    def make_backward(orig):
        run = functools.partial(counted, orig)

        def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, *args, **kwargs):
            if _S.free_pending and not _K.bw_depth:  # (an optimizer's parameters no model holds: followed first)
                adopt_free(in_backward=True)
            return _backward_averaging(run, tensors, grad_tensors, retain_graph, create_graph, args, kwargs)
        return untraced(backward)
    wrap(torch.autograd, "backward", make_backward)

    dist = getattr(torch, "distributed", None)
    if dist is not None and hasattr(dist, "init_process_group"):
        def make_init_pg(orig):
            def init_process_group(*args, **kwargs):
                _check_stand_aside("torch.distributed.init_process_group was called")
                return orig(*args, **kwargs)
            return init_process_group
        wrap(dist, "init_process_group", make_init_pg)

    # a script that starts its own training processes (pytorch/examples'
    # ImageNet trainer with --multiprocessing-distributed: mp.spawn, then
    # init_process_group in each child): every rank starts them, and they
    # are out of hvdshim's reach
    tmp = getattr(torch, "multiprocessing", None)
    for fn in ("spawn", "start_processes"):
        if tmp is not None and callable(getattr(tmp, fn, None)):
            def make_spawn(orig, fn=fn):
                def spawn(*args, **kwargs):
                    if _S.enabled and _S.rank == 0:
                        _warn_once("spawn", "torch.multiprocessing.%s was called on every rank: the script starts its "
                                   "own processes, as one that distributes itself does (--multiprocessing-distributed, "
                                   "a process per device): every one of the %d ranks starts them, and hvdshim does not "
                                   "reach them (their gradients are not averaged with the ranks', their files are "
                                   "real); run such a script with -np 1, or without that option" % (fn, _S.size))
                    return orig(*args, **kwargs)
                return spawn
            wrap(tmp, fn, make_spawn)

    # modules made from now on reach the forward pre-hook at their first
    # forward (it goes back on for them when it was taken off)
    made = untraced(module_made)

    def make_module_init(orig):
        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            made(self)
        return __init__
    wrap(torch.nn.Module, "__init__", make_module_init)

    def make_module_setstate(orig):
        def __setstate__(self, state):
            orig(self, state)
            made(self)
        return __setstate__
    wrap(torch.nn.Module, "__setstate__", make_module_setstate)

    # the gradient hooks follow the parameters of a registered model through
    # conversions (to, cuda, double...) and replacements (module.w = Parameter)
    def make_apply(orig):
        def _apply(self, *args, **kwargs):
            _M.applying += 1
            try:
                return orig(self, *args, **kwargs)
            finally:
                _M.applying -= 1
                if _M.applying == 0 and _S.enabled and _P.params:
                    converted()
        return _apply
    wrap(torch.nn.Module, "_apply", make_apply)

    # a registered model's buffers take rank 0's when it leaves training (models.to_eval)
    def make_train(orig):
        def train(self, mode=True):
            was = self.training
            out = orig(self, mode)
            if was and not mode and self in _S.roots:
                to_eval(self)
            return out
        return train
    wrap(torch.nn.Module, "train", make_train)

    def make_register_parameter(orig):
        def register_parameter(self, name, param):
            orig(self, name, param)
            if param is not None and _P.params and self in _M.known and param not in _P.by_param:
                note_new_params()
        return register_parameter
    wrap(torch.nn.Module, "register_parameter", make_register_parameter)

    def make_random_init(orig):
        def init(tensor, *args, **kwargs):
            result = orig(tensor, *args, **kwargs)
            if _S.started:
                reinitialised(tensor)
            return result
        return init
    for name in RANDOM_INITS:
        if hasattr(torch.nn.init, name):
            wrap(torch.nn.init, name, make_random_init)

    # a hook of the script's on a parameter's gradient sees the average over
    # ranks, as it sees the whole batch's gradient in one process
    # (hooks._hooked_grad, put before the first hook of the script's on each
    # leaf that takes gradients)
    def averaged_first(ours, marks):
        """Tensor.register_... wrapped: the script's first hook of the kind
        on a leaf that takes gradients gets `ours` put ahead of it (the
        leaves that have it: the map params._P.<marks>)."""
        ours = untraced(ours)

        def make(orig):
            def register(self, hook):
                marked = getattr(_P, marks)
                if self.is_leaf and self.requires_grad and self not in marked:
                    orig(self, functools.partial(ours, weakref.ref(self)))
                    marked[self] = True
                return orig(self, hook)
            return register
        return make
    wrap(torch.Tensor, "register_hook", averaged_first(_hooked_grad, "early_hooked"))
    # the same for a hook on the accumulated gradient (torch >= 2.1): an
    # optimizer step fused into backward steps on the average
    # (hooks._accumulated_grad, put before the script's first such hook)
    if _HAS_POST_ACCUMULATE:
        wrap(torch.Tensor, "register_post_accumulate_grad_hook", averaged_first(_accumulated_grad, "early_acc"))

    # gradients taken with torch.autograd.grad are not averaged: a script
    # that trains on them alone is told so
    def make_grad(orig):
        def grad(outputs, inputs, *args, **kwargs):
            if _K.grad_calls >= 0 and not kwargs.get("create_graph") and not (len(args) > 2 and args[2]):
                note_grad_call(inputs)
            return orig(outputs, inputs, *args, **kwargs)
        return grad
    wrap(torch.autograd, "grad", make_grad)
    _norms.install(_S.sync_bn)
    _S.count_samples = bool(setting("HVDSHIM_METRICS"))
    hook_forwards(untraced(_forward_pre_hook))


def _wrap_optimizers():
    """Every optimizer class's own step (steps mark metrics, and more when
    distributing): torch.optim's now, a script's own or a library's
    (subclasses of torch.optim.Optimizer: Lion, SAM, a copied Adafactor)
    when its first instance is made; and zero_grad, which tells the backward
    passes of one step apart from passes accumulating for it."""
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and "step" in vars(cls):
            _wrap_step(cls)

    def make_init(orig):
        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            if not getattr(type(self).step, "hvdshim_step", False):  # (marked: ours, or torch's around ours)
                _wrap_step(type(self))
        return __init__
    wrap(torch.optim.Optimizer, "__init__", make_init)

    def make_zero_grad(orig):
        def zero_grad(self, *args, **kwargs):
            note_zero_grad()
            return orig(self, *args, **kwargs)
        return zero_grad
    wrap(torch.optim.Optimizer, "zero_grad", make_zero_grad)
    wrap(torch.nn.Module, "zero_grad", make_zero_grad)


def _import_quiet(name):
    try:
        import importlib
        return importlib.import_module(name)
    except Exception:
        return None


def _observe():
    """HVDSHIM_OBSERVE=1: count what the script trains and change nothing.
    A top-level training forward (no module's forward around it; a model in
    train mode with gradients enabled) adds its batch to the step's samples;
    every optimizer step writes one metrics line (hvd_step_mark)."""
    _S.observe = True
    depth = [0]

    def pre(module, inputs):
        if depth[0] == 0:
            _count_batch(module, inputs)
        depth[0] += 1

    def post(module, inputs, output):
        depth[0] = max(0, depth[0] - 1)

    _S.hook_handles.append(torch.nn.modules.module.register_module_forward_pre_hook(untraced(pre)))
    _S.hook_handles.append(torch.nn.modules.module.register_module_forward_hook(untraced(post)))
    _wrap_optimizers()
    debug("observing: samples and optimizer steps go to HVDSHIM_METRICS; nothing is distributed")


def _wrap_accelerate(module):
    """Accelerate's backward(loss) divides `loss` by its accumulation steps
    and backwards the quotient (through a GradScaler where one is used):
    `loss` itself is what the caller reads afterwards (the HuggingFace
    Trainer logs it), so it is the one averaged over ranks."""
    acc = getattr(module, "Accelerator", None)
    if acc is None or not callable(getattr(acc, "backward", None)):
        return

    def make_backward(orig):
        def backward(self, loss, *args, **kwargs):
            outer, _B.lib_loss = _B.lib_loss, loss if isinstance(loss, torch.Tensor) else None
            try:
                return orig(self, loss, *args, **kwargs)
            finally:
                _B.lib_loss = outer
        return backward
    wrap(acc, "backward", make_backward)


def _horovod_imported(module):
    """Real Horovod imported: the script distributes itself, stand aside
    now.  hvdshim's served package waits for its hvd.init()
    (lifecycle.horovod_init): a library may import it only to learn
    whether it can."""
    if not getattr(module, "__hvdshim__", False):
        _check_stand_aside(HOROVOD)


# ------------------------------------------------------------------ entry
def install(rng_seed=None):
    try:
        capi.load()
    except (OSError, AttributeError):
        return  # libhvdshim.so is not preloaded in this process
    if capi.LIB.hvd_role_now() not in (b"armed", b"active"):
        if setting("HVDSHIM_OBSERVE") == "1" and capi.LIB.hvd_role_now() == b"dormant" and \
                not os.environ.get("HVDSHIM_ACTIVE_PID"):
            _observe()
        return
    os.environ["HVDSHIM_ACTIVE_PID"] = str(os.getpid())  # this process is the rank
    _tempdir.install()
    vals = [ctypes.c_int() for _ in range(4)]
    capi.LIB.hvd_launch_info(*[ctypes.byref(v) for v in vals])
    _S.rank, _S.size, _S.local_rank, _S.local_size = (v.value for v in vals)
    _S.data_mode = setting("HVDSHIM_DATA") or "shard"
    _S.data_iterable = setting("HVDSHIM_DATA_ITERABLE") or "deal"
    _S.scale_lr = setting("HVDSHIM_SCALE_LR") == "1"
    _S.rng_mode = setting("HVDSHIM_RNG") or "per-rank"
    _S.rng_default = "HVDSHIM_RNG" not in os.environ  # (the default; set: the user chose, kept)
    _S.check_steps = int(setting("HVDSHIM_CHECK_STEPS") or 0)
    _S.accumulate = (setting("HVDSHIM_ACCUMULATE") or "auto") != "off"
    _S.bucket = int(setting("HVDSHIM_BUCKET") or 0)
    overlap = setting("HVDSHIM_OVERLAP") or "auto"
    _S.overlap = overlap == "on" or (overlap == "auto" and cores_per_rank() >= 2)
    _S.average_loss = (setting("HVDSHIM_LOSS") or "average") == "average"
    _S.grad_op = capi.SUM if setting("HVDSHIM_GRADIENTS") == "sum" else capi.AVG
    _S.shares = _S.data_mode == "split" and _S.grad_op == capi.AVG
    sync_bn = setting("HVDSHIM_SYNC_BN") or "auto"
    _S.sync_bn = sync_bn == "on" or (sync_bn == "auto" and _S.data_mode == "split" and setting("HVDSHIM_ELASTIC") != "1")
    if _S.size <= 1 and not _grow.may_resize():  # (a job that may grow, or one started again over 1 rank: resize.py)
        info("one rank: nothing to distribute")
        if setting("HVDSHIM_OBSERVE") == "1":
            _observe()
        return
    _S.enabled = True
    _checkpoints.install()
    _resize.configure()
    reason = _other_distribution()
    if reason:
        _stand_aside(reason)
        return
    _seed_torch(_S.rng_mode, rng_seed)
    if _S.data_mode != "off":
        _FP.same_batches = [0.0, 0.0, 0, 1]  # sum, sum of squares, batches, 1 while every one could be read
        _FP.compare_batches = True
    _redirect_output(setting("HVDSHIM_WORKER_STDOUT") == "1")
    _short_errors()
    _stop_gracefully()
    _set_threads()
    _patch()
    after_import("horovod", _horovod_imported)
    after_import("accelerate.accelerator", _wrap_accelerate)
    capi.LIB.hvd_mpi_early()  # (HVDSHIM_EARLY_MPI: the ranks meet while the script builds its data and model)
    debug("PyTorch %s adapter installed (rank %d of %d, %s gradient hooks, host-memory gradients reduced %s)"
          % (torch.__version__, _S.rank, _S.size,
             "post-accumulate" if _HAS_POST_ACCUMULATE else "AccumulateGrad",
             "during backward" if _S.overlap else "at the end of backward (HVDSHIM_OVERLAP)"))
