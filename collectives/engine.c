/* The engine: one background thread per process that negotiates, fuses and
 * executes collectives.  This file holds the thread, its cycle (admission,
 * the control round, the slow path, autotune glue) and start/stop; the
 * entry points are in engine_api.c, execution in engine_exec.c, the
 * coordinator in coordinator.c, the shared state in engine_internal.h.
 *
 * DESIGN
 * ------
 * User threads only enqueue (submit_*: validate, take a handle, push onto
 * the queue under `qmu`).  Everything else happens on the engine thread, in
 * cycles run every HVDSHIM_CYCLE_TIME ms (sooner when the queued bytes reach
 * the fusion threshold or a stop is requested).  Each cycle, on every rank:
 *
 *  1. Admit queued requests into `pending` (name -> request).  A request
 *     whose name is in the response cache with the same signature only sets
 *     its cache bit; any other goes to the outbox for the coordinator.
 *  2. One MPI_Allreduce(BAND) over a vector of 64-bit words:
 *       [~flags][~shutdown-rank bits][ready cache bits][~invalid cache bits]
 *     (OR is computed as ~AND(~x)).  Bits set on every rank are ready
 *     everywhere; an invalid bit (a cached request waiting too long on some
 *     rank, i.e. a possible stall) sends that entry back through the
 *     coordinator so the stall inspector can name the missing ranks.
 *  3. If any rank has outbox requests (or rank 0 must broadcast a fatal
 *     error): the slow path.  Requests are gathered to rank 0, which keeps a
 *     table name -> per-rank signature; a name reported by every rank becomes
 *     an EXEC response (or an ERROR naming the disagreeing ranks).  The
 *     response list is broadcast.
 *  4. Every rank now holds the same ordered list: cached-ready tensors in bit
 *     order, then the slow-path responses in the coordinator's order.  Cache
 *     insertions and evictions happen while walking that list, so the cache
 *     stays identical on every rank.  Consecutive allreduces of one dtype
 *     (and compatible op) are grouped up to HVDSHIM_FUSION_THRESHOLD bytes
 *     and reduced (backend_mpi.c); then handles complete.
 *  5. Rank 0 runs the stall inspector over its table.
 *
 * Autotune (HVDSHIM_AUTOTUNE=1).  Fusion threshold and cycle time change
 * while the job runs, but every rank must group the same list the same way,
 * so rank 0 alone decides (autotune.c, fed with the throughput it measures
 * between step marks) and the pair travels in two more words of the control
 * vector: rank 0 puts its values there, the others all ones, and the BAND
 * leaves rank 0's.  Every rank applies them in the same cycle, before
 * grouping.
 *
 * Join.  A rank that stops (hvd_shutdown, or the program's normal exit)
 * takes no new submissions, drains its pending work for up to
 * HVDSHIM_SHUTDOWN_TIMEOUT_SECONDS, then raises its bit in the joined-rank
 * words of the control vector.  From that cycle on it takes part in every
 * operation the others agree on without contributing (a "phantom" request:
 * the identity of the reduction, zero rows, a receive-only buffer), its cache
 * bits count as ready, the coordinator counts it as present, and averages
 * divide by the ranks still submitting (as Horovod's join).  A broadcast
 * whose root has joined fails on every rank; root HVD_ROOT_FIRST_ACTIVE
 * resolves to the lowest rank still submitting.  When every rank has joined,
 * all leave in the same cycle.  A dead peer is the watchdog's (liveness.c).
 *
 * Ownership: see engine_internal.h.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include "engine_internal.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../base/config.h"
#include "../base/log.h"
#include "autotune.h"
#include "backend_mpi.h"
#include "dtype.h"
#include "fusion.h"
#include "gpu.h"
#include "handles.h"
#include "liveness.h"
#include "metrics.h"
#include "shm.h"
#include "strmap.h"
#include "timeline.h"
#include "wire.h"

enum { F_SLOW = 1, F_STOPPED = 2 }; /* F_STOPPED: a rank has stopped for good (hvd_shutdown) */

hvd_engine_state hvd_eng = {.qmu = PTHREAD_MUTEX_INITIALIZER, .qcv = PTHREAD_COND_INITIALIZER};
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

double hvd_eng_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
double hvd_eng_us(double t) { return (t - E->t0) * 1e6; }

int hvd_eng_mpi_check(int rc, const char *what) {
  if (rc == MPI_SUCCESS) return 0;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  HVD_FATAL("%s failed: %s", what, msg);
}

static void *abort_deadline(void *arg) {
  pthread_setname_np(pthread_self(), "hvd-abort");
  struct timespec ts = {10, 0};
  nanosleep(&ts, NULL);
  _exit((int)(intptr_t)arg); /* MPI_Abort did not end us: leave anyway */
}

static void abort_job(int code) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  pthread_t t;
  if (pthread_create(&t, NULL, abort_deadline, (void *)(intptr_t)code) == 0) pthread_detach(t);
  if (up && !down) MPI_Abort(MPI_COMM_WORLD, code);
}

/* Grows an engine-thread array to at least n elements (fatal when out of
 * memory). */
void hvd_eng_grow(void *arr, size_t *cap, size_t n, size_t elem, const char *what) {
  if (n <= *cap) return;
  void *p = realloc(*(void **)arr, n * elem);
  if (!p) HVD_FATAL("out of memory (%s)", what);
  *(void **)arr = p;
  *cap = n;
}

/* ------------------------------------------------------------------ completion */

void hvd_eng_req_free(hvd_req *r) {
  if (r->phantom && r->sig.place) hvd_gpu_free(r->buf);
  else if (r->phantom) free(r->buf);
  hvd_gpu_event_put(r->ready);
  free(r->name);
  free(r);
}

static void unpend(hvd_req *r) {
  if (hvd_strmap_get(E->pending, r->name) == r) {
    hvd_strmap_del(E->pending, r->name);
    E->npending--;
  }
}

void hvd_eng_finish(hvd_req *r, hvd_status_t st, const char *msg, void *gathered, size_t rows) {
  unpend(r);
  hvd_handles_complete(r->handle, st, msg, gathered, rows);
  hvd_eng_req_free(r);
}

