/* Byte buffers and negotiation records.  See wire.h for the layouts. */
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hvd_buf_reset(hvd_buf *b) { b->len = b->pos = 0; b->bad = 0; }
void hvd_buf_free(hvd_buf *b) { free(b->p); memset(b, 0, sizeof *b); }

int hvd_buf_reserve(hvd_buf *b, size_t extra) {
  if (b->len + extra <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + extra) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    b->bad = 1;
    return -1;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

void hvd_buf_put(hvd_buf *b, const void *data, size_t n) {
  if (!n || hvd_buf_reserve(b, n) != 0) return;
  memcpy(b->p + b->len, data, n);
  b->len += n;
}

void hvd_buf_get(hvd_buf *b, void *data, size_t n) {
  if (b->bad || b->pos + n > b->len) {
    b->bad = 1;
    memset(data, 0, n);
    return;
  }
  memcpy(data, b->p + b->pos, n);
  b->pos += n;
}

int hvd_buf_more(const hvd_buf *b) { return !b->bad && b->pos < b->len; }

const char *hvd_kind_name(int kind) {
  static const char *names[] = {"allreduce", "broadcast", "allgather", "barrier", "process set add",
                                "process set remove", "reducescatter", "alltoall"};
  return kind >= 0 && kind < 8 ? names[kind] : "unknown";
}

static void put_sig(hvd_buf *b, const hvd_sig *s) {
  uint8_t head[4] = {s->kind, s->dtype, s->op, s->place};
  hvd_buf_put(b, head, 4);
  hvd_buf_put(b, &s->root, 4);
  hvd_buf_put(b, &s->count, 8);
  hvd_buf_put(b, &s->row_elems, 8);
  hvd_buf_put(b, &s->shape, 4);
  hvd_buf_put(b, &s->set, 4);
}

static void get_sig(hvd_buf *b, hvd_sig *s) {
  uint8_t head[4];
  hvd_buf_get(b, head, 4);
  s->kind = head[0];
  s->dtype = head[1];
  s->op = head[2];
  s->place = head[3];
  hvd_buf_get(b, &s->root, 4);
  hvd_buf_get(b, &s->count, 8);
  hvd_buf_get(b, &s->row_elems, 8);
  hvd_buf_get(b, &s->shape, 4);
  hvd_buf_get(b, &s->set, 4);
}

static void put_str(hvd_buf *b, const char *s) {
  uint32_t n = s ? (uint32_t)strlen(s) : 0;
  hvd_buf_put(b, &n, 4);
  if (n) hvd_buf_put(b, s, n);
}

static const char *get_str(hvd_buf *b, uint32_t *len) {
  hvd_buf_get(b, len, 4);
  if (b->bad || b->pos + *len > b->len) {
    b->bad = 1;
    *len = 0;
    return "";
  }
  const char *s = b->p + b->pos;
  b->pos += *len;
  return s;
}

void hvd_wire_put_req(hvd_buf *b, const hvd_sig *sig, double age, const char *name) {
  put_sig(b, sig);
  hvd_buf_put(b, &age, 8);
  put_str(b, name);
}

int hvd_wire_get_req(hvd_buf *b, hvd_wire_req *r) {
  get_sig(b, &r->sig);
  hvd_buf_get(b, &r->age, 8);
  r->name = get_str(b, &r->name_len);
  return b->bad ? -1 : 0;
}

void hvd_wire_put_resp(hvd_buf *b, int type, const hvd_sig *sig, const char *name, const char *msg,
                       const int64_t *rows, int nrows) {
  uint8_t t = (uint8_t)type;
  hvd_buf_put(b, &t, 1);
  put_sig(b, sig);
  put_str(b, name);
  put_str(b, msg);
  if (rows) hvd_buf_put(b, rows, (size_t)nrows * 8);
}

int hvd_wire_get_resp(hvd_buf *b, hvd_wire_resp *r, int nranks) {
  hvd_buf_get(b, &r->type, 1);
  get_sig(b, &r->sig);
  r->name = get_str(b, &r->name_len);
  r->msg = get_str(b, &r->msg_len);
  r->rows = NULL;
  if (r->type == HVD_RESP_EXEC && r->sig.kind == HVD_KIND_ALLGATHER) {
    size_t n = (size_t)nranks * 8;
    if (b->pos + n > b->len) b->bad = 1;
    else {
      r->rows = (const int64_t *)(const void *)(b->p + b->pos);
      b->pos += n;
    }
  }
  return b->bad ? -1 : 0;
}

static const int shape_bits[] = {0, 28, 14, 9, 7}; /* bits per dimension, by the number of dimensions */

uint32_t hvd_shape_tag(const int64_t *dims, int ndims) {
  if (ndims >= 0 && ndims <= 4) {
    uint32_t v = 0;
    int i = 0, b = shape_bits[ndims];
    for (; i < ndims && dims[i] >= 0 && dims[i] < ((int64_t)1 << b); i++) v = (v << b) | (uint32_t)dims[i];
    if (i == ndims) return 0x80000000u | (uint32_t)ndims << 28 | v;
  }
  uint32_t h = 2166136261u; /* FNV-1a over the rank and the dimensions */
  for (int i = -1; i < ndims; i++) {
    uint64_t v = i < 0 ? (uint64_t)ndims : (uint64_t)dims[i];
    for (int k = 0; k < 8; k++) h = (h ^ (uint8_t)(v >> (8 * k))) * 16777619u;
  }
  h &= 0x7fffffffu;
  return h ? h : 1;
}

void hvd_shape_describe(char *out, size_t n, uint32_t tag) {
  int nd = (int)(tag >> 28 & 7);
  if (!(tag & 0x80000000u) || nd > 4) {
    snprintf(out, n, "#%08x", (unsigned)tag);
    return;
  }
  int b = shape_bits[nd];
  size_t len = (size_t)snprintf(out, n, "[");
  for (int i = 0; i < nd && len < n; i++)
    len += (size_t)snprintf(out + len, n - len, "%s%u", i ? ", " : "",
                            (unsigned)(tag >> (b * (nd - 1 - i)) & ((1u << b) - 1)));
  if (len < n) snprintf(out + len, n - len, "]");
}
