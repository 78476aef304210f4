/* Settings parser and store.  Owns the values of every setting declared in
 * settings.def.  Values are written by hvd_config_load() in the constructor
 * (before any thread of the shim exists) and by hvd_cfg_set() from tests and
 * the autotuner; everything else only reads them. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

const hvd_cfg_desc hvd_cfg_table[HVD_CFG_COUNT] = {
#define HVD_SETTING(id, name, alias, type, def, lo, hi, choices, scope, help) \
  {name, alias, def, choices, help, HVD_CT_##type, (double)(lo), (double)(hi), HVD_SCOPE_##scope},
#include "settings.def"
#undef HVD_SETTING
};

#define HVD_CFG_TEXT_MAX 512

typedef struct {
  int64_t ival;
  double dval;
  char text[HVD_CFG_TEXT_MAX];
  char canon[HVD_CFG_TEXT_MAX]; /* normalized: 0/1, the choice word, a plain number */
  hvd_cfg_source src;
} cfg_value;

static cfg_value values[HVD_CFG_COUNT];
static int loaded;

static const char *trim(const char *s, char *buf, size_t n) {
  while (isspace((unsigned char)*s)) s++;
  snprintf(buf, n, "%s", s);
  size_t len = strlen(buf);
  while (len > 0 && isspace((unsigned char)buf[len - 1])) buf[--len] = 0;
  return buf;
}

/* Index of `word` in a "a|b|c" list, or -1. */
static int choice_index(const char *choices, const char *word) {
  int idx = 0;
  size_t wl = strlen(word);
  for (const char *p = choices; *p; idx++) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == wl && strncasecmp(p, word, len) == 0) return idx;
    if (!bar) break;
    p = bar + 1;
  }
  return -1;
}

static void range_text(const hvd_cfg_desc *d, char *buf, size_t n) {
  if (d->type == HVD_CT_DOUBLE)
    snprintf(buf, n, "a number from %g to %g", d->lo, d->hi);
  else if (d->type == HVD_CT_SIZE)
    snprintf(buf, n, "a byte count from %.0f to %.0f (suffix K, M or G allowed)", d->lo, d->hi);
  else
    snprintf(buf, n, "an integer from %.0f to %.0f", d->lo, d->hi);
}

int hvd_cfg_parse(hvd_cfg_id id, const char *raw, int64_t *ival, double *dval, char *err, size_t errlen) {
  const hvd_cfg_desc *d = &hvd_cfg_table[id];
  char buf[HVD_CFG_TEXT_MAX], accepted[160];
  const char *s = trim(raw ? raw : "", buf, sizeof buf);
  *ival = 0;
  *dval = 0;
  switch (d->type) {
  case HVD_CT_STRING:
    return 0;
  case HVD_CT_BOOL: {
    static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
      if (strcasecmp(s, yes[i]) == 0) { *ival = 1; *dval = 1; return 0; }
      if (strcasecmp(s, no[i]) == 0) return 0;
    }
    snprintf(err, errlen, "accepted: 0 or 1 (also true/false, yes/no, on/off)");
    return -1;
  }
  case HVD_CT_CHOICE: {
    int idx = choice_index(d->choices, s);
    if (idx < 0 && id == HVD_CFG_LOG_LEVEL) { /* Horovod's spellings */
      if (!strcasecmp(s, "warning")) idx = choice_index(d->choices, "warn");
      else if (!strcasecmp(s, "trace")) idx = choice_index(d->choices, "debug");
      else if (!strcasecmp(s, "fatal")) idx = choice_index(d->choices, "error");
    }
    if (idx < 0) {
      snprintf(err, errlen, "accepted: one of %s", d->choices);
      return -1;
    }
    *ival = idx;
    *dval = idx;
    return 0;
  }
  case HVD_CT_INT:
  case HVD_CT_SIZE:
  case HVD_CT_DOUBLE: {
    range_text(d, accepted, sizeof accepted);
    if (*s == 0) {
      snprintf(err, errlen, "empty; accepted: %s", accepted);
      return -1;
    }
    char *end = NULL;
    errno = 0;
    double v;
    if (d->type == HVD_CT_DOUBLE) {
      v = strtod(s, &end);
    } else {
      if (*s == '-' || *s == '+' || !isdigit((unsigned char)*s)) end = (char *)s, v = 0;
      else {
        unsigned long long u = strtoull(s, &end, 10);
        v = (double)u;
        if (errno == 0 && d->type == HVD_CT_SIZE && end && *end) {
          double mul = 0;
          switch (toupper((unsigned char)*end)) {
          case 'K': mul = 1024.0; break;
          case 'M': mul = 1048576.0; break;
          case 'G': mul = 1073741824.0; break;
          }
          if (mul > 0) {
            end++;
            if (toupper((unsigned char)*end) == 'I' && toupper((unsigned char)end[1]) == 'B') end += 2;
            else if (toupper((unsigned char)*end) == 'B') end++;
            v *= mul;
          }
        }
      }
    }
    if (end == s || (end && *end) || errno == ERANGE || !isfinite(v)) {
      snprintf(err, errlen, "not a valid number; accepted: %s", accepted);
      return -1;
    }
    if (v < d->lo || v > d->hi) {
      snprintf(err, errlen, "out of range; accepted: %s", accepted);
      return -1;
    }
    *dval = v;
    *ival = (int64_t)v;
    return 0;
  }
  }
  return -1;
}

