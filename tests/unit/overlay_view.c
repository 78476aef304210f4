/* Unit tests of the overlay's path logic (hooks/overlay_view*.c) and of its
 * bytes (hooks/overlay_bytes*.c), with no preload and no interposed table:
 * this program links them alone and hands them libc's own functions, as
 * hooks/overlay.c hands them the real ones.  A fixture folder of real files
 * is made first; the view then runs as rank 3 with its overlay folder
 * under a private TMPDIR.  The bytes tests write "rank 0's" files in the
 * fixture (or from a thread, for a rank 0 behind) and the rank's copies
 * through the calls overlay_fd.c makes around a tracked write (begin, the
 * write, end). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../hooks/overlay_bytes.h"
#include "../../hooks/overlay_view.h"
#include "check.h"

static const hvd_ovl_libc libc_calls = {
    .openat = openat,
    .fopen = fopen,
    .freopen = freopen,
    .fstatat = fstatat,
    .statx = (int (*)(int, const char *, int, unsigned, void *))statx,
    .faccessat = faccessat,
    .renameat2 = renameat2,
    .unlinkat = unlinkat,
    .mkdirat = mkdirat,
    .linkat = linkat,
    .symlinkat = symlinkat,
    .fchmodat = fchmodat,
    .truncate = truncate,
    .utimensat = utimensat,
    .opendir = opendir,
    .readdir64 = readdir64,
    .closedir = closedir,
    .rewinddir = rewinddir,
    .dirfd = dirfd,
    .telldir = telldir,
    .seekdir = seekdir,
    .bind = bind,
    .connect = connect,
    .realpath = realpath,
    .read = read,
    .write = write,
    .pread = pread,
    .pwrite = pwrite,
    .close = close,
    .fallocate = fallocate,
    .ftruncate = ftruncate,
};

static char base[1024];     /* the test's own folder (canonical) */
static char real_dir[1100]; /* base/real: the fixture of real files */
static char tmp_dir[1100];  /* base/tmp: TMPDIR, where the overlay folder goes */

static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static const char *get(const char *path) {
  static char buf[256];
  buf[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return "(missing)";
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

static const char *in_real(const char *name) {
  static char p[4][PATH_MAX];
  static int k;
  char *s = p[k++ % 4];
  snprintf(s, PATH_MAX, "%s/%s", real_dir, name);
  return s;
}

static int exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* ---------------------------------------------------------------- tests */

static void test_absolute(void) {
  char out[PATH_MAX], want[PATH_MAX + 16];
  CHECK_INT(hvd_ovl_absolute(AT_FDCWD, "/a/./b//../c/", out), 0);
  CHECK_STR(out, "/a/c");
  CHECK_INT(hvd_ovl_absolute(AT_FDCWD, "/..", out), 0);
  CHECK_STR(out, "/");
  CHECK_INT(hvd_ovl_absolute(AT_FDCWD, "", out), -1);
  CHECK_INT(hvd_ovl_absolute(AT_FDCWD, NULL, out), -1);
  /* relative: the working directory, or the folder behind a dirfd */
  char cwd[PATH_MAX];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK_INT(chdir(real_dir), 0);
  CHECK_INT(hvd_ovl_absolute(AT_FDCWD, "x/../y", out), 0);
  snprintf(want, sizeof want, "%s/y", real_dir);
  CHECK_STR(out, want);
  CHECK_INT(chdir(cwd), 0);
  int d = open(base, O_RDONLY | O_DIRECTORY);
  CHECK_INT(hvd_ovl_absolute(d, "real/./z", out), 0);
  snprintf(want, sizeof want, "%s/z", real_dir);
  CHECK_STR(out, want);
  close(d);
}

static void test_excluded(void) {
  CHECK_INT(hvd_ovl_excluded_path("/dev/null"), 1);
  CHECK_INT(hvd_ovl_excluded_path("/proc"), 1);
  CHECK_INT(hvd_ovl_excluded_path("/sys/kernel"), 1);
  CHECK_INT(hvd_ovl_excluded_path("/run/user/0/x"), 1);
  CHECK_INT(hvd_ovl_excluded_path("/tmp/pymp-abc123/listener"), 1);
  CHECK_INT(hvd_ovl_excluded_path("/devices/x"), 0);
  CHECK_INT(hvd_ovl_excluded_path("/tmp/model.pt"), 0);
  CHECK_INT(hvd_ovl_excluded_caller(NULL), 0);
}

/* Nothing written yet: every read is the real path, and there is no folder. */
static void test_clean_view(void) {
  char out[PATH_MAX], abs[PATH_MAX];
  CHECK(hvd_ovl_root() == NULL);
  CHECK_INT(hvd_ovl_map_read(AT_FDCWD, in_real("keep.txt"), out, abs), HVD_OVL_PASS);
  CHECK_STR(abs, ""); /* no lookup made: nothing is in the view yet */
  errno = 0;
  CHECK(hvd_ovl_realpath(in_real("nothing")) == NULL);
  CHECK_INT(errno, ENOENT);
}

static void test_writes(void) {
  char out[PATH_MAX], want[2 * PATH_MAX];
  /* a new file: its overlay path, under a folder made on this first write */
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("new.txt"), O_WRONLY | O_CREAT | O_TRUNC, NULL, out),
            HVD_OVL_MAPPED);
  const char *root = hvd_ovl_root();
  CHECK(root != NULL);
  if (!root) return;
  char prefix[sizeof tmp_dir + 64];
  snprintf(prefix, sizeof prefix, "%s/hvdshim-rank3-%ld-", tmp_dir, (long)getpid());
  CHECK(!strncmp(root, prefix, strlen(prefix)));
  snprintf(want, sizeof want, "%s%s", root, in_real("new.txt"));
  CHECK_STR(out, want);
  put(out, "mine");
  CHECK(!exists(in_real("new.txt"))); /* the real folder is untouched */
  /* an existing real file opened without O_TRUNC is copied up first */
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("keep.txt"), O_WRONLY, NULL, out), HVD_OVL_MAPPED);
  CHECK_STR(get(out), "real keep");
  /* ... and with O_TRUNC it is not */
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("trunc.txt"), O_WRONLY | O_TRUNC, NULL, out), HVD_OVL_MAPPED);
  CHECK(!exists(out));
  /* O_EXCL of a file that exists, in the overlay or really */
  errno = 0;
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("new.txt"), O_WRONLY | O_CREAT | O_EXCL, NULL, out), HVD_OVL_FAIL);
  CHECK_INT(errno, EEXIST);
  errno = 0;
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("gone.txt"), O_WRONLY | O_CREAT | O_EXCL, NULL, out), HVD_OVL_FAIL);
  CHECK_INT(errno, EEXIST);
  /* no such folder, no O_CREAT, not a regular file, excluded */
  errno = 0;
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("nodir/x"), O_WRONLY | O_CREAT, NULL, out), HVD_OVL_FAIL);
  CHECK_INT(errno, ENOENT);
  errno = 0;
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("absent"), O_WRONLY, NULL, out), HVD_OVL_FAIL);
  CHECK_INT(errno, ENOENT);
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("dir"), O_WRONLY, NULL, out), HVD_OVL_PASS); /* a real folder */
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, "/dev/null", O_WRONLY, NULL, out), HVD_OVL_PASS);
}

