/* shardgrid — fused, blocked scaled dot-product attention (FlashAttention-2
 * tiling with an online softmax) on the host: argument checks, geometry,
 * workspace, dispatch, and the f32 and f64 kernels (attention_tmpl.h).
 * The algorithm, its memory and its use by ring attention: docs/attention.md. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops_impl.h"
#include "sg_device.h"
#include "sg_exp512.h"
#include "sg_ops_inl.h"

/* Tiles of 64 queries x 128 keys: at d = 64 in f32 a query tile's q^T and
 * output (16 KiB each) and the score tile (32 KiB) stay in L1/L2 while the
 * key and value tiles (32 KiB each) stream through. 64 x 64 and 128 x 128
 * measured within 5% (bench/RESULTS.md); 64 x 128 was a little ahead. */
#ifndef SG_ATTN_BQ
#define SG_ATTN_BQ 64
#endif
#ifndef SG_ATTN_BK
#define SG_ATTN_BK 128
#endif
#define SG_ATTN_VL 16 /* lanes of the vectorised row reductions */

typedef struct sg_attn_geom {
  int64_t bh, nq, nk, d; /* batch * heads, tokens, head_dim */
  double scale;
  int causal;
  int64_t offset;
  int nthreads;
  size_t ws_per_thread; /* bytes, multiple of 64 */
} sg_attn_geom;

/* Keys [0, end) that some query of rows [0, i_end) sees. */
static inline int64_t sg_attn_key_end(const sg_attn_geom *g, int64_t i_end) {
  if (!g->causal) return g->nk;
  int64_t e = i_end +
              g->offset; /* query i_end - 1 sees keys <= i_end - 1 + offset */
  return e < 0 ? 0 : e > g->nk ? g->nk : e;
}

/* First query that sees key j0. */
static inline int64_t sg_attn_query_begin(const sg_attn_geom *g, int64_t j0) {
  if (!g->causal) return 0;
  int64_t i = j0 - g->offset;
  return i < 0 ? 0 : i > g->nq ? g->nq : i;
}

static inline void *sg_attn_thread_ws(const sg_attn_geom *g, void *ws) {
#ifdef _OPENMP
  int tid = omp_get_thread_num();
#else
  int tid = 0;
#endif
  return (char *)ws + (size_t)tid * g->ws_per_thread;
}

/* ---- tile GEMMs -----------------------------------------------------------
 * c (m x n, row stride ldc) (+)= a b, a's element (r, p) at a[r*ar + p*ac]
 * (so a transposed operand needs no copy), b (k x n) with row stride ldb.
 * f32 on register-blocked AVX-512 kernels where the build targets
 * AVX-512F: no packing, tiles straight from L1/L2 (a BLAS packs both
 * operands on every call, and OpenBLAS 0.3.21 does not know this CPU and
 * runs its SSE3 "Prescott" kernels); elsewhere, and f64 always, the BLAS.
 * Each element sums over p in increasing order (one FMA each): the same
 * bits for every thread count. */
static void attn_gemm_f64(int64_t m, int64_t n, int64_t k, const double *a,
                          int64_t ar, int64_t ac, const double *b, int64_t ldb,
                          double *c, int64_t ldc, int acc) {
  cblas_dgemm(CblasRowMajor, ac == 1 ? CblasNoTrans : CblasTrans, CblasNoTrans,
              (int)m, (int)n, (int)k, 1, a, (int)(ac == 1 ? ar : ac), b,
              (int)ldb, acc ? 1 : 0, c, (int)ldc);
}

/* SG_ATTN_BLAS: the BLAS for f32 too (to compare; bench/RESULTS.md) */
#if defined(__AVX512F__) && !defined(SG_ATTN_BLAS)
#include <immintrin.h>

enum { AT_MR = 6, AT_NV = 4 }; /* 6 rows x 64 columns: 24 accumulators */

/* One register tile: MR rows of c over NV vectors of 16 columns (masks m);
 * a's element (r, p) at a[r * AR + p * AC] (AR, AC: ar, ac or constants). */
