"""The followed parameters: every parameter whose gradient the shim
averages, by index (its place in the used-bitmap and the round's first
slots), found by identity.  models.py follows them; hooks.py's _Param is
each one's entry; the layers of the gradients package read them here.

Its state: _P."""
import weakref


class _ParamMap:
    """Parameter -> value by identity, not keeping the parameter alive.  (A
    WeakKeyDictionary finds a key by ==, which compares tensors element by
    element: looking up a parameter it holds raised "Boolean value of
    Tensor with more than one value is ambiguous".)"""

    def __init__(self):
        self._d = {}

    def __setitem__(self, p, value):
        key, d = id(p), self._d

        def gone(_ref):
            e = d.get(key)
            if e is not None and e[0]() is None:  # (not a newer parameter at the same address)
                del d[key]
        d[key] = (weakref.ref(p, gone), value)

    def get(self, p, default=None):
        e = self._d.get(id(p))
        return e[1] if e is not None and e[0]() is p else default

    def __contains__(self, p):
        e = self._d.get(id(p))
        return e is not None and e[0]() is p

    def __len__(self):
        return len(self._d)

    def __getitem__(self, p):
        e = self._d.get(id(p))
        if e is None or e[0]() is not p:
            raise KeyError(p)
        return e[1]


class _Followed:
    def __init__(self):
        self.by_param = _ParamMap()  # parameter -> hooks._Param
        self.params = []            # hooks._Param, index = position in the used-bitmap
        self.used = bytearray()     # which got a gradient on this rank since the last reduction
        self.nhooked = 0            # parameters whose gradients are hooked
        self.early_hooked = _ParamMap()  # leaves whose first hook is hooks._hooked_grad
        self.early_acc = _ParamMap()  # leaves whose first post-accumulate-grad hook is hooks._accumulated_grad


_P = _Followed()
