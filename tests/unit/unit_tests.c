/* Unit tests of the parts that need no MPI: settings, 16-bit floats,
 * reductions and scaling, fusion pack/unpack, the response cache, the
 * string map, the negotiation records and the path watcher. */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../collectives/observers/autotune.h"
#include "../../collectives/negotiation/cache.h"
#include "../../collectives/negotiation/coordinator.h"
#include "../../collectives/transports/dtype.h"
#include "../../collectives/transports/elem.h"
#include "../../collectives/gpu/gpu_desc.h"
#include "../../collectives/transports/fusion.h"
#include "../../base/remover.h"
#include <sys/stat.h>
#include "../../base/strmap.h"
#include "../../collectives/negotiation/wire.h"
#include "../../hooks/cuda_hooks.h"
#include "../../base/config.h"
#include "check.h"
#include "../../hooks/hookspec.h"
#include "../../hooks/python.h"

/* ---------------------------------------------------------------- settings */

static int parse(hvd_cfg_id id, const char *text, int64_t *iv, double *dv, char *err) {
  return hvd_cfg_parse(id, text, iv, dv, err, 256);
}

static void test_settings_defaults(void) {
  for (int i = 0; i < HVD_CFG_COUNT; i++) unsetenv(hvd_cfg_table[i].name), hvd_cfg_table[i].alias ? unsetenv(hvd_cfg_table[i].alias) : 0;
  char err[256] = "";
  CHECK_INT(hvd_config_load(err, sizeof err), 0);
  CHECK_INT(hvd_cfg_int(HVD_CFG_FUSION_THRESHOLD), 128ll << 20);
  CHECK_DBL(hvd_cfg_double(HVD_CFG_CYCLE_TIME), 1.0, 0);
  CHECK_INT(hvd_cfg_int(HVD_CFG_CACHE_CAPACITY), 1024);
  CHECK_DBL(hvd_cfg_double(HVD_CFG_STALL_WARNING_SECONDS), 60, 0);
  CHECK_DBL(hvd_cfg_double(HVD_CFG_STALL_SHUTDOWN_SECONDS), 1800, 0);
  CHECK_INT(hvd_cfg_src(HVD_CFG_CYCLE_TIME), HVD_SRC_DEFAULT);
  /* every default parses under its own rules */
  for (int i = 0; i < HVD_CFG_COUNT; i++) {
    int64_t iv;
    double dv;
    CHECK_INT(parse((hvd_cfg_id)i, hvd_cfg_table[i].def, &iv, &dv, err), 0);
  }
}

static void test_settings_values(void) {
  int64_t iv;
  double dv;
  char err[256];
  CHECK_INT(parse(HVD_CFG_FUSION_THRESHOLD, "64M", &iv, &dv, err), 0);
  CHECK_INT(iv, 64 << 20);
  CHECK_INT(parse(HVD_CFG_FUSION_THRESHOLD, " 16KiB ", &iv, &dv, err), 0);
  CHECK_INT(iv, 16384);
  CHECK_INT(parse(HVD_CFG_FUSION_THRESHOLD, "0", &iv, &dv, err), 0);
  CHECK_INT(iv, 0);
  CHECK_INT(parse(HVD_CFG_CYCLE_TIME, "2.5", &iv, &dv, err), 0);
  CHECK_DBL(dv, 2.5, 0);
  CHECK_INT(parse(HVD_CFG_LOG_LEVEL, "DEBUG", &iv, &dv, err), 0);
  CHECK_INT(iv, 3);
  CHECK_INT(parse(HVD_CFG_LOG_LEVEL, "warning", &iv, &dv, err), 0); /* Horovod spelling */
  CHECK_INT(iv, 1);
  CHECK_INT(parse(HVD_CFG_DISABLE, "yes", &iv, &dv, err), 0);
  CHECK_INT(iv, 1);
  CHECK_INT(parse(HVD_CFG_TIMELINE, "/tmp/x.json", &iv, &dv, err), 0);
}

static void test_settings_rejects(void) {
  struct { hvd_cfg_id id; const char *text, *why; } bad[] = {
      {HVD_CFG_CYCLE_TIME, "fast", "not a valid number"},
      {HVD_CFG_CYCLE_TIME, "", "empty"},
      {HVD_CFG_CYCLE_TIME, "-1", "out of range"},
      {HVD_CFG_CYCLE_TIME, "1e9", "out of range"},
      {HVD_CFG_CYCLE_TIME, "nan", "not a valid number"},
      {HVD_CFG_FUSION_THRESHOLD, "-5", "not a valid number"},
      {HVD_CFG_FUSION_THRESHOLD, "12X", "not a valid number"},
      {HVD_CFG_FUSION_THRESHOLD, "64G", "out of range"},
      {HVD_CFG_FUSION_THRESHOLD, "1.5", "not a valid number"},
      {HVD_CFG_CACHE_CAPACITY, "99999999", "out of range"},
      {HVD_CFG_CACHE_CAPACITY, "99999999999999999999999", "not a valid number"},
      {HVD_CFG_LOG_LEVEL, "loud", "one of error|warn|info|debug"},
      {HVD_CFG_DISABLE, "2", "accepted: 0 or 1"},
      {HVD_CFG_STALL_SHUTDOWN_SECONDS, "-3", "out of range"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int64_t iv;
    double dv;
    char err[256] = "";
    CHECK_INT(parse(bad[i].id, bad[i].text, &iv, &dv, err), -1);
    CHECK_STR_HAS(err, bad[i].why);
  }
}

static void test_settings_env_and_alias(void) {
  char err[256] = "";
  setenv("HOROVOD_FUSION_THRESHOLD", "1048576", 1);
  setenv("HVDSHIM_CYCLE_TIME", "5", 1);
  setenv("HOROVOD_CYCLE_TIME", "7", 1); /* the HVDSHIM_ name wins */
  CHECK_INT(hvd_config_load(err, sizeof err), 0);
  CHECK_INT(hvd_cfg_int(HVD_CFG_FUSION_THRESHOLD), 1048576);
  CHECK_INT(hvd_cfg_src(HVD_CFG_FUSION_THRESHOLD), HVD_SRC_ALIAS);
  CHECK_DBL(hvd_cfg_double(HVD_CFG_CYCLE_TIME), 5, 0);
  setenv("HVDSHIM_CACHE_CAPACITY", "lots", 1);
  CHECK_INT(hvd_config_load(err, sizeof err), -1);
  CHECK_STR_HAS(err, "HVDSHIM_CACHE_CAPACITY='lots'");
  CHECK_STR_HAS(err, "an integer from 0 to 65536");
  CHECK_INT(hvd_cfg_int(HVD_CFG_CACHE_CAPACITY), 1024); /* default kept */
  unsetenv("HVDSHIM_CACHE_CAPACITY");
  unsetenv("HOROVOD_FUSION_THRESHOLD");
  unsetenv("HVDSHIM_CYCLE_TIME");
  unsetenv("HOROVOD_CYCLE_TIME");
}

static char unknown_seen[128], unknown_hint[128];
static void on_unknown(const char *name, const char *hint) {
  snprintf(unknown_seen, sizeof unknown_seen, "%s", name);
  snprintf(unknown_hint, sizeof unknown_hint, "%s", hint ? hint : "");
}

static void test_settings_unknown(void) {
  setenv("HVDSHIM_FUSION_TRESHOLD", "1", 1);
  hvd_config_check_unknown(on_unknown);
  CHECK_STR_HAS(unknown_seen, "HVDSHIM_FUSION_TRESHOLD");
  CHECK_STR_HAS(unknown_hint, "HVDSHIM_FUSION_THRESHOLD");
  unsetenv("HVDSHIM_FUSION_TRESHOLD");
}

/* ---------------------------------------------------------------- 16-bit floats */

static void test_half(void) {
  CHECK_INT(hvd_float_to_half(1.0f), 0x3c00);
  CHECK_INT(hvd_float_to_half(-2.0f), 0xc000);
  CHECK_INT(hvd_float_to_half(65504.0f), 0x7bff);
  CHECK_INT(hvd_float_to_half(65520.0f), 0x7c00); /* rounds to inf */
  CHECK_INT(hvd_float_to_half(1e-8f), 0x0000);
  CHECK_INT(hvd_float_to_half(5.9604645e-8f), 0x0001); /* smallest subnormal */
  CHECK_INT(hvd_float_to_half(INFINITY), 0x7c00);
  CHECK(isnan(hvd_half_to_float(hvd_float_to_half(NAN))));
  /* ties to even: 1 + 2^-11 is halfway between 1 and 1+2^-10 -> 1 */
  CHECK_INT(hvd_float_to_half(1.0f + 1.0f / 2048), 0x3c00);
  CHECK_INT(hvd_float_to_half(1.0f + 3.0f / 2048), 0x3c02);
  /* every finite half survives a round trip through float */
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00) continue;
    uint16_t back = hvd_float_to_half(hvd_half_to_float((uint16_t)h));
    if (back != h && !(h == 0x8000 && back == 0x8000)) {
      CHECK_INT(back, h);
      break;
    }
  }
}

