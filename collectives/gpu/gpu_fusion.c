/* The device fusion buffer and its copy kernel.  The kernel
 * (gpu_kernels.cu, built by nvcc into a fatbin embedded in the library) is
 * loaded through the driver API into the runtime's primary context; one
 * launch moves up to HVD_GPU_DESCS tensors (descriptors passed by value as
 * the kernel's parameter), casting and dividing on the way.  Without the
 * kernel (a build without nvcc, or a driver that refuses it) a move is one
 * cudaMemcpyAsync, and what needs the kernel (a cast, a division) is refused
 * by the caller with hvd_gpu_fusion_why().  Engine thread only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <config.h> /* configure's (the build tree's top, -I.) */
#include "../../base/log.h"
#include "../transports/dtype.h"
#include "gpu_desc.h"
#include "gpu_internal.h"

#ifdef HVD_HAVE_GPU_KERNELS
extern const unsigned char hvd_gpu_fatbin[];
#endif

/* Driver API, for the kernel only (plain C types: no cuda.h macros). */
typedef int (*cu_load_fn)(void **module, const void *image);
typedef int (*cu_getfn_fn)(void **fn, void *module, const char *name);
typedef int (*cu_launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shmem, void *stream, void **params, void **extra);
typedef int (*cu_errstr_fn)(int rc, const char **s);

static struct {
  int tried;
  void *k_move;
  cu_launch_fn launch;
  cu_errstr_fn errstr;
  char why[256];
  char *fusion;
  size_t fusion_cap;
} F;

struct hvd_gpu_moves {
  hvd_gpu_move_args a;
};
static hvd_gpu_moves moves;

int hvd_gpu_has_kernels(void) {
#ifdef HVD_HAVE_GPU_KERNELS
  return 1;
#else
  return 0;
#endif
}

static const char *driver_msg(int rc) {
  const char *s = NULL;
  if (F.errstr) F.errstr(rc, &s);
  return s ? s : "unknown driver error";
}

int hvd_gpu_kernels(void) {
  if (F.tried) return F.k_move != NULL;
  F.tried = 1;
#ifdef HVD_HAVE_GPU_KERNELS
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(F.why, sizeof F.why, "the CUDA driver (libcuda.so.1) cannot be opened");
    return 0;
  }
  cu_load_fn load = (cu_load_fn)dlsym(h, "cuModuleLoadData");
  cu_getfn_fn getfn = (cu_getfn_fn)dlsym(h, "cuModuleGetFunction");
  F.launch = (cu_launch_fn)dlsym(h, "cuLaunchKernel");
  F.errstr = (cu_errstr_fn)dlsym(h, "cuGetErrorString");
  void *mod = NULL;
  int rc = load && getfn && F.launch ? load(&mod, hvd_gpu_fatbin) : -1;
  if (rc == 0) rc = getfn(&F.k_move, mod, "hvd_move");
  if (rc != 0) {
    snprintf(F.why, sizeof F.why, "loading the device kernels failed: %s",
             F.launch ? driver_msg(rc) : "driver API missing");
    F.k_move = NULL;
    HVD_WARN("%s; falling back to one copy per tensor", F.why);
  }
#else
  snprintf(F.why, sizeof F.why, "this build has no device kernels (configure found no nvcc)");
#endif
  return F.k_move != NULL;
}

const char *hvd_gpu_fusion_why(void) { return F.why; }

int hvd_gpu_ensure(char **buf, size_t *cap, size_t need, int pinned, char *err, size_t errlen) {
  if (need <= *cap) return 0;
  if (*buf) {
    p_cudaStreamSynchronize(hvd_gpu.stream); /* the old buffer may still be in use */
    pinned ? p_cudaFreeHost(*buf) : p_cudaFree(*buf);
    *buf = NULL;
    *cap = 0;
  }
  cudaError_t rc = pinned ? p_cudaHostAlloc((void **)buf, need, cudaHostAllocPortable) : p_cudaMalloc((void **)buf, need);
  HVD_CHECK(rc == cudaSuccess, "allocating a %s buffer of %zu bytes failed: %s",
            pinned ? "pinned host" : "device fusion", need, hvd_cuda_msg(rc));
  *cap = need;
  return 0;
}

char *hvd_gpu_fusion_buffer(size_t bytes, char *err, size_t errlen) {
  return hvd_gpu_ensure(&F.fusion, &F.fusion_cap, bytes ? bytes : 1, 0, err, errlen) == 0 ? F.fusion : NULL;
}

void hvd_gpu_fusion_free(void) {
  if (F.fusion) p_cudaFree(F.fusion);
  F.fusion = NULL;
  F.fusion_cap = 0;
}

