/* shardgrid — internal: normalised geometries of the op kernels and the
 * typed kernels instantiated from ops_tmpl.h for f32 and f64. */
#ifndef SG_OPS_IMPL_H
#define SG_OPS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "sg_ops.h"
#include "sg_ops_inl.h"

/* A window op over 3 spatial dims (missing leading dims have extent 1). */
typedef struct sg_conv_geom {
  int64_t n, c, k; /* batch, in channels, out channels */
  int64_t in[3], out[3], ker[3], str[3], dil[3];
  int64_t sin, sout, kk, ckk; /* products */
  int t;                      /* dim the tiles split (output rows) */
  int64_t inner;              /* output columns per row of dim t */
  int64_t rows, ntile, cols;  /* rows per tile, tiles, max columns */
  int pointwise;              /* 1x1, stride 1: no im2col */
  int direct;                 /* 2-D stride 1, f32 on AVX-512 or AVX2: no im2col
                (ops_tmpl.h) */
  int avx2;    /* direct on the AVX2 + FMA kernels (conv_avx2.c), not the
                 AVX-512 ones (pointwise.c) */
  int rowsout; /* avx2: the f32 forward stores y's rows in place
                  (sg_c2_gemm_rows_f32, no copy-out; SG_CONV_ROWS=0: off) */
  int bf16;    /* direct, forward and dx in bf16: 1 vdpbf16ps (conv_bf16.c),
               2 AMX tiles (conv_amx.c) */
  int wbf16;   /* the weight gradient on AMX tiles (set per backward call:
                 g->bf16 == 2 and x, dy bf16-valued) */
  int round;   /* forward: the output rounded to bf16 values per tile (f32;
                 sg_conv_desc.round_out) */
  int nthreads;
  size_t ws_per_thread; /* bytes, multiple of 64 */
} sg_conv_geom;

/* Row stride (elements of es bytes) of an im2col column matrix of ncol
 * columns: whole cache lines, an odd number of them, so that the short
 * strips the GEMM kernels read down its rows spread over all L1 sets (at a
 * stride of 1024 floats every row of a 48-pixel strip fell into the same
 * three sets and the kernels read from L2). */
static inline int64_t sg_col_ld(int64_t ncol, size_t es) {
  const int64_t line = 64 / (int64_t)es;
  return (((ncol + line - 1) / line) | 1) * line;
}

/* The direct convolution's per-thread workspace starts with the row shifts
 * of its GEMM (int64, for the larger of the forward's C k^2 rows and dx's
 * K k^2), then its float buffers. */
static inline size_t sg_direct_off_bytes(const sg_conv_geom *g) {
  int64_t n = g->ckk > g->k * g->kk ? g->ckk : g->k * g->kk;
  return ((size_t)n * sizeof(int64_t) + 63) / 64 * 64;
}

/* The bf16 direct convolution's per-thread workspace after the shifts
 * (32-bit elements, each piece 64-byte aligned): the forward's packed
 * channel pairs of a tile (C/2 planes of sg_bf16_fwd_plane), its f32
 * product (K rows) and the packed weights (K x C/2 k^2); dx's packed
 * transposed weights (C x K/2 k^2), dy's zero-extended f32 tile (K planes
 * of sg_bf16_dx_plane), its pairs (K/2 planes) and the f32 product (C
 * rows). Odd counts round up (a zero channel). */
static inline int64_t sg_al16(int64_t n) { return (n + 15) / 16 * 16; }
static inline int64_t sg_bf16_fwd_plane(const sg_conv_geom *g) {
  return sg_col_ld((g->rows + g->in[1] - g->out[1]) * g->in[2], 4);
}
static inline int64_t sg_bf16_dx_plane(const sg_conv_geom *g) {
  return (g->rows + g->in[1] - g->out[1]) * (2 * g->in[2] - g->out[2]);
}
static inline size_t sg_bf16_direct_bytes(const sg_conv_geom *g) {
  const int64_t c2 = (g->c + 1) / 2, k2 = (g->k + 1) / 2, kk = g->kk;
  const int64_t wg = 2 * g->in[2] - g->out[2], pd = sg_bf16_dx_plane(g);
  const int64_t fwd = sg_al16(c2 * sg_bf16_fwd_plane(g)) +
                      sg_al16(g->k * sg_col_ld(g->rows * g->in[2], 4)) +
                      sg_al16(g->k * c2 * kk);
  const int64_t bwd = sg_al16(g->c * k2 * kk) + sg_al16(g->k * pd) +
                      sg_al16(k2 * pd) +
                      sg_al16(g->c * sg_col_ld(g->rows * wg, 4));
  return sg_direct_off_bytes(g) + (size_t)(fwd > bwd ? fwd : bwd) * 4 + 128;
}

