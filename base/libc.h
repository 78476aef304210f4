/* The real libc file calls hvdshim's own code makes (base/libc.c).  The
 * library exports interposers of these names (the rank-private file
 * overlay), so a plain call from its own code would resolve to them; its
 * code calls these instead, resolved once past the library (dlsym
 * RTLD_NEXT), and the overlay never sees the library's own files (output
 * files, /proc, the hook spec, /dev/null).  Only the overlay's interposed
 * names are here; tests/unit/layers.sh checks that no other object of the
 * library calls one of them directly. */
#ifndef HVD_BASE_LIBC_H
#define HVD_BASE_LIBC_H

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>

typedef struct {
  int (*open)(const char *path, int flags, ...); /* a mode after flags with O_CREAT */
  FILE *(*fopen)(const char *path, const char *mode);
  int (*stat)(const char *path, struct stat *st);
  int (*access)(const char *path, int mode);
  DIR *(*opendir)(const char *path);
  struct dirent *(*readdir)(DIR *dir);
  int (*closedir)(DIR *dir);
} hvd_libc_table;

/* The table, resolved at the first call (any thread). */
const hvd_libc_table *hvd_libc(void);

#endif
