/* The preload entry: constructor, role detection, activation and shutdown.
 *
 * Order of things in a rank process:
 *   constructor  -> decide the role from the environment (no MPI, no
 *                   threads); armed ranks parse and validate every setting
 *                   (a bad value ends the process here, with one line) and
 *                   register the fork handler.
 *   hvd_mpi_early() -> a PyTorch rank, when the script imports torch
 *                   (HVDSHIM_EARLY_MPI): MPI initialized, for the engine;
 *                   an exit before the engine started finalizes it
 *                   (status 0) or ends the job (end_own_mpi).
 *   hvd_init()   -> first real use: MPI taken from the early start,
 *                   initialized or adopted, the engine thread started,
 *                   HVDSHIM_ACTIVE_PID exported so programs this rank
 *                   executes stay dormant, exit handler added.
 *   exit         -> the on_exit handler (or the MPI_Finalize hook, whichever
 *                   comes first): status 0 joins (the rank takes part without
 *                   data until every rank has finished), then stops the
 *                   engine and finalizes what hvd_init initialized; any other
 *                   status ends the whole job.
 * The role (base/role.c) is written by the constructor, hvd_init (under
 * init_mu) and the fork handler; readers tolerate a stale value. */
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/auxv.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../base/config.h"
#include "../base/libc.h"
#include "../base/log.h"
#include "../base/remover.h"
#include "../base/role.h"
#include "../collectives/engine/engine.h"
#include "../collectives/engine/handles.h"
#include "../collectives/hvdshim.h"
#include "../collectives/transports/liveness.h"
#include "../hooks/cuda_hooks.h"
#include "../hooks/exit_hooks.h"
#include "../hooks/mpi_hooks.h"
#include "../hooks/native.h"
#include "../hooks/python.h"
#include "adapter_api.h"
#include "../hooks/overlay.h"
#include "reaper.h"
#include "../base/clock.h"

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int init_tried;
static hvd_status_t init_result = HVD_ERR_NOT_INIT;
static char init_error[640];
static int config_ok;
static char config_error[512];

void hvd_launch_info(int *rank, int *size, int *local_rank, int *local_size) {
  int r, s = -1, lr, ls = -1;
  if (hvd_initialized()) {
    r = hvd_rank(), s = hvd_size(), lr = hvd_local_rank(), ls = hvd_local_size();
  } else {
    r = hvd_env_rank(&lr);
    if (r >= 0) {
      s = hvd_env_size();
      ls = hvd_env_local_size();
    }
    if (r < 0) r = 0, s = 1, lr = 0, ls = 1; /* not launched: one process */
    if (s < 1) s = r + 1;
    if (lr < 0) lr = 0;
    if (ls < 1) ls = lr + 1;
  }
  if (rank) *rank = r;
  if (size) *size = s;
  if (local_rank) *local_rank = lr;
  if (local_size) *local_size = ls;
}

const char *hvd_role_now(void) { return hvd_role_name(hvd_shim_role()); }

void hvd_log_message(int level, const char *where, const char *msg) {
  if (level < HVD_LOG_ERROR) level = HVD_LOG_ERROR;
  if (level > HVD_LOG_DEBUG) level = HVD_LOG_DEBUG;
  if (level <= hvd_log_threshold) hvd_log_write(level, where ? where : "?", 0, "%s", msg ? msg : "");
}

void hvd_abort_job(const char *msg) { hvd_fatal_at("adapter", 0, "%s", msg ? msg : "aborted"); }

const char *hvd_config_value(const char *name) {
  int id = hvd_cfg_find(name);
  return id < 0 ? NULL : hvd_cfg_canonical((hvd_cfg_id)id);
}

static void warn_unknown(const char *name, const char *suggestion) {
  if (suggestion) HVD_WARN("unknown setting %s (did you mean %s?)", name, suggestion);
  else HVD_WARN("unknown setting %s (run hvdshim-info for the list)", name);
}

/* A forked child of a rank (DataLoader worker, subprocess before exec):
 * the engine thread does not exist there and MPI must not be touched. */
static void fork_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  init_mu = fresh;
  hvd_role_set(HVD_ROLE_FORKED);
  init_tried = 1;
  init_result = HVD_ERR_NOT_INIT;
  snprintf(init_error, sizeof init_error, "hvd_init: hvdshim is inert in a forked child of a rank");
  hvd_engine_forked_child();
}

static void load_config(void) {
  config_ok = hvd_config_load(config_error, sizeof config_error) == 0;
  hvd_log_threshold = (int)hvd_cfg_int(HVD_CFG_LOG_LEVEL);
}

