/* hvdrun: start a command on N ranks with hvdshim preloaded.
 *
 *   hvdrun -np N [-H host[:slots],...] [--hostfile FILE] [--oversubscribe]
 *          [--min-np M] [--verbose] [--dry-run] [--] command [args...]
 *   hvdrun -np N --host-discovery-script S [--max-np M] [--elastic-timeout T]
 *          [--reset-limit K] [...] [--] command [args...]
 *
 * Builds an mpirun command line (Open MPI 4 or 5+, or MPICH's Hydra mpiexec,
 * told apart by --version; or srun's, inside a SLURM allocation) that
 * preloads libhvdshim.so in every rank, local or remote (-x LD_PRELOAD), and
 * forwards every HVDSHIM_* and HOROVOD_* variable of this environment (and
 * OMP_NUM_THREADS, PYTHONPATH when set); adds --allow-run-as-root only when
 * run as root; binds nothing (--bind-to none --map-by slot: the frameworks
 * run their own threads).  -x NAME[=VALUE] (mpirun's flag) forwards NAME
 * too, set to VALUE first where given.  --verbose prints the command it
 * runs, --dry-run prints it and stops.  Every mistake is one line naming it and the fix.
 * It then runs that command as its child and returns once the job's
 * processes on this host are gone, with the launcher's status
 * (supervise.c).
 *
 * --min-np M (Horovod's flag): an elastic job (HVDSHIM_ELASTIC=1,
 * HVDSHIM_ELASTIC_MIN_NP=M): ranks that die no longer end it while M are
 * left.  Needs Open MPI 5+ (ULFM: mpirun --with-ft ulfm); refused by name
 * under Open MPI 4, MPICH and srun.
 *
 * --host-discovery-script S (Horovod's flags for hosts joining and
 * leaving): the job grows or shrinks by restarting over the slots S lists
 * (launcher/grow.c), on any MPI.
 *
 * Under SLURM, srun gets --mpi=pmix when the cluster's MpiDefault is none
 * (ranks started without a PMI plugin cannot find each other) and the user
 * set no SLURM_MPI_TYPE.
 * Environment: HVDRUN_MPIRUN (mpirun to use), HVDRUN_SRUN (srun to use),
 * HVDRUN_LIB (libhvdshim.so to preload). */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../config.h"
#include "grow.h"
#include "libpath.h"
#include "supervise.h"

#ifndef HVD_LIBDIR
#define HVD_LIBDIR "/usr/local/lib"
#endif

