/* shardgrid — counter-based random numbers: box fills. */
#include "sg_rng.h"

static inline double sg_rng_value(sg_rng_dist dist, double a, double b,
                                  uint64_t seed, uint64_t stream, uint64_t g) {
  if (dist == SG_RNG_UNIFORM)
    return a + (b - a) * sg_rng_uniform_f64(seed, stream, g);
  return a + b * sg_rng_normal_f64(seed, stream, g);
}

static inline float sg_rng_value_f32(sg_rng_dist dist, double a, double b,
                                     uint64_t seed, uint64_t stream,
                                     uint64_t g) {
  if (dist == SG_RNG_UNIFORM)
    return (float)a +
           ((float)b - (float)a) * sg_rng_uniform_f32(seed, stream, g);
  return (float)sg_rng_value(dist, a, b, seed, stream, g);
}

static sg_status sg_rng_check(sg_rng_dist dist, sg_dtype dtype) {
  sg_status st = SG_OK;
  if (dist != SG_RNG_UNIFORM && dist != SG_RNG_NORMAL)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_rng: unknown distribution %d", (int)dist);
  if (dtype != SG_DTYPE_F32 && dtype != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "sg_rng: dtype %s not supported (f32, f64)",
             sg_dtype_name(dtype));
fail:
  return st;
}

sg_status sg_rng_fill(sg_rng_dist dist, double a, double b, uint64_t seed,
                      uint64_t stream, uint64_t index0, int64_t n,
                      sg_dtype dtype, void *out) {
  sg_status st = SG_OK;
  SG_TRY(sg_rng_check(dist, dtype));
  if (n < 0)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_rng_fill: n = %lld < 0", (long long)n);
  if (n > 0 && !out) SG_RAISE(SG_ERR_INVALID_ARG, "sg_rng_fill: NULL out");
  if (dtype == SG_DTYPE_F32) {
    float *o = out;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
      o[i] = sg_rng_value_f32(dist, a, b, seed, stream, index0 + (uint64_t)i);
  } else {
    double *o = out;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
      o[i] = sg_rng_value(dist, a, b, seed, stream, index0 + (uint64_t)i);
  }
fail:
  return st;
}

sg_status sg_rng_fill_box(sg_rng_dist dist, double a, double b, uint64_t seed,
                          uint64_t stream, int ndim,
                          const int64_t *global_shape, const int64_t *offset,
                          const int64_t *extent, sg_dtype dtype, void *out) {
  sg_status st = SG_OK;
  SG_TRY(sg_rng_check(dist, dtype));
  if (ndim < 1 || ndim > 8)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_rng_fill_box: ndim %d not in 1..8", ndim);
  int64_t rows = 1;
  for (int d = 0; d < ndim; ++d) {
    if (offset[d] < 0 || extent[d] < 0 ||
        offset[d] + extent[d] > global_shape[d])
      SG_RAISE(SG_ERR_SHAPE,
               "sg_rng_fill_box: dim %d box [%lld, %lld) outside [0, %lld)", d,
               (long long)offset[d], (long long)(offset[d] + extent[d]),
               (long long)global_shape[d]);
    if (d < ndim - 1) rows *= extent[d];
  }
  const int64_t inner = extent[ndim - 1];
  if (rows == 0 || inner == 0) return SG_OK;
  if (!out) SG_RAISE(SG_ERR_INVALID_ARG, "sg_rng_fill_box: NULL out");
    /* one "row" is a run along the last dim: contiguous global indices */
#pragma omp parallel for schedule(static) if (rows * inner > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, g = 0, stride = 1;
    int64_t coord[8];
    for (int d = ndim - 2; d >= 0; --d) {
      coord[d] = offset[d] + rem % extent[d];
      rem /= extent[d];
    }
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t c = d == ndim - 1 ? offset[d] : coord[d];
      g += c * stride;
      stride *= global_shape[d];
    }
    if (dtype == SG_DTYPE_F32) {
      float *o = (float *)out + r * inner;
      for (int64_t i = 0; i < inner; ++i)
        o[i] = sg_rng_value_f32(dist, a, b, seed, stream, (uint64_t)(g + i));
    } else {
      double *o = (double *)out + r * inner;
      for (int64_t i = 0; i < inner; ++i)
        o[i] = sg_rng_value(dist, a, b, seed, stream, (uint64_t)(g + i));
    }
  }
fail:
  return st;
}
