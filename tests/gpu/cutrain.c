/* A legacy single-GPU trainer in C (tests/gpu/native-cuda.sh): parameters,
 * gradient and batches in device memory, the math in libcumlp (CUDA kernels
 * on the library's own stream).  No MPI, no hvdshim.
 *
 *   cutrain [--steps S] [--batch B] [--lr LR] [--seed N] [--seed-by-rank]
 *           [--emulate-ranks K]
 *
 * Prints the loss-free checksum of the final parameters ("checksum v0 v1
 * ..." with every parameter).  --seed-by-rank adds Open MPI's or MPICH's
 * rank variable to the seed (ranks start from different weights, as
 * time-seeded programs do).  --emulate-ranks K (the test's reference only):
 * each step reads batches step*K .. step*K+K-1 and averages their
 * gradients, the single-process emulation of K ranks under the spec. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IN 16
void cumlp_init(float *dparams, long n, unsigned seed);
void cumlp_batch(long index, int batch, float *x, float *y);
void cumlp_grad(const float *dparams, const float *dx, const float *dy, int batch, long n, float *dgrad);
void cumlp_update(float *dparams, const float *dgrad, long n, float lr);
void cumlp_sync(void);

#define CK(call)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "cutrain: %s: %s\n", #call, cudaGetErrorString(e_));        \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

int main(int argc, char **argv) {
  long steps = 200, n = IN + 1;
  int batch = 32, emulate = 0, by_rank = 0;
  float lr = 0.05f;
  unsigned seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--seed-by-rank")) {
      by_rank = 1;
      continue;
    }
    if (!v) goto usage;
    if (!strcmp(a, "--steps")) steps = atol(v);
    else if (!strcmp(a, "--batch")) batch = atoi(v);
    else if (!strcmp(a, "--lr")) lr = (float)atof(v);
    else if (!strcmp(a, "--seed")) seed = (unsigned)atol(v);
    else if (!strcmp(a, "--emulate-ranks")) emulate = atoi(v);
    else goto usage;
    i++;
  }
  if (batch < 1 || batch > 4096 || steps < 0 || emulate < 0) goto usage;
  if (by_rank) {
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("PMI_RANK");
    seed += r ? (unsigned)atoi(r) * 1000u : 0u;
  }
  int k = emulate ? emulate : 1;
  float *x = malloc((size_t)batch * IN * sizeof *x), *y = malloc((size_t)batch * sizeof *y);
  float *params = malloc((size_t)n * sizeof *params), *sum = malloc((size_t)n * sizeof *sum);
  float *g = malloc((size_t)n * sizeof *g);
  if (!x || !y || !params || !sum || !g) return 1;
  float *dp, *dg, *dx, *dy;
  CK(cudaMalloc((void **)&dp, (size_t)n * sizeof *dp));
  CK(cudaMalloc((void **)&dg, (size_t)n * sizeof *dg));
  CK(cudaMalloc((void **)&dx, (size_t)batch * IN * sizeof *dx));
  CK(cudaMalloc((void **)&dy, (size_t)batch * sizeof *dy));
  cumlp_init(dp, n, seed);
  for (long step = 0; step < steps; step++) {
    memset(sum, 0, (size_t)n * sizeof *sum);
    for (int r = 0; r < k; r++) {
      cumlp_batch(step * k + r, batch, x, y);
      cumlp_sync(); /* the last step's kernels read dx, dy */
      CK(cudaMemcpy(dx, x, (size_t)batch * IN * sizeof *x, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dy, y, (size_t)batch * sizeof *y, cudaMemcpyHostToDevice));
      CK(cudaDeviceSynchronize());
      cumlp_grad(dp, dx, dy, batch, n, dg);
      if (!emulate) break;
      cumlp_sync();
      CK(cudaMemcpy(g, dg, (size_t)n * sizeof *g, cudaMemcpyDeviceToHost));
      for (long j = 0; j < n; j++) sum[j] += g[j];
    }
    if (emulate) {
      for (long j = 0; j < n; j++) g[j] = sum[j] / (float)k;
      CK(cudaMemcpy(dg, g, (size_t)n * sizeof *g, cudaMemcpyHostToDevice));
    }
    cumlp_update(dp, dg, n, lr);
  }
  cumlp_sync();
  CK(cudaMemcpy(params, dp, (size_t)n * sizeof *params, cudaMemcpyDeviceToHost));
  printf("checksum");
  for (long j = 0; j < n; j++) printf(" %.7f", params[j]);
  printf("\n");
  return 0;

usage:
  fprintf(stderr, "usage: %s [--steps S] [--batch B] [--lr LR] [--seed N] [--seed-by-rank] [--emulate-ranks K]\n",
          argv[0]);
  return 2;
}