static void test_bf16(void) {
  CHECK_INT(hvd_float_to_bf16(1.0f), 0x3f80);
  CHECK_DBL(hvd_bf16_to_float(0x4049), 3.140625, 0);
  CHECK_INT(hvd_float_to_bf16(1.0f + 1.0f / 256), 0x3f80);      /* tie -> even */
  CHECK_INT(hvd_float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  CHECK(isnan(hvd_bf16_to_float(hvd_float_to_bf16(NAN))));
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7f80) == 0x7f80) continue;
    if (hvd_float_to_bf16(hvd_bf16_to_float((uint16_t)h)) != h) {
      CHECK_INT(hvd_float_to_bf16(hvd_bf16_to_float((uint16_t)h)), h);
      break;
    }
  }
}

static void test_reduce_and_scale(void) {
  uint16_t a[3] = {hvd_float_to_half(1.5f), hvd_float_to_half(-2), hvd_float_to_half(100)};
  uint16_t b[3] = {hvd_float_to_half(0.25f), hvd_float_to_half(3), hvd_float_to_half(-100)};
  uint16_t s[3];
  memcpy(s, a, sizeof s);
  hvd_reduce_into(s, b, 3, HVD_FLOAT16, HVD_SUM);
  CHECK_DBL(hvd_half_to_float(s[0]), 1.75, 0);
  CHECK_DBL(hvd_half_to_float(s[1]), 1.0, 0);
  CHECK_DBL(hvd_half_to_float(s[2]), 0.0, 0);
  memcpy(s, a, sizeof s);
  hvd_reduce_into(s, b, 3, HVD_FLOAT16, HVD_MIN);
  CHECK_DBL(hvd_half_to_float(s[1]), -2, 0);
  CHECK_DBL(hvd_half_to_float(s[2]), -100, 0);
  uint16_t c[2] = {hvd_float_to_bf16(2.0f), hvd_float_to_bf16(-8.0f)}, d[2] = {hvd_float_to_bf16(5.0f), hvd_float_to_bf16(1.0f)};
  hvd_reduce_into(c, d, 2, HVD_BFLOAT16, HVD_MAX);
  CHECK_DBL(hvd_bf16_to_float(c[0]), 5, 0);
  CHECK_DBL(hvd_bf16_to_float(c[1]), 1, 0);
  int32_t i[3] = {7, -7, 9};
  hvd_scale_copy(i, i, 3, HVD_INT32, 2);
  CHECK_INT(i[0], 3);
  CHECK_INT(i[1], -3);
  CHECK_INT(i[2], 4);
  float f[2] = {3.0f, -1.5f}, g[2];
  hvd_scale_copy(g, f, 2, HVD_FLOAT32, 3);
  CHECK_DBL(g[0], 1.0, 1e-7);
  CHECK_DBL(g[1], -0.5, 1e-7);
  uint16_t h = hvd_float_to_half(3.0f);
  hvd_scale_copy(&h, &h, 1, HVD_FLOAT16, 4);
  CHECK_DBL(hvd_half_to_float(h), 0.75, 0);
  CHECK_INT(hvd_dtype_size(HVD_BFLOAT16), 2);
  CHECK_INT(hvd_dtype_size((hvd_dtype_t)42), 0);
}

/* ---------------------------------------------------------------- fusion */

static void test_fusion_pack_unpack(void) {
  /* three tensors of 3, 5 and 1 floats, packed in pieces of 8 bytes
   * (pieces straddle tensors), reduced by "x2", unpacked with divisors */
  float t0[3] = {1, 2, 3}, t1[5] = {4, 5, 6, 7, 8}, t2[1] = {9};
  hvd_fuse_entry e[3] = {{(char *)t0, sizeof t0, 1}, {(char *)t1, sizeof t1, 2}, {(char *)t2, sizeof t2, 4}};
  float staging[2];
  hvd_fuse_cursor in, out;
  hvd_fuse_begin(&in, e, 3);
  hvd_fuse_begin(&out, e, 3);
  size_t total = sizeof t0 + sizeof t1 + sizeof t2;
  float seen[9];
  size_t k = 0;
  for (size_t off = 0; off < total; off += 8) {
    size_t len = total - off < 8 ? total - off : 8;
    hvd_fuse_pack(&in, (char *)staging, len);
    for (size_t j = 0; j < len / 4; j++) seen[k++] = staging[j], staging[j] *= 2;
    hvd_fuse_unpack(&out, (char *)staging, len, HVD_FLOAT32);
  }
  for (int j = 0; j < 9; j++) CHECK_DBL(seen[j], j + 1, 0);
  CHECK_DBL(t0[2], 6, 0);  /* x2, divisor 1 */
  CHECK_DBL(t1[0], 4, 0);  /* x2 / 2 */
  CHECK_DBL(t1[4], 8, 0);
  CHECK_DBL(t2[0], 4.5, 0); /* 18 / 4 */
}

/* ---------------------------------------------------------------- cache */

