/* shardgrid — the direct 3x3 (2-D, stride 1) convolution's f32 kernels on
 * AVX2 + FMA: the tier between the AVX-512 kernels (pointwise.c) and the
 * portable im2col + BLAS path, for CPUs with 256-bit vectors only (AMD Zen
 * 1-3, Intel Haswell to Comet Lake). The same products as pointwise.c's
 * sg_pw_gemm_off_f32 / sg_pw_wgrad_acc_off_f32, which ops_tmpl.h's direct
 * convolution calls (the image read in place through per-row shifts, no
 * im2col), sized for 16 vector registers:
 *  - y = W x + b (forward, and dx with the transposed weights over dy):
 *    C2_MR (4) output channels x 24 pixels in 12 accumulators; per input
 *    row, 3 vectors of the shifted row are loaded and each weight is
 *    broadcast (12 accumulators + 3 row vectors + a broadcast: all 16
 *    registers). 32 and 64 channels are whole tiles.
 *  - dW += dy x^T: tiles of C2_MK (3) output x C2_MC (4) input rows, each
 *    a vector of 8 lane partial sums over the pixels (12 accumulators, 3
 *    dy vectors, one x vector), the whole tile's pixels in one pass
 *    (as pointwise.c's direct path), summed in lane order at the end.
 * Every output element sums its inputs in increasing order with one fused
 * multiply-add each, as the AVX-512 kernels do: the results differ from
 * theirs only in the weight gradient's lane grouping (8 lanes, not 16, a
 * pixel's lane by its column: dy is read in place, row by row).
 * Compiled with -mavx2 -mfma whatever the library's target
 * (shardtensor/ops/CMakeLists.txt), so a baseline (SG_NATIVE=OFF) build has
 * it too; ops.c enters it only after sg_simd_avx2() (cpuid) says so. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

enum {
  C2_NV = 3, /* vectors of 8 pixels per forward tile (24) */
  C2_NP = 8 * C2_NV,
  C2_MR = 4, /* output channels per forward tile */
  C2_MK = 3, /* dW tile: output channels ... */
  C2_MC = 4  /* ... times input rows */
};

int sg_c2_conv_built(void) { return 1; }

/* lanes [0, l) on, l in 0..8 */
static inline __m256i c2_mask(int64_t l) {
  static const int32_t tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                  0,  0,  0,  0,  0,  0,  0,  0};
  l = l < 0 ? 0 : l > 8 ? 8 : l;
  return _mm256_loadu_si256((const __m256i *)(tab + 8 - l));
}

/* Where a forward tile's vectors go. ldy mode (rows == NULL): vector v of
 * row r at y + r*ldy + 8v, masked by m[v] unless FULL. Row mode (the
 * product's flat positions rows in2 apart, y's rows out2 apart, the
 * in2 - out2 positions past each row dropped; c2_rows_make): vector v at
 * y + r*ldy + oa[v], masked by ma[v] unless FULL (a FULL store's lanes past
 * the row land on later positions of the tile, which later stores
 * overwrite); where it crosses into the next row (ob[v] >= 0) its lanes
 * of that row at y + r*ldy + ob[v]: FULL, the vector permuted by pb[v] so
 * those lanes come first (lanes after them again overwritten later), else
 * masked by mb[v] in place. */
typedef struct c2_rows {
  int64_t oa[C2_NV], ob[C2_NV];
  __m256i pb[C2_NV], ma[C2_NV], mb[C2_NV];
} c2_rows;

/* One forward tile: MR rows r of y (stride ldy) over up to 24 pixels,
 * y[r] = b[r] (or 0) + sum_ci w[r*wr + ci*wc] x[xoff[ci]]. FULL: all 24
 * pixels (plain loads and stores), else masks m[]; stores as c2_rows
 * says. */
