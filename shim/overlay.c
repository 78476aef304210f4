/* Rank-private file writes.  See overlay.h.
 *
 * Every interposed entry point first checks `on` (one load) and calls the
 * real function when the overlay is off: that is every process but the
 * training program of a rank > 0.  Where it is on:
 *   writes   (open/fopen for writing, creat, mkdir, rename, link, symlink,
 *            chmod, truncate, utimensat): the path is made absolute (the
 *            working directory, or the folder behind a dirfd), normalized,
 *            and mapped to ROOT/abs, where ROOT is a private temporary
 *            folder made on the first write; an existing real file opened
 *            without O_TRUNC is copied up first.  Removals of real files
 *            record a whiteout (this process only).
 *   reads    (open/fopen for reading, the stat family, access, opendir):
 *            ROOT/abs when it exists, ENOENT when whited out, else the real
 *            path.  A real folder that also has overlay entries is listed
 *            merged (overlay entries first, whiteouts hidden).
 * The whiteout list and the folder's creation are under one mutex; the
 * lookups themselves are system calls on the two paths. */
#define _GNU_SOURCE
#include "overlay.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <sys/types.h>
#include <unistd.h>

#include "../base/config.h"
#include "../base/log.h"

#define EXPORT __attribute__((visibility("default")))
#define CALLER __builtin_return_address(0)

/* ------------------------------------------------------------ real calls */
static int (*r_openat)(int, const char *, int, ...);
static FILE *(*r_fopen)(const char *, const char *);
static FILE *(*r_freopen)(const char *, const char *, FILE *);
static int (*r_fstatat)(int, const char *, struct stat *, int);
static int (*r_statx)(int, const char *, int, unsigned, void *);
static int (*r_faccessat)(int, const char *, int, int);
static int (*r_renameat2)(int, const char *, int, const char *, unsigned);
static int (*r_unlinkat)(int, const char *, int);
static int (*r_mkdirat)(int, const char *, mode_t);
static int (*r_linkat)(int, const char *, int, const char *, int);
static int (*r_symlinkat)(const char *, int, const char *);
static int (*r_fchmodat)(int, const char *, mode_t, int);
static int (*r_truncate)(const char *, off_t);
static int (*r_utimensat)(int, const char *, const struct timespec *, int);
static DIR *(*r_opendir)(const char *);
static struct dirent64 *(*r_readdir64)(DIR *);
static int (*r_closedir)(DIR *);
static void (*r_rewinddir)(DIR *);
static int (*r_dirfd)(DIR *);
static long (*r_telldir)(DIR *);
static void (*r_seekdir)(DIR *, long);
static int (*r_bind)(int, const struct sockaddr *, socklen_t);
static int (*r_connect)(int, const struct sockaddr *, socklen_t);
static char *(*r_realpath)(const char *, char *);

static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static void *next_fn(const char *name) { return dlsym(RTLD_NEXT, name); }

static void resolve(void) {
#define GET(var, name) *(void **)&var = next_fn(name)
  GET(r_openat, "openat64");
  GET(r_fopen, "fopen64");
  GET(r_freopen, "freopen64");
  GET(r_fstatat, "fstatat64");
  GET(r_statx, "statx");
  GET(r_faccessat, "faccessat");
  GET(r_renameat2, "renameat2");
  GET(r_unlinkat, "unlinkat");
  GET(r_mkdirat, "mkdirat");
  GET(r_linkat, "linkat");
  GET(r_symlinkat, "symlinkat");
  GET(r_fchmodat, "fchmodat");
  GET(r_truncate, "truncate64");
  GET(r_utimensat, "utimensat");
  GET(r_opendir, "opendir");
  GET(r_readdir64, "readdir64");
  GET(r_closedir, "closedir");
  GET(r_rewinddir, "rewinddir");
  GET(r_dirfd, "dirfd");
  GET(r_telldir, "telldir");
  GET(r_seekdir, "seekdir");
  GET(r_bind, "bind");
  GET(r_connect, "connect");
  GET(r_realpath, "realpath");
#undef GET
}
#define REAL() pthread_once(&resolved, resolve)

/* Before glibc 2.33 there is no fstatat symbol; the system call is the same. */
static int fstatat_(int dirfd, const char *path, struct stat *st, int flags) {
  if (r_fstatat) return r_fstatat(dirfd, path, st, flags);
  return (int)syscall(SYS_newfstatat, dirfd, path, st, flags);
}
static int lexists(const char *p, struct stat *st) { return fstatat_(AT_FDCWD, p, st, AT_SYMLINK_NOFOLLOW) == 0; }

/* ------------------------------------------------------------ state */
static volatile int on;       /* the overlay is active in this process */
static volatile int dirty;    /* a folder was made or a whiteout recorded: lookups needed */
static pid_t owner;           /* the rank process (forked children share the view, not the cleanup) */
static int my_rank;
static const void *self_base; /* libhvdshim.so: its own calls pass through */
static char root[PATH_MAX];   /* the overlay folder, "" until the first write */
static size_t rootlen;
static int watcher_fd = -1;   /* write end of the watcher's pipe */
static struct timespec t0;    /* when the overlay was armed */
static pthread_mutex_t mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static char **wo;             /* whiteouts: absolute real paths this process removed */
static size_t nwo, capwo;