hvd_gpu_moves *hvd_gpu_moves_begin(hvd_dtype_t src_dt, hvd_dtype_t dst_dt) {
  moves.a.n = 0;
  moves.a.src_dt = (int)src_dt;
  moves.a.dst_dt = (int)dst_dt;
  return &moves;
}

int hvd_gpu_moves_flush(hvd_gpu_moves *m, char *err, size_t errlen) {
  hvd_gpu_move_args *a = &m->a;
  if (a->n == 0) return 0;
  unsigned long long most = 0;
  for (int i = 0; i < a->n; i++)
    if (a->d[i].count > most) most = a->d[i].count;
  unsigned blocks = (unsigned)(most / (HVD_GPU_THREADS * 8) + 1);
  if (blocks > 256) blocks = 256;
  void *params[] = {a};
  int rc = F.launch(F.k_move, blocks, (unsigned)a->n, 1, HVD_GPU_THREADS, 1, 1, 0, hvd_gpu.stream, params, NULL);
  a->n = 0;
  HVD_CHECK(rc == 0, "launching the fusion copy kernel failed: %s", driver_msg(rc));
  return 0;
}

int hvd_gpu_move(hvd_gpu_moves *m, const void *src, void *dst, size_t count, int divisor, char *err, size_t errlen) {
  hvd_gpu_move_args *a = &m->a;
  if (!F.k_move) {
    HVD_CHECK(a->src_dt == a->dst_dt && divisor == 1, "internal: a cast or a division without the device kernels");
    if (src == dst) return 0;
    HVD_CHECK_CUDA(p_cudaMemcpyAsync(dst, src, count * hvd_dtype_size((hvd_dtype_t)a->src_dt),
                                     cudaMemcpyDeviceToDevice, hvd_gpu.stream), "copy through the fusion buffer");
    return 0;
  }
  if (a->n == HVD_GPU_DESCS && hvd_gpu_moves_flush(m, err, errlen) != 0) return -1;
  hvd_gpu_desc *d = &a->d[a->n++];
  d->src = src;
  d->dst = dst;
  d->count = count;
  d->divisor = divisor;
  d->inv = 1.0f / (float)divisor;
  return 0;
}

/* Benchmark hook (see gpu.h). */
int hvd_gpu_bench_copy_in(void *const *ptrs, const size_t *bytes, int n, int iters, double *kernel_gbs,
                          double *memcpy_gbs) {
  char err[512];
  if (hvd_gpu_engine_setup(err, sizeof err) != 0) {
    HVD_ERROR("hvd_gpu_bench_copy_in: %s", err);
    return -1;
  }
  int kernels = hvd_gpu_kernels();
  size_t total = 0;
  for (int k = 0; k < n; k++) total += HVD_GPU_ALIGN(bytes[k]);
  char *fusion = hvd_gpu_fusion_buffer(total, err, sizeof err);
  if (!fusion) {
    HVD_ERROR("hvd_gpu_bench_copy_in: %s", err);
    return -1;
  }
  cudaEvent_t a, b;
  p_cudaEventCreate(&a);
  p_cudaEventCreate(&b);
  for (int pass = 0; pass < 2; pass++) { /* 0: the engine's copy-in, 1: one D2D cudaMemcpyAsync per tensor */
    if (pass == 0 && !kernels) {
      *kernel_gbs = 0;
      continue;
    }
    for (int rep = -1; rep < iters; rep++) { /* rep -1: warm-up */
      if (rep == 0) p_cudaEventRecord(a, hvd_gpu.stream);
      hvd_gpu_moves *m = hvd_gpu_moves_begin(HVD_UINT8, HVD_UINT8);
      size_t off = 0;
      for (int k = 0; k < n; k++) {
        if (pass == 0) hvd_gpu_move(m, ptrs[k], fusion + off, bytes[k], 1, err, sizeof err);
        else p_cudaMemcpyAsync(fusion + off, ptrs[k], bytes[k], cudaMemcpyDeviceToDevice, hvd_gpu.stream);
        off += HVD_GPU_ALIGN(bytes[k]);
      }
      if (pass == 0 && hvd_gpu_moves_flush(m, err, sizeof err) != 0) return -1;
    }
    p_cudaEventRecord(b, hvd_gpu.stream);
    p_cudaEventSynchronize(b);
    float ms = 0;
    p_cudaEventElapsedTime(&ms, a, b);
    double gbs = ms > 0 ? (double)total * iters / (ms * 1e-3) / 1e9 : 0;
    *(pass == 0 ? kernel_gbs : memcpy_gbs) = gbs;
  }
  p_cudaEventDestroy(a);
  p_cudaEventDestroy(b);
  return 0;
}
