"""horovod.torch served by hvdshim: Horovod's PyTorch API on hvdshim's engine.
See docs/HOROVOD.md for what is served and what is not.

Its modules, lowest layer first (a module imports only those listed before
it: tests/unit/pyimports.py); all of them call libhvdshim.so through
hvdshim_torch.capi, the one binding of hvdshim.h:

  compression      Horovod's Compression (fp16), arithmetic on tensors
  basics           rank, size, local and cross places, what is built, the
                   timeline, the engine side of process sets
  tensors          the reduction ops, tensor checks, prescale/postscale,
                   the buffer the engine works on
  handles          operations in flight: handles, names, poll, synchronize,
                   join, barrier
  ops              the collectives (allreduce, allgather, broadcast, alltoall,
                   reducescatter; grouped, async, in place, differentiable)
  mpi_ops          init, the elastic API's reset; Horovod's module of every
                   name above
  functions        broadcast_parameters, broadcast_object, ...
  optimizer        DistributedOptimizer
  sync_batch_norm  SyncBatchNorm
  elastic/         hvd.elastic: run, TorchState, ElasticSampler, growing"""
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from horovod.common.process_sets import (ProcessSet, add_process_set, global_process_set,
                                         remove_process_set)
from horovod.torch import elastic
from horovod.torch.compression import Compression
from horovod.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                     broadcast_parameters)
from horovod.torch.mpi_ops import (
    Adasum, Average, Max, Min, Product, Sum,
    allgather, allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_, alltoall, alltoall_async,
    barrier, broadcast, broadcast_, broadcast_async, broadcast_async_, ccl_built, cross_rank, cross_size,
    cuda_built, ddl_built, gloo_built, gloo_enabled, grouped_allgather, grouped_allgather_async, grouped_allreduce,
    grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
    grouped_reducescatter_async, init, is_homogeneous, is_initialized, join, local_rank, local_size, mpi_built,
    mpi_enabled, mpi_threads_supported, nccl_built, poll, rank, reducescatter, reducescatter_async, rocm_built,
    shutdown, size, sparse_allreduce_async, start_timeline, stop_timeline, synchronize)
from horovod.torch.optimizer import DistributedOptimizer
from horovod.torch.sync_batch_norm import SyncBatchNorm

__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "ProcessSet", "add_process_set", "global_process_set",
           "remove_process_set", "elastic", "Compression", "allgather_object", "broadcast_object",
           "broadcast_optimizer_state", "broadcast_parameters", "Adasum", "Average", "Max", "Min", "Product",
           "Sum", "allgather", "allgather_async", "allreduce", "allreduce_", "allreduce_async",
           "allreduce_async_", "alltoall", "alltoall_async", "barrier", "broadcast", "broadcast_",
           "broadcast_async", "broadcast_async_", "ccl_built", "cross_rank", "cross_size", "cuda_built",
           "ddl_built", "gloo_built", "gloo_enabled", "grouped_allgather", "grouped_allgather_async",
           "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
           "grouped_reducescatter", "grouped_reducescatter_async", "init", "is_homogeneous", "is_initialized",
           "join", "local_rank", "local_size", "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built",
           "poll", "rank", "reducescatter", "reducescatter_async", "rocm_built", "shutdown", "size",
           "sparse_allreduce_async",
           "start_timeline", "stop_timeline", "synchronize", "DistributedOptimizer", "SyncBatchNorm"]