static char *seen[1024];      /* real files this process saw exist (stat/access), a ring */
static size_t nseen;

const char *hvd_overlay_root(void) { return root[0] ? root : NULL; }

/* ------------------------------------------------------------ paths */
/* libc declares its path arguments nonnull, so a plain NULL test could be
 * folded away; a NULL still reaches the real call, which fails with EFAULT. */
static int nonempty(const char *p) {
  __asm__("" : "+r"(p));
  return p && *p;
}

/* (dirfd, path) as an absolute, lexically normalized path in out.  A path
 * inside the overlay folder (a dirfd opened there) is given back as the real
 * path it stands for.  Returns 0, or -1 when it cannot be told (pass through). */
static int absolute(int dirfd, const char *path, char *out) {
  char buf[2 * PATH_MAX];
  if (!nonempty(path)) return -1;
  if (path[0] == '/') {
    if (strlen(path) >= sizeof buf) return -1;
    strcpy(buf, path);
  } else {
    char base[PATH_MAX];
    if (dirfd == AT_FDCWD) {
      if (!getcwd(base, sizeof base)) return -1;
    } else {
      char link[64];
      snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
      ssize_t n = readlink(link, base, sizeof base - 1);
      if (n <= 0) return -1;
      base[n] = 0;
      if (base[0] != '/') return -1;
    }
    if (snprintf(buf, sizeof buf, "%s/%s", base, path) >= (int)sizeof buf) return -1;
  }
  size_t o = 0;
  const char *p = buf;
  while (*p) {
    while (*p == '/') p++;
    if (!*p) break;
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 1 && p[0] == '.') {
    } else if (len == 2 && p[0] == '.' && p[1] == '.') {
      while (o > 0 && out[o - 1] != '/') o--;
      if (o > 0) o--;
    } else {
      if (o + 1 + len >= PATH_MAX) return -1;
      out[o++] = '/';
      memcpy(out + o, p, len);
      o += len;
    }
    p += len;
  }
  if (o == 0) out[o++] = '/';
  out[o] = 0;
  if (rootlen && !strncmp(out, root, rootlen) && (out[rootlen] == '/' || !out[rootlen])) {
    memmove(out, out + rootlen, o - rootlen + 1);
    if (!out[0]) strcpy(out, "/");
  }
  return 0;
}

static int under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return !strncmp(path, dir, n) && (path[n] == '/' || !path[n]);
}

/* Kernel and runtime file systems: never redirected.  Nor Python
 * multiprocessing's own folder (tempfile.mkdtemp(prefix="pymp-"), unique to
 * the process that makes it): the rank's children use it too (DataLoader
 * workers bind a socket there to pass file descriptors, Python 3.14's
 * forkserver lives there), and they do not see the rank's overlay. */
static int excluded_path(const char *a) {
  static const char *const sys[] = {"/dev", "/proc", "/sys", "/run"};
  for (size_t i = 0; i < sizeof sys / sizeof *sys; i++)
    if (under(a, sys[i])) return 1;
  return strstr(a, "/pymp-") != NULL;
}

/* Calls made by the MPI runtime, NCCL, CUDA or hvdshim itself write their own
 * files (shared-memory segments, session folders): never redirected. */
static int excluded_caller(const void *ret) {
  static const char *const libs[] = {"libmpi", "libopen-", "libpmix", "libprrte", "libprte", "libhwloc", "libuc",
                                     "libfabric", "libpsm", "libnccl", "libcuda", "libnvidia", "libibverbs",
                                     "librdmacm", "libevent", "libmunge", "libpmi", "libhvdshim"};
  static const char *const dirs[] = {"/openmpi/", "/pmix/", "/prrte/", "/mpich/", "/ucx/"};
  Dl_info i;
  if (!ret || !dladdr(ret, &i) || !i.dli_fname) return 0;
  if (i.dli_fbase == self_base) return 1;
  const char *b = strrchr(i.dli_fname, '/');
  b = b ? b + 1 : i.dli_fname;
  for (size_t k = 0; k < sizeof libs / sizeof *libs; k++)
    if (!strncmp(b, libs[k], strlen(libs[k]))) return 1;
  for (size_t k = 0; k < sizeof dirs / sizeof *dirs; k++)
    if (strstr(i.dli_fname, dirs[k])) return 1;
  return 0;
}

static int ovpath(const char *abs, char *out) {
  if (!root[0] || snprintf(out, PATH_MAX, "%s%s", root, abs) >= PATH_MAX) return -1;
  return 0;
}

/* ------------------------------------------------------------ whiteouts (under mu) */
static int whited(const char *a) {
  for (size_t i = 0; i < nwo; i++)
    if (under(a, wo[i])) return 1;
  return 0;
}

static void add_wo(const char *a) {
  for (size_t i = 0; i < nwo; i++)
    if (!strcmp(wo[i], a)) return;
  if (nwo == capwo) {
    size_t cap = capwo ? capwo * 2 : 16;
    char **n = realloc(wo, cap * sizeof *n);
    if (!n) return;
    wo = n, capwo = cap;
  }
  char *s = strdup(a);
  if (s) wo[nwo++] = s, dirty = 1;
}

/* `a` exists again in this process's view (made in the overlay): drop its
 * whiteout.  A real folder that was removed and is made anew must look
 * empty, so its real entries are whited out one by one. */
