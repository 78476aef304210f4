"""Random state (HVDSHIM_RNG).

An unseeded script draws different numbers in every process: a target
function, an initial split, a random projection would differ per rank.  So
every rank starts from one state:
  * Python's `random` is seeded at interpreter start (sitecustomize.py) and
    NumPy's global generator right after `import numpy`, torch's default
    generators right after `import torch`, all from one seed derived from the
    job's id (the same on every rank, different per job, as an unseeded run
    differs per run).  A script that seeds them itself overrides this as in
    the plain run.
  * When the engine starts (the first forward of a model), rank 0's states
    of all of them are broadcast, so even a launcher without a job id (or a
    script that drew per-rank values on purpose before) agrees from there.
  * per-rank (default): after the first backward each rank's streams are
    made its own (rank 0's is unchanged, rank r's state is mixed with r), so
    dropout masks, noise and augmentations differ per sample as they do
    within one big batch.  A training loader's iteration begun before then
    gets its workers' seeds of the rank's own (own_worker_seeds).  Between
    the end of a reducing backward and the
    end of the optimizer step (the step window), torch's generators (the
    CPU's, and the current CUDA device's) draw from one stream that every
    rank shares instead: what a script draws there acts on the averaged
    gradients (gradient noise, a random perturbation), which the plain run
    draws once for the whole batch, so every replica must draw the same.
    It opens only where the step comes next (gradients/reduction._step_next:
    with gradient accumulation, not after the passes before a window's
    last, whose next batch and dropout masks are each rank's own), and at
    the start of every step.  A script with no optimizer (its weights
    updated by hand after backward) may draw there its next batch (random
    data it makes itself: each rank's own) or noise for its update (the same
    everywhere): the first training forward after a backward whose ranks
    drew compares the ranks' weights once (models.decide_manual_window):
    alike, the window never opens for it; else every rank takes rank 0's
    weights and the window opens after every reducing backward.  It closes
    at the end of the step, at a zero_grad, when the next backward begins,
    at a model's training forward (while the global forward hook is on:
    models._count_batch), or at the next training batch or DataLoader
    iteration (data/iteration.dealt_batches, install.py), whichever comes
    first.
    Python's `random` and NumPy stay per-rank there (swapping their states
    would cost ~14 us a step).
  * Where every rank trains on the same batches (no DataLoader: batches the
    script cuts itself; data/same_batches.py, after the third reducing
    backward) and HVDSHIM_RNG is not set, every rank takes rank 0's states
    again and keeps drawing them (follow_rank0): the plain run's draws.
  * same: the streams stay identical on every rank.  off: none of this.

Its state: _R.
"""
import hashlib
import pickle
import random
import sys

import torch

from .capi import debug
from .collectives import broadcast_bytes, Pending
from .state import _S


class _Streams:
    def __init__(self):
        self.synced = False         # rank 0's states taken (engine start)
        self.diverged = False       # per-rank streams from the first backward on
        self.seed = None            # the job's agreed seed of the step window's shared streams (engine start)
        self.shared = {}            # device -> the shared stream's state, between windows (window_open)
        self.window = None          # while a window is open: [(device, generator, this rank's own state)]
        self.withheld = None        # a reducing backward that opened no window (more passes were due): the
        #                             generators' states then, [(generator, state)], until a window or the step
        self.manual = None          # a script with no optimizer (weights updated by hand): "window" where the
        #                             window opens after its reducing backward passes, "own" where it does not;
        #                             None until decided (models.decide_manual_window), meanwhile withheld
        self.manual_looks = 0       # training forwards that found nothing drawn since the backward, undecided
        self.rank0_seeds = 0        # > 0 while a loader's iterator is made from rank 0's states on every rank (a
        #                             stream every rank reads whole, then deals: data/iterable._agreed_iter)


_R = _Streams()


def seed_torch_at_import(mode, seed):
    """Right after `import torch`: the job's seed (computed by sitecustomize.py
    from the job's id), unless HVDSHIM_RNG=off or there is none."""
    if mode != "off" and seed is not None:
        torch.manual_seed(seed)  # CPU, and every CUDA device when CUDA starts


