/* The overlay's bytes: rank 0's files (overlay_bytes.h has the rules,
 * overlay_bytes_internal.h the layer's files in their order).  A copy's
 * blocks are freed against rank 0's file at the same path (the
 * counterpart) or, when there is none yet, a file beside it that holds the
 * same bytes (a sibling: rank 0's temporary not yet renamed into place).
 * This file finds and opens them, fingerprints them (so a pass knows when
 * one changed), hashes a block (the hash kept for a freed block checks,
 * later, that rank 0's file still holds it: bytes are compared with memcmp
 * before a block goes away), fetches a freed block back, and tells how long
 * to wait for rank 0 while it writes: the signature of its files
 * (counterparts), patience, await_change (which drops ovb_mu while it
 * sleeps).  Calls the real libc through ovb_L and overlay_bytes_file.c. */
#define _GNU_SOURCE
#include "overlay_bytes_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../base/log.h"

/* ------------------------------------------------------------ hash */
/* 128 bits over 4 lanes of xxHash64's round; not for adversaries, for
 * telling whether rank 0's bytes are still the ones compared equal. */
#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL
static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t rnd(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
static inline uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  return h ^ (h >> 32);
}
void ovb_hash128(const unsigned char *p, size_t n, uint64_t out[2]) {
  uint64_t v1 = P1 + P2, v2 = P2, v3 = P5, v4 = 0 - P1, w[4];
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    memcpy(w, p + i, 32);
    v1 = rnd(v1, w[0]), v2 = rnd(v2, w[1]), v3 = rnd(v3, w[2]), v4 = rnd(v4, w[3]);
  }
  memset(w, 0, sizeof w);
  memcpy(w, p + i, n - i);
  v1 = rnd(v1, w[0] ^ n), v2 = rnd(v2, w[1]), v3 = rnd(v3, w[2]), v4 = rnd(v4, w[3] ^ (n * P4));
  out[0] = mix(rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18) + n);
  out[1] = mix((v1 ^ rotl(v2, 29)) + (rotl(v3, 43) ^ rotl(v4, 53)) + n * P5);
}

/* ------------------------------------------------------------ the counterpart, a sibling */
static void fprint_of(int fd, fprint *p) {
  struct stat s;
  memset(p, 0, sizeof *p);
  if (fd < 0 || fstat(fd, &s) != 0) return;
  p->exists = 1, p->dev = s.st_dev, p->ino = s.st_ino, p->size = s.st_size, p->mt = s.st_mtim, p->ct = s.st_ctim;
}
void ovb_fprint_at(const char *path, fprint *p) {
  struct stat s;
  memset(p, 0, sizeof *p);
  if (ovb_L->fstatat(AT_FDCWD, path, &s, 0) != 0 || !S_ISREG(s.st_mode)) return;
  p->exists = 1, p->dev = s.st_dev, p->ino = s.st_ino, p->size = s.st_size, p->mt = s.st_mtim, p->ct = s.st_ctim;
}
int ovb_same_fprint(const fprint *a, const fprint *b) {
  return a->exists == b->exists && (!a->exists || (a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
                                                   a->mt.tv_sec == b->mt.tv_sec && a->mt.tv_nsec == b->mt.tv_nsec &&
                                                   a->ct.tv_sec == b->ct.tv_sec && a->ct.tv_nsec == b->ct.tv_nsec));
}

static int open_regular(const char *path) {
  int fd = ovb_L->openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat s;
  if (fd >= 0 && (fstat(fd, &s) != 0 || !S_ISREG(s.st_mode))) ovb_L->close(fd), fd = -1;
  return fd;
}

/* The real file at the copy's path (rank 0's), read-only, or -1. */
int ovb_open_counterpart(const ovf *f, fprint *p) {
  int fd = open_regular(f->path);
  fprint_of(fd, p);
  return fd;
}

/* When there is none: the file its blocks were last freed against, or a
 * real file beside it, changed in the last two minutes, that holds the
 * copy's bytes at its first private block (up to 64 KiB): rank 0's same
 * file under another name, as when rank 0 is ahead and has renamed its
 * temporary into place already.  Only a source to free blocks against
 * (each compared whole); reads check the file at the copy's path.  Its
 * path in *used (malloc'd).  Uses buf2. */
