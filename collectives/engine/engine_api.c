/* Entry points, on the user's threads: validate a request, take a handle,
 * push it onto the engine's queue under `qmu` (and wake an idle engine).
 * Nothing here waits for the network. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../transports/dtype.h"
#include "engine_internal.h"
#include "handles.h"
#include "../observers/metrics.h"

/* The process's one engine.  The C API (as Horovod's) takes no engine
 * argument: it is this one, and every stage below is handed it. */
static hvd_engine engine = {.qmu = PTHREAD_MUTEX_INITIALIZER, .qcv = PTHREAD_COND_INITIALIZER,
                            .life_mu = PTHREAD_MUTEX_INITIALIZER, .drive = PTHREAD_MUTEX_INITIALIZER,
                            .comm = MPI_COMM_NULL};
static hvd_engine *const e = &engine;

hvd_status_t hvd_engine_start(const hvd_engine_host *host, char *err, size_t errlen) {
  return hvd_eng_start(e, host, err, errlen);
}
void hvd_engine_stop(void) { hvd_eng_stop(e); }
void hvd_engine_forked_child(void) { hvd_eng_forked_child(e); }
int hvd_engine_mpi_early(void) { return hvd_eng_mpi_early(); }
int hvd_engine_mpi_early_wait(void) { return hvd_eng_mpi_early_wait(); }

static void tuning_now(hvd_tuning_now *out) {
  static const char *st[] = {"off", "tuning", "fixed"};
  out->fusion = __atomic_load_n(&e->pub_fusion, __ATOMIC_RELAXED);
  out->cycle_ms = (double)__atomic_load_n(&e->pub_cycle_ns, __ATOMIC_RELAXED) * 1e-6;
  out->autotune = st[__atomic_load_n(&e->pub_tune, __ATOMIC_RELAXED)];
}

int hvd_rank(void) { return e->started ? e->rank : -1; }
int hvd_size(void) { return e->started ? e->size : -1; }
int hvd_local_rank(void) { return e->started ? e->local_rank : -1; }
int hvd_local_size(void) { return e->started ? e->local_size : -1; }

void hvd_step_mark(int64_t samples) {
  if (!e->started) return hvd_metrics_observe(samples); /* a no-op unless HVDSHIM_OBSERVE=1 */
  uint64_t n = __atomic_add_fetch(&e->steps, 1, __ATOMIC_RELAXED);
  if (!hvd_metrics_enabled()) return;
  hvd_stats_t s;
  hvd_get_stats(&s);
  hvd_tuning_now tn;
  tuning_now(&tn);
  hvd_metrics_step(n, samples, e->size, &s, &tn);
}

void hvd_step_count_set(uint64_t steps) { __atomic_store_n(&e->steps, steps, __ATOMIC_RELAXED); }

void hvd_get_stats(hvd_stats_t *out) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  *out = e->stats;
  out->blocked_seconds = (double)hvd_handles_blocked_ns() * 1e-9;
}

/* The waits: run by engine_drive.c, where a waiting thread may run the
 * engine's next cycle itself. */
hvd_status_t hvd_wait(hvd_handle_t h, double timeout_s) { return hvd_eng_wait(e, h, timeout_s, NULL, NULL, "hvd_wait"); }
hvd_status_t hvd_test(hvd_handle_t h, int *done) { return hvd_eng_test(e, h, done); }

hvd_status_t hvd_wait_all(const hvd_handle_t *handles, size_t n, size_t *first_failed) {
  if (n && !handles) {
    hvd_set_last_error("hvd_wait_all: null handles");
    return HVD_ERR_INVALID;
  }
  hvd_status_t first = HVD_OK;
  char why[1024];
  for (size_t i = 0; i < n; i++) {
    hvd_status_t st = hvd_eng_wait(e, handles[i], -1.0, NULL, NULL, "hvd_wait_all");
    if (st != HVD_OK && first == HVD_OK) {
      first = st;
      snprintf(why, sizeof why, "%s", hvd_last_error());
      if (first_failed) *first_failed = i;
    }
  }
  if (first != HVD_OK) hvd_set_last_error("%s", why);
  return first;
}