/* The AMX path's shapes: pb channel pairs per block (16, or all of them
 * when fewer), npb blocks, c2p = npb * pb planes (zero planes past the
 * pairs), kp output rows (a multiple of 32, zero weights past cout). */
typedef struct sg_amx_dims {
  int64_t npb, pb, c2p, kp;
} sg_amx_dims;
static inline sg_amx_dims sg_amx_dims_of(int64_t cin, int64_t cout) {
  sg_amx_dims a;
  const int64_t c2 = (cin + 1) / 2;
  a.npb = (c2 + 15) / 16;
  a.pb = c2 < 16 ? c2 : 16;
  a.c2p = a.npb * a.pb;
  a.kp = (cout + 31) / 32 * 32;
  return a;
}
/* Its workspace after the shifts (32-bit elements): forward: the packed
 * tile (c2p planes of sg_amx_fwd_plane: 32 pixels of slack, read by the
 * last 32-pixel block), the product (kp rows of sg_amx_ld), the weights
 * (k^2 x npb x kp x 16) and the bias tile (kp x 16); dx: the weights, dy's
 * f32 tile (K planes of sg_bf16_dx_plane), its pairs (c2p planes of that
 * + 32) and the product (cp rows). */
static inline int64_t sg_amx_fwd_plane(const sg_conv_geom *g) {
  return sg_col_ld((g->rows + g->in[1] - g->out[1]) * g->in[2] + 32, 4);
}
static inline int64_t sg_amx_ld(int64_t np) {
  return sg_col_ld((np + 31) / 32 * 32, 4);
}
/* The weight gradient's shapes (the reduction runs over pixels: A tiles
 * are 16 input channels x 32 pixels of bf16 planes, B tiles 16 pixel pairs
 * x 16 output channels of dy): cp input and kp output channels (multiples
 * of 32, zero past cin, cout), xpl bf16 per plane of the tile's input rows
 * (32 zero pixels of slack, read by the last pixel block, an odd number of
 * cache lines), ldc floats per row of dy's f32 tile and npad its pixels
 * rounded up to 32 (dy zero past the tile). */
typedef struct sg_amx_wdims {
  int64_t cp, kp, xpl, ldc, npad;
} sg_amx_wdims;
static inline sg_amx_wdims sg_amx_wdims_of(const sg_conv_geom *g) {
  sg_amx_wdims a;
  a.cp = (g->c + 31) / 32 * 32;
  a.kp = (g->k + 31) / 32 * 32;
  a.xpl = sg_col_ld((g->rows + g->in[1] - g->out[1]) * g->in[2] + 32, 2);
  a.npad = (g->rows * g->in[2] + 31) / 32 * 32;
  a.ldc = sg_col_ld(a.npad, 4);
  return a;
}
/* Its workspace after the shifts (32-bit elements): the bf16 planes (cp x
 * xpl / 2), dy's f32 tile (kp x ldc), its B tiles (npad / 2 x kp) and the
 * thread's partial sums (k^2 x cp x kp f32). */
