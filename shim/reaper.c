/* The reaper (reaper.h says what it does and why).
 *
 * Two processes take part.  The armed rank, in its constructor (one
 * thread, before main): it becomes a process-group leader where it is not
 * one, blocks SIGUSR1, SIGUSR2 and NOTE_SIG across a fork, and appends its
 * token "PID.START.REAPER" (its pid, its start time in clock ticks since
 * boot, the reaper's pid) to HVDSHIM_FAMILY.  The reaper, the fork's child:
 * outside the rank's group, descriptors closed, those signals still
 * blocked; it waits for the rank's end, noting what the rank's MPI made
 * each time the rank sends NOTE_SIG (read from /proc: the files the rank
 * maps, those its Hydra proxy holds), then reads whether a SIGUSR1 (a clean
 * exit) is pending, and if not signals the family until none of it is
 * left.  It touches nothing of the rank's but processes, and then what no
 * launcher is left to remove (the MPI files it noted, an ended launcher's
 * session folder): no descriptor, no memory that the rank sees.  The
 * family is found in /proc: the members of the rank's process group, and
 * every process whose environment, as it was when it executed its program,
 * holds the rank's "PID.START" (children that only forked, without
 * executing, show the environment of the rank's own start, which has not
 * the token: they are the group's). */
#define _GNU_SOURCE
#include "reaper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "../base/config.h"
#include "../base/libc.h"
#include "../base/log.h"
#include "../base/role.h"
#include "../base/clock.h"

#define FAMILY_ENV "HVDSHIM_FAMILY"
#define GRACE_MS 2000   /* SIGTERM, then SIGKILL to what is left */
#define GIVE_UP_MS 10000 /* a process SIGKILL cannot end yet (in uninterruptible sleep): stop there */
#define LAUNCHER_WAIT_MS 5000 /* after a rank ended the job: its launcher's time to end by itself */

static pid_t armed_pid; /* the process the reaper watches (this one, once armed) */
static pid_t reaper_pid;
static pid_t launcher_pid; /* the rank's Open MPI launcher process on this host (0: none found) */
static unsigned long long launcher_start;
static char session_dir[PATH_MAX]; /* that launcher's session folder for the job, "" where not known */
static char status_file[128];      /* hvdrun's, where this process runs under it ("" elsewhere) */
static int status_rank = -1;       /* the rank's number, for that file */
static int status_on_death;        /* the reaper writes it when its rank dies (not in an elastic job) */
/* What the rank's MPI made that a rank that dies leaves (its launcher
 * removes it only where it outlives the rank), noted by the reaper when the
 * rank says MPI is up (NOTE_SIG; a signal, not memory the two share, so
 * that a rank that is a wrapper shell's `exec` of the armed image still
 * can): the MPI library's shared-memory files the rank maps (Open MPI's
 * vader_segment.*, sm_segment.*), removed by the reaper. */
#define NOTE_SIG (SIGRTMIN + 3)
#define NOTED_MAX 8
typedef struct {
  int n;
  char path[NOTED_MAX][256];
  /* MPICH's Hydra: the topology file its proxy (the rank's launcher on
   * this host) wrote for the ranks' MPI (/tmp/hydra_hwloc_xmlfile_*) and
   * removes at a normal end, not when the job is aborted; removed once
   * that proxy has ended (owner, owner_start) */
  char owned[256];
  pid_t owner;
  unsigned long long owner_start;
} noted_files;
static noted_files noted; /* (the reaper's) */

/* ------------------------------------------------------------ /proc */
/* A /proc file into BUF (at most SIZE - 1 bytes, then a 0): its length, or
 * -1 where it cannot be read or is empty (the process is gone). */
static ssize_t read_proc(const char *path, char *buf, size_t size) {
  int fd = hvd_libc()->open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  ssize_t n;
  while (len < size - 1 && (n = read(fd, buf + len, size - 1 - len)) > 0) len += (size_t)n;
  close(fd);
  buf[len] = 0;
  return len ? (ssize_t)len : -1;
}

/* /proc/PID/stat (PID 0: this process's) into BUF: its field 3 (state), or
 * NULL where the process is gone. */
static char *stat_fields(pid_t pid, char *buf, size_t size) {
  char path[64];
  if (pid) snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  else snprintf(path, sizeof path, "/proc/self/stat");
  if (read_proc(path, buf, size) < 0) return NULL;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  return p && p[1] == ' ' ? p + 2 : NULL;
}

