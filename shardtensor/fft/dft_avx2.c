/* shardgrid — the pruned first stage's f32 matrix product (fft_dft.c) on
 * AVX2 + FMA: the same sums, so the same bits.
 *
 * out[r, j] = sum_s in[r, s] m[s, j], m's rows wp (a multiple of 32)
 * columns, zero padded. The portable kernel's block of 4 rows x 32
 * columns is 16 AVX2 vectors of sums, which spill (perf, Zen 3: the
 * inverse's product at n = 64). Here: 4 rows x 24 columns (12 vectors)
 * where the width is a multiple of 24 (the forward at 12 modes), else 6
 * rows x 16 columns (12 vectors; the last block's store masked to the
 * width; its reads stay inside the padded rows), and single rows for the
 * last rows of a block. Every output is the portable kernel's chain,
 * acc = fma(in[r, s], m[s, j], acc) from 0 over s in order, one correctly
 * rounded fused multiply-add each (fmaf there): the same bits, on every
 * mesh and CPU. Compiled with -mavx2 -mfma by this file's own flags;
 * fft_dft.c enters it only after sg_simd_avx2(). */
#include <stdint.h>

#include "fft_plan_impl.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

int sg_dft_avx2_built(void) { return 1; }

/* Q rows x V vectors of columns from j0; nj (<= 8 V) columns stored */
#define DFT2_BLK(Q, V)                                                        \
  static void dft2_##Q##_##V(int64_t S, int64_t wp, int64_t j0, int64_t nj,   \
                             const float *in, int64_t is, const float *m,     \
                             float *out, int64_t os) {                        \
    __m256 acc[Q][V];                                                         \
    _Pragma("GCC unroll 6")                                                   \
    for (int q = 0; q < Q; ++q) _Pragma("GCC unroll 3")                       \
    for (int v = 0; v < V; ++v) acc[q][v] = _mm256_setzero_ps();              \
    for (int64_t s = 0; s < S; ++s) {                                         \
      const float *mr = m + s * wp + j0;                                      \
      __m256 mv[V];                                                           \
      _Pragma("GCC unroll 3")                                                 \
      for (int v = 0; v < V; ++v) mv[v] = _mm256_loadu_ps(mr + 8 * v);        \
      _Pragma("GCC unroll 6")                                                 \
      for (int q = 0; q < Q; ++q) {                                           \
        const __m256 x = _mm256_broadcast_ss(in + q * is + s);                \
        _Pragma("GCC unroll 3")                                               \
        for (int v = 0; v < V; ++v)                                           \
          acc[q][v] = _mm256_fmadd_ps(x, mv[v], acc[q][v]);                   \
      }                                                                       \
    }                                                                         \
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);            \
    _Pragma("GCC unroll 6")                                                   \
    for (int q = 0; q < Q; ++q) _Pragma("GCC unroll 3")                       \
    for (int v = 0; v < V; ++v) {                                             \
      float *o = out + q * os + j0 + 8 * v;                                   \
      if (nj >= 8 * (v + 1))                                                  \
        _mm256_storeu_ps(o, acc[q][v]);                                       \
      else if (nj > 8 * v)                                                    \
        _mm256_maskstore_ps(                                                  \
            o, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nj - 8 * v)), idx), \
            acc[q][v]);                                                       \
    }                                                                         \
  }

DFT2_BLK(4, 3)
DFT2_BLK(1, 3)
DFT2_BLK(6, 2)
DFT2_BLK(1, 2)

void sg_dft_apply_avx2_f32(int nth, int64_t rows, int64_t S, int64_t w,
                           int64_t wp, const float *in, int64_t is,
                           const float *m, float *out, int64_t os) {
  const int b24 = w % 24 == 0;
  const int64_t Q = b24 ? 4 : 6, cb = b24 ? 24 : 16;
  const int64_t nblk = (rows + Q - 1) / Q;
#pragma omp parallel for schedule(static) \
    num_threads(nth) if (nth > 1 && rows * S * w > 65536)
  for (int64_t b = 0; b < nblk; ++b) {
    const int64_t r = b * Q, nq = rows - r < Q ? rows - r : Q;
    for (int64_t j0 = 0; j0 < w; j0 += cb) {
      const int64_t nj = w - j0 < cb ? w - j0 : cb;
      if (nq == Q) {
        (b24 ? dft2_4_3 : dft2_6_2)(S, wp, j0, nj, in + r * is, is, m,
                                    out + r * os, os);
        continue;
      }
      for (int64_t q = 0; q < nq; ++q)
        (b24 ? dft2_1_3 : dft2_1_2)(S, wp, j0, nj, in + (r + q) * is, is, m,
                                    out + (r + q) * os, os);
    }
  }
}

#else

int sg_dft_avx2_built(void) { return 0; }
void sg_dft_apply_avx2_f32(int nth, int64_t rows, int64_t S, int64_t w,
                           int64_t wp, const float *in, int64_t is,
                           const float *m, float *out, int64_t os) {
  (void)nth, (void)rows, (void)S, (void)w, (void)wp, (void)in, (void)is;
  (void)m, (void)out, (void)os;
}

#endif
