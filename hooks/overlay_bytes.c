/* The overlay's bytes: which bytes of this process's copies stay in its
 * overlay folder (see overlay_bytes.h for the rules and the locking).
 *
 * A copy is known by its inode (so a rename inside the overlay keeps it)
 * and by the real path it stands for (its "counterpart": the file rank 0
 * writes at the same path; the view's renames and removals move and drop
 * it).  Per 1 MiB block it holds a state: PRIV (the bytes are in the copy;
 * a hole there reads as zeros, as it would in the plain file), ZERO (a
 * hole, all zeros), AWAY (a hole; the counterpart held these bytes when
 * they were freed, and their hash is kept), LOST (a hole; not kept, no
 * hash: $TMPDIR had no room), plus flags.  A block is freed only when
 * nothing can change it unseen: the copy has no fd open in this process
 * other than tracked writers, no mapping, no stdio reader, and the block
 * lies wholly before the furthest tracked write less one block (the
 * writer has moved on; a seek back writes it back first).  Bytes are
 * compared with memcmp before a block goes away; the hash only checks,
 * later, that the counterpart still holds them.
 *
 * Passes (freeing) run in the thread of a write that took the private
 * bytes over the cap, of a read-open, or of a write that found no room; a
 * pass scans /proc/self/fd and /proc/self/maps for the fds and mappings
 * of the copies (ground truth: dup'd, inherited or raw fds count too). */
#define _GNU_SOURCE
#include "overlay_bytes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "../base/log.h"

#define BS ((off_t)1 << 20) /* block size */
/* block states (low bits) and flags */
enum { PRIV = 0, ZERO = 1, AWAY = 2, LOST = 3, KIND = 3, DIFF = 4, DROPPED = 8 };
enum { APPEND = 0x80, KINDMASK = 0x03 };
/* Waits for rank 0's files (bmu dropped while sleeping).  A write over the
 * cap, a read-open or a write that found no room waits only while rank 0
 * is writing files this rank wrote (one changed in the last QUIET seconds:
 * a replica would wait for it at its next collective anyway), until they
 * are QUIET that long; a block rank 0's file does not hold (yet: its
 * temporary not renamed into place), or no room left while rank 0 writes,
 * waits until they are QUIET_LONG.  × `quiet` (1; the unit test's less). */
#define QUIET (2.0 * quiet)
#define QUIET_LONG (10.0 * quiet)
#define RECENT 60.0 /* s: rank 0 writing the file of a copy written this recently is progress too */

typedef struct {
  int exists;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mt, ct;
} fprint;

typedef struct hvd_ovb_file {
  dev_t dev;
  ino_t ino;
  char *path;            /* the real path it stands for */
  char *src;             /* rank 0's file its blocks were last freed against (NULL: path) */
  off_t size;            /* its size as far as this layer knows */
  off_t hi;              /* end of the furthest tracked write */
  off_t away;            /* bytes in blocks not PRIV */
  size_t nb, capb;
  unsigned char *st;     /* per block: state | flags */
  uint64_t *h;           /* per block: 2 words of hash (AWAY) */
  int nw, nr, nrw;       /* tracked fds: writers, readers, stdio read-write */
  int inflight;          /* tracked calls between begin and end */
  int unseen, unlinked, warned, dropped;
  int pinned;            /* keeps every byte (another name links it) */
  int solo;              /* rank 0 made no file for it while this rank waited: no more waits until it is emptied */
  int scan_fds, scan_untracked, scan_mapped, scan_fd; /* from the last scan */
  fprint cfp;            /* the counterpart under which the DIFF flags hold */
  double last;           /* last tracked write */
  struct hvd_ovb_file *next;
} ovf;

struct hvd_ovb_file *hvd_ovb_fds[HVD_OVB_FDMAX];
static unsigned char fdkind[HVD_OVB_FDMAX]; /* kind | APPEND */
static const hvd_ovl_libc *L;
static long long cap;
static double quiet = 1;
static pthread_mutex_t bmu = PTHREAD_MUTEX_INITIALIZER;
static ovf *files;
static long long priv_total;
static hvd_ovb_stats stats;
static int in_child, no_punch;
static unsigned char *buf1, *buf2; /* two blocks (under bmu) */
static long long grown = -1;       /* private bytes added since a cap pass could not get under it (-1: none failed) */