#define C2_TILE(MR, FULL)                                                    \
  static void c2_tile_##MR##_##FULL(int64_t c, const float *w, int64_t wr,   \
                                    int64_t wc, const float *x,              \
                                    const int64_t *xoff, const float *b,     \
                                    float *y, int64_t ldy, const __m256i *m, \
                                    const c2_rows *rw) {                     \
    __m256 acc[MR][C2_NV];                                                   \
    _Pragma("GCC unroll 4")                                                  \
    for (int r = 0; r < MR; ++r) {                                           \
      const __m256 bv = b ? _mm256_set1_ps(b[r]) : _mm256_setzero_ps();      \
      _Pragma("GCC unroll 3")                                                \
      for (int v = 0; v < C2_NV; ++v) acc[r][v] = bv;                        \
    }                                                                        \
    for (int64_t ci = 0; ci < c; ++ci) {                                     \
      const float *xc = x + xoff[ci];                                        \
      __m256 xv[C2_NV];                                                      \
      _Pragma("GCC unroll 3")                                                \
      for (int v = 0; v < C2_NV; ++v)                                        \
        xv[v] = FULL ? _mm256_loadu_ps(xc + 8 * v)                           \
                     : _mm256_maskload_ps(xc + 8 * v, m[v]);                 \
      const float *wp = w + ci * wc;                                         \
      _Pragma("GCC unroll 4")                                                \
      for (int r = 0; r < MR; ++r) {                                         \
        const __m256 wv = _mm256_broadcast_ss(wp + r * wr);                  \
        _Pragma("GCC unroll 3")                                              \
        for (int v = 0; v < C2_NV; ++v)                                      \
          acc[r][v] = _mm256_fmadd_ps(wv, xv[v], acc[r][v]);                 \
      }                                                                      \
    }                                                                        \
    if (!rw) {                                                               \
      _Pragma("GCC unroll 4")                                                \
      for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 3")                   \
      for (int v = 0; v < C2_NV; ++v) {                                      \
        if (FULL)                                                            \
          _mm256_storeu_ps(y + r * ldy + 8 * v, acc[r][v]);                  \
        else                                                                 \
          _mm256_maskstore_ps(y + r * ldy + 8 * v, m[v], acc[r][v]);         \
      }                                                                      \
      return;                                                                \
    }                                                                        \
    /* unrolled: acc indexed by constants stays in registers (a loop      \
     * here kept it on the stack through the whole product) */  \
    _Pragma("GCC unroll 4")                                                  \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 3")                     \
    for (int v = 0; v < C2_NV; ++v) {                                        \
      float *yr = y + r * ldy;                                               \
      if (FULL) {                                                            \
        _mm256_storeu_ps(yr + rw->oa[v], acc[r][v]);                         \
        if (rw->ob[v] >= 0)                                                  \
          _mm256_storeu_ps(yr + rw->ob[v],                                   \
                           _mm256_permutevar8x32_ps(acc[r][v], rw->pb[v]));  \
      } else {                                                               \
        _mm256_maskstore_ps(yr + rw->oa[v], rw->ma[v], acc[r][v]);           \
        if (rw->ob[v] >= 0)                                                  \
          _mm256_maskstore_ps(yr + rw->ob[v], rw->mb[v], acc[r][v]);         \
      }                                                                      \
    }                                                                        \
  }

#define C2_TILES(MR) C2_TILE(MR, 1) C2_TILE(MR, 0)
C2_TILES(1)
C2_TILES(2)
C2_TILES(3)
C2_TILES(4)

typedef void (*c2_tile_fn)(int64_t, const float *, int64_t, int64_t,
                           const float *, const int64_t *, const float *,
                           float *, int64_t, const __m256i *, const c2_rows *);
static const c2_tile_fn c2_tiles[2][C2_MR + 1] = {
    {NULL, c2_tile_1_0, c2_tile_2_0, c2_tile_3_0, c2_tile_4_0},
    {NULL, c2_tile_1_1, c2_tile_2_1, c2_tile_3_1, c2_tile_4_1}};

