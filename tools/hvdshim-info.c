/* hvdshim-info: what this build of hvdshim is and how it is configured.
 *
 *   hvdshim-info              version, build options, what is found at run
 *                             time (the library, MPI, CUDA, NCCL, libffi,
 *                             Python and torch), settings with their values
 *                             and where each came from
 *   hvdshim-info --markdown   the settings table as Markdown (docs/SETTINGS.md's)
 *   hvdshim-info --man        the settings as roff, for the hvdshim(7) page
 *   hvdshim-info --version    the version
 *   hvdshim-info --check      validate the environment's settings; exit 1
 *                             with the error line if one is invalid
 *   hvdshim-info --check-hooks [SPEC]
 *                             parse a hook spec (a file, or the spec text;
 *                             default $HVDSHIM_HOOKS) and say what each hook
 *                             does; exit 1 with the error line if invalid */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../config.h"
#include "libpath.h"
#include "../base/config.h"
#include "../hooks/hookspec.h"

static const char *type_name(hvd_cfg_type t) {
  static const char *n[] = {"bool", "int", "number", "bytes", "choice", "string"};
  return n[t];
}

static void range(const hvd_cfg_desc *d, char *buf, size_t n) {
  switch (d->type) {
  case HVD_CT_BOOL: snprintf(buf, n, "0, 1"); break;
  case HVD_CT_CHOICE: snprintf(buf, n, "%s", d->choices); break;
  case HVD_CT_STRING: snprintf(buf, n, "path"); break;
  case HVD_CT_DOUBLE: snprintf(buf, n, "%g .. %g", d->lo, d->hi); break;
  default: snprintf(buf, n, "%.0f .. %.0f", d->lo, d->hi); break;
  }
}

static void markdown(void) {
  printf("| variable | Horovod alias | type | default | accepted | same on every rank | meaning |\n");
  printf("|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < HVD_CFG_COUNT; i++) {
    const hvd_cfg_desc *d = &hvd_cfg_table[i];
    char r[128], esc[256];
    range(d, r, sizeof r);
    size_t k = 0; /* '|' inside a table cell must be escaped */
    for (const char *p = r; *p && k + 2 < sizeof esc; p++) {
      if (*p == '|') esc[k++] = '\\';
      esc[k++] = *p;
    }
    esc[k] = 0;
    printf("| `%s` | %s%s%s | %s | `%s` | %s | %s | %s |\n", d->name, d->alias ? "`" : "", d->alias ? d->alias : "-",
           d->alias ? "`" : "", type_name(d->type), d->def[0] ? d->def : "(empty)", esc,
           d->scope == HVD_SCOPE_AGREE ? "required" : "-", d->help);
  }
}

/* s with roff's special characters escaped (a backslash; a leading dot or
 * quote would start a request). */
static void roff(const char *s) {
  if (*s == '.' || *s == '\'') fputs("\\&", stdout);
  for (; *s; s++) {
    if (*s == '\\') fputs("\\e", stdout);
    else if (*s == '-') fputs("\\-", stdout);
    else putchar(*s);
  }
}

/* The settings as roff paragraphs (.TP), for hvdshim(7): one per
 * setting, its type, default, accepted values and scope, then its help. */
static void man(void) {
  for (int i = 0; i < HVD_CFG_COUNT; i++) {
    const hvd_cfg_desc *d = &hvd_cfg_table[i];
    char r[128];
    range(d, r, sizeof r);
    printf(".TP\n.B ");
    roff(d->name);
    printf("\n(%s; default ", type_name(d->type));
    roff(d->def[0] ? d->def : "empty");
    printf("; ");
    roff(r);
    if (d->alias) {
      printf("; Horovod's ");
      roff(d->alias);
      printf(" too");
    }
    if (d->scope == HVD_SCOPE_AGREE) printf("; the same on every rank");
    printf(")\n.br\n");
    roff(d->help);
    printf("\n");
  }
}

static const char usage_text[] =
    "usage: hvdshim-info [--markdown | --man | --check | --check-hooks [SPEC] | --help | --version]\n"
    "What this build of hvdshim is, what it finds at run time, and its settings with their values.\n"
    "  (no option)          the version, build options, what is found at run time (the library, MPI,\n"
    "                       GPU, NCCL, libffi, Python and torch) and every setting with its value\n"
    "  --markdown           the settings table as Markdown (docs/SETTINGS.md's)\n"
    "  --man                the settings as roff (the hvdshim(7) manual page's)\n"
    "  --check              validate the environment's settings; exit 1 with the error line\n"
    "  --check-hooks [SPEC] parse a hook spec (a file, or the spec text; default $HVDSHIM_HOOKS) and\n"
    "                       say what each hook does; exit 1 with the error line\n"
    "  -h, --help           print this help and exit\n"
    "  --version            print the version and exit\n";

