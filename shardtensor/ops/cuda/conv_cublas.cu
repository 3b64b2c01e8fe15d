// shardgrid — the convolutions on cuBLAS (sg_ops_cuda.h): im2col, one
// strided-batched GEMM per chunk of batch items, the bias kernel; the
// backward's dx through W^T dy and the col2im gather, dW through a GEMM per
// item; the transposed convolution (kernel == stride) as T = W^T x and a
// gather. The index arithmetic is sg_ops_inl.h's (sg_im2col_src,
// sg_col2im_cell, sg_convt_src), which test_op_device runs on the host
// against sg_conv_* / sg_convt_* in f64; the GEMMs sum in cuBLAS's order.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cublas_impl.h"
#include "launch_inl.h"
#include "sg_ops_cuda.h"
#include "sg_ops_inl.h"
extern "C" {
#include "ops_impl.h"  // sg_conv_win_make
}

namespace {

const int kThreads = 256;
// The column matrices of a chunk of batch items: at most this many
// elements (256 MiB in f32), at least one item.
const int64_t kChunkElems = int64_t(1) << 26;

inline unsigned grid_for(int64_t n) { return sg_grid_for(n, kThreads); }


__device__ inline float col2im(const sg_pool_win *w, const float *dcol,
                               int64_t ld, int64_t c, int64_t i) {
  return sg_col2im_cell_f32(w, dcol, ld, c, i);
}
__device__ inline double col2im(const sg_pool_win *w, const double *dcol,
                                int64_t ld, int64_t c, int64_t i) {
  return sg_col2im_cell_f64(w, dcol, ld, c, i);
}

// col (nc items of ckk x so) from images x (nc items of c_sin).
template <typename T>
__global__ void im2col_k(sg_pool_win w, int64_t nc, int64_t c_sin, int64_t ckk,
                         int64_t so, const T *x, T *col) {
  const int64_t per = ckk * so;
  SG_GRID_STRIDE(i, nc * per) {
    const int64_t n = i / per, e = i % per;
    col[i] = x[n * c_sin + sg_im2col_src(&w, e / so, e % so)];
  }
}

// dx (nc items of c planes of sin), OVERWRITTEN, gathered from dcol.
template <typename T>
__global__ void col2im_k(sg_pool_win w, int64_t nc, int64_t c, int64_t sin,
                         int64_t ckk, int64_t so, const T *dcol, T *dx) {
  SG_GRID_STRIDE(i, nc * c * sin) {
    const int64_t n = i / (c * sin), ch = (i / sin) % c;
    dx[i] = col2im(&w, dcol + n * ckk * so, so, ch, i % sin);
  }
}

// Transposed: y (nc items of k x so) from T (nc items of tsz) plus b.
template <typename T>
__global__ void convt_out_k(sg_pool_win w, int64_t nc, int64_t k, int64_t so,
                            int64_t tsz, const T *t, const T *b, T *y) {
  SG_GRID_STRIDE(i, nc * k * so) {
    const int64_t n = i / (k * so), q = (i / so) % k;
    y[i] = t[n * tsz + sg_convt_src(&w, q, i % so)] + (b ? b[q] : T(0));
  }
}

// Its adjoint: dy gathered into T's shape (the map is a bijection).
template <typename T>
__global__ void convt_dy_k(sg_pool_win w, int64_t nc, int64_t k, int64_t so,
                           int64_t tsz, const T *dy, T *t) {
  SG_GRID_STRIDE(i, nc * k * so) {
    const int64_t n = i / (k * so), q = (i / so) % k;
    t[n * tsz + sg_convt_src(&w, q, i % so)] = dy[i];
  }
}

struct Geo {
  sg_pool_win w;
  int64_t nb, c, k, sin, so, kk;
};

// The window of d, checked: f32/f64, the extents within cuBLAS's int.
sg_status geo_make(const char *what, const sg_conv_desc *d, int trans,
                   sg_dtype dt, Geo *g) {
  sg_status st = SG_OK;
  if (!d) SG_RAISE(SG_ERR_INVALID_ARG, "%s: descriptor is NULL", what);
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: f32 or f64, not %s", what,
             sg_dtype_name(dt));
  if (d->round_out)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "%s: round_out (the bf16 storage policy) is host-only", what);
  SG_TRY(sg_conv_win_make(d, trans, dt, &g->w));
  g->nb = d->batch, g->c = d->cin, g->k = d->cout;
  g->sin = g->w.in[0] * g->w.in[1] * g->w.in[2];
  g->so = g->w.out[0] * g->w.out[1] * g->w.out[2];
  g->kk = g->w.ker[0] * g->w.ker[1] * g->w.ker[2];
  if (g->c * g->kk > INT32_MAX || g->k * g->kk > INT32_MAX ||
      g->sin > INT32_MAX || g->so > INT32_MAX)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "%s: block too large for cuBLAS's 32-bit extents", what);
