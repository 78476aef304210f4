/* The overlay's bytes: the layer's calls (overlay_bytes.h has the rules
 * and the locking, overlay_bytes_internal.h the layer's files in their
 * order).  Each takes ovb_mu and works on the tracked copies: the fds
 * opened on them (hvd_ovb_opened, _closing, _dup: which copy each fd
 * writes or reads, and how), the I/O on them (hvd_ovb_begin writes back the
 * freed blocks a call touches, hvd_ovb_end counts what it wrote and frees
 * over the cap; a write that finds no room, hvd_ovb_lose), the paths (a
 * read-open served rank 0's file or a memfd, hvd_ovb_serve; the view's
 * renames, removals and links), the start and the end.  Calls
 * overlay_bytes_pass.c (freeing, writing back), overlay_bytes_match.c and
 * overlay_bytes_file.c; called by overlay_fd.c and overlay_path.c, and by
 * tests/unit/overlay_view.c the same way. */
#define _GNU_SOURCE
#include "overlay_bytes.h"
#include "overlay_bytes_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../base/log.h"

static unsigned char fdkind[HVD_OVB_FDMAX]; /* kind | APPEND */

/* ------------------------------------------------------------ the start */
void hvd_ovb_init(const hvd_ovl_libc *libc, long long c, double quiet_scale) {
  ovb_L = libc;
  ovb_cap = c;
  ovb_quiet = quiet_scale;
}
int hvd_ovb_enabled(void) { return ovb_cap > 0; }
void hvd_ovb_set_gone(int (*gone)(void)) { ovb_rank0_gone = gone; }

/* ------------------------------------------------------------ fds */
static void untrack(int fd) {
  ovf *f = hvd_ovb_fds[fd];
  if (!f) return;
  int k = fdkind[fd] & KINDMASK;
  if (k == HVD_OVB_WRITER) f->nw--;
  else if (k == HVD_OVB_READER) f->nr--;
  else f->nrw--;
  hvd_ovb_fds[fd] = NULL, fdkind[fd] = 0;
  if (f->unlinked && !f->nw && !f->nr && !f->nrw && !f->inflight) ovb_free_file(f);
}

void hvd_ovb_opened(int fd, const char *abs, int k, int flags) {
  struct stat s;
  if (!ovb_cap || (unsigned)fd >= HVD_OVB_FDMAX || fstat(fd, &s) != 0 || !S_ISREG(s.st_mode)) return;
  pthread_mutex_lock(&ovb_mu);
  untrack(fd); /* closed where this layer did not see it */
  ovf *f = ovb_find(s.st_dev, s.st_ino);
  if (f) {
    ovb_set_path(f, abs);
    if (s.st_size != f->size) { /* emptied (O_TRUNC), or changed unseen */
      if (s.st_size && f->size % BS && kind(f, f->nb - 1) != PRIV) write_back_over(f, f->nb - 1, (long)f->nb - 1);
      ovb_resize(f, s.st_size);
    }
  } else {
    f = ovb_track(&s, abs);
  }
  if (f) {
    if (k == HVD_OVB_WRITER) f->nw++;
    else if (k == HVD_OVB_READER) f->nr++;
    else f->nrw++;
    hvd_ovb_fds[fd] = f;
    fdkind[fd] = (unsigned char)(k | ((flags & O_APPEND) ? APPEND : 0));
    if (k == HVD_OVB_STDIO_RW && has_freed(f)) write_back_over(f, 0, -1); /* (fopen made it whole before) */
  }
  pthread_mutex_unlock(&ovb_mu);
}

void hvd_ovb_closing(int fd) {
  if ((unsigned)fd >= HVD_OVB_FDMAX || !hvd_ovb_fds[fd]) return;
  pthread_mutex_lock(&ovb_mu);
  untrack(fd);
  pthread_mutex_unlock(&ovb_mu);
}

void hvd_ovb_dup(int from, int to) {
  if ((unsigned)from >= HVD_OVB_FDMAX || (unsigned)to >= HVD_OVB_FDMAX || from == to) return;
  if (!hvd_ovb_fds[from] && !hvd_ovb_fds[to]) return;
  pthread_mutex_lock(&ovb_mu);
  untrack(to);
  ovf *f = hvd_ovb_fds[from];
  if (f) {
    int k = fdkind[from] & KINDMASK;
    if (k == HVD_OVB_WRITER) f->nw++;
    else if (k == HVD_OVB_READER) f->nr++;
    else f->nrw++;
    hvd_ovb_fds[to] = f, fdkind[to] = fdkind[from];
  }
  pthread_mutex_unlock(&ovb_mu);
}

