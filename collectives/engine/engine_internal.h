/* The engine's state and the calls between its stages, shared by the
 * engine's files and by nothing else.  One `hvd_engine` is the whole state
 * of one engine: made by hvd_eng_start, handed down explicitly to every
 * stage, rebuilt for a new set of ranks by hvd_eng_rebuild, freed by
 * hvd_eng_stop.  The stages, each calling only the ones below it:
 *
 *   engine_api.c      the public C API (user threads): validate, take a
 *                     handle, enqueue, wait; holds the process's one engine
 *   engine_life.c     start, stop, the fork child: MPI, the settings check,
 *                     the files, the thread
 *   engine_drive.c    who runs the next cycle: the engine thread's loop, a
 *                     waiting user thread (the waits), a submission's wake-up
 *   engine_cycle.c    one cycle: the control round, join, autotune glue
 *   engine_negotiate.c   what every rank runs this cycle: admission, the
 *                     cached path, the slow path through the coordinator
 *   engine_members.c  the membership: the communicator and everything sized
 *                     by it (control vector, cache, coordinator, process
 *                     sets, shared memory, watchdog); made, freed, rebuilt
 *   engine_exec.c     execution: grouping one cycle's agreed list and
 *                     dispatching it to the backends (backend.h's contract)
 *   engine_psets.c    process sets: the registry, adding and removing sets
 *   engine_done.c     completion: finishing requests and failing what cannot
 *                     complete; the small helpers every stage uses
 *   coordinator.c     rank 0's negotiation table and stall inspector (its
 *                     own state, no MPI)
 *
 * Metrics and the timeline observe: the engine calls them (metrics.h,
 * timeline.h) and they never call back.  What the engine needs from the
 * layers above (how to end the process) it is given at start
 * (hvd_engine_host, engine.h).
 *
 * Ownership: `qmu` guards the queue, `accepting`, `stop_requested` and
 * `closed_msg`.  Everything below the marked line is touched by the engine
 * thread only.  No lock is held across an MPI call. */
#ifndef HVD_ENGINE_INTERNAL_H
#define HVD_ENGINE_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "../../base/clock.h"
#include "../observers/autotune.h"
#include "../negotiation/cache.h"
#include "../negotiation/coordinator.h"
#include "engine.h"
#include "../transports/fusion.h"
#include "../gpu/gpu.h"
#include "../negotiation/wire.h"

#define HVD_NAME_MAX 1024
#define HVD_NO_HANDLE ((hvd_handle_t)-1) /* a phantom's: completes nothing */

typedef struct hvd_req {
  hvd_handle_t handle;
  hvd_sig sig;
  char *name;
  void *buf;
  const void *in;
  double t_submit, t_ready;
  int cache_bit;
  int phantom; /* a joined rank's stand-in: buf is ours, no handle */
  int skip;    /* a stand-in on a rank outside the operation's process set: walked, never run */
  const int64_t *splits; /* alltoall: rows sent to each member of the set */
  int64_t *recv_splits;  /* alltoall: rows received from each (written before completion; may be NULL) */
  void *stream;         /* GPU: the producing and consuming stream */
  hvd_gpu_event *ready; /* GPU: recorded on `stream` at submission */
  struct hvd_req *next;
} hvd_req;

/* A process set: a sub-group of the job's ranks with its own communicator.
 * Every rank holds every set (the same id everywhere: sets are added and
 * removed by negotiated operations every rank runs in the same order), so
 * the coordinator and non-members can tell who an operation waits for.
 * Published once complete (atomic pointer store), never freed before the
 * engine stops: user threads read it without a lock. */
#define HVD_MAX_PSETS 1024
typedef struct {
  int n;           /* members */
  int *ranks;      /* their ranks in the job, ascending */
  uint8_t *member; /* one flag per rank of the job */
  MPI_Comm comm;   /* the members' communicator; MPI_COMM_NULL on non-members (set 0: E->comm) */
  int removed;     /* atomic: hvd_process_set_remove ran */
  uint64_t barriers; /* atomic: this rank's hvd_barrier sequence on the set */
} hvd_pset;

/* What an hvd_process_set_add request carries (its buf): the members, and
 * the id the execution hands back. */