fail:
  return st;
}

// Batch items per chunk of `per` elements each.
int64_t chunk_of(int64_t nb, int64_t per) {
  int64_t nc = per > 0 ? kChunkElems / per : nb;
  if (nc < 1) nc = 1;
  return nc < nb ? nc : nb;
}

template <typename T>
sg_status conv_fwd(const Geo &g, const T *x, const T *w, T *y, void *stream) {
  sg_status st = SG_OK;
  cudaStream_t s = SG_STREAM(stream);
  cublasHandle_t h = nullptr;
  const int64_t ckk = g.c * g.kk, per = ckk * g.so;
  const int64_t nc = chunk_of(g.nb, per);
  T *col = nullptr;
  SG_TRY(sg_cublas_on(stream, &h));
  SG_CUDA(cudaMallocAsync((void **)&col, (size_t)(nc * per) * sizeof(T), s));
  for (int64_t n0 = 0; n0 < g.nb; n0 += nc) {
    const int64_t m = g.nb - n0 < nc ? g.nb - n0 : nc;
    im2col_k<T>
        <<<grid_for(m * per), kThreads, 0, s>>>(g.w, m, g.c * g.sin, ckk, g.so,
                                                x + n0 * g.c * g.sin, col);
    SG_CUDA(cudaGetLastError());
    // y_n (K x so) = W (K x ckk) col_n (ckk x so)
    SG_CUBLAS(sg_gemm_rm<T>(h, false, false, (int)g.k, (int)g.so, (int)ckk, w,
                            (int)ckk, 0, col, (int)g.so, per, T(0),
                            y + n0 * g.k * g.so, (int)g.so, g.k * g.so,
                            (int)m));
  }
fail:
  if (col) cudaFreeAsync(col, s);
  return st;
}

template <typename T>
sg_status conv_bwd(const Geo &g, const T *x, const T *w, const T *dy, T *dx,
                   T *dw, void *stream) {
  sg_status st = SG_OK;
  cudaStream_t s = SG_STREAM(stream);
  cublasHandle_t h = nullptr;
  const int64_t ckk = g.c * g.kk, per = ckk * g.so;
  const int64_t nc = chunk_of(g.nb, 2 * per);
  T *col = nullptr;
  SG_TRY(sg_cublas_on(stream, &h));
  SG_CUDA(
      cudaMallocAsync((void **)&col, (size_t)(2 * nc * per) * sizeof(T), s));
  for (int64_t n0 = 0; n0 < g.nb; n0 += nc) {
    const int64_t m = g.nb - n0 < nc ? g.nb - n0 : nc;
    const T *dyc = dy + n0 * g.k * g.so;
    T *dcol = col + nc * per;
    if (dx) {
      // dcol_n (ckk x so) = W^T dy_n, then gathered into dx
      SG_CUBLAS(sg_gemm_rm<T>(h, true, false, (int)ckk, (int)g.so, (int)g.k, w,
                              (int)ckk, 0, dyc, (int)g.so, g.k * g.so, T(0),
                              dcol, (int)g.so, per, (int)m));
      col2im_k<T><<<grid_for(m * g.c * g.sin), kThreads, 0, s>>>(
          g.w, m, g.c, g.sin, ckk, g.so, dcol, dx + n0 * g.c * g.sin);
      SG_CUDA(cudaGetLastError());
    }
    if (!dw) continue;
    im2col_k<T>
        <<<grid_for(m * per), kThreads, 0, s>>>(g.w, m, g.c * g.sin, ckk, g.so,
                                                x + n0 * g.c * g.sin, col);
    SG_CUDA(cudaGetLastError());
    // dW (K x ckk) += dy_n col_n^T, item by item in batch order
    for (int64_t n = 0; n < m; ++n)
      SG_CUBLAS(sg_gemm_rm<T>(h, false, true, (int)g.k, (int)ckk, (int)g.so,
                              dyc + n * g.k * g.so, (int)g.so, 0, col + n * per,
                              (int)g.so, 0, T(1), dw, (int)ckk, 0, 1));
  }
fail:
  if (col) cudaFreeAsync(col, s);
  return st;
}

