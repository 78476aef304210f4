/* Settings: one table (settings.def) parsed once from the environment.
 * hvd_config_load() fills the values; getters read them without locking
 * (written once before any thread starts, read-only afterwards). */
#ifndef HVD_CONFIG_H
#define HVD_CONFIG_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
#define HVD_SETTING(id, name, alias, type, def, lo, hi, choices, scope, help) HVD_CFG_##id,
#include "settings.def"
#undef HVD_SETTING
  HVD_CFG_COUNT
} hvd_cfg_id;

typedef enum { HVD_CT_BOOL, HVD_CT_INT, HVD_CT_DOUBLE, HVD_CT_SIZE, HVD_CT_CHOICE, HVD_CT_STRING } hvd_cfg_type;
typedef enum { HVD_SRC_DEFAULT, HVD_SRC_ENV, HVD_SRC_ALIAS, HVD_SRC_API } hvd_cfg_source;

typedef enum { HVD_SCOPE_LOCAL, HVD_SCOPE_AGREE } hvd_cfg_scope;

typedef struct {
  const char *name, *alias, *def, *choices, *help;
  hvd_cfg_type type;
  double lo, hi;
  hvd_cfg_scope scope; /* AGREE: must be the same on every rank (checked by hvd_init) */
} hvd_cfg_desc;

extern const hvd_cfg_desc hvd_cfg_table[HVD_CFG_COUNT];

/* Parse one value of setting `id` from text.  Returns 0 and stores the value
 * (through the out pointers that apply) or -1 and writes a one-line reason
 * naming what is accepted into err. */
int hvd_cfg_parse(hvd_cfg_id id, const char *text, int64_t *ival, double *dval,
                  char *err, size_t errlen);

/* Read every setting from the environment (HVDSHIM_* first, then the Horovod
 * alias).  Returns 0, or -1 with a one-line message in err naming the
 * variable, the value and what is accepted. */
int hvd_config_load(char *err, size_t errlen);

/* HVDSHIM_STATUS_FILE as hvdrun names it (launcher/supervise.c): its pid,
 * then its user's id; the shim writes it only under that hvdrun (reaper.h). */
#define HVD_STATUS_FILE_FORMAT "/dev/shm/hvdshim-status-%ld-%lu"

/* Unknown HVDSHIM_* variables: calls warn(name, suggestion) for each. */
void hvd_config_check_unknown(void (*warn)(const char *name, const char *suggestion));

int64_t hvd_cfg_int(hvd_cfg_id id);      /* BOOL, INT, SIZE, CHOICE (index) */
double hvd_cfg_double(hvd_cfg_id id);    /* DOUBLE (and numeric others) */
const char *hvd_cfg_str(hvd_cfg_id id);  /* raw text of the effective value */
hvd_cfg_source hvd_cfg_src(hvd_cfg_id id);
/* Normalized text: BOOL "0"/"1", CHOICE the choice word as declared, INT and
 * SIZE a plain integer, DOUBLE "%.17g", STRING as given. */
const char *hvd_cfg_canonical(hvd_cfg_id id);
/* An integer value of setting `id` (hvd_cfg_int's form) as text: a choice
 * by its word, a number as a number. */
const char *hvd_cfg_format(hvd_cfg_id id, int64_t v, char *buf, size_t n);
/* Id of a setting by its HVDSHIM_* name or Horovod alias, or -1. */
int hvd_cfg_find(const char *name);
/* Programmatic override (tests, autotune); returns 0 or -1 with err. */
int hvd_cfg_set(hvd_cfg_id id, const char *text, char *err, size_t errlen);

#endif
