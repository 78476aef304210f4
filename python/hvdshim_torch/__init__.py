"""hvdshim's PyTorch adapter: makes an unmodified single-process script train
data-parallel.  Loaded by sitecustomize.py right after `import torch` in a
rank process.  It only manipulates Python objects (hooks, samplers, streams,
random state); every byte of tensor data moves in libhvdshim.so, called
through ctypes.

Its modules and subpackages, lowest layer first (a module imports only
those listed before it; tests/unit/pyimports.py checks this map):

  capi         libhvdshim.so through ctypes: the one binding of hvdshim.h
               (the served horovod package uses it too), settings, logger
  errors       HvdShimError; the engine's statuses as exceptions
  collectives  tensors through the engine: Pending, Batch, allreduce, ...
  patching     wrapping torch's functions; hooks torch.compile does not trace
  state        the job in this rank (_S): its place, the settings, what the
               adapter follows of the script, counts several layers read
  output       stdout/stderr of ranks, intra-op threads, an uncaught
               hvdshim error in two lines
  files        a rank > 0's shutil.rmtree beside rank 0's (the library
               keeps its files private: hooks/overlay*.c)
  tempdir      multiprocessing's and torch's folders, removed however the rank ends
  checkpoints  torch.save and shutil.copyfile to a path on rank 0: the old
               file kept aside until the new one is whole, put back if the
               write does not finish
  rng          random state: rank 0's at start, per-rank streams (HVDSHIM_RNG)
  frames       the script's own variables saved at a stop and put back in
               the restarted job (resize)
  elastic      ranks dying (HVDSHIM_ELASTIC): the survivors go on
  grow         a job that may grow: rank 0's discovery, the snapshot file,
               rank 0 held in a restarted job
  lifecycle    engine start on first use; standing aside
  data/        DataLoaders sharded by use (HVDSHIM_DATA); its __init__ has the map
  gradients/   gradients averaged as they are ready, the loss read after
               backward, optimizer steps; its __init__ has the map
  resize       a job that grows: its state saved and loaded, loaders' places
  norms        BatchNorm over every rank's batch, an embedding's max_norm
  models       a root module's first forward: the same parameters
               everywhere, rank 0's values, gradients hooked and followed
  install      the entry point: the settings, torch patched

See docs/ARCHITECTURE.md ("PyTorch adapter") for the reasoning.
"""
from .install import install
from .errors import HvdShimError

__all__ = ["install", "HvdShimError"]
