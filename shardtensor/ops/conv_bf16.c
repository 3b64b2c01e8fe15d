/* shardgrid — bf16 kernels of the direct convolution (AVX-512 BF16
 * `vdpbf16ps`, f32 accumulation).
 *
 * Under the bf16 policy the activations, the gradients and the weights are
 * f32 buffers holding bf16 values (strategies/precision_impl.h). vdpbf16ps
 * multiplies pairs of bf16 in each 32-bit lane and adds both products to an
 * f32 lane: twice the multiply-adds of an f32 FMA per instruction. Its
 * reduction pairs are input channels: the image is repacked (per tile, by
 * the caller) to channel pairs interleaved per pixel, lane p of pair j
 * holding channels 2j (low half) and 2j + 1 (high half, zero past an odd
 * count), and the weights likewise. The kernel is then the f32 direct
 * kernel's (pointwise.c) with half the reduction rows: an outer-product tile
 * of 8 output rows x 48 pixels in 24 accumulators, one broadcast weight pair
 * per row, the image read through the row shifts xoff (one per channel pair
 * and kernel offset).
 *
 * bf16 x bf16 products are exact in f32, so the sums are the f32 kernel's
 * up to their order (per lane: pair rows in increasing order, the odd
 * channel's product then the even one's, as Intel documents the
 * instruction) and the instruction's flushing of bf16 denormals (below
 * 1.2e-38) to zero; the packing rounds to nearest even (a value already
 * bf16 is unchanged).
 *
 * Compiled with -mavx512f -mavx512bf16 whatever the library's target
 * (shardtensor/ops/CMakeLists.txt); entered only when
 * sg_bf16_conv_available() (ops.c: built, and the CPU has AVX512_BF16). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>

enum {
  BF_NV = 3, /* vectors of 16 pixels per tile (48) */
  BF_NP = 16 * BF_NV,
  BF_MR = 8 /* output rows per tile */
};

int sg_bf16_conv_built(void) { return 1; }

/* One tile: MR rows r of y (stride ldy) over up to 48 pixels,
 * y[r] = b[r] (or 0) + sum_q dot(w[r * wr + q], x[xoff[q] + p]). FULL: all
 * 48 pixels, else the masks m[]. */
#define BF_TILE(MR, FULL)                                                      \
  static void bf_tile_##MR##_##FULL(int64_t npr, const uint32_t *w,            \
                                    int64_t wr, const uint32_t *x,             \
                                    const int64_t *xoff, const float *b,       \
                                    float *y, int64_t ldy,                     \
                                    const __mmask16 *m) {                      \
    __m512 acc[MR][BF_NV];                                                     \
    _Pragma("GCC unroll 8")                                                    \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 4")                       \
    for (int v = 0; v < BF_NV; ++v)                                            \
      acc[r][v] = b ? _mm512_set1_ps(b[r]) : _mm512_setzero_ps();              \
    for (int64_t q = 0; q < npr; ++q) {                                        \
      const uint32_t *xc = x + xoff[q];                                        \
      __m512bh xv[BF_NV];                                                      \
      _Pragma("GCC unroll 4")                                                  \
      for (int v = 0; v < BF_NV; ++v)                                          \
        xv[v] = (__m512bh)(FULL                                                \
                               ? _mm512_loadu_si512(xc + 16 * v)               \
                               : _mm512_maskz_loadu_epi32(m[v], xc + 16 * v)); \
      const uint32_t *wp = w + q;                                              \
      _Pragma("GCC unroll 8")                                                  \
      for (int r = 0; r < MR; ++r) {                                           \
        const __m512bh wv = (__m512bh)_mm512_set1_epi32((int)wp[r * wr]);      \
        _Pragma("GCC unroll 4")                                                \
        for (int v = 0; v < BF_NV; ++v)                                        \
          acc[r][v] = _mm512_dpbf16_ps(acc[r][v], xv[v], wv);                  \
      }                                                                        \
    }                                                                          \
    _Pragma("GCC unroll 8")                                                    \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 4")                       \
    for (int v = 0; v < BF_NV; ++v) {                                          \
      if (FULL)                                                                \
        _mm512_storeu_ps(y + r * ldy + 16 * v, acc[r][v]);                     \
      else                                                                     \
        _mm512_mask_storeu_ps(y + r * ldy + 16 * v, m[v], acc[r][v]);          \
    }                                                                          \
  }

#define BF_TILES(MR) BF_TILE(MR, 1) BF_TILE(MR, 0)
BF_TILES(1)
BF_TILES(2)
BF_TILES(3)
BF_TILES(4)
BF_TILES(5)
BF_TILES(6)
BF_TILES(7)
BF_TILES(8)

typedef void (*bf_tile_fn)(int64_t, const uint32_t *, int64_t, const uint32_t *,
                           const int64_t *, const float *, float *, int64_t,
                           const __mmask16 *);
static const bf_tile_fn bf_tiles[2][BF_MR + 1] = {
    {NULL, bf_tile_1_0, bf_tile_2_0, bf_tile_3_0, bf_tile_4_0, bf_tile_5_0,
     bf_tile_6_0, bf_tile_7_0, bf_tile_8_0},
    {NULL, bf_tile_1_1, bf_tile_2_1, bf_tile_3_1, bf_tile_4_1, bf_tile_5_1,
     bf_tile_6_1, bf_tile_7_1, bf_tile_8_1}};

