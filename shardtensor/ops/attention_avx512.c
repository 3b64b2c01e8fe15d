/* shardgrid — the fused attention's f32 kernel on AVX-512F: register-
 * blocked tile GEMMs, the online softmax in base 2 with a 1-ulp 2^x
 * (sg_exp512.h), gathered transposes; the tiling and the drivers are
 * attention_tmpl.h's, as for the portable kernel (attention.c).
 * This file is compiled with its own -mavx512f -mfma whatever SG_NATIVE
 * says (shardtensor/ops/CMakeLists.txt), so a library built for the
 * baseline x86-64 has it; attention.c enters it only where
 * sg_attn_avx512_built() and the CPU has AVX-512F (sg_simd_avx512: cpuid
 * and the OS's register state; SG_SIMD=portable rules it out). Where the
 * compiler cannot target AVX-512F the file builds empty. docs/attention.md. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention_kern.h"
#include "ops_impl.h"
#include "sg_ops_inl.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "sg_exp512.h"

int sg_attn_avx512_built(void) { return 1; }

/* ---- tile GEMMs -----------------------------------------------------------
 * c (m x n, row stride ldc) (+)= a b, a's element (r, p) at a[r*ar + p*ac]
 * (so a transposed operand needs no copy), b (k x n) with row stride ldb.
 * Register-blocked: no packing, tiles straight from L1/L2 (a BLAS packs
 * both operands on every call, and OpenBLAS 0.3.21 does not know this CPU
 * and runs its SSE3 "Prescott" kernels). Each element sums over p in
 * increasing order (one FMA each): the same bits for every thread count. */
enum { AT_MR = 6, AT_NV = 4 }; /* 6 rows x 64 columns: 24 accumulators */

/* c's row r as the accumulator starts it: rs[r] c (the forward's
 * rescale by alpha, folded in: the same product the separate pass rounded)
 * or c itself (rs NULL). */
static inline __m512 at_cload(__mmask16 m, const float *c, const float *rs,
                              int r) {
  const __m512 x = _mm512_maskz_loadu_ps(m, c);
  return rs ? _mm512_mul_ps(x, _mm512_set1_ps(rs[r])) : x;
}

/* One register tile: MR rows of c over NV vectors of 16 columns (masks m);
 * a's element (r, p) at a[r * AR + p * AC] (AR, AC: ar, ac or constants);
 * acc: c (scaled by rs, if not NULL) accumulated into, else overwritten.
 * FULL (every mask all ones): b's rows by plain loads — a masked load in
 * the inner loop costs a vector-port uop besides the load, and those ports
 * are the FMAs' (measured: the 6 x 4 tile ~12% faster in L1). */
#define AT_TILE_AT(NAME, MR, NV, AR, AC, FULL)                            \
  static void NAME(int64_t k, const float *a, int64_t ar, int64_t ac,     \
                   const float *b, int64_t ldb, float *c, int64_t ldc,    \
                   int acc, const float *rs, const __mmask16 *m) {        \
    (void)ar;                                                             \
    (void)ac;                                                             \
    __m512 cr[MR][NV];                                                    \
    _Pragma("GCC unroll 16")                                              \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 4")                  \
    for (int v = 0; v < NV; ++v)                                          \
      cr[r][v] = acc ? at_cload(m[v], c + r * ldc + 16 * v, rs, r)        \
                     : _mm512_setzero_ps();                               \
    for (int64_t p = 0; p < k; ++p) {                                     \
      __m512 bv[NV];                                                      \
      _Pragma("GCC unroll 4")                                             \
      for (int v = 0; v < NV; ++v)                                        \
        bv[v] = FULL ? _mm512_loadu_ps(b + p * ldb + 16 * v)              \
                     : _mm512_maskz_loadu_ps(m[v], b + p * ldb + 16 * v); \
      _Pragma("GCC unroll 16")                                            \
      for (int r = 0; r < MR; ++r) {                                      \
        const __m512 av = _mm512_set1_ps(a[r * (AR) + p * (AC)]);         \
        _Pragma("GCC unroll 4")                                           \
        for (int v = 0; v < NV; ++v)                                      \
          cr[r][v] = _mm512_fmadd_ps(av, bv[v], cr[r][v]);                \
      }                                                                   \
    }                                                                     \
    _Pragma("GCC unroll 16")                                              \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 4")                  \
    for (int v = 0; v < NV; ++v)                                          \
      _mm512_mask_storeu_ps(c + r * ldc + 16 * v, m[v], cr[r][v]);        \
  }
