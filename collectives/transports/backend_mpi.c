/* MPI backend.  Owns the MPI datatypes and user ops for 16-bit floats (MPI
 * has no builtin half types: a committed 2-byte contiguous type plus
 * commutative user ops computing in float), and the pipelined reduction.
 * Created by hvd_mpi_backend_init() on the engine thread, freed by fini. */
#include "backend_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dtype.h"
#include "../../base/clock.h"

static MPI_Datatype half_type = MPI_DATATYPE_NULL, bf16_type = MPI_DATATYPE_NULL;
static MPI_Op half_ops[HVD_OP_COUNT], bf16_ops[HVD_OP_COUNT];

/* The host fusion buffer: one pipeline piece, or the whole group (engine
 * thread; freed by hvd_mpi_backend_fini). */
static struct {
  char *p;
  size_t cap;
} stage;

#define USER_OP(fn, dt, op)                                                                 \
  static void fn(void *in, void *inout, int *len, MPI_Datatype *type) {                     \
    (void)type;                                                                             \
    hvd_reduce_into(inout, in, (size_t)*len, dt, op);                                       \
  }
USER_OP(half_sum, HVD_FLOAT16, HVD_SUM)
USER_OP(half_min, HVD_FLOAT16, HVD_MIN)
USER_OP(half_max, HVD_FLOAT16, HVD_MAX)
USER_OP(half_prod, HVD_FLOAT16, HVD_PROD)
USER_OP(bf16_sum, HVD_BFLOAT16, HVD_SUM)
USER_OP(bf16_min, HVD_BFLOAT16, HVD_MIN)
USER_OP(bf16_max, HVD_BFLOAT16, HVD_MAX)
USER_OP(bf16_prod, HVD_BFLOAT16, HVD_PROD)

int hvd_mpi_backend_init(void) {
  int rc = MPI_Type_contiguous(2, MPI_BYTE, &half_type);
  if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&half_type);
  if (rc == MPI_SUCCESS) rc = MPI_Type_contiguous(2, MPI_BYTE, &bf16_type);
  if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&bf16_type);
  MPI_User_function *hf[HVD_OP_COUNT] = {half_sum, half_sum, half_min, half_max, half_prod};
  MPI_User_function *bf[HVD_OP_COUNT] = {bf16_sum, bf16_sum, bf16_min, bf16_max, bf16_prod};
  for (int i = 0; i < HVD_OP_COUNT && rc == MPI_SUCCESS; i++) {
    rc = MPI_Op_create(hf[i], 1, &half_ops[i]);
    if (rc == MPI_SUCCESS) rc = MPI_Op_create(bf[i], 1, &bf16_ops[i]);
  }
  return rc;
}

void hvd_mpi_backend_fini(void) {
  free(stage.p);
  stage.p = NULL;
  stage.cap = 0;
  for (int i = 0; i < HVD_OP_COUNT; i++) {
    if (half_ops[i] != MPI_OP_NULL && half_ops[i]) MPI_Op_free(&half_ops[i]);
    if (bf16_ops[i] != MPI_OP_NULL && bf16_ops[i]) MPI_Op_free(&bf16_ops[i]);
  }
  if (half_type != MPI_DATATYPE_NULL) MPI_Type_free(&half_type);
  if (bf16_type != MPI_DATATYPE_NULL) MPI_Type_free(&bf16_type);
}

