/* Rank-private file writes: the interposed fd calls (overlay_internal.h has
 * the interposer's files in their order; overlay.h says what the overlay
 * does).  The fds opened on the overlay's copies (by overlay_path.c) are
 * tracked by the bytes layer, and these calls hand I/O on them to it
 * (overlay_bytes.h: hvd_ovb_begin and hvd_ovb_end around the real call),
 * which writes back the blocks a call touches and frees the bytes rank 0's
 * files hold: read and write and their p and v forms, sendfile,
 * copy_file_range, mmap, ftruncate, fallocate; close, fclose, dup, dup2,
 * dup3 and fcntl's F_DUPFD keep the tracking in step.  Every other fd, and
 * every process where the overlay is off, makes the real call after one or
 * two loads (plain_fd).  Calls the real libc through overlay.c's table and
 * the bytes layer; nothing else. */
/* This file defines libc's entry points themselves, their fortified `_chk`
 * forms included: _FORTIFY_SOURCE (set by Debian's hardening flags) would
 * turn our definitions of pread and friends into its inline wrappers. */
#undef _FORTIFY_SOURCE
#define _GNU_SOURCE
#include "overlay_bytes.h"
#include "overlay_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

/* Every process but a rank > 0's training program: `overlay_on` is 0 and
 * each call is the real one after one load.  There, an fd not opened on a
 * copy (hvd_ovb_of: NULL) passes the same way; so does any fd in another
 * process (a child of vfork, as CPython's subprocess makes, shares the
 * rank's memory while it dup2s and closes: it must not touch the table). */
static inline int plain_fd(int fd) { return !overlay_on || !hvd_ovb_of(fd) || getpid() != overlay_owner; }

/* I/O of len bytes at `at` (-1: the fd's position) on a tracked fd, made
 * by call(fd, c): the bytes layer writes back what it touches first and
 * counts it after; a write that found no room is made again once room was
 * made, or keeps no bytes (can_lose) when none can be. */
static ssize_t tracked_io(int fd, off_t at, size_t len, int writing, int can_lose, ssize_t (*call)(int, void *),
                          void *c) {
  hvd_ovb_io io;
  for (int tries = 0;; tries++) {
    if (hvd_ovb_begin(fd, at, len, writing, &io)) return -1;
    ssize_t n = call(fd, c);
    int e = errno;
    if (!io.f) return n;
    int r = hvd_ovb_end(&io, n, e);
    if (r == 1 && tries < 4) continue;
    if (r == 2 && can_lose) return hvd_ovb_lose(fd, &io, at >= 0);
    errno = e;
    return n;
  }
}

typedef struct {
  void *buf;
  size_t n, chk;
  off_t at;
  const struct iovec *iov;
  int cnt, fl;
} rw_args;
static ssize_t do_read(int fd, void *c) { rw_args *a = c; return overlay_real.read(fd, a->buf, a->n); }
static ssize_t do_read_chk(int fd, void *c) { rw_args *a = c; return overlay_fdc.read_chk(fd, a->buf, a->n, a->chk); }
static ssize_t do_pread(int fd, void *c) { rw_args *a = c; return overlay_real.pread(fd, a->buf, a->n, a->at); }
static ssize_t do_pread_chk(int fd, void *c) {
  rw_args *a = c;
  return overlay_fdc.pread_chk(fd, a->buf, a->n, a->at, a->chk);
}
static ssize_t do_readv(int fd, void *c) { rw_args *a = c; return overlay_fdc.readv(fd, a->iov, a->cnt); }
static ssize_t do_preadv(int fd, void *c) { rw_args *a = c; return overlay_fdc.preadv(fd, a->iov, a->cnt, a->at); }
static ssize_t do_preadv2(int fd, void *c) {
  rw_args *a = c;
  return overlay_fdc.preadv2(fd, a->iov, a->cnt, a->at, a->fl);
}
static ssize_t do_writev(int fd, void *c) { rw_args *a = c; return overlay_fdc.writev(fd, a->iov, a->cnt); }
static ssize_t do_pwritev(int fd, void *c) { rw_args *a = c; return overlay_fdc.pwritev(fd, a->iov, a->cnt, a->at); }
static ssize_t do_pwritev2(int fd, void *c) {
  rw_args *a = c;
  return overlay_fdc.pwritev2(fd, a->iov, a->cnt, a->at, a->fl);
}

static size_t iov_len(const struct iovec *iov, int cnt) {
  size_t n = 0;
  for (int i = 0; iov && i < cnt; i++) n += iov[i].iov_len;
  return n;
}