static inline int64_t sg_amx_wgrad_elems(const sg_conv_geom *g) {
  const sg_amx_wdims a = sg_amx_wdims_of(g);
  return sg_al16(a.cp * a.xpl / 2) + sg_al16(a.kp * a.ldc) +
         sg_al16(a.npad / 2 * a.kp) + sg_al16(g->kk * a.cp * a.kp);
}
static inline size_t sg_amx_direct_bytes(const sg_conv_geom *g) {
  const sg_amx_dims f = sg_amx_dims_of(g->c, g->k),
                    b = sg_amx_dims_of(g->k, g->c);
  const int64_t wg = 2 * g->in[2] - g->out[2], pd = sg_bf16_dx_plane(g);
  const int64_t fwd = sg_al16(f.c2p * sg_amx_fwd_plane(g)) +
                      sg_al16(f.kp * sg_amx_ld(g->rows * g->in[2])) +
                      sg_al16(g->kk * f.npb * f.kp * 16) + sg_al16(f.kp * 16);
  const int64_t bwd = sg_al16(g->kk * b.npb * b.kp * 16) + sg_al16(g->k * pd) +
                      sg_al16(b.c2p * (pd + 32)) +
                      sg_al16(b.kp * sg_amx_ld(g->rows * wg));
  int64_t m = fwd > bwd ? fwd : bwd;
  const int64_t wgr = sg_amx_wgrad_elems(g);
  if (wgr > m) m = wgr;
  return sg_direct_off_bytes(g) + (size_t)m * 4 + 128;
}

/* The pooling window of a geometry (the shared kernels of sg_ops_inl.h). */
static inline sg_pool_win sg_pool_win_of(const sg_conv_geom *g) {
  sg_pool_win w;
  for (int i = 0; i < 3; ++i) {
    w.in[i] = g->in[i];
    w.out[i] = g->out[i];
    w.ker[i] = g->ker[i];
    w.str[i] = g->str[i];
    w.dil[i] = g->dil[i];
  }
  return w;
}
/* The pooling window and plane count (batch * channels) of d, validated
 * as sg_pool_forward does (ops.c; the CUDA launchers use it). */
sg_status sg_pool_win_make(const sg_conv_desc *d, sg_dtype dt, sg_pool_win *w,
                           int64_t *planes);

/* The window of a convolution (trans 0: valid windows on the padded
 * block) or of a transposed convolution (trans 1: kernel == stride, out =
 * in * kernel), validated as sg_conv_forward / sg_convt_forward do (ops.c;
 * the CUDA launchers and test_op_device use it). */
sg_status sg_conv_win_make(const sg_conv_desc *d, int trans, sg_dtype dt,
                           sg_pool_win *w);

/* The padding of sg_pad_forward over 3 dims (unused ones 1, no padding):
 * extents in3 -> out3, low pads lo3, modes mode3; validated as
 * sg_pad_forward does (ops.c; the CUDA launchers and test_op_device use
 * it). */
sg_status sg_pad_geom(sg_dtype dt, int nsp, int64_t planes, const int64_t *in,
                      const int64_t (*pad)[2], const sg_pad_mode *mode,
                      int64_t *in3, int64_t *out3, int64_t *lo3, int *mode3);

typedef struct sg_up_geom {
  int64_t planes, in[3], out[3], scale[3];
  int linear[3]; /* dims with a 1-cell margin (linear mode, real dims) */
} sg_up_geom;

/* The geometry of an up-sampling, validated as sg_upsample_forward does
 * (ops.c; the CUDA launchers use it). */
sg_status sg_up_geom_make(sg_upsample_kind kind, int nsp, int64_t planes,
                          const int64_t *in, const int64_t *scale, sg_dtype dt,
                          sg_up_geom *g);

/* Run-time CPU dispatch (ops.c). The AVX-512 kernels (pointwise.c,
 * act_simd.c) are compiled with their own target flags whatever the
 * library's -march; *_built() says whether they were, *_available()
 * whether they may run here: built, the CPU (cpuid, with the OS saving
 * the AVX-512 state) has AVX-512F, and SG_SIMD is not "portable" (which
 * forces the portable path: BLAS and plain C). Call nothing in those files
 * unless available() is 1. */
int sg_simd_avx512(void);
/* AVX2 + FMA present and not ruled out by SG_SIMD=portable (ops.c).
 * SG_SIMD=avx2 rules out the AVX-512 kernels only (sg_simd_avx512() 0):
 * the AVX2 tier on a CPU that has both (tests, A/B runs). */
int sg_simd_avx2(void);
int sg_pw_f32_built(void);
int sg_gelu_simd_built(void);