/* ------------------------------------------------------------ I/O */
int hvd_ovb_begin(int fd, off_t off, size_t len, int writing, hvd_ovb_io *io) {
  io->f = NULL;
  pthread_mutex_lock(&ovb_mu);
  ovf *f = hvd_ovb_of(fd);
  if (!f) {
    pthread_mutex_unlock(&ovb_mu);
    return 0;
  }
  if (off < 0) {
    struct stat s;
    off = (fdkind[fd] & APPEND) && writing ? (fstat(fd, &s) == 0 ? s.st_size : f->size) : lseek(fd, 0, SEEK_CUR);
    if (off < 0) off = 0;
  }
  int rc = 0;
  size_t tail = f->nb - 1;
  if (writing && f->size % BS && kind(f, tail) != PRIV && off + (off_t)len > f->size) rc = write_back_over(f, tail, (long)tail);
  if (!rc && has_freed(f) && len) {
    size_t b0 = (size_t)(off / BS), b1 = (size_t)((off + (off_t)len - 1) / BS);
    for (size_t b = b0; b <= b1 && b < f->nb && !rc; b++) {
      int k = kind(f, b);
      off_t s = (off_t)b * BS, e = s + blen(f, b);
      if (k == PRIV || (writing && k == LOST)) continue;
      if (writing && s >= off && e <= off + (off_t)len && (e - s == BS || e == f->size)) ovb_set_kind(f, b, PRIV); /* all rewritten */
      else rc = writing ? write_back_over(f, b, (long)b) : write_back_range(f, b, (long)b);
    }
  }
  if (!rc) {
    f->inflight++;
    io->f = f, io->off = off, io->len = len, io->writing = writing;
  }
  pthread_mutex_unlock(&ovb_mu);
  return rc;
}

int hvd_ovb_end(hvd_ovb_io *io, ssize_t done, int err) {
  ovf *f = io->f;
  int r = 0;
  if (!f) return 0;
  pthread_mutex_lock(&ovb_mu);
  f->inflight--;
  if (io->writing && done > 0) {
    off_t end = io->off + done;
    if (end > f->size) ovb_resize(f, end);
    if (end > f->hi) f->hi = end;
    for (size_t b = (size_t)(io->off / BS); b < f->nb && (off_t)b * BS < end; b++) f->st[b] &= (unsigned char)~DIFF;
    f->last = now();
  }
  if (io->writing && done < 0 && err == ENOSPC && !ovb_in_child) {
    /* room: what rank 0's files hold, waiting while they change (not again until they do), then dropping */
    long long freed = ovb_pass(NULL, 0);
    if (!freed && ovb_patience(NULL, 0) > 0) freed = ovb_settle(NULL, -1, QUIET_LONG, 1);
    if (!freed) freed = ovb_pass(NULL, 1);
    r = freed > 0 ? 1 : 2;
  } else if (io->writing && ovb_priv_total > ovb_cap && !ovb_in_child) {
    ovb_over_cap(f);
  }
  if (f->unlinked && !f->nw && !f->nr && !f->nrw && !f->inflight) ovb_free_file(f);
  pthread_mutex_unlock(&ovb_mu);
  return r;
}

ssize_t hvd_ovb_lose(int fd, hvd_ovb_io *io, int at) {
  pthread_mutex_lock(&ovb_mu);
  ovf *f = hvd_ovb_of(fd);
  off_t end = io->off + (off_t)io->len;
  if (!f || !io->len) {
    pthread_mutex_unlock(&ovb_mu);
    return errno = ENOSPC, -1;
  }
  int cp = ovb_open_copy(f);
  if (cp < 0 || (end > f->size && ovb_L->ftruncate(cp, end) != 0)) {
    if (cp >= 0) ovb_L->close(cp);
    pthread_mutex_unlock(&ovb_mu);
    return errno = ENOSPC, -1;
  }
  if (end > f->size && f->size % BS && kind(f, f->nb - 1) != PRIV && kind(f, f->nb - 1) != LOST)
    ovb_set_kind(f, f->nb - 1, LOST); /* its length changes: what it held is not kept either */
  if (end > f->size) ovb_resize(f, end);
  if (end > f->hi) f->hi = end;
  for (size_t b = (size_t)(io->off / BS); b < f->nb && (off_t)b * BS < end; b++) {
    off_t n = blen(f, b);
    if (kind(f, b) != LOST && !ovb_punch(cp, (off_t)b * BS, n)) ovb_set_kind(f, b, LOST), ovb_stats.lost += n;
  }
  ovb_L->close(cp);
  if (!f->warned++)
    HVD_WARN("TMPDIR is full: %s keeps no bytes from offset %lld on; a read-back gets rank 0's copy's, unchecked",
             where(f), (long long)io->off);
  if (!at) lseek(fd, end, SEEK_SET);
  pthread_mutex_unlock(&ovb_mu);
  return (ssize_t)io->len;
}

