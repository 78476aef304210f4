"""Process sets: collectives among some ranks only, on hvdshim's engine
(hvd_process_set_add/remove in libhvdshim.so, each set its own MPI
communicator).  As in Horovod: every rank adds and removes the same sets in
the same order (hvd.add_process_set, or hvd.init(process_sets=[...])); only
a set's members run its operations; a broadcast's root_rank is a rank of the
job that belongs to the set."""


class ProcessSet:
    """A set of ranks that run collectives among themselves.  Usable once
    added (its process_set_id is then set)."""

    def __init__(self, ranks_or_comm):
        self.process_set_id = None
        self.mpi_comm = None
        if hasattr(ranks_or_comm, "Get_group"):  # an mpi4py communicator: its ranks in MPI_COMM_WORLD
            from mpi4py import MPI
            self.mpi_comm = ranks_or_comm
            group = ranks_or_comm.Get_group()
            self.ranks = sorted(MPI.Group.Translate_ranks(group, list(range(group.Get_size())),
                                                          MPI.COMM_WORLD.Get_group()))
            return
        ranks = list(ranks_or_comm)
        if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet: ranks must be integers, got %r" % (ranks,))
        self.ranks = sorted(ranks)

    def _global(self, size):
        self.ranks = list(range(size))
        self.process_set_id = 0

    def size(self):
        """The number of ranks in the set (None before it is added)."""
        return None if self.process_set_id is None else len(self.ranks)

    def rank(self):
        """This rank's index in the set (-1: not a member; None before it is added)."""
        if self.process_set_id is None:
            return None
        me = _me()
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self):
        """This rank belongs to the set (None before it is added)."""
        return None if self.process_set_id is None else _me() in self.ranks

    def __eq__(self, other):
        return isinstance(other, ProcessSet) and self.ranks == other.ranks

    def __hash__(self):
        return hash(tuple(self.ranks or ()))

    def __repr__(self):
        return "ProcessSet(process_set_id=%r, ranks=%r, mpi_comm=%r)" % (self.process_set_id, self.ranks,
                                                                         self.mpi_comm)


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
_registry = {}  # id -> ProcessSet, the sets added and not removed (not the global one)

# The engine behind the sets, given by the framework module when it loads
# (horovod.torch.basics calls _setup): this module imports no framework, so
# the dependency runs one way, framework -> common.
_engine = None


def _setup(engine):
    """engine: need_init(what), rank(), add(ranks, what) -> id, remove(id, what)."""
    global _engine
    _engine = engine


def _me():
    return _engine.rank()


def _add(process_set, what):
    _engine.need_init(what + "()")
    if process_set.process_set_id is not None:
        raise ValueError("hvd.%s: %r has been added already" % (what, process_set))
    if process_set.ranks == global_process_set.ranks or any(ps.ranks == process_set.ranks
                                                             for ps in _registry.values()):
        raise ValueError("hvd.%s: attempted to add a duplicate process set: a set with ranks %r exists already"
                         % (what, process_set.ranks))
    process_set.process_set_id = _engine.add(process_set.ranks, what)
    _registry[process_set.process_set_id] = process_set
    return process_set


def add_process_set(process_set):
    """Add a process set (a ProcessSet or a list of ranks) on every rank, in
    the same order everywhere; returns it, ready to use.  Blocks until every
    rank has added it.  As in Horovod, a set with the same ranks as one that
    exists (the global set included) is refused with ValueError."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    return _add(process_set, "add_process_set")


def remove_process_set(process_set):
    """Remove a process set on every rank (in the same order everywhere).
    Returns False, as Horovod does, when it was not added or is the global
    set."""
    if process_set is global_process_set or process_set.process_set_id in (None, 0):
        return False
    if process_set.process_set_id not in _registry:
        return False
    _engine.remove(process_set.process_set_id, "remove_process_set")
    del _registry[process_set.process_set_id]
    process_set.process_set_id = None
    return True


def _retire_all():
    """The ranks changed (elastic): the engine ended every set but the global
    one; they are no longer added (add them again over the ranks there are)."""
    for ps in _registry.values():
        ps.process_set_id = None
    _registry.clear()


def _check(process_set, what):
    """The engine id of the set an operation runs on (0: every rank)."""
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError("hvd.%s: process_set must be a ProcessSet, got %s" % (what, type(process_set).__name__))
    if process_set.process_set_id == 0:
        return 0
    if process_set.process_set_id is None or _registry.get(process_set.process_set_id) is not process_set:
        raise ValueError("hvd.%s: %r has not been added (hvd.add_process_set, or hvd.init(process_sets=...))"
                         % (what, process_set))
    if not process_set.included():
        raise ValueError("hvd.%s: rank %d is not in %r: only its members run its operations"
                         % (what, _me(), process_set))
    return process_set.process_set_id