/* Fields of /proc/PID/stat after the command name: state (field 3), pgrp
 * (5), start time (22).  0, or -1 when the process is gone. */
static int read_stat_ppid(pid_t pid, char *state, pid_t *ppid, pid_t *pgrp, unsigned long long *start) {
  char buf[1024];
  char *p = stat_fields(pid, buf, sizeof buf);
  if (!p) return -1;
  char st = 0;
  long pp = 0, pg = 0;
  unsigned long long t = 0;
  /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
   * priority nice threads itrealvalue starttime */
  if (sscanf(p, "%c %ld %ld %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &st, &pp, &pg,
             &t) != 4)
    return -1;
  if (state) *state = st;
  if (ppid) *ppid = (pid_t)pp;
  if (pgrp) *pgrp = (pid_t)pg;
  if (start) *start = t;
  return 0;
}

static int read_stat(pid_t pid, char *state, pid_t *pgrp, unsigned long long *start) {
  return read_stat_ppid(pid, state, NULL, pgrp, start);
}

/* PID's program name (its comm) into COMM; 0, or -1 where it is gone. */
static int read_comm(pid_t pid, char comm[32]) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/comm", (long)pid);
  if (read_proc(path, comm, 32) < 0) return -1;
  comm[strcspn(comm, "\n")] = 0;
  return 0;
}

/* Open MPI's processes that start ranks: mpirun (orterun, prterun) on the
 * launching host, a daemon (orted, prted) on the others. */