int hvd_ovb_mapping(int fd) {
  if (!hvd_ovb_of(fd)) return 0;
  pthread_mutex_lock(&ovb_mu);
  ovf *f = hvd_ovb_of(fd);
  int rc = 0;
  if (f && has_freed(f)) rc = write_back_range(f, 0, -1); /* no pass frees a block while it is mapped (scan) */
  pthread_mutex_unlock(&ovb_mu);
  return rc;
}

int hvd_ovb_truncating(int fd, const char *ov, off_t len) {
  struct stat s;
  if (!ovb_cap || len < 0) return 0;
  pthread_mutex_lock(&ovb_mu);
  ovf *f = fd >= 0 ? hvd_ovb_of(fd) : NULL;
  if (!f && ov && ovb_L->fstatat(AT_FDCWD, ov, &s, 0) == 0) f = ovb_find(s.st_dev, s.st_ino);
  int rc = 0;
  if (f) {
    /* the blocks holding the old end and the new one keep their bytes across the change */
    if (f->size % BS && kind(f, f->nb - 1) != PRIV) rc = write_back_over(f, f->nb - 1, (long)f->nb - 1);
    if (!rc && len < f->size && len % BS && kind(f, (size_t)(len / BS)) != PRIV)
      rc = write_back_over(f, (size_t)(len / BS), (long)(len / BS));
    if (!rc) ovb_resize(f, len);
  }
  pthread_mutex_unlock(&ovb_mu);
  return rc;
}

/* ------------------------------------------------------------ paths */
/* The fd to hand out for a read of f: rank 0's file (opened with flags)
 * when it holds every byte, checked against the hashes; else a memfd (RAM,
 * gone once closed) made of the copy's blocks and rank 0's, the latter
 * checked.  -1 with errno: EIO when bytes are gone, other: no memfd. */
static int hand_out(ovf *f, int flags) {
  int whole = !f->nw && !f->nrw && f->size == f->away, cfd = -1, cp = -1, mfd = -1, fd = -1;
  for (size_t b = 0; b < f->nb && whole; b++) whole = kind(f, b) == ZERO || kind(f, b) == AWAY;
  if (ovb_buffers()) return -1;
  flags &= O_CLOEXEC | O_NONBLOCK | O_NOATIME | O_NOCTTY;
  struct stat cs;
  /* (a FIFO at the path would block the open: a regular file only) */
  if (ovb_L->fstatat(AT_FDCWD, f->path, &cs, 0) == 0 && S_ISREG(cs.st_mode) &&
      (cfd = ovb_L->openat(AT_FDCWD, f->path, flags)) >= 0 &&
      (fstat(cfd, &cs) != 0 || !S_ISREG(cs.st_mode) || (whole && cs.st_size != f->size)))
    ovb_L->close(cfd), cfd = -1;
  if (cfd < 0) whole = 0;
  if (!whole && ((mfd = memfd_create("hvdshim-read-back", MFD_CLOEXEC)) < 0 || ovb_L->ftruncate(mfd, f->size) ||
                 (f->size > f->away && (cp = ovb_open_copy(f)) < 0)))
    goto out;
  for (size_t b = 0; b < f->nb; b++) {
    off_t n = blen(f, b), at = (off_t)b * BS;
    int k = kind(f, b);
    off_t data = k == PRIV && !whole ? lseek(cp, at, SEEK_DATA) : 0;
    if (!whole && (k == ZERO || (data < 0 ? errno == ENXIO : data >= at + n))) continue; /* zeros: the memfd's hole */
    if (k == PRIV) {
      if (ovb_read_full(cp, ovb_buf1, n, at) || ovb_write_full(mfd, ovb_buf1, n, at)) goto out;
      continue;
    }
    if (ovb_fetch(f, cfd, b) || (!whole && ovb_write_full(mfd, ovb_buf1, n, at))) goto out;
  }
  if (whole) {
    fd = cfd, cfd = -1;
    ovb_stats.served_real++;
  } else {
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", mfd);
    fd = ovb_L->openat(AT_FDCWD, p, O_RDONLY | flags); /* read-only, as asked */
    if (fd >= 0) ovb_stats.served_memory++;
  }
out:;
  int e = errno;
  if (cfd >= 0) ovb_L->close(cfd);
  if (cp >= 0) ovb_L->close(cp);
  if (mfd >= 0) ovb_L->close(mfd);
  errno = e;
  return fd;
}

