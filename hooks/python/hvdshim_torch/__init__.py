"""hvdshim's PyTorch adapter: makes an unmodified single-process script train
data-parallel.  Loaded by sitecustomize.py right after `import torch` in a
rank process.  It only manipulates Python objects (hooks, samplers, streams,
random state); every byte of tensor data moves in libhvdshim.so, called
through ctypes.

  lib        the library through ctypes, logging, collectives
  state      the adapter's state in this rank
  lifecycle  engine start on first use; standing aside
  models     first forward of a root module: same parameters everywhere,
             rank 0's broadcast, gradients hooked
  grads      gradients averaged as they are ready; optimizer steps
             (closure loss, metrics, hyperparameters from rank 0)
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
from .lib import HvdShimError

__all__ = ["install", "HvdShimError"]
