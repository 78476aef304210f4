/* The engine's cycle: what one cycle does to negotiate, fuse and execute
 * collectives (admission, the control round, the slow path, join, autotune
 * glue); it calls down into execution (engine_exec.c), the process sets and
 * completion.  Who runs a cycle, and when: engine_drive.c.  The stages and
 * the state: engine_internal.h.
 *
 * DESIGN
 * ------
 * User threads only enqueue (submit_*: validate, take a handle, push onto
 * the queue under `qmu`).  Everything else happens in cycles, one at a time,
 * run by the engine thread or by a waiting user thread when engine_drive.c
 * says.  Each cycle, on every rank:
 *
 *  1. Admit queued requests into `pending` (name -> request).  A request
 *     whose name is in the response cache with the same signature only sets
 *     its cache bit; any other goes to the outbox for the coordinator.
 *  2. One MPI_Allreduce(BAND) over a vector of 64-bit words:
 *       [~flags][ready cache bits][~invalid cache bits]
 *     (OR is computed as ~AND(~x)).  Bits set on every rank are ready
 *     everywhere; an invalid bit (a cached request waiting too long on some
 *     rank, i.e. a possible stall) sends that entry back through the
 *     coordinator so the stall inspector can name the missing ranks.  Its
 *     size is fixed by the cache's capacity, whatever the number of ranks:
 *     which ranks have joined (one bit a rank) goes in a second round,
 *     only in cycles where some rank is joined (F_JOINED).
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
 *     and reduced (the backend: shared memory or MPI, engine_exec.c); then handles complete.
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
 * HVDSHIM_SHUTDOWN_TIMEOUT_SECONDS, then raises F_JOINED and its bit in the
 * joined-rank words (the second round).  From that cycle on it takes part in every
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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../base/log.h"
#include "../negotiation/coordinator.h"
#include "../observers/autotune.h"
#include "../observers/timeline.h"
#include "../transports/liveness.h"
#include "../transports/shm.h"
#include "engine_internal.h"
#include "handles.h"

/* F_STOPPED: a rank has stopped for good (hvd_shutdown); F_RUNNING: a rank
 * is not stuck (below), so a deadlock is not declared */
enum { F_SLOW = 1, F_STOPPED = 2, F_RUNNING = 4, F_JOINED = 8 /* this rank has joined */, F_ENDS_ON_STOP = 16 };

/* Stuck: this rank waits on hvdshim (a user thread in a wait, or one that
 * ended less than a second ago) and has submitted nothing for
 * HVDSHIM_DEADLOCK_SECONDS, or it has joined (it will submit nothing). A
 * rank still computing is not stuck, however late. */
static int stuck(hvd_engine *e, double now) {
  if (e->joined_self) return 1;
  double last;
  __atomic_load(&e->last_submit, &last, __ATOMIC_RELAXED);
  return now - last >= e->deadlock_s && hvd_handles_waiting(1.0);
}

/* ------------------------------------------------------------------ the cycle */

/* Longest sleep between polls of a control round: peers that are late are
 * usually computing, and every wake-up takes time from a training thread. */
#define HVD_POLL_NAP_MAX_NS 320000L

/* The per-cycle bitvector allreduce.  Peers may arrive up to a cycle later
 * (their timer, not a submission, wakes them), so instead of a blocking call
 * that busy-polls a core the training thread needs, poll a nonblocking one:
 * spin briefly (the common, aligned case), then sleep, doubling the sleep
 * from 20 us up to HVD_POLL_NAP_MAX_NS. */
