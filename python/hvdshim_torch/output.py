"""Side effects on output: stdout of ranks > 0, prefixed stderr, an uncaught
hvdshim error in two lines, intra-op threads per rank.

Its state: _O."""
import logging
import os
import signal
import sys
import traceback
import torch

from . import capi
from .capi import debug, setting, warn
from .errors import HvdShimError
from .state import _S


class _Console:
    def __init__(self):
        self.stdout_saved = None    # ("fd", descriptor) of a silenced stdout, or ("wrap", stream) of a prefixed one
        self.stderr_orig = None     # sys.stderr before its lines were prefixed
        self.quiet_console = False  # console logging below WARNING dropped (ranks other than 0)
        self.stopped = False        # SIGTERM raised KeyboardInterrupt (_stop_gracefully)


_O = _Console()


class _PrefixedStream:
    """Text stream wrapper: every line starts with a prefix and reaches the
    file in one write (so lines of different ranks interleave whole).  A
    line redrawn in place (carriage returns: a progress bar, tqdm's) has the
    prefix after each return.  Where `redraws` is False (ranks other than
    0) such a line is dropped whole: N ranks' bars fighting over one
    terminal line are noise, and rank 0's shows the same progress."""

    def __init__(self, stream, prefix, redraws=True):
        self._stream = stream
        self._prefix = prefix
        self.redraws = redraws
        self._partial = ""
        self._mid = False  # part of the current line is out (a flush), the cursor past its start
        self._dropping = False  # the current line is a redraw, dropped

    def _line(self, text, ends):
        """What to write for `text`, a piece of one line (`ends`: the line ends after it)."""
        if not self.redraws and (self._dropping or "\r" in text):
            out = "\n" if self._mid and not self._dropping else ""  # (what went out of it before: ended)
            self._dropping, self._mid = not ends, False
            return out
        parts = text.split("\r")
        out = "\r".join(self._prefix + part if part and (i or not self._mid) else part for i, part in enumerate(parts))
        if ends:
            self._mid = False
            return out + "\n"
        if text:
            self._mid = not text.endswith("\r")
        return out

    def write(self, text):
        if not text:
            return 0
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        out = "".join([self._line(line, True) for line in lines])
        if out:
            self._stream.write(out)
            self._stream.flush()
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if self._partial:
            out, self._partial = self._line(self._partial, False), ""
            if out:
                self._stream.write(out)
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


_emit = logging.StreamHandler.emit


def _console_emit(handler, record):
    """logging.StreamHandler.emit under the shim: a console handler made
    before the adapter (logging configured before `import torch`) writes
    through the prefixed stderr too; on ranks other than 0, its records
    below WARNING are dropped (every rank logs the same progress: the
    loss it reads is averaged), as their stdout is.  File handlers are left
    alone.  A handler on stdout (HuggingFace's examples make one) goes
    where the rank's stdout goes: prefixed with HVDSHIM_WORKER_STDOUT=1;
    nowhere on the other ranks by default, but for its warnings and
    errors, which go to the prefixed stderr."""
    stream, err, out = handler.stream, sys.stderr, sys.stdout
    moved = None
    if isinstance(err, _PrefixedStream) and stream is err._stream:
        moved = err
    elif isinstance(out, _PrefixedStream) and stream is out._stream:
        moved = out
    elif isinstance(stream, _PrefixedStream) and stream is not err and stream is not out:  # (stood aside since)
        moved = stream._stream
    if moved is not None:
        try:
            handler.stream = stream = moved
        except AttributeError:  # (a handler whose stream cannot be set: left as it is)
            pass
    if _O.quiet_console and (stream is err or stream is out or stream is sys.__stderr__ or stream is sys.__stdout__):
        if record.levelno < logging.WARNING:
            return None
        if (stream is out or stream is sys.__stdout__) and _O.stdout_saved is not None:  # (silenced: to stderr)
            try:
                handler.stream = err
                return _emit(handler, record)
            finally:
                handler.stream = stream
    return _emit(handler, record)


