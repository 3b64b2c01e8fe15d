/* shardgrid — f32 pointwise (1x1) convolution / channel-wise linear on
 * AVX2 + FMA (Haswell, Zen 1-3): the tier below pointwise.c's AVX-512
 * kernels, the same scheme in 8-float vectors and 16 registers.
 *  - y = W x + b and dx (+)= W^T dy: an outer-product tile of P2_MR output
 *    channels (4) x 24 pixels in 12 accumulators; per input channel one row
 *    of 24 pixels is loaded (3 registers) and each weight broadcast (one
 *    register): 16 in all. The weight matrix is read through (row, col)
 *    strides, so W^T needs no copy; the bias is the accumulators' initial
 *    value. The pixels run in chunks of 96 (p2_chunk): the chunk's input
 *    rows copied to one block, then each 4-row block of outputs over it.
 *  - dW += dy x^T (and db += the sum of dy, over the same cache-hot
 *    chunks): tiles of P2_MK (4) output x P2_MC (3) input channels, each a
 *    vector of 8 lane partial sums over the pixels; the tile's 3 x rows are
 *    held in registers while each of its 4 dy rows is loaded once. The
 *    pixels run in chunks (rows of a chunk stay in L2 while every tile
 *    passes over them); the lane partials are summed at the end in a fixed
 *    order, whatever the thread count.
 *  - the backward in one pass over chunks of dz (sg_pw2_backward_gelu_f32):
 *    dz = gelu'(z) dy formed per chunk in an L2-resident scratch (or dy
 *    itself when there is no activation), the dW / db tiles and the dx
 *    tiles reading it there: dz is read once, and with GELU never stored.
 * Every output element of the forward and dx sums its input channels in
 * increasing order, one fused multiply-add each: a pixel's result does not
 * depend on how the pixels are split across ranks or threads.
 * Software prefetches (no value changes) where the hardware's prefetch
 * misses: the rows an image apart that a tile stores or adds to are
 * requested one block of 4 output rows ahead, a packed chunk's input rows
 * one chunk ahead, and the projection head backward's rows of z two rows
 * ahead (Zen 3, one thread: the 32 -> 128 forward 20% cheaper, the head's
 * forward + backward 7-15%, bench/RESULTS.md, h-fno8).
 * Only the 1x1 layers (sg_conv_forward/backward's pointwise case, the
 * linears and the fused linear + GELU) take these kernels; the 3x3
 * convolution keeps its own paths. Compiled with -mavx2 -mfma by this
 * file's own flags (shardtensor/ops/CMakeLists.txt) where the compiler
 * can; entered only when ops.c's pointwise tier says AVX2 (built, the CPU
 * has AVX2 and FMA, no AVX-512 kernel in use, SG_SIMD not "portable"). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops_impl.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

enum {
  P2_NV = 3, /* vectors of 8 pixels per forward tile (24) */
  P2_NP = 8 * P2_NV,
  P2_MR = 4,            /* output channels per forward tile */
  P2_MK = 4,            /* dW tile: output channels ... */
  P2_MC = 3,            /* ... times input channels */
  P2_CHUNK = 1024,      /* pixels per dW chunk */
  P2_CH = 4 * P2_NP,    /* pixels per chunk (4 strips) */
  P2_PACK = 128,        /* input channels up to which a chunk is packed */
  P2_ACHUNK = 8 * P2_NP /* pixels per chunk of the fused linear + GELU */
};

int sg_pw2_f32_built(void) { return 1; }

/* lanes [0, len) of a vector of 8 (len clamped to [0, 8]) */
static inline __m256i p2_mask(int64_t len) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int l = (int)(len < 0 ? 0 : len > 8 ? 8 : len);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(l), idx);
}

/* Keep v in a register: without it GCC folds the x rows' loads into
 * each FMA (12 loads of x per input channel instead of 3; perf, Zen 3). */
#define P2_REG(v) __asm__("" : "+x"(v))

#define P2_LD(p, FULL, m) \
  ((FULL) ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m))

/* One forward tile: MR rows r of y (stride ldy) over up to 24 pixels,
 * y[r] = init + sum_ci w[r*wr + ci*wc] x[ci*ldx]; init as pointwise.c's
 * (bias or zero; SG_PW_ACC the current y; SG_PW_ADD the current y added
 * to the finished sum). FULL: all 24 pixels, else the masks m[]. */
