// shardgrid — the fused attention on CUDA device pointers (sg_ops_cuda.h):
// one thread per query row (forward, D = rowsum(dout * o), dq) or per key
// row (dk, dv) over the SG_HD row functions of sg_attn_inl.h, which
// tests/ops/test_attn_device.c runs on the host against the host kernel
// (sg_attention_forward/backward) in f64. O(N d) memory: the backward's
// only buffer is D (B*H*Nq values, stream-ordered). Correctness first: no
// shared-memory tiles yet (a warp's threads read the same key rows, which
// the caches serve).
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "sg_attn_inl.h"
#include "launch_inl.h"
#include "sg_ops_cuda.h"
#include "sg_wattn_inl.h"

namespace {

const int kThreads = 128;  // a thread keeps 2 x SG_ATTN_HD_B scores

inline unsigned grid_for(int64_t n) { return sg_grid_for(n, kThreads); }


__device__ inline void row_fwd(const sg_attn_rows *g, int64_t i, const float *q,
                               const float *k, const float *v, float *o,
                               float *lse) {
  sg_attn_row_fwd_f32(g, i, q, k, v, o, lse);
}
__device__ inline void row_fwd(const sg_attn_rows *g, int64_t i,
                               const double *q, const double *k,
                               const double *v, double *o, double *lse) {
  sg_attn_row_fwd_f64(g, i, q, k, v, o, lse);
}
__device__ inline float dot(const float *a, const float *b, int64_t n) {
  return sg_attn_dot_f32(a, b, n);
}
__device__ inline double dot(const double *a, const double *b, int64_t n) {
  return sg_attn_dot_f64(a, b, n);
}
__device__ inline void row_dq(const sg_attn_rows *g, int64_t i, const float *q,
                              const float *k, const float *v, float lse,
                              float dd, const float *dout, float *dq) {
  sg_attn_row_dq_f32(g, i, q, k, v, lse, dd, dout, dq);
}
__device__ inline void row_dq(const sg_attn_rows *g, int64_t i, const double *q,
                              const double *k, const double *v, double lse,
                              double dd, const double *dout, double *dq) {
  sg_attn_row_dq_f64(g, i, q, k, v, lse, dd, dout, dq);
}
__device__ inline void row_dkv(const sg_attn_rows *g, int64_t j, const float *q,
                               const float *kj, const float *vj,
                               const float *lse, const float *dd,
                               const float *dout, float *dk, float *dv) {
  sg_attn_row_dkv_f32(g, j, q, kj, vj, lse, dd, dout, dk, dv);
}
__device__ inline void row_dkv(const sg_attn_rows *g, int64_t j,
                               const double *q, const double *kj,
                               const double *vj, const double *lse,
                               const double *dd, const double *dout, double *dk,
                               double *dv) {
  sg_attn_row_dkv_f64(g, j, q, kj, vj, lse, dd, dout, dk, dv);
}

// rows = B*H*Nq query rows; row r of head h = r / Nq.
template <typename T>
__global__ void fwd_k(sg_attn_rows g, int64_t rows, const T *q, const T *k,
                      const T *v, T *o, T *lse) {
  SG_GRID_STRIDE(r, rows) {
    const int64_t h = r / g.nq, kh = h * g.nk * g.d;
    row_fwd(&g, r % g.nq, q + r * g.d, k + kh, v + kh, o + r * g.d,
            lse ? lse + r : (T *)0);
  }
}

template <typename T>
__global__ void delta_k(int64_t rows, int64_t d, const T *dout, const T *o,
                        T *dd) {
  SG_GRID_STRIDE(r, rows) dd[r] = dot(dout + r * d, o + r * d, d);
}

template <typename T>
__global__ void dq_k(sg_attn_rows g, int64_t rows, const T *q, const T *k,
                     const T *v, const T *lse, const T *dd, const T *dout,
                     T *dq) {
  SG_GRID_STRIDE(r, rows) {
    const int64_t h = r / g.nq, kh = h * g.nk * g.d;
    row_dq(&g, r % g.nq, q + r * g.d, k + kh, v + kh, lse[r], dd[r],
           dout + r * g.d, dq + r * g.d);
  }
}

// keys = B*H*Nk key rows; row r of head h = r / Nk.
template <typename T>
__global__ void dkv_k(sg_attn_rows g, int64_t keys, const T *q, const T *k,
                      const T *v, const T *lse, const T *dd, const T *dout,
                      T *dk, T *dv) {
  SG_GRID_STRIDE(r, keys) {
    const int64_t h = r / g.nk, qh = h * g.nq * g.d;
    row_dkv(&g, r % g.nk, q + qh, k + r * g.d, v + r * g.d, lse + h * g.nq,
            dd + h * g.nq, dout + qh, dk ? dk + r * g.d : (T *)0,
            dv ? dv + r * g.d : (T *)0);
  }
}

// The host's checks (attention.c) for the device: f32 or f64 (bf16
// storage is host-only), sizes, scale, causal, offset; the geometry.
sg_status rows_make(const char *what, const sg_attn_desc *d, sg_dtype dt,
                    sg_attn_rows *g, int64_t *bh) {
  sg_status st = SG_OK;
  if (!d) SG_RAISE(SG_ERR_INVALID_ARG, "%s: descriptor is NULL", what);
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: f32 or f64, not %s (host only)", what,
             sg_dtype_name(dt));
  if (d->batch < 0 || d->heads < 0 || d->nq < 0 || d->nk < 0 || d->head_dim < 1)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "%s: sizes (batch %lld, heads %lld, nq %lld, nk %lld, head_dim "
             "%lld)",
             what, (long long)d->batch, (long long)d->heads, (long long)d->nq,
             (long long)d->nk, (long long)d->head_dim);
  if (!isfinite(d->scale))
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: scale must be finite, got %g", what,
             d->scale);
  if (d->causal != 0 && d->causal != 1)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: causal must be 0 or 1, got %d", what,
             d->causal);
  if (d->causal &&
      (d->causal_offset > INT64_MAX / 4 || d->causal_offset < -(INT64_MAX / 4)))
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: causal_offset %lld out of range", what,
             (long long)d->causal_offset);
  g->nq = d->nq;
  g->nk = d->nk;
  g->d = d->head_dim;
  g->scale = d->scale != 0 ? d->scale : 1 / sqrt((double)d->head_dim);
  g->causal = d->causal;
  g->offset = d->causal ? d->causal_offset : 0;
  *bh = d->batch * d->heads;