/* A write to a tracked fd, in pieces of at most 16 MiB (torch writes a
 * tensor in one call; the bytes layer keeps to its cap between pieces):
 * the bytes written, a short count when a later piece failed, or -1. */
#define PIECE ((size_t)16 << 20)
static ssize_t tracked_write(int fd, const struct iovec *iov, int cnt, off_t at, int fl, int v2) {
  size_t total = iov_len(iov, cnt), done = 0;
  for (;;) {
    struct iovec sub[64];
    int n = 0;
    size_t want = 0, skip = done;
    for (int i = 0; i < cnt && n < 64 && want < PIECE; i++) {
      size_t l = iov[i].iov_len, take;
      if (skip >= l) {
        skip -= l;
        continue;
      }
      take = l - skip < PIECE - want ? l - skip : PIECE - want;
      sub[n].iov_base = (char *)iov[i].iov_base + skip, sub[n].iov_len = take;
      n++, want += take, skip = 0;
    }
    rw_args a = {.iov = sub, .cnt = n, .at = at >= 0 ? at + (off_t)done : -1, .fl = fl};
    ssize_t r = tracked_io(fd, a.at, want, 1, 1, v2 ? do_pwritev2 : at >= 0 ? do_pwritev : do_writev, &a);
    if (r < 0) return done ? (ssize_t)done : -1;
    done += (size_t)r;
    if ((size_t)r < want || done >= total) return (ssize_t)done;
  }
}

EXPORT ssize_t read(int fd, void *buf, size_t n) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_real.read(fd, buf, n);
  rw_args a = {.buf = buf, .n = n};
  return tracked_io(fd, -1, n, 0, 0, do_read, &a);
}
ssize_t __read_chk(int fd, void *buf, size_t n, size_t len);
EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t len) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_fdc.read_chk(fd, buf, n, len);
  rw_args a = {.buf = buf, .n = n, .chk = len};
  return tracked_io(fd, -1, n, 0, 0, do_read_chk, &a);
}
static ssize_t pread_common(int fd, void *buf, size_t n, off_t at) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_real.pread(fd, buf, n, at);
  rw_args a = {.buf = buf, .n = n, .at = at};
  return tracked_io(fd, at, n, 0, 0, do_pread, &a);
}
EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t at) { return pread_common(fd, buf, n, at); }
EXPORT ssize_t pread64(int fd, void *buf, size_t n, off64_t at) { return pread_common(fd, buf, n, (off_t)at); }
ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t at, size_t len);
ssize_t __pread_chk(int fd, void *buf, size_t n, off_t at, size_t len);
static ssize_t pread_chk_common(int fd, void *buf, size_t n, off_t at, size_t len) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_fdc.pread_chk(fd, buf, n, at, len);
  rw_args a = {.buf = buf, .n = n, .at = at, .chk = len};
  return tracked_io(fd, at, n, 0, 0, do_pread_chk, &a);
}
EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t at, size_t len) {
  return pread_chk_common(fd, buf, n, (off_t)at, len);
}
EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t at, size_t len) {
  return pread_chk_common(fd, buf, n, at, len);
}
EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_fdc.readv(fd, iov, cnt);
  rw_args a = {.iov = iov, .cnt = cnt};
  return tracked_io(fd, -1, iov_len(iov, cnt), 0, 0, do_readv, &a);
}
static ssize_t preadv_common(int fd, const struct iovec *iov, int cnt, off_t at) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_fdc.preadv(fd, iov, cnt, at);
  rw_args a = {.iov = iov, .cnt = cnt, .at = at};
  return tracked_io(fd, at, iov_len(iov, cnt), 0, 0, do_preadv, &a);
}
EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t at) { return preadv_common(fd, iov, cnt, at); }
EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t at) {
  return preadv_common(fd, iov, cnt, (off_t)at);
}
static ssize_t preadv2_common(int fd, const struct iovec *iov, int cnt, off_t at, int fl) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_fdc.preadv2(fd, iov, cnt, at, fl);
  rw_args a = {.iov = iov, .cnt = cnt, .at = at, .fl = fl};
  return tracked_io(fd, at, iov_len(iov, cnt), 0, 0, do_preadv2, &a);
}
EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t at, int fl) {
  return preadv2_common(fd, iov, cnt, at, fl);
}
EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off64_t at, int fl) {
  return preadv2_common(fd, iov, cnt, (off_t)at, fl);
}

