/* Shared-memory allreduce.  See shm.h for the protocol. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../base/log.h"
#include "dtype.h"
#include "liveness.h"
#include "../../base/clock.h"

#define HDR 192 /* three flag words, a cache line each */
enum { ARRIVE = 0, REDUCED = 16, CONTROL = 32 }; /* offsets of the flags, in uint32_t (64 bytes apart) */

static struct {
  int active;
  MPI_Comm node, cross; /* cross: MPI_COMM_NULL on one host */
  int me, n, hosts;
  size_t half, region, maplen;
  size_t cwords, cbytes; /* control round: words of the vector; bytes of one copy (64-byte units) */
  uint32_t cseq;         /* control rounds run (counts wrap: compared as differences) */
  char *map;
  char *tmp; /* the small path's private sum */
  uint32_t seq;  /* pieces run */
  /* the last piece: its buffer, and whether the next may use it again
   * (a large piece of the same length: see next_buffer) */
  int last_b;
  size_t last_len, last_es; /* bytes, element size */
  int last_large;
  /* How a wait spins before it sleeps (wait_all):
   * always: this process may use two CPUs per rank of the host (its
   *   training thread computes while its engine thread waits: backward
   *   overlaps the reduction);
   * idle_cores: the host's ranks together may use a CPU each (not
   *   oversubscribed), so a rank whose user thread waits for the engine
   *   (blocked in hvd_wait, or running the cycle itself) has a core with
   *   nothing else to run:
   *   spinning on it costs no one anything, while sleeping costs a wake-up
   *   of the core, which can take longer than the whole reduction of a
   *   small model (docs/BENCHMARKS.md, "What a barrier costs").  Neither
   *   (oversubscribed, or bound to fewer cores than ranks): a spinning thread would take a
   *   core from a peer, or the engine thread from its own training thread. */
  int always, idle_cores;
  int (*waiters)(void); /* user threads waiting for the engine now (given at start) */
  char why[320];
  /* HVDSHIM_ELASTIC: the waits check the host's peers are alive (their
   * pids), so a death fails the operation instead of hanging it */
  int watch, dead; /* dead: the local rank found dead (-1: none) */
  int *pids;
} S = {0, MPI_COMM_NULL, MPI_COMM_NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, 1, 0, 0, 0, 0, 0, NULL, "off", 0, -1, NULL};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static uint32_t *flag(int k, int which) { return (uint32_t *)(S.map + (size_t)k * S.region) + which; }
static char *buffer(int k, int b) { return S.map + (size_t)k * S.region + HDR + 2 * S.cbytes + (size_t)b * S.half; }
static uint64_t *control_copy(int k, int b) {
  return (uint64_t *)(S.map + (size_t)k * S.region + HDR + (size_t)b * S.cbytes);
}

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *timeout) {
  return syscall(SYS_futex, addr, op, val, timeout, NULL, 0);
}

static void post(int which, uint32_t s) { __atomic_store_n(flag(S.me, which), s, __ATOMIC_RELEASE); }

/* Elastic: -1 (S.dead set) when a peer of this host has died. */
static int peers_gone(void) {
  for (int k = 0; k < S.n; k++)
    if (k != S.me && hvd_process_state(S.pids[k]) == 'D') return S.dead = k, -1;
  return 0;
}

/* How often an elastic wait looks for dead peers (us). */
#define WATCH_US 20000.0

/* Spin budgets (us): a process with two CPUs per rank (its engine thread
 * waits while its training thread computes), and a wait while a user thread
 * of this process is blocked on the engine (its core has nothing else to
 * run: a peer late by its step's jitter). */
#define SPIN_ALWAYS_US 50.0
#define SPIN_WAITED_US 1000.0

static double spin_budget(void) {
  if (S.idle_cores && S.waiters && S.waiters() > 0) return SPIN_WAITED_US;
  return S.always ? SPIN_ALWAYS_US : 0;
}

/* Until every peer's flag `which` has reached s: spin (S.always, or
 * S.idle_cores while a user thread waits: looked at again before every
 * sleep, so a wait the engine thread began alone starts spinning once the
 * training thread blocks), checking the clock every 64 pauses and yielding
 * every 16 us (a thread of this process that shares the core runs); once
 * the budget is spent, sleep: on the peer's futex word (control rounds,
 * whose peers may be computing for milliseconds; re-checked every 100 ms,
 * the watchdog judges a dead peer), or yield and nap 20 us (the data path,
 * whose peers are executing the same piece).  Elastic (S.watch): every
 * WATCH_US of waiting the peers' processes are checked; -1 when one has
 * died, else 0. */