#define AT_TILE_AT(NAME, MR, NV, AR, AC)                                 \
  static void NAME(int64_t k, const float *a, int64_t ar, int64_t ac,    \
                   const float *b, int64_t ldb, float *c, int64_t ldc,   \
                   int acc, const __mmask16 *m) {                        \
    (void)ar;                                                            \
    (void)ac;                                                            \
    __m512 cr[MR][NV];                                                   \
    _Pragma("GCC unroll 16")                                             \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 4")                 \
    for (int v = 0; v < NV; ++v)                                         \
      cr[r][v] = acc ? _mm512_maskz_loadu_ps(m[v], c + r * ldc + 16 * v) \
                     : _mm512_setzero_ps();                              \
    for (int64_t p = 0; p < k; ++p) {                                    \
      __m512 bv[NV];                                                     \
      _Pragma("GCC unroll 4")                                            \
      for (int v = 0; v < NV; ++v)                                       \
        bv[v] = _mm512_maskz_loadu_ps(m[v], b + p * ldb + 16 * v);       \
      _Pragma("GCC unroll 16")                                           \
      for (int r = 0; r < MR; ++r) {                                     \
        const __m512 av = _mm512_set1_ps(a[r * (AR) + p * (AC)]);        \
        _Pragma("GCC unroll 4")                                          \
        for (int v = 0; v < NV; ++v)                                     \
          cr[r][v] = _mm512_fmadd_ps(av, bv[v], cr[r][v]);               \
      }                                                                  \
    }                                                                    \
    _Pragma("GCC unroll 16")                                             \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 4")                 \
    for (int v = 0; v < NV; ++v)                                         \
      _mm512_mask_storeu_ps(c + r * ldc + 16 * v, m[v], cr[r][v]);       \
  }
#define AT_TILE(MR, NV) AT_TILE_AT(at_tile_##MR##_##NV, MR, NV, ar, ac)
#define AT_TILES(MR) AT_TILE(MR, 1) AT_TILE(MR, 2) AT_TILE(MR, 3) AT_TILE(MR, 4)
AT_TILES(1)
AT_TILES(2)
AT_TILES(3)
AT_TILES(4)
AT_TILES(5)
AT_TILES(6)
/* Narrow outputs (n <= 32: o += p v, dq, dk, dv at head_dim 16 or 32): 6
 * rows would give 6 or 12 accumulators, fewer than the FMA latency times
 * its throughput (4 x 2) needs; 16 rows of one vector, 8 of two (16
 * accumulators each, and 64-query tiles split evenly). a's layout fixed at
 * compile time (a score tile read as is, ar = 1, or transposed, ar = BQ and
 * ac = 1), so its MR broadcasts are constant offsets of one pointer: with
 * run-time strides 16 row addresses spill the integer registers. */
AT_TILE_AT(at_tile_16_1_q, 16, 1, 1, ac)
AT_TILE_AT(at_tile_8_2_q, 8, 2, 1, ac)
AT_TILE_AT(at_tile_16_1_k, 16, 1, SG_ATTN_BQ, 1)
AT_TILE_AT(at_tile_8_2_k, 8, 2, SG_ATTN_BQ, 1)

typedef void (*at_tile_fn)(int64_t, const float *, int64_t, int64_t,
                           const float *, int64_t, float *, int64_t, int,
                           const __mmask16 *);
#define AT_ROW(MR)                                              \
  {                                                             \
    NULL, at_tile_##MR##_1, at_tile_##MR##_2, at_tile_##MR##_3, \
        at_tile_##MR##_4                                        \
  }
static const at_tile_fn at_tiles[AT_MR + 1][AT_NV + 1] = {
    {NULL}, AT_ROW(1), AT_ROW(2), AT_ROW(3), AT_ROW(4), AT_ROW(5), AT_ROW(6)};
static const at_tile_fn at_tiles_narrow[2][3] = {
    {NULL, at_tile_16_1_q, at_tile_8_2_q},
    {NULL, at_tile_16_1_k, at_tile_8_2_k}};
static const int at_mr_narrow[3] = {0, 16, 8};

