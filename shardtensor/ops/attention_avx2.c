/* shardgrid — the fused attention's f32 kernel on AVX2 + FMA (Haswell, Zen
 * 1-3 and newer without AVX-512): register-blocked tile GEMMs on 8-lane
 * vectors, the online softmax in base 2 with a 2^x on 8 lanes, 8 x 8
 * shuffle transposes; the tiling and the drivers are attention_tmpl.h's,
 * as for the portable kernel (attention.c) and the AVX-512 one
 * (attention_avx512.c, whose structure this file follows).
 * Compiled with its own -mavx2 -mfma whatever SG_NATIVE says
 * (shardtensor/ops/CMakeLists.txt); attention.c enters it only where
 * sg_attn_avx2_built(), the CPU has AVX2 and FMA (sg_simd_avx2) and the
 * AVX-512 kernel is not taken. SG_SIMD=avx2 rules out AVX-512 (so tests
 * reach this tier on an AVX-512 machine), SG_SIMD=portable both. Where the
 * compiler cannot target AVX2 the file builds empty. docs/attention.md. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attention_kern.h"
#include "ops_impl.h"
#include "sg_ops_inl.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "sg_exp256.h"

int sg_attn_avx2_built(void) { return 1; }

/* 2^x on 8 lanes: sg_exp2_256_ps (sg_exp256.h, tested by test_exp256) */
static inline __m256 av_exp2(__m256 x) { return sg_exp2_256_ps(x); }

/* the same, 0 where keep (a float mask) is clear */
static inline __m256 av_exp2_keep(__m256 keep, __m256 x) {
  return _mm256_and_ps(keep, av_exp2(x));
}

/* lanes l with lo <= l < hi, as a float mask (all ones / zero) */
static inline __m256 av_lanes(int64_t lo, int64_t hi) {
  lo = lo < 0 ? 0 : lo > 8 ? 8 : lo;
  hi = hi < 0 ? 0 : hi > 8 ? 8 : hi;
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i in_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), idx),
                below_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)lo), idx);
  return _mm256_castsi256_ps(_mm256_andnot_si256(below_lo, in_hi));
}

/* ---- tile GEMMs -----------------------------------------------------------
 * c (m x n, row stride ldc) (+)= a b, a's element (r, p) at a[r*ar + p*ac]
 * (so a transposed operand needs no copy), b (k x n) with row stride ldb.
 * Register-blocked, no packing: 16 ymm registers hold 6 rows x 2 vectors
 * of c (12 accumulators: Zen 3 and Haswell keep 8-10 FMAs in flight), two
 * vectors of b and a broadcast. Each element sums over p in increasing
 * order (one FMA each): the same bits for every thread count. */
enum { AV_MR = 6, AV_NV = 2 }; /* 6 rows x 16 columns */

/* One register tile: MR rows of c over NV vectors of 8 columns (integer
 * masks m: lanes < the columns left); acc: c (scaled by rs[r], if not
 * NULL) accumulated into, else overwritten. FULL (every lane used): plain
 * loads and stores. */
#define AV_TILE_AT(NAME, MR, NV, FULL)                                 \
  static void NAME(int64_t k, const float *a, int64_t ar, int64_t ac,  \
                   const float *b, int64_t ldb, float *c, int64_t ldc, \
                   int acc, const float *rs, const __m256i *m) {       \
    __m256 cr[MR][NV];                                                 \
    _Pragma("GCC unroll 8")                                            \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 2")               \
    for (int v = 0; v < NV; ++v) {                                     \
      if (acc) {                                                       \
        const float *cp = c + r * ldc + 8 * v;                         \
        const __m256 x = FULL ? _mm256_loadu_ps(cp)                    \
                              : _mm256_maskload_ps(cp, m[v]);          \
        cr[r][v] = rs ? _mm256_mul_ps(x, _mm256_set1_ps(rs[r])) : x;   \
      } else {                                                         \
        cr[r][v] = _mm256_setzero_ps();                                \
      }                                                                \
    }                                                                  \
    for (int64_t p = 0; p < k; ++p) {                                  \
      __m256 bv[NV];                                                   \
      _Pragma("GCC unroll 2")                                          \
      for (int v = 0; v < NV; ++v)                                     \
        bv[v] = FULL ? _mm256_loadu_ps(b + p * ldb + 8 * v)            \
                     : _mm256_maskload_ps(b + p * ldb + 8 * v, m[v]);  \
      _Pragma("GCC unroll 8")                                          \
      for (int r = 0; r < MR; ++r) {                                   \
        const __m256 av = _mm256_broadcast_ss(a + r * ar + p * ac);    \
        _Pragma("GCC unroll 2")                                        \
        for (int v = 0; v < NV; ++v)                                   \
          cr[r][v] = _mm256_fmadd_ps(av, bv[v], cr[r][v]);             \
      }                                                                \
    }                                                                  \
    _Pragma("GCC unroll 8")                                            \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 2")               \
    for (int v = 0; v < NV; ++v) {                                     \
      float *cp = c + r * ldc + 8 * v;                                 \
      if (FULL)                                                        \
        _mm256_storeu_ps(cp, cr[r][v]);                                \
      else                                                             \
        _mm256_maskstore_ps(cp, m[v], cr[r][v]);                       \
    }                                                                  \
  }