#define AT_TILE(MR, NV)                              \
  AT_TILE_AT(at_tile_##MR##_##NV, MR, NV, ar, ac, 0) \
  AT_TILE_AT(at_tile_##MR##_##NV##_f, MR, NV, ar, ac, 1)
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
#define AT_NARROW(NAME, MR, NV, AR, AC) \
  AT_TILE_AT(NAME, MR, NV, AR, AC, 0) AT_TILE_AT(NAME##_f, MR, NV, AR, AC, 1)
AT_NARROW(at_tile_16_1_q, 16, 1, 1, ac)
AT_NARROW(at_tile_8_2_q, 8, 2, 1, ac)
AT_NARROW(at_tile_16_1_k, 16, 1, SG_ATTN_BQ, 1)
AT_NARROW(at_tile_8_2_k, 8, 2, SG_ATTN_BQ, 1)

typedef void (*at_tile_fn)(int64_t, const float *, int64_t, int64_t,
                           const float *, int64_t, float *, int64_t, int,
                           const float *, const __mmask16 *);
#define AT_ROW(MR, F)                                                    \
  {                                                                      \
    NULL, at_tile_##MR##_1##F, at_tile_##MR##_2##F, at_tile_##MR##_3##F, \
        at_tile_##MR##_4##F                                              \
  }
#define AT_ROWS(F)                                                  \
  {                                                                 \
    {NULL}, AT_ROW(1, F), AT_ROW(2, F), AT_ROW(3, F), AT_ROW(4, F), \
        AT_ROW(5, F), AT_ROW(6, F)                                  \
  }
/* [full][mr][nv] */
static const at_tile_fn at_tiles[2][AT_MR + 1][AT_NV + 1] = {AT_ROWS(),
                                                             AT_ROWS(_f)};
/* [full][layout][nv] */
static const at_tile_fn at_tiles_narrow[2][2][3] = {
    {{NULL, at_tile_16_1_q, at_tile_8_2_q},
     {NULL, at_tile_16_1_k, at_tile_8_2_k}},
    {{NULL, at_tile_16_1_q_f, at_tile_8_2_q_f},
     {NULL, at_tile_16_1_k_f, at_tile_8_2_k_f}}};
static const int at_mr_narrow[3] = {0, 16, 8};

/* Rows of the next register tile with left rows to go: 6, but the last
 * 7, 8 or 9 rows as 4 + 3, 4 + 4, 5 + 4 rather than 6 + a tile of 1 to 3
 * rows, whose 4 to 12 accumulators leave the FMA pipes waiting on their
 * latency (the 128-key score tiles: 21 x 6 + 2). Each element's sum is
 * the same either way. */
static inline int at_rows(int64_t left) {
  if (left <= AT_MR) return (int)left;
  if (left <= AT_MR + 3) return (int)(left + 1) / 2;
  return AT_MR;
}

/* rs (acc only; NULL: none): c's row r scaled by rs[r] before the sum */
static void at_gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t ar,
                    int64_t ac, const float *b, int64_t ldb, float *c,
                    int64_t ldc, int acc, const float *rs) {
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
    const int full = len == 16 * nv; /* the same sums either way */
    const int lay = ar == 1 ? 0 : ac == 1 && ar == SG_ATTN_BQ ? 1 : -1;
    if (nv <= 2 && lay >= 0) /* the same sums in the same order: same bits */
      for (; r0 + at_mr_narrow[nv] <= m; r0 += at_mr_narrow[nv])
        at_tiles_narrow[full][lay][nv](k, a + r0 * ar, ar, ac, b + n0, ldb,
                                       c + r0 * ldc + n0, ldc, acc,
                                       rs ? rs + r0 : NULL, msk);
    for (int mr; r0 < m; r0 += mr) {
      mr = at_rows(m - r0);
      at_tiles[full][mr][nv](k, a + r0 * ar, ar, ac, b + n0, ldb,
                             c + r0 * ldc + n0, ldc, acc, rs ? rs + r0 : NULL,
                             msk);
    }
  }
}

static void attn_gemm_f32x(int64_t m, int64_t n, int64_t k, const float *a,
                           int64_t ar, int64_t ac, const float *b, int64_t ldb,
                           float *c, int64_t ldc, int acc) {
  at_gemm(m, n, k, a, ar, ac, b, ldb, c, ldc, acc, NULL);
}

/* The forward's o = al o + p v (p: the key-major score tile, bk x bq). */
static void attn_pv_avx512(int64_t bq, int64_t d, int64_t bk, const float *st,
                           const float *v, float *o, const float *al) {
  at_gemm(bq, d, bk, st, 1, SG_ATTN_BQ, v, d, o, d, 1, al);
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

#define R float
#define S f32x
#define SG_ASOFTMAX attn_fwd_softmax_avx512
#define SG_ABASE2 1
#define SG_ATRANSPOSE attn_transpose_avx512
#define SG_ABWDPROBS attn_bwd_probs_avx512
#define SG_APV attn_pv_avx512
#define SG_ANO_MERGE
#define SG_AEXP sg_expf
#define SG_AMEXP expf
#define SG_ALOG logf
#include "attention_tmpl.h"

void sg_attn_fwd_f32_avx512(const sg_attn_geom *g, const float *q,
                            const float *k, const float *v, float *o,
                            float *lse, void *ws) {
  attn_fwd_f32x(g, q, k, v, o, lse, ws);
}

void sg_attn_bwd_f32_avx512(const sg_attn_geom *g, const float *q,
                            const float *k, const float *v, const float *o,
                            const float *lse, const float *dout, float *dq,
                            float *dk, float *dv, void *ws) {
  attn_bwd_f32x(g, q, k, v, o, lse, dout, dq, dk, dv, ws);
}

/* ---- bf16 forward on AVX-512 BF16 (vdpbf16ps) -----------------------------
 * q, k, v, o in bf16, lse f32; the tiles, the online softmax (base 2, f32,
 * attn_fwd_softmax_avx512) and the schedule of attn_fwd. vdpbf16ps takes
 * pairs of the reduction dimension side by side in each 32-bit lane
 * (lane l of b: elements 2p and 2p + 1 of column l) and sums their two
 * exact bf16 products into an f32 accumulator, so:
 *   S = k q^T: a = k's pairs (kp, a head's keys, packed once per thread and
 *     head), b = the query tile's pairs transposed (qp, per tile), the
 *     scale times log2 e applied to the f32 sums;
 *   o = al o + P v: a = P rounded to bf16 (FlashAttention's rounding of
 *     the probabilities before P·V), pairs of keys (pp, per tile), b = v's
 *     key pairs (vp, packed with kp), o accumulated in f32 (ot).
 * The softmax statistics (m, l, lse) stay f32 and l sums the unrounded
 * probabilities. Pads (odd head_dim, odd key count, a partial query tile,
 * head_dim up to a multiple of 16) are zeros, so every load is a full
 * vector. Entered where sg_attn_bf16_avx512_ok() (opt-in, cpuid
 * avx512_bf16). */
#define BT_TARGET __attribute__((target("avx512f,avx512bf16")))
#define BT_D16(d) (((d) + 15) / 16 * 16)
#define BT_DPP(d) (((d) + 31) / 32 * 16) /* pairs of d, to whole AMX rows */
#define BT_NK(nk) (((nk) + SG_ATTN_BK - 1) / SG_ATTN_BK * SG_ATTN_BK)

static inline uint32_t bt_pair(uint16_t lo, uint16_t hi) {
  return (uint32_t)lo | (uint32_t)hi << 16;
}

/* One register tile: MR rows of c over NV vectors of 16 columns, kp pairs;
 * a's pair (r, p) at a[r * ar + p * ap]; c = (rs ? rs[r] c : 0) + a b,
 * stored times post. */
#define BT_TILE(MR, NV)                                                     \
  static BT_TARGET void bt_tile_##MR##_##NV(int64_t kp, const uint32_t *a,  \
                                            int64_t ar, int64_t ap,         \
                                            const uint32_t *b, int64_t ldb, \
                                            float *c, int64_t ldc,          \
                                            const float *rs, float post) {  \
    __m512 cr[MR][NV];                                                      \
    _Pragma("GCC unroll 6")                                                 \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 4")                    \
    for (int v = 0; v < NV; ++v)                                            \
      cr[r][v] = rs ? _mm512_mul_ps(_mm512_loadu_ps(c + r * ldc + 16 * v),  \
                                    _mm512_set1_ps(rs[r]))                  \
                    : _mm512_setzero_ps();                                  \
    for (int64_t p = 0; p < kp; ++p) {                                      \
      __m512i bv[NV];                                                       \
      _Pragma("GCC unroll 4")                                               \
      for (int v = 0; v < NV; ++v)                                          \
        bv[v] = _mm512_loadu_si512(b + p * ldb + 16 * v);                   \
      _Pragma("GCC unroll 6")                                               \
      for (int r = 0; r < MR; ++r) {                                        \
        const __m512i av = _mm512_set1_epi32((int)a[r * ar + p * ap]);      \
        _Pragma("GCC unroll 4")                                             \
        for (int v = 0; v < NV; ++v)                                        \
          cr[r][v] = _mm512_dpbf16_ps(cr[r][v], (__m512bh)av,               \
                                      (__m512bh)bv[v]);                     \
      }                                                                     \
    }                                                                       \
    const __m512 ps = _mm512_set1_ps(post);                                 \
    _Pragma("GCC unroll 6")                                                 \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 4")                    \
    for (int v = 0; v < NV; ++v)                                            \
      _mm512_storeu_ps(c + r * ldc + 16 * v, _mm512_mul_ps(cr[r][v], ps));  \
  }
