/* The overlay's bytes: freeing and writing back (overlay_bytes.h has the
 * rules, overlay_bytes_internal.h the layer's files in their order).
 *
 * A block is freed only when nothing can change it unseen: the copy has no
 * fd open in this process other than tracked writers, no mapping, no stdio
 * reader, and the block lies wholly before the furthest tracked write less
 * one block (the writer has moved on; a seek back writes it back first).
 * Passes (freeing) run in the thread of a write that took the private
 * bytes over the cap, of a read-open, or of a write that found no room; a
 * pass scans /proc/self/fd and /proc/self/maps for the fds and mappings of
 * the copies (ground truth: dup'd, inherited or raw fds count too).  Over
 * the cap, a write waits for rank 0's files while they change (settle,
 * await_rank0), and a sweeper thread passes again while they do.  A freed
 * block is written back (ovb_write_back) from rank 0's file before
 * anything reads or writes over it.  Calls overlay_bytes_match.c (rank 0's
 * files) and overlay_bytes_file.c (the blocks). */
#define _GNU_SOURCE
#include "overlay_bytes_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "../base/log.h"

/* ------------------------------------------------------------ writing back */
/* Writes back every block of f not PRIV (all of them when b1 < 0, else
 * those in [b0, b1]) from rank 0's file; when it does not hold them (yet:
 * rank 0 is behind, its temporary not yet renamed), waits while rank 0's
 * files change.  0, or -1 with errno (EIO: the bytes are gone).
 * `writing`: the block is about to be written (a seek back, an append to
 * its tail, a truncation), as rank 0 has written it too: when rank 0's
 * block has other bytes now (rank 0 ahead: a zip header already written
 * again after its data), they are the base the write goes over; when rank
 * 0 has none, the block is lost (kept as the write leaves it, read back
 * from rank 0's unchecked) rather than the write failing. */
int ovb_write_back(ovf *f, size_t b0, long b1, int writing) {
  int fd = -1, cfd = -1, rc = 0;
  fprint p;
  uint64_t last = 0;
  double since = 0;
  for (size_t b = b0; b < f->nb && (b1 < 0 || (long)b <= b1) && !rc; b++) {
    int k = kind(f, b);
    off_t n = blen(f, b), at = (off_t)b * BS;
    if (k == PRIV) continue;
    if (k == ZERO) {
      ovb_set_kind(f, b, PRIV);
      continue;
    }
    if (fd < 0 && (fd = ovb_open_copy(f)) < 0) {
      HVD_ERROR("cannot read back %s: its private copy cannot be found", where(f));
      errno = EIO, rc = -1;
      break;
    }
    if (cfd < 0) cfd = ovb_open_counterpart(f, &p);
    while ((rc = ovb_fetch(f, cfd, b)) < 0 || (rc > 0 && !writing)) {
      if (!since) last = ovb_counterparts(f), since = now();
      if (!ovb_await_change(f, &last, &since, QUIET_LONG)) break;
      if (cfd >= 0) ovb_L->close(cfd);
      cfd = ovb_open_counterpart(f, &p);
    }
    if (rc > 0 && writing) { /* rank 0's block as it is now: the base of this rank's same write */
      ovb_stats.rebased += n;
      rc = 0;
    } else if (rc < 0 && writing) {
      if (!f->warned++)
        HVD_WARN("%s: bytes this rank wrote and freed are not in rank 0's file any more; written over, the rest of "
                 "their block is not kept (a read-back gets rank 0's there, unchecked)", where(f));
      if (kind(f, b) != LOST) ovb_set_kind(f, b, PRIV), ovb_set_kind(f, b, LOST), ovb_stats.lost += n;
      rc = 0;
      continue;
    } else if (rc) {
      rc = ovb_gone(f);
      break;
    }
    rc = ovb_write_full(fd, ovb_buf1, n, at);
    if (rc && errno == ENOSPC && !ovb_in_child && (ovb_pass(NULL, 0) || ovb_pass(NULL, 1))) rc = ovb_write_full(fd, ovb_buf1, n, at); /* room */
    if (!rc) ovb_set_kind(f, b, PRIV), ovb_stats.restored += n, ovb_note_peak();
  }
  int e = errno;
  if (fd >= 0) ovb_L->close(fd);
  if (cfd >= 0) ovb_L->close(cfd);
  errno = e;
  return rc;
}

