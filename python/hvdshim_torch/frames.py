"""The script's own variables across a restart (resize.py).

A job that stops to grow saves the models, optimizers and loaders' places;
the restarted job runs the script from its start with one batch a loader
iteration until it is back at the loader call where the job stopped.  The
script's own variables are then what those short loops left: a step
counter that `while step < max_steps` tests is small again (the job would
train max_steps more), a loss history holds the replayed batches', the best
accuracy so far is theirs.  So the stop also saves the plain values of the
script's frames, and the arrival puts them back, frame by frame: the script
goes on as if it had never stopped.

Which frames: the calling stack's, outside Python's own library, installed
packages (site-packages, dist-packages: a trainer library keeps its state in
objects, whose state this cannot restore, so none of its locals are), torch
and hvdshim: the script and its own modules.  They are matched from the
outermost in by code and line: the restarted script is the same program at
the same call; the first frame that differs ends the matching.

Which values: numbers, strings, bytes, None, numpy scalars, and lists,
tuples, dicts and sets of them (at most MAX_ITEMS items per variable), and
small tensors (at most MAX_NUMEL elements: an accumulated loss; the last
batch's loss, which the code after a loop reads, detached from its graph;
not a view of another tensor, a weight's row).  Objects (models, loaders,
files, a progress bar) are the new job's own and left as they are: the
models', optimizers' and schedulers' state is restored by resize.py, and
the rest is rebuilt by the script as it reruns.
Lists, dicts and sets are refilled in place, so other references to them
see the values.  Not restored: what a loop statement holds outside any
variable (the counter of `enumerate(loader)` starts at 0 again in the epoch
the job stopped in)."""
import os
import sys
import sysconfig

import torch

MAX_ITEMS = 100000
MAX_NUMEL = 4096
_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _library_dirs():
    dirs = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            dirs.add(os.path.realpath(p))
    dirs.add(os.path.realpath(os.path.dirname(torch.__file__)))
    dirs.add(os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # hvdshim's python/
    return tuple(d + os.sep for d in dirs)


_LIB = None
_real = {}


class SavedTensor:
    """A tensor variable as saved: its values on the CPU, where it was."""
    __slots__ = ("device", "requires_grad", "data")

    def __init__(self, device, requires_grad, data):
        self.device, self.requires_grad, self.data = device, requires_grad, data

    def __getstate__(self):
        return (self.device, self.requires_grad, self.data)

    def __setstate__(self, st):
        self.device, self.requires_grad, self.data = st


def _script_code(filename):
    """Whether a frame's file is the script's (not a library's)."""
    global _LIB
    if filename.startswith("<frozen") or filename.startswith("<built"):
        return False
    if os.sep + "site-packages" + os.sep in filename or os.sep + "dist-packages" + os.sep in filename:
        return False
    if _LIB is None:
        _LIB = _library_dirs()
    r = _real.get(filename)
    if r is None:
        r = _real[filename] = os.path.realpath(filename) if not filename.startswith("<") else filename
    return not r.startswith(_LIB)


def _stack(frame):
    """The script's frames, outermost first, each with its key."""
    out = []
    while frame is not None:
        c = frame.f_code
        if _script_code(c.co_filename):
            out.append(((c.co_filename, c.co_name, c.co_firstlineno, frame.f_lineno), frame))
        frame = frame.f_back
    out.reverse()
    return out


def _plain(v, budget):
    """v as plain data to save (a tensor detached, on the CPU), or raise
    ValueError when it is not plain."""
    t = type(v)
    if t in _PLAIN:
        return v
    if t.__module__ == "numpy" and hasattr(v, "item") and getattr(v, "ndim", None) == 0:
        return v
    if isinstance(v, torch.Tensor):
        if t is not torch.Tensor or v.is_sparse or v.numel() > MAX_NUMEL or (v.grad_fn is not None and v._is_view()):
            raise ValueError
        # (a result of the graph, the last batch's loss: its value, detached; not a view, which follows a weight)
        return SavedTensor(str(v.device), v.requires_grad and v.grad_fn is None, v.detach().to("cpu", copy=True))
    if t in (list, tuple, set, frozenset, dict):
        budget[0] -= len(v)
        if budget[0] < 0:
            raise ValueError
        if t is dict:
            return {_plain(k, budget): _plain(x, budget) for k, x in v.items()}
        return t(_plain(x, budget) for x in v)
    raise ValueError


def _unplain(v):
    t = type(v)
    if t is SavedTensor:
        out = v.data.to(v.device)
        return out.requires_grad_(True) if v.requires_grad else out
    if t in (list, tuple, set, frozenset):
        return t(_unplain(x) for x in v)
    if t is dict:
        return {_unplain(k): _unplain(x) for k, x in v.items()}
    return v


def capture(frame):
    """At the stop: [(key, {name: plain value})] of the script's frames
    from `frame` outwards."""
    out = []
    for key, f in _stack(frame):
        module = f.f_globals is f.f_locals
        values = {}
        for name, v in list(f.f_locals.items()):
            if module and name.startswith("__"):
                continue
            try:
                values[name] = _plain(v, [MAX_ITEMS])
            except (ValueError, RuntimeError):
                pass
        out.append((key, values))
    return out


def _set_local(f, name, value):
    if f.f_globals is f.f_locals or sys.version_info >= (3, 13):
        f.f_locals[name] = value  # a module's globals; a function's write-through view (PEP 667)
        return
    import ctypes
    f.f_locals[name] = value
    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(f), ctypes.c_int(0))


def _put(f, name, value):
    cur = f.f_locals.get(name)
    if type(cur) is type(value) and type(value) in (list, dict, set):
        if cur is not value:  # refilled in place: other references to it see the values
            if type(value) is dict:
                cur.clear()
                cur.update(value)
            elif type(value) is set:
                cur.clear()
                cur |= value
            else:
                cur[:] = value
        return
    _set_local(f, name, value)


def restore(saved, frame):
    """At the arrival: the saved values put back into the matching frames
    from `frame` outwards.  Returns (frames matched, variables put back)."""
    if not saved:
        return 0, 0
    now = _stack(frame)
    frames = names = 0
    for i, ((key, values), (key_now, f)) in enumerate(zip(saved, now)):
        # (the innermost frame's line may differ: the loop's next batch
        # then, its new iteration now, where a `for` spans several lines)
        if key[:3] != key_now[:3] or (key[3] != key_now[3] and i < len(saved) - 1):
            break
        for name, v in values.items():
            _put(f, name, _unplain(v))
            names += 1
        frames += 1
    return frames, names