/* A GPU operation done on the engine stream: the handle carries the event. */
void hvd_eng_finish_gpu(hvd_req *r, hvd_gpu_event *done) {
  unpend(r);
  hvd_handles_complete_ok(&r->handle, 1, done);
  hvd_gpu_event_put(done);
  hvd_eng_req_free(r);
}

typedef struct {
  hvd_req **v;
  size_t n;
} req_list;

static void collect(const char *key, void *value, void *ctx) {
  (void)key;
  req_list *l = ctx;
  l->v[l->n++] = value;
}

/* Fails everything admitted on this rank (pending, cached or in the outbox). */
static void fail_pending(const char *why) {
  char msg[HVD_NAME_MAX + 600];
  for (int b = 0; b < E->cache.cap; b++) E->cache.e[b].pending = NULL;
  E->nout = 0;
  req_list l = {malloc(sizeof(hvd_req *) * (E->npending + 1)), 0};
  if (!l.v) return;
  hvd_strmap_each(E->pending, collect, &l);
  for (size_t i = 0; i < l.n; i++) {
    snprintf(msg, sizeof msg, "%s '%s' cannot complete: %s", hvd_kind_name(l.v[i]->sig.kind), l.v[i]->name, why);
    hvd_eng_finish(l.v[i], HVD_ERR_SHUTDOWN, msg, NULL, 0);
  }
  free(l.v);
}

/* Ends the engine's service: later submissions fail with `why`, and so does
 * everything queued or pending. */
static void fail_everything(const char *why) {
  pthread_mutex_lock(&E->qmu);
  E->accepting = 0;
  snprintf(E->closed_msg, sizeof E->closed_msg, "%s", why);
  hvd_req *q = E->qhead;
  E->qhead = E->qtail = NULL;
  pthread_mutex_unlock(&E->qmu);
  char msg[HVD_NAME_MAX + 600];
  for (hvd_req *n; q; q = n) {
    n = q->next;
    snprintf(msg, sizeof msg, "%s '%s' cannot complete: %s", hvd_kind_name(q->sig.kind), q->name, why);
    hvd_handles_complete(q->handle, HVD_ERR_SHUTDOWN, msg, NULL, 0);
    hvd_eng_req_free(q);
  }
  fail_pending(why);
}

/* A joined rank's stand-in for an operation the others agreed on: the
 * identity of the reduction (allreduce), a receive buffer (broadcast), no
 * rows (allgather). */
static hvd_req *phantom(const char *name, const hvd_sig *sig) {
  hvd_req *r = calloc(1, sizeof *r);
  if (!r || !(r->name = strdup(name))) HVD_FATAL("out of memory (joined rank)");
  r->sig = *sig;
  r->phantom = 1;
  r->handle = HVD_NO_HANDLE;
  r->cache_bit = -1;
  r->t_submit = r->t_ready = hvd_eng_now();
  if (sig->kind == HVD_KIND_ALLGATHER || sig->kind == HVD_KIND_ALLTOALL) {
    r->sig.count = 0;
  } else if (sig->kind != HVD_KIND_BARRIER && sig->count > 0 && sig->place) {
    char err[512];
    r->buf = hvd_gpu_identity((size_t)sig->count, (hvd_dtype_t)sig->dtype,
                              sig->kind == HVD_KIND_ALLREDUCE ? (hvd_op_t)sig->op : HVD_SUM, err, sizeof err);
    if (!r->buf) HVD_FATAL("this rank has finished but must take part in GPU operation '%s': %s", name, err);
  } else if (sig->kind != HVD_KIND_BARRIER && sig->count > 0) {
    r->buf = malloc((size_t)sig->count * hvd_dtype_size((hvd_dtype_t)sig->dtype));
    if (!r->buf) HVD_FATAL("out of memory: a joined rank's stand-in for '%s'", name);
    hvd_fill_identity(r->buf, (size_t)sig->count, (hvd_dtype_t)sig->dtype,
                      sig->kind == HVD_KIND_ALLREDUCE || sig->kind == HVD_KIND_REDUCESCATTER ? (hvd_op_t)sig->op
                                                                                            : HVD_SUM);
  }
  if (hvd_strmap_put(E->pending, r->name, r) != 0) HVD_FATAL("out of memory (pending)");
  E->npending++;
  return r;
}

/* A rank outside an operation's process set walks it in the agreed list
 * without running it (engine_psets.c): no buffer, no handle, not pending. */
static hvd_req *skip_req(const char *name, const hvd_sig *sig) {
  hvd_req *r = calloc(1, sizeof *r);
  if (!r || !(r->name = strdup(name))) HVD_FATAL("out of memory (process set stand-in)");
  r->sig = *sig;
  r->phantom = r->skip = 1;
  r->handle = HVD_NO_HANDLE;
  r->cache_bit = -1;
  return r;
}

/* ------------------------------------------------------------------ cache */

static int cache_lookup(const char *name) { return hvd_cache_lookup(&E->cache, name); }
static int is_cached(const char *name, void *ctx) { return (void)ctx, cache_lookup(name) >= 0; }
static int in_set(int set, int rank, void *ctx) { return (void)ctx, hvd_pset_member(set, rank); }

static void outbox_push(hvd_req *r) {
  if (E->nout == E->capout) {
    size_t n = E->capout ? E->capout * 2 : 64;
    hvd_req **p = realloc(E->outbox, n * sizeof *p);
    if (!p) HVD_FATAL("out of memory (outbox)");
    E->outbox = p;
    E->capout = n;
  }
  r->cache_bit = -1;
  E->outbox[E->nout++] = r;
}

/* Drop a cache entry; this rank's request waiting on it renegotiates
 * through the coordinator. */
static void cache_erase(int bit) {
  hvd_req *r = hvd_cache_erase(&E->cache, bit);
  if (r) outbox_push(r);
}

static void cache_insert(const char *name, const hvd_sig *sig) {
  /* per-rank row counts vary, and sets are added once: always negotiated */
  if (sig->kind == HVD_KIND_ALLGATHER || sig->kind == HVD_KIND_ALLTOALL || sig->kind == HVD_KIND_PSET_ADD ||
      sig->kind == HVD_KIND_PSET_REMOVE)
    return;
  void *evicted = NULL;
  if (hvd_cache_insert(&E->cache, name, sig, E->tick, &evicted) < 0 && E->cache.cap > 0)
    HVD_FATAL("out of memory (response cache)");
  if (evicted) outbox_push(evicted);
}