extern char **environ;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("hvdrun: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

static void usage(FILE *f) {
  fputs("usage: hvdrun -np N [-H host[:slots],...] [--hostfile FILE] [--oversubscribe] [--verbose] [--dry-run]\n"
        "              [--] command [args...]\n"
        "Runs command on N ranks with libhvdshim.so preloaded (mpirun, or srun inside a SLURM allocation).\n"
        "  -np, -n N          number of ranks\n"
        "  -H, --hosts LIST   hosts and their slots: a:4,b:4 (a host without :slots has 1)\n"
        "  --hostfile FILE    an Open MPI hostfile ('host slots=N' per line)\n"
        "  --oversubscribe    allow more ranks than slots\n"
        "  -x NAME[=VALUE]    set NAME (to VALUE) in every rank's environment (repeatable)\n"
        "  --min-np M         elastic: ranks that die no longer end the job while M are left (Open MPI 5+)\n"
        "  --host-discovery-script S  elastic: S prints host:slots lines; when it lists more slots than ranks,\n"
        "                     or no longer lists a host or slots the job runs on, the job stops at an\n"
        "                     optimizer step and starts again over the slots listed (PyTorch)\n"
        "  --max-np N         the most ranks the job grows to\n"
        "  --elastic-timeout T  seconds to wait for the discovery script to list -np slots (600)\n"
        "  --reset-limit K    restarts to grow or shrink, at most (0: no limit)\n"
        "  -v, --verbose      print the command line before running it\n"
        "  --dry-run          print the command line and exit\n"
        "  -h, --help         print this help and exit\n"
        "  --version          print the version and exit\n"
        "Environment: HVDRUN_MPIRUN, HVDRUN_SRUN, HVDRUN_LIB (what to run and preload); every HVDSHIM_* and\n"
        "HOROVOD_* variable is forwarded to the ranks.\n",
        f);
}

/* ------------------------------------------------------------------ argv */

typedef struct {
  char **v;
  int n, cap;
} argv_t;

static void push(argv_t *a, const char *s) {
  if (a->n + 2 > a->cap) {
    a->cap = a->cap ? a->cap * 2 : 64;
    a->v = realloc(a->v, (size_t)a->cap * sizeof *a->v);
    if (!a->v) die("out of memory");
  }
  a->v[a->n] = strdup(s);
  if (!a->v[a->n]) die("out of memory");
  a->v[++a->n] = NULL;
}

static void pushf(argv_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pushf(argv_t *a, const char *fmt, ...) {
  char *s;
  va_list ap;
  va_start(ap, fmt);
  if (vasprintf(&s, fmt, ap) < 0) die("out of memory");
  va_end(ap);
  push(a, s);
  free(s);
}

/* One argument as a POSIX shell would need it quoted. */
static void print_quoted(FILE *f, const char *s) {
  int plain = *s != 0;
  for (const char *p = s; *p; p++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%", *p)) plain = 0;
  if (plain) {
    fputs(s, f);
    return;
  }
  fputc('\'', f);
  for (const char *p = s; *p; p++) {
    if (*p == '\'') fputs("'\\''", f);
    else fputc(*p, f);
  }
  fputc('\'', f);
}

/* The command line, after the variables set for it (NAME=VALUE ...). */
static void print_argv(FILE *f, const argv_t *env, const argv_t *a) {
  for (int i = 0; i < env->n; i++) {
    print_quoted(f, env->v[i]);
    fputc(' ', f);
  }
  for (int i = 0; i < a->n; i++) {
    if (i) fputc(' ', f);
    print_quoted(f, a->v[i]);
  }
  fputc('\n', f);
}

/* An elastic job across hosts: Open MPI's launcher must notice a host that
 * stops answering (cut off, powered off), or mpirun waits for its daemon
 * forever once the ranks there are gone (the ranks find them dead through
 * ULFM's detector, HVDSHIM_PEER_TIMEOUT_SECONDS: engine_life.c).  TCP
 * keepalive on the launcher's own connections: after the peer timeout of
 * silence, 3 probes 1 s apart, so that the ranks find the loss first (and
 * a cut-off side ends by the rule of hvd_eng_recover, saying why) and
 * mpirun counts the host lost at most 3 s later; a connection with data in
 * flight is not probed.  Through the environment, where a name this
 * version does not know is ignored: PRRTE 3's (Open MPI 5.0) and PRRTE 4's
 * (Open MPI 6) names.  The user's own settings are kept;
 * HVDSHIM_PEER_TIMEOUT_SECONDS=0 adds none. */
static void keepalive(argv_t *envs) {
  const char *pt = getenv("HVDSHIM_PEER_TIMEOUT_SECONDS");
  char *end;
  double t = pt && *pt ? strtod(pt, &end) : 60;
  if (pt && *pt && (*end || !(t >= 0))) return; /* the ranks name the bad value */
  if (t <= 0) return;
  long sec = (long)(t + 0.999);
  static const char *prefixes[] = {"PRTE_MCA_oob_tcp_keepalive_", "PRTE_MCA_prte_keepalive_"};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
    char name[64];
    snprintf(name, sizeof name, "%stime", prefixes[i]);
    if (getenv(name)) continue;
    pushf(envs, "%s=%ld", name, sec);
    pushf(envs, "%sintvl=1", prefixes[i]);
    pushf(envs, "%sprobes=3", prefixes[i]);
  }
}

/* ------------------------------------------------------------------ lookups */

static char *find_in_path(const char *name) {
  const char *path = getenv("PATH");
  if (!path || !*path) return NULL;
  char *copy = strdup(path), *save = NULL;
  if (!copy) return NULL;
  char *found = NULL;
  for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
    char *p;
    if (asprintf(&p, "%s/%s", *d ? d : ".", name) < 0) break;
    if (access(p, X_OK) == 0) found = p;
    else free(p);
  }
  free(copy);
  return found;
}

static long parse_count(const char *what, const char *s) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 1 || v > 1 << 20)
    die("%s: '%s' is not a positive number", what, s);
  return v;
}