static void test_cache(void) {
  hvd_cache c;
  CHECK_INT(hvd_cache_init(&c, 2), 0);
  hvd_sig s = {.kind = HVD_KIND_ALLREDUCE, .dtype = HVD_FLOAT32, .count = 10};
  void *ev;
  CHECK_INT(hvd_cache_insert(&c, "a", &s, 1, &ev), 0);
  CHECK_INT(hvd_cache_insert(&c, "b", &s, 2, &ev), 1);
  CHECK_INT(hvd_cache_insert(&c, "a", &s, 3, &ev), 0); /* present: same bit */
  CHECK_INT(hvd_cache_lookup(&c, "b"), 1);
  c.e[0].last_used = 5; /* "a" used recently: "b" is least recently used */
  int marker;
  c.e[1].pending = &marker;
  CHECK_INT(hvd_cache_insert(&c, "c", &s, 6, &ev), 1);
  CHECK(ev == &marker); /* the evicted entry's waiter comes back */
  CHECK_INT(hvd_cache_lookup(&c, "b"), -1);
  CHECK_INT(hvd_cache_lookup(&c, "c"), 1);
  CHECK(hvd_cache_erase(&c, 0) == NULL);
  CHECK_INT(hvd_cache_lookup(&c, "a"), -1);
  CHECK_INT(hvd_cache_size(&c), 1);
  hvd_cache_free(&c);
  hvd_cache z;
  CHECK_INT(hvd_cache_init(&z, 0), 0); /* capacity 0: disabled */
  CHECK_INT(hvd_cache_insert(&z, "a", &s, 1, &ev), -1);
  CHECK_INT(hvd_cache_lookup(&z, "a"), -1);
  hvd_cache_free(&z);
}

static void test_strmap(void) {
  hvd_strmap *m = hvd_strmap_new();
  char key[32];
  for (int i = 0; i < 5000; i++) {
    snprintf(key, sizeof key, "t%d", i);
    CHECK_INT(hvd_strmap_put(m, key, (void *)(intptr_t)(i + 1)), 0);
  }
  CHECK_INT(hvd_strmap_len(m), 5000);
  CHECK_INT((intptr_t)hvd_strmap_get(m, "t4321"), 4322);
  CHECK_INT((intptr_t)hvd_strmap_del(m, "t10"), 11);
  CHECK(hvd_strmap_get(m, "t10") == NULL);
  CHECK_INT(hvd_strmap_len(m), 4999);
  hvd_strmap_free(m);
}

static void test_wire(void) {
  hvd_buf b = {0};
  hvd_sig s = {.kind = HVD_KIND_BROADCAST, .dtype = HVD_INT64, .root = 3, .count = 77};
  hvd_wire_put_req(&b, &s, 1.5, "layer.weight");
  int64_t rows[2] = {4, 6};
  hvd_sig g = {.kind = HVD_KIND_ALLGATHER, .dtype = HVD_FLOAT32, .count = 4, .row_elems = 8};
  hvd_wire_put_resp(&b, HVD_RESP_EXEC, &g, "emb", NULL, rows, 2);
  hvd_wire_req r;
  hvd_wire_resp p;
  CHECK_INT(hvd_wire_get_req(&b, &r), 0);
  CHECK_INT(r.sig.root, 3);
  CHECK_INT(r.sig.count, 77);
  CHECK_DBL(r.age, 1.5, 0);
  CHECK_INT(r.name_len, 12);
  CHECK(!memcmp(r.name, "layer.weight", 12));
  CHECK_INT(hvd_wire_get_resp(&b, &p, 2), 0);
  CHECK_INT(p.sig.row_elems, 8);
  int64_t r1;
  memcpy(&r1, &p.rows[1], 8);
  CHECK_INT(r1, 6);
  CHECK(!hvd_buf_more(&b));
  /* truncated input is detected, never read past */
  b.len -= 3;
  b.pos = 0;
  CHECK_INT(hvd_wire_get_req(&b, &r), 0);
  CHECK_INT(hvd_wire_get_resp(&b, &p, 2), -1);
  hvd_buf_free(&b);
}

/* A joined rank contributes the identity of the reduction: combining it
 * with any value leaves the value, for every dtype and op. */
static void test_identity(void) {
  static const double samples[] = {-3.5, 0, 1, 250, -1e30, 1e30};
  for (int dt = 0; dt < HVD_DTYPE_COUNT; dt++)
    for (int op = 0; op < HVD_OP_COUNT; op++) {
      unsigned char id[8 * 6], acc[8 * 6];
      hvd_fill_identity(id, 6, (hvd_dtype_t)dt, (hvd_op_t)op);
      for (int i = 0; i < 6; i++) { /* acc = the samples in this dtype */
        double v = samples[i];
        switch (dt) {
        case HVD_FLOAT32: ((float *)acc)[i] = (float)v; break;
        case HVD_FLOAT64: ((double *)acc)[i] = v; break;
        case HVD_FLOAT16: ((uint16_t *)acc)[i] = hvd_float_to_half((float)v); break;
        case HVD_BFLOAT16: ((uint16_t *)acc)[i] = hvd_float_to_bf16((float)v); break;
        case HVD_INT32: ((int32_t *)acc)[i] = (int32_t)(fabs(v) < 1e9 ? v : v > 0 ? 1e9 : -1e9); break;
        case HVD_INT64: ((int64_t *)acc)[i] = (int64_t)(fabs(v) < 1e18 ? v : v > 0 ? 1e18 : -1e18); break;
        case HVD_UINT8: ((uint8_t *)acc)[i] = (uint8_t)(v >= 0 && v < 256 ? v : 7); break;
        case HVD_INT8: ((int8_t *)acc)[i] = (int8_t)(fabs(v) < 100 ? v : v > 0 ? 100 : -100); break;
        case HVD_INT16: ((int16_t *)acc)[i] = (int16_t)(fabs(v) < 1e4 ? v : v > 0 ? 1e4 : -1e4); break;
        }
      }
      unsigned char before[8 * 6];
      size_t bytes = 6 * hvd_dtype_size((hvd_dtype_t)dt);
      memcpy(before, acc, bytes);
      hvd_reduce_into(acc, id, 6, (hvd_dtype_t)dt, (hvd_op_t)op);
      if (memcmp(before, acc, bytes) != 0) CHECK_FAIL_("identity of %s changed a %s value", hvd_op_name(op), hvd_dtype_name((hvd_dtype_t)dt));
    }
}

/* ---------------------------------------------------------------- GPU path, host-testable parts */

/* hvd_elem_move is what the device kernel runs per element: casts for
 * compression, the average folded into the copy-out. */
