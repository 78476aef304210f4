/* See libpath.h. */
#define _GNU_SOURCE
#include "libpath.h"

#include "../config.h"

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

static char *joined(const char *dir, const char *name) {
  char *p;
  return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* The installed library in DIR: its run-time name (the SONAME), else the
 * development symlink. */
static char *in_dir(const char *dir, char *looked, size_t n) {
  char *r = try_path(joined(dir, HVD_SONAME), looked, n);
  return r ? r : try_path(joined(dir, "libhvdshim.so"), looked, n);
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
    char *real = realpath(d, NULL);
    /* installed: the run-time name first (a package without the -dev
     * symlink); the build tree: the name the tests and the docs use */
    r = i == 0 ? in_dir(real ? real : d, looked, n) : try_path(joined(real ? real : d, "libhvdshim.so"), looked, n);
    free(real), free(d);
    if (r) return r;
  }
  return in_dir(libdir, looked, n);
}
