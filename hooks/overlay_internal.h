/* What the overlay's interposer files share (internal to hooks/overlay.c,
 * overlay_fd.c and overlay_path.c; overlay.h says what the overlay does).
 * The files in their one-way order: each uses only the files listed before
 * it (and the view and the bytes layer below them all), never one after it
 * (tests/unit/layers.sh checks, from the objects' symbols, that no two of
 * them use each other in a circle):
 *
 *   overlay.c        the real libc calls resolved once, the switch (`on`),
 *                    and overlay.h's API: arming, turning it off, promotion
 *                    to rank 0, the cleanup, the paths for raw writers
 *   overlay_fd.c     the interposed fd calls: I/O on the fds opened on the
 *                    overlay's copies goes to the bytes layer (overlay_bytes.h)
 *   overlay_path.c   the interposed calls that name a path: the view
 *                    (overlay_view.h) says where each one goes
 *
 * Every interposed entry point calls overlay_ready() (the real calls are
 * resolved), then tests overlay_on (one load) and makes the real call when
 * the overlay is off: that is every process but the training program of a
 * rank > 0. */
#ifndef HVD_OVERLAY_INTERNAL_H
#define HVD_OVERLAY_INTERNAL_H

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "../base/role.h"
#include "overlay_view.h"

#define EXPORT __attribute__((visibility("default")))
#define CALLER __builtin_return_address(0)

/* ---- overlay.c: the real calls and the switch ---- */
/* The real libc functions (dlsym RTLD_NEXT), which the view's and the bytes
 * layer's own calls go through too, and the fd calls they do not make. */
extern hvd_ovl_libc overlay_real;
typedef struct {
  ssize_t (*readv)(int, const struct iovec *, int);
  ssize_t (*writev)(int, const struct iovec *, int);
  ssize_t (*preadv)(int, const struct iovec *, int, off_t);
  ssize_t (*pwritev)(int, const struct iovec *, int, off_t);
  ssize_t (*preadv2)(int, const struct iovec *, int, off_t, int);
  ssize_t (*pwritev2)(int, const struct iovec *, int, off_t, int);
  ssize_t (*read_chk)(int, void *, size_t, size_t);
  ssize_t (*pread_chk)(int, void *, size_t, off_t, size_t);
  ssize_t (*sendfile)(int, int, off_t *, size_t);
  ssize_t (*copy_file_range)(int, off_t *, int, off_t *, size_t, unsigned);
  void *(*mmap)(void *, size_t, int, int, int, off_t);
  int (*posix_fallocate)(int, off_t, off_t);
  int (*dup)(int);
  int (*dup2)(int, int);
  int (*dup3)(int, int, int);
  int (*fcntl)(int, int, ...);
  int (*fclose)(FILE *);
} overlay_fdcalls;
extern overlay_fdcalls overlay_fdc;
extern pthread_once_t overlay_resolved;
void overlay_resolve(void);
/* The real calls are resolved (before main already, by a constructor: the
 * fd calls, write in a signal handler included, need no first-call work). */
/* Then, where the death of the job's rank 0 made this process rank 0
 * (base/role.h), the files and the console are handed over first
 * (overlay_take_over: once, in the process's main thread). */
void overlay_take_over(void);
static inline void overlay_ready(void) {
  pthread_once(&overlay_resolved, overlay_resolve);
  if (__builtin_expect(hvd_role_is_new_rank0(), 0)) overlay_take_over();
}

/* The view moved a to b (real paths): a file written whole at a is b's
 * now (a temporary renamed over the checkpoint); removed: forgotten. */
void overlay_saved_renamed(const char *a, const char *b);
void overlay_saved_removed(const char *a);
/* The file at real path `path` is being written whole (created or
 * truncated): until the job's next step, a takeover puts this rank's copy
 * of it in place (hooks/overlay.h, hvd_overlay_saves_settled). */
void overlay_saved_written(const char *path);
/* Opened for writing with these flags: written whole from the start. */
static inline int overlay_writes_whole(int flags) {
  return (flags & O_ACCMODE) != O_RDONLY && !(flags & O_APPEND) &&
         ((flags & O_TRUNC) || (flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL));
}

extern volatile int overlay_on; /* the overlay is active in this process */
extern pid_t overlay_owner;     /* the rank process (forked children share the view, not the cleanup) */

enum { MAPPED = HVD_OVL_MAPPED, PASS = HVD_OVL_PASS, FAIL = HVD_OVL_FAIL };
static inline int map_read(int dirfd, const char *path, char *out) {
  return hvd_ovl_map_read(dirfd, path, out, NULL);
}
/* The real path an overlay path m (root + real path) stands for, or NULL
 * when m is not in the overlay folder. */
static inline const char *copy_of(const char *m) {
  const char *r = hvd_ovl_root();
  size_t n = r ? strlen(r) : 0;
  return n && !strncmp(m, r, n) && m[n] == '/' ? m + n : NULL;
}

#endif