/* ------------------------------------------------------------------ admission */

static int sig_equal(const hvd_sig *a, const hvd_sig *b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
         a->count == b->count && a->row_elems == b->row_elems && a->place == b->place && a->shape == b->shape &&
         a->set == b->set;
}

static void admit(hvd_req *r) {
  if (hvd_strmap_get(E->pending, r->name)) {
    char msg[HVD_NAME_MAX + 128];
    snprintf(msg, sizeof msg, "tensor '%s' is already in flight on this rank: wait for it before submitting again",
             r->name);
    hvd_handles_complete(r->handle, HVD_ERR_INVALID, msg, NULL, 0);
    hvd_eng_req_free(r);
    return;
  }
  if (hvd_strmap_put(E->pending, r->name, r) != 0) HVD_FATAL("out of memory (pending)");
  E->npending++;
  int bit = cache_lookup(r->name);
  if (bit >= 0 && sig_equal(&E->cache.e[bit].sig, &r->sig) && !E->cache.e[bit].pending) {
    E->cache.e[bit].pending = r;
    r->cache_bit = bit;
    return;
  }
  outbox_push(r);
}

/* ------------------------------------------------------------------ slow path */

static void exec_push(hvd_req *r, const int64_t *rows) {
  if (E->nexec == E->capexec) {
    size_t n = E->capexec ? E->capexec * 2 : 256;
    exec_item *p = realloc(E->exec, n * sizeof *p);
    if (!p) HVD_FATAL("out of memory (responses)");
    E->exec = p;
    E->capexec = n;
  }
  E->exec[E->nexec].req = r;
  E->exec[E->nexec].rows = rows;
  E->nexec++;
}

static void slow_path(double now) {
  E->stats.slow_rounds++;
  hvd_buf_reset(&E->sendbuf);
  for (size_t i = 0; i < E->nout; i++)
    hvd_wire_put_req(&E->sendbuf, &E->outbox[i]->sig, now - E->outbox[i]->t_submit, E->outbox[i]->name);
  E->nout = 0;
  if (E->sendbuf.bad || E->sendbuf.len > INT_MAX) HVD_FATAL("negotiation message too large or out of memory");
  int mylen = (int)E->sendbuf.len;
  hvd_eng_mpi_check(MPI_Gather(&mylen, 1, MPI_INT, E->lens, 1, MPI_INT, 0, E->comm), "MPI_Gather (negotiation)");
  size_t total = 0;
  if (E->rank == 0) {
    for (int r = 0; r < E->size; r++) {
      E->displs[r] = (int)total;
      total += (size_t)E->lens[r];
    }
    if (total > INT_MAX) HVD_FATAL("negotiation round larger than 2 GiB");
    hvd_buf_reset(&E->gathered);
    if (hvd_buf_reserve(&E->gathered, total + 1) != 0) HVD_FATAL("out of memory (negotiation)");
    E->gathered.len = total;
  }
  hvd_eng_mpi_check(MPI_Gatherv(E->sendbuf.p, mylen, MPI_BYTE, E->gathered.p, E->lens, E->displs, MPI_BYTE, 0, E->comm),
            "MPI_Gatherv (negotiation)");
  if (E->rank == 0) hvd_coord_round(&E->coord, E->gathered.p, E->lens, E->displs, now, &E->resp);
  int64_t rlen = (int64_t)E->resp.len;
  hvd_eng_mpi_check(MPI_Bcast(&rlen, 1, MPI_INT64_T, 0, E->comm), "MPI_Bcast (responses)");
  if (rlen > INT_MAX) HVD_FATAL("response list larger than 2 GiB");
  if (E->rank != 0) {
    hvd_buf_reset(&E->resp);
    if (hvd_buf_reserve(&E->resp, (size_t)rlen + 1) != 0) HVD_FATAL("out of memory (responses)");
    E->resp.len = (size_t)rlen;
  }
  hvd_eng_mpi_check(MPI_Bcast(E->resp.p, (int)rlen, MPI_BYTE, 0, E->comm), "MPI_Bcast (responses)");
  E->resp.pos = 0;
  hvd_wire_resp w;
  char name[HVD_NAME_MAX + 1];
  while (hvd_buf_more(&E->resp)) {
    if (hvd_wire_get_resp(&E->resp, &w, E->size) != 0) HVD_FATAL("corrupt response list from the coordinator");
    size_t nl = w.name_len > HVD_NAME_MAX ? HVD_NAME_MAX : w.name_len;
    memcpy(name, w.name, nl);
    name[nl] = 0;
    if (w.type == HVD_RESP_FATAL) {
      char *m = strndup(w.msg, w.msg_len);
      HVD_FATAL("%s", m ? m : "fatal error from the coordinator");
    }
    if (w.type == HVD_RESP_INVALIDATE) {
      int bit = cache_lookup(name);
      if (bit >= 0) cache_erase(bit);
      continue;
    }
    if (!hvd_pset_member(w.sig.set, E->rank)) { /* another set's operation: walked in step, never run */
      if (w.type == HVD_RESP_EXEC) {
        cache_insert(name, &w.sig);
        exec_push(skip_req(name, &w.sig), w.rows);
      }
      continue;
    }
    hvd_req *r = hvd_strmap_get(E->pending, name);
    if (!r && E->joined_self) {
      if (w.type == HVD_RESP_ERROR) continue; /* the submitting ranks report it */
      r = phantom(name, &w.sig);
    }
    if (!r || r->cache_bit >= 0)
      HVD_FATAL("internal error: the coordinator answered '%s', which this rank has not submitted", name);
    if (w.type == HVD_RESP_ERROR) {
      char *m = strndup(w.msg, w.msg_len);
      HVD_ERROR("%s", m ? m : name);
      hvd_eng_finish(r, HVD_ERR_MISMATCH, m, NULL, 0);
      free(m);
      continue;
    }
    r->t_ready = now;
    cache_insert(name, &r->sig);
    exec_push(r, w.rows);
  }
}