#define P2_TILE(MR, FULL)                                                    \
  static void p2_tile_##MR##_##FULL(int64_t c, const float *w, int64_t wr,   \
                                    int64_t wc, const float *x, int64_t ldx, \
                                    const float *b, float *y, int64_t ldy,   \
                                    int mode, const __m256i *m,              \
                                    const float *pf) {                       \
    __m256 acc[MR][P2_NV];                                                   \
    for (int r = 0; pf && r < MR; ++r) {                                     \
      const char *pr = (const char *)(pf + r * ldy);                         \
      __builtin_prefetch(pr, 1, 3);                                          \
      __builtin_prefetch(pr + 64, 1, 3);                                     \
      __builtin_prefetch(pr + 4 * P2_NP - 1, 1, 3);                          \
    }                                                                        \
    _Pragma("GCC unroll 4")                                                  \
    for (int r = 0; r < MR; ++r) {                                           \
      _Pragma("GCC unroll 3")                                                \
      for (int v = 0; v < P2_NV; ++v) {                                      \
        if (mode == SG_PW_ACC)                                               \
          acc[r][v] = P2_LD(y + r * ldy + 8 * v, FULL, m[v]);                \
        else                                                                 \
          acc[r][v] = b ? _mm256_set1_ps(b[r]) : _mm256_setzero_ps();        \
      }                                                                      \
    }                                                                        \
    for (int64_t ci = 0; ci < c; ++ci) {                                     \
      const float *xc = x + ci * ldx;                                        \
      __m256 xv[P2_NV];                                                      \
      _Pragma("GCC unroll 3")                                                \
      for (int v = 0; v < P2_NV; ++v) {                                      \
        xv[v] = ldx == P2_NP ? _mm256_loadu_ps(xc + 8 * v)                   \
                             : P2_LD(xc + 8 * v, FULL, m[v]);                \
        P2_REG(xv[v]);                                                       \
      }                                                                      \
      const float *wp = w + ci * wc;                                         \
      _Pragma("GCC unroll 4")                                                \
      for (int r = 0; r < MR; ++r) {                                         \
        const __m256 wv = _mm256_broadcast_ss(wp + r * wr);                  \
        _Pragma("GCC unroll 3")                                              \
        for (int v = 0; v < P2_NV; ++v)                                      \
          acc[r][v] = _mm256_fmadd_ps(wv, xv[v], acc[r][v]);                 \
      }                                                                      \
    }                                                                        \
    _Pragma("GCC unroll 4")                                                  \
    for (int r = 0; r < MR; ++r) _Pragma("GCC unroll 3")                     \
    for (int v = 0; v < P2_NV; ++v) {                                        \
      float *yp = y + r * ldy + 8 * v;                                       \
      if (mode == SG_PW_ADD)                                                 \
        acc[r][v] = _mm256_add_ps(acc[r][v], P2_LD(yp, FULL, m[v]));         \
      if (FULL)                                                              \
        _mm256_storeu_ps(yp, acc[r][v]);                                     \
      else                                                                   \
        _mm256_maskstore_ps(yp, m[v], acc[r][v]);                            \
    }                                                                        \
  }

#define P2_TILES(MR) P2_TILE(MR, 1) P2_TILE(MR, 0)
P2_TILES(1)
P2_TILES(2)
P2_TILES(3)
P2_TILES(4)

typedef void (*p2_tile_fn)(int64_t, const float *, int64_t, int64_t,
                           const float *, int64_t, const float *, float *,
                           int64_t, int, const __m256i *, const float *);
static const p2_tile_fn p2_tiles[2][P2_MR + 1] = {
    {NULL, p2_tile_1_0, p2_tile_2_0, p2_tile_3_0, p2_tile_4_0},
    {NULL, p2_tile_1_1, p2_tile_2_1, p2_tile_3_1, p2_tile_4_1}};

/* A chunk of up to P2_CH pixels [c0, c0 + len) of the (cout x np)
 * product: its input rows are first copied to one contiguous block, strip
 * by strip (zeros past the image's end), when cin <= P2_PACK; then each
 * block of 4 output rows runs over the chunk's strips. Rows a whole image
 * apart (4096 pixels, 16 KiB) all fall into the same few sets of the
 * 8-way L1, and the tiles of every 4 output channels read a strip again
 * (perf, Zen 3: the unpacked tile stalled on those loads); reading each
 * row 96 pixels at a time, and writing each output row so, keeps the
 * accesses sequential for longer. The copy changes no value: each output
 * still sums its channels in order. */