EXPORT ssize_t write(int fd, const void *buf, size_t n) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_real.write(fd, buf, n);
  struct iovec v = {(void *)buf, n};
  return tracked_write(fd, &v, 1, -1, 0, 0);
}
static ssize_t pwrite_common(int fd, const void *buf, size_t n, off_t at) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_real.pwrite(fd, buf, n, at);
  struct iovec v = {(void *)buf, n};
  return tracked_write(fd, &v, 1, at, 0, 0);
}
EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t at) { return pwrite_common(fd, buf, n, at); }
EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t at) { return pwrite_common(fd, buf, n, (off_t)at); }
EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_fdc.writev(fd, iov, cnt);
  return tracked_write(fd, iov, cnt, -1, 0, 0);
}
static ssize_t pwritev_common(int fd, const struct iovec *iov, int cnt, off_t at) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_fdc.pwritev(fd, iov, cnt, at);
  return tracked_write(fd, iov, cnt, at, 0, 0);
}
EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t at) { return pwritev_common(fd, iov, cnt, at); }
EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t at) {
  return pwritev_common(fd, iov, cnt, (off_t)at);
}
static ssize_t pwritev2_common(int fd, const struct iovec *iov, int cnt, off_t at, int fl) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_fdc.pwritev2(fd, iov, cnt, at, fl);
  return tracked_write(fd, iov, cnt, at, fl, 1);
}
EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t at, int fl) {
  return pwritev2_common(fd, iov, cnt, at, fl);
}
EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t at, int fl) {
  return pwritev2_common(fd, iov, cnt, (off_t)at, fl);
}

/* In-kernel copies: the source's blocks are written back first, the
 * destination's counted as a write (never "lost": the source must move on
 * as well). */
typedef struct {
  int in;
  off_t *off_in, *off_out;
  size_t n;
  unsigned fl;
} copy_args;
static ssize_t do_sendfile(int out, void *c) {
  copy_args *a = c;
  return overlay_fdc.sendfile(out, a->in, a->off_in, a->n);
}
static ssize_t do_copy_range(int out, void *c) {
  copy_args *a = c;
  return overlay_fdc.copy_file_range(a->in, a->off_in, out, a->off_out, a->n, a->fl);
}
static ssize_t copy_piece(int in, off_t *off_in, int out, off_t *off_out, size_t n, unsigned fl, int range) {
  copy_args a = {in, off_in, off_out, n, fl};
  hvd_ovb_io rio = {0};
  if (!plain_fd(in) && hvd_ovb_begin(in, off_in ? *off_in : -1, n, 0, &rio)) return -1;
  ssize_t r = !plain_fd(out) ? tracked_io(out, off_out ? *off_out : -1, n, 1, 0, range ? do_copy_range : do_sendfile, &a)
                             : (range ? do_copy_range : do_sendfile)(out, &a);
  int e = errno;
  hvd_ovb_end(&rio, r, e);
  errno = e;
  return r;
}
/* In pieces of at most PIECE, as writes are (Python's shutil.copyfile sends
 * up to 1 GiB in one sendfile: the bytes layer kept a whole checkpoint's
 * copy); the offsets the kernel moved carry on: the bytes copied, a short
 * count when a later piece failed or the source ended, or -1. */
static ssize_t copy_common(int in, off_t *off_in, int out, off_t *off_out, size_t n, unsigned fl, int range) {
  size_t done = 0;
  for (;;) {
    size_t want = n - done < PIECE ? n - done : PIECE;
    ssize_t r = copy_piece(in, off_in, out, off_out, want, fl, range);
    if (r < 0) return done ? (ssize_t)done : -1;
    done += (size_t)r;
    if ((size_t)r < want || done >= n) return (ssize_t)done;
  }
}
static ssize_t sendfile_common(int out, int in, off_t *off, size_t n) {
  overlay_ready();
  if (plain_fd(out) && plain_fd(in)) return overlay_fdc.sendfile(out, in, off, n);
  return copy_common(in, off, out, NULL, n, 0, 0);
}
EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n) { return sendfile_common(out, in, off, n); }
EXPORT ssize_t sendfile64(int out, int in, off64_t *off, size_t n) { return sendfile_common(out, in, (off_t *)off, n); }
EXPORT ssize_t copy_file_range(int in, off64_t *off_in, int out, off64_t *off_out, size_t n, unsigned fl) {
  overlay_ready();
  if (plain_fd(out) && plain_fd(in)) return overlay_fdc.copy_file_range(in, off_in, out, off_out, n, fl);
  return copy_common(in, (off_t *)off_in, out, (off_t *)off_out, n, fl, 1);
}

/* A mapping sees the copy's bytes: they are all written back first, and no
 * block is freed while a mapping exists. */
