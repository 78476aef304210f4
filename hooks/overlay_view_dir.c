/* The overlay's path logic: the merged folder listings (overlay_view.h
 * says what the view owns; overlay_view_internal.h has the view's files in
 * their order).  opendir of a real folder that also has entries in the
 * overlay folder, or whose entries this process removed, gives a merged
 * listing, a DIR of the view's own: the overlay's entries first, then the
 * real ones not among them, not whited out, not made by another process
 * since the view started (rank 0's files of the same save), and not gone
 * by the time they are looked at.  Every
 * other folder is the real opendir's.  A merged listing of a folder that
 * changed since the start keeps what it listed of the real entries, with
 * their attributes, for a while (hvd_ovl_listed): rank 0 may remove one
 * between this rank's listing and its stat of it (rotating checkpoints by
 * their times), and this rank alone would still find it there.  Its state
 * (the open merged listings, the entries listed) is under ovl_mu, with the
 * rest of the view's.  Calls
 * overlay_view_folder.c (the overlay path), overlay_view.c (the whiteouts)
 * and the real calls (ovl_L). */
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
#include <sys/stat.h>
#include <sys/sysmacros.h>

/* ------------------------------------------------------------ merged folder listings (under ovl_mu) */
typedef struct {
  DIR *over, *real;
  int phase;   /* 0: overlay entries, 1: real entries */
  int changed; /* the real folder changed since the start: its entries are kept as listed */
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

DIR *hvd_ovl_opendir(const char *p) {
  char a[PATH_MAX], ov[PATH_MAX];
  if (!ovl_dirty || hvd_ovl_absolute(AT_FDCWD, p, a) || hvd_ovl_excluded_path(a)) return ovl_L->opendir(p);
  struct stat so, sr;
  DIR *res = NULL;
  pthread_mutex_lock(&ovl_mu);
  int in_ov = !ovl_path(a, ov) && ovl_lexists(ov, &so);
  int real_dir = !ovl_whited(a) && ovl_fstatat(AT_FDCWD, a, &sr, 0) == 0 && S_ISDIR(sr.st_mode);
  merged_dir *m = NULL;
  if (ovl_whited(a) && !in_ov) errno = ENOENT;
  else if (in_ov && !real_dir) res = ovl_L->opendir(ov);
  else if (!(in_ov && S_ISDIR(so.st_mode)) && !ovl_whiteouts_in(a)) res = ovl_L->opendir(p);
  else if (n_open_dirs == cap_open_dirs &&
           !(open_dirs = realloc(open_dirs, (cap_open_dirs = cap_open_dirs ? 2 * cap_open_dirs : 8) * sizeof m)))
    errno = ENOMEM, n_open_dirs = cap_open_dirs = 0;
  else if (!(m = calloc(1, sizeof *m))) errno = ENOMEM;
  else if (!(m->real = ovl_L->opendir(a))) free(m), m = NULL;
  else {
    m->over = in_ov ? ovl_L->opendir(ov) : NULL;
    m->changed = real_dir && ovl_changed_since_start(&sr);
    strcpy(m->path, a);
    open_dirs[n_open_dirs++] = m;
    res = (DIR *)m;
  }
  pthread_mutex_unlock(&ovl_mu);
  return res;
}

/* ------------------------------------------------------------ real entries as listed (under ovl_mu) */
/* The last real entries merged listings returned from folders that changed
 * since the start, with their attributes then (a ring).  A stat of one
 * that has gone since (another process removed it, this rank did not: a
 * removal here is a whiteout, looked up first) gets them, within
 * LISTED_SECONDS of the listing: long enough for a listing and the stats
 * that follow it, short enough that no wait on a name's disappearance
 * runs on a phantom for longer. */
#define LISTED_SECONDS 30.0
typedef struct {
  char *path;
  struct stat st;
  double at; /* when listed (CLOCK_MONOTONIC) */
} listed_entry;
static listed_entry listed[256];
static volatile size_t n_listed; /* (read without ovl_mu as a hint, as ovl_dirty is) */

static void stat_of_statx(const struct statx *x, struct stat *st) {
  memset(st, 0, sizeof *st);
  st->st_dev = makedev(x->stx_dev_major, x->stx_dev_minor);
  st->st_ino = (ino_t)x->stx_ino;
  st->st_mode = x->stx_mode;
  st->st_nlink = x->stx_nlink;
  st->st_uid = x->stx_uid;
  st->st_gid = x->stx_gid;
  st->st_rdev = makedev(x->stx_rdev_major, x->stx_rdev_minor);
  st->st_size = (off_t)x->stx_size;
  st->st_blksize = (blksize_t)x->stx_blksize;
  st->st_blocks = (blkcnt_t)x->stx_blocks;
  st->st_atim.tv_sec = x->stx_atime.tv_sec, st->st_atim.tv_nsec = x->stx_atime.tv_nsec;
  st->st_mtim.tv_sec = x->stx_mtime.tv_sec, st->st_mtim.tv_nsec = x->stx_mtime.tv_nsec;
  st->st_ctim.tv_sec = x->stx_ctime.tv_sec, st->st_ctim.tv_nsec = x->stx_ctime.tv_nsec;
}

static void note_listed(const char *path, const struct statx *x) {
  char *c = strdup(path);
  if (!c) return;
  listed_entry *l = &listed[n_listed++ % (sizeof listed / sizeof *listed)];
  free(l->path);
  l->path = c;
  stat_of_statx(x, &l->st);
  l->at = hvd_mono_s();
}

int hvd_ovl_listed(const char *abs, int flags, struct stat *st) {
  if (!n_listed) return 0; /* (read without the lock: every stat that fails, in a process that kept none) */
  int found = 0;
  double t = hvd_mono_s();
  pthread_mutex_lock(&ovl_mu);
  for (size_t k = 0; k < sizeof listed / sizeof *listed && k < n_listed && !found; k++) {
    listed_entry *l = &listed[(n_listed - 1 - k) % (sizeof listed / sizeof *listed)]; /* the latest first */
    if (l->path && !strcmp(l->path, abs) && t - l->at <= LISTED_SECONDS &&
        ((flags & AT_SYMLINK_NOFOLLOW) || !S_ISLNK(l->st.st_mode)) && !ovl_whited(abs))
      *st = l->st, found = 1;
  }
  pthread_mutex_unlock(&ovl_mu);
  return found;
}

/* A real entry of a merged listing: 0 where it is to be left out, made after
 * this rank started by another process (rank 0 writing the same files as
 * this rank, a temporary of its save in flight), as this rank alone would
 * not have it, or gone since it was read (that temporary renamed into place
 * between the readdir and the look); else 1, and kept as listed (`path`,
 * when not NULL) where the folder changed. */
static int shown(merged_dir *m, const char *name, const char *path) {
  struct statx x;
  unsigned want = STATX_BTIME | STATX_CTIME | (m->changed ? STATX_BASIC_STATS : 0);
  if (!ovl_L->statx) return 1;
  if (ovl_L->statx(ovl_L->dirfd(m->real), name, AT_SYMLINK_NOFOLLOW, want, &x) != 0) return errno != ENOENT;
  if (ovl_statx_born_since_start(&x)) return 0;
  if (m->changed && path && (x.stx_mask & STATX_BASIC_STATS) == STATX_BASIC_STATS) note_listed(path, &x);
  return 1;
}

static struct dirent64 *merged_next(merged_dir *m) {
  struct dirent64 *e;
  char p[PATH_MAX];
  if (m->phase == 0) {
    while (m->over && (e = ovl_L->readdir64(m->over))) {
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
  while ((e = ovl_L->readdir64(m->real))) {
    int dup = 0;
    for (size_t i = 0; i < m->n && !dup; i++) dup = !strcmp(m->names[i], e->d_name);
    if (dup) continue;
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      int fits = snprintf(p, sizeof p, "%s/%s", strcmp(m->path, "/") ? m->path : "", e->d_name) < (int)sizeof p;
      if ((fits && ovl_whited(p)) || !shown(m, e->d_name, fits ? p : NULL)) continue;
    }
    memcpy(&m->ent, e, sizeof m->ent);
    return &m->ent;
  }
  return NULL;
}

/* Each of these reads n_open_dirs first without the lock: while no merged
 * listing is open (every process but an overlay rank's), nothing else. */
int hvd_ovl_readdir(DIR *d, struct dirent64 **e) {
  if (!n_open_dirs) return 0;
  pthread_mutex_lock(&ovl_mu);
  merged_dir *m = find_dir(d);
  if (m) *e = merged_next(m);
  pthread_mutex_unlock(&ovl_mu);
  return m != NULL;
}

int hvd_ovl_closedir(DIR *d) {
  if (!n_open_dirs) return 0;
  pthread_mutex_lock(&ovl_mu);
  merged_dir *m = find_dir(d);
  if (m)
    for (size_t i = 0; i < n_open_dirs; i++)
      if (open_dirs[i] == m) open_dirs[i] = open_dirs[--n_open_dirs];
  pthread_mutex_unlock(&ovl_mu);
  if (!m) return 0;
  if (m->over) ovl_L->closedir(m->over);
  ovl_L->closedir(m->real);
  for (size_t i = 0; i < m->n; i++) free(m->names[i]);
  free(m->names);
  free(m);
  return 1;
}

int hvd_ovl_rewinddir(DIR *d) {
  if (!n_open_dirs) return 0;
  pthread_mutex_lock(&ovl_mu);
  merged_dir *m = find_dir(d);
  if (m) {
    if (m->over) ovl_L->rewinddir(m->over);
    ovl_L->rewinddir(m->real);
    for (size_t i = 0; i < m->n; i++) free(m->names[i]);
    m->n = 0, m->phase = 0;
  }
  pthread_mutex_unlock(&ovl_mu);
  return m != NULL;
}

int hvd_ovl_dirfd(DIR *d, int *fd) {
  if (!n_open_dirs) return 0;
  pthread_mutex_lock(&ovl_mu);
  merged_dir *m = find_dir(d);
  if (m) *fd = ovl_L->dirfd(m->real); /* the real folder; the overlay is reached through the path */
  pthread_mutex_unlock(&ovl_mu);
  return m != NULL;
}

int hvd_ovl_merged(DIR *d) {
  if (!n_open_dirs) return 0;
  pthread_mutex_lock(&ovl_mu);
  merged_dir *m = find_dir(d);
  pthread_mutex_unlock(&ovl_mu);
  return m != NULL;
}
