/* Completion, the engine's lowest stage: finishing a request (its handle
 * completes, it leaves `pending`) and failing what cannot complete; with
 * the small helpers every stage uses (clock, MPI result check, array
 * growth).  Calls nothing of the engine's above it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../base/config.h"
#include "../../base/log.h"
#include "../transports/dtype.h"
#include "engine_internal.h"
#include "handles.h"
#include "../../base/strmap.h"

double hvd_eng_us(hvd_engine *e, double t) { return (t - e->t0) * 1e6; }

hvd_eng_rc hvd_eng_failed_at(hvd_engine *e, const char *file, int line, const char *fmt, ...) {
  char why[sizeof e->recover_why];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  if (!e->elastic) hvd_fatal_at(file, line, "%s", why);
  memcpy(e->recover_why, why, sizeof why);
  return HVD_ENG_RECOVER;
}

hvd_eng_rc hvd_eng_mpi_check(hvd_engine *e, int rc, const char *what) {
  if (rc == MPI_SUCCESS) return HVD_ENG_OK;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return HVD_ENG_COLLECTIVE_FAILED(e, "%s failed: %s", what, msg);
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

static void unpend(hvd_engine *e, hvd_req *r) {
  if (hvd_strmap_get(e->pending, r->name) == r) {
    hvd_strmap_del(e->pending, r->name);
    e->npending--;
  }
}

void hvd_eng_finish(hvd_engine *e, hvd_req *r, hvd_status_t st, const char *msg, void *gathered, size_t rows) {
  unpend(e, r);
  hvd_handles_complete(r->handle, st, msg, gathered, rows);
  hvd_eng_req_free(r);
}

/* A GPU operation done on the engine stream: the handle carries the event. */
void hvd_eng_finish_gpu(hvd_engine *e, hvd_req *r, hvd_gpu_event *done) {
  unpend(e, r);
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

void hvd_eng_fail_pending(hvd_engine *e, hvd_status_t st, const char *why) {
  char msg[HVD_NAME_MAX + 600];
  for (int b = 0; b < e->cache.cap; b++) e->cache.e[b].pending = NULL;
  e->nout = 0;
  req_list l = {malloc(sizeof(hvd_req *) * (e->npending + 1)), 0};
  if (!l.v) return;
  hvd_strmap_each(e->pending, collect, &l);
  for (size_t i = 0; i < l.n; i++) {
    snprintf(msg, sizeof msg, "%s '%s' cannot complete: %s", hvd_kind_name(l.v[i]->sig.kind), l.v[i]->name, why);
    hvd_eng_finish(e, l.v[i], st, msg, NULL, 0);
  }
  free(l.v);
}

hvd_req *hvd_eng_take_queue_locked(hvd_engine *e) {
  hvd_req *q = e->qhead;
  e->qhead = e->qtail = NULL;
  e->qbytes = 0;
  __atomic_store_n(&e->gathering, 0, __ATOMIC_RELAXED);
  return q;
}

void hvd_eng_fail_list(hvd_req *q, hvd_status_t st, const char *why) {
  char msg[HVD_NAME_MAX + 600];
  for (hvd_req *n; q; q = n) {
    n = q->next;
    snprintf(msg, sizeof msg, "%s '%s' cannot complete: %s", hvd_kind_name(q->sig.kind), q->name, why);
    hvd_handles_complete(q->handle, st, msg, NULL, 0);
    hvd_eng_req_free(q);
  }
}

void hvd_eng_fail_everything(hvd_engine *e, const char *why) {
  pthread_mutex_lock(&e->qmu);
  e->accepting = 0;
  snprintf(e->closed_msg, sizeof e->closed_msg, "%s", why);
  hvd_req *q = hvd_eng_take_queue_locked(e);
  pthread_mutex_unlock(&e->qmu);
  hvd_eng_fail_list(q, HVD_ERR_SHUTDOWN, why);
  hvd_eng_fail_pending(e, HVD_ERR_SHUTDOWN, why);
}

int hvd_eng_injected(int step) { return hvd_cfg_int(HVD_CFG_TEST_FAIL_START) == step; }