static int check_hooks(const char *value) {
  if (!value || !value[0]) {
    fprintf(stderr, "hvdshim-info: --check-hooks needs a spec file (or HVDSHIM_HOOKS set)\n");
    return 2;
  }
  char err[640], *text;
  size_t len;
  const char *where;
  hvd_hookspec spec;
  if (hvd_hookspec_read(value, &text, &len, &where, err, sizeof err) != 0) {
    fprintf(stderr, "hvdshim-info: %s\n", err);
    return 1;
  }
  int rc = hvd_hookspec_parse(text, len, where, &spec, err, sizeof err);
  free(text);
  if (rc != 0) {
    char msg[700];
    fprintf(stderr, "hvdshim-info: %s\n", hvd_hookspec_error(where, err, msg, sizeof msg));
    return 1;
  }
  for (int i = 0; i < spec.n; i++) {
    const hvd_hs_hook *h = &spec.hooks[i];
    printf("%s %s%s%s(", h->ret.text, h->name, h->version[0] ? "@" : "", h->version);
    for (int a = 0; a < h->nargs; a++) {
      const char *t = h->args[a].text;
      int star = t[0] && t[strlen(t) - 1] == '*';
      printf("%s%s%s%s", a ? ", " : "", t, h->argname[a][0] && !star ? " " : "", h->argname[a]);
    }
    printf(")\n");
    for (int a = 0; a < h->nactions; a++) {
      char d[256];
      printf("  %s\n", hvd_hs_describe(h, &h->act[a], d, sizeof d));
    }
  }
  hvd_hookspec_free(&spec);
  return 0;
}

#ifndef HVD_LIBDIR
#define HVD_LIBDIR "/usr/local/lib"
#endif
#ifdef HVD_HAVE_NCCL_HEADERS
#define HVD_NCCL_HINT " (GPU jobs need it: LD_LIBRARY_PATH, or apt-get install libnccl2)"
#else
#define HVD_NCCL_HINT ""
#endif
#ifndef HVD_PYTHON
#define HVD_PYTHON ""
#endif

static const char *first_line(char *s) {
  s[strcspn(s, "\n")] = 0;
  return s;
}

/* The object file that defines `sym` (a path), or "?". */
static const char *object_of(void *sym) {
  Dl_info di;
  return sym && dladdr(sym, &di) && di.dli_fname ? di.dli_fname : "?";
}

/* The first line `argv` prints on stdout (bounded by timeout(1)), or "". */
static void capture(char *const *argv, char *out, size_t n) {
  int fd[2];
  out[0] = 0;
  if (pipe(fd) != 0) return;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 1);
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2);
    close(fd[0]);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(fd[1]);
  size_t k = 0;
  ssize_t r;
  while (pid > 0 && k + 1 < n && (r = read(fd[0], out + k, n - 1 - k)) > 0) k += (size_t)r;
  out[k] = 0;
  close(fd[0]);
  if (pid > 0) waitpid(pid, NULL, 0);
  first_line(out);
}

/* Python and torch as `py` sees them (the adapter runs in that interpreter). */
static void python_line(const char *label, const char *py) {
  static const char code[] =
      "import sys\n"
      "v = sys.version.split()[0]\n"
      "try:\n"
      "    import torch\n"
      "    t = 'torch %s (CUDA build %s, GPU visible: %s)' % (torch.__version__, torch.version.cuda or 'none',\n"
      "        'yes' if torch.cuda.is_available() else 'no')\n"
      "except Exception as e:\n"
      "    t = 'no torch (%s)' % type(e).__name__\n"
      "print('Python %s; %s' % (v, t))\n";
  char out[512];
  char *argv[] = {"timeout", "60", (char *)py, "-c", (char *)code, NULL};
  capture(argv, out, sizeof out);
  printf("  %-9s %s: %s\n", label, py, out[0] ? out : "does not run");
}

/* What this host offers at run time, through the library hvdrun would
 * preload (loaded inert: HVDSHIM_DISABLE=1 in this process). */