#define BT_TILES(MR) BT_TILE(MR, 1) BT_TILE(MR, 2) BT_TILE(MR, 3) BT_TILE(MR, 4)
BT_TILES(1)
BT_TILES(2)
BT_TILES(3)
BT_TILES(4)
BT_TILES(5)
BT_TILES(6)
typedef void (*bt_tile_fn)(int64_t, const uint32_t *, int64_t, int64_t,
                           const uint32_t *, int64_t, float *, int64_t,
                           const float *, float);
#define BT_ROW(MR)                                              \
  {                                                             \
    NULL, bt_tile_##MR##_1, bt_tile_##MR##_2, bt_tile_##MR##_3, \
        bt_tile_##MR##_4                                        \
  }
static const bt_tile_fn bt_tiles[AT_MR + 1][AT_NV + 1] = {
    {NULL}, BT_ROW(1), BT_ROW(2), BT_ROW(3), BT_ROW(4), BT_ROW(5), BT_ROW(6)};

/* c (m x 16 nv, row stride ldc) as in the tile above, kp pairs */
static void bt_gemm(int64_t m, int64_t nv, int64_t kp, const uint32_t *a,
                    int64_t ar, int64_t ap, const uint32_t *b, int64_t ldb,
                    float *c, int64_t ldc, const float *rs, float post) {
  for (int64_t v0 = 0; v0 < nv; v0 += AT_NV) {
    const int n = (int)(nv - v0 < AT_NV ? nv - v0 : AT_NV);
    for (int64_t r0 = 0, mr; r0 < m; r0 += mr) {
      mr = at_rows(m - r0);
      bt_tiles[mr][n](kp, a + r0 * ar, ar, ap, b + 16 * v0, ldb,
                      c + r0 * ldc + 16 * v0, ldc, rs ? rs + r0 : NULL, post);
    }
  }
}

