// shardgrid — the layout ops on CUDA device pointers (sg_ops_cuda.h):
// concat / split, the FNO-3D time broadcast and window, roll, add_field.
// One thread per element over the index maps of sg_ops_inl.h (sg_cat_index,
// sg_bcast_t_src, sg_twin_src, sg_roll_src) and its two sums
// (sg_bcast_t_sum, sg_field_acc), which the host ops call too.
#include <cuda_runtime.h>
#include <stdint.h>

#include "launch_inl.h"
#include "sg_ops_cuda.h"
#include "sg_ops_inl.h"
extern "C" {
#include "ops_impl.h"  // sg_pad_geom
}

namespace {

const int kThreads = 256;

inline unsigned grid_for(int64_t n) { return sg_grid_for(n, kThreads); }


__device__ inline float bsum(const float *dy, int64_t nt, int64_t s,
                             int64_t e) {
  return sg_bcast_t_sum_f32(dy, nt, s, e);
}
__device__ inline double bsum(const double *dy, int64_t nt, int64_t s,
                              int64_t e) {
  return sg_bcast_t_sum_f64(dy, nt, s, e);
}
__device__ inline float facc(float p, const float *dy, int64_t nb, int64_t m,
                             int64_t i) {
  return sg_field_acc_f32(p, dy, nb, m, i);
}
__device__ inline double facc(double p, const double *dy, int64_t nb, int64_t m,
                              int64_t i) {
  return sg_field_acc_f64(p, dy, nb, m, i);
}

template <typename T>
__global__ void cat_k(int64_t n, int64_t ch, int64_t ctot, int64_t off,
                      int64_t s, int to_whole, const T *src, T *dst) {
  SG_GRID_STRIDE(i, n) {
    const int64_t j = sg_cat_index(i, ch, ctot, off, s);
    if (to_whole)
      dst[j] = src[i];
    else
      dst[i] = src[j];
  }
}
template <typename T>
__global__ void bcast_fwd_k(int64_t n, int64_t nt, int64_t s, const T *x,
                            T *y) {
  SG_GRID_STRIDE(j, n) y[j] = x[sg_bcast_t_src(j, nt, s)];
}
template <typename T>
__global__ void bcast_bwd_k(int64_t n, int64_t nt, int64_t s, const T *dy,
                            T *dx) {
  SG_GRID_STRIDE(e, n) dx[e] = bsum(dy, nt, s, e);
}
template <typename T>
__global__ void twin_k(int64_t n, int64_t t1, int64_t t2, int64_t s,
                       const T *in, T *out) {
  SG_GRID_STRIDE(j, n) {
    const int64_t i = sg_twin_src(j, t1, t2, s);
    out[j] = i >= 0 ? in[i] : T(0);
  }
}
struct Ext3 {
  int64_t n[3], sh[3];
};
template <typename T>
__global__ void roll_k(int64_t n, Ext3 e, int fwd, const T *src, T *dst) {
  SG_GRID_STRIDE(j, n) {
    const int64_t i = sg_roll_src(j, e.n, e.sh);
    if (fwd)
      dst[j] = src[i];
    else
      dst[i] = src[j];
  }
}
template <typename T>
__global__ void field_fwd_k(int64_t n, int64_t m, const T *x, const T *p,
                            T *y) {
  SG_GRID_STRIDE(i, n) y[i] = x[i] + p[i % m];
}
template <typename T>
__global__ void field_bwd_k(int64_t nb, int64_t m, const T *dy, T *dp) {
  SG_GRID_STRIDE(i, m) dp[i] = facc(dp[i], dy, nb, m, i);
}

struct Pad3 {
  int64_t in[3], out[3], lo[3];
  int mode[3];
};
__device__ inline float pgrad(const Pad3 &g, const float *dpp, int64_t i) {
  return sg_pad_grad_cell_f32(g.in, g.out, g.lo, g.mode, dpp, i);
}
__device__ inline double pgrad(const Pad3 &g, const double *dpp, int64_t i) {
  return sg_pad_grad_cell_f64(g.in, g.out, g.lo, g.mode, dpp, i);
}
// One thread per padded cell (n = planes * sout).
template <typename T>
__global__ void pad_fwd_k(Pad3 g, int64_t n, const T *src, T *dst) {
  const int64_t sin = g.in[0] * g.in[1] * g.in[2];
  const int64_t sout = g.out[0] * g.out[1] * g.out[2];
  SG_GRID_STRIDE(o, n) {
    const int64_t i = sg_pad_src_cell(g.in, g.out, g.lo, g.mode, o % sout);
    dst[o] = i >= 0 ? src[(o / sout) * sin + i] : T(0);
  }
}
// The adjoint as a gather, one thread per source cell (n = planes * sin).
template <typename T>
__global__ void pad_bwd_k(Pad3 g, int64_t n, const T *dpad, T *dsrc) {
  const int64_t sin = g.in[0] * g.in[1] * g.in[2];
  const int64_t sout = g.out[0] * g.out[1] * g.out[2];
  SG_GRID_STRIDE(i, n) dsrc[i] = pgrad(g, dpad + (i / sin) * sout, i % sin);
}

// Max pooling's margins: the cells of each plane (per cells) outside the
// domain (sg_fill_outside_cell) set to value.
struct Fill3 {
  int64_t b3[3], lo[3], hi[3];
};
template <typename T>
__global__ void fill_k(Fill3 f, int64_t n, int64_t per, T value, T *x) {
  SG_GRID_STRIDE(i, n) {
    if (sg_fill_outside_cell(f.b3, f.lo, f.hi, i % per)) x[i] = value;
  }
}

// Checks dt and the sizes, then runs launch(z) for dt's element type (z a
// value of it) unless n is 0, and reports launch errors.
template <typename F>
sg_status run(const char *what, sg_dtype dt, int64_t n, bool ptrs_ok,
              F launch) {
  sg_status st = SG_OK;
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: f32 or f64, not %s", what,
             sg_dtype_name(dt));
  if (n < 0) SG_RAISE(SG_ERR_SHAPE, "%s: %lld elements", what, (long long)n);
  if (n == 0) return SG_OK;
  if (!ptrs_ok) SG_RAISE(SG_ERR_INVALID_ARG, "%s: a NULL pointer", what);
  if (dt == SG_DTYPE_F32)
    launch(0.0f);
  else
    launch(0.0);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

}  // namespace