/* ------------------------------------------------------------------ the cycle */

#define HVD_IDLE_CYCLE_S 0.1
/* Longest sleep between polls of a control round: peers that are late are
 * usually computing, and every wake-up takes time from a training thread. */
#define HVD_POLL_NAP_MAX_NS 320000L

/* The per-cycle bitvector allreduce.  Peers may arrive up to a cycle later
 * (their timer, not a submission, wakes them), so instead of a blocking call
 * that busy-polls a core the training thread needs, poll a nonblocking one:
 * spin briefly (the common, aligned case), then sleep, doubling the sleep
 * from 20 us up to HVD_POLL_NAP_MAX_NS. */
static void control_allreduce(uint64_t *v) {
  if (hvd_shm_control(v)) return; /* every rank on this host: through shared memory */
  MPI_Request req;
  hvd_eng_mpi_check(MPI_Iallreduce(MPI_IN_PLACE, v, E->nwords, MPI_UINT64_T, MPI_BAND, E->comm, &req), "MPI_Iallreduce (cycle)");
  int done = 0;
  double t0 = hvd_eng_now();
  long nap_ns = 20000;
  for (;;) {
    hvd_eng_mpi_check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test (cycle)");
    if (done) break;
    if (hvd_eng_now() - t0 > 50e-6) {
      struct timespec ts = {0, nap_ns};
      nanosleep(&ts, NULL);
      if (nap_ns < HVD_POLL_NAP_MAX_NS) nap_ns *= 2;
    }
  }
}

/* Words 1..wr of the control vector hold ~joined bits: after the BAND a
 * cleared bit means that rank has joined.  *last: the highest rank that
 * joined in this cycle (unchanged when none did). */
static int agree_joined(const uint64_t *v, int *last) {
  int n = 0;
  for (int r = 0; r < E->size; r++) {
    int j = !(v[1 + r / 64] & ((uint64_t)1 << (r % 64)));
    if (j && !E->joined[r]) *last = r;
    E->joined[r] = (uint8_t)j;
    n += j;
  }
  return n;
}

/* Every rank has joined and none has stopped for good: every rank's
 * hvd_join returns (the last rank to join) and all take part again. */
static void end_join(void) {
  E->joined_self = 0;
  memset(E->joined, 0, (size_t)E->size);
  E->njoined = 0;
  if (E->rank == 0) HVD_DEBUG("every rank has joined (the last: rank %d); all go on", E->last_joined);
  hvd_handle_t h = E->join_handle;
  E->join_handle = HVD_NO_HANDLE;
  if (h != HVD_NO_HANDLE) hvd_handles_complete(h, HVD_OK, NULL, NULL, 0);
}

static void fail_join(const char *why) {
  hvd_handle_t h = E->join_handle;
  E->join_handle = HVD_NO_HANDLE;
  if (h != HVD_NO_HANDLE) hvd_handles_complete(h, HVD_ERR_SHUTDOWN, why, NULL, 0);
}

/* Every rank, same cycle: the pair rank 0 sent in the control vector. */
static void apply_tuning(uint64_t fusion, uint64_t cycle_ns) {
  E->fusion = (size_t)fusion;
  E->cycle_s = (double)cycle_ns * 1e-9;
  __atomic_store_n(&E->pub_fusion, E->fusion, __ATOMIC_RELAXED);
  __atomic_store_n(&E->pub_cycle_ns, cycle_ns, __ATOMIC_RELAXED);
  /* "fixed" is published with the chosen pair itself (rank 0, which decides
   * and writes the metrics): from the cycle the search ends to the one that
   * applies its choice, a metrics line read "fixed" beside the last pair
   * tried */
  if (E->rank == 0 && E->autotune && hvd_tuner_done(&E->tuner) && fusion == (uint64_t)E->tuner.fusion &&
      cycle_ns == (uint64_t)llround(E->tuner.cycle_ms * 1e6))
    __atomic_store_n(&E->pub_tune, 2, __ATOMIC_RELAXED);
}

static void format_bytes(size_t b, char *out, size_t n) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) snprintf(out, n, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) snprintf(out, n, "%zuK", b >> 10);
  else snprintf(out, n, "%zu", b);
}

/* Rank 0, after each cycle: close a measurement window once it holds
 * HVDSHIM_AUTOTUNE_STEPS_PER_SAMPLE step marks (or, in a program that marks
 * no steps, 0.2 s with some bytes reduced) and feed its throughput to the
 * tuner; its next pair goes out with the next cycle. */
#define HVD_TUNE_WINDOW_S 0.2
static void tune(double now) {
  if (hvd_tuner_done(&E->tuner)) return;
  uint64_t steps = __atomic_load_n(&E->steps, __ATOMIC_RELAXED), bytes = E->stats.bytes_reduced;
  if (E->win_t == 0) {
    E->win_t = now, E->win_steps = steps, E->win_bytes = bytes;
    return;
  }
  double dt = now - E->win_t;
  if (E->tune_mode == 0 && steps > E->win_steps) E->tune_mode = 1;
  if (E->tune_mode == 0 && dt >= HVD_TUNE_WINDOW_S && bytes > E->win_bytes) E->tune_mode = 2;
  uint64_t per = E->tune_per;
  if (E->tune_mode == 0 || (E->tune_mode == 1 && steps - E->win_steps < per) ||
      (E->tune_mode == 2 && (dt < HVD_TUNE_WINDOW_S || bytes == E->win_bytes)))
    return;
  double score = E->tune_mode == 1 ? (double)(steps - E->win_steps) / dt : (double)(bytes - E->win_bytes) / dt;
  E->win_t = now, E->win_steps = steps, E->win_bytes = bytes;
  if (!hvd_tuner_feed(&E->tuner, score)) return;
  char f[32];
  format_bytes(E->tuner.fusion, f, sizeof f);
  if (!hvd_tuner_done(&E->tuner)) {
    HVD_DEBUG("autotune: trying fusion threshold %s, cycle time %g ms", f, E->tuner.cycle_ms);
    return;
  }
  /* published as "fixed" by apply_tuning when the choice is applied */
  /* a result the user asked for: printed as info, but at the default level (warn) too */
  if (hvd_log_threshold >= HVD_LOG_WARN)
    hvd_log_write(HVD_LOG_INFO, __FILE__, __LINE__,
                "autotune: fixed HVDSHIM_FUSION_THRESHOLD=%s and HVDSHIM_CYCLE_TIME=%g (ms) after %d measurements; "
                "%.4g %s with them",
                f, E->tuner.cycle_ms, E->tuner.measured, E->tuner.chosen_score,
                E->tune_mode == 1 ? "steps/s" : "bytes/s");
}

