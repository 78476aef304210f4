/* libFuzzer harness for the hook spec parser (hooks/hookspec.c).
 *
 * Any input must either be refused with a one-line message that starts with
 * "fuzz.hooks:LINE:COL: " or parse into a spec whose every part is in range:
 * argument indices below the argument count, well-formed expressions (the
 * evaluator's stack never under- or overflows), known dtypes, ops and verbs,
 * at least one action per hook.  Accepted specs are described and their
 * expressions evaluated over zeroed arguments (a dereference of a null
 * pointer must be an error, not a crash).  Anything else aborts.
 * Build and run: make fuzz (docs/RELIABILITY.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hookspec.h"

static void check_expr(const hvd_hs_expr *e, const hvd_hs_hook *h) {
  int depth = 0;
  if (e->n < 1 || e->n > HVD_HS_EXPR_MAX) abort();
  for (int i = 0; i < e->n; i++) {
    const hvd_hs_xtok *x = &e->t[i];
    switch (x->op) {
    case HVD_HX_CONST: depth++; break;
    case HVD_HX_ARG:
    case HVD_HX_DEREF:
      if (x->v < 0 || x->v >= h->nargs) abort();
      depth++;
      break;
    case HVD_HX_NEG:
      if (depth < 1) abort();
      break;
    case HVD_HX_ADD: case HVD_HX_SUB: case HVD_HX_MUL: case HVD_HX_DIV: case HVD_HX_MOD:
      if (depth < 2) abort();
      depth--;
      break;
    default: abort();
    }
  }
  if (depth != 1) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hvd_hookspec spec;
  char err[512];
  if (hvd_hookspec_parse((const char *)data, size, "fuzz.hooks", &spec, err, sizeof err) != 0) {
    if (strncmp(err, "fuzz.hooks:", 11) != 0 || strchr(err, '\n')) abort();
    if (spec.hooks || spec.n) abort(); /* nothing left allocated */
    return 0;
  }
  if (spec.n < 1) abort();
  int64_t zeros[HVD_HS_MAX_ARGS][2];
  memset(zeros, 0, sizeof zeros);
  void *args[HVD_HS_MAX_ARGS];
  for (int i = 0; i < HVD_HS_MAX_ARGS; i++) args[i] = zeros[i];
  for (int k = 0; k < spec.n; k++) {
    const hvd_hs_hook *h = &spec.hooks[k];
    if (!h->name[0] || h->nargs < 0 || h->nargs > HVD_HS_MAX_ARGS || h->nactions < 1 ||
        h->nactions > HVD_HS_MAX_ACTIONS)
      abort();
    for (int a = 0; a < h->nactions; a++) {
      const hvd_hs_action *x = &h->act[a];
      if (x->arg >= h->nargs || x->verb > HVD_HA_SHARD) abort();
      if (x->verb != HVD_HA_SHARD) {
        if (h->args[x->arg].cls != HVD_HS_PTR || x->dtype < 0 || x->dtype > 6 || x->op > 3) abort();
        check_expr(&x->count, h);
      } else {
        if (h->args[x->arg].cls != HVD_HS_SINT && h->args[x->arg].cls != HVD_HS_UINT) abort();
        if (x->block) check_expr(&x->count, h);
      }
      char d[256];
      hvd_hs_describe(h, x, d, sizeof d);
      int64_t v;
      if (x->count.n) hvd_hs_eval(&x->count, h, args, &v, err, sizeof err);
    }
  }
  hvd_hookspec_free(&spec);
  return 0;
}
