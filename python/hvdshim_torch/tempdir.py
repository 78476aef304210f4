"""multiprocessing's temporary folder, removed however the rank ends.

A process that multiprocessing starts (a DataLoader worker, a forkserver's
child) takes its parent's folder (pymp-* under $TMPDIR: the sockets through
which a worker hands a batch's shared memory over, a forkserver's address)
or, where the parent had none, makes its own, and a process removes the
folder it made when it exits, not when it is killed.  When a rank dies the
job's other processes are ended by signals (the launcher's, the reaper's:
shim/reaper.c), so each worker would leave its folder behind.  So before
the rank starts its first child process it makes its folder
(multiprocessing's own get_temp_dir: removed at a clean exit as in a plain
run), which every child it starts then takes over, and the library removes
it once the rank and the processes forked from it are gone
(hvd_remove_at_end).

So too the folder that torch.distributed.nn makes when it is imported
(torch 1.x to 2.6; torch._dynamo imports it): Python removes it at a clean
exit, and every rank the launcher kills when another fails would leave
one."""
import multiprocessing.process
import multiprocessing.util
import os

from . import capi
from .patching import after_import, wrap

_watched = [None]  # the folder watched
_rank_pid = [None]  # the rank's process (install)


def _remove_at_end(d):
    lib = capi.LIB
    if lib is None or lib.hvd_remove_at_end(os.fsencode(d)) != 0:
        capi.debug("no watcher for %s: a killed rank's processes may leave it" % d)


def _watch(proc):
    """The rank's folder made (where it has none yet) and watched, and
    given to PROC, about to start (a Process copies its parent's settings
    when it is made: the first one was made before the folder was)."""
    if os.environ.get("HVDSHIM_ACTIVE_PID") != str(os.getpid()):
        return  # (a worker starting processes of its own: they take the rank's folder over)
    d = multiprocessing.util.get_temp_dir()
    if _watched[0] != d:  # (one watcher a folder)
        _watched[0] = d
        _remove_at_end(d)
    config = getattr(proc, "_config", None)
    if isinstance(config, dict) and config.get("tempdir") is None:
        config["tempdir"] = d


def _watch_torch_folder(module):
    d = getattr(module, "INSTANTIATED_TEMPLATE_DIR_PATH", None)  # (torch 2.7 and later make none)
    if isinstance(d, str) and os.getpid() == _rank_pid[0] and os.path.isdir(d):
        _remove_at_end(d)


def install():
    """BaseProcess.start makes and watches the rank's folder first; torch's
    folder is watched once it is made."""
    _rank_pid[0] = os.getpid()
    after_import("torch.distributed.nn.jit.instantiator", _watch_torch_folder)
    def make_start(orig):
        def start(self):
            _watch(self)
            return orig(self)
        return start
    wrap(multiprocessing.process.BaseProcess, "start", make_start)