static int is_launcher(pid_t pid) {
  char comm[32];
  if (read_comm(pid, comm) != 0) return 0;
  static const char *names[] = {"mpirun", "orterun", "prterun", "orted", "prted"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (!strcmp(comm, names[i])) return 1;
  return 0;
}

/* MPICH's Hydra: its proxy starts the ranks of a host. */
static int is_hydra_proxy(pid_t pid) {
  char comm[32];
  return read_comm(pid, comm) == 0 && !strcmp(comm, "hydra_pmi_proxy");
}

/* The nearest ancestor of PID for which IS holds (a wrapper shell may stand
 * between), a few generations up at most, and its start time; 0: none. */
static pid_t ancestor(pid_t pid, int (*is)(pid_t), unsigned long long *start) {
  pid_t p;
  if (read_stat_ppid(pid, NULL, &p, NULL, NULL) != 0) return 0;
  for (int up = 0; up < 4 && p > 1; up++) {
    pid_t pp;
    if (read_stat_ppid(p, NULL, &pp, NULL, start) != 0) return 0;
    if (is(p)) return p;
    p = pp;
  }
  return 0;
}

/* This process's Open MPI launcher. */
static void find_launcher(void) { launcher_pid = ancestor(getpid(), is_launcher, &launcher_start); }

/* hvdrun's status file (HVDSHIM_STATUS_FILE), where the hvdrun that named
 * it is an ancestor of this process (it, its launcher, Hydra's proxy, a
 * wrapper shell between): Hydra and srun pass the variable to the ranks of
 * every host, where the file would be left to no one. */
static pid_t status_owner;
static int is_status_owner(pid_t pid) { return pid == status_owner; }

static void find_status_file(void) {
  const char *p = hvd_cfg_str(HVD_CFG_STATUS_FILE);
  long owner = 0;
  unsigned long uid = 0;
  status_file[0] = 0;
  if (!p || strlen(p) >= sizeof status_file || sscanf(p, HVD_STATUS_FILE_FORMAT, &owner, &uid) != 2 || owner <= 1)
    return;
  status_owner = (pid_t)owner;
  if (ancestor(getpid(), is_status_owner, NULL)) snprintf(status_file, sizeof status_file, "%s", p);
}

void hvd_reaper_status(int code, int rank, int sig, long when_ms) {
  if (!status_file[0]) return;
  int fd = hvd_libc()->open(status_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  char line[64]; /* (one write of one line: appended whole) */
  int n = snprintf(line, sizeof line, "%d %d %d %ld\n", code, rank, sig, when_ms);
  if (n > 0) {
    ssize_t w = write(fd, line, (size_t)n); /* (nothing to do where it fails: hvdrun keeps the launcher's status) */
    (void)w;
  }
  close(fd);
}

/* How PID ended, while it is a zombie its parent has not reaped: its wait
 * status (field 52 of /proc/PID/stat), or -1 where it is gone. */
static int zombie_status(pid_t pid) {
  char buf[1024];
  char *p = stat_fields(pid, buf, sizeof buf);
  if (!p || p[0] != 'Z') return -1;
  for (int field = 3; field < 52 && p; field++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  char *end;
  long v = p ? strtol(p, &end, 10) : -1;
  return p && end != p && v >= 0 ? (int)v : -1;
}

/* S (after a prefix) names the launcher: "N", or "HOST.N.UID" (Open MPI
 * 5), N the launcher's pid, HOST this host's name (or its first label),
 * UID this user's. */
static int names_launcher(const char *s) {
  char *end;
  if (launcher_pid <= 0) return 0;
  if (strtol(s, &end, 10) == launcher_pid && end != s && !*end) return 1;
  char want[64], host[256] = "";
  snprintf(want, sizeof want, ".%ld.%lu", (long)launcher_pid, (unsigned long)getuid());
  size_t n = strlen(s), w = strlen(want);
  if (n <= w || strcmp(s + n - w, want) || gethostname(host, sizeof host - 1) != 0) return 0;
  size_t h = n - w, full = strlen(host), first = strcspn(host, ".");
  return (h == full || h == first) && !strncmp(s, host, h);
}

/* The launcher's session folder for this job, as the rank's environment
 * names it (Open MPI 4: .../ompi.HOST.UID/pid.N or jf.N under mpirun or a
 * daemon; 5: PMIx's server folder, .../prterun.HOST.N.UID under mpirun,
 * .../prted.HOST.N.UID under a daemon; 6: .../ompi.N, .../prted.N).  Kept
 * only where the names are Open MPI's (N the launcher's pid): what a reaper
 * removes once the launcher has ended before the rank's family did. */
static void find_session(void) {
  session_dir[0] = 0;
  const char *d = getenv("OMPI_MCA_orte_jobfam_session_dir");
  if (!d || !*d) d = getenv("PMIX_SERVER_TMPDIR");
  if (!d || d[0] != '/' || strlen(d) >= sizeof session_dir || strstr(d, "/..")) return;
  const char *b = strrchr(d, '/') + 1;
  static const char *const owned[] = {"pid.", "ompi.", "prted.", "prterun."}; /* named after the launcher */
  int ok = !strncmp(b, "jf.", 3); /* (Open MPI 4's daemon: named after the job family) */
  for (size_t i = 0; i < sizeof owned / sizeof *owned && !ok; i++) {
    size_t k = strlen(owned[i]);
    ok = !strncmp(b, owned[i], k) && names_launcher(b + k);
  }
  if (!ok) return;
  strcpy(session_dir, d);
}

/* PID is still the process started at START (not a reused pid), and alive. */
static int still_runs(pid_t pid, unsigned long long start) {
  char st;
  unsigned long long t;
  return read_stat(pid, &st, NULL, &t) == 0 && t == start && st != 'Z' && st != 'X';
}

/* The environment PID was started with holds HVDSHIM_FAMILY with the entry
 * KEY ("PID.START") in its list. */
static int environ_names(pid_t pid, const char *key) {
  static char buf[1 << 18];
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/environ", (long)pid);
  ssize_t got = read_proc(path, buf, sizeof buf);
  if (got < 0) return 0;
  size_t len = (size_t)got;
  size_t klen = strlen(key), plen = strlen(FAMILY_ENV "=");
  for (size_t i = 0; i < len; i += strlen(buf + i) + 1) {
    if (strncmp(buf + i, FAMILY_ENV "=", plen)) continue;
    for (const char *e = buf + i + plen; *e;) { /* "PID.START.REAPER,PID.START.REAPER..." */
      if (!strncmp(e, key, klen) && e[klen] == '.') return 1;
      const char *c = strchr(e, ',');
      if (!c) break;
      e = c + 1;
    }
  }
  return 0;
}

/* ------------------------------------------------------------ a rank gone before MPI */
/* A launcher of either kind: Open MPI's (mpirun, orted, prted) or Hydra's proxy. */
static int is_any_launcher(pid_t pid) { return is_launcher(pid) || is_hydra_proxy(pid); }

pid_t hvd_reaper_host_launcher(unsigned long long *start) { return ancestor(getpid(), is_any_launcher, start); }

#define PROBE_MAX 256 /* local ranks followed */
static struct {
  pid_t launcher;
  int misses[PROBE_MAX];     /* consecutive probes that found the local rank's process gone */
  int rank[PROBE_MAX];       /* its rank and pid, where a probe has seen it */
  pid_t pid[PROBE_MAX];
} probe;

int hvd_reaper_local_rank_gone(char *who, size_t n) {
  int me_local = -1, local_size = hvd_env_local_size();
  if (hvd_env_rank(&me_local) < 0 || local_size < 2 || local_size > PROBE_MAX) return 0;
  if (!probe.launcher) probe.launcher = ancestor(getpid(), is_any_launcher, NULL);
  if (!probe.launcher) return 0; /* (started by something else: srun's step daemon; nothing to tell by) */
  int alive[PROBE_MAX] = {0}, unreadable = 0, starting = 0;
  char launcher_comm[32] = "";
  if (read_comm(probe.launcher, launcher_comm) != 0) return 0;
  DIR *d = hvd_libc()->opendir("/proc");
  if (!d) return 0;
  static char env[1 << 18]; /* (the watch thread's alone) */
  struct dirent *de;
  while ((de = hvd_libc()->readdir(d))) {
    char *end;
    long pid = strtol(de->d_name, &end, 10);
    if (*end || pid <= 1 || pid == (long)getpid()) continue;
    /* a process of this job: below this launcher (a rank, a wrapper shell,
     * their children while the rank lives; a dead rank's are reparented) */
    if (ancestor((pid_t)pid, is_any_launcher, NULL) != probe.launcher) continue;
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/environ", pid);
    errno = 0;
    ssize_t got = read_proc(path, env, sizeof env);
    if (got < 0 && (errno == EACCES || errno == EPERM)) unreadable = 1; /* (not dumpable: it could be any rank) */
    int local = -1, rank = got > 0 ? hvd_env_block_rank(env, (size_t)got, &local) : -1;
    if (rank < 0 || local < 0 || local >= local_size) {
      /* the launcher's fork not yet exec'd (its image, its environment still
       * the launcher's): a rank starting, which no probe can tell from
       * another; Open MPI 4's child closes every descriptor before its
       * exec, and a loaded host has kept one there for seconds */
      char comm[32];
      if (read_comm((pid_t)pid, comm) == 0 && !strcmp(comm, launcher_comm)) starting = 1;
      continue;
    }
    alive[local] = 1;
    probe.rank[local] = rank + 1, probe.pid[local] = (pid_t)pid;
  }
  hvd_libc()->closedir(d);
  if (unreadable) return 0;
  for (int l = 0; l < local_size; l++) {
    /* (a local rank never seen is not counted gone while one is starting) */
    probe.misses[l] = alive[l] || l == me_local || (starting && !probe.rank[l]) ? 0 : probe.misses[l] + 1;
    if (probe.misses[l] < 2) continue; /* (gone in two probes 0.5 s apart: not a process between exec and start) */
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    if (probe.rank[l]) snprintf(who, n, "rank %d (pid %ld on %s)", probe.rank[l] - 1, (long)probe.pid[l], host);
    else snprintf(who, n, "local rank %d of %s", l, host);
    return 1;
  }
  return 0;
}

/* ------------------------------------------------------------ the reaper process */
/* Send SIG (0: only count) to every live member of the family of the rank
 * (RANK, whose process group it led when LEAD).  Returns how many live
 * members there were (zombies are not members: their parent, maybe init of
 * a container that never reaps, holds them, not the rank). */
static int signal_family(pid_t rank, const char *key, int lead, int sig) {
  if (lead && sig) kill(-rank, sig); /* the group at once, so a fork in flight is not missed */
  DIR *d = hvd_libc()->opendir("/proc");
  if (!d) return 0;
  int n = 0;
  pid_t me = getpid();
  struct dirent *e;
  while ((e = hvd_libc()->readdir(d))) {
    char *end;
    long v = strtol(e->d_name, &end, 10);
    if (*end || v <= 0 || (pid_t)v == me) continue;
    char st;
    pid_t pg;
    if (read_stat((pid_t)v, &st, &pg, NULL) != 0 || st == 'Z' || st == 'X') continue;
    if (!((lead && pg == rank) || environ_names((pid_t)v, key))) continue;
    n++;
    if (sig) kill((pid_t)v, sig);
  }
  hvd_libc()->closedir(d);
  return n;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)f;
  syscall(SYS_unlinkat, AT_FDCWD, p, flag == FTW_DP ? AT_REMOVEDIR : 0); /* (not the library's own unlinkat) */
  return 0;
}

/* PID (started at START) has ended, or does within a second. */
static int ends_soon(pid_t pid, unsigned long long start) {
  for (int i = 0; i < 20 && still_runs(pid, start); i++) hvd_nap_ms(50);
  return !still_runs(pid, start);
}

/* The session folder of a launcher that has ended while or before its rank
 * did: SIGKILLed by this reaper, it cannot remove it
 * itself (Open MPI 4 left /tmp/ompi.HOST.UID/jf.N of a cut-off host's
 * daemon), nor where it ended before its ranks (pid.N of an mpirun sent
 * SIGTERM); one that ended after its ranks has removed it already. */
static void remove_session(void) {
  if (!session_dir[0]) return;
  nftw(session_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  /* (Not the folder above it, Open MPI 4's ompi.HOST.UID, even empty: a
   * launcher starting meanwhile on this host makes its own folder in it,
   * and failed to start when it was removed under it.) */
}

/* The rank's shared-memory files (noted_files). */
static void remove_noted(void) {
  for (int i = 0; i < noted.n; i++) syscall(SYS_unlinkat, AT_FDCWD, noted.path[i], 0);
}

/* Hydra's proxy among the rank's nearest ancestors holds its topology file
 * open once the ranks' MPI has asked for it: noted with the proxy as owner. */
static void note_hydra_file(pid_t rank) {
  unsigned long long start;
  pid_t p = ancestor(rank, is_hydra_proxy, &start);
  if (!p) return;
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%ld/fd", (long)p);
  DIR *d = hvd_libc()->opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = hvd_libc()->readdir(d))) {
    char link[sizeof dir + sizeof e->d_name + 1], target[256];
    snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
    ssize_t n = syscall(SYS_readlinkat, AT_FDCWD, link, target, sizeof target - 1);
    if (n <= 0 || n >= (ssize_t)sizeof target - 1) continue;
    target[n] = 0;
    const char *b = strrchr(target, '/');
    if (target[0] != '/' || !b || strncmp(b + 1, "hydra_hwloc_xmlfile_", 20) || strstr(target, " (deleted)")) continue;
    noted.owner = p, noted.owner_start = start;
    strcpy(noted.owned, target);
    break;
  }
  hvd_libc()->closedir(d);
}

/* The rank has said MPI is up (NOTE_SIG): note what it made. */
static void note_mpi_files(pid_t rank) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/maps", (long)rank);
  FILE *f = hvd_libc()->fopen(path, "re");
  if (!f) return;
  char line[PATH_MAX + 128];
  while (fgets(line, sizeof line, f)) {
    char *p = strstr(line, " /dev/shm/");
    if (!p) continue;
    p++;
    p[strcspn(p, "\n")] = 0;
    const char *b = p + strlen("/dev/shm/");
    if ((strncmp(b, "vader_segment.", 14) && strncmp(b, "sm_segment.", 11)) || strstr(p, " (deleted)") ||
        strlen(p) >= sizeof noted.path[0])
      continue;
    int seen = 0;
    for (int i = 0; i < noted.n; i++) seen |= !strcmp(noted.path[i], p);
    if (!seen && noted.n < NOTED_MAX) strcpy(noted.path[noted.n++], p);
  }
  fclose(f);
  if (!noted.owned[0]) note_hydra_file(rank);
}

