/* The MPI interposers (hooks/mpi.c).  Their one call outward goes through
 * a function the layer above registers (shim/lifecycle.c registers
 * hvd_shutdown), so hooks/ never calls up into shim/. */
#ifndef HVD_MPI_HOOKS_H
#define HVD_MPI_HOOKS_H

/* Run `fn` in the program's MPI_Finalize, before the real one. */
void hvd_mpi_hooks_on_finalize(void (*fn)(void));
/* Run `fn` in the program's MPI_Init and MPI_Init_thread, before the real
 * one (shim/lifecycle.c: an early start of MPI in progress is finished;
 * the program's call then finds MPI up and succeeds). */
void hvd_mpi_hooks_on_init(void (*fn)(void));

#endif
