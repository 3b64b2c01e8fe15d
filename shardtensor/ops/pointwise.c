/* shardgrid — f32 pointwise (1x1) convolution / channel-wise linear with
 * register-blocked AVX-512 kernels that read the activations in place.
 *
 * The channel-wise linears of an FNO are GEMMs with a short inner
 * dimension (32 or 128 channels) and a long pixel axis. A BLAS packs both
 * operands for every call; at these shapes the packing (and the beta pass
 * over C) cost about half as much as the multiply itself (perf: OpenBLAS
 * copy routines 11% of an FNO step beside a 20% kernel). Here:
 *  - y = W x + b and dx (+)= W^T dy: an outer-product tile of PW_MR output
 *    channels (8) x 48 pixels in 24 vector accumulators; per input channel
 *    one row of 48 pixels is loaded and each weight broadcast (8 x 3 beat
 *    6 x 4: no edge tiles at 32 or 128 channels). The weight matrix is
 *    read through (row, col) strides, so W^T needs no copy; the bias is
 *    the accumulators' initial value.
 *  - dW += dy x^T (and db += the sum of dy, over the same cache-hot
 *    chunks): tiles of PW_MK x PW_MC weights, each a vector of 16
 *    lane partial sums over the pixels; the pixels run in chunks so the
 *    rows of a chunk stay in cache while every tile passes over them. The
 *    lane partials are summed at the end (a fixed order for a given shape,
 *    whatever the thread count: the tiles of a chunk are split across
 *    threads, each tile summed by one thread).
 * Every output element sums its input channels in increasing order, one
 * fused multiply-add each: a pixel's result does not depend on how the
 * pixels are split across ranks or threads.
 * Compiled for AVX-512F whatever the library's target (this file's own
 * flags, shardtensor/ops/CMakeLists.txt) where the compiler can; the
 * callers enter it only when sg_pw_f32_available() (ops.c: built, and the
 * CPU running it has AVX-512F) says so, else they use BLAS. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

#if defined(__AVX512F__)
#include <immintrin.h>

enum {
  PW_NV = 3, /* vectors of 16 pixels per forward tile (48) */
  PW_NP = 16 * PW_NV,
  PW_MR = 8,       /* output channels per forward tile (32 = 4 x 8) */
  PW_MK = 4,       /* dW tile: output channels ... */
  PW_MC = 6,       /* ... times input channels */
  PW_CHUNK = 1024, /* pixels per dW chunk (512: 2-13% slower, 128: 40%) */
  PW_WCHUNK = 256  /* pixels per chunk of the conv's dW (wgrad_acc) */
};

int sg_pw_f32_built(void) { return 1; }

/* One forward tile: MR rows r of y (stride ldy) over up to 48 pixels,
 * y[r] = init + sum_ci w[r*wr + ci*wc] x[ci*ldx]. init: mode 0 bias (or
 * zero without one), mode SG_PW_ACC the current y; mode SG_PW_ADD: init
 * as mode 0, the current y added to the finished sum. `full`: all 48
 * pixels (plain loads and stores), else masks m[]. */