/* f32 pointwise (1x1) kernels, pointwise.c: where available, else the
 * callers use BLAS. apply: y[n][r][p] (+)= b[r] +
 * sum_ci w[r*wr + ci*wc] x[n][ci][p] (b may be NULL; `accumulate`: 0
 * overwrites y, SG_PW_ACC starts the sum from y instead of b, SG_PW_ADD
 * adds y to the finished sum, (b + sum) + y, as a separate addition of the
 * two would round). wgrad: dw[k][c] += sum_{n,p} dy[n][k][p]
 * x[n][c][p] and (db not NULL) db[k] += sum_{n,p} dy[n][k][p], with
 * (cout * cin + cout) * 16 floats of scratch `part`. */
int sg_pw_f32_available(void);
void sg_pw_apply_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                     const float *w, int64_t wr, int64_t wc, const float *x,
                     const float *b, float *y, int accumulate, int nthreads);
/* SG_PW_ROUND (or-ed in): y's values rounded to bf16 per strip while in
 * cache (sg_conv_desc.round_out). */
enum { SG_PW_ACC = 1, SG_PW_ADD = 2, SG_PW_ROUND = 4 };
/* The fused linear (sg_linear_act_forward), w (cout, cin) row-major:
 * z = (b + W x) (+ z on entry when add), then a = gelu(z) when a is not
 * NULL, per cache-hot chunk of pixels; the same values as the linear, an
 * addition and sg_act_forward one after the other. */
void sg_pw_apply_act_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                         const float *w, const float *x, const float *b,
                         int add, float *z, float *a, int nthreads);
/* One thread's y[r][p] = b[r] + sum_ci w[r*wr + ci*wc] x[ci*ldx + p], p in
 * [0, np), rows r < cout at stride ldy (b may be NULL): the GEMMs of the
 * im2col convolution. */
void sg_pw_gemm_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                    int64_t wr, int64_t wc, const float *x, int64_t ldx,
                    const float *b, float *y, int64_t ldy);
/* sg_pw_gemm_f32 with input row ci at x + xoff[ci] (x + xoff[ci] + p for
 * p < np): the direct (implicit-GEMM) convolution, whose rows are the
 * image itself shifted by each kernel offset. */
void sg_pw_gemm_off_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                        int64_t wr, int64_t wc, const float *x,
                        const int64_t *xoff, const float *b, float *y,
                        int64_t ldy);
/* One thread's share of a weight gradient: part (layout of sg_pw_wgrad_f32,
 * cout * cin * 16 floats, zeroed by the caller) += lane partials of
 * dy[k][p] x[c][p] over p < np (row strides ldd, ldx); sum: dw[k][c] +=
 * the lanes of part. */
void sg_pw_wgrad_acc_f32(int64_t cin, int64_t cout, int64_t np, const float *x,
                         int64_t ldx, const float *dy, int64_t ldd,
                         float *part);
/* sg_pw_wgrad_acc_f32 with x's row c at x + xoff[c] (xoff not NULL; ldx
 * unused): the direct convolution's weight gradient. */
void sg_pw_wgrad_acc_off_f32(int64_t cin, int64_t cout, int64_t np,
                             const float *x, int64_t ldx, const int64_t *xoff,
                             const float *dy, int64_t ldd, float *part);
void sg_pw_wgrad_sum_f32(int64_t cin, int64_t cout, const float *part,
                         float *dw);
void sg_pw_wgrad_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                     const float *x, const float *dy, float *dw, float *db,
                     float *part, int nthreads);

/* The direct convolution's kernels on AVX2 + FMA (conv_avx2.c), with the
 * signatures and sums of sg_pw_gemm_off_f32 and (but for dy's layout)
 * sg_pw_wgrad_acc_off_f32 / sg_pw_wgrad_sum_f32 (part: 8 lanes per weight, cout * cin * 8 floats,
 * zeroed by the caller). available: built with the flags, and
 * sg_simd_avx2() (ops.c). */
int sg_c2_conv_built(void);
int sg_c2_conv_available(void);
void sg_c2_gemm_off_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                        int64_t wr, int64_t wc, const float *x,
                        const int64_t *xoff, const float *b, float *y,
                        int64_t ldy);