template <typename T>
sg_status convt_fwd(const Geo &g, const T *x, const T *w, const T *b, T *y,
                    void *stream) {
  sg_status st = SG_OK;
  cudaStream_t s = SG_STREAM(stream);
  cublasHandle_t h = nullptr;
  const int64_t mm = g.k * g.kk, tsz = mm * g.sin;
  const int64_t nc = chunk_of(g.nb, tsz);
  T *t = nullptr;
  SG_TRY(sg_cublas_on(stream, &h));
  SG_CUDA(cudaMallocAsync((void **)&t, (size_t)(nc * tsz) * sizeof(T), s));
  for (int64_t n0 = 0; n0 < g.nb; n0 += nc) {
    const int64_t m = g.nb - n0 < nc ? g.nb - n0 : nc;
    // T_n (mm x sin) = W^T (W: C x mm) x_n (C x sin)
    SG_CUBLAS(sg_gemm_rm<T>(h, true, false, (int)mm, (int)g.sin, (int)g.c, w,
                            (int)mm, 0, x + n0 * g.c * g.sin, (int)g.sin,
                            g.c * g.sin, T(0), t, (int)g.sin, tsz, (int)m));
    convt_out_k<T><<<grid_for(m * g.k * g.so), kThreads, 0, s>>>(
        g.w, m, g.k, g.so, tsz, t, b, y + n0 * g.k * g.so);
    SG_CUDA(cudaGetLastError());
  }
fail:
  if (t) cudaFreeAsync(t, s);
  return st;
}

template <typename T>
sg_status convt_bwd(const Geo &g, const T *x, const T *w, const T *dy, T *dx,
                    T *dw, void *stream) {
  sg_status st = SG_OK;
  cudaStream_t s = SG_STREAM(stream);
  cublasHandle_t h = nullptr;
  const int64_t mm = g.k * g.kk, tsz = mm * g.sin;
  const int64_t nc = chunk_of(g.nb, tsz);
  T *t = nullptr;
  SG_TRY(sg_cublas_on(stream, &h));
  SG_CUDA(cudaMallocAsync((void **)&t, (size_t)(nc * tsz) * sizeof(T), s));
  for (int64_t n0 = 0; n0 < g.nb; n0 += nc) {
    const int64_t m = g.nb - n0 < nc ? g.nb - n0 : nc;
    convt_dy_k<T>
        <<<grid_for(m * g.k * g.so), kThreads, 0, s>>>(g.w, m, g.k, g.so, tsz,
                                                       dy + n0 * g.k * g.so, t);
    SG_CUDA(cudaGetLastError());
    // dx_n (C x sin) = W (C x mm) T_n (mm x sin)
    if (dx)
      SG_CUBLAS(sg_gemm_rm<T>(h, false, false, (int)g.c, (int)g.sin, (int)mm, w,
                              (int)mm, 0, t, (int)g.sin, tsz, T(0),
                              dx + n0 * g.c * g.sin, (int)g.sin, g.c * g.sin,
                              (int)m));
    // dW (C x mm) += x_n (C x sin) T_n^T, item by item in batch order
    for (int64_t n = 0; dw && n < m; ++n)
      SG_CUBLAS(sg_gemm_rm<T>(h, false, true, (int)g.c, (int)mm, (int)g.sin,
                              x + (n0 + n) * g.c * g.sin, (int)g.sin, 0,
                              t + n * tsz, (int)g.sin, 0, T(1), dw, (int)mm, 0,
                              1));
  }
fail:
  if (t) cudaFreeAsync(t, s);
  return st;
}

}  // namespace

