// shardgrid — the op kernels on CUDA device pointers (sg_ops_cuda.h). A
// thin layer: grid-stride loops over the SG_HD element functions the host
// loops call (sg_ops_inl.h, models/optim_inl.h), so the host tests verify
// the arithmetic; only the reductions (bias gradient, loss partials) are
// written here, as block tree sums in double.
#include <cuda_runtime.h>
#include <stdint.h>

#include "launch_inl.h"
#include "sg_ops_cuda.h"
#include "sg_ops_inl.h"
extern "C" {
#include "ops_impl.h"  // SG_SUM_BLOCK, sg_pool_win_make
}
#include "optim_inl.h"

namespace {

const int kThreads = 256;  // a power of two (the tree sums)

inline unsigned grid_for(int64_t n) { return sg_grid_for(n, kThreads); }


// The element functions by type (the C header names them by suffix).
template <typename T>
struct El;
template <>
struct El<float> {
  __device__ static float act(int a, float x) { return sg_act_f32(a, x); }
  __device__ static float act_grad(int a, float x) {
    return sg_act_grad_f32(a, x);
  }
  __device__ static float bin(int op, float a, float b) {
    return sg_el_binary_f32(op, a, b);
  }
  __device__ static float ga(int op, float g, float b) {
    return sg_el_binary_grad_a_f32(op, g, b);
  }
  __device__ static float gb(int op, float g, float a) {
    return sg_el_binary_grad_b_f32(op, g, a);
  }
  __device__ static float scale(float al, float x) {
    return sg_el_scale_f32(al, x);
  }
  __device__ static float bias(float x, float b) {
    return sg_el_bias_add_f32(x, b);
  }
  __device__ static float pool(int k, const sg_pool_win *w, float inv,
                               const float *xp, int64_t o0, int64_t o1,
                               int64_t o2) {
    return sg_pool_out_f32(k, w, inv, xp, o0, o1, o2);
  }
  __device__ static int64_t argmax(const sg_pool_win *w, const float *xp,
                                   int64_t o0, int64_t o1, int64_t o2) {
    return sg_pool_argmax_f32(w, xp, o0, o1, o2);
  }
  __device__ static void w4(float la, float lb, float *w) {
    sg_up_w4_f32(la, lb, w);
  }
  __device__ static float pool_grad(int k, const sg_pool_win *w, float inv,
                                    const float *xp, const float *dyp,
                                    int64_t c) {
    return sg_pool_grad_cell_f32(k, w, inv, xp, dyp, c);
  }
  __device__ static float up_grad(const int64_t *in, const int64_t *out,
                                  const int64_t *sc, const int *lin,
                                  const float *dyp, int64_t c) {
    return sg_up_grad_cell_f32(in, out, sc, lin, dyp, c);
  }
  __device__ static float lerp(const float *w, float lc, const float *r00,
                               const float *r01, const float *r10,
                               const float *r11, int64_t c0, int64_t c1) {
    return sg_up_lerp_f32(w, lc, r00, r01, r10, r11, c0, c1);
  }
};
template <>
struct El<double> {
  __device__ static double act(int a, double x) { return sg_act_f64(a, x); }
  __device__ static double act_grad(int a, double x) {
    return sg_act_grad_f64(a, x);
  }
  __device__ static double bin(int op, double a, double b) {
    return sg_el_binary_f64(op, a, b);
  }
  __device__ static double ga(int op, double g, double b) {
    return sg_el_binary_grad_a_f64(op, g, b);
  }
  __device__ static double gb(int op, double g, double a) {
    return sg_el_binary_grad_b_f64(op, g, a);
  }
  __device__ static double scale(double al, double x) {
    return sg_el_scale_f64(al, x);
  }
  __device__ static double bias(double x, double b) {
    return sg_el_bias_add_f64(x, b);
  }
  __device__ static double pool(int k, const sg_pool_win *w, double inv,
                                const double *xp, int64_t o0, int64_t o1,
                                int64_t o2) {
    return sg_pool_out_f64(k, w, inv, xp, o0, o1, o2);
  }
  __device__ static int64_t argmax(const sg_pool_win *w, const double *xp,
                                   int64_t o0, int64_t o1, int64_t o2) {
    return sg_pool_argmax_f64(w, xp, o0, o1, o2);
  }
  __device__ static void w4(double la, double lb, double *w) {
    sg_up_w4_f64(la, lb, w);
  }
  __device__ static double pool_grad(int k, const sg_pool_win *w, double inv,
                                     const double *xp, const double *dyp,
                                     int64_t c) {
    return sg_pool_grad_cell_f64(k, w, inv, xp, dyp, c);
  }
  __device__ static double up_grad(const int64_t *in, const int64_t *out,
                                   const int64_t *sc, const int *lin,
                                   const double *dyp, int64_t c) {
    return sg_up_grad_cell_f64(in, out, sc, lin, dyp, c);
  }
  __device__ static double lerp(const double *w, double lc, const double *r00,
                                const double *r01, const double *r10,
                                const double *r11, int64_t c0, int64_t c1) {
    return sg_up_lerp_f64(w, lc, r00, r01, r10, r11, c0, c1);
  }
};

template <typename T>
__global__ void act_fwd_k(int act, int64_t n, const T *x, T *y) {
  SG_GRID_STRIDE(i, n) y[i] = El<T>::act(act, x[i]);
}
template <typename T>
__global__ void act_bwd_k(int act, int64_t n, const T *x, const T *dy, T *dx) {
  SG_GRID_STRIDE(i, n) dx[i] = dy[i] * El<T>::act_grad(act, x[i]);
}
template <typename T>
__global__ void binary_fwd_k(int op, int64_t n, const T *a, const T *b, T *y) {
  SG_GRID_STRIDE(i, n) y[i] = El<T>::bin(op, a[i], b[i]);
}
template <typename T>
__global__ void binary_bwd_k(int op, int64_t n, const T *a, const T *b,
                             const T *dy, T *da, T *db) {
  SG_GRID_STRIDE(i, n) {
    if (da) da[i] = El<T>::ga(op, dy[i], b ? b[i] : T(0));
    if (db) db[i] = El<T>::gb(op, dy[i], a ? a[i] : T(0));
  }
}
template <typename T>
__global__ void scale_k(int64_t n, T al, const T *x, T *y) {
  SG_GRID_STRIDE(i, n) y[i] = El<T>::scale(al, x[i]);
}
template <typename T>
__global__ void bias_fwd_k(int64_t n, int64_t c, int64_t s, const T *x,
                           const T *b, T *y) {
  SG_GRID_STRIDE(i, n) y[i] = El<T>::bias(x[i], b[sg_bias_channel(i, c, s)]);
}

// Pooling: one thread per output (n = planes * outputs per plane).
template <typename T>
__global__ void pool_fwd_k(int kind, sg_pool_win w, T inv, int64_t n,
                           const T *x, T *y) {
  const int64_t sin = w.in[0] * w.in[1] * w.in[2];
  const int64_t sout = w.out[0] * w.out[1] * w.out[2];
  SG_GRID_STRIDE(i, n) {
    const int64_t p = i / sout, o = i % sout;
    y[i] = El<T>::pool(kind, &w, inv, x + p * sin, o / (w.out[1] * w.out[2]),
                       (o / w.out[2]) % w.out[1], o % w.out[2]);
  }
}

// Pooling backward as a gather, one thread per input cell, no atomics
// (sg_pool_grad_cell: the order of its sums differs from the host's
// scatter by rounding only).
template <typename T>
__global__ void pool_bwd_k(int kind, sg_pool_win w, T inv, int64_t n,
                           const T *x, const T *dy, T *dx) {
  const int64_t sin = w.in[0] * w.in[1] * w.in[2];
  const int64_t sout = w.out[0] * w.out[1] * w.out[2];
  SG_GRID_STRIDE(i, n) {
    const int64_t p = i / sin;
    dx[i] = El<T>::pool_grad(kind, &w, inv, x ? x + p * sin : nullptr,
                             dy + p * sout, i % sin);
  }
}

// Up-sampling: one thread per output; the source cells and weights per
// dim from sg_up_src, the bilinear value from sg_up_lerp, as the host.
template <typename T>
__global__ void up_fwd_k(int linear, sg_up_geom g, int64_t n, const T *x,
                         T *y) {
  const int64_t sin = g.in[0] * g.in[1] * g.in[2];
  const int64_t sout = g.out[0] * g.out[1] * g.out[2];
  SG_GRID_STRIDE(i, n) {
    const int64_t p = i / sout, o = i % sout;
    int64_t a0, a1, b0, b1, c0, c1;
    const T la = (T)sg_up_src(g.linear[0], g.scale[0],
                              o / (g.out[1] * g.out[2]), &a0, &a1);
    const T lb = (T)sg_up_src(g.linear[1], g.scale[1],
                              (o / g.out[2]) % g.out[1], &b0, &b1);
    const T lc = (T)sg_up_src(g.linear[2], g.scale[2], o % g.out[2], &c0, &c1);
    const T *xp = x + p * sin;
    if (!linear) {
      y[i] = xp[(a0 * g.in[1] + b0) * g.in[2] + c0];
      continue;
    }
    T w[4];
    El<T>::w4(la, lb, w);
    y[i] = El<T>::lerp(w, lc, xp + (a0 * g.in[1] + b0) * g.in[2],
                       xp + (a0 * g.in[1] + b1) * g.in[2],
                       xp + (a1 * g.in[1] + b0) * g.in[2],
                       xp + (a1 * g.in[1] + b1) * g.in[2], c0, c1);
  }
}

// Up-sampling backward as a gather, one thread per input cell, no atomics
// (sg_up_grad_cell).
template <typename T>
__global__ void up_bwd_k(sg_up_geom g, int64_t n, const T *dy, T *dx) {
  const int64_t sin = g.in[0] * g.in[1] * g.in[2];
  const int64_t sout = g.out[0] * g.out[1] * g.out[2];
  SG_GRID_STRIDE(i, n) {
    dx[i] = El<T>::up_grad(g.in, g.out, g.scale, g.linear,
                           dy + (i / sin) * sout, i % sin);
  }
}

// Tree sum of the block's v (in shared memory) into sh[0]; every thread
// of the block calls it.
__device__ double block_sum(double v, double *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h /= 2) {
    if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
    __syncthreads();
  }
  return sh[0];
}