#define PW_TILE(MR, FULL)                                                      \
  static void pw_tile_##MR##_##FULL(int64_t c, const float *w, int64_t wr,     \
                                    int64_t wc, const float *x, int64_t ldx,   \
                                    const int64_t *xoff, const float *b,       \
                                    float *y, int64_t ldy, int accumulate,     \
                                    const __mmask16 *m) {                      \
    __m512 acc[MR][PW_NV];                                                     \
    _Pragma("GCC unroll 8")                                                    \
    for (int r = 0; r < MR; ++r) {                                             \
      _Pragma("GCC unroll 4")                                                  \
      for (int v = 0; v < PW_NV; ++v) {                                        \
        if (accumulate == SG_PW_ACC)                                           \
          acc[r][v] = FULL                                                     \
                          ? _mm512_loadu_ps(y + r * ldy + 16 * v)              \
                          : _mm512_maskz_loadu_ps(m[v], y + r * ldy + 16 * v); \
        else                                                                   \
          acc[r][v] = b ? _mm512_set1_ps(b[r]) : _mm512_setzero_ps();          \
      }                                                                        \
    }                                                                          \
    for (int64_t ci = 0; ci < c; ++ci) {                                       \
      const float *xc = x + (xoff ? xoff[ci] : ci * ldx);                      \
      __m512 xv[PW_NV];                                                        \
      _Pragma("GCC unroll 4")                                                  \
      for (int v = 0; v < PW_NV; ++v)                                          \
        xv[v] = FULL ? _mm512_loadu_ps(xc + 16 * v)                            \
                     : _mm512_maskz_loadu_ps(m[v], xc + 16 * v);               \
      const float *wp = w + ci * wc;                                           \
      _Pragma("GCC unroll 8")                                                  \
      for (int r = 0; r < MR; ++r) {                                           \
        const __m512 wv = _mm512_set1_ps(wp[r * wr]);                          \
        _Pragma("GCC unroll 4")                                                \
        for (int v = 0; v < PW_NV; ++v)                                        \
          acc[r][v] = _mm512_fmadd_ps(wv, xv[v], acc[r][v]);                   \
      }                                                                        \
    }                                                                          \
    _Pragma("GCC unroll 8")                                                    \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 4")                       \
    for (int v = 0; v < PW_NV; ++v) {                                          \
      if (accumulate == SG_PW_ADD)                                             \
        acc[r][v] = _mm512_add_ps(                                             \
            acc[r][v],                                                         \
            FULL ? _mm512_loadu_ps(y + r * ldy + 16 * v)                       \
                 : _mm512_maskz_loadu_ps(m[v], y + r * ldy + 16 * v));         \
      if (FULL)                                                                \
        _mm512_storeu_ps(y + r * ldy + 16 * v, acc[r][v]);                     \
      else                                                                     \
        _mm512_mask_storeu_ps(y + r * ldy + 16 * v, m[v], acc[r][v]);          \
    }                                                                          \
  }

#define PW_TILES(MR) PW_TILE(MR, 1) PW_TILE(MR, 0)
PW_TILES(1)
PW_TILES(2)
PW_TILES(3)
PW_TILES(4)
PW_TILES(5)
PW_TILES(6)
PW_TILES(7)
PW_TILES(8)

typedef void (*pw_tile_fn)(int64_t, const float *, int64_t, int64_t,
                           const float *, int64_t, const int64_t *,
                           const float *, float *, int64_t, int,
                           const __mmask16 *);
static const pw_tile_fn pw_tiles[2][PW_MR + 1] = {
    {NULL, pw_tile_1_0, pw_tile_2_0, pw_tile_3_0, pw_tile_4_0, pw_tile_5_0,
     pw_tile_6_0, pw_tile_7_0, pw_tile_8_0},
    {NULL, pw_tile_1_1, pw_tile_2_1, pw_tile_3_1, pw_tile_4_1, pw_tile_5_1,
     pw_tile_6_1, pw_tile_7_1, pw_tile_8_1}};

/* Strip of up to 48 pixels starting at p0 of the (cout x np) product. */
static inline void pw_strip(int64_t cin, int64_t cout, int64_t np, int64_t p0,
                            const float *w, int64_t wr, int64_t wc,
                            const float *x, int64_t ldx, const int64_t *xoff,
                            const float *b, float *y, int64_t ldy,
                            int accumulate) {
  const int64_t len = np - p0 < PW_NP ? np - p0 : PW_NP;
  const int full = len == PW_NP;
  __mmask16 m[PW_NV];
  for (int v = 0; v < PW_NV; ++v) {
    int64_t l = len - 16 * v;
    l = l < 0 ? 0 : l > 16 ? 16 : l;
    m[v] = (__mmask16)((1u << l) - 1u);
  }
  const int mode = accumulate & (SG_PW_ACC | SG_PW_ADD);
  for (int64_t k0 = 0; k0 < cout; k0 += PW_MR) {
    const int mr = (int)(cout - k0 < PW_MR ? cout - k0 : PW_MR);
    pw_tiles[full][mr](cin, w + k0 * wr, wr, wc, x + p0, ldx, xoff,
                       b ? b + k0 : NULL, y + k0 * ldy + p0, ldy, mode, m);
  }
  /* the strip's rows are still in L1: the bf16 policy's rounding here */
  for (int64_t r = 0; (accumulate & SG_PW_ROUND) && r < cout; ++r)
    sg_round_bf16(y + r * ldy + p0, len);
}

void sg_pw_apply_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                     const float *w, int64_t wr, int64_t wc, const float *x,
                     const float *b, float *y, int accumulate, int nthreads) {
  const int64_t nstrip = (s + PW_NP - 1) / PW_NP, items = n * nstrip;
#pragma omp parallel for schedule(static) \
    num_threads(nthreads) if (nthreads > 1)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t nn = it / nstrip, p0 = (it % nstrip) * PW_NP;
    pw_strip(cin, cout, s, p0, w, wr, wc, x + nn * cin * s, s, NULL, b,
             y + nn * cout * s, s, accumulate);
  }
}