static void test_elem_move(void) {
  float f[4] = {1.0f, -2.5f, 65520.0f, 3.0f}, back[4];
  uint16_t h[4], b[4];
  for (int i = 0; i < 4; i++) hvd_elem_move(h, HVD_E_F16, (uint64_t)i, f, HVD_E_F32, (uint64_t)i, 1, 1.0f);
  CHECK_INT(h[0], 0x3c00);
  CHECK_INT(h[2], 0x7c00); /* float16 overflow: inf, as a cast does */
  for (int i = 0; i < 4; i++) hvd_elem_move(back, HVD_E_F32, (uint64_t)i, h, HVD_E_F16, (uint64_t)i, 2, 0.5f);
  CHECK(back[0] == 0.5f && back[1] == -1.25f && back[3] == 1.5f);
  for (int i = 0; i < 4; i++) hvd_elem_move(b, HVD_E_BF16, (uint64_t)i, f, HVD_E_F32, (uint64_t)i, 1, 1.0f);
  CHECK_INT(b[0], 0x3f80);
  for (int i = 0; i < 4; i++) hvd_elem_move(back, HVD_E_F32, (uint64_t)i, b, HVD_E_BF16, (uint64_t)i, 4, 0.25f);
  CHECK(back[1] == -0.625f && back[2] == 16384.0f); /* 65520 rounds to 65536 in bfloat16 */
  /* the same results as the CPU path's scaled copy, for every type */
  for (int dt = 0; dt < HVD_DTYPE_COUNT; dt++) {
    unsigned char src[8 * 5], a[8 * 5], c[8 * 5];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)(i * 37 + 11);
    if (dt == HVD_FLOAT32 || dt == HVD_FLOAT64 || dt == HVD_FLOAT16 || dt == HVD_BFLOAT16)
      hvd_fill_identity(src, 1, (hvd_dtype_t)dt, HVD_MIN), hvd_fill_identity(src + 8 * 4, 0, (hvd_dtype_t)dt, HVD_MIN);
    hvd_scale_copy(a, src, 5, (hvd_dtype_t)dt, 3);
    for (uint64_t i = 0; i < 5; i++) hvd_elem_move(c, dt, i, src, dt, i, 3, 1.0f / 3.0f);
    if (memcmp(a, c, 5 * hvd_dtype_size((hvd_dtype_t)dt)) != 0)
      CHECK_FAIL_("device element move differs from hvd_scale_copy for %s", hvd_dtype_name((hvd_dtype_t)dt));
  }
  /* the kernel argument stays under the 4 KiB parameter limit */
  CHECK(sizeof(hvd_gpu_move_args) <= 4096);
  CHECK_INT(sizeof(hvd_gpu_desc), 32);
}

static void test_pin_pick(void) {
  char out[64];
  int shared;
  CHECK_INT(hvd_pin_pick(NULL, 4, 1, 4, out, sizeof out, &shared), 0);
  CHECK_STR(out, "1");
  CHECK_INT(shared, 0);
  CHECK_INT(hvd_pin_pick("", 2, 3, 4, out, sizeof out, &shared), 0); /* "" = no list */
  CHECK_STR(out, "1");
  CHECK_INT(shared, 1);
  CHECK_INT(hvd_pin_pick("3,5", 8, 0, 2, out, sizeof out, &shared), 0);
  CHECK_STR(out, "3");
  CHECK_INT(hvd_pin_pick("3, 5", 8, 1, 2, out, sizeof out, &shared), 0);
  CHECK_STR(out, "5");
  CHECK_INT(hvd_pin_pick("GPU-aa11,GPU-bb22", 0, 3, 4, out, sizeof out, &shared), 0);
  CHECK_STR(out, "GPU-bb22");
  CHECK_INT(shared, 1);
  CHECK_INT(hvd_pin_pick(NULL, 0, 0, 1, out, sizeof out, &shared), -1); /* no GPU: nothing set */
  CHECK_INT(hvd_pin_pick(NULL, 2, -1, 1, out, sizeof out, &shared), -1);
  CHECK_INT(hvd_pin_pick("0,,1", 0, 1, 3, out, sizeof out, &shared), -1); /* an empty entry is not guessed at */
}

static void test_cfg_format(void) {
  char buf[32];
  CHECK_STR(hvd_cfg_format(HVD_CFG_GPU_OPERATIONS, 1, buf, sizeof buf), "MPI");
  CHECK_STR(hvd_cfg_format(HVD_CFG_GPU_OPERATIONS, 2, buf, sizeof buf), "auto"); /* the default */
  CHECK_STR(hvd_cfg_format(HVD_CFG_COMPRESSION, 2, buf, sizeof buf), "bf16");
  CHECK_STR(hvd_cfg_format(HVD_CFG_FUSION_THRESHOLD, 1048576, buf, sizeof buf), "1048576");
}

/* Hook specs: types, defaults and expressions over real argument values. */
/* ---------------------------------------------------------------- python's options */

static char pyflag(const char *const *argv) {
  char buf[512];
  size_t n = 0;
  for (; *argv; argv++) n += (size_t)snprintf(buf + n, sizeof buf - n, "%s", *argv) + 1;
  return hvd_python_bootstrap_flag(buf, n);
}

static void test_python_flags(void) {
  CHECK(pyflag((const char *[]){"python3", "train.py", NULL}) == 0);
  CHECK(pyflag((const char *[]){"python3", "-I", "train.py", NULL}) == 'I');
  CHECK(pyflag((const char *[]){"python3", "-uE", "train.py", NULL}) == 'E');
  CHECK(pyflag((const char *[]){"python3", "-bS", "-u", "train.py", NULL}) == 'S');
  CHECK(pyflag((const char *[]){"python3", "-W", "ignore", "-I", "train.py", NULL}) == 'I');
  CHECK(pyflag((const char *[]){"python3", "-Werror", "-X", "dev", "train.py", NULL}) == 0);
  CHECK(pyflag((const char *[]){"python3", "-X", "E", "train.py", NULL}) == 0); /* (an argument, not the option) */
  CHECK(pyflag((const char *[]){"python3", "--check-hash-based-pycs", "always", "-s", "-E", "x.py", NULL}) == 'E');
  CHECK(pyflag((const char *[]){"python3", "train.py", "-I", NULL}) == 0);       /* the script's own */
  CHECK(pyflag((const char *[]){"python3", "-c", "print(1)", "-I", NULL}) == 0); /* the command's */
  CHECK(pyflag((const char *[]){"python3", "-m", "pkg", "-E", NULL}) == 0);
  CHECK(pyflag((const char *[]){"python3", "-uc", "print(1)", NULL}) == 0);
  CHECK(pyflag((const char *[]){"python3", "-", "-I", NULL}) == 0);
  CHECK(pyflag((const char *[]){"python3", "-s", "--", "-I", NULL}) == 0);
  CHECK(pyflag((const char *[]){"python3", NULL}) == 0);
}