/* ------------------------------------------------------------ passes */
/* The fds and mappings of the copies in this process. */
static void scan(void) {
  for (ovf *f = ovb_files; f; f = f->next) f->scan_fds = f->scan_untracked = f->scan_mapped = 0, f->scan_fd = -1;
  DIR *d = ovb_L->opendir("/proc/self/fd");
  struct dirent64 *e;
  while (d && (e = ovb_L->readdir64(d))) {
    int fd = atoi(e->d_name);
    struct stat s;
    if (e->d_name[0] == '.' || fd == ovb_L->dirfd(d) || fstat(fd, &s) != 0 || !S_ISREG(s.st_mode)) continue;
    ovf *f = ovb_find(s.st_dev, s.st_ino);
    if (!f) continue;
    f->scan_fds++, f->scan_fd = fd;
    if (hvd_ovb_of(fd) != f) f->scan_untracked++;
  }
  if (d) ovb_L->closedir(d);
  int fd = ovb_L->openat(AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char b[8192];
  size_t have = 0;
  for (;;) {
    ssize_t n = ovb_L->read(fd, b + have, sizeof b - 1 - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += (size_t)n;
    b[have] = 0;
    char *line = b, *nl;
    while ((nl = strchr(line, '\n'))) {
      unsigned maj, min;
      unsigned long long ino;
      *nl = 0;
      if (sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) == 3 && ino) {
        ovf *f = ovb_find(makedev(maj, min), (ino_t)ino);
        if (f) f->scan_mapped = 1;
      }
      line = nl + 1;
    }
    have = (size_t)(b + have - line);
    memmove(b, line, have);
    if (have == sizeof b - 1) have = 0; /* a line longer than the buffer: its path only */
  }
  ovb_L->close(fd);
}

/* Private bytes of f that a pass may free: the end of the freeable blocks
 * (0: none). */
static off_t freeable_end(ovf *f) {
  if (f->unlinked || f->pinned || f->inflight || f->scan_mapped || f->nr || f->nrw || f->scan_untracked) return 0;
  if (!f->nw && !f->scan_fds) return f->size;
  if (f->unseen) return 0;
  off_t lim = f->hi - BS;
  return lim > 0 ? lim - lim % BS : 0;
}

/* One pass over the copies (only `one` when given): frees the blocks that
 * are zeros or that the counterpart holds (drop: every freeable private
 * block, its hash kept).  Returns the bytes freed. */
long long ovb_pass(ovf *one, int drop) {
  long long freed = 0;
  if (ovb_no_punch || ovb_in_child || ovb_buffers()) return 0;
  int any = 0;
  for (ovf *f = ovb_files; f && !any; f = f->next) any = (!one || f == one) && f->size > f->away && !f->unlinked;
  if (!any) return 0;
  scan();
  for (ovf *f = ovb_files; f && !ovb_no_punch; f = f->next) {
    if ((one && f != one) || f->size <= f->away) continue;
    off_t lim = freeable_end(f);
    size_t nb = (size_t)((lim + BS - 1) / BS), b, diff = 0;
    for (b = 0; b < nb && (kind(f, b) != PRIV || ((f->st[b] & DIFF) && !drop)); b++) diff += kind(f, b) == PRIV;
    if (b >= nb) { /* nothing new, unless rank 0's file changed since the blocks left compared unequal */
      fprint p;
      if (!diff) continue;
      ovb_fprint_at(f->path, &p);
      if (ovb_same_fprint(&p, &f->cfp)) continue;
      b = 0;
    }
    int fd = ovb_open_copy(f);
    if (fd < 0) continue;
    struct stat s;
    if (fstat(fd, &s) == 0 && s.st_size != f->size) { /* written where this layer could not see (stdio, a child) */
      if (f->nw || f->scan_fds) f->unseen = 1;
      if (f->size % BS && kind(f, f->nb - 1) != PRIV) write_back_over(f, f->nb - 1, (long)f->nb - 1);
      ovb_resize(f, s.st_size);
      if (f->unseen) {
        ovb_L->close(fd);
        continue;
      }
      nb = (size_t)((f->size + BS - 1) / BS);
    }
    fprint p;
    char *used = NULL;
    int cfd = ovb_open_counterpart(f, &p);
    if (cfd < 0 && !drop) cfd = ovb_open_sibling(f, fd, &p, &used);
    if (!ovb_same_fprint(&p, &f->cfp)) { /* compare them all again */
      for (size_t i = 0; i < f->nb; i++) f->st[i] &= (unsigned char)~DIFF;
      f->cfp = p;
      b = 0;
    }
    for (; b < nb && !ovb_no_punch; b++) {
      if (kind(f, b) != PRIV || ((f->st[b] & DIFF) && !drop)) continue;
      off_t n = blen(f, b), at = (off_t)b * BS;
      uint64_t h[2];
      off_t data = lseek(fd, at, SEEK_DATA);
      if ((data < 0 && errno == ENXIO) || data >= at + n) { /* a hole */
        if (!ovb_free_block(f, fd, b, ZERO, NULL)) freed += n;
        continue;
      }
      int theirs = cfd >= 0 && p.size >= at + n;
      if (cfd >= 0 && !theirs && !drop) break; /* rank 0 is not there yet, nor further on */
      if (ovb_read_full(fd, ovb_buf1, n, at)) continue;
      if (is_zero(ovb_buf1, (size_t)n)) {
        if (!ovb_free_block(f, fd, b, ZERO, NULL)) freed += n;
      } else if (theirs && !ovb_read_full(cfd, ovb_buf2, n, at) && !memcmp(ovb_buf1, ovb_buf2, (size_t)n)) {
        ovb_hash128(ovb_buf1, (size_t)n, h);
        if (!ovb_free_block(f, fd, b, AWAY, h)) freed += n;
        const char *from = used ? used : f->path; /* where rank 0 has them, until it renames it too */
        if (!f->src || strcmp(f->src, from)) free(f->src), f->src = strdup(from);
      } else if (drop) {
        ovb_hash128(ovb_buf1, (size_t)n, h);
        if (!ovb_free_block(f, fd, b, AWAY | DROPPED, h)) freed += n, f->dropped = 1;
        if (!f->warned++)
          HVD_WARN("TMPDIR is full: dropping the private bytes of %s that rank 0's file does not hold (yet); a read-back "
                   "needs rank 0's to hold the same bytes", where(f));
      } else {
        f->st[b] |= DIFF;
      }
    }
    ovb_L->close(fd);
    if (cfd >= 0) ovb_L->close(cfd);
    free(used);
  }
  return freed;
}

/* ------------------------------------------------------------ over the cap: waiting for rank 0 */
/* Passes until the private bytes are at most goal (goal < 0: until `one`
 * holds none; until_freed: until any are freed), waiting while the
 * counterparts change, up to `wait` seconds without a change.  Drops ovb_mu
 * while it sleeps. */
long long ovb_settle(ovf *one, long long goal, double wait, int until_freed) {
  long long freed = ovb_pass(one, 0);
  uint64_t last = ovb_counterparts(one);
  double changed = now();
  for (;;) {
    if (until_freed ? freed > 0 : goal >= 0 ? ovb_priv_total <= goal : one->size <= one->away) break;
    struct timespec ts = {0, 5000000};
    pthread_mutex_unlock(&ovb_mu);
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&ovb_mu);
    if (one && !ovb_find(one->dev, one->ino)) break; /* removed meanwhile (another thread) */
    if (RANK0_GONE()) break;                         /* nothing more comes (elastic: this rank is rank 0 now) */
    if (one && goal < 0 && !until_freed && ovb_done_differing(one)) break;
    uint64_t sig = ovb_counterparts(one);
    if (sig == last) {
      if (now() - changed >= wait || ovb_counterparts_settled(one)) break; /* (rank 0 done: nothing more frees) */
      continue;
    }
    last = sig, changed = now();
    freed += ovb_pass(one, 0);
  }
  return freed;
}

