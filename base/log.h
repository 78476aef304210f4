/* The one logger.  The level is checked before anything is formatted; output
 * goes straight to fd 2 with write(2) (no stdio, so it never re-enters a hook
 * or takes a stdio lock), one line per call, prefixed "hvdshim[rank]".
 * Warnings and errors carry file:line. */
#ifndef HVD_LOG_H
#define HVD_LOG_H

enum { HVD_LOG_ERROR = 0, HVD_LOG_WARN = 1, HVD_LOG_INFO = 2, HVD_LOG_DEBUG = 3 };

extern int hvd_log_threshold; /* messages with level <= threshold are printed */

void hvd_log_set_rank(int rank);
void hvd_log_write(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Fatal path: print the reason, then end the whole job (the abort hook, set
 * by the engine once MPI is up, calls MPI_Abort; before that, _exit(1)). */
void hvd_fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
/* ... with the job's status `code` (1..255) instead of 1: a rank's own exit status. */
void hvd_fatal_status_at(int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));
void hvd_log_set_abort_hook(void (*hook)(int code));
/* A moment (200 ms) for the launcher to forward what this rank wrote, before
 * a caller aborts the job: MPICH's Hydra drops a rank's pending output once
 * the job is aborted (a deadlock's line was lost in about 1 of 20 jobs). */
void hvd_log_let_out(void);
/* Set once the fatal path has begun (the _exit interposer then stands aside). */
extern volatile int hvd_fatal_started;

#define HVD_LOG(level, ...)                                              \
  do {                                                                   \
    if ((level) <= hvd_log_threshold) hvd_log_write((level), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define HVD_ERROR(...) HVD_LOG(HVD_LOG_ERROR, __VA_ARGS__)
#define HVD_WARN(...) HVD_LOG(HVD_LOG_WARN, __VA_ARGS__)
#define HVD_INFO(...) HVD_LOG(HVD_LOG_INFO, __VA_ARGS__)
#define HVD_DEBUG(...) HVD_LOG(HVD_LOG_DEBUG, __VA_ARGS__)
#define HVD_FATAL(...) hvd_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

#endif