static void attn_gemm_f32(int64_t m, int64_t n, int64_t k, const float *a,
                          int64_t ar, int64_t ac, const float *b, int64_t ldb,
                          float *c, int64_t ldc, int acc) {
  for (int64_t n0 = 0; n0 < n; n0 += 16 * AT_NV) {
    const int64_t len = n - n0 < 16 * AT_NV ? n - n0 : 16 * AT_NV;
    const int nv = (int)((len + 15) / 16);
    __mmask16 msk[AT_NV];
    for (int v = 0; v < AT_NV; ++v) {
      int64_t l = len - 16 * v;
      l = l < 0 ? 0 : l > 16 ? 16 : l;
      msk[v] = (__mmask16)((1u << l) - 1u);
    }
    int64_t r0 = 0;
    const int lay = ar == 1 ? 0 : ac == 1 && ar == SG_ATTN_BQ ? 1 : -1;
    if (nv <= 2 && lay >= 0) /* the same sums in the same order: same bits */
      for (; r0 + at_mr_narrow[nv] <= m; r0 += at_mr_narrow[nv])
        at_tiles_narrow[lay][nv](k, a + r0 * ar, ar, ac, b + n0, ldb,
                                 c + r0 * ldc + n0, ldc, acc, msk);
    for (; r0 < m; r0 += AT_MR) {
      const int mr = (int)(m - r0 < AT_MR ? m - r0 : AT_MR);
      at_tiles[mr][nv](k, a + r0 * ar, ar, ac, b + n0, ldb, c + r0 * ldc + n0,
                       ldc, acc, msk);
    }
  }
}

/* Lanes l of a 16-query vector with lo <= l (a causal row's first visible
 * query, relative to the vector) and l < hi (the tile's last query). */
static inline __mmask16 at_lanes(int64_t lo, int64_t hi) {
  lo = lo < 0 ? 0 : lo > 16 ? 16 : lo;
  hi = hi < 0 ? 0 : hi > 16 ? 16 : hi;
  return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/* The f32 online softmax on AVX-512 (attn_fwd_softmax in attention_tmpl.h
 * does the same with sg_expf): the tile's max and the sum kept in
 * registers over the key rows, four 16-query vectors side by side (four
 * independent chains, one pass over each key row of 64 queries). In base
 * 2 (SG_ABASE2): the scores arrive multiplied by log2(e) (folded into the
 * query's scale), m is their max, and p = 2^{s - m} by
 * sg_exp2_512_mask_ps (its argument is <= 0) — one multiplication less
 * per element than e^{s - m}, the same probabilities up to rounding. The
 * same sums in the same order as the portable path. Inlined twice: masked = 0 (a whole
 * 64-query tile, every key visible: no mask arithmetic in the loops, which
 * would take the ports the vector work needs) and masked = 1. */
static inline __attribute__((always_inline)) void at_softmax(
    int masked, float *st, int64_t bk, int64_t bq, int64_t t0, float *m,
    float *l, float *al) {
  enum { NV = SG_ATTN_BQ / 16 };
  const int64_t BQ = SG_ATTN_BQ;
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 mx[NV], mn[NV], sum[NV];
  __mmask16 kq[NV];
  for (int v = 0; v < NV; ++v) {
    mx[v] = ninf;
    kq[v] = masked ? at_lanes(0, bq - 16 * v) : (__mmask16)0xFFFF;
  }
  for (int64_t j = 0; j < bk; ++j)
    for (int v = 0; v < NV; ++v) {
      const float *row = st + j * BQ + 16 * v;
      mx[v] = _mm512_max_ps(
          mx[v], masked ? _mm512_mask_loadu_ps(
                              ninf, at_lanes(t0 + j - 16 * v, bq - 16 * v), row)
                        : _mm512_loadu_ps(row));
    }
  for (int v = 0; v < NV; ++v) {
    const __m512 mo = _mm512_mask_loadu_ps(ninf, kq[v], m + 16 * v);
    mn[v] = _mm512_max_ps(mo, mx[v]);
    /* alpha = e^{m - m'}; 0 where m = -inf (nothing seen yet) */
    const __m512 a = sg_exp2_512_mask_ps(
        _mm512_cmp_ps_mask(mo, ninf, _CMP_NEQ_UQ), _mm512_sub_ps(mo, mn[v]));
    sum[v] = _mm512_mul_ps(_mm512_maskz_loadu_ps(kq[v], l + 16 * v), a);
    _mm512_mask_storeu_ps(al + 16 * v, kq[v], a);
    _mm512_mask_storeu_ps(m + 16 * v, kq[v], mn[v]);
  }
  for (int64_t j = 0; j < bk; ++j)
    for (int v = 0; v < NV; ++v) {
      float *row = st + j * BQ + 16 * v;
      const __mmask16 vis = masked ? at_lanes(t0 + j - 16 * v, bq - 16 * v)
                                   : (__mmask16)0xFFFF;
      const __m512 p = sg_exp2_512_mask_ps(
          vis, _mm512_sub_ps(_mm512_maskz_loadu_ps(kq[v], row), mn[v]));
      _mm512_mask_storeu_ps(row, kq[v], p);
      sum[v] = _mm512_add_ps(sum[v], p);
    }
  for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(l + 16 * v, kq[v], sum[v]);
}

static void attn_fwd_softmax_avx512(const sg_attn_geom *g, float *st,
                                    int64_t bk, int64_t bq, int64_t i0,
                                    int64_t j0, float *m, float *l, float *al) {
  if (!g->causal || j0 + bk - 1 <= i0 + g->offset) { /* every key visible */
    if (bq == SG_ATTN_BQ)
      at_softmax(0, st, bk, bq, 0, m, l, al);
    else
      at_softmax(1, st, bk, bq, INT64_MIN / 2, m, l, al);
  } else {
    at_softmax(1, st, bk, bq, j0 - g->offset - i0, m, l, al);
  }
}
/* xt[c * ldt + r] = scale * x[r * d + c] (attn_transpose in
 * attention_tmpl.h), 16 rows of a column per gather: the scalar loop was
 * half of the forward's time outside the tile GEMMs and the softmax. */
static void attn_transpose_avx512(const float *x, int64_t rows, int64_t d,
                                  float scale, float *xt, int64_t ldt) {
  /* r * d < 16 * d fits an int: d <= INT_MAX / SG_ATTN_BK (geom_make) */
  const __m512i idx = _mm512_mullo_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      _mm512_set1_epi32((int)d));
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const __mmask16 k = at_lanes(0, rows - r0);
    const float *base = x + r0 * d;
    for (int64_t c = 0; c < d; ++c) {
      const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, idx,
                                                base + c, 4);
      _mm512_mask_storeu_ps(xt + c * ldt + r0, k, _mm512_mul_ps(v, sc));
    }
  }
}
#define SG_ATRANSPOSE_F32 attn_transpose_avx512
/* The backward's probabilities in place: st (key-major, bk x bq) = 2^{s -
 * lse log2 e} (the scores in base 2 as in the forward; lse in base e, its
 * product by log2 e inside the FMA, one rounding), 0 where key j is
 * hidden from query i (i < t0 + j) or the query saw no key (lse = -inf).
 * Inlined for masked = 0 (no causal mask: no mask arithmetic per row). */
