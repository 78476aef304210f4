/* Response cache: tensors negotiated before, by name, each holding one bit
 * of the per-cycle bitvector.  Every rank applies the same inserts, erases
 * and touches in the same order (all driven by the agreed response list),
 * so the bit of a name is the same on every rank.  Owned by the engine
 * thread. */
#ifndef HVD_CACHE_H
#define HVD_CACHE_H

#include <stdint.h>

#include "../../base/strmap.h"
#include "wire.h"

typedef struct {
  char *name; /* NULL: free */
  hvd_sig sig;
  uint64_t last_used;
  void *pending; /* this rank's request waiting on the bit, or NULL */
} hvd_cache_entry;

typedef struct {
  hvd_cache_entry *e;
  int cap;
  hvd_strmap *index; /* name -> bit + 1 */
} hvd_cache;

int hvd_cache_init(hvd_cache *c, int capacity); /* 0, or -1 out of memory */
void hvd_cache_free(hvd_cache *c);
int hvd_cache_lookup(const hvd_cache *c, const char *name); /* bit or -1 */
/* Frees the entry; returns what was pending on it (to renegotiate). */
void *hvd_cache_erase(hvd_cache *c, int bit);
/* Inserts name (no-op if present or capacity 0) into a free bit, else the
 * least recently used one; *evicted gets the request pending on an evicted
 * entry (or NULL).  Returns the bit, or -1. */
int hvd_cache_insert(hvd_cache *c, const char *name, const hvd_sig *sig, uint64_t tick, void **evicted);
int hvd_cache_size(const hvd_cache *c);

#endif
