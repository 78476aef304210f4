"""Horovod's helpers built on the collectives: parameters, optimizer state and
Python objects from one rank to all."""
import io
import pickle
import types

import torch

from horovod.common.process_sets import global_process_set
from horovod.torch.mpi_ops import allgather, broadcast_, broadcast_async_, synchronize, rank

try:  # Horovod pickles objects with cloudpickle (lambdas, local classes)
    import cloudpickle
except ImportError:
    cloudpickle = None


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Broadcast a model's state_dict(), or a list / iterator of (name,
    tensor) pairs such as named_parameters(), in place from root_rank."""
    _broadcast_named(params, root_rank, process_set, "param")


def _broadcast_named(params, root_rank, process_set, prefix):
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or hasattr(params, "__iter__"):
        # named_parameters() pairs, or plain tensors (parameters()), named by position
        items = [it if isinstance(it, tuple) else ("%d" % i, it) for i, it in enumerate(params)]
        for it in items:
            if len(it) != 2:
                raise ValueError("hvd.broadcast_parameters: expected (name, tensor) pairs, got a tuple of %d"
                                 % len(it))
    else:
        raise ValueError("hvd.broadcast_parameters: invalid params of type %s" % type(params).__name__)
    handles = []
    with torch.no_grad():
        for name, p in items:
            if p is None:
                continue
            if isinstance(p, torch.Tensor):
                handles.append(broadcast_async_(p, root_rank, name="%s.%s" % (prefix, name), process_set=process_set))
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


if cloudpickle is not None:
    class _Pickler(cloudpickle.CloudPickler):
        """cloudpickle, but for the optimizer steps hvdshim wraps: a class
        copied by value (a DistributedOptimizer's, made at run time; one
        defined in __main__) holds its step as hvdshim's wrapper, which is
        written as the original step wrapped again on the receiving rank
        (the wrapper itself, a closure over the adapter's state, cannot be
        pickled)."""

        def reducer_override(self, obj):
            if isinstance(obj, types.FunctionType):
                from hvdshim_torch.gradients.step import reduce_step
                how = reduce_step(obj)
                if how is not None:
                    return how
            return super().reducer_override(obj)


def _dumps(obj):
    buf = io.BytesIO()
    if cloudpickle is not None:
        _Pickler(buf, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
    else:
        pickle.dump(obj, buf)
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


def _create_state(optimizer, model):
    """Give every parameter that needs a gradient a zero one and take one
    step of the wrapped optimizer (never a DistributedOptimizer's own step:
    nothing is reduced), as Horovod does, so that an optimizer without state
    yet (momentum buffers, Adam's moments) has it to receive.  With weight
    decay this step moves the weights, on every rank alike."""
    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p.data)
                if isinstance(optimizer, torch.optim.SparseAdam) or (isinstance(optimizer, torch.optim.SGD) and
                                                                     id(p) in sparse):
                    p.grad = p.grad.to_sparse()
    if getattr(optimizer, "_hvdshim_distributed", False):
        super(optimizer.__class__, optimizer).step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Every rank takes root_rank's optimizer state and hyperparameters, as
    Horovod does it: an optimizer without state first takes a step on zero
    gradients (see _create_state); then every state tensor is broadcast in
    place and every other value (hyperparameters of each group, scalar
    state) from root_rank as one object.  `model` names the parameters of
    sparse embeddings (their zero gradient is sparse)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("hvd.broadcast_optimizer_state: cannot broadcast torch.optim.LBFGS state")
    state_dict = optimizer.state_dict()
    if not state_dict["state"]:
        _create_state(optimizer, model)
        state_dict = optimizer.state_dict()
    if not state_dict["state"]:
        return  # an optimizer without state (plain SGD): nothing to send
    tensors, scalars, setters = [], {}, {}
    seen = {}
    for index, group in enumerate(state_dict["param_groups"]):
        for key, value in group.items():
            if key == "params":
                continue
            name = "%s.%d" % (key, index)
            scalars[name] = value
            setters[name] = (lambda v, i=index, k=key: optimizer.param_groups[i].__setitem__(k, v))
        for pid in group["params"]:
            if pid not in state_dict["state"]:
                continue
            # state_dict()'s per-parameter dicts are the optimizer's own: a
            # tensor broadcast in place, or a value set here, lands in its state
            pstate = state_dict["state"][pid]
            for key, value in pstate.items():
                seen[key] = seen.get(key, 0) + 1
                name = "%s.%d" % (key, seen[key])
                if torch.is_tensor(value):
                    tensors.append((name, value))
                else:
                    scalars[name] = value
                    setters[name] = (lambda v, d=pstate, k=key: d.__setitem__(k, v))
    _broadcast_named(tensors, root_rank, process_set, "optimizer_state")
    for name, value in broadcast_object(scalars, root_rank, process_set=process_set).items():
        setters[name](value)
