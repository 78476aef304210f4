/* Multi-rank engine test, run under mpirun by the scripts in tests/mpi.
 *
 *   engine_test random SEED NTENSORS NTHREADS ITERS
 *       random tensors (every dtype and op, sizes 0..300k elements) submitted
 *       in a different random order on each rank from NTHREADS threads,
 *       checked against a reference every rank computes for itself
 *   engine_test collectives     broadcast from every root, allgather with
 *                               per-rank row counts, barrier, callbacks, test
 *   engine_test mismatch        count/dtype/op disagreements, bad arguments
 *   engine_test stall-warn S    the last rank submits S seconds late
 *   engine_test stall-other     the last rank submits another name than the others
 *   engine_test stall-abort     the last rank never submits
 *   engine_test join J          rank J finishes early (joins)
 *   engine_test memory ITERS    RSS after warm-up vs after ITERS more steps
 *   engine_test big MIB ITERS   one MIB-MiB float32 sum ITERS times (0: until killed)
 *   engine_test adopt           the program initializes and finalizes MPI
 *   engine_test steps S K E     S training-like steps: K float32 allreduces
 *                               of E elements each, checked, then
 *                               hvd_step_mark(32) (metrics, autotune)
 *
 * Prints "engine_test: ... OK" and exits 0, or names what was wrong and
 * exits 1.  The last line of every rank carries its stats for the scripts. */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hvdshim.h"

static int rank, size, failures;

#define FAIL(...)                                    \
  do {                                               \
    fprintf(stderr, "engine_test[%d]: FAIL: ", rank); \
    fprintf(stderr, __VA_ARGS__);                    \
    fprintf(stderr, "\n");                           \
    failures++;                                      \
  } while (0)

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ---- the 16-bit conversions, duplicated on purpose: the reference must
 * not share code with what it checks */
static float h2f(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v = e == 0 ? m * (1.0f / 16777216.0f) : e == 31 ? (m ? NAN : INFINITY) : (1.0f + m / 1024.0f) * (float)(e > 15 ? (1 << (e - 15)) : 1) / (float)(e < 15 ? (1 << (15 - e)) : 1);
  return (h & 0x8000) ? -v : v;
}
static float b2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

/* Value of element i of tensor t on rank r: small integers, exact in every
 * dtype and in their sums. */
static int value(int t, size_t i, int r, hvd_dtype_t dt) {
  int v = (int)((t * 31 + i * 7 + (size_t)r * 13) % 11);
  return dt == HVD_UINT8 ? v : v - 5;
}

/* The same for a product: -1, 0 or 1 (0..2 unsigned), so that products stay
 * exact and in range in every dtype. */
static int value_op(int t, size_t i, int r, hvd_dtype_t dt, hvd_op_t op) {
  int v = value(t, i, r, dt);
  if (op != HVD_PROD) return v;
  return dt == HVD_UINT8 ? v % 3 : (v + 5) % 3 - 1;
}

static void store(void *buf, size_t i, hvd_dtype_t dt, double v) {
  switch (dt) {
  case HVD_FLOAT32: ((float *)buf)[i] = (float)v; break;
  case HVD_FLOAT64: ((double *)buf)[i] = v; break;
  case HVD_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case HVD_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case HVD_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case HVD_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case HVD_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
  case HVD_FLOAT16: { /* small integers: exact */
    int iv = (int)v, neg = iv < 0, a = neg ? -iv : iv, e = 0;
    uint16_t h = 0;
    if (a) {
      while ((a >> e) > 1) e++;
      h = (uint16_t)(((e + 15) << 10) | (((a << 10) >> e) & 0x3ff));
    }
    ((uint16_t *)buf)[i] = (uint16_t)(h | (neg ? 0x8000 : 0));
    break;
  }
  case HVD_BFLOAT16: { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); ((uint16_t *)buf)[i] = (uint16_t)(u >> 16); break; }
  }
}

static double load(const void *buf, size_t i, hvd_dtype_t dt) {
  switch (dt) {
  case HVD_FLOAT32: return ((const float *)buf)[i];
  case HVD_FLOAT64: return ((const double *)buf)[i];
  case HVD_INT32: return ((const int32_t *)buf)[i];
  case HVD_INT64: return (double)((const int64_t *)buf)[i];
  case HVD_UINT8: return ((const uint8_t *)buf)[i];
  case HVD_INT8: return ((const int8_t *)buf)[i];
  case HVD_INT16: return ((const int16_t *)buf)[i];
  case HVD_FLOAT16: return h2f(((const uint16_t *)buf)[i]);
  case HVD_BFLOAT16: return b2f(((const uint16_t *)buf)[i]);
  }
  return 0;
}

static double expected(int t, size_t i, hvd_dtype_t dt, hvd_op_t op) {
  double acc = value_op(t, i, 0, dt, op);
  for (int r = 1; r < size; r++) {
    double v = value_op(t, i, r, dt, op);
    acc = op == HVD_MIN ? (v < acc ? v : acc) : op == HVD_MAX ? (v > acc ? v : acc) : op == HVD_PROD ? acc * v : acc + v;
  }
  if (op == HVD_AVG) {
    if (dt >= HVD_INT32) acc = (double)((long long)acc / size); /* the integer types */
    else acc /= size;
  }
  return acc;
}

typedef struct {
  char name[32];
  hvd_dtype_t dt;
  hvd_op_t op;
  size_t count;
  void *buf;
  hvd_handle_t h;
} tensor;

typedef struct {
  tensor *ts;
  int *order, n, thread, nthreads;
} worker;

static void *submit_worker(void *arg) {
  worker *w = arg;
  for (int k = w->thread; k < w->n; k += w->nthreads) {
    tensor *t = &w->ts[w->order[k]];
    if (hvd_allreduce_async(t->name, t->buf, t->count, t->dt, t->op, NULL, NULL, &t->h) != HVD_OK)
      FAIL("submit %s: %s", t->name, hvd_last_error());
  }
  for (int k = w->thread; k < w->n; k += w->nthreads) {
    tensor *t = &w->ts[w->order[k]];
    hvd_status_t st = hvd_wait(t->h, 120);
    if (st != HVD_OK) FAIL("wait %s: %s (%s)", t->name, hvd_status_name(st), hvd_last_error());
  }
  return NULL;
}