/* sg_c2_gemm_off_f32 with the product's np positions rows in2 apart
 * stored to y's rows out2 apart (y + i*out2 + j for position i*in2 + j,
 * j < out2; the rest dropped): the direct forward's output written where
 * it goes, no tile to copy out. Where sg_c2_gemm_rows_ok(in2, out2). */
int sg_c2_gemm_rows_ok(int64_t in2, int64_t out2);
void sg_c2_gemm_rows_f32(int64_t cin, int64_t cout, int64_t np, const float *w,
                         int64_t wr, int64_t wc, const float *x,
                         const int64_t *xoff, const float *b, float *y,
                         int64_t ldy, int64_t in2, int64_t out2);
/* dW's lane partials over `rows` rows of n2 pixels: x's rows ldx apart
 * (through the shifts xoff), dy's channels ldd and rows dys apart (dy read
 * in place; the AVX-512 kernel takes dy in the forward's layout). */
void sg_c2_wgrad_acc_rows_f32(int64_t cin, int64_t cout, int64_t rows,
                              int64_t n2, const float *x, int64_t ldx,
                              const int64_t *xoff, const float *dy, int64_t ldd,
                              int64_t dys, float *part, int init);
void sg_c2_wgrad_sum_f32(int64_t cin, int64_t cout, const float *part,
                         float *dw);
/* The slots' sum by output-channel block (sg_c2_wgrad_kblocks(cout) of
 * them, any block on any thread): dw += slot s's lane sums for s in order
 * where used[s], slots sstride floats apart. */
int64_t sg_c2_wgrad_kblocks(int64_t cout);
void sg_c2_wgrad_sum_slots_f32(int64_t cin, int64_t cout, int64_t kb,
                               const float *part, int64_t sstride, int nslot,
                               const unsigned char *used, float *dw);
/* The same 1x1 kernels on AVX2 + FMA (pointwise_avx2.c), for CPUs without
 * AVX-512: apply and apply_act as above (apply_act's GELU by
 * sg_gelu2_fwd_seq_f32), wgrad with (cout * cin + cout) * 8 floats of
 * scratch. Only the 1x1 layers use them (not the 3x3 convolution's
 * im2col or direct GEMMs). sg_pw_tier() (ops.c): 2 where the AVX-512
 * kernels run, 1 where these do (built, sg_simd_avx2(), no AVX-512), else
 * 0 (BLAS). */
int sg_pw2_f32_built(void);
int sg_pw_tier(void);
void sg_pw2_apply_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                      const float *w, int64_t wr, int64_t wc, const float *x,
                      const float *b, float *y, int accumulate, int nthreads);
void sg_pw2_apply_act_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                          const float *w, const float *x, const float *b,
                          int add, float *z, float *a, int nthreads);
void sg_pw2_wgrad_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                      const float *x, const float *dy, float *dw, float *db,
                      float *part, int nthreads);
/* The linear's backward fused with GELU's: dz = gelu'(z) dy (as
 * sg_gelu2_bwd_f32; z NULL: dz = dy, no activation) per chunk of pixels
 * into scratch, then from it
 * dx (+)= W^T dz (add: dx's contents kept, as SG_PW_ADD), dW += dz x^T and
 * db += the sums of dz (each of dx, dw, db may be NULL) with the values
 * of sg_pw2_apply_f32 and sg_pw2_wgrad_f32 on the whole dz, bit for bit;
 * scratch: sg_pw2_backward_gelu_scratch(cin, cout) bytes. */
size_t sg_pw2_backward_gelu_scratch(int64_t cin, int64_t cout);
void sg_pw2_backward_gelu_f32(int64_t n, int64_t cin, int64_t cout, int64_t s,
                              const float *x, const float *w, const float *z,
                              const float *dy, float *dx, int add, float *dw,
                              float *db, float *scratch, int nthreads);
/* The projection head y = W2 gelu(W1 x + b1) + b2 (cin -> cmid -> cout)
 * fused: forward writes z = W1 x + b1 and y, a = gelu(z) only per chunk in
 * scratch; backward from z gives dx = W1^T dz, dW1 += dz x^T, db1, dW2 +=
 * dy a^T, db2 (any of the gradients NULL) with dz = gelu'(z) W2^T dy; the
 * values of the separate ops (apply_act, apply, wgrad, backward_gelu) bit
 * for bit. scratch: sg_pw2_head_scratch(cin, cmid, cout, bwd, nthreads)
 * bytes (forward: one block per thread). */
