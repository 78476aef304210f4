/* The overlay's path logic: the view's start, its folder and its path
 * arithmetic (overlay_view.h says what the view owns;
 * overlay_view_internal.h has the view's files in their order).  The
 * overlay folder, ROOT, is a private temporary folder under $TMPDIR made on
 * the first write (ovl_ensure_root), with a watcher process that removes it
 * if the rank dies without exiting; hvd_ovl_drop removes it (and stops the
 * watcher) at the end.  A call's path is made absolute (the working
 * directory, or the folder behind a dirfd) and normalized
 * (hvd_ovl_absolute), and its overlay path is ROOT/abs (ovl_path); the
 * paths and callers never redirected are told here too.  This file holds
 * the view's shared state (overlay_view_internal.h) and calls only the real
 * calls overlay.c handed in (ovl_L). */
#define _GNU_SOURCE
#include "overlay_view.h"
#include "overlay_view_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../base/log.h"
#include "../base/remover.h"

/* ------------------------------------------------------------ state */
const hvd_ovl_libc *ovl_L;
volatile int ovl_dirty;
struct timespec ovl_t0;
pthread_mutex_t ovl_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static int my_rank;
static char root[PATH_MAX]; /* the overlay folder, "" until the first write */
static size_t rootlen;
static int watcher_fd = -1; /* write end of the watcher's pipe */

void hvd_ovl_init(const hvd_ovl_libc *libc, int rank) {
  ovl_L = libc;
  my_rank = rank;
  clock_gettime(CLOCK_REALTIME, &ovl_t0);
}

const char *hvd_ovl_root(void) { return root[0] ? root : NULL; }

/* Before glibc 2.33 there is no fstatat symbol; the system call is the same. */
int ovl_fstatat(int dirfd, const char *path, struct stat *st, int flags) {
  if (ovl_L->fstatat) return ovl_L->fstatat(dirfd, path, st, flags);
  return (int)syscall(SYS_newfstatat, dirfd, path, st, flags);
}
int ovl_lexists(const char *p, struct stat *st) { return ovl_fstatat(AT_FDCWD, p, st, AT_SYMLINK_NOFOLLOW) == 0; }

static int after_start(long long sec, long nsec) {
  return sec > ovl_t0.tv_sec || (sec == ovl_t0.tv_sec && nsec > ovl_t0.tv_nsec);
}

int ovl_statx_born_since_start(const struct statx *sx) {
  struct statx_timestamp t = (sx->stx_mask & STATX_BTIME) ? sx->stx_btime : sx->stx_ctime;
  return after_start(t.tv_sec, (long)t.tv_nsec);
}

int ovl_born_since_start(int dirfd, const char *path) {
  struct statx sx;
  if (!ovl_L->statx || ovl_L->statx(dirfd, path, AT_SYMLINK_NOFOLLOW, STATX_BTIME | STATX_CTIME, &sx) != 0) return 0;
  return ovl_statx_born_since_start(&sx);
}

