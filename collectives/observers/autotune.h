/* Autotune's search (HVDSHIM_AUTOTUNE): which fusion threshold and cycle
 * time to try next, given the score (throughput, higher is better) measured
 * for the current pair.  Pure: no MPI, no clock, no I/O; the engine measures
 * and applies (engine_cycle.c), the unit tests feed it synthetic scores.
 *
 * Method: coordinate search over a fixed grid.  First every fusion
 * threshold candidate at the starting cycle time, then every cycle time at
 * the best threshold.  Each candidate gets HVD_TUNE_WARMUP discarded
 * measurements (the switch and its transient), then HVD_TUNE_SAMPLES whose
 * median is its score.  A dimension the user set explicitly is not searched.
 * Horovod uses Bayesian optimization over the same two settings; with two
 * dimensions and this few candidates, an exhaustive coordinate search costs
 * about as many samples and is easier to reason about. */
#ifndef HVD_AUTOTUNE_H
#define HVD_AUTOTUNE_H

#include <stddef.h>

#define HVD_TUNE_WARMUP 1
#define HVD_TUNE_SAMPLES 3 /* autotune.c takes a median of three */
#define HVD_TUNE_NFUSION 7
#define HVD_TUNE_NCYCLE 6

extern const size_t hvd_tune_fusion_grid[HVD_TUNE_NFUSION];
extern const double hvd_tune_cycle_grid[HVD_TUNE_NCYCLE]; /* milliseconds */

typedef struct {
  int phase; /* 0: fusion threshold, 1: cycle time, 2: done */
  int idx;   /* candidate within the phase's grid */
  int seen;  /* measurements taken of the current candidate */
  double s[HVD_TUNE_SAMPLES];
  double best;
  int best_idx;
  size_t fusion;   /* the pair to run now */
  double cycle_ms;
  int tune_cycle;  /* phase 1 runs */
  int measured;    /* measurements fed so far */
  double chosen_score; /* the median score of the pair kept by the last finished phase */
} hvd_tuner;

/* Start from (fusion, cycle_ms); a dimension with tune_* = 0 stays as given.
 * With nothing to tune the tuner is done at once. */
void hvd_tuner_init(hvd_tuner *t, size_t fusion, double cycle_ms, int tune_fusion, int tune_cycle);
/* One measurement of the current pair.  Returns 1 when the pair to run
 * changed (read t->fusion, t->cycle_ms), else 0. */
int hvd_tuner_feed(hvd_tuner *t, double score);
static inline int hvd_tuner_done(const hvd_tuner *t) { return t->phase == 2; }

#endif
