"""Patching torch: a function replaced by a wrapper that passes for it,
hooks that torch.compile does not trace, and code run right after a module
is imported."""
import importlib.util
import os
import sys
import warnings

import torch


def wrap(owner, name, make):
    """owner.name replaced by make(original), which passes for the original
    (its name, qualified name, doc and module; __wrapped__); returns the
    original."""
    orig = getattr(owner, name)
    setattr(owner, name, passing_for(make(orig), orig))
    _warnings_name_callers()
    return orig


_OWN = os.path.dirname(__file__) + os.sep  # (this package's files, named as their code objects name them)
_WARNINGS = {os.path.abspath(m.__file__) for m in (warnings, sys.modules.get("_py_warnings")) if m is not None}


def _warnings_name_callers():
    """A warning that a wrapped function raises naming its caller
    (warnings.warn(..., stacklevel=2), as torch's do) names the wrapper's
    caller, as in the plain run, not the wrapper's line, which users take
    for hvdshim's own warning: warnings._showwarnmsg, which every warning
    shown or recorded goes through (the C warn calls it), is given the
    first frame outside this package above the wrapper's.  A warning this
    package's code raises at its own line is left as it is.  Once."""
    orig = getattr(warnings, "_showwarnmsg", None)
    if orig is None or getattr(orig, "hvdshim", False):
        return

    def _showwarnmsg(msg):
        try:
            if isinstance(getattr(msg, "filename", None), str) and msg.filename.startswith(_OWN):
                _name_caller(msg, sys._getframe(1))
        except Exception:  # pylint: disable=broad-except  (the warning shown as it came)
            pass
        return orig(msg)
    _showwarnmsg.hvdshim = True
    warnings._showwarnmsg = _showwarnmsg


def _name_caller(msg, f):
    """msg (a warning named at this package's line) named at the first frame
    outside the package above that line's frame, where the warning was
    raised deeper (f: the innermost frame when it was shown)."""
    while f is not None and os.path.abspath(f.f_code.co_filename) in _WARNINGS:
        f = f.f_back  # (the Python warn's own frames, where it is not C's)
    raiser = f
    while f is not None and not (f.f_code.co_filename == msg.filename and f.f_lineno == msg.lineno):
        f = f.f_back
    if f is None or f is raiser:  # not on the stack, or raised by this package's code at its own line
        return
    while f is not None and f.f_code.co_filename.startswith(_OWN):
        f = f.f_back
    if f is not None:
        msg.filename, msg.lineno, msg.line = f.f_code.co_filename, f.f_lineno, None


def passing_for(wrapped, orig):
    """wrapped, given orig's name, qualified name, doc and module, and
    orig as its __wrapped__."""
    wrapped.__wrapped__ = orig
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(wrapped, attr, getattr(orig, attr))
        except (AttributeError, TypeError):
            pass
    return wrapped


def _dynamo_disabled(fn):
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    if disable is None:
        disable = getattr(getattr(torch, "_dynamo", None), "disable", None)
    return disable(fn) if disable is not None else fn


_UNTRACED = []  # (fn, cell) of the hooks made before torch._dynamo was imported


class AfterImport:
    """Runs fn(module) once the module `name` has run (a post-import hook
    on its loader), then leaves sys.meta_path."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then(module):
            exec_module(module)
            self.fn(module)
        loader.exec_module = exec_then
        return spec


def after_import(name, fn):
    """fn(module) once the script has imported `name` (now, if it has)."""
    if name in sys.modules:
        fn(sys.modules[name])
    else:
        sys.meta_path.insert(0, AfterImport(name, fn))


def _mark_untraced(_module):
    for fn, cell in _UNTRACED:
        cell[0] = _dynamo_disabled(fn)
    if _UNTRACED_WRAPPER:
        _never_compiled(_UNTRACED_WRAPPER[0])


_UNTRACED_WRAPPER = []  # one wrapper made by untraced() (they all share its code)


def _never_compiled(fn):
    """Dynamo told not to compile fn's own frame (its code: every wrapper
    untraced() made), while still running what it calls as usual (the
    marked fn).  Left to it, dynamo compiles the wrapper each time a compiled
    model's call reaches the hook, guarded on the module's type and the
    inputs' dtypes and grad: it compiled again for each new one until
    torch's recompile limit, warning each time.  torch's own skip marker
    (torch._dynamo.decorators.skip, torch 2.x); without it, nothing."""
    try:
        from torch._dynamo import decorators
        decorators.skip(fn)
    except Exception:  # pylint: disable=broad-except
        pass


def untraced(fn):
    """torch.compile must not trace the adapter's hooks (dynamo fails on their
    module bookkeeping): they run eagerly, outside the compiled graph.  Marking
    them so imports torch._dynamo (and sympy: seconds of every rank's start,
    docs/PYTORCH.md, "torch.compile"), so a script that never compiles never pays it:
    until it imports torch._dynamo the hook calls fn through a cell that is
    then pointed at the marked fn."""
    if not hasattr(torch, "compile"):  # torch 1.x: nothing traces Python
        return fn
    if "torch._dynamo" in sys.modules:
        return _dynamo_disabled(fn)
    cell = [fn]

    def hook(*args, **kwargs):
        return cell[0](*args, **kwargs)
    if not _UNTRACED:  # the first: one watcher for them all (torch.compile imports it at its first call)
        after_import("torch._dynamo", _mark_untraced)
        _UNTRACED_WRAPPER.append(hook)
    _UNTRACED.append((fn, cell))
    return hook
