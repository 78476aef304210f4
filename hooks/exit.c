/* _exit and _Exit interposition.  Both skip the on_exit handlers, and
 * Python's os._exit ends many scripts and every DataLoader worker, so the
 * lifecycle's handler runs first (what such an exit means for the job: see
 * shim/lifecycle.c); then the process ends with the system call. */
#include <sys/syscall.h>
#include <unistd.h>

#include "exit_hooks.h"

static void (*before_exit)(int status);

void hvd_exit_hooks_on_exit(void (*fn)(int status)) { before_exit = fn; }

__attribute__((visibility("default"), noreturn)) void _exit(int status) {
  void (*fn)(int) = before_exit;
  if (fn) fn(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

__attribute__((visibility("default"), noreturn)) void _Exit(int status) { _exit(status); }
