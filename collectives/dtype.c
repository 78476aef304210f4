/* Element types and their arithmetic.  See dtype.h.  The half conversions
 * round to nearest even and keep infinities, NaNs and subnormals (the bit
 * tricks follow F. Giesen's public-domain float/half notes). */
#include "dtype.h"

#include <math.h>
#include <string.h>

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t hvd_float_to_half(float f) {
  const uint32_t f32inf = 255u << 23, f16max = (127u + 16u) << 23;
  const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t u = f2u(f);
  uint32_t sign = u & 0x80000000u;
  uint16_t o;
  u ^= sign;
  if (u >= f16max) {
    o = u > f32inf ? 0x7e00 : 0x7c00; /* NaN stays NaN; overflow -> inf */
  } else if (u < (113u << 23)) {       /* result is subnormal or zero */
    u = f2u(u2f(u) + u2f(denorm_magic));
    o = (uint16_t)(u - denorm_magic);
  } else {
    uint32_t mant_odd = (u >> 13) & 1u;
    u += ((uint32_t)(15 - 127) << 23) + 0xfffu + mant_odd;
    o = (uint16_t)(u >> 13);
  }
  return (uint16_t)(o | (sign >> 16));
}

float hvd_half_to_float(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = ((uint32_t)h & 0x7fffu) << 13;
  uint32_t exp = shifted_exp & o;
  o += (uint32_t)(127 - 15) << 23;
  if (exp == shifted_exp) {
    o += (uint32_t)(128 - 16) << 23; /* inf / NaN */
  } else if (exp == 0) {             /* zero / subnormal: renormalize */
    o += 1u << 23;
    o = f2u(u2f(o) - u2f(113u << 23));
  }
  return u2f(o | (((uint32_t)h & 0x8000u) << 16));
}

