/* shardgrid — 2^x on 8 f32 lanes (AVX2 + FMA), for the fused attention's
 * online softmax on CPUs without AVX-512 (attention_avx2.c), which works
 * in base 2 as the AVX-512 kernel does (sg_exp512.h). Internal;
 * tests/ops/test_exp256.c checks it against exp2 in double.
 *
 * x clamped to >= -127 first (max(c, x) keeps a NaN x), then x = n + r,
 * n = round(x), r = x - n exact (|r| <= 1/2); the degree-6 polynomial of
 * sg_exp512.h (0.14 ulp on [-1/2, 1/2]) by Horner in FMAs; 2^n built in
 * the exponent field ((n + 127) << 23: a normal float for n >= -126, +0
 * for n = -127) and multiplied in. So at most 1 ulp against the correctly
 * rounded 2^x where that is a normal float; 0 below -126.5 and 0 or a
 * subnormal in [-126.5, -126) (subnormal probabilities would cost assists
 * in the GEMM that follows); 2^-inf = 0, NaN for NaN. For x < 127.5 (the
 * softmax's arguments are <= 0 up to rounding); one max in place of the
 * masks of a range check. */
#ifndef SG_EXP256_H
#define SG_EXP256_H
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline __m256 sg_exp2_256_ps(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x);
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT |
                                          _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.535336196e-04f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.339887502e-03f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(9.618436918e-03f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.550332367e-02f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(2.402264774e-01f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(6.931471825e-01f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(p, s);
}

#endif
#endif