/* Pixels per chunk of the fused linear: its z and a rows stay in L1/L2
 * between the GEMM tiles and the activation (cout 128: 96 KiB). */
enum { PW_ACHUNK = 4 * PW_NP };

void sg_pw_apply_act_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                         const float *w, const float *x, const float *b,
                         int add, float *z, float *a, int nthreads) {
  const int64_t nch = (s + PW_ACHUNK - 1) / PW_ACHUNK, items = n * nch;
#pragma omp parallel for schedule(static) \
    num_threads(nthreads) if (nthreads > 1)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t nn = it / nch, c0 = (it % nch) * PW_ACHUNK,
                  c1 = c0 + PW_ACHUNK < s ? c0 + PW_ACHUNK : s;
    float *zn = z + nn * cout * s;
    for (int64_t p0 = c0; p0 < c1; p0 += PW_NP)
      pw_strip(cin, cout, s, p0, w, cin, 1, x + nn * cin * s, s, NULL, b, zn, s,
               add ? SG_PW_ADD : 0);
    for (int64_t r = 0; a && r < cout; ++r)
      sg_gelu_fwd_seq_f32(c1 - c0, zn + r * s + c0,
                          a + (nn * cout + r) * s + c0);
  }
}

void sg_pw_gemm_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                    int64_t wr, int64_t wc, const float *x, int64_t ldx,
                    const float *b, float *y, int64_t ldy) {
  for (int64_t p0 = 0; p0 < np; p0 += PW_NP)
    pw_strip(cin, cout, np, p0, w, wr, wc, x, ldx, NULL, b, y, ldy, 0);
}

void sg_pw_gemm_off_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                        int64_t wr, int64_t wc, const float *x,
                        const int64_t *xoff, const float *b, float *y,
                        int64_t ldy) {
  for (int64_t p0 = 0; p0 < np; p0 += PW_NP)
    pw_strip(cin, cout, np, p0, w, wr, wc, x, 0, xoff, b, y, ldy, 0);
}

/* One vector v of pixels of a dW tile, read by LD(address): PW_LDU, or
 * PW_LDM (masked by the tile's mt) for the last one. */
#define PW_LDU(p) _mm512_loadu_ps(p)
#define PW_LDM(p) _mm512_maskz_loadu_ps(mt, p)
#define PW_WSTEP(MK, MC, LD, v)                                       \
  {                                                                   \
    __m512 dv[MK];                                                    \
    _Pragma("GCC unroll 4")                                           \
    for (int i = 0; i < MK; ++i) dv[i] = LD(dy + i * ldd + 16 * (v)); \
    _Pragma("GCC unroll 6")                                           \
    for (int j = 0; j < MC; ++j) {                                    \
      const __m512 xv = LD(xr[j] + 16 * (v));                         \
      _Pragma("GCC unroll 4")                                         \
      for (int i = 0; i < MK; ++i)                                    \
        acc[i][j] = _mm512_fmadd_ps(dv[i], xv, acc[i][j]);            \
    }                                                                 \
  }

/* One dW tile over `nv` vectors of pixels (the last one masked by `mt`):
 * part[(i * MC + j) * 16 + lane] += dy[i] * x[j]. */
