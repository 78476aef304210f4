/* Rank-private file writes: the interposed libc table.  See overlay.h for
 * what the overlay does, and overlay_view.c for the path logic (which path
 * a call goes to, whiteouts, the overlay folder, merged listings).
 *
 * The real libc functions are resolved once (dlsym RTLD_NEXT) into `real`,
 * which the view's own calls go through too.  Every interposed entry point
 * first checks `on` (one load) and calls the real function when the
 * overlay is off: that is every process but the training program of a rank
 * > 0.  Where it is on, it asks the view where the call goes (the overlay's
 * path, the real one, or a failure) and makes the real call there:
 *   writes   open/fopen for writing, creat, mkdir, rename, link, symlink,
 *            chmod, truncate, utimensat, bind of a Unix socket;
 *   reads    open/fopen for reading, the stat family, access, opendir and
 *            the listing calls, realpath, connect of a Unix socket.
 * The fds opened on the overlay's copies are tracked, and the fd calls
 * (read/write and their p/v forms, sendfile, copy_file_range, mmap,
 * ftruncate, fallocate, close, dup, fcntl's F_DUPFD, fclose) hand I/O on
 * them to overlay_bytes.c, which frees the bytes rank 0's files hold. */
/* This file defines libc's entry points themselves, their fortified `_chk`
 * forms included: _FORTIFY_SOURCE (set by Debian's hardening flags) would
 * turn our definitions of pread and friends into its inline wrappers. */
#undef _FORTIFY_SOURCE
#define _GNU_SOURCE
#include "overlay.h"
#include "overlay_bytes.h"
#include "overlay_view.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include "../base/config.h"
#include "../base/log.h"

#define EXPORT __attribute__((visibility("default")))
#define CALLER __builtin_return_address(0)

/* ------------------------------------------------------------ real calls */
static hvd_ovl_libc real;
static struct { /* the fd calls the view does not make */
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
} fdc;
static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static void *next_fn(const char *name) { return dlsym(RTLD_NEXT, name); }

static void resolve(void) {
#define GET(var, name) *(void **)&var = next_fn(name)
  GET(real.openat, "openat64");
  GET(real.fopen, "fopen64");
  GET(real.freopen, "freopen64");
  GET(real.fstatat, "fstatat64");
  GET(real.statx, "statx");
  GET(real.faccessat, "faccessat");
  GET(real.renameat2, "renameat2");
  GET(real.unlinkat, "unlinkat");
  GET(real.mkdirat, "mkdirat");
  GET(real.linkat, "linkat");
  GET(real.symlinkat, "symlinkat");
  GET(real.fchmodat, "fchmodat");
  GET(real.truncate, "truncate64");
  GET(real.utimensat, "utimensat");
  GET(real.opendir, "opendir");
  GET(real.readdir64, "readdir64");
  GET(real.closedir, "closedir");
  GET(real.rewinddir, "rewinddir");
  GET(real.dirfd, "dirfd");
  GET(real.telldir, "telldir");
  GET(real.seekdir, "seekdir");
  GET(real.bind, "bind");
  GET(real.connect, "connect");
  GET(real.realpath, "realpath");
  GET(real.read, "read");
  GET(real.write, "write");
  GET(real.pread, "pread64");
  GET(real.pwrite, "pwrite64");
  GET(real.close, "close");
  GET(real.fallocate, "fallocate64");
  GET(real.ftruncate, "ftruncate64");
  GET(fdc.readv, "readv");
  GET(fdc.writev, "writev");
  GET(fdc.preadv, "preadv64");
  GET(fdc.pwritev, "pwritev64");
  GET(fdc.preadv2, "preadv64v2");
  GET(fdc.pwritev2, "pwritev64v2");
  GET(fdc.read_chk, "__read_chk");
  GET(fdc.pread_chk, "__pread64_chk");
  GET(fdc.sendfile, "sendfile64");
  GET(fdc.copy_file_range, "copy_file_range");
  GET(fdc.mmap, "mmap64");
  GET(fdc.posix_fallocate, "posix_fallocate64");
  GET(fdc.dup, "dup");
  GET(fdc.dup2, "dup2");
  GET(fdc.dup3, "dup3");
  GET(fdc.fcntl, "fcntl");
  GET(fdc.fclose, "fclose");
#undef GET
}
#define REAL() pthread_once(&resolved, resolve)
/* Resolved before main: the fd calls (write in a signal handler) need no
 * first-call work after this. */
__attribute__((constructor)) static void resolve_early(void) { REAL(); }

/* Before glibc 2.33 there is no fstatat symbol; the system call is the same. */
static int fstatat_(int dirfd, const char *path, struct stat *st, int flags) {
  if (real.fstatat) return real.fstatat(dirfd, path, st, flags);
  return (int)syscall(SYS_newfstatat, dirfd, path, st, flags);
}

/* ------------------------------------------------------------ state */
static volatile int on; /* the overlay is active in this process */
static pid_t owner;     /* the rank process (forked children share the view, not the cleanup) */

enum { MAPPED = HVD_OVL_MAPPED, PASS = HVD_OVL_PASS, FAIL = HVD_OVL_FAIL };
static const char *copy_of(const char *m);
static int map_read(int dirfd, const char *path, char *out) { return hvd_ovl_map_read(dirfd, path, out, NULL); }

const char *hvd_overlay_root(void) { return hvd_ovl_root(); }

void hvd_overlay_written(const char *path) {
  REAL();
  char m[PATH_MAX];
  const char *abs;
  if (on && hvd_ovl_nonempty(path) && map_read(AT_FDCWD, path, m) == MAPPED && (abs = copy_of(m))) hvd_ovb_note(abs, m);
}

int hvd_overlay_write_path(const char *path, char *out, size_t len) {
  REAL();
  char m[PATH_MAX];
  if (!on || !hvd_ovl_nonempty(path)) return 0;
  int r = hvd_ovl_map_write(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, NULL, m);
  if (r == PASS) return 0;
  if (r == FAIL) return -1;
  if (strlen(m) >= len) return errno = ENAMETOOLONG, -1;
  strcpy(out, m);
  return 1;
}

