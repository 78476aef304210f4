/* The overlay's bytes (internal to hooks/overlay*.c; overlay_bytes*.c, in
 * the order overlay_bytes_internal.h gives): which bytes of the files this
 * process writes in its overlay folder stay there.
 *
 * A file a rank > 0 writes in the overlay ("its copy") is cut in blocks of
 * 1 MiB.  A block of its copy is freed (a hole punched, its 128-bit hash
 * kept) once it is all zeros, or once the real file at the same path
 * (rank 0's, as ranks are replicas) holds the same bytes at the same place
 * ("away").  Freeing starts when the process's private bytes pass
 * HVDSHIM_PRIVATE_BYTES, and then writes wait for rank 0's copy to catch
 * up (while it changes; to begin, when rank 0 is behind) until they are
 * back under half of it; a read-open
 * of a copy with freed blocks gets rank 0's file when every block is away
 * and checks out against its hash, else the away blocks are written back
 * first; a write or an O_RDWR read over an away block writes it back
 * first.  When $TMPDIR is full a write waits longer for rank 0, then its
 * private blocks are dropped (hash kept: a read-back needs rank 0's
 * identical bytes), and at last a write that still finds no room keeps no
 * bytes ("lost": a read-back gets rank 0's unverified).
 *
 * The fds this process opened on its copies through overlay_path.c are
 * tracked (hvd_ovb_fds): I/O on them comes here first.  Every other fd, and
 * every process where the overlay is off, never enters: the interposed fd
 * calls (overlay_fd.c) test `overlay_on` and hvd_ovb_of(fd) (two loads) and
 * make the real call.
 *
 * State: the files, the fds and the totals are under one mutex (not held
 * across the caller's own real call: an operation in flight is counted on
 * its file, which no freeing pass touches meanwhile; passes hold it across
 * their own reads and punches, and drop it while waiting). */
#ifndef HVD_OVERLAY_BYTES_H
#define HVD_OVERLAY_BYTES_H

#include <stddef.h>
#include <sys/types.h>

#include "overlay_view.h"

#define HVD_OVB_FDMAX 65536
struct hvd_ovb_file;
extern struct hvd_ovb_file *hvd_ovb_fds[HVD_OVB_FDMAX];
/* The tracked file behind fd, or NULL (read without the lock: a hint that
 * the slow path is needed, which checks again under it). */
static inline struct hvd_ovb_file *hvd_ovb_of(int fd) {
  return (unsigned)fd < HVD_OVB_FDMAX ? hvd_ovb_fds[fd] : NULL;
}

/* `cap`: HVDSHIM_PRIVATE_BYTES (0: every byte stays, nothing is tracked);
 * `quiet`: scales the waits for rank 0's files (1; the unit test's less). */
void hvd_ovb_init(const hvd_ovl_libc *libc, long long cap, double quiet);
int hvd_ovb_enabled(void);
/* The waits for rank 0's files end at once (nothing more is freed) once
 * gone() is true: this process is rank 0 now, the rank 0 it waited for
 * died (elastic).  NULL: they never end so. */
void hvd_ovb_set_gone(int (*gone)(void));

/* ---- fds ---- */
enum { HVD_OVB_WRITER = 1, HVD_OVB_READER = 2, HVD_OVB_STDIO_RW = 3 };
/* fd was opened on the copy `abs` stands for (HVD_OVB_WRITER: O_WRONLY or
 * O_RDWR through open; READER: read-only; STDIO_RW: a stdio stream that
 * reads, whose reads this layer cannot see); O_TRUNC empties its state. */
void hvd_ovb_opened(int fd, const char *abs, int kind, int flags);
void hvd_ovb_closing(int fd);
void hvd_ovb_dup(int from, int to);

/* ---- I/O on a tracked fd ---- */
typedef struct {
  struct hvd_ovb_file *f;
  off_t off;
  size_t len;
  int writing;
} hvd_ovb_io;
/* Before I/O of len bytes at off (-1: the fd's position, or its end when
 * appending) on tracked fd: away blocks it touches are written back (a
 * write covering a whole block needs none).  0, or -1 with errno (io->f
 * NULL: not tracked after all, make the call as usual). */
int hvd_ovb_begin(int fd, off_t off, size_t len, int writing, hvd_ovb_io *io);
/* After it: `done` bytes went (or -1 with `err`).  Returns 1 when the call
 * failed with ENOSPC and room was made (make it again for what is left),
 * 2 when no room could be made and the bytes are to be lost (io->off and
 * io->len say which; hvd_ovb_lose does it), else 0. */
int hvd_ovb_end(hvd_ovb_io *io, ssize_t done, int err);
/* Keeps no bytes for io's range (the file grows to its end as if written;
 * the blocks are lost) and moves fd's position past it unless `at` (pwrite). */
ssize_t hvd_ovb_lose(int fd, hvd_ovb_io *io, int at);
/* fd is mapped: its away blocks are written back, and the copy keeps its
 * bytes from now on.  -1 with errno when that fails. */
int hvd_ovb_mapping(int fd);
/* Before ftruncate(fd, len) / truncate of the copy `ov`. */
int hvd_ovb_truncating(int fd, const char *ov, off_t len);

/* ---- paths (absolute real paths, as the view gives them) ---- */
enum { HVD_OVB_OWN = 0, HVD_OVB_FD = 1, HVD_OVB_FAIL = -1 };
/* An open of `abs` with `flags` (read-only), whose copy `ov` exists: OWN
 * (open the copy: it holds all its bytes now), FD (*fd, read-only: `abs`
 * itself, rank 0's file, found to hold every byte of the copy; or a memfd
 * of the copy's bytes and rank 0's, when the copy holds fewer than half),
 * FAIL with errno (EIO: bytes it wrote are gone).  flags < 0: OWN or FAIL
 * only (a stdio stream that reads and writes the copy). */
int hvd_ovb_serve(const char *abs, const char *ov, int flags, int *fd);
/* The view moved a to b (a file or a folder, in the overlay). */
void hvd_ovb_renamed(const char *a, const char *b);
/* The view removed the copy of a. */
void hvd_ovb_removed(const char *a);
/* The copy at `ov` got a second name (a hard link): it holds all its bytes
 * again and keeps them. */
void hvd_ovb_linked(const char *ov);
/* Whether the copy at `ov` holds every byte of its file (no block freed
 * as rank 0's, dropped or lost; holes of zeros are its bytes): 1, else 0
 * (0 too where `ov` is not there). */
int hvd_ovb_holds_all(const char *ov);
/* The copy of `abs` (at `ov`) was written by code this layer cannot
 * follow (raw system calls): track it from here. */
void hvd_ovb_note(const char *abs, const char *ov);
/* Forget every file and fd (the overlay folder is gone). */
void hvd_ovb_drop(void);

/* ---- figures (tests, the debug line at exit) ---- */
typedef struct {
  long long private_bytes; /* bytes of copies held in the overlay folder */
  long long peak_private;  /* the most it held */
  long long away, zero, dropped, lost, restored; /* bytes freed, written back */
  long long rebased;                             /* written back from rank 0's file as it is now, to be written over */
  long long served_real, served_memory;          /* read-opens given rank 0's file, a memfd */
} hvd_ovb_stats;
void hvd_ovb_get_stats(hvd_ovb_stats *s);

#endif