typedef struct {
  const int *ranks; /* ascending */
  int n;
  int id;
} hvd_pset_arg;

typedef struct {
  hvd_req *req;
  const int64_t *rows; /* allgather: points into the response buffer */
} exec_item;

struct hvd_engine {
  pthread_mutex_t life_mu; /* start and stop, one at a time */
  hvd_engine_host host;    /* given at start by the layer above */
  /* set by start (the membership: by engine_members.c, also at a rebuild), read-only while the thread runs */
  MPI_Comm comm;
  int rank, size, local_rank, local_size;
  int mpi_owned; /* we called MPI_Init_thread */
  int started;
  double t0;
  int cache_cap, wc, wr, nwords;
  double cycle_s, idle_s, stale_age, shutdown_timeout, stall_warn, stall_shutdown, deadlock_s;
  size_t fusion, chunk;
  pthread_t thread;
  /* Cycles run one at a time, by the engine thread or by a user thread
   * that waits for a completion (engine_drive.c): whoever holds `drive`.
   * finished: a cycle said the engine is done (under drive).  gpu_seen: a
   * GPU operation was submitted (atomic): from then on only the engine
   * thread runs cycles (its device state is its own). */
  pthread_mutex_t drive;
  int finished, gpu_seen;

  /* guarded by qmu */
  pthread_mutex_t qmu;
  pthread_cond_t qcv;
  hvd_req *qhead, *qtail;
  size_t qbytes;
  /* the queue holds only GPU tensors submitted one at a time, since
   * `gather_t`: the engine thread lets more join for up to a cycle before
   * it takes them (one fused group, where each would be its own), unless a
   * thread waits for a result first (engine_drive.c) or other work comes.
   * Written under qmu, read atomically by the waits. */
  int gathering;
  double gather_t;
  int accepting, stop_requested;
  double stop_time;
  hvd_handle_t join_asked; /* hvd_join's handle, until the engine takes it (HVD_NO_HANDLE: none) */
  int join_busy;           /* an hvd_join is in progress on this rank */
  /* hvd_timeline_start/stop: what the engine thread does at its next cycle */
  int tl_op; /* 0 none, 1 start, 2 stop */
  char *tl_path;
  int tl_mark;
  hvd_handle_t tl_handle;
  char closed_msg[512];