fail:
  return st;
}

template <typename T>
sg_status bwd_run(const sg_attn_rows &g, int64_t bh, const T *q, const T *k,
                  const T *v, const T *o, const T *lse, const T *dout, T *dq,
                  T *dk, T *dv, cudaStream_t s) {
  sg_status st = SG_OK;
  const int64_t rows = bh * g.nq, keys = bh * g.nk;
  T *dd = NULL;
  if (rows > 0) {
    SG_CUDA(cudaMallocAsync((void **)&dd, (size_t)rows * sizeof(T), s));
    delta_k<T><<<grid_for(rows), kThreads, 0, s>>>(rows, g.d, dout, o, dd);
    SG_CUDA(cudaGetLastError());
    if (dq) {
      dq_k<T><<<grid_for(rows), kThreads, 0, s>>>(g, rows, q, k, v, lse, dd,
                                                  dout, dq);
      SG_CUDA(cudaGetLastError());
    }
  }
  if (keys > 0 && (dk || dv)) {
    dkv_k<T><<<grid_for(keys), kThreads, 0, s>>>(g, keys, q, k, v, lse, dd,
                                                 dout, dk, dv);
    SG_CUDA(cudaGetLastError());
  }
fail:
  if (dd) cudaFreeAsync(dd, s);
  return st;
}

}  // namespace

