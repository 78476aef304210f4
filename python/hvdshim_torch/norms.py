"""Normalizations over the whole batch: BatchNorm's statistics
(HVDSHIM_SYNC_BN), and an embedding's max_norm (always).

In split mode each rank holds a slice of every batch, and a BatchNorm layer
in training would normalize by its slice's mean and variance, not the whole
batch's, so the run would no longer be the plain one.  With sync on
(`auto`: split mode, not elastic; `on`: every data mode), torch's
F.batch_norm (which every BatchNorm layer calls) is replaced while training:
each rank sums its slice per channel (the sum and the sum of squares, in
float64, and its count), one allreduce adds the ranks' sums, and the input
is normalized by the whole batch's mean and variance; the running
statistics take the whole batch's (unbiased) variance, as the plain layer's
would.  The allreduce is differentiable: its backward adds the ranks'
gradients of the sums (each rank's weighed by its share of the loss where
split mode weighs them, loss_shares._note_share), so the gradient that flows
into the layer's input is the plain run's too (DDP's SyncBatchNorm,
without converting the model or a process group).

In evaluation (training=False), under TorchScript, while tracing, and
while the last DataLoader iteration made is not dealt over the ranks
(every rank holds whole batches: _S.whole_batches), torch's own runs
unchanged.  So torch.optim.swa_utils.update_bn, which recomputes the
running statistics in train mode over a loader iterated under no_grad (not
dealt, data/), gets the plain run's statistics (summed over ranks, each
batch was counted once per rank: the unbiased variance took the wrong n),
while a frozen backbone run under no_grad on a training batch still
normalizes over the whole batch.  Until a dealt batch comes (a script that
cuts its batches itself: the same on every rank), it runs torch's own too.

An embedding with max_norm (F.embedding, which nn.Embedding calls) scales
down, in place, the rows its input looks up whose norm is above max_norm:
each rank would change the rows of its own batch only, and the replicas
would differ (the replica guard ended the job).  Every rank renormalizes
the rows any rank looks up (one allgather of the indices), which is what
the plain run does for the whole batch."""
from typing import Optional

import torch

from .capi import SUM
from .collectives import allgather_finish, allgather_start, allreduce_now
from .gradients.loss_shares import _L
from .gradients.params import _P
from .state import _S

_ORIG = None  # torch's F.batch_norm
_ORIG_EMBEDDING = None  # torch's F.embedding
_NAMES = 1 << 16  # the calls' names cycle through this many (every rank calls in the same order)


class _SumOverRanks(torch.autograd.Function):
    """The per-channel sums of every rank, added: forward and backward are
    one blocking allreduce each (named by _name)."""

    @staticmethod
    def forward(ctx, local, name):
        ctx.name = name
        out = local.detach().clone(memory_format=torch.contiguous_format)
        allreduce_now(b"hvdshim.bn.f." + name, out, SUM, "batch statistics over ranks (HVDSHIM_SYNC_BN)")
        return out

    @staticmethod
    def backward(ctx, grad):
        # each rank's gradient on the scale the shim's weighing will give it
        # (times its share s): sent times s, and divided by its own after
        s = _L.share_s
        buf = grad.detach().clone(memory_format=torch.contiguous_format)
        if s != 1.0:
            buf.mul_(s)
        allreduce_now(b"hvdshim.bn.b." + ctx.name, buf, SUM,
                      "batch statistics' gradients over ranks (HVDSHIM_SYNC_BN)")
        if s != 1.0 and s != 0.0:  # (0: a slice of padding, whose gradients all count for nothing)
            buf.div_(s)
        return buf, None


def _name(weight, c):
    """The allreduces' name for this call: the layer's weight's name where
    the shim follows it (a rank whose forward took another layer, a branch
    on its slice, then waits on another name and the job ends naming both,
    instead of adding two layers' sums), else the call's number since the
    last optimizer step and the channel count."""
    prm = _P.by_param.get(weight) if weight is not None else None
    if prm is not None:
        return prm.bname
    n = _S.bn_calls
    _S.bn_calls = (n + 1) % _NAMES
    return b"%d.%d" % (n, c)


