/* The overlay's path logic (internal to hooks/overlay*.c; see overlay.h for
 * what the overlay does): this process's view of the file system while the
 * overlay is on.  It owns the overlay folder, the whiteouts, the real files
 * seen, the merged folder listings, and the decision of which path a call
 * on (dirfd, path) goes to (overlay_view_folder.c, overlay_view.c,
 * overlay_view_dir.c: overlay_view_internal.h has their order).  It
 * interposes nothing: overlay_path.c holds the interposed calls that name
 * a path, checks that the overlay is on, and calls in here;
 * tests/unit/overlay_view.c drives it the same way with no preload.
 *
 * Every function here assumes the overlay is on (its caller checked).  The
 * view's state is under one recursive mutex, taken inside these functions;
 * no function returns with it held.  Include after defining _GNU_SOURCE
 * (struct dirent64, struct statx). */
#ifndef HVD_OVERLAY_VIEW_H
#define HVD_OVERLAY_VIEW_H

#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "../base/clock.h"

/* The real libc functions, as overlay.c resolves them (dlsym RTLD_NEXT): the
 * interposed table calls them, and the view makes its own calls through
 * them, so it never passes back through the table.  Any may be NULL where
 * libc lacks it; the view needs those marked "view". */
typedef struct {
  int (*openat)(int, const char *, int, ...);                       /* view */
  FILE *(*fopen)(const char *, const char *);
  FILE *(*freopen)(const char *, const char *, FILE *);
  int (*fstatat)(int, const char *, struct stat *, int);            /* view; NULL before glibc 2.33 */
  int (*statx)(int, const char *, int, unsigned, void *);           /* view; NULL: no birth times */
  int (*faccessat)(int, const char *, int, int);
  int (*renameat2)(int, const char *, int, const char *, unsigned); /* view */
  int (*unlinkat)(int, const char *, int);                          /* view */
  int (*mkdirat)(int, const char *, mode_t);                        /* view */
  int (*linkat)(int, const char *, int, const char *, int);
  int (*symlinkat)(const char *, int, const char *);                /* view */
  int (*fchmodat)(int, const char *, mode_t, int);
  int (*truncate)(const char *, off_t);
  int (*utimensat)(int, const char *, const struct timespec *, int);
  DIR *(*opendir)(const char *);                                    /* view */
  struct dirent64 *(*readdir64)(DIR *);                             /* view */
  int (*closedir)(DIR *);                                           /* view */
  void (*rewinddir)(DIR *);                                         /* view */
  int (*dirfd)(DIR *);                                              /* view */
  long (*telldir)(DIR *);
  void (*seekdir)(DIR *, long);
  int (*bind)(int, const struct sockaddr *, socklen_t);
  int (*connect)(int, const struct sockaddr *, socklen_t);
  char *(*realpath)(const char *, char *);                          /* view */
  /* the bytes of the copies (overlay_bytes*.c) */
  ssize_t (*read)(int, void *, size_t);                             /* view */
  ssize_t (*write)(int, const void *, size_t);                      /* view */
  ssize_t (*pread)(int, void *, size_t, off_t);
  ssize_t (*pwrite)(int, const void *, size_t, off_t);
  int (*close)(int);                                                /* view */
  int (*fallocate)(int, int, off_t, off_t);
  int (*ftruncate)(int, off_t);
} hvd_ovl_libc;

/* Starts the view for `rank` (the overlay folder's name carries it), with
 * the real calls in `libc` (kept by pointer: it must outlive the view).
 * The view's start time (which files another process made since) is now. */
void hvd_ovl_init(const hvd_ovl_libc *libc, int rank);
/* The overlay folder, or NULL while none has been made. */
const char *hvd_ovl_root(void);
/* Removes the overlay folder and stops its watcher; a write after this
 * makes a new folder.  Whiteouts and listings stay. */
void hvd_ovl_drop(void);

/* ---- paths ---- */
/* libc declares its path arguments nonnull, so a plain NULL test could be
 * folded away; a NULL still reaches the real call, which fails with EFAULT. */
static inline int hvd_ovl_nonempty(const char *p) {
  __asm__("" : "+r"(p));
  return p && *p;
}
/* (dirfd, path) as an absolute, lexically normalized path in out
 * (PATH_MAX).  A path inside the overlay folder (a dirfd opened there) is
 * given back as the real path it stands for.  0, or -1 when it cannot be
 * told (the call passes through). */
