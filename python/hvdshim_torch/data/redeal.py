"""HVDSHIM_ELASTIC: what a loader's workers were asked for ahead is dealt
again over the ranks left after a death (_Handout), its results in the old
split dropped (_Redealt): no sample of the epoch is lost or seen twice.

Its state: _LIVE."""
import collections
import weakref

from ..state import _S
from .iteration import _LoaderIter


class _Live:
    def __init__(self):
        self.live = weakref.WeakSet()  # sharded iterations whose workers were asked ahead (_Handout)
        self.live_last = None       # the one made last (its DataLoader iterator is linked next)


_LIVE = _Live()


class _Pushback:
    """An iterator that takes items back to give them again first."""

    def __init__(self, it):
        self._it, self._front = iter(it), collections.deque()

    def __iter__(self):
        return self

    def __next__(self):
        return self._front.popleft() if self._front else next(self._it)

    def push(self, items):
        self._front.extendleft(reversed(items))

    def pending(self):
        return bool(self._front)


class _Handout:
    """HVDSHIM_ELASTIC: one sharded iteration of a loader whose workers are
    asked for batches ahead (prefetch).  The global units of the batches
    handed out (split: global batches; shard: runs of ranks x batch
    indices, or of ranks whole batches of a custom batch sampler) are noted, so that after a change of ranks those the workers
    were asked for and the script has not had go back into the order, to be
    dealt again over the survivors, and their results in the old split are
    dropped (_Redealt).  No sample of the epoch is lost or seen twice."""

    def __init__(self):
        self.units = collections.deque(maxlen=4096)  # the last units handed, in order
        self.handed = 0     # batches handed to the loader
        self.drop = 0       # results of the loader to drop (asked for in the old split)
        self.items = None   # the order's _Pushback
        self.again = None   # a new dealing of what is in items (once the first has ended: _Resumable)
        self.loader_iter = None  # the DataLoader's iterator (weak): its _num_yielded
        _LIVE.live_last = self

    def note(self, unit):
        self.units.append(unit)
        self.handed += 1

    def redeal(self):
        it = self.loader_iter() if self.loader_iter is not None else None
        given = getattr(it, "_num_yielded", None)
        if given is None or self.items is None:
            return
        stale = self.handed - given - self.drop  # asked for in the old split, not given yet
        if stale <= 0:
            return
        units = list(self.units)[-stale:]
        self.items.push([i for u in units for i in u])
        self.handed -= stale
        for _ in range(stale):
            self.units.pop()
        self.drop += stale


class _Resumable:
    """A sharded iteration's batches (HVDSHIM_ELASTIC) that go on after they
    ended when a change of ranks puts batches back (the workers may have
    been asked for the epoch's last ones when a rank dies)."""

    def __init__(self, gen, live):
        self._gen, self._live = gen, live

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            try:
                return next(self._gen)
            except StopIteration:
                live = self._live
                if live.items is None or not live.items.pending() or live.again is None:
                    raise
                self._gen = live.again()


class _Redealt(_LoaderIter):
    """A DataLoader's iterator (HVDSHIM_ELASTIC, workers): results asked
    for before a change of ranks are dropped (_Handout)."""

    def __init__(self, inner, live):
        super().__init__(inner)
        self._live = live
        live.loader_iter = weakref.ref(inner)
        _LIVE.live.add(live)

    def __next__(self):
        while self._live.drop > 0:
            self._live.drop -= 1
            next(self._inner)
        return next(self._inner)


def redealt(loader, it):
    """DataLoader.__iter__'s iterator, in an elastic job whose loader has
    workers and is dealt here by index: one that drops what a change of
    ranks left in the old split."""
    live, _LIVE.live_last = _LIVE.live_last, None
    if live is None or not _S.elastic or not getattr(loader, "num_workers", 0) or not hasattr(it, "_num_yielded"):
        return it
    return _Redealt(it, live)


def _redeal_all():
    """A change of ranks (elastic.recover): every live iteration deals again
    what its loader's workers had been asked for."""
    for live in list(_LIVE.live):
        live.redeal()


_S.on_change.append(_redeal_all)  # (elastic is below data: it calls up through this)
