"""warm.py DIR: a warm interpreter for the tests' plain runs (tests/lib.sh's
warm_start and py).

A plain run is `python SCRIPT ARGS` or `python -c CODE ARGS` without the
shim.  Most of its time in the suites is starting: importing torch (1.5 s on
Debian 12, 2.5 s on sid) and, on torch 2.x, torch._dynamo, which the first
optimizer step imports (1.1 s on sid).  This process imports them once, then
forks a child per run: each child starts from the same pristine state (no
op has run, no thread exists), as a fresh interpreter that had imported them
would, and runs the script as its __main__.

Protocol: py writes a request folder R's path as a line to DIR/requests
(a FIFO); R holds `req` (NUL-separated: the working folder, the argument
count, the arguments after the interpreter) and `env` (`env -0`), and the
FIFOs `out`, `err` (the run's stdout and stderr, which py copies to its own)
and `status` (the exit status, as a shell gives it: 128 + N for signal N;
"fallback" when this process cannot stand for a fresh one: an option other
than -c, or a variable read at start-up, such as OMP_NUM_THREADS or
PYTHONPATH, that differs from this process's).  R/pid gets the run's
process id, the leader of its own process group (py kills the group when
the run passes its bound).  This process ends when the test that started it
does (its parent changes)."""
import atexit
import gc
import io
import os
import re
import select
import signal
import sys
import threading
import time
import traceback
import types

DIR = sys.argv[1]
PARENT = os.getppid()
BEFORE = dict(os.environ)

import torch  # noqa: E402  (what every plain run imports first)

try:  # torch 2.x: the first optimizer step imports torch._dynamo
    import torch._dynamo  # noqa: F401
except ImportError:
    pass
import torch.nn  # noqa: E402,F401
import torch.optim  # noqa: E402,F401
import torch.utils.data  # noqa: E402,F401

# variables read while starting or loading libraries: a run whose values
# differ is not this process's to stand for
_AT_START = re.compile(r"^(LD_|PYTHON|OMP_|GOMP_|KMP_|OPENBLAS|MKL_|NUMEXPR|MALLOC|TORCH|CUDA|UCX_|OMPI_|PMIX|HVDSHIM_DISABLE$)")


def _start_env(env):
    return {k: v for k, v in env.items() if _AT_START.match(k)}


START_ENV = _start_env(BEFORE)
# what the imports put in the environment (torch: TORCHINDUCTOR_CACHE_DIR),
# as they would in a fresh process that imported them
ADDED = {k: v for k, v in os.environ.items() if k not in BEFORE}


def _fields(path):
    with open(path, "rb") as f:
        return [x.decode("utf-8", "surrogateescape") for x in f.read().split(b"\0")[:-1]]


def _run(req, args):
    """The child's part, as `python ARGS` would run (never returns)."""
    os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(os.path.join(req, "out"), os.O_WRONLY)
    err = os.open(os.path.join(req, "err"), os.O_WRONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in (null, out, err):
        os.close(fd)
    # what a fresh process finds on its own: the temporary folder of its
    # environment (tempfile caches the first it found), numpy's global
    # random state drawn from the system (random reseeds itself at a fork)
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    main = types.ModuleType("__main__")
    if args[0] == "-c":
        code, path = args[1], "<string>"
        sys.argv = ["-c"] + args[2:]
        sys.path[0] = ""
    else:
        path = args[0]
        with open(path, "rb") as f:
            code = f.read()
        sys.argv = list(args)
        sys.path[0] = os.path.dirname(os.path.abspath(path))
        main.__file__ = path
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    try:
        exec(compile(code, path, "exec"), main.__dict__)
        status = 0
    except SystemExit as e:  # as the interpreter reads it
        status = e.code
        if status is None:
            status = 0
        elif not isinstance(status, int):
            print(status, file=sys.stderr)
            status = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # as the interpreter prints it: without this file's frame
        t, v, tb = sys.exc_info()
        v.__traceback__ = tb.tb_next
        sys.excepthook(t, v, tb.tb_next)
        status = 1
    _exit(status)


def _exit(status):
    """The interpreter's exit, less tearing the modules down, which in a
    forked child writes to every object it inherited (copying the heap: 1 s
    on sid): the threads that are not daemons are waited for, the atexit
    functions run, the files the run left open are flushed (objects made in
    the child: the inherited ones are frozen), then the process ends."""
    try:
        threading._shutdown()
    except Exception:  # noqa: BLE001  (as the interpreter: go on exiting)
        traceback.print_exc()
    atexit._run_exitfuncs()
    for o in gc.get_objects():
        try:  # (a dead weak proxy raises on any look)
            if isinstance(o, io.IOBase) and not o.closed:
                o.flush()
        except Exception:  # noqa: BLE001
            pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(status & 0xFF)


def _serve(req):
    """The waiter: forks the child and reports its pid and its status;
    returns (req, args) in the child, which runs them at the top level (so
    that its exit is the interpreter's own: atexit, threads, buffers)."""
    fields = _fields(os.path.join(req, "req"))
    cwd, n, args = fields[0], int(fields[1]), fields[2:]
    env = dict(x.split("=", 1) for x in _fields(os.path.join(req, "env")) if "=" in x)
    if len(args) != n or not args or (args[0].startswith("-") and args[0] != "-c") or \
            (args[0] == "-c" and len(args) < 2) or _start_env(env) != START_ENV:
        status = "fallback"
        differ = sorted(k for k in set(START_ENV) | set(_start_env(env)) if START_ENV.get(k) != env.get(k))
        print("warm.py: run directly: %s" % (("%s differs" % ", ".join(differ)) if differ else "the options"), flush=True)
    else:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        for k, v in ADDED.items():
            os.environ.setdefault(k, v)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return req, args
        with open(os.path.join(req, "pid"), "w") as f:
            f.write("%d\n" % pid)
        _, st = os.waitpid(pid, 0)
        status = str(128 + os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st))
    _report(os.path.join(req, "status"), status + "\n")
    return None


def _report(fifo, text):
    """Write to the FIFO py reads the status from once py has it open; py
    opens it as it sends the request, and has gone only when the run passed
    its bound (then, after 30 s, nobody is told)."""
    for _ in range(3000):
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader (yet)
            time.sleep(0.01)
            continue
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        return


def main():
    # no thread may exist when a child is forked (one would be missing in it)
    tasks = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
    if tasks != 1:
        print("warm.py: %d threads after importing torch: not forking from here" % tasks)
        return
    # the objects made so far are never collected: a collection in a child
    # would write to every one of them, copying the whole heap (0.6 s on sid)
    gc.collect()
    gc.freeze()
    fifo = os.path.join(DIR, "requests")
    fd = os.open(fifo, os.O_RDWR)  # read-write: no end of file when a writer closes
    with open(os.path.join(DIR, "ready"), "w") as f:
        f.write("%d\n" % os.getpid())
    buf = b""
    while os.getppid() == PARENT:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        if not select.select([fd], [], [], 1.0)[0]:
            continue
        buf += os.read(fd, 65536)
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = line.decode("utf-8", "surrogateescape")
            sys.stdout.flush()
            sys.stderr.flush()
            if os.fork() == 0:
                try:
                    child = _serve(req)
                except BaseException:
                    traceback.print_exc()
                    os._exit(1)
                if child is None:
                    os._exit(0)
                os.close(fd)
                return child
    return None


if __name__ == "__main__":
    _child = main()
    if _child:
        _run(*_child)
