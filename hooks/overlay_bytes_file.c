/* The overlay's bytes: the state, the tracked copies and their blocks
 * (overlay_bytes.h has the rules and the locking, overlay_bytes_internal.h
 * the layer's files in their order).
 *
 * A copy is known by its inode (so a rename inside the overlay keeps it)
 * and by the real path it stands for (its "counterpart": the file rank 0
 * writes at the same path; the view's renames and removals move and drop
 * it).  Per 1 MiB block it holds a state: PRIV (the bytes are in the copy;
 * a hole there reads as zeros, as it would in the plain file), ZERO (a
 * hole, all zeros), AWAY (a hole; the counterpart held these bytes when
 * they were freed, and their hash is kept), LOST (a hole; not kept, no
 * hash: $TMPDIR had no room), plus flags.  This file keeps the list of
 * copies, their block states and the private total in step (track,
 * resize, set_kind), and reads, writes and punches a copy's blocks
 * (free_block); it decides nothing about when a block is freed
 * (overlay_bytes_pass.c does).  Calls the real libc through the table it
 * was handed (ovb_L) and the view's folder (hvd_ovl_root); no other file of
 * the layer.  A fork handler keeps ovb_mu usable in the child and marks it
 * (ovb_in_child: a child only writes back). */
#define _GNU_SOURCE
#include "overlay_bytes_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/log.h"

struct hvd_ovb_file *hvd_ovb_fds[HVD_OVB_FDMAX];
const hvd_ovl_libc *ovb_L;
long long ovb_cap;
double ovb_quiet = 1;
int (*ovb_rank0_gone)(void);
pthread_mutex_t ovb_mu = PTHREAD_MUTEX_INITIALIZER;
ovf *ovb_files;
long long ovb_priv_total;
hvd_ovb_stats ovb_stats;
int ovb_in_child, ovb_no_punch;
unsigned char *ovb_buf1, *ovb_buf2;
long long ovb_grown = -1;

/* ------------------------------------------------------------ the copies and their blocks */
void ovb_note_peak(void) {
  if (ovb_priv_total > ovb_stats.peak_private) ovb_stats.peak_private = ovb_priv_total;
}

/* The block states for `size` bytes (new blocks PRIV). */
static int fit(ovf *f, off_t size) {
  size_t nb = (size_t)((size + BS - 1) / BS);
  if (nb > f->capb) {
    size_t c = f->capb ? f->capb : 4;
    while (c < nb) c *= 2;
    unsigned char *st = realloc(f->st, c);
    if (!st) return -1;
    f->st = st;
    uint64_t *h = realloc(f->h, c * 2 * sizeof *h);
    if (!h) return -1;
    f->h = h;
    memset(f->st + f->capb, 0, c - f->capb);
    f->capb = c;
  }
  if (nb > f->nb) memset(f->st + f->nb, 0, nb - f->nb);
  f->nb = nb;
  return 0;
}

void ovb_set_kind(ovf *f, size_t b, int k) {
  int was = kind(f, b);
  off_t n = blen(f, b);
  if (was == PRIV && k != PRIV) f->away += n, ovb_priv_total -= n;
  if (was != PRIV && k == PRIV) f->away -= n, ovb_priv_total += n, ovb_grown += ovb_grown >= 0 ? n : 0;
  f->st[b] = (unsigned char)k;
}

/* A new size: blocks past it become PRIV (gone), the private total follows.
 * The caller made the block holding the old end PRIV when it was partial
 * and not PRIV (its length changes). */
void ovb_resize(ovf *f, off_t size) {
  if (size < f->size) {
    f->solo = 0; /* written again (O_TRUNC): rank 0 may be behind this time */
    for (size_t b = (size_t)((size + BS - 1) / BS); b < f->nb; b++) ovb_set_kind(f, b, PRIV);
    if (size % BS && kind(f, (size_t)(size / BS)) != PRIV) ovb_set_kind(f, (size_t)(size / BS), PRIV);
  }
  if (fit(f, size) && size > f->size) return; /* no memory: keep the old view, the bytes stay private */
  ovb_priv_total += size - f->size;
  if (ovb_grown >= 0 && size > f->size) ovb_grown += size - f->size;
  f->size = size;
  if (f->nb > (size_t)((size + BS - 1) / BS)) f->nb = (size_t)((size + BS - 1) / BS);
  if (f->hi > size) f->hi = size;
  ovb_note_peak();
}

ovf *ovb_find(dev_t dev, ino_t ino) {
  for (ovf *f = ovb_files; f; f = f->next)
    if (f->dev == dev && f->ino == ino) return f;
  return NULL;
}

void ovb_free_file(ovf *f) {
  for (ovf **p = &ovb_files; *p; p = &(*p)->next)
    if (*p == f) {
      *p = f->next;
      break;
    }
  ovb_priv_total -= f->size - f->away;
  free(f->path);
  free(f->src);
  free(f->st);
  free(f->h);
  free(f);
}

