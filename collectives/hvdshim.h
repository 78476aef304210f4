/* hvdshim public C API.
 *
 * The engine behind LD_PRELOAD=libhvdshim.so: asynchronous collectives on
 * named tensors, negotiated across ranks by a background thread (rank 0
 * coordinates), fused into large buffers and reduced over MPI.
 *
 * Rules:
 *  - The same name on every rank is the same tensor.  A name may have one
 *    operation in flight per rank at a time.
 *  - Any thread may submit; submission never blocks on communication.
 *  - Every operation completes on every rank in the same global order,
 *    whatever order the ranks submitted in.
 *  - A handle is finished by hvd_wait() returning anything but
 *    HVD_ERR_TIMEOUT, or, when a callback was given, by the callback
 *    returning; after that the handle is invalid.
 *  - Buffers must stay valid and untouched until the operation completes.
 */
#ifndef HVDSHIM_H
#define HVDSHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HVD_EXPORT __attribute__((visibility("default")))
#else
#define HVD_EXPORT
#endif

#include "hvdshim_version.h" /* HVDSHIM_VERSION, from configure.ac */

typedef int64_t hvd_handle_t;

typedef enum {
  HVD_OK = 0,
  HVD_ERR_INVALID = 1,   /* bad argument (null buffer, unknown dtype, duplicate in-flight name, ...) */
  HVD_ERR_MISMATCH = 2,  /* ranks disagree on the tensor (count, dtype, op, root, kind) */
  HVD_ERR_SHUTDOWN = 3,  /* this rank or a peer has shut down; the operation cannot complete */
  HVD_ERR_TIMEOUT = 4,   /* hvd_wait: not complete within the timeout (handle still valid) */
  HVD_ERR_NOT_INIT = 5,  /* hvd_init() not called or failed */
  HVD_ERR_INTERNAL = 6,  /* MPI or system failure */
  HVD_ERR_MEMBERSHIP = 7 /* the ranks changed under it (a rank died, HVDSHIM_ELASTIC): not done; the job goes on
                            over the ranks left, so submit it again there */
} hvd_status_t;

typedef enum {
  HVD_FLOAT32 = 0,
  HVD_FLOAT64 = 1,
  HVD_FLOAT16 = 2,
  HVD_BFLOAT16 = 3,
  HVD_INT32 = 4,
  HVD_INT64 = 5,
  HVD_UINT8 = 6,
  HVD_INT8 = 7,
  HVD_INT16 = 8 /* NCCL has no 16-bit integers: on GPUs, HVDSHIM_GPU_OPERATIONS=MPI only */
} hvd_dtype_t;

/* HVD_AVG divides the sum by the number of ranks (integer types: truncated
 * toward zero).  HVD_PROD multiplies (integers wrap as in C unsigned
 * arithmetic). */
typedef enum { HVD_SUM = 0, HVD_AVG = 1, HVD_MIN = 2, HVD_MAX = 3, HVD_PROD = 4 } hvd_op_t;

/* Called on the engine thread when an operation ends; must not block on
 * other hvdshim operations.  The handle is released when it returns. */
typedef void (*hvd_callback_t)(hvd_handle_t handle, hvd_status_t status, void *arg);

/* Start the engine: initialize MPI (MPI_Init_thread, MPI_THREAD_MULTIPLE) or
 * adopt the program's MPI (a dup of MPI_COMM_WORLD), then the background
 * thread.  Idempotent; attempted once: later calls return the first result. */
HVD_EXPORT hvd_status_t hvd_init(void);
/* Join, then stop: new submissions from this rank are refused, in-flight
 * work drains (bounded by HVDSHIM_SHUTDOWN_TIMEOUT_SECONDS), then this rank
 * takes part in the other ranks' operations without contributing (the
 * identity of the reduction, no allgather rows; averages divide by the ranks
 * still submitting) until every rank has called hvd_shutdown; then the thread
 * stops and what hvd_init initialized is finalized.  Run at a normal exit
 * (status 0) too; an exit with another status ends the whole job instead. */
HVD_EXPORT void hvd_shutdown(void);
/* Horovod's end instead of the join above: once any rank has called
 * hvd_shutdown_ends_job(1), a rank that stops for good (hvd_shutdown, or a
 * normal exit) while others still submit ends every rank's collectives in
 * the same cycle: what they have in flight, and every later submission,
 * fail with HVD_ERR_SHUTDOWN; a rank with less work calls hvd_join instead.
 * (The served horovod package turns it on in a job of fixed size.) */