/* The row-mode stores of the strip at flat position p0 (c2_rows), len of
 * its positions in the product (m[]: the loads' masks, kept; a partial
 * strip's stores take ma[], mb[]). Needs out2 >= 8 (a vector's
 * lanes span at most two rows, and the lanes a full store spills land on
 * positions of the tile after its own). */
static void c2_rows_make(int64_t p0, int64_t len, int64_t in2, int64_t out2,
                         const __m256i *m, c2_rows *rw) {
  const int full = len == C2_NP;
  for (int v = 0; v < C2_NV; ++v) {
    const int64_t q = p0 + 8 * v, i = q / in2, j = q % in2;
    rw->oa[v] = i * out2 + j;
    rw->ob[v] = -1;
    if (!full) rw->ma[v] = _mm256_and_si256(m[v], c2_mask(out2 - j));
    if (j + 8 > in2) { /* lanes t >= in2 - j: the next row's columns */
      const int64_t s = in2 - j;
      if (full) {
        rw->ob[v] = (i + 1) * out2;
        rw->pb[v] = _mm256_min_epi32(
            _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                             _mm256_set1_epi32((int)s)),
            _mm256_set1_epi32(7));
      } else {
        rw->ob[v] = (i + 1) * out2 + j - in2;
        rw->mb[v] = _mm256_andnot_si256(c2_mask(s), c2_mask(len - 8 * v));
      }
    }
  }
}

/* y = W x + b over np product positions, stored by ldy (in2 == 0) or, in
 * row mode, position p = i*in2 + j at y + i*out2 + j where j < out2
 * (dropped otherwise); y's channels ldy apart either way. */
static void c2_gemm(int64_t cin, int64_t cout, int64_t np, const float *w,
                    int64_t wr, int64_t wc, const float *x, const int64_t *xoff,
                    const float *b, float *y, int64_t ldy, int64_t in2,
                    int64_t out2) {
  c2_rows rw;
  for (int64_t p0 = 0; p0 < np; p0 += C2_NP) {
    const int64_t len = np - p0 < C2_NP ? np - p0 : C2_NP;
    const int full = len == C2_NP;
    __m256i m[C2_NV];
    for (int v = 0; v < C2_NV; ++v) m[v] = c2_mask(len - 8 * v);
    if (in2) c2_rows_make(p0, len, in2, out2, m, &rw);
    /* the next strip's lines of every input row into L1 (duplicates over
     * a channel's shifts cost a load slot each): the image of a large
     * layer (8 x 32 x 258^2) lives in DRAM, and without this each strip's
     * first tile waited on ~200 demand misses, ~10 in flight (forward at
     * 0.5 of SGEMM on 256^2 against 0.85 on 64^2) */
    if (p0 + C2_NP < np) {
      const int64_t last = np - p0 - C2_NP < C2_NP ? np - p0 - C2_NP : C2_NP;
      for (int64_t ci = 0; ci < cin; ++ci) {
        const float *nx = x + xoff[ci] + p0 + C2_NP;
        _mm_prefetch((const char *)nx, _MM_HINT_T0); /* <= 48 B apart */
        _mm_prefetch((const char *)(nx + last / 2), _MM_HINT_T0);
        _mm_prefetch((const char *)(nx + last - 1), _MM_HINT_T0);
      }
    }
    for (int64_t k0 = 0; k0 < cout; k0 += C2_MR) {
      const int mr = (int)(cout - k0 < C2_MR ? cout - k0 : C2_MR);
      c2_tiles[full][mr](cin, w + k0 * wr, wr, wc, x + p0, xoff,
                         b ? b + k0 : NULL, y + k0 * ldy + (in2 ? 0 : p0), ldy,
                         m, in2 ? &rw : NULL);
    }
  }
}

