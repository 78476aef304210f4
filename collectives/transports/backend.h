/* The backend contract: how data moves, behind one struct of operations.
 *
 *   hvd_backend_mpi     host memory, MPI (backend_mpi.c)
 *   hvd_backend_shm     host memory, the host's shared segment, MPI between
 *                       hosts (shm.c; the global set only)
 *   hvd_backend_nccl    device memory, NCCL (backend_nccl.c)
 *   hvd_backend_staged  device memory, MPI through pinned host memory
 *                       (backend_staged.c)
 *
 * The engine picks the host backend per group (shared memory when it is up
 * and the group is the global set's) and the device backend once, at start
 * (HVDSHIM_GPU_OPERATIONS); gpu.c does what every device backend needs
 * around it (ordering after the producers' streams, the device fusion
 * buffer, the casts, the "done" event).  Every operation runs on the engine
 * thread, returns 0, or -1 with one line in err (base/check.h), and is
 * collective over ctx->comm: every member calls it in the same order. */
#ifndef HVD_BACKEND_H
#define HVD_BACKEND_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "fusion.h"

typedef struct {
  double copy_in_us, reduce_us, copy_out_us;
} hvd_phase_times;

typedef struct {
  MPI_Comm comm;   /* the process set's communicator */
  size_t chunk;    /* host: pipeline piece in bytes (0: all at once) */
  void *stream;    /* device: the engine's stream the data is ordered on */
} hvd_bk_ctx;

typedef struct hvd_backend {
  const char *name;           /* "MPI", "shared memory", "NCCL", "MPI staged" */
  const char *allreduce_span; /* timeline phase names */
  const char *broadcast_span;
  int device;                 /* 1: the buffers are device memory */
  /* In place, n same-dtype entries; op one of SUM/MIN/MAX/PROD (never AVG:
   * an average is a sum whose entries have divisor > 1, divided after).
   * Host backends take any entries.  Device backends take the regions of one
   * fused device buffer, in order (bytes between entries are padding and are
   * reduced too), with divisors that `divides` accepted (else 1: the caller
   * divides in its copy out). */
  int (*allreduce)(const hvd_fuse_entry *e, size_t n, hvd_dtype_t dt, hvd_op_t op, const hvd_bk_ctx *c,
                   hvd_phase_times *t, char *err, size_t errlen);
  /* count elements from `root` (its rank in ctx->comm) to every member. */
  int (*broadcast)(void *buf, size_t count, hvd_dtype_t dt, int root, const hvd_bk_ctx *c, char *err,
                   size_t errlen);
  /* Host only (NULL elsewhere): rows[m] rows of row_elems elements from
   * member m, gathered in member order into out (sum(rows) rows). */
  int (*allgather)(const void *in, void *out, const int64_t *rows, size_t row_elems, hvd_dtype_t dt,
                   const hvd_bk_ctx *c, char *err, size_t errlen);
  /* Device only: 1 when allreduce should divide the averages itself (NCCL:
   * in the reduction, when every entry averages over all ranks of the job;
   * staged: on the host, when there is no copy kernel); 0: the caller passes
   * divisors of 1 and divides on the way out of the fusion buffer. */
  int (*divides)(hvd_dtype_t dt, int all_over_size);
  /* Asynchronous errors since the last call (NULL: none can happen). */
  int (*check_async)(char *err, size_t errlen);
  /* At the engine's end, every rank at the same point (NULL: nothing). */
  void (*stop)(void);
  /* The ranks changed (elastic: some died): what was made over the old
   * ones is dropped without waiting for them (a member may be dead), and
   * the next operation makes it over the new ones (NULL: nothing made). */
  void (*reset)(void);
} hvd_backend;

/* The device backends' names, shared by their real and refusing versions. */
#define HVD_BACKEND_NCCL_NAMES .name = "NCCL", .allreduce_span = "NCCL_ALLREDUCE", .broadcast_span = "NCCL_BCAST", .device = 1
#define HVD_BACKEND_STAGED_NAMES \
  .name = "MPI staged", .allreduce_span = "MPI_ALLREDUCE_STAGED", .broadcast_span = "MPI_BCAST_STAGED", .device = 1

extern const hvd_backend hvd_backend_mpi, hvd_backend_shm, hvd_backend_nccl, hvd_backend_staged;

#endif
