/* Minimal test harness: value-printing checks, a table of tests, exit 1 on
 * any failure.  Each CHECK_* prints both values when it fails. */
#ifndef HVD_CHECK_H
#define HVD_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures;

#define CHECK_FAIL_(fmt, ...)                                                   \
  do {                                                                          \
    fprintf(stderr, "  FAIL %s:%d: " fmt "\n", __FILE__, __LINE__, __VA_ARGS__); \
    check_failures++;                                                           \
  } while (0)
#define CHECK(cond) do { if (!(cond)) CHECK_FAIL_("%s", #cond); } while (0)
#define CHECK_INT(a, b)                                                         \
  do {                                                                          \
    long long a_ = (long long)(a), b_ = (long long)(b);                         \
    if (a_ != b_) CHECK_FAIL_("%s == %lld, expected %s == %lld", #a, a_, #b, b_); \
  } while (0)
#define CHECK_DBL(a, b, tol)                                                    \
  do {                                                                          \
    double a_ = (a), b_ = (b);                                                  \
    if (!(fabs(a_ - b_) <= (tol))) CHECK_FAIL_("%s == %.9g, expected %.9g (tol %g)", #a, a_, b_, (double)(tol)); \
  } while (0)
#define CHECK_STR(s, want)                                                      \
  do {                                                                          \
    const char *s_ = (s);                                                       \
    if (!s_ || strcmp(s_, (want)) != 0) CHECK_FAIL_("%s == \"%s\", expected \"%s\"", #s, s_ ? s_ : "(null)", want); \
  } while (0)
#define CHECK_STR_HAS(s, sub)                                                   \
  do {                                                                          \
    const char *s_ = (s);                                                       \
    if (!s_ || !strstr(s_, (sub))) CHECK_FAIL_("%s == \"%s\" lacks \"%s\"", #s, s_ ? s_ : "(null)", sub); \
  } while (0)

typedef struct {
  const char *name;
  void (*fn)(void);
} check_test;

/* Runs every test, or (only given) those whose name contains `only`. */
static int check_run(const check_test *tests, const char *only) {
  int failed = 0, n = 0;
  for (const check_test *t = tests; t->name; t++) {
    if (only && !strstr(t->name, only)) continue;
    n++;
    int before = check_failures;
    t->fn();
    int ok = check_failures == before;
    printf("%s %s\n", ok ? "ok  " : "FAIL", t->name);
    failed += !ok;
  }
  printf("%d passed, %d failed\n", n - failed, failed);
  if (only && !n) printf("no test name contains '%s'\n", only);
  return failed || (only && !n) ? 1 : 0;
}

#endif
