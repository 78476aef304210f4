/* libFuzzer harness for the settings parser (base/config.c).
 *
 * Input: byte 0 picks a setting of the table, the rest is its value (the
 * text of an environment variable).  Every value must either be rejected
 * with a message or be accepted within the setting's declared range (and
 * choice list); the canonical form of an accepted value must parse again to
 * the same value.  Anything else aborts, which libFuzzer reports.
 * Build and run: make fuzz (docs/RELIABILITY.md). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  hvd_cfg_id id = (hvd_cfg_id)(data[0] % HVD_CFG_COUNT);
  char *text = malloc(size);
  if (!text) return 0;
  memcpy(text, data + 1, size - 1);
  text[size - 1] = 0;
  const hvd_cfg_desc *d = &hvd_cfg_table[id];
  int64_t iv;
  double dv;
  char err[256] = "";
  int rc = hvd_cfg_parse(id, text, &iv, &dv, err, sizeof err);
  if (rc != 0) {
    if (!err[0]) abort(); /* a rejection must say why */
  } else if (d->type == HVD_CT_INT || d->type == HVD_CT_SIZE || d->type == HVD_CT_DOUBLE) {
    if (!isfinite(dv) || dv < d->lo || dv > d->hi) abort(); /* accepted out of range */
  } else if (d->type == HVD_CT_BOOL) {
    if (iv != 0 && iv != 1) abort();
  } else if (d->type == HVD_CT_CHOICE) {
    int n = 1;
    for (const char *p = d->choices; *p; p++) n += *p == '|';
    if (iv < 0 || iv >= n) abort();
  }
  if (rc == 0 && hvd_cfg_set(id, text, err, sizeof err) == 0) { /* store + canonical form */
    const char *canon = hvd_cfg_canonical(id);
    int64_t iv2;
    double dv2;
    if (d->type != HVD_CT_STRING && hvd_cfg_parse(id, canon, &iv2, &dv2, err, sizeof err) != 0) abort();
    if (d->type != HVD_CT_STRING && d->type != HVD_CT_DOUBLE && iv2 != iv) abort();
    if (d->type == HVD_CT_DOUBLE && dv2 != dv) abort();
  }
  free(text);
  return 0;
}
