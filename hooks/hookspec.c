/* Hook spec parser (see hookspec.h and docs/HOOKS.md).
 *
 * Grammar (newlines end an action; ';' may end a prototype or an action, so
 * a spec fits on one line; '#' and '//' start comments):
 *
 *   spec      := { hook }
 *   hook      := prototype [';'] { action }
 *   prototype := type NAME['@'VERSION] '(' ( 'void' | param { ',' param } ) ')'
 *   param     := type [NAME] { '[' [INT] ']' }
 *   action    := ( NAME | '$'N ) ':' verb { option } ( NEWLINE | ';' | EOF )
 *   verb      := 'allreduce' | 'broadcast' | 'shard'
 *   option    := KEY '=' value | FLAG
 *   expr      := term { ('+'|'-') term };  term := unary { ('*'|'/'|'%') unary }
 *   unary     := '-' unary | '*' ref | INT | ref | '(' expr ')';  ref := NAME | '$'N
 *
 * Every error names where:line:col, what was found and what was expected.
 * The lexer and the C types are in hookspec_lex.c; evaluating and reading
 * a spec in hookspec_eval.c. */
#include "hookspec.h"
#include "hookspec_lex.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvdshim.h"

/* ------------------------------------------------------------------ prototypes */

static int parse_prototype(lexer *L, hvd_hs_hook *h) {
  tok buf[24];
  tok first = L->t;
  h->line = first.line, h->col = first.col;
  int n = hvd_hsl_collect(L, buf, 24, "(", 0);
  if (n < 0) return -1;
  char b[64];
  if (n == 0) {
    hvd_hsl_fail(L, &first,
                 "expected a C prototype such as 'void sgd_update(float *w, const float *g, long n)', found '('");
    return -1;
  }
  if (n == 1 || buf[n - 1].k != T_ID || hvd_hsl_is_type_word(&buf[n - 1])) {
    hvd_hsl_fail(L, &buf[n - 1],
                 n == 1 ? "expected the return type before the function name %s"
                        : "expected the function name before '(', found %s",
                 hvd_hsl_show(&buf[n - 1], b, sizeof b));
    return -1;
  }
  const tok *nm = &buf[n - 1];
  const char *at = memchr(nm->s, '@', nm->n);
  size_t base = at ? (size_t)(at - nm->s) : nm->n;
  if (base >= sizeof h->name) {
    hvd_hsl_fail(L, nm, "function name too long (at most %zu characters)", sizeof h->name - 1);
    return -1;
  }
  memcpy(h->name, nm->s, base);
  h->name[base] = 0;
  if (at) {
    const char *v = at + 1;
    if (v < nm->s + nm->n && *v == '@') v++;
    size_t vl = (size_t)(nm->s + nm->n - v);
    if (vl == 0 || vl >= sizeof h->version) {
      hvd_hsl_fail(L, nm, "expected a symbol version after '@' (as in 'name@LIB_1.0')");
      return -1;
    }
    memcpy(h->version, v, vl);
    h->version[vl] = 0;
  }
  if (hvd_hsl_make_type(L, buf, n - 1, &h->ret, NULL, 0, &buf[0]) < 0) return -1;
  if (h->ret.cls == HVD_HS_VOID && h->ret.text[0] && strcmp(h->ret.text, "void") && strstr(h->ret.text, "struct")) {
    hvd_hsl_fail(L, &buf[0], "returning '%s' by value is not supported", h->ret.text);
    return -1;
  }
  hvd_hsl_next(L); /* '(' */
  hvd_hsl_skip_newlines(L);
  if (hvd_hsl_is_word(&L->t, "void")) { /* (void) */
    lexer save = *L;
    hvd_hsl_next(&save);
    while (save.t.k == T_NL) hvd_hsl_next(&save);
    if (hvd_hsl_is_punct(&save.t, ')')) *L = save;
  }
  while (!hvd_hsl_is_punct(&L->t, ')')) {
    if (h->nargs == HVD_HS_MAX_ARGS) {
      hvd_hsl_fail(L, &L->t, "too many parameters (at most %d)", HVD_HS_MAX_ARGS);
      return -1;
    }
    tok at0 = L->t;
    int m = hvd_hsl_collect(L, buf, 24, ",)", 1);
    if (m < 0) return -1;
    if (m == 0) {
      hvd_hsl_fail(L, &L->t, "expected a parameter type, found %s", hvd_hsl_show(&L->t, b, sizeof b));
      return -1;
    }
    int i = h->nargs;
    if (hvd_hsl_make_type(L, buf, m, &h->args[i], h->argname[i], sizeof h->argname[i], &at0) < 0) return -1;
    if (h->args[i].cls == HVD_HS_VOID) {
      hvd_hsl_fail(L, &at0, "parameter of type '%s' (only 'void' alone means no parameters)", h->args[i].text);
      return -1;
    }
    for (int j = 0; j < i && h->argname[i][0]; j++)
      if (!strcmp(h->argname[j], h->argname[i])) {
        hvd_hsl_fail(L, &at0, "two parameters named '%s'", h->argname[i]);
        return -1;
      }
    h->nargs++;
    if (hvd_hsl_is_punct(&L->t, ',')) {
      hvd_hsl_next(L);
      hvd_hsl_skip_newlines(L);
      if (hvd_hsl_is_punct(&L->t, ')')) {
        hvd_hsl_fail(L, &L->t, "expected a parameter after ','");
        return -1;
      }
    }
  }
  hvd_hsl_next(L); /* ')' */
  if (hvd_hsl_is_punct(&L->t, ';')) hvd_hsl_next(L);
  return L->failed ? -1 : 0;
}