HVD_EXPORT void hvd_shutdown_ends_job(int on);
HVD_EXPORT int hvd_initialized(void);
HVD_EXPORT int hvd_rank(void);
HVD_EXPORT int hvd_size(void);
HVD_EXPORT int hvd_local_rank(void);
HVD_EXPORT int hvd_local_size(void);

/* Elastic jobs (HVDSHIM_ELASTIC=1): an operation completes on every
 * surviving rank or fails with HVD_ERR_MEMBERSHIP on every one.  A program
 * that calls hvd_elastic_follow() takes each change of ranks in itself:
 * after one, what it had queued and every new submission fail with
 * HVD_ERR_MEMBERSHIP until it calls hvd_elastic_ack, which returns the
 * changes since the last call (0: none) with this rank's place now, whether
 * the job's first rank 0 has died, and the last change in words (what, len:
 * may be NULL, 0).  Without hvd_elastic_follow, submissions go on over the
 * new ranks at once. */
HVD_EXPORT void hvd_elastic_follow(void);
HVD_EXPORT int hvd_elastic_ack(int *rank, int *size, int *rank0_lost, char *what, size_t len);

/* In-place allreduce of `count` elements at `buf`. */
HVD_EXPORT hvd_status_t hvd_allreduce_async(const char *name, void *buf, size_t count, hvd_dtype_t dtype,
                                            hvd_op_t op, hvd_callback_t cb, void *cb_arg, hvd_handle_t *handle);
/* In-place broadcast from `root`: a rank, or HVD_ROOT_FIRST_ACTIVE for the
 * lowest rank that has not finished (see hvd_shutdown).  A broadcast whose
 * root has finished fails with HVD_ERR_SHUTDOWN on every rank. */
#define HVD_ROOT_FIRST_ACTIVE (-1)
HVD_EXPORT hvd_status_t hvd_broadcast_async(const char *name, void *buf, size_t count, hvd_dtype_t dtype, int root,
                                            hvd_callback_t cb, void *cb_arg, hvd_handle_t *handle);
/* Allgather along the first dimension: this rank contributes `rows` rows of
 * `row_elems` elements (rows may differ per rank, row_elems may not).  The
 * result (all ranks' rows in rank order) is fetched with
 * hvd_allgather_result() before the handle is finished. */
HVD_EXPORT hvd_status_t hvd_allgather_async(const char *name, const void *in, size_t rows, size_t row_elems,
                                            hvd_dtype_t dtype, hvd_callback_t cb, void *cb_arg,
                                            hvd_handle_t *handle);
/* Takes ownership of the gathered buffer (free() it) and its total row count.
 * Valid once the operation completed OK: from the callback, or after
 * hvd_test() said done and before hvd_wait(). */
HVD_EXPORT hvd_status_t hvd_allgather_result(hvd_handle_t handle, void **out, size_t *total_rows);

/* GPU buffers (CUDA device memory).  `device` is the CUDA device ordinal as
 * this process sees it (one GPU per rank: the first one used); `stream` the
 * cudaStream_t that produced the buffer (NULL: the legacy default stream).
 * The operation starts after the work queued on `stream` so far; finishing
 * the handle (hvd_wait, or before the callback runs) makes `stream` wait for
 * the result, so later work on `stream` sees it.  The host does not wait for
 * the GPU: synchronize the stream before reading the buffer from the host.
 * Reduced by NCCL, or by MPI through pinned host memory
 * (HVDSHIM_GPU_OPERATIONS).  Without a CUDA runtime and a GPU, the call
 * fails with HVD_ERR_INVALID and the reason in hvd_last_error(). */
HVD_EXPORT hvd_status_t hvd_allreduce_gpu_async(const char *name, void *buf, size_t count, hvd_dtype_t dtype,
                                                hvd_op_t op, int device, void *stream, hvd_callback_t cb,
                                                void *cb_arg, hvd_handle_t *handle);
HVD_EXPORT hvd_status_t hvd_broadcast_gpu_async(const char *name, void *buf, size_t count, hvd_dtype_t dtype,
                                                int root, int device, void *stream, hvd_callback_t cb,
                                                void *cb_arg, hvd_handle_t *handle);
/* Several allreduces submitted together (a framework's gradients): the
 * same checks and handles as one call each, but the engine is woken once, so
 * it takes them into one cycle (and fuses those that can be) unless its own
 * timer ends a cycle while the batch is being queued.  device < 0: a host
 * buffer (stream ignored); else as hvd_allreduce_gpu_async.  On a failure at
 * item i, items before i are submitted (their handles are valid), handles[i..]
 * are -1, and the status and hvd_last_error() name item i. */