/* Whether a boolean setting's value is on (as the library reads it:
 * base/config.c). */
static int setting_on(const char *v) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  for (size_t k = 0; v && k < sizeof yes / sizeof *yes; k++)
    if (!strcasecmp(v, yes[k])) return 1;
  return 0;
}

/* Slots of a -H list ("a:4,b,c:2"). */
static long hosts_slots(const char *list) {
  long total = 0;
  char *copy = strdup(list), *save = NULL;
  if (!copy) die("out of memory");
  for (char *h = strtok_r(copy, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
    char *colon = strrchr(h, ':');
    if (colon == h || !*h) die("-H %s: an empty host name", list);
    if (colon) {
      char what[300];
      snprintf(what, sizeof what, "-H %s (slots of host %.*s)", list, (int)(colon - h), h);
      total += parse_count(what, colon + 1);
    } else {
      total += 1;
    }
  }
  free(copy);
  if (total == 0) die("-H '%s' names no host", list);
  return total;
}

/* Slots of an Open MPI hostfile ("host [slots=N] [max_slots=M]" lines); when
 * list is given, the hosts also as a -H list ("a:4,b:2"), which is how
 * MPICH's Hydra takes them. */
static long hostfile_slots(const char *path, char **list) {
  FILE *f = fopen(path, "r");
  if (!f) die("--hostfile %s: %s", path, strerror(errno));
  char line[1024];
  long total = 0;
  int lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *save = NULL, *host = strtok_r(line, " \t\r\n", &save);
    if (!host) continue;
    long slots = 1;
    for (char *w = strtok_r(NULL, " \t\r\n", &save); w; w = strtok_r(NULL, " \t\r\n", &save)) {
      if (!strncmp(w, "slots=", 6)) {
        char what[1200];
        snprintf(what, sizeof what, "--hostfile %s:%d (slots of host %s)", path, lineno, host);
        slots = parse_count(what, w + 6);
      }
    }
    total += slots;
    if (list) {
      char *grown;
      if (asprintf(&grown, "%s%s%s:%ld", *list ? *list : "", *list ? "," : "", host, slots) < 0) die("out of memory");
      free(*list);
      *list = grown;
    }
  }
  fclose(f);
  if (total == 0) die("--hostfile %s names no host", path);
  return total;
}

/* Which launcher mpirun is: Open MPI's (mpirun/orterun up to 4, prterun from
 * 5) or Hydra (MPICH's and Intel MPI's mpiexec), from its --version. */
enum launcher { LAUNCH_OMPI, LAUNCH_HYDRA };
static enum launcher launcher_kind(const char *mpirun, char *ver, size_t verlen) {
  snprintf(ver, verlen, "unknown");
  if (strchr(mpirun, '\'')) die("HVDRUN_MPIRUN: a path with a quote is not supported (%s)", mpirun);
  char *cmd;
  if (asprintf(&cmd, "'%s' --version 2>&1 </dev/null", mpirun) < 0) die("out of memory");
  FILE *p = popen(cmd, "r");
  free(cmd);
  enum launcher k = LAUNCH_OMPI;
  if (!p) return k;
  char line[512];
  while (fgets(line, sizeof line, p)) {
    line[strcspn(line, "\r\n")] = 0;
    if (strstr(line, "HYDRA") || strstr(line, "Intel(R) MPI")) k = LAUNCH_HYDRA;
    const char *v = strstr(line, "(Open MPI) ");
    if (v) v += strlen("(Open MPI) ");
    else if ((v = strstr(line, "Version:"))) v += strspn(v + 8, " \t") + 8;
    if (v) snprintf(ver, verlen, "%s", v);
  }
  pclose(p);
  return k;
}