static void p2_chunk(int64_t cin, int64_t cout, int64_t c0, int64_t len,
                     const float *w, int64_t wr, int64_t wc, const float *x,
                     int64_t ldx, const float *b, float *y, int64_t ldy,
                     int accumulate, int may_pack) {
  const int64_t nst = (len + P2_NP - 1) / P2_NP,
                tail = len - (nst - 1) * P2_NP; /* the last strip's pixels */
  __m256i m[P2_NV], ones = _mm256_set1_epi32(-1);
  for (int v = 0; v < P2_NV; ++v) m[v] = p2_mask(tail - 8 * v);
  const int mode = accumulate & (SG_PW_ACC | SG_PW_ADD);
  float pack[P2_PACK * P2_CH] __attribute__((aligned(32)));
  const int packed = may_pack && cin <= P2_PACK;
  /* the next chunk's input rows (where the rows go on): requested while
   * this chunk's tiles run, in cache when its copy reads them */
  const int pfx = packed && c0 + len + P2_CH <= ldx;
  for (int64_t ci = 0; packed && ci < cin; ++ci) {
    for (int64_t l = 0; pfx && l < 4 * P2_CH; l += 64)
      __builtin_prefetch((const char *)(x + ci * ldx + c0 + len) + l, 0, 3);
    for (int64_t st = 0; st < nst; ++st) {
      const float *xr = x + ci * ldx + c0 + st * P2_NP;
      float *pr = pack + (st * cin + ci) * P2_NP;
      for (int v = 0; v < P2_NV; ++v)
        _mm256_store_ps(pr + 8 * v, st + 1 < nst
                                        ? _mm256_loadu_ps(xr + 8 * v)
                                        : _mm256_maskload_ps(xr + 8 * v, m[v]));
    }
  }
  __m256i mf[P2_NV];
  for (int v = 0; v < P2_NV; ++v) mf[v] = ones;
  for (int64_t k0 = 0; k0 < cout; k0 += P2_MR) {
    const int mr = (int)(cout - k0 < P2_MR ? cout - k0 : P2_MR);
    for (int64_t st = 0; st < nst; ++st) {
      const int full = st + 1 < nst || tail == P2_NP;
      const float *xs = packed ? pack + st * cin * P2_NP : x + c0 + st * P2_NP;
      /* the next block's output rows of this strip: in cache by the
       * time that tile loads (SG_PW_ADD) or stores them */
      const int64_t nr = cout - k0 - mr < P2_MR ? cout - k0 - mr : P2_MR;
      p2_tiles[full][mr](cin, w + k0 * wr, wr, wc, xs, packed ? P2_NP : ldx,
                         b ? b + k0 : NULL, y + k0 * ldy + c0 + st * P2_NP, ldy,
                         mode, full ? mf : m,
                         nr == P2_MR ? y + (k0 + mr) * ldy + c0 + st * P2_NP
                                     : NULL);
    }
  }
  for (int64_t r = 0; (accumulate & SG_PW_ROUND) && r < cout; ++r)
    sg_round_bf16(y + r * ldy + c0, len);
}

void sg_pw2_apply_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                      const float *w, int64_t wr, int64_t wc, const float *x,
                      const float *b, float *y, int accumulate, int nthreads) {
  const int64_t nch = (s + P2_CH - 1) / P2_CH, items = n * nch;
#pragma omp parallel for schedule(static) \
    num_threads(nthreads) if (nthreads > 1)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t nn = it / nch, c0 = (it % nch) * P2_CH;
    p2_chunk(cin, cout, c0, s - c0 < P2_CH ? s - c0 : P2_CH, w, wr, wc,
             x + nn * cin * s, s, b, y + nn * cout * s, s, accumulate, 1);
  }
}

void sg_pw2_apply_act_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                          const float *w, const float *x, const float *b,
                          int add, float *z, float *a, int nthreads) {
  const int64_t nch = (s + P2_ACHUNK - 1) / P2_ACHUNK, items = n * nch;
#pragma omp parallel for schedule(static) \
    num_threads(nthreads) if (nthreads > 1)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t nn = it / nch, c0 = (it % nch) * P2_ACHUNK,
                  c1 = c0 + P2_ACHUNK < s ? c0 + P2_ACHUNK : s;
    float *zn = z + nn * cout * s;
    for (int64_t p0 = c0; p0 < c1; p0 += P2_CH)
      p2_chunk(cin, cout, p0, c1 - p0 < P2_CH ? c1 - p0 : P2_CH, w, cin, 1,
               x + nn * cin * s, s, b, zn, s, add ? SG_PW_ADD : 0, 1);
    for (int64_t r = 0; a && r < cout; ++r)
      sg_gelu2_fwd_seq_f32(c1 - c0, zn + r * s + c0,
                           a + (nn * cout + r) * s + c0);
  }
}