static inline __attribute__((always_inline)) void at_bwd_probs(
    int masked, float *st, int64_t bk, int64_t bq, int64_t t0,
    const float *lse) {
  enum { NV = SG_ATTN_BQ / 16 };
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  const __m512 l2e = _mm512_set1_ps(1.44269504088896341f);
  __m512 ls[NV];
  __mmask16 kq[NV], kl[NV];
  for (int v = 0; v < NV; ++v) {
    kq[v] = at_lanes(0, bq - 16 * v);
    ls[v] = _mm512_mask_loadu_ps(ninf, kq[v], lse + 16 * v);
    kl[v] = _mm512_mask_cmp_ps_mask(kq[v], ls[v], ninf, _CMP_NEQ_UQ);
  }
  for (int64_t j = 0; j < bk; ++j)
    for (int v = 0; v < NV; ++v) {
      float *row = st + j * SG_ATTN_BQ + 16 * v;
      const __mmask16 vis = masked ? kl[v] & at_lanes(t0 + j - 16 * v, 16)
                                   : kl[v];
      const __m512 x = _mm512_fnmadd_ps(ls[v], l2e,
                                        _mm512_maskz_loadu_ps(kq[v], row));
      _mm512_mask_storeu_ps(row, kq[v], sg_exp2_512_mask_ps(vis, x));
    }
}