extern "C" sg_status sg_cat_part_cuda(sg_dtype dt, int64_t batch,
                                      int64_t spatial, int64_t ch, int64_t ctot,
                                      int64_t off, int to_whole,
                                      const void *src, void *dst,
                                      void *stream) {
  sg_status st = SG_OK;
  if (ch < 0 || off < 0 || off + ch > ctot || batch < 0 || spatial < 0)
    SG_RAISE(SG_ERR_SHAPE, "sg_cat_part_cuda: channels %lld at %lld of %lld",
             (long long)ch, (long long)off, (long long)ctot);
  {
    const int64_t n = batch * ch * spatial;
    st = run("sg_cat_part_cuda", dt, n, src && dst, [&](auto z) {
      using T = decltype(z);
      cat_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
          n, ch, ctot, off, spatial, to_whole, (const T *)src, (T *)dst);
    });
  }
fail:
  return st;
}

extern "C" sg_status sg_bcast_t_fwd_cuda(sg_dtype dt, int64_t planes,
                                         int64_t nt, int64_t spatial,
                                         const void *x, void *y, void *stream) {
  const int64_t n = planes * nt * spatial;
  return run("sg_bcast_t_fwd_cuda", dt, n, x && y, [&](auto z) {
    using T = decltype(z);
    bcast_fwd_k<T>
        <<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(n, nt, spatial,
                                                          (const T *)x, (T *)y);
  });
}

extern "C" sg_status sg_bcast_t_bwd_cuda(sg_dtype dt, int64_t planes,
                                         int64_t nt, int64_t spatial,
                                         const void *dy, void *dx,
                                         void *stream) {
  const int64_t n = planes * spatial;
  return run("sg_bcast_t_bwd_cuda", dt, n, dy && dx, [&](auto z) {
    using T = decltype(z);
    bcast_bwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
        n, nt, spatial, (const T *)dy, (T *)dx);
  });
}

extern "C" sg_status sg_time_window_cuda(sg_dtype dt, int64_t planes,
                                         int64_t spatial, int64_t t1,
                                         int64_t t2, const void *in, void *out,
                                         void *stream) {
  const int64_t n = planes * t2 * spatial;
  return run("sg_time_window_cuda", dt, n, in && out, [&](auto z) {
    using T = decltype(z);
    twin_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
        n, t1, t2, spatial, (const T *)in, (T *)out);
  });
}

extern "C" sg_status sg_roll_cuda(sg_dtype dt, int64_t lead, const int64_t *ext,
                                  const int64_t *shift, int fwd,
                                  const void *src, void *dst, void *stream) {
  sg_status st = SG_OK;
  Ext3 e;
  for (int d = 0; d < 3; ++d) {
    e.n[d] = ext[d];
    e.sh[d] = shift[d];
    if (ext[d] < 1)
      SG_RAISE(SG_ERR_SHAPE, "sg_roll_cuda: extent %lld in dim %d",
               (long long)ext[d], d);
  }
  {
    const int64_t n = lead * e.n[0] * e.n[1] * e.n[2];
    st = run("sg_roll_cuda", dt, n, src && dst, [&](auto z) {
      using T = decltype(z);
      roll_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(n, e, fwd,
                                                                 (const T *)src,
                                                                 (T *)dst);
    });
  }
fail:
  return st;
}