/* Whether a launcher of KIND (version VER) starts ranks of the library's
 * MPI (HVD_MPI_FAMILY): Open MPI's mpirun starting an MPICH build, or
 * Hydra an Open MPI one, starts ranks that each find themselves alone.
 * One whose --version names neither is taken as it is. */
static int launcher_fits(enum launcher kind, const char *ver) {
  if (!strcmp(ver, "unknown")) return 1;
  if (!strcmp(HVD_MPI_FAMILY, "mpich")) return kind == LAUNCH_HYDRA;
  if (!strcmp(HVD_MPI_FAMILY, "openmpi")) return kind == LAUNCH_OMPI;
  return 1;
}

/* mpirun on PATH, or, where it is another MPI's than the library's (Debian's
 * alternatives pick one where both are installed), that MPI's own by its
 * Debian name; NULL where there is none.  *KIND and VER: the launcher's. */
static char *find_mpirun(enum launcher *kind, char *ver, size_t verlen) {
  static const char *const names[] = {"mpirun", "mpirun.openmpi", "mpiexec.mpich", "mpirun.mpich", "mpiexec.hydra",
                                      "mpiexec", NULL};
  char *first = NULL, first_ver[128] = "";
  enum launcher first_kind = LAUNCH_OMPI;
  for (const char *const *n = names; *n; n++) {
    char *p = find_in_path(*n);
    if (!p) continue;
    *kind = launcher_kind(p, ver, verlen);
    if (launcher_fits(*kind, ver)) {
      free(first);
      return p;
    }
    if (!first) first = p, first_kind = *kind, snprintf(first_ver, sizeof first_ver, "%s", ver);
    else free(p);
  }
  if (first) *kind = first_kind, snprintf(ver, verlen, "%s", first_ver);
  return first; /* (the caller says it does not fit) */
}

/* srun's --mpi when the cluster sets none: an MPI started by srun needs a
 * PMI plugin (Open MPI: pmix), but clusters whose MpiDefault is "none"
 * start ranks that cannot find each other.  NULL: leave srun's default
 * (the user's SLURM_MPI_TYPE, or the cluster's MpiDefault). */
static const char *srun_mpi(const char *srun) {
  const char *user = getenv("SLURM_MPI_TYPE");
  if (user && *user) return NULL;
  FILE *p = popen("scontrol show config 2>/dev/null </dev/null", "r");
  if (!p) return NULL;
  char line[512];
  int none = 0;
  while (fgets(line, sizeof line, p))
    if (!strncmp(line, "MpiDefault", 10) && strstr(line, "= none")) none = 1;
  pclose(p);
  if (!none || strchr(srun, '\'')) return NULL;
  char *cmd;
  if (asprintf(&cmd, "'%s' --mpi=list 2>&1 </dev/null", srun) < 0) return NULL;
  p = popen(cmd, "r");
  free(cmd);
  if (!p) return NULL;
  int pmix = 0;
  while (fgets(line, sizeof line, p))
    if (strstr(line, "pmix")) pmix = 1;
  pclose(p);
  return pmix ? "pmix" : NULL;
}

/* -x NAME[=VALUE]: NAME a variable name; set here to VALUE where given
 * (srun and Hydra pass this whole environment; Open MPI gets -x NAME), or
 * else set in this environment already. */
