"""Optimizer.step wrapped (every optimizer class's own): accumulated
gradients reduced first, a closure's loss averaged over ranks, one line of
HVDSHIM_METRICS and the window of backward passes ended per step, the
replica guard."""
from .. import capi
from .. import grow as _grow
from .. import rng as _rng
from ..patching import passing_for, wrap
from ..state import _S
from .accumulation import _A, _end_window
from .backward import _average_loss
from .reduction import _reduce_deferred, resync_if_drawn
from .replicas import _check_replicas


def _mark_step():
    """An optimizer step ended: one line of HVDSHIM_METRICS, a tick for autotune
    (not a step a restarted job replays on its way back, resize.py)."""
    if ((_S.enabled and _S.started) or _S.observe) and _S.resume_steps is None:
        capi.LIB.hvd_step_mark(_S.samples if _S.samples else -1)
    _S.samples = 0


def _stepper(orig):
    """orig (an optimizer class's step) wrapped."""
    def step(self, closure=None, *args, **kwargs):
        if _A.in_step == 0:
            _reduce_deferred("the optimizer step")
            if _rng._R.diverged and _S.enabled and _S.started:
                resync_if_drawn()
                _rng.window_open()  # (what the step draws acts on every replica: drawn alike, however it came)
        _A.in_step += 1
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
            _A.in_step -= 1
            if _A.in_step == 0:
                if _rng._R.window is not None:
                    _rng.window_close()
                _mark_step()
        if _A.in_step == 0 and _S.enabled and _S.started:
            _end_window()
            _S.steps += 1
            _grow.note_step()
            _S.bn_calls = 0
            _check_replicas()
        return result
    step.hvdshim_step = True
    return step


def _wrap_step(cls):
    orig = wrap(cls, "step", _stepper)
    if getattr(orig, "hooked", False):  # torch's profiling wrapper, which a class gets once (Optimizer.__init__)
        cls.step.hooked = True


def rewrapped(orig):
    """A step wrapper made again around orig, where a class is unpickled by
    value (reduce_step)."""
    return passing_for(_stepper(orig), orig)


def reduce_step(fn):
    """How a pickler that copies classes by value (cloudpickle: a class made
    at run time, as Horovod's DistributedOptimizer makes one, or defined in
    __main__) should write fn, where fn is one of these wrappers: as
    rewrapped(the original step), not as a closure over the adapter's state
    (which holds weak references, and cannot be pickled).  None for any
    other object."""
    if getattr(fn, "hvdshim_step", False) and callable(getattr(fn, "__wrapped__", None)):
        return rewrapped, (fn.__wrapped__,)
    return None
