"""The single-process reference of a HVDSHIM_DATA=split run over N ranks
(tests/gpu/device.sh): each global batch is cut in N contiguous parts as the
shim cuts it (hvdshim_torch.data.dealing.split_slice), each part's gradients are
computed alone, exactly as one rank computes them (same shapes, so the same
kernels and rounding), and their average becomes the gradient the optimizer
sees.  Only the reference run uses this; the run under the shim is the
unmodified script."""


def parts(n, total):
    q, rem = divmod(total, n)
    for r in range(n):
        start = r * q + min(r, rem)
        yield start, start + q + (1 if r < rem else 0)


def backward_split(n, x, y, params, loss_of, scaler):
    """scaler.scale(loss).backward() of an n-rank split run; returns the
    mean of the parts' losses (what every rank reads from its loss after
    backward, HVDSHIM_LOSS=average)."""
    params = [p for p in params if p.requires_grad]
    total = [None] * len(params)
    losses = []
    for a, b in parts(n, len(x)):
        for p in params:
            p.grad = None
        loss = loss_of(x[a:b], y[a:b])
        scaler.scale(loss).backward()
        losses.append(loss.detach().float())
        for i, p in enumerate(params):
            if p.grad is not None:
                total[i] = p.grad.clone() if total[i] is None else total[i] + p.grad
    for p, g in zip(params, total):
        p.grad = None if g is None else g / n
    return sum(losses) / n
