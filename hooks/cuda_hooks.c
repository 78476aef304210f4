/* CUDA runtime hooks.
 *
 * Pinning.  In the constructor of an armed rank (before main, so before any
 * CUDA initialization), HVDSHIM_PIN_GPU=1 maps the local rank into
 * CUDA_VISIBLE_DEVICES: an entry of the list the user already set, else the
 * local rank modulo the GPUs the driver exposes (counted from /proc, without
 * starting CUDA).  An unmodified `model.cuda()` or `cuda:0` then lands on the
 * rank's own GPU.  Without a driver nothing is set.
 *
 * Stream tracking.  The exported cudaLaunchKernel, cudaLaunchKernelExC,
 * cudaMemcpyAsync and cudaMemsetAsync, and __cudaLaunchKernel and its _ptsz
 * form (what nvcc 13 compiles `kernel<<<...>>>` into), record, per thread,
 * the stream the
 * caller launched on, then jump to the runtime's own function.  That stream
 * is what a native hook (a device pointer handed to a hooked function) orders
 * the engine's work after.  The PyTorch adapter passes its stream
 * explicitly.  The shim's own CUDA calls go through the table in
 * collectives/gpu.c, never through these symbols.  In every process (dormant
 * included) the hooks only pass through.
 *
 * Finding the real function: the runtime a framework loads is often not in
 * the global scope (a Python extension pulls libcudart in with RTLD_LOCAL),
 * where dlsym(RTLD_NEXT) cannot see it.  So the loaded objects are searched
 * for a libcudart (collectives/dlload.c, shared with the GPU path's loader)
 * and the symbol is taken from it. */
#define _GNU_SOURCE
#include "cuda_hooks.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/config.h"
#include "../base/log.h"
#include "../base/role.h"
#include "../base/dlload.h"
#include "../base/libc.h"

/* ------------------------------------------------------------------ pinning */

int hvd_pin_pick(const char *user, int ngpus, int local_rank, int local_size, char *out, size_t n, int *shared) {
  *shared = 0;
  if (local_rank < 0) return -1;
  if (user && *user) {
    int count = 1;
    for (const char *p = user; *p; p++) count += *p == ',';
    int want = local_rank % count;
    const char *p = user;
    for (int i = 0; i < want; i++) p = strchr(p, ',') + 1;
    size_t len = strcspn(p, ",");
    while (len > 0 && (*p == ' ')) p++, len--;
    while (len > 0 && p[len - 1] == ' ') len--;
    if (len == 0 || len >= n) return -1;
    memcpy(out, p, len);
    out[len] = 0;
    *shared = local_size > count;
    return 0;
  }
  if (ngpus <= 0) return -1;
  snprintf(out, n, "%d", local_rank % ngpus);
  *shared = local_size > ngpus;
  return 0;
}

int hvd_pin_count_gpus(void) {
  DIR *d = hvd_libc()->opendir("/proc/driver/nvidia/gpus");
  if (!d) return 0;
  int n = 0;
  for (struct dirent *e; (e = hvd_libc()->readdir(d));)
    if (e->d_name[0] != '.') n++;
  hvd_libc()->closedir(d);
  return n;
}

void hvd_cuda_arm(int local_rank) {
  if (!hvd_cfg_int(HVD_CFG_PIN_GPU)) return;
  int local_size = hvd_env_local_size();
  if (local_size < 0) local_size = 0;
  const char *user = getenv("CUDA_VISIBLE_DEVICES");
  int ngpus = user && *user ? 0 : hvd_pin_count_gpus();
  char pick[256];
  int shared = 0;
  if (hvd_pin_pick(user, ngpus, local_rank, local_size, pick, sizeof pick, &shared) != 0) {
    HVD_DEBUG("GPU pinning: nothing to pin (%s)", user && *user ? "unusable CUDA_VISIBLE_DEVICES" : "no NVIDIA GPU");
    return;
  }
  if (shared && local_rank == 0)
    HVD_INFO("GPU pinning: %d local ranks share %d GPU(s); NCCL needs one GPU per rank, so GPU tensors go "
             "through MPI (HVDSHIM_GPU_OPERATIONS=auto or MPI)", local_size, user && *user ? local_size - 1 : ngpus);
  HVD_DEBUG("GPU pinning: CUDA_VISIBLE_DEVICES=%s (local rank %d%s%s)", pick, local_rank,
            user && *user ? ", from the list " : "", user && *user ? user : "");
  setenv("CUDA_VISIBLE_DEVICES", pick, 1);
}

/* ------------------------------------------------------------------ stream tracking */

/* Per thread: a kernel launch costs two thread-local stores, no shared
 * cache line. */
static __thread void *thread_stream;
static __thread unsigned long hook_calls;

void *hvd_cuda_thread_stream(void) { return thread_stream; }
unsigned long hvd_cuda_hook_calls(void) { return hook_calls; }

/* The runtime's own `name`: from the libcudart loaded in this process, else
 * the next definition in the global scope, else any definition that is not
 * this library's. */