int ovb_open_sibling(const ovf *f, int cp, fprint *p, char **used) {
  char dir[PATH_MAX], q[PATH_MAX];
  const char *slash = strrchr(f->path, '/');
  size_t b0 = 0;
  while (b0 < f->nb && kind(f, b0) != PRIV) b0++;
  off_t at = (off_t)b0 * BS, n = f->size - at < 65536 ? f->size - at : 65536;
  int best = -1;
  struct timespec t, bt = {0, 0};
  struct dirent64 *e;
  memset(p, 0, sizeof *p);
  if (f->src && strcmp(f->src, f->path) && (best = open_regular(f->src)) >= 0) {
    fprint_of(best, p);
    *used = strdup(f->src);
    return best;
  }
  if (!slash || n <= 0 || (size_t)(slash - f->path) >= sizeof dir || ovb_read_full(cp, ovb_buf2, n, at)) return -1;
  memcpy(dir, f->path, (size_t)(slash - f->path));
  dir[slash - f->path] = 0;
  DIR *d = ovb_L->opendir(dir[0] ? dir : "/");
  clock_gettime(CLOCK_REALTIME, &t);
  while (d && (e = ovb_L->readdir64(d))) {
    struct stat s;
    unsigned char head[4096];
    if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
    if (snprintf(q, sizeof q, "%s/%s", dir, e->d_name) >= (int)sizeof q || ovb_L->fstatat(AT_FDCWD, q, &s, 0) != 0 ||
        !S_ISREG(s.st_mode) || s.st_size < at + n || t.tv_sec - s.st_mtim.tv_sec > 120 ||
        (s.st_mtim.tv_sec < bt.tv_sec || (s.st_mtim.tv_sec == bt.tv_sec && s.st_mtim.tv_nsec <= bt.tv_nsec)))
      continue;
    int fd = open_regular(q);
    int same = fd >= 0;
    for (off_t o = 0; o < n && same; o += (off_t)sizeof head) {
      off_t k = n - o < (off_t)sizeof head ? n - o : (off_t)sizeof head;
      same = !ovb_read_full(fd, head, k, at + o) && !memcmp(head, ovb_buf2 + o, (size_t)k);
    }
    if (!same) {
      if (fd >= 0) ovb_L->close(fd);
      continue;
    }
    if (best >= 0) ovb_L->close(best);
    best = fd, bt = s.st_mtim;
    free(*used);
    *used = strdup(q);
  }
  if (d) ovb_L->closedir(d);
  fprint_of(best, p);
  return best;
}

/* ------------------------------------------------------------ a freed block, back */
/* Bytes of block b that left the copy (AWAY, LOST) from rank 0's file
 * (cfd) into buf1, AWAY ones checked against their hash.  0; 1 when rank
 * 0's file has other bytes there (in buf1); or -1 with errno ESTALE when
 * it has none there (now). */
int ovb_fetch(ovf *f, int cfd, size_t b) {
  off_t n = blen(f, b), at = (off_t)b * BS;
  uint64_t h[2];
  if (cfd < 0 || ovb_buffers() || ovb_read_full(cfd, ovb_buf1, n, at)) return errno = ESTALE, -1;
  if (kind(f, b) == ZERO) return is_zero(ovb_buf1, (size_t)n) ? 0 : 1;
  if (kind(f, b) == LOST) {
    if (!f->warned++)
      HVD_WARN("%s: some of the bytes this rank wrote were not kept (TMPDIR was full): read from rank 0's file, unchecked",
               where(f));
    return 0;
  }
  ovb_hash128(ovb_buf1, (size_t)n, h);
  return h[0] == f->h[2 * b] && h[1] == f->h[2 * b + 1] ? 0 : 1;
}

/* The bytes f's freed blocks held are gone: one line, EIO. */
int ovb_gone(ovf *f) {
  HVD_ERROR("cannot read back %s: bytes this rank wrote were freed %s, and rank 0's file no longer holds them "
            "(HVDSHIM_PRIVATE_BYTES=0 keeps every byte of a rank's private files)",
            where(f), f->dropped ? "when TMPDIR was full" : "as rank 0's file held them");
  return errno = EIO, -1;
}

/* ------------------------------------------------------------ waiting for rank 0 */
/* A summary of the counterparts of the copies that hold private bytes:
 * changes while rank 0 writes them. */
static uint64_t stat_sig(uint64_t sig, const char *path) {
  struct stat s;
  if (ovb_L->fstatat(AT_FDCWD, path, &s, 0) != 0) { /* none yet: its folder changes when rank 0 makes one */
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash || (size_t)(slash - path) >= sizeof dir) return rnd(sig, 1);
    memcpy(dir, path, (size_t)(slash - path)), dir[slash - path] = 0;
    if (ovb_L->fstatat(AT_FDCWD, dir[0] ? dir : "/", &s, 0) != 0) return rnd(sig, 2);
  }
  uint64_t w[5] = {(uint64_t)s.st_ino, (uint64_t)s.st_size, (uint64_t)s.st_mtim.tv_nsec, (uint64_t)s.st_ctim.tv_nsec,
                   (uint64_t)s.st_ctim.tv_sec};
  for (int i = 0; i < 5; i++) sig = rnd(sig, w[i]);
  return sig;
}
uint64_t ovb_counterparts(ovf *one) {
  uint64_t sig = 1;
  double t = now();
  for (ovf *f = ovb_files; f; f = f->next) {
    if (one ? f != one : f->unlinked || (f->size <= f->away && t - f->last > RECENT)) continue;
    sig = stat_sig(sig, f->path);
    if (f->src && strcmp(f->src, f->path)) sig = stat_sig(sig, f->src);
  }
  return sig;
}