  /* ---- engine thread only ---- */
  hvd_strmap *pending;
  size_t npending;
  hvd_req **outbox;
  size_t nout, capout;
  hvd_cache cache;
  uint64_t tick;
  uint64_t *vec;
  hvd_buf sendbuf, gathered, resp;
  int *lens, *displs;
  exec_item *exec;
  size_t nexec, capexec;
  hvd_fuse_entry *fuse;
  size_t capfuse;
  hvd_gpu_item *gpu_items;
  size_t capgpu;
  const hvd_backend *dev_bk; /* the device backend (HVDSHIM_GPU_OPERATIONS): set at start, or NULL (auto)
                              * until the first GPU operation decides (hvd_eng_device_backend) */
  hvd_handle_t *handles;
  size_t caphandles;
  hvd_coord coord; /* rank 0's negotiation table (coordinator.c) */
  hvd_pset *psets[HVD_MAX_PSETS]; /* atomic pointers: published by the engine thread, read anywhere */
  int npsets;                     /* ids handed out (the next one) */
  /* join: the agreed set of ranks that finished or are in hvd_join, updated
   * every cycle.  joined_self: this rank takes part without data; stopped_self:
   * for good (hvd_shutdown), not for an hvd_join that ends when all have
   * joined.  join_handle: this rank's hvd_join in progress (HVD_NO_HANDLE: none). */
  int joined_self, stopped_self, last_joined;
  int mark_cycles; /* a timeline marker per cycle (HVDSHIM_TIMELINE_MARK_CYCLES, or hvd_timeline_start's) */
  hvd_handle_t join_handle;
  uint8_t *joined;
  int njoined;
  /* autotune: tw = index of its two control words; rank 0 runs the tuner */
  int autotune, tw, tune_mode; /* tune_mode: 0 undecided, 1 steps/s, 2 bytes/s */
  uint64_t tune_per;           /* HVDSHIM_AUTOTUNE_STEPS_PER_SAMPLE */
  hvd_tuner tuner;
  double win_t;
  uint64_t win_steps, win_bytes;
  hvd_stats_t stats; /* written by the engine thread, read racily by hvd_get_stats */
  int stuck_cycles;   /* cycles in a row with every rank stuck and nothing run (deadlock detection) */
  /* the last cycle: operations it admitted here and ones every rank agreed
   * to; pend_nap: the wait before the next round while work here waits for
   * the peers (0: at once; doubles after rounds that changed nothing) */
  size_t cycle_admitted, cycle_agreed;
  double pend_nap;
  double last_submit; /* atomic (__atomic_load/store): hvd_mono_s() of this rank's last accepted submission */
  double last_cycle;  /* atomic (__atomic_load/store): hvd_mono_s() at the start of the last cycle, whoever ran it */
  uint64_t steps;    /* atomic: steps marked on this rank since the start (hvd_step_mark; autotune's clock) */
  /* published for hvd_engine_tuning (atomics: read by user threads) */
  size_t pub_fusion;
  uint64_t pub_cycle_ns;
  int pub_tune; /* 0 off, 1 tuning, 2 fixed */
  /* process sets of memberships before the last rebuild: user threads may
   * still hold them (hvd_pset_get), so they are freed at stop */
  hvd_pset **retired;
  size_t nretired;
  uint64_t rebuilds; /* memberships rebuilt since the start */
  /* HVDSHIM_ELASTIC: a failed collective returns HVD_ENG_RECOVER up to the
   * cycle, which shrinks the job (recover_why: what failed) */
  int elastic, elastic_min_np;
  /* elastic: completions are held until the next round succeeds (see
   * hvd_handles_hold): rounds_ok counts this membership's successful
   * rounds, released is the round whose completions were published last */
  uint64_t rounds_ok, released;
  /* hvd_elastic_follow: after a rebuild this rank's submissions fail with
   * HVD_ERR_MEMBERSHIP until hvd_elastic_ack (acked: the rebuilds taken in;
   * change_msg: the last change; rank0_lost: the first rank 0 died).
   * Under qmu. */
  int follow, rank0_lost;
  /* hvd_shutdown_ends_job: a rank's stop for good ends every rank's
   * collectives (F_ENDS_ON_STOP), as Horovod's shutdown does.  Under qmu. */
  int stop_ends_job;
  int ack_rank, ack_size; /* this rank's place in the newest membership (set before anything fails) */
  uint64_t acked;
  char change_msg[600];
  char recover_why[600];
  int leave_rank;       /* HVDSHIM_TEST_LEAVE=RANK@CYCLE: the rank that leaves (-1: none) */
  uint64_t leave_cycle; /* and the cycle */
};

/* ---- engine_done.c: completion and helpers ---- */
double hvd_eng_us(hvd_engine *e, double t); /* microseconds since the engine started */
/* What a stage of the cycle returns when it runs collectives.
 * HVD_ENG_RECOVER: a collective failed in an elastic job (HVDSHIM_ELASTIC;
 * the reason is in e->recover_why); the stage stops where it is and returns
 * it, and so does every stage above it, up to the cycle, which recovers
 * (hvd_eng_recover: the survivors shrink the job and go on).  Outside
 * elastic jobs a failed collective ends the job where it failed. */
typedef enum { HVD_ENG_OK = 0, HVD_ENG_RECOVER = 1 } hvd_eng_rc;
#define HVD_ENG_MUST_USE __attribute__((warn_unused_result)) /* an hvd_eng_rc is never dropped */
/* A collective failed, with this message: HVD_ENG_RECOVER in an elastic
 * job; else the job ends naming it (does not return).  Called through
 * HVD_ENG_COLLECTIVE_FAILED, which names the caller's file and line. */
hvd_eng_rc hvd_eng_failed_at(hvd_engine *e, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5))) HVD_ENG_MUST_USE;
#define HVD_ENG_COLLECTIVE_FAILED(e, ...) hvd_eng_failed_at((e), __FILE__, __LINE__, __VA_ARGS__)
/* An MPI result: HVD_ENG_OK, or (it failed) as HVD_ENG_COLLECTIVE_FAILED
 * with "what failed: MPI's message". */
