/* Engine lifecycle, called by shim/lifecycle.c.  The public entry points
 * (hvd_*_async, hvd_barrier, hvd_rank, ...) are in engine_api.c; the
 * engine's files and their state: engine_internal.h. */
#ifndef HVD_ENGINE_H
#define HVD_ENGINE_H

#include <stddef.h>

#include "hvdshim.h"

/* Initialize or adopt MPI, create the communicator, start the thread.
 * Returns HVD_OK or an error with a one-line reason in err. */
hvd_status_t hvd_engine_start(char *err, size_t errlen);
/* Drain (bounded), stop the thread, finalize MPI if the engine initialized
 * it.  Safe to call more than once and when never started. */
void hvd_engine_stop(void);
/* In a forked child: the thread does not exist there; refuse all work. */
void hvd_engine_forked_child(void);

#endif