static int read_full(int fd, unsigned char *b, off_t n, off_t at);
static uint64_t counterparts(ovf *one);
static int await_change(ovf *f, uint64_t *last, double *since, double wait);
static double patience(ovf *one, int writing);
static long long pass(ovf *one, int drop);
static int write_back_range_(ovf *f, size_t b0, long b1, int writing);
/* The bytes must be the ones written (reads, mappings): */
static inline int write_back_range(ovf *f, size_t b0, long b1) { return write_back_range_(f, b0, b1, 0); }
/* ... or they are about to be written over, as rank 0 has: */
static inline int write_back_over(ovf *f, size_t b0, long b1) { return write_back_range_(f, b0, b1, 1); }

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

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
static void hash128(const unsigned char *p, size_t n, uint64_t out[2]) {
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

static int is_zero(const unsigned char *p, size_t n) { return !n || (!p[0] && !memcmp(p, p + 1, n - 1)); }

/* ------------------------------------------------------------ files (under bmu) */
void hvd_ovb_init(const hvd_ovl_libc *libc, long long c, double quiet_scale) {
  L = libc;
  cap = c;
  quiet = quiet_scale;
}
int hvd_ovb_enabled(void) { return cap > 0; }

static off_t blen(const ovf *f, size_t b) {
  off_t s = (off_t)b * BS;
  return f->size > s ? (f->size - s < BS ? f->size - s : BS) : 0;
}
static int kind(const ovf *f, size_t b) { return f->st[b] & KIND; }
static int has_freed(const ovf *f) { return f->away > 0 || (f->nb && kind(f, f->nb - 1) != PRIV); }

static void note_peak(void) {
  if (priv_total > stats.peak_private) stats.peak_private = priv_total;
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

static void set_kind(ovf *f, size_t b, int k) {
  int was = kind(f, b);
  off_t n = blen(f, b);
  if (was == PRIV && k != PRIV) f->away += n, priv_total -= n;
  if (was != PRIV && k == PRIV) f->away -= n, priv_total += n, grown += grown >= 0 ? n : 0;
  f->st[b] = (unsigned char)k;
}

/* A new size: blocks past it become PRIV (gone), the private total follows.
 * The caller made the block holding the old end PRIV when it was partial
 * and not PRIV (its length changes). */
static void resize(ovf *f, off_t size) {
  if (size < f->size) {
    f->solo = 0; /* written again (O_TRUNC): rank 0 may be behind this time */
    for (size_t b = (size_t)((size + BS - 1) / BS); b < f->nb; b++) set_kind(f, b, PRIV);
    if (size % BS && kind(f, (size_t)(size / BS)) != PRIV) set_kind(f, (size_t)(size / BS), PRIV);
  }
  if (fit(f, size) && size > f->size) return; /* no memory: keep the old view, the bytes stay private */
  priv_total += size - f->size;
  if (grown >= 0 && size > f->size) grown += size - f->size;
  f->size = size;
  if (f->nb > (size_t)((size + BS - 1) / BS)) f->nb = (size_t)((size + BS - 1) / BS);
  if (f->hi > size) f->hi = size;
  note_peak();
}

static ovf *find(dev_t dev, ino_t ino) {
  for (ovf *f = files; f; f = f->next)
    if (f->dev == dev && f->ino == ino) return f;
  return NULL;
}

static void free_file(ovf *f) {
  for (ovf **p = &files; *p; p = &(*p)->next)
    if (*p == f) {
      *p = f->next;
      break;
    }
  priv_total -= f->size - f->away;
  free(f->path);
  free(f->src);
  free(f->st);
  free(f->h);
  free(f);
}

static void set_path(ovf *f, const char *abs) {
  if (f->path && !strcmp(f->path, abs)) return;
  char *p = strdup(abs);
  if (!p) return;
  free(f->path);
  f->path = p;
  f->cfp.exists = -1; /* another counterpart */
}

static ovf *track(const struct stat *s, const char *abs) {
  ovf *f = find(s->st_dev, s->st_ino);
  if (f) {
    set_path(f, abs);
    return f;
  }
  if (!(f = calloc(1, sizeof *f)) || !(f->path = strdup(abs))) {
    free(f);
    return NULL;
  }
  f->dev = s->st_dev, f->ino = s->st_ino, f->scan_fd = -1, f->cfp.exists = -1, f->last = now();
  f->next = files, files = f;
  resize(f, s->st_size);
  f->hi = f->size;
  return f;
}

/* ------------------------------------------------------------ the copy and its counterpart */
static int same_file(int fd, const ovf *f) {
  struct stat s;
  return fstat(fd, &s) == 0 && s.st_dev == f->dev && s.st_ino == f->ino;
}

/* The copy, opened read-write (-1 when it cannot be found or opened). */
static int open_copy(const ovf *f) {
  char p[PATH_MAX + 64];
  const char *root = hvd_ovl_root();
  int fd;
  if (root && snprintf(p, sizeof p, "%s%s", root, f->path) < (int)sizeof p &&
      (fd = L->openat(AT_FDCWD, p, O_RDWR | O_CLOEXEC | O_NOFOLLOW)) >= 0) {
    if (same_file(fd, f)) return fd;
    L->close(fd);
  }
  /* moved where the view did not see it (raw rename): through an fd open on it */
  for (int i = 0; i < HVD_OVB_FDMAX && f->scan_fd < 0; i++)
    if (hvd_ovb_fds[i] == f) ((ovf *)f)->scan_fd = i;
  if (f->scan_fd >= 0) {
    snprintf(p, sizeof p, "/proc/self/fd/%d", f->scan_fd);
    if ((fd = L->openat(AT_FDCWD, p, O_RDWR | O_CLOEXEC)) >= 0) {
      if (same_file(fd, f)) return fd;
      L->close(fd);
    }
  }
  return -1;
}

static void fprint_of(int fd, fprint *p) {
  struct stat s;
  memset(p, 0, sizeof *p);
  if (fd < 0 || fstat(fd, &s) != 0) return;
  p->exists = 1, p->dev = s.st_dev, p->ino = s.st_ino, p->size = s.st_size, p->mt = s.st_mtim, p->ct = s.st_ctim;
}
static void fprint_at(const char *path, fprint *p) {
  struct stat s;
  memset(p, 0, sizeof *p);
  if (L->fstatat(AT_FDCWD, path, &s, 0) != 0 || !S_ISREG(s.st_mode)) return;
  p->exists = 1, p->dev = s.st_dev, p->ino = s.st_ino, p->size = s.st_size, p->mt = s.st_mtim, p->ct = s.st_ctim;
}
static int same_fprint(const fprint *a, const fprint *b) {
  return a->exists == b->exists && (!a->exists || (a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
                                                   a->mt.tv_sec == b->mt.tv_sec && a->mt.tv_nsec == b->mt.tv_nsec &&
                                                   a->ct.tv_sec == b->ct.tv_sec && a->ct.tv_nsec == b->ct.tv_nsec));
}

static int open_regular(const char *path) {
  int fd = L->openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat s;
  if (fd >= 0 && (fstat(fd, &s) != 0 || !S_ISREG(s.st_mode))) L->close(fd), fd = -1;
  return fd;
}

/* The real file at the copy's path (rank 0's), read-only, or -1. */
static int open_counterpart(const ovf *f, fprint *p) {
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
static int open_sibling(const ovf *f, int cp, fprint *p, char **used) {
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
  if (!slash || n <= 0 || (size_t)(slash - f->path) >= sizeof dir || read_full(cp, buf2, n, at)) return -1;
  memcpy(dir, f->path, (size_t)(slash - f->path));
  dir[slash - f->path] = 0;
  DIR *d = L->opendir(dir[0] ? dir : "/");
  clock_gettime(CLOCK_REALTIME, &t);
  while (d && (e = L->readdir64(d))) {
    struct stat s;
    unsigned char head[4096];
    if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
    if (snprintf(q, sizeof q, "%s/%s", dir, e->d_name) >= (int)sizeof q || L->fstatat(AT_FDCWD, q, &s, 0) != 0 ||
        !S_ISREG(s.st_mode) || s.st_size < at + n || t.tv_sec - s.st_mtim.tv_sec > 120 ||
        (s.st_mtim.tv_sec < bt.tv_sec || (s.st_mtim.tv_sec == bt.tv_sec && s.st_mtim.tv_nsec <= bt.tv_nsec)))
      continue;
    int fd = open_regular(q);
    int same = fd >= 0;
    for (off_t o = 0; o < n && same; o += (off_t)sizeof head) {
      off_t k = n - o < (off_t)sizeof head ? n - o : (off_t)sizeof head;
      same = !read_full(fd, head, k, at + o) && !memcmp(head, buf2 + o, (size_t)k);
    }
    if (!same) {
      if (fd >= 0) L->close(fd);
      continue;
    }
    if (best >= 0) L->close(best);
    best = fd, bt = s.st_mtim;
    free(*used);
    *used = strdup(q);
  }
  if (d) L->closedir(d);
  fprint_of(best, p);
  return best;
}

static int buffers(void) {
  if (!buf1) buf1 = malloc((size_t)BS);
  if (!buf2) buf2 = malloc((size_t)BS);
  return buf1 && buf2 ? 0 : -1;
}

static int read_full(int fd, unsigned char *b, off_t n, off_t at) {
  for (off_t got = 0; got < n;) {
    ssize_t r = L->pread(fd, b + got, (size_t)(n - got), at + got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += r;
  }
  return 0;
}

static int write_full(int fd, const unsigned char *b, off_t n, off_t at) {
  for (off_t put = 0; put < n;) {
    ssize_t r = L->pwrite(fd, b + put, (size_t)(n - put), at + put);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    put += r;
  }
  return 0;
}

static int punch(int fd, off_t off, off_t n) {
  if (L->fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, n) == 0) return 0;
  if (!no_punch++) {
    const char *t = getenv("TMPDIR");
    HVD_WARN("the file system of %s cannot free parts of files (%s): a rank's private files keep all their bytes",
             t && *t ? t : "/tmp", strerror(errno));
  }
  return -1;
}

/* Frees block b of f (copy fd): it becomes k (ZERO, AWAY, AWAY|DROPPED)
 * with hash h. */
static int free_block(ovf *f, int fd, size_t b, int k, const uint64_t h[2]) {
  off_t n = blen(f, b);
  if (punch(fd, (off_t)b * BS, n)) return -1;
  set_kind(f, b, k & KIND);
  f->st[b] = (unsigned char)k;
  if (h) f->h[2 * b] = h[0], f->h[2 * b + 1] = h[1];
  if (k == ZERO) stats.zero += n;
  else if (k & DROPPED) stats.dropped += n;
  else stats.away += n;
  return 0;
}

static const char *where(const ovf *f) { return f->path; }

/* Bytes of block b that left the copy (AWAY, LOST) from rank 0's file
 * (cfd) into buf1, AWAY ones checked against their hash.  0; 1 when rank
 * 0's file has other bytes there (in buf1); or -1 with errno ESTALE when
 * it has none there (now). */
static int fetch(ovf *f, int cfd, size_t b) {
  off_t n = blen(f, b), at = (off_t)b * BS;
  uint64_t h[2];
  if (cfd < 0 || buffers() || read_full(cfd, buf1, n, at)) return errno = ESTALE, -1;
  if (kind(f, b) == ZERO) return is_zero(buf1, (size_t)n) ? 0 : 1;
  if (kind(f, b) == LOST) {
    if (!f->warned++)
      HVD_WARN("%s: some of the bytes this rank wrote were not kept (TMPDIR was full): read from rank 0's file, unchecked",
               where(f));
    return 0;
  }
  hash128(buf1, (size_t)n, h);
  return h[0] == f->h[2 * b] && h[1] == f->h[2 * b + 1] ? 0 : 1;
}

/* The bytes f's freed blocks held are gone: one line, EIO. */
static int gone(ovf *f) {
  HVD_ERROR("cannot read back %s: bytes this rank wrote were freed %s, and rank 0's file no longer holds them "
            "(HVDSHIM_PRIVATE_BYTES=0 keeps every byte of a rank's private files)",
            where(f), f->dropped ? "when TMPDIR was full" : "as rank 0's file held them");
  return errno = EIO, -1;
}

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
static int write_back_range_(ovf *f, size_t b0, long b1, int writing) {
  int fd = -1, cfd = -1, rc = 0;
  fprint p;
  uint64_t last = 0;
  double since = 0;
  for (size_t b = b0; b < f->nb && (b1 < 0 || (long)b <= b1) && !rc; b++) {
    int k = kind(f, b);
    off_t n = blen(f, b), at = (off_t)b * BS;
    if (k == PRIV) continue;
    if (k == ZERO) {
      set_kind(f, b, PRIV);
      continue;
    }
    if (fd < 0 && (fd = open_copy(f)) < 0) {
      HVD_ERROR("cannot read back %s: its private copy cannot be found", where(f));
      errno = EIO, rc = -1;
      break;
    }
    if (cfd < 0) cfd = open_counterpart(f, &p);
    while ((rc = fetch(f, cfd, b)) < 0 || (rc > 0 && !writing)) {
      if (!since) last = counterparts(f), since = now();
      if (!await_change(f, &last, &since, QUIET_LONG)) break;
      if (cfd >= 0) L->close(cfd);
      cfd = open_counterpart(f, &p);
    }
    if (rc > 0 && writing) { /* rank 0's block as it is now: the base of this rank's same write */
      stats.rebased += n;
      rc = 0;
    } else if (rc < 0 && writing) {
      if (!f->warned++)
        HVD_WARN("%s: bytes this rank wrote and freed are not in rank 0's file any more; written over, the rest of "
                 "their block is not kept (a read-back gets rank 0's there, unchecked)", where(f));
      if (kind(f, b) != LOST) set_kind(f, b, PRIV), set_kind(f, b, LOST), stats.lost += n;
      rc = 0;
      continue;
    } else if (rc) {
      rc = gone(f);
      break;
    }
    rc = write_full(fd, buf1, n, at);
    if (rc && errno == ENOSPC && !in_child && (pass(NULL, 0) || pass(NULL, 1))) rc = write_full(fd, buf1, n, at); /* room */
    if (!rc) set_kind(f, b, PRIV), stats.restored += n, note_peak();
  }
  int e = errno;
  if (fd >= 0) L->close(fd);
  if (cfd >= 0) L->close(cfd);
  errno = e;
  return rc;
}

/* ------------------------------------------------------------ passes */
/* The fds and mappings of the copies in this process. */
static void scan(void) {
  for (ovf *f = files; f; f = f->next) f->scan_fds = f->scan_untracked = f->scan_mapped = 0, f->scan_fd = -1;
  DIR *d = L->opendir("/proc/self/fd");
  struct dirent64 *e;
  while (d && (e = L->readdir64(d))) {
    int fd = atoi(e->d_name);
    struct stat s;
    if (e->d_name[0] == '.' || fd == L->dirfd(d) || fstat(fd, &s) != 0 || !S_ISREG(s.st_mode)) continue;
    ovf *f = find(s.st_dev, s.st_ino);
    if (!f) continue;
    f->scan_fds++, f->scan_fd = fd;
    if (hvd_ovb_of(fd) != f) f->scan_untracked++;
  }
  if (d) L->closedir(d);
  int fd = L->openat(AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char b[8192];
  size_t have = 0;
  for (;;) {
    ssize_t n = L->read(fd, b + have, sizeof b - 1 - have);
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
        ovf *f = find(makedev(maj, min), (ino_t)ino);
        if (f) f->scan_mapped = 1;
      }
      line = nl + 1;
    }
    have = (size_t)(b + have - line);
    memmove(b, line, have);
    if (have == sizeof b - 1) have = 0; /* a line longer than the buffer: its path only */
  }
  L->close(fd);
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
static long long pass(ovf *one, int drop) {
  long long freed = 0;
  if (no_punch || in_child || buffers()) return 0;
  int any = 0;
  for (ovf *f = files; f && !any; f = f->next) any = (!one || f == one) && f->size > f->away && !f->unlinked;
  if (!any) return 0;
  scan();
  for (ovf *f = files; f && !no_punch; f = f->next) {
    if ((one && f != one) || f->size <= f->away) continue;
    off_t lim = freeable_end(f);
    size_t nb = (size_t)((lim + BS - 1) / BS), b, diff = 0;
    for (b = 0; b < nb && (kind(f, b) != PRIV || ((f->st[b] & DIFF) && !drop)); b++) diff += kind(f, b) == PRIV;
    if (b >= nb) { /* nothing new, unless rank 0's file changed since the blocks left compared unequal */
      fprint p;
      if (!diff) continue;
      fprint_at(f->path, &p);
      if (same_fprint(&p, &f->cfp)) continue;
      b = 0;
    }
    int fd = open_copy(f);
    if (fd < 0) continue;
    struct stat s;
    if (fstat(fd, &s) == 0 && s.st_size != f->size) { /* written where this layer could not see (stdio, a child) */
      if (f->nw || f->scan_fds) f->unseen = 1;
      if (f->size % BS && kind(f, f->nb - 1) != PRIV) write_back_over(f, f->nb - 1, (long)f->nb - 1);
      resize(f, s.st_size);
      if (f->unseen) {
        L->close(fd);
        continue;
      }
      nb = (size_t)((f->size + BS - 1) / BS);
    }
    fprint p;
    char *used = NULL;
    int cfd = open_counterpart(f, &p);
    if (cfd < 0 && !drop) cfd = open_sibling(f, fd, &p, &used);
    if (!same_fprint(&p, &f->cfp)) { /* compare them all again */
      for (size_t i = 0; i < f->nb; i++) f->st[i] &= (unsigned char)~DIFF;
      f->cfp = p;
      b = 0;
    }
    for (; b < nb && !no_punch; b++) {
      if (kind(f, b) != PRIV || ((f->st[b] & DIFF) && !drop)) continue;
      off_t n = blen(f, b), at = (off_t)b * BS;
      uint64_t h[2];
      off_t data = lseek(fd, at, SEEK_DATA);
      if ((data < 0 && errno == ENXIO) || data >= at + n) { /* a hole */
        if (!free_block(f, fd, b, ZERO, NULL)) freed += n;
        continue;
      }
      int theirs = cfd >= 0 && p.size >= at + n;
      if (cfd >= 0 && !theirs && !drop) break; /* rank 0 is not there yet, nor further on */
      if (read_full(fd, buf1, n, at)) continue;
      if (is_zero(buf1, (size_t)n)) {
        if (!free_block(f, fd, b, ZERO, NULL)) freed += n;
      } else if (theirs && !read_full(cfd, buf2, n, at) && !memcmp(buf1, buf2, (size_t)n)) {
        hash128(buf1, (size_t)n, h);
        if (!free_block(f, fd, b, AWAY, h)) freed += n;
        const char *from = used ? used : f->path; /* where rank 0 has them, until it renames it too */
        if (!f->src || strcmp(f->src, from)) free(f->src), f->src = strdup(from);
      } else if (drop) {
        hash128(buf1, (size_t)n, h);
        if (!free_block(f, fd, b, AWAY | DROPPED, h)) freed += n, f->dropped = 1;
        if (!f->warned++)
          HVD_WARN("TMPDIR is full: dropping the private bytes of %s that rank 0's file does not hold (yet); a read-back "
                   "needs rank 0's to hold the same bytes", where(f));
      } else {
        f->st[b] |= DIFF;
      }
    }
    L->close(fd);
    if (cfd >= 0) L->close(cfd);
    free(used);
  }
  return freed;
}

/* A summary of the counterparts of the copies that hold private bytes:
 * changes while rank 0 writes them. */
static uint64_t stat_sig(uint64_t sig, const char *path) {
  struct stat s;
  if (L->fstatat(AT_FDCWD, path, &s, 0) != 0) { /* none yet: its folder changes when rank 0 makes one */
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash || (size_t)(slash - path) >= sizeof dir) return rnd(sig, 1);
    memcpy(dir, path, (size_t)(slash - path)), dir[slash - path] = 0;
    if (L->fstatat(AT_FDCWD, dir[0] ? dir : "/", &s, 0) != 0) return rnd(sig, 2);
  }
  uint64_t w[5] = {(uint64_t)s.st_ino, (uint64_t)s.st_size, (uint64_t)s.st_mtim.tv_nsec, (uint64_t)s.st_ctim.tv_nsec,
                   (uint64_t)s.st_ctim.tv_sec};
  for (int i = 0; i < 5; i++) sig = rnd(sig, w[i]);
  return sig;
}
static uint64_t counterparts(ovf *one) {
  uint64_t sig = 1;
  double t = now();
  for (ovf *f = files; f; f = f->next) {
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
  int there = L->fstatat(AT_FDCWD, path, &s, 0) == 0 && S_ISREG(s.st_mode);
  if (!there) {
    const char *slash = strrchr(path, '/');
    if (!slash || (size_t)(slash - path) >= sizeof dir) return 0;
    memcpy(dir, path, (size_t)(slash - path)), dir[slash - path] = 0;
    if (L->fstatat(AT_FDCWD, dir[0] ? dir : "/", &s, 0) != 0) return 0;
  }
  double age = (double)(t->tv_sec - s.st_ctim.tv_sec) + (double)(t->tv_nsec - s.st_ctim.tv_nsec) * 1e-9;
  if (there && s.st_size < size && age < QUIET_LONG) return QUIET_LONG;
  return age < QUIET && !writing ? QUIET : 0;
}
static double patience(ovf *one, int writing) {
  struct timespec t;
  double n = now(), w = 0, x;
  clock_gettime(CLOCK_REALTIME, &t);
  for (ovf *f = files; f; f = f->next) {
    if (one ? f != one : f->unlinked || (f->size <= f->away && n - f->last > RECENT)) continue;
    if ((x = patience_of(f->path, f->size, &t, writing)) > w) w = x;
    if (f->src && strcmp(f->src, f->path) && (x = patience_of(f->src, f->size, &t, writing)) > w) w = x;
  }
  return w;
}

/* Waits (bmu dropped) until rank 0's files for f change: 1; or until they
 * have been quiet for `wait` seconds since *since: 0.  *last: their state. */
static int await_change(ovf *f, uint64_t *last, double *since, double wait) {
  dev_t dev = f->dev;
  ino_t ino = f->ino;
  while (now() - *since < wait && !in_child) {
    struct timespec ts = {0, 5000000};
    pthread_mutex_unlock(&bmu);
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&bmu);
    if (find(dev, ino) != f) return 0;
    uint64_t sig = counterparts(f);
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
static int done_differing(ovf *f) {
  struct timespec t;
  struct stat s;
  for (size_t b = 0; b < f->nb; b++)
    if (kind(f, b) == PRIV && !(f->st[b] & DIFF)) return 0;
  /* rank 0's file under the name this copy had is still there: rank 0 has not renamed it into place yet */
  if (f->src && strcmp(f->src, f->path) && L->fstatat(AT_FDCWD, f->src, &s, 0) == 0) return 0;
  clock_gettime(CLOCK_REALTIME, &t);
  return f->cfp.exists == 1 && f->cfp.size >= f->size &&
         (double)(t.tv_sec - f->cfp.ct.tv_sec) + (double)(t.tv_nsec - f->cfp.ct.tv_nsec) * 1e-9 > 0.2;
}

/* Passes until the private bytes are at most goal (goal < 0: until `one`
 * holds none; until_freed: until any are freed), waiting while the
 * counterparts change, up to `wait` seconds without a change.  Drops bmu
 * while it sleeps. */
static long long settle(ovf *one, long long goal, double wait, int until_freed) {
  long long freed = pass(one, 0);
  uint64_t last = counterparts(one);
  double changed = now();
  for (;;) {
    if (until_freed ? freed > 0 : goal >= 0 ? priv_total <= goal : one->size <= one->away) break;
    struct timespec ts = {0, 5000000};
    pthread_mutex_unlock(&bmu);
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&bmu);
    if (one && !find(one->dev, one->ino)) break; /* removed meanwhile (another thread) */
    if (one && goal < 0 && !until_freed && done_differing(one)) break;
    uint64_t sig = counterparts(one);
    if (sig == last) {
      if (now() - changed >= wait) break;
      continue;
    }
    last = sig, changed = now();
    freed += pass(one, 0);
  }
  return freed;
}

/* The sweeper: after a pass could not get the private bytes under the
 * cap, a thread (signals blocked) passes again every half second while
 * rank 0's files change, so what they come to hold is freed without the
 * script writing again; it ends once under half the cap, or when no copy
 * is left.  It holds bmu only inside a pass. */
static int sweeping;
static void *sweep(void *arg) {
  (void)arg;
  pthread_mutex_lock(&bmu);
  uint64_t last = 0;
  while (files && priv_total > cap / 2 && !in_child) {
    struct timespec ts = {0, 500000000};
    pthread_mutex_unlock(&bmu);
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&bmu);
    uint64_t sig = counterparts(NULL);
    if (sig != last) last = sig, pass(NULL, 0);
  }
  sweeping = 0;
  pthread_mutex_unlock(&bmu);
  return NULL;
}
static void start_sweeper(void) {
  pthread_t t;
  pthread_attr_t a;
  sigset_t all, old;
  if (sweeping || in_child) return;
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
  uint64_t last = counterparts(f);
  double since = now(), w;
  int changed = 0;
  while (priv_total > cap / 2 && find(dev, ino) == f && LAGGING(f)) {
    if ((w = patience(NULL, 1)) > 0) {
      settle(NULL, cap / 2, w, 0);
      return;
    }
    if (!await_change(f, &last, &since, QUIET_LONG)) break;
    changed = 1;
    pass(NULL, 0);
  }
  if (!changed && find(dev, ino) == f) f->solo = 1;
}

/* The private bytes are over the cap (f: the copy written, or NULL): free
 * what rank 0's copies hold, waiting for them while they change. */
static void over_cap(ovf *f) {
  double t = now();
  if (grown >= 0 && grown < (cap / 4 > BS ? cap / 4 : BS)) { /* the last pass failed: not before more came */
    start_sweeper();
    return;
  }
  long long before = priv_total;
  pass(NULL, 0);
  long long mid = priv_total;
  grown = -1;
  if (priv_total <= cap / 2) goto out;
  double w = patience(NULL, 1); /* rank 0 writing one of them now */
  if (w > 0) settle(NULL, cap / 2, w, 0);
  else if (f && LAGGING(f)) await_rank0(f); /* rank 0 behind */
  if (priv_total > cap) grown = 0, start_sweeper();
out:
  HVD_DEBUG("private files over HVDSHIM_PRIVATE_BYTES: %lld bytes, %lld after a pass, %lld after %.3f s", before, mid,
            priv_total, now() - t);
}

/* ------------------------------------------------------------ fds */
static void untrack(int fd) {
  ovf *f = hvd_ovb_fds[fd];
  if (!f) return;
  int k = fdkind[fd] & KINDMASK;
  if (k == HVD_OVB_WRITER) f->nw--;
  else if (k == HVD_OVB_READER) f->nr--;
  else f->nrw--;
  hvd_ovb_fds[fd] = NULL, fdkind[fd] = 0;
  if (f->unlinked && !f->nw && !f->nr && !f->nrw && !f->inflight) free_file(f);
}

void hvd_ovb_opened(int fd, const char *abs, int k, int flags) {
  struct stat s;
  if (!cap || (unsigned)fd >= HVD_OVB_FDMAX || fstat(fd, &s) != 0 || !S_ISREG(s.st_mode)) return;
  pthread_mutex_lock(&bmu);
  untrack(fd); /* closed where this layer did not see it */
  ovf *f = find(s.st_dev, s.st_ino);
  if (f) {
    set_path(f, abs);
    if (s.st_size != f->size) { /* emptied (O_TRUNC), or changed unseen */
      if (s.st_size && f->size % BS && kind(f, f->nb - 1) != PRIV) write_back_over(f, f->nb - 1, (long)f->nb - 1);
      resize(f, s.st_size);
    }
  } else {
    f = track(&s, abs);
  }
  if (f) {
    if (k == HVD_OVB_WRITER) f->nw++;
    else if (k == HVD_OVB_READER) f->nr++;
    else f->nrw++;
    hvd_ovb_fds[fd] = f;
    fdkind[fd] = (unsigned char)(k | ((flags & O_APPEND) ? APPEND : 0));
    if (k == HVD_OVB_STDIO_RW && has_freed(f)) write_back_over(f, 0, -1); /* (fopen made it whole before) */
  }
  pthread_mutex_unlock(&bmu);
}

void hvd_ovb_closing(int fd) {
  if ((unsigned)fd >= HVD_OVB_FDMAX || !hvd_ovb_fds[fd]) return;
  pthread_mutex_lock(&bmu);
  untrack(fd);
  pthread_mutex_unlock(&bmu);
}

void hvd_ovb_dup(int from, int to) {
  if ((unsigned)from >= HVD_OVB_FDMAX || (unsigned)to >= HVD_OVB_FDMAX || from == to) return;
  if (!hvd_ovb_fds[from] && !hvd_ovb_fds[to]) return;
  pthread_mutex_lock(&bmu);
  untrack(to);
  ovf *f = hvd_ovb_fds[from];
  if (f) {
    int k = fdkind[from] & KINDMASK;
    if (k == HVD_OVB_WRITER) f->nw++;
    else if (k == HVD_OVB_READER) f->nr++;
    else f->nrw++;
    hvd_ovb_fds[to] = f, fdkind[to] = fdkind[from];
  }
  pthread_mutex_unlock(&bmu);
}

/* ------------------------------------------------------------ I/O */
int hvd_ovb_begin(int fd, off_t off, size_t len, int writing, hvd_ovb_io *io) {
  io->f = NULL;
  pthread_mutex_lock(&bmu);
  ovf *f = hvd_ovb_of(fd);
  if (!f) {
    pthread_mutex_unlock(&bmu);
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
      if (writing && s >= off && e <= off + (off_t)len && (e - s == BS || e == f->size)) set_kind(f, b, PRIV); /* all rewritten */
      else rc = writing ? write_back_over(f, b, (long)b) : write_back_range(f, b, (long)b);
    }
  }
  if (!rc) {
    f->inflight++;
    io->f = f, io->off = off, io->len = len, io->writing = writing;
  }
  pthread_mutex_unlock(&bmu);
  return rc;
}

int hvd_ovb_end(hvd_ovb_io *io, ssize_t done, int err) {
  ovf *f = io->f;
  int r = 0;
  if (!f) return 0;
  pthread_mutex_lock(&bmu);
  f->inflight--;
  if (io->writing && done > 0) {
    off_t end = io->off + done;
    if (end > f->size) resize(f, end);
    if (end > f->hi) f->hi = end;
    for (size_t b = (size_t)(io->off / BS); b < f->nb && (off_t)b * BS < end; b++) f->st[b] &= (unsigned char)~DIFF;
    f->last = now();
  }
  if (io->writing && done < 0 && err == ENOSPC && !in_child) {
    /* room: what rank 0's files hold, waiting while they change (not again until they do), then dropping */
    long long freed = pass(NULL, 0);
    if (!freed && patience(NULL, 0) > 0) freed = settle(NULL, -1, QUIET_LONG, 1);
    if (!freed) freed = pass(NULL, 1);
    r = freed > 0 ? 1 : 2;
  } else if (io->writing && priv_total > cap && !in_child) {
    over_cap(f);
  }
  if (f->unlinked && !f->nw && !f->nr && !f->nrw && !f->inflight) free_file(f);
  pthread_mutex_unlock(&bmu);
  return r;
}

ssize_t hvd_ovb_lose(int fd, hvd_ovb_io *io, int at) {
  pthread_mutex_lock(&bmu);
  ovf *f = hvd_ovb_of(fd);
  off_t end = io->off + (off_t)io->len;
  if (!f || !io->len) {
    pthread_mutex_unlock(&bmu);
    return errno = ENOSPC, -1;
  }
  int cp = open_copy(f);
  if (cp < 0 || (end > f->size && L->ftruncate(cp, end) != 0)) {
    if (cp >= 0) L->close(cp);
    pthread_mutex_unlock(&bmu);
    return errno = ENOSPC, -1;
  }
  if (end > f->size && f->size % BS && kind(f, f->nb - 1) != PRIV && kind(f, f->nb - 1) != LOST)
    set_kind(f, f->nb - 1, LOST); /* its length changes: what it held is not kept either */
  if (end > f->size) resize(f, end);
  if (end > f->hi) f->hi = end;
  for (size_t b = (size_t)(io->off / BS); b < f->nb && (off_t)b * BS < end; b++) {
    off_t n = blen(f, b);
    if (kind(f, b) != LOST && !punch(cp, (off_t)b * BS, n)) set_kind(f, b, LOST), stats.lost += n;
  }
  L->close(cp);
  if (!f->warned++)
    HVD_WARN("TMPDIR is full: %s keeps no bytes from offset %lld on; a read-back gets rank 0's copy's, unchecked",
             where(f), (long long)io->off);
  if (!at) lseek(fd, end, SEEK_SET);
  pthread_mutex_unlock(&bmu);
  return (ssize_t)io->len;
}

int hvd_ovb_mapping(int fd) {
  if (!hvd_ovb_of(fd)) return 0;
  pthread_mutex_lock(&bmu);
  ovf *f = hvd_ovb_of(fd);
  int rc = 0;
  if (f && has_freed(f)) rc = write_back_range(f, 0, -1); /* no pass frees a block while it is mapped (scan) */
  pthread_mutex_unlock(&bmu);
  return rc;
}

int hvd_ovb_truncating(int fd, const char *ov, off_t len) {
  struct stat s;
  if (!cap || len < 0) return 0;
  pthread_mutex_lock(&bmu);
  ovf *f = fd >= 0 ? hvd_ovb_of(fd) : NULL;
  if (!f && ov && L->fstatat(AT_FDCWD, ov, &s, 0) == 0) f = find(s.st_dev, s.st_ino);
  int rc = 0;
  if (f) {
    /* the blocks holding the old end and the new one keep their bytes across the change */
    if (f->size % BS && kind(f, f->nb - 1) != PRIV) rc = write_back_over(f, f->nb - 1, (long)f->nb - 1);
    if (!rc && len < f->size && len % BS && kind(f, (size_t)(len / BS)) != PRIV)
      rc = write_back_over(f, (size_t)(len / BS), (long)(len / BS));
    if (!rc) resize(f, len);
  }
  pthread_mutex_unlock(&bmu);
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
  if (buffers()) return -1;
  flags &= O_CLOEXEC | O_NONBLOCK | O_NOATIME | O_NOCTTY;
  struct stat cs;
  /* (a FIFO at the path would block the open: a regular file only) */
  if (L->fstatat(AT_FDCWD, f->path, &cs, 0) == 0 && S_ISREG(cs.st_mode) &&
      (cfd = L->openat(AT_FDCWD, f->path, flags)) >= 0 &&
      (fstat(cfd, &cs) != 0 || !S_ISREG(cs.st_mode) || (whole && cs.st_size != f->size)))
    L->close(cfd), cfd = -1;
  if (cfd < 0) whole = 0;
  if (!whole && ((mfd = memfd_create("hvdshim-read-back", MFD_CLOEXEC)) < 0 || L->ftruncate(mfd, f->size) ||
                 (f->size > f->away && (cp = open_copy(f)) < 0)))
    goto out;
  for (size_t b = 0; b < f->nb; b++) {
    off_t n = blen(f, b), at = (off_t)b * BS;
    int k = kind(f, b);
    off_t data = k == PRIV && !whole ? lseek(cp, at, SEEK_DATA) : 0;
    if (!whole && (k == ZERO || (data < 0 ? errno == ENXIO : data >= at + n))) continue; /* zeros: the memfd's hole */
    if (k == PRIV) {
      if (read_full(cp, buf1, n, at) || write_full(mfd, buf1, n, at)) goto out;
      continue;
    }
    if (fetch(f, cfd, b) || (!whole && write_full(mfd, buf1, n, at))) goto out;
  }
  if (whole) {
    fd = cfd, cfd = -1;
    stats.served_real++;
  } else {
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", mfd);
    fd = L->openat(AT_FDCWD, p, O_RDONLY | flags); /* read-only, as asked */
    if (fd >= 0) stats.served_memory++;
  }
out:;
  int e = errno;
  if (cfd >= 0) L->close(cfd);
  if (cp >= 0) L->close(cp);
  if (mfd >= 0) L->close(mfd);
  errno = e;
  return fd;
}

int hvd_ovb_serve(const char *abs, const char *ov, int flags, int *fd) {
  struct stat s;
  if (!cap || L->fstatat(AT_FDCWD, ov, &s, 0) != 0 || !S_ISREG(s.st_mode)) return HVD_OVB_OWN;
  pthread_mutex_lock(&bmu);
  ovf *f = find(s.st_dev, s.st_ino);
  int rc = HVD_OVB_OWN;
  /* a whole copy smaller than a block (or the cap): itself */
  if (!f || (!has_freed(f) && (flags < 0 || f->size - f->away < (cap < BS ? cap : BS)))) goto out;
  set_path(f, abs);
  if (s.st_size != f->size) { /* changed unseen */
    if (f->size % BS && kind(f, f->nb - 1) != PRIV && write_back_range(f, f->nb - 1, (long)f->nb - 1)) goto fail;
    resize(f, s.st_size);
  }
  if (flags >= 0 && !f->nw && !f->nrw && !f->inflight && !in_child && f->size > f->away) {
    settle(f, -1, patience(f, 0), 0); /* free the rest once rank 0's file has it (waiting while it writes) */
    if (!find(s.st_dev, s.st_ino)) goto out;
  }
  if (!has_freed(f)) goto out;
  /* a stdio stream that reads and writes it, or a copy that holds most of its bytes: the copy made whole */
  if (flags < 0 || f->size - f->away > f->away) {
    if (write_back_range(f, 0, -1)) goto fail;
    goto out;
  }
  uint64_t last = counterparts(f);
  double since = now();
  while ((*fd = hand_out(f, flags)) < 0 && errno == ESTALE) { /* rank 0 behind: its file does not hold them yet */
    if (!await_change(f, &last, &since, QUIET_LONG)) break;
    if (!f->nw && !f->nrw && !f->inflight && !in_child) pass(f, 0); /* what it holds now */
  }
  if (*fd >= 0) {
    rc = HVD_OVB_FD;
    if (f->size != f->away) {
      struct stat cs;
      int have = L->fstatat(AT_FDCWD, f->path, &cs, 0) == 0;
      for (size_t b = 0; b < f->nb; b++)
        if (kind(f, b) == PRIV)
          HVD_DEBUG("  private block %zu flags %d; rank 0's size %lld ctime age %.3f; nw %d nr %d nrw %d untr %d map %d inflight %d",
                    b, f->st[b], have ? (long long)cs.st_size : -1LL, have ? (double)time(NULL) - (double)cs.st_ctim.tv_sec : -1.0,
                    f->nw, f->nr, f->nrw, f->scan_untracked, f->scan_mapped, f->inflight);
    }
    HVD_DEBUG("read of %s: %s (%lld of its %lld bytes private)", where(f),
              f->size == f->away ? "rank 0's file" : "a memfd of its bytes and rank 0's", (long long)(f->size - f->away),
              (long long)f->size);
  } else if (errno == ESTALE ? gone(f) : write_back_range(f, 0, -1))
    goto fail;
  goto out;
fail:
  rc = HVD_OVB_FAIL;
out:
  pthread_mutex_unlock(&bmu);
  return rc;
}

void hvd_ovb_renamed(const char *a, const char *b) {
  if (!cap || !strcmp(a, b)) return;
  size_t na = strlen(a);
  pthread_mutex_lock(&bmu);
  for (ovf *f = files, *nx; f; f = nx) { /* what b named is gone */
    nx = f->next;
    if (!f->unlinked && !strcmp(f->path, b)) {
      f->unlinked = 1;
      if (!f->nw && !f->nr && !f->nrw && !f->inflight) free_file(f);
    }
  }
  for (ovf *f = files; f; f = f->next) {
    if (f->unlinked || strncmp(f->path, a, na) || (f->path[na] && f->path[na] != '/')) continue;
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s%s", b, f->path + na) < (int)sizeof p) set_path(f, p);
  }
  if (priv_total > cap && !in_child) over_cap(NULL); /* a file is complete, often (a temporary renamed into place) */
  pthread_mutex_unlock(&bmu);
}

void hvd_ovb_removed(const char *a) {
  if (!cap) return;
  pthread_mutex_lock(&bmu);
  for (ovf *f = files, *nx; f; f = nx) {
    nx = f->next;
    if (f->unlinked || strcmp(f->path, a)) continue;
    f->unlinked = 1;
    if (!f->nw && !f->nr && !f->nrw && !f->inflight) free_file(f);
  }
  pthread_mutex_unlock(&bmu);
}

void hvd_ovb_linked(const char *ov) {
  struct stat s;
  if (!cap || L->fstatat(AT_FDCWD, ov, &s, 0) != 0) return;
  pthread_mutex_lock(&bmu);
  ovf *f = find(s.st_dev, s.st_ino);
  if (f) {
    f->pinned = 1; /* its path is one of two names now: removing either must leave the bytes */
    if (has_freed(f)) write_back_over(f, 0, -1);
  }
  pthread_mutex_unlock(&bmu);
}

void hvd_ovb_note(const char *abs, const char *ov) {
  struct stat s;
  if (!cap || L->fstatat(AT_FDCWD, ov, &s, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(s.st_mode)) return;
  pthread_mutex_lock(&bmu);
  ovf *f = track(&s, abs);
  if (f && s.st_size != f->size) {
    if (f->size % BS && kind(f, f->nb - 1) != PRIV) write_back_over(f, f->nb - 1, (long)f->nb - 1);
    resize(f, s.st_size);
  }
  if (f && f->hi < f->size) f->hi = f->size;
  if (f && priv_total > cap && !in_child) over_cap(f);
  pthread_mutex_unlock(&bmu);
}

void hvd_ovb_drop(void) {
  pthread_mutex_lock(&bmu);
  for (int i = 0; i < HVD_OVB_FDMAX; i++)
    if (hvd_ovb_fds[i]) hvd_ovb_fds[i] = NULL, fdkind[i] = 0;
  while (files) {
    ovf *f = files;
    files = f->next;
    free(f->path), free(f->src), free(f->st), free(f->h), free(f);
  }
  priv_total = 0;
  pthread_mutex_unlock(&bmu);
}

void hvd_ovb_get_stats(hvd_ovb_stats *s) {
  pthread_mutex_lock(&bmu);
  *s = stats;
  s->private_bytes = priv_total;
  pthread_mutex_unlock(&bmu);
}

/* ------------------------------------------------------------ fork */
static void at_prepare(void) { pthread_mutex_lock(&bmu); }
static void at_parent(void) { pthread_mutex_unlock(&bmu); }
static void at_child(void) {
  pthread_mutex_unlock(&bmu);
  in_child = 1; /* the rank frees blocks; a child (a DataLoader worker) only writes back */
}
__attribute__((constructor)) static void ovb_atfork(void) { pthread_atfork(at_prepare, at_parent, at_child); }