size_t sg_pw2_head_scratch(int64_t cin, int64_t cmid, int64_t cout, int bwd,
                           int nthreads);
void sg_pw2_head_forward_f32(int64_t n, int64_t cin, int64_t cmid, int64_t cout,
                             int64_t s, const float *w1, const float *b1,
                             const float *w2, const float *b2, const float *x,
                             float *z, float *y, float *scratch, int nthreads);
void sg_pw2_head_backward_f32(int64_t n, int64_t cin, int64_t cmid,
                              int64_t cout, int64_t s, const float *x,
                              const float *w1, const float *w2, const float *z,
                              const float *dy, float *dx, float *dw1,
                              float *db1, float *dw2, float *db2,
                              float *scratch, int nthreads);

/* bf16 kernels of the direct convolution (conv_bf16.c), where available:
 * built, the CPU has AVX512_BF16 (and AVX-512F, OS state), SG_SIMD is not
 * "portable" and SG_CONV_BF16 is not "0".
 * gemm_off: y[r][p] = b[r] (or 0) + sum over pair rows q < npr of the
 * pair dot product of w[r * wr + q] and x[xoff[q] + p], p < np, rows r <
 * cout at stride ldy; w and x hold bf16 pairs (low half: the even channel).
 * pack_pairs: dst[j * ds + p] = the pair (x[2j * xs + p], x[(2j + 1) * xs +
 * p]) rounded to bf16, zero for a channel >= nch, p < len. */
int sg_bf16_conv_built(void);
int sg_bf16_conv_available(void);
void sg_bf16_gemm_off(int64_t npr, int64_t cout, int64_t np, const uint32_t *w,
                      int64_t wr, const uint32_t *x, const int64_t *xoff,
                      const float *b, float *y, int64_t ldy);
void sg_bf16_pack_pairs(int64_t nch, int64_t len, const float *x, int64_t xs,
                        uint32_t *dst, int64_t ds);
/* Portable: the weights (r, ch, a) at w[r * rs + ch * cs + a], a < kk, as
 * pairs over ch: dst[r * (nch + 1) / 2 * kk + (ch / 2) * kk + a]. */
void sg_bf16_pack_weights(int64_t nr, int64_t nch, int64_t kk, const float *w,
                          int64_t rs, int64_t cs, uint32_t *dst);

/* AMX-BF16 (conv_amx.c): y (kp rows at stride ldy, np rounded up to 32
 * pixels) = bias tile bt (kp x 16, or NULL: 0) + sum over kernel offsets o
 * < nkk and pair blocks jb < npb of the weights wa (layout of
 * sg_amx_pack_weights) times the packed image x (a plane of pairs every xpl
 * elements, offset o at ooff[o]). supported(): cpuid and the OS's grant;
 * available() (ops.c) adds the vdpbf16ps packing and the switches. */
int sg_amx_conv_built(void);
int sg_amx_conv_supported(void);
int sg_amx_conv_available(void);
void sg_amx_gemm_off(int64_t nkk, int64_t npb, int64_t pb, int64_t kp,
                     int64_t np, const uint32_t *wa, const uint32_t *x,
                     int64_t xpl, const int64_t *ooff, const float *bt,
                     float *y, int64_t ldy);
/* The weight gradient on AMX (conv_amx.c): part[(o * cp + c) * kp + k] +=
 * sum over p < npad of xb[c * xpl + ooff[o] + p] dy[k][p] for offsets o <
 * nkk, c < cp, k < kp (multiples of 32); xb: bf16 planes, dy as the B
 * tiles dyt of sg_bf16_pack_dy_tiles. */
void sg_amx_wgrad_off(int64_t nkk, int64_t cp, int64_t kp, int64_t npad,
                      const uint16_t *xb, int64_t xpl, const int64_t *ooff,
                      const uint32_t *dyt, float *part);
