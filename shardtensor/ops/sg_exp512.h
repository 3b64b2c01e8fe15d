/* shardgrid — e^x on 16 f32 lanes (AVX-512F), for the fused attention's
 * online softmax. Internal; tests/ops/test_exp512.c checks it against exp
 * in double over the whole f32 range.
 *
 * Range reduction x = n ln2 + r, n = round(x log2e), r by two FMAs with
 * ln2 split in a float head and tail (|r| <= ln2/2 + a rounding), a degree-7
 * Taylor polynomial for e^r by Horner's rule in FMAs (truncation r^8/8!
 * < 6e-9 relative, under 0.1 ulp), and 2^n applied by vscalefps (exact,
 * and overflow to +inf without a clamp). Measured error: at most 1 ulp
 * against the correctly rounded e^x where the result is a normal float.
 * Below ln(FLT_MIN) = -87.3365 the result is exactly 0 (it would be a
 * subnormal, under 1.2e-38 away; subnormal probabilities cost microcode
 * assists in the GEMM that follows); e^-inf = 0, e^NaN = NaN,
 * e^x = +inf from x = 88.73. sg_expf (sg_ops_inl.h), the portable path's
 * e^x, is a degree-6 polynomial without FMA and clamps instead: within
 * 3e-7 relative. */
#ifndef SG_EXP512_H
#define SG_EXP512_H
#if defined(__AVX512F__)
#include <immintrin.h>

/* e^x for x <= 88.8 (or NaN) in the lanes of keep, 0 in the others */
static inline __m512 sg_exp512_mask_ps(__mmask16 keep, __m512 x) {
  const __m512 n = _mm512_roundscale_ps(
      _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147182464599609375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-1.904654323148236e-09f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  /* 0 below ln(FLT_MIN) (NaN kept: unordered) */
  keep = _mm512_mask_cmp_ps_mask(keep, x, _mm512_set1_ps(-87.33654f),
                                 _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(keep, p, n);
}

/* e^x for any x */
static inline __m512 sg_exp512_ps(__m512 x) {
  /* min(c, x) returns x where x is NaN, so NaN survives to the result */
  return sg_exp512_mask_ps((__mmask16)0xFFFF,
                           _mm512_min_ps(_mm512_set1_ps(88.8f), x));
}

#endif
#endif