static int wait_all(int which, uint32_t s, int on_futex) {
  double next_look = 0, budget = 0, spin_end = 0, next_yield = 0;
  int spun_out = 0;
  for (int k = 0; k < S.n; k++) {
    if (k == S.me) continue;
    uint32_t *f = flag(k, which), seen;
    for (unsigned i = 0; (int32_t)((seen = __atomic_load_n(f, __ATOMIC_ACQUIRE)) - s) < 0; i++) {
      if (!spun_out && spin_end == 0) budget = spin_budget();
      if (!spun_out && budget > 0) {
        cpu_relax();
        if (i % 64) continue;
        double t = hvd_mono_us();
        if (spin_end == 0) spin_end = t + budget, next_yield = t + 16.0;
        if (t < spin_end) {
          if (t >= next_yield) sched_yield(), next_yield = t + 16.0;
          continue;
        }
        spun_out = 1, i = 0; /* spun out: sleep from here on, for every peer */
      }
      if (S.watch) {
        double t = hvd_mono_us();
        if (next_look == 0) next_look = t + WATCH_US;
        else if (t >= next_look && peers_gone()) return -1;
        else if (t >= next_look) next_look = t + WATCH_US;
      }
      if (on_futex) {
        struct timespec limit = {0, S.watch ? (long)(WATCH_US * 1000) : 100000000};
        futex(f, FUTEX_WAIT, seen, &limit);
      } else if (i < 200) {
        sched_yield();
      } else {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
      }
    }
  }
  return 0;
}

const char *hvd_shm_death(void) {
  static char msg[160];
  snprintf(msg, sizeof msg, "the process of rank %d of this host (pid %d) has ended", S.dead,
           S.dead >= 0 && S.pids ? S.pids[S.dead] : -1);
  return msg;
}

int hvd_shm_active(void) { return S.active; }
const char *hvd_shm_describe(void) { return S.why; }

static void release(int mpi_up) {
  if (S.map) munmap(S.map, S.maplen);
  S.map = NULL;
  free(S.tmp);
  S.tmp = NULL;
  free(S.pids);
  S.pids = NULL;
  S.dead = -1;
  if (mpi_up) {
    if (S.node != MPI_COMM_NULL) MPI_Comm_free(&S.node);
    if (S.cross != MPI_COMM_NULL) MPI_Comm_free(&S.cross);
  }
  S.node = S.cross = MPI_COMM_NULL;
  S.active = 0;
}

void hvd_shm_stop(int mpi_up) {
  release(mpi_up);
  snprintf(S.why, sizeof S.why, "off");
}

/* Local root: creates and sizes the segment; fills name.  0, or -1 with why. */
static int create_segment(char *name, size_t namelen, char *why, size_t whylen) {
  static unsigned serial;
  snprintf(name, namelen, "/hvdshim-%ld-%u-%u", (long)getpid(), serial++, (unsigned)(hvd_mono_us()) & 0xffffu);
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return snprintf(why, whylen, "shm_open(%s): %s", name, strerror(errno)), -1;
  int rc = ftruncate(fd, (off_t)S.maplen) != 0 ? errno : posix_fallocate(fd, 0, (off_t)S.maplen);
  close(fd);
  if (rc != 0) {
    shm_unlink(name);
    return snprintf(why, whylen, "no room for %zu bytes in /dev/shm: %s", S.maplen, strerror(rc)), -1;
  }
  return 0;
}

static int map_segment(const char *name, char *why, size_t whylen) {
  int fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0) return snprintf(why, whylen, "shm_open(%s) of the host's segment: %s", name, strerror(errno)), -1;
  void *p = mmap(NULL, S.maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) return snprintf(why, whylen, "mmap of %zu bytes: %s", S.maplen, strerror(e)), -1;
  S.map = p;
  return 0;
}

/* The CPUs this process may run on (all online ones when unknown). */
static void own_cpus(cpu_set_t *set) {
  CPU_ZERO(set);
  if (sched_getaffinity(0, sizeof *set, set) == 0) return;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  for (long c = 0; c < (n > 0 ? n : 1) && c < CPU_SETSIZE; c++) CPU_SET((int)c, set);
}

/* S.always: this process may use two CPUs per rank of the host.
 * S.idle_cores: the CPUs the host's ranks may use (the union of their
 * affinities) are at least as many as the ranks.  An MPI error code. */
