/* Hook spec lexer and C types (see hookspec_lex.h; the grammar is in
 * hookspec.c). */
#include "hookspec_lex.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvdshim.h"
/* ------------------------------------------------------------------ lexer */

void hvd_hsl_fail(lexer *L, const tok *at, const char *fmt, ...) {
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
const char *hvd_hsl_show(const tok *t, char *buf, size_t n) {
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

void hvd_hsl_next(lexer *L) {
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
      hvd_hsl_fail(L, t, "%s is not a number (expected %s)", hvd_hsl_show(t, b, sizeof b),
                   dollar ? "$N, an argument's position from 1" : "decimal or 0x hexadecimal digits");
    } else if (over) {
      hvd_hsl_fail(L, t, "number %s is too large", hvd_hsl_show(t, b, sizeof b));
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
  hvd_hsl_fail(L, t, "unexpected character %s", hvd_hsl_show(t, b, sizeof b));
  t->k = T_EOF;
}

int hvd_hsl_is_punct(const tok *t, char c) { return t->k == T_PUNCT && t->c == c; }
int hvd_hsl_is_word(const tok *t, const char *w) { return t->k == T_ID && t->n == strlen(w) && !memcmp(t->s, w, t->n); }
static void copy_tok(const tok *t, char *dst, size_t n) {
  size_t len = t->n < n - 1 ? t->n : n - 1;
  memcpy(dst, t->s, len);
  dst[len] = 0;
}
void hvd_hsl_skip_newlines(lexer *L) {
  while (L->t.k == T_NL) hvd_hsl_next(L);
}

/* Two-token lookahead: is the current token an argument reference followed by ':'? */
int hvd_hsl_action_ahead(lexer *L) {
  if (L->t.k != T_ID && L->t.k != T_ARGN) return 0;
  lexer save = *L;
  hvd_hsl_next(&save);
  return !save.failed && hvd_hsl_is_punct(&save.t, ':');
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
const char *hvd_hsl_closest(const tok *t, const char *const *words) {
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
  return hvd_hsl_is_word(t, "const") || hvd_hsl_is_word(t, "volatile") || hvd_hsl_is_word(t, "restrict") ||
         hvd_hsl_is_word(t, "__restrict") || hvd_hsl_is_word(t, "__restrict__") || hvd_hsl_is_word(t, "register") ||
         hvd_hsl_is_word(t, "extern");
}

int hvd_hsl_is_type_word(const tok *t) {
  for (int i = 0; TYPE_WORDS[i]; i++)
    if (hvd_hsl_is_word(t, TYPE_WORDS[i])) return 1;
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
 * the parameter's name.  Returns 0, or -1 after hvd_hsl_fail(). */
int hvd_hsl_make_type(lexer *L, const tok *t, int n, hvd_hs_type *ty, char *name, size_t name_n, const tok *at) {
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
    if (hvd_hsl_is_punct(x, '*')) {
      depth++;
      append(ty->text, sizeof ty->text, "*", 1);
      continue;
    }
    if (hvd_hsl_is_punct(x, '[')) { /* float w[] or float w[16]: a pointer */
      if (i + 1 < n && t[i + 1].k == T_INT) i++;
      if (i + 1 >= n || !hvd_hsl_is_punct(&t[i + 1], ']')) {
        hvd_hsl_fail(L, x, "expected ']' to close the array parameter");
        return -1;
      }
      i++;
      arrays++;
      continue;
    }
    if (x->k != T_ID) {
      hvd_hsl_fail(L, x, "unexpected %s in a type (expected a C type such as 'float *' or 'long')",
                   hvd_hsl_show(x, b, sizeof b));
      return -1;
    }
    if (arrays) {
      hvd_hsl_fail(L, x, "unexpected %s after an array parameter", hvd_hsl_show(x, b, sizeof b));
      return -1;
    }
    if (is_qualifier(x)) {
      if (!hvd_hsl_is_word(x, "extern") && !hvd_hsl_is_word(x, "register"))
        append(ty->text, sizeof ty->text, x->s, x->n);
      continue;
    }
    if (hvd_hsl_is_word(x, "struct") || hvd_hsl_is_word(x, "union") || hvd_hsl_is_word(x, "enum")) {
      if (i + 1 >= n || t[i + 1].k != T_ID) {
        hvd_hsl_fail(L, x, "expected a tag name after '%.*s'", (int)x->n, x->s);
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
    if (hvd_hsl_is_word(x, "signed"))
      n_signed++;
    else if (hvd_hsl_is_word(x, "unsigned"))
      n_unsigned++;
    else if (hvd_hsl_is_word(x, "short"))
      n_short++;
    else if (hvd_hsl_is_word(x, "long"))
      n_long++;
    else if (hvd_hsl_is_word(x, "int"))
      n_int++;
    else if (hvd_hsl_is_word(x, "char"))
      n_char++, bases++;
    else if (hvd_hsl_is_word(x, "float"))
      n_float++, bases++;
    else if (hvd_hsl_is_word(x, "double"))
      n_double++, bases++;
    else if (hvd_hsl_is_word(x, "void"))
      n_void++, bases++;
    else if (hvd_hsl_is_word(x, "_Bool") || hvd_hsl_is_word(x, "bool"))
      n_bool++, bases++;
    else {
      known = 0;
      for (const named_type *nt = NAMED; nt->name; nt++)
        if (hvd_hsl_is_word(x, nt->name)) named = nt, known = 1, bases++;
    }
    if (known) {
      append(ty->text, sizeof ty->text, x->s, x->n);
      continue;
    }
    /* not a type word: the parameter's name, if it comes last after a type */
    int have_base = bases || n_signed || n_unsigned || n_short || n_long || n_int;
    if (name && i == n - 1 && have_base) {
      if (x->n >= name_n || memchr(x->s, '@', x->n)) {
        hvd_hsl_fail(L, x, "parameter name %s is not a C identifier of at most %zu characters",
                     hvd_hsl_show(x, b, sizeof b), name_n - 1);
        return -1;
      }
      copy_tok(x, name, name_n);
      continue;
    }
    if (name && have_base && i + 1 < n && hvd_hsl_is_punct(&t[i + 1], '[')) {
      copy_tok(x, name, name_n);
      continue;
    }
    const char *s = hvd_hsl_closest(x, TYPE_WORDS);
    hvd_hsl_fail(L, x,
                 "unknown type %s%s%s%s (expected a C type: void, char, short, int, long, float, double, size_t, "
                 "int32_t, ... or a pointer to one; write a typedef as the type it stands for)",
                 hvd_hsl_show(x, b, sizeof b), s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
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
    hvd_hsl_fail(L, at, "'%s' is not a valid C type", ty->text);
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
    if (hvd_hsl_is_word(tagkw, "enum"))
      cls = HVD_HS_SINT, size = 4;
    else cls = HVD_HS_VOID; /* struct/union: only through a pointer */
  } else if (n_int_words) {
    cls = n_unsigned ? HVD_HS_UINT : HVD_HS_SINT;
    size = n_short ? 2 : n_long ? 8 : 4;
    if (!n_unsigned) dtype = size == 4 ? HVD_INT32 : size == 8 ? HVD_INT64 : -1;
  } else {
    hvd_hsl_fail(L, at, "expected a type%s", n ? "" : " before the name");
    return -1;
  }
  if (depth == 0) {
    if (n_tagged && cls == HVD_HS_VOID) {
      hvd_hsl_fail(L, at,
                   "'%s' passed by value is not supported (only scalars and pointers; a struct by pointer is fine)",
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
int hvd_hsl_collect(lexer *L, tok *buf, int max, const char *stops, int skip_nl) {
  int n = 0;
  char b[64];
  for (;;) {
    if (skip_nl) hvd_hsl_skip_newlines(L);
    if (L->failed) return -1;
    const tok *x = &L->t;
    if (x->k == T_PUNCT && strchr(stops, x->c)) return n;
    if (x->k == T_ID || hvd_hsl_is_punct(x, '*') || hvd_hsl_is_punct(x, '[') || hvd_hsl_is_punct(x, ']') ||
        (x->k == T_INT && n > 0)) {
      if (n == max) {
        hvd_hsl_fail(L, x, "type too long");
        return -1;
      }
      buf[n++] = *x;
      hvd_hsl_next(L);
      continue;
    }
    if (x->k == T_ELLIPSIS) {
      hvd_hsl_fail(L, x, "variadic functions ('...') can't be hooked: libffi needs every argument's type");
      return -1;
    }
    if (!strcmp(stops, "(")) {
      if (n == 0)
        hvd_hsl_fail(L, x,
                     "expected a C prototype such as 'void sgd_update(float *w, const float *g, long n)', found %s",
                     hvd_hsl_show(x, b, sizeof b));
      else
        hvd_hsl_fail(L, x, "expected '(' after the function name, found %s", hvd_hsl_show(x, b, sizeof b));
    } else {
      hvd_hsl_fail(L, x, "expected ',' or ')' after a parameter, found %s", hvd_hsl_show(x, b, sizeof b));
    }
    return -1;
  }
}
