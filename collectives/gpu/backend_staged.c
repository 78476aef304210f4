/* hvd_backend_staged (backend.h): device buffers reduced by MPI through
 * pinned host memory: one copy of the fused span to the pinned buffer (the
 * engine thread waits for it), the MPI backend's allreduce or broadcast on
 * it, the averages divided on the host, one copy back (asynchronous: the
 * engine stream orders the next use of the pinned buffer after it).  For
 * ranks that share a GPU, and for MPIs that are not CUDA-aware. */
#include "../transports/backend_mpi.h"
#include "../transports/dtype.h"
#include "gpu_internal.h"

static struct {
  char *host;
  size_t cap;
} S;

static int stage_out(const void *dev, size_t bytes, const hvd_bk_ctx *c, char *err, size_t errlen) {
  if (hvd_gpu_ensure(&S.host, &S.cap, bytes ? bytes : 1, 1, err, errlen) != 0) return -1;
  HVD_CHECK_CUDA(p_cudaMemcpyAsync(S.host, dev, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)c->stream),
                 "copying to pinned host memory");
  HVD_CHECK_CUDA(p_cudaStreamSynchronize((cudaStream_t)c->stream), "copying to pinned host memory");
  return 0;
}

static int stage_in(void *dev, size_t bytes, const hvd_bk_ctx *c, char *err, size_t errlen) {
  HVD_CHECK_CUDA(p_cudaMemcpyAsync(dev, S.host, bytes, cudaMemcpyHostToDevice, (cudaStream_t)c->stream),
                 "copying back from pinned host memory");
  return 0;
}

/* The host divides (each entry's region, after the sum) only when there is
 * no copy kernel to do it on the device on the way out. */
static int divides(hvd_dtype_t dt, int all_over_size) {
  (void)dt, (void)all_over_size;
  return !hvd_gpu_kernels();
}

static int allreduce(const hvd_fuse_entry *e, size_t n, hvd_dtype_t dt, hvd_op_t op, const hvd_bk_ctx *c,
                     hvd_phase_times *t, char *err, size_t errlen) {
  if (n == 0) return 0;
  char *dev = e[0].ptr;
  size_t bytes = (size_t)(e[n - 1].ptr + e[n - 1].bytes - dev), es = hvd_dtype_size(dt);
  if (stage_out(dev, bytes, c, err, errlen) != 0) return -1;
  hvd_fuse_entry whole = {S.host, bytes, n == 1 ? e[0].divisor : 1};
  if (hvd_backend_mpi.allreduce(&whole, 1, dt, op, c, t, err, errlen) != 0) return -1; /* in place, by pieces */
  for (size_t k = 0; n > 1 && k < n; k++)
    if (e[k].divisor != 1) {
      char *h = S.host + (e[k].ptr - dev);
      hvd_scale_copy(h, h, e[k].bytes / es, dt, e[k].divisor);
    }
  return stage_in(dev, bytes, c, err, errlen);
}

static int broadcast(void *buf, size_t count, hvd_dtype_t dt, int root, const hvd_bk_ctx *c, char *err,
                     size_t errlen) {
  size_t bytes = count * hvd_dtype_size(dt);
  if (stage_out(buf, bytes, c, err, errlen) != 0) return -1;
  if (hvd_backend_mpi.broadcast(S.host, bytes, HVD_UINT8, root, c, err, errlen) != 0) return -1;
  return stage_in(buf, bytes, c, err, errlen);
}

static void stop(void) {
  if (S.host) p_cudaFreeHost(S.host);
  S.host = NULL;
  S.cap = 0;
}

const hvd_backend hvd_backend_staged = {
    HVD_BACKEND_STAGED_NAMES,
    .allreduce = allreduce,
    .broadcast = broadcast,
    .divides = divides,
    .stop = stop,
};
