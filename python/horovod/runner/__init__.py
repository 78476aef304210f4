"""horovod.runner as hvdshim serves it: only the small helpers that scripts
and Horovod's own tests import (launch with hvdrun or mpirun, not
horovodrun)."""


def run(func, args=(), kwargs=None, num_proc=None, *more, **options):
    """Horovod's launch of a function over a new job, from Python (the
    function's return values, one a rank): not served.  hvdshim's ranks are
    started by a launcher, so the script itself is launched instead."""
    raise NotImplementedError(
        "horovod.run (starting a job from Python to run %s) is not served by hvdshim: launch the script itself, "
        "without its own launch option: hvdrun -np N python3 SCRIPT (or mpirun -np N with "
        "LD_PRELOAD=libhvdshim.so)" % getattr(func, "__name__", "a function"))
