/* CPython bootstrap: make an armed Python rank load the PyTorch adapter.
 *
 * In an armed rank whose executable is a Python interpreter (Py_BytesMain
 * resolves: exported by a statically linked interpreter such as Debian's
 * /usr/bin/python3, or provided by a shared libpython it links), the
 * constructor prepends the directory holding hvdshim's sitecustomize.py to
 * PYTHONPATH.  That sitecustomize restores PYTHONPATH and sys.path, chains
 * to any sitecustomize the user already has, and installs an import hook
 * that loads the adapter (python/hvdshim_torch/) right after `import torch`.
 * Processes that are not Python, and every dormant process, are untouched.
 * Why sitecustomize rather than an audit hook: docs/ARCHITECTURE.md. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/libc.h"
#include "../base/log.h"
#include "python.h"

#ifndef HVD_PYDIR_INSTALLED
#define HVD_PYDIR_INSTALLED ""
#endif
#ifndef HVD_PYDIR_SOURCE
#define HVD_PYDIR_SOURCE ""
#endif

static int has_bootstrap(const char *dir) {
  char path[PATH_MAX];
  if (!*dir || snprintf(path, sizeof path, "%s/sitecustomize.py", dir) >= (int)sizeof path) return 0;
  return hvd_libc()->access(path, R_OK) == 0;
}

/* Where the Python files are, first match wins.  A library in a build
 * tree (.libs/) uses the source copy; an installed one uses
 * <libdir>/../share/hvdshim/python (so a relocated or DESTDIR install
 * works), then the configured $(pkgdatadir)/python. */
const char *hvd_python_dir(void) {
  static char rel[PATH_MAX];
  Dl_info info;
  const char *lib = NULL;
  if (dladdr((void *)hvd_python_dir, &info) && info.dli_fname) lib = info.dli_fname;
  if (lib && strstr(lib, "/.libs/") && has_bootstrap(HVD_PYDIR_SOURCE)) return HVD_PYDIR_SOURCE;
  if (lib) {
    const char *slash = strrchr(lib, '/');
    if (slash && snprintf(rel, sizeof rel, "%.*s/../share/hvdshim/python", (int)(slash - lib), lib) < (int)sizeof rel &&
        has_bootstrap(rel))
      return rel;
  }
  if (has_bootstrap(HVD_PYDIR_INSTALLED)) return HVD_PYDIR_INSTALLED;
  if (has_bootstrap(HVD_PYDIR_SOURCE)) return HVD_PYDIR_SOURCE;
  return NULL;
}

char hvd_python_bootstrap_flag(const char *buf, size_t n) {
  const char *end = buf + n;
  const char *a = buf + strnlen(buf, n) + 1; /* past argv[0] */
  for (; a < end; a += strnlen(a, (size_t)(end - a)) + 1) {
    if (a[0] != '-' || !a[1] || !strcmp(a, "--")) return 0; /* the script, "-" (stdin) or the end of the options */
    if (a[1] == '-') { /* a long option: --check-hash-based-pycs takes the next word */
      if (!strcmp(a, "--check-hash-based-pycs") && a + strlen(a) + 1 < end) a += strlen(a) + 1;
      continue;
    }
    for (const char *c = a + 1; *c; c++) {
      if (*c == 'E' || *c == 'I' || *c == 'S') return *c;
      if (*c == 'c' || *c == 'm') return 0;  /* the rest is the command or the module's */
      if (*c == 'W' || *c == 'X') {           /* an argument: the rest of this word, or the next word */
        if (!c[1] && a + strlen(a) + 1 < end) a += strlen(a) + 1;
        break;
      }
    }
  }
  return 0;
}

char hvd_python_ignores_bootstrap(void) {
  if (!dlsym(RTLD_DEFAULT, "Py_BytesMain")) return 0; /* not a Python interpreter */
  char buf[4096];
  int fd = hvd_libc()->open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0; /* (each word ends with a NUL, so a cut last word still ends) */
  return hvd_python_bootstrap_flag(buf, (size_t)n);
}

int hvd_python_arm(void) {
  if (!dlsym(RTLD_DEFAULT, "Py_BytesMain")) return 0; /* not a Python interpreter */
  const char *dir = hvd_python_dir();
  if (!dir) {
    HVD_WARN("hvdshim's Python files are missing (looked in %s and %s): PyTorch scripts will not be distributed",
             HVD_PYDIR_INSTALLED, HVD_PYDIR_SOURCE);
    return 1;
  }
  const char *old = getenv("PYTHONPATH");
  /* The bootstrap puts the user's value back; no saved value = was unset. */
  if (old) setenv("HVDSHIM_PYTHONPATH_SAVED", old, 1);
  else unsetenv("HVDSHIM_PYTHONPATH_SAVED");
  size_t n = strlen(dir) + (old ? strlen(old) + 1 : 0) + 1;
  char *val = malloc(n);
  if (!val) return 1;
  snprintf(val, n, "%s%s%s", dir, old && *old ? ":" : "", old ? old : "");
  setenv("PYTHONPATH", val, 1);
  free(val);
  HVD_DEBUG("python: bootstrap from %s", dir);
  return 1;
}
