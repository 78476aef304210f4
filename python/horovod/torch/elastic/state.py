"""hvd.elastic.TorchState: the models, optimizers, ElasticSamplers and
learning-rate schedulers of a training run (each kept by a handler that
saves, restores and syncs it), and plain Python objects beside them
(ObjectState)."""
import copy

import torch

from horovod.common.elastic import ObjectState
from horovod.torch.elastic.sampler import ElasticSampler
from horovod.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from horovod.torch.mpi_ops import rank


class TorchState(ObjectState):
    """State of a PyTorch training run: every keyword argument becomes an
    attribute; a model (torch.nn.Module), an optimizer (torch.optim.Optimizer),
    an ElasticSampler or a learning-rate scheduler is kept by its handler
    (its state_dict is what is committed and synced), anything else as a
    plain object.  Assigning a
    new object to a handled attribute commits it."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        self._handlers, kwargs = _get_handlers(kwargs)
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        super(TorchState, self).__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super(TorchState, self).save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super(TorchState, self).restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super(TorchState, self).sync()

    def __setattr__(self, name, value):
        if hasattr(self, name) and name in self._handlers:
            self._handlers[name].set_value(value)
        super().__setattr__(name, value)

    def _hvdshim_snapshot(self):
        snap = super(TorchState, self)._hvdshim_snapshot()
        snap["handlers"] = {name: h._hvdshim_snapshot() for name, h in self._handlers.items()}
        return snap

    def _hvdshim_load(self, snap):
        for name, h in self._handlers.items():
            if name in snap["handlers"]:
                h._hvdshim_load(snap["handlers"][name])
        super(TorchState, self)._hvdshim_load(snap)


class StateHandler(object):
    """Keeps one object of a TorchState: save() copies its state, restore()
    puts the copy back, sync() gives every rank rank 0's."""

    def __init__(self, value):
        self.value = value

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def set_value(self, value):
        self.value = value
        self.save()

    # hvdshim: carried over a restart of the job (hosts joining): the object's
    # state now and, for the handlers here, the copy last committed
    def _hvdshim_snapshot(self):
        return {"live": self.value.state_dict(), "saved": getattr(self, "_saved", None)}

    def _hvdshim_load(self, snap):
        self.value.load_state_dict(snap["live"])
        if snap.get("saved") is not None and hasattr(self, "_saved"):
            self._saved = snap["saved"]
        else:
            self.save()


class _StateDictHandler(StateHandler):
    """An object with state_dict()/load_state_dict(): the copy is a deep copy
    of its state_dict."""

    def __init__(self, value):
        super().__init__(value)
        self._saved = copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)


class ModelStateHandler(_StateDictHandler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(_StateDictHandler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(_StateDictHandler):
    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


class SchedulerStateHandler(_StateDictHandler):
    """A learning-rate scheduler (hvdshim's; Horovod 0.28.1 keeps one as a
    plain object): its state_dict is committed and synced, so the scheduler
    stays bound to the script's optimizer on every rank.  Horovod pickles
    the whole scheduler instead, its optimizer with it, and a rank > 0 gets
    a copy that steps a copy of the optimizer after a sync."""

    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


def _schedulers():
    """torch's scheduler base classes here (ReduceLROnPlateau is none of
    their subclasses before torch 2.2)."""
    sched = torch.optim.lr_scheduler
    kinds = [getattr(sched, n) for n in ("LRScheduler", "_LRScheduler", "ReduceLROnPlateau") if hasattr(sched, n)]
    return tuple(k for k in kinds if isinstance(k, type))


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
    (_schedulers(), SchedulerStateHandler),
]


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _get_handler(v):
    for kind, handler in _handler_registry:
        if isinstance(v, kind):
            return handler(v)
    return None


def _get_handlers(kwargs):
    handlers, rest = {}, {}
    for k, v in kwargs.items():
        h = _get_handler(v)
        if h is not None:
            handlers[k] = h
        else:
            rest[k] = v
    return handlers, rest
