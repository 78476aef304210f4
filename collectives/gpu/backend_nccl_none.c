/* hvd_backend_nccl in a build with the CUDA headers but without nccl.h
 * (Makefile.am picks this file): every NCCL operation is refused with the
 * fix. */
#include "gpu_internal.h"

static const char why[] = "this build has no NCCL headers (configure found no nccl.h); set "
                          "HVDSHIM_GPU_OPERATIONS=MPI or rebuild with --with-nccl=DIR";

int hvd_nccl_probe(char *path, size_t pathlen) {
  if (path && pathlen) path[0] = 0;
  return 0;
}

static int allreduce(const hvd_fuse_entry *e, size_t n, hvd_dtype_t dt, hvd_op_t op, const hvd_bk_ctx *c,
                     hvd_phase_times *t, char *err, size_t errlen) {
  (void)e, (void)n, (void)dt, (void)op, (void)c, (void)t;
  return hvd_fail(err, errlen, "%s", why);
}

static int broadcast(void *buf, size_t count, hvd_dtype_t dt, int root, const hvd_bk_ctx *c, char *err,
                     size_t errlen) {
  (void)buf, (void)count, (void)dt, (void)root, (void)c;
  return hvd_fail(err, errlen, "%s", why);
}

static int divides(hvd_dtype_t dt, int all_over_size) {
  (void)dt, (void)all_over_size;
  return 0;
}

const hvd_backend hvd_backend_nccl = {
    HVD_BACKEND_NCCL_NAMES,
    .allreduce = allreduce,
    .broadcast = broadcast,
    .divides = divides,
};