/* A head's keys [j0, j1) packed (j0 even): kp, rows of BT_DPP(d) pairs
 * (zeros past d); with amx, vp is v transposed, rows of BT_NK(nk) / 2 key
 * pairs per column c < d16 (keys j1 .. the end of their key tile zero:
 * the AMX tiles read whole 16-pair blocks), else rows of d16 columns per
 * key pair. */
static void bt_pack_kv(const sg_attn_geom *g, const uint16_t *k,
                       const uint16_t *v, int64_t j0, int64_t j1, int amx,
                       uint32_t *kp, uint32_t *vp) {
  const int64_t d = g->d, dpp = BT_DPP(d), d16 = BT_D16(d),
                nk2 = BT_NK(g->nk) / 2;
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t p = 0; p < dpp; ++p)
      kp[j * dpp + p] = 2 * p >= d
                            ? 0
                            : bt_pair(k[j * d + 2 * p],
                                      2 * p + 1 < d ? k[j * d + 2 * p + 1] : 0);
  const int64_t jj1 = amx ? BT_NK(j1) / 2 : (j1 + 1) / 2;
  for (int64_t jj = j0 / 2; jj < jj1; ++jj)
    for (int64_t c = 0; c < d16; ++c) {
      const int64_t a = 2 * jj, b = 2 * jj + 1;
      const uint32_t x = c >= d || a >= g->nk
                             ? 0
                             : bt_pair(v[a * d + c],
                                       b < g->nk ? v[b * d + c] : 0);
      vp[amx ? c * nk2 + jj : jj * d16 + c] = x;
    }
}