/* ------------------------------------------------------------ open, fopen */
/* The real path an overlay path m (root + real path) stands for, or NULL
 * when m is not in the overlay folder. */
static const char *copy_of(const char *m) {
  const char *r = hvd_ovl_root();
  size_t n = r ? strlen(r) : 0;
  return n && !strncmp(m, r, n) && m[n] == '/' ? m + n : NULL;
}

static int open_common(int dirfd, const char *path, int flags, mode_t mode, const void *caller) {
  REAL();
  if (!on) return real.openat(dirfd, path, flags, mode);
  char m[PATH_MAX];
  int tmpfile = (flags & O_TMPFILE) == O_TMPFILE;
  int wr = !tmpfile && !(flags & O_PATH) && ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)));
  int r = wr ? hvd_ovl_map_write(dirfd, path, flags, caller, m) : map_read(dirfd, path, m);
  if (r == FAIL) return -1;
  if (r == PASS) return real.openat(dirfd, path, flags, mode);
  const char *abs = hvd_ovb_enabled() && !tmpfile && !(flags & O_PATH) ? copy_of(m) : NULL;
  int fd;
  if (abs && !wr) { /* a read: rank 0's file when it holds every byte of the copy, else the copy made whole */
    int s = hvd_ovb_serve(abs, m, flags, &fd);
    if (s == HVD_OVB_FAIL) return -1;
    if (s == HVD_OVB_FD) return fd;
  }
  fd = real.openat(AT_FDCWD, m, flags, mode);
  if (fd >= 0 && abs) hvd_ovb_opened(fd, abs, wr ? HVD_OVB_WRITER : HVD_OVB_READER, flags);
  return fd;
}

#define MODE_ARG(flags)                                                                \
  mode_t mode = 0;                                                                     \
  if (((flags) & O_CREAT) || ((flags) & O_TMPFILE) == O_TMPFILE) {                     \
    va_list ap;                                                                        \
    va_start(ap, flags);                                                               \
    mode = (mode_t)va_arg(ap, int);                                                    \
    va_end(ap);                                                                        \
  }

EXPORT int open(const char *path, int flags, ...) {
  MODE_ARG(flags);
  return open_common(AT_FDCWD, path, flags, mode, CALLER);
}
EXPORT int open64(const char *path, int flags, ...) {
  MODE_ARG(flags);
  return open_common(AT_FDCWD, path, flags, mode, CALLER);
}
EXPORT int openat(int dirfd, const char *path, int flags, ...) {
  MODE_ARG(flags);
  return open_common(dirfd, path, flags, mode, CALLER);
}
EXPORT int openat64(int dirfd, const char *path, int flags, ...) {
  MODE_ARG(flags);
  return open_common(dirfd, path, flags, mode, CALLER);
}
/* _FORTIFY_SOURCE's checked forms (no mode argument) */
EXPORT int __open_2(const char *path, int flags) { return open_common(AT_FDCWD, path, flags, 0, CALLER); }
EXPORT int __open64_2(const char *path, int flags) { return open_common(AT_FDCWD, path, flags, 0, CALLER); }
EXPORT int __openat_2(int dirfd, const char *path, int flags) { return open_common(dirfd, path, flags, 0, CALLER); }
EXPORT int __openat64_2(int dirfd, const char *path, int flags) {
  return open_common(dirfd, path, flags, 0, CALLER);
}
EXPORT int creat(const char *path, mode_t mode) {
  return open_common(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode, CALLER);
}
EXPORT int creat64(const char *path, mode_t mode) {
  return open_common(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode, CALLER);
}

static FILE *fopen_common(const char *path, const char *mode, FILE *re, const void *caller) {
  REAL();
  char m[PATH_MAX];
  int r = PASS, wr = 0, flags = 0;
  if (on && hvd_ovl_nonempty(path) && mode) {
    wr = strpbrk(mode, "wa+") != NULL;
    flags = (mode[0] == 'w' ? O_CREAT | O_TRUNC : mode[0] == 'a' ? O_CREAT : 0) | (strchr(mode, 'x') ? O_EXCL : 0);
    r = wr ? hvd_ovl_map_write(AT_FDCWD, path, flags | O_WRONLY, caller, m) : map_read(AT_FDCWD, path, m);
    if (r == FAIL) {
      if (re) fclose(re); /* freopen closes the stream even when it fails */
      return NULL;
    }
  }
  if (re && on && hvd_ovb_of(fileno(re))) hvd_ovb_closing(fileno(re)); /* freopen closes its fd */
  const char *abs = r == MAPPED && hvd_ovb_enabled() ? copy_of(m) : NULL;
  /* stdio reads of the copy are not seen: it holds all its bytes first (or, for a read-only fopen, rank 0's file
   * holds them) */
  int stdio_reads = !wr || strchr(mode, '+');
  if (abs && stdio_reads && !(flags & O_TRUNC)) {
    int fd = -1, rflags = O_RDONLY | (strchr(mode, 'e') ? O_CLOEXEC : 0);
    int s = hvd_ovb_serve(abs, m, wr || re ? -1 : rflags, &fd);
    if (s == HVD_OVB_FAIL) {
      if (re) fclose(re);
      return NULL;
    }
    if (s == HVD_OVB_FD) {
      FILE *f = fdopen(fd, "r");
      if (!f) close(fd);
      return f;
    }
  }
  FILE *f = re ? real.freopen(r == MAPPED ? m : path, mode, re) : real.fopen(r == MAPPED ? m : path, mode);
  if (f && abs)
    hvd_ovb_opened(fileno(f), abs, !wr ? HVD_OVB_READER : stdio_reads ? HVD_OVB_STDIO_RW : HVD_OVB_WRITER,
                   flags | (mode[0] == 'a' ? O_APPEND : 0));
  return f;
}
EXPORT FILE *fopen(const char *path, const char *mode) { return fopen_common(path, mode, NULL, CALLER); }
EXPORT FILE *fopen64(const char *path, const char *mode) { return fopen_common(path, mode, NULL, CALLER); }
EXPORT FILE *freopen(const char *path, const char *mode, FILE *f) { return fopen_common(path, mode, f, CALLER); }
EXPORT FILE *freopen64(const char *path, const char *mode, FILE *f) { return fopen_common(path, mode, f, CALLER); }

