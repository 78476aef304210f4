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
 *            the listing calls, realpath, connect of a Unix socket. */
#define _GNU_SOURCE
#include "overlay.h"
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
#include <sys/socket.h>
#include <sys/stat.h>
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
#undef GET
}
#define REAL() pthread_once(&resolved, resolve)

/* Before glibc 2.33 there is no fstatat symbol; the system call is the same. */
static int fstatat_(int dirfd, const char *path, struct stat *st, int flags) {
  if (real.fstatat) return real.fstatat(dirfd, path, st, flags);
  return (int)syscall(SYS_newfstatat, dirfd, path, st, flags);
}

/* ------------------------------------------------------------ state */
static volatile int on; /* the overlay is active in this process */
static pid_t owner;     /* the rank process (forked children share the view, not the cleanup) */

enum { MAPPED = HVD_OVL_MAPPED, PASS = HVD_OVL_PASS, FAIL = HVD_OVL_FAIL };
static int map_read(int dirfd, const char *path, char *out) { return hvd_ovl_map_read(dirfd, path, out, NULL); }

const char *hvd_overlay_root(void) { return hvd_ovl_root(); }

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
static int open_common(int dirfd, const char *path, int flags, mode_t mode, const void *caller) {
  REAL();
  if (!on) return real.openat(dirfd, path, flags, mode);
  char m[PATH_MAX];
  int tmpfile = (flags & O_TMPFILE) == O_TMPFILE;
  int wr = !tmpfile && !(flags & O_PATH) && ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)));
  int r = wr ? hvd_ovl_map_write(dirfd, path, flags, caller, m) : map_read(dirfd, path, m);
  if (r == FAIL) return -1;
  return r == PASS ? real.openat(dirfd, path, flags, mode) : real.openat(AT_FDCWD, m, flags, mode);
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
  int r = PASS;
  if (on && hvd_ovl_nonempty(path) && mode) {
    int wr = strpbrk(mode, "wa+") != NULL;
    int flags = (mode[0] == 'w' ? O_CREAT | O_TRUNC : mode[0] == 'a' ? O_CREAT : 0) | (strchr(mode, 'x') ? O_EXCL : 0);
    r = wr ? hvd_ovl_map_write(AT_FDCWD, path, flags | O_WRONLY, caller, m) : map_read(AT_FDCWD, path, m);
    if (r == FAIL) {
      if (re) fclose(re); /* freopen closes the stream even when it fails */
      return NULL;
    }
  }
  const char *use = r == MAPPED ? m : path;
  return re ? real.freopen(use, mode, re) : real.fopen(use, mode);
}
EXPORT FILE *fopen(const char *path, const char *mode) { return fopen_common(path, mode, NULL, CALLER); }
EXPORT FILE *fopen64(const char *path, const char *mode) { return fopen_common(path, mode, NULL, CALLER); }
EXPORT FILE *freopen(const char *path, const char *mode, FILE *f) { return fopen_common(path, mode, f, CALLER); }
EXPORT FILE *freopen64(const char *path, const char *mode, FILE *f) { return fopen_common(path, mode, f, CALLER); }

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
  return hvd_ovl_remove(a, flags);
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
  return hvd_ovl_rename(a, b, fl);
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
  if (rs == MAPPED && real.linkat(AT_FDCWD, src, AT_FDCWD, m, fl) == 0) return 0;
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
  Dl_info self;
  const void *self_base = NULL;
  if (dladdr((void *)hvd_overlay_arm, &self)) self_base = self.dli_fbase;
  owner = getpid();
  hvd_ovl_init(&real, rank, self_base);
  atexit(cleanup_at_exit);
  on = 1;
}