/* The query tile's pairs, transposed: qp[p * BQ + i] (rows i >= bq zero) */
static void bt_pack_q(const uint16_t *q, int64_t bq, int64_t d, uint32_t *qp) {
  const int64_t dp = (d + 1) / 2;
  memset(qp, 0, (size_t)(BT_DPP(d) * SG_ATTN_BQ) * sizeof *qp);
  for (int64_t i = 0; i < bq; ++i)
    for (int64_t p = 0; p < dp; ++p)
      qp[p * SG_ATTN_BQ + i] = bt_pair(
          q[i * d + 2 * p], 2 * p + 1 < d ? q[i * d + 2 * p + 1] : 0);
}

/* The probabilities (key-major f32, bk x BQ) rounded to bf16, key pairs
 * side by side: pp[jj * BQ + i]; an odd last key paired with zero; rows
 * (bk + 1) / 2 .. rows zero. */
static BT_TARGET void bt_pack_p(const float *st, int64_t bk, int64_t rows,
                                uint32_t *pp) {
  memset(pp + (bk + 1) / 2 * SG_ATTN_BQ, 0,
         (size_t)((rows - (bk + 1) / 2) * SG_ATTN_BQ) * sizeof *pp);
  for (int64_t jj = 0; jj < (bk + 1) / 2; ++jj)
    for (int v = 0; v < SG_ATTN_BQ / 16; ++v) {
      const float *r0 = st + 2 * jj * SG_ATTN_BQ + 16 * v;
      const __m512 hi = 2 * jj + 1 < bk ? _mm512_loadu_ps(r0 + SG_ATTN_BQ)
                                        : _mm512_setzero_ps();
      const __m512i lo16 = _mm512_cvtepu16_epi32(
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(r0))),
                    hi16 = _mm512_cvtepu16_epi32(
                        (__m256i)_mm512_cvtneps_pbh(hi));
      _mm512_storeu_si512(pp + jj * SG_ATTN_BQ + 16 * v,
                          _mm512_or_si512(lo16, _mm512_slli_epi32(hi16, 16)));
    }
}

/* A thread's bf16 workspace (32-bit words): qp, st, pp, ot, m, l, al, then
 * the head's packed kp and vp. */
typedef struct bt_ws {
  uint32_t *qp, *pp, *kp, *vp;
  float *st, *ot, *m, *l, *al;
} bt_ws;

static int64_t bt_tile_words(int64_t d) {
  const int64_t BQ = SG_ATTN_BQ;
  return BT_DPP(d) * BQ + SG_ATTN_BK * BQ + SG_ATTN_BK / 2 * BQ +
         BQ * BT_D16(d) + 3 * BQ;
}

size_t sg_attn_bf16_ws_bytes(int64_t nk, int64_t d) {
  return (size_t)(bt_tile_words(d) + BT_NK(nk) * BT_DPP(d) +
                  BT_NK(nk) / 2 * BT_D16(d)) *
         4;
}

static bt_ws bt_ws_split(const sg_attn_geom *g, void *base) {
  const int64_t d = g->d, BQ = SG_ATTN_BQ;
  float *f = base;
  bt_ws w;
  w.qp = (uint32_t *)f;
  w.st = f + BT_DPP(d) * BQ;
  w.pp = (uint32_t *)(w.st + SG_ATTN_BK * BQ);
  w.ot = (float *)(w.pp + SG_ATTN_BK / 2 * BQ);
  w.m = w.ot + BQ * BT_D16(d);
  w.l = w.m + BQ;
  w.al = w.l + BQ;
  w.kp = (uint32_t *)(f + bt_tile_words(d));
  w.vp = w.kp + BT_NK(g->nk) * BT_DPP(d);
  return w;
}

