# hvdshim bootstrap.  libhvdshim.so puts this directory first on PYTHONPATH
# in an armed rank whose executable is Python (hooks/python.c).  Here we:
#   1. put PYTHONPATH back as the user had it (children see the real value),
#      and take this directory off sys.path;
#   2. in the rank's own process only, install an import hook that loads the
#      PyTorch adapter right after `import torch` finishes (and, on ranks > 0,
#      has argparse's command-line errors wait for rank 0's: said once);
#   3. serve the packages beside it: the adapter (hvdshim_torch) and hvdshim's
#      `horovod` package to `import horovod` (HVDSHIM_HOROVOD);
#   4. run the sitecustomize this one shadows, if there is one.
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


class _ImportWatcher:
    """A meta path finder that runs an action right after `import torch`
    (load the adapter), `import numpy` (seed its global generator) and the
    import of safetensors' Rust module (see _private_serialize_file), each
    once, and leaves when all are done."""

    def __init__(self, actions):
        self.actions = actions  # module name -> function(module)

    def find_spec(self, name, path=None, target=None):
        action = self.actions.pop(name, None)
        if action is None:
            return None
        if not self.actions:
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
        import importlib.util
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            action(module)

        spec.loader.exec_module = exec_module
        return spec


def _rng_seed():
    """The job's seed for an unseeded script (see hvdshim_torch/rng.py), or
    None: HVDSHIM_RNG=off, one rank, or no job id in the environment."""
    if os.environ.get("HVDSHIM_RNG", "per-rank") == "off":
        return None
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"):
        if os.environ.get(var, "").isdigit():
            if int(os.environ[var]) <= 1:
                return None
            break
    import hashlib
    for keys in (("PMIX_NAMESPACE",), ("OMPI_MCA_ess_base_jobid",), ("SLURM_JOB_ID", "SLURM_STEP_ID"),
                 ("PMI_KVSNAME",)):
        vals = [os.environ.get(k) for k in keys]
        if all(vals):
            text = "hvdshim-rng:" + ":".join(vals)
            return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    # MPICH's Hydra names no job in the environment.  When every rank is on
    # this host, they share one parent (hydra_pmi_proxy): its pid and start
    # time name the job.  Across hosts: no seed (rank 0's states are taken
    # when the engine starts).
    if os.environ.get("PMI_RANK") and os.environ.get("MPI_LOCALNRANKS") == os.environ.get("PMI_SIZE"):
        try:
            with open("/proc/%d/stat" % os.getppid()) as f:
                start = f.read().rsplit(")", 1)[1].split()[19]
        except (OSError, IndexError):
            return None
        text = "hvdshim-rng:hydra:%d:%s" % (os.getppid(), start)
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return None


def _load_adapter():
    """Import the adapter package (served from this directory by
    _PackageServer: the directory is no longer on sys.path) and install it."""
    import hvdshim_torch
    hvdshim_torch.install(rng_seed=_SEED)


def _private_serialize_file(rust):
    """safetensors writes through the Rust tempfile crate, which renames with
    raw system calls that libhvdshim's file overlay cannot see: on a rank
    whose writes are private (ranks > 0), its serialize_file gets the
    overlay's path for the file instead, where the write and the rename
    both happen for real.  Reads find the file there through libc as usual.
    The path and its folder are held meanwhile (hvd_overlay_hold): where the
    rank becomes rank 0 during the write (elastic: the first one died), its
    private folder is gone under the temporary, so the file is written
    again, for real."""
    real = getattr(rust, "serialize_file", None)
    if real is None:
        return
    import ctypes
    lib = ctypes.CDLL(None, use_errno=True)
    try:
        where = lib.hvd_overlay_write_path
    except AttributeError:
        return
    where.restype = ctypes.c_int
    where.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    written = getattr(lib, "hvd_overlay_written", None)  # its bytes are freed once rank 0's file holds them
    if written is not None:
        written.restype = None
        written.argtypes = [ctypes.c_char_p]
    hold = getattr(lib, "hvd_overlay_hold", None)
    if hold is not None:
        hold.restype = ctypes.c_int
        hold.argtypes = [ctypes.c_char_p, ctypes.c_int]

    def serialize_file(tensor_dict, filename, *args, **kwargs):
        path = os.fsencode(os.path.abspath(os.fspath(filename)))
        keys = (path, os.path.dirname(path) + b"/")  # (its folder: the temporary beside it)
        held = [k for k in keys if hold is not None and hold(k, 1) == 0]
        took = False
        try:
            buf = ctypes.create_string_buffer(4096)
            r = where(path, buf, len(buf))
            if r < 0:
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e), os.fspath(filename))
            if r != 1:
                return real(tensor_dict, filename, *args, **kwargs)
            try:
                out = real(tensor_dict, os.fsdecode(buf.value), *args, **kwargs)
            except Exception:  # (the private folder gone under it: taken over meanwhile)
                took = any([hold(k, 0) == 1 for k in held])
                held = []
                if not took:
                    raise
            if not took:
                took = any([hold(k, 2 if k == path else 0) == 1 for k in held])
                held = []
            if took:  # rank 0 now: written again, for real
                return real(tensor_dict, filename, *args, **kwargs)
            if written is not None:
                written(path)
            return out
        finally:
            for k in held:
                hold(k, 0)

    serialize_file.__doc__ = real.__doc__
    rust.serialize_file = serialize_file