#define PW_WTILE(MK, MC)                                                      \
  static void pw_wtile_##MK##_##MC(int64_t nv, __mmask16 mt, const float *dy, \
                                   int64_t ldd, const float *x, int64_t ld,   \
                                   const int64_t *xoff, float *part) {        \
    const float *xr[MC]; /* x's rows: j * ld apart, or at xoff[j] */          \
    for (int j = 0; j < MC; ++j) xr[j] = x + (xoff ? xoff[j] : j * ld);       \
    __m512 acc[MK][MC];                                                       \
    _Pragma("GCC unroll 4")                                                   \
    for (int i = 0; i < MK; ++i) _Pragma("GCC unroll 6")                      \
    for (int j = 0; j < MC; ++j)                                              \
      acc[i][j] = _mm512_loadu_ps(part + (i * MC + j) * 16);                  \
    for (int64_t v = 0; v + 1 < nv; ++v) /* full vectors: no masks */         \
      PW_WSTEP(MK, MC, PW_LDU, v)                                             \
    if (nv > 0) PW_WSTEP(MK, MC, PW_LDM, nv - 1)                              \
    _Pragma("GCC unroll 4")                                                   \
    for (int i = 0; i < MK; ++i) _Pragma("GCC unroll 6")                      \
    for (int j = 0; j < MC; ++j)                                              \
      _mm512_storeu_ps(part + (i * MC + j) * 16, acc[i][j]);                  \
  }

#define PW_WTILES(MK) \
  PW_WTILE(MK, 1)     \
  PW_WTILE(MK, 2)     \
  PW_WTILE(MK, 3)     \
  PW_WTILE(MK, 4)     \
  PW_WTILE(MK, 5)     \
  PW_WTILE(MK, 6)
PW_WTILES(1)
PW_WTILES(2)
PW_WTILES(3)
PW_WTILES(4)

typedef void (*pw_wtile_fn)(int64_t, __mmask16, const float *, int64_t,
                            const float *, int64_t, const int64_t *, float *);
#define PW_WROW(MK)                                                \
  {                                                                \
    NULL, pw_wtile_##MK##_1, pw_wtile_##MK##_2, pw_wtile_##MK##_3, \
        pw_wtile_##MK##_4, pw_wtile_##MK##_5, pw_wtile_##MK##_6    \
  }
/* every edge tile register-blocked too: 32 channels = 5 x 6 + 2 */
static const pw_wtile_fn pw_wtiles[PW_MK + 1][7] = {
    {NULL}, PW_WROW(1), PW_WROW(2), PW_WROW(3), PW_WROW(4)};

/* Lane partials of the bias gradient for rows [k0, k0 + mk) over one
 * chunk (cache-hot: the weight tiles of the chunk just read it). */
static void pw_btile(int mk, int64_t nv, __mmask16 mt, const float *dy,
                     int64_t ld, float *part) {
  for (int i = 0; i < mk; ++i) {
    __m512 acc = _mm512_loadu_ps(part + 16 * i);
    for (int64_t v = 0; v < nv; ++v) {
      const __mmask16 mv = v + 1 < nv ? (__mmask16)0xFFFF : mt;
      acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(mv, dy + i * ld + 16 * v));
    }
    _mm512_storeu_ps(part + 16 * i, acc);
  }
}

/* dw[k][c] += sum over samples and pixels of dy[n][k][p] x[n][c][p], and
 * (db not NULL) db[k] += sum of dy[n][k][p] in the same pass.
 * part: (cout * cin + cout) * 16 floats of scratch. */

/* dw[k0.., c0..] += the lane sums of tile (k0, c0)'s partials (a block of
 * mk * mc vectors of 16 lanes at part + (k0 * cin + c0 * mk) * 16) */
static void pw_tile_sum(int64_t cin, int64_t cout, int64_t k0, int64_t c0,
                        const float *part, float *dw) {
  const int mk = (int)(cout - k0 < PW_MK ? cout - k0 : PW_MK);
  const int mc = (int)(cin - c0 < PW_MC ? cin - c0 : PW_MC);
  const float *pt = part + (k0 * cin + c0 * mk) * 16;
  for (int i = 0; i < mk; ++i)
    for (int j = 0; j < mc; ++j)
      dw[(k0 + i) * cin + c0 + j] += _mm512_reduce_add_ps(
          _mm512_loadu_ps(pt + (i * mc + j) * 16));
}