static void attn_bwd_probs_avx512(float *st, int64_t bk, int64_t bq, int64_t t0,
                                  int full, const float *lse) {
  if (full)
    at_bwd_probs(0, st, bk, bq, 0, lse);
  else
    at_bwd_probs(1, st, bk, bq, t0, lse);
}
#define SG_ABWDPROBS_F32 attn_bwd_probs_avx512
#define SG_ASOFTMAX_F32 attn_fwd_softmax_avx512
#define SG_ABASE2_F32 1
#else
static void attn_gemm_f32(int64_t m, int64_t n, int64_t k, const float *a,
                          int64_t ar, int64_t ac, const float *b, int64_t ldb,
                          float *c, int64_t ldc, int acc) {
  cblas_sgemm(CblasRowMajor, ac == 1 ? CblasNoTrans : CblasTrans, CblasNoTrans,
              (int)m, (int)n, (int)k, 1, a, (int)(ac == 1 ? ar : ac), b,
              (int)ldb, acc ? 1 : 0, c, (int)ldc);
}
#endif

#define R float
#define S f32
#ifdef SG_ASOFTMAX_F32
#define SG_ASOFTMAX SG_ASOFTMAX_F32
#define SG_ABASE2 SG_ABASE2_F32
#define SG_ATRANSPOSE SG_ATRANSPOSE_F32
#define SG_ABWDPROBS SG_ABWDPROBS_F32
#endif
#define SG_AEXP sg_expf
#define SG_AMEXP expf
#define SG_ALOG logf
#include "attention_tmpl.h"
#undef R
#undef S
#undef SG_AEXP
#undef SG_AMEXP
#undef SG_ALOG
#undef SG_ASOFTMAX
#undef SG_ABASE2
#undef SG_ATRANSPOSE
#undef SG_ABWDPROBS

#define R double
#define S f64
#define SG_AEXP exp
#define SG_AMEXP exp
#define SG_ALOG log
#include "attention_tmpl.h"
#undef R
#undef S
#undef SG_AEXP
#undef SG_AMEXP
#undef SG_ALOG

/* ---- bf16 storage --------------------------------------------------------
 * q, k, v, o (dout, dq, dk, dv) in bf16, lse in f32: the softmax statistics
 * stay f32 (an lse rounded to bf16 is off by up to 2^-9 of |lse|, every
 * probability e^{S - lse} of the backward with it). Portable: the operands
 * are widened to f32 (exact), the f32 kernel runs (f32 accumulation and
 * statistics), the outputs are rounded to the nearest bf16 (ties to even).
 * So the result is the f32 kernel's on the same values, rounded once; the
 * f32 copies cost 4 bytes an element during the call (a tile kernel on
 * bf16 operands, vdpbf16ps, would not need them: not built). */

/* One f32 buffer for cnt arrays of n[i] elements (0: absent, out[i] NULL);
 * the bf16 inputs in[i] (non-NULL) widened into theirs. */
static sg_status attn_bf16_widen(int cnt, const void *const in[],
                                 const int64_t n[], float *out[], void **own) {
  size_t tot = 1;
  for (int i = 0; i < cnt; ++i) tot += (size_t)n[i];
  sg_status st = sg_malloc(sg_device_host(), tot * sizeof(float), own);
  if (st != SG_OK) return st;
  float *p = *own;
  for (int i = 0; i < cnt; ++i) {
    out[i] = n[i] ? p : NULL;
    const sg_bf16 *src = in[i];
    const int64_t m = in[i] ? n[i] : 0;
    float *dst = p;
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < m; ++e) dst[e] = sg_bf16_to_f32(src[e]);
    p += n[i];
  }
  return SG_OK;
}

static void attn_bf16_narrow(const float *x, int64_t n, void *y) {
  sg_bf16 *dst = y;
  if (!y) return;
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < n; ++e) dst[e] = sg_bf16_from_f32(x[e]);
}

static sg_status attn_fwd_bf16(const sg_attn_geom *g, const void *q,
                               const void *k, const void *v, void *o,
                               float *lse, void *ws) {
  const int64_t nqe = g->bh * g->nq * g->d, nke = g->bh * g->nk * g->d;
  const void *in[4] = {q, k, v, NULL};
  const int64_t n[4] = {nqe, nke, nke, nqe};
  float *f[4];
  void *own = NULL;
  sg_status st = attn_bf16_widen(4, in, n, f, &own);
  if (st == SG_OK) {
    attn_fwd_f32(g, f[0], f[1], f[2], f[3], lse, ws);
    attn_bf16_narrow(f[3], nqe, o);
  }
  if (own) sg_free(sg_device_host(), &own);
  return st;
}

