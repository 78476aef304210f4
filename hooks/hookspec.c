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
 * Every error names where:line:col, what was found and what was expected. */
#include "hookspec.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvdshim.h"

/* ------------------------------------------------------------------ lexer */

enum { T_EOF, T_NL, T_ID, T_INT, T_ARGN, T_PUNCT, T_ELLIPSIS };

typedef struct {
  int k;
  const char *s; /* start in the source */
  size_t n;      /* length */
  int64_t v;     /* T_INT value, T_ARGN number */
  char c;        /* T_PUNCT character */
  int line, col;
} tok;

typedef struct {
  const char *p, *end, *line_start;
  int line;
  const char *where;
  char *err;
  size_t errlen;
  int failed;
  tok t; /* current token */
} lexer;

static void fail(lexer *L, const tok *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(lexer *L, const tok *at, const char *fmt, ...) {
  if (L->failed) return;
  L->failed = 1;
  int k = snprintf(L->err, L->errlen, "%s:%d:%d: ", L->where, at->line, at->col);
  if (k < 0 || (size_t)k >= L->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(L->err + k, L->errlen - (size_t)k, fmt, ap);
  va_end(ap);
}

/* A token as the user wrote it, for messages. */
static const char *show(const tok *t, char *buf, size_t n) {
  switch (t->k) {
  case T_EOF: return "end of input";
  case T_NL: return "end of line";
  default: break;
  }
  size_t len = t->n < 40 ? t->n : 40;
  size_t k = 0;
  buf[k++] = '\'';
  for (size_t i = 0; i < len && k + 6 < n; i++) {
    unsigned char ch = (unsigned char)t->s[i];
    if (ch >= 32 && ch < 127) buf[k++] = (char)ch;
    else k += (size_t)snprintf(buf + k, n - k, "\\x%02x", ch);
  }
  if (t->n > len && k + 5 < n) buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
  buf[k++] = '\'';
  buf[k] = 0;
  return buf;
}

static int is_idstart(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_idchar(int c) { return is_idstart(c) || (c >= '0' && c <= '9'); }

static void next(lexer *L) {
  if (L->failed) {
    L->t.k = T_EOF;
    return;
  }
  for (;;) {
    while (L->p < L->end && (*L->p == ' ' || *L->p == '\t' || *L->p == '\r' || *L->p == '\f' || *L->p == '\v')) L->p++;
    if (L->p < L->end && (*L->p == '#' || (*L->p == '/' && L->p + 1 < L->end && L->p[1] == '/'))) {
      while (L->p < L->end && *L->p != '\n') L->p++;
      continue;
    }
    break;
  }
  tok *t = &L->t;
  memset(t, 0, sizeof *t);
  t->s = L->p;
  t->line = L->line;
  t->col = (int)(L->p - L->line_start) + 1;
  if (L->p >= L->end) {
    t->k = T_EOF;
    return;
  }
  unsigned char c = (unsigned char)*L->p;
  if (c == '\n') {
    t->k = T_NL;
    t->n = 1;
    L->p++;
    L->line++;
    L->line_start = L->p;
    return;
  }
  if (is_idstart(c)) {
    while (L->p < L->end && is_idchar((unsigned char)*L->p)) L->p++;
    if (L->p < L->end && *L->p == '@') { /* symbol version: name@VERSION or name@@VERSION */
      L->p++;
      if (L->p < L->end && *L->p == '@') L->p++;
      while (L->p < L->end && (is_idchar((unsigned char)*L->p) || *L->p == '.')) L->p++;
    }
    t->k = T_ID;
    t->n = (size_t)(L->p - t->s);
    return;
  }
  if ((c >= '0' && c <= '9') || c == '$') {
    int dollar = c == '$';
    if (dollar) L->p++;
    int base = 10;
    if (!dollar && L->p + 1 < L->end && L->p[0] == '0' && (L->p[1] == 'x' || L->p[1] == 'X')) base = 16, L->p += 2;
    uint64_t v = 0;
    int digits = 0, over = 0;
    for (; L->p < L->end; L->p++) {
      int d, ch = (unsigned char)*L->p;
      if (ch >= '0' && ch <= '9') d = ch - '0';
      else if (base == 16 && ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
      else if (base == 16 && ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
      else break;
      if (v > ((uint64_t)INT64_MAX - (uint64_t)d) / (uint64_t)base) over = 1;
      else v = v * (uint64_t)base + (uint64_t)d;
      digits++;
    }
    /* a suffix such as 10u or 1e3 is not part of the format */
    while (L->p < L->end && is_idchar((unsigned char)*L->p)) L->p++, digits = -1;
    t->n = (size_t)(L->p - t->s);
    char b[64];
    if (digits <= 0) {
      fail(L, t, "%s is not a number (expected %s)", show(t, b, sizeof b),
           dollar ? "$N, an argument's position from 1" : "decimal or 0x hexadecimal digits");
    } else if (over) {
      fail(L, t, "number %s is too large", show(t, b, sizeof b));
    }
    t->k = dollar ? T_ARGN : T_INT;
    t->v = (int64_t)v;
    return;
  }
  if (c == '.' && L->p + 2 < L->end && L->p[1] == '.' && L->p[2] == '.') {
    t->k = T_ELLIPSIS;
    t->n = 3;
    L->p += 3;
    return;
  }
  if (strchr("(),;:=*+-/%[]", c)) {
    t->k = T_PUNCT;
    t->c = (char)c;
    t->n = 1;
    L->p++;
    return;
  }
  t->n = 1;
  char b[64];
  fail(L, t, "unexpected character %s", show(t, b, sizeof b));
  t->k = T_EOF;
}

static int is_punct(const tok *t, char c) { return t->k == T_PUNCT && t->c == c; }
static int is_word(const tok *t, const char *w) { return t->k == T_ID && t->n == strlen(w) && !memcmp(t->s, w, t->n); }
static void copy_tok(const tok *t, char *dst, size_t n) {
  size_t len = t->n < n - 1 ? t->n : n - 1;
  memcpy(dst, t->s, len);
  dst[len] = 0;
}
static void skip_newlines(lexer *L) {
  while (L->t.k == T_NL) next(L);
}

/* Two-token lookahead: is the current token an argument reference followed by ':'? */
static int action_ahead(lexer *L) {
  if (L->t.k != T_ID && L->t.k != T_ARGN) return 0;
  lexer save = *L;
  next(&save);
  return !save.failed && is_punct(&save.t, ':');
}

/* ------------------------------------------------------------------ types */

static int edit_distance(const char *a, size_t na, const char *b) {
  size_t nb = strlen(b);
  if (na > 30 || nb > 30) return 99;
  int d[32][32];
  for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= na; i++)
    for (size_t j = 1; j <= nb; j++) {
      int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
      d[i][j] = c;
    }
  return d[na][nb];
}

/* The closest word of a NULL-terminated list within distance 2, or NULL. */
static const char *closest(const tok *t, const char *const *words) {
  const char *best = NULL;
  int bd = 3;
  for (int i = 0; words[i]; i++) {
    int d = edit_distance(t->s, t->n, words[i]);
    if (d < bd) bd = d, best = words[i];
  }
  return best;
}

typedef struct {
  const char *name;
  uint8_t cls, size;
  int8_t dtype;
} named_type;

/* Type names other than keyword combinations (typedefs of <stddef.h>,
 * <stdint.h>, <sys/types.h>, and the 16-bit float types of CUDA). */
static const named_type NAMED[] = {
    {"size_t", HVD_HS_UINT, 8, -1},     {"ssize_t", HVD_HS_SINT, 8, HVD_INT64},
    {"ptrdiff_t", HVD_HS_SINT, 8, HVD_INT64}, {"intptr_t", HVD_HS_SINT, 8, HVD_INT64},
    {"uintptr_t", HVD_HS_UINT, 8, -1},  {"off_t", HVD_HS_SINT, 8, HVD_INT64},
    {"int8_t", HVD_HS_SINT, 1, -1},     {"uint8_t", HVD_HS_UINT, 1, HVD_UINT8},
    {"int16_t", HVD_HS_SINT, 2, -1},    {"uint16_t", HVD_HS_UINT, 2, -1},
    {"int32_t", HVD_HS_SINT, 4, HVD_INT32}, {"uint32_t", HVD_HS_UINT, 4, -1},
    {"int64_t", HVD_HS_SINT, 8, HVD_INT64}, {"uint64_t", HVD_HS_UINT, 8, -1},
    {"half", HVD_HS_UINT, 2, HVD_FLOAT16}, {"__half", HVD_HS_UINT, 2, HVD_FLOAT16},
    {"__nv_bfloat16", HVD_HS_UINT, 2, HVD_BFLOAT16}, {"bfloat16", HVD_HS_UINT, 2, HVD_BFLOAT16},
    {NULL, 0, 0, 0}};

static const char *const TYPE_WORDS[] = {
    "void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "_Bool", "bool", "const",
    "volatile", "restrict", "struct", "union", "enum", "size_t", "ssize_t", "ptrdiff_t", "intptr_t", "uintptr_t",
    "off_t", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "half",
    "__half", "__nv_bfloat16", "bfloat16", NULL};

static int is_qualifier(const tok *t) {
  return is_word(t, "const") || is_word(t, "volatile") || is_word(t, "restrict") || is_word(t, "__restrict") ||
         is_word(t, "__restrict__") || is_word(t, "register") || is_word(t, "extern");
}

static int is_type_word(const tok *t) {
  for (int i = 0; TYPE_WORDS[i]; i++)
    if (is_word(t, TYPE_WORDS[i])) return 1;
  return is_qualifier(t);
}

static void append(char *dst, size_t n, const char *s, size_t len) {
  size_t k = strlen(dst);
  if (k && dst[k - 1] != '*' && k + 1 < n) dst[k++] = ' ', dst[k] = 0;
  if (k && dst[k - 1] == '*' && s[0] != '*' && k + 1 < n) dst[k++] = ' ', dst[k] = 0;
  if (s[0] == '*' && k && dst[k - 1] != ' ' && dst[k - 1] != '*' && k + 1 < n) dst[k++] = ' ', dst[k] = 0;
  if (len > n - 1 - k) len = n - 1 - k;
  memcpy(dst + k, s, len);
  dst[k + len] = 0;
}

/* Build a type from tokens t[0..n) (identifiers, '*', '[', ']', INT).  For a
 * parameter (name != NULL) a trailing identifier that is not a type word is
 * the parameter's name.  Returns 0, or -1 after fail(). */
static int make_type(lexer *L, const tok *t, int n, hvd_hs_type *ty, char *name, size_t name_n, const tok *at) {
  memset(ty, 0, sizeof *ty);
  ty->dtype = -1;
  int n_signed = 0, n_unsigned = 0, n_short = 0, n_long = 0, n_int = 0, n_char = 0, n_float = 0, n_double = 0,
      n_void = 0, n_bool = 0, n_tagged = 0, depth = 0, arrays = 0, bases = 0;
  const named_type *named = NULL;
  const tok *tagkw = NULL;
  char b[64];
  if (name) name[0] = 0;
  for (int i = 0; i < n; i++) {
    const tok *x = &t[i];
    if (is_punct(x, '*')) {
      depth++;
      append(ty->text, sizeof ty->text, "*", 1);
      continue;
    }
    if (is_punct(x, '[')) { /* float w[] or float w[16]: a pointer */
      if (i + 1 < n && t[i + 1].k == T_INT) i++;
      if (i + 1 >= n || !is_punct(&t[i + 1], ']')) {
        fail(L, x, "expected ']' to close the array parameter");
        return -1;
      }
      i++;
      arrays++;
      continue;
    }
    if (x->k != T_ID) {
      fail(L, x, "unexpected %s in a type (expected a C type such as 'float *' or 'long')", show(x, b, sizeof b));
      return -1;
    }
    if (arrays) {
      fail(L, x, "unexpected %s after an array parameter", show(x, b, sizeof b));
      return -1;
    }
    if (is_qualifier(x)) {
      if (!is_word(x, "extern") && !is_word(x, "register")) append(ty->text, sizeof ty->text, x->s, x->n);
      continue;
    }
    if (is_word(x, "struct") || is_word(x, "union") || is_word(x, "enum")) {
      if (i + 1 >= n || t[i + 1].k != T_ID) {
        fail(L, x, "expected a tag name after '%.*s'", (int)x->n, x->s);
        return -1;
      }
      tagkw = x;
      append(ty->text, sizeof ty->text, x->s, x->n);
      i++;
      append(ty->text, sizeof ty->text, t[i].s, t[i].n);
      n_tagged++, bases++;
      continue;
    }
    int known = 1;
    if (is_word(x, "signed")) n_signed++;
    else if (is_word(x, "unsigned")) n_unsigned++;
    else if (is_word(x, "short")) n_short++;
    else if (is_word(x, "long")) n_long++;
    else if (is_word(x, "int")) n_int++;
    else if (is_word(x, "char")) n_char++, bases++;
    else if (is_word(x, "float")) n_float++, bases++;
    else if (is_word(x, "double")) n_double++, bases++;
    else if (is_word(x, "void")) n_void++, bases++;
    else if (is_word(x, "_Bool") || is_word(x, "bool")) n_bool++, bases++;
    else {
      known = 0;
      for (const named_type *nt = NAMED; nt->name; nt++)
        if (is_word(x, nt->name)) named = nt, known = 1, bases++;
    }
    if (known) {
      append(ty->text, sizeof ty->text, x->s, x->n);
      continue;
    }
    /* not a type word: the parameter's name, if it comes last after a type */
    int have_base = bases || n_signed || n_unsigned || n_short || n_long || n_int;
    if (name && i == n - 1 && have_base) {
      if (x->n >= name_n || memchr(x->s, '@', x->n)) {
        fail(L, x, "parameter name %s is not a C identifier of at most %zu characters", show(x, b, sizeof b),
             name_n - 1);
        return -1;
      }
      copy_tok(x, name, name_n);
      continue;
    }
    if (name && have_base && i + 1 < n && is_punct(&t[i + 1], '[')) {
      copy_tok(x, name, name_n);
      continue;
    }
    const char *s = closest(x, TYPE_WORDS);
    fail(L, x, "unknown type %s%s%s%s (expected a C type: void, char, short, int, long, float, double, size_t, "
         "int32_t, ... or a pointer to one; write a typedef as the type it stands for)",
         show(x, b, sizeof b), s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
    return -1;
  }
  depth += arrays;
  if (arrays) append(ty->text, sizeof ty->text, "*", 1);
  /* the base type */
  uint8_t cls = 0, size = 0;
  int8_t dtype = -1;
  int n_int_words = n_signed + n_unsigned + n_short + n_long + n_int;
  if (bases > 1 || (n_signed && n_unsigned) || (n_short && n_long) || n_long > 2 ||
      ((n_float || n_void || n_bool || n_tagged || named) && n_int_words) || (n_double && n_int_words != n_long) ||
      (n_double && n_long > 1) || (n_char && (n_short || n_long || n_int))) {
    fail(L, at, "'%s' is not a valid C type", ty->text);
    return -1;
  }
  if (named) cls = named->cls, size = named->size, dtype = named->dtype;
  else if (n_void) cls = HVD_HS_VOID;
  else if (n_bool) cls = HVD_HS_UINT, size = 1;
  else if (n_float) cls = HVD_HS_FLOAT, size = 4, dtype = HVD_FLOAT32;
  else if (n_double) cls = n_long ? HVD_HS_LDOUBLE : HVD_HS_DOUBLE, size = n_long ? 16 : 8,
                     dtype = n_long ? -1 : HVD_FLOAT64;
  else if (n_char) cls = n_unsigned ? HVD_HS_UINT : HVD_HS_SINT, size = 1, dtype = n_unsigned ? HVD_UINT8 : -1;
  else if (n_tagged) {
    if (is_word(tagkw, "enum")) cls = HVD_HS_SINT, size = 4;
    else cls = HVD_HS_VOID; /* struct/union: only through a pointer */
  } else if (n_int_words) {
    cls = n_unsigned ? HVD_HS_UINT : HVD_HS_SINT;
    size = n_short ? 2 : n_long ? 8 : 4;
    if (!n_unsigned) dtype = size == 4 ? HVD_INT32 : size == 8 ? HVD_INT64 : -1;
  } else {
    fail(L, at, "expected a type%s", n ? "" : " before the name");
    return -1;
  }
  if (depth == 0) {
    if (n_tagged && cls == HVD_HS_VOID) {
      fail(L, at, "'%s' passed by value is not supported (only scalars and pointers; a struct by pointer is fine)",
           ty->text);
      return -1;
    }
    ty->cls = cls, ty->size = size;
    return 0;
  }
  ty->cls = HVD_HS_PTR;
  ty->size = sizeof(void *);
  if (depth == 1) {
    ty->pcls = n_tagged && cls == HVD_HS_VOID ? HVD_HS_VOID : cls;
    ty->psize = size;
    ty->dtype = dtype;
    /* void, char and struct pointers take any dtype= ; 16-bit integers may hold float16/bfloat16 */
    ty->wide16 = (n_void || n_tagged || (n_char && !n_unsigned && !n_signed)) ? 2 : (size == 2 && dtype < 0) ? 1 : 0;
  } else {
    ty->pcls = HVD_HS_PTR;
  }
  return 0;
}

/* Collect type tokens until one of the stop characters (or, for the
 * prototype head, '(').  Newlines are skipped when `skip_nl`. */
static int collect(lexer *L, tok *buf, int max, const char *stops, int skip_nl) {
  int n = 0;
  char b[64];
  for (;;) {
    if (skip_nl) skip_newlines(L);
    if (L->failed) return -1;
    const tok *x = &L->t;
    if (x->k == T_PUNCT && strchr(stops, x->c)) return n;
    if (x->k == T_ID || is_punct(x, '*') || is_punct(x, '[') || is_punct(x, ']') || (x->k == T_INT && n > 0)) {
      if (n == max) {
        fail(L, x, "type too long");
        return -1;
      }
      buf[n++] = *x;
      next(L);
      continue;
    }
    if (x->k == T_ELLIPSIS) {
      fail(L, x, "variadic functions ('...') can't be hooked: libffi needs every argument's type");
      return -1;
    }
    if (!strcmp(stops, "(")) {
      if (n == 0) fail(L, x, "expected a C prototype such as 'void sgd_update(float *w, const float *g, long n)', found %s",
                       show(x, b, sizeof b));
      else fail(L, x, "expected '(' after the function name, found %s", show(x, b, sizeof b));
    } else {
      fail(L, x, "expected ',' or ')' after a parameter, found %s", show(x, b, sizeof b));
    }
    return -1;
  }
}

/* ------------------------------------------------------------------ prototypes */

static int parse_prototype(lexer *L, hvd_hs_hook *h) {
  tok buf[24];
  tok first = L->t;
  h->line = first.line, h->col = first.col;
  int n = collect(L, buf, 24, "(", 0);
  if (n < 0) return -1;
  char b[64];
  if (n == 0) {
    fail(L, &first, "expected a C prototype such as 'void sgd_update(float *w, const float *g, long n)', found '('");
    return -1;
  }
  if (n == 1 || buf[n - 1].k != T_ID || is_type_word(&buf[n - 1])) {
    fail(L, &buf[n - 1], n == 1 ? "expected the return type before the function name %s"
                                : "expected the function name before '(', found %s",
         show(&buf[n - 1], b, sizeof b));
    return -1;
  }
  const tok *nm = &buf[n - 1];
  const char *at = memchr(nm->s, '@', nm->n);
  size_t base = at ? (size_t)(at - nm->s) : nm->n;
  if (base >= sizeof h->name) {
    fail(L, nm, "function name too long (at most %zu characters)", sizeof h->name - 1);
    return -1;
  }
  memcpy(h->name, nm->s, base);
  h->name[base] = 0;
  if (at) {
    const char *v = at + 1;
    if (v < nm->s + nm->n && *v == '@') v++;
    size_t vl = (size_t)(nm->s + nm->n - v);
    if (vl == 0 || vl >= sizeof h->version) {
      fail(L, nm, "expected a symbol version after '@' (as in 'name@LIB_1.0')");
      return -1;
    }
    memcpy(h->version, v, vl);
    h->version[vl] = 0;
  }
  if (make_type(L, buf, n - 1, &h->ret, NULL, 0, &buf[0]) < 0) return -1;
  if (h->ret.cls == HVD_HS_VOID && h->ret.text[0] && strcmp(h->ret.text, "void") && strstr(h->ret.text, "struct")) {
    fail(L, &buf[0], "returning '%s' by value is not supported", h->ret.text);
    return -1;
  }
  next(L); /* '(' */
  skip_newlines(L);
  if (is_word(&L->t, "void")) { /* (void) */
    lexer save = *L;
    next(&save);
    while (save.t.k == T_NL) next(&save);
    if (is_punct(&save.t, ')')) *L = save;
  }
  while (!is_punct(&L->t, ')')) {
    if (h->nargs == HVD_HS_MAX_ARGS) {
      fail(L, &L->t, "too many parameters (at most %d)", HVD_HS_MAX_ARGS);
      return -1;
    }
    tok at0 = L->t;
    int m = collect(L, buf, 24, ",)", 1);
    if (m < 0) return -1;
    if (m == 0) {
      fail(L, &L->t, "expected a parameter type, found %s", show(&L->t, b, sizeof b));
      return -1;
    }
    int i = h->nargs;
    if (make_type(L, buf, m, &h->args[i], h->argname[i], sizeof h->argname[i], &at0) < 0) return -1;
    if (h->args[i].cls == HVD_HS_VOID) {
      fail(L, &at0, "parameter of type '%s' (only 'void' alone means no parameters)", h->args[i].text);
      return -1;
    }
    for (int j = 0; j < i && h->argname[i][0]; j++)
      if (!strcmp(h->argname[j], h->argname[i])) {
        fail(L, &at0, "two parameters named '%s'", h->argname[i]);
        return -1;
      }
    h->nargs++;
    if (is_punct(&L->t, ',')) {
      next(L);
      skip_newlines(L);
      if (is_punct(&L->t, ')')) {
        fail(L, &L->t, "expected a parameter after ','");
        return -1;
      }
    }
  }
  next(L); /* ')' */
  if (is_punct(&L->t, ';')) next(L);
  return L->failed ? -1 : 0;
}

/* ------------------------------------------------------------------ expressions */

static int find_arg(lexer *L, const hvd_hs_hook *h, const tok *t) {
  char b[64];
  if (t->k == T_ARGN) {
    if (t->v < 1 || t->v > h->nargs) {
      fail(L, t, "argument $%lld out of range: '%s' has %d argument%s ($1 to $%d)", (long long)t->v, h->name, h->nargs,
           h->nargs == 1 ? "" : "s", h->nargs);
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
  const char *s = closest(t, list);
  fail(L, t, "'%s' has no argument %s%s%s%s (its arguments: %s)", h->name, show(t, b, sizeof b),
       s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "", h->nargs ? names : "none");
  return -1;
}

static int emit(lexer *L, hvd_hs_expr *e, uint8_t op, int64_t v) {
  if (e->n == HVD_HS_EXPR_MAX) {
    fail(L, &L->t, "expression too long (at most %d terms and operators)", HVD_HS_EXPR_MAX);
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
    fail(L, &L->t, "expression nested too deeply");
    return -1;
  }
  tok t = L->t;
  if (is_punct(&t, '-')) {
    next(L);
    if (parse_unary(L, h, e, depth + 1) < 0) return -1;
    return emit(L, e, HVD_HX_NEG, 0);
  }
  if (is_punct(&t, '(')) {
    next(L);
    if (parse_sum(L, h, e, depth + 1) < 0) return -1;
    if (!is_punct(&L->t, ')')) {
      fail(L, &L->t, "expected ')', found %s", show(&L->t, b, sizeof b));
      return -1;
    }
    next(L);
    return 0;
  }
  if (t.k == T_INT) {
    next(L);
    return emit(L, e, HVD_HX_CONST, t.v);
  }
  int deref = 0;
  if (is_punct(&t, '*')) {
    deref = 1;
    next(L);
    t = L->t;
  }
  if (t.k != T_ID && t.k != T_ARGN) {
    fail(L, &t, "expected a number, an argument name, $N or '(' in the expression, found %s", show(&t, b, sizeof b));
    return -1;
  }
  int i = find_arg(L, h, &t);
  if (i < 0) return -1;
  const hvd_hs_type *ty = &h->args[i];
  char r[80];
  if (deref) {
    if (ty->cls != HVD_HS_PTR || (ty->pcls != HVD_HS_SINT && ty->pcls != HVD_HS_UINT)) {
      fail(L, &t, "'*%s' needs a pointer to an integer, but %s is '%s'", hvd_hs_argref(h, i, r, sizeof r),
           hvd_hs_argref(h, i, r, sizeof r), ty->text);
      return -1;
    }
  } else if (ty->cls != HVD_HS_SINT && ty->cls != HVD_HS_UINT) {
    fail(L, &t, "%s is '%s'; an expression uses integer arguments%s", hvd_hs_argref(h, i, r, sizeof r), ty->text,
         ty->cls == HVD_HS_PTR && (ty->pcls == HVD_HS_SINT || ty->pcls == HVD_HS_UINT) ? " (write '*name' to read "
                                                                                          "the integer it points to)"
                                                                                        : "");
    return -1;
  }
  next(L);
  return emit(L, e, deref ? HVD_HX_DEREF : HVD_HX_ARG, i);
}

static int parse_term(lexer *L, const hvd_hs_hook *h, hvd_hs_expr *e, int depth) {
  if (parse_unary(L, h, e, depth) < 0) return -1;
  while (is_punct(&L->t, '*') || is_punct(&L->t, '/') || is_punct(&L->t, '%')) {
    char c = L->t.c;
    next(L);
    if (parse_unary(L, h, e, depth) < 0) return -1;
    if (emit(L, e, c == '*' ? HVD_HX_MUL : c == '/' ? HVD_HX_DIV : HVD_HX_MOD, 0) < 0) return -1;
  }
  return 0;
}

static int parse_sum(lexer *L, const hvd_hs_hook *h, hvd_hs_expr *e, int depth) {
  if (parse_term(L, h, e, depth) < 0) return -1;
  while (is_punct(&L->t, '+') || is_punct(&L->t, '-')) {
    char c = L->t.c;
    next(L);
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
    if (is_word(t, words[i])) return i;
  return -1;
}

static int end_of_action(const tok *t) { return t->k == T_NL || t->k == T_EOF || is_punct(t, ';'); }

static int expect_value(lexer *L, const tok *key) {
  char b[64];
  if (!is_punct(&L->t, '=')) {
    fail(L, &L->t, "expected '=' after '%.*s', found %s", (int)key->n, key->s, show(&L->t, b, sizeof b));
    return -1;
  }
  next(L);
  return 0;
}

static int pick_word(lexer *L, const char *what, const char *const *words, const char *list) {
  char b[64];
  int i = word_index(&L->t, words);
  if (i < 0) {
    const char *s = L->t.k == T_ID ? closest(&L->t, words) : NULL;
    fail(L, &L->t, "unknown %s %s%s%s%s (expected %s)", what, show(&L->t, b, sizeof b), s ? " (did you mean '" : "",
         s ? s : "", s ? "'?)" : "", list);
    return -1;
  }
  next(L);
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
    fail(L, &L->t, "too many actions for '%s' (at most %d)", h->name, HVD_HS_MAX_ACTIONS);
    return -1;
  }
  hvd_hs_action *a = &h->act[h->nactions];
  memset(a, 0, sizeof *a);
  tok argt = L->t;
  a->line = argt.line, a->col = argt.col;
  int i = find_arg(L, h, &argt);
  if (i < 0) return -1;
  a->arg = (uint8_t)i;
  next(L); /* the reference */
  next(L); /* ':' */
  tok verbt = L->t;
  if (end_of_action(&verbt)) {
    fail(L, &verbt, "expected an action after '%s:' (allreduce, broadcast or shard)", hvd_hs_argref(h, i, r, sizeof r));
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
      const char *s = k.k == T_ID ? closest(&k, opts) : NULL;
      fail(L, &k, "unknown option %s for %s%s%s%s (expected %s)", show(&k, b, sizeof b), VERBS[verb],
           s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "", optlist);
      return -1;
    }
    const char *key = opts[o];
    int dup = 0;
    next(L);
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
          fail(L, &L->t, "expected a rank number after 'root=', found %s", show(&L->t, b, sizeof b));
          return -1;
        }
        a->root = (int)L->t.v;
        next(L);
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
      fail(L, &k, "'%s' given twice (or with a conflicting option) for %s of %s", key, VERBS[verb],
           hvd_hs_argref(h, i, r, sizeof r));
      return -1;
    }
  }
  const hvd_hs_type *ty = &h->args[i];
  hvd_hs_argref(h, i, r, sizeof r);
  if (verb == HVD_HA_SHARD) {
    if (ty->cls != HVD_HS_SINT && ty->cls != HVD_HS_UINT) {
      fail(L, &argt, "shard remaps an integer index, but %s is '%s'", r, ty->text);
      return -1;
    }
    if (!have_mode) {
      fail(L, &verbt, "shard of %s needs a mode: 'stride' (i -> i*N + r) or 'block total=EXPR' (rank r reads "
           "r*(total/N) + i)", r);
      return -1;
    }
    if (a->block && !have_count) {
      fail(L, &verbt, "shard block of %s needs total=EXPR (the number of items the index runs over)", r);
      return -1;
    }
    if (!a->block && have_count) {
      fail(L, &verbt, "total= applies to 'shard block', not 'shard stride'");
      return -1;
    }
  } else {
    const char *v = VERBS[verb];
    if (ty->cls != HVD_HS_PTR) {
      fail(L, &argt, "%s needs a buffer, but %s is '%s' (not a pointer)", v, r, ty->text);
      return -1;
    }
    if (ty->pcls == HVD_HS_PTR) {
      fail(L, &argt, "%s is '%s', a pointer to pointers; %s needs a pointer to the elements", r, ty->text, v);
      return -1;
    }
    if (!have_count) {
      fail(L, &verbt, "%s of %s needs count=EXPR: its length in elements (a constant, an argument such as n, or an "
           "expression such as rows*cols)", v, r);
      return -1;
    }
    if (!have_dtype) {
      if (ty->dtype < 0) {
        fail(L, &verbt, "%s of %s needs dtype=: '%s' does not say what the elements are (float32, float64, "
             "float16, bfloat16, int32, int64 or uint8)", v, r, ty->text);
        return -1;
      }
      a->dtype = ty->dtype;
    } else if (!dtype_fits(ty, a->dtype)) {
      char holds[40] = "";
      if (ty->dtype >= 0) snprintf(holds, sizeof holds, " (%s elements)", DTYPES[ty->dtype]);
      fail(L, &verbt, "dtype=%s does not match %s, a '%s'%s", DTYPES[a->dtype], r, ty->text, holds);
      return -1;
    }
  }
  for (int j = 0; j < h->nactions; j++)
    if (h->act[j].arg == a->arg && h->act[j].verb == a->verb) {
      fail(L, &argt, "%s already has a %s action (line %d)", r, VERBS[verb], h->act[j].line);
      return -1;
    }
  h->nactions++;
  if (is_punct(&L->t, ';')) next(L);
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
    fail(&L, &at, "a NUL byte in the spec (is it a text file?)");
    return -1;
  }
  int cap = 0;
  next(&L);
  for (;;) {
    while (L.t.k == T_NL || is_punct(&L.t, ';')) next(&L);
    if (L.failed || L.t.k == T_EOF) break;
    if (action_ahead(&L)) {
      char b[64];
      fail(&L, &L.t, "action %s before any prototype (expected a C prototype such as "
           "'void sgd_update(float *w, const float *g, long n)' first)", show(&L.t, b, sizeof b));
      break;
    }
    if (out->n == cap) {
      if (cap == HVD_HS_MAX_HOOKS) {
        fail(&L, &L.t, "too many hooks (at most %d)", HVD_HS_MAX_HOOKS);
        break;
      }
      int nc = cap ? cap * 2 : 4;
      hvd_hs_hook *nh = realloc(out->hooks, (size_t)nc * sizeof *nh);
      if (!nh) {
        fail(&L, &L.t, "out of memory");
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
        fail(&L, &start, "'%s' is hooked twice (first at line %d); put all its actions under one prototype", h->name,
             out->hooks[j].line);
        break;
      }
    if (L.failed) break;
    for (;;) {
      skip_newlines(&L);
      if (!action_ahead(&L)) break;
      if (parse_action(&L, h) < 0) break;
    }
    if (L.failed) break;
    if (h->nactions == 0) {
      char b[64];
      fail(&L, &L.t, "'%s' has no actions (expected lines such as 'g: allreduce count=n' after its prototype), "
           "found %s", h->name, show(&L.t, b, sizeof b));
      break;
    }
    out->n++;
  }
  if (!L.failed && out->n == 0) {
    tok at = {.line = L.line, .col = 1};
    fail(&L, &at, "no hooks in the spec (expected a C prototype followed by actions)");
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
        snprintf(err, errlen, "'%s' in %s: %s is a null pointer", e->text, h->name, hvd_hs_argref(h, (int)x->v, r, sizeof r));
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
  FILE *f = fopen(value, "rb");
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
