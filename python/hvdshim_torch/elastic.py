"""HVDSHIM_ELASTIC: the script goes on when ranks die.

The engine makes every operation complete on every survivor or fail with
HVD_ERR_MEMBERSHIP on every one, and (hvd_elastic_follow) refuses this
rank's new work until the adapter has taken the change in, so the survivors
stand at the same point of the script when they see it.  Then:
  * recover() takes it in: the rank and size become the survivors' (every
    later average divides by them; loaders deal the rest of the epoch over
    them from the next batch on);
  * the step in flight is completed by the survivors from their own
    gradients (gradients/submit.py keeps a copy of each until the step's reduction has
    completed): the dead ranks' part of that step's batch is lost; a step
    whose gradients were averaged before the death keeps it;
  * any other operation the change failed (a loss average, a loader's
    order, the replica guard) is submitted again: retrying().
Rank 0's death: the survivors renumber in order, and the new rank 0 takes
over the console (its stdout is no longer silenced) and the files
(hvd_overlay_promote: its writes are real from then on, and the files it
has open move to their real paths, so a log opened for append goes on at
the end of what the old rank 0 wrote).

Its state: _E."""
import ctypes
import sys

import torch

from . import capi, errors
from .capi import MAX, warn
from .errors import HvdShimError, MembershipChanged
from .collectives import allreduce, Pending
from .output import _O, _PrefixedStream, renumber
from .state import _S, is_number, optimizer_step


class _Changes:
    def __init__(self):
        self.changes = 0            # changes of ranks taken in
        self.took_over = False      # this rank became rank 0 after the first one died


_E = _Changes()

_RETRIES = 64  # changes survived inside one operation: each needs a death, so a bound never reached in practice


def follow():
    """At the engine's start, in an elastic job: this adapter takes changes in."""
    if capi.setting("HVDSHIM_ELASTIC") == "1":
        capi.LIB.hvd_elastic_follow()
        errors.following = True
        _S.elastic = True


def recover():
    """Take in the changes of ranks since the last call (none: a no-op)."""
    rank, size, lost0 = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    what = ctypes.create_string_buffer(1024)
    n = capi.LIB.hvd_elastic_ack(ctypes.byref(rank), ctypes.byref(size), ctypes.byref(lost0), what,
                                 ctypes.sizeof(what))
    if n <= 0:
        return
    msg = what.value.decode("utf-8", "replace").split("; the job goes on")[0]
    old, old_rank = _S.size, _S.rank
    _S.rank, _S.size = rank.value, size.value
    _E.changes += n
    renumber(_S.rank)  # (its lines: "[rank N]" with its number among the survivors)
    for fn in _S.on_change:  # (data/redeal._redeal_all: what the loaders' workers were asked for in the old split)
        fn()
    if _S.scale_lr and _S.size != old:
        _rescale_lr(_S.size / old)
    took = lost0.value and _S.rank == 0 and not _E.took_over
    if took:
        _take_over()
    if _S.rank == 0:  # (the one line of it: the engine's own is at HVDSHIM_LOG_LEVEL=info where it is followed)
        back = _S.resume_steps  # a restarted job whose script is not back yet: the step it comes back to
        head, _, cause = msg.partition(" (")
        warn("%s: this script goes on from %s over %d rank(s) (was %d)%s%s"
             % (head, optimizer_step((back or _S.steps) + 1), _S.size, old,
                "; rank %d is rank 0 now: the console and the files are its from here on" % old_rank if took
                else "", "; %s" % cause[:-1] if cause.endswith(")") else ""))


def _rescale_lr(factor):
    """HVDSHIM_SCALE_LR: the learning rates were multiplied by the number of
    ranks, so they follow it: every optimizer group's lr and initial_lr, and
    the base_lrs of every LR scheduler (made from initial_lr), times
    survivors / before.  Every survivor does it at the same point, so rank
    0's hyperparameters, which the others take at every backward, agree."""
    for ref in _S.optimizers:
        opt = ref()
        for group in (opt.param_groups if opt is not None else ()):
            for key in ("lr", "initial_lr"):
                v = group.get(key)
                if isinstance(v, torch.Tensor):
                    with torch.no_grad():
                        v.mul_(factor)
                elif is_number(v):
                    group[key] = v * factor
    for ref in _S.schedulers:
        sched = ref()
        if sched is not None and isinstance(getattr(sched, "base_lrs", None), list):
            sched.base_lrs = [v * factor for v in sched.base_lrs]
    if _S.rank == 0:
        warn("HVDSHIM_SCALE_LR: learning rates times %g (%d rank(s) now)" % (factor, _S.size))


def _take_over(resumed=False):
    """This rank is rank 0 now (the first one died; or resumed: a restarted
    job's script is back where the job stopped, resize.py): its writes are
    real and its stdout is the job's."""
    _E.took_over = True
    if resumed:
        capi.LIB.hvd_overlay_resume()
    else:
        capi.LIB.hvd_overlay_promote()
    saved = _O.stdout_saved
    if saved is not None and saved[0] == "fd":  # (the library may have put it back already: overlay.c)
        if sys.stdout is not None:
            sys.stdout.flush()  # what it printed before goes where it went (nowhere)
        if capi.LIB.hvd_overlay_console_back() != 0:
            warn("could not take over stdout: descriptor 1 was not put back on the console")
        _O.stdout_saved = None
    renumber(0)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, _PrefixedStream):
            stream.redraws = True
    _O.quiet_console = False


def retrying(fn, *args):
    """fn(*args), submitted again after each change of ranks that failed it."""
    for _ in range(_RETRIES):
        try:
            return fn(*args)
        except MembershipChanged:  # (raised only where the adapter follows the changes)
            recover()
    raise HvdShimError("hvdshim: the ranks changed %d times during one operation: ending the job" % _RETRIES)


def redone(step):
    """The step's gradients were averaged again over the survivors."""
    if _S.rank == 0:
        warn("%s: its gradients averaged again over the %d surviving rank(s), from their own "
             "(the dead ranks' part of this step's batch is lost)" % (optimizer_step(step), _S.size))


def extremes(name, values, what):
    """The largest and the smallest of each float64 of `values` (1-D) over
    the ranks: one MAX over [values, -values] (submitted again after a
    change of ranks).  Where they are equal, every rank has the same."""
    vec = torch.cat([values, -values])

    def once():
        vec.copy_(torch.cat([values, -values]))
        pending = Pending()
        allreduce(name, vec, MAX, pending, what)
        pending.wait()
    retrying(once)
    n = values.numel()
    return vec[:n], -vec[n:]
