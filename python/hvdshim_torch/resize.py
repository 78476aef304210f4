"""Hosts joining (hvdrun --host-discovery-script, --max-np): the job grows by
starting again over more ranks, and the script goes on where it was.

MPI cannot take new ranks into this running job (Open MPI's MPI_Comm_spawn
fails under ULFM), so (launcher/grow.c has hvdrun's side):
  * rank 0 runs the discovery script every HVDSHIM_ELASTIC_INTERVAL seconds
    (a thread); when it lists more slots than ranks, rank 0 proposes to grow
    in the round that ends a step's backward, so every rank learns it at the
    same optimizer step (gradients/reduction._submit_round; grow.py);
  * at the next call to a loader after that step (its next batch, or its
    next epoch: what the script does between, a scheduler's or a scaler's
    step, a log line, an evaluation, has run), rank 0 saves the job's state
    (snapshot.pt in HVDSHIM_ELASTIC_STATE: models, optimizers, LR schedulers,
    GradScalers, random state, the adapter's counters, and every loader's
    place), and every rank ends (status 0; the script's `finally` blocks
    run and its open files are closed, as at any exit);
  * hvdrun starts the job again (HVDSHIM_ELASTIC_RESUME=1) over the new
    slots.  Every rank runs the script from its start with the saved state
    (rank 0 reads it, the others get it by broadcast).  Until the script is
    back at that call, every loader's iteration gives one batch (_replayed),
    and what the script prints or writes goes nowhere (rank 0's stdout is
    silenced and its files private, as another rank's are); at that call
    the loader's epoch is drawn again from the random state it was drawn
    from, the part already trained on is skipped (the order's first
    samples: shard = the old ranks' batches, split = the global batches),
    the state is loaded, and rank 0's console and files are real again,
    each file it has open going on at the end of what the job wrote before.
The script's control flow must not depend on what an epoch of one batch
computes (a loop that stops early after epochs without progress may stop in
the replayed ones): if the script ends before it is back, the job ends with
one line saying so, and the state stays saved.  A job that may grow runs
the adapter even at one rank (install.py: grow.may_resize)."""
import atexit
import sys
import weakref

import torch

from . import capi
from . import frames as _frames
from . import rng as _rng
from .capi import warn
from .collectives import Pending, broadcast_bytes
from .data.epoch_order import _broadcast_ints
from .data.iteration import _IT
from .data.loaders import dealt_by_rank
from .elastic import _rescale_lr, _take_over
from .errors import HvdShimError
from .gradients.accumulation import _A
from .gradients.params import _P
from .grow import _G, _flush_writers, _path, _restore_filters, change, may_resize, read_settings, watch, write_snapshot
from .lifecycle import _start
from .state import _S, optimizer_step


def configure():
    """At install: settings."""
    resume = read_settings()
    if (_G.discovery or resume) and not _G.state_dir:
        raise HvdShimError("hvdshim: HVDSHIM_ELASTIC_DISCOVERY and HVDSHIM_ELASTIC_RESUME need HVDSHIM_ELASTIC_STATE "
                           "(a folder for the job's state; hvdrun --host-discovery-script sets all three)")
    _G.tracking = may_resize()  # (install.py runs the adapter at one rank where this holds)
    _G.snap = {} if resume else None  # read at the engine's start (begin)
    _S.on_start.append(begin)
    _S.resume_steps = 0 if resume else None  # (rank 0's stdout is silenced until the script is back: output.py)
    if resume:
        atexit.register(_never_back)
        import warnings
        _G.filters = list(warnings.filters)
        warnings.simplefilter("ignore")  # the script's warnings before it is back go nowhere, as its output


def begin():
    """At the engine's start (every rank together): a restarted job takes the
    saved state; rank 0 of a job that may grow starts polling."""
    if _G.snap is not None:
        _G.snap = _read_state()
        _S.resume_steps = _G.snap["steps"]
    watch()


def _live(refs):
    return [r() for r in refs if r() is not None]


def _state_dicts(objs):
    out = []
    for o in objs:
        try:
            out.append(o.state_dict())
        except Exception:  # (an object whose state cannot be read: it goes on from the script's own)
            out.append(None)
    return out


