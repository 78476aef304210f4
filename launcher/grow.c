/* hvdrun --host-discovery-script S [--max-np N]: a job that grows when
 * hosts join and shrinks when they leave (Horovod's contract: S prints one
 * "host" or "host:slots" line per host that can run ranks, and is run again
 * and again).
 *
 * MPI cannot add ranks to a running job here (Open MPI's MPI_Comm_spawn
 * fails under ULFM: open-mpi/ompi#12585), so a job grows (or shrinks) by restarting:
 *   1. hvdrun runs itself as a child over the slots S lists (-np the given
 *      count, -H the hosts), with HVDSHIM_ELASTIC_DISCOVERY, _MAX_NP and
 *      _STATE (a folder) set;
 *   2. rank 0 runs S every HVDSHIM_ELASTIC_INTERVAL seconds; when S lists
 *      more slots than ranks (up to --max-np), or no longer lists a host or
 *      slots the job runs on (HVDSHIM_ELASTIC_HOSTS: each host's ranks),
 *      every rank stops at the next optimizer step, rank 0 saves the job's
 *      state in the folder (snapshot.pt), and every rank ends, status 0;
 *   3. hvdrun runs S once more and starts the job again over the slots listed
 *      (hosts it ran on before first, so rank 0 is on the host of the
 *      saved state) with HVDSHIM_ELASTIC_RESUME=1: each rank runs the
 *      script from its start, its loaders empty and its output going
 *      nowhere until it is back at the step where the job stopped, takes
 *      the saved state and goes on.
 * Any other end of the job is hvdrun's end, with its status. */
#define _GNU_SOURCE
#include "grow.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../base/clock.h"

static volatile pid_t child;
static volatile sig_atomic_t stop_sig; /* SIGINT, SIGTERM or SIGHUP came: the job is not started again */

static void forward(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  stop_sig = sig;
  if (child > 0 && !(si && si->si_code == SI_KERNEL)) kill(child, sig); /* (from the terminal: the job has it already) */
}

/* S's hosts, in the order of `before` (the hosts of the last run) and then
 * S's, as a -H list; returns the slots, -1 when S failed (said). */