static void *mmap_common(void *addr, size_t len, int prot, int fl, int fd, off_t off) {
  overlay_ready();
  if (!plain_fd(fd) && !(fl & MAP_ANONYMOUS) && hvd_ovb_mapping(fd)) return MAP_FAILED;
  return overlay_fdc.mmap(addr, len, prot, fl, fd, off);
}
EXPORT void *mmap(void *addr, size_t len, int prot, int fl, int fd, off_t off) {
  return mmap_common(addr, len, prot, fl, fd, off);
}
EXPORT void *mmap64(void *addr, size_t len, int prot, int fl, int fd, off64_t off) {
  return mmap_common(addr, len, prot, fl, fd, (off_t)off);
}

static int ftruncate_common(int fd, off_t len) {
  overlay_ready();
  if (!plain_fd(fd) && hvd_ovb_truncating(fd, NULL, len)) return -1;
  return overlay_real.ftruncate(fd, len);
}
EXPORT int ftruncate(int fd, off_t len) { return ftruncate_common(fd, len); }
EXPORT int ftruncate64(int fd, off64_t len) { return ftruncate_common(fd, (off_t)len); }
/* Changing a copy's bytes or size in place (punching, zeroing, shifting,
 * allocating past its end): its blocks are written back first, its new
 * size taken after. */
static int reshaped(int fd, int rc) {
  struct stat st;
  if (rc == 0 && fstat(fd, &st) == 0) hvd_ovb_truncating(fd, NULL, st.st_size);
  return rc;
}
static int fallocate_common(int fd, int mode, off_t off, off_t len) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_real.fallocate(fd, mode, off, len);
  if (hvd_ovb_mapping(fd)) return -1;
  return reshaped(fd, overlay_real.fallocate(fd, mode, off, len));
}
EXPORT int fallocate(int fd, int mode, off_t off, off_t len) { return fallocate_common(fd, mode, off, len); }
EXPORT int fallocate64(int fd, int mode, off64_t off, off64_t len) {
  return fallocate_common(fd, mode, (off_t)off, (off_t)len);
}
static int posix_fallocate_common(int fd, off_t off, off_t len) {
  overlay_ready();
  if (plain_fd(fd)) return overlay_fdc.posix_fallocate(fd, off, len);
  if (hvd_ovb_mapping(fd)) return errno;
  int rc = overlay_fdc.posix_fallocate(fd, off, len);
  reshaped(fd, rc);
  return rc;
}
EXPORT int posix_fallocate(int fd, off_t off, off_t len) { return posix_fallocate_common(fd, off, len); }
EXPORT int posix_fallocate64(int fd, off64_t off, off64_t len) {
  return posix_fallocate_common(fd, (off_t)off, (off_t)len);
}

/* fds made and unmade: the tracking follows dup, dup2, dup3, F_DUPFD,
 * close and fclose (libstdc++'s ofstream closes its file with fclose). */
EXPORT int close(int fd) {
  overlay_ready();
  if (!plain_fd(fd)) hvd_ovb_closing(fd);
  return overlay_real.close(fd);
}
EXPORT int fclose(FILE *f) {
  overlay_ready();
  if (overlay_on && !plain_fd(fileno(f))) hvd_ovb_closing(fileno(f));
  return overlay_fdc.fclose(f);
}
EXPORT int dup(int fd) {
  overlay_ready();
  int r = overlay_fdc.dup(fd);
  if (r >= 0 && !plain_fd(fd)) hvd_ovb_dup(fd, r);
  return r;
}
EXPORT int dup2(int fd, int to) {
  overlay_ready();
  int r = overlay_fdc.dup2(fd, to);
  if (r >= 0 && overlay_on && (hvd_ovb_of(fd) || hvd_ovb_of(to)) && getpid() == overlay_owner) hvd_ovb_dup(fd, to);
  return r;
}
EXPORT int dup3(int fd, int to, int fl) {
  overlay_ready();
  int r = overlay_fdc.dup3(fd, to, fl);
  if (r >= 0 && overlay_on && (hvd_ovb_of(fd) || hvd_ovb_of(to)) && getpid() == overlay_owner) hvd_ovb_dup(fd, to);
  return r;
}
/* Every fcntl argument is an int or a pointer, passed in a register of
 * pointer size (glibc's own fcntl reads it the same way). */
static int fcntl_common(int fd, int cmd, void *arg) {
  overlay_ready();
  int r = overlay_fdc.fcntl(fd, cmd, arg);
  if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && !plain_fd(fd)) hvd_ovb_dup(fd, r);
  return r;
}
EXPORT int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  return fcntl_common(fd, cmd, arg);
}
int fcntl64(int fd, int cmd, ...);
EXPORT int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  return fcntl_common(fd, cmd, arg);
}

