/* Engine benchmark, in one run at np ranks (run it with
 * bench/run-engine-bench.sh):
 *  (a) many tensors: 200 x 16 KiB float32, and ResNet-50's 161 parameter
 *      tensors (25.6 M float32), through the engine vs one MPI_Allreduce per
 *      tensor vs one MPI_Allreduce over the same total bytes (no copies);
 *  (b) single buffers 1 MiB .. 256 MiB through the engine vs raw
 *      MPI_Allreduce, reporting algbw and busbw = algbw * 2(n-1)/n, and
 *      the memory-copy limit: every rank copying the buffer once, at once.
 * The anchors of (a) run first, with the program's own MPI and no engine
 * thread; then hvd_init adopts MPI and the same work goes through the
 * engine.  (b) alternates runs of raw MPI, the engine and the copy.
 * Medians over repetitions; every figure is a sum (no averaging cost on
 * either side). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvdshim.h"

static int rank, size;

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_dbl);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct {
  int n;
  size_t *count;
  float **buf;
  size_t total;
} tset;

static void add(tset *s, size_t c) {
  s->count = realloc(s->count, sizeof(size_t) * (size_t)(s->n + 1));
  s->count[s->n++] = c;
  s->total += c;
}

static void make_resnet50(tset *s) {
  add(s, 64 * 3 * 7 * 7), add(s, 64), add(s, 64);
  int blocks[4] = {3, 4, 6, 3}, planes[4] = {64, 128, 256, 512}, in = 64;
  for (int l = 0; l < 4; l++)
    for (int b = 0; b < blocks[l]; b++) {
      int p = planes[l];
      add(s, (size_t)p * in), add(s, p), add(s, p);
      add(s, (size_t)p * p * 9), add(s, p), add(s, p);
      add(s, (size_t)p * 4 * p), add(s, p * 4), add(s, p * 4);
      if (b == 0) add(s, (size_t)p * 4 * in), add(s, p * 4), add(s, p * 4);
      in = p * 4;
    }
  add(s, 1000 * 2048), add(s, 1000);
}

static void alloc_set(tset *s) {
  s->buf = malloc(sizeof(float *) * (size_t)s->n);
  for (int i = 0; i < s->n; i++) {
    s->buf[i] = malloc(s->count[i] * 4 + 4);
    for (size_t k = 0; k < s->count[i]; k++) s->buf[i][k] = 1.0f;
  }
}

static double time_per_tensor(tset *s) {
  double t = MPI_Wtime();
  for (int i = 0; i < s->n; i++) MPI_Allreduce(MPI_IN_PLACE, s->buf[i], (int)s->count[i], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return MPI_Wtime() - t;
}

static double time_one_call(float *big, size_t total) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  MPI_Allreduce(MPI_IN_PLACE, big, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return MPI_Wtime() - t;
}

/* The copy limit: every rank copies the buffer once, at the same time (the
 * floor of an allreduce between the ranks of one host is about one copy of
 * the buffer per rank). */
static double time_copy(float *dst, const float *src, size_t bytes) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  memcpy(dst, src, bytes);
  return MPI_Wtime() - t;
}