/* The sweeper: after a pass could not get the private bytes under the
 * cap, a thread (signals blocked) passes again every half second while
 * rank 0's files change, so what they come to hold is freed without the
 * script writing again; it ends once under half the cap, or when no copy
 * is left.  It holds ovb_mu only inside a pass. */
static int sweeping;
static void *sweep(void *arg) {
  (void)arg;
  pthread_mutex_lock(&ovb_mu);
  uint64_t last = 0;
  while (ovb_files && ovb_priv_total > ovb_cap / 2 && !ovb_in_child) {
    struct timespec ts = {0, 500000000};
    pthread_mutex_unlock(&ovb_mu);
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&ovb_mu);
    uint64_t sig = ovb_counterparts(NULL);
    if (sig != last) last = sig, ovb_pass(NULL, 0);
  }
  sweeping = 0;
  pthread_mutex_unlock(&ovb_mu);
  return NULL;
}
static void start_sweeper(void) {
  pthread_t t;
  pthread_attr_t a;
  sigset_t all, old;
  if (sweeping || ovb_in_child) return;
  sigfillset(&all);
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes no signal of the script's */
  sweeping = pthread_create(&t, &a, sweep, NULL) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&a);
}

/* Rank 0 is writing none of the files of this rank's copies, and the
 * copy `f` being written holds more private bytes than a writer keeps (two
 * blocks): rank 0 is behind (it has not begun this save yet: the ranks left
 * their last collective at different times) or never writes such a file (a
 * name of this rank's own).  Waits while rank 0's file for f, or where
 * there is none its folder, changes, QUIET_LONG at most without a change,
 * until f is down to two blocks; once rank 0 writes, as settle does.  No
 * change at all: f is this rank's own, not waited for again until it is
 * emptied. */
