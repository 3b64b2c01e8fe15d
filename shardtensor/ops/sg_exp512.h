/* shardgrid — 2^x on 16 f32 lanes (AVX-512F), for the fused attention's
 * online softmax, which works in base 2 (the scores pre-multiplied by
 * log2(e) through the query's scale, as FlashAttention does: one
 * multiplication less per element than e^x). Internal;
 * tests/ops/test_exp512.c checks it against exp2 in double over the whole
 * f32 range.
 *
 * x = n + r, n = round(x) and r = x - n exact (|r| <= 1/2), a degree-6
 * polynomial for 2^r by Horner's rule in FMAs (coefficients fitted for the
 * least maximum relative error on [-1/2, 1/2]: 1.6e-8 with the
 * coefficients rounded to f32, 0.14 ulp), and 2^n applied by vscalefps
 * (exact; overflow to +inf without a clamp). Measured error: at most 1 ulp
 * against the correctly rounded 2^x where the result is a normal float.
 * Below -126 the result is exactly 0 (it would be subnormal, under 1.2e-38
 * away; subnormal probabilities cost microcode assists in the GEMM that
 * follows); 2^-inf = 0, 2^NaN = NaN. sg_expf (sg_ops_inl.h), the portable
 * path's e^x, is a degree-6 Taylor polynomial without FMA that clamps
 * instead: within 3e-7 relative. */
#ifndef SG_EXP512_H
#define SG_EXP512_H
#if defined(__AVX512F__)
#include <immintrin.h>

/* 2^x in the lanes of keep (x <= 128 or NaN), 0 in the others */
static inline __m512 sg_exp2_512_mask_ps(__mmask16 keep, __m512 x) {
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT |
                                               _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.535336196e-04f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.339887502e-03f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(9.618436918e-03f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.550332367e-02f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.402264774e-01f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.931471825e-01f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  /* 0 below -126 (NaN kept: unordered) */
  keep = _mm512_mask_cmp_ps_mask(keep, x, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(keep, p, n);
}

/* 2^x for any x */
static inline __m512 sg_exp2_512_ps(__m512 x) {
  /* min(c, x) returns x where x is NaN, so NaN survives to the result */
  return sg_exp2_512_mask_ps((__mmask16)0xFFFF,
                             _mm512_min_ps(_mm512_set1_ps(129.0f), x));
}

#endif
#endif