hvd_status_t hvd_allgather_wait(hvd_handle_t h, double timeout_s, void **out, size_t *total_rows) {
  if (!out || !total_rows) {
    hvd_set_last_error("hvd_allgather_wait: null output pointer");
    return HVD_ERR_INVALID;
  }
  *out = NULL;
  *total_rows = 0;
  return hvd_eng_wait(e, h, timeout_s, out, total_rows, "hvd_allgather_wait");
}

/* hvd_next_shape / hvd_next_process_set: the shape tag and the process set
 * of this thread's next submission. */
static _Thread_local uint32_t next_shape;
static _Thread_local int next_set;
/* hvd_allreduce_batch_async in progress on this thread: the engine is woken
 * once, after the last item (wake: the queue was empty when one was pushed). */
static _Thread_local int batching, batch_wake;
/* In a batch: the ready event of the last GPU tensor (this thread holds a
 * reference), shared by the next one on the same device and stream. */
static _Thread_local hvd_gpu_event *batch_ready;
static _Thread_local int batch_device;
static _Thread_local void *batch_stream;

static void batch_ready_set(hvd_gpu_event *ev, int device, void *stream) {
  hvd_gpu_event_hold(ev, 1);
  hvd_gpu_event_put(batch_ready);
  batch_ready = ev, batch_device = device, batch_stream = stream;
}