#define LAGGING(f) (!(f)->solo && !(f)->unlinked && (f)->size - (f)->away > 2 * BS)
static void await_rank0(ovf *f) {
  dev_t dev = f->dev;
  ino_t ino = f->ino;
  uint64_t last = ovb_counterparts(f);
  double since = now(), w;
  int changed = 0;
  while (ovb_priv_total > ovb_cap / 2 && ovb_find(dev, ino) == f && LAGGING(f)) {
    if ((w = ovb_patience(NULL, 1)) > 0) {
      ovb_settle(NULL, ovb_cap / 2, w, 0);
      return;
    }
    if (!ovb_await_change(f, &last, &since, QUIET_LONG)) break;
    changed = 1;
    ovb_pass(NULL, 0);
  }
  if (!changed && ovb_find(dev, ino) == f) f->solo = 1;
}

/* The private bytes are over the cap (f: the copy written, or NULL): free
 * what rank 0's copies hold, waiting for them while they change. */
void ovb_over_cap(ovf *f) {
  double t = now();
  if (ovb_grown >= 0 && ovb_grown < (ovb_cap / 4 > BS ? ovb_cap / 4 : BS)) { /* the last pass failed: not before more came */
    start_sweeper();
    return;
  }
  long long before = ovb_priv_total;
  ovb_pass(NULL, 0);
  long long mid = ovb_priv_total;
  ovb_grown = -1;
  if (ovb_priv_total <= ovb_cap / 2) goto out;
  double w = ovb_patience(NULL, 1); /* rank 0 writing one of them now */
  if (w > 0) ovb_settle(NULL, ovb_cap / 2, w, 0);
  else if (f && LAGGING(f)) await_rank0(f); /* rank 0 behind */
  if (ovb_priv_total > ovb_cap) ovb_grown = 0, start_sweeper();
out:
  HVD_DEBUG("private files over HVDSHIM_PRIVATE_BYTES: %lld bytes, %lld after a pass, %lld after %.3f s", before, mid,
            ovb_priv_total, now() - t);
}
