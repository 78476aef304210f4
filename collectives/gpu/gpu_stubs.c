/* The GPU path in a build without the CUDA headers (Makefile.am compiles
 * this file instead of gpu_load.c, gpu_events.c, gpu_fusion.c, gpu.c and
 * the device backends): the same interface, every device request refused
 * with the reason, and device backends that refuse too. */
#include <stdio.h>

#include "../../base/check.h"
#include "gpu.h"

static const char no_cuda[] = "this build of hvdshim has no GPU path (configure found no CUDA headers; rebuild "
                              "with --with-cuda=DIR)";

int hvd_gpu_ready(char *err, size_t errlen) { return hvd_fail(err, errlen, "%s", no_cuda); }
int hvd_gpu_pointer_device(const void *ptr) {
  (void)ptr;
  return -1;
}
int hvd_gpu_mark_ready(int device, void *stream, hvd_gpu_event *share, hvd_gpu_event **ev, char *err, size_t errlen) {
  (void)device, (void)stream, (void)share;
  *ev = NULL;
  return hvd_gpu_ready(err, errlen);
}
void hvd_gpu_event_hold(hvd_gpu_event *ev, int n) { (void)ev, (void)n; }
void hvd_gpu_event_put(hvd_gpu_event *ev) { (void)ev; }
void hvd_gpu_consume(hvd_gpu_event *ev, void *stream) { (void)ev, (void)stream; }
int hvd_gpu_allreduce(const hvd_gpu_item *it, size_t n, hvd_dtype_t dtype, hvd_op_t op, int all_avg_over_size,
                      const hvd_backend *b, const hvd_bk_ctx *ctx, hvd_gpu_event **done, hvd_phase_times *t,
                      char *err, size_t errlen) {
  (void)it, (void)n, (void)dtype, (void)op, (void)all_avg_over_size, (void)b, (void)ctx, (void)t;
  *done = NULL;
  return hvd_gpu_ready(err, errlen);
}
int hvd_gpu_broadcast(const hvd_gpu_item *it, hvd_dtype_t dtype, int root, const hvd_backend *b,
                      const hvd_bk_ctx *ctx, hvd_gpu_event **done, char *err, size_t errlen) {
  (void)it, (void)dtype, (void)root, (void)b, (void)ctx;
  *done = NULL;
  return hvd_gpu_ready(err, errlen);
}
void *hvd_gpu_identity(size_t count, hvd_dtype_t dtype, hvd_op_t op, char *err, size_t errlen) {
  (void)count, (void)dtype, (void)op;
  hvd_gpu_ready(err, errlen);
  return NULL;
}
void hvd_gpu_free(void *p) { (void)p; }
int hvd_gpu_bench_copy_in(void *const *ptrs, const size_t *bytes, int n, int iters, double *kernel_gbs,
                          double *memcpy_gbs) {
  (void)ptrs, (void)bytes, (void)n, (void)iters, (void)kernel_gbs, (void)memcpy_gbs;
  return -1;
}
void hvd_gpu_engine_stop(const hvd_backend *b) { (void)b; }
const hvd_backend *hvd_gpu_pick(MPI_Comm comm, char *err, size_t errlen) {
  (void)comm;
  hvd_gpu_ready(err, errlen);
  return NULL;
}
void hvd_gpu_configure(int rank, int size, int compression) { (void)rank, (void)size, (void)compression; }
void hvd_gpu_members_changed(const hvd_backend *b, int rank, int size) { (void)b, (void)rank, (void)size; }
void hvd_gpu_describe(char *out, size_t n) { snprintf(out, n, "%s", no_cuda); }

static int refuse_allreduce(const hvd_fuse_entry *e, size_t n, hvd_dtype_t dt, hvd_op_t op, const hvd_bk_ctx *c,
                            hvd_phase_times *t, char *err, size_t errlen) {
  (void)e, (void)n, (void)dt, (void)op, (void)c, (void)t;
  return hvd_gpu_ready(err, errlen);
}
static int refuse_broadcast(void *buf, size_t count, hvd_dtype_t dt, int root, const hvd_bk_ctx *c, char *err,
                            size_t errlen) {
  (void)buf, (void)count, (void)dt, (void)root, (void)c;
  return hvd_gpu_ready(err, errlen);
}
static int no_division(hvd_dtype_t dt, int all_over_size) {
  (void)dt, (void)all_over_size;
  return 0;
}
const hvd_backend hvd_backend_nccl = {HVD_BACKEND_NCCL_NAMES, .allreduce = refuse_allreduce,
                                      .broadcast = refuse_broadcast, .divides = no_division};
const hvd_backend hvd_backend_staged = {HVD_BACKEND_STAGED_NAMES, .allreduce = refuse_allreduce,
                                        .broadcast = refuse_broadcast, .divides = no_division};
