"""Patching torch: a function replaced by a wrapper that passes for it,
hooks that torch.compile does not trace, and code run right after a module
is imported."""
import importlib.util
import sys

import torch


def wrap(owner, name, make):
    """owner.name replaced by make(original), which passes for the original
    (its name, qualified name, doc and module; __wrapped__); returns the
    original."""
    orig = getattr(owner, name)
    setattr(owner, name, passing_for(make(orig), orig))
    return orig


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