static int store(hvd_cfg_id id, const char *text, hvd_cfg_source src, const char *var, char *err, size_t errlen) {
  char why[256];
  int64_t iv;
  double dv;
  if (hvd_cfg_parse(id, text, &iv, &dv, why, sizeof why) != 0) {
    snprintf(err, errlen, "invalid %s='%s': %s", var, text, why);
    return -1;
  }
  cfg_value *v = &values[id];
  v->ival = iv;
  v->dval = dv;
  v->src = src;
  snprintf(v->text, sizeof v->text, "%s", text);
  const hvd_cfg_desc *d = &hvd_cfg_table[id];
  switch (d->type) {
  case HVD_CT_BOOL: snprintf(v->canon, sizeof v->canon, "%d", iv ? 1 : 0); break;
  case HVD_CT_INT:
  case HVD_CT_SIZE: snprintf(v->canon, sizeof v->canon, "%lld", (long long)iv); break;
  case HVD_CT_DOUBLE: snprintf(v->canon, sizeof v->canon, "%.17g", dv); break;
  case HVD_CT_STRING: snprintf(v->canon, sizeof v->canon, "%s", text); break;
  case HVD_CT_CHOICE: {
    const char *p = d->choices;
    for (int64_t k = 0; k < iv && strchr(p, '|'); k++) p = strchr(p, '|') + 1;
    size_t len = strchr(p, '|') ? (size_t)(strchr(p, '|') - p) : strlen(p);
    snprintf(v->canon, sizeof v->canon, "%.*s", (int)len, p);
    break;
  }
  }
  return 0;
}

int hvd_config_load(char *err, size_t errlen) {
  int rc = 0;
  for (int i = 0; i < HVD_CFG_COUNT; i++) {
    const hvd_cfg_desc *d = &hvd_cfg_table[i];
    const char *env = getenv(d->name);
    const char *var = d->name;
    hvd_cfg_source src = HVD_SRC_ENV;
    if (!env && d->alias) {
      env = getenv(d->alias);
      var = d->alias;
      src = HVD_SRC_ALIAS;
    }
    if (!env) {
      env = d->def;
      var = d->name;
      src = HVD_SRC_DEFAULT;
    }
    /* Report the first error; keep defaults for the rest. */
    char scratch[256];
    if (store((hvd_cfg_id)i, env, src, var, rc ? scratch : err, rc ? sizeof scratch : errlen) != 0) {
      store((hvd_cfg_id)i, d->def, HVD_SRC_DEFAULT, d->name, scratch, sizeof scratch);
      rc = -1;
    }
  }
  loaded = 1;
  return rc;
}

int hvd_cfg_set(hvd_cfg_id id, const char *text, char *err, size_t errlen) {
  if (!loaded) {
    char tmp[256];
    hvd_config_load(tmp, sizeof tmp);
  }
  return store(id, text, HVD_SRC_API, hvd_cfg_table[id].name, err, errlen);
}

static void ensure_loaded(void) {
  if (!loaded) {
    char tmp[256];
    hvd_config_load(tmp, sizeof tmp);
  }
}

int64_t hvd_cfg_int(hvd_cfg_id id) { ensure_loaded(); return values[id].ival; }
double hvd_cfg_double(hvd_cfg_id id) { ensure_loaded(); return values[id].dval; }
const char *hvd_cfg_str(hvd_cfg_id id) { ensure_loaded(); return values[id].text; }
hvd_cfg_source hvd_cfg_src(hvd_cfg_id id) { ensure_loaded(); return values[id].src; }
const char *hvd_cfg_canonical(hvd_cfg_id id) { ensure_loaded(); return values[id].canon; }

const char *hvd_cfg_format(hvd_cfg_id id, int64_t v, char *buf, size_t n) {
  const hvd_cfg_desc *d = &hvd_cfg_table[id];
  if (d->type != HVD_CT_CHOICE) {
    snprintf(buf, n, "%lld", (long long)v);
    return buf;
  }
  const char *p = d->choices;
  for (int64_t i = 0; i < v && p; i++) {
    p = strchr(p, '|');
    if (p) p++;
  }
  if (!p) p = "?";
  snprintf(buf, n, "%.*s", (int)strcspn(p, "|"), p);
  return buf;
}

int hvd_cfg_find(const char *name) {
  for (int i = 0; name && i < HVD_CFG_COUNT; i++)
    if (!strcmp(name, hvd_cfg_table[i].name) || (hvd_cfg_table[i].alias && !strcmp(name, hvd_cfg_table[i].alias)))
      return i;
  return -1;
}

/* Levenshtein distance, for "did you mean" suggestions. */
static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return 99;
  size_t row[65];
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t prev = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t cur = row[j];
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      size_t best = prev + cost;
      if (row[j] + 1 < best) best = row[j] + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      prev = cur;
    }
  }
  return row[lb];
}

/* Variables the shim itself sets or reads outside the table. */
static const char *internal_vars[] = {"HVDSHIM_ACTIVE_PID", "HVDSHIM_PRELOAD", "HVDSHIM_PYTHONPATH_SAVED", "HVDSHIM_FAMILY",
                                      NULL};

void hvd_config_check_unknown(void (*warn)(const char *name, const char *suggestion)) {
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "HVDSHIM_", 8) != 0) continue;
    char name[128];
    const char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, *e, len);
    name[len] = 0;
    int known = 0;
    for (int i = 0; i < HVD_CFG_COUNT && !known; i++) known = !strcmp(name, hvd_cfg_table[i].name);
    for (int i = 0; internal_vars[i] && !known; i++) known = !strcmp(name, internal_vars[i]);
    if (known) continue;
    const char *best = NULL;
    size_t best_d = 99;
    for (int i = 0; i < HVD_CFG_COUNT; i++) {
      size_t dd = edit_distance(name, hvd_cfg_table[i].name);
      if (dd < best_d) best_d = dd, best = hvd_cfg_table[i].name;
    }
    warn(name, best_d <= 4 ? best : NULL);
  }
}
