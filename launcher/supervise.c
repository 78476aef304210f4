/* hvdrun's last act: run the launcher (mpirun, mpiexec, srun) as a child
 * and return only once the job's processes on this host are gone.
 *
 * An mpirun can end before its ranks: Open MPI 6's prterun returns on
 * Ctrl-C about a second before its ranks have finished their exit, and
 * Open MPI 4.1's mpirun, sent a second SIGTERM, exits at once while they still
 * run.  The shell's prompt (or `timeout`'s end, or a batch script's next
 * line) then came while the job still ran and held its files.  hvdrun
 * makes itself the subreaper of what it starts (PR_SET_CHILD_SUBREAPER):
 * a rank, a DataLoader worker or a rank's reaper whose parent ends becomes
 * hvdrun's child, and hvdrun waits for them all after the launcher's end,
 * up to ORPHAN_WAIT_S; what is left then is ended (SIGKILL) and said in
 * one line.
 *
 * Signals: a terminal's (Ctrl-C, Ctrl-\: sent by the kernel to the whole
 * foreground process group, the launcher and the ranks in it) reach the
 * job themselves and are not passed on; SIGINT, SIGQUIT, SIGTERM, SIGHUP,
 * SIGUSR1 and SIGUSR2 sent to hvdrun by a process (kill, `timeout`, a
 * batch system) are passed on to the launcher.  One sent to hvdrun's
 * whole process group reaches the launcher twice, and Open MPI 4.1's
 * mpirun ends at once at a second, leaving its ranks: after a stop, what
 * the launcher left gets SIGTERM from hvdrun.  hvdrun ends with the
 * launcher's status, or by its signal.  A launcher whose hvdrun is
 * SIGKILLed gets SIGKILL too (PR_SET_PDEATHSIG), as when hvdrun was the
 * launcher itself. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "supervise.h"
#include "../base/clock.h"
#include "../base/config.h"

#define ORPHAN_WAIT_S 20 /* above a rank's reaper's longest (shim/reaper.c: 10 s, then 5 for its launcher) */

static volatile pid_t launcher;
static volatile sig_atomic_t got, typed; /* the first signal that reached hvdrun; from the terminal */
static volatile sig_atomic_t signals;     /* how many reached it */

static void pass_on(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  if (sig == SIGUSR1 || sig == SIGUSR2) {
    if (launcher > 0) kill(launcher, sig);
    return;
  }
  signals++;
  if (!got) got = sig, typed = si && si->si_code == SI_KERNEL;
  /* (from the terminal: the launcher has it already) */
  if (launcher > 0 && !(si && si->si_code == SI_KERNEL)) kill(launcher, sig);
}

/* SIG to this process's children (the job's processes left) but those in
 * SKIP (the first *NSKIP), which gains them (up to MAX); returns how many. */
static int signal_children(int sig, pid_t *skip, int *nskip, int max) {
  int n = 0;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  pid_t self = getpid();
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end) continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    const char *r = strrchr(buf, ')'); /* pid (comm) state ppid ... */
    char st;
    long ppid;
    if (!r || sscanf(r + 1, " %c %ld", &st, &ppid) != 2 || ppid != self || st == 'Z') continue;
    int seen = 0;
    for (int i = 0; skip && i < *nskip && !seen; i++) seen = skip[i] == (pid_t)pid;
    if (seen || kill((pid_t)pid, sig) != 0) continue;
    n++;
    if (skip && *nskip < max) skip[(*nskip)++] = (pid_t)pid;
  }
  closedir(d);
  return n;
}

/* Reaps every child that has ended, waiting (BLOCK) for one where none
 * has; notes the launcher's status.  0 once no child is left (ECHILD). */
static int reap(int block, pid_t *ended_launcher, int *launcher_status) {
  for (;;) {
    int st;
    pid_t p = waitpid(-1, &st, block ? 0 : WNOHANG);
    if (p > 0) {
      if (p == launcher) *ended_launcher = p, *launcher_status = st;
      if (block) return 1;
      continue;
    }
    if (p < 0 && errno == EINTR) continue;
    return !(p < 0 && errno == ECHILD);
  }
}

