"""Horovod's helpers built on the collectives: parameters, optimizer state and
Python objects from one rank to all."""
import io
import pickle

import torch

from horovod.common.process_sets import global_process_set
from horovod.torch.mpi_ops import allgather, broadcast_, broadcast_async_, synchronize, rank

try:  # Horovod pickles objects with cloudpickle (lambdas, local classes)
    import cloudpickle as _pickler
except ImportError:
    _pickler = pickle


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Broadcast a model's state_dict(), or a list / iterator of (name,
    tensor) pairs such as named_parameters(), in place from root_rank."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or hasattr(params, "__iter__"):
        items = list(params)
        for it in items:
            if not (isinstance(it, tuple) and len(it) == 2):
                raise ValueError("hvd.broadcast_parameters: expected (name, tensor) pairs, got %r"
                                 % (type(it).__name__,))
    else:
        raise ValueError("hvd.broadcast_parameters: invalid params of type %s" % type(params).__name__)
    handles = []
    with torch.no_grad():
        for name, p in items:
            if p is None:
                continue
            if isinstance(p, torch.Tensor):
                handles.append(broadcast_async_(p, root_rank, name="param.%s" % name, process_set=process_set))
    for h in handles:
        synchronize(h)


_unnamed = {"broadcast": 0, "allgather": 0}


def _object_name(kind, name):
    """A name the same on every rank: the caller's, or one numbered per kind
    (Horovod names it after the object's type, which differs when only the
    root has the object, and then the ranks wait for each other)."""
    if name:
        return name
    _unnamed[kind] += 1
    return "noname.%d" % _unnamed[kind]


def _dumps(obj):
    buf = io.BytesIO()
    _pickler.dump(obj, buf)
    return buf.getvalue()


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's `obj` on every rank (pickled; tensors inside come back on
    the device they were on)."""
    name = _object_name("broadcast", name)
    if rank() == root_rank:
        data = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
        n = torch.tensor([data.numel()], dtype=torch.int64)
    else:
        n = torch.zeros(1, dtype=torch.int64)
    broadcast_(n, root_rank, name="object.%s.size" % name, process_set=process_set)
    if rank() != root_rank:
        data = torch.empty(int(n[0]), dtype=torch.uint8)
    broadcast_(data, root_rank, name="object.%s.data" % name, process_set=process_set)
    return obj if rank() == root_rank else pickle.loads(data.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj`, as a list in rank order."""
    name = _object_name("allgather", name)
    data = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
    sizes = allgather(torch.tensor([data.numel()], dtype=torch.int64), name="object.%s.sizes" % name,
                      process_set=process_set)
    gathered = allgather(data, name="object.%s.data" % name, process_set=process_set)
    out, off = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(gathered[off:off + n].numpy().tobytes()))
        off += n
    return out


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Every rank takes root_rank's optimizer state and hyperparameters
    (its state_dict(), loaded into this rank's optimizer)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("hvd.broadcast_optimizer_state: cannot broadcast torch.optim.LBFGS state")
    state = broadcast_object(optimizer.state_dict() if rank() == root_rank else None, root_rank,
                             name="optimizer_state", process_set=process_set)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