hvd_eng_rc hvd_eng_mpi_check(hvd_engine *e, int rc, const char *what) HVD_ENG_MUST_USE;
/* Grows an engine-thread array to at least n elements (fatal when out of memory). */
void hvd_eng_grow(void *arr, size_t *cap, size_t n, size_t elem, const char *what);
void hvd_eng_req_free(hvd_req *r);
/* Completes r's handle (status, message, gathered rows) and frees r. */
void hvd_eng_finish(hvd_engine *e, hvd_req *r, hvd_status_t st, const char *msg, void *gathered, size_t rows);
/* A GPU operation done on the engine stream: the handle carries the event. */
void hvd_eng_finish_gpu(hvd_engine *e, hvd_req *r, hvd_gpu_event *done);
/* Fails everything admitted on this rank (pending, cached or in the outbox)
 * with st: HVD_ERR_SHUTDOWN, or HVD_ERR_MEMBERSHIP when the ranks changed. */
void hvd_eng_fail_pending(hvd_engine *e, hvd_status_t st, const char *why);
/* With qmu held: what this rank queued and the engine thread has not
 * taken yet, taken off the queue; then failed (without qmu) by fail_list. */
hvd_req *hvd_eng_take_queue_locked(hvd_engine *e);
void hvd_eng_fail_list(hvd_req *q, hvd_status_t st, const char *why);
/* Ends the engine's service: later submissions fail with `why`, and so does
 * everything queued or pending. */
void hvd_eng_fail_everything(hvd_engine *e, const char *why);
/* HVDSHIM_TEST_FAIL_START=N (tests only): step N of the start fails. */
int hvd_eng_injected(int step);
#define HVD_ENG_INJECTED "HVDSHIM_TEST_FAIL_START=%d: the engine start fails at this step (a test)"

/* ---- engine_psets.c: process sets ---- */
int hvd_psets_start(hvd_engine *e);                /* set 0 (every rank); -1 out of memory */
void hvd_psets_free(hvd_engine *e, int mpi_up);    /* every set (communicators freed while MPI is up) */
/* A rebuild: every set's communicator is freed and the sets leave the
 * registry (ids stay taken), kept for user threads that may hold them. */
void hvd_psets_retire(hvd_engine *e, int mpi_up);
const hvd_pset *hvd_pset_get(hvd_engine *e, int id);   /* any thread: the set, or NULL (unknown id) */
int hvd_pset_member(hvd_engine *e, int id, int rank);  /* rank belongs to set id (0 for an unknown id) */
int hvd_pset_active(hvd_engine *e, int id);            /* engine thread: members still submitting (not joined) */
/* engine thread: runs an agreed add or remove, finishes r */
hvd_eng_rc hvd_pset_execute(hvd_engine *e, hvd_req *r) HVD_ENG_MUST_USE;
/* With qmu held, before a submission on set `set`: NULL, or why it is refused
 * (a static message for the calling thread). */
const char *hvd_pset_refuse(hvd_engine *e, const hvd_sig *sig, int device);

/* ---- engine_exec.c ---- */
/* Runs this cycle's agreed list e->exec[0..nexec). */
hvd_eng_rc hvd_eng_execute(hvd_engine *e) HVD_ENG_MUST_USE;

/* ---- engine_members.c: the membership ---- */
/* Takes `comm` as the engine's communicator: this rank's place in it and on
 * its host. */
void hvd_eng_members_take(hvd_engine *e, MPI_Comm comm);
/* Makes everything sized by the communicator's ranks: the control vector,
 * the cache, the coordinator, the process sets, the shared-memory transport
 * and the watchdog (the start's steps 5 to 7).  0, or -1 with the reason in
 * err (nothing left behind but the communicator). */
int hvd_eng_members_open(hvd_engine *e, char *err, size_t errlen);
/* Frees what members_open made, the communicator with it (while MPI is up). */
void hvd_eng_members_close(hvd_engine *e, int mpi_up);
/* Engine thread, at a cycle boundary, on every rank of `comm` in the same
 * cycle: the job goes on over comm's ranks.  What this rank has in flight
 * fails with `why`; the old communicator is freed; process sets other than
 * the global one end (their ids stay taken).  0, or -1 with the reason. */
