/* Role probe: run with libhvdshim.so preloaded (not linked), reports what
 * the shim did to this process.
 *
 *   role_probe plain     print MPI state and thread count; expect nothing
 *   role_probe child     the same, as a program executed by an active rank
 *   role_probe activate  hvd_init through the preloaded library, then run
 *                        `sh -c "role_probe child"` and fork a child that
 *                        must find the shim inert
 * Exit 0 when what it saw is what its role requires. */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

static int threads(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Threads:", 8)) n = atoi(line + 8);
  if (f) fclose(f);
  return n;
}

/* Threads hvdshim started (it names them hvd-*): an MPI library may start
 * its own when it is loaded (UCX's VFS thread under MPICH), which is not the
 * shim's doing. */
static int ours(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char p[300], comm[64] = "";
    snprintf(p, sizeof p, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(p, "r");
    if (f && fgets(comm, sizeof comm, f) && !strncmp(comm, "hvd-", 4)) n++;
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return n;
}

static int inert_here(const char *who) {
  int up = 0;
  MPI_Initialized(&up);
  int t = threads(), mine = ours();
  printf("role_probe %s: mpi_initialized=%d threads=%d hvdshim_threads=%d\n", who, up, t, mine);
  return up == 0 && mine == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "plain";
  if (!strcmp(mode, "plain") || !strcmp(mode, "child")) return inert_here(mode);
  int (*init)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "hvd_init");
  int (*initialized)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "hvd_initialized");
  const char *(*last_error)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "hvd_last_error");
  if (!init || !initialized || !last_error) {
    fprintf(stderr, "role_probe: libhvdshim.so is not preloaded\n");
    return 1;
  }
  if (init() != 0) {
    fprintf(stderr, "role_probe: hvd_init failed: %s\n", last_error());
    return 1;
  }
  int bad = 0;
  if (ours() < 1) fprintf(stderr, "role_probe: active rank has no engine thread\n"), bad = 1;
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "sh -c '\"%s\" child'", argv[0]);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "role_probe: executed child was not inert\n"), bad = 1;
  pid_t pid = fork();
  if (pid == 0) {
    int st = init();
    int ok = st != 0 && strstr(last_error(), "forked child") && !initialized() && threads() == 1;
    printf("role_probe forked: hvd_init=%d (%s) threads=%d\n", st, last_error(), threads());
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fprintf(stderr, "role_probe: forked child was not inert\n"), bad = 1;
  printf("role_probe activate: %s\n", bad ? "FAILED" : "OK");
  return bad;
}
