/* Response cache.  See cache.h. */
#include "cache.h"

#include <stdlib.h>
#include <string.h>

int hvd_cache_init(hvd_cache *c, int capacity) {
  c->cap = capacity;
  c->e = calloc((size_t)(capacity > 0 ? capacity : 1), sizeof *c->e);
  c->index = hvd_strmap_new();
  if (!c->e || !c->index) {
    hvd_cache_free(c);
    return -1;
  }
  return 0;
}

void hvd_cache_free(hvd_cache *c) {
  if (c->e)
    for (int b = 0; b < c->cap; b++) free(c->e[b].name);
  free(c->e);
  hvd_strmap_free(c->index);
  c->e = NULL;
  c->index = NULL;
  c->cap = 0;
}

int hvd_cache_lookup(const hvd_cache *c, const char *name) {
  if (c->cap <= 0) return -1;
  return (int)(intptr_t)hvd_strmap_get(c->index, name) - 1;
}

void *hvd_cache_erase(hvd_cache *c, int bit) {
  if (bit < 0 || bit >= c->cap || !c->e[bit].name) return NULL;
  hvd_cache_entry *e = &c->e[bit];
  hvd_strmap_del(c->index, e->name);
  free(e->name);
  e->name = NULL;
  void *p = e->pending;
  e->pending = NULL;
  return p;
}

int hvd_cache_insert(hvd_cache *c, const char *name, const hvd_sig *sig, uint64_t tick, void **evicted) {
  *evicted = NULL;
  if (c->cap <= 0) return -1;
  int have = hvd_cache_lookup(c, name);
  if (have >= 0) return have;
  int bit = -1;
  uint64_t oldest = UINT64_MAX;
  for (int b = 0; b < c->cap; b++) {
    if (!c->e[b].name) {
      bit = b;
      break;
    }
    if (c->e[b].last_used < oldest) oldest = c->e[b].last_used, bit = b;
  }
  *evicted = hvd_cache_erase(c, bit);
  char *copy = strdup(name);
  if (!copy || hvd_strmap_put(c->index, name, (void *)(intptr_t)(bit + 1)) != 0) {
    free(copy);
    return -1;
  }
  hvd_cache_entry *e = &c->e[bit];
  e->name = copy;
  e->sig = *sig;
  e->last_used = tick;
  e->pending = NULL;
  return bit;
}

int hvd_cache_size(const hvd_cache *c) { return c->index ? (int)hvd_strmap_len(c->index) : 0; }
