/* Fusion pack/unpack.  See fusion.h.  Pure functions over caller memory. */
#include "fusion.h"

#include <string.h>

#include "dtype.h"

void hvd_fuse_begin(hvd_fuse_cursor *c, const hvd_fuse_entry *e, size_t n) {
  c->e = e;
  c->n = n;
  c->idx = 0;
  c->off = 0;
}

size_t hvd_fuse_span(hvd_fuse_cursor *c, size_t len, char **ptr, int *divisor) {
  while (c->idx < c->n && c->off == c->e[c->idx].bytes) c->idx++, c->off = 0; /* empty entries */
  if (len == 0 || c->idx == c->n) return 0;
  const hvd_fuse_entry *e = &c->e[c->idx];
  size_t take = e->bytes - c->off;
  if (take > len) take = len;
  *ptr = e->ptr + c->off;
  *divisor = e->divisor;
  c->off += take;
  if (c->off == e->bytes) c->idx++, c->off = 0;
  return take;
}

void hvd_fuse_skip(hvd_fuse_cursor *c, size_t len) {
  char *p;
  int d;
  for (size_t take; (take = hvd_fuse_span(c, len, &p, &d)) > 0;) len -= take;
}

void hvd_fuse_pack(hvd_fuse_cursor *c, char *dst, size_t len) {
  char *p;
  int d;
  for (size_t take; (take = hvd_fuse_span(c, len, &p, &d)) > 0; dst += take, len -= take) memcpy(dst, p, take);
}

void hvd_fuse_unpack(hvd_fuse_cursor *c, const char *src, size_t len, hvd_dtype_t dtype) {
  size_t es = hvd_dtype_size(dtype);
  char *p;
  int d;
  for (size_t take; (take = hvd_fuse_span(c, len, &p, &d)) > 0; src += take, len -= take)
    hvd_scale_copy(p, src, take / es, dtype, d);
}