#define AV_TILE(MR, NV)                      \
  AV_TILE_AT(av_tile_##MR##_##NV, MR, NV, 0) \
  AV_TILE_AT(av_tile_##MR##_##NV##_f, MR, NV, 1)
#define AV_TILES(MR) AV_TILE(MR, 1) AV_TILE(MR, 2)
AV_TILES(1)
AV_TILES(2)
AV_TILES(3)
AV_TILES(4)
AV_TILES(5)
AV_TILES(6)
/* One vector of columns (n <= 8, head_dim 8): 12 rows, 12 accumulators */
AV_TILE(12, 1)

typedef void (*av_tile_fn)(int64_t, const float *, int64_t, int64_t,
                           const float *, int64_t, float *, int64_t, int,
                           const float *, const __m256i *);
#define AV_ROW(MR, F) \
  { NULL, av_tile_##MR##_1##F, av_tile_##MR##_2##F }
#define AV_ROWS(F)                                                  \
  {                                                                 \
    {NULL}, AV_ROW(1, F), AV_ROW(2, F), AV_ROW(3, F), AV_ROW(4, F), \
        AV_ROW(5, F), AV_ROW(6, F)                                  \
  }
/* [full][mr][nv] */
static const av_tile_fn av_tiles[2][AV_MR + 1][AV_NV + 1] = {AV_ROWS(),
                                                             AV_ROWS(_f)};
static const av_tile_fn av_tiles12[2] = {av_tile_12_1, av_tile_12_1_f};

/* Rows of the next register tile with left rows to go: 6, but the last 7
 * or 8 rows as 4 + 3, 4 + 4 rather than 6 + 1 or 2 (whose 2 to 4
 * accumulators leave the FMA pipes waiting on their latency). Each
 * element's sum is the same either way. */
static inline int av_rows(int64_t left) {
  if (left <= AV_MR) return (int)left;
  if (left <= AV_MR + 2) return (int)(left + 1) / 2;
  return AV_MR;
}

/* rs (acc only; NULL: none): c's row r scaled by rs[r] before the sum */
static void av_gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t ar,
                    int64_t ac, const float *b, int64_t ldb, float *c,
                    int64_t ldc, int acc, const float *rs) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t n0 = 0; n0 < n; n0 += 8 * AV_NV) {
    const int64_t len = n - n0 < 8 * AV_NV ? n - n0 : 8 * AV_NV;
    const int nv = (int)((len + 7) / 8);
    __m256i msk[AV_NV];
    for (int v = 0; v < AV_NV; ++v) {
      int64_t l = len - 8 * v;
      l = l < 0 ? 0 : l > 8 ? 8 : l;
      msk[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)l), idx);
    }
    const int full = len == 8 * nv; /* the same sums either way */
    int64_t r0 = 0;
    if (nv == 1) /* the same sums in the same order: same bits */
      for (; r0 + 12 <= m; r0 += 12)
        av_tiles12[full](k, a + r0 * ar, ar, ac, b + n0, ldb, c + r0 * ldc + n0,
                         ldc, acc, rs ? rs + r0 : NULL, msk);
    for (int mr; r0 < m; r0 += mr) {
      mr = av_rows(m - r0);
      av_tiles[full][mr][nv](k, a + r0 * ar, ar, ac, b + n0, ldb,
                             c + r0 * ldc + n0, ldc, acc, rs ? rs + r0 : NULL,
                             msk);
    }
  }
}

static void attn_gemm_f32v(int64_t m, int64_t n, int64_t k, const float *a,
                           int64_t ar, int64_t ac, const float *b, int64_t ldb,
                           float *c, int64_t ldc, int acc) {
  av_gemm(m, n, k, a, ar, ac, b, ldb, c, ldc, acc, NULL);
}

/* The forward's o = al o + p v (p: the key-major score tile, bk x bq). */
static void attn_pv_avx2(int64_t bq, int64_t d, int64_t bk, const float *st,
                         const float *v, float *o, const float *al) {
  av_gemm(bq, d, bk, st, 1, SG_ATTN_BQ, v, d, o, d, 1, al);
}

