/* The argument of the device copy kernel (gpu_kernels.cu), shared with its
 * launcher (gpu.c): up to HVD_GPU_DESCS moves passed by value as one kernel
 * parameter (under the 4 KiB limit), so no descriptor buffer has to be
 * copied to the device and kept alive. */
#ifndef HVD_GPU_DESC_H
#define HVD_GPU_DESC_H

#define HVD_GPU_DESCS 120
#define HVD_GPU_THREADS 256

/* dst[i] = src[i] / divisor (cast from src_dt to dst_dt), i < count. */
typedef struct {
  const void *src;
  void *dst;
  unsigned long long count;
  int divisor;
  float inv; /* 1 / divisor */
} hvd_gpu_desc;

typedef struct {
  hvd_gpu_desc d[HVD_GPU_DESCS];
  int n, src_dt, dst_dt; /* dtypes: hvd_dtype_t values */
} hvd_gpu_move_args;

#endif
