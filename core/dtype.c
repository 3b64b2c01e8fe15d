/* shardgrid — element types. */
#include "sg_dtype.h"

#include <string.h>

static const struct {
  const char *name;
  size_t size;
} sg_dtype_table[SG_DTYPE_COUNT] = {
    [SG_DTYPE_F32] = {"f32", 4},   [SG_DTYPE_F64] = {"f64", 8},
    [SG_DTYPE_I32] = {"i32", 4},   [SG_DTYPE_I64] = {"i64", 8},
    [SG_DTYPE_BF16] = {"bf16", 2},
};

int sg_dtype_valid(sg_dtype dt) { return (int)dt >= 0 && dt < SG_DTYPE_COUNT; }

size_t sg_dtype_size(sg_dtype dt) {
  return sg_dtype_valid(dt) ? sg_dtype_table[dt].size : 0;
}

const char *sg_dtype_name(sg_dtype dt) {
  return sg_dtype_valid(dt) ? sg_dtype_table[dt].name : "invalid";
}

int sg_dtype_is_float(sg_dtype dt) {
  return dt == SG_DTYPE_F32 || dt == SG_DTYPE_F64 || dt == SG_DTYPE_BF16;
}

sg_status sg_dtype_parse(const char *name, sg_dtype *dt) {
  sg_status st = SG_OK;
  if (!name || !dt)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_dtype_parse: NULL argument");
  for (int i = 0; i < SG_DTYPE_COUNT; ++i)
    if (strcmp(name, sg_dtype_table[i].name) == 0) {
      *dt = (sg_dtype)i;
      return SG_OK;
    }
  SG_RAISE(SG_ERR_INVALID_ARG,
           "unknown dtype '%s' (expected f32, f64, i32, i64 or bf16)", name);
fail:
  return st;
}

static double sg_load_f64(const void *p, sg_dtype dt, int64_t i) {
  switch (dt) {
  case SG_DTYPE_F32: return ((const float *)p)[i];
  case SG_DTYPE_F64: return ((const double *)p)[i];
  case SG_DTYPE_I32: return ((const int32_t *)p)[i];
  case SG_DTYPE_I64: return (double)((const int64_t *)p)[i];
  case SG_DTYPE_BF16: return sg_bf16_to_f32(((const sg_bf16 *)p)[i]);
  default: return 0.0;
  }
}

static void sg_store_f64(void *p, sg_dtype dt, int64_t i, double v) {
  switch (dt) {
  case SG_DTYPE_F32: ((float *)p)[i] = (float)v; break;
  case SG_DTYPE_F64: ((double *)p)[i] = v; break;
  case SG_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case SG_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)v; break;
  case SG_DTYPE_BF16: ((sg_bf16 *)p)[i] = sg_bf16_from_f32((float)v); break;
  default: break;
  }
}

/* sg_bf16_from_f32 then back, branch-free so that the loop vectorises. */
void sg_round_bf16(float *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    memcpy(&u, x + i, sizeof u);
    const uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t even = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    u = nan ? (u | 0x00400000u) & 0xffff0000u : even;
    memcpy(x + i, &u, sizeof u);
  }
}

sg_status sg_dtype_convert(const void *src, sg_dtype src_dt, void *dst,
                           sg_dtype dst_dt, int64_t n) {
  sg_status st = SG_OK;
  if (!sg_dtype_valid(src_dt) || !sg_dtype_valid(dst_dt))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_dtype_convert: invalid dtype (%d -> %d)",
             (int)src_dt, (int)dst_dt);
  if (n < 0)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_dtype_convert: n = %lld < 0",
             (long long)n);
  if (n > 0 && (!src || !dst))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_dtype_convert: NULL buffer");
  if (src_dt == dst_dt) {
    if (src != dst) memmove(dst, src, (size_t)n * sg_dtype_size(src_dt));
    return SG_OK;
  }
  if (src_dt == SG_DTYPE_I64 && dst_dt != SG_DTYPE_F32 &&
      dst_dt != SG_DTYPE_F64 && dst_dt != SG_DTYPE_BF16) {
    for (int64_t i = 0; i < n; ++i) /* exact integer path */
      ((int32_t *)dst)[i] = (int32_t)((const int64_t *)src)[i];
    return SG_OK;
  }
  if (src_dt == SG_DTYPE_I32 && dst_dt == SG_DTYPE_I64) {
    for (int64_t i = 0; i < n; ++i)
      ((int64_t *)dst)[i] = ((const int32_t *)src)[i];
    return SG_OK;
  }
  for (int64_t i = 0; i < n; ++i)
    sg_store_f64(dst, dst_dt, i, sg_load_f64(src, src_dt, i));
fail:
  return st;
}