static int spin_modes(void) {
  cpu_set_t set;
  own_cpus(&set);
  S.always = CPU_COUNT(&set) >= 2 * S.n;
  int rc = MPI_Allreduce(MPI_IN_PLACE, &set, (int)sizeof set, MPI_BYTE, MPI_BOR, S.node);
  S.idle_cores = rc == MPI_SUCCESS && CPU_COUNT(&set) >= S.n;
  return rc;
}

int hvd_shm_start(MPI_Comm comm, int rank, int size, int mode, int watch, size_t buffer_bytes, int hosts_override,
                  size_t control_words, int (*waiters)(void), char *err, size_t errlen) {
  S.waiters = waiters;
  S.seq = 0;
  S.last_b = 1, S.last_len = S.last_es = 0, S.last_large = 0;
  S.active = 0;
  if (!mode || size < 2) return snprintf(S.why, sizeof S.why, "off"), 0;
  int rc;
  if (hosts_override > 0) {
    if (size % hosts_override != 0) {
      snprintf(S.why, sizeof S.why, "off (HVDSHIM_TEST_SHM_HOSTS=%d does not divide %d ranks)", hosts_override, size);
      return 0;
    }
    rc = MPI_Comm_split(comm, rank / (size / hosts_override), rank, &S.node);
  } else {
    rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &S.node);
  }
  HVD_CHECK_MPI(rc, "MPI_Comm_split_type (shared memory)");
  MPI_Comm_rank(S.node, &S.me);
  MPI_Comm_size(S.node, &S.n);
  int mm[2] = {-S.n, S.n};
  HVD_CHECK_MPI_GOTO(MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_INT, MPI_MAX, comm), "MPI_Allreduce (ranks per host)", fail);
  if (-mm[0] != mm[1] || mm[1] < 2) {
    if (mm[1] < 2)
      snprintf(S.why, sizeof S.why, "off (one rank per host)");
    else
      snprintf(S.why, sizeof S.why, "off (hosts run %d to %d ranks; it needs the same number on each)", -mm[0], mm[1]);
    release(1);
    return 0;
  }
  S.hosts = size / S.n;
  /* elastic (the same on every rank): each rank must see its host's peers'
   * processes (one pid namespace), or a death could not be told from a
   * peer out of sight */
  S.watch = watch;
  S.dead = -1;
  if (watch) {
    int pid = (int)getpid(), seen_all = 1;
    if (!(S.pids = malloc(sizeof(int) * (size_t)S.n))) HVD_FATAL("out of memory (starting shared memory)");
    HVD_CHECK_MPI_GOTO(MPI_Allgather(&pid, 1, MPI_INT, S.pids, 1, MPI_INT, S.node), "MPI_Allgather (pids)", fail);
    for (int k = 0; k < S.n; k++)
      if (k != S.me && hvd_process_state(S.pids[k]) == 'D') seen_all = 0;
    HVD_CHECK_MPI_GOTO(MPI_Allreduce(MPI_IN_PLACE, &seen_all, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce (pids seen)",
                       fail);
    if (!seen_all) {
      snprintf(S.why, sizeof S.why, "off (elastic, and the ranks of a host cannot see each other's processes)");
      release(1);
      return 0;
    }
  }
  if (S.hosts > 1) HVD_CHECK_MPI_GOTO(MPI_Comm_split(comm, S.me, rank, &S.cross), "MPI_Comm_split (ranks across hosts)", fail);
  S.half = buffer_bytes - buffer_bytes % 64;
  S.cwords = control_words;
  S.cbytes = (control_words * 8 + 63) / 64 * 64;
  S.cseq = 0;
  S.region = HDR + 2 * S.cbytes + 2 * S.half;
  S.maplen = S.region * (size_t)S.n;
  HVD_CHECK_MPI_GOTO(spin_modes(), "MPI_Allreduce (the host's CPUs)", fail);
  char name[96] = "", why[200] = "";
  int ok = 1;
  if (S.me == 0 && !(ok = create_segment(name, sizeof name, why, sizeof why) == 0)) name[0] = 0;
  rc = MPI_Bcast(name, sizeof name, MPI_CHAR, 0, S.node);
  if (rc != MPI_SUCCESS && S.me == 0 && ok) shm_unlink(name);
  HVD_CHECK_MPI_GOTO(rc, "MPI_Bcast (shared segment name)", fail);
  int told = 0; /* the host's first rank failed and says why */
  if (ok && name[0]) ok = map_segment(name, why, sizeof why) == 0;
  else if (ok) ok = 0, told = 1;
  if (ok && !(S.tmp = malloc(S.half))) ok = 0, snprintf(why, sizeof why, "out of memory");
  int all = ok;
  rc = MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm); /* every rank has mapped (or given up) */
  if (S.me == 0 && name[0]) shm_unlink(name);
  HVD_CHECK_MPI_GOTO(rc, "MPI_Allreduce (shared segment check)", fail);
  if (!all) {
    if (!ok && !told) HVD_WARN("shared-memory allreduce off, MPI used instead: %s", why);
    snprintf(S.why, sizeof S.why, "off (a rank could not map the segment%s%s)", ok && !told ? "" : ": ",
             ok && !told ? "" : told ? "see the host's first rank" : why);
    release(1);
    return 0;
  }
  S.active = 1;
  snprintf(S.why, sizeof S.why, "%d rank(s) per host x %d host(s), %zu-byte pieces; waits %s", S.n, S.hosts, S.half,
           S.always ? "spin" : S.idle_cores ? "spin while a caller waits" : "sleep (more ranks than CPUs)");
  return 0;