static double time_engine(tset *s, const char *prefix) {
  hvd_handle_t *h = malloc(sizeof *h * (size_t)s->n);
  char name[64];
  hvd_barrier(-1);
  double t = MPI_Wtime();
  for (int i = s->n - 1; i >= 0; i--) { /* backprop order */
    snprintf(name, sizeof name, "%s.%d", prefix, i);
    if (hvd_allreduce_async(name, s->buf[i], s->count[i], HVD_FLOAT32, HVD_SUM, NULL, NULL, &h[i]) != HVD_OK) {
      fprintf(stderr, "bench: %s\n", hvd_last_error());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  for (int i = 0; i < s->n; i++) hvd_wait(h[i], -1);
  t = MPI_Wtime() - t;
  free(h);
  return t;
}

/* Rank 0's median of per-rank maxima (a collective ends when its slowest
 * rank does). */
static double agree(double t) {
  double m;
  MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

#define REPS_A 41
#define ROUNDS 3

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t max_mib = argc > 1 ? (size_t)atoi(argv[1]) : 256;

  tset sets[2] = {{0}, {0}};
  const char *names[2] = {"200 x 16 KiB", "ResNet-50 (161 tensors, 25.6 M)"};
  for (int i = 0; i < 200; i++) add(&sets[0], 4096);
  make_resnet50(&sets[1]);
  for (int k = 0; k < 2; k++) alloc_set(&sets[k]);
  size_t max_count = max_mib << 18; /* floats */
  if (max_count < sets[1].total) max_count = sets[1].total;
  float *big = malloc(max_count * 4);
  for (size_t i = 0; i < max_count; i++) big[i] = 1.0f;

  double per_tensor[2], one_call[2], engine[2], v[REPS_A];
  for (int k = 0; k < 2; k++) {
    int reps = k == 0 ? REPS_A : 11;
    for (int r = 0; r < reps + 3; r++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t = agree(time_per_tensor(&sets[k]));
      if (r >= 3) v[r - 3] = t;
    }
    per_tensor[k] = median(v, reps);
    for (int r = 0; r < reps + 3; r++) {
      double t = agree(time_one_call(big, sets[k].total));
      if (r >= 3) v[r - 3] = t;
    }
    one_call[k] = median(v, reps);
  }
  int nsizes = 0;
  size_t sizes[16];
  for (size_t mib = 1; mib <= max_mib; mib *= 2) sizes[nsizes++] = mib << 20;
  double raw_b[16], eng_b[16], copy_b[16];

  if (hvd_init() != HVD_OK) { /* adopts the MPI initialized above */
    fprintf(stderr, "bench: hvd_init: %s\n", hvd_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (int k = 0; k < 2; k++) {
    int reps = k == 0 ? REPS_A : 11;
    for (int r = 0; r < reps + 3; r++) {
      double t = agree(time_engine(&sets[k], k ? "resnet" : "small"));
      if (r >= 3) v[r - 3] = t;
    }
    engine[k] = median(v, reps);
  }
  /* (b): raw MPI, the engine and the copy limit in turn, a run of
   * repetitions each (back to back, as a training loop's steps), ROUNDS
   * times, so a change in the machine's speed hits all three alike. */
  tset single = {0};
  add(&single, 0);
  single.buf = &big;
  float *copy = malloc(max_count * 4);
  for (size_t i = 0; i < max_count; i++) copy[i] = 0.0f;
  double vr[ROUNDS * 11], vc[ROUNDS * 11], vb[ROUNDS * 11];
  for (int s = 0; s < nsizes; s++) {
    int reps = sizes[s] >= (64u << 20) ? 5 : 11;
    single.count[0] = sizes[s] / 4;
    char nm[32];
    snprintf(nm, sizeof nm, "single%d", s);
    int m = 0;
    for (int round = 0; round < ROUNDS; round++, m += reps) {
      for (int r = 0; r < reps + 2; r++) {
        double t = agree(time_one_call(big, sizes[s] / 4));
        if (r >= 2) vr[m + r - 2] = t;
      }
      for (int r = 0; r < reps + 2; r++) {
        double t = agree(time_engine(&single, nm));
        if (r >= 2) vb[m + r - 2] = t;
      }
      for (int r = 0; r < reps + 2; r++) {
        double t = agree(time_copy(copy, big, sizes[s]));
        if (r >= 2) vc[m + r - 2] = t;
      }
    }
    raw_b[s] = median(vr, m);
    eng_b[s] = median(vb, m);
    copy_b[s] = median(vc, m);
  }
  free(copy);
  hvd_stats_t st;
  hvd_get_stats(&st);

  if (rank == 0) {
    printf("hvdshim engine benchmark: np=%d, fusion threshold %s, pipeline chunk %s, cycle %s ms\n", size,
           getenv("HVDSHIM_FUSION_THRESHOLD") ? getenv("HVDSHIM_FUSION_THRESHOLD") : "128M (default)",
           getenv("HVDSHIM_PIPELINE_CHUNK") ? getenv("HVDSHIM_PIPELINE_CHUNK") : "1M (default)",
           getenv("HVDSHIM_CYCLE_TIME") ? getenv("HVDSHIM_CYCLE_TIME") : "1 (default)");
    printf("\n(a) many tensors (medians, us)\n");
    printf("| set | per-tensor MPI_Allreduce | one MPI_Allreduce, same bytes | engine | engine vs per-tensor | engine vs one call |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int k = 0; k < 2; k++)
      printf("| %s | %.0f | %.0f | %.0f | %.2fx | %.2fx |\n", names[k], per_tensor[k] * 1e6, one_call[k] * 1e6,
             engine[k] * 1e6, per_tensor[k] / engine[k], one_call[k] / engine[k]);
    printf("\n(b) single buffers (medians; the three columns of a row measured in turn)\n");
    printf("| size | raw MPI algbw GB/s | raw busbw GB/s | engine algbw GB/s | engine busbw GB/s | engine / raw "
           "| memcpy GB/s (every rank at once) | engine / memcpy |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    double f = 2.0 * (size - 1) / size;
    for (int s = 0; s < nsizes; s++) {
      double ra = sizes[s] / raw_b[s] / 1e9, ea = sizes[s] / eng_b[s] / 1e9, ca = sizes[s] / copy_b[s] / 1e9;
      printf("| %zu MiB | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2f | %.2f |\n", sizes[s] >> 20, ra, ra * f, ea, ea * f,
             ea / ra, ca, ea / ca);
    }
    printf("\nengine stats: %llu cycles, %llu coordinator rounds, %llu cache hits, %llu groups\n",
           (unsigned long long)st.cycles, (unsigned long long)st.slow_rounds, (unsigned long long)st.cache_hits,
           (unsigned long long)st.groups);
  }
  hvd_shutdown();
  MPI_Finalize();
  return 0;
}