def _numpy_random():
    np = sys.modules.get("numpy")
    return getattr(np, "random", None) if np is not None else None


def _states(cuda=True):
    """This rank's generator states, as one picklable object (cuda=False:
    the CPU generators only)."""
    st = {"torch": torch.get_rng_state(), "random": random.getstate()}
    npr = _numpy_random()
    if npr is not None:
        st["numpy"] = npr.get_state()
    if cuda and torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def _set_states(st):
    torch.set_rng_state(st["torch"])
    random.setstate(st["random"])
    npr = _numpy_random()
    if npr is not None and "numpy" in st:
        npr.set_state(st["numpy"])
    if "cuda" in st and torch.cuda.is_available():
        states = st["cuda"]
        if len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)


def rank0_states(name, cuda=True):
    """Rank 0's generator states (_states), on every rank: its size, then its
    pickle, broadcast under `name`."""
    blob = pickle.dumps(_states(cuda), protocol=4)
    length = torch.tensor([len(blob)], dtype=torch.int64)
    pending = Pending()
    broadcast_bytes(name + b".len", length, pending, "broadcasting rank 0's random state size")
    pending.wait()
    buf = torch.zeros(int(length[0]), dtype=torch.uint8)
    if _S.rank == 0:
        buf.copy_(torch.frombuffer(bytearray(blob), dtype=torch.uint8))
    broadcast_bytes(name + b".%d" % int(length[0]), buf, pending, "broadcasting rank 0's random state")
    pending.wait()
    return pickle.loads(bytes(buf.tolist()))


def _adopt_rank0_states(name):
    """Every rank takes rank 0's generator states (rank0_states); returns them."""
    st = rank0_states(name)
    if _S.rank != 0:
        _set_states(st)
    return st


def take_rank0_states():
    """At engine start: every rank takes rank 0's generator states."""
    if _S.rng_mode == "off" or _R.synced:
        return
    _R.synced = True
    st = _adopt_rank0_states(b"hvdshim.rng")
    # the step window's shared streams are seeded from this agreed state
    _R.seed = mixed_seed(bytes(st["torch"].tolist()), -1)
    debug("random state: rank 0's (torch, random%s)" % (", numpy" if _numpy_random() is not None else ""))


def mixed_seed(state_bytes, rank):
    """A seed from a generator's state and the rank (deterministic)."""
    h = hashlib.sha256(state_bytes + b"|rank|%d" % rank).digest()
    return int.from_bytes(h[:8], "little")


def diverge():
    """After the first backward (HVDSHIM_RNG=per-rank): rank r > 0 mixes its
    rank into every generator's state; rank 0's streams are unchanged."""
    if _S.rng_mode != "per-rank" or _R.diverged:
        return
    _R.diverged = True
    if _S.rank == 0:
        return
    r = _S.rank
    torch.manual_seed(mixed_seed(bytes(torch.get_rng_state().tolist()), r) & ((1 << 63) - 1))
    random.seed(mixed_seed(pickle.dumps(random.getstate()), r))
    npr = _numpy_random()
    if npr is not None:
        npr.seed(mixed_seed(pickle.dumps(npr.get_state()), r) & 0xFFFFFFFF)
    debug("random state: rank %d's streams are its own from here on" % r)


def own_worker_seeds(it):
    """A DataLoader iterator made for an iteration that trains (sharded)
    before the first backward, under per-rank streams: the base seed of its
    workers, which torch drew from the state every rank still shares, is
    made this rank's own, as it is from the first backward on (rank 0's
    stays the plain run's).  Else rank r's k-th worker would draw the same
    augmentations (crop offsets, flips) as rank 0's k-th, for the first
    epoch, and for the whole run with persistent workers.  Not where every
    rank reads a stream whole from rank 0's states and takes its part
    (_R.rank0_seeds): there every rank's workers must draw rank 0's."""
    if not _S.enabled or _S.rng_mode != "per-rank" or _R.diverged or _S.rank == 0 or _R.rank0_seeds:
        return
    base = getattr(it, "_base_seed", None)
    if isinstance(base, int):
        it._base_seed = mixed_seed(b"loader|%d" % base, _S.rank) & ((1 << 63) - 1)


