/* Logger and the fatal path.  See log.h.  State: the threshold and rank are
 * set by the constructor and at activation; everything else is stack-local,
 * so any thread may log at any time. */
#include "log.h"

#include "check.h"
#include "clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int hvd_log_threshold = HVD_LOG_WARN;
static int log_rank = -1;
static void (*abort_hook)(int);

void hvd_log_set_rank(int rank) { log_rank = rank; }
void hvd_log_set_abort_hook(void (*hook)(int)) { abort_hook = hook; }

void hvd_log_let_out(void) {
  hvd_nap_ms(200);
}

static void vwrite_line(int level, const char *file, int line, const char *fmt, va_list ap) {
  static const char *names[] = {"error", "warning", "info", "debug"};
  char buf[2048];
  int n;
  if (log_rank >= 0) n = snprintf(buf, sizeof buf, "hvdshim[%d]: ", log_rank);
  else n = snprintf(buf, sizeof buf, "hvdshim: ");
  if (level <= HVD_LOG_WARN || level == HVD_LOG_DEBUG) {
    const char *base = strrchr(file, '/');
    if (line > 0)
      n += snprintf(buf + n, sizeof buf - (size_t)n, "%s (%s:%d): ", names[level], base ? base + 1 : file, line);
    else
      n += snprintf(buf + n, sizeof buf - (size_t)n, "%s (%s): ", names[level], base ? base + 1 : file);
  }
  n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
  if (n > (int)sizeof buf - 2) n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  /* not write(): the library interposes it (the rank-private files), and a
   * line logged inside the overlay's own work (its lock held) would enter it
   * again: there a new rank 0's takeover of its files took that lock (a
   * deadlock; elastic, a checkpoint over HVDSHIM_PRIVATE_BYTES) */
  for (ssize_t off = 0; off < n;) {
    ssize_t w = syscall(SYS_write, 2, buf + off, (size_t)(n - off));
    if (w <= 0) break;
    off += w;
  }
}

void hvd_log_write(int level, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vwrite_line(level, file, line, fmt, ap);
  va_end(ap);
}

int hvd_fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

volatile int hvd_fatal_started;

static _Noreturn void vfatal(int code, const char *file, int line, const char *fmt, va_list ap) {
  hvd_fatal_started = 1;
  vwrite_line(HVD_LOG_ERROR, file, line, fmt, ap);
  if (abort_hook) abort_hook(code);
  syscall(SYS_exit_group, code); /* not _exit: the shim interposes it (hooks/exit.c) */
  __builtin_unreachable();
}

void hvd_fatal_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfatal(1, file, line, fmt, ap);
}

void hvd_fatal_status_at(int code, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfatal(code > 0 && code < 256 ? code : 1, file, line, fmt, ap);
}
