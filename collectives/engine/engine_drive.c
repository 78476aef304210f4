/* Who runs the engine's next cycle, and when: the one place that decides.
 * Cycles run one at a time under the engine's `drive` mutex, by one of two
 * drivers:
 *   the engine thread (hvd_eng_main): a cycle, then a sleep until the next
 *     is due: a submission that wakes it, the cycle time, the idle tick
 *     when nothing is in flight, at once when work here waits for the
 *     peers;
 *   a user thread that waits for a handle (hvd_eng_wait): while its handle
 *     is not done it runs the next cycle itself when no one else is, where
 *     user threads may drive (host work, not elastic, not stopping), else
 *     it sleeps until a completion.
 * and two inputs from the submitting threads, decided here too: whether a
 * submission wakes the engine thread (hvd_eng_queued_locked: a tensor
 * submitted alone gathers others first) and whether a batch does
 * (hvd_eng_batch_queued: not when its caller waits for it at once and can
 * drive).  A wait or a poll that wants a result ends the gathering.
 *
 * Calls one way: the public API (engine_api.c) calls the waits and the
 * submission's decision here; this file calls one cycle (engine_cycle.c)
 * and the handle table's wait steps (handles.c), which call nothing back.
 * Ownership: see engine_internal.h (`drive`, `finished`, `gathering`). */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <time.h>

#include "../../base/log.h"
#include "../gpu/gpu.h"
#include "../negotiation/coordinator.h"
#include "../transports/liveness.h"
#include "engine_internal.h"
#include "handles.h"

#define HVD_PEND_NAP_MIN_S 20e-6

/* One cycle, under `drive`; a cycle that ends the engine says so to the others. */
static int drive_cycle(hvd_engine *e) {
  double now = hvd_mono_s();
  __atomic_store(&e->last_cycle, &now, __ATOMIC_RELAXED);
  int go_on = hvd_eng_cycle(e);
  if (!go_on) e->finished = 1;
  return go_on;
}

/* User threads may run cycles in this job: not in elastic jobs (a cycle
 * whose collective fails recovers the job, which stays the engine thread's
 * work) nor once a GPU operation was submitted (the device's state is the
 * engine thread's). */
static int helpable(hvd_engine *e) { return !e->elastic && !__atomic_load_n(&e->gpu_seen, __ATOMIC_ACQUIRE); }

/* A user thread that waits for `waited` runs the next cycle itself when no
 * one else is running one (drive 1).  On a machine with one core per rank
 * the engine thread shares the training thread's core: the end of a
 * backward pass, submitted without waking it (HVD_BATCH_CALLER_WAITS),
 * then completes on the thread that waits for it, with no switch to the
 * engine thread and back.  Not where helpable() says no, nor once the
 * engine is stopping (its last cycles are the engine thread's).  drive 0
 * (a poll, a wait with a timeout): a result is wanted, but this thread runs
 * no cycle.  1 when it ran a cycle or found `waited` done (the caller looks
 * again), 0 when it cannot now (the caller sleeps until a completion). */
static int help(hvd_engine *e, hvd_handle_t waited, int drive) {
  int driving = drive && helpable(e) && !pthread_equal(pthread_self(), e->thread) &&
                pthread_mutex_trylock(&e->drive) == 0;
  if (__atomic_load_n(&e->gathering, __ATOMIC_RELAXED)) { /* a result is wanted: no more gathering */
    pthread_mutex_lock(&e->qmu);
    if (e->gathering) {
      __atomic_store_n(&e->gathering, 0, __ATOMIC_RELAXED);
      /* the engine thread runs the cycle, unless this thread does: woken
       * for nothing, it would wait for `drive` and then run a control
       * round of its own that the idle peers answer late */
      if (!driving) pthread_cond_signal(&e->qcv);
    }
    pthread_mutex_unlock(&e->qmu);
  }
  if (!driving) return 0;
  /* Completions happen under `drive`: the engine thread may have completed
   * the waited handle since the caller looked.  A cycle now would only wait
   * in the control round for peers that are done with it and idle (up to
   * their idle tick, 100 ms); what is queued goes to the engine thread. */
  int done = hvd_handles_done(waited);
  pthread_mutex_lock(&e->qmu);
  int live = e->accepting && !e->stop_requested && !e->finished;
  done = done || !live;
  if (done && e->qhead) pthread_cond_signal(&e->qcv);
  pthread_mutex_unlock(&e->qmu);
  if (done) {
    pthread_mutex_unlock(&e->drive);
    return live; /* (1: the caller looks again and finds it done) */
  }
  e->stats.cycles_helped++;
  if (!drive_cycle(e)) { /* the engine thread sees it and ends */
    pthread_mutex_lock(&e->qmu);
    pthread_cond_signal(&e->qcv);
    pthread_mutex_unlock(&e->qmu);
  }
  pthread_mutex_unlock(&e->drive);
  return 1;
}

