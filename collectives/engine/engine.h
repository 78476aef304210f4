/* Engine lifecycle, called by shim/lifecycle.c.  The public entry points
 * (hvd_*_async, hvd_barrier, hvd_rank, ...) are in engine_api.c; the
 * engine's stages and their state: engine_internal.h. */
#ifndef HVD_ENGINE_H
#define HVD_ENGINE_H

#include <stddef.h>

#include "../hvdshim.h"

typedef struct hvd_engine hvd_engine;

/* What the engine needs from the layers above, given at start: the engine
 * never calls into them by name. */
typedef struct {
  /* Ends this process at once with `code` (no atexit handlers, no stdio
   * flush): the last resort when MPI_Abort does not end the job in time.
   * NULL: the exit_group system call. */
  void (*end_process)(int code);
  /* This process is about to end the job (MPI_Abort) with status `code`,
   * or its part of it (too few survivors, a side cut off from rank 0), and
   * may not get to say more: async-signal-safe.  NULL: nothing. */
  void (*ending_job)(int code);
} hvd_engine_host;

/* Initialize or adopt MPI, create the communicator, start the thread.
 * Returns HVD_OK or an error with a one-line reason in err. */
hvd_status_t hvd_engine_start(const hvd_engine_host *host, char *err, size_t errlen);
/* Drain (bounded), stop the thread, finalize MPI if the engine initialized
 * it.  Safe to call more than once and when never started. */
void hvd_engine_stop(void);
/* In a forked child: the thread does not exist there; refuse all work. */
void hvd_engine_forked_child(void);
/* Initialize MPI now, for an engine that will start later (and own it).
 * 1 when initialized; 0 when MPI was up already, the start was tried
 * before, or MPI_Init_thread failed (hvd_engine_start reports it). */
int hvd_engine_mpi_early(void);
/* That start (waited for while another thread makes it): 1 when it
 * initialized MPI, -1 when it failed, 0 when there was none. */
int hvd_engine_mpi_early_wait(void);
/* The host's probe, asked while MPI_Init waits (from 2 s on, every 0.5 s):
 * 1, naming it into WHO, where a rank of the job has ended before it
 * started MPI; the engine then ends this process with one line. */
void hvd_engine_set_start_probe(int (*gone)(char *who, size_t n));

#endif