int hvd_ovb_serve(const char *abs, const char *ov, int flags, int *fd) {
  struct stat s;
  if (!ovb_cap || ovb_L->fstatat(AT_FDCWD, ov, &s, 0) != 0 || !S_ISREG(s.st_mode)) return HVD_OVB_OWN;
  pthread_mutex_lock(&ovb_mu);
  ovf *f = ovb_find(s.st_dev, s.st_ino);
  int rc = HVD_OVB_OWN;
  /* a whole copy smaller than a block (or the cap): itself */
  if (!f || (!has_freed(f) && (flags < 0 || f->size - f->away < (ovb_cap < BS ? ovb_cap : BS)))) goto out;
  ovb_set_path(f, abs);
  if (s.st_size != f->size) { /* changed unseen */
    if (f->size % BS && kind(f, f->nb - 1) != PRIV && write_back_range(f, f->nb - 1, (long)f->nb - 1)) goto fail;
    ovb_resize(f, s.st_size);
  }
  if (flags >= 0 && !f->nw && !f->nrw && !f->inflight && !ovb_in_child && f->size > f->away) {
    ovb_settle(f, -1, ovb_patience(f, 0), 0); /* free the rest once rank 0's file has it (waiting while it writes) */
    if (!ovb_find(s.st_dev, s.st_ino)) goto out;
  }
  if (!has_freed(f)) goto out;
  /* a stdio stream that reads and writes it, or a copy that holds most of its bytes: the copy made whole */
  if (flags < 0 || f->size - f->away > f->away) {
    if (write_back_range(f, 0, -1)) goto fail;
    goto out;
  }
  uint64_t last = ovb_counterparts(f);
  double since = now();
  while ((*fd = hand_out(f, flags)) < 0 && errno == ESTALE) { /* rank 0 behind: its file does not hold them yet */
    if (!ovb_await_change(f, &last, &since, QUIET_LONG)) break;
    if (!f->nw && !f->nrw && !f->inflight && !ovb_in_child) ovb_pass(f, 0); /* what it holds now */
  }
  if (*fd >= 0) {
    rc = HVD_OVB_FD;
    if (f->size != f->away) {
      struct stat cs;
      int have = ovb_L->fstatat(AT_FDCWD, f->path, &cs, 0) == 0;
      for (size_t b = 0; b < f->nb; b++)
        if (kind(f, b) == PRIV)
          HVD_DEBUG("  private block %zu flags %d; rank 0's size %lld ctime age %.3f; nw %d nr %d nrw %d untr %d map %d inflight %d",
                    b, f->st[b], have ? (long long)cs.st_size : -1LL, have ? (double)time(NULL) - (double)cs.st_ctim.tv_sec : -1.0,
                    f->nw, f->nr, f->nrw, f->scan_untracked, f->scan_mapped, f->inflight);
    }
    HVD_DEBUG("read of %s: %s (%lld of its %lld bytes private)", where(f),
              f->size == f->away ? "rank 0's file" : "a memfd of its bytes and rank 0's", (long long)(f->size - f->away),
              (long long)f->size);
  } else if (errno == ESTALE ? ovb_gone(f) : write_back_range(f, 0, -1))
    goto fail;
  goto out;
fail:
  rc = HVD_OVB_FAIL;
out:
  pthread_mutex_unlock(&ovb_mu);
  return rc;
}