#define SG_ATTN_PTR(p)                                                \
  do {                                                                \
    if (!(p)) SG_RAISE(SG_ERR_INVALID_ARG, "%s: %s is NULL", fn, #p); \
  } while (0)

extern "C" sg_status sg_attention_fwd_cuda(const sg_attn_desc *d, sg_dtype dt,
                                           const void *q, const void *k,
                                           const void *v, void *o, void *lse,
                                           void *stream) {
  static const char fn[] = "sg_attention_fwd_cuda";
  sg_status st = SG_OK;
  sg_attn_rows g;
  int64_t bh = 0;
  SG_TRY(rows_make(fn, d, dt, &g, &bh));
  SG_ATTN_PTR(q);
  SG_ATTN_PTR(k);
  SG_ATTN_PTR(v);
  SG_ATTN_PTR(o);
  {
    const int64_t rows = bh * g.nq;
    if (rows == 0) goto fail;
    const unsigned nb = grid_for(rows);
    if (dt == SG_DTYPE_F32)
      fwd_k<float><<<nb, kThreads, 0, SG_STREAM(stream)>>>(
          g, rows, (const float *)q, (const float *)k, (const float *)v,
          (float *)o, (float *)lse);
    else
      fwd_k<double><<<nb, kThreads, 0, SG_STREAM(stream)>>>(
          g, rows, (const double *)q, (const double *)k, (const double *)v,
          (double *)o, (double *)lse);
    SG_CUDA(cudaGetLastError());
  }
fail:
  return st;
}

extern "C" sg_status sg_attention_bwd_cuda(const sg_attn_desc *d, sg_dtype dt,
                                           const void *q, const void *k,
                                           const void *v, const void *o,
                                           const void *lse, const void *dout,
                                           void *dq, void *dk, void *dv,
                                           void *stream) {
  static const char fn[] = "sg_attention_bwd_cuda";
  sg_status st = SG_OK;
  sg_attn_rows g;
  int64_t bh = 0;
  SG_TRY(rows_make(fn, d, dt, &g, &bh));
  SG_ATTN_PTR(q);
  SG_ATTN_PTR(k);
  SG_ATTN_PTR(v);
  SG_ATTN_PTR(o);
  SG_ATTN_PTR(lse);
  SG_ATTN_PTR(dout);
  if (bh == 0 || (!dq && !dk && !dv)) goto fail;
  if (dt == SG_DTYPE_F32)
    st = bwd_run<float>(g, bh, (const float *)q, (const float *)k,
                        (const float *)v, (const float *)o, (const float *)lse,
                        (const float *)dout, (float *)dq, (float *)dk,
                        (float *)dv, SG_STREAM(stream));
  else
    st = bwd_run<double>(g, bh, (const double *)q, (const double *)k,
                         (const double *)v, (const double *)o,
                         (const double *)lse, (const double *)dout,
                         (double *)dq, (double *)dk, (double *)dv,
                         SG_STREAM(stream));
fail:
  return st;
}

// The (B, H*d, T) <-> (B, H, T, d) copies of the attention op
// (ag_heads_copy) over sg_attn_heads_src: back 0 x -> y, back 1 y -> x.
template <typename T>
__global__ void heads_k(int64_t n, int64_t t, int64_t d, int back, T *x, T *y) {
  SG_GRID_STRIDE(i, n) {
    const int64_t j = sg_attn_heads_src(i, t, d);
    if (back)
      x[j] = y[i];
    else
      y[i] = x[j];
  }
}

extern "C" sg_status sg_heads_copy_cuda(sg_dtype dt, int64_t b, int64_t h,
                                        int64_t t, int64_t d, void *x, void *y,
                                        int back, void *stream) {
  static const char fn[] = "sg_heads_copy_cuda";
  sg_status st = SG_OK;
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: f32 or f64, not %s", fn,
             sg_dtype_name(dt));
  if (b < 0 || h < 0 || t < 0 || d < 1)
    SG_RAISE(SG_ERR_SHAPE, "%s: sizes %lld x %lld x %lld x %lld", fn,
             (long long)b, (long long)h, (long long)t, (long long)d);
  {
    const int64_t n = b * h * t * d;
    if (n == 0) goto fail;
    SG_ATTN_PTR(x);
    SG_ATTN_PTR(y);
    if (dt == SG_DTYPE_F32)
      heads_k<float><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
          n, t, d, back, (float *)x, (float *)y);
    else
      heads_k<double><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
          n, t, d, back, (double *)x, (double *)y);
    SG_CUDA(cudaGetLastError());
  }
fail:
  return st;
}

// ---- window attention (the Swin op) over sg_wattn_inl.h -------------------

