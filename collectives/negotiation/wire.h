/* Byte buffers and the records exchanged during negotiation.
 *
 * Request (rank -> coordinator, in the slow path):
 *   u8 kind, u8 dtype, u8 op, u8 place, i32 root, i64 count, i64 row_elems,
 *   u32 shape, i32 process_set, f64 age_seconds, u32 name_len, name bytes
 * Response (coordinator -> all, broadcast):
 *   u8 type, u8 kind, u8 dtype, u8 op, u8 place, i32 root, i64 count, i64 row_elems,
 *   u32 shape, i32 process_set, u32 name_len, name, u32 msg_len, msg, then for an
 *   allgather EXEC one i64 row count per rank (of the job: 0 for non-members).
 * Native byte order: every rank of a job runs on the same architecture. */
#ifndef HVD_WIRE_H
#define HVD_WIRE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  char *p;
  size_t len, cap, pos; /* pos: read cursor */
  int bad;              /* a read ran past the end or an allocation failed */
} hvd_buf;

void hvd_buf_reset(hvd_buf *b);
void hvd_buf_free(hvd_buf *b);
int hvd_buf_reserve(hvd_buf *b, size_t extra);
void hvd_buf_put(hvd_buf *b, const void *data, size_t n);
void hvd_buf_get(hvd_buf *b, void *data, size_t n);
int hvd_buf_more(const hvd_buf *b);

enum {
  HVD_KIND_ALLREDUCE = 0,
  HVD_KIND_BROADCAST = 1,
  HVD_KIND_ALLGATHER = 2,
  HVD_KIND_BARRIER = 3,
  HVD_KIND_PSET_ADD = 4,   /* every rank: count = members, shape = hash of the member list */
  HVD_KIND_PSET_REMOVE = 5, /* every rank: root = the set's id */
  HVD_KIND_REDUCESCATTER = 6, /* count = every row's elements, row_elems */
  HVD_KIND_ALLTOALL = 7       /* count = the rows this rank sends (differs per rank), row_elems */
};
enum { HVD_RESP_EXEC = 0, HVD_RESP_ERROR = 1, HVD_RESP_INVALIDATE = 2, HVD_RESP_FATAL = 3 };

/* What every rank must agree on for one tensor. */
typedef struct {
  uint8_t kind, dtype, op;
  uint8_t place; /* 0 host memory, 1 GPU memory */
  int32_t root;
  int64_t count;     /* elements (allgather: this rank's rows) */
  int64_t row_elems; /* allgather only */
  uint32_t shape;    /* the tensor's dimensions as a tag (allgather: all but the first): hvd_shape_tag; 0 = not given */
  int32_t set;       /* process set id (0: every rank) */
} hvd_sig;

const char *hvd_kind_name(int kind);

/* A tensor's dimensions as hvd_sig's 32-bit shape tag, which ranks compare:
 * a small shape exactly (top bit set, the rank in the next three bits, the
 * dimensions below: up to 4 dimensions, each under 2^28, 2^14, 2^9 or 2^7
 * by rank), so a mismatch can name the shapes; a larger one as a hash
 * (top bit clear, never 0: 0 means not given).  hvd_shape_describe writes
 * "[2, 3]", or "#hash" for a hashed one. */
uint32_t hvd_shape_tag(const int64_t *dims, int ndims);
void hvd_shape_describe(char *out, size_t n, uint32_t tag);

typedef struct {
  hvd_sig sig;
  double age;
  const char *name; /* points into the buffer (not terminated) */
  uint32_t name_len;
} hvd_wire_req;

typedef struct {
  uint8_t type;
  hvd_sig sig;
  const char *name, *msg; /* point into the buffer (not terminated) */
  uint32_t name_len, msg_len;
  const int64_t *rows; /* allgather EXEC: one per rank, unaligned: use memcpy */
} hvd_wire_resp;

void hvd_wire_put_req(hvd_buf *b, const hvd_sig *sig, double age, const char *name);
int hvd_wire_get_req(hvd_buf *b, hvd_wire_req *r);
void hvd_wire_put_resp(hvd_buf *b, int type, const hvd_sig *sig, const char *name, const char *msg,
                       const int64_t *rows, int nrows);
int hvd_wire_get_resp(hvd_buf *b, hvd_wire_resp *r, int nranks);

#endif
