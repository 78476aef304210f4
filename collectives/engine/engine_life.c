/* The engine's lifecycle: start (MPI, the communicator, the settings
 * check, the state, the membership, the files, the thread), stop (drain,
 * join every rank, free, finalize what it initialized) and the fork child.
 * Calls down into the cycle (the thread's function), the membership and
 * completion; called by the public API (engine_api.c), which holds the
 * process's one engine. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../base/check.h"
#include "../../base/config.h"
#include "../../base/libc.h"
#include "../../base/log.h"
#include "../../base/role.h"
#include "../transports/backend_mpi.h"
#include "engine_internal.h"
#include "handles.h"
#include "../transports/liveness.h"
#include "../observers/metrics.h"
#include "../transports/shm.h"
#include "../../base/strmap.h"
#include "../observers/timeline.h"

/* The host's way to end the process (hvd_engine_host), for the abort
 * path: the log's abort hook takes no engine, and there is one process. */
static void (*end_process)(int code);
static void (*ending_job)(int code);

static void abort_job(int code) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (ending_job) ending_job(code);
  hvd_eng_end_later(end_process, code, NULL); /* MPI_Abort did not end us: leave anyway */
  if (up && !down) {
    hvd_log_let_out();
    MPI_Abort(MPI_COMM_WORLD, code);
  }
}

/* Elastic jobs across hosts: ULFM's heartbeat detector, so that a rank on
 * a host that stops answering (a cut link, a host powered off) counts as
 * dead after HVDSHIM_PEER_TIMEOUT_SECONDS.  Without it Open MPI finds such
 * a rank only when TCP gives up (minutes, or never for a connection with
 * nothing to send), and an elastic job has no watchdog.  Heartbeats go out
 * and are judged only inside MPI calls (Open MPI's detector thread hung
 * every job's MPI_Finalize over a delayed link: tests/launcher/netem.sh on
 * sid, 3 of 3), which every rank makes each control round across hosts.
 * Not on one host (OMPI_COMM_WORLD_LOCAL_SIZE equal to
 * OMPI_COMM_WORLD_SIZE): a death there is seen as the process's end, and
 * the control rounds go through shared memory, so a rank makes no MPI call
 * for longer than the timeout and was found dead while alive at its next
 * one (bench/soak.py cycles on sid, once in 5 restarts: Open MPI's "I have
 * been reported dead by someone else").  Set in this process's environment
 * before MPI_Init, where Open MPI reads it; the user's own
 * OMPI_MCA_mpi_ft_detector settings are kept. */
static void ulfm_detector(void) {
#if defined(OPEN_MPI) && OPEN_MPI
  double t = hvd_cfg_double(HVD_CFG_PEER_TIMEOUT_SECONDS);
  if (!hvd_cfg_int(HVD_CFG_ELASTIC) || t <= 0 || getenv("OMPI_MCA_mpi_ft_detector")) return;
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), *all = getenv("OMPI_COMM_WORLD_SIZE");
  if (local && all && atoi(local) == atoi(all)) return;
  char v[32];
  setenv("OMPI_MCA_mpi_ft_detector", "true", 1);
  snprintf(v, sizeof v, "%g", t);
  setenv("OMPI_MCA_mpi_ft_detector_timeout", v, 0);
  snprintf(v, sizeof v, "%g", t / 4); /* (Open MPI wants the timeout above 3 periods) */
  setenv("OMPI_MCA_mpi_ft_detector_period", v, 0);
#endif
}

#if defined(OPEN_MPI) && OPEN_MPI
/* 1 when an MCA parameter file sets `key`: with `any`, in any way; else
 * other than as a list of components to exclude ("pml = ucx", not Debian's
 * own "pml = ^ucx"), or excluding ob1. */
