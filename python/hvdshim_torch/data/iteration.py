"""What every dealt iteration shares: its batches drawn with this rank's
own random state and noted as parts of a batch (dealt_batches); split
slices' padding flags, handed out with their batch (PaddedSlices); and a
restarted job's skip of the part it had trained on (take_skip, _Primed;
resize.py).

Its state: _IT."""
from .. import rng as _rng
from ..state import _S


class _Iterations:
    def __init__(self):
        self.pads_last = None       # split mode: the padding flags of the batch sampler iteration made last
        self.skip = None            # global batches the loader iteration being made skips (take_skip)
        self.skip_taken = False     # this package took it (it deals this loader)
        self.primer = None          # the loader iterator made last that can skip ahead (_Primed)


_IT = _Iterations()


def dealt_batches(it):
    """A dealt iteration's batches (this rank's part of each): each drawn
    with this rank's own random state (the step window closed first, even
    where no step closed it since the last backward: the sampler's order
    and a dataset's random augmentation are drawn as the plain run draws
    them), and noted as parts of a batch (_S.whole_batches: BatchNorm
    syncs over ranks)."""
    it = iter(it)
    while True:
        if _rng._R.window is not None:
            _rng.window_close()
        try:
            x = next(it)
        except StopIteration:
            return
        _S.whole_batches = False
        yield x


class _LoaderIter:
    """A DataLoader's iterator, wrapped: its length and attributes are the
    inner one's; subclasses say what happens as it hands a batch out."""

    def __init__(self, inner):
        self._inner = inner

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._inner)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class PaddedSlices(_LoaderIter):
    """A split DataLoader's iterator: as it hands a batch out, whether this
    rank's slice of it is padding (_S.pad_slice, the flag its batch sampler
    queued when it cut the batch: with workers, batches are cut ahead)."""

    def __init__(self, inner, pads):
        super().__init__(inner)
        self._pads = pads

    def __next__(self):
        x = next(self._inner)
        _S.pad_slice = self._pads.popleft() if self._pads else False
        return x


def padded_slices(it):
    """DataLoader.__iter__'s iterator, where its batch sampler cuts batches
    (split mode): one that says which slices are padding (PaddedSlices)."""
    pads, _IT.pads_last = _IT.pads_last, None
    return it if pads is None else PaddedSlices(it, pads)


class _Primed:
    """An iterator that can take its first item ahead of use (so a loader's
    epoch is drawn, and the part already trained on skipped, while the
    random state is the one the epoch was drawn from: resize.py)."""

    def __init__(self, inner):
        self._inner, self._first = inner, []
        _IT.primer = self

    def prime(self):
        if not self._first:
            self._first.append(next(self._inner, _Primed))

    def __iter__(self):
        return self

    def __next__(self):
        x = self._first.pop() if self._first else next(self._inner)
        if x is _Primed:
            raise StopIteration
        return x


def take_skip(batch=None):
    """What the loader iteration being made skips: in a job started again to
    grow, at the call where the job stopped, the part of the stream the job
    had used (_IT.skip, in global batches; times `batch` when the stream is
    of indices), else None."""
    if _IT.skip is None:
        return None
    _IT.skip_taken = True  # (a DataLoader with workers asks twice: its first batch sampler iterator is dropped)
    return _IT.skip * (batch or 1)
