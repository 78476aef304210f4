/* The engine's internal state and helpers, shared by its files and by
 * nothing else (see engine.c for the design):
 *
 *   engine_api.c    entry points: validate and enqueue (user threads)
 *   engine.c        the thread and its cycle: admission, the control round,
 *                   the slow path, autotune glue, start and stop
 *   engine_exec.c   execution: grouping one cycle's agreed list and
 *                   dispatching it to the backends
 *   coordinator.c   rank 0's negotiation table and stall inspector (its
 *                   own state, no MPI)
 *   engine_psets.c  process sets: the registry, adding and removing sets
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

#include "autotune.h"
#include "cache.h"
#include "coordinator.h"
#include "engine.h"
#include "fusion.h"
#include "gpu.h"
#include "wire.h"

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

typedef struct {
  /* set by start, read-only while the thread runs */
  MPI_Comm comm;
  int rank, size, local_rank, local_size;
  int mpi_owned; /* we called MPI_Init_thread */
  int started;
  double t0;
  int cache_cap, wc, wr, nwords;
  double cycle_s, stale_age, shutdown_timeout;
  size_t fusion, chunk;
  pthread_t thread;

  /* guarded by qmu */
  pthread_mutex_t qmu;
  pthread_cond_t qcv;
  hvd_req *qhead, *qtail;
  size_t qbytes;
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
  uint64_t steps;    /* atomic: steps marked on this rank since the start (hvd_step_mark; autotune's clock) */
  /* published for hvd_engine_tuning (atomics: read by user threads) */
  size_t pub_fusion;
  uint64_t pub_cycle_ns;
  int pub_tune; /* 0 off, 1 tuning, 2 fixed */
} hvd_engine_state;

extern hvd_engine_state hvd_eng;
/* The state, in every engine file (a pointer constant, not a macro). */
static hvd_engine_state *const E = &hvd_eng;

double hvd_eng_now(void);
double hvd_eng_us(double t); /* microseconds since the engine started */
/* MPI result: 0, or the job ends naming `what`. */
int hvd_eng_mpi_check(int rc, const char *what);
/* Grows an engine-thread array to at least n elements (fatal when out of memory). */
void hvd_eng_grow(void *arr, size_t *cap, size_t n, size_t elem, const char *what);
void hvd_eng_req_free(hvd_req *r);
/* Completes r's handle (status, message, gathered rows) and frees r. */
void hvd_eng_finish(hvd_req *r, hvd_status_t st, const char *msg, void *gathered, size_t rows);
/* A GPU operation done on the engine stream: the handle carries the event. */
void hvd_eng_finish_gpu(hvd_req *r, hvd_gpu_event *done);
/* Runs this cycle's agreed list E->exec[0..nexec) (engine_exec.c). */
void hvd_eng_execute(void);

/* Process sets (engine_psets.c). */
int hvd_psets_start(void);              /* set 0 (every rank); -1 out of memory */
void hvd_psets_free(int mpi_up);        /* every set (communicators freed while MPI is up) */
const hvd_pset *hvd_pset_get(int id);   /* any thread: the set, or NULL (unknown id) */
int hvd_pset_member(int id, int rank);  /* rank belongs to set id (0 for an unknown id) */
int hvd_pset_active(int id);            /* engine thread: members still submitting (not joined) */
void hvd_pset_execute(hvd_req *r);      /* engine thread: runs an agreed add or remove, finishes r */
/* With qmu held, before a submission on set `set`: NULL, or why it is refused
 * (a static message for the calling thread). */
const char *hvd_pset_refuse(const hvd_sig *sig, int device);

#endif
