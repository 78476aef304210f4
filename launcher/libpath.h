/* Where libhvdshim.so is, for the programs installed next to it (hvdrun,
 * hvdshim-info): $HVDRUN_LIB, else next to the running program (installed:
 * bin/../lib; build tree: launcher/../.libs or tools/../.libs), else the
 * configured libdir. */
#ifndef HVD_LIBPATH_H
#define HVD_LIBPATH_H

#include <stddef.h>

/* A malloc'd absolute path, or NULL: then `err` says why (HVDRUN_LIB
 * unreadable) or, when err is empty, `looked` lists the places tried. */
char *hvd_find_library(const char *libdir, char *looked, size_t n, char *err, size_t errlen);

#endif
