"""compare.py A.pt B.pt TOL: the largest absolute difference between two
saved state dicts (of dicts) is at most TOL; prints it either way.

The tests call this after nearly every run, so it reads torch.save's zip
format itself with numpy (a torch import is 1.5 s on Debian 12 and 3 s on
sid, per call); a file it does not know (an older format, a dtype numpy has
not, an object other than tensors in dicts) is read by torch.load instead."""
import collections
import pickle
import sys
import zipfile

import numpy

_DTYPES = {"FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2",
           "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2",
           "CharStorage": "i1", "ByteStorage": "u1", "BoolStorage": "?"}


class _Unknown(Exception):
    pass


def _tensor(storage, offset, size, stride, *_):
    data, dtype = storage
    arr = numpy.frombuffer(data, dtype=dtype)
    if not size:
        return arr[offset:offset + 1].reshape(()).copy()
    return numpy.lib.stride_tricks.as_strided(
        arr[offset:], shape=tuple(size), strides=tuple(s * arr.itemsize for s in stride)).copy()


_GLOBALS = {("collections", "OrderedDict"): collections.OrderedDict,
            ("torch._utils", "_rebuild_tensor_v2"): _tensor,
            ("torch._utils", "_rebuild_parameter"): lambda data, *_: data}


def _load_numpy(path):
    """The state dict in PATH with numpy arrays for tensors (little-endian
    zip format only), or _Unknown."""
    if not zipfile.is_zipfile(path):
        raise _Unknown("not a zip file")
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        pkl = [n for n in names if n.endswith("/data.pkl")]
        if len(pkl) != 1:
            raise _Unknown("no single data.pkl")
        root = pkl[0][:-len("data.pkl")]
        if root + "byteorder" in names and z.read(root + "byteorder") != b"little":
            raise _Unknown("big-endian")

        class Unpickler(pickle.Unpickler):
            def find_class(self, module, name):
                if module == "torch" and name in _DTYPES:
                    return _DTYPES[name]
                if (module, name) in _GLOBALS:
                    return _GLOBALS[(module, name)]
                raise _Unknown("%s.%s" % (module, name))

            def persistent_load(self, pid):
                if not (isinstance(pid, tuple) and pid[0] == "storage" and pid[1] in _DTYPES.values()):
                    raise _Unknown("storage %r" % (pid,))
                return z.read(root + "data/" + pid[2]), pid[1]

        obj = Unpickler(z.open(pkl[0])).load()

    def check(d):
        if not isinstance(d, dict):
            raise _Unknown("not a dict")
        for v in d.values():
            if isinstance(v, dict):
                check(v)
            elif not isinstance(v, numpy.ndarray):
                raise _Unknown("a leaf is not a tensor")
    check(obj)
    return obj


def _maxdiff_numpy(x, y):
    if x.shape != y.shape:
        sys.exit("different shapes: %s vs %s" % (x.shape, y.shape))
    if not x.size:
        return 0.0
    d = float(numpy.abs(x.astype(numpy.float64) - y.astype(numpy.float64)).max())
    return float("inf") if d != d else d  # (a NaN on either side is no match: max() would pass it over)


def _load_both(pa, pb):
    try:
        return _load_numpy(pa), _load_numpy(pb), _maxdiff_numpy
    except _Unknown:
        import torch
        return torch.load(pa), torch.load(pb), \
            lambda x, y: _maxdiff_numpy(x.double().numpy(), y.double().numpy())


def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


a, b, maxdiff = _load_both(sys.argv[1], sys.argv[2])
tol = float(sys.argv[3])
fa, fb = flat(a), flat(b)
if fa.keys() != fb.keys():
    sys.exit("different keys: %s vs %s" % (sorted(fa), sorted(fb)))
worst, where = 0.0, None
for k in fa:
    d = maxdiff(fa[k], fb[k])
    if d > worst or where is None:
        worst, where = max(worst, d), k if d >= worst else where
print("max abs difference %.3g (at %s), tolerance %g" % (worst, where, tol))
sys.exit(0 if worst <= tol else 1)