void hvd_engine_tuning(hvd_tuning_now *out) {
  static const char *st[] = {"off", "tuning", "fixed"};
  out->fusion = __atomic_load_n(&E->pub_fusion, __ATOMIC_RELAXED);
  out->cycle_ms = (double)__atomic_load_n(&E->pub_cycle_ns, __ATOMIC_RELAXED) * 1e-6;
  out->autotune = st[__atomic_load_n(&E->pub_tune, __ATOMIC_RELAXED)];
}

/* hvd_timeline_start/stop on the engine thread (the timeline's owner):
 * rank 0 closes the current file and, for a start, opens the new one. */
static void timeline_request(int op, char *path, int mark, hvd_handle_t h) {
  char why[600] = "";
  hvd_status_t st = HVD_OK;
  if (E->rank == 0) {
    hvd_timeline_close();
    if (op == 1 && hvd_timeline_open(path, why, sizeof why) != 0) st = HVD_ERR_INVALID;
  }
  if (st == HVD_OK) E->mark_cycles = op == 1 && mark;
  free(path);
  hvd_handles_complete(h, st, st == HVD_OK ? NULL : why, NULL, 0);
}

static int cycle(void) {
  double now = hvd_eng_now();
  pthread_mutex_lock(&E->qmu);
  hvd_req *q = E->qhead;
  E->qhead = E->qtail = NULL;
  E->qbytes = 0;
  int stopping = E->stop_requested;
  double stop_time = E->stop_time;
  if (E->join_asked != HVD_NO_HANDLE) { /* hvd_join: this rank joins once its own work has completed */
    E->join_handle = E->join_asked;
    E->join_asked = HVD_NO_HANDLE;
  }
  int tl_op = E->tl_op, tl_mark = E->tl_mark;
  char *tl_path = E->tl_path;
  hvd_handle_t tl_handle = E->tl_handle;
  E->tl_op = 0, E->tl_path = NULL, E->tl_handle = HVD_NO_HANDLE;
  pthread_mutex_unlock(&E->qmu);
  if (tl_op) timeline_request(tl_op, tl_path, tl_mark, tl_handle);
  for (hvd_req *n; q; q = n) {
    n = q->next;
    admit(q);
  }
  E->stats.cycles++;
  if (E->join_handle != HVD_NO_HANDLE && !E->joined_self && E->npending == 0) E->joined_self = 1;
  if (stopping && !E->stopped_self && (E->npending == 0 || now - stop_time >= E->shutdown_timeout)) {
    if (E->npending) {
      HVD_WARN("joining with %zu operation(s) in flight: peers did not submit them within "
               "HVDSHIM_SHUTDOWN_TIMEOUT_SECONDS=%g", E->npending, E->shutdown_timeout);
      fail_pending("this rank finished (hvd_shutdown or exit) before every rank submitted it");
    }
    E->joined_self = E->stopped_self = 1;
  }

  uint64_t *v = E->vec, flags = 0;
  if (E->nout > 0 || (E->rank == 0 && E->coord.fatal_msg)) flags |= F_SLOW;
  if (E->stopped_self) flags |= F_STOPPED;
  v[0] = ~flags;
  for (int w = 0; w < E->wr; w++) v[1 + w] = ~(uint64_t)0;
  if (E->joined_self) v[1 + E->rank / 64] &= ~((uint64_t)1 << (E->rank % 64));
  uint64_t *ready = v + 1 + E->wr, *invalid = ready + E->wc;
  for (int w = 0; w < E->wc; w++) ready[w] = E->joined_self ? ~(uint64_t)0 : 0, invalid[w] = ~(uint64_t)0;
  for (int b = 0; b < E->cache.cap && !E->joined_self; b++) {
    hvd_req *r = E->cache.e[b].pending;
    if (!r && E->cache.e[b].name && E->cache.e[b].sig.set && !hvd_pset_member(E->cache.e[b].sig.set, E->rank))
      ready[b / 64] |= (uint64_t)1 << (b % 64); /* another set's: ready whenever its members are */
    if (!r) continue;
    ready[b / 64] |= (uint64_t)1 << (b % 64);
    if (now - r->t_submit > E->stale_age) invalid[b / 64] &= ~((uint64_t)1 << (b % 64));
  }
  if (E->autotune) {
    v[E->tw] = E->rank == 0 ? (uint64_t)E->tuner.fusion : ~(uint64_t)0;
    v[E->tw + 1] = E->rank == 0 ? (uint64_t)llround(E->tuner.cycle_ms * 1e6) : ~(uint64_t)0;
  }
  hvd_liveness_busy(1);
  control_allreduce(v);
  if (E->autotune) apply_tuning(v[E->tw], v[E->tw + 1]);
  hvd_liveness_tick();
  flags = ~v[0];
  int before = E->njoined;
  E->njoined = agree_joined(v, &E->last_joined);
  if (E->njoined == E->size && !(flags & F_STOPPED)) { /* every rank is in hvd_join: it returns everywhere */
    hvd_liveness_busy(0);
    end_join();
    return 1;
  }
  if (E->njoined == E->size) { /* everyone finished: all leave in this cycle */
    hvd_liveness_busy(0);
    fail_join("hvd_join: a rank has finished (hvd_shutdown or exit), so not every rank can join");
    fail_everything("every rank has finished (hvd_shutdown or exit) before it was submitted everywhere");
    return 0;
  }
  if (E->njoined != before && E->rank == 0) {
    char list[256];
    hvd_rank_list(E->joined, E->size, 1, list, sizeof list);
    HVD_INFO("rank(s) %s finished; the others go on (averages over %d rank(s))", list, E->size - E->njoined);
  }

  for (int b = 0; b < E->cache.cap; b++) {
    uint64_t m = (uint64_t)1 << (b % 64);
    if (ready[b / 64] & m) {
      hvd_req *r = E->cache.e[b].pending;
      const hvd_sig *cs = &E->cache.e[b].sig;
      if (!r && E->cache.e[b].name && !hvd_pset_member(cs->set, E->rank)) r = skip_req(E->cache.e[b].name, cs);
      else if (!r && E->joined_self && E->cache.e[b].name) r = phantom(E->cache.e[b].name, cs);
      if (!r) HVD_FATAL("internal error: cache bit %d ready everywhere but not pending here", b);
      E->cache.e[b].pending = NULL;
      r->cache_bit = -1;
      r->t_ready = now;
      E->stats.cache_hits++;
      exec_push(r, NULL);
    } else if (!(invalid[b / 64] & m)) {
      cache_erase(b);
    }
  }
  /* A change in the joined set goes through the coordinator on every rank,
   * so what waited only for the new joiners is answered. */
  if ((flags & F_SLOW) || E->njoined != before) slow_path(now);
  hvd_eng_execute();
  char gerr[512];
  if (E->dev_bk && E->dev_bk->check_async && E->dev_bk->check_async(gerr, sizeof gerr) != 0) HVD_FATAL("%s", gerr);
  hvd_liveness_busy(0);
  if (E->rank == 0) hvd_coord_stall_check(&E->coord, hvd_eng_now());
  if (E->autotune && E->rank == 0) tune(hvd_eng_now());
  if (hvd_timeline_enabled()) {
    if (E->mark_cycles) hvd_timeline_instant("CYCLE_START", hvd_eng_us(now));
    hvd_timeline_flush();
  }
  return 1;
}