/* ---- the online softmax ---------------------------------------------------
 * As attn_fwd_softmax in attention_tmpl.h (and at_softmax of the AVX-512
 * kernel): the tile's max, then p = 2^{s - m} (the scores arrive times
 * log2 e, folded into the query's scale: SG_ABASE2) and the sum, kept in
 * registers over the key rows. 64 queries are 8 vectors; 4 side by side
 * (32 queries: 4 independent chains, 12 registers of max, new max and
 * sum), the two halves one after the other. Every lane of the 64 is
 * computed; lanes past bq read finite scores or stale values and are
 * masked to -inf / 0 (the tile arrays are BQ wide). Inlined for masked = 0
 * (a whole tile, every key visible: no mask arithmetic in the loops) and
 * masked = 1. */
static inline __attribute__((always_inline)) void av_softmax(
    int masked, float *st, int64_t bk, int64_t bq, int64_t t0, float *m,
    float *l, float *al) {
  enum { NV = 4, BQ = SG_ATTN_BQ };
  const __m256 ninf = _mm256_set1_ps(-INFINITY),
               ones = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int h = 0; h < BQ / 8; h += NV) {
    if (masked && 8 * h >= bq) break;
    __m256 mx[NV], mn[NV], sum[NV], kq[NV];
    for (int v = 0; v < NV; ++v) {
      mx[v] = ninf;
      kq[v] = masked ? av_lanes(0, bq - 8 * (h + v)) : ones;
    }
    for (int64_t j = 0; j < bk; ++j)
      for (int v = 0; v < NV; ++v) {
        const __m256 x = _mm256_loadu_ps(st + j * BQ + 8 * (h + v));
        mx[v] = _mm256_max_ps(
            mx[v], masked ? _mm256_blendv_ps(ninf, x,
                                             av_lanes(t0 + j - 8 * (h + v),
                                                      bq - 8 * (h + v)))
                          : x);
      }
    for (int v = 0; v < NV; ++v) {
      const int o = 8 * (h + v);
      const __m256 mo = masked ? _mm256_blendv_ps(ninf, _mm256_loadu_ps(m + o),
                                                  kq[v])
                               : _mm256_loadu_ps(m + o);
      mn[v] = _mm256_max_ps(mo, mx[v]);
      /* alpha = 2^{m - m'}; 0 where m = -inf (nothing seen yet) */
      const __m256 a = av_exp2_keep(_mm256_cmp_ps(mo, ninf, _CMP_NEQ_UQ),
                                    _mm256_sub_ps(mo, mn[v]));
      const __m256 lo = _mm256_and_ps(kq[v], _mm256_loadu_ps(l + o));
      sum[v] = _mm256_mul_ps(lo, a);
      _mm256_storeu_ps(al + o, a);
      _mm256_storeu_ps(m + o, mn[v]);
    }
    for (int64_t j = 0; j < bk; ++j)
      for (int v = 0; v < NV; ++v) {
        float *row = st + j * BQ + 8 * (h + v);
        const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(row), mn[v]);
        const __m256 p = masked ? av_exp2_keep(av_lanes(t0 + j - 8 * (h + v),
                                                        bq - 8 * (h + v)),
                                               x)
                                : av_exp2(x);
        _mm256_storeu_ps(row, p);
        sum[v] = _mm256_add_ps(sum[v], p);
      }
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(l + 8 * (h + v), sum[v]);
  }
}

static void attn_fwd_softmax_avx2(const sg_attn_geom *g, float *st, int64_t bk,
                                  int64_t bq, int64_t i0, int64_t j0, float *m,
                                  float *l, float *al) {
  if (!g->causal || j0 + bk - 1 <= i0 + g->offset) { /* every key visible */
    if (bq == SG_ATTN_BQ)
      av_softmax(0, st, bk, bq, 0, m, l, al);
    else
      av_softmax(1, st, bk, bq, INT64_MIN / 2, m, l, al);
  } else {
    av_softmax(1, st, bk, bq, j0 - g->offset - i0, m, l, al);
  }
}

/* xt[c * ldt + r] = scale * x[r * d + c] (attn_transpose in
 * attention_tmpl.h): 8 x 8 blocks by unpack / shuffle / lane permutes,
 * the edges scalar. */