void sg_pw_wgrad_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                     const float *x, const float *dy, float *dw, float *db,
                     float *part, int nthreads) {
  const int64_t nkb = (cout + PW_MK - 1) / PW_MK,
                ncb = (cin + PW_MC - 1) / PW_MC;
  const int64_t ntile = nkb * ncb, nchunk = (s + PW_CHUNK - 1) / PW_CHUNK;
  const int64_t nitem = ntile + (db ? nkb : 0);
  float *bpart = part + cout * cin * 16;
  memset(part, 0, (size_t)((cout * cin + cout) * 16) * sizeof *part);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  for (int64_t q = 0; q < n * nchunk; ++q) {
    const int64_t nn = q / nchunk, p0 = (q % nchunk) * PW_CHUNK;
    const int64_t len = s - p0 < PW_CHUNK ? s - p0 : PW_CHUNK;
    const int64_t nv = (len + 15) / 16, tail = len - 16 * (nv - 1);
    const __mmask16 mt = (__mmask16)((1u << tail) - 1u);
    const float *xs = x + nn * cin * s + p0, *ds = dy + nn * cout * s + p0;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < nitem; ++t) {
      if (t >= ntile) { /* bias rows, after the weight tiles */
        const int64_t k0 = (t - ntile) * PW_MK;
        const int mk = (int)(cout - k0 < PW_MK ? cout - k0 : PW_MK);
        pw_btile(mk, nv, mt, ds + k0 * s, s, bpart + 16 * k0);
        continue;
      }
      const int64_t k0 = (t / ncb) * PW_MK, c0 = (t % ncb) * PW_MC;
      const int mk = (int)(cout - k0 < PW_MK ? cout - k0 : PW_MK);
      const int mc = (int)(cin - c0 < PW_MC ? cin - c0 : PW_MC);
      /* the tile's partials: a block of mk * mc vectors */
      float *pt = part + (k0 * cin + c0 * mk) * 16;
      pw_wtiles[mk][mc](nv, mt, ds + k0 * s, s, xs + c0 * s, s, NULL, pt);
    }
  }
#pragma omp parallel for schedule(static) \
    num_threads(nthreads) if (nthreads > 1)
  for (int64_t t = 0; t < ntile; ++t)
    pw_tile_sum(cin, cout, (t / ncb) * PW_MK, (t % ncb) * PW_MC, part, dw);
  if (db)
    for (int64_t k = 0; k < cout; ++k)
      db[k] += _mm512_reduce_add_ps(_mm512_loadu_ps(bpart + 16 * k));
}

/* The weight gradient's tiles over pixel chunks of `chunk`. A lane sums
 * its pixels in increasing order whatever the chunk (a multiple of 16) and
 * the tile order: they only move data between registers and `part`.
 *  - im2col (x its column matrix, cin = C k^d rows): input-channel blocks
 *    outside, output blocks inside, over 256-pixel chunks whose
 *    dy rows (cout x 256, 32 KiB at 32 channels) stay in L1 while each
 *    block of x rows is reused over all of them (with k outside and
 *    1024-pixel chunks each x row came from L2 once per 4 output channels).
 *  - direct (x the image through the shifts xoff): one chunk, the whole
 *    tile, so the 24 accumulators stay in registers across the image rows
 *    (per 256-pixel chunk the tile's round trip of its partials through
 *    `part`, 590 KiB at 32 x 288 in L2, took a fifth of the kernel's time,
 *    perf); output blocks outside, so a block's 4 dy rows (16 KiB) stay in
 *    L1 while the shifted image rows, 9 of a channel within one ~6 KiB
 *    stretch, come from L2. dW alone, bench_ops, CPU clock, alternating
 *    under load 10: 0.48 of SGEMM (chunks of 256) -> 0.60 (whole tile, k
 *    inside) -> 0.68 (whole tile, k outside). */
static void pw_wgrad_chunks(int64_t cin, int64_t cout, int64_t np,
                            int64_t chunk, const float *x, int64_t ldx,
                            const int64_t *xoff, const float *dy, int64_t ldd,
                            float *part) {
  const int64_t nkb = (cout + PW_MK - 1) / PW_MK,
                ncb = (cin + PW_MC - 1) / PW_MC;
  for (int64_t p0 = 0; p0 < np; p0 += chunk) {
    const int64_t len = np - p0 < chunk ? np - p0 : chunk;
    const int64_t nv = (len + 15) / 16, tail = len - 16 * (nv - 1);
    const __mmask16 mt = (__mmask16)((1u << tail) - 1u);
    for (int64_t t = 0; t < nkb * ncb; ++t) {
      const int64_t kb = xoff ? t / ncb : t % nkb,
                    cb = xoff ? t % ncb : t / nkb;
      const int64_t k0 = kb * PW_MK, c0 = cb * PW_MC;
      const int mk = (int)(cout - k0 < PW_MK ? cout - k0 : PW_MK);
      const int mc = (int)(cin - c0 < PW_MC ? cin - c0 : PW_MC);
      pw_wtiles[mk][mc](nv, mt, dy + k0 * ldd + p0, ldd,
                        xoff ? x + p0 : x + c0 * ldx + p0, ldx,
                        xoff ? xoff + c0 : NULL,
                        part + (k0 * cin + c0 * mk) * 16);
    }
  }
}

