/* The _exit interposers (hooks/exit.c).  What an exit that skips the exit
 * handlers means for the job is the lifecycle's: it registers its handler
 * (shim/lifecycle.c), so hooks/ never calls up into shim/. */
#ifndef HVD_EXIT_HOOKS_H
#define HVD_EXIT_HOOKS_H

/* Run `fn(status, by_runtime)` in _exit and _Exit, before the process
 * ends; by_runtime: the caller is the MPI runtime (or NCCL, CUDA), not the
 * program (Open MPI's handler of another rank's abort ends this one so). */
void hvd_exit_hooks_on_exit(void (*fn)(int status, int by_runtime));

#endif
