/* Hook specs (HVDSHIM_HOOKS): the parser and the expression evaluator.
 *
 * A spec names exported C functions by their prototype and says, per
 * argument, what the shim does around each call:
 *
 *   void sgd_update(float *w, const float *g, long n, float lr)
 *     g: allreduce count=n op=avg          # before the real call (default)
 *     w: broadcast count=n                 # from rank 0, first call only
 *   void load_batch(long index, int batch, float *x)
 *     index: shard stride                  # i -> i*N + r
 *
 * The format is documented in docs/HOOKS.md.  No globals; the only I/O is
 * hvd_hookspec_read, so the fuzzer (tests/fuzz/fuzz_hookspec.c) drives the
 * parser alone. */
#ifndef HVD_HOOKSPEC_H
#define HVD_HOOKSPEC_H

#include <stddef.h>
#include <stdint.h>

#define HVD_HS_MAX_ARGS 16
#define HVD_HS_MAX_ACTIONS 16
#define HVD_HS_EXPR_MAX 32
#define HVD_HS_MAX_HOOKS 256

/* Value classes of a C type as libffi passes it. */
enum { HVD_HS_VOID, HVD_HS_SINT, HVD_HS_UINT, HVD_HS_FLOAT, HVD_HS_DOUBLE, HVD_HS_LDOUBLE, HVD_HS_PTR };

typedef struct {
  uint8_t cls;    /* HVD_HS_* */
  uint8_t size;   /* bytes of the value (integers 1, 2, 4, 8) */
  uint8_t pcls;   /* pointers: class of the pointee (VOID for void, struct, pointer) */
  uint8_t psize;  /* pointers: size of an integer pointee */
  int8_t dtype;   /* pointers: the hvd_dtype_t the pointee implies, or -1 */
  uint8_t wide16; /* pointers: 16-bit integer pointee (may hold float16/bfloat16) or void/char */
  char text[64];  /* as written, normalized ("const float *") */
} hvd_hs_type;

/* Expressions in reverse Polish form. */
enum { HVD_HX_CONST, HVD_HX_ARG, HVD_HX_DEREF, HVD_HX_ADD, HVD_HX_SUB, HVD_HX_MUL, HVD_HX_DIV, HVD_HX_MOD, HVD_HX_NEG };
typedef struct {
  uint8_t op;
  int64_t v; /* constant, or argument index */
} hvd_hs_xtok;
typedef struct {
  int n;
  hvd_hs_xtok t[HVD_HS_EXPR_MAX];
  char text[96]; /* as written, for messages */
} hvd_hs_expr;

enum { HVD_HA_ALLREDUCE, HVD_HA_BROADCAST, HVD_HA_SHARD };

typedef struct {
  uint8_t verb;   /* HVD_HA_* */
  uint8_t arg;    /* argument index (0-based) */
  uint8_t after;  /* 1: after the real call; 0: before */
  uint8_t every;  /* broadcast: every call (1) or the first only (0) */
  uint8_t block;  /* shard: contiguous block per rank (1) or stride (0) */
  int8_t dtype;   /* allreduce/broadcast: hvd_dtype_t */
  uint8_t op;     /* allreduce: hvd_op_t */
  int root;       /* broadcast: root rank */
  hvd_hs_expr count; /* allreduce/broadcast: elements; shard block: total items */
  int line, col;
} hvd_hs_action;

typedef struct {
  char name[128];
  char version[64]; /* "" = any version */
  hvd_hs_type ret;
  int nargs;
  hvd_hs_type args[HVD_HS_MAX_ARGS];
  char argname[HVD_HS_MAX_ARGS][64]; /* "" when the prototype gives none */
  int nactions;
  hvd_hs_action act[HVD_HS_MAX_ACTIONS];
  int line, col;
} hvd_hs_hook;

typedef struct {
  int n;
  hvd_hs_hook *hooks;
} hvd_hookspec;

/* Parse `len` bytes of spec text.  `where` names it in messages (a path, or
 * "HVDSHIM_HOOKS").  Returns 0 with *out filled (free with
 * hvd_hookspec_free), or -1 with one line "where:line:col: what was found,
 * what was expected" in err. */
int hvd_hookspec_parse(const char *text, size_t len, const char *where, hvd_hookspec *out, char *err,
                       size_t errlen);
void hvd_hookspec_free(hvd_hookspec *spec);

/* The text of the spec an HVDSHIM_HOOKS value names: the value itself when
 * it contains '(' (an inline spec, `*where` = "HVDSHIM_HOOKS"), else the
 * file at that path (`*where` = the path).  0 with *text (malloc'ed,
 * NUL-terminated) and *len, or -1 with the reason. */
int hvd_hookspec_read(const char *value, char **text, size_t *len, const char **where, char *err, size_t errlen);
/* The message of a failed read or parse, ready to print: "HVDSHIM_HOOKS: "
 * is put in front when `where` is a file (an inline spec's positions
 * already say HVDSHIM_HOOKS:line:col). */
const char *hvd_hookspec_error(const char *where, const char *err, char *buf, size_t n);
/* One line for people: "allreduce 'g' (float32 x n, avg) before each call". */
const char *hvd_hs_describe(const hvd_hs_hook *h, const hvd_hs_action *a, char *buf, size_t n);

/* Evaluate an expression over a call's arguments (`args[i]` points to the
 * value of argument i, as libffi hands it over).  0 with *out, or -1 with
 * the reason (division by zero, overflow, a null pointer dereferenced). */
int hvd_hs_eval(const hvd_hs_expr *e, const hvd_hs_hook *h, void *const *args, int64_t *out, char *err,
                size_t errlen);
/* Integer value of argument i (integer types only). */
int64_t hvd_hs_arg_int(const hvd_hs_type *t, const void *value);
/* Store v into an integer argument's storage (truncating to its size). */
void hvd_hs_set_int(const hvd_hs_type *t, void *value, int64_t v);
/* "argument name" or "$N" of argument i, for messages and tensor names. */
const char *hvd_hs_argref(const hvd_hs_hook *h, int i, char *buf, size_t n);

#endif
