/* Fusion: a group of same-dtype tensors seen as one logical buffer, packed
 * into and unpacked out of a staging buffer a piece at a time (so a piece
 * can stay in cache between copy-in, reduction and copy-out).  Averaging is
 * folded into the unpack: each entry carries its own divisor. */
#ifndef HVD_FUSION_H
#define HVD_FUSION_H

#include <stddef.h>

#include "../hvdshim.h"

typedef struct {
  char *ptr;
  size_t bytes;
  int divisor; /* 1 for sum/min/max, the rank count for avg */
} hvd_fuse_entry;

typedef struct {
  const hvd_fuse_entry *e;
  size_t n, idx, off; /* current entry and offset inside it */
} hvd_fuse_cursor;

void hvd_fuse_begin(hvd_fuse_cursor *c, const hvd_fuse_entry *e, size_t n);
/* The next contiguous span of the logical buffer, at most len bytes (inside
 * one entry): its address in *ptr, its entry's divisor in *divisor.  Returns
 * its length (0 at the end) and moves past it. */
size_t hvd_fuse_span(hvd_fuse_cursor *c, size_t len, char **ptr, int *divisor);
/* Move past the next len bytes. */
void hvd_fuse_skip(hvd_fuse_cursor *c, size_t len);
/* Copy the next len bytes of the logical buffer into dst. */
void hvd_fuse_pack(hvd_fuse_cursor *c, char *dst, size_t len);
/* Copy the next len bytes from src back into the entries, dividing each by
 * its divisor.  len and the entries hold whole elements of dtype. */
void hvd_fuse_unpack(hvd_fuse_cursor *c, const char *src, size_t len, hvd_dtype_t dtype);

#endif