static int run_random(uint64_t seed, int n, int nthreads, int iters) {
  tensor *ts = calloc((size_t)n, sizeof *ts);
  int *order = malloc(sizeof(int) * (size_t)n);
  uint64_t s = seed;
  for (int t = 0; t < n; t++) {
    snprintf(ts[t].name, sizeof ts[t].name, "grad.%d", t);
    ts[t].dt = (hvd_dtype_t)(rng_next(&s) % 9); /* every dtype */
    ts[t].op = (hvd_op_t)(rng_next(&s) % 5);    /* every op */
    uint64_t pick = rng_next(&s) % 100;
    ts[t].count = pick < 3 ? 0 : pick < 10 ? 100000 + rng_next(&s) % 200000 : rng_next(&s) % 5000;
    ts[t].buf = malloc(ts[t].count * hvd_dtype_size(ts[t].dt) + 1);
  }
  for (int it = 0; it < iters; it++) {
    for (int t = 0; t < n; t++)
      for (size_t i = 0; i < ts[t].count; i++) store(ts[t].buf, i, ts[t].dt, value_op(t + it, i, rank, ts[t].dt, ts[t].op));
    uint64_t os = seed * 7919 + (uint64_t)rank * 104729 + (uint64_t)it;
    for (int t = 0; t < n; t++) order[t] = t;
    for (int t = n - 1; t > 0; t--) {
      int j = (int)(rng_next(&os) % (uint64_t)(t + 1)), tmp = order[t];
      order[t] = order[j];
      order[j] = tmp;
    }
    pthread_t th[16];
    worker w[16];
    for (int k = 0; k < nthreads; k++) {
      w[k] = (worker){ts, order, n, k, nthreads};
      pthread_create(&th[k], NULL, submit_worker, &w[k]);
    }
    for (int k = 0; k < nthreads; k++) pthread_join(th[k], NULL);
    for (int t = 0; t < n && failures < 20; t++) {
      int half = ts[t].dt == HVD_FLOAT16 || ts[t].dt == HVD_BFLOAT16;
      for (size_t i = 0; i < ts[t].count; i++) {
        double want = expected(t + it, i, ts[t].dt, ts[t].op), got = load(ts[t].buf, i, ts[t].dt);
        double tol = half ? 0.02 * (1 + (want < 0 ? -want : want)) : 1e-6 * (1 + (want < 0 ? -want : want));
        if (!(got - want <= tol && want - got <= tol)) {
          FAIL("iter %d %s (%s %s, %zu elems) [%zu] = %g, expected %g", it, ts[t].name, hvd_dtype_name(ts[t].dt),
               (const char *[]){"sum", "avg", "min", "max", "prod"}[ts[t].op], ts[t].count, i, got, want);
          break;
        }
      }
    }
    /* every rank holds the same bytes (replicas stay equal): a hash of
     * every result, compared across ranks */
    uint64_t h = 1469598103934665603ull, lo_hi[2];
    for (int t = 0; t < n; t++)
      for (size_t i = 0; i < ts[t].count * hvd_dtype_size(ts[t].dt); i++)
        h = (h ^ ((const unsigned char *)ts[t].buf)[i]) * 1099511628211ull;
    MPI_Allreduce(&h, &lo_hi[0], 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &lo_hi[1], 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (lo_hi[0] != lo_hi[1]) FAIL("iter %d: the ranks' results differ (hash %llx here)", it, (unsigned long long)h);
  }
  for (int t = 0; t < n; t++) free(ts[t].buf);
  free(ts);
  free(order);
  return failures;
}

static volatile int callbacks_seen;
static void on_done(hvd_handle_t h, hvd_status_t st, void *arg) {
  (void)h;
  if (st == HVD_OK) __atomic_fetch_add((int *)arg, 1, __ATOMIC_SEQ_CST);
}

static int run_collectives(void) {
  /* broadcast from every root, several dtypes */
  for (int root = 0; root < size; root++) {
    double d[100];
    int64_t l[7];
    for (int i = 0; i < 100; i++) d[i] = rank == root ? i * 0.5 + root : -1;
    for (int i = 0; i < 7; i++) l[i] = rank == root ? (int64_t)1 << 40 | i : 0;
    hvd_handle_t h1, h2;
    char n1[32], n2[32];
    snprintf(n1, sizeof n1, "bcast.d.%d", root);
    snprintf(n2, sizeof n2, "bcast.l.%d", root);
    if (hvd_broadcast_async(n1, d, 100, HVD_FLOAT64, root, NULL, NULL, &h1) || hvd_broadcast_async(n2, l, 7, HVD_INT64, root, NULL, NULL, &h2))
      FAIL("broadcast submit: %s", hvd_last_error());
    if (hvd_wait(h1, 60) || hvd_wait(h2, 60)) FAIL("broadcast wait: %s", hvd_last_error());
    for (int i = 0; i < 100; i++) if (d[i] != i * 0.5 + root) { FAIL("bcast root %d [%d] = %g", root, i, d[i]); break; }
    for (int i = 0; i < 7; i++) if (l[i] != ((int64_t)1 << 40 | i)) { FAIL("bcast int64 root %d [%d]", root, i); break; }
  }
  /* allgather: rank r contributes r rows of 3 floats (rank 0: none) */
  for (int rep = 0; rep < 2; rep++) {
    float in[64 * 3];
    int rows = rank + rep;
    for (int i = 0; i < rows * 3; i++) in[i] = (float)(rank * 1000 + i);
    hvd_handle_t h;
    if (hvd_allgather_async("gather", in, (size_t)rows, 3, HVD_FLOAT32, NULL, NULL, &h)) FAIL("allgather: %s", hvd_last_error());
    int done = 0;
    for (int spin = 0; spin < 600000 && !done; spin++) {
      hvd_test(h, &done);
      if (!done) usleep(100);
    }
    void *out = NULL;
    size_t total = 0;
    if (!done || hvd_allgather_result(h, &out, &total)) FAIL("allgather result: %s", hvd_last_error());
    if (hvd_wait(h, 0)) FAIL("allgather wait after done");
    size_t want_rows = 0;
    for (int r = 0; r < size; r++) want_rows += (size_t)(r + rep);
    if (total != want_rows) FAIL("allgather rows %zu, expected %zu", total, want_rows);
    else {
      const float *o = out;
      size_t row = 0;
      for (int r = 0; r < size; r++)
        for (int k = 0; k < (r + rep) * 3; k++, row++)
          if (o[row] != (float)(r * 1000 + k)) { FAIL("allgather rank %d elem %d = %g", r, k, o[row]); r = size; break; }
    }
    free(out);
  }
  /* callbacks: no wait needed, handle released after the callback */
  int32_t v[4] = {rank, rank, rank, rank};
  int seen = 0;
  for (int i = 0; i < 4; i++) {
    char n[32];
    snprintf(n, sizeof n, "cb.%d", i);
    if (hvd_allreduce_async(n, &v[i], 1, HVD_INT32, HVD_SUM, on_done, &seen, NULL)) FAIL("cb submit: %s", hvd_last_error());
  }
  if (hvd_barrier(60) != HVD_OK) FAIL("barrier: %s", hvd_last_error());
  for (int spin = 0; spin < 10000 && __atomic_load_n(&seen, __ATOMIC_SEQ_CST) < 4; spin++) usleep(1000);
  if (seen != 4) FAIL("callbacks seen %d of 4", seen);
  if (v[0] != size * (size - 1) / 2) FAIL("cb allreduce = %d", v[0]);
  /* a batch: mixed dtypes and ops, one wake-up; hvd_wait_all finishes all */
  {
    float f[5];
    double g[3];
    int32_t k[2];
    for (int i = 0; i < 5; i++) f[i] = (float)(rank + i);
    for (int i = 0; i < 3; i++) g[i] = rank * 0.25 + i;
    k[0] = rank, k[1] = -rank;
    hvd_allreduce_item items[3] = {{"batch.f", f, 5, HVD_FLOAT32, HVD_SUM, -1, NULL},
                                   {"batch.g", g, 3, HVD_FLOAT64, HVD_AVG, -1, NULL},
                                   {"batch.k", k, 2, HVD_INT32, HVD_MAX, -1, NULL}};
    hvd_handle_t hs[3];
    size_t bad = 99;
    if (hvd_allreduce_batch_async(items, 3, hs) != HVD_OK) FAIL("batch submit: %s", hvd_last_error());
    else if (hvd_wait_all(hs, 3, &bad) != HVD_OK) FAIL("batch wait: %s", hvd_last_error());
    double rsum = size * (size - 1) / 2.0;
    for (int i = 0; i < 5; i++) if (f[i] != (float)(rsum + size * i)) FAIL("batch.f[%d] = %g", i, f[i]);
    for (int i = 0; i < 3; i++) if (g[i] != rsum * 0.25 / size + i) FAIL("batch.g[%d] = %g", i, g[i]);
    if (k[0] != size - 1 || k[1] != 0) FAIL("batch.k = %d %d", k[0], k[1]);
    /* item 1 is refused: item 0 is submitted (and completes), item 1 on get -1 */
    float y = 1;
    hvd_allreduce_item mixed[3] = {{"batch.ok", &y, 1, HVD_FLOAT32, HVD_SUM, -1, NULL},
                                   {"batch.bad", &y, 1, 99, HVD_SUM, -1, NULL},
                                   {"batch.never", &y, 1, HVD_FLOAT32, HVD_SUM, -1, NULL}};
    if (hvd_allreduce_batch_async(mixed, 3, hs) != HVD_ERR_INVALID || !strstr(hvd_last_error(), "item 1 of 3") ||
        !strstr(hvd_last_error(), "unsupported dtype"))
      FAIL("a batch with a bad item: %s", hvd_last_error());
    else if (hs[1] != -1 || hs[2] != -1) FAIL("handles after the bad item are not -1");
    else if (hvd_wait_all(hs, 1, NULL) != HVD_OK || y != size) FAIL("the batch's good item: %g (%s)", y, hvd_last_error());
    /* a batch its caller waits for at once: no wake-up, the wait runs the
     * cycle itself (the engine thread may take it first: counted over 20,
     * each after a pause that lets the engine thread finish its cycle and
     * sleep: on a loaded machine, sid's CI, it was in a round at every one
     * of 20 back-to-back waits on both ranks) */
    hvd_stats_t h0, h1;
    hvd_get_stats(&h0);
    for (int round = 0; round < 20; round++) {
      nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
      float w[3] = {1.0f + rank, 2.0f, (float)round};
      hvd_allreduce_item now[1] = {{"batch.waited", w, 3, HVD_FLOAT32, HVD_SUM, -1, NULL}};
      hvd_handle_t wh;
      if (hvd_allreduce_batch_async_ex(now, 1, &wh, HVD_BATCH_CALLER_WAITS) != HVD_OK ||
          hvd_wait_all(&wh, 1, NULL) != HVD_OK) {
        FAIL("a waited batch: %s", hvd_last_error());
        break;
      }
      if (w[0] != (float)(size + rsum) || w[1] != 2.0f * size || w[2] != (float)(round * size))
        FAIL("batch.waited = %g %g %g", w[0], w[1], w[2]);
    }
    hvd_get_stats(&h1);
    /* summed over the ranks: a rank whose engine thread is in a round when
     * its caller waits (rank 0 coordinating, oversubscribed peers) leaves
     * the cycle to it, and that may happen at every one of its 20 */
    int64_t helped = (int64_t)(h1.cycles_helped - h0.cycles_helped);
    hvd_handle_t hh;
    if (hvd_allreduce_async("batch.helped", &helped, 1, HVD_INT64, HVD_SUM, NULL, NULL, &hh) != HVD_OK ||
        hvd_wait(hh, -1.0) != HVD_OK)
      FAIL("summing the helped cycles: %s", hvd_last_error());
    else if (size > 1 && !getenv("HVDSHIM_ELASTIC") && helped == 0)
      FAIL("20 waited batches: no rank's waiting thread ran a cycle (rank %d: cycles %llu -> %llu)", rank,
           (unsigned long long)h0.cycles, (unsigned long long)h1.cycles);
    hvd_handle_t gone[2] = {hs[0], hs[0]};
    if (hvd_wait_all(gone, 2, &bad) != HVD_ERR_INVALID || bad != 0 || !strstr(hvd_last_error(), "hvd_wait_all"))
      FAIL("hvd_wait_all of finished handles: %zu %s", bad, hvd_last_error());
  }
  /* a bounded wait that times out, then completes */
  float x = 1;
  hvd_handle_t h;
  if (rank == 0) {
    hvd_allreduce_async("late", &x, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
    if (size > 1 && hvd_wait(h, 0.2) != HVD_ERR_TIMEOUT) FAIL("wait should time out while peers have not submitted");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) hvd_allreduce_async("late", &x, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
  if (hvd_wait(h, 60) != HVD_OK || x != size) FAIL("late allreduce: %g (%s)", x, hvd_last_error());
  if (hvd_wait(h, 1) != HVD_ERR_INVALID) FAIL("a finished handle must be invalid");
  return failures;
}

static int expect_error(hvd_status_t want, hvd_handle_t h, const char *name, const char *must_have) {
  hvd_status_t st = hvd_wait(h, 60);
  const char *msg = hvd_last_error();
  if (st != want) FAIL("%s: status %s, expected %s (%s)", name, hvd_status_name(st), hvd_status_name(want), msg);
  else if (!strstr(msg, name) || (must_have && !strstr(msg, must_have))) FAIL("%s: message lacks name/'%s': %s", name, must_have ? must_have : "", msg);
  else if (rank == 0) printf("engine_test: got expected error: %s\n", msg);
  return st == want;
}

static int run_mismatch(void) {
  float a[12] = {0};
  hvd_handle_t h;
  int last = size - 1;
  hvd_allreduce_async("bad_count", a, rank == last ? 11 : 10, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
  char ranks[32];
  snprintf(ranks, sizeof ranks, "11 elements on rank %d", last);
  expect_error(HVD_ERR_MISMATCH, h, "bad_count", size > 1 ? ranks : "");
  hvd_allreduce_async("bad_dtype", a, 4, rank == 0 ? HVD_FLOAT64 : HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
  expect_error(HVD_ERR_MISMATCH, h, "bad_dtype", size > 1 ? "float64 on rank 0" : "");
  hvd_allreduce_async("bad_op", a, 4, HVD_FLOAT32, rank == last ? HVD_MAX : HVD_SUM, NULL, NULL, &h);
  expect_error(HVD_ERR_MISMATCH, h, "bad_op", "reduction op");
  hvd_broadcast_async("bad_root", a, 4, HVD_FLOAT32, rank == last ? 0 : last, NULL, NULL, &h);
  expect_error(HVD_ERR_MISMATCH, h, "bad_root", "root");
  /* a cached tensor that later disagrees: the cache entry is invalidated */
  for (int i = 0; i < 3; i++) {
    hvd_allreduce_async("was_fine", a, 8, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
    if (hvd_wait(h, 60)) FAIL("was_fine: %s", hvd_last_error());
  }
  hvd_allreduce_async("was_fine", a, rank == last ? 9 : 8, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
  expect_error(HVD_ERR_MISMATCH, h, "was_fine", "count");
  /* the engine keeps working afterwards */
  float one = 1;
  hvd_allreduce_async("after", &one, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
  if (hvd_wait(h, 60) || one != size) FAIL("after mismatches: %g", one);
  /* bad arguments fail at submission, naming the cause */
  if (hvd_allreduce_async("x", a, 1, (hvd_dtype_t)9, HVD_SUM, NULL, NULL, &h) != HVD_ERR_INVALID || !strstr(hvd_last_error(), "unsupported dtype"))
    FAIL("bad dtype not rejected: %s", hvd_last_error());
  if (hvd_allreduce_async("", a, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h) != HVD_ERR_INVALID) FAIL("empty name accepted");
  if (hvd_allreduce_async("x", NULL, 5, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h) != HVD_ERR_INVALID) FAIL("null buffer accepted");
  if (hvd_broadcast_async("x", a, 1, HVD_FLOAT32, size, NULL, NULL, &h) != HVD_ERR_INVALID) FAIL("bad root accepted");
  /* the same name twice in flight */
  /* (peers submit only after rank 0 queued both, so the first is still in
   * flight when the second arrives) */
  hvd_handle_t h1, h2;
  if (rank == 0) {
    hvd_allreduce_async("twice", a, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h1);
    hvd_allreduce_async("twice", a + 1, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h2);
    if (hvd_wait(h2, 60) != HVD_ERR_INVALID || !strstr(hvd_last_error(), "already in flight"))
      FAIL("duplicate in flight: %s", hvd_last_error());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) hvd_allreduce_async("twice", a, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h1);
  if (hvd_wait(h1, 60)) FAIL("twice (first): %s", hvd_last_error());
  return failures;
}

static int run_stall_warn(double delay) {
  float x = 1;
  hvd_handle_t h;
  /* uncached: goes through the coordinator */
  if (rank == size - 1) usleep((useconds_t)(delay * 1e6));
  hvd_allreduce_async("late_tensor", &x, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
  if (hvd_wait(h, 120) || x != size) FAIL("late_tensor: %s", hvd_last_error());
  /* cached: negotiated once, then late on one rank */
  for (int i = 0; i < 2; i++) {
    x = 1;
    if (i == 1 && rank == size - 1) usleep((useconds_t)(delay * 1e6));
    hvd_allreduce_async("late_cached", &x, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
    if (hvd_wait(h, 120) || x != size) FAIL("late_cached: %s", hvd_last_error());
  }
  return failures;
}

static int run_stall_abort(void) {
  float x = 1;
  hvd_handle_t h;
  if (rank == size - 1) {
    sleep(120); /* never submits: the job must be ended for us */
    FAIL("still alive after 120 s: the stall shutdown did not end the job");
    return 1;
  }
  hvd_allreduce_async("never_everywhere", &x, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
  hvd_wait(h, 120);
  FAIL("wait returned: the stall shutdown did not end the job");
  return 1;
}

/* The last rank submits something else than the others (4 operations):
 * the stall report is one line per group and says the ranks disagree; the
 * shutdown limit ends the job. */
static int run_stall_other(void) {
  float x[4] = {1, 1, 1, 1};
  hvd_handle_t h[4];
  static const char *const names[] = {"expected_a", "expected_b", "expected_c", "expected_d"};
  int n = rank == size - 1 ? 1 : 4;
  for (int i = 0; i < n; i++)
    hvd_allreduce_async(rank == size - 1 ? "something_else" : names[i], &x[i], 1, HVD_FLOAT32, HVD_SUM, NULL, NULL,
                        &h[i]);
  hvd_wait(h[0], 120);
  FAIL("wait returned: the stall shutdown did not end the job");
  return 1;
}

/* The ranks take different paths, as a script does that catches an
 * exception on one rank: rank 0 goes on to an allgather, the others wait in
 * a barrier.  Every rank waits, nothing can complete: the deadlock detector
 * must end the job (HVDSHIM_DEADLOCK_SECONDS). */
static int run_deadlock(void) {
  hvd_handle_t h;
  int32_t row = rank;
  if (rank == 0) {
    if (hvd_allgather_async("after.the.failure", &row, 1, 1, HVD_INT32, NULL, NULL, &h) == HVD_OK) hvd_wait(h, 120);
  } else {
    hvd_barrier(120);
  }
  FAIL("wait returned: the deadlock did not end the job");
  return 1;
}

/* The last rank computes for `secs` (it is late, not waiting) before it
 * submits; the others wait.  A stall warning, and no deadlock: the job
 * completes. */
static int run_slow(double secs) {
  float x = 1;
  hvd_handle_t h;
  if (rank == size - 1) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile double sink = 0;
    do { /* busy: computing, as a slow rank's training step does */
      for (int i = 0; i < 100000; i++) sink += i * 1e-9;
      clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 < secs);
    (void)sink;
  }
  if (hvd_allreduce_async("slow.rank", &x, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h) || hvd_wait(h, 120) || x != size)
    FAIL("slow.rank: %s (sum %g)", hvd_last_error(), x);
  else
    printf("engine_test[%d]: the slow rank's allreduce completed after %g s\n", rank, secs);
  return failures;
}

/* After a membership change that removed rank `gone` (of first_size): this
 * rank is renumbered in order, and an allgather of the survivors' first
 * ranks (tag.ranks) lists them in order. */
static void check_renumbered(int first, int first_size, int gone, const char *tag) {
  int want_rank = first - (first > gone);
  if (hvd_size() != first_size - 1 || hvd_rank() != want_rank)
    FAIL("after the change: rank %d of %d, expected %d of %d", hvd_rank(), hvd_size(), want_rank, first_size - 1);
  int32_t me = first;
  void *out = NULL;
  size_t rows = 0;
  hvd_handle_t h;
  char name[64];
  snprintf(name, sizeof name, "%s.ranks", tag);
  if (hvd_allgather_async(name, &me, 1, 1, HVD_INT32, NULL, NULL, &h) || hvd_allgather_wait(h, 60, &out, &rows))
    FAIL("%s: %s", name, hvd_last_error());
  for (size_t k = 0; out && k < rows; k++)
    if (((int32_t *)out)[k] != (int32_t)(k + (k >= (size_t)gone)))
      FAIL("allgather after the change: row %zu is rank %d", k, ((int32_t *)out)[k]);
  if (out && rows != (size_t)first_size - 1) FAIL("allgather after the change: %zu rows, expected %d", rows, first_size - 1);
  hvd_free(out);
  rank = hvd_rank();
}

/* Device memory for the GPU modes, from the CUDA runtime on the library
 * path (tests/gpu/fake-nccl.sh: the stand-in whose device memory is host
 * memory): 0, or -1 with a FAIL. */
static int (*dev_malloc)(void **p, size_t n);
static int (*dev_memcpy)(void *dst, const void *src, size_t n, int kind);
static int gpu_runtime(void) {
  void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
  if (h) {
    dev_malloc = (int (*)(void **, size_t))dlsym(h, "cudaMalloc");
    dev_memcpy = (int (*)(void *, const void *, size_t, int))dlsym(h, "cudaMemcpy");
  }
  if (!dev_malloc || !dev_memcpy) {
    FAIL("no CUDA runtime (libcudart.so.13) with cudaMalloc and cudaMemcpy: %s", h ? "symbols missing" : dlerror());
    return -1;
  }
  return 0;
}

/* An allreduce of `count` copies of *v (dtype float32) on device memory
 * when dev is not NULL (dev holds count floats), else of *v itself; *v is
 * the first element of the result. */
static hvd_status_t allreduce_one(const char *name, float *v, float *dev, size_t count) {
  hvd_handle_t h;
  hvd_status_t st;
  if (!dev) {
    st = hvd_allreduce_async(name, v, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
    return st == HVD_OK ? hvd_wait(h, 60) : st;
  }
  float *host = malloc(count * sizeof *host);
  for (size_t i = 0; i < count; i++) host[i] = *v;
  dev_memcpy(dev, host, count * sizeof *host, 1);
  st = hvd_allreduce_gpu_async(name, dev, count, HVD_FLOAT32, HVD_SUM, 0, NULL, NULL, NULL, &h);
  if (st == HVD_OK) st = hvd_wait(h, 60);
  if (st == HVD_OK) {
    dev_memcpy(host, dev, count * sizeof *host, 2);
    *v = host[0];
    for (size_t i = 1; i < count; i++)
      if (host[i] != host[0]) FAIL("%s: element %zu is %g, element 0 %g", name, i, host[i], host[0]);
  }
  free(host);
  return st;
}

/* `n` allreduces of device memory (1000 floats, then 3 M: pieces of the
 * stand-in NCCL's slots), each the sum over the ranks. */
static void run_gpu_sums(int n) {
  float *dev = NULL;
  size_t big = 3u << 20;
  if (gpu_runtime() != 0 || dev_malloc((void **)&dev, big * sizeof *dev) != 0) {
    FAIL("no device memory");
    return;
  }
  float want = (float)size * (float)(size + 1) / 2;
  for (int i = 0; i < n; i++) {
    char name[64];
    snprintf(name, sizeof name, "gpu.sums.%d", i);
    float v = (float)(rank + 1);
    hvd_status_t st = allreduce_one(name, &v, dev, i == n - 1 ? big : 1000);
    if (st != HVD_OK || v != want) {
      FAIL("%s: %s (sum %g, expected %g)", name, st != HVD_OK ? hvd_last_error() : "wrong sum", v, want);
      return;
    }
  }
  printf("engine_test[%d]: %d allreduces of device memory right\n", rank, n);
}

/* `n` device allreduces submitted one at a time with no wait between them
 * (as the Horovod API's allreduce_async from gradient hooks), then waited
 * for together: every sum right; prints how many groups they made and how
 * many cudaStreamWaitEvent calls the stand-in runtime saw (bounded by
 * tests/gpu/fake-nccl.sh). */
static void run_gpu_gather(int n) {
  const size_t each = 1000;
  float *dev = NULL;
  if (gpu_runtime() != 0 || dev_malloc((void **)&dev, (size_t)n * each * sizeof *dev) != 0) {
    FAIL("no device memory");
    return;
  }
  const int *waits = dlsym(RTLD_DEFAULT, "fake_stream_waits");
  float *host = malloc((size_t)n * each * sizeof *host);
  hvd_handle_t *h = calloc((size_t)n, sizeof *h);
  if (!host || !h) {
    FAIL("out of memory");
    return;
  }
  for (size_t k = 0; k < (size_t)n * each; k++) host[k] = (float)(rank + 1 + (int)(k / each));
  dev_memcpy(dev, host, (size_t)n * each * sizeof *host, 1);
  hvd_stats_t before, after;
  hvd_get_stats(&before);
  int w0 = waits ? __atomic_load_n(waits, __ATOMIC_RELAXED) : 0;
  for (int i = 0; i < n; i++) {
    char name[64];
    snprintf(name, sizeof name, "gpu.gather.%d", i);
    if (hvd_allreduce_gpu_async(name, dev + (size_t)i * each, each, HVD_FLOAT32, HVD_SUM, 0, NULL, NULL, NULL, &h[i]) !=
        HVD_OK) {
      FAIL("%s: %s", name, hvd_last_error());
      return;
    }
  }
  size_t bad = 0;
  if (hvd_wait_all(h, (size_t)n, &bad) != HVD_OK) {
    FAIL("gpu.gather.%zu: %s", bad, hvd_last_error());
    return;
  }
  hvd_get_stats(&after);
  int w = waits ? __atomic_load_n(waits, __ATOMIC_RELAXED) - w0 : -1;
  dev_memcpy(host, dev, (size_t)n * each * sizeof *host, 2);
  for (size_t k = 0; k < (size_t)n * each; k++) {
    float want = (float)size * (float)(size + 1) / 2 + (float)size * (float)(k / each);
    if (host[k] != want) {
      FAIL("gpu.gather.%zu: element %zu is %g, expected %g", k / each, k % each, host[k], want);
      break;
    }
  }
  printf("engine_test[%d]: gather %d tensors: %llu groups, %d stream waits\n", rank, n,
         (unsigned long long)(after.groups - before.groups), w);
  free(host);
  free(h);
}

/* `n` times: one device allreduce submitted alone, then polled with
 * hvd_test (no thread waits): prints the median time to completion, which
 * a poll that ends the gathering and wakes the engine keeps short and an
 * engine left asleep until its idle tick (100 ms) does not (bounded by
 * tests/gpu/fake-nccl.sh). */
static void run_gpu_poll(int n) {
  float *dev = NULL;
  if (gpu_runtime() != 0 || dev_malloc((void **)&dev, 1000 * sizeof *dev) != 0) {
    FAIL("no device memory");
    return;
  }
  double *ms = calloc((size_t)n, sizeof *ms);
  if (!ms) return;
  for (int i = 0; i < n; i++) {
    char name[64];
    snprintf(name, sizeof name, "gpu.poll.%d", i);
    usleep(3000); /* the engine idle again */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    hvd_handle_t h;
    if (hvd_allreduce_gpu_async(name, dev, 1000, HVD_FLOAT32, HVD_SUM, 0, NULL, NULL, NULL, &h) != HVD_OK) {
      FAIL("%s: %s", name, hvd_last_error());
      return;
    }
    int done = 0;
    while (!done) {
      if (hvd_test(h, &done) != HVD_OK) {
        FAIL("%s: %s", name, hvd_last_error());
        return;
      }
      if (!done) usleep(50);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    if (hvd_wait(h, 10) != HVD_OK) FAIL("%s: %s", name, hvd_last_error());
  }
  for (int i = 1; i < n; i++) /* insertion sort: the median */
    for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
      double t = ms[j];
      ms[j] = ms[j - 1], ms[j - 1] = t;
    }
  printf("engine_test[%d]: poll %d alone-submitted device allreduces: median %.2f ms to completion\n", rank, n,
         ms[n / 2]);
  free(ms);
}

/* Host allreduces:
 * 1. `n` times, one submitted alone (as the Horovod API's allreduce_async
 *    does) and tested at once: it gathers as in Horovod and nothing wakes
 *    the engine until a thread asks for a result, so the first hvd_test
 *    finds it still running ("done at once" stays well below n; Horovod's
 *    own test_horovod_reducescatter_async_fused asserts it is not always
 *    done); that poll ends the gathering, and the median time to completion
 *    stays short, not the engine's idle tick (HVDSHIM_TEST_IDLE_TICK, which
 *    host-poll.sh makes 20 s);
 * 2. 10 times, one submitted and waited for by rank 0 first, by the others
 *    2 ms later, then every rank idle for 150 ms: the waits that took
 *    longer than half the idle tick are counted: a waiting thread that ran
 *    a cycle after its engine thread had completed its handle sat in that
 *    cycle's control round until the idle peers' tick. */
static void run_host_poll(int n) {
  const char *tick = getenv("HVDSHIM_TEST_IDLE_TICK");
  double half_ms = 500 * (tick && *tick ? atof(tick) : 0.1);
  float v[256];
  double *ms = calloc((size_t)n, sizeof *ms);
  if (!ms) return;
  int at_once = 0, slow = 0;
  for (int i = 0; i < n; i++) {
    char name[64];
    snprintf(name, sizeof name, "host.poll.%d", i);
    for (int k = 0; k < 256; k++) v[k] = (float)(rank + 1);
    usleep(3000); /* the engine idle again */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    hvd_handle_t h;
    if (hvd_allreduce_async(name, v, 256, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h) != HVD_OK) {
      FAIL("%s: %s", name, hvd_last_error());
      return;
    }
    int done = 0;
    for (int tries = 0; !done; tries++) {
      if (hvd_test(h, &done) != HVD_OK) {
        FAIL("%s: %s", name, hvd_last_error());
        return;
      }
      if (done && tries == 0) at_once++;
      if (!done) usleep(50);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms[i] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    if (hvd_wait(h, 10) != HVD_OK) FAIL("%s: %s", name, hvd_last_error());
    if (v[0] != (float)size * (float)(size + 1) / 2) FAIL("%s: sum %g, expected %g", name, v[0], (float)size * (float)(size + 1) / 2);
  }
  for (int i = 0; i < 10; i++) {
    char name[64];
    snprintf(name, sizeof name, "host.wait.%d", i);
    if (rank > 0) usleep(2000); /* rank 0 waits first, in a cycle of its own */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    hvd_handle_t h;
    if (hvd_allreduce_async(name, v, 256, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h) != HVD_OK ||
        usleep(100) != 0 || hvd_wait(h, -1) != HVD_OK) { /* (a Python caller's time between the two) */
      FAIL("%s: %s", name, hvd_last_error());
      return;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    slow += (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6 > half_ms;
    usleep(150000); /* every engine idle, asleep to its tick */
  }
  for (int i = 1; i < n; i++) /* insertion sort: the median */
    for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
      double t = ms[j];
      ms[j] = ms[j - 1], ms[j - 1] = t;
    }
  printf("engine_test[%d]: host poll %d: done at once %d, median %.2f ms to completion; waits over half the idle tick "
         "(%.0f ms): %d\n", rank, n, at_once, ms[n / 2], half_ms, slow);
  free(ms);
}

/* `steps` training steps as the PyTorch adapter runs them on a core per
 * rank: 5 ms of work (a sleep here), then the step's batch, submitted with
 * HVD_BATCH_CALLER_WAITS and waited for at once, so the waiting thread runs
 * the cycle itself.  Prints how many cycles the engine thread ran meanwhile
 * (after 10 steps of warm-up): its idle tick counts from the last cycle,
 * whoever ran it, so while every step runs one it runs none of its own (a
 * tick would start a round the peers join only at their next step, and that
 * step's wait would sit in it); host-poll.sh checks the count is small. */
static void run_helped_steps(int steps) {
  hvd_stats_t s0 = {0}, s1;
  float w[64];
  for (int i = 0; i < steps + 10; i++) {
    if (i == 10) hvd_get_stats(&s0);
    nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    for (int k = 0; k < 64; k++) w[k] = (float)(rank + 1);
    hvd_allreduce_item item[1] = {{"helped.step", w, 64, HVD_FLOAT32, HVD_SUM, -1, NULL}};
    hvd_handle_t h;
    if (hvd_allreduce_batch_async_ex(item, 1, &h, HVD_BATCH_CALLER_WAITS) != HVD_OK || hvd_wait_all(&h, 1, NULL) != HVD_OK) {
      FAIL("helped step %d: %s", i, hvd_last_error());
      return;
    }
    if (w[0] != (float)size * (float)(size + 1) / 2) FAIL("helped step %d: sum %g", i, w[0]);
  }
  hvd_get_stats(&s1);
  unsigned long long cycles = s1.cycles - s0.cycles, helped = s1.cycles_helped - s0.cycles_helped;
  printf("engine_test[%d]: helped steps %d: %llu cycles, the engine thread's %llu\n", rank, steps, cycles, cycles - helped);
}

/* HVDSHIM_ELASTIC=1: rank `dying` kills itself (SIGKILL) after `at`
 * allreduces; the others go on until `after` allreduces have completed over
 * the survivors.  Every sum is the sum over the ranks alive when it
 * completed; an allreduce in flight at the death fails naming it and is
 * submitted again; the survivors end renumbered in order, and an allgather
 * of their first ranks says so.  gpu: on device memory (1000 floats). */
static void run_survive(int dying, int at, int after, int gpu) {
  float *dev = NULL;
  if (gpu && (gpu_runtime() != 0 || dev_malloc((void **)&dev, 1000 * sizeof *dev) != 0)) {
    FAIL("no device memory");
    return;
  }
  int first = rank, first_size = size;
  float all = 0, rest = 0;
  for (int r = 0; r < first_size; r++) all += (float)(r + 1), rest += r == dying ? 0.0f : (float)(r + 1);
  int shrunk = 0, retried = 0;
  for (int i = 0; i < 100000 && shrunk < after; i++) {
    if (first == dying && i == at) {
      fflush(stdout);
      kill(getpid(), SIGKILL);
    }
    char name[64];
    snprintf(name, sizeof name, "survive.%d", i);
    float v = (float)(first + 1);
    hvd_status_t st = allreduce_one(name, &v, dev, 1000);
    if (st != HVD_OK) {
      if (!shrunk && st == HVD_ERR_MEMBERSHIP && strstr(hvd_last_error(), "died")) { /* in flight at the death */
        retried++;
        continue;
      }
      FAIL("%s: %s", name, hvd_last_error());
      return;
    }
    if (v == all && !shrunk) continue;
    if (v != rest) {
      FAIL("%s: sum %g, expected %g%s", name, v, shrunk ? rest : all, shrunk ? " (the survivors)" : " (every rank) or the survivors'");
      return;
    }
    shrunk++;
  }
  if (shrunk < after) {
    FAIL("the job never went on without rank %d", dying);
    return;
  }
  check_renumbered(first, first_size, dying, "survive");
  printf("engine_test[%d]: was rank %d of %d, went on as %d of %d after rank %d died; %d submitted again\n", rank,
         first, first_size, hvd_rank(), hvd_size(), dying, retried);
}

/* A numeric field of /proc/self/status ("VmRSS:", "Threads:"), or -1. */
static long status_field(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, n)) v = atol(line + n);
  if (f) fclose(f);
  return v;
}

/* Rank `j` finishes early (hvd_shutdown joins): an operation it had in
 * flight drains, then the others' allreduces (sum, avg, min, max; new and
 * cached), allgather, broadcasts and a barrier complete without it; averages
 * divide by the ranks still running; a broadcast from j fails on every rank;
 * j's hvd_shutdown returns when all have finished and refuses new work. */
static int run_join(int j) {
  if (hvd_barrier(60)) FAIL("barrier: %s", hvd_last_error());
  float d = 5;
  hvd_handle_t hd, h;
  hvd_allreduce_async("drained", &d, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &hd);
  if (rank == j) {
    hvd_shutdown(); /* returns once every rank has finished */
    long th = status_field("Threads:");
    for (int i = 0; th > 1 && i < 200; i++) { /* a joined thread may stay counted a moment: see shim_threads */
      nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
      th = status_field("Threads:");
    }
    if (th != 1) FAIL("%ld threads left after hvd_shutdown (engine, watchdog and MPI's should be gone)", th);
    else printf("engine_test[%d]: 1 thread left after hvd_shutdown\n", rank);
    if (hvd_wait(hd, 1) != HVD_OK || d != 5.0f * size) FAIL("in-flight 'drained' at shutdown: %g (%s)", d, hvd_last_error());
    if (hvd_allreduce_async("after_leaving", &d, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h) != HVD_ERR_SHUTDOWN)
      FAIL("submission accepted after shutdown");
    else if (!strstr(hvd_last_error(), "finished")) FAIL("refusal does not say why: %s", hvd_last_error());
    return failures;
  }
  if (hvd_wait(hd, 60) != HVD_OK || d != 5.0f * size) FAIL("drained: %g (%s)", d, hvd_last_error());
  int n = size - 1, first = j == 0 ? 1 : 0, top = j == size - 1 ? size - 2 : size - 1;
  for (int it = 0; it < 4; it++) { /* again and again: the cached fast path too */
    float s = (float)(rank + 1);
    double a = rank + 1;
    int32_t mn = rank + 10, mx = rank + 10;
    hvd_handle_t hs[4];
    hvd_allreduce_async("j.sum", &s, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &hs[0]);
    hvd_allreduce_async("j.avg", &a, 1, HVD_FLOAT64, HVD_AVG, NULL, NULL, &hs[1]);
    hvd_allreduce_async("j.min", &mn, 1, HVD_INT32, HVD_MIN, NULL, NULL, &hs[2]);
    hvd_allreduce_async("j.max", &mx, 1, HVD_INT32, HVD_MAX, NULL, NULL, &hs[3]);
    for (int k = 0; k < 4; k++)
      if (hvd_wait(hs[k], 60) != HVD_OK) FAIL("iteration %d op %d: %s", it, k, hvd_last_error());
    double want_sum = size * (size + 1) / 2.0 - (j + 1);
    if (s != (float)want_sum) FAIL("j.sum %g, expected %g (the finished rank contributed)", s, want_sum);
    if (fabs(a - want_sum / n) > 1e-12) FAIL("j.avg %g, expected %g (average over the %d running ranks)", a, want_sum / n, n);
    if (mn != 10 + first) FAIL("j.min %d, expected %d", mn, 10 + first);
    if (mx != 10 + top) FAIL("j.max %d, expected %d", mx, 10 + top);
  }
  int32_t rows[64];
  for (int k = 0; k <= rank && k < 64; k++) rows[k] = rank;
  hvd_allgather_async("j.gather", rows, (size_t)rank + 1, 1, HVD_INT32, NULL, NULL, &h);
  void *out = NULL;
  size_t total = 0;
  if (hvd_allgather_wait(h, 60, &out, &total) != HVD_OK) FAIL("j.gather: %s", hvd_last_error());
  else {
    size_t want = (size_t)(size * (size + 1) / 2 - (j + 1)), at = 0;
    if (total != want) FAIL("j.gather: %zu rows, expected %zu", total, want);
    for (int r = 0; r < size && total == want; r++)
      for (int k = 0; r != j && k <= r; k++, at++)
        if (((int32_t *)out)[at] != r) FAIL("j.gather row %zu: %d, expected %d", at, ((int32_t *)out)[at], r);
    hvd_free(out);
  }
  double b = 100 + rank;
  hvd_broadcast_async("j.first", &b, 1, HVD_FLOAT64, HVD_ROOT_FIRST_ACTIVE, NULL, NULL, &h);
  if (hvd_wait(h, 60) != HVD_OK || b != 100 + first) FAIL("j.first: %g, expected %d (%s)", b, 100 + first, hvd_last_error());
  char why[64];
  snprintf(why, sizeof why, "root rank %d has finished", j);
  hvd_broadcast_async("j.deadroot", &b, 1, HVD_FLOAT64, j, NULL, NULL, &h);
  expect_error(HVD_ERR_SHUTDOWN, h, "j.deadroot", why);
  if (hvd_barrier(60)) FAIL("barrier after the join: %s", hvd_last_error());
  return failures;
}

/* `iters` measured steps after iters / 10 steps of warm-up.  Each step waits
 * for its 20 tensors, so it takes at least one engine cycle: fewer cycles
 * than steps would mean a counter that lies, not an engine that idles. */
static int run_memory(int iters) {
  enum { N = 20 };
  static float bufs[N][256];
  int warmup = iters / 10;
  long warm = 0;
  hvd_stats_t s0, s1;
  for (int it = 0; it < warmup + iters; it++) {
    hvd_handle_t h[N];
    if (it == warmup) warm = status_field("VmRSS:"), hvd_get_stats(&s0);
    for (int t = 0; t < N; t++) {
      char n[32];
      snprintf(n, sizeof n, "mem.%d", t);
      if (hvd_allreduce_async(n, bufs[t], 256, HVD_FLOAT32, HVD_AVG, NULL, NULL, &h[t])) FAIL("submit: %s", hvd_last_error());
    }
    for (int t = 0; t < N; t++) hvd_wait(h[t], 60);
  }
  hvd_get_stats(&s1);
  long end = status_field("VmRSS:");
  unsigned long long cycles = s1.cycles - s0.cycles;
  printf("engine_test[%d]: memory: RSS %ld KiB after warm-up, %ld KiB after %d more steps (%llu cycles)\n", rank, warm,
         end, iters, cycles);
  if (cycles < (unsigned long long)iters) FAIL("%llu cycles measured for %d steps", cycles, iters);
  if (end - warm > 1024) FAIL("RSS grew by %ld KiB", end - warm);
  return failures;
}

/* mib MiB of float32 summed iters times (0: until killed), a line per
 * iteration: a long stretch inside the data path (tests/mpi/shm.sh kills a
 * rank there). */
static int run_big(size_t mib, long iters) {
  size_t n = mib << 18;
  float *b = malloc(n * sizeof *b);
  if (!b) FAIL("out of memory");
  for (long it = 0; b && (iters == 0 || it < iters); it++) {
    for (size_t i = 0; i < n; i++) b[i] = (float)(rank + 1);
    hvd_handle_t h;
    if (hvd_allreduce_async("big", b, n, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h) != HVD_OK || hvd_wait(h, 600) != HVD_OK)
      FAIL("big allreduce: %s", hvd_last_error());
    float want = (float)size * (float)(size + 1) / 2;
    if (b[0] != want || b[n / 2] != want || b[n - 1] != want) FAIL("big allreduce: %g, expected %g", b[n - 1], want);
    printf("engine_test[%d]: big iteration %ld\n", rank, it);
    fflush(stdout);
  }
  free(b);
  return failures;
}

static int run_adopt(void) {
  int provided;
  MPI_Query_thread(&provided);
  if (provided != MPI_THREAD_MULTIPLE) FAIL("MPI_Init was not upgraded to MPI_THREAD_MULTIPLE (%d)", provided);
  double x = rank;
  hvd_handle_t h;
  hvd_allreduce_async("adopted", &x, 1, HVD_FLOAT64, HVD_SUM, NULL, NULL, &h);
  if (hvd_wait(h, 60) || x != size * (size - 1) / 2.0) FAIL("adopted allreduce: %g", x);
  return failures;
}

/* Where no GPU can be used: a GPU buffer is refused with the reason, on the
 * caller's thread, and CPU work goes on unaffected. */
static int run_gpu_refused(void) {
  char what[512];
  int usable = hvd_gpu_status(what, sizeof what);
  printf("engine_test[%d]: gpu status %d: %s\n", rank, usable, what);
  if (usable) {
    printf("engine_test[%d]: a GPU is usable here; nothing to refuse\n", rank);
    return failures;
  }
  float fake[4];
  hvd_handle_t h = -1;
  hvd_status_t st = hvd_allreduce_gpu_async("gpu.grad", fake, 4, HVD_FLOAT32, HVD_AVG, 0, NULL, NULL, NULL, &h);
  if (st != HVD_ERR_INVALID) FAIL("GPU allreduce without a GPU: status %d, expected HVD_ERR_INVALID", st);
  printf("engine_test[%d]: refused: %s\n", rank, hvd_last_error());
  if (!strstr(hvd_last_error(), "allreduce 'gpu.grad': GPU buffer: ")) FAIL("message: %s", hvd_last_error());
  st = hvd_broadcast_gpu_async("gpu.w", fake, 4, HVD_FLOAT32, 0, -2, NULL, NULL, NULL, &h);
  if (st != HVD_ERR_INVALID || !strstr(hvd_last_error(), "device -2 is not a CUDA device"))
    FAIL("negative device: %d %s", st, hvd_last_error());
  double x = rank + 1;
  hvd_allreduce_async("cpu.after", &x, 1, HVD_FLOAT64, HVD_SUM, NULL, NULL, &h);
  if (hvd_wait(h, 60) || x != size * (size + 1) / 2.0) FAIL("CPU allreduce after the refusal: %g", x);
  return failures;
}

static void run_steps(int steps, int k, size_t elems) {
  float *bufs = malloc(sizeof(float) * (size_t)k * elems);
  hvd_handle_t *hs = malloc(sizeof *hs * (size_t)k);
  if (!bufs || !hs) {
    FAIL("out of memory");
    return;
  }
  char name[64];
  for (int s = 0; s < steps && !failures; s++) {
    for (int t = 0; t < k; t++) {
      float *b = bufs + (size_t)t * elems;
      for (size_t i = 0; i < elems; i++) b[i] = (float)value(t, i, rank, HVD_FLOAT32);
      snprintf(name, sizeof name, "step.%d", t);
      if (hvd_allreduce_async(name, b, elems, HVD_FLOAT32, HVD_SUM, NULL, NULL, &hs[t]) != HVD_OK)
        FAIL("submit %s: %s", name, hvd_last_error());
    }
    for (int t = 0; t < k; t++) {
      if (hvd_wait(hs[t], 60) != HVD_OK) FAIL("wait step.%d: %s", t, hvd_last_error());
      float *b = bufs + (size_t)t * elems;
      for (size_t i = 0; i < elems; i++) {
        int want = 0;
        for (int r = 0; r < size; r++) want += value(t, i, r, HVD_FLOAT32);
        if (b[i] != (float)want) {
          FAIL("step %d tensor %d element %zu: %g, expected %d", s, t, i, b[i], want);
          break;
        }
      }
    }
    hvd_step_mark(32);
  }
  free(bufs);
  free(hs);
}

/* hvd_join (Horovod's join) with uneven work: rank r runs r+1 steps of an
 * allreduce (SUM) and an allgather, then joins; a step's sum covers the ranks
 * still stepping, its gather their rows.  Every rank's join returns the
 * last rank to join (the last, which steps most); then all go on together,
 * twice over (join is reusable), and a final allreduce sums every rank. */
static void run_hvd_join(void) {
  for (int round = 0; round < 2; round++) {
    for (int s = 0; s <= rank; s++) {
      char name[64];
      float v = (float)(rank + 1);
      int32_t row = rank;
      snprintf(name, sizeof name, "uneven.%d.%d", round, s);
      hvd_handle_t h;
      if (hvd_allreduce_async(name, &v, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h) || hvd_wait(h, 60))
        FAIL("%s: %s", name, hvd_last_error());
      float want = 0; /* ranks s..size-1 still step */
      for (int r = s; r < size; r++) want += (float)(r + 1);
      if (v != want) FAIL("%s: sum %g, expected %g (the ranks still stepping)", name, v, want);
      snprintf(name, sizeof name, "uneven.rows.%d.%d", round, s);
      void *out = NULL;
      size_t rows = 0;
      if (hvd_allgather_async(name, &row, 1, 1, HVD_INT32, NULL, NULL, &h) || hvd_allgather_wait(h, 60, &out, &rows))
        FAIL("%s: %s", name, hvd_last_error());
      else if (rows != (size_t)(size - s) || ((int32_t *)out)[0] != s)
        FAIL("%s: %zu rows starting at %d, expected %d from rank %d", name, rows, rows ? ((int32_t *)out)[0] : -1,
             size - s, s);
      hvd_free(out);
    }
    int last = -2;
    if (hvd_join(&last) != HVD_OK) FAIL("hvd_join: %s", hvd_last_error());
    if (last != size - 1) FAIL("hvd_join: the last rank to join is %d, expected %d", last, size - 1);
  }
  float all = 1;
  hvd_handle_t h;
  if (hvd_allreduce_async("after.join", &all, 1, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h) || hvd_wait(h, 60) ||
      all != (float)size)
    FAIL("allreduce after hvd_join: %g (%s), expected %d", all, hvd_last_error(), size);
  printf("engine_test[%d]: hvd_join with uneven steps, twice, last rank %d\n", rank, size - 1);
}

/* Rank 0 joins while the others finish (exit): its hvd_join fails with
 * HVD_ERR_SHUTDOWN naming why, and nothing hangs. */
static void run_join_vs_exit(void) {
  if (rank != 0) return;
  int last = -2;
  hvd_status_t st = hvd_join(&last);
  if (st != HVD_ERR_SHUTDOWN) FAIL("hvd_join while the others exit: %s, expected shutdown", hvd_status_name(st));
  else printf("engine_test[0]: hvd_join failed as expected: %s\n", hvd_last_error());
}

/* Process sets: A = every rank but the last, B = every rank but the first
 * (they overlap), S = the last rank alone.  Each rank submits its sets'
 * operations and global ones in an order of its own, many times (the cache
 * then answers them); results are checked against formulas over the
 * members; then errors, removal, and members that joined. */
static void check_set_reduce(const char *name, int set, int lo, int hi, hvd_op_t op, int joined_from) {
  /* members lo..hi, those >= joined_from have joined (no data) */
  double v = rank + 1, want = 0;
  int n = 0;
  for (int r = lo; r <= hi && r < joined_from; r++) want += r + 1, n++;
  if (op == HVD_AVG) want /= n;
  hvd_handle_t h;
  hvd_next_process_set(set);
  if (hvd_allreduce_async(name, &v, 1, HVD_FLOAT64, op, NULL, NULL, &h) || hvd_wait(h, 60))
    FAIL("%s: %s", name, hvd_last_error());
  else if (v != want) FAIL("%s: %g, expected %g", name, v, want);
}

static void run_process_sets(void) {
  if (size < 3) {
    FAIL("process-sets needs at least 3 ranks");
    return;
  }
  int last = size - 1, ra[64], rb[64], na = 0, nb = 0, A, B, S;
  for (int r = last - 1; r >= 0; r--) ra[na++] = r; /* given in any order */
  for (int r = 1; r <= last; r++) rb[nb++] = r;
  if (hvd_process_set_add(ra, na, &A) || hvd_process_set_add(rb, nb, &B) || hvd_process_set_add(&last, 1, &S))
    FAIL("process set add: %s", hvd_last_error());
  if (A != 1 || B != 2 || S != 3) FAIL("process set ids %d %d %d, expected 1 2 3", A, B, S);
  if (hvd_process_set_size(A) != na || hvd_process_set_rank(B) != (rank >= 1 ? rank - 1 : -1) ||
      hvd_process_set_size(0) != size || hvd_process_set_rank(0) != rank)
    FAIL("process set size/rank: %d %d", hvd_process_set_size(A), hvd_process_set_rank(B));
  int inA = rank < last, inB = rank > 0, inS = rank == last;
  uint64_t seed = 1000 + (uint64_t)rank;
  for (int it = 0; it < 30; it++) {
    /* per rank, a shuffled order of: A sum, A avg, B sum (float32 vector), S, global */
    enum { N = 5 };
    int order[N] = {0, 1, 2, 3, 4};
    for (int k = N - 1; k > 0; k--) {
      int j = (int)(rng_next(&seed) % (uint64_t)(k + 1)), t = order[k];
      order[k] = order[j], order[j] = t;
    }
    double a_sum = rank + 1, a_avg = rank + 1, s_val = rank + 1, g = rank + 1;
    float b_vec[100];
    for (int i = 0; i < 100; i++) b_vec[i] = (float)(rank * i);
    hvd_handle_t h[N];
    int used[N] = {0};
    for (int k = 0; k < N; k++) {
      int o = order[k], st = 0;
      if (o == 0 && inA) hvd_next_process_set(A), st = hvd_allreduce_async("set.a.sum", &a_sum, 1, HVD_FLOAT64, HVD_SUM, NULL, NULL, &h[o]) + 1;
      if (o == 1 && inA) hvd_next_process_set(A), st = hvd_allreduce_async("set.a.avg", &a_avg, 1, HVD_FLOAT64, HVD_AVG, NULL, NULL, &h[o]) + 1;
      if (o == 2 && inB) hvd_next_process_set(B), st = hvd_allreduce_async("set.b.vec", b_vec, 100, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h[o]) + 1;
      if (o == 3 && inS) hvd_next_process_set(S), st = hvd_allreduce_async("set.s", &s_val, 1, HVD_FLOAT64, HVD_MAX, NULL, NULL, &h[o]) + 1;
      if (o == 4) st = hvd_allreduce_async("set.global", &g, 1, HVD_FLOAT64, HVD_SUM, NULL, NULL, &h[o]) + 1;
      if (st > 1) FAIL("iteration %d, op %d: submit: %s", it, o, hvd_last_error());
      used[o] = st == 1;
    }
    for (int o = 0; o < N; o++)
      if (used[o] && hvd_wait(h[o], 60)) FAIL("iteration %d, op %d: %s", it, o, hvd_last_error());
    double sa = 0, sg = 0;
    for (int r = 0; r < last; r++) sa += r + 1;
    for (int r = 0; r <= last; r++) sg += r + 1;
    if (inA && (a_sum != sa || a_avg != sa / na)) FAIL("set A: sum %g avg %g, expected %g %g", a_sum, a_avg, sa, sa / na);
    if (inS && s_val != last + 1) FAIL("set S: %g", s_val);
    if (g != sg) FAIL("global: %g, expected %g", g, sg);
    for (int i = 0; inB && i < 100; i++) {
      float want = 0;
      for (int r = 1; r <= last; r++) want += (float)(r * i);
      if (b_vec[i] != want) {
        FAIL("set B element %d: %g, expected %g", i, b_vec[i], want);
        break;
      }
    }
  }
  /* broadcast in B from its last member, allgather in A (rows = rank + 1), barrier in B */
  int32_t bc[4] = {rank, rank, rank, rank}, rows[64];
  hvd_handle_t h;
  if (inB) {
    hvd_next_process_set(B);
    if (hvd_broadcast_async("set.b.bcast", bc, 4, HVD_INT32, last, NULL, NULL, &h) || hvd_wait(h, 60)) FAIL("bcast: %s", hvd_last_error());
    else if (bc[0] != last || bc[3] != last) FAIL("set B broadcast: %d, expected %d", bc[0], last);
    hvd_next_process_set(B);
    if (hvd_barrier(60)) FAIL("barrier on B: %s", hvd_last_error());
  }
  if (inA) {
    for (int i = 0; i <= rank; i++) rows[i] = rank;
    void *out = NULL;
    size_t got = 0;
    hvd_next_process_set(A);
    if (hvd_allgather_async("set.a.gather", rows, (size_t)rank + 1, 1, HVD_INT32, NULL, NULL, &h) ||
        hvd_allgather_wait(h, 60, &out, &got))
      FAIL("allgather on A: %s", hvd_last_error());
    else {
      size_t at = 0, want = (size_t)na * (size_t)(na + 1) / 2;
      if (got != want) FAIL("allgather on A: %zu rows, expected %zu", got, want);
      for (int r = 0; r < last && at < got; r++)
        for (int i = 0; i <= r; i++, at++)
          if (((int32_t *)out)[at] != r) FAIL("allgather on A: row %zu is %d, expected %d", at, ((int32_t *)out)[at], r);
      hvd_free(out);
    }
  }
  /* errors: a non-member, an unknown set, a root outside the set, a member list that differs */
  double x = 1;
  hvd_next_process_set(inA ? B : A); /* rank 0 is not in B; the last rank not in A */
  if (!inA || !inB) {
    if (hvd_allreduce_async("set.not.mine", &x, 1, HVD_FLOAT64, HVD_SUM, NULL, NULL, &h) != HVD_ERR_INVALID ||
        !strstr(hvd_last_error(), "is not in process set"))
      FAIL("a non-member's submission: %s", hvd_last_error());
  } else {
    hvd_next_process_set(0);
  }
  hvd_next_process_set(99);
  if (hvd_allreduce_async("set.unknown", &x, 1, HVD_FLOAT64, HVD_SUM, NULL, NULL, &h) != HVD_ERR_INVALID ||
      !strstr(hvd_last_error(), "process set 99 does not exist"))
    FAIL("an unknown set: %s", hvd_last_error());
  if (inB) {
    hvd_next_process_set(B);
    if (hvd_broadcast_async("set.b.badroot", bc, 1, HVD_INT32, 0, NULL, NULL, &h) != HVD_ERR_INVALID ||
        !strstr(hvd_last_error(), "root rank 0 is not in process set"))
      FAIL("a root outside the set: %s", hvd_last_error());
  }
  int mine[2] = {0, rank == 0 ? 2 : 1}, bad;
  if (hvd_process_set_add(mine, 2, &bad) != HVD_ERR_MISMATCH || !strstr(hvd_last_error(), "member list"))
    FAIL("differing member lists: %s", hvd_last_error());
  else if (rank == 0) printf("engine_test: got expected error: %s\n", hvd_last_error());
  if (hvd_process_set_remove(0) != HVD_ERR_INVALID || hvd_process_set_add(mine, 0, &bad) != HVD_ERR_INVALID ||
      hvd_process_set_add((int[]){1, 1}, 2, &bad) != HVD_ERR_INVALID)
    FAIL("bad process set arguments accepted");
  /* members that join: the last rank (in B) and rank 0 (not in B) join at
   * once; B's other members average over themselves */
  if (rank == 0 || rank == last) {
    if (hvd_join(NULL)) FAIL("join: %s", hvd_last_error());
  } else {
    for (int i = 0; i < 5; i++) check_set_reduce("set.b.joined", B, 1, last, HVD_AVG, last);
    if (hvd_join(NULL)) FAIL("join: %s", hvd_last_error());
  }
  /* removal: the set's id is gone afterwards, on every rank */
  if (hvd_process_set_remove(A)) FAIL("remove A: %s", hvd_last_error());
  if (hvd_process_set_remove(A) != HVD_ERR_INVALID) FAIL("removing A twice accepted");
  hvd_next_process_set(A);
  if (hvd_allreduce_async("set.removed", &x, 1, HVD_FLOAT64, HVD_SUM, NULL, NULL, &h) != HVD_ERR_INVALID)
    FAIL("a removed set accepted a submission");
  if (inB) check_set_reduce("set.b.after", B, 1, last, HVD_SUM, size);
  int again;
  if (hvd_process_set_add(ra, na, &again) || again != 4) FAIL("add after remove: id %d (%s)", again, hvd_last_error());
  if (inA) check_set_reduce("set.a.again", again, 0, last - 1, HVD_SUM, size);
  printf("engine_test[%d]: process sets done\n", rank);
}

/* Reducescatter (every dtype and op, a row count the ranks do not divide)
 * and alltoall (uneven splits, zeros among them), over every rank and over
 * a set of all ranks but rank 0; then with the last rank joined (its part
 * of a reducescatter is the identity, averages over the others; it sends
 * nothing and drops what it receives). */
static int scatter_ok(int t, int gi, const int *mem, int n, int upto, hvd_dtype_t dt, hvd_op_t op, double got) {
  double want = op == HVD_PROD ? 1 : op == HVD_MIN ? 1e9 : op == HVD_MAX ? -1e9 : 0;
  int k = 0;
  for (int m = 0; m < n; m++) {
    if (mem[m] >= upto) continue;
    double v = value_op(t, (size_t)gi, mem[m], dt, op);
    want = op == HVD_PROD ? want * v : op == HVD_MIN ? (v < want ? v : want) : op == HVD_MAX ? (v > want ? v : want) : want + v;
    k++;
  }
  if (op == HVD_AVG) want = dt <= HVD_BFLOAT16 && dt != HVD_INT32 ? want / k : trunc(want / k);
  double tol = dt == HVD_FLOAT16 || dt == HVD_BFLOAT16 ? 2e-2 : 1e-6;
  return fabs(got - want) <= tol * (fabs(want) + 1);
}

static void run_reducescatter(int set, const int *mem, int n, int upto, int only_op, const char *tag) {
  int idx = -1;
  for (int m = 0; m < n; m++)
    if (mem[m] == rank) idx = m;
  if (idx < 0) return;
  for (int dt = 0; dt <= HVD_INT16; dt++)
    for (int op = 0; op <= HVD_PROD; op++) {
      if (only_op >= 0 && op != only_op) continue;
      int rows = 2 * n + 1, re = 3, mine = rows / n + (idx < rows % n), first = 0, t = dt * 8 + op;
      for (int m = 0; m < idx; m++) first += rows / n + (m < rows % n);
      char in[8 * 64], out[8 * 64], name[96];
      for (int i = 0; i < rows * re; i++) store(in, (size_t)i, (hvd_dtype_t)dt, value_op(t, (size_t)i, rank, (hvd_dtype_t)dt, (hvd_op_t)op));
      snprintf(name, sizeof name, "rs.%s.%d.%d", tag, dt, op);
      hvd_handle_t h;
      hvd_next_process_set(set);
      if (hvd_reducescatter_async(name, in, out, (size_t)rows, (size_t)re, (hvd_dtype_t)dt, (hvd_op_t)op, NULL, NULL, &h) ||
          hvd_wait(h, 60)) {
        FAIL("%s: %s", name, hvd_last_error());
        continue;
      }
      for (int j = 0; j < mine * re; j++)
        if (!scatter_ok(t, first * re + j, mem, n, upto, (hvd_dtype_t)dt, (hvd_op_t)op, load(out, (size_t)j, (hvd_dtype_t)dt))) {
          FAIL("%s: element %d of this rank's %d rows is %g", name, j, mine, load(out, (size_t)j, (hvd_dtype_t)dt));
          break;
        }
    }
}

static void run_alltoall_check(int set, const int *mem, int n, int upto, const char *tag) {
  int idx = -1;
  for (int m = 0; m < n; m++)
    if (mem[m] == rank) idx = m;
  if (idx < 0) return;
  int64_t splits[64], recv[64];
  int32_t in[2 * 3 * 64];
  int at = 0;
  for (int j = 0; j < n; j++) {
    splits[j] = (rank + j) % 3; /* rows to member j (0 for some) */
    for (int k = 0; k < splits[j]; k++, at += 2) in[at] = rank * 100 + j * 10 + k, in[at + 1] = -in[at];
  }
  char name[64];
  snprintf(name, sizeof name, "a2a.%s", tag);
  hvd_handle_t h;
  void *out = NULL;
  size_t rows = 0;
  hvd_next_process_set(set);
  if (hvd_alltoall_async(name, in, splits, 2, HVD_INT32, recv, NULL, NULL, &h) || hvd_allgather_wait(h, 60, &out, &rows)) {
    FAIL("%s: %s", name, hvd_last_error());
    return;
  }
  size_t want_rows = 0, r = 0;
  for (int m = 0; m < n; m++) {
    int64_t from = mem[m] < upto ? (mem[m] + idx) % 3 : 0; /* a joined member sends nothing */
    if (recv[m] != from) FAIL("%s: %lld rows from member %d, expected %lld", name, (long long)recv[m], m, (long long)from);
    for (int k = 0; k < from && r < rows; k++, r++) {
      int32_t *row = (int32_t *)out + 2 * r;
      if (row[0] != mem[m] * 100 + idx * 10 + k || row[1] != -row[0])
        FAIL("%s: row %zu is (%d, %d), expected %d from rank %d", name, r, row[0], row[1], mem[m] * 100 + idx * 10 + k, mem[m]);
    }
    want_rows += (size_t)from;
  }
  if (rows != want_rows) FAIL("%s: %zu rows, expected %zu", name, rows, want_rows);
  hvd_free(out);
}

static void run_scatter(void) {
  int all[64], rest[64], last = size - 1, S = 0;
  for (int r = 0; r < size; r++) all[r] = r, rest[r] = r + 1;
  run_reducescatter(0, all, size, size, -1, "all");
  run_alltoall_check(0, all, size, size, "all");
  if (size >= 3) {
    if (hvd_process_set_add(rest, size - 1, &S)) FAIL("process set add: %s", hvd_last_error());
    run_reducescatter(S, rest, size - 1, size, -1, "set");
    run_alltoall_check(S, rest, size - 1, size, "set");
  }
  if (rank == last) {
    if (hvd_join(NULL)) FAIL("join: %s", hvd_last_error());
  } else {
    run_reducescatter(0, all, size, last, HVD_AVG, "joined");
    run_alltoall_check(0, all, size, last, "joined");
    if (hvd_join(NULL)) FAIL("join: %s", hvd_last_error());
  }
  /* errors: a row size that differs, a null output for rows this rank gets */
  float a[8] = {0}, b[8];
  hvd_handle_t h;
  hvd_reducescatter_async("rs.bad", a, b, 2, rank == 0 ? 4 : 3, HVD_FLOAT32, HVD_SUM, NULL, NULL, &h);
  expect_error(HVD_ERR_MISMATCH, h, "rs.bad", "ranks disagree on the count");
  int64_t sp[64];
  for (int j = 0; j < size; j++) sp[j] = 0;
  hvd_alltoall_async("a2a.bad", a, sp, rank == 0 ? 2 : 1, HVD_FLOAT32, NULL, NULL, NULL, &h);
  expect_error(HVD_ERR_MISMATCH, h, "a2a.bad", "row size");
  sp[0] = -1;
  if (hvd_alltoall_async("a2a.neg", a, sp, 1, HVD_FLOAT32, NULL, NULL, NULL, &h) != HVD_ERR_INVALID ||
      !strstr(hvd_last_error(), "negative"))
    FAIL("a negative split: %s", hvd_last_error());
  printf("engine_test[%d]: reducescatter and alltoall done\n", rank);
}

/* Threads of hvdshim still listed in this process (named hvd-*). */
/* HVDSHIM_TEST_LEAVE=leaving: at an engine cycle that rank leaves the job
 * and the others rebuild the engine over the rest (engine_members.c).  Each
 * rank allreduces (its first rank + 1) until it has done `after` of them
 * over the smaller job: every sum is the sum over the ranks of the
 * membership it completed in, the membership only shrinks once, an
 * operation in flight at the change fails naming it (and is submitted
 * again), and afterwards the survivors are renumbered in order (their
 * rank, size, and an allgather of their first ranks say so). */
static void run_leave(int leaving, int after) {
  int first = rank, first_size = size;
  float all = 0, rest = 0;
  for (int r = 0; r < first_size; r++) all += (float)(r + 1), rest += r == leaving ? 0.0f : (float)(r + 1);
  int shrunk = 0, retried = 0;
  for (int i = 0; i < 200000 && shrunk < after; i++) {
    char name[64];
    snprintf(name, sizeof name, "leave.%d", i);
    float v = (float)(first + 1);
    hvd_status_t st = allreduce_one(name, &v, NULL, 1);
    if (st != HVD_OK) {
      const char *why = hvd_last_error();
      if (first == leaving && strstr(why, "this rank has left the job")) {
        printf("engine_test[%d]: left the job after %d operations\n", first, i);
        return;
      }
      if (first != leaving && !shrunk && st == HVD_ERR_MEMBERSHIP && strstr(why, "left the job")) { /* in flight at the change */
        retried++;
        continue;
      }
      FAIL("%s: %s", name, why);
      return;
    }
    if (v == all && !shrunk) continue;
    if (v != rest || first == leaving) {
      FAIL("%s: sum %g, expected %g (all %d ranks)%s", name, v, shrunk ? rest : all, first_size,
           shrunk ? " or after the change" : "");
      return;
    }
    shrunk++;
  }
  if (first == leaving) {
    FAIL("rank %d never left the job", first);
    return;
  }
  if (shrunk < after) {
    FAIL("the job never shrank (HVDSHIM_TEST_LEAVE=%d)", leaving);
    return;
  }
  check_renumbered(first, first_size, leaving, "leave");
  printf("engine_test[%d]: was rank %d of %d, now %d of %d; %d operation(s) submitted again\n", rank, first, first_size,
         hvd_rank(), hvd_size(), retried);
}

static int shim_threads_now(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    char path[300], name[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
    if (f && fgets(name, sizeof name, f) && !strncmp(name, "hvd-", 4)) n++;
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return n;
}

/* A joined thread can stay listed in /proc/self/task for a moment after
 * pthread_join returns (the kernel wakes the joiner before it reaps the
 * task): look again for up to 2 s before counting one as left behind. */
static int shim_threads(void) {
  int n = shim_threads_now();
  for (int i = 0; n > 0 && i < 200; i++) {
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    n = shim_threads_now();
  }
  return n;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "random";
  int adopt = !strcmp(mode, "adopt");
  if (adopt) MPI_Init(&argc, &argv); /* the program's own MPI: the shim adopts it */
  if (hvd_init() != HVD_OK) {
    int left = shim_threads(); /* one line: a launcher ending the job may drop a later one */
    fprintf(stderr, "engine_test: hvd_init failed: %s (hvdshim threads left: %d)\n", hvd_last_error(), left);
    return 1;
  }
  rank = hvd_rank();
  size = hvd_size();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) FAIL("MPI not initialized after hvd_init");
  if (!strcmp(mode, "random"))
    run_random(argc > 2 ? strtoull(argv[2], 0, 10) : 1, argc > 3 ? atoi(argv[3]) : 50, argc > 4 ? atoi(argv[4]) : 2,
               argc > 5 ? atoi(argv[5]) : 3);
  else if (!strcmp(mode, "collectives")) run_collectives();
  else if (!strcmp(mode, "mismatch")) run_mismatch();
  else if (!strcmp(mode, "stall-warn")) run_stall_warn(argc > 2 ? atof(argv[2]) : 2);
  else if (!strcmp(mode, "stall-other")) run_stall_other();
  else if (!strcmp(mode, "deadlock")) run_deadlock();
  else if (!strcmp(mode, "slow")) run_slow(argc > 2 ? atof(argv[2]) : 8);
  else if (!strcmp(mode, "stall-abort")) run_stall_abort();
  else if (!strcmp(mode, "join")) run_join(argc > 2 ? atoi(argv[2]) : size - 1);
  else if (!strcmp(mode, "hvd-join")) run_hvd_join();
  else if (!strcmp(mode, "gpu-sums")) run_gpu_sums(argc > 2 ? atoi(argv[2]) : 10);
  else if (!strcmp(mode, "gpu-gather")) run_gpu_gather(argc > 2 ? atoi(argv[2]) : 100);
  else if (!strcmp(mode, "gpu-poll")) run_gpu_poll(argc > 2 ? atoi(argv[2]) : 20);
  else if (!strcmp(mode, "host-poll")) run_host_poll(argc > 2 ? atoi(argv[2]) : 50);
  else if (!strcmp(mode, "helped-steps")) run_helped_steps(argc > 2 ? atoi(argv[2]) : 300);
  else if (!strcmp(mode, "survive") || !strcmp(mode, "gpu-survive"))
    run_survive(argc > 2 ? atoi(argv[2]) : size - 1, argc > 3 ? atoi(argv[3]) : 10, argc > 4 ? atoi(argv[4]) : 20,
                mode[0] == 'g');
  else if (!strcmp(mode, "leave")) run_leave(argc > 2 ? atoi(argv[2]) : size - 1, argc > 3 ? atoi(argv[3]) : 20);
  else if (!strcmp(mode, "join-vs-exit")) run_join_vs_exit();
  else if (!strcmp(mode, "process-sets")) run_process_sets();
  else if (!strcmp(mode, "scatter")) run_scatter();
  else if (!strcmp(mode, "memory")) run_memory(argc > 2 ? atoi(argv[2]) : 10000);
  else if (!strcmp(mode, "big")) run_big(argc > 2 ? (size_t)atoll(argv[2]) : 64, argc > 3 ? atol(argv[3]) : 3);
  else if (!strcmp(mode, "gpu-refused")) run_gpu_refused();
  else if (!strcmp(mode, "steps"))
    run_steps(argc > 2 ? atoi(argv[2]) : 100, argc > 3 ? atoi(argv[3]) : 64,
              argc > 4 ? (size_t)atoll(argv[4]) : 256);
  else if (adopt) run_adopt();
  else {
    fprintf(stderr, "engine_test: unknown mode %s\n", mode);
    return 2;
  }
  hvd_stats_t st;
  hvd_get_stats(&st);
  printf("engine_test[%d]: %s %s stats cycles=%llu slow_rounds=%llu cache_hits=%llu tensors=%llu groups=%llu fused=%llu\n",
         rank, mode, failures ? "FAILED" : "OK", (unsigned long long)st.cycles, (unsigned long long)st.slow_rounds,
         (unsigned long long)st.cache_hits, (unsigned long long)st.tensors, (unsigned long long)st.groups,
         (unsigned long long)st.fused_tensors);
  if (adopt) MPI_Finalize();
  return failures ? 1 : 0;
}
