/* The hook spec lexer and C types, for the parser (hookspec.c); private to
 * hooks/.  A token stream over the spec's text with one token of lookahead
 * (lexer.t), errors naming where:line:col (hvd_hsl_fail: the first error wins),
 * and the C type words a prototype may use. */
#ifndef HVD_HOOKSPEC_LEX_H
#define HVD_HOOKSPEC_LEX_H

#include <stddef.h>
#include <stdint.h>

#include "hookspec.h"

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

/* The first error at `at` (or the current token), formatted into L->err. */
void hvd_hsl_fail(lexer *L, const tok *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A token as the user wrote it, for messages. */
const char *hvd_hsl_show(const tok *t, char *buf, size_t n);
/* Advance L->t to the next token. */
void hvd_hsl_next(lexer *L);
int hvd_hsl_is_punct(const tok *t, char c);
int hvd_hsl_is_word(const tok *t, const char *w);
void hvd_hsl_skip_newlines(lexer *L);
/* Whether the line ahead is an action ("name:" or "$N:") rather than a prototype. */
int hvd_hsl_action_ahead(lexer *L);
/* The word of `words` closest to t (a typo's suggestion), or NULL. */
const char *hvd_hsl_closest(const tok *t, const char *const *words);
int hvd_hsl_is_type_word(const tok *t);
/* The C type of the n tokens at t (qualifiers, words, '*'s) into ty and name. */
int hvd_hsl_make_type(lexer *L, const tok *t, int n, hvd_hs_type *ty, char *name, size_t name_n, const tok *at);
/* The tokens of a type (words, '*', brackets, array sizes) up to a punctuation
 * character in `stops`, into buf: their count, or -1 (L->err says why). */
int hvd_hsl_collect(lexer *L, tok *buf, int max, const char *stops, int skip_nl);

#endif