void sg_c2_gemm_off_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                        int64_t wr, int64_t wc, const float *x,
                        const int64_t *xoff, const float *b, float *y,
                        int64_t ldy) {
  c2_gemm(cin, cout, np, w, wr, wc, x, xoff, b, y, ldy, 0, 0);
}

int sg_c2_gemm_rows_ok(int64_t in2, int64_t out2) {
  /* a vector's spilled lanes stay in the next row's real columns */
  return out2 >= 8 && in2 >= out2 && in2 + 7 < 2 * out2;
}

void sg_c2_gemm_rows_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                         int64_t wr, int64_t wc, const float *x,
                         const int64_t *xoff, const float *b, float *y,
                         int64_t ldy, int64_t in2, int64_t out2) {
  c2_gemm(cin, cout, np, w, wr, wc, x, xoff, b, y, ldy, in2, out2);
}

/* One vector v of pixels of a dW tile, read by LD(address): C2_LDU, or
 * C2_LDM (masked by the tile's mt) for the last one. */
#define C2_LDU(p) _mm256_loadu_ps(p)
#define C2_LDM(p) _mm256_maskload_ps(p, mt)
/* C2_PIN: the value in a register from here on. Without it GCC folded
 * every use of dv[i] into its own load beside the x operand (24 loads per
 * 12 FMAs: the kernel ran load-bound at 0.35 of peak). */
#define C2_PIN(v) __asm__("" : "+x"(v))
#define C2_WSTEP(MK, MC, LD, v)                            \
  {                                                        \
    __m256 dv[MK];                                         \
    _Pragma("GCC unroll 3")                                \
    for (int i = 0; i < MK; ++i) {                         \
      dv[i] = LD(dy + i * ldd + 8 * (v));                  \
      C2_PIN(dv[i]);                                       \
    }                                                      \
    _Pragma("GCC unroll 4")                                \
    for (int j = 0; j < MC; ++j) {                         \
      __m256 xv = LD(xr[j] + 8 * (v));                     \
      C2_PIN(xv);                                          \
      _Pragma("GCC unroll 3")                              \
      for (int i = 0; i < MK; ++i)                         \
        acc[i][j] = _mm256_fmadd_ps(dv[i], xv, acc[i][j]); \
    }                                                      \
  }

/* One dW tile over `rows` rows of `nf` full vectors of pixels, and one
 * vector masked by `mt` after them where `part_` (the row's length not a
 * multiple of 8): part[(i * MC + j) * 8 + lane] += dy[i] * x[j], dy's rows
 * dys apart and x's xs apart (lane: the pixel's column mod 8). */
#define C2_WTILE(MK, MC)                                                     \
  static void c2_wtile_##MK##_##MC(int64_t rows, int64_t nf, int part_,      \
                                   __m256i mt, const float *dy, int64_t ldd, \
                                   int64_t dys, const float *x, int64_t xs,  \
                                   const int64_t *xoff, float *part,         \
                                   int init) {                               \
    const float *xr[MC];                                                     \
    for (int j = 0; j < MC; ++j) xr[j] = x + xoff[j];                        \
    __m256 acc[MK][MC];                                                      \
    _Pragma("GCC unroll 3")                                                  \
    for (int i = 0; i < MK; ++i) _Pragma("GCC unroll 4")                     \
    for (int j = 0; j < MC; ++j)                                             \
      acc[i][j] = init ? _mm256_setzero_ps()                                 \
                       : _mm256_loadu_ps(part + (i * MC + j) * 8);           \
    for (int64_t row = 0; row < rows; ++row) {                               \
      for (int64_t v = 0; v < nf; ++v) /* full vectors: no masks */          \
        C2_WSTEP(MK, MC, C2_LDU, v)                                          \
      if (part_) C2_WSTEP(MK, MC, C2_LDM, nf)                                \
      dy += dys;                                                             \
      _Pragma("GCC unroll 4")                                                \
      for (int j = 0; j < MC; ++j) xr[j] += xs;                              \
    }                                                                        \
    _Pragma("GCC unroll 3")                                                  \
    for (int i = 0; i < MK; ++i) _Pragma("GCC unroll 4")                     \
    for (int j = 0; j < MC; ++j)                                             \
      _mm256_storeu_ps(part + (i * MC + j) * 8, acc[i][j]);                  \
  }