void hvd_ovb_renamed(const char *a, const char *b) {
  if (!ovb_cap || !strcmp(a, b)) return;
  size_t na = strlen(a);
  pthread_mutex_lock(&ovb_mu);
  for (ovf *f = ovb_files, *nx; f; f = nx) { /* what b named is gone */
    nx = f->next;
    if (!f->unlinked && !strcmp(f->path, b)) {
      f->unlinked = 1;
      if (!f->nw && !f->nr && !f->nrw && !f->inflight) ovb_free_file(f);
    }
  }
  for (ovf *f = ovb_files; f; f = f->next) {
    if (f->unlinked || strncmp(f->path, a, na) || (f->path[na] && f->path[na] != '/')) continue;
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s%s", b, f->path + na) < (int)sizeof p) ovb_set_path(f, p);
  }
  if (ovb_priv_total > ovb_cap && !ovb_in_child) ovb_over_cap(NULL); /* a file is complete, often (a temporary renamed into place) */
  pthread_mutex_unlock(&ovb_mu);
}

void hvd_ovb_removed(const char *a) {
  if (!ovb_cap) return;
  pthread_mutex_lock(&ovb_mu);
  for (ovf *f = ovb_files, *nx; f; f = nx) {
    nx = f->next;
    if (f->unlinked || strcmp(f->path, a)) continue;
    f->unlinked = 1;
    if (!f->nw && !f->nr && !f->nrw && !f->inflight) ovb_free_file(f);
  }
  pthread_mutex_unlock(&ovb_mu);
}

void hvd_ovb_linked(const char *ov) {
  struct stat s;
  if (!ovb_cap || ovb_L->fstatat(AT_FDCWD, ov, &s, 0) != 0) return;
  pthread_mutex_lock(&ovb_mu);
  ovf *f = ovb_find(s.st_dev, s.st_ino);
  if (f) {
    f->pinned = 1; /* its path is one of two names now: removing either must leave the bytes */
    if (has_freed(f)) write_back_over(f, 0, -1);
  }
  pthread_mutex_unlock(&ovb_mu);
}

int hvd_ovb_holds_all(const char *ov) {
  struct stat s;
  if (ovb_L->fstatat(AT_FDCWD, ov, &s, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(s.st_mode)) return 0;
  if (!ovb_cap) return 1;
  pthread_mutex_lock(&ovb_mu);
  ovf *f = ovb_find(s.st_dev, s.st_ino);
  int all = !f || !f->dropped;
  for (size_t b = 0; f && all && b < f->nb; b++)
    all = (kind(f, b) == PRIV || kind(f, b) == ZERO) && !(f->st[b] & DROPPED);
  pthread_mutex_unlock(&ovb_mu);
  return all;
}

void hvd_ovb_note(const char *abs, const char *ov) {
  struct stat s;
  if (!ovb_cap || ovb_L->fstatat(AT_FDCWD, ov, &s, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(s.st_mode)) return;
  pthread_mutex_lock(&ovb_mu);
  ovf *f = ovb_track(&s, abs);
  if (f && s.st_size != f->size) {
    if (f->size % BS && kind(f, f->nb - 1) != PRIV) write_back_over(f, f->nb - 1, (long)f->nb - 1);
    ovb_resize(f, s.st_size);
  }
  if (f && f->hi < f->size) f->hi = f->size;
  if (f && ovb_priv_total > ovb_cap && !ovb_in_child) ovb_over_cap(f);
  pthread_mutex_unlock(&ovb_mu);
}

/* ------------------------------------------------------------ the end, the figures */
void hvd_ovb_drop(void) {
  pthread_mutex_lock(&ovb_mu);
  for (int i = 0; i < HVD_OVB_FDMAX; i++)
    if (hvd_ovb_fds[i]) hvd_ovb_fds[i] = NULL, fdkind[i] = 0;
  while (ovb_files) {
    ovf *f = ovb_files;
    ovb_files = f->next;
    free(f->path), free(f->src), free(f->st), free(f->h), free(f);
  }
  ovb_priv_total = 0;
  pthread_mutex_unlock(&ovb_mu);
}

void hvd_ovb_get_stats(hvd_ovb_stats *s) {
  pthread_mutex_lock(&ovb_mu);
  *s = ovb_stats;
  s->private_bytes = ovb_priv_total;
  pthread_mutex_unlock(&ovb_mu);
}
