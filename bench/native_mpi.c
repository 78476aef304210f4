/* The anchor of bench/run-native-bench.sh: examples/native/train.c ported
 * to MPI by hand, as a user would without hvdshim (Horovod's way): rank 0's
 * initial parameters broadcast, batch index step*N + rank, the gradient
 * summed with MPI_Allreduce and divided by N before the update.  Same
 * library, same arguments, same output. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long steps = 300;
  int batch = 32;
  float lr = 0.05f;
  const char *out = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--steps")) steps = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--lr")) lr = (float)atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
  }
  long n = mlp_nparams();
  float *params = malloc(n * sizeof *params), *grad = malloc(n * sizeof *grad);
  float *x = malloc((size_t)batch * MLP_IN * sizeof *x), *y = malloc((size_t)batch * sizeof *y);
  mlp_init(params, n, 1);
  MPI_Bcast(params, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  float loss = 0;
  for (long step = 0; step < steps; step++) {
    data_batch(step * size + rank, batch, x, y);
    loss = mlp_grad(params, x, y, batch, grad);
    MPI_Allreduce(MPI_IN_PLACE, grad, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (long i = 0; i < n; i++) grad[i] /= (float)size;
    sgd_update(params, grad, n, lr);
  }
  if (rank == 0) printf("final loss %.6f\n", loss);
  if (rank == 0 && out) {
    FILE *f = fopen(out, "wb");
    if (f) fwrite(params, sizeof *params, (size_t)n, f), fclose(f);
  }
  MPI_Finalize();
  return 0;
}
