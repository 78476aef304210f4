/* Chrome-trace timeline (open in Perfetto or chrome://tracing), written by
 * rank 0's engine (whichever thread runs its cycle).  Events are buffered
 * and written once per cycle with a single pwrite() into spaces written
 * ahead of a closing bracket, no event across a page boundary, so the file
 * is valid JSON after every flush and also when the process dies in one
 * (timeline.c says how). */
#ifndef HVD_TIMELINE_H
#define HVD_TIMELINE_H

#include <stddef.h>

/* cont: go on in the file a job before wrote (a restart to grow, a new
 * rank 0 after the first died): its events are kept, the new ones follow
 * them, their times after its last. */
int hvd_timeline_open(const char *path, int cont, char *err, size_t errlen);
int hvd_timeline_enabled(void);
/* A complete ("X") event on the tensor's lane; times in microseconds since
 * the engine started. */
void hvd_timeline_span(const char *tensor, const char *phase, double start_us, double dur_us);
/* An instant marker on the engine lane. */
void hvd_timeline_instant(const char *name, double t_us);
void hvd_timeline_flush(void);
void hvd_timeline_close(void);

#endif