namespace {

__device__ inline void wrow_fwd(const sg_wattn_geo *g, int64_t i,
                                const float *q, const float *k, const float *v,
                                const float *b, double *p, float *o) {
  sg_wattn_row_fwd_f32(g, i, q, k, v, b, p, o);
}
__device__ inline void wrow_fwd(const sg_wattn_geo *g, int64_t i,
                                const double *q, const double *k,
                                const double *v, const double *b, double *p,
                                double *o) {
  sg_wattn_row_fwd_f64(g, i, q, k, v, b, p, o);
}
__device__ inline void wrow_dq(const sg_wattn_geo *g, int64_t i, const float *k,
                               const float *v, const float *dout,
                               const double *p, double *r, float *dq) {
  sg_wattn_row_dq_f32(g, i, k, v, dout, p, r, dq);
}
__device__ inline void wrow_dq(const sg_wattn_geo *g, int64_t i,
                               const double *k, const double *v,
                               const double *dout, const double *p, double *r,
                               double *dq) {
  sg_wattn_row_dq_f64(g, i, k, v, dout, p, r, dq);
}
__device__ inline void wrow_dkv(const sg_wattn_geo *g, int64_t j,
                                const float *q, const float *v,
                                const float *dout, const double *P,
                                const double *r, float *dk, float *dv) {
  sg_wattn_row_dkv_f32(g, j, q, v, dout, P, r, dk, dv);
}
__device__ inline void wrow_dkv(const sg_wattn_geo *g, int64_t j,
                                const double *q, const double *v,
                                const double *dout, const double *P,
                                const double *r, double *dk, double *dv) {
  sg_wattn_row_dkv_f64(g, j, q, v, dout, P, r, dk, dv);
}
__device__ inline double wdbias(const sg_wattn_geo *g, int64_t h, int64_t e,
                                const float *v, const float *dout,
                                const double *P, const double *r) {
  return sg_wattn_dbias_f32(g, h, e, v, dout, P, r);
}
__device__ inline double wdbias(const sg_wattn_geo *g, int64_t h, int64_t e,
                                const double *v, const double *dout,
                                const double *P, const double *r) {
  return sg_wattn_dbias_f64(g, h, e, v, dout, P, r);
}

// rows = windows * T: row r is token r % T of window r / T.
template <typename T>
__global__ void wfwd_k(sg_wattn_geo g, int64_t rows, const T *q, const T *k,
                       const T *v, const T *bias, double *P, T *o) {
  SG_GRID_STRIDE(r, rows) {
    int64_t h;
    const int64_t w = r / g.T, b = sg_wattn_base(&g, w, &h);
    wrow_fwd(&g, r % g.T, q + b, k + b, v + b, bias + h * g.R * g.R,
             P + r * g.T, o + b);
  }
}
template <typename T>
__global__ void wdq_k(sg_wattn_geo g, int64_t rows, const T *k, const T *v,
                      const T *dout, const double *P, double *rr, T *dq) {
  SG_GRID_STRIDE(r, rows) {
    int64_t h;
    const int64_t b = sg_wattn_base(&g, r / g.T, &h);
    wrow_dq(&g, r % g.T, k + b, v + b, dout + b, P + r * g.T, rr + r, dq + b);
  }
}
template <typename T>
__global__ void wdkv_k(sg_wattn_geo g, int64_t rows, const T *q, const T *v,
                       const T *dout, const double *P, const double *rr, T *dk,
                       T *dv) {
  SG_GRID_STRIDE(r, rows) {
    int64_t h;
    const int64_t w = r / g.T, b = sg_wattn_base(&g, w, &h);
    wrow_dkv(&g, r % g.T, q + b, v + b, dout + b, P + w * g.T * g.T,
             rr + w * g.T, dk + b, dv + b);
  }
}
// db (H x R^2) += the gather of its entries' ds.
template <typename T>
__global__ void wdb_k(sg_wattn_geo g, const T *v, const T *dout,
                      const double *P, const double *rr, T *db) {
  const int64_t rr2 = g.R * g.R;
  SG_GRID_STRIDE(e, g.H * rr2) {
    db[e] = (T)((double)db[e] + wdbias(&g, e / rr2, e % rr2, v, dout, P, rr));
  }
}

sg_status wgeo_check(const char *fn, sg_dtype dt, const sg_wattn_geo *g) {
  sg_status st = SG_OK;
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: f32 or f64, not %s", fn,
             sg_dtype_name(dt));
  if (!g) SG_RAISE(SG_ERR_INVALID_ARG, "%s: geometry is NULL", fn);
  if (g->B < 0 || g->H < 1 || g->d < 1 || g->C != g->H * g->d || g->W < 1 ||
      g->T != g->W * g->W || g->R != 2 * g->W - 1 || g->nwy < 0 || g->nwx < 0 ||
      g->Hl != g->nwy * g->W || g->Wl != g->nwx * g->W)
    SG_RAISE(SG_ERR_SHAPE, "%s: inconsistent window geometry", fn);
fail:
  return st;
}