/* ------------------------------------------------------------------ expressions */

static int find_arg(lexer *L, const hvd_hs_hook *h, const tok *t) {
  char b[64];
  if (t->k == T_ARGN) {
    if (t->v < 1 || t->v > h->nargs) {
      hvd_hsl_fail(L, t, "argument $%lld out of range: '%s' has %d argument%s ($1 to $%d)", (long long)t->v, h->name,
                   h->nargs, h->nargs == 1 ? "" : "s", h->nargs);
      return -1;
    }
    return (int)t->v - 1;
  }
  for (int i = 0; i < h->nargs; i++)
    if (t->n == strlen(h->argname[i]) && !memcmp(t->s, h->argname[i], t->n)) return i;
  char names[256] = "";
  for (int i = 0; i < h->nargs; i++) {
    char r[80];
    size_t k = strlen(names);
    snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", hvd_hs_argref(h, i, r, sizeof r));
  }
  const char *list[HVD_HS_MAX_ARGS + 1];
  int k = 0;
  for (int i = 0; i < h->nargs; i++)
    if (h->argname[i][0]) list[k++] = h->argname[i];
  list[k] = NULL;
  const char *s = hvd_hsl_closest(t, list);
  hvd_hsl_fail(L, t, "'%s' has no argument %s%s%s%s (its arguments: %s)", h->name, hvd_hsl_show(t, b, sizeof b),
               s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "", h->nargs ? names : "none");
  return -1;
}

static int emit(lexer *L, hvd_hs_expr *e, uint8_t op, int64_t v) {
  if (e->n == HVD_HS_EXPR_MAX) {
    hvd_hsl_fail(L, &L->t, "expression too long (at most %d terms and operators)", HVD_HS_EXPR_MAX);
    return -1;
  }
  e->t[e->n].op = op;
  e->t[e->n].v = v;
  e->n++;
  return 0;
}

static int parse_sum(lexer *L, const hvd_hs_hook *h, hvd_hs_expr *e, int depth);

