/* Element types: sizes, names, half-precision conversion, the reductions
 * MPI has no builtin for (float16, bfloat16) and the scaled copies the
 * fusion pack/unpack uses.  Pure functions: no state, no threads. */
#ifndef HVD_DTYPE_H
#define HVD_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "../hvdshim.h"

#define HVD_DTYPE_COUNT 9
#define HVD_OP_COUNT 5

uint16_t hvd_float_to_half(float f);
float hvd_half_to_float(uint16_t h);
uint16_t hvd_float_to_bf16(float f);
float hvd_bf16_to_float(uint16_t h);

int hvd_dtype_valid(int dtype);
int hvd_op_valid(int op);
const char *hvd_op_name(int op);

/* acc[i] = op(acc[i], in[i]) for n elements; op is SUM (AVG reduces as SUM),
 * MIN, MAX or PROD; acc and in do not overlap.  Used by the MPI user ops for
 * 16-bit floats, by the shared-memory allreduce and by tests. */
void hvd_reduce_into(void *acc, const void *in, size_t n, hvd_dtype_t dtype, hvd_op_t op);

/* dst[i] = src[i] / divisor for n elements (floats: times 1/divisor;
 * integers: division truncated toward zero).  divisor 1 is a plain copy;
 * dst may equal src. */
void hvd_scale_copy(void *dst, const void *src, size_t n, hvd_dtype_t dtype, int divisor);

/* Fills n elements with the identity of `op` (0 for SUM/AVG, 1 for PROD,
 * the largest value for MIN, the smallest for MAX; +-inf for floats): the contribution
 * of a rank that has finished (joined) and takes part without data. */
void hvd_fill_identity(void *buf, size_t n, hvd_dtype_t dtype, hvd_op_t op);

#endif
