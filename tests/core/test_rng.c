/* Counter-based RNG: Philox4x32-10 known answers, distribution moments, and
 * the decomposition property: a global tensor generated piece by piece on
 * any split equals the one generated whole, bit for bit. */
#include "sg_rng.h"
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_known_answers(void) {
  /* Random123 kat_vectors for philox4x32_10 */
  sg_philox4 c0 = {{0, 0, 0, 0}};
  sg_philox4 r0 = sg_philox4x32_10(c0, 0, 0);
  SG_CHECK(r0.v[0] == 0x6627e8d5u && r0.v[1] == 0xe169c58du &&
               r0.v[2] == 0xbc57ac4cu && r0.v[3] == 0x9b00dbd8u,
           "philox(0,0) = %08x %08x %08x %08x", r0.v[0], r0.v[1], r0.v[2],
           r0.v[3]);
  sg_philox4 c1 = {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}};
  sg_philox4 r1 = sg_philox4x32_10(c1, 0xffffffffu, 0xffffffffu);
  SG_CHECK(r1.v[0] == 0x408f276du && r1.v[1] == 0x41c83b0eu &&
               r1.v[2] == 0xa20bc7c6u && r1.v[3] == 0x6d5451fdu,
           "philox(ff) = %08x %08x %08x %08x", r1.v[0], r1.v[1], r1.v[2],
           r1.v[3]);
  sg_philox4 c2 = {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
  sg_philox4 r2 = sg_philox4x32_10(c2, 0xa4093822u, 0x299f31d0u);
  SG_CHECK(r2.v[0] == 0xd16cfe09u && r2.v[1] == 0x94fdccebu &&
               r2.v[2] == 0x5001e420u && r2.v[3] == 0x24126ea1u,
           "philox(pi) = %08x %08x %08x %08x", r2.v[0], r2.v[1], r2.v[2],
           r2.v[3]);
}

static void test_moments(void) {
  enum { N = 200000 };
  double *x = malloc(N * sizeof *x);
  float *y = malloc(N * sizeof *y);
  SG_CHECK_OK(
      sg_rng_fill(SG_RNG_NORMAL, 0.0, 1.0, 1234, 7, 0, N, SG_DTYPE_F64, x));
  double m = 0, v = 0;
  for (int i = 0; i < N; ++i) m += x[i];
  m /= N;
  for (int i = 0; i < N; ++i) v += (x[i] - m) * (x[i] - m);
  v /= N - 1;
  SG_CHECK(fabs(m) < 0.01 && fabs(v - 1.0) < 0.02, "normal mean %g var %g", m,
           v);
  SG_CHECK_OK(
      sg_rng_fill(SG_RNG_UNIFORM, -1.0, 3.0, 99, 0, 5, N, SG_DTYPE_F32, y));
  double um = 0, lo = 1e9, hi = -1e9;
  for (int i = 0; i < N; ++i) {
    um += y[i];
    lo = y[i] < lo ? y[i] : lo;
    hi = y[i] > hi ? y[i] : hi;
  }
  um /= N;
  SG_CHECK(fabs(um - 1.0) < 0.02 && lo >= -1.0 && hi < 3.0,
           "uniform mean %g [%g, %g]", um, lo, hi);
  /* streams and seeds are independent: different values */
  double a[4], b[4], c[4];
  SG_CHECK_OK(sg_rng_fill(SG_RNG_UNIFORM, 0, 1, 1, 0, 0, 4, SG_DTYPE_F64, a));
  SG_CHECK_OK(sg_rng_fill(SG_RNG_UNIFORM, 0, 1, 1, 1, 0, 4, SG_DTYPE_F64, b));
  SG_CHECK_OK(sg_rng_fill(SG_RNG_UNIFORM, 0, 1, 2, 0, 0, 4, SG_DTYPE_F64, c));
  SG_CHECK(memcmp(a, b, sizeof a) != 0 && memcmp(a, c, sizeof a) != 0,
           "stream/seed matter");
  SG_CHECK_STATUS(sg_rng_fill(SG_RNG_UNIFORM, 0, 1, 1, 0, 0, 4, SG_DTYPE_I32,
                              a),
                  SG_ERR_NOT_SUPPORTED);
  free(x);
  free(y);
}

/* Each rank generates its balanced slab (along dim `split`) of a 3-D tensor
 * and compares it with the slab of the whole tensor. */
static void test_piecewise(int split, sg_dtype dt, sg_rng_dist dist) {
  const int64_t shape[3] = {7, 13, 11};
  const int64_t total = shape[0] * shape[1] * shape[2];
  size_t es = dt == SG_DTYPE_F32 ? 4 : 8;
  void *whole = malloc((size_t)total * es);
  int64_t zero[3] = {0, 0, 0};
  SG_CHECK_OK(
      sg_rng_fill_box(dist, 0.5, 2.0, 42, 3, 3, shape, zero, shape, dt, whole));
  /* the 1-D fill over the whole equals the box fill over the whole */
  void *flat = malloc((size_t)total * es);
  SG_CHECK_OK(sg_rng_fill(dist, 0.5, 2.0, 42, 3, 0, total, dt, flat));
  sg_test_cmp_bytes("fill == fill_box(whole)", flat, whole, (size_t)total * es);
  int p = sg_test_size, r = sg_test_rank;
  int64_t n = shape[split], base = n / p, extra = n % p;
  int64_t off[3] = {0, 0, 0}, ext[3] = {shape[0], shape[1], shape[2]};
  ext[split] = base + (r < extra);
  off[split] = r * base + (r < extra ? r : extra);
  int64_t cnt = ext[0] * ext[1] * ext[2];
  void *mine = malloc((size_t)(cnt ? cnt : 1) * es);
  void *ref = malloc((size_t)(cnt ? cnt : 1) * es);
  SG_CHECK_OK(
      sg_rng_fill_box(dist, 0.5, 2.0, 42, 3, 3, shape, off, ext, dt, mine));
  int64_t k = 0;
  for (int64_t i = off[0]; i < off[0] + ext[0]; ++i)
    for (int64_t j = off[1]; j < off[1] + ext[1]; ++j)
      for (int64_t l = off[2]; l < off[2] + ext[2]; ++l, ++k)
        memcpy((char *)ref + k * es,
               (char *)whole + ((i * shape[1] + j) * shape[2] + l) * es, es);
  sg_test_cmp_bytes("piece == slice of whole", mine, ref, (size_t)cnt * es);
  int64_t bad[3] = {-1, 0, 0};
  SG_CHECK_STATUS(sg_rng_fill_box(dist, 0, 1, 1, 0, 3, shape, bad, ext, dt,
                                  mine),
                  SG_ERR_SHAPE);
  free(whole);
  free(flat);
  free(mine);
  free(ref);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  test_known_answers();
  test_moments();
  for (int split = 0; split < 3; ++split) {
    test_piecewise(split, SG_DTYPE_F32, SG_RNG_UNIFORM);
    test_piecewise(split, SG_DTYPE_F64, SG_RNG_NORMAL);
    test_piecewise(split, SG_DTYPE_F32, SG_RNG_NORMAL);
  }
  return sg_test_finish();
}