static int parse_unary(lexer *L, const hvd_hs_hook *h, hvd_hs_expr *e, int depth) {
  char b[64];
  if (depth > 16) {
    hvd_hsl_fail(L, &L->t, "expression nested too deeply");
    return -1;
  }
  tok t = L->t;
  if (hvd_hsl_is_punct(&t, '-')) {
    hvd_hsl_next(L);
    if (parse_unary(L, h, e, depth + 1) < 0) return -1;
    return emit(L, e, HVD_HX_NEG, 0);
  }
  if (hvd_hsl_is_punct(&t, '(')) {
    hvd_hsl_next(L);
    if (parse_sum(L, h, e, depth + 1) < 0) return -1;
    if (!hvd_hsl_is_punct(&L->t, ')')) {
      hvd_hsl_fail(L, &L->t, "expected ')', found %s", hvd_hsl_show(&L->t, b, sizeof b));
      return -1;
    }
    hvd_hsl_next(L);
    return 0;
  }
  if (t.k == T_INT) {
    hvd_hsl_next(L);
    return emit(L, e, HVD_HX_CONST, t.v);
  }
  int deref = 0;
  if (hvd_hsl_is_punct(&t, '*')) {
    deref = 1;
    hvd_hsl_next(L);
    t = L->t;
  }
  if (t.k != T_ID && t.k != T_ARGN) {
    hvd_hsl_fail(L, &t, "expected a number, an argument name, $N or '(' in the expression, found %s",
                 hvd_hsl_show(&t, b, sizeof b));
    return -1;
  }
  int i = find_arg(L, h, &t);
  if (i < 0) return -1;
  const hvd_hs_type *ty = &h->args[i];
  char r[80];
  if (deref) {
    if (ty->cls != HVD_HS_PTR || (ty->pcls != HVD_HS_SINT && ty->pcls != HVD_HS_UINT)) {
      hvd_hsl_fail(L, &t, "'*%s' needs a pointer to an integer, but %s is '%s'", hvd_hs_argref(h, i, r, sizeof r),
                   hvd_hs_argref(h, i, r, sizeof r), ty->text);
      return -1;
    }
  } else if (ty->cls != HVD_HS_SINT && ty->cls != HVD_HS_UINT) {
    hvd_hsl_fail(
        L, &t, "%s is '%s'; an expression uses integer arguments%s", hvd_hs_argref(h, i, r, sizeof r), ty->text,
        ty->cls == HVD_HS_PTR && (ty->pcls == HVD_HS_SINT || ty->pcls == HVD_HS_UINT) ? " (write '*name' to read "
                                                                                        "the integer it points to)"
                                                                                      : "");
    return -1;
  }
  hvd_hsl_next(L);
  return emit(L, e, deref ? HVD_HX_DEREF : HVD_HX_ARG, i);
}

static int parse_term(lexer *L, const hvd_hs_hook *h, hvd_hs_expr *e, int depth) {
  if (parse_unary(L, h, e, depth) < 0) return -1;
  while (hvd_hsl_is_punct(&L->t, '*') || hvd_hsl_is_punct(&L->t, '/') || hvd_hsl_is_punct(&L->t, '%')) {
    char c = L->t.c;
    hvd_hsl_next(L);
    if (parse_unary(L, h, e, depth) < 0) return -1;
    if (emit(L, e, c == '*' ? HVD_HX_MUL : c == '/' ? HVD_HX_DIV : HVD_HX_MOD, 0) < 0) return -1;
  }
  return 0;
}

static int parse_sum(lexer *L, const hvd_hs_hook *h, hvd_hs_expr *e, int depth) {
  if (parse_term(L, h, e, depth) < 0) return -1;
  while (hvd_hsl_is_punct(&L->t, '+') || hvd_hsl_is_punct(&L->t, '-')) {
    char c = L->t.c;
    hvd_hsl_next(L);
    if (parse_term(L, h, e, depth) < 0) return -1;
    if (emit(L, e, c == '+' ? HVD_HX_ADD : HVD_HX_SUB, 0) < 0) return -1;
  }
  return 0;
}

