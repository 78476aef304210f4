/* The GPU path: the CUDA runtime resolved at run time, events that order
 * the engine's work between the framework's streams, a device fusion buffer
 * with batched copies, and a device backend (backend.h: hvd_backend_nccl,
 * or hvd_backend_staged, MPI through pinned host memory).  Its files are
 * listed in gpu_internal.h.  A build without the CUDA headers compiles
 * gpu_stubs.c instead (Makefile.am): the same interface, every device
 * request refused with the reason. */
#ifndef HVD_GPU_H
#define HVD_GPU_H

#include <mpi.h>
#include <stddef.h>

#include "../transports/backend.h"
#include "../hvdshim.h"

/* A CUDA event with a reference count (one per waiter). */
typedef struct hvd_gpu_event hvd_gpu_event;

/* Any thread.  0 when a CUDA runtime is loaded and shows a GPU (decided
 * once: later calls return the first answer), else -1 with the reason. */
int hvd_gpu_ready(char *err, size_t errlen);
/* Device ordinal of a pointer the runtime knows as device (or managed)
 * memory, else -1 (host memory, or no CUDA runtime). */
int hvd_gpu_pointer_device(const void *ptr);

/* Submission, on the caller's thread: `device` must be this rank's GPU (the
 * first one used); records an event on `stream`, the producer of the buffer.
 * `share` (else NULL): the ready event of the tensor submitted just before
 * in the same batch, on the same device and stream, which covers this one
 * too: taken with a new reference instead of a new recording.  0, or -1 with
 * the reason. */
int hvd_gpu_mark_ready(int device, void *stream, hvd_gpu_event *share, hvd_gpu_event **ev, char *err, size_t errlen);
void hvd_gpu_event_hold(hvd_gpu_event *ev, int n);
void hvd_gpu_event_put(hvd_gpu_event *ev);
/* Consumer side: `stream` waits for the event (no host synchronization),
 * then the reference is dropped. */
void hvd_gpu_consume(hvd_gpu_event *ev, void *stream);

/* ---- engine thread only ---- */
typedef struct {
  void *ptr;
  size_t count;           /* elements */
  int divisor;            /* 1, or the ranks still submitting (average) */
  hvd_gpu_event *ready;   /* may be NULL (a joined rank's stand-in) */
} hvd_gpu_item;

/* Allreduce a group of same-dtype device buffers (op SUM with averages as
 * divisors, or one of MIN/MAX/PROD), in place, through the device backend
 * b.  all_avg_over_size: every tensor averages over all ranks of the job.
 * Returns 0 with *done (one reference, recorded on the engine stream after
 * the results are written), or -1 with the reason (fatal: the ranks'
 * streams may be out of step). */
int hvd_gpu_allreduce(const hvd_gpu_item *it, size_t n, hvd_dtype_t dtype, hvd_op_t op, int all_avg_over_size,
                      const hvd_backend *b, const hvd_bk_ctx *ctx, hvd_gpu_event **done, hvd_phase_times *t,
                      char *err, size_t errlen);
/* root: its rank in ctx->comm. */
int hvd_gpu_broadcast(const hvd_gpu_item *it, hvd_dtype_t dtype, int root, const hvd_backend *b,
                      const hvd_bk_ctx *ctx, hvd_gpu_event **done, char *err, size_t errlen);
/* A device buffer of `count` identity elements of `op` (a joined rank's
 * contribution); NULL with the reason. */
void *hvd_gpu_identity(size_t count, hvd_dtype_t dtype, hvd_op_t op, char *err, size_t errlen);
void hvd_gpu_free(void *p);
/* Benchmark hook (bench/bench_gpu.py, at one rank before any traffic):
 * bandwidth of the engine's copy into the fusion buffer and of one
 * device-to-device cudaMemcpyAsync per tensor over the same buffers, in
 * GB/s of payload.  Exported but not public API. */
__attribute__((visibility("default"))) int hvd_gpu_bench_copy_in(void *const *ptrs, const size_t *bytes, int n,
                                                                 int iters, double *kernel_gbs, double *memcpy_gbs);
/* HVDSHIM_GPU_OPERATIONS=auto, collective over comm (at the first GPU
 * operation, which every rank executes together): hvd_backend_nccl when
 * NCCL is found and no two ranks share a GPU, else hvd_backend_staged, with
 * one info line on rank 0 saying which and why; NULL with the reason. */
const hvd_backend *hvd_gpu_pick(MPI_Comm comm, char *err, size_t errlen);
/* At the engine's end (every rank at the same point): wait for the engine
 * stream, stop the device backend b (its communicator, its buffers), free
 * the fusion buffer. */
void hvd_gpu_engine_stop(const hvd_backend *b);
/* Set up from the engine start: rank, size and compression (0 none, 1
 * fp16, 2 bf16). */
void hvd_gpu_configure(int rank, int size, int compression);
/* After the engine's ranks changed (elastic): the device backend b drops
 * what it made over the old ranks (NCCL: its communicator, aborted), and
 * this rank is `rank` of `size` from the next operation on. */
void hvd_gpu_members_changed(const hvd_backend *b, int rank, int size);
/* "CUDA runtime 13.0 (path), NCCL 2.28.3 (path), kernels: yes" or why not. */
void hvd_gpu_describe(char *out, size_t n);

#endif