void sg_pw_wgrad_acc_f32(int64_t cin, int64_t cout, int64_t np, const float *x,
                         int64_t ldx, const float *dy, int64_t ldd,
                         float *part) {
  pw_wgrad_chunks(cin, cout, np, PW_WCHUNK, x, ldx, NULL, dy, ldd, part);
}

void sg_pw_wgrad_acc_off_f32(int64_t cin, int64_t cout, int64_t np,
                             const float *x, int64_t ldx, const int64_t *xoff,
                             const float *dy, int64_t ldd, float *part) {
  const int64_t whole = (np + 15) / 16 * 16;
  pw_wgrad_chunks(cin, cout, np, whole > 0 ? whole : 16, x, ldx, xoff, dy, ldd,
                  part);
}

void sg_pw_wgrad_sum_f32(int64_t cin, int64_t cout, const float *part,
                         float *dw) {
  const int64_t nkb = (cout + PW_MK - 1) / PW_MK,
                ncb = (cin + PW_MC - 1) / PW_MC;
  for (int64_t t = 0; t < nkb * ncb; ++t)
    pw_tile_sum(cin, cout, (t / ncb) * PW_MK, (t % ncb) * PW_MC, part, dw);
}

#else /* no AVX-512F: callers use BLAS */

void sg_pw_wgrad_acc_off_f32(int64_t cin, int64_t cout, int64_t np,
                             const float *x, int64_t ldx, const int64_t *xoff,
                             const float *dy, int64_t ldd, float *part) {
  (void)cin, (void)cout, (void)np, (void)x, (void)ldx, (void)xoff, (void)dy,
      (void)ldd, (void)part;
}

void sg_pw_wgrad_acc_f32(int64_t cin, int64_t cout, int64_t np, const float *x,
                         int64_t ldx, const float *dy, int64_t ldd,
                         float *part) {
  (void)cin, (void)cout, (void)np, (void)x, (void)ldx, (void)dy, (void)ldd,
      (void)part;
}
void sg_pw_wgrad_sum_f32(int64_t cin, int64_t cout, const float *part,
                         float *dw) {
  (void)cin, (void)cout, (void)part, (void)dw;
}

int sg_pw_f32_built(void) { return 0; }

void sg_pw_apply_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                     const float *w, int64_t wr, int64_t wc, const float *x,
                     const float *b, float *y, int accumulate, int nthreads) {
  (void)n, (void)cin, (void)cout, (void)s, (void)w, (void)wr, (void)wc;
  (void)x, (void)b, (void)y, (void)accumulate, (void)nthreads;
}

void sg_pw_apply_act_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                         const float *w, const float *x, const float *b,
                         int add, float *z, float *a, int nthreads) {
  (void)n, (void)cin, (void)cout, (void)s, (void)w, (void)x, (void)b;
  (void)add, (void)z, (void)a, (void)nthreads;
}

void sg_pw_gemm_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                    int64_t wr, int64_t wc, const float *x, int64_t ldx,
                    const float *b, float *y, int64_t ldy) {
  (void)cin, (void)cout, (void)np, (void)w, (void)wr, (void)wc, (void)x,
      (void)ldx;
  (void)b, (void)y, (void)ldy;
}

void sg_pw_gemm_off_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                        int64_t wr, int64_t wc, const float *x,
                        const int64_t *xoff, const float *b, float *y,
                        int64_t ldy) {
  (void)cin, (void)cout, (void)np, (void)w, (void)wr, (void)wc, (void)x,
      (void)xoff;
  (void)b, (void)y, (void)ldy;
}

void sg_pw_wgrad_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                     const float *x, const float *dy, float *dw, float *db,
                     float *part, int nthreads) {
  (void)n, (void)cin, (void)cout, (void)s, (void)x, (void)dy, (void)dw,
      (void)db;
  (void)part, (void)nthreads;
}

#endif
