/* Per-step metrics; see metrics.h.  `mu` guards the file and the previous
 * step's counters (steps may be marked from more than one thread).  An
 * observer: the engine hands it each step's counters and tuning, and it
 * calls nothing of the engine's. */
#include "metrics.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../base/config.h"
#include "../../base/log.h"
#include "../../base/outfile.h"
#include "../hvdshim.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;
static double last_t, start_t;
static hvd_stats_t prev;

static double clock_s(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void hvd_metrics_reset(void) {
  pthread_mutex_lock(&mu);
  start_t = last_t = clock_s(CLOCK_MONOTONIC);
  memset(&prev, 0, sizeof prev);
  pthread_mutex_unlock(&mu);
}

int hvd_metrics_open(const char *path, int cont, char *err, size_t errlen) {
  char why[512];
  int fd = hvd_open_output(path, cont, why, sizeof why);
  FILE *f = fd >= 0 ? fdopen(fd, cont ? "a" : "w") : NULL;
  if (!f) {
    snprintf(err, errlen, "HVDSHIM_METRICS: %s", fd >= 0 ? strerror(errno) : why);
    if (fd >= 0) close(fd);
    return -1;
  }
  char last = '\n';
  off_t size = lseek(fd, 0, SEEK_END);
  if (cont && size > 0 && pread(fd, &last, 1, size - 1) == 1 && last != '\n') fputc('\n', f);
  pthread_mutex_lock(&mu);
  out = f;
  pthread_mutex_unlock(&mu);
  return 0;
}

void hvd_metrics_close(void) {
  pthread_mutex_lock(&mu);
  if (out) fclose(out);
  out = NULL;
  pthread_mutex_unlock(&mu);
}

int hvd_metrics_enabled(void) { return __atomic_load_n(&out, __ATOMIC_RELAXED) != NULL; }

void hvd_metrics_step(uint64_t n, int64_t samples, int size, const hvd_stats_t *sp, const hvd_tuning_now *tp) {
  pthread_mutex_lock(&mu);
  if (!out) {
    pthread_mutex_unlock(&mu);
    return;
  }
  double t = clock_s(CLOCK_MONOTONIC);
  hvd_stats_t s = *sp;
  hvd_tuning_now tn = *tp;
  char smp[32];
  if (samples >= 0) snprintf(smp, sizeof smp, "%lld", (long long)samples * size);
  else snprintf(smp, sizeof smp, "null");
  fprintf(out,
          "{\"step\":%llu,\"time\":%.6f,\"t\":%.6f,\"wall_s\":%.6f,\"samples\":%s,\"ranks\":%d,"
          "\"bytes_reduced\":%llu,\"tensors\":%llu,\"fusion_buffers\":%llu,\"blocked_s\":%.6f,"
          "\"fusion_threshold\":%zu,\"cycle_time_ms\":%g,\"autotune\":\"%s\"}\n",
          (unsigned long long)n, clock_s(CLOCK_REALTIME), t - start_t, t - last_t, smp, size,
          (unsigned long long)(s.bytes_reduced - prev.bytes_reduced), (unsigned long long)(s.tensors - prev.tensors),
          (unsigned long long)(s.groups - prev.groups), s.blocked_seconds - prev.blocked_seconds, tn.fusion,
          tn.cycle_ms, tn.autotune);
  fflush(out);
  prev = s;
  last_t = t;
  pthread_mutex_unlock(&mu);
}

static pthread_once_t observe_once = PTHREAD_ONCE_INIT;
static uint64_t observed_steps;

static void observe_open(void) {
  const char *path = hvd_cfg_str(HVD_CFG_METRICS);
  char err[600];
  hvd_metrics_reset();
  if (path[0] && hvd_metrics_open(path, 0, err, sizeof err) != 0) HVD_WARN("%s; metrics disabled", err);
}

void hvd_metrics_observe(int64_t samples) {
  if (!hvd_cfg_int(HVD_CFG_OBSERVE)) return;
  pthread_once(&observe_once, observe_open);
  /* no engine runs: nothing reduced, nothing tuned */
  hvd_stats_t none = {0};
  hvd_tuning_now off = {0, 0.0, "off"};
  hvd_metrics_step(__atomic_add_fetch(&observed_steps, 1, __ATOMIC_RELAXED), samples, 1, &none, &off);
}