/* With HVDSHIM_LOG_LEVEL=debug, every process says what it decided (one
 * getenv in dormant processes; the settings are not parsed there). */
static void say_role(const char *why) {
  const char *lvl = getenv("HVDSHIM_LOG_LEVEL");
  if (!lvl || strcmp(lvl, "debug") != 0) return;
  int saved = hvd_log_threshold;
  hvd_log_threshold = HVD_LOG_DEBUG;
  extern char *program_invocation_short_name;
  HVD_DEBUG("role %s in %s (pid %ld): %s", hvd_role_name(hvd_shim_role()), program_invocation_short_name,
            (long)getpid(), why);
  hvd_log_threshold = saved;
}

static int env_true(const char *name) { /* a BOOL setting read before the settings are parsed */
  const char *v = getenv(name);
  return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"));
}

static void exiting(int status, int by_runtime); /* _exit's handler (below) */
static void end_own_mpi(int status);
static void wait_early(void) { hvd_engine_mpi_early_wait(); }

/* The armed process's last exit handler: its reaper learns a clean exit. */
static void note_exit(int status, void *arg) {
  (void)arg;
  hvd_reaper_note_exit(status);
}

/* A rank that must not start (a bad setting, a Python that ignores the
 * bootstrap) says why and ends, before anything is armed.  One line for
 * the job: rank 0 says it and ends at once, which ends the job (the
 * launcher stops the other ranks); a rank > 0 says it only if it is still
 * running 2 s later (the fault is its own). */
__attribute__((noreturn, format(printf, 2, 3))) static void refuse_start(int rank, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (rank > 0) sleep(2);
  hvd_log_threshold = HVD_LOG_ERROR;
  HVD_ERROR("%s", msg);
  _exit(1);
}

__attribute__((constructor)) static void hvd_shim_ctor(void) {
  hvd_mpi_hooks_on_finalize(hvd_shutdown); /* the program's MPI_Finalize stops the engine first */
  hvd_mpi_hooks_on_init(wait_early);       /* and its MPI_Init finds MPI started early up */
  hvd_exit_hooks_on_exit(exiting);         /* and its _exit joins or ends the job as exit does */
  if (getauxval(AT_SECURE)) { /* setuid/setgid: never act on the environment */
    hvd_role_set(HVD_ROLE_DISABLED);
    return;
  }
  if (env_true("HVDSHIM_DISABLE")) {
    hvd_role_set(HVD_ROLE_DISABLED);
    say_role("HVDSHIM_DISABLE is set");
    return;
  }
  int local_rank;
  int rank = hvd_env_rank(&local_rank);
  if (rank < 0) { /* mpirun, its daemons, plain processes */
    say_role("no rank in the environment");
    /* one plain Python process observed (hvdshim-ab's baseline): the adapter
     * only counts samples and steps into HVDSHIM_METRICS */
    if (env_true("HVDSHIM_OBSERVE")) hvd_python_arm();
    return;
  }
  const char *active = getenv("HVDSHIM_ACTIVE_PID");
  if (active && *active) {
    hvd_reaper_spare_cleaner();
    hvd_reaper_bear_hydra_notice(NULL);
    hvd_log_set_rank(rank);
    say_role("started by the active rank process (HVDSHIM_ACTIVE_PID)");
    return;
  }
  hvd_log_set_rank(rank);
  load_config();
  if (!config_ok) refuse_start(rank, "%s", config_error);
  /* A Python that ignores the bootstrap: every rank would train alone,
   * the whole script over, as many times as there are ranks. */
  char flag = hvd_python_ignores_bootstrap();
  if (flag)
    refuse_start(rank,
                 "this Python was started with -%c, which makes it ignore %s, through which hvdshim loads its PyTorch "
                 "adapter: every rank would run the script alone; start it without -E, -I and -S (or set "
                 "HVDSHIM_DISABLE=1 to run it undistributed)",
                 flag, flag == 'S' ? "the site module" : "PYTHONPATH");
  if (rank == 0) hvd_config_check_unknown(warn_unknown); /* (once for the job: every rank has the same names) */
  pthread_atfork(NULL, NULL, fork_child);
  hvd_role_set(HVD_ROLE_ARMED);
  say_role("a rank process");
  /* before any thread: the reaper is a fork of this process as it is now;
   * its exit note is the last exit handler to run */
  hvd_reaper_arm();
  hvd_reaper_bear_hydra_notice(hvd_liveness_watching);
  hvd_engine_set_start_probe(hvd_reaper_local_rank_gone);
  on_exit(note_exit, NULL);
  hvd_cuda_arm(local_rank);
  int python = hvd_python_arm();
  hvd_native_arm(hvd_init);
  /* The training program's writes on ranks > 0 go to a private overlay;
   * wrappers (a shell around the program) write real files. */
  const char *hooks = hvd_cfg_str(HVD_CFG_HOOKS);
  if (python || (hooks && *hooks)) hvd_overlay_arm(rank, python && hvd_cfg_int(HVD_CFG_ELASTIC_RESUME));
}