/* The ranks of this host note the job's status here when one ends the
 * job with a non-zero status (HVDSHIM_STATUS_FILE, shim/lifecycle.c), and
 * a rank's reaper when its rank was killed or exited non-zero without a
 * word (shim/reaper.c): Open MPI 6's prterun answered such an end (MPI_Abort
 * after a rank's death under ULFM) with status 0 in 3 of 4 runs, and MPICH
 * 4.2's Hydra a rank's SIGKILL in most runs (its proxy takes every rank's
 * status for 0 once a second one's PMI socket closes: MPICH issue 7057).
 * A line each: CODE RANK SIGNAL WHEN (SIGNAL -1: the rank's status was not
 * seen, its launcher reaped it first; WHEN: this host's monotonic clock, in
 * ms, as the reaper woke: the ranks the launcher kills after a death can
 * wake theirs first).  Returns the job's code, 0 where nothing was noted,
 * and says in WHY what was: a rank that ended the job with its status, or
 * the ranks that ended abnormally, in the order noted, with the signal
 * where it was seen (the code: 128 + the first signal seen, else 1).  The
 * file is removed. */
#define NOTED_SHOWN 4
static int job_status(const char *path, char *why, size_t n) {
  struct { int code, rank, sig; long t; } e[NOTED_SHOWN], x;
  int k = 0, more = 0;
  FILE *f = fopen(path, "r");
  while (f && fscanf(f, "%d %d %d %ld", &x.code, &x.rank, &x.sig, &x.t) == 4) {
    if (x.code < 1 || x.code > 255) continue;
    int at = k; /* (in time order; the earliest NOTED_SHOWN kept) */
    while (at > 0 && x.t < e[at - 1].t) at--;
    if (at == NOTED_SHOWN) {
      more++;
      continue;
    }
    if (k == NOTED_SHOWN) more++;
    else k++;
    memmove(&e[at + 1], &e[at], (size_t)(k - 1 - at) * sizeof *e);
    e[at] = x;
  }
  if (f) fclose(f);
  unlink(path);
  if (!k) return 0;
  if (e[0].sig == 0) {
    snprintf(why, n, "rank %d ended the job with status %d", e[0].rank, e[0].code);
    return e[0].code;
  }
  int code = 0;
  size_t len = (size_t)snprintf(why, n, "rank%s ", k > 1 || more ? "s" : "");
  for (int i = 0; i < k && len < n; i++) {
    const char *abbrev = e[i].sig > 0 ? sigabbrev_np(e[i].sig) : NULL;
    if (e[i].sig > 0 && !code) code = e[i].code;
    len += (size_t)snprintf(why + len, n - len, "%s%d", i ? ", " : "", e[i].rank);
    if (len < n && e[i].sig > 0) len += (size_t)snprintf(why + len, n - len, " (SIG%s)", abbrev ? abbrev : "?");
    if (len < n && e[i].sig == 0) len += (size_t)snprintf(why + len, n - len, " (status %d)", e[i].code);
  }
  if (more && len < n) len += (size_t)snprintf(why + len, n - len, " and %d more", more);
  if (len < n) snprintf(why + len, n - len, " ended abnormally (killed or crashed)");
  return code ? code : e[0].code;
}