#define C2_WTILES(MK) \
  C2_WTILE(MK, 1)     \
  C2_WTILE(MK, 2)     \
  C2_WTILE(MK, 3)     \
  C2_WTILE(MK, 4)
C2_WTILES(1)
C2_WTILES(2)
C2_WTILES(3)

typedef void (*c2_wtile_fn)(int64_t, int64_t, int, __m256i, const float *,
                            int64_t, int64_t, const float *, int64_t,
                            const int64_t *, float *, int);
#define C2_WROW(MK)                                                \
  {                                                                \
    NULL, c2_wtile_##MK##_1, c2_wtile_##MK##_2, c2_wtile_##MK##_3, \
        c2_wtile_##MK##_4                                          \
  }
static const c2_wtile_fn c2_wtiles[C2_MK + 1][C2_MC + 1] = {
    {NULL}, C2_WROW(1), C2_WROW(2), C2_WROW(3)};

/* The whole tile's pixels in one pass per weight tile (the accumulators
 * stay in registers across the image rows); output blocks outside, so a
 * block's 3 dy rows stay in L1 while the shifted image rows come from L2.
 * dy is read where it lies, row by row (no copy into the forward's layout
 * with zeros past each row, as the AVX-512 kernel takes it), and only the
 * n2 real pixels of each row are multiplied. init: part is overwritten
 * (the slot's first tile: no zero fill before it; the same bits, 0 + a b
 * being a b's fused multiply-add onto zero either way). */
void sg_c2_wgrad_acc_rows_f32(int64_t cin, int64_t cout, int64_t rows,
                              int64_t n2, const float *x, int64_t ldx,
                              const int64_t *xoff, const float *dy, int64_t ldd,
                              int64_t dys, float *part, int init) {
  if (init && (rows <= 0 || n2 <= 0))
    memset(part, 0, (size_t)(cout * cin * 8) * sizeof(float));
  if (rows <= 0 || n2 <= 0) return;
  const int64_t nkb = (cout + C2_MK - 1) / C2_MK,
                ncb = (cin + C2_MC - 1) / C2_MC;
  const int64_t nf = n2 / 8;
  const int part_ = n2 % 8 != 0;
  const __m256i mt = c2_mask(n2 % 8);
  for (int64_t t = 0; t < nkb * ncb; ++t) {
    const int64_t k0 = (t / ncb) * C2_MK, c0 = (t % ncb) * C2_MC;
    const int mk = (int)(cout - k0 < C2_MK ? cout - k0 : C2_MK);
    const int mc = (int)(cin - c0 < C2_MC ? cin - c0 : C2_MC);
    c2_wtiles[mk][mc](rows, nf, part_, mt, dy + k0 * ldd, ldd, dys, x, ldx,
                      xoff + c0, part + (k0 * cin + c0 * mk) * 8, init);
  }
}

/* the 8 lanes of p, summed in lane order */
static inline float c2_lanes(const float *p) {
  float s = 0;
  for (int l = 0; l < 8; ++l) s += p[l];
  return s;
}

void sg_c2_wgrad_sum_f32(int64_t cin, int64_t cout, const float *part,
                         float *dw) {
  for (int64_t k0 = 0; k0 < cout; k0 += C2_MK)
    for (int64_t c0 = 0; c0 < cin; c0 += C2_MC) {
      const int mk = (int)(cout - k0 < C2_MK ? cout - k0 : C2_MK);
      const int mc = (int)(cin - c0 < C2_MC ? cin - c0 : C2_MC);
      const float *pt = part + (k0 * cin + c0 * mk) * 8;
      for (int i = 0; i < mk; ++i)
        for (int j = 0; j < mc; ++j)
          dw[(k0 + i) * cin + c0 + j] += c2_lanes(pt + (i * mc + j) * 8);
    }
}

