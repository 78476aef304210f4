"""The epoch's order agreed: every rank draws it as the plain loader draws
it (random state advances alike), and rank 0's is broadcast a window at a
time (_WINDOW indices), as the batches are consumed, so memory and start-up
do not grow with the epoch and an endless sampler starts at once."""
import array
import itertools

import torch

from ..collectives import Pending, broadcast_bytes
from ..elastic import retrying
from ..state import _warn_once


def _as_ints(seq):
    try:
        return [int(i) for i in seq]
    except (TypeError, ValueError):
        return None


def _broadcast_ints(name, values, what):
    """Rank 0's `values` (ints: a list, or an array of int64) on every rank, as a list."""
    buf = values if isinstance(values, array.array) else array.array("q", values)
    t = torch.frombuffer(buf, dtype=torch.int64) if len(buf) else torch.zeros(0, dtype=torch.int64)

    def broadcast():
        pending = Pending()
        broadcast_bytes(name, t, pending, what)
        pending.wait()
    retrying(broadcast)
    return buf.tolist()


def _int64s(seq):
    """seq's indices as an array of int64 (one C loop where they are ints),
    or None where they are not integers."""
    try:
        return array.array("q", seq)
    except (TypeError, OverflowError):
        ints = _as_ints(seq)
        return array.array("q", ints) if ints is not None else None


def _window_message(ints, count, more, expected):
    """[count, more, indices..., padding] as int64, an array the broadcast
    copies out of (no list and torch.tensor in between)."""
    msg = array.array("q", (count, more))
    if ints is not None:
        msg += ints
    msg += array.array("q", bytes(8 * (expected - count)))
    return msg


# Indices drawn, agreed and dealt per broadcast: a window of the epoch's
# order (512 KiB of int64), so no rank ever holds an epoch.
_WINDOW = 1 << 16


def order_windows(inner, tag, loader):
    """The sampler's order, drawn on every rank as the plain loader draws it
    (lazily, and to its end, as BatchSampler runs it: random state
    advances as in the plain run), rank 0's agreed a window at a time.
    Each message: [count, more, indices..., padding]; `more` is rank 0's
    finding that its sampler yields past this window (a probe of one
    item, kept for the next), so every rank stops where rank 0's does."""
    b = inner.batch_size
    step = max(1, _WINDOW // b) * b  # whole global batches per window
    try:
        left = len(inner.sampler)
    except TypeError:
        left = None  # no len: every window reserves a full step
    it = iter(inner.sampler)
    name = b"hvdshim.data.%d" % tag
    what = "broadcasting the epoch's sample order of " + loader
    agreed, probed, end = None, [], object()
    while True:
        expected = step if not left else min(step, left)
        window = probed + list(itertools.islice(it, expected - len(probed)))
        probed = []
        if len(window) == expected:
            nxt = next(it, end)
            if nxt is not end:
                probed = [nxt]
        more = int(bool(probed))
        ints = _int64s(window)
        if agreed is None:
            agreed = window == [] or ints is not None
            if not agreed:
                _warn_once(("noint", tag), "%s: its sampler yields %s, not integer indices; each rank "
                           "uses its own order (they agree only if the sampler is deterministic)"
                           % (loader, type(window[0]).__name__))
        if agreed:
            got = _broadcast_ints(b"%s.w%d" % (name, expected), _window_message(ints, len(window), more, expected),
                                  what)
            window, more = got[2:2 + got[0]], got[1]
        if window:
            yield window
        if not more:
            return
        if left is not None:
            left = max(0, left - len(window))  # 0: past its len, sized as if it had none


def batch_windows(it, tag, loader):
    """A custom batch sampler's batches, rank 0's agreed a window at a
    time (up to _WINDOW indices or _WINDOW batches each)."""
    name = b"hvdshim.data.%d" % tag
    what = "broadcasting the epoch's batches of " + loader
    agreed = None
    it = iter(it)
    while True:
        batches, total = [], 0
        for bt in it:
            batches.append(list(bt))
            total += len(batches[-1])
            if total >= _WINDOW or len(batches) >= _WINDOW:
                break
        more = int(bool(batches) and (total >= _WINDOW or len(batches) >= _WINDOW))
        flat = [i for bt in batches for i in bt]
        if agreed is None:
            agreed = not flat or _as_ints(flat) is not None
            if not agreed:
                _warn_once(("noint", tag), "%s: its batch sampler yields batches of %s, not integer "
                           "indices; each rank uses its own batches" % (loader, type(flat[0]).__name__))
        if agreed:
            head = _broadcast_ints(name + b".h", [len(batches), len(flat), more], what)
            body = [len(bt) for bt in batches] + _as_ints(flat)  # rank 0's, or a buffer for it
            if len(body) != head[0] + head[1]:
                body = [0] * (head[0] + head[1])
            if head[0]:
                body = _broadcast_ints(b"%s.b%d.%d" % (name, head[0], head[1]), body, what)
            lengths, flat, more, batches, at = body[:head[0]], body[head[0]:], head[2], [], 0
            for n in lengths:
                batches.append(flat[at:at + n])
                at += n
        yield from batches
        if not more:
            return