/* ------------------------------------------------------------ fd calls: the copies' bytes */
/* Every process but a rank > 0's training program: `on` is 0 and each call
 * is the real one after one load.  There, an fd not opened on a copy
 * (hvd_ovb_of: NULL) passes the same way; so does any fd in another
 * process (a child of vfork, as CPython's subprocess makes, shares the
 * rank's memory while it dup2s and closes: it must not touch the table). */
static inline int plain_fd(int fd) { return !on || !hvd_ovb_of(fd) || getpid() != owner; }

/* I/O of len bytes at `at` (-1: the fd's position) on a tracked fd, made
 * by call(fd, c): the bytes layer writes back what it touches first and
 * counts it after; a write that found no room is made again once room was
 * made, or keeps no bytes (can_lose) when none can be. */
static ssize_t tracked_io(int fd, off_t at, size_t len, int writing, int can_lose, ssize_t (*call)(int, void *),
                          void *c) {
  hvd_ovb_io io;
  for (int tries = 0;; tries++) {
    if (hvd_ovb_begin(fd, at, len, writing, &io)) return -1;
    ssize_t n = call(fd, c);
    int e = errno;
    if (!io.f) return n;
    int r = hvd_ovb_end(&io, n, e);
    if (r == 1 && tries < 4) continue;
    if (r == 2 && can_lose) return hvd_ovb_lose(fd, &io, at >= 0);
    errno = e;
    return n;
  }
}

typedef struct {
  void *buf;
  size_t n, chk;
  off_t at;
  const struct iovec *iov;
  int cnt, fl;
} rw_args;
static ssize_t do_read(int fd, void *c) { rw_args *a = c; return real.read(fd, a->buf, a->n); }
static ssize_t do_read_chk(int fd, void *c) { rw_args *a = c; return fdc.read_chk(fd, a->buf, a->n, a->chk); }
static ssize_t do_pread(int fd, void *c) { rw_args *a = c; return real.pread(fd, a->buf, a->n, a->at); }
static ssize_t do_pread_chk(int fd, void *c) { rw_args *a = c; return fdc.pread_chk(fd, a->buf, a->n, a->at, a->chk); }
static ssize_t do_readv(int fd, void *c) { rw_args *a = c; return fdc.readv(fd, a->iov, a->cnt); }
static ssize_t do_preadv(int fd, void *c) { rw_args *a = c; return fdc.preadv(fd, a->iov, a->cnt, a->at); }
static ssize_t do_preadv2(int fd, void *c) { rw_args *a = c; return fdc.preadv2(fd, a->iov, a->cnt, a->at, a->fl); }
static ssize_t do_writev(int fd, void *c) { rw_args *a = c; return fdc.writev(fd, a->iov, a->cnt); }
static ssize_t do_pwritev(int fd, void *c) { rw_args *a = c; return fdc.pwritev(fd, a->iov, a->cnt, a->at); }
static ssize_t do_pwritev2(int fd, void *c) { rw_args *a = c; return fdc.pwritev2(fd, a->iov, a->cnt, a->at, a->fl); }

static size_t iov_len(const struct iovec *iov, int cnt) {
  size_t n = 0;
  for (int i = 0; iov && i < cnt; i++) n += iov[i].iov_len;
  return n;
}

/* A write to a tracked fd, in pieces of at most 16 MiB (torch writes a
 * tensor in one call; the bytes layer keeps to its cap between pieces):
 * the bytes written, a short count when a later piece failed, or -1. */
#define PIECE ((size_t)16 << 20)
static ssize_t tracked_write(int fd, const struct iovec *iov, int cnt, off_t at, int fl, int v2) {
  size_t total = iov_len(iov, cnt), done = 0;
  for (;;) {
    struct iovec sub[64];
    int n = 0;
    size_t want = 0, skip = done;
    for (int i = 0; i < cnt && n < 64 && want < PIECE; i++) {
      size_t l = iov[i].iov_len, take;
      if (skip >= l) {
        skip -= l;
        continue;
      }
      take = l - skip < PIECE - want ? l - skip : PIECE - want;
      sub[n].iov_base = (char *)iov[i].iov_base + skip, sub[n].iov_len = take;
      n++, want += take, skip = 0;
    }
    rw_args a = {.iov = sub, .cnt = n, .at = at >= 0 ? at + (off_t)done : -1, .fl = fl};
    ssize_t r = tracked_io(fd, a.at, want, 1, 1, v2 ? do_pwritev2 : at >= 0 ? do_pwritev : do_writev, &a);
    if (r < 0) return done ? (ssize_t)done : -1;
    done += (size_t)r;
    if ((size_t)r < want || done >= total) return (ssize_t)done;
  }
}