static hvd_eng_rc control_allreduce(hvd_engine *e, uint64_t *v) {
  int shm = hvd_shm_control(v); /* every rank on this host: through shared memory */
  if (shm < 0) return HVD_ENG_COLLECTIVE_FAILED(e, "the control round (shared memory): %s", hvd_shm_death());
  if (shm) return HVD_ENG_OK;
  MPI_Request req;
  if (hvd_eng_mpi_check(e, MPI_Iallreduce(MPI_IN_PLACE, v, e->nwords, MPI_UINT64_T, MPI_BAND, e->comm, &req),
                        "MPI_Iallreduce (cycle)") != HVD_ENG_OK)
    return HVD_ENG_RECOVER;
  int done = 0;
  double t0 = hvd_mono_s();
  long nap_ns = 20000;
  for (;;) {
    if (hvd_eng_mpi_check(e, MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test (cycle)") != HVD_ENG_OK)
      return HVD_ENG_RECOVER;
    if (done) return HVD_ENG_OK;
    if (hvd_mono_s() - t0 > 50e-6) {
      struct timespec ts = {0, nap_ns};
      nanosleep(&ts, NULL);
      if (nap_ns < HVD_POLL_NAP_MAX_NS) nap_ns *= 2;
    }
  }
}

/* The joined ranks' round (a cycle where some rank has joined): wr words
 * of ~joined bits, BAND over the ranks; a cleared bit means that rank has
 * joined.  *last: the highest rank that joined in this cycle (unchanged
 * when none did).  The count of joined ranks, or -1 when the round failed. */
static int agree_joined(hvd_engine *e, int *last) {
  uint64_t *jv = e->vec + e->nwords;
  for (int w = 0; w < e->wr; w++) jv[w] = ~(uint64_t)0;
  if (e->joined_self) jv[e->rank / 64] &= ~((uint64_t)1 << (e->rank % 64));
  if (hvd_eng_mpi_check(e, MPI_Allreduce(MPI_IN_PLACE, jv, e->wr, MPI_UINT64_T, MPI_BAND, e->comm),
                        "MPI_Allreduce (joined ranks)") != HVD_ENG_OK)
    return -1;
  int n = 0;
  for (int r = 0; r < e->size; r++) {
    int j = !(jv[r / 64] & ((uint64_t)1 << (r % 64)));
    if (j && !e->joined[r]) *last = r;
    e->joined[r] = (uint8_t)j;
    n += j;
  }
  return n;
}

/* Every rank has joined and none has stopped for good: every rank's
 * hvd_join returns (the last rank to join) and all take part again. */
static void end_join(hvd_engine *e) {
  e->joined_self = 0;
  memset(e->joined, 0, (size_t)e->size);
  e->njoined = 0;
  if (e->rank == 0) HVD_DEBUG("every rank has joined (the last: rank %d); all go on", e->last_joined);
  hvd_handle_t h = e->join_handle;
  e->join_handle = HVD_NO_HANDLE;
  if (h != HVD_NO_HANDLE) hvd_handles_complete(h, HVD_OK, NULL, NULL, 0);
}

static void fail_join(hvd_engine *e, const char *why) {
  hvd_handle_t h = e->join_handle;
  e->join_handle = HVD_NO_HANDLE;
  if (h != HVD_NO_HANDLE) hvd_handles_complete(h, HVD_ERR_SHUTDOWN, why, NULL, 0);
}

/* Every rank, same cycle: the pair rank 0 sent in the control vector. */
static void apply_tuning(hvd_engine *e, uint64_t fusion, uint64_t cycle_ns) {
  e->fusion = (size_t)fusion;
  e->cycle_s = (double)cycle_ns * 1e-9;
  __atomic_store_n(&e->pub_fusion, e->fusion, __ATOMIC_RELAXED);
  __atomic_store_n(&e->pub_cycle_ns, cycle_ns, __ATOMIC_RELAXED);
  /* "fixed" is published with the chosen pair itself (rank 0, which decides
   * and writes the metrics): from the cycle the search ends to the one that
   * applies its choice, a metrics line read "fixed" beside the last pair
   * tried */
  if (e->rank == 0 && e->autotune && hvd_tuner_done(&e->tuner) && fusion == (uint64_t)e->tuner.fusion &&
      cycle_ns == (uint64_t)llround(e->tuner.cycle_ms * 1e6))
    __atomic_store_n(&e->pub_tune, 2, __ATOMIC_RELAXED);
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
static void tune(hvd_engine *e, double now) {
  if (hvd_tuner_done(&e->tuner)) return;
  uint64_t steps = __atomic_load_n(&e->steps, __ATOMIC_RELAXED), bytes = e->stats.bytes_reduced;
  if (e->win_t == 0) {
    e->win_t = now, e->win_steps = steps, e->win_bytes = bytes;
    return;
  }
  double dt = now - e->win_t;
  if (e->tune_mode == 0 && steps > e->win_steps) e->tune_mode = 1;
  if (e->tune_mode == 0 && dt >= HVD_TUNE_WINDOW_S && bytes > e->win_bytes) e->tune_mode = 2;
  uint64_t per = e->tune_per;
  if (e->tune_mode == 0 || (e->tune_mode == 1 && steps - e->win_steps < per) ||
      (e->tune_mode == 2 && (dt < HVD_TUNE_WINDOW_S || bytes == e->win_bytes)))
    return;
  double score = e->tune_mode == 1 ? (double)(steps - e->win_steps) / dt : (double)(bytes - e->win_bytes) / dt;
  e->win_t = now, e->win_steps = steps, e->win_bytes = bytes;
  if (!hvd_tuner_feed(&e->tuner, score)) return;
  char f[32];
  format_bytes(e->tuner.fusion, f, sizeof f);
  if (!hvd_tuner_done(&e->tuner)) {
    HVD_DEBUG("autotune: trying fusion threshold %s, cycle time %g ms", f, e->tuner.cycle_ms);
    return;
  }
  /* published as "fixed" by apply_tuning when the choice is applied */
  /* a result the user asked for: printed as info, but at the default level (warn) too */
  if (hvd_log_threshold >= HVD_LOG_WARN)
    hvd_log_write(HVD_LOG_INFO, __FILE__, __LINE__,
                "autotune: fixed HVDSHIM_FUSION_THRESHOLD=%s and HVDSHIM_CYCLE_TIME=%g (ms) after %d measurements; "
                "%.4g %s with them",
                f, e->tuner.cycle_ms, e->tuner.measured, e->tuner.chosen_score,
                e->tune_mode == 1 ? "steps/s" : "bytes/s");
}



/* hvd_timeline_start/stop on the engine thread (the timeline's owner):
 * rank 0 closes the current file and, for a start, opens the new one. */
static void cycle_timeline(hvd_engine *e, int op, char *path, int mark, hvd_handle_t h) {
  char why[600] = "";
  hvd_status_t st = HVD_OK;
  if (e->rank == 0) {
    hvd_timeline_close();
    if (op == 1 && hvd_timeline_open(path, 0, why, sizeof why) != 0) st = HVD_ERR_INVALID;
  }
  if (st == HVD_OK) e->mark_cycles = op == 1 && mark;
  free(path);
  hvd_handles_complete(h, st, st == HVD_OK ? NULL : why, NULL, 0);
}

/* HVDSHIM_TEST_LEAVE=R (tests only): at cycle HVDSHIM_TEST_LEAVE_CYCLE,
 * every rank in the same cycle, rank R leaves the job and the others
 * rebuild the engine over the rest: the membership change a lost rank
 * brings, without the failure.  *left: this rank has left (its thread ends). */
static hvd_eng_rc test_leave(hvd_engine *e, int *left) {
  int leaving = e->rank == e->leave_rank;
  MPI_Comm rest;
  if (hvd_eng_mpi_check(e, MPI_Comm_split(e->comm, leaving ? MPI_UNDEFINED : 0, e->rank, &rest),
                        "MPI_Comm_split (a rank leaves)") != HVD_ENG_OK)
    return HVD_ENG_RECOVER;
  char why[200];
  snprintf(why, sizeof why, "rank %d left the job (HVDSHIM_TEST_LEAVE)", e->leave_rank);
  e->leave_rank = -1;
  if (leaving) {
    hvd_liveness_stop(); /* the others no longer answer on the old communicator */
    hvd_eng_fail_everything(e, "this rank has left the job (HVDSHIM_TEST_LEAVE)");
    *left = 1;
    return HVD_ENG_OK;
  }
  char err[512];
  if (hvd_eng_rebuild(e, rest, why, err, sizeof err) != 0) HVD_FATAL("rebuilding the engine after %s: %s", why, err);
  return HVD_ENG_OK;
}

/* One cycle; *go_on = 0 when the engine is done.  HVD_ENG_RECOVER: a
 * collective failed (elastic jobs), and the cycle stopped there. */
static hvd_eng_rc run(hvd_engine *e, int *go_on) {
  if (e->leave_rank >= 0 && e->stats.cycles == e->leave_cycle) {
    int left = 0;
    if (test_leave(e, &left) != HVD_ENG_OK) return HVD_ENG_RECOVER;
    if (left) {
      *go_on = 0;
      return HVD_ENG_OK;
    }
  }
  double now = hvd_mono_s();
  pthread_mutex_lock(&e->qmu);
  hvd_req *q = hvd_eng_take_queue_locked(e);
  int stopping = e->stop_requested;
  double stop_time = e->stop_time;
  int ends_on_stop = e->stop_ends_job;
  if (e->join_asked != HVD_NO_HANDLE) { /* hvd_join: this rank joins once its own work has completed */
    e->join_handle = e->join_asked;
    e->join_asked = HVD_NO_HANDLE;
  }
  int tl_op = e->tl_op, tl_mark = e->tl_mark;
  char *tl_path = e->tl_path;
  hvd_handle_t tl_handle = e->tl_handle;
  e->tl_op = 0, e->tl_path = NULL, e->tl_handle = HVD_NO_HANDLE;
  pthread_mutex_unlock(&e->qmu);
  if (tl_op) cycle_timeline(e, tl_op, tl_path, tl_mark, tl_handle);
  e->cycle_admitted = e->cycle_agreed = 0;
  for (hvd_req *n; q; q = n) {
    n = q->next;
    hvd_eng_admit(e, q);
    e->cycle_admitted++;
  }
  e->stats.cycles++;
  if (e->join_handle != HVD_NO_HANDLE && !e->joined_self && e->npending == 0) e->joined_self = 1;
  if (stopping && !e->stopped_self && (e->npending == 0 || now - stop_time >= e->shutdown_timeout)) {
    if (e->npending) {
      HVD_WARN("joining with %zu operation(s) in flight: peers did not submit them within "
               "HVDSHIM_SHUTDOWN_TIMEOUT_SECONDS=%g", e->npending, e->shutdown_timeout);
      hvd_eng_fail_pending(e, HVD_ERR_SHUTDOWN,
                           "this rank finished (hvd_shutdown or exit) before every rank submitted it");
    }
    e->joined_self = e->stopped_self = 1;
  }

  uint64_t *v = e->vec, flags = 0;
  if (e->nout > 0 || (e->rank == 0 && e->coord.fatal_msg)) flags |= F_SLOW;
  if (e->stopped_self) flags |= F_STOPPED;
  if (e->deadlock_s <= 0 || !stuck(e, now)) flags |= F_RUNNING;
  if (e->joined_self) flags |= F_JOINED;
  if (ends_on_stop) flags |= F_ENDS_ON_STOP;
  v[0] = ~flags;
  uint64_t *ready = v + 1, *invalid = ready + e->wc;
  hvd_eng_offer_cached(e, ready, invalid, now);
  if (e->autotune) {
    v[e->tw] = e->rank == 0 ? (uint64_t)e->tuner.fusion : ~(uint64_t)0;
    v[e->tw + 1] = e->rank == 0 ? (uint64_t)llround(e->tuner.cycle_ms * 1e6) : ~(uint64_t)0;
  }
  hvd_liveness_busy(1);
  if (control_allreduce(e, v) != HVD_ENG_OK) return HVD_ENG_RECOVER;
  if (e->elastic) { /* every rank got through the last cycle: its completions are the job's */
    e->released = e->rounds_ok++;
    hvd_handles_publish_held(HVD_OK, NULL);
  }
  if (e->autotune) apply_tuning(e, v[e->tw], v[e->tw + 1]);
  hvd_liveness_tick();
  flags = ~v[0];
  if ((flags & F_STOPPED) && (flags & F_ENDS_ON_STOP)) { /* hvd_shutdown_ends_job: every rank leaves now */
    hvd_liveness_busy(0);
    const char *why = e->stopped_self ? "this rank has finished (hvd_shutdown)"
                                      : "the job's collectives have been shut down: a rank finished (shutdown, or its "
                                        "exit) while this one still submits; a rank that runs out of work first "
                                        "calls join (hvd_join; hvd.join() in Horovod's API)";
    fail_join(e, why);
    hvd_eng_fail_everything(e, why);
    *go_on = 0;
    return HVD_ENG_OK;
  }
  int before = e->njoined;
  if (flags & F_JOINED) { /* some rank has joined: which ones (every rank agrees to ask) */
    int n = agree_joined(e, &e->last_joined);
    if (n < 0) return HVD_ENG_RECOVER;
    e->njoined = n;
  } else if (e->njoined) { /* (no rank is joined any more) */
    memset(e->joined, 0, (size_t)e->size);
    e->njoined = 0;
  }
  if (e->njoined == e->size && !(flags & F_STOPPED)) { /* every rank is in hvd_join: it returns everywhere */
    hvd_liveness_busy(0);
    end_join(e);
    return HVD_ENG_OK;
  }
  if (e->njoined == e->size) { /* everyone finished: all leave in this cycle */
    hvd_liveness_busy(0);
    fail_join(e, "hvd_join: a rank has finished (hvd_shutdown or exit), so not every rank can join");
    hvd_eng_fail_everything(e, "every rank has finished (hvd_shutdown or exit) before it was submitted everywhere");
    *go_on = 0;
    return HVD_ENG_OK;
  }
  if (e->njoined != before && e->rank == 0) {
    char list[256];
    hvd_rank_list(e->joined, e->size, 1, list, sizeof list);
    HVD_INFO("rank(s) %s finished; the others go on (averages over %d rank(s))", list, e->size - e->njoined);
  }

  hvd_eng_take_cached(e, ready, invalid, now);
  /* A change in the joined set goes through the coordinator on every rank,
   * so what waited only for the new joiners is answered. */
  if (((flags & F_SLOW) || e->njoined != before) && hvd_eng_slow_path(e, now) != HVD_ENG_OK) return HVD_ENG_RECOVER;
  size_t agreed = e->nexec; /* operations every rank runs in this cycle */
  e->cycle_agreed = agreed;
  if (hvd_eng_execute(e) != HVD_ENG_OK) return HVD_ENG_RECOVER;
  char gerr[512];
  /* (elastic: a peer's death can show here first; the recovery finds it, or
   * ends the job when no rank has died) */
  if (e->dev_bk && e->dev_bk->check_async && e->dev_bk->check_async(gerr, sizeof gerr) != 0)
    return HVD_ENG_COLLECTIVE_FAILED(e, "%s", gerr);
  hvd_liveness_busy(0);
  if (e->rank == 0) hvd_coord_stall_check(&e->coord, hvd_mono_s());
  /* every rank stuck, and what is in flight waits for them: nothing can
   * complete (rank 0's table holds it all by now: a cached request waiting
   * past min(1 s, the stall warning / 2) goes through the coordinator) */
  /* (two cycles in a row with nothing run: a wait that a join or a
   * renegotiation ended in this cycle may submit what the table lacks) */
  e->stuck_cycles = !(flags & F_RUNNING) && agreed == 0 ? e->stuck_cycles + 1 : 0;
  if (e->rank == 0 && e->stuck_cycles >= 2) hvd_coord_deadlock(&e->coord, e->deadlock_s);
  if (e->autotune && e->rank == 0) tune(e, hvd_mono_s());
  if (hvd_timeline_enabled()) {
    if (e->mark_cycles) hvd_timeline_instant("CYCLE_START", hvd_eng_us(e, now));
    hvd_timeline_flush();
  }
  return HVD_ENG_OK;
}

int hvd_eng_cycle(hvd_engine *e) {
  int go_on = 1;
  if (run(e, &go_on) == HVD_ENG_OK) return go_on;
  /* A collective of this cycle failed in an elastic job (elsewhere the job
   * ended where it failed): the survivors shrink the job and go on.  No
   * lock is held across an MPI call, so the stages that returned here hold
   * none; what this cycle had agreed is pending still and fails with the
   * rebuild. */
  hvd_liveness_busy(0);
  hvd_eng_recover(e);
  return 1;
}
