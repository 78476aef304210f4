"""horovod.torch.elastic served by hvdshim: Horovod 0.28.1's elastic API
(hvd.elastic.run, TorchState, ObjectState, ElasticSampler) with its
semantics (horovod/common/elastic.py says them).

Under a job of fixed size (mpirun, or hvdrun without --min-np and without
--host-discovery-script) the decorated function runs once, after a sync
from rank 0, as on Horovod.  Elastic jobs:
  * a rank that dies (hvdrun --min-np, HVDSHIM_ELASTIC=1 on an MPI with
    ULFM): the engine shrinks the job and fails, on every survivor alike,
    the operation in flight, so the survivors raise HorovodInternalError
    inside the decorated function at the same step; hvd.elastic.run
    restores the last commit, takes the change in (mpi_ops._take_change:
    hvd.rank() and hvd.size() are the survivors'), runs the reset callbacks,
    syncs from the new rank 0 and calls the function again;
  * hosts joining (hvdrun --host-discovery-script): restart.py."""
from horovod.common.elastic import ObjectState as _ObjectState, run_fn
from horovod.torch import functions as _functions
from horovod.torch.elastic import restart as _restart
from horovod.torch.elastic.sampler import ElasticSampler
from horovod.torch.elastic.state import TorchState
from horovod.torch.functions import broadcast_object
from horovod.torch.mpi_ops import _take_change, init, rank, shutdown  # noqa: F401 (Horovod's module has them)


def run(func):
    """Decorator: run func(state, ...) elastically.  Its first argument must
    be a State (a TorchState), synced from rank 0 before each call.  When
    ranks die inside func, every survivor goes back to the state's last
    commit(), runs the reset callbacks, syncs and calls func again; when
    hosts join, every rank (the new ones too) goes on from the state at the
    commit() that noticed them.  As in Horovod, keep collectives of your own
    out of the code between the sync and func's loop."""
    return run_fn(func, _reset)


def _reset():
    n = _take_change()
    for kind in _functions._unnamed:  # (unnamed broadcast_object/allgather_object numbered afresh on every rank)
        _functions._unnamed[kind] = 0
    if n:
        _restart.changed()
    return n


class ObjectState(_ObjectState):
    """State of plain Python objects (keyword arguments), synced with
    hvd.broadcast_object from rank 0."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object or broadcast_object, get_rank or rank, **kwargs)


__all__ = ["TorchState", "ObjectState", "ElasticSampler", "run"]
