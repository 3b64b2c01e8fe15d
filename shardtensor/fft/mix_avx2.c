/* shardgrid — the spectral convolution's planar mode mixing (spectral.c,
 * mix_blk) for f32 on AVX2: the same sums, operation for operation.
 *
 * The portable kernel keeps SG_MIX_Q (4) output rows x 16 modes, real and
 * imaginary, in registers: 8 AVX-512 vectors, but 16 AVX2 ones (32 SSE2
 * ones in a baseline build), which with the operands spilled to the stack
 * (perf, Zen 3: a third of the kernel in its stores through the stack).
 * Here a block of 16 modes runs as two halves of 8: 4 rows x 8 modes x
 * (re, im) = 8 accumulators. Each product is the portable loop's, in its
 * order, without contraction (t = ar br - ai vi, then cr + t; the library
 * builds with -ffp-contract=off): the results are the portable kernel's
 * bits, so which kernel ran changes nothing (every mesh, every CPU).
 * Compiled with -mavx2 by this file's own flags where the compiler can;
 * spectral.c enters it only after sg_simd_avx2(). */
#include <stdint.h>

#include "mix_impl.h"

#if defined(__AVX2__)
#include <immintrin.h>

int sg_mix_avx2_built(void) { return 1; }

/* out[q] rows over modes [j0, j0 + 8), Q rows (1..4) */
static inline void mix8(const sg_mix_blk *k, const int Q, const __m256 sgn,
                        int64_t j0, const float *a, const float *b,
                        float *out) {
  const int64_t Mp = k->Mp;
  __m256 cr[4], ci[4];
  for (int q = 0; q < 4; ++q) cr[q] = ci[q] = _mm256_setzero_ps();
  for (int64_t s = 0; s < k->S; ++s) {
    const float *ar = a + s * k->sa + j0;
    const __m256 vr = _mm256_loadu_ps(ar), va = _mm256_loadu_ps(ar + Mp);
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) {
      const float *br = b + q * k->bq + s * k->sb + j0;
      const __m256 vb = _mm256_loadu_ps(br);
      const __m256 vi = _mm256_mul_ps(sgn, _mm256_loadu_ps(br + Mp));
      cr[q] = _mm256_add_ps(cr[q], _mm256_sub_ps(_mm256_mul_ps(vr, vb),
                                                 _mm256_mul_ps(va, vi)));
      ci[q] = _mm256_add_ps(ci[q], _mm256_add_ps(_mm256_mul_ps(vr, vi),
                                                 _mm256_mul_ps(va, vb)));
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < Q; ++q) {
    float *orr = out + q * k->oq + j0;
    _mm256_storeu_ps(orr, cr[q]);
    _mm256_storeu_ps(orr + Mp, ci[q]);
  }
}

static void mix8_q4(const sg_mix_blk *k, __m256 sgn, int64_t j0, const float *a,
                    const float *b, float *out) {
  mix8(k, 4, sgn, j0, a, b, out);
}

static void mix8_q1(const sg_mix_blk *k, __m256 sgn, int64_t j0, const float *a,
                    const float *b, float *out) {
  mix8(k, 1, sgn, j0, a, b, out);
}

void sg_mix_run_avx2_f32(const sg_mix_blk *k, int64_t Q, const float *a,
                         const float *b, float *out) {
  const __m256 sgn = _mm256_set1_ps(k->conj_b ? -1.0f : 1.0f);
#pragma omp parallel for schedule(static) if (k->N * Q * k->Mp * k->S > 16384)
  for (int64_t j0 = 0; j0 < k->Mp; j0 += SG_MIX_CH) {
    int64_t q = 0;
    for (; q + SG_MIX_Q <= Q; q += SG_MIX_Q)
      for (int64_t n = 0; n < k->N; ++n)
        for (int h = 0; h < SG_MIX_CH; h += 8)
          mix8_q4(k, sgn, j0 + h, a + n * k->an, b + q * k->bq,
                  out + n * k->on + q * k->oq);
    for (; q < Q; ++q)
      for (int64_t n = 0; n < k->N; ++n)
        for (int h = 0; h < SG_MIX_CH; h += 8)
          mix8_q1(k, sgn, j0 + h, a + n * k->an, b + q * k->bq,
                  out + n * k->on + q * k->oq);
  }
}

#else

int sg_mix_avx2_built(void) { return 0; }
void sg_mix_run_avx2_f32(const sg_mix_blk *k, int64_t Q, const float *a,
                         const float *b, float *out) {
  (void)k, (void)Q, (void)a, (void)b, (void)out;
}

#endif
