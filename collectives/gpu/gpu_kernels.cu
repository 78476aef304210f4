// Device kernel of the GPU path, built by nvcc into a fatbin that the
// library embeds and loads through the driver API (gpu.c).  One kernel moves
// up to HVD_GPU_DESCS tensors into or out of the fusion buffer: block row y
// handles descriptor y.  A move with no cast and no division is a byte copy
// (16-byte vectors when both ends and the length allow); otherwise each
// element goes through hvd_elem_move (elem.h), the same code the CPU path
// and the unit tests use.
#include <stdint.h>

#include "../transports/elem.h"
#include "gpu_desc.h"

__device__ __forceinline__ unsigned elem_size(int dt) {
  switch (dt) {
  case HVD_E_F64:
  case HVD_E_I64: return 8;
  case HVD_E_F16:
  case HVD_E_BF16: return 2;
  case HVD_E_U8: return 1;
  default: return 4;
  }
}

extern "C" __global__ void __launch_bounds__(HVD_GPU_THREADS) hvd_move(const hvd_gpu_move_args a) {
  const hvd_gpu_desc &e = a.d[blockIdx.y];
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (a.src_dt == a.dst_dt && e.divisor == 1) {
    if (e.src == e.dst) return;
    const unsigned long long bytes = e.count * elem_size(a.src_dt);
    const uintptr_t s = (uintptr_t)e.src, d = (uintptr_t)e.dst;
    if (((s | d | bytes) & 15) == 0) {
      const uint4 *src = (const uint4 *)e.src;
      uint4 *dst = (uint4 *)e.dst;
      for (unsigned long long i = tid; i < bytes / 16; i += stride) dst[i] = src[i];
    } else if (((s | d | bytes) & 3) == 0) {
      const uint32_t *src = (const uint32_t *)e.src;
      uint32_t *dst = (uint32_t *)e.dst;
      for (unsigned long long i = tid; i < bytes / 4; i += stride) dst[i] = src[i];
    } else {
      const unsigned char *src = (const unsigned char *)e.src;
      unsigned char *dst = (unsigned char *)e.dst;
      for (unsigned long long i = tid; i < bytes; i += stride) dst[i] = src[i];
    }
    return;
  }
  for (unsigned long long i = tid; i < e.count; i += stride)
    hvd_elem_move(e.dst, a.dst_dt, i, e.src, a.src_dt, i, e.divisor, e.inv);
}
