/* shardgrid — the pruned first stage as a matrix product (host plans).
 *
 * When the halved (last) dim keeps only K of its n/2 + 1 modes, its r2c
 * computes every mode and the next stage throws most of them away; the
 * c2r of the inverse transforms a spectrum that is mostly the zeros the
 * reverse stage padded in. For small K a real matrix product does only the
 * kept work and writes / reads the kept modes in place (no truncating copy,
 * no zero padding, no copy of the c2r's input):
 *   forward   y[r, 2k + c] = sum_j x[r, j] F[j, 2k + c],
 *             F[j, 2k] = cos(2 pi k j / n), F[j, 2k + 1] = -sin(...)
 *   backward  x[r, j] = sum_k y[r, k] B[k, j],
 *             B[2k, j] = c_k cos(2 pi k j / n), B[2k + 1, j] = -c_k sin(...)
 * with c_0 = 1, c_k = 2 (the conjugate mode the halved spectrum stands
 * for); K <= n/2 so no Nyquist mode is kept, and sin(0) = 0 drops Im y[0]
 * as FFTW's c2r does. Results are those of r2c + truncation and of zero
 * padding + c2r, to rounding (a sum of n or 2K products per value). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fft_plan_impl.h"
#include "ops_impl.h"
#include "sg_device.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Columns of a matrix row, padded so the kernel's column blocks are whole. */
static int64_t dft_padded(int64_t w, int64_t cb) {
  return (w + cb - 1) / cb * cb;
}

/* ---- the product kernel ----------------------------------------------------
 * out[r, j] = sum_s in[r, s] m[s, j] for r < rows, j < w (out's row stride
 * os, in's is), m: S rows of wp (w padded with zero columns to the column
 * block CB). A block of Q rows x CB columns stays in registers across the
 * sum (Q and CB constants: one function each), explicit fma (the build
 * does not contract a * b + c). Full blocks store CB columns; only the
 * tail block of a width that is no multiple of the block takes nj (its
 * variable-length store keeps the accumulators in memory). f32 widths that
 * are multiples of 24 and not of 32 (2K = 24: 12 modes) run 24-column
 * blocks, which cover them exactly. (Blocks of 8 or 16 f32 columns made
 * GCC vectorise the sum over s with shuffles instead: 4x slower.) */
#define SG_DFT_BLK(T, SFX, FMA, Q, CB, NAME, STORE)                           \
  static void NAME(int64_t S, int64_t wp, int64_t j0, int64_t nj,             \
                   const T *restrict in, int64_t is, const T *restrict m,     \
                   T *restrict out, int64_t os) {                             \
    T acc[Q][CB];                                                             \
    for (int q = 0; q < Q; ++q)                                               \
      for (int t = 0; t < CB; ++t) acc[q][t] = 0;                             \
    for (int64_t s = 0; s < S; ++s) {                                         \
      const T *mr = m + s * wp + j0;                                          \
      for (int q = 0; q < Q; ++q) {                                           \
        const T v = in[q * is + s];                                           \
        for (int t = 0; t < CB; ++t) acc[q][t] = FMA(v, mr[t], acc[q][t]);    \
      }                                                                       \
    }                                                                         \
    for (int q = 0; q < Q; ++q)                                               \
      for (int64_t t = 0; t < (STORE); ++t) out[q * os + j0 + t] = acc[q][t]; \
  }