/* One dW tile over nv vectors of pixels (the last one masked by mt):
 * part[(i * MC + j) * 8 + lane] += dy[i] * x[j]. The MC x rows of a
 * vector are held while each dy row is loaded once. */
#define P2_WSTEP(MK, MC, FULL, v)                          \
  {                                                        \
    __m256 xv[MC];                                         \
    _Pragma("GCC unroll 3")                                \
    for (int j = 0; j < MC; ++j) {                         \
      xv[j] = P2_LD(x + j * ld + 8 * (v), FULL, mt);       \
      P2_REG(xv[j]);                                       \
    }                                                      \
    _Pragma("GCC unroll 4")                                \
    for (int i = 0; i < MK; ++i) {                         \
      __m256 dv = P2_LD(dy + i * ldd + 8 * (v), FULL, mt); \
      P2_REG(dv);                                          \
      _Pragma("GCC unroll 3")                              \
      for (int j = 0; j < MC; ++j)                         \
        acc[i][j] = _mm256_fmadd_ps(dv, xv[j], acc[i][j]); \
    }                                                      \
  }

#define P2_WTILE(MK, MC)                                                    \
  static void p2_wtile_##MK##_##MC(int64_t nv, __m256i mt, const float *dy, \
                                   int64_t ldd, const float *x, int64_t ld, \
                                   float *part) {                           \
    __m256 acc[MK][MC];                                                     \
    _Pragma("GCC unroll 4")                                                 \
    for (int i = 0; i < MK; ++i) _Pragma("GCC unroll 3")                    \
    for (int j = 0; j < MC; ++j)                                            \
      acc[i][j] = _mm256_loadu_ps(part + (i * MC + j) * 8);                 \
    for (int64_t v = 0; v + 1 < nv; ++v) /* full vectors: no masks */       \
      P2_WSTEP(MK, MC, 1, v)                                                \
    if (nv > 0) P2_WSTEP(MK, MC, 0, nv - 1)                                 \
    _Pragma("GCC unroll 4")                                                 \
    for (int i = 0; i < MK; ++i) _Pragma("GCC unroll 3")                    \
    for (int j = 0; j < MC; ++j)                                            \
      _mm256_storeu_ps(part + (i * MC + j) * 8, acc[i][j]);                 \
  }

#define P2_WTILES(MK) P2_WTILE(MK, 1) P2_WTILE(MK, 2) P2_WTILE(MK, 3)
P2_WTILES(1)
P2_WTILES(2)
P2_WTILES(3)
P2_WTILES(4)

typedef void (*p2_wtile_fn)(int64_t, __m256i, const float *, int64_t,
                            const float *, int64_t, float *);
