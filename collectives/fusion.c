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

void hvd_fuse_pack(hvd_fuse_cursor *c, char *dst, size_t len) {
  while (len > 0 && c->idx < c->n) {
    const hvd_fuse_entry *e = &c->e[c->idx];
    size_t take = e->bytes - c->off;
    if (take > len) take = len;
    memcpy(dst, e->ptr + c->off, take);
    dst += take;
    len -= take;
    c->off += take;
    if (c->off == e->bytes) c->idx++, c->off = 0;
  }
}

void hvd_fuse_unpack(hvd_fuse_cursor *c, const char *src, size_t len, hvd_dtype_t dtype) {
  size_t es = hvd_dtype_size(dtype);
  while (len > 0 && c->idx < c->n) {
    const hvd_fuse_entry *e = &c->e[c->idx];
    size_t take = e->bytes - c->off;
    if (take > len) take = len;
    hvd_scale_copy(e->ptr + c->off, src, take / es, dtype, e->divisor);
    src += take;
    len -= take;
    c->off += take;
    if (c->off == e->bytes) c->idx++, c->off = 0;
  }
}
