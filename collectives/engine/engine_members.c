/* The membership: the engine's communicator and everything sized by its
 * ranks (the control vector, the joined-rank flags, the response cache, the
 * coordinator, the process sets, the shared-memory transport, the
 * watchdog).  Made at start (hvd_eng_members_take, then _open), freed at
 * stop, and rebuilt for a new set of ranks by hvd_eng_rebuild: the path a
 * job that loses or gains ranks takes (the engine thread, at a cycle
 * boundary, on every rank of the new communicator in the same cycle), and
 * how the survivors of a death end the job together (a bounded finalize). */
#define _GNU_SOURCE /* pthread_setname_np */
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h> /* ULFM (ftmpi), where this Open MPI has it */
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../base/config.h"
#include "../../base/log.h"
#include "../../base/role.h"
#include "engine_internal.h"
#include "handles.h"
#include "../transports/liveness.h"
#include "../observers/metrics.h"
#include "../transports/shm.h"
#include "../observers/timeline.h"

static int is_cached(const char *name, void *ctx) { return hvd_cache_lookup(&((hvd_engine *)ctx)->cache, name) >= 0; }
static int in_set(int set, int rank, void *ctx) { return hvd_pset_member(ctx, set, rank); }

void hvd_eng_members_take(hvd_engine *e, MPI_Comm comm) {
  e->comm = comm;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm, &e->rank);
  MPI_Comm_size(comm, &e->size);
  MPI_Comm local;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, e->rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &e->local_rank);
  MPI_Comm_size(local, &e->local_size);
  MPI_Comm_free(&local);
  hvd_log_set_rank(e->rank);
}

static void free_by_size(hvd_engine *e) {
  hvd_cache_free(&e->cache);
  hvd_coord_free(&e->coord);
  free(e->vec);
  free(e->lens);
  free(e->joined);
  e->vec = NULL, e->lens = e->displs = NULL, e->joined = NULL;
}

#define INJECT(step) HVD_CHECK_GOTO(!hvd_eng_injected(step), undo, HVD_ENG_INJECTED, step)

int hvd_eng_members_open(hvd_engine *e, char *err, size_t errlen) {
  enum { NONE, STATE, SHM, WATCHDOG } done = NONE;
  /* the control vector's size does not depend on the ranks: the joined
   * ranks' bits (wr words) go in a round of their own, only while a rank
   * is joined (engine_cycle.c) */
  e->wr = (e->size + 63) / 64;
  e->tw = 1 + 2 * e->wc;
  e->nwords = e->tw + (e->autotune ? 2 : 0);
  e->vec = calloc((size_t)(e->nwords + e->wr), sizeof *e->vec);
  e->lens = calloc((size_t)e->size * 2, sizeof *e->lens);
  e->displs = e->lens ? e->lens + e->size : NULL;
  e->joined = calloc((size_t)e->size, 1);
  e->joined_self = e->stopped_self = 0;
  e->last_joined = -1;
  e->njoined = 0;
  done = STATE; /* free_by_size copes with any part missing */
  int cache_rc = hvd_cache_init(&e->cache, e->cache_cap);
  int coord_rc = hvd_coord_init(&e->coord, e->size, e->joined, &e->njoined, e->stall_warn, e->stall_shutdown,
                                is_cached, e);
  e->coord.in_set = in_set;
  int sets_rc = hvd_psets_start(e);
  HVD_CHECK_GOTO(e->vec && !cache_rc && !coord_rc && !sets_rc && e->lens && e->joined, undo,
                 "out of memory starting the engine");
  INJECT(5);

  /* elastic: the shared-memory waits watch the host's peers' processes */
  if (hvd_shm_start(e->comm, e->rank, e->size, hvd_cfg_int(HVD_CFG_SHM) == 0, e->elastic, (size_t)hvd_cfg_int(HVD_CFG_SHM_BUFFER),
                    (int)hvd_cfg_int(HVD_CFG_TEST_SHM_HOSTS), (size_t)e->nwords, hvd_handles_waiters, err, errlen) != 0)
    goto undo;
  done = SHM;
  INJECT(6);

  /* elastic: the MPI reports a dead peer (the watchdog would end the job);
   * the table tells a dead rank 0 from one cut off (hvd_eng_recover) */
  if (hvd_liveness_start(e->comm, e->rank, e->size, !e->elastic, hvd_cfg_double(HVD_CFG_PEER_TIMEOUT_SECONDS), err,
                         errlen) != 0)
    goto undo;
  done = WATCHDOG;
  INJECT(7);
  return 0;

undo:
  if (done >= WATCHDOG) hvd_liveness_stop();
  if (done >= SHM) hvd_shm_stop(1);
  if (done >= STATE) {
    hvd_psets_free(e, 1);
    free_by_size(e);
  }
  return -1;
}

