/* shardgrid — fused, blocked scaled dot-product attention (FlashAttention-2
 * tiling with an online softmax) on the host: argument checks, geometry,
 * workspace, dispatch, and the portable f32 and the f64 kernels
 * (attention_tmpl.h); the f32 kernel on AVX-512F is attention_avx512.c,
 * on AVX2 + FMA attention_avx2.c, chosen at run time (attn_avx512 and
 * attn_avx2 below).
 * The algorithm, its memory and its use by ring attention: docs/attention.md. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attention_kern.h"
#include "ops_impl.h"
#include "sg_device.h"
#include "sg_ops_inl.h"

/* ---- tile GEMMs -----------------------------------------------------------
 * c (m x n, row stride ldc) (+)= a b, a's element (r, p) at a[r*ar + p*ac]
 * (so a transposed operand needs no copy), b (k x n) with row stride ldb:
 * the BLAS, here for f64 and the portable f32 kernel; the f32 kernel on
 * AVX-512 has its own register-blocked tiles (attention_avx512.c). */
static void attn_gemm_f64(int64_t m, int64_t n, int64_t k, const double *a,
                          int64_t ar, int64_t ac, const double *b, int64_t ldb,
                          double *c, int64_t ldc, int acc) {
  cblas_dgemm(CblasRowMajor, ac == 1 ? CblasNoTrans : CblasTrans, CblasNoTrans,
              (int)m, (int)n, (int)k, 1, a, (int)(ac == 1 ? ar : ac), b,
              (int)ldb, acc ? 1 : 0, c, (int)ldc);
}

static void attn_gemm_f32(int64_t m, int64_t n, int64_t k, const float *a,
                          int64_t ar, int64_t ac, const float *b, int64_t ldb,
                          float *c, int64_t ldc, int acc) {
  cblas_sgemm(CblasRowMajor, ac == 1 ? CblasNoTrans : CblasTrans, CblasNoTrans,
              (int)m, (int)n, (int)k, 1, a, (int)(ac == 1 ? ar : ac), b,
              (int)ldb, acc ? 1 : 0, c, (int)ldc);
}

/* the portable kernels: BLAS tiles, the softmax in base e with sg_expf */
#define R float
#define S f32
#define SG_AEXP sg_expf
#define SG_AMEXP expf
#define SG_ALOG logf
#include "attention_tmpl.h"
#undef R
#undef S
#undef SG_AEXP
#undef SG_AMEXP
#undef SG_ALOG

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

/* ---- f32 dispatch --------------------------------------------------------
 * The AVX-512 kernel where it was built (its own target flags, whatever
 * SG_NATIVE says) and the CPU running it has AVX-512F; SG_SIMD=portable
 * forces the portable one (sg_simd_avx512, ops.c). The two compute the same
 * function to f32 rounding (base 2 against base e, different tile sums):
 * test_attention checks each against the f64 reference and against the
 * other. */
static int attn_avx512(void) {
  return sg_attn_avx512_built() && sg_simd_avx512();
}

/* else AVX2 + FMA (attention_avx2.c, its own -mavx2 -mfma): Haswell, Zen
 * 1-3; SG_SIMD=avx2 takes it on an AVX-512 CPU too (tests). */
static int attn_avx2(void) { return sg_attn_avx2_built() && sg_simd_avx2(); }

static void attn_fwd_f32_any(const sg_attn_geom *g, const float *q,
                             const float *k, const float *v, float *o,
                             float *lse, void *ws) {
  if (attn_avx512())
    sg_attn_fwd_f32_avx512(g, q, k, v, o, lse, ws);
  else if (attn_avx2())
    sg_attn_fwd_f32_avx2(g, q, k, v, o, lse, ws);
  else
    attn_fwd_f32(g, q, k, v, o, lse, ws);
}

static void attn_bwd_f32_any(const sg_attn_geom *g, const float *q,
                             const float *k, const float *v, const float *o,
                             const float *lse, const float *dout, float *dq,
                             float *dk, float *dv, void *ws) {
  if (attn_avx512())
    sg_attn_bwd_f32_avx512(g, q, k, v, o, lse, dout, dq, dk, dv, ws);
  else if (attn_avx2())
    sg_attn_bwd_f32_avx2(g, q, k, v, o, lse, dout, dq, dk, dv, ws);
  else
    attn_bwd_f32(g, q, k, v, o, lse, dout, dq, dk, dv, ws);
}

/* ---- bf16 storage --------------------------------------------------------
 * q, k, v, o (dout, dq, dk, dv) in bf16, lse in f32: the softmax statistics
 * stay f32 (an lse rounded to bf16 is off by up to 2^-9 of |lse|, every
 * probability e^{S - lse} of the backward with it). Portable: the operands
 * are widened to f32 (exact), the f32 kernel runs (f32 accumulation and
 * statistics), the outputs are rounded to the nearest bf16 (ties to even).
 * So the result is the f32 kernel's on the same values, rounded once; the
 * f32 copies cost 4 bytes an element during the call. Where the CPU has
 * AMX-BF16 the forward runs on bf16 tiles instead (attention_avx512.c:
 * no copies, 2.6x the widened forward's speed measured; SG_ATTN_BF16=widen
 * keeps this path, =tiles takes the vdpbf16ps tiles); the backward is
 * always this path. */

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
  const int mode = sg_attn_bf16_avx512_mode();
  if (mode) { /* bf16 tiles: no f32 copies */
    sg_attn_fwd_bf16_avx512(g, mode, q, k, v, o, lse, ws);
    return SG_OK;
  }
  sg_status st = attn_bf16_widen(4, in, n, f, &own);
  if (st == SG_OK) {
    attn_fwd_f32_any(g, f[0], f[1], f[2], f[3], lse, ws);
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
    attn_bwd_f32_any(g, f[0], f[1], f[2], f[3], lse, f[4], f[5], f[6], f[7],
                     ws);
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
   * backward: q^T and dout^T of a head (in blocks of whole query tiles:
   * nq rounded up to BQ), D, two score tiles */
  const int64_t nqr = (d->nq + SG_ATTN_BQ - 1) / SG_ATTN_BQ * SG_ATTN_BQ;
  size_t fwd = (size_t)(SG_ATTN_BQ * (d->head_dim + SG_ATTN_BK + 3));
  size_t bwd = (size_t)(2 * SG_ATTN_BQ * SG_ATTN_BK) +
               (size_t)(nqr * 2 * d->head_dim + d->nq);
  size_t need = (fwd > bwd ? fwd : bwd) * esz;
  /* the bf16 forward's tiles and its packed keys (attention_avx512.c) */
  if (dt == SG_DTYPE_BF16 && sg_attn_bf16_ws_bytes(d->nk, d->head_dim) > need)
    need = sg_attn_bf16_ws_bytes(d->nk, d->head_dim);
  g->ws_per_thread = (need + 63) / 64 * 64;
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
    attn_fwd_f32_any(&g, q, k, v, o, lse, ws);
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
    attn_bwd_f32_any(&g, q, k, v, o, lse, dout, dq, dk, dv, ws);
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