static int mca_file_sets(const char *path, const char *key, int any) {
  FILE *f = hvd_libc()->fopen(path, "r"); /* (not the overlay's: a parameter file read as it is) */
  if (!f) return 0;
  char line[512];
  int chose = 0;
  size_t n = strlen(key);
  while (!chose && fgets(line, sizeof line, f)) {
    char *p = line + strspn(line, " \t");
    if (strncmp(p, key, n) != 0) continue;
    p += n;
    p += strspn(p, " \t");
    if (*p != '=') continue; /* another parameter whose name starts with key (pml_ob1_...) */
    p += 1 + strspn(p + 1, " \t");
    chose = any || *p != '^' || strstr(p, "ob1") != NULL;
  }
  fclose(f);
  return chose;
}

/* 1 when the environment or a parameter file sets `key` (mca_file_sets). */
static int mca_set(const char *key, int any) {
  char var[64], path[4096];
  snprintf(var, sizeof var, "OMPI_MCA_%s", key);
  if (getenv(var) || getenv("OMPI_MCA_mca_base_param_files")) return 1;
  if (mca_file_sets("/etc/openmpi/openmpi-mca-params.conf", key, any)) return 1;
  const char *home = getenv("HOME"), *prefix = getenv("OPAL_PREFIX");
  if (home && snprintf(path, sizeof path, "%s/.openmpi/mca-params.conf", home) < (int)sizeof path &&
      mca_file_sets(path, key, any))
    return 1;
  return prefix && snprintf(path, sizeof path, "%s/etc/openmpi-mca-params.conf", prefix) < (int)sizeof path &&
         mca_file_sets(path, key, any);
}
#endif

/* A job on one host (OMPI_COMM_WORLD_LOCAL_SIZE equal to
 * OMPI_COMM_WORLD_SIZE) that MPI is started for by hvdshim: Open MPI's ob1
 * PML, unless the user or the site chose a PML or an MTL (mpirun --mca or
 * the environment; the parameter files); and no ofi BTL, unless they set
 * the BTLs in any way.  Open MPI otherwise probes its network components
 * first: cm's MTLs took 200 of the 300 ms of MPI_Init_thread with Open MPI
 * 4.1 on a machine with no such network, and the ofi BTL 1 of the 1.2 s
 * with Open MPI 6 (docs/BENCHMARKS.md, "An ordinary short-step script"):
 * time a script that times its own loop counts, since the engine starts at
 * first use.  On one host MPI moves only what hvdshim's shared memory does
 * not, and ob1 with the shared-memory BTL is Open MPI's own path there.
 * Returns what it set (ONE_HOST_*), taken back after MPI_Init_thread: a
 * child process that starts MPI chooses for itself. */
enum { ONE_HOST_PML = 1, ONE_HOST_BTL = 2 };

static int one_host_pml(void) {
#if defined(OPEN_MPI) && OPEN_MPI
  const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), *all = getenv("OMPI_COMM_WORLD_SIZE");
  if (!local || !all || atoi(local) != atoi(all)) return 0;
  int set = 0;
  if (!mca_set("pml", 0) && !mca_set("mtl", 0)) setenv("OMPI_MCA_pml", "ob1", 1), set |= ONE_HOST_PML;
  if (!mca_set("btl", 1)) setenv("OMPI_MCA_btl", "^ofi", 1), set |= ONE_HOST_BTL;
  return set;
#else
  return 0;
#endif
}

static void one_host_undo(int set) {
  if (set & ONE_HOST_PML) unsetenv("OMPI_MCA_pml");
  if (set & ONE_HOST_BTL) unsetenv("OMPI_MCA_btl");
}

/* The start line's words for it. */
static const char *one_host_words(int set) {
  switch (set) {
  case ONE_HOST_PML: return "initialized by hvdshim (one host: Open MPI's ob1 PML)";
  case ONE_HOST_BTL: return "initialized by hvdshim (one host: Open MPI's ofi BTL off)";
  case ONE_HOST_PML | ONE_HOST_BTL: return "initialized by hvdshim (one host: Open MPI's ob1 PML, its ofi BTL off)";
  default: return "initialized by hvdshim";
  }
}

