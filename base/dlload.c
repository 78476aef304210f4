/* See dlload.h. */
#define _GNU_SOURCE
#include "dlload.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  const char *prefix;
  char *out;
  size_t n;
} find_ctx;

static int find_loaded(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  find_ctx *c = data;
  const char *base = strrchr(info->dlpi_name, '/');
  base = base ? base + 1 : info->dlpi_name;
  if (strncmp(base, c->prefix, strlen(c->prefix)) != 0) return 0;
  snprintf(c->out, c->n, "%s", info->dlpi_name);
  return 1;
}

int hvd_dl_find_loaded(const char *prefix, char *path, size_t pathlen) {
  find_ctx c = {prefix, path, pathlen};
  path[0] = 0;
  dl_iterate_phdr(find_loaded, &c);
  return path[0] != 0;
}

void *hvd_dl_open(const char *prefix, const char *const *names, char *path, size_t pathlen) {
  if (hvd_dl_find_loaded(prefix, path, pathlen)) {
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h) return h;
  }
  for (int i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
      snprintf(path, pathlen, "%s", lm->l_name);
    else
      snprintf(path, pathlen, "%s", names[i]);
    return h;
  }
  path[0] = 0;
  return NULL;
}