EXPORT ssize_t read(int fd, void *buf, size_t n) {
  REAL();
  if (plain_fd(fd)) return real.read(fd, buf, n);
  rw_args a = {.buf = buf, .n = n};
  return tracked_io(fd, -1, n, 0, 0, do_read, &a);
}
ssize_t __read_chk(int fd, void *buf, size_t n, size_t len);
EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t len) {
  REAL();
  if (plain_fd(fd)) return fdc.read_chk(fd, buf, n, len);
  rw_args a = {.buf = buf, .n = n, .chk = len};
  return tracked_io(fd, -1, n, 0, 0, do_read_chk, &a);
}
static ssize_t pread_common(int fd, void *buf, size_t n, off_t at) {
  REAL();
  if (plain_fd(fd)) return real.pread(fd, buf, n, at);
  rw_args a = {.buf = buf, .n = n, .at = at};
  return tracked_io(fd, at, n, 0, 0, do_pread, &a);
}
EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t at) { return pread_common(fd, buf, n, at); }
EXPORT ssize_t pread64(int fd, void *buf, size_t n, off64_t at) { return pread_common(fd, buf, n, (off_t)at); }
ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t at, size_t len);
ssize_t __pread_chk(int fd, void *buf, size_t n, off_t at, size_t len);
static ssize_t pread_chk_common(int fd, void *buf, size_t n, off_t at, size_t len) {
  REAL();
  if (plain_fd(fd)) return fdc.pread_chk(fd, buf, n, at, len);
  rw_args a = {.buf = buf, .n = n, .at = at, .chk = len};
  return tracked_io(fd, at, n, 0, 0, do_pread_chk, &a);
}
EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t at, size_t len) {
  return pread_chk_common(fd, buf, n, (off_t)at, len);
}
EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t at, size_t len) {
  return pread_chk_common(fd, buf, n, at, len);
}
EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt) {
  REAL();
  if (plain_fd(fd)) return fdc.readv(fd, iov, cnt);
  rw_args a = {.iov = iov, .cnt = cnt};
  return tracked_io(fd, -1, iov_len(iov, cnt), 0, 0, do_readv, &a);
}
static ssize_t preadv_common(int fd, const struct iovec *iov, int cnt, off_t at) {
  REAL();
  if (plain_fd(fd)) return fdc.preadv(fd, iov, cnt, at);
  rw_args a = {.iov = iov, .cnt = cnt, .at = at};
  return tracked_io(fd, at, iov_len(iov, cnt), 0, 0, do_preadv, &a);
}
EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t at) { return preadv_common(fd, iov, cnt, at); }
EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t at) {
  return preadv_common(fd, iov, cnt, (off_t)at);
}
static ssize_t preadv2_common(int fd, const struct iovec *iov, int cnt, off_t at, int fl) {
  REAL();
  if (plain_fd(fd)) return fdc.preadv2(fd, iov, cnt, at, fl);
  rw_args a = {.iov = iov, .cnt = cnt, .at = at, .fl = fl};
  return tracked_io(fd, at, iov_len(iov, cnt), 0, 0, do_preadv2, &a);
}
EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t at, int fl) {
  return preadv2_common(fd, iov, cnt, at, fl);
}
EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off64_t at, int fl) {
  return preadv2_common(fd, iov, cnt, (off_t)at, fl);
}

EXPORT ssize_t write(int fd, const void *buf, size_t n) {
  REAL();
  if (plain_fd(fd)) return real.write(fd, buf, n);
  struct iovec v = {(void *)buf, n};
  return tracked_write(fd, &v, 1, -1, 0, 0);
}
static ssize_t pwrite_common(int fd, const void *buf, size_t n, off_t at) {
  REAL();
  if (plain_fd(fd)) return real.pwrite(fd, buf, n, at);
  struct iovec v = {(void *)buf, n};
  return tracked_write(fd, &v, 1, at, 0, 0);
}
EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t at) { return pwrite_common(fd, buf, n, at); }
EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t at) { return pwrite_common(fd, buf, n, (off_t)at); }
EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt) {
  REAL();
  if (plain_fd(fd)) return fdc.writev(fd, iov, cnt);
  return tracked_write(fd, iov, cnt, -1, 0, 0);
}
static ssize_t pwritev_common(int fd, const struct iovec *iov, int cnt, off_t at) {
  REAL();
  if (plain_fd(fd)) return fdc.pwritev(fd, iov, cnt, at);
  return tracked_write(fd, iov, cnt, at, 0, 0);
}
EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t at) { return pwritev_common(fd, iov, cnt, at); }
EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t at) {
  return pwritev_common(fd, iov, cnt, (off_t)at);
}
static ssize_t pwritev2_common(int fd, const struct iovec *iov, int cnt, off_t at, int fl) {
  REAL();
  if (plain_fd(fd)) return fdc.pwritev2(fd, iov, cnt, at, fl);
  return tracked_write(fd, iov, cnt, at, fl, 1);
}
EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t at, int fl) {
  return pwritev2_common(fd, iov, cnt, at, fl);
}
EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t at, int fl) {
  return pwritev2_common(fd, iov, cnt, (off_t)at, fl);
}

/* In-kernel copies: the source's blocks are written back first, the
 * destination's counted as a write (never "lost": the source must move on
 * as well). */
typedef struct {
  int in;
  off_t *off_in, *off_out;
  size_t n;
  unsigned fl;
} copy_args;
static ssize_t do_sendfile(int out, void *c) { copy_args *a = c; return fdc.sendfile(out, a->in, a->off_in, a->n); }
static ssize_t do_copy_range(int out, void *c) {
  copy_args *a = c;
  return fdc.copy_file_range(a->in, a->off_in, out, a->off_out, a->n, a->fl);
}
static ssize_t copy_common(int in, off_t *off_in, int out, off_t *off_out, size_t n, unsigned fl, int range) {
  copy_args a = {in, off_in, off_out, n, fl};
  hvd_ovb_io rio = {0};
  if (!plain_fd(in) && hvd_ovb_begin(in, off_in ? *off_in : -1, n, 0, &rio)) return -1;
  ssize_t r = !plain_fd(out) ? tracked_io(out, off_out ? *off_out : -1, n, 1, 0, range ? do_copy_range : do_sendfile, &a)
                             : (range ? do_copy_range : do_sendfile)(out, &a);
  int e = errno;
  hvd_ovb_end(&rio, r, e);
  errno = e;
  return r;
}
static ssize_t sendfile_common(int out, int in, off_t *off, size_t n) {
  REAL();
  if (plain_fd(out) && plain_fd(in)) return fdc.sendfile(out, in, off, n);
  return copy_common(in, off, out, NULL, n, 0, 0);
}
EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n) { return sendfile_common(out, in, off, n); }
EXPORT ssize_t sendfile64(int out, int in, off64_t *off, size_t n) { return sendfile_common(out, in, (off_t *)off, n); }
EXPORT ssize_t copy_file_range(int in, off64_t *off_in, int out, off64_t *off_out, size_t n, unsigned fl) {
  REAL();
  if (plain_fd(out) && plain_fd(in)) return fdc.copy_file_range(in, off_in, out, off_out, n, fl);
  return copy_common(in, (off_t *)off_in, out, (off_t *)off_out, n, fl, 1);
}

/* A mapping sees the copy's bytes: they are all written back first, and no
 * block is freed while a mapping exists. */