/* The Hydra proxy's topology file (noted_files.owned), once the proxy has
 * ended (within a second of the rank's family). */
static void remove_owned(void) {
  if (noted.owned[0] && noted.owner > 0 && ends_soon(noted.owner, noted.owner_start))
    syscall(SYS_unlinkat, AT_FDCWD, noted.owned, 0);
}

/* SIGKILL to PARENT's children. */
static void kill_children(pid_t parent) {
  DIR *d = hvd_libc()->opendir("/proc");
  if (!d) return;
  struct dirent *e;
  while ((e = hvd_libc()->readdir(d))) {
    char *end;
    long v = strtol(e->d_name, &end, 10);
    pid_t pp;
    if (!*end && v > 0 && read_stat_ppid((pid_t)v, NULL, &pp, NULL, NULL) == 0 && pp == parent) kill((pid_t)v, SIGKILL);
  }
  hvd_libc()->closedir(d);
}

static void close_all_but_std(void) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
#endif
  long max = sysconf(_SC_OPEN_MAX);
  if (max < 0 || max > 65536) max = 65536;
  for (int fd = 3; fd < max; fd++) close(fd);
}

/* The command line ps shows for this process, which the fork gave the
 * rank's: overwritten in place (the argument area named by fields 48 and 49
 * of /proc/self/stat, where it starts at argv[0]), so a list of processes
 * does not show the reaper as a second copy of the rank, whose pid someone
 * killing "one rank" might take as well (a rank killed with its reaper
 * leaves its loader workers to keep the launcher waiting: nothing is left to
 * end them). */