/* Its operands (conv_bf16.c, AVX-512 BF16): pack_planes: dst[c * ds + p]
 * = x[c * xs + p] rounded to bf16 for p < len, zero for len <= p < len16 +
 * 32 (len16: len rounded up to 16; ds at least that), c < nch. pack_dy_tiles: the B tiles of dy's f32 tile
 * (kp rows at stride ldc, npad pixels, multiples of 16 and 32): tile (pb,
 * kb) at dyt + (pb * kp / 16 + kb) * 256, its row r the pairs (pixels
 * 32 pb + 2r, + 1) of output channels 16 kb + j, j < 16. */
void sg_bf16_pack_planes(int64_t nch, int64_t len, const float *x, int64_t xs,
                         uint16_t *dst, int64_t ds);
void sg_bf16_pack_dy_tiles(int64_t kp, int64_t npad, const float *dyc,
                           int64_t ldc, uint32_t *dyt);
/* Portable: weights (r, ch, o) at w[r * rs + ch * cs + o] (r < nr, ch <
 * nch, o < kk) as dst[((o * npb + jb) * kp + r) * 16 + jj] = the pair of
 * channels 2j, 2j + 1, j = jb * pb + jj (zero past nr, nch, pb). */
void sg_amx_pack_weights(int64_t nr, int64_t nch, int64_t kk, const float *w,
                         int64_t rs, int64_t cs, sg_amx_dims a, uint32_t *dst);

/* f32 GELU on AVX-512F (act_simd.c: sg_gelu_*_simd_f32, fwd_seq) or
 * AVX2 + FMA (act_avx2.c: sg_gelu2_*); sg_gelu_tier() (ops.c) 2, 1 or 0
 * as sg_pw_tier() (the same flags build both files of a tier, so a fused
 * linear + GELU and the separate ops agree); available(): tier > 0.
 * ops.c's callers pick the tier's kernel. */
int sg_gelu_simd_available(void);
int sg_gelu_tier(void);
int sg_gelu2_built(void);
void sg_gelu2_fwd_f32(int64_t n, const float *x, float *y);
void sg_gelu2_fwd_seq_f32(int64_t n, const float *x, float *y);
void sg_gelu2_bwd_f32(int64_t n, const float *x, const float *dy, float *dx);
void sg_gelu2_bwd_seq_f32(int64_t n, const float *x, const float *dy,
                          float *dx);
/* a = gelu(x) and io = gelu'(x) io (in place) on the calling thread: the
 * values of fwd_seq and bwd_seq, one exp for both */
void sg_gelu2_both_seq_f32(int64_t n, const float *x, float *io, float *a);
void sg_gelu_fwd_simd_f32(int64_t n, const float *x, float *y);
/* The same on the calling thread only (no OpenMP region): the epilogue of
 * the fused linear's cache-hot chunks. */
void sg_gelu_fwd_seq_f32(int64_t n, const float *x, float *y);
void sg_gelu_bwd_simd_f32(int64_t n, const float *x, const float *dy,
                          float *dx);

/* The convolution weight gradient's partial sums: SG_DW_SLOTS fixed slots,
 * each taking a fixed contiguous run of each phase's tiles in order and
 * summed in slot order at the end, so that dW has the same bits for every
 * thread count and schedule (threads take whole slots). A slot
 * holds k * ckk elements (the BLAS path, transposed: ckk x k), or k * ckk *
 * lanes f32 lane partials for the register-blocked kernels (16 AVX-512, 8
 * the AVX2 direct ones). */
#define SG_DW_SLOTS 8
static inline size_t sg_conv_dw_part_bytes(const sg_conv_geom *g, size_t es,
                                           int lanes) {
  return (size_t)SG_DW_SLOTS * (size_t)(g->k * g->ckk) *
         (lanes ? (size_t)lanes * sizeof(float) : es);
}

/* OpenBLAS single-threaded for the duration of a kernel, at one OpenMP
 * thread too: a GEMM that OpenBLAS splits over its own threads rounds
 * otherwise (the f64 convolution dW at one thread, with OpenBLAS at its
 * default or OMP_NUM_THREADS count, was not the bits of two threads). */