extern "C" sg_status sg_conv_fwd_cuda(const sg_conv_desc *d, sg_dtype dt,
                                      const void *x, const void *w,
                                      const void *b, void *y, void *ws,
                                      void *stream) {
  sg_status st = SG_OK;
  Geo g;
  SG_TRY(geo_make("sg_conv_fwd_cuda", d, 0, dt, &g));
  if (g.nb == 0) return SG_OK;
  if (!x || !w || !y || ws)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_conv_fwd_cuda: NULL x, w or y, or a workspace (NULL on the "
             "device)");
  if (dt == SG_DTYPE_F32)
    SG_TRY(conv_fwd(g, (const float *)x, (const float *)w, (float *)y, stream));
  else
    SG_TRY(
        conv_fwd(g, (const double *)x, (const double *)w, (double *)y, stream));
  if (b) SG_TRY(sg_bias_fwd_cuda(dt, g.nb, g.k, g.so, y, b, y, stream));
fail:
  return st;
}

extern "C" sg_status sg_conv_bwd_cuda(const sg_conv_desc *d, sg_dtype dt,
                                      const void *x, const void *w,
                                      const void *dy, void *dx, void *dw,
                                      void *db, void *ws, void *stream) {
  sg_status st = SG_OK;
  Geo g;
  SG_TRY(geo_make("sg_conv_bwd_cuda", d, 0, dt, &g));
  if (g.nb == 0) return SG_OK;
  if (!dy || (dx && !w) || (dw && !x) || ws)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_conv_bwd_cuda: NULL dy, w or x, or a workspace (NULL on the "
             "device)");
  if (db) SG_TRY(sg_bias_bwd_cuda(dt, g.nb, g.k, g.so, dy, db, stream));
  if (!dx && !dw) return SG_OK;
  if (dt == SG_DTYPE_F32)
    SG_TRY(conv_bwd(g, (const float *)x, (const float *)w, (const float *)dy,
                    (float *)dx, (float *)dw, stream));
  else
    SG_TRY(conv_bwd(g, (const double *)x, (const double *)w, (const double *)dy,
                    (double *)dx, (double *)dw, stream));
fail:
  return st;
}

extern "C" sg_status sg_convt_fwd_cuda(const sg_conv_desc *d, sg_dtype dt,
                                       const void *x, const void *w,
                                       const void *b, void *y, void *stream) {
  sg_status st = SG_OK;
  Geo g;
  SG_TRY(geo_make("sg_convt_fwd_cuda", d, 1, dt, &g));
  if (g.nb == 0) return SG_OK;
  if (!x || !w || !y)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_convt_fwd_cuda: NULL x, w or y");
  if (dt == SG_DTYPE_F32)
    SG_TRY(convt_fwd(g, (const float *)x, (const float *)w, (const float *)b,
                     (float *)y, stream));
  else
    SG_TRY(convt_fwd(g, (const double *)x, (const double *)w, (const double *)b,
                     (double *)y, stream));
fail:
  return st;
}

extern "C" sg_status sg_convt_bwd_cuda(const sg_conv_desc *d, sg_dtype dt,
                                       const void *x, const void *w,
                                       const void *dy, void *dx, void *dw,
                                       void *db, void *stream) {
  sg_status st = SG_OK;
  Geo g;
  SG_TRY(geo_make("sg_convt_bwd_cuda", d, 1, dt, &g));
  if (g.nb == 0) return SG_OK;
  if (!dy || (dx && !w) || (dw && !x))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_convt_bwd_cuda: NULL dy, w or x");
  if (db) SG_TRY(sg_bias_bwd_cuda(dt, g.nb, g.k, g.so, dy, db, stream));
  if (!dx && !dw) return SG_OK;
  if (dt == SG_DTYPE_F32)
    SG_TRY(convt_bwd(g, (const float *)x, (const float *)w, (const float *)dy,
                     (float *)dx, (float *)dw, stream));
  else
    SG_TRY(convt_bwd(g, (const double *)x, (const double *)w,
                     (const double *)dy, (double *)dx, (double *)dw, stream));
fail:
  return st;
}
