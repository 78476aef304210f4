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
one.

And the script's own tempfile.TemporaryDirectory folders (a trainer's best
weights kept there, as pytorch/tutorials' transfer learning does): removed
by the script's `with` or at exit in a plain run, however the run is
stopped short of SIGKILL; under a launcher the ranks can end by SIGKILL
with no fault of theirs (the survivors of a rank's death, Open MPI 5 and
6's prterun at Ctrl-C), so each is watched too (not one made with
delete=False, Python 3.12's: kept on purpose)."""
import multiprocessing.process
import multiprocessing.util
import os
import tempfile

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


_SCRIPT_FOLDERS = 1024  # watched at most (the watcher keeps their names until the rank ends)
_script_folders = [0]


def _watch_script_folder(tmp):
    """A TemporaryDirectory the rank's process made (not a worker's: it
    ends with its worker, or is the worker's to keep)."""
    name = getattr(tmp, "name", None)
    if not (isinstance(name, str) and getattr(tmp, "_delete", True) and os.getpid() == _rank_pid[0]):
        return
    _script_folders[0] += 1
    if _script_folders[0] <= _SCRIPT_FOLDERS:
        _remove_at_end(name)
    elif _script_folders[0] == _SCRIPT_FOLDERS + 1:
        capi.debug("%d temporary folders watched: later ones are not (a killed rank may leave them)" % _SCRIPT_FOLDERS)


def install():
    """BaseProcess.start makes and watches the rank's folder first; torch's
    folder is watched once it is made, and so is each TemporaryDirectory."""
    _rank_pid[0] = os.getpid()
    after_import("torch.distributed.nn.jit.instantiator", _watch_torch_folder)
    def make_tmp_init(orig):
        def __init__(self, *args, **kwargs):
            orig(self, *args, **kwargs)
            _watch_script_folder(self)
        return __init__
    wrap(tempfile.TemporaryDirectory, "__init__", make_tmp_init)
    def make_start(orig):
        def start(self):
            _watch(self)
            return orig(self)
        return start
    wrap(multiprocessing.process.BaseProcess, "start", make_start)