/* ---- the same tiles on AMX (tdpbf16ps): 16 x 16 f32 C tiles, A tiles of
 * 16 rows x 16 pairs, B tiles of 16 pair rows x 16 columns; the pair
 * layouts above are AMX's B layout, so only v is packed differently
 * (transposed: o^T = v^T P^T, the C tiles 16 columns of o x 16 queries,
 * B = pp as packed). Tile config and the OS's grant of the tile state:
 * conv_amx.c's (sg_amx_conv_supported). */
#if (defined(__clang__) && __clang_major__ >= 12) || \
    (!defined(__clang__) && __GNUC__ >= 11)
#define SG_ATTN_AMX 1 /* the compiler knows the AMX target */
#endif
#ifdef SG_ATTN_AMX
#define AM_TARGET __attribute__((target("amx-tile,amx-bf16")))
#define AM_LD (4 * SG_ATTN_BQ) /* bytes per row of st, qp, pp, ot */

static AM_TARGET void am_config(void) {
  struct {
    uint8_t palette, start, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

static AM_TARGET void am_release(void) { _tile_release(); }

/* C tiles 0-3 (+)= A (tile 4, loaded by the caller) times the four 16-query
 * column blocks of the pair rows b (16 rows, AM_LD apart). */
#define AM_ROW4(b)                   \
  do {                               \
    _tile_loadd(5, (b), AM_LD);      \
    _tile_dpbf16ps(0, 4, 5);         \
    _tile_loadd(6, (b) + 16, AM_LD); \
    _tile_dpbf16ps(1, 4, 6);         \
    _tile_loadd(7, (b) + 32, AM_LD); \
    _tile_dpbf16ps(2, 4, 7);         \
    _tile_loadd(5, (b) + 48, AM_LD); \
    _tile_dpbf16ps(3, 4, 5);         \
  } while (0)
#define AM_STORE4(c)                  \
  do {                                \
    _tile_stored(0, (c), AM_LD);      \
    _tile_stored(1, (c) + 16, AM_LD); \
    _tile_stored(2, (c) + 32, AM_LD); \
    _tile_stored(3, (c) + 48, AM_LD); \
  } while (0)

/* st (keys rounded up to 16 rows x BQ) = kp qp: dpp pairs (rows of kp) */
static AM_TARGET void am_scores(int64_t bk, int64_t dpp, const uint32_t *kp,
                                const uint32_t *qp, float *st) {
  for (int64_t j = 0; j < bk; j += 16) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t p = 0; p < dpp; p += 16) {
      _tile_loadd(4, kp + j * dpp + p, 4 * dpp);
      AM_ROW4(qp + p * SG_ATTN_BQ);
    }
    AM_STORE4(st + j * SG_ATTN_BQ);
  }
}

/* ot (d16 columns of o x BQ, transposed) += vt pp over np2 key pairs (a
 * multiple of 16; vt: rows of ldv pairs per column of o) */
static AM_TARGET void am_pv(int64_t d16, int64_t np2, const uint32_t *vt,
                            int64_t ldv, const uint32_t *pp, float *ot) {
  for (int64_t c = 0; c < d16; c += 16) {
    float *o = ot + c * SG_ATTN_BQ;
    _tile_loadd(0, o, AM_LD);
    _tile_loadd(1, o + 16, AM_LD);
    _tile_loadd(2, o + 32, AM_LD);
    _tile_loadd(3, o + 48, AM_LD);
    for (int64_t p = 0; p < np2; p += 16) {
      _tile_loadd(4, vt + c * ldv + p, 4 * ldv);
      AM_ROW4(pp + p * SG_ATTN_BQ);
    }
    AM_STORE4(o);
  }
}

