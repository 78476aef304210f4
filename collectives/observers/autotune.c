/* Autotune's coordinate search; see autotune.h. */
#include "autotune.h"

_Static_assert(HVD_TUNE_SAMPLES == 3, "median3 takes three samples");

const size_t hvd_tune_fusion_grid[HVD_TUNE_NFUSION] = {
    64u << 10, 256u << 10, 1u << 20, 4u << 20, 16u << 20, 64u << 20, 128u << 20};
const double hvd_tune_cycle_grid[HVD_TUNE_NCYCLE] = {0.1, 0.25, 0.5, 1, 2.5, 5};

static double median3(const double *s) {
  double a = s[0], b = s[1], c = s[2], x;
  if (a > b) x = a, a = b, b = x;
  if (b > c) b = c;
  return a > b ? a : b;
}

/* Enter phase p, skipping the cycle phase when the cycle time is fixed. */
static void enter(hvd_tuner *t, int p) {
  if (p == 1 && !t->tune_cycle) p = 2;
  t->phase = p;
  t->idx = t->seen = t->best_idx = 0;
  t->best = -1;
  if (p == 0) t->fusion = hvd_tune_fusion_grid[0];
  if (p == 1) t->cycle_ms = hvd_tune_cycle_grid[0];
}

void hvd_tuner_init(hvd_tuner *t, size_t fusion, double cycle_ms, int tune_fusion, int tune_cycle) {
  *t = (hvd_tuner){.fusion = fusion, .cycle_ms = cycle_ms, .tune_cycle = tune_cycle};
  enter(t, tune_fusion ? 0 : 1);
}

int hvd_tuner_feed(hvd_tuner *t, double score) {
  if (t->phase == 2) return 0;
  t->measured++;
  int k = t->seen++ - HVD_TUNE_WARMUP;
  if (k < 0) return 0;
  t->s[k] = score;
  if (k + 1 < HVD_TUNE_SAMPLES) return 0;
  double m = median3(t->s);
  if (m > t->best) t->best = m, t->best_idx = t->idx;
  t->seen = 0;
  if (++t->idx < (t->phase == 0 ? HVD_TUNE_NFUSION : HVD_TUNE_NCYCLE)) {
    if (t->phase == 0) t->fusion = hvd_tune_fusion_grid[t->idx];
    else t->cycle_ms = hvd_tune_cycle_grid[t->idx];
    return 1;
  }
  /* the phase is over: keep its best and go on */
  t->chosen_score = t->best;
  if (t->phase == 0) {
    t->fusion = hvd_tune_fusion_grid[t->best_idx];
    enter(t, 1);
  } else {
    t->cycle_ms = hvd_tune_cycle_grid[t->best_idx];
    enter(t, 2);
  }
  return 1;
}