static void test_hookspec(void) {
  const char *text = "long f(const float *g, int *n, unsigned short rows, long cols, void *raw)\n"
                     "  g: allreduce count=*n * rows + cols/2 - 1 op=sum after\n"
                     "  raw: broadcast count=cols dtype=bfloat16 root=1 every\n"
                     "  cols: shard block total=rows % 7\n";
  hvd_hookspec s;
  char err[512];
  CHECK_INT(hvd_hookspec_parse(text, strlen(text), "t.hooks", &s, err, sizeof err), 0);
  if (s.n != 1) return;
  const hvd_hs_hook *h = &s.hooks[0];
  CHECK_STR(h->name, "f");
  CHECK_INT(h->nargs, 5);
  CHECK_STR(h->args[0].text, "const float *");
  CHECK_INT(h->args[0].dtype, HVD_FLOAT32);
  CHECK_INT(h->args[2].cls, HVD_HS_UINT);
  CHECK_INT(h->args[2].size, 2);
  CHECK_INT(h->ret.size, 8);
  CHECK_INT(h->act[0].after, 1);
  CHECK_INT(h->act[0].op, HVD_SUM);
  CHECK_INT(h->act[1].dtype, HVD_BFLOAT16);
  CHECK_INT(h->act[1].root, 1);
  CHECK_INT(h->act[1].every, 1);
  CHECK_INT(h->act[2].block, 1);
  float g[4];
  int n = 3;
  int *np = &n;
  unsigned short rows = 65535; /* read unsigned */
  long cols = 10;
  void *raw = NULL;
  const float *gp = g;
  void *args[] = {&gp, &np, &rows, &cols, &raw};
  int64_t v;
  CHECK_INT(hvd_hs_eval(&h->act[0].count, h, args, &v, err, sizeof err), 0);
  CHECK_INT(v, 3LL * 65535 + 5 - 1);
  CHECK_INT(hvd_hs_eval(&h->act[2].count, h, args, &v, err, sizeof err), 0);
  CHECK_INT(v, 65535 % 7);
  np = NULL; /* *n of a null pointer: an error, not a crash */
  CHECK_INT(hvd_hs_eval(&h->act[0].count, h, args, &v, err, sizeof err), -1);
  CHECK_STR_HAS(err, "is a null pointer");
  hvd_hookspec_free(&s);
  text = "void f(long a, long b); a: shard block total=a/b; b: shard block total=a*a*a*a";
  CHECK_INT(hvd_hookspec_parse(text, strlen(text), "t", &s, err, sizeof err), 0);
  if (s.n != 1) return;
  long a = 5, b = 0;
  void *args2[] = {&a, &b};
  CHECK_INT(hvd_hs_eval(&s.hooks[0].act[0].count, &s.hooks[0], args2, &v, err, sizeof err), -1);
  CHECK_STR(err, "'a/b' in f divides by zero");
  a = 1L << 20;
  CHECK_INT(hvd_hs_eval(&s.hooks[0].act[1].count, &s.hooks[0], args2, &v, err, sizeof err), -1);
  CHECK_STR(err, "'a*a*a*a' in f overflows 64-bit integers");
  int16_t w = -2;
  hvd_hs_type t16 = {.cls = HVD_HS_SINT, .size = 2};
  CHECK_INT(hvd_hs_arg_int(&t16, &w), -2);
  hvd_hs_set_int(&t16, &w, 70000); /* truncated to the argument's width */
  CHECK_INT(w, (int16_t)(70000 & 0xffff));
  hvd_hookspec_free(&s);
}

/* A synthetic throughput landscape: best at 4M and 0.5 ms, every step away
 * on the grid at least 10% worse; each measurement gets +-3% noise and every
 * seventh one is an outlier at a third (a pause), which the median absorbs. */
static double landscape(size_t fusion, double cycle_ms, unsigned *seed) {
  double lf = log2((double)fusion / (4 << 20)), lc = log2(cycle_ms / 0.5);
  double v = 1000.0 / (1.0 + 0.1 * lf * lf) / (1.0 + 0.15 * lc * lc);
  *seed = *seed * 1103515245u + 12345u;
  double noise = 1.0 + 0.03 * (((*seed >> 16) % 2001) / 1000.0 - 1.0);
  return ((*seed >> 8) % 7 == 0 ? v / 3 : v) * noise;
}

static void test_autotune(void) {
  hvd_tuner t;
  unsigned seed = 7;
  int changes = 0, feeds = 0;
  hvd_tuner_init(&t, 128u << 20, 1.0, 1, 1);
  CHECK(!hvd_tuner_done(&t));
  CHECK_INT(t.fusion, 64u << 10); /* the search starts at the grid's first threshold */
  while (!hvd_tuner_done(&t) && feeds < 1000) {
    changes += hvd_tuner_feed(&t, landscape(t.fusion, t.cycle_ms, &seed));
    feeds++;
  }
  CHECK(hvd_tuner_done(&t));
  CHECK_INT(feeds, (HVD_TUNE_NFUSION + HVD_TUNE_NCYCLE) * (HVD_TUNE_WARMUP + HVD_TUNE_SAMPLES));
  CHECK_INT(changes, HVD_TUNE_NFUSION + HVD_TUNE_NCYCLE);
  CHECK_INT(t.fusion, 4u << 20);
  CHECK_DBL(t.cycle_ms, 0.5, 0);
  CHECK(t.chosen_score > 900);
  CHECK_INT(hvd_tuner_feed(&t, 1.0), 0); /* done: fixed from now on */
  CHECK_INT(t.fusion, 4u << 20);

  /* an explicit fusion threshold (off the grid) stays; the cycle is tuned */
  hvd_tuner_init(&t, 48u << 20, 1.0, 0, 1);
  for (feeds = 0; !hvd_tuner_done(&t) && feeds < 1000; feeds++) {
    CHECK_INT(t.fusion, 48u << 20);
    hvd_tuner_feed(&t, landscape(4u << 20, t.cycle_ms, &seed));
  }
  CHECK_INT(feeds, HVD_TUNE_NCYCLE * (HVD_TUNE_WARMUP + HVD_TUNE_SAMPLES));
  CHECK_INT(t.fusion, 48u << 20);
  CHECK_DBL(t.cycle_ms, 0.5, 0);

  /* an explicit cycle time: only the threshold is searched */
  hvd_tuner_init(&t, 128u << 20, 3.0, 1, 0);
  for (feeds = 0; !hvd_tuner_done(&t) && feeds < 1000; feeds++) {
    CHECK_DBL(t.cycle_ms, 3.0, 0);
    hvd_tuner_feed(&t, landscape(t.fusion, 0.5, &seed));
  }
  CHECK_INT(feeds, HVD_TUNE_NFUSION * (HVD_TUNE_WARMUP + HVD_TUNE_SAMPLES));
  CHECK_INT(t.fusion, 4u << 20);

  /* both explicit: nothing to do */
  hvd_tuner_init(&t, 1u << 20, 2.0, 0, 0);
  CHECK(hvd_tuner_done(&t));
  CHECK_INT(hvd_tuner_feed(&t, 5.0), 0);
  CHECK_INT(t.fusion, 1u << 20);
  CHECK_DBL(t.cycle_ms, 2.0, 0);
}

/* ---------------------------------------------------------------- coordinator */

/* A synthetic negotiation round for the coordinator, no MPI: each rank's
 * request records as the engine gathers them. */
typedef struct {
  int size;
  hvd_buf rank[4];
} round_in;

static void req(round_in *in, int r, const char *name, hvd_sig sig, double age) {
  hvd_wire_put_req(&in->rank[r], &sig, age, name);
}