static void test_reads(void) {
  char out[PATH_MAX], abs[PATH_MAX], want[2 * PATH_MAX];
  const char *root = hvd_ovl_root();
  CHECK(root != NULL);
  if (!root) return;
  CHECK_INT(hvd_ovl_map_read(AT_FDCWD, in_real("new.txt"), out, abs), HVD_OVL_MAPPED);
  CHECK_STR(get(out), "mine");
  CHECK_INT(hvd_ovl_map_read(AT_FDCWD, in_real("keep.txt"), out, abs), HVD_OVL_MAPPED);
  CHECK_INT(hvd_ovl_map_read(AT_FDCWD, in_real("gone.txt"), out, abs), HVD_OVL_PASS);
  CHECK_STR(abs, in_real("gone.txt"));
  /* a path inside the overlay folder stands for the real path */
  snprintf(want, sizeof want, "%s%s", root, in_real("new.txt"));
  CHECK_INT(hvd_ovl_absolute(AT_FDCWD, want, abs), 0);
  CHECK_STR(abs, in_real("new.txt"));
  /* excluded paths are never looked up */
  CHECK_INT(hvd_ovl_map_read(AT_FDCWD, "/proc/self/status", out, abs), HVD_OVL_PASS);
  CHECK_STR(abs, "");
}

static void test_remove(void) {
  char out[PATH_MAX], abs[PATH_MAX];
  /* a real file: whited out in this view, still there for everyone else */
  CHECK_INT(hvd_ovl_remove(in_real("gone.txt"), 0), 0);
  CHECK(exists(in_real("gone.txt")));
  errno = 0;
  CHECK_INT(hvd_ovl_map_read(AT_FDCWD, in_real("gone.txt"), out, abs), HVD_OVL_FAIL);
  CHECK_INT(errno, ENOENT);
  errno = 0;
  CHECK_INT(hvd_ovl_remove(in_real("gone.txt"), 0), -1);
  CHECK_INT(errno, ENOENT);
  /* the wrong kind */
  errno = 0;
  CHECK_INT(hvd_ovl_remove(in_real("dir"), 0), -1);
  CHECK_INT(errno, EISDIR);
  errno = 0;
  CHECK_INT(hvd_ovl_remove(in_real("seen.txt"), AT_REMOVEDIR), -1);
  CHECK_INT(errno, ENOTDIR);
  /* a file this view saw, since removed by another process: removed here too */
  hvd_ovl_saw(in_real("seen.txt"));
  CHECK_INT(unlink(in_real("seen.txt")), 0);
  CHECK_INT(hvd_ovl_remove(in_real("seen.txt"), 0), 0);
  /* a name never there: missing where no one changed the folder since the
   * view started; in a folder another process changed (rank 0 rotating,
   * clearing), removed (it cannot be told from a file removed there) */
  errno = 0;
  CHECK_INT(hvd_ovl_remove(in_real("dir/never.txt"), 0), -1);
  CHECK_INT(errno, ENOENT);
  CHECK_INT(hvd_ovl_remove(in_real("never.txt"), 0), 0);
  /* a folder there before the view, removed by another process first */
  CHECK_INT(mkdir(in_real("old"), 0755), 0);
  CHECK_INT(rmdir(in_real("old")), 0);
  CHECK_INT(hvd_ovl_remove(in_real("old"), AT_REMOVEDIR), 0);
  /* the overlay's own file */
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("scratch.txt"), O_WRONLY | O_CREAT, NULL, out), HVD_OVL_MAPPED);
  put(out, "x");
  CHECK_INT(hvd_ovl_remove(in_real("scratch.txt"), 0), 0);
  CHECK(!exists(out));
  /* made anew: the whiteout goes */
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("gone.txt"), O_WRONLY | O_CREAT | O_TRUNC, NULL, out), HVD_OVL_MAPPED);
  put(out, "again");
  CHECK_INT(hvd_ovl_map_read(AT_FDCWD, in_real("gone.txt"), out, abs), HVD_OVL_MAPPED);
  CHECK_STR(get(out), "again");
}