def _save(target):
    _rng.window_close()  # (this rank's own states are saved, not the step window's shared ones)
    snap = {
        "version": 1, "size": _S.size, "steps": _S.steps, "k": _A.k, "windows": list(_A.windows),
        "models": [m.state_dict() for m in _live(_S.models)],
        "free": {name: p.detach().cpu() for name, p in _free_followed().items()},
        "optimizers": _state_dicts(_live(_S.optimizers)),
        "schedulers": _state_dicts(_live(_S.schedulers)),
        "scalers": _state_dicts(_live(_G.scalers)),
        "rng": _rng._states(cuda=True),
        "generators": {tag: [g.get_state() for g in _generators(ref())]
                       for tag, ref in _S.loader_refs.items() if ref() is not None},
        "iters": dict(_G.iters),
        "target": target,
        "frames": _frames_of_script(),
    }
    write_snapshot(snap)


def _frames_of_script():
    """The script's variables (frames.capture), or none where they cannot be
    read: the job still grows, its script's counters as the replayed loops leave them."""
    try:
        return _frames.capture(sys._getframe(2))
    except Exception as e:  # pylint: disable=broad-except
        warn("the script's own variables are not saved with the job's state (%s: %s)" % (type(e).__name__, e))
        return []


def _broadcast_blob(name, blob, what):
    """rank 0's bytes on every rank (None elsewhere)."""
    n = torch.tensor([len(blob) if blob is not None else 0], dtype=torch.int64)
    pending = Pending()
    broadcast_bytes(name + b".n", n, pending, what)
    pending.wait()
    buf = torch.zeros(int(n[0]), dtype=torch.uint8)
    if _S.rank == 0 and blob:
        buf.copy_(torch.frombuffer(bytearray(blob), dtype=torch.uint8))
    if int(n[0]):
        broadcast_bytes(name + b".%d" % int(n[0]), buf, pending, what)
        pending.wait()
    return buf.numpy().tobytes()


def _read_state():
    import io
    blob = b""
    if _S.rank == 0:
        try:
            with open(_path(), "rb") as f:
                blob = f.read()
        except OSError as e:
            blob = b"!" + str(e).encode()
    blob = _broadcast_blob(b"hvdshim.resume", blob, "sending the saved state of the job")
    if blob[:1] == b"!" or not blob:
        raise HvdShimError("hvdshim: HVDSHIM_ELASTIC_RESUME: cannot read the job's saved state %s on rank 0's host: %s "
                           "(rank 0 must run on the host where the job stopped, or HVDSHIM_ELASTIC_STATE be a "
                           "shared folder)" % (_path(), blob[1:].decode("utf-8", "replace") or "empty"))
    try:
        return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=False)
    except TypeError:  # torch < 1.13's load has no weights_only
        return torch.load(io.BytesIO(blob), map_location="cpu")


def _never_back():
    if getattr(sys, "last_value", None) is not None:  # the script ended by an exception, said already
        return
    if _G.snap is not None and not _G.resumed and _S.enabled:
        where = "DataLoader %d, its iteration %d, %d global batches in" % tuple(_G.snap["target"][:3]) \
            if _G.snap else "its loaders never iterated"
        capi.LIB.hvd_abort_job(("the restarted job ended before its script was back where the job stopped (%s): "
                                "its loops went another way with one batch a loader iteration; the state stays in %s"
                                % (where, _path())).encode())


def _generators(loader):
    """The torch.Generators a loader draws its order from: its own, its
    sampler's, its batch sampler's and that one's sampler's."""
    out, seen = [], set()
    bs = getattr(loader, "batch_sampler", None)
    inner = getattr(bs, "_inner", bs)
    for obj in (loader, getattr(loader, "sampler", None), inner, getattr(inner, "sampler", None)):
        g = getattr(obj, "generator", None)
        if isinstance(g, torch.Generator) and id(g) not in seen:
            seen.add(id(g))
            out.append(g)
    return out


def _draw_state(loader):
    """What a loader's epoch is drawn from: the CPU generators' states and
    the loader's own generators'."""
    return _rng._states(cuda=False), [g.get_state() for g in _generators(loader)]


def _set_draw_state(loader, st):
    _rng._set_states(st[0])
    for g, s in zip(_generators(loader), st[1]):
        g.set_state(s)


