"""Side effects on output: stdout of ranks > 0, prefixed stderr, intra-op
threads per rank."""
import os
import sys
import torch

from .lib import _debug, _warn
from .state import _S


class _PrefixedStream:
    """Text stream wrapper: every line starts with a prefix and reaches the
    file in one write (so lines of different ranks interleave whole)."""

    def __init__(self, stream, prefix):
        self._stream = stream
        self._prefix = prefix
        self._partial = ""

    def write(self, text):
        if not text:
            return 0
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        if lines:
            self._stream.write("".join(self._prefix + line + "\n" for line in lines))
            self._stream.flush()
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if self._partial:
            self._stream.write(self._prefix + self._partial)
            self._partial = ""
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _redirect_output(worker_stdout):
    prefix = "[rank %d] " % _S.rank
    if sys.stderr is not None:
        _S.stderr_orig = sys.stderr
        sys.stderr = _PrefixedStream(sys.stderr, prefix)
    if worker_stdout:  # every rank's stdout, each line prefixed
        if sys.stdout is not None:
            _S.stdout_saved = ("wrap", sys.stdout)
            sys.stdout = _PrefixedStream(sys.stdout, prefix)
        return
    if _S.rank == 0 and _S.resume_steps is None:  # (a restarted job, resize.py: silenced until the script is back)
        return
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        saved = os.dup(1)
        os.dup2(devnull, 1)
        os.close(devnull)
        _S.stdout_saved = ("fd", saved)
    except OSError as e:
        _warn("could not silence stdout of rank %d: %s" % (_S.rank, e))


def _restore_output():
    if _S.stderr_orig is not None:
        sys.stderr.flush()
        sys.stderr = _S.stderr_orig
        _S.stderr_orig = None
    saved, _S.stdout_saved = _S.stdout_saved, None
    if saved is None:
        return
    if saved[0] == "wrap":
        sys.stdout.flush()
        sys.stdout = saved[1]
    else:
        try:
            sys.stdout.flush()
        except Exception:
            pass
        os.dup2(saved[1], 1)
        os.close(saved[1])


def cores_per_rank():
    """The cores this rank can count on: its affinity (a launcher that binds
    gives one core), at most the host's cores shared by its ranks."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, (os.cpu_count() or 1) // max(1, _S.local_size)))


def _set_threads():
    if _S.local_size <= 1 or any(os.environ.get(v) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")):
        return
    n = cores_per_rank()
    if n < torch.get_num_threads():
        torch.set_num_threads(n)
        _debug("intra-op threads: %d (%d local ranks)" % (n, _S.local_size))