static void test_mkdir_rename_realpath(void) {
  char out[PATH_MAX], abs[PATH_MAX];
  CHECK_INT(hvd_ovl_mkdir(in_real("sub"), 0755), 0);
  CHECK(!exists(in_real("sub")));
  errno = 0;
  CHECK_INT(hvd_ovl_mkdir(in_real("sub"), 0755), -1);
  CHECK_INT(errno, EEXIST);
  errno = 0;
  CHECK_INT(hvd_ovl_mkdir(in_real("dir"), 0755), -1); /* a real one */
  CHECK_INT(errno, EEXIST);
  /* a real one another process made since the view started (rank 0 past
   * the same check-then-make): made here too, in the overlay */
  CHECK_INT(mkdir(in_real("late"), 0755), 0);
  CHECK_INT(hvd_ovl_mkdir(in_real("late"), 0755), 0);
  CHECK_INT(hvd_ovl_map_read(AT_FDCWD, in_real("late"), out, abs), HVD_OVL_MAPPED);
  errno = 0;
  CHECK_INT(hvd_ovl_mkdir(in_real("no/such"), 0755), -1);
  CHECK_INT(errno, ENOENT);
  /* a real file moved into the new folder: copied, the real one whited out */
  CHECK_INT(hvd_ovl_rename(in_real("move.txt"), in_real("sub/moved.txt"), 0), 0);
  CHECK(exists(in_real("move.txt")));
  errno = 0;
  CHECK_INT(hvd_ovl_map_read(AT_FDCWD, in_real("move.txt"), out, abs), HVD_OVL_FAIL);
  CHECK_INT(errno, ENOENT);
  CHECK_INT(hvd_ovl_map_read(AT_FDCWD, in_real("sub/moved.txt"), out, abs), HVD_OVL_MAPPED);
  CHECK_STR(get(out), "real move");
  /* NOREPLACE, a real folder, unknown flags */
  errno = 0;
  CHECK_INT(hvd_ovl_rename(in_real("new.txt"), in_real("keep.txt"), RENAME_NOREPLACE), -1);
  CHECK_INT(errno, EEXIST);
  errno = 0;
  CHECK_INT(hvd_ovl_rename(in_real("dir"), in_real("dir2"), 0), -1);
  CHECK_INT(errno, EXDEV);
  errno = 0;
  CHECK_INT(hvd_ovl_rename(in_real("new.txt"), in_real("x"), RENAME_EXCHANGE), -1);
  CHECK_INT(errno, EINVAL);
  /* realpath of names that exist only in the view: their real paths */
  char *r = realpath(in_real("sub/moved.txt"), NULL);
  CHECK(r == NULL);
  free(r);
  r = hvd_ovl_realpath(in_real("sub/moved.txt"));
  CHECK_STR(r, in_real("sub/moved.txt"));
  free(r);
  r = hvd_ovl_realpath(in_real("keep.txt")); /* also real */
  CHECK_STR(r, in_real("keep.txt"));
  free(r);
  errno = 0;
  CHECK(hvd_ovl_realpath(in_real("sub/nothing")) == NULL);
  CHECK_INT(errno, ENOENT);
  /* a copy into the overlay */
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("copy.txt"), O_WRONLY | O_CREAT | O_EXCL, NULL, out), HVD_OVL_MAPPED);
  CHECK_INT(hvd_ovl_copy(in_real("keep.txt"), out), 0);
  CHECK_STR(get(out), "real keep");
}

/* The names of a listing, sorted, joined by spaces. */
static const char *listing(DIR *d, int merged) {
  static char out[1024];
  char *names[64];
  int n = 0;
  struct dirent64 *e;
  for (;;) {
    if (merged) CHECK_INT(hvd_ovl_readdir(d, &e), 1);
    else e = readdir64(d);
    if (!e) break;
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && n < 64) names[n++] = strdup(e->d_name);
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (strcmp(names[i], names[j]) > 0) {
        char *t = names[i];
        names[i] = names[j], names[j] = t;
      }
  out[0] = 0;
  for (int i = 0; i < n; i++) {
    snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? " " : "", names[i]);
    free(names[i]);
  }
  return out;
}

