/* One error style for every routine that can fail.
 *
 * A fallible routine takes `char *err, size_t errlen` last and returns 0, or
 * -1 with one line in err naming what failed and why (the caller adds the
 * operation it was doing and decides: report, fall back, or HVD_FATAL).  The
 * checks below turn a failing call of each domain into that line:
 *
 *   HVD_CHECK(cond, fmt, ...)               any condition
 *   HVD_CHECK_SYS(call, what)               0, or -1 with errno
 *   HVD_CHECK_PTHREAD(call, what)           0, or an error number
 *   HVD_CHECK_MPI(call, what)               collectives/backend_mpi.h
 *   HVD_CHECK_CUDA(call, what)              collectives/gpu_internal.h
 *   HVD_CHECK_NCCL(call, what)              collectives/gpu_internal.h
 *
 * Each returns -1 from the enclosing function; the _GOTO forms jump to a
 * cleanup label instead (one cleanup path per start routine).  `err` and
 * `errlen` must be in scope.  Fatal paths go through HVD_FATAL (base/log.h). */
#ifndef HVD_CHECK_H
#define HVD_CHECK_H

#include <errno.h>
#include <stddef.h>
#include <string.h>

/* Formats into err (never more than errlen bytes) and returns -1. */
int hvd_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define HVD_CHECK(cond, ...)                                                            \
  do {                                                                                  \
    if (!(cond)) return hvd_fail(err, errlen, __VA_ARGS__);                             \
  } while (0)
#define HVD_CHECK_GOTO(cond, label, ...)                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      hvd_fail(err, errlen, __VA_ARGS__);                                               \
      goto label;                                                                       \
    }                                                                                   \
  } while (0)

/* The domain forms: CALL is evaluated once; its failure code is turned into
 * text by MSG(code) (a const char *). */
#define HVD_CHECK_CODE_(type, call, okv, msg, what)                                     \
  do {                                                                                  \
    type hvd_rc_ = (call);                                                              \
    if (hvd_rc_ != (okv)) return hvd_fail(err, errlen, "%s: %s", (what), msg(hvd_rc_)); \
  } while (0)
#define HVD_CHECK_CODE_GOTO_(type, call, okv, msg, what, label)                         \
  do {                                                                                  \
    type hvd_rc_ = (call);                                                              \
    if (hvd_rc_ != (okv)) {                                                             \
      hvd_fail(err, errlen, "%s: %s", (what), msg(hvd_rc_));                            \
      goto label;                                                                       \
    }                                                                                   \
  } while (0)

#define HVD_ERRNO_MSG_(rc) strerror(errno)
#define HVD_CHECK_SYS(call, what) HVD_CHECK_CODE_(int, call, 0, HVD_ERRNO_MSG_, what)
#define HVD_CHECK_SYS_GOTO(call, what, label) HVD_CHECK_CODE_GOTO_(int, call, 0, HVD_ERRNO_MSG_, what, label)
#define HVD_CHECK_PTHREAD(call, what) HVD_CHECK_CODE_(int, call, 0, strerror, what)
#define HVD_CHECK_PTHREAD_GOTO(call, what, label) HVD_CHECK_CODE_GOTO_(int, call, 0, strerror, what, label)

#endif