/* Runs the round; the responses as "TYPE name[: message]" lines. */
static void run_round(hvd_coord *k, round_in *in, double now, char *out, size_t n, int64_t *rows) {
  hvd_buf all = {0}, resp = {0};
  int lens[4], displs[4];
  hvd_buf_reserve(&all, 1); /* as the engine's: never a null buffer */
  for (int r = 0; r < in->size; r++) {
    displs[r] = (int)all.len;
    lens[r] = (int)in->rank[r].len;
    hvd_buf_put(&all, in->rank[r].p, in->rank[r].len);
    hvd_buf_reset(&in->rank[r]);
  }
  hvd_coord_round(k, all.p, lens, displs, now, &resp);
  static const char *types[] = {"EXEC", "ERROR", "INVALIDATE", "FATAL"};
  size_t at = 0;
  out[0] = 0;
  hvd_wire_resp w;
  while (hvd_buf_more(&resp) && hvd_wire_get_resp(&resp, &w, in->size) == 0 && at < n) {
    at += (size_t)snprintf(out + at, n - at, "%s%s %.*s", at ? "\n" : "", types[w.type], (int)w.name_len, w.name);
    if (w.msg_len && at < n) at += (size_t)snprintf(out + at, n - at, ": %.*s", (int)w.msg_len, w.msg);
    if (w.rows && rows) memcpy(rows, w.rows, sizeof(int64_t) * (size_t)in->size);
  }
  hvd_buf_free(&all);
  hvd_buf_free(&resp);
}

static int cached_names(const char *name, void *ctx) { return (void)ctx, !strcmp(name, "cached.w"); }

static void test_coordinator(void) {
  uint8_t joined[4] = {0};
  int njoined = 0;
  hvd_coord k;
  CHECK_INT(hvd_coord_init(&k, 4, joined, &njoined, 60.0, 0.0, cached_names, NULL), 0);
  round_in in = {.size = 4};
  char out[4096];
  hvd_sig f32 = {.kind = HVD_KIND_ALLREDUCE, .dtype = HVD_FLOAT32, .op = HVD_AVG, .count = 10};

  /* a name answered only when every rank has sent it, in arrival order */
  req(&in, 0, "a", f32, 0), req(&in, 1, "a", f32, 0), req(&in, 2, "b", f32, 0);
  run_round(&k, &in, 1.0, out, sizeof out, NULL);
  CHECK_STR(out, "");
  CHECK(hvd_coord_busy(&k));
  req(&in, 2, "a", f32, 0), req(&in, 3, "a", f32, 0), req(&in, 0, "b", f32, 0), req(&in, 1, "b", f32, 0),
      req(&in, 3, "b", f32, 0);
  run_round(&k, &in, 2.0, out, sizeof out, NULL);
  CHECK_STR(out, "EXEC a\nEXEC b");
  CHECK(!hvd_coord_busy(&k));

  /* a mismatch names the field and groups the ranks by value */
  hvd_sig f64 = f32, bigger = f32;
  f64.dtype = HVD_FLOAT64;
  bigger.count = 12;
  req(&in, 0, "m", f32, 0), req(&in, 1, "m", f64, 0), req(&in, 2, "m", f32, 0), req(&in, 3, "m", f64, 0);
  req(&in, 0, "c", f32, 0), req(&in, 1, "c", f32, 0), req(&in, 2, "c", f32, 0), req(&in, 3, "c", bigger, 0);
  run_round(&k, &in, 3.0, out, sizeof out, NULL);
  CHECK_STR(out, "ERROR m: allreduce 'm': ranks disagree on the dtype: float32 on ranks 0,2; float64 on ranks 1,3\n"
                 "ERROR c: allreduce 'c': ranks disagree on the count: 10 elements on ranks 0-2; 12 elements on rank 3");

  /* the same count in another shape (hvd_next_shape's tag): small shapes named, large ones by hash */
  hvd_sig wide = f32, tall = f32;
  const int64_t two_five[] = {2, 5}, five_two[] = {5, 2}, big[] = {50257, 768}, big_t[] = {768, 50257};
  wide.shape = hvd_shape_tag(two_five, 2), tall.shape = hvd_shape_tag(five_two, 2);
  req(&in, 0, "s", wide, 0), req(&in, 1, "s", tall, 0), req(&in, 2, "s", wide, 0), req(&in, 3, "s", wide, 0);
  run_round(&k, &in, 3.5, out, sizeof out, NULL);
  CHECK_STR(out, "ERROR s: allreduce 's': ranks disagree on the shape (the same element count): shape [2, 5] on "
                 "ranks 0,2,3; shape [5, 2] on rank 1");
  wide.shape = hvd_shape_tag(big, 2), tall.shape = hvd_shape_tag(big_t, 2);
  CHECK(!(wide.shape & 0x80000000u) && !(tall.shape & 0x80000000u) && wide.shape && wide.shape != tall.shape);
  req(&in, 0, "h", wide, 0), req(&in, 1, "h", tall, 0), req(&in, 2, "h", wide, 0), req(&in, 3, "h", wide, 0);
  run_round(&k, &in, 3.6, out, sizeof out, NULL);
  CHECK_STR_HAS(out, "ranks disagree on the shape (the same element count): shape #");
  { /* the tag: every rank up to 4 exactly at its limits, the same shape the same tag, the rest hashed */
    char d[96];
    const int64_t one[] = {268435455}, three[] = {511, 0, 7}, four[] = {127, 1, 2, 3}, over[] = {128, 1, 2, 3},
                  five[] = {1, 2, 3, 4, 5}, neg[] = {-1, 2};
    hvd_shape_describe(d, sizeof d, hvd_shape_tag(NULL, 0)); CHECK_STR(d, "[]");
    hvd_shape_describe(d, sizeof d, hvd_shape_tag(one, 1)); CHECK_STR(d, "[268435455]");
    hvd_shape_describe(d, sizeof d, hvd_shape_tag(three, 3)); CHECK_STR(d, "[511, 0, 7]");
    hvd_shape_describe(d, sizeof d, hvd_shape_tag(four, 4)); CHECK_STR(d, "[127, 1, 2, 3]");
    CHECK(hvd_shape_tag(four, 4) == hvd_shape_tag(four, 4) && hvd_shape_tag(one, 1) != hvd_shape_tag(NULL, 0));
    CHECK(!(hvd_shape_tag(over, 4) & 0x80000000u) && !(hvd_shape_tag(five, 5) & 0x80000000u) &&
          !(hvd_shape_tag(neg, 2) & 0x80000000u) && hvd_shape_tag(over, 4) != hvd_shape_tag(four, 4));
    hvd_shape_describe(d, sizeof d, 0xf0000000u); CHECK_STR(d, "#f0000000"); /* no such rank: shown as a tag */
  }

  /* a rank's duplicate record in one round counts once */
  req(&in, 0, "d", f32, 0), req(&in, 0, "d", f32, 0), req(&in, 1, "d", f32, 0), req(&in, 1, "d", f32, 0);
  run_round(&k, &in, 4.0, out, sizeof out, NULL);
  CHECK_STR(out, "");
  req(&in, 2, "d", f32, 0), req(&in, 3, "d", f32, 0);
  run_round(&k, &in, 4.5, out, sizeof out, NULL);
  CHECK_STR(out, "EXEC d");

  /* a cached name sent again: every rank drops the entry (once per round) */
  req(&in, 1, "cached.w", f32, 0), req(&in, 2, "cached.w", f32, 0);
  run_round(&k, &in, 5.0, out, sizeof out, NULL);
  CHECK_STR(out, "INVALIDATE cached.w");

  /* a rank that joins completes what waited only for it; allgather rows:
   * a joined rank contributes none */
  hvd_sig g = {.kind = HVD_KIND_ALLGATHER, .dtype = HVD_INT32, .row_elems = 3};
  g.count = 2, req(&in, 0, "g", g, 0);
  g.count = 5, req(&in, 1, "g", g, 0);
  g.count = 1, req(&in, 3, "g", g, 0);
  run_round(&k, &in, 6.0, out, sizeof out, NULL);
  CHECK_STR(out, "");
  joined[2] = 1, njoined = 1;
  int64_t rows[4] = {-1, -1, -1, -1};
  run_round(&k, &in, 6.5, out, sizeof out, rows);
  CHECK_STR(out, "EXEC g"); /* 'cached.w' still waits for ranks 0 and 3 */
  CHECK_INT(rows[0], 2);
  CHECK_INT(rows[1], 5);
  CHECK_INT(rows[2], 0);
  CHECK_INT(rows[3], 1);
  joined[2] = 0, njoined = 0;
  hvd_coord_free(&k);

  /* the stall inspector: late ranks vs ranks that submitted something else,
   * then the fatal response after the shutdown limit */
  CHECK_INT(hvd_coord_init(&k, 4, joined, &njoined, 2.0, 10.0, cached_names, NULL), 0);
  req(&in, 0, "x", f32, 0), req(&in, 1, "x", f32, 0), req(&in, 2, "x", f32, 0);
  run_round(&k, &in, 0.0, out, sizeof out, NULL);
  CHECK_INT(hvd_coord_stall_check(&k, 1.0), 0);
  CHECK_INT(hvd_coord_stall_check(&k, 3.0), 1);
  CHECK_STR(k.last_line, "stall: allreduce 'x' submitted by rank(s) 0-2 has waited 3.0 s for rank(s) 3; rank(s) 3 "
                         "submitted nothing else: late (still computing, blocked outside hvdshim, or stopped)");
  CHECK_INT(hvd_coord_stall_check(&k, 3.5), 0); /* one line per warning interval */
  req(&in, 3, "y", f32, 0);
  run_round(&k, &in, 4.0, out, sizeof out, NULL);
  CHECK_INT(hvd_coord_stall_check(&k, 5.5), 1);
  CHECK_STR_HAS(k.last_line, "rank(s) 3 submitted other operations instead (allreduce 'y'): the ranks disagree");
  CHECK(!k.fatal_msg);
  CHECK_INT(hvd_coord_stall_check(&k, 10.5), 2); /* 'x' (now fatal) and 'y', waiting 6.5 s for ranks 0-2 */
  CHECK_STR_HAS(k.fatal_msg, "ending the job after HVDSHIM_STALL_SHUTDOWN_SECONDS=10");
  run_round(&k, &in, 11.0, out, sizeof out, NULL);
  CHECK_STR_HAS(out, "FATAL : stall: allreduce 'x' submitted by rank(s) 0-2");
  for (int r = 0; r < 4; r++) hvd_buf_free(&in.rank[r]);
  hvd_coord_free(&k);
}