static void test_listing(void) {
  /* a real file made by "another process" after the view started is left out */
  put(in_real("later.txt"), "rank 0's");
  DIR *d = hvd_ovl_opendir(real_dir);
  CHECK(d != NULL);
  if (!d) return;
  CHECK_INT(hvd_ovl_merged(d), 1);
  int fd = -1;
  CHECK_INT(hvd_ovl_dirfd(d, &fd), 1);
  CHECK(fd >= 0);
  /* overlay: copy.txt gone.txt keep.txt late new.txt sub; real: dir gone.txt
   * keep.txt listed.txt trunc.txt, not move.txt (whited out) nor later.txt
   * (foreign) */
  CHECK_STR(listing(d, 1), "copy.txt dir gone.txt keep.txt late listed.txt new.txt sub trunc.txt");
  CHECK_INT(hvd_ovl_rewinddir(d), 1);
  CHECK_STR(listing(d, 1), "copy.txt dir gone.txt keep.txt late listed.txt new.txt sub trunc.txt");
  CHECK_INT(hvd_ovl_closedir(d), 1);
  /* a real entry listed, then removed by "another process" (rank 0 rotating
   * checkpoints between this rank's listing and its stat): as listed; a
   * name never listed, or removed in this view since, is missing */
  struct stat st;
  CHECK_INT(unlink(in_real("listed.txt")), 0);
  CHECK_INT(hvd_ovl_listed(in_real("listed.txt"), 0, &st), 1);
  CHECK_INT((int)st.st_size, (int)strlen("real listed"));
  CHECK(S_ISREG(st.st_mode));
  CHECK_INT(hvd_ovl_listed(in_real("never-listed.txt"), 0, &st), 0);
  CHECK_INT(hvd_ovl_remove(in_real("listed.txt"), 0), 0);
  CHECK_INT(hvd_ovl_listed(in_real("listed.txt"), 0, &st), 0);
  /* a folder only in the overlay: the overlay's own, not a merged one */
  d = hvd_ovl_opendir(in_real("sub"));
  CHECK(d != NULL);
  if (!d) return;
  CHECK_INT(hvd_ovl_merged(d), 0);
  CHECK_STR(listing(d, 0), "moved.txt");
  CHECK_INT(hvd_ovl_closedir(d), 0);
  closedir(d);
  /* a real folder with whiteouts in it: merged, the removed names hidden */
  CHECK_INT(hvd_ovl_remove(in_real("dir/a"), 0), 0);
  d = hvd_ovl_opendir(in_real("dir"));
  CHECK(d != NULL);
  if (!d) return;
  CHECK_INT(hvd_ovl_merged(d), 1);
  CHECK_STR(listing(d, 1), "b");
  CHECK_INT(hvd_ovl_closedir(d), 1);
  /* a whited-out name cannot be opened */
  errno = 0;
  CHECK(hvd_ovl_opendir(in_real("move.txt")) == NULL);
  CHECK_INT(errno, ENOENT);
}

/* ---------------------------------------------------------------- bytes */
#define MB (1 << 20)
static unsigned char *pattern(size_t n, unsigned seed) {
  unsigned char *b = malloc(n);
  for (size_t i = 0; i < n; i++) seed = seed * 1103515245u + 12345u, b[i] = (unsigned char)(seed >> 16);
  return b;
}
static void put_bytes(const char *path, const unsigned char *b, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0 && write(fd, b, n) == (ssize_t)n);
  close(fd);
}
static long long allocated(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long long)st.st_blocks * 512 : -1;
}
/* A copy of `name` opened for writing as overlay_path.c opens one: its overlay path in ov. */
static int open_copy_w(const char *name, int flags, char *ov) {
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real(name), flags, NULL, ov), HVD_OVL_MAPPED);
  int fd = open(ov, flags, 0644);
  CHECK(fd >= 0);
  hvd_ovb_opened(fd, in_real(name), HVD_OVB_WRITER, flags);
  return fd;
}
static long long quota = -1; /* bytes the overlay folder may take (-1: any): a full TMPDIR */
static long long used;
static int add_use(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)p, (void)flag, (void)f;
  if (S_ISREG(st->st_mode)) used += (long long)st->st_blocks * 512;
  return 0;
}
static long long overlay_use(void) {
  used = 0;
  if (hvd_ovl_root()) nftw(hvd_ovl_root(), add_use, 16, FTW_PHYS);
  return used;
}
/* A tracked write as overlay_fd.c makes it (at < 0: at the fd's position). */
static ssize_t tw(int fd, const void *b, size_t n, off_t at) {
  hvd_ovb_io io;
  for (int tries = 0;; tries++) {
    CHECK_INT(hvd_ovb_begin(fd, at, n, 1, &io), 0);
    ssize_t r;
    int e = 0;
    if (quota >= 0 && overlay_use() + (long long)n > quota) r = -1, e = ENOSPC;
    else r = at >= 0 ? pwrite(fd, b, n, at) : write(fd, b, n), e = errno;
    int x = hvd_ovb_end(&io, r, e);
    if (x == 1 && tries < 3) continue;
    if (x == 2) return hvd_ovb_lose(fd, &io, at >= 0);
    return r;
  }
}
static void tclose(int fd) {
  hvd_ovb_closing(fd);
  close(fd);
}
/* The bytes a read-open of `name` gets (as overlay_path.c serves it), n of them; NULL when it fails. */
static unsigned char *read_back(const char *name, size_t n, int *how) {
  char ov[PATH_MAX];
  CHECK_INT(hvd_ovl_map_read(AT_FDCWD, in_real(name), ov, NULL), HVD_OVL_MAPPED);
  int fd = -1;
  *how = hvd_ovb_serve(in_real(name), ov, O_RDONLY, &fd);
  if (*how == HVD_OVB_FAIL) return NULL;
  if (*how == HVD_OVB_OWN) fd = open(ov, O_RDONLY);
  unsigned char *b = calloc(1, n + 1);
  CHECK(fd >= 0 && pread(fd, b, n + 1, 0) == (ssize_t)n);
  close(fd);
  return b;
}
static hvd_ovb_stats stats(void) {
  hvd_ovb_stats s;
  hvd_ovb_get_stats(&s);
  return s;
}

