/* Role facts, on the ground floor: this process's role (decided by the
 * constructor in shim/lifecycle.c, read by everyone) and what the launcher's
 * environment says about rank, size and local ranks.  Uses nothing above
 * base/. */
#include "role.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static volatile hvd_role_t role = HVD_ROLE_DORMANT;
volatile int hvd_role_rank0_now;

hvd_role_t hvd_shim_role(void) { return role; }
void hvd_role_set(hvd_role_t r) { role = r; }

const char *hvd_role_name(hvd_role_t r) {
  static const char *names[] = {"dormant", "disabled", "armed", "active", "forked child", "finalized"};
  return (unsigned)r < sizeof names / sizeof *names ? names[r] : "unknown";
}

/* Where the variables are read: this process's environment, or a block
 * of another process's (/proc/PID/environ: NAME=VALUE strings, each ended
 * by a NUL). */
typedef struct {
  const char *blk;
  size_t len;
} env_src;

static const char *lookup(const env_src *src, const char *name) {
  if (!src) return getenv(name);
  size_t n = strlen(name);
  for (size_t i = 0; i < src->len; i += strnlen(src->blk + i, src->len - i) + 1)
    if (!strncmp(src->blk + i, name, n) && src->blk[i + n] == '=') return src->blk + i + n + 1;
  return NULL;
}

static int env_int(const env_src *src, const char *name, int *out) {
  const char *v = lookup(src, name);
  if (!v || !*v) return 0;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < 0 || x > 1 << 30) return 0;
  *out = (int)x;
  return 1;
}

/* The launchers' variables, one list each, first set wins: Open MPI,
 * PMIx, PMI (MPICH's Hydra), SLURM.  SLURM_PROCID makes a rank only in a
 * multi-task step (SLURM sets it in every step, also for one task). */
static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", NULL};
static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL};
static const char *const local_rank_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                                              "SLURM_LOCALID", NULL};
static const char *const local_size_vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE",
                                              "SLURM_NTASKS_PER_NODE", NULL};

static int env_first(const env_src *src, const char *const *names, int *out) {
  for (; *names; names++)
    if (env_int(src, *names, out)) return 1;
  return 0;
}

static int rank_of(const env_src *src, int *local_rank) {
  int rank = -1, lr = -1, ntasks = 0;
  if (!env_first(src, rank_vars, &rank) && env_int(src, "SLURM_PROCID", &rank) &&
      !(env_int(src, "SLURM_NTASKS", &ntasks) && ntasks > 1))
    rank = -1;
  if (!env_first(src, local_rank_vars, &lr)) lr = -1;
  if (local_rank) *local_rank = rank >= 0 ? lr : -1;
  return rank;
}

int hvd_env_rank(int *local_rank) { return rank_of(NULL, local_rank); }

int hvd_env_block_rank(const char *blk, size_t len, int *local_rank) {
  env_src src = {blk, len};
  return rank_of(&src, local_rank);
}

int hvd_env_local_size(void) {
  int ls = -1;
  return env_first(NULL, local_size_vars, &ls) ? ls : -1;
}

int hvd_env_launcher_size(const char **var) {
  static const char *const launchers[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
  int s = -1;
  for (const char *const *v = launchers; *v; v++)
    if (env_int(NULL, *v, &s)) {
      if (var) *var = *v;
      return s;
    }
  return -1;
}

int hvd_env_size(void) {
  int s = -1;
  return env_first(NULL, size_vars, &s) ? s : -1;
}