int hvd_supervise(const char *exe, char **argv) {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) { /* (Linux before 3.4): be the launcher, as before */
    execv(exe, argv);
    fprintf(stderr, "hvdrun: cannot run %s: %s\n", exe, strerror(errno));
    return 2;
  }
  static const int passed[] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
  sigset_t all, old;
  sigemptyset(&all);
  for (size_t i = 0; i < sizeof passed / sizeof *passed; i++) sigaddset(&all, passed[i]);
  sigprocmask(SIG_BLOCK, &all, &old); /* (until the handlers know the launcher) */
  pid_t self = getpid();
  char status_path[96];
  snprintf(status_path, sizeof status_path, HVD_STATUS_FILE_FORMAT, (long)self, (unsigned long)getuid());
  unlink(status_path); /* (a killed hvdrun's of the same pid) */
  fflush(NULL);
  pid_t c = fork();
  if (c < 0) {
    fprintf(stderr, "hvdrun: fork: %s\n", strerror(errno));
    return 2;
  }
  if (c == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != self) _exit(2); /* hvdrun ended before the tie */
    prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0); /* (not inherited; said for clarity) */
    sigprocmask(SIG_SETMASK, &old, NULL);
    setenv("HVDSHIM_STATUS_FILE", status_path, 1); /* (not in the -x list; where passed to other hosts, unused there) */
    execv(exe, argv);
    fprintf(stderr, "hvdrun: cannot run %s: %s\n", exe, strerror(errno));
    _exit(2);
  }
  launcher = c;
  struct sigaction sa = {0};
  sa.sa_sigaction = pass_on;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof passed / sizeof *passed; i++) sigaction(passed[i], &sa, NULL);
  sigprocmask(SIG_SETMASK, &old, NULL);

  pid_t ended = 0;
  int status = 0;
  while (!ended && reap(1, &ended, &status)) { /* the launcher runs (orphans reaped on the way) */
  }
  launcher = 0; /* (its pid may be reused: signals now reach the job themselves) */
  double deadline = hvd_mono_s() + ORPHAN_WAIT_S, next_term = 0;
  int killed = 0, before = signals;
  static pid_t termed[1024];
  int ntermed = 0;
  while (reap(0, &ended, &status)) { /* what it left: ranks ending, reapers cleaning up */
    if (signals != before && !killed) deadline = 0; /* (Ctrl-C again while it waits: no more waiting) */
    /* Stopped by a signal: a launcher sent two (Open MPI 4.1's mpirun, by
     * `timeout`, a batch system or a kill of the whole process group: one
     * to it, one passed on by hvdrun) ends at once and leaves its ranks
     * running.  Each process it left (a rank: its reaper ignores it) gets
     * SIGTERM, once, so the script's cleanup runs as after the launcher's
     * own; one orphaned later (a wrapper shell's child) too. */
    if (got && !killed && hvd_mono_s() >= next_term) {
      signal_children(SIGTERM, termed, &ntermed, (int)(sizeof termed / sizeof *termed));
      next_term = hvd_mono_s() + 0.1;
    }
    if (hvd_mono_s() > deadline) {
      if (killed) break; /* (SIGKILLed and still there: stuck in the kernel) */
      int n = signal_children(SIGKILL, NULL, NULL, 0);
      if (n && deadline)
        fprintf(stderr, "hvdrun: %d process(es) of the job still ran %d s after %s ended; ended them (SIGKILL)\n", n,
                ORPHAN_WAIT_S, argv[0]);
      else if (n)
        fprintf(stderr, "hvdrun: %d process(es) of the job still ran at a second signal; ended them (SIGKILL)\n", n);
      killed = 1;
      deadline = hvd_mono_s() + 5;
    }
    hvd_nap_ms(10);
  }
  char why[512];
  int code = job_status(status_path, why, sizeof why);
  /* Ends as the launcher did, or, where a signal stopped the job (the
   * launcher's status not 0), as that signal would have ended hvdrun
   * itself (the shell's 130 for Ctrl-C, 143 for SIGTERM). */
  int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  int stopped = got && !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (stopped) {
    const char *what = got == SIGINT    ? (typed ? "SIGINT (Ctrl-C)" : "SIGINT")
                       : got == SIGTERM ? "SIGTERM"
                       : got == SIGHUP  ? "SIGHUP"
                                        : "SIGQUIT";
    fprintf(stderr, "hvdrun: %s: the job has ended%s\n", what, killed ? "" : ", none of its processes left");
    sig = got;
  }
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGKILL || sig == SIGPIPE) { /* (none dumps core) */
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, NULL);
    fflush(NULL);
    raise(sig);
  }
  if (sig) return 128 + sig;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && code) {
    fprintf(stderr, "hvdrun: %s, and %s ended with 0 all the same; hvdrun ends with %d\n", why, argv[0], code);
    return code;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