static hvd_status_t reject(hvd_status_t st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static hvd_status_t reject(hvd_status_t st, const char *fmt, ...) {
  char msg[HVD_NAME_MAX + 256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  hvd_set_last_error("%s", msg);
  next_shape = 0, next_set = 0; /* a refused call takes the shape and set it was given too */
  return st;
}

void hvd_next_shape(const int64_t *dims, int ndims) { next_shape = hvd_shape_tag(dims, ndims); }

void hvd_next_process_set(int id) { next_set = id; }

void hvd_elastic_follow(void) {
  pthread_mutex_lock(&e->qmu);
  e->follow = 1;
  pthread_mutex_unlock(&e->qmu);
}

void hvd_shutdown_ends_job(int on) {
  pthread_mutex_lock(&e->qmu);
  e->stop_ends_job = on != 0;
  pthread_mutex_unlock(&e->qmu);
}

int hvd_elastic_ack(int *rank, int *size, int *rank0_lost, char *what, size_t len) {
  pthread_mutex_lock(&e->qmu);
  int changes = (int)(e->rebuilds - e->acked);
  e->acked = e->rebuilds;
  if (rank) *rank = e->rebuilds ? e->ack_rank : e->rank;
  if (size) *size = e->rebuilds ? e->ack_size : e->size;
  if (rank0_lost) *rank0_lost = e->rank0_lost;
  if (what && len) snprintf(what, len, "%s", e->change_msg);
  pthread_mutex_unlock(&e->qmu);
  return changes;
}

/* With qmu held: HVD_OK (still held) when the engine takes work; else qmu
 * is released and the status returned with the reason, after `what`. */
static hvd_status_t refuse_if_closed(const char *what) {
  if (e->accepting) return HVD_OK;
  char why[sizeof e->closed_msg];
  snprintf(why, sizeof why, "%s", e->closed_msg[0] ? e->closed_msg : "hvd_init() has not been called");
  hvd_status_t st = e->closed_msg[0] ? HVD_ERR_SHUTDOWN : HVD_ERR_NOT_INIT;
  pthread_mutex_unlock(&e->qmu);
  return reject(st, "%s: %s", what, why);
}

/* Alltoall's send splits and where its received splits go (else NULL). */
typedef struct {
  const int64_t *splits;
  int64_t *recv;
} a2a_splits;

static hvd_status_t submit_ex(const char *name, hvd_sig *sig, void *buf, const void *in, const a2a_splits *a2a,
                              int device, void *stream, hvd_callback_t cb, void *cb_arg, hvd_handle_t *handle) {
  if (sig->kind != HVD_KIND_PSET_ADD && sig->kind != HVD_KIND_PSET_REMOVE)
    sig->shape = next_shape, sig->set = next_set; /* taken by this submission, accepted or not */
  next_shape = 0, next_set = 0;
  if (!handle && !cb) return reject(HVD_ERR_INVALID, "%s: pass a handle pointer or a callback", hvd_kind_name(sig->kind));
  if (!name || !name[0]) return reject(HVD_ERR_INVALID, "%s: the tensor name is empty", hvd_kind_name(sig->kind));
  size_t nl = strnlen(name, HVD_NAME_MAX + 1);
  if (nl > HVD_NAME_MAX) return reject(HVD_ERR_INVALID, "%s: tensor name longer than %d bytes", hvd_kind_name(sig->kind), HVD_NAME_MAX);
  if (!hvd_dtype_valid(sig->dtype))
    return reject(HVD_ERR_INVALID, "%s '%s': unsupported dtype %d (supported: float32, float64, float16, bfloat16, "
                  "int32, int64, uint8, int8, int16)", hvd_kind_name(sig->kind), name, sig->dtype);
  if (!hvd_op_valid(sig->op))
    return reject(HVD_ERR_INVALID, "%s '%s': unknown reduction op %d (sum, avg, min, max, prod)", hvd_kind_name(sig->kind), name,
                  sig->op);
  if (device >= 0 && sig->kind == HVD_KIND_ALLREDUCE && sig->dtype == HVD_INT16 &&
      __atomic_load_n(&e->dev_bk, __ATOMIC_ACQUIRE) == &hvd_backend_nccl) /* auto: refused once it chose NCCL */
    return reject(HVD_ERR_INVALID, "allreduce '%s': NCCL has no int16 reduction; set HVDSHIM_GPU_OPERATIONS=MPI or "
                  "use int32", name);
  if (sig->count < 0 || sig->row_elems < 0 || (size_t)sig->count > (SIZE_MAX >> 4) / (sig->row_elems ? (size_t)sig->row_elems : 1))
    return reject(HVD_ERR_INVALID, "%s '%s': element count out of range", hvd_kind_name(sig->kind), name);
  hvd_req *r = calloc(1, sizeof *r);
  char *nm = r ? strdup(name) : NULL;
  if (!nm) {
    free(r);
    return reject(HVD_ERR_INTERNAL, "out of memory submitting '%s'", name);
  }
  r->name = nm;
  r->sig = *sig;
  r->buf = buf;
  r->in = in;
  if (a2a) r->splits = a2a->splits, r->recv_splits = a2a->recv;
  r->cache_bit = -1;
  r->t_submit = hvd_mono_s();
  if (device >= 0) {
    char err[512];
    __atomic_store_n(&e->gpu_seen, 1, __ATOMIC_RELEASE); /* cycles stay on the engine thread (engine_drive.c) */
    sig->place = r->sig.place = 1;
    r->stream = stream;
    hvd_gpu_event *share = batching && batch_ready && batch_device == device && batch_stream == stream ? batch_ready : NULL;
    if (hvd_gpu_mark_ready(device, stream, share, &r->ready, err, sizeof err) != 0) {
      hvd_eng_req_free(r);
      return reject(HVD_ERR_INVALID, "%s '%s': GPU buffer: %s", hvd_kind_name(sig->kind), name, err);
    }
    if (batching && r->ready && r->ready != batch_ready) batch_ready_set(r->ready, device, stream);
  }
  size_t bytes = (size_t)sig->count * (sig->row_elems ? (size_t)sig->row_elems : 1) * hvd_dtype_size((hvd_dtype_t)sig->dtype);
  char what[HVD_NAME_MAX + 32];
  snprintf(what, sizeof what, "%s '%s'", hvd_kind_name(sig->kind), name);
  pthread_mutex_lock(&e->qmu);
  hvd_status_t closed = refuse_if_closed(what);
  if (closed != HVD_OK) {
    hvd_eng_req_free(r);
    return closed;
  }
  if (e->follow && e->acked != e->rebuilds) { /* hvd_elastic_follow */
    char why[sizeof e->change_msg];
    snprintf(why, sizeof why, "%s", e->change_msg);
    pthread_mutex_unlock(&e->qmu);
    hvd_eng_req_free(r);
    return reject(HVD_ERR_MEMBERSHIP, "%s cannot complete: %s; the job goes on (this rank has not taken the change in "
                  "yet: hvd_elastic_ack)", what, why);
  }
  if (sig->kind == HVD_KIND_BROADCAST && (sig->root < HVD_ROOT_FIRST_ACTIVE || sig->root >= e->size)) {
    pthread_mutex_unlock(&e->qmu);
    hvd_eng_req_free(r);
    return reject(HVD_ERR_INVALID, "broadcast '%s': root %d is not a rank (0..%d, or HVD_ROOT_FIRST_ACTIVE)", name,
                  sig->root, e->size - 1);
  }
  const char *why = hvd_pset_refuse(e, sig, device);
  if (why) {
    char copy[512];
    snprintf(copy, sizeof copy, "%s", why);
    pthread_mutex_unlock(&e->qmu);
    hvd_eng_req_free(r);
    return reject(HVD_ERR_INVALID, "%s: %s", what, copy);
  }
  hvd_status_t st = hvd_handles_new(cb, cb_arg, r->stream, &r->handle);
  if (st != HVD_OK) {
    pthread_mutex_unlock(&e->qmu);
    hvd_eng_req_free(r);
    return st;
  }
  int was_empty = e->qhead == NULL;
  if (e->qtail) e->qtail->next = r;
  else e->qhead = r;
  e->qtail = r;
  e->qbytes += bytes;
  if (hvd_eng_queued_locked(e, r->t_submit, was_empty, batching, cb != NULL)) batch_wake = 1;
  if (handle) *handle = r->handle;
  __atomic_store(&e->last_submit, &r->t_submit, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&e->qmu);
  return HVD_OK;
}

static hvd_status_t submit(const char *name, hvd_sig *sig, void *buf, const void *in, int device, void *stream,
                           hvd_callback_t cb, void *cb_arg, hvd_handle_t *handle) {
  return submit_ex(name, sig, buf, in, NULL, device, stream, cb, cb_arg, handle);
}

static hvd_status_t allreduce(const char *name, void *buf, size_t count, hvd_dtype_t dtype, hvd_op_t op, int device,
                              void *stream, hvd_callback_t cb, void *cb_arg, hvd_handle_t *handle) {
  if (!buf && count) return reject(HVD_ERR_INVALID, "allreduce '%s': null buffer", name ? name : "");
  hvd_sig s = {.kind = HVD_KIND_ALLREDUCE, .dtype = (uint8_t)dtype, .op = (uint8_t)op, .count = (int64_t)count};
  if ((unsigned)dtype >= 256 || (unsigned)op >= 256) s.dtype = 255, s.op = 255;
  return submit(name, &s, buf, NULL, device, stream, cb, cb_arg, handle);
}

static hvd_status_t broadcast(const char *name, void *buf, size_t count, hvd_dtype_t dtype, int root, int device,
                              void *stream, hvd_callback_t cb, void *cb_arg, hvd_handle_t *handle) {
  if (!buf && count) return reject(HVD_ERR_INVALID, "broadcast '%s': null buffer", name ? name : "");
  hvd_sig s = {.kind = HVD_KIND_BROADCAST, .dtype = (uint8_t)dtype, .root = root, .count = (int64_t)count};
  if ((unsigned)dtype >= 256) s.dtype = 255;
  return submit(name, &s, buf, NULL, device, stream, cb, cb_arg, handle);
}

/* With qmu held: the handle of a control request (join, timeline) that the
 * engine thread takes at its next cycle; on failure qmu is released and the
 * reason recorded.  busy: this rank already has one of that kind. */
static hvd_status_t control_handle(const char *what, int busy, hvd_handle_t *h) {
  hvd_status_t st = refuse_if_closed(what);
  if (st != HVD_OK) return st;
  if (busy) {
    pthread_mutex_unlock(&e->qmu);
    return reject(HVD_ERR_INVALID, "%s: another thread of this rank is already in it", what);
  }
  st = hvd_handles_new(NULL, NULL, NULL, h);
  if (st != HVD_OK) pthread_mutex_unlock(&e->qmu);
  return st;
}

/* Blocks until every rank has called it; meanwhile this rank takes part in
 * the others' operations without data (as a finished rank does), then all
 * go on.  The last rank to join is read once the handle has completed (the
 * handle table's lock orders the engine's write before it). */
hvd_status_t hvd_join(int *last_rank) {
  hvd_handle_t h;
  pthread_mutex_lock(&e->qmu);
  hvd_status_t st = control_handle("join", e->join_busy, &h);
  if (st != HVD_OK) return st;
  e->join_busy = 1;
  e->join_asked = h;
  pthread_cond_signal(&e->qcv);
  pthread_mutex_unlock(&e->qmu);
  st = hvd_wait(h, -1.0);
  if (st == HVD_OK && last_rank) *last_rank = e->last_joined;
  pthread_mutex_lock(&e->qmu);
  e->join_busy = 0;
  pthread_mutex_unlock(&e->qmu);
  return st;
}

/* Hands a timeline start (op 1) or stop (op 2) to the engine thread and
 * waits for it. */
static hvd_status_t timeline_request(int op, const char *path, int mark_cycles) {
  char *copy = NULL;
  if (op == 1) {
    if (!path || !path[0]) return reject(HVD_ERR_INVALID, "timeline start: the path is empty");
    if (!(copy = strdup(path))) return reject(HVD_ERR_INTERNAL, "out of memory (timeline path)");
  }
  hvd_handle_t h;
  pthread_mutex_lock(&e->qmu);
  hvd_status_t st = control_handle(op == 1 ? "timeline start" : "timeline stop", e->tl_op != 0, &h);
  if (st != HVD_OK) {
    free(copy);
    return st;
  }
  e->tl_op = op, e->tl_path = copy, e->tl_mark = mark_cycles, e->tl_handle = h;
  pthread_cond_signal(&e->qcv);
  pthread_mutex_unlock(&e->qmu);
  return hvd_wait(h, -1.0);
}

hvd_status_t hvd_timeline_start(const char *path, int mark_cycles) { return timeline_request(1, path, mark_cycles); }
hvd_status_t hvd_timeline_stop(void) { return timeline_request(2, NULL, 0); }

hvd_status_t hvd_allreduce_async(const char *name, void *buf, size_t count, hvd_dtype_t dtype, hvd_op_t op,
                                 hvd_callback_t cb, void *cb_arg, hvd_handle_t *handle) {
  return allreduce(name, buf, count, dtype, op, -1, NULL, cb, cb_arg, handle);
}

hvd_status_t hvd_broadcast_async(const char *name, void *buf, size_t count, hvd_dtype_t dtype, int root,
                                 hvd_callback_t cb, void *cb_arg, hvd_handle_t *handle) {
  return broadcast(name, buf, count, dtype, root, -1, NULL, cb, cb_arg, handle);
}

hvd_status_t hvd_allreduce_batch_async(const hvd_allreduce_item *items, size_t n, hvd_handle_t *handles) {
  return hvd_allreduce_batch_async_ex(items, n, handles, 0);
}

hvd_status_t hvd_allreduce_batch_async_ex(const hvd_allreduce_item *items, size_t n, hvd_handle_t *handles,
                                          unsigned flags) {
  if (n && (!items || !handles)) return reject(HVD_ERR_INVALID, "allreduce batch: null items or handles");
  hvd_status_t st = HVD_OK;
  size_t i = 0;
  batching = 1, batch_wake = 0;
  for (; i < n && st == HVD_OK; i++) {
    const hvd_allreduce_item *it = &items[i];
    st = allreduce(it->name, it->buf, it->count, (hvd_dtype_t)it->dtype, (hvd_op_t)it->op, it->device < 0 ? -1 : it->device,
                   it->device < 0 ? NULL : it->stream, NULL, NULL, &handles[i]);
  }
  batching = 0;
  hvd_gpu_event_put(batch_ready);
  batch_ready = NULL;
  if (st != HVD_OK) {
    for (size_t j = i - 1; j < n; j++) handles[j] = HVD_NO_HANDLE;
    char why[900];
    snprintf(why, sizeof why, "%s", hvd_last_error());
    hvd_set_last_error("allreduce batch, item %zu of %zu: %s", i - 1, n, why);
  }
  hvd_eng_batch_queued(e, batch_wake, flags);
  return st;
}

static hvd_status_t bad_device(const char *what, const char *name, int device) {
  return reject(HVD_ERR_INVALID, "%s '%s': device %d is not a CUDA device ordinal", what, name ? name : "", device);
}

hvd_status_t hvd_allreduce_gpu_async(const char *name, void *buf, size_t count, hvd_dtype_t dtype, hvd_op_t op,
                                     int device, void *stream, hvd_callback_t cb, void *cb_arg,
                                     hvd_handle_t *handle) {
  if (device < 0) return bad_device("allreduce", name, device);
  return allreduce(name, buf, count, dtype, op, device, stream, cb, cb_arg, handle);
}

hvd_status_t hvd_broadcast_gpu_async(const char *name, void *buf, size_t count, hvd_dtype_t dtype, int root,
                                     int device, void *stream, hvd_callback_t cb, void *cb_arg,
                                     hvd_handle_t *handle) {
  if (device < 0) return bad_device("broadcast", name, device);
  return broadcast(name, buf, count, dtype, root, device, stream, cb, cb_arg, handle);
}

int hvd_gpu_status(char *out, size_t n) {
  char err[8];
  hvd_gpu_describe(out, n);
  return hvd_gpu_ready(err, sizeof err) == 0;
}

hvd_status_t hvd_allgather_async(const char *name, const void *in, size_t rows, size_t row_elems, hvd_dtype_t dtype,
                                 hvd_callback_t cb, void *cb_arg, hvd_handle_t *handle) {
  if (!in && rows && row_elems) return reject(HVD_ERR_INVALID, "allgather '%s': null buffer", name ? name : "");
  hvd_sig s = {.kind = HVD_KIND_ALLGATHER, .dtype = (uint8_t)dtype, .count = (int64_t)rows, .row_elems = (int64_t)row_elems};
  if ((unsigned)dtype >= 256) s.dtype = 255;
  return submit(name, &s, NULL, in, -1, NULL, cb, cb_arg, handle);
}

hvd_status_t hvd_reducescatter_async(const char *name, const void *in, void *out, size_t rows, size_t row_elems,
                                     hvd_dtype_t dtype, hvd_op_t op, hvd_callback_t cb, void *cb_arg,
                                     hvd_handle_t *handle) {
  if (!in && rows && row_elems) return reject(HVD_ERR_INVALID, "reducescatter '%s': null buffer", name ? name : "");
  if (row_elems && rows > (size_t)INT_MAX / row_elems)
    return reject(HVD_ERR_INVALID, "reducescatter '%s': more than %d elements (MPI counts are int)", name ? name : "",
                  INT_MAX);
  hvd_sig s = {.kind = HVD_KIND_REDUCESCATTER, .dtype = (uint8_t)dtype, .op = (uint8_t)op,
               .count = (int64_t)(rows * row_elems), .row_elems = (int64_t)row_elems};
  if ((unsigned)dtype >= 256 || (unsigned)op >= 256) s.dtype = 255, s.op = 255;
  return submit(name, &s, out, in, -1, NULL, cb, cb_arg, handle);
}

hvd_status_t hvd_alltoall_async(const char *name, const void *in, const int64_t *splits, size_t row_elems,
                                hvd_dtype_t dtype, int64_t *recv_splits, hvd_callback_t cb, void *cb_arg,
                                hvd_handle_t *handle) {
  /* the splits are one per member of the set the submission runs on */
  const hvd_pset *p = e->started ? hvd_pset_get(e, next_set) : NULL;
  int64_t rows = 0;
  if (!splits) return reject(HVD_ERR_INVALID, "alltoall '%s': no splits", name ? name : "");
  for (int i = 0; p && i < p->n; i++) {
    if (splits[i] < 0)
      return reject(HVD_ERR_INVALID, "alltoall '%s': split %d is negative (%lld)", name ? name : "", i,
                    (long long)splits[i]);
    rows += splits[i];
  }
  if (!in && rows && row_elems) return reject(HVD_ERR_INVALID, "alltoall '%s': null buffer", name ? name : "");
  hvd_sig s = {.kind = HVD_KIND_ALLTOALL, .dtype = (uint8_t)dtype, .count = rows, .row_elems = (int64_t)row_elems};
  if ((unsigned)dtype >= 256) s.dtype = 255;
  a2a_splits a = {splits, recv_splits};
  return submit_ex(name, &s, NULL, in, &a, -1, NULL, cb, cb_arg, handle);
}

hvd_status_t hvd_barrier(double timeout_s) {
  /* every member of a set calls its barriers in the same order: numbered per set */
  static uint64_t seq;
  hvd_pset *p = e->started ? (hvd_pset *)hvd_pset_get(e, next_set) : NULL;
  uint64_t n = __atomic_fetch_add(p ? &p->barriers : &seq, 1, __ATOMIC_SEQ_CST);
  char name[64];
  snprintf(name, sizeof name, "hvdshim.barrier.%d.%llu", next_set, (unsigned long long)n);
  hvd_sig s = {.kind = HVD_KIND_BARRIER, .dtype = HVD_UINT8};
  hvd_handle_t h;
  hvd_status_t st = submit(name, &s, NULL, NULL, -1, NULL, NULL, NULL, &h);
  if (st != HVD_OK) return st;
  return hvd_wait(h, timeout_s);
}

/* ------------------------------------------------------------------ process sets */

static hvd_status_t pset_request(hvd_sig *s, hvd_pset_arg *a) {
  static uint64_t seq; /* every rank adds and removes sets in the same order */
  char name[64];
  snprintf(name, sizeof name, "hvdshim.process_set.%llu", (unsigned long long)__atomic_fetch_add(&seq, 1, __ATOMIC_SEQ_CST));
  hvd_handle_t h;
  hvd_status_t st = submit(name, s, a, NULL, -1, NULL, NULL, NULL, &h);
  if (st != HVD_OK) return st;
  return hvd_wait(h, -1.0);
}

static int int_cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

hvd_status_t hvd_process_set_add(const int *ranks, int n, int *id) {
  if (!e->started) return reject(HVD_ERR_NOT_INIT, "process set add: hvd_init() has not been called");
  if (!ranks || n <= 0) return reject(HVD_ERR_INVALID, "process set add: give at least one rank");
  int *sorted = malloc(sizeof(int) * (size_t)n);
  if (!sorted) return reject(HVD_ERR_INTERNAL, "out of memory (process set add)");
  memcpy(sorted, ranks, sizeof(int) * (size_t)n);
  qsort(sorted, (size_t)n, sizeof(int), int_cmp);
  uint32_t h = 2166136261u; /* FNV-1a over the members: the coordinator compares it across ranks */
  for (int i = 0; i < n; i++) {
    if (sorted[i] < 0 || sorted[i] >= e->size || (i && sorted[i] == sorted[i - 1])) {
      int bad = sorted[i];
      free(sorted);
      if (bad < 0 || bad >= e->size)
        return reject(HVD_ERR_INVALID, "process set add: %d is not a rank of this job (0..%d)", bad, e->size - 1);
      return reject(HVD_ERR_INVALID, "process set add: rank %d is listed twice", bad);
    }
    for (int b = 0; b < 4; b++) h = (h ^ (uint8_t)((unsigned)sorted[i] >> (8 * b))) * 16777619u;
  }
  hvd_pset_arg a = {sorted, n, -1};
  hvd_sig s = {.kind = HVD_KIND_PSET_ADD, .dtype = HVD_INT32, .count = n, .shape = h ? h : 1};
  hvd_status_t st = pset_request(&s, &a);
  free(sorted);
  if (st == HVD_OK && id) *id = a.id;
  return st;
}

hvd_status_t hvd_process_set_remove(int id) {
  if (!e->started) return reject(HVD_ERR_NOT_INIT, "process set remove: hvd_init() has not been called");
  if (id == 0) return reject(HVD_ERR_INVALID, "process set remove: the global process set (0) cannot be removed");
  const hvd_pset *p = hvd_pset_get(e, id);
  if (!p || __atomic_load_n(&p->removed, __ATOMIC_ACQUIRE))
    return reject(HVD_ERR_INVALID, "process set remove: process set %d does not exist (never added, or removed)", id);
  hvd_sig s = {.kind = HVD_KIND_PSET_REMOVE, .dtype = HVD_INT32, .root = id};
  return pset_request(&s, NULL);
}

/* A set's size and this rank's place in it (-1: not a member), or -1 for a
 * set that does not exist. */
int hvd_process_set_size(int id) {
  pthread_mutex_lock(&e->qmu); /* the registry is freed when the engine stops */
  const hvd_pset *p = e->accepting ? hvd_pset_get(e, id) : NULL;
  int n = p && !__atomic_load_n(&p->removed, __ATOMIC_ACQUIRE) ? p->n : -1;
  pthread_mutex_unlock(&e->qmu);
  return n;
}

int hvd_process_set_rank(int id) {
  pthread_mutex_lock(&e->qmu);
  const hvd_pset *p = e->accepting ? hvd_pset_get(e, id) : NULL;
  int me = -1;
  for (int i = 0; p && !__atomic_load_n(&p->removed, __ATOMIC_ACQUIRE) && i < p->n; i++)
    if (p->ranks[i] == e->rank) me = i;
  pthread_mutex_unlock(&e->qmu);
  return me;
}
