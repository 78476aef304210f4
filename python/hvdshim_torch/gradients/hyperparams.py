"""Hyperparameters follow rank 0: every scalar hyperparameter of every
optimizer alive (numbers, tuples of numbers, one-element tensors) travels
from rank 0 in the round that ends a reducing backward (round_vector.py),
and every rank takes rank 0's values before its step, so a decision a rank
takes on its own data (ReduceLROnPlateau fed its own loss) cannot make the
replicas differ."""
import weakref

import torch

from ..state import _S, _info_once, is_number


def _note_optimizer(opt):
    if not any(ref() is opt for ref in _S.optimizers):
        _S.optimizers.append(weakref.ref(opt))
    _S.free_pending = True  # (its parameters that no model holds are followed at the next backward: models.adopt_free)


def _hyper_slots():
    """(group, key, index, value) for every scalar hyperparameter of every
    optimizer alive, in creation order: numbers, tuples of numbers (betas) and
    one-element tensors (a tensor lr).  Flags (bool) and None are left out."""
    out, alive = [], []
    for ref in _S.optimizers:
        opt = ref()
        if opt is None:
            continue
        alive.append(ref)
        for g in opt.param_groups:
            for k in sorted(g):
                v = g[k]
                if k == "params" or v is None:
                    continue
                if is_number(v):
                    out.append((g, k, None, v))
                elif isinstance(v, tuple) and v and all(is_number(x) for x in v):
                    out.extend((g, k, i, x) for i, x in enumerate(v))
                elif isinstance(v, torch.Tensor) and v.numel() == 1 and not v.requires_grad and v.is_floating_point():
                    out.append((g, k, "tensor", float(v)))
    _S.optimizers = alive
    return out


def _apply_hyper(slots, values):
    """Every rank takes rank 0's values (a no-op on rank 0)."""
    changed = []
    for (g, k, i, old), new in zip(slots, values):
        if new == old or (new != new and old != old):
            continue
        typed = type(old)(new) if i != "tensor" else new
        if i is None:
            g[k] = typed
        elif i == "tensor":
            with torch.no_grad():
                g[k].fill_(new)
        else:
            t = list(g[k])
            t[i] = typed
            g[k] = tuple(t)
        changed.append(k)
    if changed:
        _info_once("hyper", "rank %d's optimizer %s differed from rank 0's (a decision taken on this rank's own data, "
                   "such as ReduceLROnPlateau fed its own loss); every rank follows rank 0's values"
                   % (_S.rank, "/".join(sorted(set(changed)))))