template <typename T>
sg_status wbwd_run(const sg_wattn_geo &g, const T *q, const T *k, const T *v,
                   const T *dout, const double *P, T *dq, T *dk, T *dv, T *db,
                   cudaStream_t s) {
  sg_status st = SG_OK;
  const int64_t rows = sg_wattn_count(&g) * g.T, n = g.B * g.C * g.Hl * g.Wl;
  double *rr = NULL;
  T *scratch = NULL;
  if (rows == 0) return SG_OK;
  SG_CUDA(cudaMallocAsync((void **)&rr, (size_t)rows * sizeof(double), s));
  if (!dq || !dk || !dv) /* the kernels write all three */
    SG_CUDA(cudaMallocAsync((void **)&scratch, (size_t)n * sizeof(T), s));
  wdq_k<T><<<grid_for(rows), kThreads, 0, s>>>(g, rows, k, v, dout, P, rr,
                                               dq ? dq : scratch);
  SG_CUDA(cudaGetLastError());
  if (dk || dv) {
    wdkv_k<T><<<grid_for(rows), kThreads, 0, s>>>(g, rows, q, v, dout, P, rr,
                                                  dk ? dk : scratch,
                                                  dv ? dv : scratch);
    SG_CUDA(cudaGetLastError());
  }
  if (db) {
    wdb_k<T>
        <<<grid_for(g.H * g.R * g.R), kThreads, 0, s>>>(g, v, dout, P, rr, db);
    SG_CUDA(cudaGetLastError());
  }
fail:
  if (rr) cudaFreeAsync(rr, s);
  if (scratch) cudaFreeAsync(scratch, s);
  return st;
}

}  // namespace

extern "C" sg_status sg_wattn_fwd_cuda(sg_dtype dt, const sg_wattn_geo *g,
                                       const void *q, const void *k,
                                       const void *v, const void *bias,
                                       double *P, void *o, void *stream) {
  static const char fn[] = "sg_wattn_fwd_cuda";
  sg_status st = SG_OK;
  SG_TRY(wgeo_check(fn, dt, g));
  {
    const int64_t rows = sg_wattn_count(g) * g->T;
    if (rows == 0) goto fail;
    SG_ATTN_PTR(q);
    SG_ATTN_PTR(k);
    SG_ATTN_PTR(v);
    SG_ATTN_PTR(bias);
    SG_ATTN_PTR(P);
    SG_ATTN_PTR(o);
    if (dt == SG_DTYPE_F32)
      wfwd_k<float><<<grid_for(rows), kThreads, 0, SG_STREAM(stream)>>>(
          *g, rows, (const float *)q, (const float *)k, (const float *)v,
          (const float *)bias, P, (float *)o);
    else
      wfwd_k<double><<<grid_for(rows), kThreads, 0, SG_STREAM(stream)>>>(
          *g, rows, (const double *)q, (const double *)k, (const double *)v,
          (const double *)bias, P, (double *)o);
    SG_CUDA(cudaGetLastError());
  }
fail:
  return st;
}

extern "C" sg_status sg_wattn_bwd_cuda(sg_dtype dt, const sg_wattn_geo *g,
                                       const void *q, const void *k,
                                       const void *v, const void *dout,
                                       const double *P, void *dq, void *dk,
                                       void *dv, void *dbias, void *stream) {
  static const char fn[] = "sg_wattn_bwd_cuda";
  sg_status st = SG_OK;
  SG_TRY(wgeo_check(fn, dt, g));
  if (sg_wattn_count(g) == 0 || (!dq && !dk && !dv && !dbias)) goto fail;
  SG_ATTN_PTR(q);
  SG_ATTN_PTR(k);
  SG_ATTN_PTR(v);
  SG_ATTN_PTR(dout);
  SG_ATTN_PTR(P);
  if (dt == SG_DTYPE_F32)
    st = wbwd_run<float>(*g, (const float *)q, (const float *)k,
                         (const float *)v, (const float *)dout, P, (float *)dq,
                         (float *)dk, (float *)dv, (float *)dbias,
                         SG_STREAM(stream));
  else
    st = wbwd_run<double>(*g, (const double *)q, (const double *)k,
                          (const double *)v, (const double *)dout, P,
                          (double *)dq, (double *)dk, (double *)dv,
                          (double *)dbias, SG_STREAM(stream));
fail:
  return st;
}