static void *mmap_common(void *addr, size_t len, int prot, int fl, int fd, off_t off) {
  REAL();
  if (!plain_fd(fd) && !(fl & MAP_ANONYMOUS) && hvd_ovb_mapping(fd)) return MAP_FAILED;
  return fdc.mmap(addr, len, prot, fl, fd, off);
}
EXPORT void *mmap(void *addr, size_t len, int prot, int fl, int fd, off_t off) {
  return mmap_common(addr, len, prot, fl, fd, off);
}
EXPORT void *mmap64(void *addr, size_t len, int prot, int fl, int fd, off64_t off) {
  return mmap_common(addr, len, prot, fl, fd, (off_t)off);
}

static int ftruncate_common(int fd, off_t len) {
  REAL();
  if (!plain_fd(fd) && hvd_ovb_truncating(fd, NULL, len)) return -1;
  return real.ftruncate(fd, len);
}
EXPORT int ftruncate(int fd, off_t len) { return ftruncate_common(fd, len); }
EXPORT int ftruncate64(int fd, off64_t len) { return ftruncate_common(fd, (off_t)len); }
/* Changing a copy's bytes or size in place (punching, zeroing, shifting,
 * allocating past its end): its blocks are written back first, its new
 * size taken after. */
static int reshaped(int fd, int rc) {
  struct stat st;
  if (rc == 0 && fstat(fd, &st) == 0) hvd_ovb_truncating(fd, NULL, st.st_size);
  return rc;
}
static int fallocate_common(int fd, int mode, off_t off, off_t len) {
  REAL();
  if (plain_fd(fd)) return real.fallocate(fd, mode, off, len);
  if (hvd_ovb_mapping(fd)) return -1;
  return reshaped(fd, real.fallocate(fd, mode, off, len));
}
EXPORT int fallocate(int fd, int mode, off_t off, off_t len) { return fallocate_common(fd, mode, off, len); }
EXPORT int fallocate64(int fd, int mode, off64_t off, off64_t len) {
  return fallocate_common(fd, mode, (off_t)off, (off_t)len);
}
static int posix_fallocate_common(int fd, off_t off, off_t len) {
  REAL();
  if (plain_fd(fd)) return fdc.posix_fallocate(fd, off, len);
  if (hvd_ovb_mapping(fd)) return errno;
  int rc = fdc.posix_fallocate(fd, off, len);
  reshaped(fd, rc);
  return rc;
}
EXPORT int posix_fallocate(int fd, off_t off, off_t len) { return posix_fallocate_common(fd, off, len); }
EXPORT int posix_fallocate64(int fd, off64_t off, off64_t len) {
  return posix_fallocate_common(fd, (off_t)off, (off_t)len);
}

/* fds made and unmade: the tracking follows dup, dup2, dup3, F_DUPFD,
 * close and fclose (libstdc++'s ofstream closes its file with fclose). */
EXPORT int close(int fd) {
  REAL();
  if (!plain_fd(fd)) hvd_ovb_closing(fd);
  return real.close(fd);
}
EXPORT int fclose(FILE *f) {
  REAL();
  if (on && !plain_fd(fileno(f))) hvd_ovb_closing(fileno(f));
  return fdc.fclose(f);
}
EXPORT int dup(int fd) {
  REAL();
  int r = fdc.dup(fd);
  if (r >= 0 && !plain_fd(fd)) hvd_ovb_dup(fd, r);
  return r;
}
EXPORT int dup2(int fd, int to) {
  REAL();
  int r = fdc.dup2(fd, to);
  if (r >= 0 && on && (hvd_ovb_of(fd) || hvd_ovb_of(to)) && getpid() == owner) hvd_ovb_dup(fd, to);
  return r;
}
EXPORT int dup3(int fd, int to, int fl) {
  REAL();
  int r = fdc.dup3(fd, to, fl);
  if (r >= 0 && on && (hvd_ovb_of(fd) || hvd_ovb_of(to)) && getpid() == owner) hvd_ovb_dup(fd, to);
  return r;
}
/* Every fcntl argument is an int or a pointer, passed in a register of
 * pointer size (glibc's own fcntl reads it the same way). */
static int fcntl_common(int fd, int cmd, void *arg) {
  REAL();
  int r = fdc.fcntl(fd, cmd, arg);
  if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && !plain_fd(fd)) hvd_ovb_dup(fd, r);
  return r;
}
EXPORT int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  return fcntl_common(fd, cmd, arg);
}
int fcntl64(int fd, int cmd, ...);
EXPORT int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  return fcntl_common(fd, cmd, arg);
}

/* ------------------------------------------------------------ realpath */
/* A name that exists only in this rank's overlay: the view walks it (see
 * hvd_ovl_realpath), here and not through glibc's own component checks. */
static char *realpath_common(const char *path, char *buf, const void *caller) {
  REAL();
  int saved = errno;
  char *r = real.realpath(path, buf);
  if (r || errno != ENOENT || !on || !hvd_ovl_nonempty(path) || hvd_ovl_excluded_caller(caller)) return r;
  r = hvd_ovl_realpath(path);
  if (!r) return errno = ENOENT, NULL;
  errno = saved;
  if (!buf) return r;
  strcpy(buf, r); /* fits: shorter than PATH_MAX */
  free(r);
  return buf;
}
EXPORT char *realpath(const char *path, char *buf) { return realpath_common(path, buf, CALLER); }
EXPORT char *canonicalize_file_name(const char *path) { return realpath_common(path, NULL, CALLER); }
char *__realpath_chk(const char *path, char *buf, size_t len);
EXPORT char *__realpath_chk(const char *path, char *buf, size_t len) {
  if (len < PATH_MAX) abort(); /* glibc's check: the buffer must hold PATH_MAX */
  return realpath_common(path, buf, CALLER);
}

