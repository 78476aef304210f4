/* Rank-private file writes: the overlay's switch and its API (overlay.h says
 * what the overlay does).  This file resolves the real libc functions once
 * (dlsym RTLD_NEXT) into `overlay_real`, the table the interposed calls and
 * the view's and the bytes layer's own calls go through, and holds the
 * switch, `overlay_on`: hvd_overlay_arm turns it on in a rank > 0 (it
 * starts the view, overlay_view*.c, and the bytes layer, overlay_bytes*.c);
 * turning it off (hvd_overlay_off), a promotion to rank 0
 * (hvd_overlay_promote, hvd_overlay_resume: the files open in the overlay
 * reopened at their real paths) and the cleanup at exit end it.  It also
 * answers for code that writes with raw system calls
 * (hvd_overlay_write_path, _written).  The interposed calls themselves are
 * in overlay_path.c (the calls that name a path) and overlay_fd.c (the fd
 * calls); this file calls neither: its own calls go through the real table
 * (overlay_internal.h has the order). */
#define _GNU_SOURCE
#include "overlay.h"
#include "overlay_bytes.h"
#include "overlay_internal.h"
#include "overlay_view.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "../base/config.h"
#include "../base/log.h"

/* ------------------------------------------------------------ real calls */
hvd_ovl_libc overlay_real;
overlay_fdcalls overlay_fdc;
pthread_once_t overlay_resolved = PTHREAD_ONCE_INIT;

static void *next_fn(const char *name) { return dlsym(RTLD_NEXT, name); }

void overlay_resolve(void) {
#define GET(var, name) *(void **)&var = next_fn(name)
  GET(overlay_real.openat, "openat64");
  GET(overlay_real.fopen, "fopen64");
  GET(overlay_real.freopen, "freopen64");
  GET(overlay_real.fstatat, "fstatat64");
  GET(overlay_real.statx, "statx");
  GET(overlay_real.faccessat, "faccessat");
  GET(overlay_real.renameat2, "renameat2");
  GET(overlay_real.unlinkat, "unlinkat");
  GET(overlay_real.mkdirat, "mkdirat");
  GET(overlay_real.linkat, "linkat");
  GET(overlay_real.symlinkat, "symlinkat");
  GET(overlay_real.fchmodat, "fchmodat");
  GET(overlay_real.truncate, "truncate64");
  GET(overlay_real.utimensat, "utimensat");
  GET(overlay_real.opendir, "opendir");
  GET(overlay_real.readdir64, "readdir64");
  GET(overlay_real.closedir, "closedir");
  GET(overlay_real.rewinddir, "rewinddir");
  GET(overlay_real.dirfd, "dirfd");
  GET(overlay_real.telldir, "telldir");
  GET(overlay_real.seekdir, "seekdir");
  GET(overlay_real.bind, "bind");
  GET(overlay_real.connect, "connect");
  GET(overlay_real.realpath, "realpath");
  GET(overlay_real.read, "read");
  GET(overlay_real.write, "write");
  GET(overlay_real.pread, "pread64");
  GET(overlay_real.pwrite, "pwrite64");
  GET(overlay_real.close, "close");
  GET(overlay_real.fallocate, "fallocate64");
  GET(overlay_real.ftruncate, "ftruncate64");
  GET(overlay_fdc.readv, "readv");
  GET(overlay_fdc.writev, "writev");
  GET(overlay_fdc.preadv, "preadv64");
  GET(overlay_fdc.pwritev, "pwritev64");
  GET(overlay_fdc.preadv2, "preadv64v2");
  GET(overlay_fdc.pwritev2, "pwritev64v2");
  GET(overlay_fdc.read_chk, "__read_chk");
  GET(overlay_fdc.pread_chk, "__pread64_chk");
  GET(overlay_fdc.sendfile, "sendfile64");
  GET(overlay_fdc.copy_file_range, "copy_file_range");
  GET(overlay_fdc.mmap, "mmap64");
  GET(overlay_fdc.posix_fallocate, "posix_fallocate64");
  GET(overlay_fdc.dup, "dup");
  GET(overlay_fdc.dup2, "dup2");
  GET(overlay_fdc.dup3, "dup3");
  GET(overlay_fdc.fcntl, "fcntl");
  GET(overlay_fdc.fclose, "fclose");
#undef GET
}
/* Resolved before main: the fd calls (write in a signal handler) need no
 * first-call work after this. */
__attribute__((constructor)) static void resolve_early(void) { overlay_ready(); }