static void retitle(pid_t rank) {
  char buf[1024];
  char *p = stat_fields(0, buf, sizeof buf); /* field 3 */
  for (int field = 3; field < 48 && p; field++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  unsigned long long from = 0, to = 0;
  if (!p || sscanf(p, "%llu %llu", &from, &to) != 2 || !from || to <= from + 1 || to - from > (1u << 20)) return;
  /* only where that area is this program's own argv (libc set argv[0] at its
   * start): under valgrind the kernel's area is the tool's, not the client's */
  if ((uintptr_t)program_invocation_name != (uintptr_t)from) return;
  char *area = (char *)(uintptr_t)from, title[64];
  size_t len = (size_t)(to - from);
  snprintf(title, sizeof title, "hvdshim-reaper (of rank pid %ld)", (long)rank);
  if (strlen(title) >= len) snprintf(title, sizeof title, "hvdshim-reaper %ld", (long)rank); /* a short command line */
  memset(area, 0, len);
  snprintf(area, len, "%s", title);
}

__attribute__((noreturn)) static void reap(pid_t rank, unsigned long long start, int lead) {
  setpgid(0, 0); /* out of the rank's group: neither its signals nor our own kill(-rank) reach us */
  prctl(PR_SET_NAME, "hvdshim-reaper", 0, 0, 0);
  retitle(rank);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], SIG_IGN);
  int null = hvd_libc()->open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, 0), dup2(null, 1), dup2(null, 2);
    if (null > 2) close(null);
  }
  close_all_but_std(); /* no output pipe, MPI socket or lock of the rank's held open */
  int pfd = -1;
