/* Per-step metrics (HVDSHIM_METRICS): a JSON Lines file written by rank 0,
 * one object per hvd_step_mark.  The engine opens it at start and closes it
 * at stop, counts the steps, and hvd_step_mark (any thread) hands it each
 * step's counters.  An observer: it calls nothing of the engine's.  Schema:
 * README "Metrics". */
#ifndef HVD_METRICS_H
#define HVD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "../hvdshim.h"

/* What the engine reports about its tunable settings, for each line. */
typedef struct {
  size_t fusion;
  double cycle_ms;
  const char *autotune; /* "off", "tuning" or "fixed" */
} hvd_tuning_now;

/* cont: go on at the end of the file a job before wrote (a restart to
 * grow, a new rank 0 after the first died); a line it left unfinished is
 * ended first. */
int hvd_metrics_open(const char *path, int cont, char *err, size_t errlen);
void hvd_metrics_close(void);
void hvd_metrics_reset(void);
/* The file is open (any thread; a hint: hvd_metrics_step checks again). */
int hvd_metrics_enabled(void);
/* Step n (counted by the engine, engine_api.c hvd_step_mark) has ended with
 * `samples` on this rank (-1: unknown) in a job of `ranks`, with the
 * engine's counters since the start and its tuning now: one line, if the
 * file is open. */
void hvd_metrics_step(uint64_t n, int64_t samples, int ranks, const hvd_stats_t *stats, const hvd_tuning_now *tuning);
/* HVDSHIM_OBSERVE=1 in a process without the engine (one plain process:
 * hvdshim-ab's baseline): a step ended; the file is opened at the first. */
void hvd_metrics_observe(int64_t samples);

#endif