typedef struct {
  const char *name;
  void *buf;
  size_t count;
  int dtype; /* hvd_dtype_t */
  int op;    /* hvd_op_t */
  int device;
  void *stream;
} hvd_allreduce_item;
HVD_EXPORT hvd_status_t hvd_allreduce_batch_async(const hvd_allreduce_item *items, size_t n, hvd_handle_t *handles);
/* flags: HVD_BATCH_CALLER_WAITS: the caller waits for these handles right
 * away (hvd_wait / hvd_wait_all without a timeout), as at the end of a
 * backward pass.  In a host-memory job the engine thread is then not woken:
 * the waiting thread runs the engine's cycle itself, which saves two thread
 * switches on a core the training thread needs.  A caller that does not wait
 * at once gets them at the engine's own pace (its cycle, or 0.1 s when it
 * was idle). */
#define HVD_BATCH_CALLER_WAITS 1u
HVD_EXPORT hvd_status_t hvd_allreduce_batch_async_ex(const hvd_allreduce_item *items, size_t n, hvd_handle_t *handles,
                                                     unsigned flags);
/* 1 when GPU buffers can be handled here; `out` gets what was found (CUDA
 * runtime and NCCL with their paths, the device kernels) or why not. */
HVD_EXPORT int hvd_gpu_status(char *out, size_t n);

/* Reduce-scatter (Horovod's reducescatter): every rank gives `rows` rows of
 * `row_elems` elements at `in` (the same on every rank); the reduction (any
 * op) is split along the first dimension, the first rows % n ranks getting
 * one row more than rows / n (n: the ranks of the process set, in rank
 * order), and this rank's rows are written to `out` (NULL when it gets
 * none).  At most INT_MAX elements. */
HVD_EXPORT hvd_status_t hvd_reducescatter_async(const char *name, const void *in, void *out, size_t rows,
                                                size_t row_elems, hvd_dtype_t dtype, hvd_op_t op, hvd_callback_t cb,
                                                void *cb_arg, hvd_handle_t *handle);
/* Alltoall: this rank sends splits[j] rows of `row_elems` elements (the
 * rows at `in`, in order) to the j-th rank of the process set and receives
 * every rank's rows for it, in rank order; splits has one entry per rank of
 * the set, and may differ per rank.  The result (a new buffer, its row
 * count) is fetched as an allgather's (hvd_allgather_result or
 * hvd_allgather_wait); recv_splits (one per rank of the set, or NULL) gets
 * the rows received from each, before the operation completes. */
HVD_EXPORT hvd_status_t hvd_alltoall_async(const char *name, const void *in, const int64_t *splits, size_t row_elems,
                                           hvd_dtype_t dtype, int64_t *recv_splits, hvd_callback_t cb, void *cb_arg,
                                           hvd_handle_t *handle);

/* hvd_wait for an allgather that also hands over its result (free it with
 * hvd_free) when the status is HVD_OK: one call instead of test/result/wait. */
HVD_EXPORT hvd_status_t hvd_allgather_wait(hvd_handle_t handle, double timeout_s, void **out, size_t *total_rows);
/* free() for buffers the library allocated (callers without a libc, e.g. ctypes). */
HVD_EXPORT void hvd_free(void *ptr);

/* Wait up to timeout_s seconds (< 0: no limit).  Returns the operation's
 * status and finishes the handle, or HVD_ERR_TIMEOUT and keeps it. */
HVD_EXPORT hvd_status_t hvd_wait(hvd_handle_t handle, double timeout_s);
/* hvd_wait(h, -1) for each of n handles, in order (each wait is bounded by
 * the engine: HVDSHIM_PEER_TIMEOUT_SECONDS); every handle is finished.
 * Returns HVD_OK, or the first failure's status with its index in
 * *first_failed (when not NULL) and its message in hvd_last_error(). */
HVD_EXPORT hvd_status_t hvd_wait_all(const hvd_handle_t *handles, size_t n, size_t *first_failed);
/* *done = 1 when complete (then hvd_wait returns at once). */
HVD_EXPORT hvd_status_t hvd_test(hvd_handle_t handle, int *done);
/* Message of the last failed hvd_* call or wait on this thread ("" if none). */
HVD_EXPORT const char *hvd_last_error(void);

/* Describes the tensor of this thread's next submission (its dimensions;
 * for an allgather, all but the first): ranks that submit one name with the
 * same element count but different shapes then fail with HVD_ERR_MISMATCH
 * ("ranks disagree on the shape").  Without it only counts are compared. */
HVD_EXPORT void hvd_next_shape(const int64_t *dims, int ndims);