/* ------------------------------------------------------------ state */
volatile int overlay_on;
pid_t overlay_owner;

const char *hvd_overlay_root(void) { return hvd_ovl_root(); }

void hvd_overlay_written(const char *path) {
  overlay_ready();
  char m[PATH_MAX];
  const char *abs;
  if (overlay_on && hvd_ovl_nonempty(path) && map_read(AT_FDCWD, path, m) == MAPPED && (abs = copy_of(m))) {
    hvd_ovb_note(abs, m);
    overlay_saved_written(abs);
  }
}

int hvd_overlay_write_path(const char *path, char *out, size_t len) {
  overlay_ready();
  char m[PATH_MAX];
  if (!overlay_on || !hvd_ovl_nonempty(path)) return 0;
  int r = hvd_ovl_map_write(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, NULL, m);
  if (r == PASS) return 0;
  if (r == FAIL) return -1;
  if (strlen(m) >= len) return errno = ENAMETOOLONG, -1;
  strcpy(out, m);
  return 1;
}

/* ------------------------------------------------------------ arming, cleanup */
void hvd_overlay_cleanup(void) {
  if (!overlay_on || getpid() != overlay_owner || !hvd_ovl_root()) return;
  overlay_ready();
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

static void cleanup_at_exit(void) {
  overlay_ready(); /* (made rank 0 and nothing written since: the files are its first) */
  hvd_overlay_cleanup();
}

/* The script distributes itself (torch.distributed, Horovod): its ranks
 * coordinate through files (a FileStore rendezvous) and choose what each
 * writes, so from here on every write is real. */
void hvd_overlay_off(void) {
  if (!overlay_on) return;
  hvd_overlay_cleanup();
  overlay_on = 0;
  HVD_DEBUG("rank-private files off: the script distributes itself");
}

/* ------------------------------------------------------------ saves held */
#define HOLD_MAX 16
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static char *held[HOLD_MAX];  /* real paths a rank > 0 is saving privately (hvd_overlay_hold) */
#define SAVED_MAX 64
static char *saved[SAVED_MAX]; /* files written whole since the job's last step (saves), oldest first */
static int promoted;          /* this process took over the files (promote) */

static void note_saved(char *path);
static void saved_moved(const char *gone, const char *a, const char *b);

/* path is the one held, or (in_folder) directly in a folder held (an entry
 * ending in '/': a raw writer's temporary beside its file) (under hold_mu). */
static int held_now(const char *path, int in_folder) {
  for (int i = 0; i < HOLD_MAX; i++) {
    size_t n = held[i] ? strlen(held[i]) : 0;
    if (n && (!strcmp(held[i], path) ||
              (in_folder && held[i][n - 1] == '/' && !strncmp(held[i], path, n) && !strchr(path + n, '/'))))
      return 1;
  }
  return 0;
}

/* An open file the promotion leaves on its private copy. */
static int is_held(const char *path) {
  pthread_mutex_lock(&hold_mu);
  int found = held_now(path, 1);
  pthread_mutex_unlock(&hold_mu);
  return found;
}

int hvd_overlay_hold(const char *path, int on) {
  overlay_ready(); /* (a takeover due in this thread happens first) */
  if (!path) return -1;
  pthread_mutex_lock(&hold_mu);
  int r = -1;
  if (on == 1 && __atomic_load_n(&promoted, __ATOMIC_ACQUIRE)) {
    r = 1;
  } else if (on == 1 && overlay_on && getpid() == overlay_owner) {
    for (int i = 0; i < HOLD_MAX && r < 0; i++)
      if (!held[i] && (held[i] = strdup(path))) r = 0;
  } else if (on == 0 || on == 2) {
    r = 0;
    for (int i = 0; i < HOLD_MAX; i++)
      if (held[i] && !strcmp(held[i], path)) {
        r = __atomic_load_n(&promoted, __ATOMIC_ACQUIRE);
        size_t n = strlen(held[i]);
        if (on == 0 && held[i][n - 1] != '/') saved_moved(NULL, held[i], NULL); /* (a save that failed: its part) */
        free(held[i]), held[i] = NULL;
        break;
      }
  }
  pthread_mutex_unlock(&hold_mu);
  return r;
}

void hvd_overlay_saves_settled(void) {
  pthread_mutex_lock(&hold_mu);
  for (int i = 0; i < SAVED_MAX; i++) free(saved[i]), saved[i] = NULL;
  pthread_mutex_unlock(&hold_mu);
}

/* path (allocated) is a save finished: the newest of the list, once (under hold_mu). */
static void note_saved(char *path) {
  int at = 0;
  while (at < SAVED_MAX && saved[at] && strcmp(saved[at], path)) at++;
  if (at == SAVED_MAX) at = 0; /* full: the oldest goes */
  free(saved[at]);
  for (; at + 1 < SAVED_MAX && saved[at + 1]; at++) saved[at] = saved[at + 1];
  saved[at] = path;
}

void overlay_saved_written(const char *path) {
  char *p = strdup(path);
  if (!p) return;
  pthread_mutex_lock(&hold_mu);
  note_saved(p);
  pthread_mutex_unlock(&hold_mu);
}

/* path is `top` or under it */
static size_t under(const char *path, const char *top) {
  size_t n = strlen(top);
  return !strncmp(path, top, n) && (!path[n] || path[n] == '/') ? n : 0;
}

/* The saves under `gone` are forgotten; those under `a` are under `b` now
 * (b NULL: forgotten too); the list is packed, oldest first (under hold_mu). */
static void saved_moved(const char *gone, const char *a, const char *b) {
  for (int i = 0; i < SAVED_MAX; i++)
    if (saved[i] && gone && under(saved[i], gone)) free(saved[i]), saved[i] = NULL;
  for (int i = 0; i < SAVED_MAX; i++) {
    size_t n = saved[i] ? under(saved[i], a) : 0;
    char p[PATH_MAX];
    if (!n) continue;
    char *moved = b && snprintf(p, sizeof p, "%s%s", b, saved[i] + n) < (int)sizeof p ? strdup(p) : NULL;
    free(saved[i]), saved[i] = moved;
  }
  for (int i = 0, j = 0; i < SAVED_MAX; i++)
    if (saved[i]) {
      char *p = saved[i];
      saved[i] = NULL, saved[j++] = p;
    }
}

void overlay_saved_renamed(const char *a, const char *b) {
  pthread_mutex_lock(&hold_mu);
  saved_moved(b, a, b);
  pthread_mutex_unlock(&hold_mu);
}

void overlay_saved_removed(const char *a) {
  pthread_mutex_lock(&hold_mu);
  saved_moved(NULL, a, NULL);
  pthread_mutex_unlock(&hold_mu);
}

/* A copy of src's bytes at dst (created, mode), through the real calls. */
static int copy_file(const char *src, const char *dst, mode_t mode) {
  int in = overlay_real.openat(AT_FDCWD, src, O_RDONLY | O_CLOEXEC);
  int out = in < 0 ? -1 : overlay_real.openat(AT_FDCWD, dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  char buf[1 << 16];
  ssize_t n = 0;
  while (out >= 0 && (n = overlay_real.read(in, buf, sizeof buf)) > 0)
    for (ssize_t w, at = 0; at < n; at += w)
      if ((w = overlay_real.write(out, buf + at, (size_t)(n - at))) <= 0) {
        n = -1;
        goto done;
      }
done:;
  int err = n < 0 || out < 0 ? errno : 0;
  if (out >= 0 && overlay_real.close(out) != 0 && !err) err = errno;
  if (in >= 0) overlay_real.close(in);
  if (err && out >= 0) overlay_real.unlinkat(AT_FDCWD, dst, 0);
  return err ? (errno = err, -1) : 0;
}

/* The folder `dir` and those above it, where missing (a folder the script
 * made for a checkpoint after rank 0 died: HuggingFace's checkpoint-N). */
static int make_parents(const char *dir) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s", dir);
  for (char *c = p + 1;; c++) {
    if (*c && *c != '/') continue;
    char was = *c;
    *c = 0;
    if (overlay_real.mkdirat(AT_FDCWD, p, 0777) != 0 && errno != EEXIST) return -1;
    if (!(*c = was)) return 0;
  }
}

/* At a takeover: a file this rank wrote whole (a save) and closed after the
 * job's last step goes to the real path, as rank 0's own would have.  The
 * rank 0 that died had, at most, written the same (the ranks are replicas
 * at the same point of the script): it died before it, inside it (for a
 * torch.save, the adapter's backup or mark beside the path, checkpoints.py,
 * which its watcher puts back: the file before that save), or after it
 * (the same bytes).  The backup is moved aside first, so a watcher that comes later
 * finds nothing to put back; the copy is written beside the path and
 * renamed over it.  Not where the copy lacks bytes (freed as rank 0's,
 * past HVDSHIM_PRIVATE_BYTES: rank 0 had written them, so it finished
 * that file) or the path is not a plain file of one link. */
static void install_saved(const char *root, const char *path) {
  char ov[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX], bak[PATH_MAX], aside[PATH_MAX];
  const char *name = strrchr(path, '/');
  struct stat vs, st;
  if (!name || !name[1] || snprintf(ov, sizeof ov, "%s%s", root, path) >= (int)sizeof ov ||
      snprintf(dir, sizeof dir, "%.*s/.hvdshim-saving", (int)(name - path), path) >= (int)sizeof dir ||
      snprintf(tmp, sizeof tmp, "%s%s.taking", dir, name) >= (int)sizeof tmp ||
      snprintf(aside, sizeof aside, "%s%s.replaced", dir, name) >= (int)sizeof aside)
    return;
  snprintf(bak, sizeof bak, "%s%s", dir, name);
  if (overlay_real.fstatat(AT_FDCWD, ov, &vs, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(vs.st_mode))
    return; /* renamed or removed since: not this save's file */
  if (!hvd_ovb_holds_all(ov)) {
    HVD_DEBUG("taking over '%s': this rank's copy of it lacks bytes rank 0's file held; the file stays as it is", path);
    return;
  }
  int real = overlay_real.fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (real && (!S_ISREG(st.st_mode) || st.st_nlink != 1)) return;
  mode_t mode = real ? st.st_mode : vs.st_mode;
  if (overlay_real.fstatat(AT_FDCWD, bak, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) mode = st.st_mode;
  if (make_parents(dir) != 0 || copy_file(ov, tmp, mode & 07777) != 0) {
    HVD_WARN("taking over '%s': this rank's copy of it, written whole since the job's last step, could not be "
             "written there (%s); the path keeps the file before", path, strerror(errno));
    overlay_real.unlinkat(AT_FDCWD, dir, AT_REMOVEDIR);
    return;
  }
  int had = overlay_real.renameat2(AT_FDCWD, bak, AT_FDCWD, aside, 0) == 0;
  snprintf(bak + strlen(bak), sizeof bak - strlen(bak), ".new");
  overlay_real.unlinkat(AT_FDCWD, bak, 0);
  if (overlay_real.renameat2(AT_FDCWD, tmp, AT_FDCWD, path, 0) != 0) {
    HVD_WARN("taking over '%s': %s; the path keeps the file before", path, strerror(errno));
    overlay_real.unlinkat(AT_FDCWD, tmp, 0);
    if (had) overlay_real.renameat2(AT_FDCWD, aside, AT_FDCWD, path, 0);
  } else {
    if (had) overlay_real.unlinkat(AT_FDCWD, aside, 0);
    HVD_INFO("taking over '%s': this rank's copy of it, written whole since the job's last step, is there now (the rank "
             "0 that died %s)", path, had ? "was in the middle of its own save" : "had not finished it, or wrote the same");
  }
  overlay_real.unlinkat(AT_FDCWD, dir, AT_REMOVEDIR);
}

static void promote(int at_end) {
  if (!overlay_on) return;
  __atomic_store_n(&promoted, 1, __ATOMIC_RELEASE);
  overlay_ready();
  const char *r = hvd_ovl_root();
  size_t rl = r ? strlen(r) : 0;
  int moved = 0, lost = 0, kept = 0;
  DIR *d = r ? overlay_real.opendir("/proc/self/fd") : NULL;
  for (struct dirent64 *de; d && (de = overlay_real.readdir64(d));) {
    int fd = atoi(de->d_name);
    char link[64], target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0 || (size_t)n <= rl || fd == overlay_real.dirfd(d)) continue;
    target[n] = 0;
    if (strncmp(target, r, rl) || target[rl] != '/') continue;
    int flags = overlay_fdc.fcntl(fd, F_GETFL);
    struct stat st;
    if (flags < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    overlay_saved_removed(target + rl); /* (still open: not put in place whole below) */
    if (is_held(target + rl)) { /* a save the adapter makes again, for real (hvd_overlay_hold) */
      kept++;
      continue;
    }
    off_t pos = lseek(fd, 0, SEEK_CUR);
    /* the same file where the first rank 0 wrote it: at the same position, or at its end when appending (at_end:
     * at its end, where the job before the restart left it) */
    int nfd = overlay_real.openat(AT_FDCWD, target + rl, (flags & ~(O_CREAT | O_EXCL | O_TRUNC)) | O_CREAT,
                                  st.st_mode & 07777);
    if (nfd >= 0 && at_end && !(flags & O_APPEND)) pos = lseek(nfd, 0, SEEK_END), flags |= O_APPEND;
    /* (the real dup2: the bytes layer's tracking of fd ends with the cleanup below) */
    if (nfd < 0 || (!(flags & O_APPEND) && pos >= 0 && lseek(nfd, pos, SEEK_SET) < 0) ||
        overlay_fdc.dup2(nfd, fd) < 0) {
      HVD_WARN("taking over '%s' from the rank 0 %s: %s; this rank's writes to it are lost", target + rl,
               at_end ? "before the restart" : "that died", strerror(errno));
      lost++;
    } else {
      moved++;
    }
    if (nfd >= 0 && nfd != fd) overlay_real.close(nfd);
  }
  if (d) overlay_real.closedir(d);
  pthread_mutex_lock(&hold_mu);
  for (int i = 0; i < SAVED_MAX; i++) {
    /* (not a save still being made: made again by the adapter, hvd_overlay_hold; the other files finished in a
     * folder held for a raw writer's temporary are put in place) */
    if (saved[i] && r && !at_end && !held_now(saved[i], 0)) install_saved(r, saved[i]);
    free(saved[i]), saved[i] = NULL;
  }
  pthread_mutex_unlock(&hold_mu);
  hvd_overlay_cleanup();
  overlay_on = 0;
  HVD_DEBUG("rank-private files off: this rank is rank 0 now (%d open file(s) moved to their real paths, %d lost, %d "
            "left to a save made again)", moved, lost, kept);
}

void hvd_overlay_promote(void) { promote(0); }
void hvd_overlay_resume(void) { promote(1); }

/* ------------------------------------------------------------ the console */
static pthread_mutex_t console_mu = PTHREAD_MUTEX_INITIALIZER;
static int console_fd = -1; /* the real stdout a silenced rank keeps aside */
static pid_t console_pid;   /* the process that did */

void hvd_overlay_console(int saved_fd) {
  pthread_mutex_lock(&console_mu);
  console_fd = saved_fd, console_pid = getpid();
  pthread_mutex_unlock(&console_mu);
}

int hvd_overlay_console_back(void) {
  overlay_ready();
  pthread_mutex_lock(&console_mu);
  int fd = console_fd, rc = 0;
  if (fd >= 0 && console_pid == getpid()) {
    console_fd = -1;
    rc = overlay_fdc.dup2(fd, 1) < 0 ? -1 : 0;
    overlay_real.close(fd);
  }
  pthread_mutex_unlock(&console_mu);
  return rc;
}

/* The engine rebuilt the job without its rank 0 and made this process rank
 * 0 (base/role.h), maybe while the script runs no collective any more (an
 * evaluation, a checkpoint, its end), where the adapter would take the
 * change in: from the first call the overlay sees in the rank's main thread
 * (where the script runs; not the engine's threads, nor a loader's worker
 * process) or at its exit, the files and the console are its, as the
 * adapter's own takeover makes them (elastic.py). */
void overlay_take_over(void) {
  static int taken;
  pid_t me = getpid();
  if ((me != overlay_owner && me != console_pid) || (pid_t)syscall(SYS_gettid) != me) return;
  if (__atomic_exchange_n(&taken, 1, __ATOMIC_ACQ_REL)) return;
  promote(0);
  if (hvd_overlay_console_back() != 0) HVD_WARN("could not take over the console: %s", strerror(errno));
  HVD_INFO("this rank is rank 0 now (the first one died): the console and the files are its from here on");
}

/* The waits for rank 0's files (the bytes layer) end once this process is rank 0: the one they waited for died. */
static int rank0_gone(void) { return hvd_role_is_new_rank0(); }

void hvd_overlay_arm(int rank, int resuming) {
  if ((rank <= 0 && !resuming) || overlay_on) return;
  const char *v = hvd_cfg_str(HVD_CFG_SAVE_RANKS);
  if (v && !strcmp(v, "all")) return;
  overlay_ready();
  overlay_owner = getpid();
  hvd_ovl_init(&overlay_real, rank);
  hvd_ovb_init(&overlay_real, (long long)hvd_cfg_int(HVD_CFG_PRIVATE_BYTES), 1.0);
  hvd_ovb_set_gone(rank0_gone);
  atexit(cleanup_at_exit);
  overlay_on = 1;
}
