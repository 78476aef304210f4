"""torch.save to a path on rank 0, and shutil.copyfile (copy, copy2: the
"best" checkpoint copied from the last): if the write does not finish,
the path holds what it held before, never a part.

A plain torch.save(obj, path) writes the path in place: the old
checkpoint is truncated at the start and the new one is whole only at the
end.  A plain run is cut short there only by its own failure; under a
launcher rank 0 is ended by another rank's death (the launcher's SIGTERM
and SIGKILL, the library's watchdog) wherever it is, and when that is in
the middle of rewriting the one checkpoint a script keeps
(`checkpoint.pth`, every epoch), the job is left with none to resume from;
and so with the copy of the best one (`model_best.pth`).

So rank 0 (the process of the job that writes the real files) first moves
the file at the path into a hidden folder beside it
(".hvdshim-saving/NAME", or marks there that the path was new:
"NAME.new"), then saves at the path as plain does, then removes the
backup (or the mark).  A save that raises puts the old file back (or
removes the part written); a process killed first is put right by the
library's watcher once it is gone (hvd_restore_at_end).  The path is
written where plain writes it, so its bytes, the ranks' reads of it and
the library's matching of their private copies against it
(hooks/overlay_bytes.h) are as before.

Where every rank writes real files (a script that stood aside and
distributes itself, as Horovod's scripts do; HVDSHIM_SAVE_RANKS=all) rank
0 saves so too: a rank > 0 that writes the same path at the same time
races with it as it would in place, and only rank 0 has a backup to put
back, so nothing is removed that plain would keep.

Left in place, as plain: ranks > 0, a file object or buffer (the script
opened, and so truncated, the file itself), anything at the path that is
not a regular file of this user with one link, a folder that is missing
or not writable."""
import ctypes
import os
import shutil
import stat

import torch

from . import capi
from .patching import wrap
from .state import _S

FOLDER = ".hvdshim-saving"
_WATCHED_MAX = 4096  # paths handed to the watcher (it keeps their names until the rank ends); later ones in place
_watched = set()


def _rank0_writes(path):
    """This process is rank 0 and writes `path` for real (not into a private
    folder: HVDSHIM_ELASTIC_RESUME holds rank 0's writes until it is back)."""
    lib = capi.LIB
    if lib is None or _S.rank != 0:
        return False
    out = ctypes.create_string_buffer(4096)
    return lib.hvd_overlay_write_path(os.fsencode(path), out, len(out)) == 0


def _plan(path, took_over=False):
    """For an absolute path: (backup, the file's mode or None where the
    path is new), or None:
    save in place.  A backup still aside while the path is missing (a save
    cut short before, in this process, or in a run whose watcher could not
    put it back) is the last whole file: it goes back first, never away.
    took_over: this process has just taken over the files of a rank 0 that
    died, maybe inside its save of this path, before its watcher put the
    backup back: the backup (or the mark of a new path) is put right here
    first, over the part that rank 0 wrote."""
    folder, name = os.path.split(path)
    if not name:
        return None
    backup = os.path.join(folder, FOLDER, name)
    try:
        if took_over and os.path.isfile(backup) and not os.path.islink(backup):
            _put_back(backup, path, 0)
        elif took_over and os.path.isfile(backup + ".new"):
            _put_back(backup, path, None)
        elif not os.path.lexists(path) and os.path.isfile(backup) and not os.path.islink(backup):
            os.rename(backup, path)
    except OSError:
        return None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError:
        return None
    if st is not None and not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()):
        return None
    if not os.access(folder, os.W_OK | os.X_OK):
        return None
    return backup, (stat.S_IMODE(st.st_mode) if st is not None else None)


def _put_back(backup, path, mode):
    """A save that did not finish: the old file back, or the part removed."""
    try:
        if mode is not None:
            os.replace(backup, path)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            os.unlink(backup + ".new")
    except OSError as e:
        capi.debug("could not put %s back as it was: %s" % (path, e))
    _tidy(backup)


def _tidy(backup):
    try:
        os.rmdir(os.path.dirname(backup))  # (where no other save of this process uses it)
    except OSError:
        pass


