"""Horovod's API served by hvdshim (no Horovod installed).

libhvdshim.so serves this package in a rank when the script imports
`horovod` and no real Horovod is importable (HVDSHIM_HOROVOD=auto, the
default), or always (HVDSHIM_HOROVOD=on).  `horovod.torch` is Horovod's
PyTorch API on hvdshim's engine; every byte moves in libhvdshim.so.  The
zero-code adapter stands aside at hvd.init() (at the import of a real
Horovod).  See docs/HOROVOD.md."""

# The release whose API this package follows.
__version__ = "0.28.1"
# Tells a script (or a test) that this is hvdshim's package, not Horovod.
__hvdshim__ = True

from horovod.runner import run  # noqa: E402  (as Horovod's: not served, says what to do instead)