// One block per channel k: db[k] += sum over the batch and the plane.
template <typename T>
__global__ void bias_bwd_k(int64_t nb, int64_t c, int64_t s, const T *dy,
                           T *db) {
  __shared__ double sh[kThreads];
  for (int64_t k = blockIdx.x; k < c; k += gridDim.x) {
    double acc = 0;
    for (int64_t e = threadIdx.x; e < nb * s; e += blockDim.x)
      acc += (double)dy[((e / s) * c + k) * s + e % s];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) db[k] += (T)acc;
    __syncthreads();
  }
}

// Loss partials, stage 1: block ib of row r sums its SG_SUM_BLOCK elements
// (sum x for SUM/MEAN; (p-t)^2 and t^2 otherwise) into blk[2 ib + 0/1].
template <typename T>
__global__ void loss_blocks_k(int kind, int64_t len, int64_t nblk, const T *p,
                              const T *t, double *blk) {
  __shared__ double sh[kThreads];
  const int64_t ib = blockIdx.x, r = ib / nblk, b0 = (ib % nblk) * SG_SUM_BLOCK;
  const int64_t b1 = b0 + SG_SUM_BLOCK < len ? b0 + SG_SUM_BLOCK : len;
  const T *pp = p + r * len, *tp = t ? t + r * len : nullptr;
  double s0 = 0, s1 = 0;
  for (int64_t i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    if (kind == SG_LOSS_SUM || kind == SG_LOSS_MEAN) {
      s0 += (double)pp[i];
    } else {
      s0 += sg_loss_sq_diff((double)pp[i], (double)tp[i]);
      s1 += (double)tp[i] * (double)tp[i];
    }
  }
  s0 = block_sum(s0, sh);
  __syncthreads();
  s1 = block_sum(s1, sh);
  if (threadIdx.x == 0) {
    blk[2 * ib] = s0;
    blk[2 * ib + 1] = s1;
  }
}