def _synced(x, running_mean, running_var, weight, bias, momentum, eps):
    c = x.shape[1]
    dims = [0] + list(range(2, x.dim()))
    count = x.numel() // c if c else 0
    local = torch.cat([x.sum(dims, dtype=torch.float64), (x * x).sum(dims, dtype=torch.float64),
                       torch.tensor([float(count)], dtype=torch.float64, device=x.device)])
    if _S.pad_slice:  # rows repeated to pad a batch shorter than the ranks (dealing.padding_only): not counted
        local = local * 0
    total = _SumOverRanks.apply(local, _name(weight, c))
    n = float(total.detach()[2 * c])
    if n <= 1:  # torch's own check, on the whole batch
        raise ValueError("Expected more than 1 value per channel when training, got input size %s (%d values "
                         "per channel over every rank's slice)" % (tuple(x.shape), int(n)))
    mean = total[:c] / n
    var = (total[c:2 * c] / n - mean * mean).clamp_min(0)
    if running_mean is not None or running_var is not None:
        with torch.no_grad():
            if running_mean is not None:
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
            if running_var is not None:
                running_var.mul_(1 - momentum).add_((var * (n / (n - 1))).to(running_var.dtype), alpha=momentum)
    shape = [1, c] + [1] * (x.dim() - 2)
    inv = torch.rsqrt(var + eps).to(x.dtype).view(shape)
    y = (x - mean.to(x.dtype).view(shape)) * inv
    if weight is not None:
        y = y * weight.view(shape)
    if bias is not None:
        y = y + bias.view(shape)
    return y


def batch_norm(input: torch.Tensor, running_mean: Optional[torch.Tensor], running_var: Optional[torch.Tensor],
               weight: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """F.batch_norm, over every rank's slice while training (module doc).
    TorchScript compiles this function where a scripted module calls
    F.batch_norm: there, torch's own."""
    if torch.jit.is_scripting():
        return _ORIG(input, running_mean, running_var, weight, bias, training, momentum, eps)
    return _dispatch(input, running_mean, running_var, weight, bias, training, momentum, eps)


@torch.jit.unused
def _dispatch(input: torch.Tensor, running_mean: Optional[torch.Tensor], running_var: Optional[torch.Tensor],
              weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], training: bool, momentum: float,
              eps: float) -> torch.Tensor:
    if not training or not _S.sync_bn or not _S.started or not _S.enabled or _S.whole_batches \
            or torch.jit.is_tracing() \
            or not isinstance(input, torch.Tensor) or input.dim() < 2 or not input.is_floating_point() \
            or input.device.type not in ("cpu", "cuda"):
        return _ORIG(input, running_mean, running_var, weight, bias, training, momentum, eps)
    x = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
    return _synced(x, running_mean, running_var, weight, bias, momentum, eps).to(input.dtype)


def embedding(input: torch.Tensor, weight: torch.Tensor, padding_idx: Optional[int] = None,
              max_norm: Optional[float] = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> torch.Tensor:
    """F.embedding; with max_norm, the rows every rank looks up are
    renormalized on every rank (module doc).  TorchScript compiles this
    where a scripted module calls F.embedding: there, torch's own."""
    if torch.jit.is_scripting():
        return _ORIG_EMBEDDING(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)
    return _embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)


@torch.jit.unused
def _embedding(input: torch.Tensor, weight: torch.Tensor, padding_idx: Optional[int], max_norm: Optional[float],
               norm_type: float, scale_grad_by_freq: bool, sparse: bool) -> torch.Tensor:
    if max_norm is not None and _renorm_over_ranks(input, weight, max_norm, norm_type):
        max_norm = None  # (done)
    return _ORIG_EMBEDDING(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)


def _renorm_over_ranks(input, weight, max_norm, norm_type):
    if not (_S.started and _S.enabled and _S.size > 1) or _S.elastic or torch.jit.is_scripting() \
            or torch.jit.is_tracing() or not isinstance(input, torch.Tensor) or weight.device.type not in ("cpu", "cuda"):
        return False
    what = "the rows an embedding's max_norm renormalizes, over ranks"
    rows = input.detach().reshape(-1).to(torch.int64).unique().cpu()
    name = b"hvdshim.renorm." + _name(weight, weight.shape[-1])
    every = allgather_finish(allgather_start(name, rows, what), rows, what)
    with torch.no_grad():  # (rows two ranks looked up come twice: torch's renorm skips repeats)
        torch.embedding_renorm_(weight, every.to(weight.device), max_norm, norm_type)
    return True


def install(sync_bn):
    """Replace F.embedding, and F.batch_norm where BatchNorm is synced (the
    layers look them up at each call)."""
    global _ORIG, _ORIG_EMBEDDING
    import torch.nn.functional as F
    if _ORIG_EMBEDDING is None:
        _ORIG_EMBEDDING = F.embedding
        F.embedding = embedding
    if sync_bn and _ORIG is None:
        _ORIG = F.batch_norm
        F.batch_norm = batch_norm