#define P2_WROW(MK) \
  { NULL, p2_wtile_##MK##_1, p2_wtile_##MK##_2, p2_wtile_##MK##_3 }
static const p2_wtile_fn p2_wtiles[P2_MK + 1][P2_MC + 1] = {
    {NULL}, P2_WROW(1), P2_WROW(2), P2_WROW(3), P2_WROW(4)};

/* Lane partials of the bias gradient for rows [k0, k0 + mk) over one
 * chunk (cache-hot: the weight tiles of the chunk just read it). */
static void p2_btile(int mk, int64_t nv, __m256i mt, const float *dy,
                     int64_t ld, float *part) {
  for (int i = 0; i < mk; ++i) {
    __m256 acc = _mm256_loadu_ps(part + 8 * i);
    for (int64_t v = 0; v + 1 < nv; ++v)
      acc = _mm256_add_ps(acc, _mm256_loadu_ps(dy + i * ld + 8 * v));
    if (nv > 0)
      acc = _mm256_add_ps(acc,
                          _mm256_maskload_ps(dy + i * ld + 8 * (nv - 1), mt));
    _mm256_storeu_ps(part + 8 * i, acc);
  }
}

/* The 8 lanes of p summed in a fixed order (pairs, then pairs of pairs) */
static inline float p2_lane_sum(const float *p) {
  return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

/* dw[k0.., c0..] += the lane sums of tile (k0, c0)'s partials (a block of
 * mk * mc vectors of 8 lanes at part + (k0 * cin + c0 * mk) * 8) */
static void p2_tile_sum(int64_t cin, int64_t cout, int64_t k0, int64_t c0,
                        const float *part, float *dw) {
  const int mk = (int)(cout - k0 < P2_MK ? cout - k0 : P2_MK);
  const int mc = (int)(cin - c0 < P2_MC ? cin - c0 : P2_MC);
  const float *pt = part + (k0 * cin + c0 * mk) * 8;
  for (int i = 0; i < mk; ++i)
    for (int j = 0; j < mc; ++j)
      dw[(k0 + i) * cin + c0 + j] += p2_lane_sum(pt + (i * mc + j) * 8);
}

/* Work item t of a dW / db pass over one chunk of nv vectors (the last
 * masked by mt): t < ntile the weight tile (t / ncb, t % ncb), else the
 * bias rows of block t - ntile. dz's rows ldz apart, x's rows s apart. */
static void p2_wgrad_item(int64_t t, int64_t ntile, int64_t ncb, int64_t cin,
                          int64_t cout, int64_t nv, __m256i mt,
                          const float *dzc, int64_t ldz, const float *xs,
                          int64_t s, float *part, float *bpart) {
  if (t >= ntile) { /* bias rows, after the weight tiles */
    const int64_t k0 = (t - ntile) * P2_MK;
    const int mk = (int)(cout - k0 < P2_MK ? cout - k0 : P2_MK);
    p2_btile(mk, nv, mt, dzc + k0 * ldz, ldz, bpart + 8 * k0);
    return;
  }
  const int64_t k0 = (t / ncb) * P2_MK, c0 = (t % ncb) * P2_MC;
  const int mk = (int)(cout - k0 < P2_MK ? cout - k0 : P2_MK);
  const int mc = (int)(cin - c0 < P2_MC ? cin - c0 : P2_MC);
  float *pt = part + (k0 * cin + c0 * mk) * 8;
  p2_wtiles[mk][mc](nv, mt, dzc + k0 * ldz, ldz, xs + c0 * s, s, pt);
}

/* dw += the lane sums of the ntile weight tiles' partials, db += the bias
 * rows' (each may be NULL with no items of its kind) */
static void p2_wgrad_finish(int64_t cin, int64_t cout, int64_t ncb,
                            int64_t ntile, const float *part, float *dw,
                            const float *bpart, float *db, int nthreads) {
#pragma omp parallel for schedule(static) \
    num_threads(nthreads) if (nthreads > 1)
  for (int64_t t = 0; t < ntile; ++t)
    p2_tile_sum(cin, cout, (t / ncb) * P2_MK, (t % ncb) * P2_MC, part, dw);
  if (db)
    for (int64_t k = 0; k < cout; ++k) db[k] += p2_lane_sum(bpart + 8 * k);
}

/* part: (cout * cin + cout) * 8 floats of scratch */
void sg_pw2_wgrad_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                      const float *x, const float *dy, float *dw, float *db,
                      float *part, int nthreads) {
  const int64_t nkb = (cout + P2_MK - 1) / P2_MK,
                ncb = (cin + P2_MC - 1) / P2_MC;
  const int64_t ntile = nkb * ncb, nchunk = (s + P2_CHUNK - 1) / P2_CHUNK;
  const int64_t nitem = ntile + (db ? nkb : 0);
  float *bpart = part + cout * cin * 8;
  memset(part, 0, (size_t)((cout * cin + cout) * 8) * sizeof *part);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  for (int64_t q = 0; q < n * nchunk; ++q) {
    const int64_t nn = q / nchunk, p0 = (q % nchunk) * P2_CHUNK;
    const int64_t len = s - p0 < P2_CHUNK ? s - p0 : P2_CHUNK;
    const int64_t nv = (len + 7) / 8;
    const __m256i mt = p2_mask(len - 8 * (nv - 1));
    const float *xs = x + nn * cin * s + p0, *ds = dy + nn * cout * s + p0;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < nitem; ++t)
      p2_wgrad_item(t, ntile, ncb, cin, cout, nv, mt, ds, s, xs, s, part,
                    bpart);
  }
  p2_wgrad_finish(cin, cout, ncb, ntile, part, dw, bpart, db, nthreads);
}

/* The linear's backward fused with GELU's (sg_pw2_backward_gelu_f32):
 * per image, chunks of P2_GCH pixels; dz = gelu'(z) dy of every output
 * row of the chunk goes to scratch (rows P2_GLD floats apart: 19 cache
 * lines, so the rows spread over the L1's sets), where the dW / db tiles
 * and the dx tiles read it while it is in L2. dz is never written out:
 * the separate GELU pass wrote it (a fresh buffer of cout channels), and
 * the dW and dx passes each read it back from memory. */
enum { P2_GCH = 3 * P2_CH, P2_GLD = P2_GCH + 16 };

size_t sg_pw2_backward_gelu_scratch(int64_t cin, int64_t cout) {
  return (size_t)((cout * cin + cout) * 8 + cout * P2_GLD) * sizeof(float);
}

