/* Role facts (ground floor, base/role.c): the role of this process and the
 * launcher's environment. */
#ifndef HVD_ROLE_H
#define HVD_ROLE_H

#include <stddef.h>

typedef enum {
  HVD_ROLE_DORMANT = 0,  /* not a rank, or a child of an active rank */
  HVD_ROLE_DISABLED = 1, /* HVDSHIM_DISABLE=1, or a setuid/setgid process */
  HVD_ROLE_ARMED = 2,    /* a rank process, nothing started yet */
  HVD_ROLE_ACTIVE = 3,   /* MPI and the engine thread are up */
  HVD_ROLE_FORKED = 4,   /* forked child of an armed or active rank */
  HVD_ROLE_FINALIZED = 5
} hvd_role_t;

hvd_role_t hvd_shim_role(void);
void hvd_role_set(hvd_role_t role); /* the constructor, hvd_init and the fork handler */
const char *hvd_role_name(hvd_role_t role);
/* Elastic (HVDSHIM_ELASTIC): the death of the job's rank 0 made this process
 * rank 0.  The engine raises it when it has rebuilt the job over the
 * survivors (whether or not the script has taken the change in yet); the
 * overlay reads it at every call it interposes and hands the files and the
 * console over (hooks/overlay.c). */
extern volatile int hvd_role_rank0_now;
static inline void hvd_role_became_rank0(void) { __atomic_store_n(&hvd_role_rank0_now, 1, __ATOMIC_RELEASE); }
static inline int hvd_role_is_new_rank0(void) { return __atomic_load_n(&hvd_role_rank0_now, __ATOMIC_ACQUIRE); }
/* Rank from the launcher's environment (OpenMPI, PMIx, MPICH/Hydra, SLURM),
 * or -1.  Sets *local_rank too (-1 if unknown). */
int hvd_env_rank(int *local_rank);
/* The same, read from another process's environment block (the contents
 * of /proc/PID/environ, LEN bytes). */
int hvd_env_block_rank(const char *blk, size_t len, int *local_rank);
/* Ranks on this host from the launcher's environment, or -1. */
int hvd_env_local_size(void);
/* Ranks in the job from the launcher's environment, or -1. */
int hvd_env_size(void);
/* The same, from an MPI launcher's own variable alone (Open MPI's
 * OMPI_COMM_WORLD_SIZE, a PMI launcher's PMI_SIZE: MPICH's Hydra), named
 * into *VAR; -1 where neither is set. */
int hvd_env_launcher_size(const char **var);

#endif
