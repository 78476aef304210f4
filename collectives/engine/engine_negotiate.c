/* Negotiation, the engine's side: which operations every rank runs in
 * this cycle, in one order everywhere (e->exec, for engine_exec.c).
 *   admission: a request this rank queued waits in `pending`, on its
 *     response-cache bit when the same name and signature ran before, else
 *     in the outbox for the coordinator;
 *   the cached path: this rank offers its cache bits in the control vector
 *     (ready, or invalid: waiting too long, so the coordinator's stall
 *     inspector sees it); after the round, the bits ready on every rank join
 *     the agreed list in bit order;
 *   the slow path: the outboxes are gathered to rank 0, whose coordinator
 *     (negotiation/coordinator.c) answers with a response list broadcast to
 *     every rank and walked in its order.
 * Cache inserts and evictions happen while walking, so the cache stays the
 * same on every rank.  A joined rank takes part through stand-ins
 * (phantoms); a rank outside an operation's process set walks it as a
 * stand-in that runs nothing (a skip).  The cycle (engine_cycle.c) calls
 * these in that order. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/log.h"
#include "../../base/strmap.h"
#include "../gpu/gpu.h"
#include "../negotiation/wire.h"
#include "../transports/dtype.h"
#include "engine_internal.h"
#include "handles.h"

/* A joined rank's stand-in for an operation the others agreed on: the
 * identity of the reduction (allreduce), a receive buffer (broadcast), no
 * rows (allgather). */
