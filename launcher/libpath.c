/* See libpath.h. */
#define _GNU_SOURCE
#include "libpath.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int readable(const char *p) { return access(p, R_OK) == 0; }

/* Appends p to the list in looked; returns p when readable, else frees it. */
static char *try_path(char *p, char *looked, size_t n) {
  if (!p) return NULL;
  size_t used = strlen(looked);
  snprintf(looked + used, n - used, "%s%s", used ? ", " : "", p);
  if (readable(p)) return p;
  free(p);
  return NULL;
}

char *hvd_find_library(const char *libdir, char *looked, size_t n, char *err, size_t errlen) {
  const char *env = getenv("HVDRUN_LIB");
  char *r = NULL;
  err[0] = looked[0] = 0;
  if (env && *env) {
    if (!readable(env)) {
      snprintf(err, errlen, "HVDRUN_LIB=%s: %s", env, strerror(errno));
      return NULL;
    }
    char cwd[PATH_MAX];
    if (env[0] == '/' || !getcwd(cwd, sizeof cwd)) return strdup(env);
    return asprintf(&r, "%s/%s", cwd, env) < 0 ? NULL : r; /* remote ranks need an absolute path */
  }
  char self[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  const char *rel[] = {"/../lib", "/../.libs", NULL}; /* installed; build tree */
  char *slash = k > 0 ? (self[k] = 0, strrchr(self, '/')) : NULL;
  if (slash) *slash = 0;
  for (int i = 0; slash && rel[i]; i++) {
    char *d; /* the folder resolved, the name kept (not the .so.0.0.0 it links to) */
    if (asprintf(&d, "%s%s", self, rel[i]) < 0) return NULL;
    char *real = realpath(d, NULL), *p;
    if (asprintf(&p, "%s/libhvdshim.so", real ? real : d) < 0) p = NULL;
    free(real), free(d);
    if ((r = try_path(p, looked, n))) return r;
  }
  char *p;
  return try_path(asprintf(&p, "%s/libhvdshim.so", libdir) < 0 ? NULL : p, looked, n);
}