static long discover(const char *script, char *list, size_t len, const char *before) {
  FILE *p = popen(script, "r");
  if (!p) {
    fprintf(stderr, "hvdrun: cannot run the host discovery script %s: %s\n", script, strerror(errno));
    return -1;
  }
  char names[256][256];
  long slots[256];
  int n = 0;
  char line[512];
  while (fgets(line, sizeof line, p)) {
    char *s = line + strspn(line, " \t");
    s[strcspn(s, " \t\r\n#")] = 0;
    if (!*s) continue;
    char *colon = strrchr(s, ':');
    long k = 1;
    if (colon) {
      char *end;
      k = strtol(colon + 1, &end, 10);
      if (*end || k < 1) {
        fprintf(stderr, "hvdrun: the host discovery script %s printed '%s': not host or host:slots\n", script, s);
        pclose(p);
        return -1;
      }
      *colon = 0;
    }
    if (!*s || strlen(s) >= sizeof names[0]) continue;
    int j = 0;
    while (j < n && strcmp(names[j], s)) j++;
    if (j == n && n < 256) snprintf(names[n], sizeof names[n], "%s", s), slots[n++] = 0;
    if (j < 256) slots[j] = k;
  }
  int st = pclose(p);
  if (st != 0) {
    fprintf(stderr, "hvdrun: the host discovery script %s failed (status %d)\n", script,
            WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    return -1;
  }
  long total = 0;
  size_t at = 0;
  list[0] = 0;
  char done[256] = {0};
  for (int pass = 0; pass < 2; pass++)
    for (int j = 0; j < n; j++) {
      if (done[j]) continue;
      if (pass == 0) { /* hosts of the last run first, in its order: rank 0 stays where the state is */
        char key[260];
        snprintf(key, sizeof key, "%.255s:", names[j]); /* (a name is under 256 bytes) */
        const char *hit = before ? strstr(before, key) : NULL;
        if (!hit || (hit != before && hit[-1] != ',')) continue;
      }
      done[j] = 1;
      total += slots[j];
      at += (size_t)snprintf(list + at, at < len ? len - at : 0, "%s%s:%ld", at ? "," : "", names[j], slots[j]);
    }
  return at < len ? total : -1;
}

/* The hosts of a -H list `hosts` that `np` ranks fill in order (Open MPI's
 * and Hydra's default mapping: a host's slots, then the next host's), each
 * with the ranks it runs ("a:2,b:1"): rank 0 reads it to tell when the
 * script stops listing a host or slots the job runs on. */
static void hosts_used(const char *hosts, long np, char *out, size_t len) {
  size_t at = 0;
  out[0] = 0;
  for (const char *h = hosts; *h && np > 0;) {
    const char *end = h + strcspn(h, ",");
    const char *colon = memrchr(h, ':', (size_t)(end - h));
    long k = colon ? strtol(colon + 1, NULL, 10) : 1;
    long use = k < np ? k : np;
    if (use > 0)
      at += (size_t)snprintf(out + at, at < len ? len - at : 0, "%s%.*s:%ld", at ? "," : "",
                             (int)((colon ? colon : end) - h), h, use);
    np -= use;
    h = *end ? end + 1 : end;
  }
  if (at >= len) out[0] = 0; /* (too long: rank 0 then acts on more slots only) */
}

static int run_child(long np, const char *hosts, char **args, int nargs) {
  char **v = calloc((size_t)nargs + 8, sizeof *v);
  char npv[32];
  snprintf(npv, sizeof npv, "%ld", np);
  int k = 0;
  v[k++] = "/proc/self/exe";
  v[k++] = "-np", v[k++] = npv, v[k++] = "-H", v[k++] = (char *)hosts;
  for (int i = 0; i < nargs; i++) v[k++] = args[i];
  fflush(NULL);
  child = fork();
  if (child < 0) {
    fprintf(stderr, "hvdrun: fork: %s\n", strerror(errno));
    return 2;
  }
  if (child == 0) {
    execv("/proc/self/exe", v);
    fprintf(stderr, "hvdrun: cannot run itself again: %s\n", strerror(errno));
    _exit(2);
  }
  free(v);
  int st;
  while (waitpid(child, &st, 0) < 0 && errno == EINTR) {
  }
  child = 0;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int hvd_grow_supervise(const char *script, long np, long max_np, long min_np, double timeout_s, long reset_limit,
                       char **args, int nargs) {
  char path[PATH_MAX];
  if (!realpath(script, path)) {
    fprintf(stderr, "hvdrun: --host-discovery-script %s: %s\n", script, strerror(errno));
    return 2;
  }
  if (access(path, X_OK) != 0) {
    fprintf(stderr, "hvdrun: --host-discovery-script %s is not executable (chmod +x it)\n", script);
    return 2;
  }
  const char *given = getenv("HVDSHIM_ELASTIC_STATE");
  char state[PATH_MAX];
  int own_state = !(given && *given);
  if (own_state) {
    const char *tmp = getenv("TMPDIR");
    snprintf(state, sizeof state, "%s/hvdrun-grow-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(state)) {
      fprintf(stderr, "hvdrun: cannot make a folder for the job's state (%s): %s\n", state, strerror(errno));
      return 2;
    }
  } else {
    snprintf(state, sizeof state, "%s", given);
  }
  char snap[PATH_MAX + 16];
  snprintf(snap, sizeof snap, "%s/snapshot.pt", state);
  char v[32];
  setenv("HVDSHIM_ELASTIC_DISCOVERY", path, 1);
  snprintf(v, sizeof v, "%ld", max_np);
  setenv("HVDSHIM_ELASTIC_MAX_NP", v, 1);
  setenv("HVDSHIM_ELASTIC_STATE", state, 1);
  setenv("HVDSHIM_ELASTIC_RESUME", "0", 1);
  struct sigaction sa = {0};
  sa.sa_sigaction = forward;
  sa.sa_flags = SA_SIGINFO | SA_RESTART; /* (the discovery script's output read whole: cut short, it dies of SIGPIPE) */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  char hosts[8192] = "", before[8192] = "";
  long want = np, resets = 0;
  int status = 2;
  for (;;) {
    /* wait (bounded) until the script lists slots enough */
    double waited = 0;
    long slots;
    for (;;) {
      if (stop_sig) goto stopped;
      slots = discover(path, hosts, sizeof hosts, before[0] ? before : NULL);
      if (slots < 0) { /* said */
        status = 2;
        goto out;
      }
      /* (after a stop: the slots there, if --min-np of them) */
      long least = before[0] ? (min_np ? min_np : 1) : want;
      if (slots >= least) break;
      if (waited >= timeout_s) {
        fprintf(stderr, "hvdrun: the host discovery script lists %ld slot(s), fewer than the %ld ranks to start, "
                  "after %.0f s (--elastic-timeout)\n", slots, least, waited);
        status = 2;
        goto out;
      }
      hvd_nap_s(1);
      waited += 1;
    }
    if (before[0] && slots < want) want = slots; /* hosts left while the job stopped: it starts over those there */
    if (min_np && want < min_np) {
      fprintf(stderr, "hvdrun: %ld slot(s) listed, fewer than --min-np %ld\n", want, min_np);
      status = 1;
      goto out;
    }
    struct stat was, now;
    int had = stat(snap, &was) == 0;
    char used[8192];
    hosts_used(hosts, want, used, sizeof used);
    setenv("HVDSHIM_ELASTIC_HOSTS", used, 1);
    if (stop_sig) goto stopped;
    status = run_child(want, hosts, args, nargs);
    /* the job stopped to grow or shrink: it ended 0 with its state saved anew */
    if (status != 0 || stat(snap, &now) != 0 ||
        (had && now.st_ino == was.st_ino && now.st_mtim.tv_sec == was.st_mtim.tv_sec &&
         now.st_mtim.tv_nsec == was.st_mtim.tv_nsec))
      break;
    /* the job stopped to change its hosts, its state saved */
    snprintf(before, sizeof before, "%s", hosts);
    if (stop_sig) goto stopped;
    resets++;
    slots = discover(path, hosts, sizeof hosts, before);
    long next = slots > 0 ? slots : want;
    if (max_np && next > max_np) next = max_np;
    fprintf(stderr, "hvdrun: the job stopped to %s; starting it again over %ld rank(s) (was %ld)\n",
            next < want ? "shrink" : "grow", next, want);
    want = next;
    setenv("HVDSHIM_ELASTIC_RESUME", "1", 1);
    if (reset_limit && resets >= reset_limit) { /* Horovod's --reset-limit: this start is the last */
      setenv("HVDSHIM_ELASTIC_DISCOVERY", "", 1);
      fprintf(stderr, "hvdrun: %ld restart(s), --reset-limit %ld: the job changes its hosts no more\n", resets, reset_limit);
    }
  }
  goto out;
stopped: /* ends as the signal would have ended hvdrun itself */
  fprintf(stderr, "hvdrun: %s came %s; the job is not started again\n",
          stop_sig == SIGINT ? "SIGINT" : stop_sig == SIGTERM ? "SIGTERM" : "SIGHUP",
          before[0] ? "while it stopped to change its hosts" : "while waiting for the job's hosts");
  status = 128 + stop_sig;
out:
  if (own_state) {
    unlink(snap);
    rmdir(state);
  }
  return status;
}
