/* What the view's files share (internal to hooks/overlay_view*.c;
 * overlay_view.h says what the view owns).  The files in their one-way
 * order: each uses only the files listed before it, never one after it
 * (tests/unit/layers.sh checks, from the objects' symbols, that no two of
 * them use each other in a circle):
 *
 *   overlay_view_folder.c  the state, the view's start; the overlay folder
 *                          (made on the first write, watched, removed);
 *                          absolute paths, the overlay path, what is never
 *                          redirected
 *   overlay_view.c         the whiteouts and the files seen; which path a
 *                          call goes to; the changes made in the view
 *                          (remove, mkdir, rename, copy, realpath)
 *   overlay_view_dir.c     the merged folder listings
 *
 * Names: hvd_ovl_* are the view's calls (overlay_view.h); ovl_* are what its
 * files share (here); the rest is static.  The state is under ovl_mu
 * (recursive); ovl_dirty is read without it, as a hint that lookups are
 * needed. */
#ifndef HVD_OVERLAY_VIEW_INTERNAL_H
#define HVD_OVERLAY_VIEW_INTERNAL_H

#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "overlay_view.h"

/* ---- overlay_view_folder.c ---- */
extern const hvd_ovl_libc *ovl_L; /* the real calls */
extern volatile int ovl_dirty;    /* a folder was made or a whiteout recorded: lookups needed */
extern struct timespec ovl_t0;    /* when the view started */
extern pthread_mutex_t ovl_mu;

/* fstatat through the real calls (the system call before glibc 2.33) */
int ovl_fstatat(int dirfd, const char *path, struct stat *st, int flags);
/* `p` exists (a link not followed): its lstat in *st */
int ovl_lexists(const char *p, struct stat *st);
/* (dirfd, path), a link not followed, was made after this view started, by
 * another process (rank 0 running the same script): its birth time where
 * the file system keeps one, else its change time; 0 where unknown. */
int ovl_born_since_start(int dirfd, const char *path);
/* The same of a statx result that asked for STATX_BTIME | STATX_CTIME. */
struct statx;
int ovl_statx_born_since_start(const struct statx *sx);
/* A folder with these attributes had an entry made or removed since this
 * view started (its modification time). */
int ovl_changed_since_start(const struct stat *st);
/* The real folder holding the absolute path `a` had an entry made or
 * removed since this view started (its modification time). */
int ovl_parent_changed_since_start(const char *a);
/* The overlay path of the absolute path `abs` in out (PATH_MAX): 0, or -1
 * while there is no overlay folder, or when it does not fit. */
int ovl_path(const char *abs, char *out);
/* Makes the overlay folder (and its watcher) unless it exists: 0, or -1
 * with errno and one line saying why (under ovl_mu). */
int ovl_ensure_root(void);
/* Makes the folders above the overlay path `ov` (under ovl_mu). */
void ovl_mkparents(const char *ov);
/* `path` is `dir` or lies under it. */
static inline int under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return !strncmp(path, dir, n) && (path[n] == '/' || !path[n]);
}

/* ---- overlay_view.c ---- */
/* `a`, or a folder above it, was removed in this view (under ovl_mu). */
int ovl_whited(const char *a);
/* A name right inside the folder `a` was removed in this view (under ovl_mu). */
int ovl_whiteouts_in(const char *a);

#endif