// Stage 2: one thread per row sums the row's blocks in order.
__global__ void loss_rows_k(int kind, int64_t rows, int64_t nblk, int64_t n,
                            const double *blk, double *partial) {
  SG_GRID_STRIDE(r, rows) {
    sg_loss_row_partials(kind, r, nblk, n, blk, partial);
  }
}

template <typename T>
__global__ void loss_bwd_k(int kind, int64_t batch, int64_t n, const T *p,
                           const T *t, const double *partial, double g, T *dp,
                           T *dt) {
  const int64_t per = n / batch;
  SG_GRID_STRIDE(i, n) {
    double gt;
    double gp = sg_loss_grad(kind, i, batch, per, (double)p[i],
                             t ? (double)t[i] : 0.0, partial, g, &gt);
    if (dp) dp[i] = (T)gp;
    if (dt) dt[i] = (T)gt;
  }
}

__global__ void adamw_k(sg_adamw_coef k, int64_t n, float *param,
                        const float *grad, float *m, float *v) {
  SG_GRID_STRIDE(i, n) sg_adamw_elem_f32(k, grad[i], &param[i], &m[i], &v[i]);
}

// ---- normalisation -------------------------------------------------------

// The block's sum of v by warp shuffles, then the warps' sums by warp 0;
// every thread of the block calls it and gets the sum (sh: 32 doubles,
// reusable after the call).
__device__ double warp_block_sum(double v, double *sh) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  if (lane == 0) sh[w] = v;
  __syncthreads();
  if (w == 0) {
    v = lane < (int)(blockDim.x + 31) / 32 ? sh[lane] : 0;
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  v = sh[0];
  __syncthreads();
  return v;
}

// The geometry of a descriptor on the device: instance and group norm's
// statistic groups are contiguous runs of `per` planes (gi * per * s on).
struct NormGeom {
  int kind;
  int64_t nb, c, s, groups, per;
  double eps;
  __device__ int64_t group(int64_t n, int64_t k, int64_t j) const {
    return sg_norm_group_of(kind, c, groups, s, n, k, j);
  }
};

NormGeom norm_geom(const sg_norm_desc *d) {
  NormGeom g;
  g.kind = (int)d->kind;
  g.nb = d->batch, g.c = d->channels, g.s = d->spatial;
  g.groups = d->kind == SG_NORM_GROUP ? d->groups : d->channels;
  g.per = d->kind == SG_NORM_GROUP ? d->channels / d->groups : 1;
  g.eps = d->eps;
  return g;
}

