/* A stand-in framework library linked against libcudart.so.13 (as
 * libtorch_cuda is), loaded with RTLD_LOCAL by hook_probe. */
#include <stddef.h>

typedef struct {
  unsigned x, y, z;
} dim3;
int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, void *stream);
int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream);

int fw_step(void *stream) {
  dim3 g = {123, 1, 1}, b = {256, 1, 1};
  int rc = cudaLaunchKernel((const void *)fw_step, g, b, NULL, 0, stream);
  return rc * 100 + cudaMemcpyAsync(NULL, NULL, 0, 3, stream);
}