int64_t sg_c2_wgrad_kblocks(int64_t cout) { return (cout + C2_MK - 1) / C2_MK; }

/* Each weight of output-channel block kb gets the lane sums of the slots
 * marked in used, in slot order: per weight the additions that
 * sg_c2_wgrad_sum_f32 over the slots one after another makes, so blocks
 * may run on any threads. */
void sg_c2_wgrad_sum_slots_f32(int64_t cin, int64_t cout, int64_t kb,
                               const float *part, int64_t sstride, int nslot,
                               const unsigned char *used, float *dw) {
  const int64_t k0 = kb * C2_MK;
  const int mk = (int)(cout - k0 < C2_MK ? cout - k0 : C2_MK);
  for (int64_t c0 = 0; c0 < cin; c0 += C2_MC) {
    const int mc = (int)(cin - c0 < C2_MC ? cin - c0 : C2_MC);
    for (int i = 0; i < mk; ++i)
      for (int j = 0; j < mc; ++j) {
        float *d = dw + (k0 + i) * cin + c0 + j;
        const float *pt = part + (k0 * cin + c0 * mk) * 8 + (i * mc + j) * 8;
        for (int s = 0; s < nslot; ++s)
          if (used[s]) *d += c2_lanes(pt + s * sstride);
      }
  }
}

#else /* no AVX2/FMA flags: sg_c2_conv_available() is 0 and the callers
       * take the portable path; these are never entered (no-ops, as
       * pointwise.c's, not aborts: the library does not abort) */

int sg_c2_conv_built(void) { return 0; }

int sg_c2_gemm_rows_ok(int64_t in2, int64_t out2) {
  (void)in2, (void)out2;
  return 0;
}

void sg_c2_gemm_rows_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                         int64_t wr, int64_t wc, const float *x,
                         const int64_t *xoff, const float *b, float *y,
                         int64_t ldy, int64_t in2, int64_t out2) {
  (void)cin, (void)cout, (void)np, (void)w, (void)wr, (void)wc, (void)x;
  (void)xoff, (void)b, (void)y, (void)ldy, (void)in2, (void)out2;
}

void sg_c2_gemm_off_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                        int64_t wr, int64_t wc, const float *x,
                        const int64_t *xoff, const float *b, float *y,
                        int64_t ldy) {
  (void)cin, (void)cout, (void)np, (void)w, (void)wr, (void)wc, (void)x;
  (void)xoff, (void)b, (void)y, (void)ldy;
}

void sg_c2_wgrad_acc_rows_f32(int64_t cin, int64_t cout, int64_t rows,
                              int64_t n2, const float *x, int64_t ldx,
                              const int64_t *xoff, const float *dy, int64_t ldd,
                              int64_t dys, float *part, int init) {
  (void)cin, (void)cout, (void)rows, (void)n2, (void)x, (void)ldx, (void)xoff;
  (void)dy, (void)ldd, (void)dys, (void)part, (void)init;
}

void sg_c2_wgrad_sum_f32(int64_t cin, int64_t cout, const float *part,
                         float *dw) {
  (void)cin, (void)cout, (void)part, (void)dw;
}

int64_t sg_c2_wgrad_kblocks(int64_t cout) {
  (void)cout;
  return 0;
}

void sg_c2_wgrad_sum_slots_f32(int64_t cin, int64_t cout, int64_t kb,
                               const float *part, int64_t sstride, int nslot,
                               const unsigned char *used, float *dw) {
  (void)cin, (void)cout, (void)kb, (void)part, (void)sstride, (void)nslot;
  (void)used, (void)dw;
}

#endif