// Planar statistics: one block per group, two passes (mean, then M2).
template <typename T>
__global__ void norm_stats_planar_k(NormGeom g, int64_t nstat, const T *x,
                                    sg_moments *st) {
  __shared__ double sh[32];
  const int64_t len = g.per * g.s;
  for (int64_t gi = blockIdx.x; gi < nstat; gi += gridDim.x) {
    const T *xp = x + gi * len;
    double acc = 0;
    for (int64_t e = threadIdx.x; e < len; e += blockDim.x)
      acc += (double)xp[e];
    const double mean = len > 0 ? warp_block_sum(acc, sh) / (double)len : 0;
    acc = 0;
    for (int64_t e = threadIdx.x; e < len; e += blockDim.x) {
      const double dv = (double)xp[e] - mean;
      acc += dv * dv;
    }
    acc = warp_block_sum(acc, sh);
    if (threadIdx.x == 0) st[gi] = sg_moments{(double)len, mean, acc};
  }
}

// LayerNorm statistics: one thread per token (n, j), the channel sums in
// the host's order.
template <typename T>
__global__ void norm_stats_ln_k(NormGeom g, const T *x, sg_moments *st) {
  SG_GRID_STRIDE(t, g.nb * g.s) {
    const T *xp = x + (t / g.s) * g.c * g.s + t % g.s;
    double mean = 0, m2 = 0;
    for (int64_t k = 0; k < g.c; ++k) mean += (double)xp[k * g.s];
    mean /= (double)g.c;
    for (int64_t k = 0; k < g.c; ++k) {
      const double dv = (double)xp[k * g.s] - mean;
      m2 += dv * dv;
    }
    st[t] = sg_moments{(double)g.c, mean, m2};
  }
}

template <typename T>
__global__ void norm_fwd_k(NormGeom g, const T *x, const sg_moments *st,
                           const T *gamma, const T *beta, T *y) {
  SG_GRID_STRIDE(i, g.nb * g.c * g.s) {
    const int64_t p = i / g.s, j = i % g.s, n = p / g.c, k = p % g.c;
    const sg_moments m = st[g.group(n, k, j)];
    const double rs = sg_norm_rstd(m.count, m.m2, g.eps);
    const double gk = gamma ? (double)gamma[k] : 1,
                 bk = beta ? (double)beta[k] : 0;
    if (g.kind == SG_NORM_LAYER) {
      y[i] = (T)sg_norm_ln_y((double)x[i], m.mean, rs, gk, bk);
    } else {
      double a, b;
      sg_norm_plane_coef(m.mean, rs, gk, bk, &a, &b);
      y[i] = x[i] * (T)a + (T)b;
    }
  }
}

// Planar backward sums: one block per group, (sum dy gk, sum dy gk xh).
template <typename T>
__global__ void norm_sums_planar_k(NormGeom g, int64_t nstat, const T *x,
                                   const sg_moments *st, const T *gamma,
                                   const T *dy, double *sums) {
  __shared__ double sh[32];
  const int64_t len = g.per * g.s;
  for (int64_t gi = blockIdx.x; gi < nstat; gi += gridDim.x) {
    const sg_moments m = st[gi];
    const double rs = sg_norm_rstd(m.count, m.m2, g.eps);
    const int64_t c0 = (gi % g.groups) * g.per;
    const T *xp = x + gi * len, *gp = dy + gi * len;
    double a0 = 0, a1 = 0;
    for (int64_t e = threadIdx.x; e < len; e += blockDim.x) {
      const double gk = gamma ? (double)gamma[c0 + e / g.s] : 1;
      a0 += (double)gp[e] * gk;
      a1 += (double)gp[e] * ((double)xp[e] - m.mean) * gk * rs;
    }
    a0 = warp_block_sum(a0, sh);
    a1 = warp_block_sum(a1, sh);
    if (threadIdx.x == 0) {
      sums[2 * gi] = a0;
      sums[2 * gi + 1] = a1;
    }
  }
}

// LayerNorm backward sums: one thread per token, in the host's order.
template <typename T>
__global__ void norm_sums_ln_k(NormGeom g, const T *x, const sg_moments *st,
                               const T *gamma, const T *dy, double *sums) {
  SG_GRID_STRIDE(t, g.nb * g.s) {
    const int64_t o = (t / g.s) * g.c * g.s + t % g.s;
    const sg_moments m = st[t];
    const double rs = sg_norm_rstd(m.count, m.m2, g.eps);
    double s0 = 0, s1 = 0;
    for (int64_t k = 0; k < g.c; ++k) {
      const double gv = (double)dy[o + k * g.s] *
                        (gamma ? (double)gamma[k] : 1);
      s0 += gv;
      s1 += gv * ((double)x[o + k * g.s] - m.mean) * rs;
    }
    sums[2 * t] = s0;
    sums[2 * t + 1] = s1;
  }
}

