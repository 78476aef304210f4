/* CPython bootstrap: make an armed Python rank load the PyTorch adapter.
 *
 * In an armed rank whose executable is a Python interpreter (Py_BytesMain
 * resolves: exported by a statically linked interpreter such as Debian's
 * /usr/bin/python3, or provided by a shared libpython it links), the
 * constructor prepends the directory holding hvdshim's sitecustomize.py to
 * PYTHONPATH.  That sitecustomize restores PYTHONPATH and sys.path, chains
 * to any sitecustomize the user already has, and installs an import hook
 * that loads the adapter (_hvdshim_torch.py) right after `import torch`.
 * Processes that are not Python, and every dormant process, are untouched.
 * Why sitecustomize rather than an audit hook: docs/ARCHITECTURE.md. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
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
  return access(path, R_OK) == 0;
}

/* The library in a build tree lives in .libs/ and uses the source copy of
 * the Python files; an installed one uses $(pkgdatadir)/python. */
const char *hvd_python_dir(void) {
  Dl_info info;
  int in_build_tree = 0;
  if (dladdr((void *)hvd_python_dir, &info) && info.dli_fname) in_build_tree = strstr(info.dli_fname, "/.libs/") != NULL;
  const char *first = in_build_tree ? HVD_PYDIR_SOURCE : HVD_PYDIR_INSTALLED;
  const char *second = in_build_tree ? HVD_PYDIR_INSTALLED : HVD_PYDIR_SOURCE;
  if (has_bootstrap(first)) return first;
  if (has_bootstrap(second)) return second;
  return NULL;
}

void hvd_python_arm(void) {
  if (!dlsym(RTLD_DEFAULT, "Py_BytesMain")) return; /* not a Python interpreter */
  const char *dir = hvd_python_dir();
  if (!dir) {
    HVD_WARN("hvdshim's Python files are missing (looked in %s and %s): PyTorch scripts will not be distributed",
             HVD_PYDIR_INSTALLED, HVD_PYDIR_SOURCE);
    return;
  }
  const char *old = getenv("PYTHONPATH");
  /* The bootstrap puts the user's value back (unset stays unset). */
  setenv("HVDSHIM_PYTHONPATH_SAVED", old ? old : "", 1);
  setenv("HVDSHIM_PYTHONPATH_WAS_SET", old ? "1" : "0", 1);
  size_t n = strlen(dir) + (old ? strlen(old) + 1 : 0) + 1;
  char *val = malloc(n);
  if (!val) return;
  snprintf(val, n, "%s%s%s", dir, old && *old ? ":" : "", old ? old : "");
  setenv("PYTHONPATH", val, 1);
  free(val);
  HVD_DEBUG("python: bootstrap from %s", dir);
}