def _redirect_output(worker_stdout):
    prefix = "[rank %d] " % _S.rank
    if sys.stderr is not None:
        _O.stderr_orig = sys.stderr
        sys.stderr = _PrefixedStream(sys.stderr, prefix, redraws=_S.rank == 0 or worker_stdout)
    _O.quiet_console = _S.rank != 0 and not worker_stdout
    logging.StreamHandler.emit = _console_emit
    if worker_stdout:  # every rank's stdout, each line prefixed
        if sys.stdout is not None:
            _O.stdout_saved = ("wrap", sys.stdout)
            sys.stdout = _PrefixedStream(sys.stdout, prefix)
        return
    if _S.rank == 0 and _S.resume_steps is None:  # (a restarted job, resize.py: silenced until the script is back)
        return
    _silence_stdout()


def _silence_stdout():
    """This rank's stdout (descriptor 1) goes nowhere until _restore_output
    (or elastic._take_over) puts it back."""
    if _O.stdout_saved is not None:
        return
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        saved = os.dup(1)
        os.dup2(devnull, 1)
        os.close(devnull)
        _O.stdout_saved = ("fd", saved)
        capi.LIB.hvd_overlay_console(saved)  # (the library puts it back: _restore_output, or when this rank becomes 0)
    except OSError as e:
        warn("could not silence stdout of rank %d: %s" % (_S.rank, e))


def _restore_output():
    _O.quiet_console = False
    if _O.stderr_orig is not None:
        sys.stderr.flush()
        sys.stderr = _O.stderr_orig
        _O.stderr_orig = None
    saved, _O.stdout_saved = _O.stdout_saved, None
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
        capi.LIB.hvd_overlay_console_back()