void hvd_eng_members_close(hvd_engine *e, int mpi_up) {
  hvd_liveness_stop();
  hvd_shm_stop(mpi_up);
  hvd_psets_free(e, mpi_up);
  free_by_size(e);
  if (mpi_up && e->comm != MPI_COMM_NULL) MPI_Comm_free(&e->comm);
  e->comm = MPI_COMM_NULL;
}

int hvd_eng_rebuild(hvd_engine *e, MPI_Comm comm, const char *why, char *err, size_t errlen) {
  int old_rank = e->rank, old_size = e->size;
  /* The change is counted before anything fails, so a program that sees a
   * failure finds it (hvd_elastic_ack).  One that follows the change
   * submits again once it has taken it in: from now until then it is
   * refused, and what it had queued is not carried into the new ranks. */
  int new_rank = 0, new_size = 0;
  MPI_Comm_rank(comm, &new_rank);
  MPI_Comm_size(comm, &new_size);
  pthread_mutex_lock(&e->qmu);
  e->rebuilds++;
  e->ack_rank = new_rank, e->ack_size = new_size;
  snprintf(e->change_msg, sizeof e->change_msg, "%s", why);
  hvd_req *queued = e->follow ? hvd_eng_take_queue_locked(e) : NULL;
  pthread_mutex_unlock(&e->qmu);
  hvd_eng_fail_list(queued, HVD_ERR_MEMBERSHIP, why);
  /* what is in flight here was agreed (or not) among the old ranks: it
   * fails, and the program submits again over the new ones */
  hvd_eng_fail_pending(e, HVD_ERR_MEMBERSHIP, why);
  hvd_liveness_stop();
  hvd_shm_stop(1);
  hvd_psets_retire(e, 1);
  free_by_size(e);
  MPI_Comm_free(&e->comm);
  hvd_eng_members_take(e, comm);
  if (hvd_eng_members_open(e, err, errlen) != 0) return -1;
  hvd_gpu_members_changed(e->dev_bk, e->rank, e->size); /* NCCL: a communicator over the survivors */
  e->rounds_ok = e->released = 0;
  if (hvd_timeline_enabled()) hvd_timeline_instant("MEMBERSHIP", hvd_eng_us(e, hvd_mono_s()));
  HVD_INFO("the job goes on over %d rank(s) (was %d; this rank was %d, is %d): %s", e->size, old_size, old_rank,
           e->rank, why);
  return 0;
}

/* After ranks died (HVDSHIM_ELASTIC), Open MPI 5's and 6's MPI_Finalize
 * sometimes never returns (its survivors wait in it for the dead): the work
 * is done and written, so a survivor still in it after HVD_FINALIZE_LATER_S
 * leaves with the status it was ending with (said at info level: it is the
 * MPI's, and the job's result is unchanged).  MPI_Abort gets longer. */
#define HVD_END_LATER_S 10
#define HVD_FINALIZE_LATER_S 3
typedef struct {
  void (*end)(int code);
  int code, seconds;
  const char *warn;
} end_later;

static void *end_later_main(void *arg) {
  end_later a = *(end_later *)arg;
  free(arg);
  pthread_setname_np(pthread_self(), "hvd-end-later");
  hvd_nap_s(a.seconds);
  if (a.warn && a.seconds == HVD_FINALIZE_LATER_S) HVD_INFO("%s %d s on: leaving with status %d", a.warn, a.seconds, a.code);
  else if (a.warn) HVD_WARN("%s %d s on: leaving with status %d", a.warn, a.seconds, a.code);
  if (a.end) a.end(a.code);
  syscall(SYS_exit_group, a.code);
  return NULL;
}