/* Rank 0's file holds the same bytes: the copy keeps about the cap (4 MiB
 * here) while it is written, none once closed and read, and the read gets
 * rank 0's file. */
static void test_bytes_away(void) {
  char ov[PATH_MAX];
  unsigned char *d = pattern(10 * MB + 123, 1);
  put_bytes(in_real("ck.bin"), d, 10 * MB + 123);
  int fd = open_copy_w("ck.bin", O_WRONLY | O_CREAT | O_TRUNC, ov);
  long long most = 0;
  for (size_t o = 0; o < 10 * MB + 123; o += MB / 2) {
    size_t n = o + MB / 2 <= 10 * MB + 123 ? MB / 2 : 10 * MB + 123 - o;
    CHECK_INT(tw(fd, d + o, n, -1), n);
    if (allocated(ov) > most) most = allocated(ov);
  }
  CHECK(most <= 6 * MB); /* the cap, a block being written, one behind it */
  tclose(fd);
  struct stat st;
  CHECK_INT(stat(ov, &st), 0);
  CHECK_INT(st.st_size, 10 * MB + 123); /* the size is the plain file's */
  int how;
  unsigned char *b = read_back("ck.bin", 10 * MB + 123, &how);
  CHECK_INT(how, HVD_OVB_FD);
  CHECK(b && !memcmp(b, d, 10 * MB + 123));
  CHECK(allocated(ov) < MB); /* every block freed (the last once the file was complete) */
  CHECK(stats().away >= 10 * MB);
  CHECK_INT(hvd_ovb_holds_all(ov), 0); /* (a takeover cannot put this copy in place: overlay.c) */
  free(b), free(d);
}

/* A block that differs from rank 0's (this rank's own random state) stays;
 * the read-back is the rank's own bytes. */
static void test_bytes_differ(void) {
  char ov[PATH_MAX];
  unsigned char *d = pattern(9 * MB, 2);
  put_bytes(in_real("mine.bin"), d, 9 * MB);
  d[3 * MB + 7] ^= 1;
  int fd = open_copy_w("mine.bin", O_WRONLY | O_CREAT | O_TRUNC, ov);
  CHECK_INT(tw(fd, d, 9 * MB, -1), 9 * MB);
  tclose(fd);
  int how;
  unsigned char *b = read_back("mine.bin", 9 * MB, &how);
  CHECK_INT(how, HVD_OVB_FD); /* a memfd of its own block and rank 0's others */
  CHECK(b && !memcmp(b, d, 9 * MB));
  CHECK(allocated(ov) <= 2 * MB); /* the copy keeps its own block, and no more */
  CHECK_INT(stats().served_memory, 1);
  CHECK_INT(hvd_ovb_holds_all(ov), 0);
  free(b), free(d);
}

/* Zeros are freed with no file of rank 0's; a seek back into a freed block
 * writes it back before the write; appending to a freed tail too. */
static void test_bytes_zeros_seek_append(void) {
  char ov[PATH_MAX];
  unsigned char *z = calloc(1, 6 * MB), *d = pattern(8 * MB, 3);
  int fd = open_copy_w("zeros.bin", O_WRONLY | O_CREAT | O_TRUNC, ov);
  CHECK_INT(tw(fd, z, 6 * MB, -1), 6 * MB);
  tclose(fd);
  int how;
  unsigned char *b = read_back("zeros.bin", 6 * MB, &how);
  CHECK_INT(how, HVD_OVB_FD);
  CHECK(b && !memcmp(b, z, 6 * MB));
  free(b);
  CHECK(allocated(ov) < MB);
  CHECK_INT(hvd_ovb_holds_all(ov), 1); /* (holes of zeros are its bytes) */
  /* a header written again after the data (Python's zipfile) */
  put_bytes(in_real("zip.bin"), d, 8 * MB);
  fd = open_copy_w("zip.bin", O_WRONLY | O_CREAT | O_TRUNC, ov);
  CHECK_INT(tw(fd, d, 8 * MB, -1), 8 * MB);
  CHECK(allocated(ov) < 6 * MB); /* block 0 is freed by now */
  CHECK_INT(tw(fd, "HEADER", 6, 100), 6);
  memcpy(d + 100, "HEADER", 6);
  /* ... and an append past the freed tail */
  CHECK_INT(lseek(fd, 0, SEEK_END), 8 * MB);
  CHECK_INT(tw(fd, "TAIL", 4, -1), 4);
  tclose(fd);
  b = read_back("zip.bin", 8 * MB + 4, &how);
  CHECK(how != HVD_OVB_FAIL);
  CHECK(b && !memcmp(b, d, 100) && !memcmp(b + 100, "HEADER", 6) && !memcmp(b + 106, d + 106, 8 * MB - 106) &&
        !memcmp(b + 8 * MB, "TAIL", 4));
  free(b), free(z), free(d);
}