static void *engine_main(void *arg) {
  (void)arg;
  for (;;) {
    double start = hvd_eng_now();
    if (!cycle()) break;
    /* Idle (nothing in flight here, nothing being coordinated): sleep until
     * a submission or HVD_IDLE_CYCLE_S instead of running a control round
     * every cycle.  Peers with work wait in their round until this rank
     * submits too (its submission wakes it), which they would anyway; the
     * bounded idle period keeps stall reports and shutdown timely. */
    int idle = !E->joined_self && E->npending == 0 && E->nout == 0 && !(E->rank == 0 && hvd_coord_busy(&E->coord));
    double deadline = start + (idle && E->cycle_s < HVD_IDLE_CYCLE_S ? HVD_IDLE_CYCLE_S : E->cycle_s);
    pthread_mutex_lock(&E->qmu);
    while (!(E->stop_requested && !E->stopped_self) && !E->qhead && E->join_asked == HVD_NO_HANDLE && !E->tl_op) { /* a stop or join request needs a cycle */
      double t = hvd_eng_now();
      if (t >= deadline) break;
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      double abs_t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + (deadline - t);
      ts.tv_sec = (time_t)abs_t;
      ts.tv_nsec = (long)((abs_t - (double)ts.tv_sec) * 1e9);
      pthread_cond_timedwait(&E->qcv, &E->qmu, &ts);
    }
    pthread_mutex_unlock(&E->qmu);
  }
  hvd_liveness_busy(1); /* every rank is here in the same cycle: NCCL's teardown is bounded by the watchdog */
  hvd_gpu_engine_stop(E->dev_bk);
  hvd_liveness_busy(0);
  return NULL;
}

/* ------------------------------------------------------------------ lifecycle */

/* The settings marked AGREE in settings.def shape the collectives every
 * rank issues (how tensors are grouped and cut into pieces, the control
 * vector's length, the GPU backend): a rank that differs would make the
 * others' MPI calls mismatch, so a difference ends the start on every rank
 * with one line naming it. */
static int settings_agree(char *err, size_t errlen) {
  hvd_cfg_id ids[HVD_CFG_COUNT];
  int n = 0;
  for (int id = 0; id < HVD_CFG_COUNT; id++)
    if (hvd_cfg_table[id].scope == HVD_SCOPE_AGREE) ids[n++] = (hvd_cfg_id)id;
  int64_t mine[HVD_CFG_COUNT], *all = malloc(sizeof *all * (size_t)(n ? n : 1) * (size_t)E->size);
  if (!all) return snprintf(err, errlen, "out of memory starting the engine"), -1;
  for (int k = 0; k < n; k++) mine[k] = hvd_cfg_int(ids[k]);
  int rc = MPI_Allgather(mine, n, MPI_INT64_T, all, n, MPI_INT64_T, E->comm);
  for (int r = 0; r < E->size && rc == MPI_SUCCESS; r++)
    for (int k = 0; k < n; k++) {
      if (all[r * n + k] == all[k]) continue;
      char a[64], b[64];
      snprintf(err, errlen, "%s differs across ranks (%s on rank 0, %s on rank %d); it must be the same on every rank",
               hvd_cfg_table[ids[k]].name, hvd_cfg_format(ids[k], all[k], a, sizeof a),
               hvd_cfg_format(ids[k], all[r * n + k], b, sizeof b), r);
      free(all);
      return -2; /* every rank found it */
    }
  free(all);
  if (rc != MPI_SUCCESS) return snprintf(err, errlen, "MPI_Allgather (settings check) failed"), -1;
  return 0;
}

static void free_state(void) {
  hvd_cache_free(&E->cache);
  hvd_strmap_free(E->pending);
  hvd_coord_free(&E->coord);
  E->pending = NULL;
  free(E->outbox);
  free(E->vec);
  free(E->lens);
  free(E->exec);
  free(E->fuse);
  free(E->gpu_items);
  E->gpu_items = NULL;
  E->capgpu = 0;
  free(E->handles);
  E->handles = NULL;
  E->caphandles = 0;
  free(E->joined);
  E->joined = NULL;
  E->outbox = NULL, E->vec = NULL, E->lens = NULL, E->exec = NULL, E->fuse = NULL;
  E->capout = E->capexec = E->capfuse = 0;
  hvd_buf_free(&E->sendbuf);
  hvd_buf_free(&E->gathered);
  hvd_buf_free(&E->resp);
}

