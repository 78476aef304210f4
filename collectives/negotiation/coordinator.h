/* The coordinator (rank 0's negotiation table and stall inspector), with
 * no MPI: see coordinator.c. */
#ifndef HVD_COORDINATOR_H
#define HVD_COORDINATOR_H

#include <stddef.h>
#include <stdint.h>

#include "../../base/strmap.h"
#include "wire.h"

typedef struct hvd_coord_entry hvd_coord_entry;

typedef struct {
  int size;
  const uint8_t *joined; /* the engine's agreed set of finished ranks (size flags) */
  const int *njoined;    /* and its count */
  double stall_warn, stall_shutdown;
  int (*is_cached)(const char *name, void *ctx); /* the response cache holds name */
  /* rank belongs to process set `set` (NULL: every rank belongs to every set);
   * an operation on a set waits for its members only */
  int (*in_set)(int set, int rank, void *ctx);
  void *ctx;
  hvd_strmap *table, *invalidated; /* name -> entry; names invalidated this round */
  hvd_coord_entry *head, *tail;    /* entries in arrival order */
  hvd_buf *resp;                   /* this round's responses */
  char *fatal_msg;                 /* a stall past HVDSHIM_STALL_SHUTDOWN_SECONDS: sent as FATAL */
  double last_stall_check;
  char last_line[3072]; /* the inspector's last line (tests read it) */
} hvd_coord;

int hvd_coord_init(hvd_coord *k, int size, const uint8_t *joined, const int *njoined, double stall_warn,
                   double stall_shutdown, int (*is_cached)(const char *name, void *ctx), void *ctx);
void hvd_coord_free(hvd_coord *k);
/* One round: rank r's request records are lens[r] bytes at gathered +
 * displs[r]; the responses go to resp (reset first). */
void hvd_coord_round(hvd_coord *k, const char *gathered, const int *lens, const int *displs, double now,
                     hvd_buf *resp);
/* The stall inspector (at most every 0.1 s): the number of lines it wrote. */
int hvd_coord_stall_check(hvd_coord *k, double now);
/* Every rank has been stuck for `window` seconds (waiting on hvdshim,
 * submitting nothing; the engine decides): if operations wait in the table,
 * none can complete, and the job ends with one line naming what each rank
 * waits for (sent as FATAL).  1 when it declared the deadlock. */
int hvd_coord_deadlock(hvd_coord *k, double window);
/* Something waits in the table or a fatal response is due. */
int hvd_coord_busy(const hvd_coord *k);
/* "0-2,5": the ranks (of size) whose flag is set (want 1) or not (want 0). */
void hvd_rank_list(const uint8_t *flags, int size, int want, char *out, size_t n);

#endif
