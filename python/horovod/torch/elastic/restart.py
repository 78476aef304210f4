"""Hosts joining a job on Horovod's elastic API (hvdrun
--host-discovery-script): hvdshim grows a job by starting it again over more
ranks (launcher/grow.c, as for an unmodified script: MPI cannot take new
ranks into a running job that survives deaths), and this module maps that
restart onto Horovod's semantics:
  * rank 0 runs the discovery script (hvdshim_torch/grow.py's thread,
    from the first commit() on); commit() and check_host_updates() broadcast
    whether it lists more slots than ranks, so every rank raises HostsUpdatedInterrupt at the same
    call, inside the decorated function;
  * hvd.elastic.run catches it (grow): rank 0 saves the State (each handled
    object's state_dict now and as last committed, the plain objects as last
    committed) and every rank's random state in snapshot.pt, and every rank
    ends with status 0 (SystemExit: the script's `finally` blocks run);
    hvdrun sees the state renewed and starts the job again over the new
    slots;
  * in the restarted job every rank runs the script from its start (rank
    0's console silenced and its files private meanwhile: the adapter holds
    them, hvdshim_torch/grow.stand_aside), and the decorated function's
    first call takes the saved state (resume): rank 0 reads it and every
    rank loads it (broadcast), the ranks that were in the job before take
    their random state back and run the reset callbacks (as Horovod's
    workers that stay do after a HostsUpdatedInterrupt), rank 0's console
    and files are real again, and the sync gives every rank rank 0's state.
Objects outside the State start from the script's own start values in the
restarted job, on every rank (in Horovod, only on the new ranks)."""
import sys

import torch

from horovod.common import elastic as _common
from horovod.torch.functions import allgather_object, broadcast_object
from horovod.torch.basics import _at_init, rank, size
from horovod.torch.ops import broadcast_

from hvdshim_torch import capi
from hvdshim_torch import grow as _grow
from hvdshim_torch import rng as _rng
from hvdshim_torch.state import _S  # (the adapter stood aside: its rank and size are the discovery's reference)


class _Restart:
    def __init__(self):
        self.resuming = False  # a job started again to grow, its state not yet taken
        self.due = False       # every rank agreed: hosts joined (HostsUpdatedInterrupt raised)


_R = _Restart()


def _begin():
    """At hvd.init: the settings."""
    _R.resuming = _grow.read_settings()
    changed()


def changed():
    """At hvd.init and after a change of ranks: the discovery compares the
    slots with the ranks there are now."""
    _S.rank, _S.size = rank(), size()


def hosts_updated():
    """Rank 0's discovery says more slots than ranks, on every rank (one
    broadcast of an integer; none in a job that cannot grow).  Rank 0 runs
    the discovery script from the first call on (a thread, in the rank that
    is rank 0 now)."""
    if not _grow._G.discovery:
        return False
    _grow.watch()
    flag = torch.tensor([1 if rank() == 0 and _grow.wanted() else 0], dtype=torch.int64)
    broadcast_(flag, 0, name="hvdshim.elastic.hosts")
    _R.due = bool(flag[0])
    return _R.due


def grow(state):
    """After HostsUpdatedInterrupt: save the state and end every rank (status
    0) for hvdrun to start the job again over the new slots.  Returns False
    (the job goes on as it is, growing no more) when it cannot."""
    if not _R.due or not _grow._G.discovery:
        return False
    _R.due = False
    states = allgather_object(_rng._states(cuda=True), name="hvdshim.elastic.rng")
    ok, why = True, ""
    if rank() == 0:
        try:
            snap = state._hvdshim_snapshot()
            if snap is None:
                raise TypeError("a %s cannot be carried over a restart (hvd.elastic.TorchState and ObjectState can)"
                                % type(state).__name__)
            _grow.write_snapshot({"version": 1, "kind": "horovod", "size": size(), "state": snap, "rng": states})
        except Exception as e:  # a full disk, an object that cannot be pickled: the job goes on as it is
            ok, why = False, "%s: %s" % (type(e).__name__, e)
    ok, why = broadcast_object((ok, why), 0, name="hvdshim.elastic.grow")
    if not ok:
        _grow._G.discovery = None
        if rank() == 0:
            capi.warn("hosts joined, but the state of hvd.elastic.run could not be saved in %s (%s): the job goes on "
                      "over %d rank(s) and grows no more" % (_grow._G.state_dir, why, size()))
        return False
    if rank() == 0:
        capi.warn("%s: the job stops at this commit, its hvd.elastic state saved in %s, and starts again "
                  "over %d rank(s) (was %d)" % (_grow.change(), _grow._path(), _grow._G.wanted, size()))
    raise SystemExit(0)  # every rank ends 0; hvdrun sees the state saved anew


def resume(state):
    """The decorated function's first call in a restarted job: the state as
    the job left it, on every rank (the objects as they were and as last
    committed: a rank that becomes rank 0 after a later death restores the
    same commit).  True on the ranks that were in the job before; None
    where this is not a restarted job."""
    if not _R.resuming:
        return None
    _R.resuming = False
    snap = None
    if rank() == 0:
        try:
            snap = _grow.read_snapshot()
            if not isinstance(snap, dict) or snap.get("kind") != "horovod":
                raise ValueError("it was not saved by hvd.elastic.run")
        except Exception as e:
            snap = {"error": "%s: %s" % (type(e).__name__, e)}
    snap = broadcast_object(snap, 0, name="hvdshim.elastic.resume")
    if "error" in snap:
        capi.LIB.hvd_abort_job(("the job started again to grow cannot read the state hvd.elastic.run saved, %s on "
                                "rank 0's host (%s): rank 0 must run on the host where the job stopped, or "
                                "HVDSHIM_ELASTIC_STATE be a shared folder" % (_grow._path(), snap["error"])).encode())
    before = snap["size"]
    state._hvdshim_load(snap["state"])
    if rank() < before:
        _rng._set_states(snap["rng"][rank()])
    if rank() == 0:
        _grow.release()
        capi.warn("the job started again over %d rank(s) (was %d): hvd.elastic.run goes on from the state of the "
                  "commit where the job stopped" % (size(), before))
    return rank() < before


_common._setup(sys.modules[__name__])
_at_init.append(_begin)
