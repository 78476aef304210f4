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
(hvd_remove_at_end)."""
import multiprocessing.process
import multiprocessing.util
import os

from . import capi
from .patching import wrap

_watched = [None]  # the folder watched


def _watch(proc):
    """The rank's folder made (where it has none yet) and watched, and
    given to PROC, about to start (a Process copies its parent's settings
    when it is made: the first one was made before the folder was)."""
    if os.environ.get("HVDSHIM_ACTIVE_PID") != str(os.getpid()):
        return  # (a worker starting processes of its own: they take the rank's folder over)
    d = multiprocessing.util.get_temp_dir()
    if _watched[0] != d:  # (one watcher a folder)
        _watched[0] = d
        if capi.LIB.hvd_remove_at_end(d.encode()) != 0:
            capi.debug("no watcher for %s: a killed rank's processes may leave it" % d)
    config = getattr(proc, "_config", None)
    if isinstance(config, dict) and config.get("tempdir") is None:
        config["tempdir"] = d


def install():
    """BaseProcess.start makes and watches the rank's folder first."""
    def make_start(orig):
        def start(self):
            _watch(self)
            return orig(self)
        return start
    wrap(multiprocessing.process.BaseProcess, "start", make_start)
