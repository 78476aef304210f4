/* The CUDA runtime, resolved at run time.  Nothing CUDA is linked: the
 * runtime is the libcudart the process already loaded (a PyTorch wheel
 * brings its own), found among the loaded objects, else the system's
 * (libcudart.so.13, .12, .11.0, .so).  hvd_gpu_ready decides once. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "../../base/dlload.h"
#include "gpu_internal.h"

#define DEFINE(f) __typeof__(f) *p_##f;
HVD_CUDART_FUNCS(DEFINE)

hvd_gpu_shared hvd_gpu = {.mu = PTHREAD_MUTEX_INITIALIZER, .device = -1};

static struct {
  int tried, ok;
  char why[512];
} L;

const char *hvd_cuda_msg(cudaError_t rc) {
  const char *s = p_cudaGetErrorString ? p_cudaGetErrorString(rc) : NULL;
  return s ? s : "unknown CUDA error";
}

static int load_runtime(char *err, size_t errlen) {
  static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so",
                                      NULL};
  char *path = hvd_gpu.cudart_path;
  void *h = hvd_dl_open("libcudart.so", names, path, sizeof hvd_gpu.cudart_path);
  HVD_CHECK(h, "no CUDA runtime: the program loaded no libcudart and none of libcudart.so.13, .12, or .11.0 is on "
            "the library path (install the CUDA runtime or add its lib directory to LD_LIBRARY_PATH)");
#define RESOLVE(f) \
  HVD_CHECK((p_##f = (__typeof__(f) *)dlsym(h, #f)), "the CUDA runtime %s lacks %s (too old: CUDA 11 or later is needed)", path, #f);
  HVD_CUDART_FUNCS(RESOLVE)
  p_cudaRuntimeGetVersion(&hvd_gpu.runtime_version);
  int n = 0;
  cudaError_t rc = p_cudaGetDeviceCount(&n);
  HVD_CHECK(rc == cudaSuccess, "CUDA runtime %s found, but no usable GPU: %s", path, hvd_cuda_msg(rc));
  HVD_CHECK(n > 0, "CUDA runtime %s found, but it shows no GPU", path);
  return 0;
}

int hvd_gpu_ready(char *err, size_t errlen) {
  pthread_mutex_lock(&hvd_gpu.mu);
  if (!L.tried) {
    L.tried = 1;
    L.ok = load_runtime(L.why, sizeof L.why) == 0;
  }
  int ok = L.ok;
  if (!ok) snprintf(err, errlen, "%s", L.why);
  pthread_mutex_unlock(&hvd_gpu.mu);
  return ok ? 0 : -1;
}

int hvd_gpu_pointer_device(const void *ptr) {
  char err[8];
  if (!ptr || hvd_gpu_ready(err, sizeof err) != 0) return -1;
  struct cudaPointerAttributes a = {0};
  if (p_cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    p_cudaGetLastError(); /* clear the sticky-free error state of this call */
    return -1;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
}