/* Process sets in the coordinator: set 1 = ranks 1,2 (of 4). */
static int set12(int set, int rank, void *ctx) { return (void)ctx, set == 0 || rank == 1 || rank == 2; }

static void test_coordinator_sets(void) {
  uint8_t joined[4] = {0};
  int njoined = 0;
  hvd_coord k;
  CHECK_INT(hvd_coord_init(&k, 4, joined, &njoined, 2.0, 0.0, cached_names, NULL), 0);
  k.in_set = set12;
  round_in in = {.size = 4};
  char out[4096];
  hvd_sig s1 = {.kind = HVD_KIND_ALLREDUCE, .dtype = HVD_FLOAT32, .count = 4, .set = 1}, s0 = s1;
  s0.set = 0;
  /* a set's operation waits for its members only */
  req(&in, 1, "p", s1, 0);
  run_round(&k, &in, 0.0, out, sizeof out, NULL);
  CHECK_STR(out, "");
  req(&in, 2, "p", s1, 0);
  run_round(&k, &in, 0.5, out, sizeof out, NULL);
  CHECK_STR(out, "EXEC p");
  /* one name on two sets: the ranks disagree on the process set */
  req(&in, 1, "q", s1, 0), req(&in, 2, "q", s0, 0);
  run_round(&k, &in, 1.0, out, sizeof out, NULL);
  CHECK_STR(out, "ERROR q: allreduce 'q': ranks disagree on the process set: process set 1 on rank 1; process set 0 "
                 "on rank 2");
  /* allgather rows: non-members contribute none */
  hvd_sig g = {.kind = HVD_KIND_ALLGATHER, .dtype = HVD_INT32, .row_elems = 1, .set = 1};
  g.count = 3, req(&in, 1, "g", g, 0);
  g.count = 4, req(&in, 2, "g", g, 0);
  int64_t rows[4] = {-1, -1, -1, -1};
  run_round(&k, &in, 1.5, out, sizeof out, rows);
  CHECK_STR(out, "EXEC g");
  CHECK(rows[0] == 0 && rows[1] == 3 && rows[2] == 4 && rows[3] == 0);
  /* the stall inspector names the missing member only */
  req(&in, 1, "late", s1, 0);
  run_round(&k, &in, 2.0, out, sizeof out, NULL);
  CHECK_INT(hvd_coord_stall_check(&k, 5.0), 1);
  CHECK_STR_HAS(k.last_line, "stall: allreduce 'late' submitted by rank(s) 1 has waited 3.0 s for rank(s) 2;");
  /* a joined member completes it */
  joined[2] = 1, njoined = 1;
  run_round(&k, &in, 5.5, out, sizeof out, NULL);
  CHECK_STR(out, "EXEC late");
  /* adding a set needs every rank: a joined one gets it refused; member lists compared */
  hvd_sig add = {.kind = HVD_KIND_PSET_ADD, .dtype = HVD_INT32, .count = 2, .shape = 7}, other = add;
  other.shape = 9;
  req(&in, 0, "add", add, 0), req(&in, 1, "add", add, 0), req(&in, 3, "add", add, 0);
  run_round(&k, &in, 6.0, out, sizeof out, NULL);
  CHECK_STR(out, "ERROR add: process set add 'add': rank(s) 2 have finished or are in join(); every rank must take "
                 "part in adding or removing a process set");
  joined[2] = 0, njoined = 0;
  req(&in, 0, "add2", add, 0), req(&in, 1, "add2", other, 0), req(&in, 2, "add2", add, 0);
  run_round(&k, &in, 7.0, out, sizeof out, NULL);
  CHECK_STR(out, "");
  req(&in, 3, "add2", add, 0);
  run_round(&k, &in, 7.5, out, sizeof out, NULL);
  CHECK_STR(out, "ERROR add2: process set add 'add2': ranks disagree on the member list (the same number of ranks): "
                 "member list #00000007 on ranks 0,2,3; member list #00000009 on rank 1");
  for (int r = 0; r < 4; r++) hvd_buf_free(&in.rank[r]);
  hvd_coord_free(&k);
}

