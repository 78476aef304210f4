/* Handle table: what a user thread waits on.  The engine thread completes
 * handles; user threads wait, test and release them (the waits themselves,
 * which may run the engine's cycle, are the engine's: engine_drive.c).  One
 * mutex guards the table; completion broadcasts one condition variable.
 * Callbacks run on the engine thread with no lock held.  Calls nothing of
 * the engine's. */
#ifndef HVD_HANDLES_H
#define HVD_HANDLES_H

#include <stdint.h>
#include <time.h>

#include "../gpu/gpu.h"
#include "../hvdshim.h"

/* stream: a GPU operation's stream (made to wait for the result when the
 * handle is finished), else NULL. */
hvd_status_t hvd_handles_new(hvd_callback_t cb, void *cb_arg, void *stream, hvd_handle_t *out);
/* Marks the handle done (msg may be NULL; gathered: a malloc'd buffer whose
 * ownership passes to the table, freed at release unless taken), then runs
 * the callback if any and releases the handle after it. */
void hvd_handles_complete(hvd_handle_t h, hvd_status_t st, const char *msg, void *gathered, size_t rows);
/* Completes n handles with HVD_OK under one lock and one wake-up (a fused
 * group); callbacks, if any, run afterwards without the lock.  ev: a GPU
 * group's "done" event (each handle takes a reference; its stream waits on
 * it when the handle is finished), or NULL. */
void hvd_handles_complete_ok(const hvd_handle_t *hs, size_t n, hvd_gpu_event *ev);
/* Elastic jobs (engine thread): while holding, completions are kept from
 * the waiting threads (their handles stay pending) until published: as
 * they are (st HVD_OK), or all failed with st and msg (their results
 * dropped).  An operation is done on every survivor or on none: the
 * engine publishes a cycle's completions once the next round has shown
 * every rank got through that cycle. */
void hvd_handles_hold(int on);
size_t hvd_handles_held(void);
void hvd_handles_publish_held(hvd_status_t st, const char *msg);
/* Thread-local last error message. */
void hvd_set_last_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Pending (not yet completed) handles: for the memory test and stats. */
size_t hvd_handles_live(void);
/* Nanoseconds user threads have spent blocked in a wait (hvd_wait, the
 * allgather wait) for operations not yet complete, summed over threads. */
uint64_t hvd_handles_blocked_ns(void);
/* A user thread waits for a completion now, or one stopped waiting less than
 * recent_s ago (a wait that ends and begins again is still waiting). */
int hvd_handles_waiting(double recent_s);
/* User threads blocked in a wait now (no lock: for a wait loop to poll). */
int hvd_handles_waiters(void);
void hvd_handles_reset(void); /* after fork: the child gets an empty table */

/* The waits' steps (the engine's waits, engine_drive.c, put them together
 * with the engine's cycle):
 *   hvd_handles_test: *done, or HVD_ERR_INVALID for an unknown handle;
 *   hvd_handles_wait_begin: HVD_ERR_INVALID for an unknown handle or one
 *     with a callback (fn names the call in the message); else *since is
 *     when the thread began blocking (0: h was done already) and it counts
 *     as a waiter until the wait ends;
 *   hvd_handles_sleep: until a completion (of any handle) or the deadline
 *     (CLOCK_REALTIME; NULL: none): 1 when h is done, 0 when not yet, -1
 *     when the deadline passed with h not done;
 *   hvd_handles_wait_abandon: a wait given up (a timeout): h stays pending;
 *   hvd_handles_wait_end: h is done: its status (its message as the last
 *     error), an allgather's result into out and total_rows when out is
 *     given; the handle is released, and a GPU result ordered before later
 *     work on its stream. */
hvd_status_t hvd_handles_test(hvd_handle_t h, int *done);
hvd_status_t hvd_handles_wait_begin(hvd_handle_t h, const char *fn, uint64_t *since);
int hvd_handles_sleep(hvd_handle_t h, const struct timespec *deadline);
void hvd_handles_wait_abandon(uint64_t since);
hvd_status_t hvd_handles_wait_end(hvd_handle_t h, uint64_t since, void **out, size_t *total_rows, const char *fn);
/* 1 when h has completed (or is not a handle): nothing to wait for. */
int hvd_handles_done(hvd_handle_t h);

#endif