static int parse_expr(lexer *L, const hvd_hs_hook *h, hvd_hs_expr *e) {
  const char *start = L->t.s;
  memset(e, 0, sizeof *e);
  if (parse_sum(L, h, e, 0) < 0) return -1;
  /* the text as written: from the first token to the end of the last */
  const char *end = L->t.s;
  while (end > start && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r')) end--;
  size_t len = (size_t)(end - start);
  if (len >= sizeof e->text) len = sizeof e->text - 1;
  memcpy(e->text, start, len);
  e->text[len] = 0;
  return 0;
}

/* ------------------------------------------------------------------ actions */

static const char *const VERBS[] = {"allreduce", "broadcast", "shard", NULL};
static const char *const DTYPES[] = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", NULL};
static const char *const OPS[] = {"sum", "avg", "min", "max", NULL};

static int word_index(const tok *t, const char *const *words) {
  for (int i = 0; words[i]; i++)
    if (hvd_hsl_is_word(t, words[i])) return i;
  return -1;
}

static int end_of_action(const tok *t) { return t->k == T_NL || t->k == T_EOF || hvd_hsl_is_punct(t, ';'); }

static int expect_value(lexer *L, const tok *key) {
  char b[64];
  if (!hvd_hsl_is_punct(&L->t, '=')) {
    hvd_hsl_fail(L, &L->t, "expected '=' after '%.*s', found %s", (int)key->n, key->s,
                 hvd_hsl_show(&L->t, b, sizeof b));
    return -1;
  }
  hvd_hsl_next(L);
  return 0;
}

static int pick_word(lexer *L, const char *what, const char *const *words, const char *list) {
  char b[64];
  int i = word_index(&L->t, words);
  if (i < 0) {
    const char *s = L->t.k == T_ID ? hvd_hsl_closest(&L->t, words) : NULL;
    hvd_hsl_fail(L, &L->t, "unknown %s %s%s%s%s (expected %s)", what, hvd_hsl_show(&L->t, b, sizeof b),
                 s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "", list);
    return -1;
  }
  hvd_hsl_next(L);
  return i;
}

static int dtype_fits(const hvd_hs_type *t, int dtype) {
  if (t->dtype == dtype) return 1;
  if (t->wide16 == 2) return 1;
  if (t->wide16 == 1) return dtype == HVD_FLOAT16 || dtype == HVD_BFLOAT16;
  return 0;
}

static int parse_action(lexer *L, hvd_hs_hook *h) {
  char b[64], r[80];
  if (h->nactions == HVD_HS_MAX_ACTIONS) {
    hvd_hsl_fail(L, &L->t, "too many actions for '%s' (at most %d)", h->name, HVD_HS_MAX_ACTIONS);
    return -1;
  }
  hvd_hs_action *a = &h->act[h->nactions];
  memset(a, 0, sizeof *a);
  tok argt = L->t;
  a->line = argt.line, a->col = argt.col;
  int i = find_arg(L, h, &argt);
  if (i < 0) return -1;
  a->arg = (uint8_t)i;
  hvd_hsl_next(L); /* the reference */
  hvd_hsl_next(L); /* ':' */
  tok verbt = L->t;
  if (end_of_action(&verbt)) {
    hvd_hsl_fail(L, &verbt, "expected an action after '%s:' (allreduce, broadcast or shard)",
                 hvd_hs_argref(h, i, r, sizeof r));
    return -1;
  }
  int verb = pick_word(L, "action", VERBS, "allreduce, broadcast or shard");
  if (verb < 0) return -1;
  a->verb = (uint8_t)verb;
  a->dtype = -1;
  a->op = HVD_AVG;
  int have_count = 0, have_dtype = 0, have_op = 0, have_when = 0, have_calls = 0, have_root = 0, have_mode = 0;
  static const char *const allreduce_opts[] = {"count", "dtype", "op", "when", "before", "after", NULL};
  static const char *const broadcast_opts[] = {"count", "dtype", "root", "when", "calls", "before", "after",
                                               "first", "every", NULL};
  static const char *const shard_opts[] = {"stride", "block", "total", NULL};
  const char *const *opts = verb == HVD_HA_ALLREDUCE ? allreduce_opts : verb == HVD_HA_BROADCAST ? broadcast_opts
                                                                                                : shard_opts;
  const char *optlist = verb == HVD_HA_ALLREDUCE ? "count=, dtype=, op=, before or after"
                        : verb == HVD_HA_BROADCAST ? "count=, dtype=, root=, before, after, first or every"
                                                   : "stride, or block with total=";
  while (!end_of_action(&L->t)) {
    tok k = L->t;
    int o = k.k == T_ID ? word_index(&k, opts) : -1;
    if (o < 0) {
      const char *s = k.k == T_ID ? hvd_hsl_closest(&k, opts) : NULL;
      hvd_hsl_fail(L, &k, "unknown option %s for %s%s%s%s (expected %s)", hvd_hsl_show(&k, b, sizeof b), VERBS[verb],
                   s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "", optlist);
      return -1;
    }
    const char *key = opts[o];
    int dup = 0;
    hvd_hsl_next(L);
    if (!strcmp(key, "count") || !strcmp(key, "total")) {
      dup = have_count++;
      if (!dup && (expect_value(L, &k) < 0 || parse_expr(L, h, &a->count) < 0)) return -1;
    } else if (!strcmp(key, "dtype")) {
      dup = have_dtype++;
      if (!dup && (expect_value(L, &k) < 0 ||
                   (a->dtype = (int8_t)pick_word(L, "dtype", DTYPES,
                                                 "float32, float64, float16, bfloat16, int32, int64 or uint8")) < 0))
        return -1;
    } else if (!strcmp(key, "op")) {
      dup = have_op++;
      int op = -1;
      if (!dup && (expect_value(L, &k) < 0 || (op = pick_word(L, "op", OPS, "sum, avg, min or max")) < 0)) return -1;
      a->op = (uint8_t)op;
    } else if (!strcmp(key, "root")) {
      dup = have_root++;
      if (!dup) {
        if (expect_value(L, &k) < 0) return -1;
        if (L->t.k != T_INT || L->t.v > 1 << 20) {
          hvd_hsl_fail(L, &L->t, "expected a rank number after 'root=', found %s", hvd_hsl_show(&L->t, b, sizeof b));
          return -1;
        }
        a->root = (int)L->t.v;
        hvd_hsl_next(L);
      }
    } else if (!strcmp(key, "when") || !strcmp(key, "before") || !strcmp(key, "after")) {
      dup = have_when++;
      int after = !strcmp(key, "after");
      if (!dup && !strcmp(key, "when")) {
        static const char *const W[] = {"before", "after", NULL};
        if (expect_value(L, &k) < 0 || (after = pick_word(L, "time", W, "before or after")) < 0) return -1;
      }
      a->after = (uint8_t)after;
    } else if (!strcmp(key, "calls") || !strcmp(key, "first") || !strcmp(key, "every")) {
      dup = have_calls++;
      int every = !strcmp(key, "every");
      if (!dup && !strcmp(key, "calls")) {
        static const char *const C[] = {"first", "every", NULL};
        if (expect_value(L, &k) < 0 || (every = pick_word(L, "calls", C, "first or every")) < 0) return -1;
      }
      a->every = (uint8_t)every;
    } else { /* stride | block */
      dup = have_mode++;
      a->block = !strcmp(key, "block");
    }
    if (dup) {
      hvd_hsl_fail(L, &k, "'%s' given twice (or with a conflicting option) for %s of %s", key, VERBS[verb],
                   hvd_hs_argref(h, i, r, sizeof r));
      return -1;
    }
  }
  const hvd_hs_type *ty = &h->args[i];
  hvd_hs_argref(h, i, r, sizeof r);
  if (verb == HVD_HA_SHARD) {
    if (ty->cls != HVD_HS_SINT && ty->cls != HVD_HS_UINT) {
      hvd_hsl_fail(L, &argt, "shard remaps an integer index, but %s is '%s'", r, ty->text);
      return -1;
    }
    if (!have_mode) {
      hvd_hsl_fail(L, &verbt,
                   "shard of %s needs a mode: 'stride' (i -> i*N + r) or 'block total=EXPR' (rank r reads "
                   "r*(total/N) + i)",
                   r);
      return -1;
    }
    if (a->block && !have_count) {
      hvd_hsl_fail(L, &verbt, "shard block of %s needs total=EXPR (the number of items the index runs over)", r);
      return -1;
    }
    if (!a->block && have_count) {
      hvd_hsl_fail(L, &verbt, "total= applies to 'shard block', not 'shard stride'");
      return -1;
    }
  } else {
    const char *v = VERBS[verb];
    if (ty->cls != HVD_HS_PTR) {
      hvd_hsl_fail(L, &argt, "%s needs a buffer, but %s is '%s' (not a pointer)", v, r, ty->text);
      return -1;
    }
    if (ty->pcls == HVD_HS_PTR) {
      hvd_hsl_fail(L, &argt, "%s is '%s', a pointer to pointers; %s needs a pointer to the elements", r, ty->text, v);
      return -1;
    }
    if (!have_count) {
      hvd_hsl_fail(L, &verbt,
                   "%s of %s needs count=EXPR: its length in elements (a constant, an argument such as n, or an "
                   "expression such as rows*cols)",
                   v, r);
      return -1;
    }
    if (!have_dtype) {
      if (ty->dtype < 0) {
        hvd_hsl_fail(L, &verbt,
                     "%s of %s needs dtype=: '%s' does not say what the elements are (float32, float64, "
                     "float16, bfloat16, int32, int64 or uint8)",
                     v, r, ty->text);
        return -1;
      }
      a->dtype = ty->dtype;
    } else if (!dtype_fits(ty, a->dtype)) {
      char holds[40] = "";
      if (ty->dtype >= 0) snprintf(holds, sizeof holds, " (%s elements)", DTYPES[ty->dtype]);
      hvd_hsl_fail(L, &verbt, "dtype=%s does not match %s, a '%s'%s", DTYPES[a->dtype], r, ty->text, holds);
      return -1;
    }
  }
  for (int j = 0; j < h->nactions; j++)
    if (h->act[j].arg == a->arg && h->act[j].verb == a->verb) {
      hvd_hsl_fail(L, &argt, "%s already has a %s action (line %d)", r, VERBS[verb], h->act[j].line);
      return -1;
    }
  h->nactions++;
  if (hvd_hsl_is_punct(&L->t, ';')) hvd_hsl_next(L);
  return 0;
}

/* ------------------------------------------------------------------ spec */

int hvd_hookspec_parse(const char *text, size_t len, const char *where, hvd_hookspec *out, char *err,
                       size_t errlen) {
  lexer L;
  memset(&L, 0, sizeof L);
  L.p = L.line_start = text;
  L.end = text + len;
  L.line = 1;
  L.where = where ? where : "HVDSHIM_HOOKS";
  L.err = err;
  L.errlen = errlen;
  memset(out, 0, sizeof *out);
  if (errlen) err[0] = 0;
  if (memchr(text, 0, len)) {
    const char *z = memchr(text, 0, len);
    tok at = {.line = 1, .col = 1};
    for (const char *p = text; p < z; p++)
      if (*p == '\n') at.line++, at.col = 1;
      else at.col++;
    hvd_hsl_fail(&L, &at, "a NUL byte in the spec (is it a text file?)");
    return -1;
  }
  int cap = 0;
  hvd_hsl_next(&L);
  for (;;) {
    while (L.t.k == T_NL || hvd_hsl_is_punct(&L.t, ';')) hvd_hsl_next(&L);
    if (L.failed || L.t.k == T_EOF) break;
    if (hvd_hsl_action_ahead(&L)) {
      char b[64];
      hvd_hsl_fail(&L, &L.t,
                   "action %s before any prototype (expected a C prototype such as "
                   "'void sgd_update(float *w, const float *g, long n)' first)",
                   hvd_hsl_show(&L.t, b, sizeof b));
      break;
    }
    if (out->n == cap) {
      if (cap == HVD_HS_MAX_HOOKS) {
        hvd_hsl_fail(&L, &L.t, "too many hooks (at most %d)", HVD_HS_MAX_HOOKS);
        break;
      }
      int nc = cap ? cap * 2 : 4;
      hvd_hs_hook *nh = realloc(out->hooks, (size_t)nc * sizeof *nh);
      if (!nh) {
        hvd_hsl_fail(&L, &L.t, "out of memory");
        break;
      }
      out->hooks = nh, cap = nc;
    }
    hvd_hs_hook *h = &out->hooks[out->n];
    memset(h, 0, sizeof *h);
    tok start = L.t;
    if (parse_prototype(&L, h) < 0) break;
    for (int j = 0; j < out->n; j++)
      if (!strcmp(out->hooks[j].name, h->name)) {
        hvd_hsl_fail(&L, &start, "'%s' is hooked twice (first at line %d); put all its actions under one prototype",
                     h->name, out->hooks[j].line);
        break;
      }
    if (L.failed) break;
    for (;;) {
      hvd_hsl_skip_newlines(&L);
      if (!hvd_hsl_action_ahead(&L)) break;
      if (parse_action(&L, h) < 0) break;
    }
    if (L.failed) break;
    if (h->nactions == 0) {
      char b[64];
      hvd_hsl_fail(&L, &L.t,
                   "'%s' has no actions (expected lines such as 'g: allreduce count=n' after its prototype), "
                   "found %s",
                   h->name, hvd_hsl_show(&L.t, b, sizeof b));
      break;
    }
    out->n++;
  }
  if (!L.failed && out->n == 0) {
    tok at = {.line = L.line, .col = 1};
    hvd_hsl_fail(&L, &at, "no hooks in the spec (expected a C prototype followed by actions)");
  }
  if (L.failed) {
    hvd_hookspec_free(out);
    return -1;
  }
  return 0;
}

void hvd_hookspec_free(hvd_hookspec *spec) {
  free(spec->hooks);
  spec->hooks = NULL;
  spec->n = 0;
}

const char *hvd_hs_describe(const hvd_hs_hook *h, const hvd_hs_action *a, char *buf, size_t n) {
  char r[80];
  hvd_hs_argref(h, a->arg, r, sizeof r);
  const char *when = a->after ? "after" : "before";
  switch (a->verb) {
  case HVD_HA_ALLREDUCE:
    snprintf(buf, n, "allreduce %s (%s x %s, %s) %s each call", r, DTYPES[a->dtype], a->count.text, OPS[a->op], when);
    break;
  case HVD_HA_BROADCAST:
    snprintf(buf, n, "broadcast %s (%s x %s) from rank %d %s %s", r, DTYPES[a->dtype], a->count.text, a->root, when,
             a->every ? "each call" : "the first call");
    break;
  default:
    if (a->block) snprintf(buf, n, "shard %s: rank r of N reads r*((%s)/N) + i", r, a->count.text);
    else snprintf(buf, n, "shard %s: rank r of N reads i*N + r", r);
    break;
  }
  return buf;
}
