/* The watcher that removes a path when its holders are gone (remover.h). */
#define _GNU_SOURCE
#include "remover.h"

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

/* The watcher: /bin/sh running SCRIPT with the arguments after it, stdin
 * the read end of a new pipe whose write end is returned.  Each script
 * ignores SIGTERM, SIGINT and SIGHUP first: a watcher whose rank has ended
 * is reparented to whatever reaps orphans, hvdrun among them, which ends
 * with SIGTERM what a stopped job's launcher left (launcher/supervise.c),
 * and the path would stay. */
static int spawn(char *const argv[]) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_adddup2(&fa, p[0], 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(&fa, 3); /* no MPI socket or output pipe held open by it */
#endif
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID); /* outside the rank's process group and signals */
  /* Empty environment: no preload, so it is not a rank itself. */
  char *envp[] = {"PATH=/usr/bin:/bin", NULL};
  pid_t pid;
  int ok = posix_spawn(&pid, "/bin/sh", &fa, &at, argv, envp) == 0;
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(p[0]);
  if (!ok) {
    close(p[1]);
    return -1;
  }
  return p[1];
}

int hvd_remover_spawn(const char *path) {
  /* It reads until every copy of the write end is closed (the rank and
   * what it forked are gone, however they ended), then removes the path. */
  char *argv[] = {"sh", "-c", "trap '' TERM INT HUP; read _ ; rm -rf -- \"$0\"", (char *)path, NULL};
  return spawn(argv);
}

int hvd_remover_spawn_list(void) {
  /* One path a line, collected until the write end is closed everywhere. */
  char *argv[] = {"sh", "-c",
                  "trap '' TERM INT HUP; while IFS= read -r p; do set -- \"$@\" \"$p\"; done; [ $# -eq 0 ] || "
                  "rm -rf -- \"$@\"",
                  "hvdshim-remover", NULL};
  return spawn(argv);
}

int hvd_remover_spawn_restore(void) {
  /* Two lines a file (its backup B, its path P), collected until the write
   * end is closed everywhere; then for each: B there (the process ended in
   * the middle of rewriting P, which it had moved to B first): B back at
   * P; else B.new there (it was writing P anew): P, a part, removed; and
   * B's folder removed where that left it empty. */
  char *argv[] = {"sh", "-c",
                  "trap '' TERM INT HUP; while IFS= read -r b && IFS= read -r p; do set -- \"$@\" \"$b\" \"$p\"; "
                  "done; while [ $# -ge 2 ]; do if [ -e \"$1\" ]; then mv -f -- \"$1\" \"$2\"; elif [ -e \"$1.new\" ]; "
                  "then rm -f -- \"$2\" \"$1.new\"; fi; rmdir -- \"${1%/*}\" 2>/dev/null; shift 2; done",
                  "hvdshim-restorer", NULL};
  return spawn(argv);
}