MPI_Datatype hvd_mpi_dtype(hvd_dtype_t dtype) {
  switch (dtype) {
  case HVD_FLOAT32: return MPI_FLOAT;
  case HVD_FLOAT64: return MPI_DOUBLE;
  case HVD_FLOAT16: return half_type;
  case HVD_BFLOAT16: return bf16_type;
  case HVD_INT32: return MPI_INT32_T;
  case HVD_INT64: return MPI_INT64_T;
  case HVD_UINT8: return MPI_UINT8_T;
  case HVD_INT8: return MPI_INT8_T;
  case HVD_INT16: return MPI_INT16_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op hvd_mpi_op(hvd_dtype_t dtype, hvd_op_t op) {
  if (dtype == HVD_FLOAT16) return half_ops[op];
  if (dtype == HVD_BFLOAT16) return bf16_ops[op];
  return op == HVD_MIN ? MPI_MIN : op == HVD_MAX ? MPI_MAX : op == HVD_PROD ? MPI_PROD : MPI_SUM;
}

/* Largest piece: the chunk setting, rounded down to whole 8-byte words, and
 * never more than INT_MAX elements (MPI counts are int). */
static size_t piece_bytes(size_t chunk, size_t total, size_t es) {
  size_t p = chunk ? chunk - chunk % 8 : total;
  if (p == 0) p = 8;
  if (p > total) p = total;
  size_t cap = (size_t)INT_MAX * es;
  if (p > cap) p = cap - cap % 8;
  return p;
}

/* Allreduce a group of same-dtype tensors.  One entry: reduced in place, a
 * piece of `chunk` bytes at a time, each piece divided right after its
 * reduction.  Several: packed into `staging` (at least min(chunk, total)
 * bytes; chunk 0 = all at once) a piece at a time, reduced, unpacked.
 * Returns an MPI error code (MPI_SUCCESS). */
static int allreduce_group(const hvd_fuse_entry *e, size_t n, hvd_dtype_t dtype, hvd_op_t op, size_t chunk,
                           char *staging, MPI_Comm comm, hvd_phase_times *t) {
  size_t es = hvd_dtype_size(dtype), total = 0;
  for (size_t i = 0; i < n; i++) total += e[i].bytes;
  if (total == 0) return MPI_SUCCESS;
  MPI_Datatype type = hvd_mpi_dtype(dtype);
  MPI_Op mop = hvd_mpi_op(dtype, op);
  size_t piece = piece_bytes(chunk, total, es);
  double t0, t1;
  if (n == 1) {
    char *p = e[0].ptr;
    for (size_t off = 0; off < total; off += piece) {
      size_t len = total - off < piece ? total - off : piece;
      t0 = hvd_mono_us();
      int rc = MPI_Allreduce(MPI_IN_PLACE, p + off, (int)(len / es), type, mop, comm);
      t1 = hvd_mono_us();
      t->reduce_us += t1 - t0;
      if (rc != MPI_SUCCESS) return rc;
      if (e[0].divisor != 1) {
        hvd_scale_copy(p + off, p + off, len / es, dtype, e[0].divisor);
        t->copy_out_us += hvd_mono_us() - t1;
      }
    }
    return MPI_SUCCESS;
  }
  hvd_fuse_cursor in, out;
  hvd_fuse_begin(&in, e, n);
  hvd_fuse_begin(&out, e, n);
  for (size_t off = 0; off < total; off += piece) {
    size_t len = total - off < piece ? total - off : piece;
    t0 = hvd_mono_us();
    hvd_fuse_pack(&in, staging, len);
    t1 = hvd_mono_us();
    int rc = MPI_Allreduce(MPI_IN_PLACE, staging, (int)(len / es), type, mop, comm);
    double t2 = hvd_mono_us();
    if (rc != MPI_SUCCESS) return rc;
    hvd_fuse_unpack(&out, staging, len, dtype);
    t->copy_in_us += t1 - t0;
    t->reduce_us += t2 - t1;
    t->copy_out_us += hvd_mono_us() - t2;
  }
  return MPI_SUCCESS;
}

static int broadcast(void *buf, size_t count, hvd_dtype_t dtype, int root, MPI_Comm comm) {
  size_t es = hvd_dtype_size(dtype), total = count * es;
  size_t piece = piece_bytes(0, total, es);
  for (size_t off = 0; off < total; off += piece) {
    size_t len = total - off < piece ? total - off : piece;
    int rc = MPI_Bcast((char *)buf + off, (int)(len / es), hvd_mpi_dtype(dtype), root, comm);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

/* Element counts and displacements of `rows` row counts (n of them): -1
 * when a count or an offset passes INT_MAX (MPI counts are int). */
static int row_layout(const int64_t *rows, int n, size_t row_elems, int *counts, int *displs) {
  int64_t off = 0;
  for (int r = 0; r < n; r++) {
    int64_t c = rows[r] * (int64_t)row_elems;
    if (c > INT_MAX || off > INT_MAX) return -1;
    counts[r] = (int)c;
    displs[r] = (int)off;
    off += c;
  }
  return 0;
}

/* out must hold sum(rows) * row_elems elements. */
static int allgather(const void *in, void *out, const int64_t *rows, size_t row_elems, hvd_dtype_t dtype,
                      MPI_Comm comm, char *err, size_t errlen) {
  int size;
  MPI_Comm_size(comm, &size);
  int *counts = malloc(sizeof(int) * (size_t)size * 2);
  if (!counts) {
    snprintf(err, errlen, "out of memory");
    return MPI_ERR_NO_MEM;
  }
  int *displs = counts + size;
  if (row_layout(rows, size, row_elems, counts, displs) != 0) {
    snprintf(err, errlen, "allgather larger than %d elements is not supported by the MPI backend", INT_MAX);
    free(counts);
    return MPI_ERR_COUNT;
  }
  int me;
  MPI_Comm_rank(comm, &me);
  MPI_Datatype type = hvd_mpi_dtype(dtype);
  int rc = MPI_Allgatherv(in, counts[me], type, out, counts, displs,
                          type, comm);
  free(counts);
  return rc;
}

int hvd_mpi_reducescatter(const void *in, void *out, const int *counts, hvd_dtype_t dtype, hvd_op_t op,
                          MPI_Comm comm) {
  return MPI_Reduce_scatter(in ? in : MPI_IN_PLACE, out, counts, hvd_mpi_dtype(dtype), hvd_mpi_op(dtype, op), comm);
}

int hvd_mpi_alltoall(const void *in, const int64_t *send_rows, size_t row_elems, hvd_dtype_t dtype, void **out,
                     int64_t *recv_rows, int64_t *total_rows, MPI_Comm comm, char *err, size_t errlen) {
  int n;
  MPI_Comm_size(comm, &n);
  *out = NULL;
  int rc = MPI_Alltoall(send_rows, 1, MPI_INT64_T, recv_rows, 1, MPI_INT64_T, comm);
  if (rc != MPI_SUCCESS) return rc;
  int *v = malloc(sizeof(int) * (size_t)n * 4);
  if (!v) {
    snprintf(err, errlen, "out of memory");
    return MPI_ERR_NO_MEM;
  }
  int *sc = v, *sd = v + n, *rcnt = v + 2 * n, *rd = v + 3 * n;
  /* too large for int counts on some rank: every rank gives up together */
  int big = row_layout(send_rows, n, row_elems, sc, sd) != 0 || row_layout(recv_rows, n, row_elems, rcnt, rd) != 0;
  rc = MPI_Allreduce(MPI_IN_PLACE, &big, 1, MPI_INT, MPI_MAX, comm);
  if (rc != MPI_SUCCESS || big) {
    snprintf(err, errlen, "alltoall larger than %d elements on some rank is not supported by the MPI backend",
             INT_MAX);
    free(v);
    return rc != MPI_SUCCESS ? rc : MPI_ERR_COUNT;
  }
  *total_rows = 0;
  for (int r = 0; r < n; r++) *total_rows += recv_rows[r];
  size_t bytes = (size_t)*total_rows * row_elems * hvd_dtype_size(dtype);
  *out = malloc(bytes ? bytes : 1);
  if (!*out) {
    snprintf(err, errlen, "out of memory: %zu bytes", bytes);
    free(v);
    return MPI_ERR_NO_MEM;
  }
  MPI_Datatype type = hvd_mpi_dtype(dtype);
  rc = MPI_Alltoallv(in, sc, sd, type, *out, rcnt, rd, type, comm);
  free(v);
  return rc;
}

const char *hvd_mpi_msg(int rc) {
  static __thread char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
  return msg;
}

/* ------------------------------------------------------------------ the contract (backend.h) */

static int bk_allreduce(const hvd_fuse_entry *e, size_t n, hvd_dtype_t dt, hvd_op_t op, const hvd_bk_ctx *c,
                        hvd_phase_times *t, char *err, size_t errlen) {
  size_t total = 0;
  for (size_t k = 0; n > 1 && k < n; k++) total += e[k].bytes;
  size_t need = c->chunk && c->chunk < total ? c->chunk : total;
  if (need > stage.cap) {
    free(stage.p);
    stage.cap = 0;
    HVD_CHECK((stage.p = malloc(need)), "out of memory: a fusion buffer of %zu bytes", need);
    stage.cap = need;
  }
  HVD_CHECK_MPI(allreduce_group(e, n, dt, op, c->chunk, stage.p, c->comm, t), "MPI_Allreduce");
  return 0;
}

static int bk_broadcast(void *buf, size_t count, hvd_dtype_t dt, int root, const hvd_bk_ctx *c, char *err,
                        size_t errlen) {
  HVD_CHECK_MPI(broadcast(buf, count, dt, root, c->comm), "MPI_Bcast");
  return 0;
}

/* -2: counts past INT_MAX (the request fails, the job goes on). */
static int bk_allgather(const void *in, void *out, const int64_t *rows, size_t row_elems, hvd_dtype_t dt,
                        const hvd_bk_ctx *c, char *err, size_t errlen) {
  int rc = allgather(in, out, rows, row_elems, dt, c->comm, err, errlen);
  if (rc == MPI_ERR_COUNT) return -2;
  HVD_CHECK_MPI(rc, "MPI_Allgatherv");
  return 0;
}

const hvd_backend hvd_backend_mpi = {
    .name = "MPI",
    .allreduce_span = "MPI_ALLREDUCE",
    .broadcast_span = "MPI_BCAST",
    .allreduce = bk_allreduce,
    .broadcast = bk_broadcast,
    .allgather = bk_allgather,
};
