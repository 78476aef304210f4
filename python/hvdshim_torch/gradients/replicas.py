"""The replica guard (HVDSHIM_CHECK_STEPS): every few optimizer steps the
ranks compare their parameters, and every rank stops with the same message
where they have diverged."""
import torch

from .. import elastic as _elastic
from ..errors import HvdShimError
from ..state import _S
from .params import _P


def _check_replicas():
    """Every HVDSHIM_CHECK_STEPS optimizer steps: one float64 max over
    [sums, -sums] of every hooked parameter; where max and min differ the
    replicas have diverged, and every rank stops with the same message."""
    if not _S.check_steps or _S.steps % _S.check_steps or not _P.params:
        return
    names, tensors = [], []
    for prm in _P.params:
        p = prm.ref()
        if p is not None:
            names.append(prm.name)
            tensors.append(p.detach().sum(dtype=torch.float64).cpu())  # (summed in float64, with no float64 copy)
    if not tensors:
        return
    sums = torch.nan_to_num(torch.stack(tensors), nan=1.0e308, posinf=1.5e308, neginf=-1.5e308)
    hi, lo = _elastic.extremes(b"hvdshim.guard.%d" % len(names), sums, "comparing parameter checksums across ranks")
    bad = (hi != lo).nonzero().flatten().tolist()
    if bad:
        i = bad[0]
        raise HvdShimError("hvdshim: the ranks' models diverged by optimizer step %d: parameter '%s' differs across "
                           "ranks (checksums from %.17g to %.17g; %d of %d parameters differ).  Something in the "
                           "script made a rank-local change to the weights or the update, such as noise drawn from "
                           "Python's random or NumPy, which stay per-rank (HVDSHIM_RNG=same makes them agree; "
                           "HVDSHIM_CHECK_STEPS=0 turns this check off)"
                           % (_S.steps, names[i], float(lo[i]), float(hi[i]), len(bad), len(names)))