int hvd_ovl_absolute(int dirfd, const char *path, char *out);
/* Never redirected: /dev, /proc, /sys, /run, and Python multiprocessing's
 * own folders (".../pymp-..."). */
int hvd_ovl_excluded_path(const char *abs);
/* Never redirected: calls made from MPI, NCCL or CUDA (`ret`: the
 * caller's return address; NULL is nobody's). */
int hvd_ovl_excluded_caller(const void *ret);

/* ---- which path a call goes to ---- */
enum { HVD_OVL_MAPPED = 0, HVD_OVL_PASS = 1, HVD_OVL_FAIL = -1 };
/* A read: MAPPED with the overlay's copy in out, FAIL (errno ENOENT) for a
 * whiteout, or PASS for the real path; then `abs`, when given, gets the
 * absolute path (else it is "").  A relative path under a dirfd other than
 * AT_FDCWD maps to its absolute path (the dirfd may be an overlay folder). */
int hvd_ovl_map_read(int dirfd, const char *path, char *out, char *abs);
/* A write with open(2) flags: MAPPED with the overlay path in out (its
 * folders made, an existing real file copied up unless O_TRUNC), PASS for
 * what is not redirected (not a regular file, an excluded path or caller),
 * FAIL with errno. */
int hvd_ovl_map_write(int dirfd, const char *path, int flags, const void *caller, char *out);
/* `abs`, a real regular file, was seen to exist (a removal of it later
 * succeeds even when another process removed it first). */
void hvd_ovl_saw(const char *abs);
/* Before the training program's read of the real (dirfd, path) (not the
 * MPI runtime's: its shared segments stay open for writing): where it is a
 * regular file another process made since this rank started and still has
 * open for writing (rank 0 saving a cache this rank is about to load),
 * waits until it is closed, or has not changed for HVD_OVL_IDLE_WRITER s
 * (a log held open). */
void hvd_ovl_await_writer(int dirfd, const char *path, const void *caller);
#define HVD_OVL_IDLE_WRITER 1.0

/* ---- changes made in the view (absolute paths; 0, or -1 with errno) ---- */
/* Removes `abs` (AT_REMOVEDIR for a folder): the overlay's entry, and a
 * whiteout that hides the real one from this process. */
int hvd_ovl_remove(const char *abs, int flags);
/* Makes the folder `abs` in the overlay. */
int hvd_ovl_mkdir(const char *abs, mode_t mode);
/* Moves `a` to `b` (fl: 0 or RENAME_NOREPLACE): a real file is copied into
 * the overlay as b and whited out; a real folder fails with EXDEV. */
int hvd_ovl_rename(const char *a, const char *b, unsigned fl);
/* Copies the file `src` to `dst` (an overlay path), keeping its mode. */
int hvd_ovl_copy(const char *src, const char *dst);
/* realpath for a name that exists only in the overlay (the real realpath
 * failed with ENOENT): its real path, malloc'd; NULL with errno ENOENT. */
char *hvd_ovl_realpath(const char *path);

/* ---- folder listings ---- */
/* opendir in this view: the real folder, the overlay's, or a merged
 * listing (overlay entries first, whiteouts and files made by another
 * process since the start hidden). */
DIR *hvd_ovl_opendir(const char *path);
/* For a merged listing d these do the work and return 1 (readdir: the
 * entry, or NULL at the end, in *e; dirfd: the real folder's in *fd);
 * for any other DIR they return 0 and the caller calls the real one. */
int hvd_ovl_readdir(DIR *d, struct dirent64 **e);
int hvd_ovl_closedir(DIR *d);
int hvd_ovl_rewinddir(DIR *d);
int hvd_ovl_dirfd(DIR *d, int *fd);
int hvd_ovl_merged(DIR *d);
/* `abs` (absolute), which a stat just found missing, was a real entry of a
 * merged listing of a folder that changed since the start, listed in the
 * last 30 s and not removed in this view since (another process removed
 * it: rank 0 rotating the checkpoints this rank is sorting by time): 1 with
 * its attributes as listed in *st (AT_SYMLINK_NOFOLLOW in flags: a link's
 * own; else a link gives 0), else 0. */
int hvd_ovl_listed(const char *abs, int flags, struct stat *st);

#endif