def follow_rank0(name):
    """Every rank trains on the same batches (data/same_batches.py) under
    per-rank streams, the default: each rank's dropout masks and noise
    being its own, the job would compute neither the plain run nor more
    data than it.  From here on every rank draws rank 0's streams (as
    HVDSHIM_RNG=same), which are the plain run's: rank 0's were never
    mixed, and the step window (closed here) is not opened again.  Every
    rank calls it at the same point (a broadcast)."""
    window_close()
    _adopt_rank0_states(name)
    _S.rng_mode = "same"
    debug("random state: every rank draws rank 0's streams from here on (the same batches on every rank)")


def _window_generators():
    """(device, generator) of torch's default generators the window swaps:
    the CPU's, and the current CUDA device's once CUDA is in use."""
    gens = [("cpu", torch.default_generator)]
    if torch.cuda.is_initialized():
        d = torch.cuda.current_device()
        gens.append(("cuda:%d" % d, torch.cuda.default_generators[d]))
    return gens


def _first_shared(device):
    """The shared stream's first state on `device`: a generator seeded from
    the job's agreed seed (the same on every rank, its own per device)."""
    seed = mixed_seed(b"window|%s|%d" % (device.encode(), _R.seed), 0) & ((1 << 63) - 1)
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g.get_state()


def _window_closed_here():
    """Streams are per rank (HVDSHIM_RNG=per-rank, the seed agreed) and no
    window is open."""
    return _S.rng_mode == "per-rank" and _R.window is None and _R.seed is not None


def window_open():
    """A reducing backward ended (HVDSHIM_RNG=per-rank): torch's generators
    draw from the shared stream until window_close; this rank's own states
    are kept aside."""
    _R.withheld = None
    if not _window_closed_here():
        return
    saved = []
    for device, g in _window_generators():
        shared = _R.shared.get(device)
        saved.append((device, g, g.get_state()))
        g.set_state(shared if shared is not None else _first_shared(device))
    _R.window = saved


def manual_window():
    """A script with no optimizer: whether its reducing backward opens the
    step window (decided at the first training forward after a backward
    whose ranks drew, models.decide_manual_window; withheld until then)."""
    return _R.manual == "window"


def manual_pending():
    """A script with no optimizer so far under per-rank streams whose
    window is not decided: the global forward pre-hook stays on for it."""
    return _R.manual is None and not _S.optimizers and _S.rng_mode == "per-rank"


def manual_undecided():
    """A script with no optimizer whose reducing backward withheld the
    window, not decided yet: the training forward decides."""
    return _R.manual is None and _R.withheld is not None and not _S.optimizers


def withhold():
    """A reducing backward ended that is not the last of its step (gradient
    accumulation): no window (the next pass's draws are this rank's own),
    but the generators' states are noted, so the step can tell whether
    anything was drawn before it (drew_since_withheld)."""
    if not _window_closed_here():
        return
    _R.withheld = [(g, g.get_state()) for _device, g in _window_generators()]


def drew_since_withheld():
    """At a step: None where the last reducing backward opened the window
    (or opened none for another reason), else whether this rank drew from
    torch's generators since it: draws that may have shaped the update
    (gradient noise), each rank's own, which the step window would have
    made the same everywhere (the backward could not know the step came
    next)."""
    noted, _R.withheld = _R.withheld, None
    if noted is None:
        return None
    return any(not torch.equal(g.get_state(), state) for g, state in noted)


def window_close():
    """The optimizer step ended (or a zero_grad, the next backward, the next
    training batch): the shared stream is kept for the next window, this
    rank's own states come back."""
    saved = _R.window
    if saved is None:
        return False
    _R.window = None
    for device, g, mine in saved:
        _R.shared[device] = g.get_state()
        g.set_state(mine)
    return True