def guarded(path, write, rank0=False):
    """write() (which writes `path` in place and returns what the call
    returns) with the file at `path` kept aside until it returns, where
    this process is rank 0 (or rank0: has just taken over the files as the
    new rank 0, before the adapter has heard of it) and `path` a plain file
    of its own (or new)."""
    path = os.path.abspath(os.fsdecode(os.fspath(path)))
    plan = _plan(path, rank0) if rank0 or _rank0_writes(path) else None
    if plan is None:
        return write()
    backup, mode = plan
    try:
        # the watcher first: it copes with a backup, a mark or a folder not there
        if path not in _watched:
            if len(_watched) >= _WATCHED_MAX:
                raise OSError("%d paths watched already" % _WATCHED_MAX)
            if capi.LIB.hvd_restore_at_end(os.fsencode(backup), os.fsencode(path)) != 0:
                raise OSError("no watcher")
            _watched.add(path)
        os.makedirs(os.path.dirname(backup), exist_ok=True)
        if mode is None:
            open(backup + ".new", "wb").close()
        else:
            os.rename(path, backup)  # (an interrupt from here to the write: the next one puts it back, _plan)
    except OSError as e:
        capi.debug("%s written in place: %s" % (path, e))
        _tidy(backup)
        return write()
    try:
        result = write()
    except BaseException:
        _put_back(backup, path, mode)
        raise
    # whole: the backup (or the mark) goes, then the old file's mode comes back
    try:
        os.unlink(backup if mode is not None else backup + ".new")
        if mode is not None:
            os.chmod(path, mode)
    except OSError as e:
        capi.debug("%s: %s" % (path, e))
    _tidy(backup)
    return result


_unsettled = False  # this rank > 0 finished a save since the job's last step (held)


def held(path, write):
    """A rank > 0's write() of `path` into its private folder, where the
    job's rank 0 may die meanwhile (elastic): then this rank takes over the
    files, but the old rank 0's save of `path` may have been cut short and
    put back (the file before it), while the copy this rank wrote is not
    moved there (hooks/overlay.h, hvd_overlay_hold).  Where the takeover
    comes during the save, the save is made again, for real, kept aside as
    rank 0's are (guarded); where it comes after the save returned and
    before the job's next step, the library puts this rank's copy at the
    path itself (settled() ends that).  Either way the path ends with this
    save's file, whole, as in a run where no rank died."""
    global _unsettled
    lib = capi.LIB
    key = os.fsencode(os.path.abspath(os.fsdecode(os.fspath(path))))
    state = lib.hvd_overlay_hold(key, 1) if lib is not None else -1
    if state == 1:  # the files are this rank's already
        return guarded(path, write, rank0=True)
    if state != 0:
        return write()
    done = False
    try:
        result = write()
        done = True
    finally:
        took = lib.hvd_overlay_hold(key, 2 if done else 0) == 1
    if took:
        capi.debug("%s: rank 0 died while this rank saved it; saved again, as the new rank 0" % os.fsdecode(key))
        result = guarded(path, write, rank0=True)
    elif done:
        _unsettled = True
    return result


def settled():
    """The job completed a step with every rank: rank 0 had finished the saves
    this rank made before it, so a takeover no longer puts them in place
    (in an elastic job, every step on a rank > 0: the library puts in place
    every file written whole since, not only these saves, hooks/overlay.h)."""
    global _unsettled
    if _unsettled or (_S.elastic and _S.rank > 0):
        _unsettled = False
        capi.LIB.hvd_overlay_saves_settled()


def save(orig, obj, f, *args, **kwargs):
    """torch.save(obj, f, ...) through orig, the original."""
    if not isinstance(f, (str, bytes, os.PathLike)):
        return orig(obj, f, *args, **kwargs)
    if _S.rank != 0:
        return held(f, lambda: orig(obj, f, *args, **kwargs))
    return guarded(f, lambda: orig(obj, f, *args, **kwargs))


def _same(src, dst):
    try:
        return os.path.samefile(src, dst)
    except (OSError, TypeError, ValueError):
        return False


def install():
    def make_save(orig):
        def save_(obj, f, *args, **kwargs):
            return save(orig, obj, f, *args, **kwargs)
        return save_
    orig = wrap(torch, "save", make_save)
    import torch.serialization as serialization
    if serialization.save is orig:
        serialization.save = torch.save

    def make_copyfile(orig):  # (shutil.copy and copy2 call it)
        def copyfile(src, dst, *args, **kwargs):
            if not isinstance(dst, (str, bytes, os.PathLike)) or _same(src, dst):
                return orig(src, dst, *args, **kwargs)  # (the same file: its SameFileError)
            if _S.rank != 0:
                return held(dst, lambda: orig(src, dst, *args, **kwargs))
            return guarded(dst, lambda: orig(src, dst, *args, **kwargs))
        return copyfile
    wrap(shutil, "copyfile", make_copyfile)