/* ------------------------------------------------------------------ waits */

hvd_status_t hvd_eng_test(hvd_engine *e, hvd_handle_t h, int *done) {
  hvd_status_t st = hvd_handles_test(h, done);
  if (st == HVD_OK && !*done) help(e, h, 0); /* a poller runs no cycle itself */
  return st;
}

hvd_status_t hvd_eng_wait(hvd_engine *e, hvd_handle_t h, double timeout_s, void **out, size_t *total_rows,
                          const char *fn) {
  struct timespec deadline;
  if (timeout_s >= 0) deadline = hvd_realtime_in(timeout_s);
  uint64_t since;
  hvd_status_t st = hvd_handles_wait_begin(h, fn, &since);
  if (st != HVD_OK) return st;
  if (since && timeout_s >= 0) help(e, h, 0); /* this thread runs no cycle: the engine stops gathering */
  while (since) { /* h was not done when the wait began */
    if (timeout_s < 0 && help(e, h, 1)) { /* ran the engine's next cycle here, or found h done */
      if (hvd_handles_done(h)) break;
      continue;
    }
    int r = hvd_handles_sleep(h, timeout_s >= 0 ? &deadline : NULL);
    if (r > 0) break;
    if (r < 0) {
      hvd_handles_wait_abandon(since);
      hvd_set_last_error("%s: not complete after %g s", fn, timeout_s);
      return HVD_ERR_TIMEOUT;
    }
  }
  return hvd_handles_wait_end(h, since, out, total_rows, fn);
}

/* ------------------------------------------------------------------ submissions */

int hvd_eng_queued_locked(hvd_engine *e, double t_submit, int was_empty, int batching, int callback) {
  /* A batch wakes the engine after its last item.  A tensor submitted
   * alone (the Horovod API's allreduce_async, a native hook, the C API)
   * waits for others to join it, as in Horovod, until a thread asks for a
   * result (a wait, a poll: help), a batch comes, or it has waited a cycle
   * (seen by the next submission, or by an engine thread that is awake): a
   * backward submitted one gradient at a time fuses instead of running a
   * cycle per tensor, and on a GPU the engine does not take the context
   * lock from the submitting thread for each.  No wake-up here: a caller
   * that waits at once runs the cycle itself where it can, and an engine
   * thread woken for nothing takes the core a peer rank needs
   * (docs/BENCHMARKS.md, "Small operations").  One with a
   * callback, which nobody waits for, wakes the engine at once. */
  if (!was_empty && !e->gathering) return 0;
  if (batching) return 1;
  if (callback) {
    __atomic_store_n(&e->gathering, 0, __ATOMIC_RELAXED);
    pthread_cond_signal(&e->qcv);
  } else if (was_empty) {
    __atomic_store_n(&e->gathering, 1, __ATOMIC_RELAXED), e->gather_t = t_submit;
  } else if (t_submit - e->gather_t >= e->cycle_s) { /* gathered long enough */
    __atomic_store_n(&e->gathering, 0, __ATOMIC_RELAXED);
    pthread_cond_signal(&e->qcv);
  }
  return 0;
}

