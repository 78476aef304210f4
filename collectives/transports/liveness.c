/* Dead-peer watchdog.  See liveness.h.  State: `peers` is written before
 * the thread starts and read-only after; busy/tick are atomics written by
 * the engine thread; `stop` is guarded by mu. */
#define _GNU_SOURCE /* pthread_setname_np */
#include "liveness.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../base/libc.h"
#include "../../base/log.h"
#include "backend_mpi.h"
#include "../../base/clock.h"

typedef struct {
  int32_t pid;
  uint64_t pidns;
  char host[64];
} peer_info;

static peer_info *peers;
static int my_rank, nranks;
static double peer_timeout;
static pthread_t thread;
static int running;
static int stop;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int64_t busy_since_ns;  /* 0 = not waiting on peers */
static int64_t last_tick_ns;   /* last completed step while busy */
static int ticked_once;        /* a collective completed: every peer was up */
static int64_t defer_until_ns; /* a lower live rank of this host ends the job first (judge) */
static int lower_live;         /* how many: this rank waits that many seconds */
static char first_dead[1024];  /* the ranks found gone when that wait began */

void hvd_liveness_busy(int busy) { /* judge() counts from the later of this and the last tick */
  __atomic_store_n(&busy_since_ns, busy ? hvd_mono_ns() : 0, __ATOMIC_RELEASE);
}

void hvd_liveness_tick(void) {
  __atomic_store_n(&last_tick_ns, hvd_mono_ns(), __ATOMIC_RELEASE);
  if (!ticked_once) __atomic_store_n(&ticked_once, 1, __ATOMIC_RELAXED);
}

