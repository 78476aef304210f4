/* The overlay's path logic: this process's view of the file system (see
 * overlay_view.h for what it owns and overlay.h for what the overlay does;
 * overlay_view_internal.h has the view's files in their order).
 *
 * Writes go to the overlay path (ROOT/abs: overlay_view_folder.c); an
 * existing real file opened without O_TRUNC is copied up first.  Removals
 * of real files record a whiteout (this process only).  Reads see ROOT/abs
 * when it exists, ENOENT when whited out, else the real path.  This file
 * owns the whiteouts and the real files seen, decides where each call goes
 * (hvd_ovl_map_read, _map_write), and makes the view's own changes
 * (remove, mkdir, rename, copy; realpath of a name only the overlay has);
 * overlay_view_dir.c lists a real folder that also has overlay entries
 * merged.
 *
 * State: the folder, the whiteouts, the files seen and the open merged
 * listings are under `ovl_mu` (recursive: a removal made while mapping a
 * write takes it again); `ovl_dirty` is read without it, as a hint that
 * lookups are needed.  The lookups themselves are system calls on the two
 * paths, made through the real calls overlay.c handed in (ovl_L).  Calls
 * overlay_view_folder.c and the real calls; nothing else of the overlay. */
#define _GNU_SOURCE
#include "overlay_view.h"
#include "overlay_view_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../base/log.h"

/* ------------------------------------------------------------ state */
static char **wo;             /* whiteouts: absolute real paths this process removed */
static size_t nwo, capwo;

static char *seen[1024];      /* real files this process saw exist (stat/access), a ring */
static size_t nseen;