void hvd_eng_batch_queued(hvd_engine *e, int wake, unsigned flags) {
  /* The caller waits for these at once and its wait runs the cycle itself
   * (help): waking the engine thread would only put it on the core the
   * caller needs.  Where the engine thread runs every cycle, wake it. */
  if (wake && (flags & HVD_BATCH_CALLER_WAITS) && helpable(e)) wake = 0;
  if (!wake) return;
  pthread_mutex_lock(&e->qmu);
  __atomic_store_n(&e->gathering, 0, __ATOMIC_RELAXED);
  pthread_cond_signal(&e->qcv);
  pthread_mutex_unlock(&e->qmu);
}

/* ------------------------------------------------------------------ the engine thread */

void *hvd_eng_main(void *engine) {
  hvd_engine *e = engine;
  for (;;) {
    double start = hvd_mono_s();
    pthread_mutex_lock(&e->drive);
    int go_on = !e->finished && drive_cycle(e);
    pthread_mutex_unlock(&e->drive);
    if (!go_on) break;
    /* Idle (nothing in flight here, nothing being coordinated): sleep until
     * a submission or the idle tick (e->idle_s, 100 ms) instead of running a control round
     * every cycle.  Peers with work wait in their round until this rank
     * submits too (its submission wakes it), which they would anyway; the
     * bounded idle period keeps stall reports and shutdown timely.  The
     * period runs from the last cycle, whoever ran it: while a training
     * thread runs a cycle each step itself (help), a tick of this thread's
     * own would start a round its peers join only at their next step's
     * reduction, which then waits for that round to end (about a
     * millisecond a tick, on the training thread's core). */
    int held = e->elastic && hvd_handles_held(); /* published by the next round */
    int idle = !e->joined_self && e->npending == 0 && !held && e->nout == 0 &&
               !(e->rank == 0 && hvd_coord_busy(&e->coord));
    double period = idle && e->cycle_s < e->idle_s ? e->idle_s : e->cycle_s;
    double deadline = start + period;
    int napping = 0; /* (the deadline is a nap's: work here waits for the peers) */
    /* Work here waits for the peers: the next round starts now and waits
     * in the control exchange itself, where a peer's submission (which
     * wakes that peer into its round) completes it at once, instead of
     * this rank sleeping out the cycle while the peer waits in the round
     * for it (the tick that was on the critical path).  A round that
     * admitted and agreed nothing backs off, 20 us doubling up to the
     * cycle, so ranks whose pending work does not match do not spin. */
    if ((e->npending || held) && !e->joined_self && !e->stop_requested) {
      if (e->cycle_admitted || e->cycle_agreed) e->pend_nap = 0;
      else e->pend_nap = e->pend_nap > 0 ? fmin(2 * e->pend_nap, e->cycle_s) : HVD_PEND_NAP_MIN_S;
      double t = hvd_mono_s() + e->pend_nap;
      if (t < deadline) deadline = t, napping = 1;
    } else {
      e->pend_nap = 0;
    }
    pthread_mutex_lock(&e->qmu);
    while (!(e->stop_requested && !e->stopped_self) && (!e->qhead || e->gathering) && e->join_asked == HVD_NO_HANDLE &&
           !e->tl_op) { /* a stop or join request needs a cycle */
      double t = hvd_mono_s(), until = deadline, last;
      __atomic_load(&e->last_cycle, &last, __ATOMIC_RELAXED);
      if (!napping && last + period > until) until = last + period; /* another thread ran a cycle since */
      /* gathered long enough (while it lasts: a queue a waiting thread took
       * leaves no cycle to run at the gathering's end) */
      if (e->qhead && e->gathering && e->gather_t + e->cycle_s < until) until = e->gather_t + e->cycle_s;
      if (t >= until) break;
      struct timespec ts = hvd_realtime_in(until - t);
      pthread_cond_timedwait(&e->qcv, &e->qmu, &ts);
    }
    pthread_mutex_unlock(&e->qmu);
  }
  if (e->elastic) { /* every rank leaves in the same cycle */
    hvd_handles_hold(0);
    hvd_handles_publish_held(HVD_OK, NULL);
  }
  hvd_liveness_busy(1); /* every rank is here in the same cycle: NCCL's teardown is bounded by the watchdog */
  hvd_gpu_engine_stop(e->dev_bk);
  hvd_liveness_busy(0);
  return NULL;
}