fail:
  release(1);
  return -1;
}

/* The buffer of the next piece (the same on every rank: it depends only on
 * the pieces' lengths).  Buffers take turns, so a rank writes its buffer
 * again only once every peer has raised `arrive` for the piece in between
 * (it has read the old contents).  A large piece after a large piece of the
 * same length and element size (so the same slices) takes the same buffer instead: of this rank's buffer a peer
 * reads its own slice (before raising `reduced`, which this rank waited for
 * in that piece) and this rank's result slice (before raising `arrive` for
 * the next piece, which this rank waits for before it writes its slice
 * again); with the same slices, packing the others touches neither while a
 * peer may still read it.  One buffer instead of two for a model reduced
 * in one piece per step: half the memory the step's reduction runs through,
 * so more of the model stays in cache between steps. */
static int next_buffer(size_t len, size_t es, int large) {
  int b = large && S.last_large && len == S.last_len && es == S.last_es ? S.last_b : !S.last_b;
  S.last_b = b, S.last_len = len, S.last_es = es, S.last_large = large;
  return b;
}

/* Element index where slice j of a piece of `elems` elements begins: equal
 * slices, each starting on a 64-byte boundary. */
static size_t slice_lo(size_t elems, size_t es, int j) {
  size_t unit = 64 / es, per = (elems + (size_t)S.n - 1) / (size_t)S.n;
  per = (per + unit - 1) / unit * unit;
  size_t lo = per * (size_t)j;
  return lo < elems ? lo : elems;
}

/* This rank's slice: dst (its own buffer) = its tensors' bytes reduced with
 * every peer's (at offset `at` of their buffer b), a block at a time so each
 * block stays in L1 from the copy to the last peer; `direct`: the result
 * also goes back into the tensors (divided), so the copy out skips it. */
#define OWN_BLOCK 16384
static void reduce_own(hvd_fuse_cursor *own, char *dst, size_t bytes, int b, size_t at, hvd_dtype_t dtype,
                       hvd_op_t op, int direct) {
  size_t es = hvd_dtype_size(dtype);
  char *p;
  int d;
  for (size_t take; (take = hvd_fuse_span(own, bytes < OWN_BLOCK ? bytes : OWN_BLOCK, &p, &d)) > 0;) {
    memcpy(dst, p, take);
    for (int k = 0; k < S.n; k++)
      if (k != S.me) hvd_reduce_into(dst, buffer(k, b) + at, take / es, dtype, op);
    if (direct) hvd_scale_copy(p, dst, take / es, dtype, d);
    dst += take, at += take, bytes -= take;
  }
}

