/* A legacy single-process trainer: SGD on libmlp, no MPI, no hvdshim.
 *
 *   ./train [--steps S] [--batch B] [--lr LR] [--seed N] [--log-every K] [--out FILE]
 *
 * Prints the loss every K steps and the final one; --out writes the final
 * parameters (raw float32). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

int main(int argc, char **argv) {
  long steps = 300;
  int batch = 32, log_every = 50;
  float lr = 0.05f;
  unsigned seed = 1;
  const char *out = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) goto usage;
    if (!strcmp(a, "--steps")) steps = atol(v);
    else if (!strcmp(a, "--batch")) batch = atoi(v);
    else if (!strcmp(a, "--lr")) lr = (float)atof(v);
    else if (!strcmp(a, "--seed")) seed = (unsigned)atol(v);
    else if (!strcmp(a, "--log-every")) log_every = atoi(v);
    else if (!strcmp(a, "--out")) out = v;
    else goto usage;
    i++;
  }
  if (batch < 1 || steps < 0 || log_every < 1) goto usage;
  long n = mlp_nparams();
  float *params = malloc(n * sizeof *params), *grad = malloc(n * sizeof *grad);
  float *x = malloc((size_t)batch * MLP_IN * sizeof *x), *y = malloc((size_t)batch * sizeof *y);
  if (!params || !grad || !x || !y) return 1;
  mlp_init(params, n, seed);
  float loss = 0;
  for (long step = 0; step < steps; step++) {
    data_batch(step, batch, x, y);
    loss = mlp_grad(params, x, y, batch, grad);
    sgd_update(params, grad, n, lr);
    if ((step + 1) % log_every == 0) printf("step %ld loss %.6f\n", step + 1, loss);
  }
  printf("final loss %.6f\n", loss);
  if (out) {
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(params, sizeof *params, (size_t)n, f) != (size_t)n || fclose(f) != 0) {
      perror(out);
      return 1;
    }
  }
  free(params), free(grad), free(x), free(y);
  return 0;

usage:
  fprintf(stderr, "usage: %s [--steps S] [--batch B] [--lr LR] [--seed N] [--log-every K] [--out FILE]\n", argv[0]);
  return 2;
}