def renumber(rank):
    """This rank's prefixed lines carry its number `rank` from here on (its
    place among the survivors of an elastic job)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, _PrefixedStream):
            stream._prefix = "[rank %d] " % rank


def _short_errors():
    """An hvdshim error the script does not catch ends its rank with two
    lines: the message and the script's line that led to it, not a
    traceback through torch and the adapter on every rank
    (HVDSHIM_LOG_LEVEL=debug keeps Python's traceback).  Most are raised
    alike on every rank (a setting, a loader's batch size): a rank > 0 says
    its message a second later, when rank 0 has not ended the job by then
    (its own failure), so the job says it once.  Other exceptions keep
    Python's traceback, a rank > 0's also a second late (a shape error in
    the script's own line is raised alike on every rank: rank 0's
    traceback alone); a hook the script installs itself is left alone."""
    previous = sys.excepthook
    here = os.path.dirname(os.path.abspath(__file__))
    # (hvdshim's packages, the served horovod beside this one, and torch's)
    inside = (here, os.path.join(os.path.dirname(here), "horovod") + os.sep,
              os.path.dirname(os.path.abspath(torch.__file__)))

    def hook(kind, value, tb):
        if _O.stopped:  # (the launcher's line, or hvdrun's, says why)
            _stopped_end(value)
            return None
        _end_by_sigterm()  # (failing: rank 0 may end the job during the grace, and this rank ends at once)
        capi.LIB.hvd_failing_grace()  # (rank 0's traceback or line alone where every rank fails alike)
        if not isinstance(value, HvdShimError) or setting("HVDSHIM_LOG_LEVEL") == "debug":
            previous(kind, value, tb)
            _worker_hint(value, tb, inside[0])
            _split_hint(value)
            return None
        where = ""
        for frame, line in traceback.walk_tb(tb):  # the innermost frame of the script's own code
            name = os.path.abspath(frame.f_code.co_filename)
            if not name.startswith(inside) and not name.startswith("<"):
                where = "%s:%d, in %s" % (frame.f_code.co_filename, line, frame.f_code.co_name)
        msg = str(value) if str(value).startswith("hvdshim") else "hvdshim: %s" % value
        try:
            sys.stderr.write("%s\n  (raised at %s; HVDSHIM_LOG_LEVEL=debug prints the traceback)\n"
                             % (msg, where or "hvdshim's own code"))
            sys.stderr.flush()
        except Exception:
            previous(kind, value, tb)
    sys.excepthook = hook


def _stop_gracefully():
    """Launchers stop a job's ranks with SIGTERM (Ctrl-C typed at mpirun,
    `timeout`, another rank's failure), which ends a Python process at
    once, without the script's own cleanup: a `with TemporaryDirectory()`
    holding the best weights (pytorch/tutorials' transfer learning) was
    left in /tmp with them, where the plain run's Ctrl-C
    (KeyboardInterrupt) removes it.  Where the script set no SIGTERM
    handler of its own, SIGTERM raises KeyboardInterrupt in the rank's
    main thread: `with`, `finally` and atexit run, no traceback is
    printed, and Python ends the rank by SIGINT, as after a Ctrl-C (it
    does so for a KeyboardInterrupt itself, not a subclass).  A second
    SIGTERM is ignored while the rank unwinds: Open MPI 4.1's mpirun, sent
    two, can send the ranks one and exit, and hvdrun then sends each rank
    it left one more (launcher/supervise.c), which cut the cleanup short in
    3 of 24 such stops; SIGKILL still ends it.  (Not where torch is first
    imported outside the main thread: Python sets handlers there only.)"""
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
            # (a process forked from the rank, a loader's or a Pool's worker, which Pool.terminate() ends
            # with SIGTERM, keeps Python's default)
            os.register_at_fork(after_in_child=_end_by_sigterm)
    except (ValueError, OSError):
        pass


def _end_by_sigterm():
    """SIGTERM ends the process at once again (a rank failing, or a
    process forked from the rank)."""
    try:
        if signal.getsignal(signal.SIGTERM) in (_on_sigterm, _unwinding):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except (ValueError, OSError):
        pass


def _unwinding(_signum, _frame):
    """SIGTERM once the rank is stopping: ignored (_stop_gracefully)."""


def _on_sigterm(_signum, _frame):
    signal.signal(signal.SIGTERM, _unwinding)
    _O.stopped = True
    # (the loader's workers, in the rank's process group, got the launcher's
    # SIGTERM too: torch reports their end in the iterator's __del__)
    sys.unraisablehook = lambda _unraisable: None
    raise KeyboardInterrupt


def _stopped_end(value):
    """The exception that ends a rank stopped by SIGTERM, said by no one.
    Python ends the rank by SIGINT after its atexit handlers where it is
    the KeyboardInterrupt itself; another one raised on the way (a loader
    worker's end, noticed by torch) ends it by SIGTERM here, as the
    launcher meant, not by an exit status that would read as the rank's
    own failure."""
    if type(value) is not KeyboardInterrupt:  # pylint: disable=unidiomatic-typecheck
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # pylint: disable=broad-except
            pass
        _end_by_sigterm()
        os.kill(os.getpid(), signal.SIGTERM)


def _worker_hint(value, tb, own):
    """torch's SIGCHLD handler raises a DataLoader worker's death in
    whatever Python the rank runs next, which can be one of hvdshim's
    gradient hooks: one line after the traceback saying so, where its
    innermost frame is hvdshim's own."""
    if not isinstance(value, RuntimeError) or "DataLoader worker" not in str(value):
        return
    last = None
    for frame, _line in traceback.walk_tb(tb):
        last = frame
    if last is None or not os.path.abspath(last.f_code.co_filename).startswith(own):
        return
    _after_traceback("hvdshim: a DataLoader worker of this rank ended (the error above); torch raises that in the "
                     "Python the rank runs next, here hvdshim's own code (%s): the worker's end is the cause, not "
                     "hvdshim" % last.f_code.co_name)


_SIZE_WORDS = ("size", "shape", "dimension", "match")


def _split_hint(value):
    """Split mode, a script ending on an error about tensors' sizes: one
    line after its traceback saying what split mode changed (each rank's
    forward sees its slice of every batch, so a tensor the script sized by
    the loader's batch size no longer fits it)."""
    rows = _S.nominal_rows
    if _S.data_mode != "split" or not rows or _S.size <= 1 or not isinstance(value, (RuntimeError, ValueError)):
        return
    text = str(value).lower()
    if not any(w in text for w in _SIZE_WORDS):
        return
    _after_traceback("hvdshim: split mode (HVDSHIM_DATA=split): each rank's forward gets %d of the %d rows of "
                     "every batch, so a tensor the script sized by the batch size (a parameter or buffer made with "
                     "it, a view or an expand to it) does not fit this rank's part; run with the default "
                     "HVDSHIM_DATA=shard, where every rank's batches are whole" % (-(-rows // _S.size), rows))


def _after_traceback(line):
    """One line of hvdshim's after an uncaught exception's traceback."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:  # pylint: disable=broad-except
        pass


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
        debug("intra-op threads: %d (%d local ranks)" % (n, _S.local_size))
