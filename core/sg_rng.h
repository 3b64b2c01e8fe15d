/* shardgrid — counter-based random numbers (Philox4x32-10).
 *
 * A value is a pure function of (seed, stream id, global element index):
 * no state, no sequence. A tensor generated piece by piece on any domain
 * decomposition therefore equals the one generated whole, bit for bit — the
 * property that lets every mesh initialise parameters and draw dropout masks
 * identically. The element kernels are inline and usable from host loops and
 * CUDA kernels alike. None of these functions is collective.
 */
#ifndef SG_RNG_H
#define SG_RNG_H

#include <math.h>
#include <stdint.h>

#include "sg_dtype.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_philox4 {
  uint32_t v[4];
} sg_philox4;

static inline SG_HD void sg_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi,
                                           uint32_t *lo) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
}

/* Philox4x32 with 10 rounds (Salmon et al., SC'11). */
static inline SG_HD sg_philox4 sg_philox4x32_10(sg_philox4 ctr, uint32_t k0,
                                                uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    sg_philox_mulhilo(0xD2511F53u, ctr.v[0], &hi0, &lo0);
    sg_philox_mulhilo(0xCD9E8D57u, ctr.v[2], &hi1, &lo1);
    sg_philox4 n;
    n.v[0] = hi1 ^ ctr.v[1] ^ k0;
    n.v[1] = lo1;
    n.v[2] = hi0 ^ ctr.v[3] ^ k1;
    n.v[3] = lo0;
    ctr = n;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

/* The four 32-bit words for (seed, stream, index). */
static inline SG_HD sg_philox4 sg_rng_bits(uint64_t seed, uint64_t stream,
                                           uint64_t index) {
  sg_philox4 c;
  c.v[0] = (uint32_t)index;
  c.v[1] = (uint32_t)(index >> 32);
  c.v[2] = (uint32_t)stream;
  c.v[3] = (uint32_t)(stream >> 32);
  return sg_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Uniform in [0, 1) with 53 random bits. */
static inline SG_HD double sg_rng_uniform_f64(uint64_t seed, uint64_t stream,
                                              uint64_t index) {
  sg_philox4 b = sg_rng_bits(seed, stream, index);
  uint64_t m = ((uint64_t)b.v[0] << 21) ^ (uint64_t)(b.v[1] >> 11);
  return (double)(m & ((1ull << 53) - 1)) * 0x1.0p-53;
}

/* Uniform in [0, 1) with 24 random bits. */
static inline SG_HD float sg_rng_uniform_f32(uint64_t seed, uint64_t stream,
                                             uint64_t index) {
  sg_philox4 b = sg_rng_bits(seed, stream, index);
  return (float)(b.v[0] >> 8) * 0x1.0p-24f;
}

/* Standard normal by Box–Muller on two 53-bit uniforms (computed in double
 * for both dtypes so that f32 values are the rounded f64 ones). */
static inline SG_HD double sg_rng_normal_f64(uint64_t seed, uint64_t stream,
                                             uint64_t index) {
  sg_philox4 b = sg_rng_bits(seed, stream, index);
  uint64_t m1 = ((uint64_t)b.v[0] << 21) ^ (uint64_t)(b.v[1] >> 11);
  uint64_t m2 = ((uint64_t)b.v[2] << 21) ^ (uint64_t)(b.v[3] >> 11);
  double u1 = ((double)(m1 & ((1ull << 53) - 1)) + 1.0) * 0x1.0p-53; /* (0,1] */
  double u2 = (double)(m2 & ((1ull << 53) - 1)) * 0x1.0p-53;         /* [0,1) */
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}

typedef enum sg_rng_dist {
  SG_RNG_UNIFORM = 0, /* a + (b - a) * U[0,1) */
  SG_RNG_NORMAL = 1   /* a + b * N(0,1): mean a, standard deviation b */
} sg_rng_dist;

/* Fill the box [offset, offset + extent) of a global row-major array of
 * shape global_shape (ndim <= 8) with values at their global linear
 * indices. out is the box stored contiguously, row-major, dtype f32 or f64.
 * OpenMP-parallel. */
sg_status sg_rng_fill_box(sg_rng_dist dist, double a, double b, uint64_t seed,
                          uint64_t stream, int ndim,
                          const int64_t *global_shape, const int64_t *offset,
                          const int64_t *extent, sg_dtype dtype, void *out);

/* Fill n values for global indices [index0, index0 + n). */
sg_status sg_rng_fill(sg_rng_dist dist, double a, double b, uint64_t seed,
                      uint64_t stream, uint64_t index0, int64_t n,
                      sg_dtype dtype, void *out);

#ifdef __cplusplus
}
#endif
#endif /* SG_RNG_H */