int hvd_shm_allreduce_group(const hvd_fuse_entry *e, size_t n, hvd_dtype_t dtype, hvd_op_t op, hvd_phase_times *t) {
  size_t es = hvd_dtype_size(dtype), total = 0;
  for (size_t i = 0; i < n; i++) total += e[i].bytes;
  MPI_Datatype type = hvd_mpi_dtype(dtype);
  MPI_Op mop = hvd_mpi_op(dtype, op);
  hvd_fuse_cursor in, out;
  hvd_fuse_begin(&in, e, n);
  hvd_fuse_begin(&out, e, n);
  for (size_t off = 0; off < total;) {
    size_t len = total - off < S.half ? total - off : S.half;
    uint32_t s = ++S.seq;
    size_t elems = len / es;
    int small = len <= HVD_SHM_SMALL;
    int b = next_buffer(len, es, !small);
    char *mine = buffer(S.me, b);
    /* every slice but this rank's own goes into the segment now; its own is
     * read from the tensors while it is reduced (reduce_own) */
    size_t lo = small ? len : slice_lo(elems, es, S.me) * es, hi = small ? len : slice_lo(elems, es, S.me + 1) * es;
    double t0 = hvd_mono_us();
    hvd_fuse_pack(&in, mine, lo);
    hvd_fuse_cursor own = in;
    hvd_fuse_skip(&in, hi - lo);
    hvd_fuse_pack(&in, mine + hi, len - hi);
    double t1 = hvd_mono_us();
    post(ARRIVE, s);
    if (wait_all(ARRIVE, s, 0)) return HVD_SHM_PEER_DIED;
    if (small) {
      memcpy(S.tmp, buffer(0, b), len);
      for (int k = 1; k < S.n; k++) hvd_reduce_into(S.tmp, buffer(k, b), elems, dtype, op);
      if (S.cross != MPI_COMM_NULL) {
        int rc = MPI_Allreduce(MPI_IN_PLACE, S.tmp, (int)elems, type, mop, S.cross);
        if (rc != MPI_SUCCESS) return rc;
      }
    } else {
      int direct = S.cross == MPI_COMM_NULL; /* this slice's result is final: straight to the tensors too */
      reduce_own(&own, mine + lo, hi - lo, b, lo, dtype, op, direct);
      if (!direct && hi > lo) {
        int rc = MPI_Allreduce(MPI_IN_PLACE, mine + lo, (int)((hi - lo) / es), type, mop, S.cross);
        if (rc != MPI_SUCCESS) return rc;
      }
      post(REDUCED, s);
      if (wait_all(REDUCED, s, 0)) return HVD_SHM_PEER_DIED;
    }
    double t2 = hvd_mono_us();
    if (small) {
      hvd_fuse_unpack(&out, S.tmp, len, dtype);
    } else {
      for (int j = 0; j < S.n; j++) {
        size_t a = slice_lo(elems, es, j) * es, z = slice_lo(elems, es, j + 1) * es;
        if (j == S.me && S.cross == MPI_COMM_NULL) hvd_fuse_skip(&out, z - a); /* already in the tensors */
        else hvd_fuse_unpack(&out, buffer(j, b) + a, z - a, dtype);
      }
    }
    t->copy_in_us += t1 - t0;
    t->reduce_us += t2 - t1;
    t->copy_out_us += hvd_mono_us() - t2;
    off += len;
  }
  return MPI_SUCCESS;
}

/* ------------------------------------------------------------ control round */

int hvd_shm_control(uint64_t *v) {
  if (!S.active || S.hosts != 1) return 0;
  uint32_t k = ++S.cseq;
  int b = (int)(k & 1);
  memcpy(control_copy(S.me, b), v, S.cwords * 8);
  post(CONTROL, k);
  futex(flag(S.me, CONTROL), FUTEX_WAKE, INT32_MAX, NULL); /* peers asleep on this rank's word */
  if (wait_all(CONTROL, k, 1)) return -1;
  for (int p = 0; p < S.n; p++) {
    if (p == S.me) continue;
    const uint64_t *c = control_copy(p, b);
    for (size_t i = 0; i < S.cwords; i++) v[i] &= c[i];
  }
  return 1;
}

/* ------------------------------------------------------------------ the contract (backend.h) */

static int bk_allreduce(const hvd_fuse_entry *e, size_t n, hvd_dtype_t dt, hvd_op_t op, const hvd_bk_ctx *c,
                        hvd_phase_times *t, char *err, size_t errlen) {
  (void)c; /* the global set: the segment's ranks, and the cross-host communicator */
  int rc = hvd_shm_allreduce_group(e, n, dt, op, t);
  if (rc == HVD_SHM_PEER_DIED) return snprintf(err, errlen, "%s", hvd_shm_death()), -1;
  HVD_CHECK_MPI(rc, "MPI_Allreduce (between hosts)");
  return 0;
}

/* Broadcasts and allgathers of the global set go through MPI. */
static int bk_broadcast(void *buf, size_t count, hvd_dtype_t dt, int root, const hvd_bk_ctx *c, char *err,
                        size_t errlen) {
  return hvd_backend_mpi.broadcast(buf, count, dt, root, c, err, errlen);
}

const hvd_backend hvd_backend_shm = {
    .name = "shared memory",
    .allreduce_span = "SHM_ALLREDUCE",
    .broadcast_span = "MPI_BCAST",
    .allreduce = bk_allreduce,
    .broadcast = bk_broadcast,
};
