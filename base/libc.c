/* The real libc file calls: see libc.h.  Resolved once (pthread_once) with
 * dlsym(RTLD_NEXT), which looks past this library; a name the C library
 * does not export (stat before glibc 2.33, where it was an inline wrapper
 * of __xstat) is made with the system call instead. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "libc.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static hvd_libc_table real;
static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static int stat_syscall(const char *path, struct stat *st) {
  return (int)syscall(SYS_newfstatat, AT_FDCWD, path, st, 0);
}

static void resolve(void) {
#define GET(field, name) *(void **)&real.field = dlsym(RTLD_NEXT, name)
  GET(open, "open");
  GET(fopen, "fopen");
  GET(stat, "stat");
  GET(access, "access");
  GET(opendir, "opendir");
  GET(readdir, "readdir");
  GET(closedir, "closedir");
#undef GET
  if (!real.stat) real.stat = stat_syscall;
}

const hvd_libc_table *hvd_libc(void) {
  pthread_once(&resolved, resolve);
  return &real;
}
