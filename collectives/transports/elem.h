/* Element conversions shared by the host code (dtype.c) and the GPU kernels
 * (gpu_kernels.cu): one definition, tested on the CPU by the unit tests and
 * compiled for the device by nvcc.  float <-> float16 rounds to nearest
 * even and keeps infinities, NaNs and subnormals (bit tricks after
 * F. Giesen's public-domain float/half notes); float -> bfloat16 rounds to
 * nearest even and quiets NaNs. */
#ifndef HVD_ELEM_H
#define HVD_ELEM_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define HVD_HD static __host__ __device__ __forceinline__
#else
#define HVD_HD static inline
#endif

/* Element type codes: the values of hvd_dtype_t (hvdshim.h). */
enum {
  HVD_E_F32 = 0, HVD_E_F64 = 1, HVD_E_F16 = 2, HVD_E_BF16 = 3, HVD_E_I32 = 4, HVD_E_I64 = 5, HVD_E_U8 = 6, HVD_E_I8 = 7,
  HVD_E_I16 = 8
};

HVD_HD uint32_t hvd_f2u(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
#endif
}

HVD_HD float hvd_u2f(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, 4);
  return f;
#endif
}

HVD_HD uint16_t hvd_elem_f2h(float f) {
  const uint32_t f32inf = 255u << 23, f16max = (127u + 16u) << 23;
  const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t u = hvd_f2u(f);
  uint32_t sign = u & 0x80000000u;
  uint16_t o;
  u ^= sign;
  if (u >= f16max) {
    o = u > f32inf ? 0x7e00 : 0x7c00; /* NaN stays NaN; overflow -> inf */
  } else if (u < (113u << 23)) {       /* result is subnormal or zero */
    u = hvd_f2u(hvd_u2f(u) + hvd_u2f(denorm_magic));
    o = (uint16_t)(u - denorm_magic);
  } else {
    uint32_t mant_odd = (u >> 13) & 1u;
    u += ((uint32_t)(15 - 127) << 23) + 0xfffu + mant_odd;
    o = (uint16_t)(u >> 13);
  }
  return (uint16_t)(o | (sign >> 16));
}

HVD_HD float hvd_elem_h2f(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = ((uint32_t)h & 0x7fffu) << 13;
  uint32_t exp = shifted_exp & o;
  o += (uint32_t)(127 - 15) << 23;
  if (exp == shifted_exp) {
    o += (uint32_t)(128 - 16) << 23; /* inf / NaN */
  } else if (exp == 0) {             /* zero / subnormal: renormalize */
    o += 1u << 23;
    o = hvd_f2u(hvd_u2f(o) - hvd_u2f(113u << 23));
  }
  return hvd_u2f(o | (((uint32_t)h & 0x8000u) << 16));
}

HVD_HD uint16_t hvd_elem_f2bf(float f) {
  uint32_t u = hvd_f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

HVD_HD float hvd_elem_bf2f(uint16_t h) { return hvd_u2f((uint32_t)h << 16); }

/* dst[di] = src[si] / divisor, converted from src_dt to dst_dt.  Floats are
 * multiplied by inv (= 1/divisor), integers divided (truncated toward zero),
 * as hvd_scale_copy does.  Conversions are defined between the floating
 * types (the compression casts); an integer type must match. */
HVD_HD void hvd_elem_move(void *dst, int dst_dt, uint64_t di, const void *src, int src_dt, uint64_t si, int divisor,
                          float inv) {
  if (src_dt >= HVD_E_I32) {
    switch (src_dt) {
    case HVD_E_I32: ((int32_t *)dst)[di] = ((const int32_t *)src)[si] / divisor; break;
    case HVD_E_I64: ((int64_t *)dst)[di] = ((const int64_t *)src)[si] / divisor; break;
    case HVD_E_I8: ((int8_t *)dst)[di] = (int8_t)(((const int8_t *)src)[si] / divisor); break;
    case HVD_E_I16: ((int16_t *)dst)[di] = (int16_t)(((const int16_t *)src)[si] / divisor); break;
    default: ((uint8_t *)dst)[di] = (uint8_t)(((const uint8_t *)src)[si] / divisor); break;
    }
    return;
  }
  if (src_dt == HVD_E_F64 && dst_dt == HVD_E_F64) {
    ((double *)dst)[di] = divisor == 1 ? ((const double *)src)[si] : ((const double *)src)[si] * (1.0 / divisor);
    return;
  }
  float v;
  switch (src_dt) {
  case HVD_E_F32: v = ((const float *)src)[si]; break;
  case HVD_E_F64: v = (float)((const double *)src)[si]; break;
  case HVD_E_F16: v = hvd_elem_h2f(((const uint16_t *)src)[si]); break;
  default: v = hvd_elem_bf2f(((const uint16_t *)src)[si]); break;
  }
  if (divisor != 1) v *= inv;
  switch (dst_dt) {
  case HVD_E_F32: ((float *)dst)[di] = v; break;
  case HVD_E_F64: ((double *)dst)[di] = (double)v; break;
  case HVD_E_F16: ((uint16_t *)dst)[di] = hvd_elem_f2h(v); break;
  default: ((uint16_t *)dst)[di] = hvd_elem_f2bf(v); break;
  }
}

#endif
