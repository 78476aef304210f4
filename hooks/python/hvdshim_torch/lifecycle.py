"""Starting the engine on first real use, and standing aside when the script
distributes itself."""
import os
import sys

import torch

from . import lib as _libmod
from .lib import HvdShimError, _check, _info, _warn
from .state import _S
from .output import _restore_output


def _start():
    """Activate the engine (MPI, thread) on first real use.  False when the
    script turned out to distribute itself."""
    if _S.started:
        return True
    _check_stand_aside()
    if not _S.enabled:
        return False
    _check(_libmod._lib.hvd_init(), "starting the engine (hvd_init)")
    _S.started = True
    from .elastic import follow
    follow()
    from .rng import take_rank0_states
    take_rank0_states()
    for fn in _S.on_start:  # (resize.begin)
        fn()
    return True


# ------------------------------------------------------------------ stand aside
HOROVOD = "Horovod is imported"


def _other_distribution():
    if "horovod" in sys.modules or any(m.startswith("horovod.") for m in list(sys.modules)):
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
    # (rank 0 of a restarted job on hvd.elastic: held until it is back; resize
    # is above this module and registers itself, so no import goes up)
    held = _S.on_stand_aside(reason == HOROVOD) if _S.on_stand_aside else False
    _restore_output()
    if held:
        from .output import _silence_stdout
        _silence_stdout()
    elif not undistributed:
        _libmod._lib.hvd_overlay_off()  # the script's ranks choose their own files (and may meet through one)
    if undistributed and _S.rank != 0:
        sys.stdout.flush()
        sys.stderr.write("hvdshim: rank %d: %s: hvdshim cannot distribute this script; rank 0 runs it alone, "
                         "and this rank exits (status 0)\n" % (_S.rank, reason))
        sys.stderr.flush()
        os._exit(0)  # before the script does any of the work: no atexit, no files, no output
    if _S.rank == 0 and undistributed:
        _warn("%s: hvdshim cannot distribute this script and stands aside; rank 0 runs it alone, undistributed, "
              "and the other %d rank(s) exit (launch it on one rank, or distribute it in the script)"
              % (reason, _S.size - 1))
    elif _S.rank == 0:
        _info("%s: the script distributes itself; hvdshim stands aside" % reason)