/* Horovod's join: blocks until every rank has called hvd_join.  Meanwhile
 * this rank takes part in the other ranks' operations without data (the
 * identity of a reduction, no allgather rows, averages over the ranks still
 * submitting), so ranks with more batches than others finish theirs; then
 * every rank goes on, and *last_rank (if not NULL) is the last rank to join.
 * Fails with HVD_ERR_SHUTDOWN when a rank finishes (hvd_shutdown or exit)
 * instead of joining. */
HVD_EXPORT hvd_status_t hvd_join(int *last_rank);

/* The timeline (as HVDSHIM_TIMELINE, written by rank 0) from now on into
 * `path`, replacing the current one if any; mark_cycles adds a marker per
 * engine cycle.  Stop closes it (a valid JSON file).  Any rank may call them;
 * rank 0's call opens or closes the file, and an error opening it is
 * returned there (HVD_ERR_INVALID, with the reason). */
HVD_EXPORT hvd_status_t hvd_timeline_start(const char *path, int mark_cycles);
HVD_EXPORT hvd_status_t hvd_timeline_stop(void);

/* Process sets: collectives among some ranks only (Horovod's process sets).
 * Set 0 is every rank.  hvd_process_set_add is called by every rank of the
 * job with the same members (in any order; each listed once), in the same
 * order as the job's other adds and removes; it blocks until every rank has
 * called it and gives the new set's id (the same on every rank).  Then
 * hvd_next_process_set(id) before a submission (allreduce, broadcast,
 * allgather or hvd_barrier) runs it among the set's members only: only
 * members submit it, a broadcast's root is a member (its rank in the job),
 * an allgather returns the members' rows in rank order, and averages divide
 * by the members still submitting.  Host memory only for sets other than 0.
 * hvd_process_set_remove (every rank, like add) frees a set; its id is not
 * reused.  A rank that is not a member, an unknown or removed set, or ranks
 * that disagree on the members fail with HVD_ERR_INVALID or
 * HVD_ERR_MISMATCH and the reason. */
HVD_EXPORT hvd_status_t hvd_process_set_add(const int *ranks, int n, int *id);
HVD_EXPORT hvd_status_t hvd_process_set_remove(int id);
HVD_EXPORT void hvd_next_process_set(int id);
/* The number of members of set id (-1: no such set), and this rank's index
 * among them (-1: not a member, or no such set). */
HVD_EXPORT int hvd_process_set_size(int id);
HVD_EXPORT int hvd_process_set_rank(int id);

/* Blocking barrier over all ranks, bounded by timeout_s (< 0: no limit). */
HVD_EXPORT hvd_status_t hvd_barrier(double timeout_s);

/* Counters since hvd_init (this rank). */
typedef struct {
  uint64_t cycles;         /* engine cycles run */
  uint64_t slow_rounds;    /* cycles that went through the coordinator */
  uint64_t cache_hits;     /* operations negotiated by the bitvector fast path */
  uint64_t tensors;        /* operations completed */
  uint64_t groups;         /* allreduce groups executed (fused or single) */
  uint64_t fused_tensors;  /* tensors that went through a fusion buffer */
  uint64_t bytes_reduced;  /* allreduce payload bytes */
  double comm_seconds;     /* time in MPI data movement and copies */
  double blocked_seconds;  /* time callers spent blocked in hvd_wait on unfinished operations */
  uint64_t cycles_helped;  /* of the cycles, those a waiting caller ran itself (HVD_BATCH_CALLER_WAITS) */
} hvd_stats_t;
HVD_EXPORT void hvd_get_stats(hvd_stats_t *stats);

/* One training step has ended on this rank (its gradients are reduced):
 * `samples` is the number this rank processed in it, or -1 when unknown.
 * Rank 0 writes a line to the HVDSHIM_METRICS file (see docs/OBSERVABILITY.md's
 * schema), and autotune measures throughput in steps.  Framework adapters
 * and native hooks call it; a program using the C API may too.  Before
 * hvd_init: a no-op, except with HVDSHIM_OBSERVE=1 (one plain process,
 * counted: the line says 1 rank and no reduction). */
HVD_EXPORT void hvd_step_mark(int64_t samples);
/* The steps counted so far (the next hvd_step_mark is steps + 1): a job
 * started again to grow goes on with the steps of the job before. */
HVD_EXPORT void hvd_step_count_set(uint64_t steps);

HVD_EXPORT const char *hvd_dtype_name(hvd_dtype_t dtype);
HVD_EXPORT size_t hvd_dtype_size(hvd_dtype_t dtype);
HVD_EXPORT const char *hvd_status_name(hvd_status_t status);

#ifdef __cplusplus
}
#endif
#endif