template <typename T>
__global__ void norm_dx_k(NormGeom g, const T *x, const sg_moments *st,
                          const T *gamma, const T *dy, const double *sums,
                          T *dx) {
  SG_GRID_STRIDE(i, g.nb * g.c * g.s) {
    const int64_t p = i / g.s, j = i % g.s, n = p / g.c, k = p % g.c;
    const int64_t gi = g.group(n, k, j);
    const sg_moments m = st[gi];
    const double rs = sg_norm_rstd(m.count, m.m2, g.eps);
    const double gk = gamma ? (double)gamma[k] : 1,
                 cnt = sg_norm_count(m.count);
    if (g.kind == SG_NORM_LAYER) {
      dx[i] = (T)sg_norm_ln_dx((double)x[i], (double)dy[i], m.mean, rs, gk,
                               sums[2 * gi] / cnt, sums[2 * gi + 1], cnt);
    } else {
      double a, b, c;
      sg_norm_plane_dx_coef(rs, gk, cnt, sums[2 * gi], sums[2 * gi + 1], &a, &b,
                            &c);
      dx[i] = (T)sg_norm_plane_dx(a, b, c, (double)dy[i], (double)x[i], m.mean);
    }
  }
}

// dgamma[k] += sum dy xh, dbeta[k] += sum dy: one block per channel.
template <typename T>
__global__ void norm_dparams_k(NormGeom g, const T *x, const sg_moments *st,
                               const T *dy, T *dgamma, T *dbeta) {
  __shared__ double sh[32];
  for (int64_t k = blockIdx.x; k < g.c; k += gridDim.x) {
    double sg = 0, sb = 0;
    for (int64_t e = threadIdx.x; e < g.nb * g.s; e += blockDim.x) {
      const int64_t n = e / g.s, j = e % g.s, i = (n * g.c + k) * g.s + j;
      const sg_moments m = st[g.group(n, k, j)];
      sg += (double)dy[i] * ((double)x[i] - m.mean) *
            sg_norm_rstd(m.count, m.m2, g.eps);
      sb += (double)dy[i];
    }
    sg = warp_block_sum(sg, sh);
    sb = warp_block_sum(sb, sh);
    if (threadIdx.x == 0) {
      if (dgamma) dgamma[k] += (T)sg;
      if (dbeta) dbeta[k] += (T)sb;
    }
  }
}

// Checks n and the dtype, calls launch(T()) for f32/f64 (n > 0), then
// collects the launch error.
template <typename F>
sg_status dispatch(const char *what, sg_dtype dt, int64_t n, F launch) {
  sg_status st = SG_OK;
  if (n < 0)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: %lld elements", what, (long long)n);
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: op kernels take f32 or f64, not %s",
             what, sg_dtype_name(dt));
  if (n == 0) return SG_OK;
  if (dt == SG_DTYPE_F32)
    launch(0.0f);
  else
    launch(0.0);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

// As the host's sg_loss_check: the kind, the shape, p (and t where read).
sg_status loss_check(const char *what, sg_loss_kind kind, int64_t batch,
                     int64_t n, const void *p, const void *t) {
  sg_status st = SG_OK;
  if ((int)kind < 0 || kind > SG_LOSS_REL_L2)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: unknown loss %d", what, (int)kind);
  if (n < 0 || batch < 1 || n % batch)
    SG_RAISE(SG_ERR_SHAPE, "%s: %lld elements in %lld batch items", what,
             (long long)n, (long long)batch);
  if (n > 0 && (!p || (!t && (kind == SG_LOSS_MSE || kind == SG_LOSS_REL_L2))))
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL prediction or target", what);
fail:
  return st;
}

// The descriptor (valid, not batch norm: its statistics span the batch,
// host only) and its number of statistic groups.
sg_status norm_check(const char *what, const sg_norm_desc *d, int64_t *nstat) {
  sg_status st = SG_OK;
  if (!d) SG_RAISE(SG_ERR_INVALID_ARG, "%s: descriptor is NULL", what);
  SG_TRY(sg_norm_nstat(d, nstat));
  if (d->kind == SG_NORM_BATCH)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: batch norm is host-only", what);
fail:
  return st;
}

unsigned blocks_for(int64_t n) {
  return (unsigned)(n < 65535 ? (n > 0 ? n : 1) : 65535);
}

}  // namespace


extern "C" sg_status sg_act_fwd_cuda(sg_act act, sg_dtype dt, int64_t n,
                                     const void *x, void *y, void *stream) {
  return dispatch("sg_act_fwd_cuda", dt, n, [&](auto z) {
    using T = decltype(z);
    act_fwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>((int)act, n,
                                                                  (const T *)x,
                                                                  (T *)y);
  });
}

extern "C" sg_status sg_act_bwd_cuda(sg_act act, sg_dtype dt, int64_t n,
                                     const void *x, const void *dy, void *dx,
                                     void *stream) {
  return dispatch("sg_act_bwd_cuda", dt, n, [&](auto z) {
    using T = decltype(z);
    act_bwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
        (int)act, n, (const T *)x, (const T *)dy, (T *)dx);
  });
}