static uint64_t pid_namespace(void) {
  struct stat st;
  return hvd_libc()->stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

char hvd_process_state(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return 'D';
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = hvd_libc()->fopen(path, "re");
  if (!f) return errno == ENOENT ? 'D' : 'A';
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* "pid (comm) S ..." */
  if (!p || p[1] != ' ') return 'A';
  switch (p[2]) {
  case 'Z': case 'X': return 'D';
  case 'T': case 't': return 'S';
  default: return 'A';
  }
}

static void append(char *out, size_t n, const char *fmt, int r, const peer_info *p) {
  size_t len = strlen(out);
  if (len + 80 >= n) return;
  snprintf(out + len, n - len, fmt, len ? ", " : "", r, (int)p->pid, p->host);
}

static int is_local(int r) {
  return r != my_rank && !strcmp(peers[r].host, peers[my_rank].host) && peers[r].pidns == peers[my_rank].pidns &&
         peers[r].pidns != 0;
}

/* The other hosts' names, once each: "hvdB, hvdC". */
static void remote_hosts(char *out, size_t n) {
  for (int r = 0; r < nranks; r++) {
    if (r == my_rank || is_local(r)) continue;
    int seen = 0;
    for (int q = 0; q < r && !seen; q++) seen = q != my_rank && !is_local(q) && !strcmp(peers[q].host, peers[r].host);
    size_t len = strlen(out);
    if (!seen && len + strlen(peers[r].host) + 4 < n) snprintf(out + len, n - len, "%s%s", len ? ", " : "", peers[r].host);
  }
  if (out[0]) strcat(out, ")");
}

static void judge(void) {
  int64_t since = __atomic_load_n(&busy_since_ns, __ATOMIC_ACQUIRE);
  if (!since) return;
  int64_t now = hvd_mono_ns(), tick = __atomic_load_n(&last_tick_ns, __ATOMIC_ACQUIRE);
  double stuck = (double)(now - (tick > since ? tick : since)) * 1e-9;
  if (stuck < HVD_LIVENESS_LOCAL_S) return;
  char dead[1024] = "", stopped[1024] = "", remote[1024] = "";
  int ndead = 0;
  for (int r = 0; r < nranks; r++) {
    if (r == my_rank) continue;
    if (!is_local(r)) {
      append(remote, sizeof remote, "%s%d (pid %d on %s)", r, &peers[r]);
      continue;
    }
    char st = hvd_process_state(peers[r].pid);
    if (st == 'D') append(dead, sizeof dead, "%s%d (pid %d on %s)", r, &peers[r]), ndead++;
    else if (st == 'S') append(stopped, sizeof stopped, "%s%d (pid %d on %s)", r, &peers[r]);
  }
  /* One survivor of the host ends the job: under Open MPI 5's mpirun
   * --enable-recovery, two ranks calling MPI_Abort after a peer's death
   * leave the launcher hanging once every rank is gone (7 of 25 tries on
   * trixie's 5.0.7 when together; 1 of 25 a second apart; 0 of 20 with one
   * caller while the other exits).  The lowest live rank of the host aborts
   * the job now; the k-th one, if its launcher has not killed it k seconds
   * later, leaves with status 1 without a second MPI_Abort. */
  if (dead[0]) {
    if (!defer_until_ns) {
      /* the ranks gone at the first look are the ones named: a lower rank
       * that ends the job meanwhile is gone too by the time a deferring
       * rank speaks */
      snprintf(first_dead, sizeof first_dead, "%s", dead);
      lower_live = 0;
      int lower_dead = 0;
      for (int r = 0; r < my_rank; r++)
        if (is_local(r)) hvd_process_state(peers[r].pid) != 'D' ? lower_live++ : lower_dead++;
      /* two gone at the first look, a lower one among them: that one may
       * have ended the job a moment ago (its launcher ends this rank
       * within milliseconds), not died a second death: a second more */
      int wait = lower_live + (!lower_live && lower_dead && ndead >= 2);
      defer_until_ns = now + (int64_t)wait * 1000000000;
    }
    if (now < defer_until_ns) return;
#define LOST "lost rank %s: the process is gone (killed or crashed) and this rank has waited %.0f s for it in a collective; "
    if (!lower_live) HVD_FATAL(LOST "ending the job", first_dead, stuck);
    hvd_fatal_started = 1;
    HVD_ERROR(LOST "ending this rank (a lower rank of this host ends the job)", first_dead, stuck);
#undef LOST
    syscall(SYS_exit_group, 1); /* not _exit: the shim interposes it */
  }
  int started = __atomic_load_n(&ticked_once, __ATOMIC_RELAXED);
  if (peer_timeout > 0 && started && stuck >= peer_timeout) {
    char hosts[512] = "";
    remote_hosts(hosts, sizeof hosts);
    HVD_FATAL("no progress for %.0f s: this rank is waiting in a collective that rank(s) never joined%s%s%s%s%s%s; "
              "ending the job (HVDSHIM_PEER_TIMEOUT_SECONDS=%g)", stuck,
              stopped[0] ? "; stopped (SIGSTOP or a debugger): " : "", stopped,
              remote[0] ? "; on other hosts, not checked from here: " : "", remote,
              hosts[0] ? " (unreachable, down or hung? host(s) " : "", hosts[0] ? hosts : "", peer_timeout);
  }
}

static void *watch(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  while (!stop) {
    struct timespec ts = hvd_realtime_in(0.5);
    pthread_cond_timedwait(&cv, &mu, &ts);
    if (stop) break;
    pthread_mutex_unlock(&mu);
    judge();
    pthread_mutex_lock(&mu);
  }
  pthread_mutex_unlock(&mu);
  return NULL;
}

int hvd_liveness_start(MPI_Comm comm, int rank, int size, int watchdog, double peer_timeout_s, char *err, size_t errlen) {
  peer_info me;
  memset(&me, 0, sizeof me);
  me.pid = (int32_t)getpid();
  me.pidns = pid_namespace();
  gethostname(me.host, sizeof me.host - 1);
  free(peers);
  peers = calloc((size_t)size, sizeof *peers);
  HVD_CHECK(peers, "out of memory (peer table)");
  HVD_CHECK_MPI(MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, peers, (int)sizeof me, MPI_BYTE, comm),
                "MPI_Allgather of the peer table");
  my_rank = rank;
  nranks = size;
  peer_timeout = peer_timeout_s;
  busy_since_ns = 0;
  ticked_once = 0;
  defer_until_ns = 0;
  stop = 0;
  if (size < 2 || !watchdog) return 0; /* nobody to wait for, or only the table */
  HVD_CHECK_PTHREAD(pthread_create(&thread, NULL, watch, NULL), "cannot start the watchdog thread");
  pthread_setname_np(thread, "hvd-liveness");
  __atomic_store_n(&running, 1, __ATOMIC_RELAXED);
  return 0;
}

int hvd_liveness_seen_gone(int r, char *who, size_t n) {
  if (!peers || r < 0 || r >= nranks) return snprintf(who, n, "rank %d", r), 0;
  snprintf(who, n, "rank %d (pid %d on %s)", r, (int)peers[r].pid, peers[r].host);
  if (!is_local(r)) return 0;
  /* (a process being torn down may still show for a moment after MPI
   * reported it gone: a second at most) */
  for (int i = 0; i < 20; i++) {
    if (hvd_process_state(peers[r].pid) == 'D') return 1;
    struct timespec t = {0, 50 * 1000 * 1000};
    nanosleep(&t, NULL);
  }
  return 0;
}

void hvd_liveness_stop(void) {
  hvd_liveness_busy(0);
  if (running) {
    pthread_mutex_lock(&mu);
    stop = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(thread, NULL);
    __atomic_store_n(&running, 0, __ATOMIC_RELAXED);
  }
  free(peers);
  peers = NULL;
}

int hvd_liveness_watching(void) { return __atomic_load_n(&running, __ATOMIC_RELAXED); }

void hvd_liveness_forked_child(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  mu = m;
  cv = c;
  running = 0;
  busy_since_ns = 0;
  defer_until_ns = 0;
}
