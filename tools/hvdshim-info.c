/* hvdshim-info: what this build of hvdshim is and how it is configured.
 *
 *   hvdshim-info              version, build options, settings with values
 *   hvdshim-info --markdown   the settings table as Markdown (the README's)
 *   hvdshim-info --check      validate the environment's settings; exit 1
 *                             with the error line if one is invalid
 *   hvdshim-info --check-hooks [SPEC]
 *                             parse a hook spec (a file, or the spec text;
 *                             default $HVDSHIM_HOOKS) and say what each hook
 *                             does; exit 1 with the error line if invalid */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config.h"
#include "../shim/config.h"
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
  printf("| variable | Horovod alias | type | default | accepted | meaning |\n");
  printf("|---|---|---|---|---|---|\n");
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
    printf("| `%s` | %s%s%s | %s | `%s` | %s | %s |\n", d->name, d->alias ? "`" : "", d->alias ? d->alias : "-",
           d->alias ? "`" : "", type_name(d->type), d->def[0] ? d->def : "(empty)", esc, d->help);
  }
}

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

int main(int argc, char **argv) {
  char err[512];
  int rc = hvd_config_load(err, sizeof err);
  if (argc > 1 && !strcmp(argv[1], "--markdown")) {
    markdown();
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--check")) {
    if (rc) fprintf(stderr, "hvdshim-info: %s\n", err);
    return rc ? 1 : 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--check-hooks")) return check_hooks(argc > 2 ? argv[2] : getenv("HVDSHIM_HOOKS"));
  if (argc > 1) {
    fprintf(stderr, "usage: hvdshim-info [--markdown | --check | --check-hooks [SPEC]]\n");
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
  if (rc) printf("settings: INVALID: %s\n", err);
  printf("\n%-34s %-12s %-8s %s\n", "setting", "value", "source", "meaning");
  static const char *src[] = {"default", "env", "alias", "api"};
  for (int i = 0; i < HVD_CFG_COUNT; i++)
    printf("%-34s %-12s %-8s %s\n", hvd_cfg_table[i].name, hvd_cfg_str((hvd_cfg_id)i)[0] ? hvd_cfg_str((hvd_cfg_id)i) : "''",
           src[hvd_cfg_src((hvd_cfg_id)i)], hvd_cfg_table[i].help);
  return rc ? 1 : 0;
}