/* hvdshim's start of MPI (hvd_eng_mpi_early): early, when the script
 * imports torch, before it builds its data and model, so that the engine's
 * start at first use (inside the script's timed loop) finds MPI up and the
 * ranks already met (MPI_Init_thread waits for every rank, and the
 * processes of one job reach it 0.1 to 0.6 s apart here: docs/BENCHMARKS.md,
 * "An ordinary short-step script"); else the engine's start, the same way.
 * In the calling thread: one of its own would read the environment while
 * the script's thread may change it. */
static struct {
  pthread_mutex_t mu;
  int tried;          /* hvd_eng_mpi_early ran */
  int rc, provided;   /* PMPI_Init_thread's */
  int one_host;       /* what one_host_pml set */
} early = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* MPI_Init_thread's fence waits for every rank with no end.  Where a rank
 * ended before it started MPI (its script failed or was killed before
 * importing torch, or ended with status 0) and the launcher keeps the job
 * alive (mpirun --enable-recovery, an elastic job under ULFM, Hydra's
 * -disable-auto-cleanup, any launcher for a status 0), the others would wait
 * there for ever.  This watch, a thread for the length of the call, bounds
 * that wait: from 2 s on it asks the host's probe every 0.5 s whether a rank
 * of this host is gone (hvd_engine_set_start_probe) and ends this rank
 * naming it; in an elastic job (HVDSHIM_ELASTIC, whose ranks may be on
 * other hosts) also after HVDSHIM_START_TIMEOUT_SECONDS: not the peer
 * timeout, which a job sets short to find a dead rank soon, while ranks
 * start seconds apart (torch's import, a loaded host: 6 s was too few for
 * tests/launcher/partition.sh beside another job). */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  double limit; /* 0: no time limit */
} init_watch = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
static void (*init_end)(int code); /* the host's end_process, where known */
static int (*start_probe)(char *who, size_t n);

void hvd_engine_set_start_probe(int (*gone)(char *who, size_t n)) { start_probe = gone; }

#define INIT_PROBE_FROM_S 2.0
#define INIT_PROBE_EVERY_S 0.5

static void init_watch_end(void) {
  hvd_log_let_out();
  if (init_end) init_end(1);
  syscall(SYS_exit_group, 1);
}

static void *init_watch_main(void *arg) {
  (void)arg;
  double limit = init_watch.limit, waited = 0;
  pthread_setname_np(pthread_self(), "hvd-init-watch");
  pthread_mutex_lock(&init_watch.mu);
  while (!init_watch.done) {
    double step = waited < INIT_PROBE_FROM_S ? INIT_PROBE_FROM_S : INIT_PROBE_EVERY_S;
    if (limit > 0 && waited + step > limit) step = limit - waited;
    struct timespec until = hvd_realtime_in(step);
    int rc = 0;
    while (!init_watch.done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&init_watch.cv, &init_watch.mu, &until);
    if (init_watch.done) break;
    waited += step;
    pthread_mutex_unlock(&init_watch.mu);
    char who[160];
    if (start_probe && start_probe(who, sizeof who)) {
      HVD_ERROR("%s ended before every rank had started MPI (its script failed or was killed before importing torch, "
                "or ended with status 0), and MPI_Init waits for it with no end where the launcher keeps the job "
                "(--enable-recovery, -disable-auto-cleanup, an elastic job); ending this rank", who);
      init_watch_end();
    }
    if (limit > 0 && waited >= limit) {
      HVD_ERROR("MPI_Init has not returned after %g s (HVDSHIM_START_TIMEOUT_SECONDS): a rank of this elastic job "
                "died or hangs before every rank had started (an elastic job survives deaths once every rank has "
                "made its first use of the data); ending this rank", limit);
      init_watch_end();
    }
    pthread_mutex_lock(&init_watch.mu);
  }
  pthread_mutex_unlock(&init_watch.mu);
  return NULL;
}

