/* Entry points for the framework adapters shipped with hvdshim (the PyTorch
 * glue reaches them through ctypes), usable before hvd_init.  Exported from
 * libhvdshim.so but not part of the installed public API (hvdshim.h): they
 * may change with the adapter.  Defined in shim/lifecycle.c. */
#ifndef HVD_ADAPTER_API_H
#define HVD_ADAPTER_API_H

#include "hvdshim.h"

/* Rank, size, local rank and size: the engine's once initialized, else the
 * launcher's environment (a process not started by a launcher: 0 of 1). */
HVD_EXPORT void hvd_launch_info(int *rank, int *size, int *local_rank, int *local_size);
/* "dormant", "disabled", "armed", "active", "forked child" or "finalized". */
HVD_EXPORT const char *hvd_role_now(void);
/* Effective value of a setting, by HVDSHIM_* name or Horovod alias, in
 * normalized form (booleans "0"/"1", choices as listed, plain numbers); NULL
 * for an unknown name. */
HVD_EXPORT const char *hvd_config_value(const char *name);
/* One line through hvdshim's logger (prefix, rank, HVDSHIM_LOG_LEVEL);
 * level 0 error, 1 warning, 2 info, 3 debug; `where` names the caller. */
HVD_EXPORT void hvd_log_message(int level, const char *where, const char *msg);
/* Print `msg` as an error and end the whole job (MPI_Abort once the engine
 * runs, else exit(1)): for failures other ranks cannot see. */
HVD_EXPORT void hvd_abort_job(const char *msg) __attribute__((noreturn));
/* A rank process that will distribute a script: initialize MPI now
 * (HVDSHIM_EARLY_MPI), for the engine's start at first use.  1 when
 * initialized. */
HVD_EXPORT int hvd_mpi_early(void);
/* A rank failing, once per process: on a rank > 0, wait a second (or, where
 * rank 0 on this host is failing too, until its process has ended and two
 * seconds after), so that a failure alike on every rank is said and ended
 * by rank 0 alone and a rank's own failure still is (the adapter's error
 * line, then the exit that ends the job); on rank 0, say to the ranks of
 * its host that it is failing (lifecycle.c). */
HVD_EXPORT void hvd_failing_grace(void);
/* `path` removed once this process and every process forked from it are
 * gone, however they end (a SIGKILL too; base/remover.h): a folder that a
 * clean exit removes itself and a killed process would leave (one watcher
 * a process, whatever the number of paths).  0, or -1 where the watcher
 * could not start or the path is empty, too long (PIPE_BUF) or holds a
 * newline. */
HVD_EXPORT int hvd_remove_at_end(const char *path);
/* A file this process is rewriting, put back if it ends before it is done
 * (base/remover.h, hvd_remover_spawn_restore): `backup` is where the old
 * file was moved (`backup`.new, an empty file, where there was none), and
 * the process removes it once `path` is whole; if it is still there when
 * this process and its forks are gone, it goes back to `path` (or `path`
 * is removed).  One watcher a process; each pair is needed once.  0, or -1
 * as hvd_remove_at_end. */
HVD_EXPORT int hvd_restore_at_end(const char *backup, const char *path);

#endif
