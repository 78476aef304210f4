/* Element types and their arithmetic.  See dtype.h.  The half conversions
 * are elem.h's (shared with the GPU kernels). */
#include "dtype.h"

#include "elem.h"

#include <math.h>
#include <string.h>

/* The reduction and scaling loops are the CPU data path's inner loops: let
 * GCC vectorize them at -O2 (its default "very cheap" model leaves them
 * scalar: the trip count is unknown).  Measured: bench/run-engine-bench.sh. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

uint16_t hvd_float_to_half(float f) { return hvd_elem_f2h(f); }
float hvd_half_to_float(uint16_t h) { return hvd_elem_h2f(h); }
uint16_t hvd_float_to_bf16(float f) { return hvd_elem_f2bf(f); }
float hvd_bf16_to_float(uint16_t h) { return hvd_elem_bf2f(h); }

int hvd_dtype_valid(int dtype) { return dtype >= 0 && dtype < HVD_DTYPE_COUNT; }
int hvd_op_valid(int op) { return op >= 0 && op < HVD_OP_COUNT; }

const char *hvd_dtype_name(hvd_dtype_t dtype) {
  static const char *names[] = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "int8", "int16"};
  return hvd_dtype_valid(dtype) ? names[dtype] : "unknown";
}

size_t hvd_dtype_size(hvd_dtype_t dtype) {
  static const size_t sizes[] = {4, 8, 2, 2, 4, 8, 1, 1, 2};
  return hvd_dtype_valid(dtype) ? sizes[dtype] : 0;
}

const char *hvd_op_name(int op) {
  static const char *names[] = {"sum", "avg", "min", "max", "prod"};
  return hvd_op_valid(op) ? names[op] : "unknown";
}

/* 16-bit floats: compute in float, round once per element. */
#define REDUCE_LOOP(T, LOAD, STORE)                                            \
  do {                                                                         \
    T *restrict a = acc;                                                       \
    const T *restrict b = in;                                                  \
    if (op == HVD_MIN) {                                                       \
      for (size_t i = 0; i < n; i++) if (LOAD(b[i]) < LOAD(a[i])) a[i] = b[i]; \
    } else if (op == HVD_MAX) {                                                \
      for (size_t i = 0; i < n; i++) if (LOAD(b[i]) > LOAD(a[i])) a[i] = b[i]; \
    } else if (op == HVD_PROD) {                                               \
      for (size_t i = 0; i < n; i++) a[i] = STORE(LOAD(a[i]) * LOAD(b[i]));    \
    } else {                                                                   \
      for (size_t i = 0; i < n; i++) a[i] = STORE(LOAD(a[i]) + LOAD(b[i]));    \
    }                                                                          \
  } while (0)

/* Integer sums and products wrap (computed in the unsigned type U, as MPI
 * implementations do in practice: signed overflow is undefined in C). */
#define NATIVE_LOOP(T, U)                                                                    \
  do {                                                                                       \
    T *restrict a = acc;                                                                     \
    const T *restrict b = in;                                                                \
    if (op == HVD_MIN) for (size_t i = 0; i < n; i++) a[i] = b[i] < a[i] ? b[i] : a[i];      \
    else if (op == HVD_MAX) for (size_t i = 0; i < n; i++) a[i] = b[i] > a[i] ? b[i] : a[i]; \
    else if (op == HVD_PROD) for (size_t i = 0; i < n; i++) a[i] = (T)((U)a[i] * (U)b[i]);   \
    else for (size_t i = 0; i < n; i++) a[i] = (T)((U)a[i] + (U)b[i]);                       \
  } while (0)

void hvd_reduce_into(void *acc, const void *in, size_t n, hvd_dtype_t dtype, hvd_op_t op) {
  switch (dtype) {
  case HVD_FLOAT16: REDUCE_LOOP(uint16_t, hvd_half_to_float, hvd_float_to_half); break;
  case HVD_BFLOAT16: REDUCE_LOOP(uint16_t, hvd_bf16_to_float, hvd_float_to_bf16); break;
  case HVD_FLOAT32: NATIVE_LOOP(float, float); break;
  case HVD_FLOAT64: NATIVE_LOOP(double, double); break;
  case HVD_INT32: NATIVE_LOOP(int32_t, uint32_t); break;
  case HVD_INT64: NATIVE_LOOP(int64_t, uint64_t); break;
  case HVD_UINT8: NATIVE_LOOP(uint8_t, unsigned); break;
  case HVD_INT8: NATIVE_LOOP(int8_t, unsigned); break;
  case HVD_INT16: NATIVE_LOOP(int16_t, unsigned); break;
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
  case HVD_INT8: {
    int8_t *d = dst;
    const int8_t *x = src;
    for (size_t i = 0; i < n; i++) d[i] = (int8_t)(x[i] / divisor);
    break;
  }
  case HVD_INT16: {
    int16_t *d = dst;
    const int16_t *x = src;
    for (size_t i = 0; i < n; i++) d[i] = (int16_t)(x[i] / divisor);
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
  if (op == HVD_PROD) {
    switch (dtype) {
    case HVD_FLOAT32: FILL(float, 1.0f); break;
    case HVD_FLOAT64: FILL(double, 1.0); break;
    case HVD_FLOAT16: FILL(uint16_t, 0x3c00u); break;
    case HVD_BFLOAT16: FILL(uint16_t, 0x3f80u); break;
    case HVD_INT32: FILL(int32_t, 1); break;
    case HVD_INT64: FILL(int64_t, 1); break;
    case HVD_UINT8: FILL(uint8_t, 1u); break;
    case HVD_INT8: FILL(int8_t, 1); break;
    case HVD_INT16: FILL(int16_t, 1); break;
    }
    return;
  }
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
  case HVD_INT8: FILL(int8_t, hi ? INT8_MAX : INT8_MIN); break;
  case HVD_INT16: FILL(int16_t, hi ? INT16_MAX : INT16_MIN); break;
  }
}