void sg_pw2_backward_gelu_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                              const float *x, const float *w, const float *z,
                              const float *dy, float *dx, int add, float *dw,
                              float *db, float *scratch, int nthreads) {
  const int64_t nkb = (cout + P2_MK - 1) / P2_MK,
                ncb = (cin + P2_MC - 1) / P2_MC;
  const int64_t ntile = dw ? nkb * ncb : 0, nbt = db ? nkb : 0,
                nchunk = (s + P2_GCH - 1) / P2_GCH;
  float *part = scratch, *bpart = part + cout * cin * 8, *dz = bpart + cout * 8;
  memset(part, 0, (size_t)((cout * cin + cout) * 8) * sizeof *part);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  for (int64_t q = 0; q < n * nchunk; ++q) {
    const int64_t nn = q / nchunk, p0 = (q % nchunk) * P2_GCH;
    const int64_t len = s - p0 < P2_GCH ? s - p0 : P2_GCH;
    const int64_t nv = (len + 7) / 8, npc = (len + P2_CH - 1) / P2_CH;
    const __m256i mt = p2_mask(len - 8 * (nv - 1));
    const float *xs = x + nn * cin * s + p0;
    /* z NULL: dy is dz, read in place (rows a whole image apart) */
    const float *dzc = z ? dz : dy + nn * cout * s + p0;
    const int64_t ldz = z ? P2_GLD : s;
    if (z) {
#pragma omp for schedule(static)
      for (int64_t k = 0; k < cout; ++k)
        sg_gelu2_bwd_seq_f32(len, z + (nn * cout + k) * s + p0,
                             dy + (nn * cout + k) * s + p0, dz + k * P2_GLD);
    }
    /* the weight tiles, the bias rows, then the dx pieces of P2_CH */
#pragma omp for schedule(static)
    for (int64_t t = 0; t < ntile + nbt + (dx ? npc : 0); ++t) {
      if (t >= ntile + nbt) {
        const int64_t c0 = (t - ntile - nbt) * P2_CH;
        p2_chunk(cout, cin, c0, len - c0 < P2_CH ? len - c0 : P2_CH, w, 1, cin,
                 dzc, ldz, NULL, dx + nn * cin * s + p0, s, add ? SG_PW_ADD : 0,
                 !z);
        continue;
      }
      p2_wgrad_item(t, ntile, ncb, cin, cout, nv, mt, dzc, ldz, xs, s, part,
                    bpart);
    }
  }
  p2_wgrad_finish(cin, cout, ncb, ntile, part, dw, bpart, db, nthreads);
}

/* The projection head y = W2 gelu(W1 x + b1) + b2 (cin -> cmid -> cout)
 * in one pass (sg_pw2_head_forward_f32 / backward). Forward, per chunk of
 * P2_ACHUNK pixels: z = W1 x + b1 into the saved z (as
 * sg_pw2_apply_act_f32), a = gelu(z) into the thread's L2-resident scratch
 * (rows P2_ALD floats apart), and y = W2 a + b2 from there: a is never
 * stored (the separate ops wrote it, 4 cmid bytes a pixel, and the second
 * linear read it back). Backward, per chunk of P2_GCH pixels: da = W2^T dy
 * row by row into scratch, then from z in one pass a = gelu(z) (the
 * second linear's dW2 reads it) and dz = gelu'(z) da in place, then the
 * tiles of dW1 / db1, dx and dW2 / db2 over the chunk. Every value is the
 * one of the separate ops (sg_pw2_apply_act_f32, sg_pw2_apply_f32,
 * sg_pw2_wgrad_f32, sg_pw2_backward_gelu_f32) on the whole tensors: the
 * same operations in the same order, the lane partials of each weight
 * summed over the pixels in increasing order. */
enum { P2_ALD = P2_ACHUNK + 16 };

size_t sg_pw2_head_scratch(int64_t cin, int64_t cmid, int64_t cout, int bwd,
                           int nthreads) {
  if (!bwd)
    return (size_t)(nthreads > 0 ? nthreads : 1) * (size_t)(cmid * P2_ALD) *
           sizeof(float);
  return (size_t)((cmid * cin + cmid) * 8 + (cout * cmid + cout) * 8 +
                  2 * cmid * P2_GLD) *
         sizeof(float);
}