void ovb_set_path(ovf *f, const char *abs) {
  if (f->path && !strcmp(f->path, abs)) return;
  char *p = strdup(abs);
  if (!p) return;
  free(f->path);
  f->path = p;
  f->cfp.exists = -1; /* another counterpart */
}

ovf *ovb_track(const struct stat *s, const char *abs) {
  ovf *f = ovb_find(s->st_dev, s->st_ino);
  if (f) {
    ovb_set_path(f, abs);
    return f;
  }
  if (!(f = calloc(1, sizeof *f)) || !(f->path = strdup(abs))) {
    free(f);
    return NULL;
  }
  f->dev = s->st_dev, f->ino = s->st_ino, f->scan_fd = -1, f->cfp.exists = -1, f->last = now();
  f->next = ovb_files, ovb_files = f;
  ovb_resize(f, s->st_size);
  f->hi = f->size;
  return f;
}

/* ------------------------------------------------------------ a copy's bytes */
static int same_file(int fd, const ovf *f) {
  struct stat s;
  return fstat(fd, &s) == 0 && s.st_dev == f->dev && s.st_ino == f->ino;
}

/* The copy, opened read-write (-1 when it cannot be found or opened). */
int ovb_open_copy(const ovf *f) {
  char p[PATH_MAX + 64];
  const char *root = hvd_ovl_root();
  int fd;
  if (root && snprintf(p, sizeof p, "%s%s", root, f->path) < (int)sizeof p &&
      (fd = ovb_L->openat(AT_FDCWD, p, O_RDWR | O_CLOEXEC | O_NOFOLLOW)) >= 0) {
    if (same_file(fd, f)) return fd;
    ovb_L->close(fd);
  }
  /* moved where the view did not see it (raw rename): through an fd open on it */
  for (int i = 0; i < HVD_OVB_FDMAX && f->scan_fd < 0; i++)
    if (hvd_ovb_fds[i] == f) ((ovf *)f)->scan_fd = i;
  if (f->scan_fd >= 0) {
    snprintf(p, sizeof p, "/proc/self/fd/%d", f->scan_fd);
    if ((fd = ovb_L->openat(AT_FDCWD, p, O_RDWR | O_CLOEXEC)) >= 0) {
      if (same_file(fd, f)) return fd;
      ovb_L->close(fd);
    }
  }
  return -1;
}

int ovb_buffers(void) {
  if (!ovb_buf1) ovb_buf1 = malloc((size_t)BS);
  if (!ovb_buf2) ovb_buf2 = malloc((size_t)BS);
  return ovb_buf1 && ovb_buf2 ? 0 : -1;
}

/* n bytes at `at`, all of them (a short transfer goes on; EINTR retried) */
static int full_io(int fd, unsigned char *b, off_t n, off_t at, int writing) {
  for (off_t done = 0; done < n;) {
    size_t k = (size_t)(n - done);
    ssize_t r = writing ? ovb_L->pwrite(fd, b + done, k, at + done) : ovb_L->pread(fd, b + done, k, at + done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    done += r;
  }
  return 0;
}

int ovb_read_full(int fd, unsigned char *b, off_t n, off_t at) { return full_io(fd, b, n, at, 0); }

int ovb_write_full(int fd, const unsigned char *b, off_t n, off_t at) {
  return full_io(fd, (unsigned char *)b, n, at, 1);
}

int ovb_punch(int fd, off_t off, off_t n) {
  if (ovb_L->fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, n) == 0) return 0;
  if (!ovb_no_punch++) {
    const char *t = getenv("TMPDIR");
    HVD_WARN("the file system of %s cannot free parts of files (%s): a rank's private files keep all their bytes",
             t && *t ? t : "/tmp", strerror(errno));
  }
  return -1;
}

/* Frees block b of f (copy fd): it becomes k (ZERO, AWAY, AWAY|DROPPED)
 * with hash h. */
int ovb_free_block(ovf *f, int fd, size_t b, int k, const uint64_t h[2]) {
  off_t n = blen(f, b);
  if (ovb_punch(fd, (off_t)b * BS, n)) return -1;
  ovb_set_kind(f, b, k & KIND);
  f->st[b] = (unsigned char)k;
  if (h) f->h[2 * b] = h[0], f->h[2 * b + 1] = h[1];
  if (k == ZERO) ovb_stats.zero += n;
  else if (k & DROPPED) ovb_stats.dropped += n;
  else ovb_stats.away += n;
  return 0;
}

/* ------------------------------------------------------------ fork */
static void at_prepare(void) { pthread_mutex_lock(&ovb_mu); }
static void at_parent(void) { pthread_mutex_unlock(&ovb_mu); }
static void at_child(void) {
  pthread_mutex_unlock(&ovb_mu);
  ovb_in_child = 1; /* the rank frees blocks; a child (a DataLoader worker) only writes back */
}
__attribute__((constructor)) static void ovb_atfork(void) { pthread_atfork(at_prepare, at_parent, at_child); }