static void env_option(argv_t *xs, const char *x) {
  size_t len = strcspn(x, "=");
  int ok = len > 0 && (isalpha((unsigned char)x[0]) || x[0] == '_');
  for (size_t k = 1; ok && k < len; k++) ok = isalnum((unsigned char)x[k]) || x[k] == '_';
  if (!ok) die("-x '%s': not a variable name (-x NAME or -x NAME=VALUE)", x);
  if (x[len] == '=') {
    char *name = strndup(x, len);
    if (!name || setenv(name, x + len + 1, 1) != 0) die("-x '%s': cannot set it", x);
    free(name);
  } else if (!getenv(x)) {
    die("-x %s: %s is not set here; give -x %s=VALUE, or export it first", x, x, x);
  }
  push(xs, x);
}

/* Whether the variable is one hvdrun forwards to Open MPI's ranks anyway. */
static int forwarded_anyway(const char *name, size_t len) {
  return !strncmp(name, "HVDSHIM_", 8) || !strncmp(name, "HOROVOD_", 8) ||
         (len == 15 && !strncmp(name, "OMP_NUM_THREADS", 15)) || (len == 10 && !strncmp(name, "PYTHONPATH", 10)) ||
         (len == 10 && !strncmp(name, "LD_PRELOAD", 10));
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
  long np = 0, min_np = 0, max_np = 0, reset_limit = 0;
  double grow_timeout = 600;
  const char *hosts = NULL, *hostfile = NULL, *discovery = NULL;
  int grow_flags = 0; /* a flag of growing was given */
  int oversub = 0, verbose = 0, dry = 0, i = 1;
  argv_t xs = {0}; /* -x NAME[=VALUE], as given */
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) {
      i++;
      break;
    }
    if (a[0] != '-') break;
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-np") || !strcmp(a, "-n") || !strcmp(a, "--np")) {
      if (!val) die("%s needs a number of ranks", a);
      np = parse_count("-np", val), i++;
    } else if (!strcmp(a, "-H") || !strcmp(a, "--hosts") || !strcmp(a, "--host")) {
      if (!val) die("%s needs a host list such as a:4,b:4", a);
      hosts = val, i++;
    } else if (!strcmp(a, "--hostfile") || !strcmp(a, "-hostfile")) {
      if (!val) die("%s needs a file", a);
      hostfile = val, i++;
    } else if (!strcmp(a, "--oversubscribe")) {
      oversub = 1;
    } else if (!strcmp(a, "-x")) {
      if (!val) die("-x needs a variable: -x NAME (forwarded as set here) or -x NAME=VALUE");
      env_option(&xs, val), i++;
    } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
      verbose = 1;
    } else if (!strcmp(a, "--dry-run")) {
      dry = 1;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--version")) {
      printf("hvdrun (hvdshim) %s\n", PACKAGE_VERSION);
      return 0;
    } else if (!strcmp(a, "--min-np") || !strncmp(a, "--min-np=", 9)) {
      const char *v = a[8] == '=' ? a + 9 : val;
      if (!v) die("--min-np needs the fewest ranks the job goes on with");
      min_np = parse_count("--min-np", v);
      if (a[8] != '=') i++;
    } else if (!strncmp(a, "--max-np", 8) || !strncmp(a, "--host-discovery-script", 23) ||
               !strncmp(a, "--elastic-timeout", 17) || !strncmp(a, "--reset-limit", 13)) {
      /* Horovod's flags for ranks that join (launcher/grow.c) */
      const char *eq = strchr(a, '=');
      const char *v = eq ? eq + 1 : val;
      size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
      if (!v) die("%s needs a value", a);
      if (!eq) i++;
      if (nlen == 8 && !strncmp(a, "--max-np", 8)) max_np = parse_count("--max-np", v);
      else if (nlen == 23 && !strncmp(a, "--host-discovery-script", 23)) discovery = v;
      else if (nlen == 13 && !strncmp(a, "--reset-limit", 13)) reset_limit = parse_count("--reset-limit", v);
      else if (nlen == 17 && !strncmp(a, "--elastic-timeout", 17)) grow_timeout = (double)parse_count("--elastic-timeout", v);
      else die("unknown option '%s' (hvdrun --help lists them)", a);
      grow_flags = 1;
    } else if (!strcmp(a, "--blacklist-cooldown-range")) {
      die("%s: hvdrun does not keep hosts out after failures (Horovod's blacklist); leave it out", a);
    } else {
      die("unknown option '%s' (hvdrun --help lists them; put '--' before a command that starts with '-')", a);
    }
  }
  if (!np) die("-np N is required: the number of ranks (hvdrun -np 2 python3 train.py)");
  if (i >= argc) die("no command to run (hvdrun -np %ld python3 train.py)", np);
  if (hosts && hostfile) die("give -H or --hostfile, not both");
  /* HVDSHIM_ELASTIC=1 set by hand (exported or -x) asks for what --min-np
   * gives: an elastic job, launched with ULFM on (else a rank's death ends
   * it all the same), its fewest ranks HVDSHIM_ELASTIC_MIN_NP's (1 unset) */
  const char *elastic = "--min-np", *min_name = "--min-np"; /* (for the messages) */
  if (!min_np && setting_on(getenv("HVDSHIM_ELASTIC"))) {
    const char *m = getenv("HVDSHIM_ELASTIC_MIN_NP");
    min_np = m && *m ? parse_count("HVDSHIM_ELASTIC_MIN_NP", m) : 1;
    elastic = "HVDSHIM_ELASTIC=1", min_name = "HVDSHIM_ELASTIC_MIN_NP";
  }
  if (min_np > np) die("%s %ld is more than -np %ld", min_name, min_np, np);
  if (grow_flags && !discovery)
    die("--max-np, --elastic-timeout and --reset-limit need --host-discovery-script (the hosts the job may grow onto)");
  if (discovery) {
    if (hosts || hostfile) die("--host-discovery-script lists the hosts: leave out -H and --hostfile");
    if (max_np && max_np < np) die("--max-np %ld is less than -np %ld", max_np, np);
    /* the options each run repeats, then the command */
    char **args = calloc((size_t)(argc - i) + 8 + 2 * (size_t)xs.n, sizeof *args);
    int n = 0;
    char mn[32];
    if (!args) die("out of memory");
    if (oversub) args[n++] = "--oversubscribe";
    if (verbose) args[n++] = "--verbose";
    for (int k = 0; k < xs.n; k++) args[n++] = "-x", args[n++] = xs.v[k];
    if (min_np) snprintf(mn, sizeof mn, "%ld", min_np), args[n++] = "--min-np", args[n++] = mn;
    if (dry) die("--dry-run with --host-discovery-script: the command depends on what the script lists; run "
                 "hvdrun -np N -H HOSTS --dry-run instead");
    args[n++] = "--";
    for (int k = i; k < argc; k++) args[n++] = argv[k];
    return hvd_grow_supervise(discovery, np, max_np, min_np, grow_timeout, reset_limit, args, n);
  }
  if (min_np) { /* forwarded with the other settings below */
    char v[32];
    snprintf(v, sizeof v, "%ld", min_np);
    setenv("HVDSHIM_ELASTIC", "1", 1);
    setenv("HVDSHIM_ELASTIC_MIN_NP", v, 1);
  }

  char looked[4096], lerr[PATH_MAX + 64];
  char *lib = hvd_find_library(HVD_LIBDIR, looked, sizeof looked, lerr, sizeof lerr);
  if (!lib && lerr[0]) die("%s", lerr);
  if (!lib)
    die("libhvdshim.so not found (looked in %s); build it (make) or set HVDRUN_LIB=/path/to/libhvdshim.so", looked);

  argv_t cmd = {0}, envs = {0}; /* envs: NAME=VALUE set for mpirun */
  for (int k = 0; k < xs.n; k++)
    if (strchr(xs.v[k], '=')) push(&envs, xs.v[k]);
  int across = 0;
  const char *slurm = getenv("SLURM_JOB_ID");
  const char *srun_env = getenv("HVDRUN_SRUN");
  char *exe = NULL; /* what execv runs, where argv[0] is not its path */
  char *srun = slurm && *slurm && !hosts && !hostfile ? (srun_env && *srun_env ? strdup(srun_env) : find_in_path("srun"))
                                                      : NULL;
  const char *pre = getenv("LD_PRELOAD");
  char *preload;
  if (asprintf(&preload, "%s%s%s", lib, pre && *pre ? ":" : "", pre && *pre ? pre : "") < 0) die("out of memory");
  if (srun && min_np)
    die("%s: an elastic job needs mpirun (Open MPI 5+ with --with-ft ulfm); srun cannot start one (run hvdrun "
        "with -H or --hostfile inside the allocation)", elastic);
  if (srun) {
    /* srun passes the whole environment by default; LD_PRELOAD is set for
     * the tasks only, not for srun itself. */
    push(&cmd, srun);
    pushf(&cmd, "--ntasks=%ld", np);
    const char *mpi = srun_mpi(srun);
    if (mpi) pushf(&cmd, "--mpi=%s", mpi);
    if (oversub) push(&cmd, "--overcommit");
    pushf(&cmd, "--export=ALL,LD_PRELOAD=%s", preload);
  } else {
    const char *m = getenv("HVDRUN_MPIRUN");
    char ver[128] = "unknown";
    enum launcher kind = LAUNCH_OMPI;
    char *mpirun = m && *m ? strdup(m) : find_mpirun(&kind, ver, sizeof ver);
    if (!mpirun || access(mpirun, X_OK) != 0)
      die("mpirun not found%s (apt-get install %s, or set HVDRUN_MPIRUN=/path/to/mpirun)",
          m && *m ? " at HVDRUN_MPIRUN" : " on PATH", strcmp(HVD_MPI_FAMILY, "mpich") ? "openmpi-bin" : "mpich");
    if (m && *m) kind = launcher_kind(mpirun, ver, sizeof ver);
    long slots;
    char where[64];
    char *filehosts = NULL;
    if (hosts) slots = hosts_slots(hosts), snprintf(where, sizeof where, "in -H");
    else if (hostfile) slots = hostfile_slots(hostfile, &filehosts), snprintf(where, sizeof where, "in the hostfile");
    else {
      slots = sysconf(_SC_NPROCESSORS_ONLN);
      if (slots < 1) slots = 1;
      snprintf(where, sizeof where, "(%ld CPUs on this host)", slots);
    }
    if (np > slots && !oversub)
      die("-np %ld needs %ld slots, but there are %ld %s; add --oversubscribe to run more ranks than slots%s", np, np,
          slots, where, hosts || hostfile ? "" : ", or hosts with -H");
    /* Found on PATH: run it as a shell would, by its name ("mpirun",
     * "mpiexec.mpich").  Open MPI takes an absolute argv[0] as --prefix and
     * puts that folder's bin first on the ranks' PATH, so `python3` there
     * would be /usr/bin/python3 rather than the caller's (a virtual
     * environment's, pyenv's). */
    exe = mpirun;
    push(&cmd, m && *m ? mpirun : strrchr(mpirun, '/') + 1);
    if (min_np && (kind == LAUNCH_HYDRA || atoi(ver) < 5))
      die("%s: an elastic job needs an MPI that survives a peer's death (ULFM: Open MPI 5 or later, as on Debian "
          "trixie and sid); this mpirun is %s %s", elastic, kind == LAUNCH_HYDRA ? "Hydra (MPICH)" : "Open MPI", ver);
    /* (tried on trixie's 5.0.7: PRRTE 3.0 "cannot recover" from a lost
     * daemon, terminates the job and exits 0; sid's Open MPI 6 goes on) */
    across = (hosts && strchr(hosts, ',')) || (filehosts && strchr(filehosts, ','));
    if (min_np && atoi(ver) == 5 && across)
      fprintf(stderr, "hvdrun: warning: %s across hosts under Open MPI %s: a rank that dies is survived, but a "
              "host lost (its Open MPI daemon) ends the whole job, and mpirun then exits 0; Open MPI 6 survives it\n",
              elastic, ver);
    if (!launcher_fits(kind, ver)) { /* (a dry run still shows the line, this one a warning) */
      fprintf(stderr, "hvdrun: %s%s (%s) is %s %s's launcher, but libhvdshim was built with %s: each rank would find "
              "itself alone; install that MPI's (apt-get install %s) or set HVDRUN_MPIRUN to it\n",
              dry ? "warning: " : "", m && *m ? "HVDRUN_MPIRUN" : "mpirun", mpirun,
              kind == LAUNCH_HYDRA ? "Hydra (MPICH)" : "Open MPI", ver,
              strcmp(HVD_MPI_FAMILY, "mpich") ? "Open MPI" : "MPICH",
              strcmp(HVD_MPI_FAMILY, "mpich") ? "openmpi-bin" : "mpich");
      if (!dry) return 2;
    }
    if (kind == LAUNCH_HYDRA) {
      /* Hydra: runs as root, places more ranks than cores, passes the whole
       * environment; LD_PRELOAD for the ranks only (-genv), hosts as a -hosts
       * list (an Open MPI hostfile is translated). */
      push(&cmd, "-n");
      pushf(&cmd, "%ld", np);
      if (hosts || filehosts) push(&cmd, "-hosts"), push(&cmd, hosts ? hosts : filehosts);
      push(&cmd, "-bind-to"), push(&cmd, "none");
      push(&cmd, "-genv"), push(&cmd, "LD_PRELOAD"), push(&cmd, preload);
      free(filehosts);
      goto command;
    }
    free(filehosts);
    if (geteuid() == 0) push(&cmd, "--allow-run-as-root");
    push(&cmd, "-np");
    pushf(&cmd, "%ld", np);
    if (hosts) push(&cmd, "-H"), push(&cmd, hosts);
    if (hostfile) push(&cmd, "--hostfile"), push(&cmd, hostfile);
    push(&cmd, "--bind-to"), push(&cmd, "none");
    /* Open MPI 5+ (prterun) takes oversubscription as a mapping modifier
     * (--oversubscribe is deprecated there) */
    push(&cmd, "--map-by");
    if (oversub && atoi(ver) >= 5) push(&cmd, "slot:OVERSUBSCRIBE");
    else push(&cmd, "slot");
    if (oversub && atoi(ver) < 5) push(&cmd, "--oversubscribe");
    if (min_np) push(&cmd, "--with-ft"), push(&cmd, "ulfm");
    if (min_np && across) keepalive(&envs);
    push(&cmd, "-x");
    pushf(&cmd, "LD_PRELOAD=%s", preload);
    for (char **e = environ; *e; e++) {
      const char *eq = strchr(*e, '=');
      if (!eq) continue;
      int len = (int)(eq - *e);
      if (forwarded_anyway(*e, (size_t)len) && !(len == 10 && !strncmp(*e, "LD_PRELOAD", 10))) {
        push(&cmd, "-x");
        pushf(&cmd, "%.*s", len, *e);
      }
    }
    for (int k = 0; k < xs.n; k++) { /* (-x NAME[=VALUE] not forwarded above; set in this environment) */
      const char *x = xs.v[k];
      size_t len = strcspn(x, "=");
      if (!forwarded_anyway(x, len)) push(&cmd, "-x"), pushf(&cmd, "%.*s", (int)len, x);
    }
  }
command:
  free(srun);
  free(preload);
  free(lib);
  for (; i < argc; i++) push(&cmd, argv[i]);
  for (int k = 0; k < envs.n; k++) putenv(envs.v[k]);
  if (dry) {
    print_argv(stdout, &envs, &cmd);
    return 0;
  }
  if (verbose) {
    fputs("hvdrun: ", stderr);
    print_argv(stderr, &envs, &cmd);
  }
  return hvd_supervise(exe ? exe : cmd.v[0], cmd.v);
}