/* The masks of a strip of len pixels (<= 48). */
static void bf_masks(int64_t len, __mmask16 *m) {
  for (int v = 0; v < BF_NV; ++v) {
    int64_t l = len - 16 * v;
    l = l < 0 ? 0 : l > 16 ? 16 : l;
    m[v] = (__mmask16)((1u << l) - 1u);
  }
}

void sg_bf16_gemm_off(int64_t npr, int64_t cout, int64_t np, const uint32_t *w,
                      int64_t wr, const uint32_t *x, const int64_t *xoff,
                      const float *b, float *y, int64_t ldy) {
  for (int64_t p0 = 0; p0 < np; p0 += BF_NP) {
    const int64_t len = np - p0 < BF_NP ? np - p0 : BF_NP;
    __mmask16 m[BF_NV];
    bf_masks(len, m);
    for (int64_t k0 = 0; k0 < cout; k0 += BF_MR) {
      const int mr = (int)(cout - k0 < BF_MR ? cout - k0 : BF_MR);
      bf_tiles[len == BF_NP][mr](npr, w + k0 * wr, wr, x + p0, xoff,
                                 b ? b + k0 : NULL, y + k0 * ldy + p0, ldy, m);
    }
  }
}

/* 16 lanes of channel pairs from two rows (hi NULL: zero), rounded to
 * nearest even. */
static inline __m512i bf_pair16(__mmask16 m, const float *lo, const float *hi) {
  const __m512 a = _mm512_maskz_loadu_ps(m, lo);
  const __m512 c = hi ? _mm512_maskz_loadu_ps(m, hi) : _mm512_setzero_ps();
  /* each row's 16 bf16 widened to the low half of a 32-bit lane */
  const __m512i la = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(a));
  const __m512i lc = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(c));
  return _mm512_or_si512(la, _mm512_slli_epi32(lc, 16));
}

void sg_bf16_pack_pairs(int64_t nch, int64_t len, const float *x, int64_t xs,
                        uint32_t *dst, int64_t ds) {
  for (int64_t j = 0; 2 * j < nch; ++j) {
    const float *lo = x + 2 * j * xs, *hi = 2 * j + 1 < nch ? lo + xs : NULL;
    uint32_t *d = dst + j * ds;
    for (int64_t p = 0; p < len; p += 16) {
      const int64_t l = len - p < 16 ? len - p : 16;
      const __mmask16 m = (__mmask16)((1u << l) - 1u);
      _mm512_mask_storeu_epi32(d + p, m,
                               bf_pair16(m, lo + p, hi ? hi + p : NULL));
    }
  }
}

void sg_bf16_pack_planes(int64_t nch, int64_t len, const float *x, int64_t xs,
                         uint16_t *dst, int64_t ds) {
  for (int64_t c = 0; c < nch; ++c) {
    const float *src = x + c * xs;
    uint16_t *d = dst + c * ds;
    for (int64_t p = 0; p < (len + 15) / 16 * 16 + 32; p += 16) {
      const int64_t l = len - p < 0 ? 0 : len - p < 16 ? len - p : 16;
      const __mmask16 m = (__mmask16)((1u << l) - 1u);
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + p));
      _mm256_storeu_si256((__m256i *)(d + p), (__m256i)v);
    }
  }
}

/* In-register transpose of 16 x 16 32-bit elements: r[i] becomes what was
 * column i (pairs within 128-bit lanes, then lanes, twice). */
static inline void bf_transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

/* Per 16 output channels x 32 pixels: each channel's 32 pixels to 16
 * pairs (even pixel in the low half, as tdpbf16ps pairs them), one row per
 * channel, then transposed to one row per pixel pair: a B tile. */
void sg_bf16_pack_dy_tiles(int64_t kp, int64_t npad, const float *dyc,
                           int64_t ldc, uint32_t *dyt) {
  const int64_t nkb = kp / 16;
  for (int64_t pb = 0; pb < npad / 32; ++pb)
    for (int64_t kb = 0; kb < nkb; ++kb) {
      __m512i r[16];
      for (int j = 0; j < 16; ++j) {
        const float *src = dyc + (kb * 16 + j) * ldc + pb * 32;
        r[j] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + 16),
                                            _mm512_loadu_ps(src));
      }
      bf_transpose16(r);
      uint32_t *d = dyt + (pb * nkb + kb) * 256;
      for (int i = 0; i < 16; ++i) _mm512_storeu_si512(d + 16 * i, r[i]);
    }
}

#else /* no AVX-512 BF16: callers take the f32 kernels */

int sg_bf16_conv_built(void) { return 0; }

void sg_bf16_gemm_off(int64_t npr, int64_t cout, int64_t np, const uint32_t *w,
                      int64_t wr, const uint32_t *x, const int64_t *xoff,
                      const float *b, float *y, int64_t ldy) {
  (void)npr, (void)cout, (void)np, (void)w, (void)wr, (void)x, (void)xoff;
  (void)b, (void)y, (void)ldy;
}

void sg_bf16_pack_pairs(int64_t nch, int64_t len, const float *x, int64_t xs,
                        uint32_t *dst, int64_t ds) {
  (void)nch, (void)len, (void)x, (void)xs, (void)dst, (void)ds;
}

void sg_bf16_pack_planes(int64_t nch, int64_t len, const float *x, int64_t xs,
                         uint16_t *dst, int64_t ds) {
  (void)nch, (void)len, (void)x, (void)xs, (void)dst, (void)ds;
}

void sg_bf16_pack_dy_tiles(int64_t kp, int64_t npad, const float *dyc,
                           int64_t ldc, uint32_t *dyt) {
  (void)kp, (void)npad, (void)dyc, (void)ldc, (void)dyt;
}

#endif