def _usage_errors_once(argparse):
    """On ranks > 0: a command-line error that argparse reports (its usage
    and the message on stderr, then exit 2) is the same on every rank, which
    all parse the same command line, so it waits for rank 0's own to end the
    job first, as a traceback does (hvd_failing_grace): the job says it
    once.  Where rank 0 goes on (its command line differed) this rank says
    its own after that wait, a second.  An error method of the script's own
    ArgumentParser subclass is left alone."""
    import ctypes
    try:
        grace = ctypes.CDLL(None).hvd_failing_grace
    except AttributeError:
        return
    grace.restype, grace.argtypes = None, []
    cls = argparse.ArgumentParser
    real = cls.error

    def error(self, message):
        grace()
        return real(self, message)

    error.__doc__ = real.__doc__
    cls.error = error


def _rank():
    """This process's rank as the launcher set it, or -1: the variables
    libhvdshim.so reads (base/role.c), first set wins."""
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    if os.environ.get("SLURM_PROCID", "").isdigit() and os.environ.get("SLURM_NTASKS", "").isdigit() \
            and int(os.environ["SLURM_NTASKS"]) > 1:
        return int(os.environ["SLURM_PROCID"])
    return -1


class _PackageServer:
    """A meta path finder that serves the packages beside this file: the
    adapter, hvdshim_torch (loaded after `import torch`, and by the horovod
    package, which uses its ctypes binding), and hvdshim's `horovod` for
    `import horovod`: HVDSHIM_HOROVOD=auto serves it when no real Horovod
    is importable, on always, off never.  Their submodules are found through
    each package's own path."""

    def find_spec(self, name, path=None, target=None):
        if name == "horovod":
            mode = _setting("HVDSHIM_HOROVOD") or "auto"
            if mode == "off":
                return None
            import importlib.machinery
            if mode == "auto" and importlib.machinery.PathFinder.find_spec(name, sys.path) is not None:
                return None  # the real Horovod
        elif name != "hvdshim_torch":
            return None
        import importlib.util
        pkg = os.path.join(_HERE, name)
        return importlib.util.spec_from_file_location(name, os.path.join(pkg, "__init__.py"),
                                                      submodule_search_locations=[pkg])


def _setting(name):
    """A setting as libhvdshim.so resolved it (environment, config file)."""
    import ctypes
    try:
        fn = ctypes.CDLL(None).hvd_config_value
    except AttributeError:
        return os.environ.get(name)
    fn.restype = ctypes.c_char_p
    fn.argtypes = [ctypes.c_char_p]
    v = fn(name.encode())
    return v.decode() if v is not None else None


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
_SEED = _rng_seed()
_ACTIONS = {"torch": lambda _m: _load_adapter(), "safetensors._safetensors_rust": _private_serialize_file}
if _rank() > 0:
    _ACTIONS["argparse"] = _usage_errors_once
if _SEED is not None:
    import random
    random.seed(_SEED)  # before the script runs: a script that seeds it overrides this
    _ACTIONS["numpy"] = lambda m: m.random.seed(_SEED & 0xFFFFFFFF)
sys.meta_path.insert(0, _ImportWatcher(_ACTIONS))
sys.meta_path.insert(0, _PackageServer())
_chain()
