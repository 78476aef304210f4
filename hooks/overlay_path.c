/* Rank-private file writes: the interposed calls that name a path
 * (overlay_internal.h has the interposer's files in their order; overlay.h
 * says what the overlay does).  Where the overlay is on, each asks the view
 * (overlay_view.h) where the call goes (the overlay's path, the real one, or
 * a failure) and makes the real call there:
 *   writes   open/fopen for writing, creat, mkdir, rename, link, symlink,
 *            chmod, truncate, utimensat, bind of a Unix socket;
 *   reads    open/fopen for reading, the stat family, access, opendir and
 *            the listing calls, realpath, connect of a Unix socket.
 * An fd opened on one of the overlay's copies is handed to the bytes layer
 * (overlay_bytes.h: hvd_ovb_opened), and a read-open of a copy whose blocks
 * were freed gets the fd it serves (rank 0's file, or a memfd); renames,
 * removals and links are told to it too.  Calls the view, the bytes layer,
 * the real libc through overlay.c's table, and close and fclose
 * (overlay_fd.c). */
/* This file defines libc's entry points themselves, their fortified `_chk`
 * forms included: _FORTIFY_SOURCE (set by Debian's hardening flags) would
 * turn our definitions of pread and friends into its inline wrappers. */
#undef _FORTIFY_SOURCE
#define _GNU_SOURCE
#include "overlay_bytes.h"
#include "overlay_internal.h"
#include "overlay_view.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

/* Before glibc 2.33 there is no fstatat symbol; the system call is the same. */
static int fstatat_(int dirfd, const char *path, struct stat *st, int flags) {
  if (overlay_real.fstatat) return overlay_real.fstatat(dirfd, path, st, flags);
  return (int)syscall(SYS_newfstatat, dirfd, path, st, flags);
}

/* ------------------------------------------------------------ open, fopen */

static int open_common(int dirfd, const char *path, int flags, mode_t mode, const void *caller) {
  overlay_ready();
  if (!overlay_on) return overlay_real.openat(dirfd, path, flags, mode);
  char m[PATH_MAX];
  int tmpfile = (flags & O_TMPFILE) == O_TMPFILE;
  int wr = !tmpfile && !(flags & O_PATH) && ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)));
  int r = wr ? hvd_ovl_map_write(dirfd, path, flags, caller, m) : map_read(dirfd, path, m);
  if (r == FAIL) return -1;
  if (r == PASS && !wr && !tmpfile && !(flags & O_PATH)) hvd_ovl_await_writer(dirfd, path, caller); /* rank 0's, half-written */
  if (r == PASS) return overlay_real.openat(dirfd, path, flags, mode);
  const char *abs = hvd_ovb_enabled() && !tmpfile && !(flags & O_PATH) ? copy_of(m) : NULL;
  int fd;
  if (abs && !wr) { /* a read: rank 0's file when it holds every byte of the copy, else the copy made whole */
    int s = hvd_ovb_serve(abs, m, flags, &fd);
    if (s == HVD_OVB_FAIL) return -1;
    if (s == HVD_OVB_FD) return fd;
  }
  fd = overlay_real.openat(AT_FDCWD, m, flags, mode);
  if (fd >= 0 && abs) hvd_ovb_opened(fd, abs, wr ? HVD_OVB_WRITER : HVD_OVB_READER, flags);
  if (fd >= 0 && !tmpfile && overlay_writes_whole(flags) && copy_of(m)) overlay_saved_written(copy_of(m));
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
  overlay_ready();
  char m[PATH_MAX];
  int r = PASS, wr = 0, flags = 0;
  if (overlay_on && hvd_ovl_nonempty(path) && mode) {
    wr = strpbrk(mode, "wa+") != NULL;
    flags = (mode[0] == 'w' ? O_CREAT | O_TRUNC : mode[0] == 'a' ? O_CREAT : 0) | (strchr(mode, 'x') ? O_EXCL : 0);
    r = wr ? hvd_ovl_map_write(AT_FDCWD, path, flags | O_WRONLY, caller, m) : map_read(AT_FDCWD, path, m);
    if (r == FAIL) {
      if (re) fclose(re); /* freopen closes the stream even when it fails */
      return NULL;
    }
  }
  if (re && overlay_on && hvd_ovb_of(fileno(re))) hvd_ovb_closing(fileno(re)); /* freopen closes its fd */
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
  const char *at = r == MAPPED ? m : path;
  if (overlay_on && r == PASS && mode && !strpbrk(mode, "wa+") && hvd_ovl_nonempty(path))
    hvd_ovl_await_writer(AT_FDCWD, path, caller); /* rank 0's, half-written */
  FILE *f = re ? overlay_real.freopen(at, mode, re) : overlay_real.fopen(at, mode);
  if (f && r == MAPPED && overlay_writes_whole(flags | (strchr(mode, '+') ? O_RDWR : O_WRONLY)) && copy_of(m))
    overlay_saved_written(copy_of(m));
  if (f && abs)
    hvd_ovb_opened(fileno(f), abs, !wr ? HVD_OVB_READER : stdio_reads ? HVD_OVB_STDIO_RW : HVD_OVB_WRITER,
                   flags | (mode[0] == 'a' ? O_APPEND : 0));
  return f;
}
EXPORT FILE *fopen(const char *path, const char *mode) { return fopen_common(path, mode, NULL, CALLER); }
EXPORT FILE *fopen64(const char *path, const char *mode) { return fopen_common(path, mode, NULL, CALLER); }
EXPORT FILE *freopen(const char *path, const char *mode, FILE *f) { return fopen_common(path, mode, f, CALLER); }
EXPORT FILE *freopen64(const char *path, const char *mode, FILE *f) { return fopen_common(path, mode, f, CALLER); }