int ovl_changed_since_start(const struct stat *st) {
  return after_start((long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
}

int ovl_parent_changed_since_start(const char *a) {
  char p[PATH_MAX];
  struct stat st;
  const char *s = strrchr(a, '/');
  if (!s || (size_t)(s - a) >= sizeof p) return 0;
  memcpy(p, a, (size_t)(s - a)), p[s - a] = 0;
  if (ovl_fstatat(AT_FDCWD, p[0] ? p : "/", &st, 0) != 0) return 0;
  return ovl_changed_since_start(&st);
}

/* ------------------------------------------------------------ paths */

/* (dirfd, path) as an absolute, lexically normalized path in out.  A path
 * inside the overlay folder (a dirfd opened there) is given back as the real
 * path it stands for.  Returns 0, or -1 when it cannot be told (pass through). */
int hvd_ovl_absolute(int dirfd, const char *path, char *out) {
  char buf[2 * PATH_MAX];
  if (!hvd_ovl_nonempty(path)) return -1;
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

/* Kernel and runtime file systems: never redirected.  Nor Python
 * multiprocessing's own folder (tempfile.mkdtemp(prefix="pymp-"), unique to
 * the process that makes it): the rank's children use it too (DataLoader
 * workers bind a socket there to pass file descriptors, Python 3.14's
 * forkserver lives there), and they do not see the rank's overlay. */
int hvd_ovl_excluded_path(const char *a) {
  static const char *const sys[] = {"/dev", "/proc", "/sys", "/run"};
  for (size_t i = 0; i < sizeof sys / sizeof *sys; i++)
    if (under(a, sys[i])) return 1;
  return strstr(a, "/pymp-") != NULL;
}

/* Calls made by the MPI runtime, NCCL or CUDA write their own files
 * (shared-memory segments, session folders): never redirected.  (hvdshim's
 * own file calls never come here: they go to the real libc, base/libc.c.) */
int hvd_ovl_excluded_caller(const void *ret) {
  static const char *const libs[] = {"libmpi", "libopen-", "libopen_mpi", /* (Open MPI 6) */
                                     "libpmix", "libprrte", "libprte", "libhwloc", "libuc", "libfabric", "libpsm",
                                     "libnccl", "libcuda", "libnvidia", "libibverbs", "librdmacm", "libevent",
                                     "libmunge", "libpmi"};
  static const char *const dirs[] = {"/openmpi/", "/pmix/", "/prrte/", "/mpich/", "/ucx/"};
  Dl_info i;
  if (!ret || !dladdr(ret, &i) || !i.dli_fname) return 0;
  const char *b = strrchr(i.dli_fname, '/');
  b = b ? b + 1 : i.dli_fname;
  for (size_t k = 0; k < sizeof libs / sizeof *libs; k++)
    if (!strncmp(b, libs[k], strlen(libs[k]))) return 1;
  for (size_t k = 0; k < sizeof dirs / sizeof *dirs; k++)
    if (strstr(i.dli_fname, dirs[k])) return 1;
  return 0;
}

/* ------------------------------------------------------------ the overlay path */
int ovl_path(const char *abs, char *out) {
  if (!root[0] || snprintf(out, PATH_MAX, "%s%s", root, abs) >= PATH_MAX) return -1;
  return 0;
}

/* ------------------------------------------------------------ the folder (under ovl_mu) */
int ovl_ensure_root(void) {
  if (root[0]) return 0;
  const char *t = getenv("TMPDIR");
  char tmpl[PATH_MAX], real[PATH_MAX];
  if (!t || !*t) t = "/tmp";
  if (snprintf(tmpl, sizeof tmpl, "%s/hvdshim-rank%d-%ld-XXXXXX", t, my_rank, (long)getpid()) >= (int)sizeof tmpl ||
      !mkdtemp(tmpl) || !ovl_L->realpath(tmpl, real) || strlen(real) >= sizeof root) {
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
  ovl_dirty = 1;
  watcher_fd = hvd_remover_spawn(root); /* removes it if the rank ends without exiting */
  HVD_DEBUG("rank %d's file writes go to %s", my_rank, root);
  return 0;
}

void ovl_mkparents(const char *ov) {
  char p[PATH_MAX];
  strcpy(p, ov);
  for (char *s = p + rootlen + 1; (s = strchr(s, '/')); s++) {
    *s = 0;
    ovl_L->mkdirat(AT_FDCWD, p, 0777);
    *s = '/';
  }
}

/* ------------------------------------------------------------ the folder's end */
static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)f;
  ovl_L->unlinkat(AT_FDCWD, p, flag == FTW_DP ? AT_REMOVEDIR : 0);
  return 0;
}

void hvd_ovl_drop(void) {
  pthread_mutex_lock(&ovl_mu);
  if (root[0]) nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  root[0] = 0, rootlen = 0; /* a write after this makes a new folder (and watcher) */
  if (watcher_fd >= 0) ovl_L->close(watcher_fd), watcher_fd = -1;
  pthread_mutex_unlock(&ovl_mu);
}
