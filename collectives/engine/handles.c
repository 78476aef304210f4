/* Handle table.  See handles.h.
 * Owner: `mu` guards `slots`, `nslots`, `free_top`, `free_list`; the engine
 * thread writes state DONE and user threads read it, both under `mu`. */
#include "handles.h"

#include "../gpu/gpu.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../../base/clock.h"

/* HELD: completed by the engine, not yet published (hvd_handles_hold) */
enum { SLOT_FREE = 0, SLOT_PENDING = 1, SLOT_DONE = 2, SLOT_HELD = 3 };

typedef struct {
  uint32_t gen;
  int state;
  hvd_status_t status;
  char *msg;
  void *gathered;
  size_t rows;
  hvd_callback_t cb;
  void *cb_arg;
  hvd_gpu_event *ev; /* a GPU operation's "done" event (one reference) */
  void *stream;      /* the stream that waits on it */
} slot;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static slot *slots;
static uint32_t nslots, free_top, live;
static uint32_t *free_list;
static __thread char last_error[1024];
static int holding;          /* completions are held (hvd_handles_hold) */
static hvd_handle_t *held;   /* their handles, in completion order */
static size_t nheld, capheld;

void hvd_set_last_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
}

const char *hvd_last_error(void) { return last_error; }

static hvd_handle_t make(uint32_t idx, uint32_t gen) { return ((hvd_handle_t)gen << 32) | idx; }

/* Under mu: the slot of a live handle, or NULL. */
static slot *lookup(hvd_handle_t h) {
  if (h < 0) return NULL;
  uint32_t idx = (uint32_t)(h & 0xffffffffu), gen = (uint32_t)(h >> 32);
  if (idx >= nslots || slots[idx].state == SLOT_FREE || slots[idx].gen != gen) return NULL;
  return &slots[idx];
}

static void release_locked(slot *s) {
  hvd_gpu_event_put(s->ev); /* never waited on (an error, or a callback already did) */
  s->ev = NULL;
  free(s->msg);
  free(s->gathered);
  s->msg = NULL;
  s->gathered = NULL;
  s->state = SLOT_FREE;
  s->gen++;
  free_list[free_top++] = (uint32_t)(s - slots);
  live--;
}

/* Under mu: h joins the held list (0: out of memory, so it is published now). */
static int hold_locked(hvd_handle_t h) {
  if (nheld == capheld) {
    size_t n = capheld ? capheld * 2 : 64;
    hvd_handle_t *p = realloc(held, n * sizeof *p);
    if (!p) return 0;
    held = p, capheld = n;
  }
  held[nheld++] = h;
  return 1;
}

hvd_status_t hvd_handles_new(hvd_callback_t cb, void *cb_arg, void *stream, hvd_handle_t *out) {
  pthread_mutex_lock(&mu);
  if (free_top == 0) {
    uint32_t n = nslots ? nslots * 2 : 256;
    slot *ns = realloc(slots, n * sizeof *ns);
    uint32_t *nf = ns ? realloc(free_list, n * sizeof *nf) : NULL;
    if (!ns || !nf) {
      if (ns) slots = ns;
      pthread_mutex_unlock(&mu);
      hvd_set_last_error("out of memory for handles");
      return HVD_ERR_INTERNAL;
    }
    slots = ns;
    free_list = nf;
    memset(slots + nslots, 0, (n - nslots) * sizeof *slots);
    for (uint32_t i = n; i > nslots; i--) free_list[free_top++] = i - 1;
    nslots = n;
  }
  uint32_t idx = free_list[--free_top];
  slot *s = &slots[idx];
  s->state = SLOT_PENDING;
  s->status = HVD_OK;
  s->cb = cb;
  s->cb_arg = cb_arg;
  s->rows = 0;
  s->ev = NULL;
  s->stream = stream;
  live++;
  *out = make(idx, s->gen);
  pthread_mutex_unlock(&mu);
  return HVD_OK;
}

void hvd_handles_complete(hvd_handle_t h, hvd_status_t st, const char *msg, void *gathered, size_t rows) {
  pthread_mutex_lock(&mu);
  slot *s = lookup(h);
  if (!s) {
    pthread_mutex_unlock(&mu);
    free(gathered);
    return;
  }
  s->status = st;
  s->msg = msg && *msg ? strdup(msg) : NULL;
  s->gathered = gathered;
  s->rows = rows;
  if (holding && hold_locked(h)) {
    s->state = SLOT_HELD;
    pthread_mutex_unlock(&mu);
    return;
  }
  s->state = SLOT_DONE;
  hvd_callback_t cb = s->cb;
  void *arg = s->cb_arg;
  if (!cb) {
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return;
  }
  pthread_mutex_unlock(&mu);
  if (st != HVD_OK && msg) hvd_set_last_error("%s", msg);
  cb(h, st, arg);
  pthread_mutex_lock(&mu);
  s = lookup(h);
  if (s) release_locked(s);
  pthread_mutex_unlock(&mu);
}