/* How long to wait for rank 0 while its files do not change: QUIET_LONG
 * when it is writing one (shorter than this rank's copy, changed in the
 * last QUIET_LONG s); unless `writing` (only that counts), QUIET when one
 * of them, or where there is none yet its folder, changed in the last
 * QUIET s; else 0.  Its files: those of this rank's copies with private
 * bytes or written lately (`one`'s only), and the files their blocks were
 * freed against. */
static double patience_of(const char *path, off_t size, const struct timespec *t, int writing) {
  struct stat s;
  char dir[PATH_MAX];
  int there = ovb_L->fstatat(AT_FDCWD, path, &s, 0) == 0 && S_ISREG(s.st_mode);
  if (!there) {
    const char *slash = strrchr(path, '/');
    if (!slash || (size_t)(slash - path) >= sizeof dir) return 0;
    memcpy(dir, path, (size_t)(slash - path)), dir[slash - path] = 0;
    if (ovb_L->fstatat(AT_FDCWD, dir[0] ? dir : "/", &s, 0) != 0) return 0;
  }
  double age = (double)(t->tv_sec - s.st_ctim.tv_sec) + (double)(t->tv_nsec - s.st_ctim.tv_nsec) * 1e-9;
  if (there && s.st_size < size && age < QUIET_LONG) return QUIET_LONG;
  return age < QUIET && !writing ? QUIET : 0;
}
double ovb_patience(ovf *one, int writing) {
  struct timespec t;
  double n = now(), w = 0, x;
  clock_gettime(CLOCK_REALTIME, &t);
  for (ovf *f = ovb_files; f; f = f->next) {
    if (one ? f != one : f->unlinked || (f->size <= f->away && n - f->last > RECENT)) continue;
    if ((x = patience_of(f->path, f->size, &t, writing)) > w) w = x;
    if (f->src && strcmp(f->src, f->path) && (x = patience_of(f->src, f->size, &t, writing)) > w) w = x;
  }
  return w;
}

/* Rank 0's files for this rank's copies with private bytes (`one`'s only)
 * are all there, each as long as the copy and unchanged for 0.2 s: rank 0
 * has written them, and what a pass could not free then stays private
 * (blocks that differ, the copy's last part): waiting frees nothing more. */
int ovb_counterparts_settled(ovf *one) {
  struct timespec t;
  struct stat s;
  clock_gettime(CLOCK_REALTIME, &t);
  for (ovf *f = ovb_files; f; f = f->next) {
    if (one ? f != one : f->unlinked || f->size <= f->away) continue;
    const char *p = f->src ? f->src : f->path;
    if (ovb_L->fstatat(AT_FDCWD, p, &s, 0) != 0 || !S_ISREG(s.st_mode) || s.st_size < f->size ||
        (double)(t.tv_sec - s.st_ctim.tv_sec) + (double)(t.tv_nsec - s.st_ctim.tv_nsec) * 1e-9 <= 0.2)
      return 0;
  }
  return 1;
}

/* Waits (ovb_mu dropped) until rank 0's files for f change: 1; or until they
 * have been quiet for `wait` seconds since *since: 0.  *last: their state. */
int ovb_await_change(ovf *f, uint64_t *last, double *since, double wait) {
  dev_t dev = f->dev;
  ino_t ino = f->ino;
  while (now() - *since < wait && !ovb_in_child) {
    struct timespec ts = {0, 5000000};
    pthread_mutex_unlock(&ovb_mu);
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&ovb_mu);
    if (ovb_find(dev, ino) != f || RANK0_GONE()) return 0;
    uint64_t sig = ovb_counterparts(f);
    if (sig != *last) {
      *last = sig, *since = now();
      return 1;
    }
  }
  return 0;
}

/* Rank 0's file is complete (as long as the copy, unchanged for 0.2 s) and
 * every private block of the copy compared unequal to it: waiting for it
 * would free nothing more. */
int ovb_done_differing(ovf *f) {
  struct timespec t;
  struct stat s;
  for (size_t b = 0; b < f->nb; b++)
    if (kind(f, b) == PRIV && !(f->st[b] & DIFF)) return 0;
  /* rank 0's file under the name this copy had is still there: rank 0 has not renamed it into place yet */
  if (f->src && strcmp(f->src, f->path) && ovb_L->fstatat(AT_FDCWD, f->src, &s, 0) == 0) return 0;
  clock_gettime(CLOCK_REALTIME, &t);
  return f->cfp.exists == 1 && f->cfp.size >= f->size &&
         (double)(t.tv_sec - f->cfp.ct.tv_sec) + (double)(t.tv_nsec - f->cfp.ct.tv_nsec) * 1e-9 > 0.2;
}