int sg_blas_threads_begin(void);
void sg_blas_threads_end(int saved);

#define SG_OPS_DECLARE(R, S)                                                  \
  void sg_conv_fwd_##S(const sg_conv_geom *g, const R *x, const R *w,         \
                       const R *b, R *y, void *ws);                           \
  void sg_conv_bwd_##S(const sg_conv_geom *g, const R *x, const R *w,         \
                       const R *dy, R *dx, R *dw, R *db, void *ws,            \
                       void *dwpart, int lanes);                              \
  void sg_convt_fwd_##S(const sg_conv_geom *g, const R *x, const R *w,        \
                        const R *b, R *y, void *ws);                          \
  void sg_convt_bwd_##S(const sg_conv_geom *g, const R *x, const R *w,        \
                        const R *dy, R *dx, R *dw, R *db, void *ws,           \
                        void *dwpart);                                        \
  void sg_pool_fwd_##S(int kind, const sg_conv_geom *g, const R *x, R *y);    \
  void sg_pool_bwd_##S(int kind, const sg_conv_geom *g, const R *x,           \
                       const R *dy, R *dx);                                   \
  void sg_up_fwd_##S(int linear, const sg_up_geom *g, const R *x, R *y);      \
  void sg_up_bwd_##S(int linear, const sg_up_geom *g, const R *dy, R *dx);    \
  void sg_pad_fwd_##S(const int64_t *in, const int64_t *out,                  \
                      const int64_t *lo, const int *mode, int64_t planes,     \
                      const R *src, R *dst);                                  \
  void sg_pad_bwd_##S(const int64_t *in, const int64_t *out,                  \
                      const int64_t *lo, const int *mode, int64_t planes,     \
                      const R *dpad, R *dsrc);                                \
  void sg_act_fwd_##S(int act, int64_t n, const R *x, R *y);                  \
  void sg_act_bwd_##S(int act, int64_t n, const R *x, const R *dy, R *dx);    \
  void sg_binary_fwd_##S(int op, int64_t n, const R *a, const R *b, R *y);    \
  void sg_binary_bwd_##S(int op, int64_t n, const R *a, const R *b,           \
                         const R *dy, R *da, R *db);                          \
  void sg_scale_##S(int64_t n, double alpha, const R *x, R *y);               \
  void sg_bias_fwd_##S(int64_t nb, int64_t c, int64_t s, const R *x,          \
                       const R *b, R *y);                                     \
  void sg_bias_bwd_##S(int64_t nb, int64_t c, int64_t s, const R *dy, R *db); \
  void sg_norm_stats_##S(const sg_norm_desc *d, const R *x, sg_moments *st,   \
                         void *scratch);                                      \
  void sg_norm_fwd_##S(const sg_norm_desc *d, const R *x,                     \
                       const sg_moments *st, const R *gamma, const R *beta,   \
                       R *y);                                                 \
  void sg_norm_sums_##S(const sg_norm_desc *d, const R *x,                    \
                        const sg_moments *st, const R *gamma, const R *dy,    \
                        double *sums, void *scratch);                         \
  void sg_norm_bwd_##S(const sg_norm_desc *d, const R *x,                     \
                       const sg_moments *st, const R *gamma, const R *dy,     \
                       const double *sums, R *dx, R *dgamma, R *dbeta);       \
  void sg_loss_partial_##S(int kind, int64_t batch, int64_t n, const R *p,    \
                           const R *t, double *partial, void *scratch);       \
  void sg_loss_bwd_##S(int kind, int64_t batch, int64_t n, const R *p,        \
                       const R *t, const double *partial, double g, R *dp,    \
                       R *dt);

SG_OPS_DECLARE(float, f32)
SG_OPS_DECLARE(double, f64)

/* Norm statistic group of element (n, c, s). */
static inline int64_t sg_norm_group(const sg_norm_desc *d, int64_t n, int64_t c,
                                    int64_t s) {
  return sg_norm_group_of((int)d->kind, d->channels, d->groups, d->spatial, n,
                          c, s);
}

#define SG_SUM_BLOCK 4096 /* fixed blocking of deterministic sums */

#endif /* SG_OPS_IMPL_H */
