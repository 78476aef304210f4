"""A job that may grow (hvdrun --host-discovery-script, --max-np), the part
every layer may use: its settings; rank 0's discovery thread and its wish
to grow, which the end-of-backward round carries to every rank
(gradients/reduction.py: proposal, agreed); the snapshot file; and, in a
job started again, rank 0's console and files held while the script is not
back (stand_aside, release).  resize.py has the rest: the state saved and
loaded, the loaders' places.

Its state: _G."""
import atexit
import os
import subprocess
import threading
import time

import torch

from . import capi
from .capi import info, setting, warn
from .elastic import _take_over
from .state import _S


class _Grow:
    def __init__(self):
        self.discovery = None   # rank 0: the script (HVDSHIM_ELASTIC_DISCOVERY), None: not growing
        self.max_np = 0
        self.interval = 1.0
        self.state_dir = None
        self.tracking = False   # loaders' places and the objects to save are recorded
        self.wanted = 0         # rank 0: the ranks to start again over (more slots listed, or hosts left)
        self.shrink = False     # rank 0: the script no longer lists a host or slots the job runs on
        self.hosts = {}         # host -> the ranks the job runs there (HVDSHIM_ELASTIC_HOSTS, from hvdrun)
        self.min_np = 0
        self.due = False        # every rank: stop at the next call to a loader
        self.due_steps = 0      # optimizer steps ended since the stop was agreed (no loader called)
        self.snap = None        # a restarted job: the saved state, until the script is back
        self.iters = {}         # loader tag -> iterations started
        self.places = {}        # loader tag -> (iteration, random state at its start)
        self.scalers = []       # GradScalers (weak), in the order they were made
        self.filters = None     # a restarted job: the warnings filters, all ignored until the script is back
        self.left = {}          # model index -> its saved state, for a model registered after the resume
        self.left_free = {}     # a free parameter's name (models.adopt_free) -> its saved value, likewise
        self.resumed = False
        self.watching = False   # rank 0's discovery thread runs
        self.held = False       # a restarted job on Horovod's elastic API: rank 0's console and files held


_G = _Grow()


def may_resize():
    """This job may grow (a discovery script), or was started again over
    new slots: its rank 0 runs the discovery script and a restarted job
    goes on from the saved state, so the adapter runs even at one rank."""
    return bool(setting("HVDSHIM_ELASTIC_DISCOVERY")) or setting("HVDSHIM_ELASTIC_RESUME") == "1"


def read_settings():
    """The settings of a job that may grow; True when it was started again
    to grow (HVDSHIM_ELASTIC_RESUME)."""
    _G.discovery = setting("HVDSHIM_ELASTIC_DISCOVERY") or None
    _G.max_np = int(setting("HVDSHIM_ELASTIC_MAX_NP") or 0)
    _G.interval = float(setting("HVDSHIM_ELASTIC_INTERVAL") or 1)
    _G.state_dir = setting("HVDSHIM_ELASTIC_STATE") or None
    _G.min_np = int(setting("HVDSHIM_ELASTIC_MIN_NP") or 0)
    try:
        _G.hosts = _listed((setting("HVDSHIM_ELASTIC_HOSTS") or "").replace(",", "\n"))
    except ValueError:
        _G.hosts = {}
    return setting("HVDSHIM_ELASTIC_RESUME") == "1"


def _listed(out):
    """The discovery script's hosts and their slots ({host: slots}, in its
    order): one "host" or "host:slots" line each."""
    hosts = {}
    for line in out.splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        host, _, n = line.rpartition(":") if ":" in line else (line, "", "1")
        try:
            k = int(n)
        except ValueError:
            k = 0
        if k < 1 or not host:
            raise ValueError("'%s' is not host or host:slots" % line)
        hosts[host] = k
    return hosts


def _plain_env():
    """This environment without the shim preloaded: the discovery script runs
    as a plain program (loading MPI in every run of it costs up to 0.4 s of
    CPU where the MPI links UCX)."""
    env = dict(os.environ)
    pre = [p for p in env.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p and "libhvdshim" not in p]
    if pre:
        env["LD_PRELOAD"] = ":".join(pre)
    else:
        env.pop("LD_PRELOAD", None)
    return env


def _poll():
    said = set()

    def once(key, text):
        if key not in said:
            said.add(key)
            warn(text)

    env = _plain_env()
    while _G.discovery and not _G.wanted:
        try:
            out = subprocess.run([_G.discovery], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60,
                                 check=True, env=env).stdout.decode("utf-8", "replace")
            if _decide(_listed(out), once):
                return
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            once("failed", "host discovery script %s: %s (tried again every %g s)" % (_G.discovery, e, _G.interval))
        time.sleep(_G.interval)