extern "C" sg_status sg_add_field_fwd_cuda(sg_dtype dt, int64_t batch,
                                           int64_t m, const void *x,
                                           const void *p, void *y,
                                           void *stream) {
  const int64_t n = batch * m;
  return run("sg_add_field_fwd_cuda", dt, n, x && p && y, [&](auto z) {
    using T = decltype(z);
    field_fwd_k<T>
        <<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(n, m, (const T *)x,
                                                          (const T *)p, (T *)y);
  });
}

extern "C" sg_status sg_add_field_bwd_cuda(sg_dtype dt, int64_t batch,
                                           int64_t m, const void *dy, void *dp,
                                           void *stream) {
  return run("sg_add_field_bwd_cuda", dt, batch > 0 ? m : 0, dy && dp,
             [&](auto z) {
               using T = decltype(z);
               field_bwd_k<T><<<grid_for(m), kThreads, 0, SG_STREAM(stream)>>>(
                   batch, m, (const T *)dy, (T *)dp);
             });
}

extern "C" sg_status sg_pad_fwd_cuda(sg_dtype dt, int nsp, int64_t planes,
                                     const int64_t *in, const int64_t (*pad)[2],
                                     const sg_pad_mode *mode, const void *src,
                                     void *dst, void *stream) {
  sg_status st = SG_OK;
  Pad3 g;
  SG_TRY(
      sg_pad_geom(dt, nsp, planes, in, pad, mode, g.in, g.out, g.lo, g.mode));
  {
    const int64_t n = planes * g.out[0] * g.out[1] * g.out[2];
    st = run("sg_pad_fwd_cuda", dt, n, src && dst, [&](auto z) {
      using T = decltype(z);
      pad_fwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
          g, n, (const T *)src, (T *)dst);
    });
  }
fail:
  return st;
}

extern "C" sg_status sg_pad_bwd_cuda(sg_dtype dt, int nsp, int64_t planes,
                                     const int64_t *in, const int64_t (*pad)[2],
                                     const sg_pad_mode *mode, const void *dpad,
                                     void *dsrc, void *stream) {
  sg_status st = SG_OK;
  Pad3 g;
  SG_TRY(
      sg_pad_geom(dt, nsp, planes, in, pad, mode, g.in, g.out, g.lo, g.mode));
  {
    const int64_t n = planes * g.in[0] * g.in[1] * g.in[2];
    st = run("sg_pad_bwd_cuda", dt, n, dpad && dsrc, [&](auto z) {
      using T = decltype(z);
      pad_bwd_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(
          g, n, (const T *)dpad, (T *)dsrc);
    });
  }
fail:
  return st;
}

extern "C" sg_status sg_pad_fill_outside_cuda(
    sg_dtype dt, int nsp, int64_t planes, const int64_t *box,
    const int64_t *origin, const int64_t *extent, const sg_pad_mode *mode,
    double value, void *x, void *stream) {
  sg_status st = SG_OK;
  Fill3 f;
  int zero[3];
  if (nsp < 1 || nsp > 3 || planes < 0 || !box || !origin || !extent || !mode)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_pad_fill_outside_cuda: nsp %d, planes %lld, box, origin, "
             "extent and mode required",
             nsp, (long long)planes);
  for (int i = 0; i < nsp; ++i) {
    if (box[i] < 0 || extent[i] < 1)
      SG_RAISE(SG_ERR_SHAPE,
               "sg_pad_fill_outside_cuda: dim %d: box %lld, domain %lld", i,
               (long long)box[i], (long long)extent[i]);
    zero[i] = mode[i] == SG_PAD_ZERO;
  }
  {
    const int any = sg_fill_outside_geom(nsp, box, origin, extent, zero, f.b3,
                                         f.lo, f.hi);
    const int64_t per = f.b3[0] * f.b3[1] * f.b3[2];
    const int64_t n = any ? planes * per : 0;
    st = run("sg_pad_fill_outside_cuda", dt, n, x != NULL, [&](auto z) {
      using T = decltype(z);
      fill_k<T><<<grid_for(n), kThreads, 0, SG_STREAM(stream)>>>(f, n, per,
                                                                 (T)value,
                                                                 (T *)x);
    });
  }
fail:
  return st;
}