/* A header written again after its data where rank 0, ahead, already
 * wrote its own: the write goes over rank 0's block as it is now; where
 * rank 0's file is gone, over a block not kept: the write never fails. */
static void test_bytes_rank0_ahead(void) {
  char ov[PATH_MAX];
  unsigned char *d = pattern(8 * MB, 9);
  memcpy(d + 100, "......", 6); /* the placeholder */
  put_bytes(in_real("ahead.zip"), d, 8 * MB);
  int fd = open_copy_w("ahead.zip", O_WRONLY | O_CREAT | O_TRUNC, ov);
  CHECK_INT(tw(fd, d, 8 * MB, -1), 8 * MB);
  CHECK(allocated(ov) < 6 * MB); /* block 0 freed, placeholder and all */
  memcpy(d + 100, "HEADER", 6);
  put_bytes(in_real("ahead.zip"), d, 8 * MB); /* rank 0 wrote its header already */
  long long rebased = stats().rebased;
  CHECK_INT(tw(fd, "HEADER", 6, 100), 6);
  CHECK(stats().rebased > rebased);
  tclose(fd);
  int how;
  unsigned char *b = read_back("ahead.zip", 8 * MB, &how);
  CHECK(how != HVD_OVB_FAIL);
  CHECK(b && !memcmp(b, d, 8 * MB));
  free(b);
  /* rank 0's file gone (removed, a divergent script): the write still goes */
  fd = open_copy_w("gone.zip", O_WRONLY | O_CREAT | O_TRUNC, ov);
  put_bytes(in_real("gone.zip"), d, 8 * MB);
  CHECK_INT(tw(fd, d, 8 * MB, -1), 8 * MB);
  CHECK(allocated(ov) < 6 * MB);
  CHECK_INT(unlink(in_real("gone.zip")), 0);
  long long lost = stats().lost;
  CHECK_INT(tw(fd, "HEADER", 6, 100), 6);
  CHECK(stats().lost > lost);
  tclose(fd);
  free(d);
}

/* Rank 0 behind (it leaves the last collective later and has not begun the
 * save): a write over the cap waits for rank 0's file to appear and catch
 * up, so the copy keeps about the cap, not the file.  A file rank 0 never
 * writes (a name of this rank's own) is waited for once, then kept. */
