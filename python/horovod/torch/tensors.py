"""What Horovod's collectives do with the tensors they take: the reduction
ops (Horovod's values, the engine's), the tensor checks, Horovod's scaling
arithmetic (prescale/postscale, Average as a Sum divided by the set's
size), and the buffer the engine works on."""
import warnings

import torch

from horovod.common.process_sets import global_process_set
from hvdshim_torch import capi, collectives

# Horovod's values for its ops; Adasum is refused.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_ENGINE_OP = {Sum: capi.SUM, Average: capi.AVG, Min: capi.MIN, Max: capi.MAX, Product: capi.PROD}
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}
_ENGINE_DTYPE = collectives.HVD_DTYPES
_UINT8 = capi.UINT8


def _engine_op(op):
    if op == Adasum:
        raise NotImplementedError("Adasum is not served by hvdshim: use op=hvd.Average (the default) or hvd.Sum")
    if op not in _ENGINE_OP:
        raise ValueError("unknown reduction op %r (hvd.Average, hvd.Sum, hvd.Min, hvd.Max or hvd.Product)" % (op,))
    return _ENGINE_OP[op]


def _resolve_op(op, average, default=Average):
    if average is not None:
        if op is not None:
            raise ValueError("the op and average arguments are mutually exclusive")
        warnings.warn("the average argument is deprecated in Horovod: use op=hvd.Average or op=hvd.Sum",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return default if op is None else op


def _check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("hvd.%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError("hvd.%s: tensors on %s are not supported (CPU and CUDA are)" % (what, tensor.device))
    if tensor.is_sparse:
        raise ValueError("hvd.%s: sparse tensors are not supported; use sparse_as_dense or allgather its "
                         "indices and values" % what)


def _reduce_dtype(tensor, what):
    dt = _ENGINE_DTYPE.get(tensor.dtype)
    if dt is None:
        raise ValueError("hvd.%s: tensor type %s is not supported (uint8, int8, int16, int32, int64, float16, "
                         "bfloat16, float32, float64)" % (what, str(tensor.dtype).replace("torch.", "")))
    return dt


def _scale(tensor, factor):
    """Horovod's pre/post scaling, in Horovod's arithmetic: float32 and
    float64 in their own type, float16 and bfloat16 on a CPU in float32 (one
    rounding), integers in float64 truncated toward zero."""
    if factor == 1.0:
        return
    if tensor.dtype in (torch.float16, torch.bfloat16) and not tensor.is_cuda:
        tensor.copy_(tensor.float().mul_(factor))
    elif tensor.dtype.is_floating_point:
        tensor.mul_(factor)
    else:
        tensor.copy_((tensor.double() * factor).to(tensor.dtype))


def _set_size(process_set):
    return (process_set or global_process_set).size()


def _set_rank(process_set):
    """This rank's index in the set (its place in gathered and scattered rows)."""
    return (process_set or global_process_set).rank()


def _average_as_sum(op, process_set):
    """Average runs as a Sum divided afterwards by the size of the process
    set, as Horovod's does: ranks that have joined count (they add zeros).
    Returns (op for the engine, divisor)."""
    if op == Average:
        return Sum, _set_size(process_set)
    return op, 1


def _postscale(tensor, divisor, factor):
    """After the reduction: Average's division by the set's size, then the
    postscale factor.  Horovod multiplies once by factor/size; dividing gives
    the same bits whenever the size is a power of two and the correctly
    rounded average otherwise (what Horovod's own tests expect at np=3, which
    its multiplication misses by an ulp).  float16 and bfloat16 on a CPU in
    float32 with one rounding at the end; integers truncated toward zero."""
    if divisor == 1 and factor == 1.0:
        return
    if tensor.dtype in (torch.float16, torch.bfloat16) and not tensor.is_cuda:
        tensor.copy_(tensor.float().div_(divisor).mul_(factor))
    elif tensor.dtype.is_floating_point:
        if divisor != 1:
            tensor.div_(divisor)
        if factor != 1.0:
            tensor.mul_(factor)
    elif factor == 1.0:
        tensor.copy_(torch.div(tensor, divisor, rounding_mode="trunc"))
    else:
        tensor.copy_((tensor.double() / divisor * factor).to(tensor.dtype))


def _engine_buffer(output, psid):
    """The contiguous buffer the engine works on in place: the output itself,
    or a contiguous copy of a strided in-place tensor (copied back at the
    end); a host copy of a CUDA tensor on a process set other than the global
    one (those run in host memory: NCCL has no communicator per set here)."""
    if psid and output.is_cuda:
        return torch.empty(output.shape, dtype=output.dtype)
    return output if output.is_contiguous() else output.contiguous()


def _as_bytes(t):
    """A view the engine can move as raw data when its dtype is not a reduction
    type (bool, complex): gathered and broadcast data are only copied."""
    if t.dtype in _ENGINE_DTYPE:
        return t
    flat = t.reshape(t.shape[0], -1) if t.dim() > 0 else t.reshape(1, -1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty((flat.shape[0], 0), dtype=torch.uint8)


def _even_splits(rows, n):
    """Horovod's split of `rows` over n ranks: the first rows % n get one more."""
    return [rows // n + (1 if r < rows % n else 0) for r in range(n)]


def _wants_grad(tensors):
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