uint16_t hvd_float_to_bf16(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float hvd_bf16_to_float(uint16_t h) { return u2f((uint32_t)h << 16); }

int hvd_dtype_valid(int dtype) { return dtype >= 0 && dtype < HVD_DTYPE_COUNT; }
int hvd_op_valid(int op) { return op >= 0 && op < HVD_OP_COUNT; }

const char *hvd_dtype_name(hvd_dtype_t dtype) {
  static const char *names[] = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"};
  return hvd_dtype_valid(dtype) ? names[dtype] : "unknown";
}

size_t hvd_dtype_size(hvd_dtype_t dtype) {
  static const size_t sizes[] = {4, 8, 2, 2, 4, 8, 1};
  return hvd_dtype_valid(dtype) ? sizes[dtype] : 0;
}

const char *hvd_op_name(int op) {
  static const char *names[] = {"sum", "avg", "min", "max"};
  return hvd_op_valid(op) ? names[op] : "unknown";
}

/* 16-bit floats: compute in float, round once per element. */
#define REDUCE_LOOP(T, LOAD, STORE)                                                   \
  do {                                                                                \
    T *a = acc;                                                                       \
    const T *b = in;                                                                  \
    if (op == HVD_MIN) {                                                              \
      for (size_t i = 0; i < n; i++) if (LOAD(b[i]) < LOAD(a[i])) a[i] = b[i];        \
    } else if (op == HVD_MAX) {                                                       \
      for (size_t i = 0; i < n; i++) if (LOAD(b[i]) > LOAD(a[i])) a[i] = b[i];        \
    } else {                                                                          \
      for (size_t i = 0; i < n; i++) a[i] = STORE(LOAD(a[i]) + LOAD(b[i]));           \
    }                                                                                 \
  } while (0)

#define NATIVE_LOOP(T)                                                \
  do {                                                                \
    T *a = acc;                                                       \
    const T *b = in;                                                  \
    if (op == HVD_MIN) for (size_t i = 0; i < n; i++) a[i] = b[i] < a[i] ? b[i] : a[i]; \
    else if (op == HVD_MAX) for (size_t i = 0; i < n; i++) a[i] = b[i] > a[i] ? b[i] : a[i]; \
    else for (size_t i = 0; i < n; i++) a[i] = (T)(a[i] + b[i]);      \
  } while (0)

void hvd_reduce_into(void *acc, const void *in, size_t n, hvd_dtype_t dtype, hvd_op_t op) {
  switch (dtype) {
  case HVD_FLOAT16: REDUCE_LOOP(uint16_t, hvd_half_to_float, hvd_float_to_half); break;
  case HVD_BFLOAT16: REDUCE_LOOP(uint16_t, hvd_bf16_to_float, hvd_float_to_bf16); break;
  case HVD_FLOAT32: NATIVE_LOOP(float); break;
  case HVD_FLOAT64: NATIVE_LOOP(double); break;
  case HVD_INT32: NATIVE_LOOP(int32_t); break;
  case HVD_INT64: NATIVE_LOOP(int64_t); break;
  case HVD_UINT8: NATIVE_LOOP(uint8_t); break;
  }
}

void hvd_scale_copy(void *dst, const void *src, size_t n, hvd_dtype_t dtype, int divisor) {
  if (divisor == 1) {
    if (dst != src) memcpy(dst, src, n * hvd_dtype_size(dtype));
    return;
  }
  switch (dtype) {
  case HVD_FLOAT32: {
    float *d = dst, s = (float)(1.0 / divisor);
    const float *x = src;
    for (size_t i = 0; i < n; i++) d[i] = x[i] * s;
    break;
  }
  case HVD_FLOAT64: {
    double *d = dst, s = 1.0 / divisor;
    const double *x = src;
    for (size_t i = 0; i < n; i++) d[i] = x[i] * s;
    break;
  }
  case HVD_FLOAT16: {
    uint16_t *d = dst;
    const uint16_t *x = src;
    float s = (float)(1.0 / divisor);
    for (size_t i = 0; i < n; i++) d[i] = hvd_float_to_half(hvd_half_to_float(x[i]) * s);
    break;
  }
  case HVD_BFLOAT16: {
    uint16_t *d = dst;
    const uint16_t *x = src;
    float s = (float)(1.0 / divisor);
    for (size_t i = 0; i < n; i++) d[i] = hvd_float_to_bf16(hvd_bf16_to_float(x[i]) * s);
    break;
  }
  case HVD_INT32: {
    int32_t *d = dst;
    const int32_t *x = src;
    for (size_t i = 0; i < n; i++) d[i] = x[i] / divisor;
    break;
  }
  case HVD_INT64: {
    int64_t *d = dst;
    const int64_t *x = src;
    for (size_t i = 0; i < n; i++) d[i] = x[i] / divisor;
    break;
  }
  case HVD_UINT8: {
    uint8_t *d = dst;
    const uint8_t *x = src;
    for (size_t i = 0; i < n; i++) d[i] = (uint8_t)(x[i] / divisor);
    break;
  }
  }
}

#define FILL(T, v)                                 \
  do {                                             \
    T *p_ = buf, v_ = (v);                         \
    for (size_t i = 0; i < n; i++) p_[i] = v_;      \
  } while (0)

void hvd_fill_identity(void *buf, size_t n, hvd_dtype_t dtype, hvd_op_t op) {
  if (op != HVD_MIN && op != HVD_MAX) {
    memset(buf, 0, n * hvd_dtype_size(dtype));
    return;
  }
  int hi = op == HVD_MIN; /* MIN's identity is the largest value */
  switch (dtype) {
  case HVD_FLOAT32: FILL(float, hi ? INFINITY : -INFINITY); break;
  case HVD_FLOAT64: FILL(double, hi ? (double)INFINITY : -(double)INFINITY); break;
  case HVD_FLOAT16: FILL(uint16_t, hi ? 0x7c00u : 0xfc00u); break;
  case HVD_BFLOAT16: FILL(uint16_t, hi ? 0x7f80u : 0xff80u); break;
  case HVD_INT32: FILL(int32_t, hi ? INT32_MAX : INT32_MIN); break;
  case HVD_INT64: FILL(int64_t, hi ? INT64_MAX : INT64_MIN); break;
  case HVD_UINT8: FILL(uint8_t, hi ? 255u : 0u); break;
  }
}