static void unwhite(const char *a) {
  int was = 0;
  for (size_t i = 0; i < nwo; i++)
    if (!strcmp(wo[i], a)) {
      free(wo[i]);
      wo[i--] = wo[--nwo];
      was = 1;
    }
  if (!was) return;
  DIR *d = r_opendir(a);
  if (!d) return;
  struct dirent64 *e;
  char p[PATH_MAX];
  while ((e = r_readdir64(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
        snprintf(p, sizeof p, "%s/%s", strcmp(a, "/") ? a : "", e->d_name) < (int)sizeof p)
      add_wo(p);
  r_closedir(d);
}

/* Real files this process has seen exist.  Another process (rank 0 running
 * the same script) may remove one before this rank does: its removal then
 * still succeeds here, as it would for a rank alone. */
static void note_seen(const char *a) {
  char *c = strdup(a);
  if (!c) return;
  size_t i = nseen++ % (sizeof seen / sizeof *seen);
  free(seen[i]);
  seen[i] = c;
}

static int was_seen(const char *a) {
  for (size_t i = 0; i < sizeof seen / sizeof *seen; i++)
    if (seen[i] && !strcmp(seen[i], a)) return 1;
  return 0;
}

/* ------------------------------------------------------------ the folder (under mu) */
static void spawn_watcher(void) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_adddup2(&fa, p[0], 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(&fa, 3); /* no MPI socket or output pipe held open by it */
#endif
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID); /* outside the rank's process group and signals */
  /* It reads until the rank's end of the pipe closes (the rank is gone,
   * however it ended), then removes the folder.  Empty environment: no
   * preload, so it is not a rank itself. */
  char *argv[] = {"sh", "-c", "read _ ; rm -rf -- \"$0\"", root, NULL};
  char *envp[] = {"PATH=/usr/bin:/bin", NULL};
  pid_t pid;
  if (posix_spawn(&pid, "/bin/sh", &fa, &at, argv, envp) == 0) watcher_fd = p[1];
  else close(p[1]);
  close(p[0]);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
}

static int ensure_root(void) {
  if (root[0]) return 0;
  const char *t = getenv("TMPDIR");
  char tmpl[PATH_MAX], real[PATH_MAX];
  if (!t || !*t) t = "/tmp";
  if (snprintf(tmpl, sizeof tmpl, "%s/hvdshim-rank%d-%ld-XXXXXX", t, my_rank, (long)getpid()) >= (int)sizeof tmpl ||
      !mkdtemp(tmpl) || !realpath(tmpl, real) || strlen(real) >= sizeof root) {
    int e = errno ? errno : ENAMETOOLONG;
    static int said;
    if (!said++)
      HVD_ERROR("cannot make the folder for rank %d's private files under %s (%s): this rank's writes fail "
                "(set TMPDIR to a writable folder, or HVDSHIM_SAVE_RANKS=all to write real files on every rank)",
                my_rank, t, strerror(e));
    errno = e;
    return -1;
  }
  strcpy(root, real);
  rootlen = strlen(root);
  dirty = 1;
  spawn_watcher();
  HVD_DEBUG("rank %d's file writes go to %s", my_rank, root);
  return 0;
}

static void mkparents(const char *ov) {
  char p[PATH_MAX];
  strcpy(p, ov);
  for (char *s = p + rootlen + 1; (s = strchr(s, '/')); s++) {
    *s = 0;
    r_mkdirat(AT_FDCWD, p, 0777);
    *s = '/';
  }
}

/* The folder holding `a` exists in this process's view. */
static int parent_exists(const char *a) {
  char p[PATH_MAX], ov[PATH_MAX];
  struct stat st;
  strcpy(p, a);
  char *s = strrchr(p, '/');
  if (!s || s == p) return 1;
  *s = 0;
  if (!ovpath(p, ov) && lexists(ov, &st)) return S_ISDIR(st.st_mode);
  if (whited(p)) return 0;
  return fstatat_(AT_FDCWD, p, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

static int copy_file(const char *src, const char *dst, mode_t mode) {
  static char buf[1 << 16]; /* under mu */
  int in = r_openat(AT_FDCWD, src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return -1;
  int out = r_openat(AT_FDCWD, dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 07777);
  int rc = out < 0 ? -1 : 0;
  while (!rc) {
    ssize_t n = read(in, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      rc = -1;
      break;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(out, buf + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        rc = -1;
        break;
      }
      off += w;
    }
  }
  int e = errno;
  close(in);
  if (out >= 0) close(out);
  errno = e;
  return rc;
}

/* ------------------------------------------------------------ mapping */
enum { MAPPED = 0, PASS = 1, FAIL = -1 };

/* A read: the overlay's copy, ENOENT for a whiteout, or the real path
 * (then `abs`, when given, gets the absolute path; else it is ""). */
static int map_read_abs(int dirfd, const char *path, char *out, char *abs) {
  char a[PATH_MAX];
  struct stat st;
  if (abs) abs[0] = 0;
  if (!on || !dirty || absolute(dirfd, path, a) || excluded_path(a)) return PASS;
  if (abs) strcpy(abs, a);
  int r = PASS;
  pthread_mutex_lock(&mu);
  if (!ovpath(a, out) && lexists(out, &st)) r = MAPPED;
  else if (whited(a)) r = FAIL;
  else if (dirfd != AT_FDCWD && path[0] != '/') strcpy(out, a), r = MAPPED; /* dirfd may be an overlay folder */
  pthread_mutex_unlock(&mu);
  if (r == FAIL) errno = ENOENT;
  return r;
}

static int map_read(int dirfd, const char *path, char *out) { return map_read_abs(dirfd, path, out, NULL); }

/* A write with open(2) flags: the overlay path to use (created or copied
 * up as needed), PASS for what is not redirected, FAIL with errno. */
static int map_write_locked(const char *a, int flags, char *out) {
  struct stat st;
  if (root[0] && !ovpath(a, out) && lexists(out, &st)) {
    if ((flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL)) return errno = EEXIST, FAIL;
    return MAPPED;
  }
  if (!whited(a) && fstatat_(AT_FDCWD, a, &st, 0) == 0) {
    if (!S_ISREG(st.st_mode)) return PASS; /* folders, devices, FIFOs, sockets */
    if ((flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL)) return errno = EEXIST, FAIL;
    if (ensure_root() || ovpath(a, out)) return FAIL;
    mkparents(out);
    if (!(flags & O_TRUNC) && copy_file(a, out, st.st_mode)) return FAIL;
    return MAPPED;
  }
  if (!(flags & O_CREAT)) return errno = ENOENT, FAIL;
  if (!parent_exists(a)) return errno = ENOENT, FAIL;
  if (ensure_root() || ovpath(a, out)) return FAIL;
  mkparents(out);
  unwhite(a);
  return MAPPED;
}

static int map_write(int dirfd, const char *path, int flags, const void *caller, char *out) {
  char a[PATH_MAX];
  if (!on || absolute(dirfd, path, a) || excluded_path(a) || excluded_caller(caller)) return PASS;
  pthread_mutex_lock(&mu);
  int r = map_write_locked(a, flags, out);
  if (r == PASS && dirfd != AT_FDCWD && path[0] != '/') strcpy(out, a), r = MAPPED;
  pthread_mutex_unlock(&mu);
  return r;
}

int hvd_overlay_write_path(const char *path, char *out, size_t len) {
  REAL();
  char m[PATH_MAX];
  if (!on || !nonempty(path)) return 0;
  int r = map_write(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, NULL, m);
  if (r == PASS) return 0;
  if (r == FAIL) return -1;
  if (strlen(m) >= len) return errno = ENAMETOOLONG, -1;
  strcpy(out, m);
  return 1;
}

/* ------------------------------------------------------------ open, fopen */
static int open_common(int dirfd, const char *path, int flags, mode_t mode, const void *caller) {
  REAL();
  if (!on) return r_openat(dirfd, path, flags, mode);
  char m[PATH_MAX];
  int tmpfile = (flags & O_TMPFILE) == O_TMPFILE;
  int wr = !tmpfile && !(flags & O_PATH) && ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)));
  int r = wr ? map_write(dirfd, path, flags, caller, m) : map_read(dirfd, path, m);
  if (r == FAIL) return -1;
  return r == PASS ? r_openat(dirfd, path, flags, mode) : r_openat(AT_FDCWD, m, flags, mode);
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
  if (on && nonempty(path) && mode) {
    int wr = strpbrk(mode, "wa+") != NULL;
    int flags = (mode[0] == 'w' ? O_CREAT | O_TRUNC : mode[0] == 'a' ? O_CREAT : 0) | (strchr(mode, 'x') ? O_EXCL : 0);
    r = wr ? map_write(AT_FDCWD, path, flags | O_WRONLY, caller, m) : map_read(AT_FDCWD, path, m);
    if (r == FAIL) {
      if (re) fclose(re); /* freopen closes the stream even when it fails */
      return NULL;
    }
  }
  const char *use = r == MAPPED ? m : path;
  return re ? r_freopen(use, mode, re) : r_fopen(use, mode);
}
EXPORT FILE *fopen(const char *path, const char *mode) { return fopen_common(path, mode, NULL, CALLER); }
EXPORT FILE *fopen64(const char *path, const char *mode) { return fopen_common(path, mode, NULL, CALLER); }
EXPORT FILE *freopen(const char *path, const char *mode, FILE *f) { return fopen_common(path, mode, f, CALLER); }
EXPORT FILE *freopen64(const char *path, const char *mode, FILE *f) { return fopen_common(path, mode, f, CALLER); }

/* ------------------------------------------------------------ realpath */
/* glibc's realpath checks each component with its own internal calls, so a
 * name that exists only in this rank's overlay (a file it wrote) fails with
 * ENOENT; Rust's fs::canonicalize (safetensors' save_file) and C++'s
 * filesystem::canonical call it on paths just written.  Such a name is
 * given back as its real path: the canonical parent and the last name.
 * The parent is canonicalized the same way, here and not through the
 * exported realpath: that one would see hvdshim as its caller and pass
 * through, and a folder the rank made itself (os.makedirs before rank 0
 * made the real one) would fail in turn.  Returns a malloc'd path, or NULL
 * with errno. */
static char *view_realpath(const char *path) {
  char a[PATH_MAX], m[PATH_MAX], out[PATH_MAX];
  char *r = r_realpath(path, NULL);
  if (r || errno != ENOENT) return r;
  if (absolute(AT_FDCWD, path, a) || map_read(AT_FDCWD, a, m) != MAPPED) return errno = ENOENT, NULL;
  char *slash = strrchr(a, '/');
  if (slash == a) return strdup(a); /* "/name": its parent is the root */
  *slash = 0;
  char *p = view_realpath(a); /* one component shorter: the recursion ends at "/" */
  *slash = '/';
  if (!p) return NULL;
  int n = snprintf(out, sizeof out, "%s/%s", strcmp(p, "/") ? p : "", slash + 1);
  free(p);
  if (n >= (int)sizeof out) return errno = ENAMETOOLONG, NULL;
  return strdup(out);
}
static char *realpath_common(const char *path, char *buf, const void *caller) {
  REAL();
  int saved = errno;
  char *r = r_realpath(path, buf);
  if (r || errno != ENOENT || !on || !dirty || !nonempty(path) || excluded_caller(caller)) return r;
  r = view_realpath(path);
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
  int r = on && nonempty(path) ? map_read_abs(dirfd, path, m, a) : PASS;
  if (r == FAIL) return -1;
  if (r != PASS) return fstatat_(AT_FDCWD, m, st, flags);
  int rc = fstatat_(dirfd, path, st, flags);
  if (rc == 0 && on && a[0] && S_ISREG(st->st_mode)) { /* a real file this rank saw (r == PASS sets a) */
    pthread_mutex_lock(&mu);
    note_seen(a);
    pthread_mutex_unlock(&mu);
  }
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
  int r = on && nonempty(p) ? map_read(d, p, m) : PASS;
  if (r == FAIL) return -1;
  if (!r_statx) return errno = ENOSYS, -1;
  return r == PASS ? r_statx(d, p, fl, mask, buf) : r_statx(AT_FDCWD, m, fl, mask, buf);
}
EXPORT int faccessat(int d, const char *p, int mode, int fl) {
  REAL();
  char m[PATH_MAX];
  int r = on && nonempty(p) ? map_read(d, p, m) : PASS;
  if (r == FAIL) return -1;
  return r == PASS ? r_faccessat(d, p, mode, fl) : r_faccessat(AT_FDCWD, m, mode, fl);
}
EXPORT int access(const char *p, int mode) { return faccessat(AT_FDCWD, p, mode, 0); }

/* ------------------------------------------------------------ changing an existing file */
/* chmod, truncate, utimensat: the overlay's copy (copied up first). */
static int map_modify(int dirfd, const char *path, const void *caller, char *out) {
  return map_write(dirfd, path, O_WRONLY, caller, out);
}
EXPORT int fchmodat(int d, const char *p, mode_t mode, int fl) {
  REAL();
  char m[PATH_MAX];
  int r = on && nonempty(p) ? map_modify(d, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return r == PASS ? r_fchmodat(d, p, mode, fl) : r_fchmodat(AT_FDCWD, m, mode, fl);
}
EXPORT int chmod(const char *p, mode_t mode) {
  REAL();
  char m[PATH_MAX];
  int r = on && nonempty(p) ? map_modify(AT_FDCWD, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return r_fchmodat(AT_FDCWD, r == PASS ? p : m, mode, 0);
}
static int truncate_common(const char *p, off_t len, const void *caller) {
  REAL();
  char m[PATH_MAX];
  int r = on && nonempty(p) ? map_modify(AT_FDCWD, p, caller, m) : PASS;
  if (r == FAIL) return -1;
  return r_truncate(r == PASS ? p : m, len);
}
EXPORT int truncate(const char *p, off_t len) { return truncate_common(p, len, CALLER); }
EXPORT int truncate64(const char *p, off64_t len) { return truncate_common(p, (off_t)len, CALLER); }
EXPORT int utimensat(int d, const char *p, const struct timespec t[2], int fl) {
  REAL();
  char m[PATH_MAX];
  int r = on && nonempty(p) ? map_modify(d, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return r == PASS ? r_utimensat(d, p, t, fl) : r_utimensat(AT_FDCWD, m, t, fl);
}

/* ------------------------------------------------------------ removing, making, moving */
static int remove_common(int d, const char *p, int flags, const void *caller) {
  REAL();
  char a[PATH_MAX], ov[PATH_MAX];
  if (!on || absolute(d, p, a) || excluded_path(a) || excluded_caller(caller)) return r_unlinkat(d, p, flags);
  struct stat so, sr;
  int rc = 0, err = 0;
  pthread_mutex_lock(&mu);
  int in_ov = !ovpath(a, ov) && lexists(ov, &so);
  int in_real = !whited(a) && lexists(a, &sr);
  if (!in_ov && !in_real) {
    if (whited(a) || !was_seen(a) || (flags & AT_REMOVEDIR)) rc = -1, err = ENOENT;
    /* else: seen here, since removed by another process: removed for this rank too */
  } else if (in_ov) {
    if (r_unlinkat(AT_FDCWD, ov, flags) != 0) rc = -1, err = errno;
  } else if ((flags & AT_REMOVEDIR) && !S_ISDIR(sr.st_mode)) {
    rc = -1, err = ENOTDIR;
  } else if (!(flags & AT_REMOVEDIR) && S_ISDIR(sr.st_mode)) {
    rc = -1, err = EISDIR;
  }
  /* hidden from this process (rank 0's file stays), and so is whatever another
   * process makes at this path later (rank 0's temporary of the same save) */
  if (rc == 0) add_wo(a);
  pthread_mutex_unlock(&mu);
  if (rc) errno = err;
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
  char a[PATH_MAX], ov[PATH_MAX];
  if (!on || absolute(d, p, a) || excluded_path(a) || excluded_caller(caller)) return r_mkdirat(d, p, mode);
  struct stat st;
  int rc = -1, err = 0;
  pthread_mutex_lock(&mu);
  if ((!ovpath(a, ov) && lexists(ov, &st)) || (!whited(a) && lexists(a, &st))) err = EEXIST;
  else if (!parent_exists(a)) err = ENOENT;
  else if (ensure_root() || ovpath(a, ov)) err = errno;
  else {
    mkparents(ov);
    if (r_mkdirat(AT_FDCWD, ov, mode) == 0) rc = 0, unwhite(a);
    else err = errno;
  }
  pthread_mutex_unlock(&mu);
  if (rc) errno = err;
  return rc;
}
EXPORT int mkdir(const char *p, mode_t mode) { return mkdir_common(AT_FDCWD, p, mode, CALLER); }
EXPORT int mkdirat(int d, const char *p, mode_t mode) { return mkdir_common(d, p, mode, CALLER); }

/* Move A to B in this process's view.  A real file is copied into the
 * overlay as B and whited out (rank 0's stays); a real folder cannot be
 * moved this way (EXDEV, which shutil.move handles by copying). */
static int rename_common(int d1, const char *p1, int d2, const char *p2, unsigned fl, const void *caller) {
  REAL();
  char a[PATH_MAX], b[PATH_MAX], oa[PATH_MAX], ob[PATH_MAX];
  if (!on || absolute(d1, p1, a) || absolute(d2, p2, b) || excluded_path(a) || excluded_path(b) ||
      excluded_caller(caller))
    return r_renameat2(d1, p1, d2, p2, fl);
  if (fl & ~(unsigned)RENAME_NOREPLACE) return errno = EINVAL, -1;
  struct stat sa, sb;
  int rc = -1, err = 0;
  pthread_mutex_lock(&mu);
  int in_ova = !ovpath(a, oa) && lexists(oa, &sa);
  int in_reala = !whited(a) && (in_ova ? lexists(a, &sb) : lexists(a, &sa));
  int exists_b = (!ovpath(b, ob) && lexists(ob, &sb)) || (!whited(b) && lexists(b, &sb));
  if (!in_ova && !in_reala) err = ENOENT;
  else if ((fl & RENAME_NOREPLACE) && exists_b) err = EEXIST;
  else if (!strcmp(a, b)) rc = 0;
  else if (!parent_exists(b)) err = ENOENT;
  else if (!in_ova && S_ISDIR(sa.st_mode)) err = EXDEV;
  else if (ensure_root() || ovpath(a, oa) || ovpath(b, ob)) err = errno;
  else {
    mkparents(ob);
    if (in_ova) {
      rc = r_renameat2(AT_FDCWD, oa, AT_FDCWD, ob, 0);
    } else if (S_ISLNK(sa.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = readlink(a, target, sizeof target - 1);
      if (n >= 0) target[n] = 0, r_unlinkat(AT_FDCWD, ob, 0), rc = r_symlinkat(target, AT_FDCWD, ob);
    } else {
      rc = copy_file(a, ob, sa.st_mode);
    }
    if (rc) err = errno;
    else {
      add_wo(a); /* as for a removal */
      unwhite(b);
    }
  }
  pthread_mutex_unlock(&mu);
  if (rc) errno = err;
  return rc;
}
EXPORT int rename(const char *a, const char *b) { return rename_common(AT_FDCWD, a, AT_FDCWD, b, 0, CALLER); }
EXPORT int renameat(int d1, const char *a, int d2, const char *b) { return rename_common(d1, a, d2, b, 0, CALLER); }
EXPORT int renameat2(int d1, const char *a, int d2, const char *b, unsigned fl) {
  return rename_common(d1, a, d2, b, fl, CALLER);
}

/* New names (links): made in the overlay. */
static int newname(int d, const char *p, const void *caller, char *out) {
  return map_write(d, p, O_CREAT | O_EXCL | O_WRONLY, caller, out);
}
EXPORT int symlinkat(const char *target, int d, const char *p) {
  REAL();
  char m[PATH_MAX];
  int r = on && nonempty(p) ? newname(d, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return r == PASS ? r_symlinkat(target, d, p) : r_symlinkat(target, AT_FDCWD, m);
}
EXPORT int symlink(const char *target, const char *p) {
  REAL();
  char m[PATH_MAX];
  int r = on && nonempty(p) ? newname(AT_FDCWD, p, CALLER, m) : PASS;
  if (r == FAIL) return -1;
  return r_symlinkat(target, AT_FDCWD, r == PASS ? p : m);
}
static int link_common(int d1, const char *p1, int d2, const char *p2, int fl, const void *caller) {
  REAL();
  char src[PATH_MAX], m[PATH_MAX];
  if (!on || !nonempty(p1) || !nonempty(p2)) return r_linkat(d1, p1, d2, p2, fl);
  int rs = map_read(d1, p1, src);
  if (rs == FAIL) return -1;
  int r = newname(d2, p2, caller, m);
  if (r == FAIL) return -1;
  if (r == PASS) return rs == PASS ? r_linkat(d1, p1, d2, p2, fl) : r_linkat(AT_FDCWD, src, d2, p2, fl);
  /* the new name is in the overlay: a link to an overlay file, a copy of a real one */
  if (rs == MAPPED && r_linkat(AT_FDCWD, src, AT_FDCWD, m, fl) == 0) return 0;
  struct stat st;
  char a[PATH_MAX];
  if (rs == MAPPED) strcpy(a, src);
  else if (absolute(d1, p1, a)) return errno = EXDEV, -1;
  if (fstatat_(AT_FDCWD, a, &st, 0) != 0) return -1;
  pthread_mutex_lock(&mu);
  int rc = copy_file(a, m, st.st_mode);
  pthread_mutex_unlock(&mu);
  return rc;
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
  int (*real)(int, const struct sockaddr *, socklen_t) = binding ? r_bind : r_connect;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1], m[PATH_MAX];
  if (!on || !unix_path(addr, len, path)) return real(fd, addr, len);
  int r = binding ? map_write(AT_FDCWD, path, O_CREAT | O_EXCL | O_WRONLY, caller, m) : map_read(AT_FDCWD, path, m);
  if (r == FAIL) return errno == EEXIST ? (errno = EADDRINUSE, -1) : -1;
  if (r == PASS) return real(fd, addr, len);
  struct sockaddr_un u = {.sun_family = AF_UNIX};
  if (strlen(m) < sizeof u.sun_path) {
    strcpy(u.sun_path, m);
    return real(fd, (const struct sockaddr *)&u, (socklen_t)sizeof u);
  }
  /* The overlay path is longer than a socket address may be: name the
   * folder through /proc/self/fd/N instead (the kernel resolves it). */
  char *slash = strrchr(m, '/');
  *slash = 0;
  int dfd = r_openat(AT_FDCWD, m, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  int rc = -1;
  if (snprintf(u.sun_path, sizeof u.sun_path, "/proc/self/fd/%d/%s", dfd, slash + 1) >= (int)sizeof u.sun_path) errno = ENAMETOOLONG;
  else rc = real(fd, (const struct sockaddr *)&u, (socklen_t)sizeof u);
  int e = errno;
  close(dfd);
  errno = e;
  return rc;
}
EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len) { return socket_common(fd, addr, len, 1, CALLER); }
EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len) {
  return socket_common(fd, addr, len, 0, CALLER);
}

/* ------------------------------------------------------------ merged folder listings */
typedef struct {
  DIR *over, *real;
  int phase; /* 0: overlay entries, 1: real entries */
  char path[PATH_MAX];
  char **names;
  size_t n, cap;
  struct dirent64 ent;
} merged_dir;

static merged_dir **open_dirs;
static size_t n_open_dirs, cap_open_dirs;

static merged_dir *find_dir(DIR *d) { /* under mu */
  for (size_t i = 0; i < n_open_dirs; i++)
    if ((DIR *)open_dirs[i] == d) return open_dirs[i];
  return NULL;
}

static int has_whiteouts_in(const char *a) {
  size_t n = strlen(a);
  for (size_t i = 0; i < nwo; i++)
    if (!strncmp(wo[i], a, n) && wo[i][n] == '/' && !strchr(wo[i] + n + 1, '/')) return 1;
  return 0;
}

EXPORT DIR *opendir(const char *p) {
  REAL();
  char a[PATH_MAX], ov[PATH_MAX];
  if (!on || !dirty || absolute(AT_FDCWD, p, a) || excluded_path(a)) return r_opendir(p);
  struct stat so, sr;
  DIR *res = NULL;
  pthread_mutex_lock(&mu);
  int in_ov = !ovpath(a, ov) && lexists(ov, &so);
  int real_dir = !whited(a) && fstatat_(AT_FDCWD, a, &sr, 0) == 0 && S_ISDIR(sr.st_mode);
  merged_dir *m = NULL;
  if (whited(a) && !in_ov) errno = ENOENT;
  else if (in_ov && !real_dir) res = r_opendir(ov);
  else if (!(in_ov && S_ISDIR(so.st_mode)) && !has_whiteouts_in(a)) res = r_opendir(p);
  else if (n_open_dirs == cap_open_dirs &&
           !(open_dirs = realloc(open_dirs, (cap_open_dirs = cap_open_dirs ? 2 * cap_open_dirs : 8) * sizeof m)))
    errno = ENOMEM, n_open_dirs = cap_open_dirs = 0;
  else if (!(m = calloc(1, sizeof *m))) errno = ENOMEM;
  else if (!(m->real = r_opendir(a))) free(m), m = NULL;
  else {
    m->over = in_ov ? r_opendir(ov) : NULL;
    strcpy(m->path, a);
    open_dirs[n_open_dirs++] = m;
    res = (DIR *)m;
  }
  pthread_mutex_unlock(&mu);
  return res;
}

/* Made after this rank started, by another process (rank 0 writing the
 * same files as this rank, a temporary of its save in flight): a merged
 * listing leaves it out, as this rank alone would not have it.  Birth time
 * where the file system keeps one, else the change time. */
static int foreign(DIR *real, const char *name) {
  struct statx sx;
  if (!r_statx || r_statx(r_dirfd(real), name, AT_SYMLINK_NOFOLLOW, STATX_BTIME | STATX_CTIME, &sx) != 0) return 0;
  struct statx_timestamp t = (sx.stx_mask & STATX_BTIME) ? sx.stx_btime : sx.stx_ctime;
  return t.tv_sec > t0.tv_sec || (t.tv_sec == t0.tv_sec && (long)t.tv_nsec > t0.tv_nsec);
}

static struct dirent64 *merged_next(merged_dir *m) { /* under mu */
  struct dirent64 *e;
  char p[PATH_MAX];
  if (m->phase == 0) {
    while (m->over && (e = r_readdir64(m->over))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16;
        char **nn = realloc(m->names, cap * sizeof *nn);
        if (!nn) break;
        m->names = nn, m->cap = cap;
      }
      m->names[m->n] = strdup(e->d_name);
      if (m->names[m->n]) m->n++;
      memcpy(&m->ent, e, sizeof m->ent);
      return &m->ent;
    }
    m->phase = 1;
  }
  while ((e = r_readdir64(m->real))) {
    int dup = 0;
    for (size_t i = 0; i < m->n && !dup; i++) dup = !strcmp(m->names[i], e->d_name);
    if (dup) continue;
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
        ((snprintf(p, sizeof p, "%s/%s", strcmp(m->path, "/") ? m->path : "", e->d_name) < (int)sizeof p && whited(p)) ||
         foreign(m->real, e->d_name)))
      continue;
    memcpy(&m->ent, e, sizeof m->ent);
    return &m->ent;
  }
  return NULL;
}

EXPORT struct dirent64 *readdir64(DIR *d) {
  REAL();
  if (!n_open_dirs) return r_readdir64(d);
  pthread_mutex_lock(&mu);
  merged_dir *m = find_dir(d);
  struct dirent64 *e = m ? merged_next(m) : NULL;
  pthread_mutex_unlock(&mu);
  return m ? e : r_readdir64(d);
}
/* struct dirent and struct dirent64 have one layout on 64-bit targets */
EXPORT struct dirent *readdir(DIR *d) { return (struct dirent *)readdir64(d); }

EXPORT int closedir(DIR *d) {
  REAL();
  if (!n_open_dirs) return r_closedir(d);
  pthread_mutex_lock(&mu);
  merged_dir *m = find_dir(d);
  if (m)
    for (size_t i = 0; i < n_open_dirs; i++)
      if (open_dirs[i] == m) open_dirs[i] = open_dirs[--n_open_dirs];
  pthread_mutex_unlock(&mu);
  if (!m) return r_closedir(d);
  if (m->over) r_closedir(m->over);
  r_closedir(m->real);
  for (size_t i = 0; i < m->n; i++) free(m->names[i]);
  free(m->names);
  free(m);
  return 0;
}

EXPORT void rewinddir(DIR *d) {
  REAL();
  merged_dir *m = NULL;
  if (n_open_dirs) {
    pthread_mutex_lock(&mu);
    if ((m = find_dir(d))) {
      if (m->over) r_rewinddir(m->over);
      r_rewinddir(m->real);
      for (size_t i = 0; i < m->n; i++) free(m->names[i]);
      m->n = 0, m->phase = 0;
    }
    pthread_mutex_unlock(&mu);
  }
  if (!m) r_rewinddir(d);
}

static DIR *underlying(DIR *d) {
  if (!n_open_dirs) return d;
  pthread_mutex_lock(&mu);
  merged_dir *m = find_dir(d);
  pthread_mutex_unlock(&mu);
  return m ? NULL : d;
}
EXPORT int dirfd(DIR *d) {
  REAL();
  if (underlying(d)) return r_dirfd(d);
  pthread_mutex_lock(&mu);
  int fd = r_dirfd(find_dir(d)->real); /* the real folder; the overlay is reached through the path */
  pthread_mutex_unlock(&mu);
  return fd;
}
EXPORT long telldir(DIR *d) {
  REAL();
  if (underlying(d)) return r_telldir(d);
  return errno = ENOTSUP, -1; /* positions in a merged listing are not supported */
}
EXPORT void seekdir(DIR *d, long pos) {
  REAL();
  if (underlying(d)) r_seekdir(d, pos);
}

/* ------------------------------------------------------------ arming, cleanup */
static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)f;
  r_unlinkat(AT_FDCWD, p, flag == FTW_DP ? AT_REMOVEDIR : 0);
  return 0;
}

void hvd_overlay_cleanup(void) {
  if (!on || getpid() != owner || !root[0]) return;
  REAL();
  pthread_mutex_lock(&mu);
  nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  root[0] = 0, rootlen = 0; /* a write after this makes a new folder (and watcher) */
  if (watcher_fd >= 0) close(watcher_fd), watcher_fd = -1;
  pthread_mutex_unlock(&mu);
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

void hvd_overlay_arm(int rank) {
  if (rank <= 0 || on) return;
  const char *v = hvd_cfg_str(HVD_CFG_SAVE_RANKS);
  if (v && !strcmp(v, "all")) return;
  REAL();
  Dl_info self;
  if (dladdr((void *)hvd_overlay_arm, &self)) self_base = self.dli_fbase;
  owner = getpid();
  my_rank = rank;
  clock_gettime(CLOCK_REALTIME, &t0);
  atexit(cleanup_at_exit);
  on = 1;
}
