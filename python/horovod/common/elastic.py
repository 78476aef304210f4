"""Horovod's elastic API, framework-free: State, ObjectState and run_fn (the
body of hvd.elastic.run), with Horovod 0.28.1's semantics (its
docs/elastic.rst):
  * a State holds what training must not lose; commit() saves it in memory
    (and checks for hosts joining), restore() goes back to the last commit,
    sync() gives every rank rank 0's;
  * the decorated function is called after a sync(); when a collective fails
    inside it (HorovodInternalError: a rank died) every rank restores the
    last commit, takes the change of ranks in (`reset`), runs the reset
    callbacks, syncs from the new rank 0 and calls the function again; when
    hosts joined (HostsUpdatedInterrupt, raised by commit() or
    check_host_updates() on every rank at once) the same without the
    restore.
How hvdshim carries the changes out is the framework module's (its engine,
given to _setup): a death is the engine's ULFM recovery, a join is a
restart of the job (horovod/torch/elastic/restart.py).  Beyond Horovod: a
HorovodInternalError with no change of ranks behind it (ranks that disagree
on a tensor) is retried once from the last commit, as Horovod does, but
raised to the script when it comes again with no commit() in between,
instead of retrying the same failure for ever."""
import functools
import queue

from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

# The framework's side, set by its elastic module (_setup): this module
# imports no framework, so the dependency runs one way, framework -> common.
#   hosts_updated() -> bool: hosts joined (the same answer on every rank)
#   grow(state) -> bool: the job grows by starting again with the state
#       saved (does not return: SystemExit); False where it cannot
#   resume(state) -> bool or None: a restarted job's first call: the state as
#       the job left it (True: this rank was in the job before, so it runs the
#       reset callbacks); None: not a restarted job
_engine = None


def _setup(engine):
    global _engine
    _engine = engine


class State(object):
    """What elastic training must not lose, tracked on every rank.

    Args:
        bcast_object: broadcasts a Python object from rank 0 to the others.
        get_rank: this rank's number now.
    """

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._host_messages = queue.Queue()
        self._last_updated_timestamp = 0
        self._reset_callbacks = []
        self._commits = 0

    def register_reset_callbacks(self, callbacks):
        """Functions called after each reset event (ranks died or joined),
        before the sync: where a script scales its learning rate by the
        number of ranks, for instance."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """A notification that the hosts changed (update_res: Horovod's
        HostUpdateResult bits: 1 removed, 2 added)."""
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """Save the state in memory (the point restore() goes back to), then
        check_host_updates().  A commit copies every tracked object: commit
        every few batches, not every one."""
        self.save()
        self._commits += 1
        self.check_host_updates()

    def check_host_updates(self):
        """Raise HostsUpdatedInterrupt, on every rank at once, when hosts
        joined since the last check."""
        last = prev = self._last_updated_timestamp
        update = 0
        while not self._host_messages.empty():
            timestamp, res = self._host_messages.get()
            if timestamp > last:
                last, update = timestamp, update | int(res)
        self._last_updated_timestamp = last
        if last > prev:
            raise HostsUpdatedInterrupt(update == 1)  # (skip the sync when hosts were only removed)
        if _engine is not None and _engine.hosts_updated():
            raise HostsUpdatedInterrupt(False)

    def save(self):
        """Save the state in memory."""
        raise NotImplementedError()

    def restore(self):
        """Go back to the last committed state."""
        raise NotImplementedError()

    def sync(self):
        """Give every rank rank 0's state."""
        raise NotImplementedError()

    def reset(self):
        """Called after a reset event, before the sync (a subclass may reset
        objects and variables there)."""
        pass

    # hvdshim: the state carried over a restart of the job (hosts joining)
    def _hvdshim_snapshot(self):
        """A picklable picture of the state (None: this kind of State cannot
        be carried over a restart)."""
        return None

    def _hvdshim_load(self, snap):
        raise NotImplementedError()


class ObjectState(State):
    """State of plain Python objects, each given as a keyword argument and
    kept as an attribute of the same name.

    Args:
        bcast_object: broadcasts a Python object from rank 0 to the others.
        get_rank: this rank's number now.
        kwargs: the objects.
    """

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = kwargs
        self._set_attrs()
        super(ObjectState, self).__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {name: getattr(self, name) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        # as in Horovod, the objects as last committed (rank 0's) are what every rank gets
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, value)

    def _hvdshim_snapshot(self):
        return {"objects": dict(self._saved_state)}

    def _hvdshim_load(self, snap):
        self._saved_state = dict(snap["objects"])
        self._set_attrs()


def run_fn(func, reset):
    """func(state, ...) run elastically (see the module's docstring); `reset`
    takes a change of ranks in and returns how many there were (None: not
    known)."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        failed_at = None  # state._commits at the last failure that no change of ranks explains
        was_in = _engine.resume(state) if _engine is not None else None
        if was_in:
            state.on_reset()
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                state.restore()
                skip_sync = False
                changes = reset()
                if changes == 0:
                    commits = getattr(state, "_commits", 0)
                    if failed_at == commits:
                        raise  # the same failure again from the same commit: not one a retry mends
                    failed_at = commits
            except HostsUpdatedInterrupt as e:
                if _engine is not None:
                    _engine.grow(state)  # (the job starts again over the hosts there now: no return)
                skip_sync = e.skip_sync
                reset()
            state.on_reset()
    return wrapper
