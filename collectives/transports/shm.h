/* Shared-memory allreduce between the ranks of one host (HVDSHIM_SHM).
 *
 * At the start every host's ranks map one segment (POSIX shared memory,
 * unlinked as soon as all have mapped it, so nothing is left in /dev/shm
 * after a crash).  Each rank owns a region: two flag words and two buffers
 * of HVDSHIM_SHM_BUFFER bytes, used in turn by consecutive pieces (a large
 * piece after one of the same length and element size takes the same
 * buffer: see next_buffer in shm.c), and a control area (see
 * hvd_shm_control).  A piece
 * of an allreduce group:
 *   1. every rank packs its piece (large pieces: all but its own slice)
 *      into its own buffer and raises `arrive`;
 *   2. small piece (<= HVD_SHM_SMALL bytes): every rank sums all buffers in
 *      local-rank order into a private copy (one sync point, the same result
 *      everywhere);
 *      larger: each rank reduces its own slice from its tensors and the
 *      others' buffers into its buffer (and back into its tensors) and
 *      raises `reduced`; then copies the other slices out of their owners'
 *      buffers;
 *   3. the copy out divides by each tensor's divisor (averages).
 * Across hosts (the same number of ranks on each), the slice is allreduced
 * with MPI among the ranks of equal local rank before `reduced`: a local
 * reduce-scatter, one MPI allreduce per slice across hosts, a local
 * allgather.  A buffer taken in turn is written again two pieces later,
 * when every peer has raised `arrive` for the piece in between, so it has
 * read the old one.
 * Waits spin (with two CPUs per rank; with one, only while a user thread
 * waits for the cycle), then yield, then nap; a dead
 * peer is caught by the liveness watchdog (the engine is marked busy while
 * it executes), or in an elastic job (watch) by the waits themselves: they
 * check the host's peers' processes every 20 ms, and an operation whose
 * peer has died fails.  Engine thread only. */
#ifndef HVD_SHM_H
#define HVD_SHM_H

#include <mpi.h>
#include <stddef.h>

#include "backend_mpi.h"
#include "fusion.h"

#define HVD_SHM_SMALL 16384
#define HVD_SHM_PEER_DIED (-7) /* hvd_shm_allreduce_group: a peer of this host died (watch) */

/* Collective over comm.  mode 0: off.  hosts_override > 0 (tests): treat
 * consecutive blocks of ranks as that many hosts.  waiters: how many user
 * threads wait for the engine now (the waits spin while one does, where
 * the host has a core per rank); given by the engine, which owns them.  Sets up the segment when
 * every host runs the same number (>= 2) of ranks and every rank could map
 * it; otherwise stays inactive (MPI only), with the reason logged.  Returns
 * 0, or -1 (with err) when an MPI call failed. */
int hvd_shm_start(MPI_Comm comm, int rank, int size, int mode, int watch, size_t buffer, int hosts_override,
                  size_t control_words, int (*waiters)(void), char *err, size_t errlen);
int hvd_shm_active(void);
/* "2 ranks per host x 1 host" or the reason it is off (for the start line). */
const char *hvd_shm_describe(void);
/* Allreduce a group of same-dtype host tensors between all ranks of the job
 * (set 0).  Returns an MPI error code (the cross-host step's), or
 * HVD_SHM_PEER_DIED. */
int hvd_shm_allreduce_group(const hvd_fuse_entry *e, size_t n, hvd_dtype_t dtype, hvd_op_t op, hvd_phase_times *t);
/* The engine's control round (a bitwise AND of every rank's vector of
 * control_words words) through the segment, when every rank of the job is
 * on this host: each rank writes its vector (two copies, used in turn, as
 * the data buffers), raises its round count and wakes the peers asleep on
 * it (a futex); a rank waits for each peer's count (the data path's spin,
 * then sleep on the peer's futex word), then ANDs every vector.  Returns 0 (nothing
 * done: use MPI) when the job spans hosts or shared memory is off, 1 when
 * done, -1 when a peer died (watch). */
int hvd_shm_control(uint64_t *v);
/* The death a wait found, in words. */
const char *hvd_shm_death(void);
/* Unmaps the segment; frees the communicators when mpi_up.  Local: no peer
 * is waited for. */
void hvd_shm_stop(int mpi_up);

#endif