static hvd_req *phantom(hvd_engine *e, const char *name, const hvd_sig *sig) {
  hvd_req *r = calloc(1, sizeof *r);
  if (!r || !(r->name = strdup(name))) HVD_FATAL("out of memory (joined rank)");
  r->sig = *sig;
  r->phantom = 1;
  r->handle = HVD_NO_HANDLE;
  r->cache_bit = -1;
  r->t_submit = r->t_ready = hvd_mono_s();
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
  if (hvd_strmap_put(e->pending, r->name, r) != 0) HVD_FATAL("out of memory (pending)");
  e->npending++;
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

static int cache_lookup(hvd_engine *e, const char *name) { return hvd_cache_lookup(&e->cache, name); }

static void outbox_push(hvd_engine *e, hvd_req *r) {
  if (e->nout == e->capout) {
    size_t n = e->capout ? e->capout * 2 : 64;
    hvd_req **p = realloc(e->outbox, n * sizeof *p);
    if (!p) HVD_FATAL("out of memory (outbox)");
    e->outbox = p;
    e->capout = n;
  }
  r->cache_bit = -1;
  e->outbox[e->nout++] = r;
}

/* Drop a cache entry; this rank's request waiting on it renegotiates
 * through the coordinator. */
static void cache_erase(hvd_engine *e, int bit) {
  hvd_req *r = hvd_cache_erase(&e->cache, bit);
  if (r) outbox_push(e, r);
}

static void cache_insert(hvd_engine *e, const char *name, const hvd_sig *sig) {
  /* per-rank row counts vary, and sets are added once: always negotiated */
  if (sig->kind == HVD_KIND_ALLGATHER || sig->kind == HVD_KIND_ALLTOALL || sig->kind == HVD_KIND_PSET_ADD ||
      sig->kind == HVD_KIND_PSET_REMOVE)
    return;
  void *evicted = NULL;
  if (hvd_cache_insert(&e->cache, name, sig, e->tick, &evicted) < 0 && e->cache.cap > 0)
    HVD_FATAL("out of memory (response cache)");
  if (evicted) outbox_push(e, evicted);
}

/* ------------------------------------------------------------------ admission */

static int sig_equal(const hvd_sig *a, const hvd_sig *b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
         a->count == b->count && a->row_elems == b->row_elems && a->place == b->place && a->shape == b->shape &&
         a->set == b->set;
}

void hvd_eng_admit(hvd_engine *e, hvd_req *r) {
  if (hvd_strmap_get(e->pending, r->name)) {
    char msg[HVD_NAME_MAX + 128];
    snprintf(msg, sizeof msg, "tensor '%s' is already in flight on this rank: wait for it before submitting again",
             r->name);
    hvd_handles_complete(r->handle, HVD_ERR_INVALID, msg, NULL, 0);
    hvd_eng_req_free(r);
    return;
  }
  if (hvd_strmap_put(e->pending, r->name, r) != 0) HVD_FATAL("out of memory (pending)");
  e->npending++;
  int bit = cache_lookup(e, r->name);
  if (bit >= 0 && sig_equal(&e->cache.e[bit].sig, &r->sig) && !e->cache.e[bit].pending) {
    e->cache.e[bit].pending = r;
    r->cache_bit = bit;
    return;
  }
  outbox_push(e, r);
}

/* ------------------------------------------------------------------ the agreed list */

static void exec_push(hvd_engine *e, hvd_req *r, const int64_t *rows) {
  if (e->nexec == e->capexec) {
    size_t n = e->capexec ? e->capexec * 2 : 256;
    exec_item *p = realloc(e->exec, n * sizeof *p);
    if (!p) HVD_FATAL("out of memory (responses)");
    e->exec = p;
    e->capexec = n;
  }
  e->exec[e->nexec].req = r;
  e->exec[e->nexec].rows = rows;
  e->nexec++;
}

/* ------------------------------------------------------------------ the cached path */

void hvd_eng_offer_cached(hvd_engine *e, uint64_t *ready, uint64_t *invalid, double now) {
  for (int w = 0; w < e->wc; w++) ready[w] = e->joined_self ? ~(uint64_t)0 : 0, invalid[w] = ~(uint64_t)0;
  for (int b = 0; b < e->cache.cap && !e->joined_self; b++) {
    hvd_req *r = e->cache.e[b].pending;
    if (!r && e->cache.e[b].name && e->cache.e[b].sig.set && !hvd_pset_member(e, e->cache.e[b].sig.set, e->rank))
      ready[b / 64] |= (uint64_t)1 << (b % 64); /* another set's: ready whenever its members are */
    if (!r) continue;
    ready[b / 64] |= (uint64_t)1 << (b % 64);
    if (now - r->t_submit > e->stale_age) invalid[b / 64] &= ~((uint64_t)1 << (b % 64));
  }
}

void hvd_eng_take_cached(hvd_engine *e, const uint64_t *ready, const uint64_t *invalid, double now) {
  for (int b = 0; b < e->cache.cap; b++) {
    uint64_t m = (uint64_t)1 << (b % 64);
    if (ready[b / 64] & m) {
      hvd_req *r = e->cache.e[b].pending;
      const hvd_sig *cs = &e->cache.e[b].sig;
      if (!r && e->cache.e[b].name && !hvd_pset_member(e, cs->set, e->rank)) r = skip_req(e->cache.e[b].name, cs);
      else if (!r && e->joined_self && e->cache.e[b].name) r = phantom(e, e->cache.e[b].name, cs);
      if (!r) HVD_FATAL("internal error: cache bit %d ready everywhere but not pending here", b);
      e->cache.e[b].pending = NULL;
      r->cache_bit = -1;
      r->t_ready = now;
      e->stats.cache_hits++;
      exec_push(e, r, NULL);
    } else if (!(invalid[b / 64] & m)) {
      cache_erase(e, b);
    }
  }
}

/* ------------------------------------------------------------------ slow path */

hvd_eng_rc hvd_eng_slow_path(hvd_engine *e, double now) {
  e->stats.slow_rounds++;
  hvd_buf_reset(&e->sendbuf);
  for (size_t i = 0; i < e->nout; i++)
    hvd_wire_put_req(&e->sendbuf, &e->outbox[i]->sig, now - e->outbox[i]->t_submit, e->outbox[i]->name);
  e->nout = 0;
  if (e->sendbuf.bad || e->sendbuf.len > INT_MAX) HVD_FATAL("negotiation message too large or out of memory");
  int mylen = (int)e->sendbuf.len;
  if (hvd_eng_mpi_check(e, MPI_Gather(&mylen, 1, MPI_INT, e->lens, 1, MPI_INT, 0, e->comm), "MPI_Gather (negotiation)") !=
      HVD_ENG_OK)
    return HVD_ENG_RECOVER;
  size_t total = 0;
  if (e->rank == 0) {
    for (int r = 0; r < e->size; r++) {
      e->displs[r] = (int)total;
      total += (size_t)e->lens[r];
    }
    if (total > INT_MAX) HVD_FATAL("negotiation round larger than 2 GiB");
    hvd_buf_reset(&e->gathered);
    if (hvd_buf_reserve(&e->gathered, total + 1) != 0) HVD_FATAL("out of memory (negotiation)");
    e->gathered.len = total;
  }
  if (hvd_eng_mpi_check(e, MPI_Gatherv(e->sendbuf.p, mylen, MPI_BYTE, e->gathered.p, e->lens, e->displs, MPI_BYTE, 0,
                                       e->comm),
                        "MPI_Gatherv (negotiation)") != HVD_ENG_OK)
    return HVD_ENG_RECOVER;
  if (e->rank == 0) hvd_coord_round(&e->coord, e->gathered.p, e->lens, e->displs, now, &e->resp);
  int64_t rlen = (int64_t)e->resp.len;
  if (hvd_eng_mpi_check(e, MPI_Bcast(&rlen, 1, MPI_INT64_T, 0, e->comm), "MPI_Bcast (responses)") != HVD_ENG_OK)
    return HVD_ENG_RECOVER;
  if (rlen > INT_MAX) HVD_FATAL("response list larger than 2 GiB");
  if (e->rank != 0) {
    hvd_buf_reset(&e->resp);
    if (hvd_buf_reserve(&e->resp, (size_t)rlen + 1) != 0) HVD_FATAL("out of memory (responses)");
    e->resp.len = (size_t)rlen;
  }
  if (hvd_eng_mpi_check(e, MPI_Bcast(e->resp.p, (int)rlen, MPI_BYTE, 0, e->comm), "MPI_Bcast (responses)") != HVD_ENG_OK)
    return HVD_ENG_RECOVER;
  e->resp.pos = 0;
  hvd_wire_resp w;
  char name[HVD_NAME_MAX + 1];
  while (hvd_buf_more(&e->resp)) {
    if (hvd_wire_get_resp(&e->resp, &w, e->size) != 0) HVD_FATAL("corrupt response list from the coordinator");
    size_t nl = w.name_len > HVD_NAME_MAX ? HVD_NAME_MAX : w.name_len;
    memcpy(name, w.name, nl);
    name[nl] = 0;
    if (w.type == HVD_RESP_FATAL) {
      char *m = strndup(w.msg, w.msg_len);
      HVD_FATAL("%s", m ? m : "fatal error from the coordinator");
    }
    if (w.type == HVD_RESP_INVALIDATE) {
      int bit = cache_lookup(e, name);
      if (bit >= 0) cache_erase(e, bit);
      continue;
    }
    if (!hvd_pset_member(e, w.sig.set, e->rank)) { /* another set's operation: walked in step, never run */
      if (w.type == HVD_RESP_EXEC) {
        cache_insert(e, name, &w.sig);
        exec_push(e, skip_req(name, &w.sig), w.rows);
      }
      continue;
    }
    hvd_req *r = hvd_strmap_get(e->pending, name);
    if (!r && e->joined_self) {
      if (w.type == HVD_RESP_ERROR) continue; /* the submitting ranks report it */
      r = phantom(e, name, &w.sig);
    }
    if (!r || r->cache_bit >= 0)
      HVD_FATAL("internal error: the coordinator answered '%s', which this rank has not submitted", name);
    if (w.type == HVD_RESP_ERROR) { /* the failed handle carries the message to the caller (an exception, a hook's
                                       * fatal line): a script that catches it prints nothing more, as in Horovod */
      char *m = strndup(w.msg, w.msg_len);
      HVD_INFO("%s", m ? m : name);
      hvd_eng_finish(e, r, HVD_ERR_MISMATCH, m, NULL, 0);
      free(m);
      continue;
    }
    r->t_ready = now;
    cache_insert(e, name, &r->sig);
    exec_push(e, r, w.rows);
  }
  return HVD_ENG_OK;
}
