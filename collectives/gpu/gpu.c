/* The GPU path, engine side (see gpu.h and gpu_internal.h for the files).
 *
 * An allreduce group: the engine's stream (non-blocking, highest priority)
 * waits on each tensor's "ready" event; the group is gathered into the
 * device fusion buffer (gpu_fusion.c: one kernel per up to HVD_GPU_DESCS
 * tensors, cast to the wire type when compressing); the device backend
 * (NCCL, or MPI staged through pinned memory) reduces it; the results are
 * scattered back with the cast and the average folded in; a "done" event is
 * recorded, which the handles carry.  A single tensor with no cast is
 * reduced in place.  The top of the GPU path's one-way order
 * (gpu_internal.h): it uses the files below it, none uses it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../base/log.h"
#include "../transports/backend_mpi.h"
#include "../transports/dtype.h"
#include "gpu_internal.h"
#include "../../base/clock.h"

/* Here, at the top: it reports on the runtime, NCCL and the kernels. */
void hvd_gpu_describe(char *out, size_t n) {
  char err[512];
  if (hvd_gpu_ready(err, sizeof err) != 0) {
    snprintf(out, n, "%s", err);
    return;
  }
  char npath[512], nccl[600] = "NCCL not found";
  int nv = hvd_nccl_probe(npath, sizeof npath);
  if (nv) snprintf(nccl, sizeof nccl, "NCCL %d (%s)", nv, npath);
  snprintf(out, n, "CUDA runtime %d.%d (%s); %s; device kernel %s", hvd_gpu.runtime_version / 1000,
           (hvd_gpu.runtime_version % 1000) / 10, hvd_gpu.cudart_path, nccl,
           hvd_gpu_has_kernels() ? "built in" : "not built (no nvcc)");
}

const hvd_backend *hvd_gpu_pick(MPI_Comm comm, char *err, size_t errlen) {
  char who[256] = "";
  int shared = hvd_gpu_sharing(comm, who, sizeof who, err, errlen);
  if (shared < 0) return NULL;
  int nccl = hvd_nccl_probe(NULL, 0) != 0;
  const hvd_backend *b = !shared && nccl ? &hvd_backend_nccl : &hvd_backend_staged;
  if (hvd_gpu.rank == 0)
    HVD_INFO("GPU operations: %s (HVDSHIM_GPU_OPERATIONS=auto: %s)", b == &hvd_backend_nccl ? "NCCL" : "MPI through "
             "pinned host memory", shared ? who : !nccl ? "no NCCL library found" : "every rank has a GPU of its own");
  return b;
}

/* The backend's view of a group (engine thread; freed at the engine's end). */
static hvd_fuse_entry *group;
static size_t group_cap;

/* The engine's stream waits for the group's producers: once per recording
 * that no other in the group covers.  A batch's tensors share one; tensors
 * submitted one at a time by one thread from one stream each have their own,
 * and the latest of them covers the earlier ones (a stream runs in order,
 * and a thread records in program order), so only that one is waited for.
 * Walked from the end: the (thread, stream) pairs whose latest recording is
 * already waited for (a few; past that, every recording is waited for). */
static int wait_ready(const hvd_gpu_item *it, size_t n, char *err, size_t errlen) {
  enum { KEYS = 8 };
  const hvd_gpu_event *seen[KEYS];
  int nseen = 0;
  for (size_t k = n; k-- > 0;) {
    const hvd_gpu_event *r = it[k].ready;
    if (!r) continue;
    int j = 0;
    while (j < nseen && !(seen[j]->by == r->by && seen[j]->stream == r->stream)) j++;
    if (j < nseen && seen[j]->seq >= r->seq) continue; /* this recording (shared) or a later one is waited for */
    HVD_CHECK_CUDA(p_cudaStreamWaitEvent(hvd_gpu.stream, r->ev, 0), "cudaStreamWaitEvent (engine after producer)");
    if (j < nseen) seen[j] = r;
    else if (nseen < KEYS) seen[nseen++] = r;
  }
  return 0;
}

static int record_done(hvd_gpu_event **done, char *err, size_t errlen) {
  HVD_CHECK_CUDA(hvd_gpu_event_new(done), "creating the engine's done event");
  HVD_CHECK_CUDA(p_cudaEventRecord((*done)->ev, hvd_gpu.stream), "cudaEventRecord on the engine stream");
  return 0;
}

static hvd_bk_ctx device_ctx(const hvd_bk_ctx *c) {
  hvd_bk_ctx d = *c;
  d.stream = hvd_gpu.stream;
  return d;
}

