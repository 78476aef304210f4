/* Chained hash map, FNV-1a, power-of-two buckets doubling at load 1. */
#include "strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct node {
  struct node *next;
  void *value;
  uint64_t hash;
  char key[];
} node;

struct hvd_strmap {
  node **buckets;
  size_t nbuckets, len;
};

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

hvd_strmap *hvd_strmap_new(void) {
  hvd_strmap *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->nbuckets = 64;
  m->buckets = calloc(m->nbuckets, sizeof *m->buckets);
  if (!m->buckets) {
    free(m);
    return NULL;
  }
  return m;
}

void hvd_strmap_free(hvd_strmap *m) {
  if (!m) return;
  for (size_t i = 0; i < m->nbuckets; i++)
    for (node *n = m->buckets[i], *nx; n; n = nx) {
      nx = n->next;
      free(n);
    }
  free(m->buckets);
  free(m);
}

static node **slot(const hvd_strmap *m, const char *key, uint64_t h) {
  node **p = &m->buckets[h & (m->nbuckets - 1)];
  while (*p && ((*p)->hash != h || strcmp((*p)->key, key) != 0)) p = &(*p)->next;
  return p;
}

void *hvd_strmap_get(const hvd_strmap *m, const char *key) {
  node **p = slot(m, key, fnv1a(key));
  return *p ? (*p)->value : NULL;
}

static void grow(hvd_strmap *m) {
  size_t nb = m->nbuckets * 2;
  node **b = calloc(nb, sizeof *b);
  if (!b) return; /* keep working at a higher load */
  for (size_t i = 0; i < m->nbuckets; i++)
    for (node *n = m->buckets[i], *nx; n; n = nx) {
      nx = n->next;
      n->next = b[n->hash & (nb - 1)];
      b[n->hash & (nb - 1)] = n;
    }
  free(m->buckets);
  m->buckets = b;
  m->nbuckets = nb;
}

int hvd_strmap_put(hvd_strmap *m, const char *key, void *value) {
  uint64_t h = fnv1a(key);
  node **p = slot(m, key, h);
  if (*p) {
    (*p)->value = value;
    return 0;
  }
  size_t kl = strlen(key);
  node *n = malloc(sizeof *n + kl + 1);
  if (!n) return -1;
  memcpy(n->key, key, kl + 1);
  n->hash = h;
  n->value = value;
  n->next = NULL;
  *p = n;
  if (++m->len > m->nbuckets) grow(m);
  return 0;
}

void *hvd_strmap_del(hvd_strmap *m, const char *key) {
  node **p = slot(m, key, fnv1a(key));
  if (!*p) return NULL;
  node *n = *p;
  void *v = n->value;
  *p = n->next;
  free(n);
  m->len--;
  return v;
}

size_t hvd_strmap_len(const hvd_strmap *m) { return m->len; }

void hvd_strmap_each(const hvd_strmap *m, void (*fn)(const char *key, void *value, void *ctx), void *ctx) {
  for (size_t i = 0; i < m->nbuckets; i++)
    for (node *n = m->buckets[i]; n; n = n->next) fn(n->key, n->value, ctx);
}
