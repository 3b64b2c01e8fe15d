/* shardgrid — element types.
 *
 * f32, f64, i32, i64 compute types and bf16 as a storage type (converted to
 * f32 for arithmetic). Element counts are int64_t, bytes are size_t.
 */
#ifndef SG_DTYPE_H
#define SG_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sg_dtype {
  SG_DTYPE_F32 = 0,
  SG_DTYPE_F64,
  SG_DTYPE_I32,
  SG_DTYPE_I64,
  SG_DTYPE_BF16,
  SG_DTYPE_COUNT
} sg_dtype;

/* A bf16 value: the upper 16 bits of an IEEE binary32. */
typedef struct sg_bf16 {
  uint16_t bits;
} sg_bf16;

/* Size of one element in bytes; 0 for an invalid dtype. */
size_t sg_dtype_size(sg_dtype dt);
/* "f32", "f64", "i32", "i64", "bf16"; "invalid" otherwise. */
const char *sg_dtype_name(sg_dtype dt);
/* Parse a name as above; SG_ERR_INVALID_ARG if unknown. */
sg_status sg_dtype_parse(const char *name, sg_dtype *dt);
/* 1 for a valid dtype. */
int sg_dtype_valid(sg_dtype dt);
/* 1 for f32/f64/bf16. */
int sg_dtype_is_float(sg_dtype dt);

/* bf16 conversions (round to nearest even; NaN stays NaN). Usable from
 * host loops and device code alike. */
#ifndef SG_HD
#if defined(__CUDACC__)
#define SG_HD __host__ __device__
#else
#define SG_HD
#endif
#endif

static inline SG_HD sg_bf16 sg_bf16_from_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  sg_bf16 b;
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {
    b.bits = (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    return b;
  }
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  b.bits = (uint16_t)((u + rounding) >> 16);
  return b;
}

static inline SG_HD float sg_bf16_to_f32(sg_bf16 b) {
  uint32_t u = (uint32_t)b.bits << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Round n f32 values to the nearest bf16 value in place (round to nearest
 * even, NaN stays NaN): f32 storage holding bf16 values. */
void sg_round_bf16(float *x, int64_t n);

/* Convert n elements between any two dtypes (host memory). Integers
 * convert by C rules; floats to integers truncate toward zero. */
sg_status sg_dtype_convert(const void *src, sg_dtype src_dt, void *dst,
                           sg_dtype dst_dt, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* SG_DTYPE_H */