/* full blocks of CB and CB2 columns, tail blocks of CB */
#define SG_DFT_KERNEL(T, SFX, FMA, CB, CB2)                                                        \
  SG_DFT_BLK(T, SFX, FMA, 4, CB, dft_full4_##SFX, CB)                                              \
  SG_DFT_BLK(T, SFX, FMA, 1, CB, dft_full1_##SFX, CB)                                              \
  SG_DFT_BLK(T, SFX, FMA, 4, CB2, dft_full4b_##SFX, CB2)                                           \
  SG_DFT_BLK(T, SFX, FMA, 1, CB2, dft_full1b_##SFX, CB2)                                           \
  SG_DFT_BLK(T, SFX, FMA, 4, CB, dft_tail4_##SFX, nj)                                              \
  SG_DFT_BLK(T, SFX, FMA, 1, CB, dft_tail1_##SFX, nj)                                              \
  typedef void (*dft_blk_fn_##SFX)(int64_t, int64_t, int64_t, int64_t,                             \
                                   const T *, int64_t, const T *, T *,                             \
                                   int64_t);                                                       \
  static void dft_apply_##SFX(int nth, int64_t rows, int64_t S, int64_t w,                         \
                              const T *in, int64_t is, const T *m, T *out,                         \
                              int64_t os) {                                                        \
    const int64_t wp = dft_padded(w, CB), nblk = (rows + 3) / 4;                                   \
    const int b2 = w % CB != 0 && w % CB2 == 0;                                                    \
    const int64_t cb = b2 ? CB2 : CB;                                                              \
    const dft_blk_fn_##SFX f4 = b2 ? dft_full4b_##SFX : dft_full4_##SFX,                           \
                           f1 = b2 ? dft_full1b_##SFX : dft_full1_##SFX;                           \
    _Pragma(                                                                                       \
        "omp parallel for schedule(static) num_threads(nth) if (nth > 1 && rows * S * w > 65536)") \
    for (int64_t b = 0; b < nblk; ++b) {                                                           \
      const int64_t r = b * 4, nq = rows - r < 4 ? rows - r : 4;                                   \
      for (int64_t j0 = 0; j0 < w; j0 += cb) {                                                     \
        const int64_t nj = w - j0 < cb ? w - j0 : cb;                                              \
        for (int64_t q = 0; q < nq; q += nq == 4 ? 4 : 1) {                                        \
          const T *iq = in + (r + q) * is;                                                         \
          T *oq = out + (r + q) * os;                                                              \
          if (nq == 4)                                                                             \
            (nj == cb ? f4 : dft_tail4_##SFX)(S, wp, j0, nj, iq, is, m, oq,                        \
                                              os);                                                 \
          else                                                                                     \
            (nj == cb ? f1 : dft_tail1_##SFX)(S, wp, j0, nj, iq, is, m, oq,                        \
                                              os);                                                 \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }
SG_DFT_KERNEL(float, f32, fmaf, 32, 24)
SG_DFT_KERNEL(double, f64, fma, 16, 12)

static int64_t dft_cb(int f64) { return f64 ? 16 : 32; }

/* ---- planning ---------------------------------------------------------------- */

int sg_fft_dft_wanted(int64_t n, int64_t keep) {
  const char *e = getenv("SG_FFT_DFT");
  if (e && *e) return atoi(e) != 0;
  /* the product does n * 2K multiply-adds per row, FFTW's r2c about
   * 2.5 n log2(n) flops at a lower rate plus the truncating copy. Measured
   * at n = 64, K = 12 (the bench FNO): the product is about twice as fast
   * (bench/RESULTS.md, h-fno4). Larger products are not measured: keep to
   * 4/3 of that work and at most 16 modes. */
  return 2 * keep <= 32 && n * 2 * keep <= 2048;
}

/* The value of F / B at (k, j): cos and -sin of 2 pi k j / n, the angle
 * reduced exactly (k j mod n) before it is rounded. */
static void dft_cs(int64_t n, int64_t k, int64_t j, double *c, double *s) {
  const double a = 2.0 * M_PI * (double)((k * j) % n) / (double)n;
  *c = cos(a);
  *s = -sin(a);
}

sg_status sg_fft_stage_make_dft(sg_fft_plan_t p, sg_fft_stage *s) {
  sg_status st = SG_OK;
  const int nd = p->D + 1, f64 = p->desc.dtype == SG_DTYPE_F64;
  const int64_t n = s->in_shape[nd - 1], K = s->out_shape[nd - 1];
  const int64_t cb = dft_cb(f64), fw = dft_padded(2 * K, cb),
                bw = dft_padded(n, cb);
  const size_t es = p->real_size;
  SG_TRY(sg_calloc(sg_device_host(), (size_t)(n * fw) * es, &s->dft_f));
  SG_TRY(sg_calloc(sg_device_host(), (size_t)(2 * K * bw) * es, &s->dft_b));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < n; ++j) {
      double c, sn, w = k == 0 ? 1.0 : 2.0;
      dft_cs(n, k, j, &c, &sn);
      const int64_t f[2] = {j * fw + 2 * k, j * fw + 2 * k + 1},
                    b[2] = {2 * k * bw + j, (2 * k + 1) * bw + j};
      const double fv[2] = {c, sn}, bv[2] = {w * c, w * sn};
      for (int i = 0; i < 2; ++i) {
        if (f64) {
          ((double *)s->dft_f)[f[i]] = fv[i];
          ((double *)s->dft_b)[b[i]] = bv[i];
        } else {
          ((float *)s->dft_f)[f[i]] = (float)fv[i];
          ((float *)s->dft_b)[b[i]] = (float)bv[i];
        }
      }
    }
fail:
  return st;
}

void sg_fft_stage_free_dft(sg_fft_stage *s) {
  sg_free(sg_device_host(), &s->dft_f);
  sg_free(sg_device_host(), &s->dft_b);
}

/* ---- execution ------------------------------------------------------------- */

void sg_fft_stage_exec_dft(sg_fft_plan_t p, const sg_fft_stage *s, int fwd,
                           const void *in, void *out) {
  const int nd = p->D + 1;
  const int64_t rows = sg_fft_prod64(s->in_shape, nd - 1),
                n = s->in_shape[nd - 1], k2 = 2 * s->out_shape[nd - 1];
  const int64_t S = fwd ? n : k2, w = fwd ? k2 : n;
  const void *m = fwd ? s->dft_f : s->dft_b;
  if (p->desc.dtype == SG_DTYPE_F64)
    dft_apply_f64(p->nth, rows, S, w, in, S, m, out, w);
  else if (sg_dft_avx2_built() && sg_simd_avx2() && !sg_simd_avx512())
    /* AVX2 without AVX-512: 12 vector sums where the portable block's 16
     * spill; the same bits (dft_avx2.c) */
    sg_dft_apply_avx2_f32(p->nth, rows, S, w, dft_padded(w, dft_cb(0)), in, S,
                          m, out, w);
  else
    dft_apply_f32(p->nth, rows, S, w, in, S, m, out, w);
}
