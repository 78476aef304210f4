/* The overlay's path logic: this process's view of the file system (see
 * overlay_view.h for what it owns and overlay.h for what the overlay does).
 *
 * Writes go to ROOT/abs, where abs is the call's path made absolute (the
 * working directory, or the folder behind a dirfd) and normalized, and ROOT
 * a private temporary folder made on the first write (and removed by a
 * watcher process if the rank dies without exiting); an existing real file
 * opened without O_TRUNC is copied up first.  Removals of real files record
 * a whiteout (this process only).  Reads see ROOT/abs when it exists,
 * ENOENT when whited out, else the real path.  A real folder that also has
 * overlay entries is listed merged.
 *
 * State: the folder, the whiteouts, the files seen and the open merged
 * listings are under `mu` (recursive: a removal made while mapping a write
 * takes it again); `dirty` is read without it, as a hint that lookups are
 * needed.  The lookups themselves are system calls on the two paths, made
 * through the real calls overlay.c handed in (L). */
#define _GNU_SOURCE
#include "overlay_view.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../base/log.h"

/* ------------------------------------------------------------ state */
static const hvd_ovl_libc *L; /* the real calls */
static volatile int dirty;    /* a folder was made or a whiteout recorded: lookups needed */
static int my_rank;
static char root[PATH_MAX];   /* the overlay folder, "" until the first write */
static size_t rootlen;
static int watcher_fd = -1;   /* write end of the watcher's pipe */
static struct timespec t0;    /* when the view started */
static pthread_mutex_t mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static char **wo;             /* whiteouts: absolute real paths this process removed */
static size_t nwo, capwo;

static char *seen[1024];      /* real files this process saw exist (stat/access), a ring */
static size_t nseen;

void hvd_ovl_init(const hvd_ovl_libc *libc, int rank) {
  L = libc;
  my_rank = rank;
  clock_gettime(CLOCK_REALTIME, &t0);
}

const char *hvd_ovl_root(void) { return root[0] ? root : NULL; }

/* Before glibc 2.33 there is no fstatat symbol; the system call is the same. */
static int fstatat_(int dirfd, const char *path, struct stat *st, int flags) {
  if (L->fstatat) return L->fstatat(dirfd, path, st, flags);
  return (int)syscall(SYS_newfstatat, dirfd, path, st, flags);
}
static int lexists(const char *p, struct stat *st) { return fstatat_(AT_FDCWD, p, st, AT_SYMLINK_NOFOLLOW) == 0; }

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