/* Callbacks of handles just marked done (not under mu), one at a time: the
 * stream waits for a GPU result before its callback runs. */
static void run_callbacks(const hvd_handle_t *hs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    pthread_mutex_lock(&mu);
    slot *s = lookup(hs[i]);
    hvd_callback_t cb = s ? s->cb : NULL;
    void *arg = s ? s->cb_arg : NULL;
    hvd_status_t st = s ? s->status : HVD_OK;
    hvd_gpu_event *sev = NULL;
    void *stream = NULL;
    if (cb) {
      sev = s->ev, stream = s->stream;
      s->ev = NULL;
      if (st != HVD_OK && s->msg) hvd_set_last_error("%s", s->msg);
    }
    pthread_mutex_unlock(&mu);
    if (!cb) continue;
    if (st == HVD_OK) hvd_gpu_consume(sev, stream);
    else hvd_gpu_event_put(sev);
    cb(hs[i], st, arg);
    pthread_mutex_lock(&mu);
    s = lookup(hs[i]);
    if (s) release_locked(s);
    pthread_mutex_unlock(&mu);
  }
}

void hvd_handles_complete_ok(const hvd_handle_t *hs, size_t n, hvd_gpu_event *ev) {
  size_t ncb = 0;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < n; i++) {
    slot *s = lookup(hs[i]);
    if (!s) continue;
    s->status = HVD_OK;
    if (ev) {
      hvd_gpu_event_hold(ev, 1);
      s->ev = ev;
    }
    if (holding && hold_locked(hs[i])) {
      s->state = SLOT_HELD;
      continue;
    }
    s->state = SLOT_DONE;
    ncb += s->cb != NULL;
  }
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  if (ncb) run_callbacks(hs, n); /* rare */
}

void hvd_handles_hold(int on) {
  pthread_mutex_lock(&mu);
  holding = on;
  pthread_mutex_unlock(&mu);
}

size_t hvd_handles_held(void) {
  pthread_mutex_lock(&mu);
  size_t n = nheld;
  pthread_mutex_unlock(&mu);
  return n;
}

void hvd_handles_publish_held(hvd_status_t st, const char *msg) {
  pthread_mutex_lock(&mu);
  if (!nheld) { /* every round of an elastic job: no wake-up for nothing */
    pthread_mutex_unlock(&mu);
    return;
  }
  hvd_handle_t *hs = held;
  size_t n = nheld, ncb = 0;
  held = NULL, nheld = capheld = 0;
  for (size_t i = 0; i < n; i++) {
    slot *s = lookup(hs[i]);
    if (!s || s->state != SLOT_HELD) continue;
    if (st != HVD_OK) { /* what it computed is not the job's result */
      free(s->msg);
      free(s->gathered);
      hvd_gpu_event_put(s->ev);
      s->msg = msg && *msg ? strdup(msg) : NULL, s->gathered = NULL, s->ev = NULL, s->rows = 0;
      s->status = st;
    }
    s->state = SLOT_DONE;
    ncb += s->cb != NULL;
  }
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  if (ncb) run_callbacks(hs, n);
  free(hs);
}

int hvd_handles_done(hvd_handle_t h) {
  pthread_mutex_lock(&mu);
  slot *s = lookup(h);
  int done = !s || s->state == SLOT_DONE;
  pthread_mutex_unlock(&mu);
  return done;
}

static uint64_t blocked_ns;     /* time user threads spent waiting for completions */
static int waiters;             /* user threads in a wait now (changed under mu; read atomically) */
static uint64_t last_wait_end;  /* mono_ns when the last wait ended (atomic) */

uint64_t hvd_handles_blocked_ns(void) { return __atomic_load_n(&blocked_ns, __ATOMIC_RELAXED); }

hvd_status_t hvd_handles_test(hvd_handle_t h, int *done) {
  pthread_mutex_lock(&mu);
  slot *s = lookup(h);
  if (!s) {
    pthread_mutex_unlock(&mu);
    hvd_set_last_error("hvd_test: invalid or finished handle %lld", (long long)h);
    return HVD_ERR_INVALID;
  }
  *done = s->state == SLOT_DONE;
  pthread_mutex_unlock(&mu);
  return HVD_OK;
}

hvd_status_t hvd_handles_wait_begin(hvd_handle_t h, const char *fn, uint64_t *since) {
  pthread_mutex_lock(&mu);
  slot *s = lookup(h);
  if (!s || s->cb) {
    pthread_mutex_unlock(&mu);
    hvd_set_last_error("%s: invalid or finished handle %lld%s", fn, (long long)h,
                       s ? " (it has a callback: it is finished when the callback returns)" : "");
    return HVD_ERR_INVALID;
  }
  *since = s->state != SLOT_DONE ? (uint64_t)hvd_mono_ns() : 0;
  if (*since) __atomic_add_fetch(&waiters, 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&mu);
  return HVD_OK;
}

