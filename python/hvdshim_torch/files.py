"""What a rank > 0 does to files, beside the library's private folder
(hooks/overlay*.c): shutil.rmtree of a folder rank 0 is removing at the
same time.  A rank's removals only hide real files from itself, but its
rmtree lists the real folder and then looks at each entry, and rank 0,
running the same script a moment ahead, may have removed one in between
(the "start from a clean output folder" idiom, a checkpoint folder
rotated): an entry gone since the listing is removed for this rank too, as
it would be for a rank alone.  The folder itself missing fails as alone,
unless this rank listed it before rank 0 removed it (rotating checkpoints
by their times: its stat still answers as listed, hooks/overlay_view_dir.c):
then it is removed for this rank too."""
import os
import shutil
import sys

from .patching import wrap
from .state import _S


def _gone_meanwhile(top, path, exc):
    if not isinstance(exc, FileNotFoundError):
        return False
    if os.path.normpath(os.fsdecode(path)) != top:
        return True
    if not os.path.lexists(top):  # never there in this rank's view: fails as alone
        return False
    try:
        os.rmdir(top)  # listed here, removed by rank 0 since: removed in this rank's view too
    except OSError:
        pass
    return True


def install():
    def make_rmtree(orig):
        def rmtree(path, ignore_errors=False, onerror=None, *args, **kwargs):
            if _S.rank == 0 or ignore_errors or kwargs.get("dir_fd") is not None:
                return orig(path, ignore_errors, onerror, *args, **kwargs)
            top = os.path.normpath(os.fsdecode(path))
            onexc = kwargs.pop("onexc", None)
            if onerror is None and sys.version_info >= (3, 12):  # (onexc: the exception itself; onerror deprecated)
                def handler(func, p, exc):
                    if _gone_meanwhile(top, p, exc):
                        return
                    if onexc is not None:
                        return onexc(func, p, exc)
                    raise exc
                return orig(path, ignore_errors, *args, onexc=handler, **kwargs)

            def on_error(func, p, exc_info):
                if _gone_meanwhile(top, p, exc_info[1]):
                    return
                if onerror is not None:
                    return onerror(func, p, exc_info)
                raise exc_info[1]
            return orig(path, ignore_errors, on_error, *args, **kwargs)
        return rmtree
    wrap(shutil, "rmtree", make_rmtree)