static int under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return !strncmp(path, dir, n) && (path[n] == '/' || !path[n]);
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
  static const char *const libs[] = {"libmpi", "libopen-", "libpmix", "libprrte", "libprte", "libhwloc", "libuc",
                                     "libfabric", "libpsm", "libnccl", "libcuda", "libnvidia", "libibverbs",
                                     "librdmacm", "libevent", "libmunge", "libpmi"};
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
  DIR *d = L->opendir(a);
  if (!d) return;
  struct dirent64 *e;
  char p[PATH_MAX];
  while ((e = L->readdir64(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
        snprintf(p, sizeof p, "%s/%s", strcmp(a, "/") ? a : "", e->d_name) < (int)sizeof p)
      add_wo(p);
  L->closedir(d);
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
  else L->close(p[1]);
  L->close(p[0]);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
}

static int ensure_root(void) {
  if (root[0]) return 0;
  const char *t = getenv("TMPDIR");
  char tmpl[PATH_MAX], real[PATH_MAX];
  if (!t || !*t) t = "/tmp";
  if (snprintf(tmpl, sizeof tmpl, "%s/hvdshim-rank%d-%ld-XXXXXX", t, my_rank, (long)getpid()) >= (int)sizeof tmpl ||
      !mkdtemp(tmpl) || !L->realpath(tmpl, real) || strlen(real) >= sizeof root) {
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
    L->mkdirat(AT_FDCWD, p, 0777);
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
  int in = L->openat(AT_FDCWD, src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return -1;
  int out = L->openat(AT_FDCWD, dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 07777);
  int rc = out < 0 ? -1 : 0;
  while (!rc) {
    ssize_t n = L->read(in, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      rc = -1;
      break;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = L->write(out, buf + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        rc = -1;
        break;
      }
      off += w;
    }
  }
  int e = errno;
  L->close(in);
  if (out >= 0) L->close(out);
  errno = e;
  return rc;
}

/* ------------------------------------------------------------ mapping */
enum { MAPPED = HVD_OVL_MAPPED, PASS = HVD_OVL_PASS, FAIL = HVD_OVL_FAIL };

int hvd_ovl_map_read(int dirfd, const char *path, char *out, char *abs) {
  char a[PATH_MAX];
  struct stat st;
  if (abs) abs[0] = 0;
  if (!dirty || hvd_ovl_absolute(dirfd, path, a) || hvd_ovl_excluded_path(a)) return PASS;
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

static int map_read(int dirfd, const char *path, char *out) { return hvd_ovl_map_read(dirfd, path, out, NULL); }

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

int hvd_ovl_map_write(int dirfd, const char *path, int flags, const void *caller, char *out) {
  char a[PATH_MAX];
  if (hvd_ovl_absolute(dirfd, path, a) || hvd_ovl_excluded_path(a) || hvd_ovl_excluded_caller(caller)) return PASS;
  pthread_mutex_lock(&mu);
  int r = map_write_locked(a, flags, out);
  if (r == PASS && dirfd != AT_FDCWD && path[0] != '/') strcpy(out, a), r = MAPPED;
  pthread_mutex_unlock(&mu);
  return r;
}

void hvd_ovl_saw(const char *a) {
  pthread_mutex_lock(&mu);
  note_seen(a);
  pthread_mutex_unlock(&mu);
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
  char *r = L->realpath(path, NULL);
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
  if (!dirty) return errno = ENOENT, NULL; /* nothing in the view but real files */
  return view_realpath(path);
}

/* ------------------------------------------------------------ removing, making, moving */
int hvd_ovl_remove(const char *a, int flags) {
  char ov[PATH_MAX];
  struct stat so, sr;
  int rc = 0, err = 0;
  pthread_mutex_lock(&mu);
  int in_ov = !ovpath(a, ov) && lexists(ov, &so);
  int in_real = !whited(a) && lexists(a, &sr);
  if (!in_ov && !in_real) {
    if (whited(a) || !was_seen(a) || (flags & AT_REMOVEDIR)) rc = -1, err = ENOENT;
    /* else: seen here, since removed by another process: removed for this rank too */
  } else if (in_ov) {
    if (L->unlinkat(AT_FDCWD, ov, flags) != 0) rc = -1, err = errno;
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

int hvd_ovl_mkdir(const char *a, mode_t mode) {
  char ov[PATH_MAX];
  struct stat st;
  int rc = -1, err = 0;
  pthread_mutex_lock(&mu);
  if ((!ovpath(a, ov) && lexists(ov, &st)) || (!whited(a) && lexists(a, &st))) err = EEXIST;
  else if (!parent_exists(a)) err = ENOENT;
  else if (ensure_root() || ovpath(a, ov)) err = errno;
  else {
    mkparents(ov);
    if (L->mkdirat(AT_FDCWD, ov, mode) == 0) rc = 0, unwhite(a);
    else err = errno;
  }
  pthread_mutex_unlock(&mu);
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
      rc = L->renameat2(AT_FDCWD, oa, AT_FDCWD, ob, 0);
    } else if (S_ISLNK(sa.st_mode)) {
      char target[PATH_MAX];
      ssize_t n = readlink(a, target, sizeof target - 1);
      if (n >= 0) target[n] = 0, L->unlinkat(AT_FDCWD, ob, 0), rc = L->symlinkat(target, AT_FDCWD, ob);
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

int hvd_ovl_copy(const char *src, const char *dst) {
  struct stat st;
  if (fstatat_(AT_FDCWD, src, &st, 0) != 0) return -1;
  pthread_mutex_lock(&mu);
  int rc = copy_file(src, dst, st.st_mode);
  pthread_mutex_unlock(&mu);
  return rc;
}

/* ------------------------------------------------------------ merged folder listings (under mu) */
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

static merged_dir *find_dir(DIR *d) {
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

DIR *hvd_ovl_opendir(const char *p) {
  char a[PATH_MAX], ov[PATH_MAX];
  if (!dirty || hvd_ovl_absolute(AT_FDCWD, p, a) || hvd_ovl_excluded_path(a)) return L->opendir(p);
  struct stat so, sr;
  DIR *res = NULL;
  pthread_mutex_lock(&mu);
  int in_ov = !ovpath(a, ov) && lexists(ov, &so);
  int real_dir = !whited(a) && fstatat_(AT_FDCWD, a, &sr, 0) == 0 && S_ISDIR(sr.st_mode);
  merged_dir *m = NULL;
  if (whited(a) && !in_ov) errno = ENOENT;
  else if (in_ov && !real_dir) res = L->opendir(ov);
  else if (!(in_ov && S_ISDIR(so.st_mode)) && !has_whiteouts_in(a)) res = L->opendir(p);
  else if (n_open_dirs == cap_open_dirs &&
           !(open_dirs = realloc(open_dirs, (cap_open_dirs = cap_open_dirs ? 2 * cap_open_dirs : 8) * sizeof m)))
    errno = ENOMEM, n_open_dirs = cap_open_dirs = 0;
  else if (!(m = calloc(1, sizeof *m))) errno = ENOMEM;
  else if (!(m->real = L->opendir(a))) free(m), m = NULL;
  else {
    m->over = in_ov ? L->opendir(ov) : NULL;
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
  if (!L->statx || L->statx(L->dirfd(real), name, AT_SYMLINK_NOFOLLOW, STATX_BTIME | STATX_CTIME, &sx) != 0) return 0;
  struct statx_timestamp t = (sx.stx_mask & STATX_BTIME) ? sx.stx_btime : sx.stx_ctime;
  return t.tv_sec > t0.tv_sec || (t.tv_sec == t0.tv_sec && (long)t.tv_nsec > t0.tv_nsec);
}

static struct dirent64 *merged_next(merged_dir *m) {
  struct dirent64 *e;
  char p[PATH_MAX];
  if (m->phase == 0) {
    while (m->over && (e = L->readdir64(m->over))) {
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
  while ((e = L->readdir64(m->real))) {
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

/* Each of these reads n_open_dirs first without the lock: while no merged
 * listing is open (every process but an overlay rank's), nothing else. */
int hvd_ovl_readdir(DIR *d, struct dirent64 **e) {
  if (!n_open_dirs) return 0;
  pthread_mutex_lock(&mu);
  merged_dir *m = find_dir(d);
  if (m) *e = merged_next(m);
  pthread_mutex_unlock(&mu);
  return m != NULL;
}

int hvd_ovl_closedir(DIR *d) {
  if (!n_open_dirs) return 0;
  pthread_mutex_lock(&mu);
  merged_dir *m = find_dir(d);
  if (m)
    for (size_t i = 0; i < n_open_dirs; i++)
      if (open_dirs[i] == m) open_dirs[i] = open_dirs[--n_open_dirs];
  pthread_mutex_unlock(&mu);
  if (!m) return 0;
  if (m->over) L->closedir(m->over);
  L->closedir(m->real);
  for (size_t i = 0; i < m->n; i++) free(m->names[i]);
  free(m->names);
  free(m);
  return 1;
}

int hvd_ovl_rewinddir(DIR *d) {
  if (!n_open_dirs) return 0;
  pthread_mutex_lock(&mu);
  merged_dir *m = find_dir(d);
  if (m) {
    if (m->over) L->rewinddir(m->over);
    L->rewinddir(m->real);
    for (size_t i = 0; i < m->n; i++) free(m->names[i]);
    m->n = 0, m->phase = 0;
  }
  pthread_mutex_unlock(&mu);
  return m != NULL;
}

int hvd_ovl_dirfd(DIR *d, int *fd) {
  if (!n_open_dirs) return 0;
  pthread_mutex_lock(&mu);
  merged_dir *m = find_dir(d);
  if (m) *fd = L->dirfd(m->real); /* the real folder; the overlay is reached through the path */
  pthread_mutex_unlock(&mu);
  return m != NULL;
}

int hvd_ovl_merged(DIR *d) {
  if (!n_open_dirs) return 0;
  pthread_mutex_lock(&mu);
  merged_dir *m = find_dir(d);
  pthread_mutex_unlock(&mu);
  return m != NULL;
}

/* ------------------------------------------------------------ the folder's end */
static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)f;
  L->unlinkat(AT_FDCWD, p, flag == FTW_DP ? AT_REMOVEDIR : 0);
  return 0;
}

void hvd_ovl_drop(void) {
  pthread_mutex_lock(&mu);
  if (root[0]) nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  root[0] = 0, rootlen = 0; /* a write after this makes a new folder (and watcher) */
  if (watcher_fd >= 0) L->close(watcher_fd), watcher_fd = -1;
  pthread_mutex_unlock(&mu);
}
