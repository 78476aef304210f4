"""Starting the engine on first real use, and standing aside when the script
distributes itself."""
import os
import sys

import torch

from . import capi
from . import grow as _grow
from .capi import info, warn
from .elastic import follow
from .errors import HvdShimError, check
from .output import _restore_output, _silence_stdout
from .rng import take_rank0_states
from .state import _S


def _start():
    """Activate the engine (MPI, thread) on first real use.  False when the
    script turned out to distribute itself."""
    if _S.started:
        return True
    _check_stand_aside()
    if not _S.enabled:
        return False
    check(capi.LIB.hvd_init(), "starting the engine (hvd_init)")
    _S.started = True
    follow()
    take_rank0_states()
    for fn in _S.on_start:  # (resize.begin)
        fn()
    return True


# ------------------------------------------------------------------ stand aside
HOROVOD = "Horovod is in use"


def _horovod_in_use():
    """Real Horovod imported, or hvdshim's served horovod initialized
    (hvd.init): a library that only imports it to learn whether it can
    (torch-ignite's import of horovod.torch) distributes nothing."""
    mod = sys.modules.get("horovod")
    if mod is None:
        return False
    return not getattr(mod, "__hvdshim__", False) or _S.horovod_init


def horovod_init():
    """The served package's hvd.init(): the script distributes itself."""
    _S.horovod_init = True
    _check_stand_aside(HOROVOD)


def _other_distribution():
    if _horovod_in_use():
        return HOROVOD
    dist = getattr(torch, "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return "torch.distributed is initialized"
    except Exception:
        pass
    return None


def _check_stand_aside(reason=None, undistributed=False):
    if not _S.enabled:
        return
    reason = reason or _other_distribution()
    if reason:
        _stand_aside(reason, undistributed)


def _stand_aside(reason, undistributed=False):
    """Leave the script alone.  undistributed: the script does not distribute
    itself either (it trains in ways hvdshim cannot reach), so rank 0 runs it
    alone, as one plain process, and every other rank exits 0 at once with
    one line saying why (N copies of the same work would print N times and
    train N times)."""
    if _S.started and _S.models:
        raise HvdShimError("hvdshim: %s after hvdshim started distributing this script; "
                           "run it with HVDSHIM_DISABLE=1 to leave the distribution to the script" % reason)
    _S.enabled = False
    _S.aside_reason = reason
    for h in _S.hook_handles:
        h.remove()
    _S.hook_handles = []
    _S.fwd_hook = _S.fwd_hook_fn = None  # (and it does not come back for a module made later)
    held = _grow.stand_aside(reason == HOROVOD)  # (rank 0 of a restarted job on hvd.elastic: held until it is back)
    _restore_output()
    if held:
        _silence_stdout()
    elif not undistributed:
        capi.LIB.hvd_overlay_off()  # the script's ranks choose their own files (and may meet through one)
    if undistributed and _S.rank != 0:
        sys.stdout.flush()
        sys.stderr.write("hvdshim: rank %d: %s: hvdshim cannot distribute this script; rank 0 runs it alone, "
                         "and this rank exits (status 0)\n" % (_S.rank, reason))
        sys.stderr.flush()
        os._exit(0)  # before the script does any of the work: no atexit, no files, no output
    if _S.rank == 0 and undistributed:
        warn("%s: hvdshim cannot distribute this script and stands aside; rank 0 runs it alone, undistributed, "
             "and the other %d rank(s) exit (launch it on one rank, or distribute it in the script)"
             % (reason, _S.size - 1))
    elif _S.rank == 0:
        info("%s: the script distributes itself; hvdshim stands aside" % reason)