/* unit_tests [TEXT]: every test, or those whose name contains TEXT */
/* The watcher that removes a path once its holders are gone: SIGTERM does
 * not end it (hvdrun sends one to what a stopped job's launcher left, an
 * orphaned watcher among them), and it removes the path when the write
 * end closes; both forms (one path, a list). */
static pid_t watcher_of(const char *word) { /* a child of this process whose command line holds WORD */
  char path[64], buf[512];
  DIR *d = opendir("/proc");
  struct dirent *e;
  pid_t found = 0;
  while (d && !found && (e = readdir(d))) {
    long pid = strtol(e->d_name, NULL, 10);
    if (pid <= 0) continue;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *r = strrchr(buf, ')');
    long ppid = 0;
    if (!r || sscanf(r + 1, " %*c %ld", &ppid) != 1 || ppid != (long)getpid()) continue;
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    if (!(f = fopen(path, "r"))) continue;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
      if (!buf[i]) buf[i] = ' ';
    buf[n] = 0;
    if (strstr(buf, word)) found = (pid_t)pid;
  }
  if (d) closedir(d);
  return found;
}

static void test_remover(void) {
  for (int list = 0; list < 2; list++) {
    char dir[] = "/tmp/hvdshim-unit-remover.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int fd = list ? hvd_remover_spawn_list() : hvd_remover_spawn(dir);
    CHECK(fd >= 0);
    if (fd < 0) continue;
    if (list) CHECK(write(fd, dir, strlen(dir)) == (ssize_t)strlen(dir) && write(fd, "\n", 1) == 1);
    pid_t w = 0;
    for (int i = 0; i < 200 && !w; i++, usleep(10000)) w = watcher_of(list ? "hvdshim-remover" : dir);
    CHECK(w > 0);
    usleep(100000); /* (its shell has set its traps) */
    if (w > 0) CHECK(kill(w, SIGTERM) == 0);
    usleep(100000);
    CHECK(access(dir, F_OK) == 0); /* (not removed while held) */
    close(fd);
    int gone = 0;
    for (int i = 0; i < 500 && !gone; i++, usleep(10000)) gone = access(dir, F_OK) != 0;
    if (!gone) CHECK_FAIL_("%s still there after its watcher got SIGTERM and its holder closed (%s form)", dir,
                           list ? "list" : "one-path");
    if (w > 0) waitpid(w, NULL, 0);
    rmdir(dir);
  }
}

/* The restorer (hvd_remover_spawn_restore): a rewrite cut short puts the
 * backup back over the part written; a file written anew (its mark B.new)
 * is removed; a finished rewrite (no backup left) is left alone; the
 * backups' folder goes where empty. */
static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) fputs(text, f), fclose(f);
}
static int holds(const char *path, const char *text) {
  char buf[64] = {0};
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  return n == strlen(text) && !memcmp(buf, text, n);
}
static void test_restorer(void) {
  char dir[] = "/tmp/hvdshim-unit-restorer.XXXXXX", hid[96], p[3][96], b[3][112], rec[512];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(hid, sizeof hid, "%s/.hvdshim-saving", dir);
  CHECK(mkdir(hid, 0700) == 0);
  const char *names[3] = {"cut.pt", "new.pt", "done.pt"};
  for (int i = 0; i < 3; i++) {
    snprintf(p[i], sizeof p[i], "%s/%s", dir, names[i]);
    snprintf(b[i], sizeof b[i], "%s/%s", hid, names[i]);
  }
  put(b[0], "old"), put(p[0], "pa"); /* rewriting cut.pt: the old one aside, a part written */
  snprintf(rec, sizeof rec, "%s.new", b[1]);
  put(rec, ""), put(p[1], "pa"); /* new.pt written anew, a part */
  put(p[2], "new"); /* done.pt finished: its backup removed */
  int fd = hvd_remover_spawn_restore();
  CHECK(fd >= 0);
  if (fd < 0) return;
  for (int i = 0; i < 3; i++) {
    int n = snprintf(rec, sizeof rec, "%s\n%s\n", b[i], p[i]);
    CHECK(write(fd, rec, (size_t)n) == n);
  }
  pid_t w = 0;
  for (int i = 0; i < 200 && !w; i++, usleep(10000)) w = watcher_of("hvdshim-restorer");
  CHECK(w > 0);
  close(fd);
  int done = 0;
  for (int i = 0; i < 500 && !done; i++, usleep(10000)) done = access(hid, F_OK) != 0;
  if (!done) CHECK_FAIL_("%s still there after the restorer's holder closed", hid);
  if (!holds(p[0], "old")) CHECK_FAIL_("%s: the backup was not put back over the part written", p[0]);
  if (access(p[1], F_OK) == 0) CHECK_FAIL_("%s: the part of a file written anew was not removed", p[1]);
  if (!holds(p[2], "new")) CHECK_FAIL_("%s: a finished rewrite was touched", p[2]);
  if (w > 0) waitpid(w, NULL, 0);
  for (int i = 0; i < 3; i++) unlink(p[i]);
  rmdir(hid), rmdir(dir);
}

int main(int argc, char **argv) {
  static const check_test tests[] = {
      {"settings: defaults", test_settings_defaults},
      {"settings: values and suffixes", test_settings_values},
      {"settings: malformed values rejected with the reason", test_settings_rejects},
      {"settings: environment, Horovod aliases, first error", test_settings_env_and_alias},
      {"settings: unknown variable gets a suggestion", test_settings_unknown},
      {"float16 conversion", test_half},
      {"bfloat16 conversion", test_bf16},
      {"reductions and scaling", test_reduce_and_scale},
      {"fusion pack/unpack across pieces", test_fusion_pack_unpack},
      {"response cache: insert, LRU eviction, erase", test_cache},
      {"string map", test_strmap},
      {"negotiation records", test_wire},
      {"identity contributions of a joined rank", test_identity},
      {"GPU element moves (casts, averages) match the CPU path", test_elem_move},
      {"GPU pinning: CUDA_VISIBLE_DEVICES choice", test_pin_pick},
      {"settings: integer values as text", test_cfg_format},
      {"python options that drop the bootstrap (-E, -I, -S)", test_python_flags},
      {"hook specs: types, defaults, expressions", test_hookspec},
      {"autotune search finds the best pair of a noisy landscape", test_autotune},
      {"coordinator: agreement, mismatch, duplicates, cache invalidation, joined ranks, stalls", test_coordinator},
      {"coordinator: process sets (members only, set mismatch, rows, stalls, joined, adding)", test_coordinator_sets},
      {"path watcher: survives SIGTERM, removes its path when the holders are gone", test_remover},
      {"restorer: a rewrite cut short put back, a new file's part removed, a finished one left", test_restorer},
      {NULL, NULL},
  };
  return check_run(tests, argc > 1 ? argv[1] : NULL);
}