class _Counted:
    """A loader's iterator, counting the batches it gave; the job stops to
    grow before the next one.  `base`: batches of the whole stream (the
    global batches: every rank's, when the ranks are dealt whole batches)
    skipped at its start; `per`: of them, per batch here."""

    def __init__(self, inner, tag, base, per):
        self._inner, self._tag, self._base, self._per, self.n = inner, tag, base, per, 0

    def used(self):
        return self._base + self.n * self._per

    def __iter__(self):
        return self

    def __next__(self):
        if _G.due:
            _stop(self._tag, self)
        x = next(self._inner)
        self.n += 1
        return x

    def __len__(self):
        return len(self._inner)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def iterate(loader, make):
    """DataLoader.__iter__ while tracking: `make()` is the iteration as it
    would be."""
    tag = getattr(loader, "_hvdshim_tag", None)
    if tag is None:
        return make()
    if _G.due:
        _stop(tag, None)
    n = _G.iters.get(tag, 0) + 1
    _G.iters[tag] = n
    base = 0
    if _G.snap is not None and not _G.resumed:
        _start()  # (a restarted job's state is read there)
        t_tag, t_iter, used, rng = _G.snap["target"]
        if (tag, n) != (t_tag, t_iter):
            return _replayed(make)  # the script is not back yet: one batch
        _set_draw_state(loader, rng)
        _rng._R.diverged = False  # (rank 0's states from here on: each rank's own again, its workers' seeds now
        #                           (rng.own_worker_seeds), its streams at the next backward (rng.diverge))
        _IT.skip, _IT.skip_taken, _IT.primer, base = used, False, None, used
        try:
            it = make()
        finally:
            _IT.skip = None
        if not _IT.skip_taken:  # a loader hvdshim does not deal: its batches are read and dropped
            for _ in range(used):
                if next(it, None) is None:
                    break
        elif _IT.primer is not None:  # the last one made is the one the loader uses
            _IT.primer.prime()
        _IT.primer = None
        _arrive()
    else:
        rng = _draw_state(loader)
        it = make()
    counted = _Counted(it, tag, base, _S.size if dealt_by_rank(loader) else 1)
    _G.places[tag] = (n, rng)
    return counted


def _replayed(make):
    """An iteration before the script is back where the job stopped: its
    first batch only, read as the loader reads it (this rank's part, through
    its workers), which every rank's loop trains on and throws away (the
    arrival loads the saved state over what it changed).  Not none: the
    script's code after a loop reads what the loop left (the last batch's
    loss, the samples it counted and divides by, the outputs it gathered),
    and after an empty loop it would raise (NameError, ZeroDivisionError,
    torch.cat of nothing) where the plain run never does."""
    it = make()
    first = next(it, _NOTHING)
    del it  # (its workers end here, but persistent ones, which the next iteration takes up)
    return iter(()) if first is _NOTHING else iter((first,))


_NOTHING = object()


def _stop(tag, counted):
    """Every rank, at the first call to a loader after the step that agreed to
    grow: rank 0 saves the state, every rank ends (status 0, after joining)."""
    _G.due = False
    if counted is None:  # the next iteration of `tag`: its start is now
        target = (tag, _G.iters.get(tag, 0) + 1, 0, _draw_state(_S.loader_refs[tag]()))
    else:
        n, rng = _G.places[tag]
        target = (tag, n, counted.used(), rng)
    ok, err = 1, ""
    if _S.rank == 0:
        try:
            _save(target)
        except Exception as e:  # a full disk, an object that cannot be saved: the job goes on as it is
            ok, err = 0, "%s: %s" % (type(e).__name__, e)
    ok = _broadcast_ints(b"hvdshim.grow", [ok], "agreeing to stop for the job to grow")[0]
    if not ok:
        _G.discovery = None
        if _S.rank == 0:
            warn("could not save the job's state in %s (%s): the job goes on over %d rank(s) and grows no more"
                 % (_G.state_dir, err, _S.size))
        return
    if _S.rank == 0:
        warn("%s: the job stops after %s, its state saved in %s, and starts again over "
             "%d rank(s) (was %d)" % (change(), optimizer_step(_S.steps), _path(), _G.wanted, _S.size))
    raise SystemExit(0)  # every rank ends 0 (joined); hvdrun sees the state saved anew