extern "C" sg_status sg_binary_fwd_cuda(sg_binary op, sg_dtype dt, int64_t n,
                                        const void *a, const void *b, void *y,
                                        void *stream) {
  return dispatch("sg_binary_fwd_cuda", dt, n, [&](auto z) {
    using T = decltype(z);
    binary_fwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
        (int)op, n, (const T *)a, (const T *)b, (T *)y);
  });
}

extern "C" sg_status sg_binary_bwd_cuda(sg_binary op, sg_dtype dt, int64_t n,
                                        const void *a, const void *b,
                                        const void *dy, void *da, void *db,
                                        void *stream) {
  return dispatch("sg_binary_bwd_cuda", dt, n, [&](auto z) {
    using T = decltype(z);
    binary_bwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
        (int)op, n, (const T *)a, (const T *)b, (const T *)dy, (T *)da,
        (T *)db);
  });
}

extern "C" sg_status sg_scale_cuda(sg_dtype dt, int64_t n, double alpha,
                                   const void *x, void *y, void *stream) {
  return dispatch("sg_scale_cuda", dt, n, [&](auto z) {
    using T = decltype(z);
    scale_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(n, (T)alpha,
                                                                (const T *)x,
                                                                (T *)y);
  });
}

extern "C" sg_status sg_bias_fwd_cuda(sg_dtype dt, int64_t batch,
                                      int64_t channels, int64_t spatial,
                                      const void *x, const void *b, void *y,
                                      void *stream) {
  const int64_t n = batch * channels * spatial;
  return dispatch("sg_bias_fwd_cuda", dt, n, [&](auto z) {
    using T = decltype(z);
    bias_fwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
        n, channels, spatial, (const T *)x, (const T *)b, (T *)y);
  });
}

extern "C" sg_status sg_bias_bwd_cuda(sg_dtype dt, int64_t batch,
                                      int64_t channels, int64_t spatial,
                                      const void *dy, void *db, void *stream) {
  const int64_t n = batch * channels * spatial;
  const unsigned blocks = (unsigned)(channels < 65535 ? channels : 65535);
  return dispatch("sg_bias_bwd_cuda", dt, n, [&](auto z) {
    using T = decltype(z);
    bias_bwd_k<T>
        <<<blocks, kThreads, 0, SG_STREAM(stream)>>>(batch, channels, spatial,
                                                     (const T *)dy, (T *)db);
  });
}

extern "C" sg_status sg_pool_fwd_cuda(sg_pool_kind kind, const sg_conv_desc *d,
                                      sg_dtype dt, const void *x, void *y,
                                      void *stream) {
  sg_status st = SG_OK;
  sg_pool_win w;
  int64_t planes = 0;
  SG_TRY(sg_pool_win_make(d, dt, &w, &planes));
  {
    const int64_t n = planes * w.out[0] * w.out[1] * w.out[2];
    const double inv = 1.0 / (double)(w.ker[0] * w.ker[1] * w.ker[2]);
    if (n > 0 && (!x || !y))
      SG_RAISE(SG_ERR_INVALID_ARG, "sg_pool_fwd_cuda: NULL x or y");
    st = dispatch("sg_pool_fwd_cuda", dt, n, [&](auto z) {
      using T = decltype(z);
      pool_fwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
          (int)kind, w, (T)inv, n, (const T *)x, (T *)y);
    });
  }
fail:
  return st;
}

extern "C" sg_status sg_pool_bwd_cuda(sg_pool_kind kind, const sg_conv_desc *d,
                                      sg_dtype dt, const void *x,
                                      const void *dy, void *dx, void *stream) {
  sg_status st = SG_OK;
  sg_pool_win w;
  int64_t planes = 0;
  SG_TRY(sg_pool_win_make(d, dt, &w, &planes));
  {
    const int64_t n = planes * w.in[0] * w.in[1] * w.in[2];
    const double inv = 1.0 / (double)(w.ker[0] * w.ker[1] * w.ker[2]);
    if (n > 0 && (!dy || !dx || (kind == SG_POOL_MAX && !x)))
      SG_RAISE(SG_ERR_INVALID_ARG, "sg_pool_bwd_cuda: NULL x, dy or dx");
    st = dispatch("sg_pool_bwd_cuda", dt, n, [&](auto z) {
      using T = decltype(z);
      pool_bwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
          (int)kind, w, (T)inv, n, (const T *)x, (const T *)dy, (T *)dx);
    });
  }
fail:
  return st;
}

extern "C" sg_status sg_upsample_fwd_cuda(sg_upsample_kind kind, int nsp,
                                          int64_t planes, const int64_t *in,
                                          const int64_t *scale, sg_dtype dt,
                                          const void *x, void *y,
                                          void *stream) {
  sg_status st = SG_OK;
  sg_up_geom g;
  SG_TRY(sg_up_geom_make(kind, nsp, planes, in, scale, dt, &g));
  {
    const int64_t n = planes * g.out[0] * g.out[1] * g.out[2];
    if (n > 0 && (!x || !y))
      SG_RAISE(SG_ERR_INVALID_ARG, "sg_upsample_fwd_cuda: NULL x or y");
    st = dispatch("sg_upsample_fwd_cuda", dt, n, [&](auto z) {
      using T = decltype(z);
      up_fwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
          kind == SG_UPSAMPLE_LINEAR, g, n, (const T *)x, (T *)y);
    });
  }
