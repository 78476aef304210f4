/* The overlay's path logic: the merged folder listings (overlay_view.h
 * says what the view owns; overlay_view_internal.h has the view's files in
 * their order).  opendir of a real folder that also has entries in the
 * overlay folder, or whose entries this process removed, gives a merged
 * listing, a DIR of the view's own: the overlay's entries first, then the
 * real ones not among them, not whited out, and not made by another
 * process since the view started (rank 0's files of the same save).  Every
 * other folder is the real opendir's.  Its state (the open merged
 * listings) is under ovl_mu, with the rest of the view's.  Calls
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

/* ------------------------------------------------------------ merged folder listings (under ovl_mu) */
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
    strcpy(m->path, a);
    open_dirs[n_open_dirs++] = m;
    res = (DIR *)m;
  }
  pthread_mutex_unlock(&ovl_mu);
  return res;
}

/* Made after this rank started, by another process (rank 0 writing the
 * same files as this rank, a temporary of its save in flight): a merged
 * listing leaves it out, as this rank alone would not have it. */
static int foreign(DIR *real, const char *name) { return ovl_born_since_start(ovl_L->dirfd(real), name); }

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
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
        ((snprintf(p, sizeof p, "%s/%s", strcmp(m->path, "/") ? m->path : "", e->d_name) < (int)sizeof p && ovl_whited(p)) ||
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
