# hvdshim bootstrap.  libhvdshim.so puts this directory first on PYTHONPATH
# in an armed rank whose executable is Python (hooks/python.c).  Here we:
#   1. put PYTHONPATH back as the user had it (children see the real value),
#      and take this directory off sys.path;
#   2. in the rank's own process only, install an import hook that loads the
#      PyTorch adapter right after `import torch` finishes;
#   3. run the sitecustomize this one shadows, if there is one.
# A process that never imports torch pays for this file and nothing else.
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _restore_environment():
    saved = os.environ.pop("HVDSHIM_PYTHONPATH_SAVED", None)
    if saved is not None:
        os.environ["PYTHONPATH"] = saved
    else:
        os.environ.pop("PYTHONPATH", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]


class _TorchWatcher:
    """A meta path finder that wraps torch's loader once, then leaves."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            _load_adapter()

        spec.loader.exec_module = exec_module
        return spec


def _load_adapter():
    import importlib.util
    path = os.path.join(_HERE, "_hvdshim_torch.py")
    spec = importlib.util.spec_from_file_location("_hvdshim_torch", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["_hvdshim_torch"] = module
    spec.loader.exec_module(module)
    module.install()


def _chain():
    """Import the sitecustomize that this file shadows (as OpenTelemetry's
    and ddtrace's bootstraps do), so the user's keeps working."""
    me = sys.modules.pop("sitecustomize", None)
    try:
        import importlib.util
        spec = importlib.util.find_spec("sitecustomize")
        if spec is not None and spec.origin and os.path.dirname(os.path.abspath(spec.origin)) != _HERE:
            import importlib
            importlib.import_module("sitecustomize")
    finally:
        if me is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = me


# Only an armed rank gets this file on its path (and the adapter checks the
# role again), so no test of the process is needed here.
_restore_environment()
sys.meta_path.insert(0, _TorchWatcher())
_chain()