int hvd_handles_sleep(hvd_handle_t h, const struct timespec *deadline) {
  pthread_mutex_lock(&mu);
  slot *s = lookup(h);
  if (!s || s->state == SLOT_DONE) {
    pthread_mutex_unlock(&mu);
    return 1;
  }
  int rc = deadline ? pthread_cond_timedwait(&cv, &mu, deadline) : pthread_cond_wait(&cv, &mu);
  s = lookup(h); /* the table may have moved */
  int done = !s || s->state == SLOT_DONE;
  pthread_mutex_unlock(&mu);
  return done ? 1 : rc == ETIMEDOUT ? -1 : 0;
}

/* The end of a wait that began blocking at `since` (0: it never blocked). */
static void wait_over(uint64_t since) {
  if (!since) return;
  uint64_t t = (uint64_t)hvd_mono_ns();
  __atomic_sub_fetch(&waiters, 1, __ATOMIC_RELAXED);
  __atomic_store_n(&last_wait_end, t, __ATOMIC_RELAXED);
  __atomic_fetch_add(&blocked_ns, t - since, __ATOMIC_RELAXED);
}

void hvd_handles_wait_abandon(uint64_t since) { wait_over(since); }

hvd_status_t hvd_handles_wait_end(hvd_handle_t h, uint64_t since, void **out, size_t *total_rows, const char *fn) {
  pthread_mutex_lock(&mu);
  wait_over(since);
  slot *s = lookup(h);
  if (!s) { /* released meanwhile (another thread waited for it too) */
    pthread_mutex_unlock(&mu);
    hvd_set_last_error("%s: invalid or finished handle %lld", fn, (long long)h);
    return HVD_ERR_INVALID;
  }
  hvd_status_t st = s->status;
  if (st != HVD_OK) hvd_set_last_error("%s", s->msg ? s->msg : hvd_status_name(st));
  if (out && st == HVD_OK) {
    if (s->gathered) {
      *out = s->gathered;
      *total_rows = s->rows;
      s->gathered = NULL;
    } else {
      hvd_set_last_error("%s: handle %lld is not an allgather", fn, (long long)h);
      st = HVD_ERR_INVALID;
    }
  }
  hvd_gpu_event *ev = st == HVD_OK ? s->ev : NULL;
  void *stream = s->stream;
  if (ev) s->ev = NULL;
  release_locked(s);
  pthread_mutex_unlock(&mu);
  hvd_gpu_consume(ev, stream); /* a GPU result: ordered before later work on the submitting stream */
  return st;
}

int hvd_handles_waiters(void) { return __atomic_load_n(&waiters, __ATOMIC_RELAXED); }

int hvd_handles_waiting(double recent_s) {
  return hvd_handles_waiters() > 0 || (double)((uint64_t)hvd_mono_ns() - __atomic_load_n(&last_wait_end, __ATOMIC_RELAXED)) * 1e-9 < recent_s;
}

void hvd_free(void *p) { free(p); }

hvd_status_t hvd_allgather_result(hvd_handle_t h, void **out, size_t *total_rows) {
  pthread_mutex_lock(&mu);
  slot *s = lookup(h);
  if (!s || s->state != SLOT_DONE || s->status != HVD_OK || !s->gathered) {
    pthread_mutex_unlock(&mu);
    hvd_set_last_error("hvd_allgather_result: handle %lld is not a completed allgather (or its result was taken)",
                       (long long)h);
    return HVD_ERR_INVALID;
  }
  *out = s->gathered;
  *total_rows = s->rows;
  s->gathered = NULL;
  pthread_mutex_unlock(&mu);
  return HVD_OK;
}

size_t hvd_handles_live(void) {
  pthread_mutex_lock(&mu);
  size_t n = live;
  pthread_mutex_unlock(&mu);
  return n;
}

void hvd_handles_reset(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t freshc = PTHREAD_COND_INITIALIZER;
  mu = fresh;
  cv = freshc;
  slots = NULL; /* the parent's table is leaked in the child on purpose */
  free_list = NULL;
  nslots = free_top = live = 0;
  waiters = 0;
  held = NULL, nheld = capheld = 0, holding = 0;
}

const char *hvd_status_name(hvd_status_t st) {
  static const char *names[] = {"ok", "invalid argument", "mismatch across ranks", "shut down", "timeout",
                                "not initialized", "internal error", "the ranks changed"};
  return (unsigned)st < sizeof names / sizeof *names ? names[st] : "unknown status";
}
