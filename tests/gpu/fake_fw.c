/* A stand-in framework library linked against libcudart.so.13 (as
 * libtorch_cuda is), loaded with RTLD_LOCAL by hook_probe. */
#include <stddef.h>

typedef struct {
  unsigned x, y, z;
} dim3;
int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, void *stream);
int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream);
int __cudaLaunchKernel(const void *kernel, dim3 grid, dim3 block, void **args, size_t shmem, void *stream);
int __cudaLaunchKernel_ptsz(const void *kernel, dim3 grid, dim3 block, void **args, size_t shmem, void *stream);

int fw_step(void *stream) {
  dim3 g = {123, 1, 1}, b = {256, 1, 1};
  int rc = cudaLaunchKernel((const void *)fw_step, g, b, NULL, 0, stream);
  return rc * 100 + cudaMemcpyAsync(NULL, NULL, 0, 3, stream);
}

/* what nvcc 13 compiles kernel<<<grid, block, 0, stream>>> into; then the
 * same with --default-stream per-thread and stream 0 */
int fw_nvcc13(void *stream, int per_thread) {
  dim3 g = {7, 1, 1}, b = {32, 1, 1};
  return per_thread ? __cudaLaunchKernel_ptsz((const void *)fw_nvcc13, g, b, NULL, 0, NULL)
                    : __cudaLaunchKernel((const void *)fw_nvcc13, g, b, NULL, 0, stream);
}