/* HVDSHIM_TEST_FAIL_START=N (tests only): step N of the start fails. */
static int injected(int step) { return hvd_cfg_int(HVD_CFG_TEST_FAIL_START) == step; }
#define INJECTED "HVDSHIM_TEST_FAIL_START=%d: the engine start fails at this step (a test)"
#define INJECT(step) HVD_CHECK_GOTO(!injected(step), undo, INJECTED, step)

/* The start, step by step; a failure at any step undoes the steps before it
 * in reverse order (one cleanup path) and leaves no thread, no MPI object
 * and no open file behind.  MPI itself is finalized only when every rank
 * fails the same way (the settings check): after a failure of this rank
 * alone, finalizing would wait for the others, and this process's exit
 * ends the job through the launcher instead. */
hvd_status_t hvd_engine_start(char *err, size_t errlen) {
  enum { NONE, MPI_UP, COMM, TYPES, STATE, SHM, WATCHDOG, FILES } done = NONE;
  hvd_status_t st = HVD_ERR_INTERNAL;
  int provided = 0, up = 0, down = 0, everyone_failed = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (down) {
    snprintf(err, errlen, "MPI was already finalized by the program; hvdshim cannot start");
    return HVD_ERR_INTERNAL;
  }
  E->mpi_owned = 0;
  if (up) {
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      HVD_WARN("the program initialized MPI without MPI_THREAD_MULTIPLE; the engine thread calls MPI concurrently "
               "with it, which this MPI may not support");
  } else {
    int rc = PMPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided); /* not through our hook */
    if (rc != MPI_SUCCESS) {
      snprintf(err, errlen, "MPI_Init_thread failed (code %d)", rc);
      return HVD_ERR_INTERNAL;
    }
    E->mpi_owned = 1;
    if (provided < MPI_THREAD_MULTIPLE)
      HVD_WARN("MPI provides thread level %d, not MPI_THREAD_MULTIPLE; only the engine thread calls MPI", provided);
  }
  done = MPI_UP;
  INJECT(1);

  HVD_CHECK_MPI_GOTO(MPI_Comm_dup(MPI_COMM_WORLD, &E->comm), "MPI_Comm_dup(MPI_COMM_WORLD)", undo);
  done = COMM;
  MPI_Comm_set_errhandler(E->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(E->comm, &E->rank);
  MPI_Comm_size(E->comm, &E->size);
  MPI_Comm local;
  MPI_Comm_split_type(E->comm, MPI_COMM_TYPE_SHARED, E->rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &E->local_rank);
  MPI_Comm_size(local, &E->local_size);
  MPI_Comm_free(&local);
  hvd_log_set_rank(E->rank);
  hvd_log_set_abort_hook(abort_job);
  INJECT(2);

  HVD_CHECK_MPI_GOTO(hvd_mpi_backend_init(), "creating the MPI datatypes and ops for 16-bit floats", undo);
  done = TYPES;
  INJECT(3);

  int agree = settings_agree(err, errlen);
  if (agree != 0) {
    /* -2: every rank found the same difference and fails here: finalize
     * together, so the program's exit status reaches the launcher (MPICH's
     * Hydra reports 0 for about half of the jobs whose ranks exit 1 without
     * finalizing the MPI they initialized). */
    everyone_failed = agree == -2;
    st = HVD_ERR_INVALID;
    goto undo;
  }
  INJECT(4);

  int gpu_ops = (int)hvd_cfg_int(HVD_CFG_GPU_OPERATIONS); /* NCCL, MPI, auto (NULL: decided at the first GPU operation) */
  E->dev_bk = gpu_ops == 0 ? &hvd_backend_nccl : gpu_ops == 1 ? &hvd_backend_staged : NULL;
  hvd_gpu_configure(E->rank, E->size, (int)hvd_cfg_int(HVD_CFG_COMPRESSION));
  E->cycle_s = hvd_cfg_double(HVD_CFG_CYCLE_TIME) / 1000.0;
  E->fusion = (size_t)hvd_cfg_int(HVD_CFG_FUSION_THRESHOLD);
  E->chunk = (size_t)hvd_cfg_int(HVD_CFG_PIPELINE_CHUNK);
  int cache_cap = (int)hvd_cfg_int(HVD_CFG_CACHE_CAPACITY);
  double stall_warn = hvd_cfg_double(HVD_CFG_STALL_WARNING_SECONDS);
  E->shutdown_timeout = hvd_cfg_double(HVD_CFG_SHUTDOWN_TIMEOUT_SECONDS);
  E->stale_age = stall_warn / 2 < 1.0 ? stall_warn / 2 : 1.0;
  E->wc = (cache_cap + 63) / 64;
  E->wr = (E->size + 63) / 64;
  E->tw = 1 + E->wr + 2 * E->wc;
  E->autotune = (int)hvd_cfg_int(HVD_CFG_AUTOTUNE);
  E->tune_per = (uint64_t)hvd_cfg_int(HVD_CFG_AUTOTUNE_STEPS_PER_SAMPLE);
  int tune_fusion = hvd_cfg_src(HVD_CFG_FUSION_THRESHOLD) == HVD_SRC_DEFAULT,
      tune_cycle = hvd_cfg_src(HVD_CFG_CYCLE_TIME) == HVD_SRC_DEFAULT;
  if (E->autotune && !tune_fusion && !tune_cycle && E->rank == 0)
    HVD_WARN("HVDSHIM_AUTOTUNE=1 has nothing to tune: the fusion threshold and the cycle time are both set "
             "explicitly; they stay as set");
  hvd_tuner_init(&E->tuner, E->fusion, E->cycle_s * 1e3, tune_fusion, tune_cycle);
  E->win_t = 0;
  E->tune_mode = 0;
  __atomic_store_n(&E->pub_fusion, E->fusion, __ATOMIC_RELAXED);
  __atomic_store_n(&E->pub_cycle_ns, (uint64_t)llround(E->cycle_s * 1e9), __ATOMIC_RELAXED);
  __atomic_store_n(&E->pub_tune, E->autotune ? (hvd_tuner_done(&E->tuner) ? 2 : 1) : 0, __ATOMIC_RELAXED);
  E->nwords = E->tw + (E->autotune ? 2 : 0);
  E->vec = calloc((size_t)E->nwords, sizeof *E->vec);
  E->lens = calloc((size_t)E->size * 2, sizeof *E->lens);
  E->displs = E->lens ? E->lens + E->size : NULL;
  E->pending = hvd_strmap_new();
  E->joined = calloc((size_t)E->size, 1);
  E->joined_self = E->stopped_self = 0;
  E->join_handle = E->join_asked = E->tl_handle = HVD_NO_HANDLE;
  E->tl_op = 0;
  E->mark_cycles = (int)hvd_cfg_int(HVD_CFG_TIMELINE_MARK_CYCLES);
  E->last_joined = -1;
  E->njoined = 0;
  E->npending = 0;
  done = STATE; /* free_state copes with any part missing */
  int cache_rc = hvd_cache_init(&E->cache, cache_cap);
  int coord_rc = hvd_coord_init(&E->coord, E->size, E->joined, &E->njoined, stall_warn,
                                hvd_cfg_double(HVD_CFG_STALL_SHUTDOWN_SECONDS), is_cached, NULL);
  E->coord.in_set = in_set;
  int sets_rc = hvd_psets_start();
  HVD_CHECK_GOTO(E->vec && !cache_rc && !coord_rc && !sets_rc && E->lens && E->pending && E->joined, undo,
                 "out of memory starting the engine");
  E->t0 = hvd_eng_now();
  memset(&E->stats, 0, sizeof E->stats);
  __atomic_store_n(&E->steps, 0, __ATOMIC_RELAXED);
  INJECT(5);

  if (hvd_shm_start(E->comm, E->rank, E->size, hvd_cfg_int(HVD_CFG_SHM) == 0,
                    (size_t)hvd_cfg_int(HVD_CFG_SHM_BUFFER), (int)hvd_cfg_int(HVD_CFG_TEST_SHM_HOSTS),
                    (size_t)E->nwords, err, errlen) != 0)
    goto undo;
  done = SHM;
  INJECT(6);

  if (hvd_liveness_start(E->comm, E->rank, E->size, hvd_cfg_double(HVD_CFG_PEER_TIMEOUT_SECONDS), err, errlen) != 0)
    goto undo;
  done = WATCHDOG;
  INJECT(7);

  const char *tl = hvd_cfg_str(HVD_CFG_TIMELINE);
  char why[512];
  if (E->rank == 0 && tl[0] && hvd_timeline_open(tl, why, sizeof why) != 0) HVD_WARN("%s; timeline disabled", why);
  const char *mp = hvd_cfg_str(HVD_CFG_METRICS);
  hvd_metrics_reset();
  if (E->rank == 0 && mp[0] && hvd_metrics_open(mp, why, sizeof why) != 0) HVD_WARN("%s; metrics disabled", why);
  done = FILES;
  INJECT(8);

  pthread_mutex_lock(&E->qmu);
  E->accepting = 1;
  E->stop_requested = 0;
  E->closed_msg[0] = 0;
  pthread_mutex_unlock(&E->qmu);
  int thread_rc = injected(9) ? EAGAIN : pthread_create(&E->thread, NULL, engine_main, NULL);
  if (thread_rc != 0) {
    pthread_mutex_lock(&E->qmu);
    E->accepting = 0;
    pthread_mutex_unlock(&E->qmu);
    HVD_CHECK_GOTO(!injected(9), undo, INJECTED, 9);
    HVD_CHECK_PTHREAD_GOTO(thread_rc, "cannot start the engine thread", undo);
  }
  pthread_setname_np(E->thread, "hvd-engine"); /* named before hvd_init returns (top -H, tests) */
  E->started = 1;
  HVD_INFO("engine started: %d rank(s), MPI %s, fusion %zu bytes, cycle %g ms, cache %d, shared memory %s", E->size,
           E->mpi_owned ? "initialized by hvdshim" : "adopted from the program", E->fusion, E->cycle_s * 1e3,
           cache_cap, hvd_shm_describe());
  return HVD_OK;

undo:
  if (done >= FILES) {
    hvd_timeline_close();
    hvd_metrics_close();
  }
  if (done >= WATCHDOG) hvd_liveness_stop();
  if (done >= SHM) hvd_shm_stop(1);
  if (done >= STATE) {
    hvd_psets_free(1);
    free_state();
  }
  if (done >= TYPES) hvd_mpi_backend_fini();
  if (done >= COMM) {
    hvd_log_set_abort_hook(NULL);
    MPI_Comm_free(&E->comm);
  }
  if (everyone_failed && E->mpi_owned) PMPI_Finalize();
  E->mpi_owned = 0;
  return st;
}

