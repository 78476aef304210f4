/* A legacy CUDA library for tests/gpu/native-cuda.sh: linear regression
 * whose parameters and gradient live in device memory, computed by kernels
 * on a stream of the library's own.  No MPI, no hvdshim: the trainer
 * (cutrain.c) calls these across the library boundary, where a hook spec
 * can reach them.
 *
 *   cumlp_init(dparams, n, seed)     parameters from a seed, on the device
 *   cumlp_batch(index, batch, x, y)  batch `index` of a synthetic data set (host)
 *   cumlp_grad(dparams, dx, dy, batch, n, dgrad)  mean squared error's gradient
 *   cumlp_update(dparams, dgrad, n, lr)           SGD step
 *   cumlp_sync()                     wait for the library's stream
 * The model has CUMLP_IN inputs and a bias: n = CUMLP_IN + 1 parameters. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#define CUMLP_IN 16

extern "C" {
void cumlp_init(float *dparams, long n, unsigned seed);
void cumlp_batch(long index, int batch, float *x, float *y);
void cumlp_grad(const float *dparams, const float *dx, const float *dy, int batch, long n, float *dgrad);
void cumlp_update(float *dparams, const float *dgrad, long n, float lr);
void cumlp_sync(void);
}

static cudaStream_t stream;

static cudaStream_t st(void) {
  if (!stream && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    fprintf(stderr, "cumlp: cudaStreamCreate failed\n");
    return 0;
  }
  return stream;
}

static __host__ __device__ float hash01(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return (float)(k >> 40) / (float)(1 << 24) - 0.5f;
}

__global__ void init_k(float *p, long n, unsigned seed) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) p[i] = 0.2f * hash01(((uint64_t)seed << 32) + (uint64_t)i);
}

/* one block per parameter: dgrad[j] = 2/B sum_b (x_b . w + bias - y_b) x_bj
 * (the bias is the last parameter, its "x" is 1) */
__global__ void grad_k(const float *w, const float *x, const float *y, int batch, long n, float *g) {
  long j = blockIdx.x;
  long in = n - 1;
  __shared__ float acc[128];
  float s = 0;
  for (int b = threadIdx.x; b < batch; b += blockDim.x) {
    float pred = w[in];
    for (long k = 0; k < in; k++) pred += x[b * in + k] * w[k];
    s += (pred - y[b]) * (j < in ? x[b * in + j] : 1.0f);
  }
  acc[threadIdx.x] = s;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) acc[threadIdx.x] += acc[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) g[j] = 2.0f * acc[0] / batch;
}

__global__ void update_k(float *w, const float *g, long n, float lr) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) w[i] -= lr * g[i];
}

void cumlp_init(float *dparams, long n, unsigned seed) {
  init_k<<<(unsigned)((n + 255) / 256), 256, 0, st()>>>(dparams, n, seed);
}

void cumlp_batch(long index, int batch, float *x, float *y) {
  for (int b = 0; b < batch; b++) {
    float t = 0.3f;
    for (long k = 0; k < CUMLP_IN; k++) {
      float v = 2.0f * hash01(((uint64_t)(index * batch + b) << 20) + (uint64_t)k);
      x[b * CUMLP_IN + k] = v;
      t += v * (float)((k % 5) - 2) * 0.1f;
    }
    y[b] = t;
  }
}

void cumlp_grad(const float *dparams, const float *dx, const float *dy, int batch, long n, float *dgrad) {
  grad_k<<<(unsigned)n, 128, 0, st()>>>(dparams, dx, dy, batch, n, dgrad);
}

void cumlp_update(float *dparams, const float *dgrad, long n, float lr) {
  update_k<<<(unsigned)((n + 255) / 256), 256, 0, st()>>>(dparams, dgrad, n, lr);
}

void cumlp_sync(void) { cudaStreamSynchronize(st()); }