/* ------------------------------------------------------------ stat, access */
static int stat_common(int dirfd, const char *path, struct stat *st, int flags) {
  REAL();
  char m[PATH_MAX], a[PATH_MAX] = "";
  int r = on && hvd_ovl_nonempty(path) ? hvd_ovl_map_read(dirfd, path, m, a) : PASS;
  if (r == FAIL) return -1;
  if (r != PASS) return fstatat_(AT_FDCWD, m, st, flags);
  int rc = fstatat_(dirfd, path, st, flags);
  if (rc == 0 && on && a[0] && S_ISREG(st->st_mode)) hvd_ovl_saw(a); /* a real file this rank saw (r == PASS sets a) */
  return rc;
}
EXPORT int stat(const char *p, struct stat *st) { return stat_common(AT_FDCWD, p, st, 0); }
EXPORT int stat64(const char *p, struct stat64 *st) { return stat_common(AT_FDCWD, p, (struct stat *)st, 0); }
EXPORT int lstat(const char *p, struct stat *st) { return stat_common(AT_FDCWD, p, st, AT_SYMLINK_NOFOLLOW); }
EXPORT int lstat64(const char *p, struct stat64 *st) {
  return stat_common(AT_FDCWD, p, (struct stat *)st, AT_SYMLINK_NOFOLLOW);
}
EXPORT int fstatat(int d, const char *p, struct stat *st, int fl) { return stat_common(d, p, st, fl); }
EXPORT int fstatat64(int d, const char *p, struct stat64 *st, int fl) { return stat_common(d, p, (struct stat *)st, fl); }
/* glibc < 2.33's names, still called by binaries built against it (PyTorch
 * wheels are).  On x86-64 and AArch64 every version has the kernel layout. */
int __xstat(int v, const char *p, struct stat *st);
int __xstat64(int v, const char *p, struct stat64 *st);
int __lxstat(int v, const char *p, struct stat *st);
int __lxstat64(int v, const char *p, struct stat64 *st);
int __fxstatat(int v, int d, const char *p, struct stat *st, int fl);
int __fxstatat64(int v, int d, const char *p, struct stat64 *st, int fl);
EXPORT int __xstat(int v, const char *p, struct stat *st) { return (void)v, stat_common(AT_FDCWD, p, st, 0); }
EXPORT int __xstat64(int v, const char *p, struct stat64 *st) {
  return (void)v, stat_common(AT_FDCWD, p, (struct stat *)st, 0);
}
EXPORT int __lxstat(int v, const char *p, struct stat *st) {
  return (void)v, stat_common(AT_FDCWD, p, st, AT_SYMLINK_NOFOLLOW);
}
EXPORT int __lxstat64(int v, const char *p, struct stat64 *st) {
  return (void)v, stat_common(AT_FDCWD, p, (struct stat *)st, AT_SYMLINK_NOFOLLOW);
}
EXPORT int __fxstatat(int v, int d, const char *p, struct stat *st, int fl) { return (void)v, stat_common(d, p, st, fl); }
EXPORT int __fxstatat64(int v, int d, const char *p, struct stat64 *st, int fl) {
  return (void)v, stat_common(d, p, (struct stat *)st, fl);
}
EXPORT int statx(int d, const char *p, int fl, unsigned mask, struct statx *buf) {
  REAL();
  char m[PATH_MAX];
  int r = on && hvd_ovl_nonempty(p) ? map_read(d, p, m) : PASS;
  if (r == FAIL) return -1;
  if (!real.statx) return errno = ENOSYS, -1;
  return r == PASS ? real.statx(d, p, fl, mask, buf) : real.statx(AT_FDCWD, m, fl, mask, buf);
}
EXPORT int faccessat(int d, const char *p, int mode, int fl) {
  REAL();
  char m[PATH_MAX];
  int r = on && hvd_ovl_nonempty(p) ? map_read(d, p, m) : PASS;
  if (r == FAIL) return -1;
  return r == PASS ? real.faccessat(d, p, mode, fl) : real.faccessat(AT_FDCWD, m, mode, fl);
}
EXPORT int access(const char *p, int mode) { return faccessat(AT_FDCWD, p, mode, 0); }

