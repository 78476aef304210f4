"""Horovod's SyncBatchNorm: batch statistics over every rank's batch."""
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from horovod.torch.mpi_ops import Sum, allreduce, size


class SyncBatchNorm(_BatchNorm):
    """BatchNorm whose training statistics are the mean and variance over the
    union of every rank's batch (as one process with the whole batch would
    compute them).  The sums go through a differentiable allreduce, so the
    gradient flows across ranks too.  In eval mode it is plain BatchNorm."""

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training or size() == 1:
            return super().forward(input)
        if self.momentum is None:
            self.num_batches_tracked += 1
            factor = 1.0 / float(self.num_batches_tracked)
        else:
            factor = self.momentum
            if self.track_running_stats:
                self.num_batches_tracked += 1
        dims = [0] + list(range(2, input.dim()))
        count = torch.tensor([input.numel() // input.shape[1]], dtype=input.dtype, device=input.device)
        x = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        local = torch.cat([x.sum(dims), (x * x).sum(dims), count.to(x.dtype)])
        total = allreduce(local, op=Sum, name=None)
        c = input.shape[1]
        n = total[2 * c]
        mean = total[:c] / n
        var = (total[c:2 * c] / n - mean * mean).clamp_min(0)
        if self.track_running_stats:
            with torch.no_grad():
                unbiased = var * (n / (n - 1)) if n > 1 else var
                self.running_mean.mul_(1 - factor).add_(mean.detach().to(self.running_mean.dtype), alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.detach().to(self.running_var.dtype), alpha=factor)
        shape = [1, c] + [1] * (input.dim() - 2)
        y = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y.to(input.dtype)
