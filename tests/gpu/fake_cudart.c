/* A stand-in libcudart.so.13 for testing the runtime hooks without a GPU:
 * the entry points the shim interposes, recording what reached them. */
#include <stddef.h>

typedef struct {
  unsigned x, y, z;
} dim3;

int fake_calls;
void *fake_last_stream;
unsigned fake_last_grid_x;

static int launch(dim3 grid, void *stream) {
  fake_calls++;
  fake_last_stream = stream;
  fake_last_grid_x = grid.x;
  return 0;
}

int cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shmem, void *stream) {
  (void)func, (void)block, (void)args, (void)shmem;
  return launch(grid, stream);
}

/* nvcc 13's launch of kernel<<<...>>> (a kernel handle for the function) */
int __cudaLaunchKernel(const void *kernel, dim3 grid, dim3 block, void **args, size_t shmem, void *stream) {
  (void)kernel, (void)block, (void)args, (void)shmem;
  return launch(grid, stream);
}

int __cudaLaunchKernel_ptsz(const void *kernel, dim3 grid, dim3 block, void **args, size_t shmem, void *stream) {
  (void)kernel, (void)block, (void)args, (void)shmem;
  return launch(grid, stream);
}

int cudaLaunchKernelExC(const void *config, const void *func, void **args) {
  (void)config, (void)func, (void)args;
  fake_calls++;
  return 0;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) {
  (void)dst, (void)src, (void)n, (void)kind;
  fake_calls++;
  fake_last_stream = stream;
  return 7; /* an error code, passed back unchanged */
}

int cudaMemsetAsync(void *dst, int v, size_t n, void *stream) {
  (void)dst, (void)v, (void)n;
  fake_calls++;
  fake_last_stream = stream;
  return 0;
}
