"""compare.py A.pt B.pt TOL: the largest absolute difference between two
saved state dicts (of dicts) is at most TOL; prints it either way."""
import sys

import torch

a, b, tol = torch.load(sys.argv[1]), torch.load(sys.argv[2]), float(sys.argv[3])


def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


fa, fb = flat(a), flat(b)
if fa.keys() != fb.keys():
    sys.exit("different keys: %s vs %s" % (sorted(fa), sorted(fb)))
worst, where = 0.0, None
for k in fa:
    d = (fa[k].double() - fb[k].double()).abs().max().item() if fa[k].numel() else 0.0
    if d > worst or where is None:
        worst, where = max(worst, d), k if d >= worst else where
print("max abs difference %.3g (at %s), tolerance %g" % (worst, where, tol))
sys.exit(0 if worst <= tol else 1)