/* rows [0, n) of a BQ-wide f32 array: x[r][i] *= s[i] (s NULL: by s0) */
static void am_scale(float *x, int64_t n, const float *s, float s0) {
  for (int v = 0; v < SG_ATTN_BQ / 16; ++v) {
    const __m512 f = s ? _mm512_loadu_ps(s + 16 * v) : _mm512_set1_ps(s0);
    for (int64_t r = 0; r < n; ++r) {
      float *p = x + r * SG_ATTN_BQ + 16 * v;
      _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_loadu_ps(p), f));
    }
  }
}

#else /* no AMX: never called (sg_attn_bf16_avx512_mode is not 2) */
static void am_config(void) {}
static void am_release(void) {}
static void am_scores(int64_t bk, int64_t dpp, const uint32_t *kp,
                      const uint32_t *qp, float *st) {
  (void)bk, (void)dpp, (void)kp, (void)qp, (void)st;
}
static void am_pv(int64_t d16, int64_t np2, const uint32_t *vt, int64_t ldv,
                  const uint32_t *pp, float *ot) {
  (void)d16, (void)np2, (void)vt, (void)ldv, (void)pp, (void)ot;
}
static void am_scale(float *x, int64_t n, const float *s, float s0) {
  (void)x, (void)n, (void)s, (void)s0;
}
#endif

/* One query tile (rows i0 .. i0 + bq of a head; kp, vp hold its keys
 * [0, sg_attn_key_end)): o (bf16) and lse, as attn_fwd_tile; amx: the
 * tiles above (ot transposed), else the vdpbf16ps register tiles. */
static void bt_fwd_tile(const sg_attn_geom *g, const bt_ws *w, int amx,
                        const uint16_t *q, uint16_t *o, float *lse, int64_t i0,
                        int64_t bq) {
  const int64_t d = g->d, d16 = BT_D16(d), dp = (d + 1) / 2, BQ = SG_ATTN_BQ,
                dpp = BT_DPP(d), nk2 = BT_NK(g->nk) / 2;
  bt_pack_q(q, bq, d, w->qp);
  memset(w->ot, 0, (size_t)(BQ * d16) * sizeof(float));
  for (int64_t i = 0; i < BQ; ++i) {
    w->m[i] = -INFINITY;
    w->l[i] = 0;
  }
  const float post = (float)(g->scale * 1.4426950408889634);
  const int64_t kend = sg_attn_key_end(g, i0 + bq);
  for (int64_t j0 = 0; j0 < kend; j0 += SG_ATTN_BK) {
    const int64_t bk = kend - j0 < SG_ATTN_BK ? kend - j0 : SG_ATTN_BK;
    /* st = k q^T scale log2 e */
    if (amx) {
      am_scores(bk, dpp, w->kp + j0 * dpp, w->qp, w->st);
      am_scale(w->st, bk, NULL, post);
    } else {
      bt_gemm(bk, BQ / 16, dp, w->kp + j0 * dpp, dpp, 1, w->qp, BQ, w->st, BQ,
              NULL, post);
    }
    attn_fwd_softmax_avx512(g, w->st, bk, bq, i0, j0, w->m, w->l, w->al);
    const int64_t np2 = amx ? ((bk + 1) / 2 + 15) / 16 * 16 : (bk + 1) / 2;
    bt_pack_p(w->st, bk, np2, w->pp);
    if (amx) { /* ot = al ot + p v, transposed */
      am_scale(w->ot, d16, w->al, 1);
      am_pv(d16, np2, w->vp + j0 / 2, nk2, w->pp, w->ot);
    } else {
      bt_gemm(bq, d16 / 16, np2, w->pp, 1, BQ, w->vp + j0 / 2 * d16, d16, w->ot,
              d16, w->al, 1);
    }
  }
  for (int64_t i = 0; i < bq; ++i) {
    const float l = w->l[i], inv = l > 0 ? 1 / l : 0;
    for (int64_t c = 0; c < d; ++c)
      o[i * d + c] =
          sg_bf16_from_f32(w->ot[amx ? c * BQ + i : i * d16 + c] * inv).bits;
    if (lse)
      lse[i] = l > 0 ? w->m[i] * 0.69314718055994531f + logf(l) : -INFINITY;
  }
}