void sg_pw2_head_forward_f32(int64_t n, int64_t cin, int64_t cmid, int64_t cout,
                             int64_t s, const float *w1, const float *b1,
                             const float *w2, const float *b2, const float *x,
                             float *z, float *y, float *scratch, int nthreads) {
  const int64_t nch = (s + P2_ACHUNK - 1) / P2_ACHUNK, items = n * nch;
#pragma omp parallel for schedule(static) \
    num_threads(nthreads) if (nthreads > 1)
  for (int64_t it = 0; it < items; ++it) {
#ifdef _OPENMP
    float *a = scratch + (size_t)omp_get_thread_num() * (size_t)(cmid * P2_ALD);
#else
    float *a = scratch;
#endif
    const int64_t nn = it / nch, c0 = (it % nch) * P2_ACHUNK,
                  c1 = c0 + P2_ACHUNK < s ? c0 + P2_ACHUNK : s, len = c1 - c0;
    float *zn = z + nn * cmid * s;
    for (int64_t p0 = c0; p0 < c1; p0 += P2_CH)
      p2_chunk(cin, cmid, p0, c1 - p0 < P2_CH ? c1 - p0 : P2_CH, w1, cin, 1,
               x + nn * cin * s, s, b1, zn, s, 0, 1);
    for (int64_t r = 0; r < cmid; ++r)
      sg_gelu2_fwd_seq_f32(len, zn + r * s + c0, a + r * P2_ALD);
    for (int64_t p0 = 0; p0 < len; p0 += P2_CH)
      p2_chunk(cmid, cout, p0, len - p0 < P2_CH ? len - p0 : P2_CH, w2, cmid, 1,
               a, P2_ALD, b2, y + nn * cout * s + c0, s, 0, 0);
  }
}

/* da[p] = sum over j < cout of w[j * ldw] dy[j * s + p], p < len: from
 * zero, one FMA per j in increasing order (sg_pw2_apply_f32's dx tile) */
static void p2_head_da(int64_t len, int64_t cout, const float *w, int64_t ldw,
                       const float *dy, int64_t s, float *da) {
  const int64_t nv = (len + 7) / 8;
  const __m256i mt = p2_mask(len - 8 * (nv - 1));
  for (int64_t v = 0; v < nv; ++v) {
    const int full = v + 1 < nv;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t j = 0; j < cout; ++j)
      acc = _mm256_fmadd_ps(_mm256_broadcast_ss(w + j * ldw),
                            P2_LD(dy + j * s + 8 * v, full, mt), acc);
    if (full)
      _mm256_storeu_ps(da + 8 * v, acc);
    else
      _mm256_maskstore_ps(da + 8 * v, mt, acc);
  }
}

void sg_pw2_head_backward_f32(int64_t n, int64_t cin, int64_t cmid,
                              int64_t cout, int64_t s, const float *x,
                              const float *w1, const float *w2, const float *z,
                              const float *dy, float *dx, float *dw1,
                              float *db1, float *dw2, float *db2,
                              float *scratch, int nthreads) {
  const int64_t nkb = (cmid + P2_MK - 1) / P2_MK,
                ncb = (cin + P2_MC - 1) / P2_MC,
                nkb2 = (cout + P2_MK - 1) / P2_MK,
                ncb2 = (cmid + P2_MC - 1) / P2_MC;
  const int64_t ntile = dw1 ? nkb * ncb : 0, nbt = db1 ? nkb : 0,
                ntile2 = dw2 ? nkb2 * ncb2 : 0, nbt2 = db2 ? nkb2 : 0,
                nchunk = (s + P2_GCH - 1) / P2_GCH;
  float *part = scratch, *bpart = part + cmid * cin * 8,
        *part2 = bpart + cmid * 8, *bpart2 = part2 + cout * cmid * 8,
        *dz = bpart2 + cout * 8, *a = dz + cmid * P2_GLD;
  memset(part, 0,
         (size_t)((cmid * cin + cmid) * 8 + (cout * cmid + cout) * 8) *
             sizeof *part);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  for (int64_t q = 0; q < n * nchunk; ++q) {
    const int64_t nn = q / nchunk, p0 = (q % nchunk) * P2_GCH;
    const int64_t len = s - p0 < P2_GCH ? s - p0 : P2_GCH;
    const int64_t nv = (len + 7) / 8, npc = dx ? (len + P2_CH - 1) / P2_CH : 0;
    const __m256i mt = p2_mask(len - 8 * (nv - 1));
    const float *xs = x + nn * cin * s + p0, *ds = dy + nn * cout * s + p0;
#pragma omp for schedule(static)
    for (int64_t k = 0; k < cmid; ++k) {
      /* row k + 2 of z requested two rows ahead: 128 short streams an
       * image apart, which the hardware's prefetch does not pick up */
      for (int64_t l = 0; k + 2 < cmid && l < len * 4; l += 64)
        __builtin_prefetch((const char *)(z + (nn * cmid + k + 2) * s + p0) + l,
                           0, 3);
      p2_head_da(len, cout, w2 + k, cmid, ds, s, dz + k * P2_GLD);
      sg_gelu2_both_seq_f32(len, z + (nn * cmid + k) * s + p0, dz + k * P2_GLD,
                            a + k * P2_GLD);
    }
    /* dW1 / db1, the dx pieces of P2_CH, then dW2 / db2 */
#pragma omp for schedule(static)
    for (int64_t t = 0; t < ntile + nbt + npc + ntile2 + nbt2; ++t) {
      if (t < ntile + nbt) {
        p2_wgrad_item(t, ntile, ncb, cin, cmid, nv, mt, dz, P2_GLD, xs, s, part,
                      bpart);
      } else if (t < ntile + nbt + npc) {
        const int64_t c0 = (t - ntile - nbt) * P2_CH;
        p2_chunk(cmid, cin, c0, len - c0 < P2_CH ? len - c0 : P2_CH, w1, 1, cin,
                 dz, P2_GLD, NULL, dx + nn * cin * s + p0, s, 0, 0);
      } else {
        p2_wgrad_item(t - ntile - nbt - npc, ntile2, ncb2, cmid, cout, nv, mt,
                      ds, s, a, P2_GLD, part2, bpart2);
      }
    }
  }
  p2_wgrad_finish(cin, cmid, ncb, ntile, part, dw1, bpart, db1, nthreads);
  p2_wgrad_finish(cmid, cout, ncb2, ntile2, part2, dw2, bpart2, db2, nthreads);
}

