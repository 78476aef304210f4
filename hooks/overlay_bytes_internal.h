/* What the bytes layer's files share (internal to hooks/overlay_bytes*.c;
 * overlay_bytes.h has the rules and the locking).  The files in their
 * one-way order: each uses only the files listed before it, never one after
 * it (tests/unit/layers.sh checks, from the objects' symbols, that no two of
 * them use each other in a circle):
 *
 *   overlay_bytes_file.c   the state; the tracked copies and their blocks
 *                          (find, track, resize, set_kind); reading,
 *                          writing and punching a copy's blocks
 *   overlay_bytes_match.c  rank 0's files: the counterpart and the sibling a
 *                          copy's blocks are compared with, the hash, a
 *                          freed block fetched back, and how long to wait
 *                          while rank 0 writes (patience, await_change)
 *   overlay_bytes_pass.c   freeing and writing back: the passes over the
 *                          copies, the write-back of freed blocks, the waits
 *                          over the cap (settle, await_rank0) and the
 *                          sweeper thread
 *   overlay_bytes.c        overlay_bytes.h's calls: the fds, I/O on them,
 *                          the paths (read-opens served), the start and end
 *
 * Names: hvd_ovb_* are the layer's calls for overlay*.c (overlay_bytes.h);
 * ovb_* are what its files share (here); the rest is static.  Everything
 * below is under ovb_mu unless it says otherwise. */
#ifndef HVD_OVERLAY_BYTES_INTERNAL_H
#define HVD_OVERLAY_BYTES_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "overlay_bytes.h"

#define BS ((off_t)1 << 20) /* block size */
/* block states (low bits) and flags */
enum { PRIV = 0, ZERO = 1, AWAY = 2, LOST = 3, KIND = 3, DIFF = 4, DROPPED = 8 };
enum { APPEND = 0x80, KINDMASK = 0x03 };
/* Waits for rank 0's files (ovb_mu dropped while sleeping).  A write over
 * the cap, a read-open or a write that found no room waits only while rank
 * 0 is writing files this rank wrote (one changed in the last QUIET
 * seconds: a replica would wait for it at its next collective anyway),
 * until they are QUIET that long; a block rank 0's file does not hold (yet:
 * its temporary not renamed into place), or no room left while rank 0
 * writes, waits until they are QUIET_LONG.  × `ovb_quiet` (1; the unit
 * test's less). */
#define QUIET (2.0 * ovb_quiet)
#define QUIET_LONG (10.0 * ovb_quiet)
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

/* ---- overlay_bytes_file.c: the state ---- */
extern const hvd_ovl_libc *ovb_L; /* the real calls (set at the start) */
extern long long ovb_cap;         /* HVDSHIM_PRIVATE_BYTES (0: nothing is tracked; set at the start) */
extern double ovb_quiet;          /* scales the waits (set at the start) */
extern int (*ovb_rank0_gone)(void); /* the waits for rank 0 end once it returns 1 (hvd_ovb_set_gone) */
#define RANK0_GONE() (ovb_rank0_gone && ovb_rank0_gone())
extern pthread_mutex_t ovb_mu;
extern ovf *ovb_files;
extern long long ovb_priv_total;
extern hvd_ovb_stats ovb_stats;
extern int ovb_in_child;          /* a forked child: it writes back, never frees */
extern int ovb_no_punch;          /* the file system cannot punch holes: nothing is freed */
extern unsigned char *ovb_buf1, *ovb_buf2; /* two blocks */
extern long long ovb_grown;       /* private bytes added since a cap pass could not get under it (-1: none failed) */

static inline double now(void) { return hvd_mono_s(); }
static inline off_t blen(const ovf *f, size_t b) {
  off_t s = (off_t)b * BS;
  return f->size > s ? (f->size - s < BS ? f->size - s : BS) : 0;
}
static inline int kind(const ovf *f, size_t b) { return f->st[b] & KIND; }
static inline int has_freed(const ovf *f) { return f->away > 0 || (f->nb && kind(f, f->nb - 1) != PRIV); }
static inline int is_zero(const unsigned char *p, size_t n) { return !n || (!p[0] && !memcmp(p, p + 1, n - 1)); }
static inline const char *where(const ovf *f) { return f->path; }

/* the copies and their blocks */
ovf *ovb_find(dev_t dev, ino_t ino);
ovf *ovb_track(const struct stat *s, const char *abs);
void ovb_set_path(ovf *f, const char *abs);
void ovb_free_file(ovf *f);
void ovb_set_kind(ovf *f, size_t b, int k);
void ovb_resize(ovf *f, off_t size);
void ovb_note_peak(void);
/* a copy's bytes */
int ovb_open_copy(const ovf *f);
int ovb_buffers(void);
int ovb_read_full(int fd, unsigned char *b, off_t n, off_t at);
int ovb_write_full(int fd, const unsigned char *b, off_t n, off_t at);
int ovb_punch(int fd, off_t off, off_t n);
int ovb_free_block(ovf *f, int fd, size_t b, int k, const uint64_t h[2]);

/* ---- overlay_bytes_match.c: rank 0's files ---- */
void ovb_hash128(const unsigned char *p, size_t n, uint64_t out[2]);
void ovb_fprint_at(const char *path, fprint *p);
int ovb_same_fprint(const fprint *a, const fprint *b);
int ovb_open_counterpart(const ovf *f, fprint *p);
int ovb_open_sibling(const ovf *f, int cp, fprint *p, char **used);
int ovb_fetch(ovf *f, int cfd, size_t b);
int ovb_gone(ovf *f);
uint64_t ovb_counterparts(ovf *one);
double ovb_patience(ovf *one, int writing);
int ovb_await_change(ovf *f, uint64_t *last, double *since, double wait);
int ovb_counterparts_settled(ovf *one);
int ovb_done_differing(ovf *f);

/* ---- overlay_bytes_pass.c: freeing and writing back ---- */
int ovb_write_back(ovf *f, size_t b0, long b1, int writing);
/* The bytes must be the ones written (reads, mappings): */
static inline int write_back_range(ovf *f, size_t b0, long b1) { return ovb_write_back(f, b0, b1, 0); }
/* ... or they are about to be written over, as rank 0 has: */
static inline int write_back_over(ovf *f, size_t b0, long b1) { return ovb_write_back(f, b0, b1, 1); }
long long ovb_pass(ovf *one, int drop);
long long ovb_settle(ovf *one, long long goal, double wait, int until_freed);
void ovb_over_cap(ovf *f);

#endif