void hvd_engine_stop(void) {
  pthread_mutex_lock(&init_mu);
  if (!E->started) {
    pthread_mutex_unlock(&init_mu);
    return;
  }
  E->started = 0;
  pthread_mutex_lock(&E->qmu);
  if (!E->stop_requested) {
    E->stop_requested = 1;
    E->stop_time = hvd_eng_now();
  }
  E->accepting = 0; /* in-flight work drains; new work is refused */
  snprintf(E->closed_msg, sizeof E->closed_msg, "this rank has finished (hvd_shutdown)");
  pthread_cond_signal(&E->qcv);
  pthread_mutex_unlock(&E->qmu);
  pthread_join(E->thread, NULL); /* returns when every rank has joined */
  hvd_liveness_stop();
  hvd_timeline_close();
  hvd_metrics_close();
  int down = 0;
  MPI_Finalized(&down);
  hvd_shm_stop(!down);
  hvd_psets_free(!down);
  free_state();
  hvd_mpi_backend_fini();
  if (!down) MPI_Comm_free(&E->comm);
  if (E->mpi_owned && !down) PMPI_Finalize(); /* not MPI_Finalize: that is our hook */
  E->mpi_owned = 0;
  pthread_mutex_unlock(&init_mu);
}

void hvd_engine_forked_child(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  E->qmu = m;
  E->qcv = c;
  init_mu = m;
  hvd_liveness_forked_child();
  E->accepting = 0;
  E->started = 0;
  snprintf(E->closed_msg, sizeof E->closed_msg, "this is a forked child of a rank; hvdshim is inert here");
  hvd_handles_reset();
}

