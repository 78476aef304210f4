"""Process sets.  hvdshim serves the global set (every rank); the others are
not served yet, and asking for one says so."""


class ProcessSet:
    """A set of ranks that run collectives among themselves."""

    def __init__(self, ranks_or_comm=None):
        self.ranks = None if ranks_or_comm is None else sorted(int(r) for r in ranks_or_comm)
        self.process_set_id = None

    def _global(self, size):
        self.ranks = list(range(size))
        self.process_set_id = 0

    def size(self):
        from horovod.torch import size
        return len(self.ranks) if self.ranks is not None else size()

    def rank(self):
        from horovod.torch import rank
        return rank() if self.process_set_id == 0 else (self.ranks.index(rank()) if rank() in self.ranks else -1)

    def included(self):
        from horovod.torch import rank
        return self.process_set_id == 0 or (self.ranks is not None and rank() in self.ranks)

    def __eq__(self, other):
        return isinstance(other, ProcessSet) and self.ranks == other.ranks

    def __hash__(self):
        return hash(tuple(self.ranks or ()))

    def __repr__(self):
        return "ProcessSet(process_set_id=%r, ranks=%r)" % (self.process_set_id, self.ranks)


global_process_set = ProcessSet()
global_process_set.process_set_id = 0

_NOT_SERVED = ("process sets other than the global one are not served by hvdshim yet; run the collective over "
               "every rank (process_set=hvd.global_process_set), or launch a separate job for the subset")


def add_process_set(process_set):
    raise NotImplementedError("hvd.add_process_set: " + _NOT_SERVED)


def remove_process_set(process_set):
    if process_set is global_process_set or process_set == global_process_set:
        raise ValueError("hvd.remove_process_set: the global process set cannot be removed")
    raise NotImplementedError("hvd.remove_process_set: " + _NOT_SERVED)


def _check(process_set, what):
    """The collectives accept the global set only."""
    if process_set is None or process_set is global_process_set:
        return
    if isinstance(process_set, ProcessSet) and process_set.process_set_id == 0:
        return
    raise NotImplementedError("hvd.%s(process_set=...): %s" % (what, _NOT_SERVED))