static sg_status attn_bwd_bf16(const sg_attn_geom *g, const void *const in[5],
                               const float *lse, void *dq, void *dk, void *dv,
                               void *ws) {
  const int64_t nqe = g->bh * g->nq * g->d, nke = g->bh * g->nk * g->d;
  const void *all[8] = {in[0], in[1], in[2], in[3], in[4], NULL, NULL, NULL};
  const int64_t n[8] = {nqe, nke,          nke,          nqe,
                        nqe, dq ? nqe : 0, dk ? nke : 0, dv ? nke : 0};
  float *f[8];
  void *own = NULL;
  sg_status st = attn_bf16_widen(8, all, n, f, &own);
  if (st == SG_OK) {
    attn_bwd_f32(g, f[0], f[1], f[2], f[3], lse, f[4], f[5], f[6], f[7], ws);
    attn_bf16_narrow(f[5], nqe, dq);
    attn_bf16_narrow(f[6], nke, dk);
    attn_bf16_narrow(f[7], nke, dv);
  }
  if (own) sg_free(sg_device_host(), &own);
  return st;
}

/* ---- checks, geometry, dispatch ----------------------------------------- */

/* bf16 (storage) for forward and backward, not for the merge */
static sg_status sg_attn_check_dt(sg_dtype dt, int bf16) {
  sg_status st = SG_OK;
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64 &&
      !(bf16 && dt == SG_DTYPE_BF16))
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "attention%s takes f32%s or f64, not %s",
             bf16 ? "" : " merge", bf16 ? ", bf16" : "", sg_dtype_name(dt));
fail:
  return st;
}

static sg_status sg_attn_geom_make(const sg_attn_desc *d, sg_dtype dt,
                                   sg_attn_geom *g) {
  sg_status st = SG_OK;
  memset(g, 0, sizeof *g);
  if (!d) SG_RAISE(SG_ERR_INVALID_ARG, "attention descriptor is NULL");
  SG_TRY(sg_attn_check_dt(dt, 1));
  if (d->batch < 0 || d->heads < 0 || d->nq < 0 || d->nk < 0)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "attention: negative size (batch %lld, heads %lld, "
             "nq %lld, nk %lld)",
             (long long)d->batch, (long long)d->heads, (long long)d->nq,
             (long long)d->nk);
  /* the tile GEMMs take int leading dimensions and sizes */
  if (d->head_dim < 1 || d->head_dim > INT_MAX / SG_ATTN_BK)
    SG_RAISE(SG_ERR_INVALID_ARG, "attention: head_dim must be 1..%d, got %lld",
             INT_MAX / SG_ATTN_BK, (long long)d->head_dim);
  if (!isfinite(d->scale))
    SG_RAISE(SG_ERR_INVALID_ARG, "attention: scale must be finite, got %g",
             d->scale);
  if (d->causal != 0 && d->causal != 1)
    SG_RAISE(SG_ERR_INVALID_ARG, "attention: causal must be 0 or 1, got %d",
             d->causal);
  /* positions plus the offset must not overflow */
  if (d->causal &&
      (d->causal_offset > INT64_MAX / 4 || d->causal_offset < -(INT64_MAX / 4)))
    SG_RAISE(SG_ERR_INVALID_ARG, "attention: causal_offset %lld out of range",
             (long long)d->causal_offset);
  g->bh = d->batch * d->heads;
  g->nq = d->nq;
  g->nk = d->nk;
  g->d = d->head_dim;
  g->scale = d->scale != 0 ? d->scale : 1 / sqrt((double)d->head_dim);
  g->causal = d->causal;
  g->offset = d->causal ? d->causal_offset : 0;
#ifdef _OPENMP
  g->nthreads = omp_get_max_threads();
#else
  g->nthreads = 1;
#endif
  /* bf16 runs the f32 kernel (below) */
  size_t esz = dt == SG_DTYPE_BF16 ? sizeof(float) : sg_dtype_size(dt);
  /* forward: q^T of a query tile, a score tile, 3 statistics per query;
   * backward: q^T and dout^T of a head, D, two score tiles */
  size_t fwd = (size_t)(SG_ATTN_BQ * (d->head_dim + SG_ATTN_BK + 3));
  size_t bwd = (size_t)(2 * SG_ATTN_BQ * SG_ATTN_BK) +
               (size_t)(d->nq * (2 * d->head_dim + 1));
  g->ws_per_thread = ((fwd > bwd ? fwd : bwd) * esz + 63) / 64 * 64;
