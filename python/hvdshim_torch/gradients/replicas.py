"""The replica guard (HVDSHIM_CHECK_STEPS): every few optimizer steps the
ranks compare their parameters, and every rank stops with the same message
where they have diverged."""
import torch

from .. import elastic as _elastic
from ..errors import HvdShimError
from ..state import _S
from .params import _P


def differing(tag):
    """The followed parameters' checksums compared across the ranks: one
    float64 max over [sums, -sums] (every rank calls it at the same point).
    (names, hi, lo, bad): the names, the largest and smallest sum of each,
    the indices where they differ; None where no parameter is followed."""
    names, tensors = [], []
    for prm in _P.params:
        p = prm.ref()
        if p is not None:
            names.append(prm.name)
            tensors.append(p.detach().sum(dtype=torch.float64).cpu())  # (summed in float64, with no float64 copy)
    if not tensors:
        return None
    sums = torch.nan_to_num(torch.stack(tensors), nan=1.0e308, posinf=1.5e308, neginf=-1.5e308)
    hi, lo = _elastic.extremes(b"%s.%d" % (tag, len(names)), sums, "comparing parameter checksums across ranks")
    return names, hi, lo, (hi != lo).nonzero().flatten().tolist()


def _check_replicas():
    """Every HVDSHIM_CHECK_STEPS optimizer steps: where the ranks'
    parameters differ (differing) the replicas have diverged, and every
    rank stops with the same message."""
    if not _S.check_steps or _S.steps % _S.check_steps or not _P.params:
        return
    got = differing(b"hvdshim.guard")
    if got is None:
        return
    names, hi, lo, bad = got
    if bad:
        i = bad[0]
        raise HvdShimError("hvdshim: the ranks' models diverged by optimizer step %d: parameter '%s' differs across "
                           "ranks (checksums from %.17g to %.17g; %d of %d parameters differ).  Something in the "
                           "script made a rank-local change to the weights or the update, such as noise drawn from "
                           "Python's random or NumPy, which stay per-rank (HVDSHIM_RNG=same makes them agree; "
                           "HVDSHIM_CHECK_STEPS=0 turns this check off)"
                           % (_S.steps, names[i], float(lo[i]), float(hi[i]), len(bad), len(names)))