def _load_all(objs, states, what):
    if len(objs) != len(states):
        warn("the restarted script has %d %s, the job that stopped had %d: the first %d take the saved state"
             % (len(objs), what, len(states), min(len(objs), len(states))))
    for o, st in zip(objs, states):
        if st:  # (a disabled GradScaler's is empty, and its load refuses that)
            o.load_state_dict(st)


def model_state(k):
    """A model registered after the script came back: its saved state, once."""
    return _G.left.pop(k, None)


def _free_followed():
    """{name: tensor} of the free parameters followed now (models.adopt_free)."""
    return {prm.name: prm.ref() for prm in _P.params if prm.name.startswith("free") and prm.ref() is not None}


def free_state(name):
    """A free parameter (models.adopt_free) followed after the script came
    back: its saved value, once."""
    return _G.left_free.pop(name, None)


def _arrive():
    """The script is back at the call where the job stopped: the saved state
    is loaded, and rank 0 writes for real again."""
    snap = _G.snap
    _G.resumed = True
    _S.resume_steps = None
    _restore_filters()
    _forget_replay()
    models = _live(_S.models)
    for k, st in enumerate(snap["models"]):
        if k < len(models):
            models[k].load_state_dict(st)
        else:
            _G.left[k] = st
    followed = _free_followed()
    for name, value in snap.get("free", {}).items():
        p = followed.get(name)
        if p is not None:
            with torch.no_grad():
                p.copy_(value)
        else:
            _G.left_free[name] = value
    _load_all(_live(_S.optimizers), snap["optimizers"], "optimizer(s)")
    if snap["steps"]:  # they have stepped (what an LR scheduler checks: no warning that it steps first)
        for opt in _live(_S.optimizers):
            opt._step_count = max(getattr(opt, "_step_count", 0), 1)
            opt._opt_called = True
    _load_all(_live(_S.schedulers), snap["schedulers"], "LR scheduler(s)")
    _load_all(_live(_G.scalers), snap["scalers"], "GradScaler(s)")
    _S.steps, _A.k, _A.windows = snap["steps"], snap["k"], list(snap["windows"])
    capi.LIB.hvd_step_count_set(_S.steps)  # HVDSHIM_METRICS goes on with the job's steps
    if _S.scale_lr and snap["size"] != _S.size:
        _rescale_lr(_S.size / snap["size"])
    _rng._set_states(snap["rng"])
    for tag, states in snap["generators"].items():  # the loaders' own generators, but the one back here (drawn)
        loader = _S.loader_refs.get(tag, lambda: None)()
        if loader is not None and tag != snap["target"][0]:
            for g, st in zip(_generators(loader), states):
                g.set_state(st)
    try:
        matched, put = _frames.restore(snap.get("frames"), sys._getframe(1))
    except Exception as e:  # pylint: disable=broad-except
        matched = put = 0
        warn("the script's own variables were not put back (%s: %s): they are as its loops left them"
             % (type(e).__name__, e))
    if _S.rank == 0:
        _flush_writers()  # what the script wrote before it was back goes nowhere (the private copies)
        _take_over(resumed=True)
        warn("the job started again over %d rank(s) (was %d) and goes on from %s (%d of the "
             "script's variables as they were, in %d of its %d frame(s))"
             % (_S.size, snap["size"], optimizer_step(_S.steps + 1), put, matched, len(snap.get("frames") or ())))


def _forget_replay():
    """At the arrival: what the replayed batches left besides the state the
    snapshot holds (loaded next) goes: their gradients (the stopped job's
    were none or zeroed at that point of a step), a backward window left
    open, the step window's streams."""
    _rng.window_close()
    for prm in _P.params:
        p = prm.ref()
        if p is not None:
            p.grad = None
    _P.used[:] = bytes(len(_P.used))
    _A.bw_window, _A.deferred, _A.skip_bw = 0, False, False


def note_scaler(scaler):
    """A GradScaler made (a subclass's __init__ and its base's both call this)."""
    if _G.tracking and not any(r() is scaler for r in _G.scalers):
        _G.scalers.append(weakref.ref(scaler))