static void attn_transpose_avx2(const float *x, int64_t rows, int64_t d,
                                float scale, float *xt, int64_t ldt) {
  const __m256 sc = _mm256_set1_ps(scale);
  int64_t r0 = 0;
  for (; r0 + 8 <= rows; r0 += 8) {
    int64_t c0 = 0;
    for (; c0 + 8 <= d; c0 += 8) {
      __m256 a[8], t[8];
      for (int i = 0; i < 8; ++i) a[i] = _mm256_loadu_ps(x + (r0 + i) * d + c0);
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(a[i], a[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(a[i], a[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        a[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        a[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        a[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3],
                                     _MM_SHUFFLE(1, 0, 1, 0));
        a[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3],
                                     _MM_SHUFFLE(3, 2, 3, 2));
      }
      for (int i = 0; i < 4; ++i) {
        t[i] = _mm256_permute2f128_ps(a[i], a[i + 4], 0x20);
        t[i + 4] = _mm256_permute2f128_ps(a[i], a[i + 4], 0x31);
      }
      for (int i = 0; i < 8; ++i)
        _mm256_storeu_ps(xt + (c0 + i) * ldt + r0, _mm256_mul_ps(t[i], sc));
    }
    for (; c0 < d; ++c0)
      for (int64_t r = r0; r < r0 + 8; ++r)
        xt[c0 * ldt + r] = scale * x[r * d + c0];
  }
  for (int64_t c = 0; c < d; ++c)
    for (int64_t r = r0; r < rows; ++r) xt[c * ldt + r] = scale * x[r * d + c];
}

/* The backward's probabilities in place: st (key-major, bk x bq) = 2^{s -
 * lse log2 e} (the scores in base 2 as in the forward; lse in base e, its
 * product by log2 e inside the FMA), 0 where key j is hidden from query i
 * (i < t0 + j) or the query saw no key (lse = -inf); lanes past bq
 * computed from stale values, never read. */
static inline __attribute__((always_inline)) void av_bwd_probs(
    int masked, float *st, int64_t bk, int64_t bq, int64_t t0,
    const float *lse) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY),
               l2e = _mm256_set1_ps(1.44269504088896341f);
  const int nv = (int)((bq + 7) / 8);
  for (int h = 0; h < nv; h += 4) {
    __m256 ls[4], kl[4];
    for (int v = 0; v < 4; ++v) {
      const __m256 kq = av_lanes(0, bq - 8 * (h + v));
      /* lse past bq may be past the array: masked load */
      ls[v] = _mm256_blendv_ps(
          ninf, _mm256_maskload_ps(lse + 8 * (h + v), _mm256_castps_si256(kq)),
          kq);
      kl[v] = _mm256_cmp_ps(ls[v], ninf, _CMP_NEQ_UQ);
      ls[v] = _mm256_and_ps(kl[v], ls[v]); /* no -inf * l2e inf games */
    }
    for (int64_t j = 0; j < bk; ++j)
      for (int v = 0; v < 4; ++v) {
        float *row = st + j * SG_ATTN_BQ + 8 * (h + v);
        const __m256 vis = masked
                               ? _mm256_and_ps(
                                     kl[v], av_lanes(t0 + j - 8 * (h + v), 8))
                               : kl[v];
        const __m256 x = _mm256_fnmadd_ps(ls[v], l2e, _mm256_loadu_ps(row));
        _mm256_storeu_ps(row, av_exp2_keep(vis, x));
      }
  }
}

static void attn_bwd_probs_avx2(float *st, int64_t bk, int64_t bq, int64_t t0,
                                int full, const float *lse) {
  if (full)
    av_bwd_probs(0, st, bk, bq, 0, lse);
  else
    av_bwd_probs(1, st, bk, bq, t0, lse);
}

#define R float
#define S f32v
#define SG_ASOFTMAX attn_fwd_softmax_avx2
#define SG_ABASE2 1
#define SG_ATRANSPOSE attn_transpose_avx2
#define SG_ABWDPROBS attn_bwd_probs_avx2
#define SG_APV attn_pv_avx2
#define SG_ANO_MERGE
#define SG_AEXP sg_expf
#define SG_AMEXP expf
#define SG_ALOG logf
#include "attention_tmpl.h"

void sg_attn_fwd_f32_avx2(const sg_attn_geom *g, const float *q, const float *k,
                          const float *v, float *o, float *lse, void *ws) {
  attn_fwd_f32v(g, q, k, v, o, lse, ws);
}

void sg_attn_bwd_f32_avx2(const sg_attn_geom *g, const float *q, const float *k,
                          const float *v, const float *o, const float *lse,
                          const float *dout, float *dq, float *dk, float *dv,
                          void *ws) {
  attn_bwd_f32v(g, q, k, v, o, lse, dout, dq, dk, dv, ws);
}

#else

int sg_attn_avx2_built(void) { return 0; }
void sg_attn_fwd_f32_avx2(const sg_attn_geom *g, const float *q, const float *k,
                          const float *v, float *o, float *lse, void *ws) {
  (void)g, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)ws;
}
void sg_attn_bwd_f32_avx2(const sg_attn_geom *g, const float *q, const float *k,
                          const float *v, const float *o, const float *lse,
                          const float *dout, float *dq, float *dk, float *dv,
                          void *ws) {
  (void)g, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)dout;
  (void)dq, (void)dk, (void)dv, (void)ws;
}

#endif