/* Exit of the rank process (on_exit, so the status is known).  Status 0
 * (the script ended normally, maybe before the others' loops): join and
 * wait for every rank.  Any other status (an uncaught Python exception,
 * sys.exit(n), exit(n)): end the whole job now, so no rank waits for this
 * one.  Forked children and exec'd programs inherit nothing to do. */
static pid_t active_pid;

static void at_exit(int status, void *arg) {
  (void)arg;
  if (hvd_shim_role() != HVD_ROLE_ACTIVE || getpid() != active_pid) return;
  if (status != 0) {
    hvd_failing_grace(); /* (an error alike on every rank: rank 0's line alone, as end_own_mpi) */
    /* (the status the launcher sees is the low byte: exit(-1) is 255; the job ends with it) */
    hvd_fatal_status_at(status & 0xff, "lifecycle", 0, "this rank is exiting with status %d (an uncaught exception, "
                        "sys.exit(%d) or exit(%d)); ending the job so no rank waits for it", status & 0xff, status,
                        status);
  }
  hvd_shutdown();
}

/* _exit and _Exit (hooks/exit.c) skip on_exit handlers (Python's os._exit(0)
 * ends many scripts, and every DataLoader worker).  In the active rank
 * process, status 0 joins as exit(0) does, so the job ends 0 when every rank
 * ended 0; any other status ends the job.  Everywhere else, and once the
 * fatal path has begun (MPI_Abort may end through _exit), the process ends
 * with only this rank's private files removed and its reaper told. */
static volatile int exit_started;

static void exiting(int status, int by_runtime) {
  if (!exit_started && !hvd_fatal_started && hvd_shim_role() == HVD_ROLE_ACTIVE && getpid() == active_pid) {
    exit_started = 1;
    if (status != 0 && by_runtime) {
      hvd_fatal_at("lifecycle", 0, "the MPI runtime ended this rank (status %d): another rank's failure is ending "
                   "the job (its own line says why)", status);
    } else if (status != 0) {
      hvd_failing_grace();
      hvd_fatal_status_at(status & 0xff, "lifecycle", 0, "this rank called _exit(%d) (os._exit(%d) in Python); ending "
                          "the job so no rank waits for it", status, status);
    }
    hvd_shutdown();
  }
  if (!hvd_fatal_started) hvd_overlay_cleanup();
  end_own_mpi(status);
  hvd_reaper_note_exit(status);
}

/* MPI that hvdshim initialized (early, when the script imported torch, or
 * in a start of the engine that failed), still up with no engine when the
 * process ends: the script stood aside (it distributes itself, or trains
 * where hvdshim cannot reach), trained nothing, or failed.  Status 0
 * finalizes it (MPI_Finalize waits for every rank's process to finalize
 * too), but after a failed start, where the program went on without
 * hvdshim: the other ranks may not have failed, and finalizing would wait
 * for them, so it ends nothing.  Any other status ends the job through
 * MPI_Abort, so every launcher reports the failure and no rank waits for
 * this one (MPICH's Hydra reports 0 for about half of the jobs whose ranks
 * exit 1 with MPI still initialized).  The engine, once started, owns it
 * (at_exit, hvd_shutdown). */
static pid_t own_mpi_pid;

/* A failure alike on every rank is said once, by rank 0, which ends the
 * job; a rank > 0 says its own a second later, where it still runs.  A
 * second is not always enough: rank 0's Python may take longer to end
 * (its atexit handlers, torch's teardown on a loaded host) and its
 * launcher to end the others (MPICH's Hydra).  So a failing rank 0 says
 * that it is failing to the ranks of its host: a file in /dev/shm named
 * after the job's launcher process there, removed once rank 0's process
 * has ended, however it ends (hvd_remove_at_end).  A failing rank > 0 that
 * finds it waits while it is there (FAILING_WAIT_MS at most) and two
 * seconds after; one that does not (rank 0 runs on, or on another host) waits its
 * second. */
#define FAILING_WAIT_MS 20000
#define AFTER_RANK0_MS 2000 /* rank 0 gone: its launcher ends this rank (Open MPI 6's prterun took over 1 s) */