#ifdef SYS_pidfd_open
  pfd = (int)syscall(SYS_pidfd_open, rank, 0);
#endif
  sigset_t notes;
  sigemptyset(&notes);
  sigaddset(&notes, NOTE_SIG); /* (blocked since the fork: one sent before this point is pending) */
  int sfd = signalfd(-1, &notes, SFD_NONBLOCK | SFD_CLOEXEC);
  struct timespec zero = {0, 0};
  if (getppid() == rank) {
    if (pfd >= 0) {
      struct pollfd p[2] = {{.fd = pfd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
      for (;;) {
        if (poll(p, sfd >= 0 ? 2 : 1, -1) < 0) {
          if (errno == EINTR) continue;
          break;
        }
        if (p[0].revents) break;
        struct signalfd_siginfo si;
        int got = 0;
        while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) got = 1;
        if (got) note_mpi_files(rank);
      }
    } else {
      while (getppid() == rank) { /* no pidfd (Linux before 5.3): the parent changes at its end */
        if (sigtimedwait(&notes, NULL, &zero) == NOTE_SIG) note_mpi_files(rank);
        hvd_nap_ms(200);
      }
    }
  }
  long died_ms = hvd_mono_ms();
  int how = zombie_status(rank); /* (before its launcher reaps it) */
  sigset_t usr1, usr2;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  if (sigtimedwait(&usr1, NULL, &zero) == SIGUSR1) syscall(SYS_exit_group, 0); /* a clean exit */
  int ended_job = sigtimedwait(&usr2, NULL, &zero) == SIGUSR2;
  /* Killed, crashed, or ended non-zero without a word (the rank writes its
   * own status where it ends the job): hvdrun's launcher may report 0
   * (MPICH 4.2's Hydra, where a second rank dies before the first is
   * reaped).  Not where it exited 0 past its exit handlers, nor in an
   * elastic job, which goes on without it. */
  if (!ended_job && status_on_death && how != 0)
    hvd_reaper_status(how < 0 ? 1 : WIFSIGNALED(how) ? 128 + WTERMSIG(how) : WEXITSTATUS(how), status_rank,
                      how < 0 ? -1 : WIFSIGNALED(how) ? WTERMSIG(how) : 0, died_ms);
  char key[64];
  snprintf(key, sizeof key, "%ld.%llu", (long)rank, start);
  long t0 = hvd_mono_ms();
  int sig = SIGTERM;
  while (signal_family(rank, key, lead, sig) > 0) {
    long t = hvd_mono_ms() - t0;
    if (t > GIVE_UP_MS) break;
    sig = t > GRACE_MS ? SIGKILL : 0;
    hvd_nap_ms(50);
  }
  /* The rank ended the job (MPI_Abort) or its part of it: its launcher
   * ends within a second or two, unless it cannot reach a host it waits for
   * (a cut link), where Open MPI's mpirun waits in its abort and the
   * daemon of a cut-off host for mpirun, as long as TCP takes to give up
   * (minutes).  Then it is ended here, and the processes it started that
   * are left (an ssh to the cut-off host, a rank still in its abort):
   * SIGKILL (Open MPI 4.1's mpirun crashes in PMIx_Finalize when SIGTERM
   * finds it in its abort). */
  if (ended_job && launcher_pid > 0) {
    while (still_runs(launcher_pid, launcher_start) && hvd_mono_ms() - t0 < LAUNCHER_WAIT_MS) hvd_nap_ms(100);
    if (still_runs(launcher_pid, launcher_start)) {
      kill_children(launcher_pid);
      kill(launcher_pid, SIGKILL);
    }
  }
  /* A launcher that has ended by now (SIGKILLed above, or ended before its
   * rank: Open MPI 4.1's mpirun, sent SIGTERM by `timeout`, can exit while
   * its ranks still run) left its session folder and the ranks'
   * shared-memory segments to no one.  One that still runs removes them at
   * the job's end (Open MPI 4.1 to 6 do), and meanwhile the job may go on
   * without this rank (ULFM: every survivor maps every rank's segment, and
   * Open MPI warns at its end when one was removed under it). */
  if (launcher_pid <= 0 || ends_soon(launcher_pid, launcher_start)) {
    remove_noted();
    if (launcher_pid > 0) remove_session();
  }
  remove_owned();
  syscall(SYS_exit_group, 0);
  __builtin_unreachable();
}