static void runtime(void) {
  char looked[4096], err[4200], buf[8192];
  printf("\nfound at run time:\n");
  char *lib = hvd_find_library(HVD_LIBDIR, looked, sizeof looked, err, sizeof err);
  if (!lib) {
    printf("  library   not found (%s%s)\n", err[0] ? err : "looked in ", err[0] ? "" : looked);
  } else {
    printf("  library   %s\n", lib);
  }
  setenv("HVDSHIM_DISABLE", "1", 1);
  void *h = lib ? dlopen(lib, RTLD_LAZY | RTLD_LOCAL) : NULL;
  if (lib && !h) printf("  library   cannot be loaded: %s\n", dlerror());
  free(lib);
  int (*mpi_ver)(char *, int *) = h ? (int (*)(char *, int *))dlsym(h, "MPI_Get_library_version") : NULL;
  int len = 0;
  if (mpi_ver && mpi_ver(buf, &len) == 0) printf("  MPI       %s (%s)\n", first_line(buf), object_of((void *)mpi_ver));
  else printf("  MPI       unknown (MPI_Get_library_version not reachable)\n");
  int (*gpu)(char *, size_t) = h ? (int (*)(char *, size_t))dlsym(h, "hvd_gpu_status") : NULL;
  if (gpu) {
    int ok = gpu(buf, sizeof buf);
    printf("  GPU       %s: %s\n", ok ? "usable" : "not usable", buf);
  }
  void *nccl = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
  int (*nv)(int *) = nccl ? (int (*)(int *))dlsym(nccl, "ncclGetVersion") : NULL;
  int ncclv = 0;
  if (nv && nv(&ncclv) == 0)
    printf("  NCCL      %d.%d.%d (%s)\n", ncclv / 10000, ncclv / 100 % 100, ncclv % 100, object_of((void *)nv));
  else
    printf("  NCCL      libnccl.so.2 not found by the dynamic linker%s\n", HVD_NCCL_HINT);
  void *ffi = dlopen("libffi.so.8", RTLD_LAZY | RTLD_NOLOAD);
  if (!ffi) ffi = dlopen("libffi.so.7", RTLD_LAZY | RTLD_NOLOAD);
  if (ffi) {
    const char *(*fv)(void) = (const char *(*)(void))dlsym(ffi, "ffi_get_version"); /* libffi >= 3.4.5 */
    char *real = realpath(object_of(dlsym(ffi, "ffi_call")), NULL);
    printf("  libffi    %s (%s)\n", fv ? fv() : "version not exported (before 3.4.5); the file", real ? real : "?");
    free(real);
  } else {
    printf("  libffi    not loaded by the library (native hooks unavailable)\n");
  }
  const char *configured = HVD_PYTHON;
  if (configured[0]) python_line("Python", configured);
  /* the python3 first on PATH, when it is another interpreter */
  char path[1024];
  char *which[] = {"sh", "-c", "command -v python3", NULL};
  capture(which, path, sizeof path);
  if (path[0] && strcmp(path, configured) != 0) python_line("on PATH", path);
}

int main(int argc, char **argv) {
  char err[512];
  int rc = hvd_config_load(err, sizeof err);
  if (argc > 1 && !strcmp(argv[1], "--markdown")) {
    markdown();
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--man")) {
    man();
    return 0;
  }
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    fputs(usage_text, stdout);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--version")) {
    printf("hvdshim-info (hvdshim) %s\n", PACKAGE_VERSION);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--check")) {
    if (rc) fprintf(stderr, "hvdshim-info: %s\n", err);
    return rc ? 1 : 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--check-hooks")) return check_hooks(argc > 2 ? argv[2] : getenv("HVDSHIM_HOOKS"));
  if (argc > 1) {
    fprintf(stderr, "hvdshim-info: unknown option '%s'\n%s", argv[1], usage_text);
    return 2;
  }
  printf("hvdshim %s\n", PACKAGE_VERSION);
  printf("build: MPI backend yes; CUDA headers %s; NCCL headers %s; libffi %s\n",
#ifdef HVD_HAVE_CUDA_HEADERS
         "yes",
#else
         "no",
#endif
#ifdef HVD_HAVE_NCCL_HEADERS
         "yes",
#else
         "no",
#endif
#ifdef HVD_HAVE_FFI
         "yes"
#else
         "no"
#endif
  );
  runtime();
  if (rc) printf("settings: INVALID: %s\n", err);
  printf("\n%-34s %-12s %-8s %s\n", "setting", "value", "source", "meaning");
  static const char *src[] = {"default", "env", "alias", "api"};
  for (int i = 0; i < HVD_CFG_COUNT; i++)
    printf("%-34s %-12s %-8s %s\n", hvd_cfg_table[i].name, hvd_cfg_str((hvd_cfg_id)i)[0] ? hvd_cfg_str((hvd_cfg_id)i) : "''",
           src[hvd_cfg_src((hvd_cfg_id)i)], hvd_cfg_table[i].help);
  return rc ? 1 : 0;
}