/* ------------------------------------------------------------ changing an existing file */
/* chmod, truncate, utimensat: the overlay's copy (copied up first). */
static int map_modify(int dirfd, const char *path, const void *caller, char *out) {
  return hvd_ovl_map_write(dirfd, path, O_WRONLY, caller, out);
}
EXPORT int fchmodat(int d, const char *p, mode_t mode, int fl) {
  REAL();
  char m[PATH_MAX];
  int r = on && hvd_ovl_nonempty(p) ? map_modify(d, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return r == PASS ? real.fchmodat(d, p, mode, fl) : real.fchmodat(AT_FDCWD, m, mode, fl);
}
EXPORT int chmod(const char *p, mode_t mode) {
  REAL();
  char m[PATH_MAX];
  int r = on && hvd_ovl_nonempty(p) ? map_modify(AT_FDCWD, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return real.fchmodat(AT_FDCWD, r == PASS ? p : m, mode, 0);
}
static int truncate_common(const char *p, off_t len, const void *caller) {
  REAL();
  char m[PATH_MAX];
  int r = on && hvd_ovl_nonempty(p) ? map_modify(AT_FDCWD, p, caller, m) : PASS;
  if (r == FAIL) return -1;
  if (r == MAPPED && copy_of(m) && hvd_ovb_truncating(-1, m, len)) return -1;
  return real.truncate(r == PASS ? p : m, len);
}
EXPORT int truncate(const char *p, off_t len) { return truncate_common(p, len, CALLER); }
EXPORT int truncate64(const char *p, off64_t len) { return truncate_common(p, (off_t)len, CALLER); }
EXPORT int utimensat(int d, const char *p, const struct timespec t[2], int fl) {
  REAL();
  char m[PATH_MAX];
  int r = on && hvd_ovl_nonempty(p) ? map_modify(d, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return r == PASS ? real.utimensat(d, p, t, fl) : real.utimensat(AT_FDCWD, m, t, fl);
}

/* ------------------------------------------------------------ removing, making, moving */
/* The call on (d, p) passes through: the overlay is off, or the path cannot
 * be told or is never redirected, or the caller's files are its own.  Else
 * `a` holds the absolute path. */
static int passes(int d, const char *p, char *a, const void *caller) {
  return !on || hvd_ovl_absolute(d, p, a) || hvd_ovl_excluded_path(a) || hvd_ovl_excluded_caller(caller);
}

static int remove_common(int d, const char *p, int flags, const void *caller) {
  REAL();
  char a[PATH_MAX];
  if (passes(d, p, a, caller)) return real.unlinkat(d, p, flags);
  int rc = hvd_ovl_remove(a, flags);
  if (rc == 0) hvd_ovb_removed(a);
  return rc;
}
EXPORT int unlink(const char *p) { return remove_common(AT_FDCWD, p, 0, CALLER); }
EXPORT int unlinkat(int d, const char *p, int fl) { return remove_common(d, p, fl, CALLER); }
EXPORT int rmdir(const char *p) { return remove_common(AT_FDCWD, p, AT_REMOVEDIR, CALLER); }
EXPORT int remove(const char *p) {
  const void *caller = CALLER;
  int rc = remove_common(AT_FDCWD, p, 0, caller);
  if (rc != 0 && errno == EISDIR) rc = remove_common(AT_FDCWD, p, AT_REMOVEDIR, caller);
  return rc;
}

static int mkdir_common(int d, const char *p, mode_t mode, const void *caller) {
  REAL();
  char a[PATH_MAX];
  if (passes(d, p, a, caller)) return real.mkdirat(d, p, mode);
  return hvd_ovl_mkdir(a, mode);
}
EXPORT int mkdir(const char *p, mode_t mode) { return mkdir_common(AT_FDCWD, p, mode, CALLER); }
EXPORT int mkdirat(int d, const char *p, mode_t mode) { return mkdir_common(d, p, mode, CALLER); }

/* Move A to B in this process's view (hvd_ovl_rename). */
static int rename_common(int d1, const char *p1, int d2, const char *p2, unsigned fl, const void *caller) {
  REAL();
  char a[PATH_MAX], b[PATH_MAX];
  if (passes(d1, p1, a, caller) || passes(d2, p2, b, caller)) return real.renameat2(d1, p1, d2, p2, fl);
  int rc = hvd_ovl_rename(a, b, fl);
  if (rc == 0) hvd_ovb_renamed(a, b);
  return rc;
}
EXPORT int rename(const char *a, const char *b) { return rename_common(AT_FDCWD, a, AT_FDCWD, b, 0, CALLER); }
EXPORT int renameat(int d1, const char *a, int d2, const char *b) { return rename_common(d1, a, d2, b, 0, CALLER); }
EXPORT int renameat2(int d1, const char *a, int d2, const char *b, unsigned fl) {
  return rename_common(d1, a, d2, b, fl, CALLER);
}

/* New names (links): made in the overlay. */
static int newname(int d, const char *p, const void *caller, char *out) {
  return hvd_ovl_map_write(d, p, O_CREAT | O_EXCL | O_WRONLY, caller, out);
}
EXPORT int symlinkat(const char *target, int d, const char *p) {
  REAL();
  char m[PATH_MAX];
  int r = on && hvd_ovl_nonempty(p) ? newname(d, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return r == PASS ? real.symlinkat(target, d, p) : real.symlinkat(target, AT_FDCWD, m);
}
EXPORT int symlink(const char *target, const char *p) {
  REAL();
  char m[PATH_MAX];
  int r = on && hvd_ovl_nonempty(p) ? newname(AT_FDCWD, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return real.symlinkat(target, AT_FDCWD, r == PASS ? p : m);
}
static int link_common(int d1, const char *p1, int d2, const char *p2, int fl, const void *caller) {
  REAL();
  char src[PATH_MAX], m[PATH_MAX];
  if (!on || !hvd_ovl_nonempty(p1) || !hvd_ovl_nonempty(p2)) return real.linkat(d1, p1, d2, p2, fl);
  int rs = map_read(d1, p1, src);
  if (rs == FAIL) return -1;
  int r = newname(d2, p2, caller, m);
  if (r == FAIL) return -1;
  if (r == PASS) return rs == PASS ? real.linkat(d1, p1, d2, p2, fl) : real.linkat(AT_FDCWD, src, d2, p2, fl);
  /* the new name is in the overlay: a link to an overlay file, a copy of a real one */
  if (rs == MAPPED && real.linkat(AT_FDCWD, src, AT_FDCWD, m, fl) == 0) {
    if (copy_of(src)) hvd_ovb_linked(src);
    return 0;
  }
  char a[PATH_MAX];
  if (rs == MAPPED) strcpy(a, src);
  else if (hvd_ovl_absolute(d1, p1, a)) return errno = EXDEV, -1;
  return hvd_ovl_copy(a, m);
}
EXPORT int link(const char *a, const char *b) { return link_common(AT_FDCWD, a, AT_FDCWD, b, 0, CALLER); }
EXPORT int linkat(int d1, const char *a, int d2, const char *b, int fl) {
  return link_common(d1, a, d2, b, fl, CALLER);
}

/* ------------------------------------------------------------ Unix sockets */
/* A socket bound to a path in a folder this process made (multiprocessing's
 * listener in its mkdtemp folder, which DataLoader workers use to pass
 * shared memory) lives in the overlay too; connect finds it there. */
static int unix_path(const struct sockaddr *addr, socklen_t len, char *out) {
  if (!addr || addr->sa_family != AF_UNIX || len <= offsetof(struct sockaddr_un, sun_path)) return 0;
  const struct sockaddr_un *u = (const struct sockaddr_un *)addr;
  size_t n = len - offsetof(struct sockaddr_un, sun_path);
  if (n > sizeof u->sun_path) n = sizeof u->sun_path;
  if (!n || !u->sun_path[0]) return 0; /* unnamed or abstract */
  memcpy(out, u->sun_path, n);
  out[n] = 0;
  return 1;
}

static int socket_common(int fd, const struct sockaddr *addr, socklen_t len, int binding, const void *caller) {
  REAL();
  int (*call)(int, const struct sockaddr *, socklen_t) = binding ? real.bind : real.connect;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1], m[PATH_MAX];
  if (!on || !unix_path(addr, len, path)) return call(fd, addr, len);
  int r = binding ? hvd_ovl_map_write(AT_FDCWD, path, O_CREAT | O_EXCL | O_WRONLY, caller, m)
                  : map_read(AT_FDCWD, path, m);
  if (r == FAIL) return errno == EEXIST ? (errno = EADDRINUSE, -1) : -1;
  if (r == PASS) return call(fd, addr, len);
  struct sockaddr_un u = {.sun_family = AF_UNIX};
  if (strlen(m) < sizeof u.sun_path) {
    strcpy(u.sun_path, m);
    return call(fd, (const struct sockaddr *)&u, (socklen_t)sizeof u);
  }
  /* The overlay path is longer than a socket address may be: name the
   * folder through /proc/self/fd/N instead (the kernel resolves it). */
  char *slash = strrchr(m, '/');
  *slash = 0;
  int dfd = real.openat(AT_FDCWD, m, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  int rc = -1;
  if (snprintf(u.sun_path, sizeof u.sun_path, "/proc/self/fd/%d/%s", dfd, slash + 1) >= (int)sizeof u.sun_path) errno = ENAMETOOLONG;
  else rc = call(fd, (const struct sockaddr *)&u, (socklen_t)sizeof u);
  int e = errno;
  close(dfd);
  errno = e;
  return rc;
}
EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len) { return socket_common(fd, addr, len, 1, CALLER); }
EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len) {
  return socket_common(fd, addr, len, 0, CALLER);
}


/* ------------------------------------------------------------ folder listings */
/* A merged listing (hvd_ovl_opendir) is the view's own DIR; every other
 * DIR goes to the real calls. */
EXPORT DIR *opendir(const char *p) {
  REAL();
  if (!on) return real.opendir(p);
  return hvd_ovl_opendir(p);
}

EXPORT struct dirent64 *readdir64(DIR *d) {
  REAL();
  struct dirent64 *e;
  return hvd_ovl_readdir(d, &e) ? e : real.readdir64(d);
}
/* struct dirent and struct dirent64 have one layout on 64-bit targets */
EXPORT struct dirent *readdir(DIR *d) { return (struct dirent *)readdir64(d); }

EXPORT int closedir(DIR *d) {
  REAL();
  return hvd_ovl_closedir(d) ? 0 : real.closedir(d);
}

EXPORT void rewinddir(DIR *d) {
  REAL();
  if (!hvd_ovl_rewinddir(d)) real.rewinddir(d);
}

EXPORT int dirfd(DIR *d) {
  REAL();
  int fd;
  return hvd_ovl_dirfd(d, &fd) ? fd : real.dirfd(d);
}
EXPORT long telldir(DIR *d) {
  REAL();
  if (!hvd_ovl_merged(d)) return real.telldir(d);
  return errno = ENOTSUP, -1; /* positions in a merged listing are not supported */
}
EXPORT void seekdir(DIR *d, long pos) {
  REAL();
  if (!hvd_ovl_merged(d)) real.seekdir(d, pos);
}

/* ------------------------------------------------------------ arming, cleanup */
void hvd_overlay_cleanup(void) {
  if (!on || getpid() != owner || !hvd_ovl_root()) return;
  REAL();
  if (hvd_ovb_enabled()) {
    hvd_ovb_stats st;
    hvd_ovb_get_stats(&st);
    HVD_DEBUG("rank-private files: at most %lld bytes kept; freed %lld bytes rank 0's files held, %lld of zeros, "
              "%lld dropped, %lld not kept; %lld written back; read-opens given rank 0's file %lld, a memfd %lld",
              st.peak_private, st.away, st.zero, st.dropped, st.lost, st.restored, st.served_real, st.served_memory);
  }
  hvd_ovb_drop();
  hvd_ovl_drop();
}

static void cleanup_at_exit(void) { hvd_overlay_cleanup(); }

/* The script distributes itself (torch.distributed, Horovod): its ranks
 * coordinate through files (a FileStore rendezvous) and choose what each
 * writes, so from here on every write is real. */
void hvd_overlay_off(void) {
  if (!on) return;
  hvd_overlay_cleanup();
  on = 0;
  HVD_DEBUG("rank-private files off: the script distributes itself");
}

static void promote(int at_end) {
  if (!on) return;
  REAL();
  const char *r = hvd_ovl_root();
  size_t rl = r ? strlen(r) : 0;
  int moved = 0, lost = 0;
  DIR *d = r ? real.opendir("/proc/self/fd") : NULL;
  for (struct dirent64 *de; d && (de = real.readdir64(d));) {
    int fd = atoi(de->d_name);
    char link[64], target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0 || (size_t)n <= rl || fd == real.dirfd(d)) continue;
    target[n] = 0;
    if (strncmp(target, r, rl) || target[rl] != '/') continue;
    int flags = fcntl(fd, F_GETFL);
    struct stat st;
    if (flags < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    off_t pos = lseek(fd, 0, SEEK_CUR);
    /* the same file where the first rank 0 wrote it: at the same position, or at its end when appending (at_end:
     * at its end, where the job before the restart left it) */
    int nfd = real.openat(AT_FDCWD, target + rl, (flags & ~(O_CREAT | O_EXCL | O_TRUNC)) | O_CREAT, st.st_mode & 07777);
    if (nfd >= 0 && at_end && !(flags & O_APPEND)) pos = lseek(nfd, 0, SEEK_END), flags |= O_APPEND;
    if (nfd < 0 || (!(flags & O_APPEND) && pos >= 0 && lseek(nfd, pos, SEEK_SET) < 0) || dup2(nfd, fd) < 0) {
      HVD_WARN("taking over '%s' from the rank 0 %s: %s; this rank's writes to it are lost", target + rl,
               at_end ? "before the restart" : "that died", strerror(errno));
      lost++;
    } else {
      moved++;
    }
    if (nfd >= 0 && nfd != fd) close(nfd);
  }
  if (d) real.closedir(d);
  hvd_overlay_cleanup();
  on = 0;
  HVD_DEBUG("rank-private files off: this rank is rank 0 now (%d open file(s) moved to their real paths, %d lost)",
            moved, lost);
}

void hvd_overlay_promote(void) { promote(0); }
void hvd_overlay_resume(void) { promote(1); }

void hvd_overlay_arm(int rank, int resuming) {
  if ((rank <= 0 && !resuming) || on) return;
  const char *v = hvd_cfg_str(HVD_CFG_SAVE_RANKS);
  if (v && !strcmp(v, "all")) return;
  REAL();
  owner = getpid();
  hvd_ovl_init(&real, rank);
  hvd_ovb_init(&real, (long long)hvd_cfg_int(HVD_CFG_PRIVATE_BYTES), 1.0);
  atexit(cleanup_at_exit);
  on = 1;
}