static pthread_t init_watch_start(int *started) {
  pthread_t t = 0;
  double limit = hvd_cfg_double(HVD_CFG_START_TIMEOUT_SECONDS);
  init_watch.limit = hvd_cfg_int(HVD_CFG_ELASTIC) && limit > 0 ? limit : 0;
  init_watch.done = 0;
  *started = (init_watch.limit > 0 || start_probe) && pthread_create(&t, NULL, init_watch_main, NULL) == 0;
  return t;
}

static void init_watch_stop(pthread_t t, int started) {
  if (!started) return;
  pthread_mutex_lock(&init_watch.mu);
  init_watch.done = 1;
  pthread_cond_broadcast(&init_watch.cv);
  pthread_mutex_unlock(&init_watch.mu);
  pthread_join(t, NULL);
}

int hvd_eng_mpi_early(void) {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  pthread_mutex_lock(&early.mu);
  int started = 0;
  if (!up && !down && !early.tried) {
    ulfm_detector();
    early.one_host = one_host_pml();
    int watching;
    pthread_t watch = init_watch_start(&watching);
    early.rc = PMPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &early.provided); /* not through our hook */
    init_watch_stop(watch, watching);
    one_host_undo(early.one_host);
    if (early.rc != MPI_SUCCESS) HVD_DEBUG("MPI_Init_thread, started early, failed (code %d)", early.rc);
    early.tried = 1;
    started = early.rc == MPI_SUCCESS;
  }
  pthread_mutex_unlock(&early.mu);
  return started;
}

int hvd_eng_mpi_early_wait(void) {
  pthread_mutex_lock(&early.mu);
  int r = !early.tried ? 0 : early.rc == MPI_SUCCESS ? 1 : -1;
  pthread_mutex_unlock(&early.mu);
  return r;
}

/* In a forked child: MPI is not to be touched there. */
static void early_forked_child(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  early.mu = m;
  early.tried = 0;
}

/* The settings marked AGREE in settings.def shape the collectives every
 * rank issues (how tensors are grouped and cut into pieces, the control
 * vector's length, the GPU backend): a rank that differs would make the
 * others' MPI calls mismatch, so a difference ends the start on every rank
 * with one line naming it. */
