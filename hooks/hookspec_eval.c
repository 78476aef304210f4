/* Hook specs at run time: evaluating an action's expressions over a call's
 * arguments, reading a spec from HVDSHIM_HOOKS (text or @file), and the
 * one-line form of its errors (see hookspec.h). */
#include "hookspec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/libc.h"
#include "hvdshim.h"
/* ------------------------------------------------------------------ evaluation */

int64_t hvd_hs_arg_int(const hvd_hs_type *t, const void *value) {
  switch (t->size) {
  case 1: return t->cls == HVD_HS_SINT ? (int64_t) * (const int8_t *)value : (int64_t) * (const uint8_t *)value;
  case 2: return t->cls == HVD_HS_SINT ? (int64_t) * (const int16_t *)value : (int64_t) * (const uint16_t *)value;
  case 4: return t->cls == HVD_HS_SINT ? (int64_t) * (const int32_t *)value : (int64_t) * (const uint32_t *)value;
  default: return *(const int64_t *)value; /* uint64 above INT64_MAX reads negative: refused as a count */
  }
}

void hvd_hs_set_int(const hvd_hs_type *t, void *value, int64_t v) {
  switch (t->size) {
  case 1: *(uint8_t *)value = (uint8_t)v; break;
  case 2: *(uint16_t *)value = (uint16_t)v; break;
  case 4: *(uint32_t *)value = (uint32_t)v; break;
  default: *(int64_t *)value = v; break;
  }
}

const char *hvd_hs_argref(const hvd_hs_hook *h, int i, char *buf, size_t n) {
  if (h->argname[i][0]) snprintf(buf, n, "'%s'", h->argname[i]);
  else snprintf(buf, n, "$%d", i + 1);
  return buf;
}

int hvd_hs_eval(const hvd_hs_expr *e, const hvd_hs_hook *h, void *const *args, int64_t *out, char *err,
                size_t errlen) {
  int64_t st[HVD_HS_EXPR_MAX];
  int sp = 0;
  char r[80];
  for (int i = 0; i < e->n; i++) {
    const hvd_hs_xtok *x = &e->t[i];
    int64_t a, b, v = 0;
    switch (x->op) {
    case HVD_HX_CONST: st[sp++] = x->v; continue;
    case HVD_HX_ARG: st[sp++] = hvd_hs_arg_int(&h->args[x->v], args[x->v]); continue;
    case HVD_HX_DEREF: {
      const hvd_hs_type *t = &h->args[x->v];
      const void *p = *(void *const *)args[x->v];
      if (!p) {
        snprintf(err, errlen, "'%s' in %s: %s is a null pointer", e->text, h->name,
                 hvd_hs_argref(h, (int)x->v, r, sizeof r));
        return -1;
      }
      hvd_hs_type pt = {.cls = t->pcls, .size = t->psize};
      st[sp++] = hvd_hs_arg_int(&pt, p);
      continue;
    }
    case HVD_HX_NEG:
      if (st[sp - 1] == INT64_MIN) goto overflow;
      st[sp - 1] = -st[sp - 1];
      continue;
    default: break;
    }
    b = st[--sp];
    a = st[--sp];
    switch (x->op) {
    case HVD_HX_ADD:
      if (__builtin_add_overflow(a, b, &v)) goto overflow;
      break;
    case HVD_HX_SUB:
      if (__builtin_sub_overflow(a, b, &v)) goto overflow;
      break;
    case HVD_HX_MUL:
      if (__builtin_mul_overflow(a, b, &v)) goto overflow;
      break;
    default:
      if (b == 0) {
        snprintf(err, errlen, "'%s' in %s divides by zero", e->text, h->name);
        return -1;
      }
      if (a == INT64_MIN && b == -1) goto overflow;
      v = x->op == HVD_HX_DIV ? a / b : a % b;
      break;
    }
    st[sp++] = v;
  }
  *out = st[0];
  return 0;
overflow:
  snprintf(err, errlen, "'%s' in %s overflows 64-bit integers", e->text, h->name);
  return -1;
}

/* ------------------------------------------------------------------ reading, describing */

int hvd_hookspec_read(const char *value, char **text, size_t *len, const char **where, char *err, size_t errlen) {
  *text = NULL;
  *len = 0;
  if (strchr(value, '(')) {
    *where = "HVDSHIM_HOOKS";
    *len = strlen(value);
    *text = strdup(value);
    if (!*text) goto nomem;
    return 0;
  }
  *where = value;
  FILE *f = hvd_libc()->fopen(value, "rb");
  if (!f) {
    snprintf(err, errlen, "HVDSHIM_HOOKS: cannot read the hook spec '%s': %s (the value is a file, or the spec "
             "itself when it contains '(')", value, strerror(errno));
    return -1;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (n < cap) break;
    if (cap >= (size_t)1 << 20) {
      snprintf(err, errlen, "HVDSHIM_HOOKS: the hook spec '%s' is larger than 1 MiB", value);
      free(buf);
      fclose(f);
      return -1;
    }
    char *nb = realloc(buf, cap * 2 + 1);
    if (!nb) free(buf);
    buf = nb, cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (!buf) goto nomem;
  if (bad) {
    snprintf(err, errlen, "HVDSHIM_HOOKS: error reading the hook spec '%s'", value);
    free(buf);
    return -1;
  }
  buf[n] = 0;
  *text = buf;
  *len = n;
  return 0;
nomem:
  snprintf(err, errlen, "HVDSHIM_HOOKS: out of memory");
  return -1;
}

const char *hvd_hookspec_error(const char *where, const char *err, char *buf, size_t n) {
  int inline_spec = where && !strcmp(where, "HVDSHIM_HOOKS");
  snprintf(buf, n, "%s%s", inline_spec || !strncmp(err, "HVDSHIM_HOOKS", 13) ? "" : "HVDSHIM_HOOKS: ", err);
  return buf;
}