fail:
  return st;
}

extern "C" sg_status sg_upsample_bwd_cuda(sg_upsample_kind kind, int nsp,
                                          int64_t planes, const int64_t *in,
                                          const int64_t *scale, sg_dtype dt,
                                          const void *dy, void *dx,
                                          void *stream) {
  sg_status st = SG_OK;
  sg_up_geom g;
  SG_TRY(sg_up_geom_make(kind, nsp, planes, in, scale, dt, &g));
  {
    const int64_t n = planes * g.in[0] * g.in[1] * g.in[2];
    if (n > 0 && (!dy || !dx))
      SG_RAISE(SG_ERR_INVALID_ARG, "sg_upsample_bwd_cuda: NULL dy or dx");
    st = dispatch("sg_upsample_bwd_cuda", dt, n, [&](auto z) {
      using T = decltype(z);
      up_bwd_k<T>
          <<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(g, n, (const T *)dy,
                                                            (T *)dx);
    });
  }
fail:
  return st;
}

extern "C" sg_status sg_loss_partial_cuda(sg_loss_kind kind, sg_dtype dt,
                                          int64_t batch, int64_t n,
                                          const void *p, const void *t,
                                          double *partial, void *stream) {
  sg_status st = SG_OK;
  double *blk = nullptr;
  cudaStream_t s = SG_STREAM(stream);
  const int64_t rows = kind == SG_LOSS_REL_L2 ? batch : 1;
  const int64_t len = batch > 0 ? (kind == SG_LOSS_REL_L2 ? n / batch : n) : 0;
  const int64_t nblk = len > 0 ? (len + SG_SUM_BLOCK - 1) / SG_SUM_BLOCK : 1;
  SG_TRY(loss_check("sg_loss_partial_cuda", kind, batch, n, p, t));
  if (!partial)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_loss_partial_cuda: partial is NULL");
  SG_CUDA(cudaMallocAsync((void **)&blk, 2 * (size_t)(rows * nblk) * 8, s));
  SG_CUDA(cudaMemsetAsync(blk, 0, 2 * (size_t)(rows * nblk) * 8, s));
  SG_TRY(dispatch("sg_loss_partial_cuda", dt, n, [&](auto z) {
    using T = decltype(z);
    loss_blocks_k<T><<<(unsigned)(rows * nblk), kThreads, 0, s>>>(
        (int)kind, len, nblk, (const T *)p, (const T *)t, blk);
  }));
  loss_rows_k<<<grid_for(rows), kThreads, 0, s>>>((int)kind, rows, nblk, n, blk,
                                                  partial);
  SG_CUDA(cudaGetLastError());
fail:
  if (blk) cudaFreeAsync(blk, s);
  return st;
}

extern "C" sg_status sg_loss_bwd_cuda(sg_loss_kind kind, sg_dtype dt,
                                      int64_t batch, int64_t n, const void *p,
                                      const void *t, const double *partial,
                                      double g, void *dp, void *dt_grad,
                                      void *stream) {
  sg_status st = loss_check("sg_loss_bwd_cuda", kind, batch, n, p, t);
  if (st != SG_OK) return st;
  return dispatch("sg_loss_bwd_cuda", dt, n, [&](auto z) {
    using T = decltype(z);
    loss_bwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
        (int)kind, batch, n, (const T *)p, (const T *)t, partial, g, (T *)dp,
        (T *)dt_grad);
  });
}

extern "C" sg_status sg_adamw_step_f32_cuda(
    float *param, const float *grad, float *m, float *v, int64_t n, int64_t t,
    double lr, double grad_scale, const sg_adamw_config *cfg, void *stream) {
  sg_status st = SG_OK;
  if (n < 0 || t < 1 || !cfg)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_adamw_step_f32_cuda: n = %lld, t = %lld",
             (long long)n, (long long)t);
  if (n == 0) return SG_OK;
  adamw_k<<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
      sg_adamw_coef_at(cfg, t, lr, grad_scale), n, param, grad, m, v);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

