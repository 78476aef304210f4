/* Handle table: what a user thread waits on.  The engine thread completes
 * handles; user threads wait, test and release them.  One mutex guards the
 * table; completion broadcasts one condition variable.  Callbacks run on the
 * engine thread with no lock held. */
#ifndef HVD_HANDLES_H
#define HVD_HANDLES_H

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
/* Nanoseconds user threads have spent blocked in hvd_wait (and the
 * allgather wait) for operations not yet complete, summed over threads. */
uint64_t hvd_handles_blocked_ns(void);
/* A user thread waits for a completion now, or one stopped waiting less than
 * recent_s ago (a wait that ends and begins again is still waiting). */
int hvd_handles_waiting(double recent_s);
/* User threads blocked in a wait now (no lock: for a wait loop to poll). */
int hvd_handles_waiters(void);
void hvd_handles_reset(void); /* after fork: the child gets an empty table */
/* A thread waiting without a timeout calls help(arg, h, 1) while its handle
 * h is not done: 1 when it ran a cycle of the engine or found h done (it
 * looks again), 0 when it cannot now (it sleeps until a completion).
 * hvd_test of a handle not done, and a wait with a timeout, call
 * help(arg, h, 0): a result is wanted, but this thread runs no cycle.
 * NULL: none. */
void hvd_handles_set_helper(int (*help)(void *, hvd_handle_t, int), void *arg);
/* 1 when h has completed (or is not a handle): nothing to wait for. */
int hvd_handles_done(hvd_handle_t h);

#endif