/* ------------------------------------------------------------ realpath */
/* A name that exists only in this rank's overlay: the view walks it (see
 * hvd_ovl_realpath), here and not through glibc's own component checks. */
static char *realpath_common(const char *path, char *buf, const void *caller) {
  overlay_ready();
  int saved = errno;
  char *r = overlay_real.realpath(path, buf);
  if (r || errno != ENOENT || !overlay_on || !hvd_ovl_nonempty(path) || hvd_ovl_excluded_caller(caller)) return r;
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
  overlay_ready();
  char m[PATH_MAX], a[PATH_MAX] = "";
  int r = overlay_on && hvd_ovl_nonempty(path) ? hvd_ovl_map_read(dirfd, path, m, a) : PASS;
  if (r == FAIL) return -1;
  int rc = r != PASS ? fstatat_(AT_FDCWD, m, st, flags) : fstatat_(dirfd, path, st, flags);
  /* a real file this rank saw (r == PASS sets a) */
  if (rc == 0 && r == PASS && overlay_on && a[0] && S_ISREG(st->st_mode)) hvd_ovl_saw(a);
  /* gone since this rank listed it (removed by rank 0): as listed */
  if (rc != 0 && errno == ENOENT && a[0] && hvd_ovl_listed(a, flags, st)) rc = 0;
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
  overlay_ready();
  char m[PATH_MAX];
  int r = overlay_on && hvd_ovl_nonempty(p) ? map_read(d, p, m) : PASS;
  if (r == FAIL) return -1;
  if (!overlay_real.statx) return errno = ENOSYS, -1;
  return r == PASS ? overlay_real.statx(d, p, fl, mask, buf) : overlay_real.statx(AT_FDCWD, m, fl, mask, buf);
}
EXPORT int faccessat(int d, const char *p, int mode, int fl) {
  overlay_ready();
  char m[PATH_MAX], a[PATH_MAX] = "";
  int r = overlay_on && hvd_ovl_nonempty(p) ? hvd_ovl_map_read(d, p, m, a) : PASS;
  if (r == FAIL) return -1;
  int rc = r == PASS ? overlay_real.faccessat(d, p, mode, fl) : overlay_real.faccessat(AT_FDCWD, m, mode, fl);
  struct stat st; /* gone since this rank listed it (removed by rank 0): there, for a test of existence */
  if (rc != 0 && errno == ENOENT && mode == F_OK && a[0] && hvd_ovl_listed(a, fl & AT_SYMLINK_NOFOLLOW, &st)) rc = 0;
  return rc;
}
EXPORT int access(const char *p, int mode) { return faccessat(AT_FDCWD, p, mode, 0); }

