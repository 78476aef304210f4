"""hvdshim's PyTorch adapter: makes an unmodified single-process script train
data-parallel.  Loaded by sitecustomize.py right after `import torch` in a
rank process.  It only manipulates Python objects (hooks, samplers, streams,
random state); every byte of tensor data moves in libhvdshim.so, called
through ctypes.

  capi       libhvdshim.so through ctypes: the one binding (both packages)
  errors     HvdShimError; the engine's statuses as exceptions
  collectives  tensors through the engine (Pending, Batch, allreduce, ...)
  patching   wrapping torch's functions; hooks torch.compile does not trace
  state      the job's state in this rank (_S)
  lifecycle  engine start on first use; standing aside
  models     first forward of a root module: same parameters everywhere,
             rank 0's broadcast, gradients hooked
  gradients/ gradients averaged as they are ready; the loss read after
             backward; optimizer steps (its __init__ has the map)
  data       DataLoaders sharded by use (HVDSHIM_DATA)
  roles      a loader's role per iteration (sharded or whole) and what len() says
  elastic    ranks dying (HVDSHIM_ELASTIC): the survivors go on
  rng        random state: rank 0's at start (HVDSHIM_RNG)
  output     stdout/stderr of ranks, intra-op threads, an uncaught
             hvdshim error in two lines
  install    patching torch; the entry point

See docs/ARCHITECTURE.md ("PyTorch adapter") for the reasoning.
"""
from .install import install
from .errors import HvdShimError

__all__ = ["install", "HvdShimError"]