// Partial sums of squares (double) of a grid-stride share per block.
__global__ void sumsq_k(int64_t n, const float *x, double *part) {
  __shared__ double sh[32];
  double s = 0.0;
  SG_GRID_STRIDE(i, n) {
    const double v = x[i];
    s += v * v;
  }
  s = warp_block_sum(s, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

extern "C" sg_status sg_sumsq_f32_cuda(const float *x, int64_t n, double *out,
                                       void *stream) {
  sg_status st = SG_OK;
  enum { kBlocks = 128 };  // fixed: the same partials, the same order
  double *part = NULL, host[kBlocks];
  const cudaStream_t s = SG_STREAM(stream);
  if (!out || n < 0 || (n > 0 && !x))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_sumsq_f32_cuda: n = %lld", (long long)n);
  *out = 0.0;
  if (n == 0) return SG_OK;
  SG_CUDA(cudaMallocAsync((void **)&part, sizeof host, s));
  sumsq_k<<<kBlocks, kThreads, 0, s>>>(n, x, part);
  SG_CUDA(cudaGetLastError());
  SG_CUDA(cudaMemcpyAsync(host, part, sizeof host, cudaMemcpyDeviceToHost, s));
  SG_CUDA(cudaStreamSynchronize(s));
  for (int b = 0; b < kBlocks; ++b) *out += host[b];
fail:
  if (part) cudaFreeAsync(part, s);
  return st;
}

// The frame of the norm launchers: d checked, then launch(z, g, n) for dt's
// element type (z a value of it) over n statistics (per_stat) or elements,
// unless n is 0.
template <typename F>
static sg_status norm_launch(const char *what, const sg_norm_desc *d,
                             sg_dtype dt, bool per_stat, F launch) {
  sg_status st = SG_OK;
  int64_t nstat = 0;
  SG_TRY(norm_check(what, d, &nstat));
  {
    const int64_t n = per_stat ? nstat : d->batch * d->channels * d->spatial;
    SG_TRY(dispatch(what, dt, n, [&](auto z) { launch(z, norm_geom(d), n); }));
  }
fail:
  return st;
}

template <typename T>
struct same_as {
  using type = T;
};

// A per-statistic pass: layer norm a thread per statistic (ln), the planar
// kinds a block per statistic (planar, which also takes nstat); args are
// converted to the kernels' parameters P.
template <typename... P>
static void norm_stat_pass(const sg_norm_desc *d, const NormGeom &g,
                           int64_t nstat, void *stream,
                           void (*ln)(NormGeom, P...),
                           void (*planar)(NormGeom, int64_t, P...),
                           typename same_as<P>::type... args) {
  if (d->kind == SG_NORM_LAYER)
    ln<<<grid_for(nstat), kThreads, 0, SG_STREAM(stream)>>>(g, args...);
  else
    planar<<<blocks_for(nstat), kThreads, 0, SG_STREAM(stream)>>>(g, nstat,
                                                                  args...);
}

extern "C" sg_status sg_norm_stats_cuda(const sg_norm_desc *d, sg_dtype dt,
                                        const void *x, sg_moments *stats,
                                        void *stream) {
  return norm_launch("sg_norm_stats_cuda", d, dt, true,
                     [&](auto z, const NormGeom &g, int64_t nstat) {
                       using T = decltype(z);
                       norm_stat_pass(d, g, nstat, stream, norm_stats_ln_k<T>,
                                      norm_stats_planar_k<T>, (const T *)x,
                                      stats);
                     });
}

extern "C" sg_status sg_norm_fwd_cuda(const sg_norm_desc *d, sg_dtype dt,
                                      const void *x, const sg_moments *stats,
                                      const void *gamma, const void *beta,
                                      void *y, void *stream) {
  return norm_launch("sg_norm_fwd_cuda", d, dt, false,
                     [&](auto z, const NormGeom &g, int64_t n) {
                       using T = decltype(z);
                       norm_fwd_k<T>
                           <<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
                               g, (const T *)x, stats, (const T *)gamma,
                               (const T *)beta, (T *)y);
                     });
}

extern "C" sg_status sg_norm_sums_cuda(const sg_norm_desc *d, sg_dtype dt,
                                       const void *x, const sg_moments *stats,
                                       const void *gamma, const void *dy,
                                       double *sums, void *stream) {
  return norm_launch("sg_norm_sums_cuda", d, dt, true,
                     [&](auto z, const NormGeom &g, int64_t nstat) {
                       using T = decltype(z);
                       norm_stat_pass(d, g, nstat, stream, norm_sums_ln_k<T>,
                                      norm_sums_planar_k<T>, (const T *)x,
                                      stats, (const T *)gamma, (const T *)dy,
                                      sums);
                     });
}

extern "C" sg_status sg_norm_bwd_cuda(const sg_norm_desc *d, sg_dtype dt,
                                      const void *x, const sg_moments *stats,
                                      const void *gamma, const void *dy,
                                      const double *sums, void *dx,
                                      void *dgamma, void *dbeta, void *stream) {
  return norm_launch(
      "sg_norm_bwd_cuda", d, dt, false,
      [&](auto z, const NormGeom &g, int64_t n) {
        using T = decltype(z);
        if (dx)
          norm_dx_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
              g, (const T *)x, stats, (const T *)gamma, (const T *)dy, sums,
              (T *)dx);
        if (dgamma || dbeta)
          norm_dparams_k<T>
              <<<blocks_for(d->channels), kThreads, 0, SG_STREAM(stream)>>>(
                  g, (const T *)x, stats, (const T *)dy, (T *)dgamma,
                  (T *)dbeta);
      });
}