static int settings_agree(hvd_engine *e, char *err, size_t errlen) {
  hvd_cfg_id ids[HVD_CFG_COUNT];
  int n = 0;
  for (int id = 0; id < HVD_CFG_COUNT; id++)
    if (hvd_cfg_table[id].scope == HVD_SCOPE_AGREE) ids[n++] = (hvd_cfg_id)id;
  int64_t mine[HVD_CFG_COUNT], *all = malloc(sizeof *all * (size_t)(n ? n : 1) * (size_t)e->size);
  if (!all) return snprintf(err, errlen, "out of memory starting the engine"), -1;
  for (int k = 0; k < n; k++) mine[k] = hvd_cfg_int(ids[k]);
  int rc = MPI_Allgather(mine, n, MPI_INT64_T, all, n, MPI_INT64_T, e->comm);
  for (int r = 0; r < e->size && rc == MPI_SUCCESS; r++)
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

/* The engine's own arrays and buffers (the membership's: engine_members.c). */
static void free_state(hvd_engine *e) {
  hvd_strmap_free(e->pending);
  e->pending = NULL;
  free(e->outbox);
  free(e->exec);
  free(e->fuse);
  free(e->gpu_items);
  free(e->handles);
  e->outbox = NULL, e->exec = NULL, e->fuse = NULL, e->gpu_items = NULL, e->handles = NULL;
  e->capout = e->capexec = e->capfuse = e->capgpu = e->caphandles = 0;
  hvd_buf_free(&e->sendbuf);
  hvd_buf_free(&e->gathered);
  hvd_buf_free(&e->resp);
  for (size_t i = 0; i < e->nretired; i++) {
    free(e->retired[i]->ranks);
    free(e->retired[i]->member);
    free(e->retired[i]);
  }
  free(e->retired);
  e->retired = NULL, e->nretired = 0;
}

#define INJECT(step) HVD_CHECK_GOTO(!hvd_eng_injected(step), undo, HVD_ENG_INJECTED, step)

/* The start, step by step; a failure at any step undoes the steps before it
 * in reverse order (one cleanup path) and leaves no thread, no MPI object
 * and no open file behind.  MPI itself is finalized only when every rank
 * fails the same way (the settings check): after a failure of this rank
 * alone, finalizing would wait for the others, and this process's exit
 * ends the job through the launcher instead. */
hvd_status_t hvd_eng_start(hvd_engine *e, const hvd_engine_host *host, char *err, size_t errlen) {
  enum { NONE, MPI_UP, COMM, TYPES, STATE, MEMBERS, FILES } done = NONE;
  hvd_status_t st = HVD_ERR_INTERNAL;
  int provided = 0, up = 0, down = 0, everyone_failed = 0;
  MPI_Finalized(&down);
  if (down) {
    snprintf(err, errlen, "MPI was already finalized by the program; hvdshim cannot start");
    return HVD_ERR_INTERNAL;
  }
  int ours = hvd_eng_mpi_early_wait(); /* MPI started early, or a start in another thread waited for */
  MPI_Initialized(&up);
  if (!up && ours == 0) { /* started here, the same way */
    init_end = host ? host->end_process : NULL;
    hvd_eng_mpi_early();
    ours = hvd_eng_mpi_early_wait();
  }
  if (ours < 0) {
    snprintf(err, errlen, "MPI_Init_thread failed (code %d)", early.rc);
    return HVD_ERR_INTERNAL;
  }
  e->host = host ? *host : (hvd_engine_host){0};
  end_process = e->host.end_process;
  ending_job = e->host.ending_job;
  e->mpi_owned = ours == 1;
  if (e->mpi_owned) {
    if (early.provided < MPI_THREAD_MULTIPLE)
      HVD_WARN("MPI provides thread level %d, not MPI_THREAD_MULTIPLE; only the engine thread calls MPI",
               early.provided);
  } else {
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      HVD_WARN("the program initialized MPI without MPI_THREAD_MULTIPLE; the engine thread calls MPI concurrently "
               "with it, which this MPI may not support");
  }
  done = MPI_UP;
  INJECT(1);
  /* A launcher of another MPI than the library's (Open MPI's mpirun where
   * both are installed, running a build against MPICH): every rank is an
   * MPI job of its own, and trained alone, with no error */
  const char *var = NULL;
  int told = hvd_env_launcher_size(&var), world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (told > 1 && world == 1) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, ",\n")] = 0;
    char *v = strstr(lib, " Version:"); /* ("MPICH Version:      4.2.1": "MPICH 4.2.1") */
    if (v) memmove(v + 1, v + 9 + strspn(v + 9, " \t"), strlen(v + 9 + strspn(v + 9, " \t")) + 1);
    hvd_fail(err, errlen, "the launcher started %d ranks (%s=%d) but this rank's MPI (%s) found itself alone: the "
             "launcher is another MPI's (%s); run the job with the launcher of this library's MPI (hvdrun picks it; "
             "on Debian: mpirun.openmpi or mpiexec.mpich)", told, var, told, lib,
             strcmp(var, "PMI_SIZE") ? "Open MPI's mpirun" : "a PMI launcher, MPICH's mpiexec");
    everyone_failed = 1; /* (a world of one: finalizing waits for no one) */
    st = HVD_ERR_INVALID;
    goto undo;
  }

  MPI_Comm comm;
  HVD_CHECK_MPI_GOTO(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup(MPI_COMM_WORLD)", undo);
  hvd_eng_members_take(e, comm);
  done = COMM;
  hvd_log_set_abort_hook(abort_job);
  INJECT(2);

  HVD_CHECK_MPI_GOTO(hvd_mpi_backend_init(), "creating the MPI datatypes and ops for 16-bit floats", undo);
  done = TYPES;
  INJECT(3);

  int agree = settings_agree(e, err, errlen);
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
  const char *leave = hvd_cfg_str(HVD_CFG_TEST_LEAVE);
  int leave_end = 0;
  e->leave_rank = -1;
  if (leave[0] && (sscanf(leave, "%d@%" SCNu64 "%n", &e->leave_rank, &e->leave_cycle, &leave_end) != 2 ||
                   leave[leave_end] || e->leave_rank < 0 || e->leave_rank >= e->size)) {
    hvd_fail(err, errlen, "HVDSHIM_TEST_LEAVE='%s': expected RANK@CYCLE with RANK from 0 to %d", leave, e->size - 1);
    st = HVD_ERR_INVALID;
    goto undo;
  }

  int recover = hvd_cfg_int(HVD_CFG_ELASTIC) ? hvd_eng_can_recover() : 1;
  if (recover <= 0) {
    if (recover == 0)
      hvd_fail(err, errlen, "HVDSHIM_ELASTIC=1 needs an MPI that survives a peer's death (ULFM: Open MPI 5 or later, "
               "as on Debian trixie and sid, launched with mpirun --with-ft ulfm); this hvdshim was built against one "
               "without it");
    else
      hvd_fail(err, errlen, "HVDSHIM_ELASTIC=1, but this job's MPI was started without fault tolerance "
               "(mpi_ft_enable is off), so a rank that dies would end the job: launch with hvdrun --min-np M, or "
               "mpirun --with-ft ulfm");
    everyone_failed = 1; /* every rank finds it */
    st = HVD_ERR_INVALID;
    goto undo;
  }
  if (hvd_cfg_int(HVD_CFG_ELASTIC) && hvd_cfg_int(HVD_CFG_ELASTIC_MIN_NP) > e->size) {
    hvd_fail(err, errlen, "HVDSHIM_ELASTIC_MIN_NP=%lld is more than the job's %d rank(s)",
             (long long)hvd_cfg_int(HVD_CFG_ELASTIC_MIN_NP), e->size);
    everyone_failed = 1;
    st = HVD_ERR_INVALID;
    goto undo;
  }
  int gpu_ops = (int)hvd_cfg_int(HVD_CFG_GPU_OPERATIONS); /* NCCL, MPI, auto (NULL: decided at the first GPU operation) */
  e->dev_bk = gpu_ops == 0 ? &hvd_backend_nccl : gpu_ops == 1 ? &hvd_backend_staged : NULL;
  hvd_gpu_configure(e->rank, e->size, (int)hvd_cfg_int(HVD_CFG_COMPRESSION));
  e->cycle_s = hvd_cfg_double(HVD_CFG_CYCLE_TIME) / 1000.0;
  e->idle_s = hvd_cfg_double(HVD_CFG_TEST_IDLE_TICK);
  e->fusion = (size_t)hvd_cfg_int(HVD_CFG_FUSION_THRESHOLD);
  e->chunk = (size_t)hvd_cfg_int(HVD_CFG_PIPELINE_CHUNK);
  e->cache_cap = (int)hvd_cfg_int(HVD_CFG_CACHE_CAPACITY);
  e->stall_warn = hvd_cfg_double(HVD_CFG_STALL_WARNING_SECONDS);
  e->stall_shutdown = hvd_cfg_double(HVD_CFG_STALL_SHUTDOWN_SECONDS);
  e->deadlock_s = hvd_cfg_double(HVD_CFG_DEADLOCK_SECONDS);
  e->elastic = (int)hvd_cfg_int(HVD_CFG_ELASTIC);
  e->elastic_min_np = (int)hvd_cfg_int(HVD_CFG_ELASTIC_MIN_NP);
  e->shutdown_timeout = hvd_cfg_double(HVD_CFG_SHUTDOWN_TIMEOUT_SECONDS);
  e->stale_age = e->stall_warn / 2 < 1.0 ? e->stall_warn / 2 : 1.0;
  e->wc = (e->cache_cap + 63) / 64;
  e->autotune = (int)hvd_cfg_int(HVD_CFG_AUTOTUNE);
  e->tune_per = (uint64_t)hvd_cfg_int(HVD_CFG_AUTOTUNE_STEPS_PER_SAMPLE);
  int tune_fusion = hvd_cfg_src(HVD_CFG_FUSION_THRESHOLD) == HVD_SRC_DEFAULT,
      tune_cycle = hvd_cfg_src(HVD_CFG_CYCLE_TIME) == HVD_SRC_DEFAULT;
  if (e->autotune && !tune_fusion && !tune_cycle && e->rank == 0)
    HVD_WARN("HVDSHIM_AUTOTUNE=1 has nothing to tune: the fusion threshold and the cycle time are both set "
             "explicitly; they stay as set");
  hvd_tuner_init(&e->tuner, e->fusion, e->cycle_s * 1e3, tune_fusion, tune_cycle);
  e->win_t = 0;
  e->tune_mode = 0;
  __atomic_store_n(&e->pub_fusion, e->fusion, __ATOMIC_RELAXED);
  __atomic_store_n(&e->pub_cycle_ns, (uint64_t)llround(e->cycle_s * 1e9), __ATOMIC_RELAXED);
  __atomic_store_n(&e->pub_tune, e->autotune ? (hvd_tuner_done(&e->tuner) ? 2 : 1) : 0, __ATOMIC_RELAXED);
  e->pending = hvd_strmap_new();
  e->join_handle = e->join_asked = e->tl_handle = HVD_NO_HANDLE;
  e->tl_op = 0;
  e->mark_cycles = (int)hvd_cfg_int(HVD_CFG_TIMELINE_MARK_CYCLES);
  e->npending = 0;
  e->rebuilds = e->acked = 0;
  e->rounds_ok = e->released = 0;
  e->follow = e->rank0_lost = 0;
  e->change_msg[0] = 0;
  hvd_handles_hold(e->elastic);
  e->t0 = hvd_mono_s();
  __atomic_store(&e->last_submit, &e->t0, __ATOMIC_RELAXED);
  memset(&e->stats, 0, sizeof e->stats);
  __atomic_store_n(&e->steps, 0, __ATOMIC_RELAXED);
  done = STATE; /* free_state copes with any part missing */
  HVD_CHECK_GOTO(e->pending, undo, "out of memory starting the engine");
  if (hvd_eng_members_open(e, err, errlen) != 0) goto undo; /* steps 5 to 7 */
  done = MEMBERS;

  const char *tl = hvd_cfg_str(HVD_CFG_TIMELINE);
  char why[512];
  /* a job started again to grow goes on in the files the job before wrote */
  int cont = (int)hvd_cfg_int(HVD_CFG_ELASTIC_RESUME);
  if (e->rank == 0 && tl[0] && hvd_timeline_open(tl, cont, why, sizeof why) != 0) HVD_WARN("%s; timeline disabled", why);
  if (cont && hvd_timeline_enabled()) hvd_timeline_instant("RESTART", 0);
  const char *mp = hvd_cfg_str(HVD_CFG_METRICS);
  hvd_metrics_reset();
  if (e->rank == 0 && mp[0] && hvd_metrics_open(mp, cont, why, sizeof why) != 0) HVD_WARN("%s; metrics disabled", why);
  done = FILES;
  INJECT(8);

  pthread_mutex_lock(&e->qmu);
  e->accepting = 1;
  e->stop_requested = 0;
  e->closed_msg[0] = 0;
  e->finished = 0;
  pthread_mutex_unlock(&e->qmu);
  int thread_rc = hvd_eng_injected(9) ? EAGAIN : pthread_create(&e->thread, NULL, hvd_eng_main, e);
  if (thread_rc != 0) {
    pthread_mutex_lock(&e->qmu);
    e->accepting = 0;
    pthread_mutex_unlock(&e->qmu);
    HVD_CHECK_GOTO(!hvd_eng_injected(9), undo, HVD_ENG_INJECTED, 9);
    HVD_CHECK_PTHREAD_GOTO(thread_rc, "cannot start the engine thread", undo);
  }
  pthread_setname_np(e->thread, "hvd-engine"); /* named before hvd_init returns (top -H, tests) */
  e->started = 1;
  HVD_INFO("engine started: %d rank(s), MPI %s, fusion %zu bytes, cycle %g ms, cache %d, shared memory %s", e->size,
           e->mpi_owned ? one_host_words(early.one_host) : "adopted from the program",
           e->fusion, e->cycle_s * 1e3,
           e->cache_cap, hvd_shm_describe());
  return HVD_OK;

undo:
  if (done >= FILES) {
    hvd_timeline_close();
    hvd_metrics_close();
  }
  if (done >= MEMBERS) hvd_eng_members_close(e, 1); /* the communicator with it */
  if (done >= STATE) free_state(e);
  if (done >= TYPES) hvd_mpi_backend_fini();
  if (done >= COMM) hvd_log_set_abort_hook(NULL);
  if (done >= COMM && done < MEMBERS) MPI_Comm_free(&e->comm);
  if (everyone_failed && e->mpi_owned) PMPI_Finalize();
  e->mpi_owned = 0;
  return st;
}