typedef struct {
  const char *path;
  const unsigned char *d;
  size_t n;
} late_writer;
static double mono(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static void *rank0_late(void *arg) {
  late_writer *w = arg;
  struct timespec late = {0, 100 * 1000 * 1000}, step = {0, 2 * 1000 * 1000};
  nanosleep(&late, NULL); /* half of the longest wait (0.2 s here) */
  int fd = open(w->path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  for (size_t o = 0; fd >= 0 && o < w->n; o += MB / 2) {
    if (write(fd, w->d + o, w->n - o < MB / 2 ? w->n - o : MB / 2) < 0) break;
    nanosleep(&step, NULL);
  }
  if (fd >= 0) close(fd);
  return NULL;
}
static void test_bytes_rank0_behind(void) {
  char ov[PATH_MAX];
  unsigned char *d = pattern(16 * MB, 11);
  late_writer w = {in_real("behind.bin"), d, 16 * MB};
  pthread_t t;
  int fd = open_copy_w("behind.bin", O_WRONLY | O_CREAT | O_TRUNC, ov);
  CHECK_INT(pthread_create(&t, NULL, rank0_late, &w), 0);
  long long most = 0;
  for (size_t o = 0; o < 16 * MB; o += MB / 2) {
    CHECK_INT(tw(fd, d + o, MB / 2, -1), MB / 2);
    if (allocated(ov) > most) most = allocated(ov);
  }
  pthread_join(t, NULL);
  CHECK(most <= 6 * MB); /* the cap and a block or two, not the 16 MiB */
  tclose(fd);
  int how;
  unsigned char *b = read_back("behind.bin", 16 * MB, &how);
  CHECK_INT(how, HVD_OVB_FD);
  CHECK(b && !memcmp(b, d, 16 * MB));
  free(b);
  /* no file of rank 0's ever (nor one like it beside it): one wait, then every byte kept */
  free(d);
  d = pattern(16 * MB, 12);
  fd = open_copy_w("own-name.bin", O_WRONLY | O_CREAT | O_TRUNC, ov);
  double t0 = mono();
  for (size_t o = 0; o < 16 * MB; o += MB / 2) CHECK_INT(tw(fd, d + o, MB / 2, -1), MB / 2);
  double took = mono() - t0;
  CHECK(took < 3.0); /* one wait of 0.2 s (10 s unscaled), not one per write (32 writes: 6.4 s); the
                        margin is for a loaded machine (0.4 failed in a distcheck beside a chroot's install) */
  CHECK(allocated(ov) >= 15 * MB);
  tclose(fd);
  CHECK_INT(hvd_ovl_remove(in_real("own-name.bin"), 0), 0);
  hvd_ovb_removed(in_real("own-name.bin"));
  free(d);
}

/* A temporary renamed into place: freed against rank 0's file at the new
 * name; or, rank 0 ahead (its temporary renamed already), against that
 * file while it is written.  Rank 0's file changing after: EIO.  A removal
 * forgets the copy. */
static void test_bytes_rename_remove(void) {
  char ov[PATH_MAX], a[PATH_MAX], bb[PATH_MAX];
  unsigned char *d = pattern(7 * MB, 4), *d2 = pattern(7 * MB, 6), *d3 = pattern(3 * MB, 7);
  int fd = open_copy_w("final.bin.tmp", O_WRONLY | O_CREAT | O_TRUNC, ov);
  CHECK_INT(tw(fd, d, 7 * MB, -1), 7 * MB);
  tclose(fd);
  long long before = stats().private_bytes;
  CHECK(before >= 7 * MB); /* no file of rank 0's at the temporary's name, nor any like it */
  put_bytes(in_real("final.bin"), d, 7 * MB); /* rank 0's, renamed into place */
  strcpy(a, in_real("final.bin.tmp")), strcpy(bb, in_real("final.bin"));
  CHECK_INT(hvd_ovl_rename(a, bb, 0), 0);
  hvd_ovb_renamed(a, bb);
  int how;
  unsigned char *b = read_back("final.bin", 7 * MB, &how);
  CHECK_INT(how, HVD_OVB_FD);
  CHECK(b && !memcmp(b, d, 7 * MB));
  free(b);
  CHECK(stats().private_bytes <= before - 7 * MB);
  /* rank 0 ahead: its file is in place while this rank writes its temporary */
  put_bytes(in_real("ahead.bin"), d2, 7 * MB);
  fd = open_copy_w("ahead.bin.tmp", O_WRONLY | O_CREAT | O_TRUNC, ov);
  CHECK_INT(tw(fd, d2, 7 * MB, -1), 7 * MB);
  CHECK(allocated(ov) <= 6 * MB);
  tclose(fd);
  strcpy(a, in_real("ahead.bin.tmp")), strcpy(bb, in_real("ahead.bin"));
  CHECK_INT(hvd_ovl_rename(a, bb, 0), 0);
  hvd_ovb_renamed(a, bb);
  b = read_back("ahead.bin", 7 * MB, &how);
  CHECK_INT(how, HVD_OVB_FD);
  CHECK(b && !memcmp(b, d2, 7 * MB));
  free(b);
  /* rank 0's file changes after: the bytes are gone, the read-back fails with EIO */
  d[5] ^= 1;
  put_bytes(in_real("final.bin"), d, 7 * MB);
  errno = 0;
  CHECK(read_back("final.bin", 7 * MB, &how) == NULL);
  CHECK_INT(how, HVD_OVB_FAIL);
  CHECK_INT(errno, EIO);
  /* removed: forgotten */
  fd = open_copy_w("gone.bin", O_WRONLY | O_CREAT | O_TRUNC, ov);
  CHECK_INT(tw(fd, d3, 3 * MB, -1), 3 * MB);
  tclose(fd);
  before = stats().private_bytes;
  CHECK_INT(hvd_ovl_remove(in_real("gone.bin"), 0), 0);
  hvd_ovb_removed(in_real("gone.bin"));
  CHECK_INT(stats().private_bytes, before - 3 * MB);
  /* a second name (a hard link): the copy holds its bytes again, and the other name keeps them */
  char ov2[PATH_MAX];
  put_bytes(in_real("best.bin"), d3, 3 * MB);
  fd = open_copy_w("best.bin", O_WRONLY | O_CREAT | O_TRUNC, ov);
  CHECK_INT(tw(fd, d3, 3 * MB, -1), 3 * MB);
  tclose(fd);
  b = read_back("best.bin", 3 * MB, &how); /* freed now */
  free(b);
  CHECK(allocated(ov) < MB);
  CHECK_INT(hvd_ovl_map_write(AT_FDCWD, in_real("also.bin"), O_CREAT | O_EXCL | O_WRONLY, NULL, ov2), HVD_OVL_MAPPED);
  CHECK_INT(linkat(AT_FDCWD, ov, AT_FDCWD, ov2, 0), 0);
  hvd_ovb_linked(ov);
  CHECK_INT(hvd_ovl_remove(in_real("best.bin"), 0), 0);
  hvd_ovb_removed(in_real("best.bin"));
  b = read_back("also.bin", 3 * MB, &how);
  CHECK_INT(how, HVD_OVB_OWN);
  CHECK(b && !memcmp(b, d3, 3 * MB));
  free(b);
  free(d), free(d2), free(d3);
}

/* TMPDIR full: room is made from what rank 0's file holds; when there is
 * none, private blocks are dropped, then a write keeps no bytes; the
 * read-back takes rank 0's (checked where the hashes are kept). */
static void test_bytes_full(void) {
  char ov[PATH_MAX];
  unsigned char *d = pattern(6 * MB, 5);
  put_bytes(in_real("full.bin"), d, 6 * MB);
  long long lost = stats().lost;
  int fd = open_copy_w("full.bin", O_WRONLY | O_CREAT | O_TRUNC, ov);
  quota = overlay_use() + 3 * MB; /* 3 MiB more than the folder holds */
  for (int i = 0; i < 6; i++) CHECK_INT(tw(fd, d + i * MB, MB, -1), MB);
  quota = -1;
  tclose(fd);
  CHECK_INT(stats().lost, lost); /* room was made: rank 0's file held the blocks */
  int how;
  unsigned char *b = read_back("full.bin", 6 * MB, &how);
  CHECK_INT(how, HVD_OVB_FD);
  CHECK(b && !memcmp(b, d, 6 * MB));
  free(b);
  /* nothing rank 0's holds (yet, nor any file like it): dropped, then not kept at all */
  free(d);
  d = pattern(6 * MB, 8);
  long long given_up = stats().dropped + stats().lost;
  fd = open_copy_w("late.bin", O_WRONLY | O_CREAT | O_TRUNC, ov);
  quota = overlay_use() + 2 * MB;
  for (int i = 0; i < 6; i++) CHECK_INT(tw(fd, d + i * MB, MB, -1), MB);
  quota = -1;
  tclose(fd);
  CHECK(stats().dropped + stats().lost > given_up); /* room by giving bytes up: every write went through */
  put_bytes(in_real("late.bin"), d, 6 * MB); /* rank 0's arrives */
  b = read_back("late.bin", 6 * MB, &how);
  CHECK(how != HVD_OVB_FAIL);
  CHECK(b && !memcmp(b, d, 6 * MB));
  free(b), free(d);
}

static void test_drop(void) {
  char root[PATH_MAX];
  CHECK(hvd_ovl_root() != NULL);
  if (!hvd_ovl_root()) return;
  snprintf(root, sizeof root, "%s", hvd_ovl_root());
  hvd_ovl_drop();
  CHECK(hvd_ovl_root() == NULL);
  CHECK(!exists(root));
  CHECK(exists(in_real("keep.txt")));
}

static int rm_tree(const char *p) {
  char cmd[PATH_MAX + 32];
  snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", p);
  return system(cmd);
}

/* overlay_view [TEXT]: every test, or those whose name contains TEXT (the
 * tests build on each other: run them in order). */
int main(int argc, char **argv) {
  const char *t = getenv("TMPDIR");
  char tmpl[PATH_MAX], canon[PATH_MAX];
  snprintf(tmpl, sizeof tmpl, "%s/hvdshim-view-test.XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(tmpl) || !realpath(tmpl, canon) || strlen(canon) >= sizeof base) return perror("mkdtemp"), 1;
  strcpy(base, canon);
  snprintf(real_dir, sizeof real_dir, "%s/real", base);
  snprintf(tmp_dir, sizeof tmp_dir, "%s/tmp", base);
  mkdir(real_dir, 0755);
  mkdir(tmp_dir, 0755);
  mkdir(in_real("dir"), 0755);
  put(in_real("keep.txt"), "real keep");
  put(in_real("gone.txt"), "real gone");
  put(in_real("move.txt"), "real move");
  put(in_real("seen.txt"), "real seen");
  put(in_real("trunc.txt"), "real trunc");
  put(in_real("listed.txt"), "real listed");
  put(in_real("dir/a"), "a");
  put(in_real("dir/b"), "b");
  setenv("TMPDIR", tmp_dir, 1);
  struct timespec pause = {0, 20 * 1000 * 1000};
  nanosleep(&pause, NULL); /* the fixture is older than the view (file times are coarse) */
  hvd_ovl_init(&libc_calls, 3);
  hvd_ovb_init(&libc_calls, 4 * MB, 0.02); /* waits for "rank 0" 50 times shorter */
  nanosleep(&pause, NULL);
  static const check_test tests[] = {
      {"paths: absolute and normalized", test_absolute},
      {"paths: never redirected", test_excluded},
      {"view: nothing written yet", test_clean_view},
      {"view: writes go to the overlay folder", test_writes},
      {"view: reads see the overlay first", test_reads},
      {"view: removals are whiteouts", test_remove},
      {"view: mkdir, rename, realpath", test_mkdir_rename_realpath},
      {"view: merged folder listings", test_listing},
      {"bytes: freed once rank 0's file holds them", test_bytes_away},
      {"bytes: a block rank 0's lacks stays", test_bytes_differ},
      {"bytes: zeros, a seek back, an append", test_bytes_zeros_seek_append},
      {"bytes: a seek back where rank 0 is ahead, or gone", test_bytes_rank0_ahead},
      {"bytes: a write waits for rank 0 behind", test_bytes_rank0_behind},
      {"bytes: rename, a changed file, removal", test_bytes_rename_remove},
      {"bytes: TMPDIR full", test_bytes_full},
      {"view: the folder is removed", test_drop},
      {NULL, NULL},
  };
  int rc = check_run(tests, argc > 1 ? argv[1] : NULL);
  hvd_ovl_drop();
  rm_tree(base);
  return rc;
}