static void end_after(void (*end)(int code), int code, const char *warn, int seconds) {
  end_later *a = malloc(sizeof *a);
  if (!a) return;
  *a = (end_later){end, code, seconds, warn};
  pthread_t t;
  if (pthread_create(&t, NULL, end_later_main, a) == 0) pthread_detach(t);
  else free(a);
}

void hvd_eng_end_later(void (*end)(int code), int code, const char *warn) { end_after(end, code, warn, HVD_END_LATER_S); }

void hvd_eng_finalize_bounded(hvd_engine *e, int code) {
  end_after(e->host.end_process, code, "MPI_Finalize has not returned after the job went on without the ranks that "
                                       "died (the MPI's fault tolerance):", HVD_FINALIZE_LATER_S);
  PMPI_Finalize(); /* not MPI_Finalize: that is our hook */
}

/* Every survivor of a death comes here together when too few are left
 * (the shrink agreed on who they are): not MPI_Abort, which Open MPI 5's
 * launcher under ULFM sometimes answers with status 0 or a crash of its
 * own, but a finalize of every survivor and a non-zero status, which the
 * launcher reports as it does any rank's. */
_Noreturn void hvd_eng_end_survivors(hvd_engine *e, int code) {
  if (e->host.ending_job) e->host.ending_job(code);
  hvd_timeline_close();
  hvd_metrics_close();
  if (e->mpi_owned) hvd_eng_finalize_bounded(e, code);
  if (e->host.end_process) e->host.end_process(code);
  syscall(SYS_exit_group, code);
  __builtin_unreachable();
}

#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && OMPI_HAVE_MPI_EXT_FTMPI
/* Built with ULFM; whether this run has it on is Open MPI's mpi_ft_enable
 * (mpirun --with-ft ulfm sets it; without it a peer's death ends the whole
 * job however the ranks handle errors), read through MPI_T: 1 on, 0 off,
 * -1 not known (then the run is taken as on). */
static int ft_enabled(void) {
  int provided, idx, count, on = -1;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return -1;
  if (MPI_T_cvar_get_index("mpi_ft_enable", &idx) == MPI_SUCCESS) {
    MPI_T_cvar_handle h;
    if (MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) == MPI_SUCCESS) {
      unsigned char v[16] = {0}; /* (a bool or an int: any byte set is on) */
      if (count == 1 && MPI_T_cvar_read(h, v) == MPI_SUCCESS) {
        on = 0;
        for (size_t k = 0; k < sizeof v; k++) on |= v[k] != 0;
      }
      MPI_T_cvar_handle_free(&h);
    }
  }
  MPI_T_finalize();
  return on;
}

int hvd_eng_can_recover(void) { return ft_enabled() == 0 ? -1 : 1; }