static void *real_symbol(const char *name) {
  char path[4096];
  void *fn = NULL;
  if (hvd_dl_find_loaded("libcudart.so", path, sizeof path)) {
    void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (h) {
      fn = dlsym(h, name);
      dlclose(h); /* NOLOAD took a reference; the object stays loaded */
    }
  }
  if (!fn) fn = dlsym(RTLD_NEXT, name);
  if (!fn) { /* an executable exporting its own (static) runtime comes before us */
    void *d = dlsym(RTLD_DEFAULT, name);
    Dl_info a, b;
    if (d && !(dladdr(d, &a) && dladdr((void *)hvd_cuda_hook_calls, &b) && a.dli_fbase == b.dli_fbase)) fn = d;
  }
  if (!fn) { /* the program's call would not have linked without us: refuse it, once said, and go on */
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
      HVD_ERROR("%s was called, but no CUDA runtime (libcudart) in this process defines it; returning "
                "cudaErrorInitializationError", name);
  }
  return fn;
}

/* cudaErrorInitializationError: what a hook returns when no runtime exists. */
enum { HVD_CUDA_NO_RUNTIME = 3 };

#define RESOLVE(var, name)                                                              \
  do {                                                                                  \
    if (!__atomic_load_n(&var, __ATOMIC_ACQUIRE))                                       \
      __atomic_store_n(&var, (__typeof__(var))real_symbol(name), __ATOMIC_RELEASE);     \
  } while (0)

/* The signatures below use only plain C types (a stream is a pointer, dim3
 * three unsigned ints, enums ints), so no CUDA header is needed. */
typedef struct {
  unsigned x, y, z;
} hvd_dim3;

typedef int (*launch_fn)(const void *, hvd_dim3, hvd_dim3, void **, size_t, void *);
typedef int (*launch_ex_fn)(const void *, const void *, void **);
typedef int (*memcpy_async_fn)(void *, const void *, size_t, int, void *);
typedef int (*memset_async_fn)(void *, int, size_t, void *);
static launch_fn real_launch, real_launch13, real_launch13_ptsz;
static launch_ex_fn real_launch_ex;
static memcpy_async_fn real_memcpy_async;
static memset_async_fn real_memset_async;

static void note(void *stream) {
  thread_stream = stream;
  hook_calls++;
}

__attribute__((visibility("default"))) int cudaLaunchKernel(const void *func, hvd_dim3 grid, hvd_dim3 block,
                                                             void **args, size_t shmem, void *stream) {
  RESOLVE(real_launch, "cudaLaunchKernel");
  if (!real_launch) return HVD_CUDA_NO_RUNTIME;
  note(stream);
  return real_launch(func, grid, block, args, shmem, stream);
}

/* nvcc 13's launch of `kernel<<<grid, block, shmem, stream>>>`: a kernel
 * handle where cudaLaunchKernel takes the function; the _ptsz form (built
 * with --default-stream per-thread) reads stream 0 as the calling thread's
 * default stream, cudaStreamPerThread. */
enum { HVD_CUDA_STREAM_PER_THREAD = 2 };

__attribute__((visibility("default"))) int __cudaLaunchKernel(const void *kernel, hvd_dim3 grid, hvd_dim3 block,
                                                               void **args, size_t shmem, void *stream) {
  RESOLVE(real_launch13, "__cudaLaunchKernel");
  if (!real_launch13) return HVD_CUDA_NO_RUNTIME;
  note(stream);
  return real_launch13(kernel, grid, block, args, shmem, stream);
}

__attribute__((visibility("default"))) int __cudaLaunchKernel_ptsz(const void *kernel, hvd_dim3 grid,
                                                                    hvd_dim3 block, void **args, size_t shmem,
                                                                    void *stream) {
  RESOLVE(real_launch13_ptsz, "__cudaLaunchKernel_ptsz");
  if (!real_launch13_ptsz) return HVD_CUDA_NO_RUNTIME;
  note(stream ? stream : (void *)(uintptr_t)HVD_CUDA_STREAM_PER_THREAD);
  return real_launch13_ptsz(kernel, grid, block, args, shmem, stream);
}

/* cudaLaunchConfig_t: dim3 grid, dim3 block, size_t shmem, cudaStream_t
 * stream, attributes, count. */
typedef struct {
  hvd_dim3 grid, block;
  size_t shmem;
  void *stream;
} hvd_launch_config_head;

__attribute__((visibility("default"))) int cudaLaunchKernelExC(const void *config, const void *func, void **args) {
  RESOLVE(real_launch_ex, "cudaLaunchKernelExC");
  if (!real_launch_ex) return HVD_CUDA_NO_RUNTIME;
  if (config) note(((const hvd_launch_config_head *)config)->stream);
  return real_launch_ex(config, func, args);
}

__attribute__((visibility("default"))) int cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind,
                                                            void *stream) {
  RESOLVE(real_memcpy_async, "cudaMemcpyAsync");
  if (!real_memcpy_async) return HVD_CUDA_NO_RUNTIME;
  note(stream);
  return real_memcpy_async(dst, src, count, kind, stream);
}

__attribute__((visibility("default"))) int cudaMemsetAsync(void *dst, int value, size_t count, void *stream) {
  RESOLVE(real_memset_async, "cudaMemsetAsync");
  if (!real_memset_async) return HVD_CUDA_NO_RUNTIME;
  note(stream);
  return real_memset_async(dst, value, count, stream);
}
