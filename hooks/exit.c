/* _exit and _Exit interposition.  Both skip the on_exit handlers, and
 * Python's os._exit ends many scripts and every DataLoader worker, so the
 * lifecycle's handler runs first (what such an exit means for the job: see
 * shim/lifecycle.c); then the process ends with the system call. */
#include <sys/syscall.h>
#include <unistd.h>

#include "exit_hooks.h"
#include "overlay_view.h"

static void (*before_exit)(int status, int by_runtime);

void hvd_exit_hooks_on_exit(void (*fn)(int status, int by_runtime)) { before_exit = fn; }

__attribute__((visibility("default"), noreturn)) void _exit(int status) {
  void (*fn)(int, int) = before_exit;
  if (fn) fn(status, hvd_ovl_excluded_caller(__builtin_return_address(0)));
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

__attribute__((visibility("default"), noreturn)) void _Exit(int status) { _exit(status); }
