/* Dead-peer detection: a watchdog thread that ends the job when the engine
 * waits in a collective for a rank that no longer exists.
 *
 * MPI gives no portable failure notice: over shared memory a collective
 * with a dead peer simply never completes, and mpirun started with
 * `--enable-recovery` (or a launcher that does not kill the job) leaves the
 * survivors waiting forever.  The engine marks the stretches where it is
 * blocked in communication (busy) and each completed step (tick); the
 * watchdog, once a second:
 *   - checks the processes of the ranks on this host (pid, same pid
 *     namespace): one that is gone while the engine has been blocked for
 *     more than HVD_LIVENESS_LOCAL_S ends the job, naming it;
 *   - ends the job when the engine has been blocked without a tick for
 *     HVDSHIM_PEER_TIMEOUT_SECONDS (peers on other hosts cannot be checked
 *     directly; they are named as unverified).
 * An engine that is idle or computing is never judged: only waits. */
#ifndef HVD_LIVENESS_H
#define HVD_LIVENESS_H

#include <mpi.h>
#include <stddef.h>
#include <sys/types.h>

#define HVD_LIVENESS_LOCAL_S 2.0

/* Collective over comm (exchanges pid, host and pid namespace), then starts
 * the watchdog unless watchdog is 0 (elastic jobs: the table only, for
 * hvd_liveness_seen_gone).  peer_timeout_s 0 disables the no-progress rule.
 * Returns 0, or -1 with a message in err. */
int hvd_liveness_start(MPI_Comm comm, int rank, int size, int watchdog, double peer_timeout_s, char *err, size_t errlen);
/* Rank r of the table's communicator is a process of this host that has
 * ended (seen, not inferred: 0 for a rank on another host; one still there
 * is watched for a second).  who: "rank r (pid P on HOST)". */
int hvd_liveness_seen_gone(int r, char *who, size_t n);
/* Engine thread: busy 1 before a wait on peers, 0 when it has none. */
void hvd_liveness_busy(int busy);
/* Engine thread: a collective step completed (peers are alive). */
void hvd_liveness_tick(void);
/* Stops and joins the watchdog (before MPI is finalized). */
void hvd_liveness_stop(void);
/* Whether the watchdog thread runs in this process now.  Async-signal-safe. */
int hvd_liveness_watching(void);
/* A process of this host (same pid namespace): 'D' dead (gone, or a zombie
 * its parent has not reaped), 'S' stopped (SIGSTOP, a debugger), 'A' alive.
 * Also the elastic shared-memory waits' check of their peers. */
char hvd_process_state(pid_t pid);
/* Forked child: the watchdog thread does not exist there. */
void hvd_liveness_forked_child(void);

#endif
