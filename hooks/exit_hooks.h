/* The _exit interposers (hooks/exit.c).  What an exit that skips the exit
 * handlers means for the job is the lifecycle's: it registers its handler
 * (shim/lifecycle.c), so hooks/ never calls up into shim/. */
#ifndef HVD_EXIT_HOOKS_H
#define HVD_EXIT_HOOKS_H

/* Run `fn(status)` in _exit and _Exit, before the process ends. */
void hvd_exit_hooks_on_exit(void (*fn)(int status));

#endif