def _decide(listed, once):
    """Rank 0, on what the discovery script lists: True when the job is to
    stop and start again (_G.wanted its ranks then): more slots than ranks,
    or a host or slots the job runs on no longer listed (as Horovod, whose
    driver stops the ranks of a host that leaves the list)."""
    n = sum(listed.values())
    if _G.max_np:
        n = min(n, _G.max_np)
    gone = [h for h, k in _G.hosts.items() if listed.get(h, 0) < k]
    if gone:
        first = next(iter(_G.hosts))
        what = ", ".join("%s (%d of %d slot(s) listed)" % (h, listed.get(h, 0), _G.hosts[h]) for h in gone)
        if first in gone and listed.get(first, 0) == 0:
            once("rank0", "the host discovery script no longer lists %s, where rank 0 runs and the job's state is "
                 "saved: the job goes on over its %d rank(s) as it is (end it to free the host)"
                 % (first, _S.size))
            return False
        if n < max(_G.min_np, 1):
            once("min", "the host discovery script no longer lists %s: %d slot(s) left, fewer than --min-np %d: the "
                 "job goes on over its %d rank(s)" % (what, n, _G.min_np, _S.size))
            return False
        _G.wanted, _G.shrink = n, True
        info("the host discovery script no longer lists %s: the job starts again over %d rank(s) after the "
             "next optimizer step" % (what, n))
        return True
    if n > _S.size:
        _G.wanted = n
        info("the host discovery script lists %d slot(s) for %d rank(s): the job grows at the next "
             "optimizer step" % (n, _S.size))
        return True
    return False


def watch():
    """Rank 0 of a job that may grow runs the discovery script (a thread;
    again after a change of ranks made this rank rank 0: a no-op where it
    runs already)."""
    if _G.discovery and _S.rank == 0 and not _G.watching:
        _G.watching = True
        threading.Thread(target=_poll, name="hvdshim-discovery", daemon=True).start()


def wanted():
    """Rank 0: the discovery script lists more slots than the job has ranks,
    or no longer lists a host or slots the job runs on."""
    return _G.wanted > _S.size or _G.shrink


def change():
    """Rank 0: what the job stops for, in words."""
    return "hosts left" if _G.shrink else "hosts joined"


def proposal():
    """Rank 0's entry in the end-of-backward round: 1 to grow (not while a
    restarted job's script replays its way back, resize.py)."""
    return 1 if wanted() and (_G.snap is None or _G.resumed) else 0


def agreed(flag):
    """Every rank, once the round is reduced: rank 0's proposal."""
    if flag > 0 and _G.discovery and not _G.due:
        _G.due = True


def note_step():
    """Every rank, at the end of an optimizer step: a job due to stop stops
    at its next call to a DataLoader (resize.py), where the restarted
    script can come back.  A script that makes none for two steps after the
    stop was agreed (it draws its batches itself, or trains again on a
    loader's batches it keeps: itertools.cycle, a list) never would: the job
    goes on as it is and follows the discovery script no more, said by
    rank 0 (every rank decides alike: the flag came from the round)."""
    if not _G.due:
        return
    _G.due_steps += 1
    if _G.due_steps <= 2:
        return
    _G.due, _G.due_steps, _G.discovery = False, 0, None
    if _S.rank == 0:
        warn("%s, but the job cannot stop to start again over %d rank(s): this script has called no DataLoader for "
             "2 optimizer steps since (it draws its batches itself, or trains again on batches it keeps: "
             "itertools.cycle(loader), a list of them), and a job stops at a DataLoader's call, where the restarted "
             "script can come back.  The job goes on over its %d rank(s) and follows the discovery script no more "
             "(docs/ELASTIC.md)" % (change(), _G.wanted, _S.size))


def _path():
    return os.path.join(_G.state_dir, "snapshot.pt")


def write_snapshot(snap):
    """snapshot.pt, renewed whole (hvdrun starts the job again when it sees
    it renewed)."""
    os.makedirs(_G.state_dir, exist_ok=True)
    tmp = _path() + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(snap, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, _path())


def read_snapshot():
    """Rank 0: the state saved when the job stopped (raises OSError)."""
    with open(_path(), "rb") as f:
        try:
            return torch.load(f, map_location="cpu", weights_only=False)
        except TypeError:  # torch < 1.13's load has no weights_only
            f.seek(0)
            return torch.load(f, map_location="cpu")


def stand_aside(horovod):
    """The adapter stands aside (the script distributes itself): no loader
    is tracked any more.  In a job started again to grow whose script is on
    Horovod's elastic API (hvd.elastic.run saved its state, in
    horovod/torch/elastic/restart.py), rank 0's console and files stay held
    until hvd.elastic.run is back (release): True on rank 0 there."""
    resumed = _G.snap is not None
    _G.tracking, _G.snap, _S.resume_steps = False, None, None
    _G.held = resumed and horovod and _S.rank == 0
    if _G.held:
        atexit.register(_held_at_exit)
    else:
        _restore_filters()
    return _G.held


def release():
    """hvd.elastic.run is back in a restarted job: rank 0 writes for real
    again (what the script wrote before is dropped; its open files go on at
    the end of what the job wrote before the restart)."""
    if not _G.held:
        return
    _G.held = False
    _flush_writers()
    _take_over(resumed=True)
    _restore_filters()


def _restore_filters():
    if _G.filters is not None:
        import warnings
        warnings.filters[:] = _G.filters
        getattr(warnings, "_filters_mutated", lambda: None)()
        _G.filters = None


def _held_at_exit():
    if _G.held:
        capi.LIB.hvd_abort_job(("the restarted job ended before its script called the function decorated with "
                                "hvd.elastic.run, which takes the state saved in %s" % _path()).encode())


def _flush_writers():
    """Every Python file object open for writing flushes its buffer."""
    import gc
    import io
    for o in gc.get_objects():
        try:  # type(), not isinstance(): an object's __class__ may warn (torch.distributed.reduce_op)
            if issubclass(type(o), io.IOBase) and not o.closed and o.writable():
                o.flush()
        except Exception:  # (a stream that cannot say or flush: left as it is)
            pass