static int failing_path(char *path, size_t n) {
  unsigned long long start = 0;
  pid_t launcher = hvd_reaper_host_launcher(&start);
  if (launcher <= 0) return -1;
  snprintf(path, n, "/dev/shm/hvdshim-failing-%ld-%llu-%lu", (long)launcher, start, (unsigned long)getuid());
  return 0;
}

void hvd_failing_grace(void) {
  static int done;
  int rank = hvd_env_rank(NULL);
  if (rank < 0 || __atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL)) return;
  char path[128];
  int named = failing_path(path, sizeof path) == 0;
  if (rank == 0) { /* (its removal first: no watcher, not said) */
    int fd = named && hvd_remove_at_end(path) == 0
                 ? hvd_libc()->open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)
                 : -1;
    if (fd >= 0) close(fd);
    return;
  }
  long waited = 0;
  for (; waited < 1000; waited += 20) {
    if (named && hvd_libc()->access(path, F_OK) == 0) break;
    hvd_nap_ms(20);
  }
  if (waited >= 1000) return;
  while (hvd_libc()->access(path, F_OK) == 0 && waited < FAILING_WAIT_MS) hvd_nap_ms(50), waited += 50;
  hvd_nap_ms(AFTER_RANK0_MS);
}

/* One watcher a process of each kind for what it hands over (its write
 * end stays open until this process and its forks end; a forked child
 * starts its own): the paths to remove, the files to put back. */
typedef struct {
  int fd;
  pid_t pid;
  int (*spawn)(void);
} watcher;
static watcher removes = {-1, 0, hvd_remover_spawn_list}, restores = {-1, 0, hvd_remover_spawn_restore};
static pthread_mutex_t at_end_mu = PTHREAD_MUTEX_INITIALIZER;

/* Hand a record of lines (each a name without a newline) to w in one write. */
static int hand_over(watcher *w, const char *const *names, int n) {
  char rec[PIPE_BUF];
  size_t len = 0;
  for (int i = 0; i < n; i++) {
    size_t k = names[i] ? strlen(names[i]) : 0;
    if (!k || len + k + 1 > sizeof rec || memchr(names[i], '\n', k)) return -1;
    memcpy(rec + len, names[i], k);
    rec[len + k] = '\n';
    len += k + 1;
  }
  pthread_mutex_lock(&at_end_mu);
  if (w->fd < 0 || w->pid != getpid()) {
    w->fd = w->spawn();
    w->pid = getpid();
  }
  int ok = w->fd >= 0 && write(w->fd, rec, len) == (ssize_t)len;
  pthread_mutex_unlock(&at_end_mu);
  return ok ? 0 : -1;
}

int hvd_remove_at_end(const char *path) {
  const char *names[] = {path};
  return hand_over(&removes, names, 1);
}

int hvd_restore_at_end(const char *backup, const char *path) {
  const char *names[] = {backup, path};
  return hand_over(&restores, names, 2);
}

/* The job ends with `code` from here: the rank's reaper is told, and the
 * code goes to hvdrun's status file, so hvdrun ends with the first such
 * end on its host where its launcher
 * reports 0 (Open MPI 6's prterun answered an MPI_Abort after a ULFM death
 * with 0 in 3 of 4 runs).  Async-signal-safe but for the formatting. */
static void job_ending(int code) {
  hvd_reaper_status(code, hvd_env_rank(NULL), 0, hvd_mono_ms());
  hvd_reaper_note_ending();
}

static void end_own_mpi(int status) {
  static int ending; /* (MPI_Abort ends through _exit, which comes back here) */
  if (!own_mpi_pid || getpid() != own_mpi_pid || hvd_shim_role() == HVD_ROLE_ACTIVE || ending) return;
  if (hvd_engine_mpi_early_wait() != 1) return;
  int down = 0, failed = init_tried && init_result != HVD_OK;
  MPI_Finalized(&down);
  if (down || (status == 0 && failed)) return;
  if (status == 0) {
    PMPI_Finalize();
    return;
  }
  ending = 1;
  /* a failure alike on every rank (the script's error before any training):
   * rank 0 ends the job, and a rank > 0 only if it still runs a second later,
   * so the job says it once and no two ranks abort at once (Open MPI 4.1
   * garbles the help messages of two) */
  hvd_failing_grace();
  hvd_log_write(HVD_LOG_ERROR, "lifecycle", 0, "this rank is exiting with status %d%s; ending the job so no rank "
                "waits for it", status & 0xff, failed ? " after hvd_init failed" : ""); /* (worded as at_exit's) */
  hvd_log_let_out();
  job_ending(status & 0xff ? status & 0xff : 1);
  PMPI_Abort(MPI_COMM_WORLD, status);
}