fail:
  return st;
}

size_t sg_attention_workspace_bytes(const sg_attn_desc *d, sg_dtype dt) {
  sg_attn_geom g;
  if (sg_attn_geom_make(d, dt, &g) != SG_OK) return 0;
  return (size_t)g.nthreads * g.ws_per_thread;
}

static sg_status sg_attn_ws_get(const sg_attn_geom *g, void *given, void **ws,
                                void **own) {
  *own = NULL;
  *ws = given;
  if (given) return SG_OK;
  sg_status st = sg_malloc(sg_device_host(),
                           (size_t)g->nthreads * g->ws_per_thread, own);
  *ws = *own;
  return st;
}

#define SG_ATTN_PTR(p)                                                   \
  do {                                                                   \
    if (!(p)) SG_RAISE(SG_ERR_INVALID_ARG, "attention: %s is NULL", #p); \
  } while (0)

sg_status sg_attention_forward(const sg_attn_desc *d, sg_dtype dt,
                               const void *q, const void *k, const void *v,
                               void *o, void *lse, void *ws) {
  sg_status st = SG_OK;
  sg_attn_geom g;
  void *own = NULL;
  SG_TRY(sg_attn_geom_make(d, dt, &g));
  SG_ATTN_PTR(q);
  SG_ATTN_PTR(k);
  SG_ATTN_PTR(v);
  SG_ATTN_PTR(o);
  if (g.bh == 0 || g.nq == 0) goto fail;
  SG_TRY(sg_attn_ws_get(&g, ws, &ws, &own));
  if (dt == SG_DTYPE_BF16)
    SG_TRY(attn_fwd_bf16(&g, q, k, v, o, lse, ws));
  else if (dt == SG_DTYPE_F32)
    attn_fwd_f32(&g, q, k, v, o, lse, ws);
  else
    attn_fwd_f64(&g, q, k, v, o, lse, ws);
fail:
  if (own) sg_free(sg_device_host(), &own);
  return st;
}

sg_status sg_attention_backward(const sg_attn_desc *d, sg_dtype dt,
                                const void *q, const void *k, const void *v,
                                const void *o, const void *lse,
                                const void *dout, void *dq, void *dk, void *dv,
                                void *ws) {
  sg_status st = SG_OK;
  sg_attn_geom g;
  void *own = NULL;
  SG_TRY(sg_attn_geom_make(d, dt, &g));
  SG_ATTN_PTR(q);
  SG_ATTN_PTR(k);
  SG_ATTN_PTR(v);
  SG_ATTN_PTR(o);
  SG_ATTN_PTR(lse);
  SG_ATTN_PTR(dout);
  if (g.bh == 0 || (!dq && !dk && !dv)) goto fail;
  SG_TRY(sg_attn_ws_get(&g, ws, &ws, &own));
  if (dt == SG_DTYPE_BF16) {
    const void *in[5] = {q, k, v, o, dout};
    SG_TRY(attn_bwd_bf16(&g, in, lse, dq, dk, dv, ws));
  } else if (dt == SG_DTYPE_F32) {
    attn_bwd_f32(&g, q, k, v, o, lse, dout, dq, dk, dv, ws);
  } else {
    attn_bwd_f64(&g, q, k, v, o, lse, dout, dq, dk, dv, ws);
  }
fail:
  if (own) sg_free(sg_device_host(), &own);
  return st;
}

sg_status sg_attention_merge(sg_dtype dt, int64_t rows, int64_t head_dim,
                             void *o, void *lse, const void *o_b,
                             const void *lse_b) {
  sg_status st = SG_OK;
  SG_TRY(sg_attn_check_dt(dt, 0));
  if (rows < 0 || head_dim < 1)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "attention merge: rows must be >= 0 and head_dim >= 1, "
             "got %lld, %lld",
             (long long)rows, (long long)head_dim);
  SG_ATTN_PTR(o);
  SG_ATTN_PTR(lse);
  SG_ATTN_PTR(o_b);
  SG_ATTN_PTR(lse_b);
  if (dt == SG_DTYPE_F32)
    attn_merge_f32(rows, head_dim, o, lse, o_b, lse_b);
  else
    attn_merge_f64(rows, head_dim, o, lse, o_b, lse_b);
fail:
  return st;
}
