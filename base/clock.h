/* The clocks and short sleeps of every part (the library, hvdrun, the
 * tools): the monotonic clock in the unit a caller counts in, a nap that
 * sleeps its whole length through signals, and the CLOCK_REALTIME
 * deadline pthread_cond_timedwait takes.  Header only: hvdrun and the
 * tools link no library object. */
#ifndef HVD_BASE_CLOCK_H
#define HVD_BASE_CLOCK_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

/* The monotonic clock in nanoseconds. */
static inline int64_t hvd_mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* ... in seconds, microseconds, milliseconds. */
static inline double hvd_mono_s(void) { return (double)hvd_mono_ns() * 1e-9; }
static inline double hvd_mono_us(void) { return (double)hvd_mono_ns() * 1e-3; }
static inline long hvd_mono_ms(void) { return (long)(hvd_mono_ns() / 1000000); }

/* Sleep `s` seconds (resumed after a signal's handler: the whole length). */
static inline void hvd_nap_s(double s) {
  if (!(s > 0)) return;
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

static inline void hvd_nap_ms(long ms) { hvd_nap_s((double)ms * 1e-3); }

/* The CLOCK_REALTIME time `s` seconds from now (pthread_cond_timedwait's
 * deadline). */
static inline struct timespec hvd_realtime_in(double s) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  if (s < 0) s = 0;
  time_t whole = (time_t)s;
  t.tv_sec += whole;
  t.tv_nsec += (long)((s - (double)whole) * 1e9);
  if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
  return t;
}

#endif