/* ------------------------------------------------------------ the rank's side */
/* A leader of its own process group, where it is not one and can become
 * one without taking the terminal's foreground from the user's shell. */
static int lead_group(void) {
  if (getpgrp() == getpid()) return 1;
  for (int fd = 0; fd <= 2; fd++)
    if (isatty(fd) && tcgetpgrp(fd) == getpgrp()) return 0; /* in the terminal's foreground: stay there */
  return setpgid(0, 0) == 0;
}

/* The reaper of this same process, forked by its image before an exec. */
static pid_t own_reaper(pid_t self, unsigned long long start) {
  const char *f = getenv(FAMILY_ENV);
  char key[64];
  int klen = snprintf(key, sizeof key, "%ld.%llu.", (long)self, start);
  for (const char *e = f; e && *e;) {
    if (!strncmp(e, key, (size_t)klen)) {
      long r = strtol(e + klen, NULL, 10);
      return r > 0 && kill((pid_t)r, 0) == 0 ? (pid_t)r : 0;
    }
    const char *c = strchr(e, ',');
    if (!c) break;
    e = c + 1;
  }
  return 0;
}

void hvd_reaper_arm(void) {
  pid_t self = getpid();
  if (armed_pid == self) return;
  find_status_file();
  status_rank = hvd_env_rank(NULL);
  status_on_death = !hvd_cfg_int(HVD_CFG_ELASTIC);
  if (!hvd_cfg_int(HVD_CFG_REAP)) return;
  unsigned long long start;
  if (read_stat(self, NULL, NULL, &start) != 0) return; /* no /proc: nothing a reaper could find */
  pid_t found = own_reaper(self, start);
  if (found) {
    reaper_pid = found, armed_pid = self;
    return;
  }
  int lead = lead_group();
  find_launcher();
  find_session();
  sigset_t usr1, old;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigaddset(&usr1, SIGUSR2);
  sigaddset(&usr1, NOTE_SIG);
  sigprocmask(SIG_BLOCK, &usr1, &old); /* a note sent before the reaper runs stays pending */
  pid_t c = fork();
  if (c == 0) reap(self, start, lead);
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (c < 0) {
    HVD_WARN("cannot start the process that ends this rank's children if it dies (fork: %s): they may outlive it",
             strerror(errno));
    return;
  }
  reaper_pid = c, armed_pid = self;
  const char *f = getenv(FAMILY_ENV);
  char v[4096];
  if (snprintf(v, sizeof v, "%s%s%ld.%llu.%ld", f && *f ? f : "", f && *f ? "," : "", (long)self, start, (long)c) <
      (int)sizeof v)
    setenv(FAMILY_ENV, v, 1);
  HVD_DEBUG("reaper %ld watches this rank (pid %ld, %s its process group)", (long)c, (long)self,
            lead ? "leading" : "not leading");
}