static void own_mpi_exit(int status, void *arg) {
  (void)arg;
  end_own_mpi(status);
}

/* This process initialized MPI for hvdshim: its exit sees to it. */
static void own_mpi(void) {
  if (own_mpi_pid) return;
  own_mpi_pid = getpid();
  on_exit(own_mpi_exit, NULL);
}

int hvd_mpi_early(void) {
  pthread_mutex_lock(&init_mu);
  int ok = !init_tried && hvd_shim_role() == HVD_ROLE_ARMED && config_ok && hvd_cfg_int(HVD_CFG_EARLY_MPI) &&
           !hvd_cfg_int(HVD_CFG_ELASTIC) && !hvd_cfg_int(HVD_CFG_ELASTIC_RESUME) && hvd_env_size() > 1 &&
           hvd_engine_mpi_early();
  if (ok) own_mpi(), hvd_reaper_note_mpi_files();
  pthread_mutex_unlock(&init_mu);
  if (ok) HVD_DEBUG("MPI initialized early (HVDSHIM_EARLY_MPI), for the engine's start at first use");
  return ok;
}

/* The engine's way to end this process (hvd_engine_host): when MPI_Abort
 * did not end the job in time, when MPI_Finalize hangs after ranks died,
 * and when too few survivors are left.  The engine has said why and ended
 * its part, so no second line and no shutdown: this rank's private files
 * removed (none once the fatal path has begun), then the system call. */
static void end_process(int code) {
  exit_started = 1;
  if (!hvd_fatal_started) hvd_overlay_cleanup();
  hvd_reaper_note_exit(code);
  syscall(SYS_exit_group, code);
}

hvd_status_t hvd_init(void) {
  pthread_mutex_lock(&init_mu);
  if (init_tried) {
    hvd_status_t st = init_result;
    pthread_mutex_unlock(&init_mu);
    if (st != HVD_OK) hvd_set_last_error("%s", init_error);
    return st;
  }
  init_tried = 1;
  if (hvd_shim_role() == HVD_ROLE_DISABLED || hvd_shim_role() == HVD_ROLE_FORKED || hvd_shim_role() == HVD_ROLE_FINALIZED) {
    snprintf(init_error, sizeof init_error, "hvd_init: hvdshim is inert in this process (%s)", hvd_role_name(hvd_shim_role()));
    init_result = HVD_ERR_NOT_INIT;
    goto out;
  }
  if (hvd_shim_role() == HVD_ROLE_DORMANT) { /* explicit use by a program that is not a launched rank */
    load_config();
    if (!config_ok) {
      snprintf(init_error, sizeof init_error, "hvd_init: %s", config_error);
      init_result = HVD_ERR_INVALID;
      goto out;
    }
    pthread_atfork(NULL, NULL, fork_child);
  }
  hvd_engine_host host = {.end_process = end_process, .ending_job = job_ending};
  init_result = hvd_engine_start(&host, init_error, sizeof init_error);
  if (init_result != HVD_OK) {
    if (hvd_engine_mpi_early_wait() == 1) own_mpi(); /* the start left up the MPI it initialized */
    hvd_reaper_note_mpi_files(); /* (what MPI made before the start failed) */
    goto out;
  }
  hvd_role_set(HVD_ROLE_ACTIVE);
  hvd_reaper_note_mpi_files();
  char pid[32];
  snprintf(pid, sizeof pid, "%ld", (long)getpid());
  setenv("HVDSHIM_ACTIVE_PID", pid, 1);
  active_pid = getpid();
  on_exit(at_exit, NULL);
  if (hvd_rank() == 0) HVD_INFO("hvdshim %s active on %d rank(s)", HVDSHIM_VERSION, hvd_size());
out:
  pthread_mutex_unlock(&init_mu);
  if (init_result != HVD_OK) hvd_set_last_error("%s", init_error);
  return init_result;
}

void hvd_shutdown(void) {
  pthread_mutex_lock(&init_mu);
  int active = hvd_shim_role() == HVD_ROLE_ACTIVE;
  if (active) hvd_role_set(HVD_ROLE_FINALIZED); /* first caller stops; re-entry is a no-op */
  pthread_mutex_unlock(&init_mu);
  if (active) hvd_engine_stop();
}

int hvd_initialized(void) { return hvd_shim_role() == HVD_ROLE_ACTIVE; }