void sg_attn_fwd_bf16_avx512(const sg_attn_geom *g, int mode, const void *q,
                             const void *k, const void *v, void *o, float *lse,
                             void *ws) {
  const int64_t nqb = (g->nq + SG_ATTN_BQ - 1) / SG_ATTN_BQ,
                ntask = g->bh * nqb, d = g->d;
  const uint16_t *q16 = q, *k16 = k, *v16 = v;
  uint16_t *o16 = o;
  const int amx = mode == 2;
#pragma omp parallel num_threads(g->nthreads) if (g->nthreads > 1 && ntask > 1)
  {
    const bt_ws w = bt_ws_split(g, sg_attn_thread_ws(g, ws));
    int64_t head = -1, packed = 0; /* keys [0, packed) of head in kp, vp */
    if (amx) am_config();          /* per thread */
      /* the forward's schedule: tasks of a head in a row, so a thread packs
     * a head's keys once */
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < ntask; ++t) {
      const int64_t h = t / nqb, i0 = (nqb - 1 - t % nqb) * SG_ATTN_BQ;
      const int64_t bq = g->nq - i0 < SG_ATTN_BQ ? g->nq - i0 : SG_ATTN_BQ;
      const int64_t kend = sg_attn_key_end(g, i0 + bq);
      if (h != head) head = h, packed = 0;
      if (packed < kend) { /* whole key tiles: pairs never straddle */
        int64_t e = BT_NK(kend);
        e = e < g->nk ? e : g->nk;
        bt_pack_kv(g, k16 + h * g->nk * d, v16 + h * g->nk * d, packed, e, amx,
                   w.kp, w.vp);
        packed = e;
      }
      bt_fwd_tile(g, &w, amx, q16 + (h * g->nq + i0) * d,
                  o16 + (h * g->nq + i0) * d, lse ? lse + h * g->nq + i0 : NULL,
                  i0, bq);
    }
    if (amx) am_release();
  }
}

/* Which bf16 forward (0: none here, the widening path; 1: the vdpbf16ps
 * tiles; 2: AMX). Where the CPU has AMX-BF16 (and Linux grants the tile
 * state) AMX; SG_ATTN_BF16=widen or =tiles picks the others. Not the
 * vdpbf16ps tiles by default: on the Xeon measured vdpbf16ps retires one
 * every 2 cycles (78 GF/s of bf16 products against 150 GF/s of f32 FMAs,
 * a register-only loop of 24 chains each), so they ran the forward slower
 * than the f32 kernel (bench/RESULTS.md). Read on every call, as SG_SIMD. */
int sg_attn_bf16_avx512_mode(void) {
#if !(defined(__AMX_TILE__) && defined(__AVX512BF16__))
  /* A library built for a baseline target (SG_NATIVE=OFF) takes the
   * widening path: there the AMX forward faulted at its first tile
   * instruction (CI's SG_NATIVE=OFF build, test_attention; not understood
   * yet), so the tile paths run only in builds for a CPU that has them. */
  return 0;
#endif
  const char *e = getenv("SG_ATTN_BF16");
  if (!sg_simd_avx512() || !__builtin_cpu_supports("avx512bf16") ||
      (e && !strcmp(e, "widen")))
    return 0;
  if (e && !strcmp(e, "tiles")) return 1;
#ifdef SG_ATTN_AMX
  return sg_amx_conv_supported() ? 2 : 0;
#else
  return 0;
#endif
}

#else

int sg_attn_avx512_built(void) { return 0; }
int sg_attn_bf16_avx512_mode(void) { return 0; }
size_t sg_attn_bf16_ws_bytes(int64_t nk, int64_t d) {
  (void)nk, (void)d;
  return 0;
}
void sg_attn_fwd_bf16_avx512(const sg_attn_geom *g, int mode, const void *q,
                             const void *k, const void *v, void *o, float *lse,
                             void *ws) {
  (void)mode, (void)g, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)ws;
}
void sg_attn_fwd_f32_avx512(const sg_attn_geom *g, const float *q,
                            const float *k, const float *v, float *o,
                            float *lse, void *ws) {
  (void)g, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)ws;
}
void sg_attn_bwd_f32_avx512(const sg_attn_geom *g, const float *q,
                            const float *k, const float *v, const float *o,
                            const float *lse, const float *dout, float *dq,
                            float *dk, float *dv, void *ws) {
  (void)g, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)dout;
  (void)dq, (void)dk, (void)dv, (void)ws;
}

#endif
