/* The bundled demo: what the engine does for a training step, without a
 * framework.  Each rank holds ResNet-50-shaped "gradients" filled with its
 * rank number; 5 steps average them through hvdshim (fused, negotiated by
 * name, submitted in a different order on each rank) and check the result.
 *
 *   mpirun -np 2 examples/engine_demo */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hvdshim.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
  if (hvd_init() != HVD_OK) {
    fprintf(stderr, "engine_demo: %s\n", hvd_last_error());
    return 1;
  }
  int rank = hvd_rank(), size = hvd_size();
  enum { N = 161 };
  size_t count[N];
  float *grad[N];
  size_t total = 0;
  for (int i = 0; i < N; i++) { /* sizes spread like a CNN's: many small, a few large */
    count[i] = i % 3 == 0 ? (size_t)(64 << (i % 5)) * 9 * 64 : 256u << (i % 4);
    grad[i] = malloc(count[i] * sizeof(float));
    total += count[i];
  }
  int bad = 0;
  for (int step = 0; step < 5; step++) {
    for (int i = 0; i < N; i++)
      for (size_t k = 0; k < count[i]; k++) grad[i][k] = (float)rank;
    hvd_handle_t h[N];
    double t0 = now();
    for (int j = 0; j < N; j++) {
      int i = rank % 2 ? j : N - 1 - j; /* ranks submit in different orders */
      char name[32];
      snprintf(name, sizeof name, "layer%d.grad", i);
      hvd_allreduce_async(name, grad[i], count[i], HVD_FLOAT32, HVD_AVG, NULL, NULL, &h[i]);
    }
    for (int i = 0; i < N; i++)
      if (hvd_wait(h[i], 60) != HVD_OK) {
        fprintf(stderr, "engine_demo: %s\n", hvd_last_error());
        return 1;
      }
    double dt = now() - t0;
    float want = (float)(size - 1) / 2;
    for (int i = 0; i < N; i++)
      if (grad[i][0] != want || grad[i][count[i] - 1] != want) bad++;
    if (rank == 0)
      printf("step %d: averaged %d tensors (%.1f MB) across %d ranks in %.1f ms: every value %.2f (expected %.2f)\n",
             step, N, total * 4 / 1e6, size, dt * 1e3, grad[0][0], want);
  }
  hvd_stats_t st;
  hvd_get_stats(&st);
  if (rank == 0)
    printf("engine: %llu cycles, %llu coordinator rounds, %llu cache hits, %llu fused allreduce groups for %llu tensors\n%s\n",
           (unsigned long long)st.cycles, (unsigned long long)st.slow_rounds, (unsigned long long)st.cache_hits,
           (unsigned long long)st.groups, (unsigned long long)st.tensors, bad ? "demo: WRONG RESULTS" : "demo: OK");
  return bad ? 1 : 0;
}