/* ------------------------------------------------------------ changing an existing file */
/* chmod, truncate, utimensat: the overlay's copy (copied up first). */
static int map_modify(int dirfd, const char *path, const void *caller, char *out) {
  return hvd_ovl_map_write(dirfd, path, O_WRONLY, caller, out);
}
EXPORT int fchmodat(int d, const char *p, mode_t mode, int fl) {
  overlay_ready();
  char m[PATH_MAX];
  int r = overlay_on && hvd_ovl_nonempty(p) ? map_modify(d, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return r == PASS ? overlay_real.fchmodat(d, p, mode, fl) : overlay_real.fchmodat(AT_FDCWD, m, mode, fl);
}
EXPORT int chmod(const char *p, mode_t mode) {
  overlay_ready();
  char m[PATH_MAX];
  int r = overlay_on && hvd_ovl_nonempty(p) ? map_modify(AT_FDCWD, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return overlay_real.fchmodat(AT_FDCWD, r == PASS ? p : m, mode, 0);
}
static int truncate_common(const char *p, off_t len, const void *caller) {
  overlay_ready();
  char m[PATH_MAX];
  int r = overlay_on && hvd_ovl_nonempty(p) ? map_modify(AT_FDCWD, p, caller, m) : PASS;
  if (r == FAIL) return -1;
  if (r == MAPPED && copy_of(m) && hvd_ovb_truncating(-1, m, len)) return -1;
  return overlay_real.truncate(r == PASS ? p : m, len);
}
EXPORT int truncate(const char *p, off_t len) { return truncate_common(p, len, CALLER); }
EXPORT int truncate64(const char *p, off64_t len) { return truncate_common(p, (off_t)len, CALLER); }
EXPORT int utimensat(int d, const char *p, const struct timespec t[2], int fl) {
  overlay_ready();
  char m[PATH_MAX];
  int r = overlay_on && hvd_ovl_nonempty(p) ? map_modify(d, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return r == PASS ? overlay_real.utimensat(d, p, t, fl) : overlay_real.utimensat(AT_FDCWD, m, t, fl);
}

/* ------------------------------------------------------------ removing, making, moving */
/* The call on (d, p) passes through: the overlay is off, or the path cannot
 * be told or is never redirected, or the caller's files are its own.  Else
 * `a` holds the absolute path. */
static int passes(int d, const char *p, char *a, const void *caller) {
  return !overlay_on || hvd_ovl_absolute(d, p, a) || hvd_ovl_excluded_path(a) || hvd_ovl_excluded_caller(caller);
}

static int remove_common(int d, const char *p, int flags, const void *caller) {
  overlay_ready();
  char a[PATH_MAX];
  if (passes(d, p, a, caller)) return overlay_real.unlinkat(d, p, flags);
  int rc = hvd_ovl_remove(a, flags);
  if (rc == 0) hvd_ovb_removed(a), overlay_saved_removed(a);
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
  overlay_ready();
  char a[PATH_MAX];
  if (passes(d, p, a, caller)) return overlay_real.mkdirat(d, p, mode);
  return hvd_ovl_mkdir(a, mode);
}
EXPORT int mkdir(const char *p, mode_t mode) { return mkdir_common(AT_FDCWD, p, mode, CALLER); }
EXPORT int mkdirat(int d, const char *p, mode_t mode) { return mkdir_common(d, p, mode, CALLER); }

/* Move A to B in this process's view (hvd_ovl_rename). */
static int rename_common(int d1, const char *p1, int d2, const char *p2, unsigned fl, const void *caller) {
  overlay_ready();
  char a[PATH_MAX], b[PATH_MAX];
  if (passes(d1, p1, a, caller) || passes(d2, p2, b, caller)) return overlay_real.renameat2(d1, p1, d2, p2, fl);
  int rc = hvd_ovl_rename(a, b, fl);
  if (rc == 0) hvd_ovb_renamed(a, b), overlay_saved_renamed(a, b);
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
  overlay_ready();
  char m[PATH_MAX];
  int r = overlay_on && hvd_ovl_nonempty(p) ? newname(d, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return r == PASS ? overlay_real.symlinkat(target, d, p) : overlay_real.symlinkat(target, AT_FDCWD, m);
}
EXPORT int symlink(const char *target, const char *p) {
  overlay_ready();
  char m[PATH_MAX];
  int r = overlay_on && hvd_ovl_nonempty(p) ? newname(AT_FDCWD, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return overlay_real.symlinkat(target, AT_FDCWD, r == PASS ? p : m);
}
static int link_common(int d1, const char *p1, int d2, const char *p2, int fl, const void *caller) {
  overlay_ready();
  char src[PATH_MAX], m[PATH_MAX];
  if (!overlay_on || !hvd_ovl_nonempty(p1) || !hvd_ovl_nonempty(p2)) return overlay_real.linkat(d1, p1, d2, p2, fl);
  int rs = map_read(d1, p1, src);
  if (rs == FAIL) return -1;
  int r = newname(d2, p2, caller, m);
  if (r == FAIL) return -1;
  if (r == PASS)
    return rs == PASS ? overlay_real.linkat(d1, p1, d2, p2, fl) : overlay_real.linkat(AT_FDCWD, src, d2, p2, fl);
  /* the new name is in the overlay: a link to an overlay file, a copy of a real one */
  if (rs == MAPPED && overlay_real.linkat(AT_FDCWD, src, AT_FDCWD, m, fl) == 0) {
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
  overlay_ready();
  int (*call)(int, const struct sockaddr *, socklen_t) = binding ? overlay_real.bind : overlay_real.connect;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1], m[PATH_MAX];
  if (!overlay_on || !unix_path(addr, len, path)) return call(fd, addr, len);
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
  int dfd = overlay_real.openat(AT_FDCWD, m, O_PATH | O_DIRECTORY | O_CLOEXEC);
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
  overlay_ready();
  if (!overlay_on) return overlay_real.opendir(p);
  return hvd_ovl_opendir(p);
}

EXPORT struct dirent64 *readdir64(DIR *d) {
  overlay_ready();
  struct dirent64 *e;
  return hvd_ovl_readdir(d, &e) ? e : overlay_real.readdir64(d);
}
/* struct dirent and struct dirent64 have one layout on 64-bit targets */
EXPORT struct dirent *readdir(DIR *d) { return (struct dirent *)readdir64(d); }

EXPORT int closedir(DIR *d) {
  overlay_ready();
  return hvd_ovl_closedir(d) ? 0 : overlay_real.closedir(d);
}

EXPORT void rewinddir(DIR *d) {
  overlay_ready();
  if (!hvd_ovl_rewinddir(d)) overlay_real.rewinddir(d);
}

EXPORT int dirfd(DIR *d) {
  overlay_ready();
  int fd;
  return hvd_ovl_dirfd(d, &fd) ? fd : overlay_real.dirfd(d);
}
EXPORT long telldir(DIR *d) {
  overlay_ready();
  if (!hvd_ovl_merged(d)) return overlay_real.telldir(d);
  return errno = ENOTSUP, -1; /* positions in a merged listing are not supported */
}
EXPORT void seekdir(DIR *d, long pos) {
  overlay_ready();
  if (!hvd_ovl_merged(d)) overlay_real.seekdir(d, pos);
}