#else /* no AVX2 + FMA flags: callers use BLAS */

int sg_pw2_f32_built(void) { return 0; }

void sg_pw2_apply_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                      const float *w, int64_t wr, int64_t wc, const float *x,
                      const float *b, float *y, int accumulate, int nthreads) {
  (void)n, (void)cin, (void)cout, (void)s, (void)w, (void)wr, (void)wc;
  (void)x, (void)b, (void)y, (void)accumulate, (void)nthreads;
}

void sg_pw2_apply_act_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                          const float *w, const float *x, const float *b,
                          int add, float *z, float *a, int nthreads) {
  (void)n, (void)cin, (void)cout, (void)s, (void)w, (void)x, (void)b;
  (void)add, (void)z, (void)a, (void)nthreads;
}

void sg_pw2_wgrad_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                      const float *x, const float *dy, float *dw, float *db,
                      float *part, int nthreads) {
  (void)n, (void)cin, (void)cout, (void)s, (void)x, (void)dy, (void)dw;
  (void)db, (void)part, (void)nthreads;
}

size_t sg_pw2_backward_gelu_scratch(int64_t cin, int64_t cout) {
  (void)cin, (void)cout;
  return 0;
}

void sg_pw2_backward_gelu_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                              const float *x, const float *w, const float *z,
                              const float *dy, float *dx, int add, float *dw,
                              float *db, float *scratch, int nthreads) {
  (void)n, (void)cin, (void)cout, (void)s, (void)x, (void)w, (void)z;
  (void)dy, (void)dx, (void)add, (void)dw, (void)db, (void)scratch;
  (void)nthreads;
}

size_t sg_pw2_head_scratch(int64_t cin, int64_t cmid, int64_t cout, int bwd,
                           int nthreads) {
  (void)cin, (void)cmid, (void)cout, (void)bwd, (void)nthreads;
  return 0;
}

void sg_pw2_head_forward_f32(int64_t n, int64_t cin, int64_t cmid, int64_t cout,
                             int64_t s, const float *w1, const float *b1,
                             const float *w2, const float *b2, const float *x,
                             float *z, float *y, float *scratch, int nthreads) {
  (void)n, (void)cin, (void)cmid, (void)cout, (void)s, (void)w1, (void)b1;
  (void)w2, (void)b2, (void)x, (void)z, (void)y, (void)scratch, (void)nthreads;
}

void sg_pw2_head_backward_f32(int64_t n, int64_t cin, int64_t cmid,
                              int64_t cout, int64_t s, const float *x,
                              const float *w1, const float *w2, const float *z,
                              const float *dy, float *dx, float *dw1,
                              float *db1, float *dw2, float *db2,
                              float *scratch, int nthreads) {
  (void)n, (void)cin, (void)cmid, (void)cout, (void)s, (void)x, (void)w1;
  (void)w2, (void)z, (void)dy, (void)dx, (void)dw1, (void)db1, (void)dw2;
  (void)db2, (void)scratch, (void)nthreads;
}

#endif
