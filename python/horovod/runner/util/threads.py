"""Background threads, as horovod.runner.util.threads offers them (Horovod's
test utilities start their delayed actions with in_thread)."""
import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Start target(*args) in a new thread and return the thread.  daemon:
    the interpreter does not wait for it at exit; silent: an exception of
    target ends the thread without a traceback."""
    if not isinstance(args, tuple):
        raise ValueError("in_thread: args must be a tuple, got %s (for one argument: (arg,))"
                         % type(args).__name__)
    run = target
    if silent:
        def run(*a):
            try:
                target(*a)
            except Exception:
                pass
    thread = threading.Thread(target=run, args=args, name=name, daemon=daemon)
    thread.start()
    return thread
