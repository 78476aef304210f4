/* A small chained hash map from C strings to pointers.  Not thread-safe:
 * each map is owned by one thread (see the owner comments where used).
 * Keys are copied. */
#ifndef HVD_STRMAP_H
#define HVD_STRMAP_H

#include <stddef.h>

typedef struct hvd_strmap hvd_strmap;

hvd_strmap *hvd_strmap_new(void);
void hvd_strmap_free(hvd_strmap *m);
void *hvd_strmap_get(const hvd_strmap *m, const char *key);
/* Returns 0, or -1 on allocation failure.  Replaces an existing value. */
int hvd_strmap_put(hvd_strmap *m, const char *key, void *value);
/* Returns the removed value or NULL. */
void *hvd_strmap_del(hvd_strmap *m, const char *key);
size_t hvd_strmap_len(const hvd_strmap *m);
/* Calls fn on every entry; fn must not modify the map. */
void hvd_strmap_each(const hvd_strmap *m, void (*fn)(const char *key, void *value, void *ctx), void *ctx);

#endif