/* ------------------------------------------------------------ whiteouts, files seen (under ovl_mu) */
int ovl_whited(const char *a) {
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
  if (s) wo[nwo++] = s, ovl_dirty = 1;
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
  DIR *d = ovl_L->opendir(a);
  if (!d) return;
  struct dirent64 *e;
  char p[PATH_MAX];
  while ((e = ovl_L->readdir64(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
        snprintf(p, sizeof p, "%s/%s", strcmp(a, "/") ? a : "", e->d_name) < (int)sizeof p)
      add_wo(p);
  ovl_L->closedir(d);
}

int ovl_whiteouts_in(const char *a) {
  size_t n = strlen(a);
  for (size_t i = 0; i < nwo; i++)
    if (!strncmp(wo[i], a, n) && wo[i][n] == '/' && !strchr(wo[i] + n + 1, '/')) return 1;
  return 0;
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

/* ------------------------------------------------------------ making a path in the overlay (under ovl_mu) */
/* The folder holding `a` exists in this process's view. */
static int parent_exists(const char *a) {
  char p[PATH_MAX], ov[PATH_MAX];
  struct stat st;
  strcpy(p, a);
  char *s = strrchr(p, '/');
  if (!s || s == p) return 1;
  *s = 0;
  if (!ovl_path(p, ov) && ovl_lexists(ov, &st)) return S_ISDIR(st.st_mode);
  if (ovl_whited(p)) return 0;
  return ovl_fstatat(AT_FDCWD, p, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

static int copy_file(const char *src, const char *dst, mode_t mode) {
  static char buf[1 << 16]; /* under mu */
  int in = ovl_L->openat(AT_FDCWD, src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return -1;
  int out = ovl_L->openat(AT_FDCWD, dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 07777);
  int rc = out < 0 ? -1 : 0;
  while (!rc) {
    ssize_t n = ovl_L->read(in, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      rc = -1;
      break;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = ovl_L->write(out, buf + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        rc = -1;
        break;
      }
      off += w;
    }
  }
  int e = errno;
  ovl_L->close(in);
  if (out >= 0) ovl_L->close(out);
  errno = e;
  return rc;
}

/* ------------------------------------------------------------ mapping */
enum { MAPPED = HVD_OVL_MAPPED, PASS = HVD_OVL_PASS, FAIL = HVD_OVL_FAIL };

int hvd_ovl_map_read(int dirfd, const char *path, char *out, char *abs) {
  char a[PATH_MAX];
  struct stat st;
  if (abs) abs[0] = 0;
  if (!ovl_dirty || hvd_ovl_absolute(dirfd, path, a) || hvd_ovl_excluded_path(a)) return PASS;
  if (abs) strcpy(abs, a);
  int r = PASS;
  pthread_mutex_lock(&ovl_mu);
  if (!ovl_path(a, out) && ovl_lexists(out, &st)) r = MAPPED;
  else if (ovl_whited(a)) r = FAIL;
  else if (dirfd != AT_FDCWD && path[0] != '/') strcpy(out, a), r = MAPPED; /* dirfd may be an overlay folder */
  pthread_mutex_unlock(&ovl_mu);
  if (r == FAIL) errno = ENOENT;
  return r;
}

static int map_read(int dirfd, const char *path, char *out) { return hvd_ovl_map_read(dirfd, path, out, NULL); }

static int map_write_locked(const char *a, int flags, char *out) {
  struct stat st;
  if (hvd_ovl_root() && !ovl_path(a, out) && ovl_lexists(out, &st)) {
    if ((flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL)) return errno = EEXIST, FAIL;
    return MAPPED;
  }
  if (!ovl_whited(a) && ovl_fstatat(AT_FDCWD, a, &st, 0) == 0) {
    if (!S_ISREG(st.st_mode)) return PASS; /* folders, devices, FIFOs, sockets */
    if ((flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL)) return errno = EEXIST, FAIL;
    if (ovl_ensure_root() || ovl_path(a, out)) return FAIL;
    ovl_mkparents(out);
    if (!(flags & O_TRUNC) && copy_file(a, out, st.st_mode)) return FAIL;
    return MAPPED;
  }
  if (!(flags & O_CREAT)) return errno = ENOENT, FAIL;
  if (!parent_exists(a)) return errno = ENOENT, FAIL;
  if (ovl_ensure_root() || ovl_path(a, out)) return FAIL;
  ovl_mkparents(out);
  unwhite(a);
  return MAPPED;
}

int hvd_ovl_map_write(int dirfd, const char *path, int flags, const void *caller, char *out) {
  char a[PATH_MAX];
  if (hvd_ovl_absolute(dirfd, path, a) || hvd_ovl_excluded_path(a) || hvd_ovl_excluded_caller(caller)) return PASS;
  pthread_mutex_lock(&ovl_mu);
  int r = map_write_locked(a, flags, out);
  if (r == PASS && dirfd != AT_FDCWD && path[0] != '/') strcpy(out, a), r = MAPPED;
  pthread_mutex_unlock(&ovl_mu);
  return r;
}

void hvd_ovl_saw(const char *a) {
  pthread_mutex_lock(&ovl_mu);
  note_seen(a);
  pthread_mutex_unlock(&ovl_mu);
}

/* A read lease is granted only while no process has the file open for
 * writing (fcntl F_SETLEASE; the same owner, as the ranks are).  Where
 * leases are not kept (a network file system: EINVAL) it does not wait. */
void hvd_ovl_await_writer(int dirfd, const char *path, const void *caller) {
  struct statx sx; /* one system call for every read-open; the rest only for a file born since the start */
  if (!ovl_L->statx || ovl_L->statx(dirfd, path, 0, STATX_TYPE | STATX_BTIME | STATX_CTIME, &sx) != 0 ||
      !S_ISREG(sx.stx_mode) || !ovl_statx_born_since_start(&sx) || hvd_ovl_excluded_caller(caller))
    return;
  char a[PATH_MAX];
  if (hvd_ovl_absolute(dirfd, path, a) || hvd_ovl_excluded_path(a)) return; /* (/dev/shm: torch's workers' memory) */
  int fd = ovl_L->openat(dirfd, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  off_t size = -1;
  struct timespec mt = {0, 0}, nap = {0, 20000000};
  double idle = 0, waited = 0;
  int said = 0;
  while (syscall(SYS_fcntl, fd, F_SETLEASE, F_RDLCK) != 0 && (errno == EAGAIN || errno == EBUSY) && idle < HVD_OVL_IDLE_WRITER) {
    if (fstat(fd, &st) == 0 && (st.st_size != size || st.st_mtim.tv_sec != mt.tv_sec || st.st_mtim.tv_nsec != mt.tv_nsec))
      size = st.st_size, mt = st.st_mtim, idle = 0;
    if (waited >= 0.5 && !said) {
      said = 1;
      HVD_INFO("waiting to read %s: another process of the job (rank 0) is still writing it", path);
    }
    nanosleep(&nap, NULL);
    idle += 0.02, waited += 0.02;
  }
  syscall(SYS_fcntl, fd, F_SETLEASE, F_UNLCK); /* (the system call: the exported fcntl is the fd layer's) */
  ovl_L->close(fd);
}

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
  char *r = ovl_L->realpath(path, NULL);
  if (r || errno != ENOENT) return r;
  if (hvd_ovl_absolute(AT_FDCWD, path, a) || map_read(AT_FDCWD, a, m) != MAPPED) return errno = ENOENT, NULL;
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

char *hvd_ovl_realpath(const char *path) {
  if (!ovl_dirty) return errno = ENOENT, NULL; /* nothing in the view but real files */
  return view_realpath(path);
}

/* ------------------------------------------------------------ removing, making, moving */
int hvd_ovl_remove(const char *a, int flags) {
  char ov[PATH_MAX];
  struct stat so, sr;
  int rc = 0, err = 0;
  pthread_mutex_lock(&ovl_mu);
  int in_ov = !ovl_path(a, ov) && ovl_lexists(ov, &so);
  int in_real = !ovl_whited(a) && ovl_lexists(a, &sr);
  if (!in_ov && !in_real) {
    /* Seen here, or in a folder that has changed since this rank started:
     * removed by another process since (rank 0 rotating the same
     * checkpoints, clearing the same output folder first, faster than this
     * rank): removed for this rank too, as it would be for a rank alone.
     * Removed by this rank already, or in a folder no one has changed:
     * missing, as alone. */
    if (ovl_whited(a) || !(((flags & AT_REMOVEDIR) == 0 && was_seen(a)) || ovl_parent_changed_since_start(a)))
      rc = -1, err = ENOENT;
  } else if (in_ov) {
    if (ovl_L->unlinkat(AT_FDCWD, ov, flags) != 0) rc = -1, err = errno;
  } else if ((flags & AT_REMOVEDIR) && !S_ISDIR(sr.st_mode)) {
    rc = -1, err = ENOTDIR;
  } else if (!(flags & AT_REMOVEDIR) && S_ISDIR(sr.st_mode)) {
    rc = -1, err = EISDIR;
  }
  /* hidden from this process (rank 0's file stays), and so is whatever another
   * process makes at this path later (rank 0's temporary of the same save) */
  if (rc == 0) add_wo(a);
  pthread_mutex_unlock(&ovl_mu);
  if (rc) errno = err;
  return rc;
}

/* A real folder another process made since this rank started (rank 0,
 * past `if not os.path.exists(d): os.makedirs(d)` a moment before this
 * rank): this rank alone would make it, so it makes its own in the overlay.
 * One that was there before, or any other kind of file: EEXIST, as alone. */
int hvd_ovl_mkdir(const char *a, mode_t mode) {
  char ov[PATH_MAX];
  struct stat st;
  int rc = -1, err = 0;
  pthread_mutex_lock(&ovl_mu);
  if ((!ovl_path(a, ov) && ovl_lexists(ov, &st)) ||
      (!ovl_whited(a) && ovl_lexists(a, &st) && !(S_ISDIR(st.st_mode) && ovl_born_since_start(AT_FDCWD, a))))
    err = EEXIST;
  else if (!parent_exists(a)) err = ENOENT;
  else if (ovl_ensure_root() || ovl_path(a, ov)) err = errno;
  else {
    ovl_mkparents(ov);
    if (ovl_L->mkdirat(AT_FDCWD, ov, mode) == 0) rc = 0, unwhite(a);
    else err = errno;
  }
  pthread_mutex_unlock(&ovl_mu);
  if (rc) errno = err;
  return rc;
}

/* A real file is copied into the overlay as B and whited out (rank 0's
 * stays); a real folder cannot be moved this way (EXDEV, which shutil.move
 * handles by copying). */
int hvd_ovl_rename(const char *a, const char *b, unsigned fl) {
  char oa[PATH_MAX], ob[PATH_MAX];
  if (fl & ~(unsigned)RENAME_NOREPLACE) return errno = EINVAL, -1;
  struct stat sa, sb;
  int rc = -1, err = 0;
  pthread_mutex_lock(&ovl_mu);
  int in_ova = !ovl_path(a, oa) && ovl_lexists(oa, &sa);
  int in_reala = !ovl_whited(a) && (in_ova ? ovl_lexists(a, &sb) : ovl_lexists(a, &sa));
  int exists_b = (!ovl_path(b, ob) && ovl_lexists(ob, &sb)) || (!ovl_whited(b) && ovl_lexists(b, &sb));
  if (!in_ova && !in_reala) err = ENOENT;
  else if ((fl & RENAME_NOREPLACE) && exists_b) err = EEXIST;
  else if (!strcmp(a, b)) rc = 0;
  else if (!parent_exists(b)) err = ENOENT;
  else if (!in_ova && S_ISDIR(sa.st_mode)) err = EXDEV;
  else if (ovl_ensure_root() || ovl_path(a, oa) || ovl_path(b, ob)) err = errno;
  else {
    ovl_mkparents(ob);
    if (in_ova) {
      rc = ovl_L->renameat2(AT_FDCWD, oa, AT_FDCWD, ob, 0);
    } else if (S_ISLNK(sa.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = readlink(a, target, sizeof target - 1);
      if (n >= 0) target[n] = 0, ovl_L->unlinkat(AT_FDCWD, ob, 0), rc = ovl_L->symlinkat(target, AT_FDCWD, ob);
    } else {
      rc = copy_file(a, ob, sa.st_mode);
    }
    if (rc) err = errno;
    else {
      add_wo(a); /* as for a removal */
      unwhite(b);
    }
  }
  pthread_mutex_unlock(&ovl_mu);
  if (rc) errno = err;
  return rc;
}

int hvd_ovl_copy(const char *src, const char *dst) {
  struct stat st;
  if (ovl_fstatat(AT_FDCWD, src, &st, 0) != 0) return -1;
  pthread_mutex_lock(&ovl_mu);
  int rc = copy_file(src, dst, st.st_mode);
  pthread_mutex_unlock(&ovl_mu);
  return rc;
}