/* Python's multiprocessing forkserver started by the rank's main thread
 * dies with the rank (PR_SET_PDEATHSIG): the loader workers it forks watch
 * their parent, the forkserver, not the rank, and it outlives the rank for
 * as long as they do (they hold its liveness pipe), so where the rank's
 * reaper is gone with the rank nothing else would end them.  The signal
 * comes when the thread that forked the child ends, so only a forkserver
 * that the rank's main thread started (listed in its task's children) is
 * tied; at a clean end of the rank none of its clients is left.  Not with
 * HVDSHIM_REAP=0. */
static void tie_forkserver(void) {
  const char *reap = getenv("HVDSHIM_REAP");
  int64_t on = 1;
  double unused;
  char err[160];
  if (reap && hvd_cfg_parse(HVD_CFG_REAP, reap, &on, &unused, err, sizeof err) == 0 && !on) return;
  const char *a = getenv("HVDSHIM_ACTIVE_PID");
  long rank = a ? strtol(a, NULL, 10) : 0;
  if (rank <= 1 || getppid() != (pid_t)rank) return;
  char path[96], kids[4096];
  snprintf(path, sizeof path, "/proc/%ld/task/%ld/children", rank, rank);
  if (read_proc(path, kids, sizeof kids) < 0) return;
  int found = 0;
  for (char *p = kids, *end; !found; p = end) { /* "PID PID ..." */
    long kid = strtol(p, &end, 10);
    if (end == p) break;
    found = kid == (long)getpid();
  }
  if (!found) return;
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (getppid() != (pid_t)rank) raise(SIGKILL); /* the rank ended before the tie */
}

void hvd_reaper_spare_cleaner(void) {
  char cmd[512];
  ssize_t n = read_proc("/proc/self/cmdline", cmd, sizeof cmd);
  if (n < 0) return;
  for (ssize_t i = 0; i < n; i++)
    if (!cmd[i]) cmd[i] = ' '; /* the arguments as one string */
  cmd[n] = 0;
  /* `python -c 'from multiprocessing.resource_tracker import main;main(FD)'` */
  if (strstr(cmd, "multiprocessing.resource_tracker import main") && getpgrp() != getpid()) setpgid(0, 0);
  /* `python -c 'from multiprocessing.forkserver import main; main(...)'` */
  if (strstr(cmd, "multiprocessing.forkserver import main")) tie_forkserver();
}

/* Hydra's notice of a dead peer (hvd_reaper_bear_hydra_notice): nothing,
 * but in the rank while nothing watches its peers, where it ends the
 * process as before (async-signal-safe: getpid, sigaction, raise). */
static int (*notice_kept)(void);
static pid_t notice_pid;

static void hydra_notice(int sig) {
  if (notice_kept && getpid() == notice_pid && !notice_kept()) {
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

void hvd_reaper_bear_hydra_notice(int (*watched)(void)) {
  struct sigaction old;
  if (sigaction(SIGUSR1, NULL, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) return;
  if (!ancestor(getpid(), is_hydra_proxy, NULL)) return;
  notice_kept = watched, notice_pid = getpid();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = hydra_notice;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
}

void hvd_reaper_note_mpi_files(void) {
  if (reaper_pid > 0 && getpid() == armed_pid) kill(reaper_pid, NOTE_SIG);
}

void hvd_reaper_note_ending(void) {
  if (reaper_pid > 0 && getpid() == armed_pid) kill(reaper_pid, SIGUSR2);
}

void hvd_reaper_note_exit(int status) {
  if (status == 0 && reaper_pid > 0 && getpid() == armed_pid) kill(reaper_pid, SIGUSR1);
}