int hvd_gpu_allreduce(const hvd_gpu_item *it, size_t n, hvd_dtype_t dt, hvd_op_t op, int all_avg_over_size,
                      const hvd_backend *b, const hvd_bk_ctx *ctx, hvd_gpu_event **done, hvd_phase_times *t,
                      char *err, size_t errlen) {
  *done = NULL;
  memset(t, 0, sizeof *t);
  if (hvd_gpu_engine_setup(err, errlen) != 0) return -1;
  int kernels = hvd_gpu_kernels();
  hvd_dtype_t wdt = dt; /* the type on the wire */
  if (dt == HVD_FLOAT32 && hvd_gpu.compression == 1) wdt = HVD_FLOAT16;
  if (dt == HVD_FLOAT32 && hvd_gpu.compression == 2) wdt = HVD_BFLOAT16;
  size_t ws = hvd_dtype_size(wdt);
  int scaled = 0;
  for (size_t k = 0; k < n; k++) scaled |= it[k].divisor != 1;
  /* Who divides an average: the backend (NCCL's ncclAvg, or the host when
   * staging without kernels), else the copy-out kernel. */
  int bk_divides = scaled && b->divides(wdt, all_avg_over_size);
  int dev_divides = scaled && !bk_divides;
  int in_place = n == 1 && wdt == dt;
  HVD_CHECK(kernels || (wdt == dt && !dev_divides), "%s needs the device kernels: %s",
            wdt != dt ? "HVDSHIM_COMPRESSION" : "averaging over the ranks still running", hvd_gpu_fusion_why());
  if (wait_ready(it, n, err, errlen) != 0) return -1;
  if (n > group_cap) {
    hvd_fuse_entry *grown = realloc(group, n * sizeof *group);
    HVD_CHECK(grown, "out of memory (GPU group of %zu tensors)", n);
    group = grown, group_cap = n;
  }
  hvd_fuse_entry *e = group;
  double t0 = hvd_mono_us(), t1 = t0, t2 = t0;
  char *buf = it[0].ptr;
  hvd_gpu_moves *m = hvd_gpu_moves_begin(dt, wdt);
  if (in_place) {
    e[0] = (hvd_fuse_entry){buf, it[0].count * ws, bk_divides ? it[0].divisor : 1};
  } else {
    size_t total = 0;
    for (size_t k = 0; k < n; k++) total += HVD_GPU_ALIGN(it[k].count * ws);
    if (!(buf = hvd_gpu_fusion_buffer(total, err, errlen))) return -1;
    for (size_t k = 0, off = 0; k < n; off += HVD_GPU_ALIGN(it[k].count * ws), k++) {
      e[k] = (hvd_fuse_entry){buf + off, it[k].count * ws, bk_divides ? it[k].divisor : 1};
      if (hvd_gpu_move(m, it[k].ptr, buf + off, it[k].count, 1, err, errlen) != 0) return -1;
    }
    if (hvd_gpu_moves_flush(m, err, errlen) != 0) return -1;
  }
  t1 = hvd_mono_us();
  hvd_bk_ctx d = device_ctx(ctx);
  hvd_phase_times bt = {0, 0, 0};
  if (b->allreduce(e, n, wdt, op, &d, &bt, err, errlen) != 0) return -1;
  t2 = hvd_mono_us();
  m = hvd_gpu_moves_begin(wdt, dt);
  for (size_t k = 0; k < n; k++) {
    int div = dev_divides ? it[k].divisor : 1;
    if ((!in_place || div != 1) && hvd_gpu_move(m, e[k].ptr, it[k].ptr, it[k].count, div, err, errlen) != 0) return -1;
  }
  if (hvd_gpu_moves_flush(m, err, errlen) != 0 || record_done(done, err, errlen) != 0) return -1;
  t->copy_in_us = t1 - t0, t->reduce_us = t2 - t1, t->copy_out_us = hvd_mono_us() - t2;
  return 0;
}

int hvd_gpu_broadcast(const hvd_gpu_item *it, hvd_dtype_t dt, int root, const hvd_backend *b, const hvd_bk_ctx *ctx,
                      hvd_gpu_event **done, char *err, size_t errlen) {
  *done = NULL;
  if (hvd_gpu_engine_setup(err, errlen) != 0 || wait_ready(it, 1, err, errlen) != 0) return -1;
  hvd_bk_ctx d = device_ctx(ctx);
  if (b->broadcast(it->ptr, it->count, dt, root, &d, err, errlen) != 0) return -1;
  return record_done(done, err, errlen);
}

void *hvd_gpu_identity(size_t count, hvd_dtype_t dt, hvd_op_t op, char *err, size_t errlen) {
  if (hvd_gpu_engine_setup(err, errlen) != 0) return NULL;
  size_t bytes = count * hvd_dtype_size(dt);
  void *host = malloc(bytes ? bytes : 1), *dev = NULL;
  if (!host) {
    hvd_fail(err, errlen, "out of memory (a joined rank's stand-in)");
    return NULL;
  }
  hvd_fill_identity(host, count, dt, op);
  cudaError_t rc = p_cudaMalloc(&dev, bytes ? bytes : 1);
  if (rc == cudaSuccess) rc = p_cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
  free(host);
  if (rc != cudaSuccess) {
    if (dev) p_cudaFree(dev);
    hvd_fail(err, errlen, "a joined rank's GPU stand-in of %zu bytes: %s", bytes, hvd_cuda_msg(rc));
    return NULL;
  }
  return dev;
}

void hvd_gpu_free(void *p) {
  if (p && p_cudaFree) p_cudaFree(p); /* synchronizes the device: the engine stream is done with it */
}

void hvd_gpu_engine_stop(const hvd_backend *b) {
  if (!hvd_gpu.engine_ready) return;
  p_cudaStreamSynchronize(hvd_gpu.stream);
  if (b && b->stop) b->stop();
  hvd_gpu_fusion_free();
  free(group);
  group = NULL;
  group_cap = 0;
  p_cudaStreamDestroy(hvd_gpu.stream);
  hvd_gpu.engine_ready = 0;
}