int hvd_eng_rebuild(hvd_engine *e, MPI_Comm comm, const char *why, char *err, size_t errlen);

/* Engine thread, in the cycle after a stage returned HVD_ENG_RECOVER (a
 * collective failed, HVDSHIM_ELASTIC): the survivors revoke the
 * communicator, shrink it and rebuild the engine over themselves; below
 * HVDSHIM_ELASTIC_MIN_NP, or when no rank died, the job ends with the
 * reason. */
void hvd_eng_recover(hvd_engine *e);
/* Every survivor together, too few left: finalize (bounded), end with code. */
_Noreturn void hvd_eng_end_survivors(hvd_engine *e, int code);
/* PMPI_Finalize, and a deadline (3 s) after which the process ends with
 * code anyway (after ranks died, Open MPI's finalize may never return). */
void hvd_eng_finalize_bounded(hvd_engine *e, int code);
/* A detached thread: in 10 s, warn (unless NULL), then end(code) (unless
 * NULL) and the process with code; for ways out that may never return
 * (MPI_Abort, a finalize after deaths). */
void hvd_eng_end_later(void (*end)(int code), int code, const char *warn);
/* Whether a peer's death can be survived (ULFM): 1 yes; 0 not with this
 * build's MPI; -1 not in this run (mpirun without --with-ft ulfm). */
int hvd_eng_can_recover(void);

/* ---- engine_life.c ---- */
hvd_status_t hvd_eng_start(hvd_engine *e, const hvd_engine_host *host, char *err, size_t errlen);
void hvd_eng_stop(hvd_engine *e);
void hvd_eng_forked_child(hvd_engine *e);
int hvd_eng_mpi_early(void);
int hvd_eng_mpi_early_wait(void);

/* ---- engine_drive.c: who runs the next cycle ---- */
void *hvd_eng_main(void *engine); /* the engine thread */
/* The public waits (hvd_wait, hvd_allgather_wait: out and total_rows
 * given; timeout_s < 0: none) and hvd_test: a waiting thread runs the
 * engine's next cycle itself where it can.  fn names the call in errors. */
hvd_status_t hvd_eng_wait(hvd_engine *e, hvd_handle_t h, double timeout_s, void **out, size_t *total_rows,
                          const char *fn);
hvd_status_t hvd_eng_test(hvd_engine *e, hvd_handle_t h, int *done);
/* With qmu held, after a submission joined the queue (was_empty: it was
 * the first): wakes the engine thread or lets the queue gather.  In a batch
 * (batching) it wakes nothing and says whether the batch must wake the
 * engine once after its last item: hvd_eng_batch_queued (flags: the
 * batch's, HVD_BATCH_CALLER_WAITS). */
int hvd_eng_queued_locked(hvd_engine *e, double t_submit, int was_empty, int batching, int callback);
void hvd_eng_batch_queued(hvd_engine *e, int wake, unsigned flags);

/* ---- engine_negotiate.c: what every rank runs this cycle (e->exec) ---- */
void hvd_eng_admit(hvd_engine *e, hvd_req *r); /* into pending: on its cache bit, or into the outbox */
/* This rank's words of the control vector: its cache bits ready and (those
 * waiting longer than stale_age) invalid; after the round, the bits every
 * rank has ready join the agreed list and the invalid ones are dropped. */
void hvd_eng_offer_cached(hvd_engine *e, uint64_t *ready, uint64_t *invalid, double now);
void hvd_eng_take_cached(hvd_engine *e, const uint64_t *ready, const uint64_t *invalid, double now);
/* Every rank: the outboxes through rank 0's coordinator; the responses join
 * the agreed list. */
hvd_eng_rc hvd_eng_slow_path(hvd_engine *e, double now) HVD_ENG_MUST_USE;

/* ---- engine_cycle.c ---- */
/* One cycle (the caller holds `drive`): 1 to go on, 0 when the engine is
 * done (every rank finished, or this rank left the job). */
int hvd_eng_cycle(hvd_engine *e);

#endif