void hvd_eng_stop(hvd_engine *e) {
  pthread_mutex_lock(&e->life_mu);
  if (!e->started) {
    pthread_mutex_unlock(&e->life_mu);
    return;
  }
  e->started = 0;
  pthread_mutex_lock(&e->qmu);
  if (!e->stop_requested) {
    e->stop_requested = 1;
    e->stop_time = hvd_mono_s();
  }
  e->accepting = 0; /* in-flight work drains; new work is refused */
  snprintf(e->closed_msg, sizeof e->closed_msg, "this rank has finished (hvd_shutdown)");
  pthread_cond_signal(&e->qcv);
  pthread_mutex_unlock(&e->qmu);
  pthread_join(e->thread, NULL); /* returns when every rank has joined */
  pthread_mutex_lock(&e->qmu);
  if (e->follow && e->rebuilds > e->acked && e->rank == 0) /* (the program that follows said nothing: it ran no */
    HVD_WARN("%s, after this script's last collective", e->change_msg); /* collective after it, its end) */
  e->acked = e->rebuilds;
  pthread_mutex_unlock(&e->qmu);
  hvd_timeline_close();
  hvd_metrics_close();
  int down = 0;
  MPI_Finalized(&down);
  hvd_eng_members_close(e, !down);
  free_state(e);
  hvd_mpi_backend_fini();
  if (e->mpi_owned && !down && e->elastic && e->rebuilds) hvd_eng_finalize_bounded(e, 0);
  else if (e->mpi_owned && !down) PMPI_Finalize(); /* not MPI_Finalize: that is our hook */
  e->mpi_owned = 0;
  pthread_mutex_unlock(&e->life_mu);
}

void hvd_eng_forked_child(hvd_engine *e) {
  early_forked_child();
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  e->qmu = m;
  e->qcv = c;
  e->life_mu = m;
  hvd_liveness_forked_child();
  e->drive = m;
  e->accepting = 0;
  e->started = 0;
  snprintf(e->closed_msg, sizeof e->closed_msg, "this is a forked child of a rank; hvdshim is inert here");
  hvd_handles_reset();
}