void hvd_eng_recover(hvd_engine *e) {
  char why[sizeof e->recover_why];
  snprintf(why, sizeof why, "%s", e->recover_why);
  /* every survivor's next operation on the communicator fails, so all come
   * here; the shrink agrees on who is left */
  MPIX_Comm_revoke(e->comm);
  hvd_handles_hold(0);
  MPI_Comm rest;
  int rc = MPIX_Comm_shrink(e->comm, &rest);
  if (rc != MPI_SUCCESS) HVD_FATAL("%s; shrinking the job to the ranks still alive failed (code %d)", why, rc);
  MPI_Comm_set_errhandler(rest, MPI_ERRORS_RETURN);
  int n = 0;
  MPI_Comm_size(rest, &n);
  if (n == e->size) {
    MPI_Comm_free(&rest);
    HVD_FATAL("%s (no rank has died: not a failure the job can survive)", why);
  }
  /* the dead: the old ranks not in the new communicator */
  MPI_Group old_g, new_g;
  MPI_Comm_group(e->comm, &old_g);
  MPI_Comm_group(rest, &new_g);
  int *olds = malloc(sizeof(int) * (size_t)e->size), *news = malloc(sizeof(int) * (size_t)e->size);
  int lost0 = 0;
  uint8_t *alive = calloc((size_t)e->size, 1);
  if (!olds || !news || !alive) HVD_FATAL("out of memory (shrinking the job)");
  for (int i = 0; i < n; i++) news[i] = i;
  MPI_Group_translate_ranks(new_g, n, news, old_g, olds);
  for (int i = 0; i < n; i++)
    if (olds[i] >= 0 && olds[i] < e->size) alive[olds[i]] = 1;
  lost0 = !alive[0];
  char dead[256];
  hvd_rank_list(alive, e->size, 0, dead, sizeof dead);
  /* Never two jobs.  A rank on another host that stops answering may be
   * dead or cut off (a link down), and a cut-off side finds its peers as
   * "dead" as they find it: each side shrinks to itself.  Only a rank 0
   * writes to the real files and the console, so the side holding rank 0
   * goes on; a side without it goes on (a survivor becoming rank 0) only
   * when one of its ranks saw rank 0's process end on its own host, and
   * otherwise ends: a rank 0 that may still run is never replaced. */
  if (lost0) {
    char who[128];
    int seen = hvd_liveness_seen_gone(0, who, sizeof who), any = 0;
    rc = MPI_Allreduce(&seen, &any, 1, MPI_INT, MPI_MAX, rest);
    if (rc != MPI_SUCCESS || !any) {
      HVD_ERROR("rank(s) %s stopped answering (%s), rank 0 among them, and no rank here saw %s end: it is on another "
                "host, cut off or down, and goes on there if it can; these %d rank(s) end so that two jobs never "
                "write as rank 0", dead, why, who, n);
      MPI_Comm_free(&rest);
      hvd_eng_end_survivors(e, 1);
    }
  }
  MPI_Group_free(&old_g);
  MPI_Group_free(&new_g);
  free(olds), free(news), free(alive);
  if (n < e->elastic_min_np) {
    HVD_ERROR("rank(s) %s died; %d rank(s) left, fewer than HVDSHIM_ELASTIC_MIN_NP=%d: ending the job", dead, n,
              e->elastic_min_np);
    MPI_Comm_free(&rest);
    hvd_eng_end_survivors(e, 1);
  }
  char msg[1024];
  snprintf(msg, sizeof msg, "rank(s) %s died (%s); the job goes on over %d rank(s)", dead, why, n);
  /* a program that follows the changes (hvd_elastic_follow: the PyTorch
   * adapter, the served horovod) says it in its own words, once, on rank 0 */
  if (e->follow) HVD_INFO("%s", msg);
  else HVD_WARN("%s", msg);
  /* What completed here is held until the next round showed every rank got
   * that far; a survivor published a cycle only if all ran it, so the
   * survivors agree: held completions of a cycle some survivor published
   * are results, the others fail (a peer failed inside that cycle). */
  unsigned long long mine = e->released, top = 0;
  rc = MPI_Allreduce(&mine, &top, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, rest);
  if (rc != MPI_SUCCESS) HVD_FATAL("%s; another rank died while the survivors agreed on the operations done", msg);
  int results = e->rounds_ok <= top; /* published after the rebuild has counted the change */
  e->nexec = 0; /* what was agreed in the failed cycle: pending still, failed below */
  if (lost0) {
    pthread_mutex_lock(&e->qmu);
    e->rank0_lost = 1;
    pthread_mutex_unlock(&e->qmu);
  }
  char err[512];
  if (hvd_eng_rebuild(e, rest, msg, err, sizeof err) != 0) HVD_FATAL("after %s: %s", msg, err);
  if (lost0 && e->rank == 0) { /* the new rank 0 goes on in the first one's timeline and metrics */
    hvd_role_became_rank0(); /* and has the console and the files from its next call the overlay sees */
    const char *tl = hvd_cfg_str(HVD_CFG_TIMELINE), *mp = hvd_cfg_str(HVD_CFG_METRICS);
    if (tl[0] && hvd_timeline_open(tl, 1, err, sizeof err) != 0) HVD_WARN("%s; timeline disabled", err);
    if (hvd_timeline_enabled()) hvd_timeline_instant("MEMBERSHIP", hvd_eng_us(e, hvd_mono_s()));
    if (mp[0] && hvd_metrics_open(mp, 1, err, sizeof err) != 0) HVD_WARN("%s; metrics disabled", err);
  }
  if (results) hvd_handles_publish_held(HVD_OK, NULL);
  else hvd_handles_publish_held(HVD_ERR_MEMBERSHIP, msg);
  hvd_handles_hold(1);
}
#else
int hvd_eng_can_recover(void) { return 0; }

void hvd_eng_recover(hvd_engine *e) { HVD_FATAL("%s", e->recover_why); } /* never armed: start refuses elastic */
#endif
