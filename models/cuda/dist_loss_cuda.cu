// shardgrid — the distributed loss's local part on CUDA (dist_loss.c on
// device variables): a thin layer over the SG_HD functions of
// models/dist_loss_inl.h, which the host loops call too. The forward's
// masked per-sample sums run one thread per sample in the host's order of
// sums (a serial loop per sample, as the host's; the same bits but for FMA
// contraction), the NaN/Inf count summed by one thread in sample order;
// the reductions over ranks stay host doubles (dist_loss.c).
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/launch_inl.h"
#include "dist_loss_inl.h"

namespace {

const int kThreads = 128;

__global__ void sums_k(int rel, int f32, int64_t batch, int64_t per,
                       const void *p, const void *t, const void *m,
                       double *sums, double *bad) {
  SG_GRID_STRIDE(i, batch) {
    double a, b;
    bad[i] = sg_dloss_sample_sums(rel, f32, i * per, (i + 1) * per, p, t, m, &a,
                                  &b);
    sums[2 * i] = a;
    sums[2 * i + 1] = b;
  }
}

// sums[2 batch] = the per-sample counts summed in sample order (as the
// host's: whole numbers, exact in any order)
__global__ void count_k(int64_t batch, const double *bad, double *sums) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double s = 0.0;
  for (int64_t i = 0; i < batch; ++i) s += bad[i];
  sums[2 * batch] = s;
}

__global__ void bwd_k(int rel, int f32, int64_t per, int64_t n, const void *p,
                      const void *t, const void *m, const double *sums,
                      double g, int64_t global_batch, void *dp) {
  SG_GRID_STRIDE(j, n) {
    const double c = sg_dloss_coef(rel, j / per, sums, g, global_batch);
    const double v = sg_dloss_grad(c, f32, j, p, t, m);
    if (f32)
      ((float *)dp)[j] = (float)v;
    else
      ((double *)dp)[j] = v;
  }
}

sg_status check(const char *what, sg_dtype dt, int64_t batch, int64_t per,
                const void *p, const void *t, const void *out) {
  sg_status st = SG_OK;
  if (batch < 0 || per < 0)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: batch %lld, %lld per sample", what,
             (long long)batch, (long long)per);
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: f32 or f64, not %s", what,
             sg_dtype_name(dt));
  if (!out || (batch * per > 0 && (!p || !t)))
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL prediction, target or output", what);
fail:
  return st;
}

}  // namespace

extern "C" sg_status sg_dist_loss_sums_cuda(int rel, sg_dtype dt, int64_t batch,
                                            int64_t per, const void *p,
                                            const void *t, const void *m,
                                            double *sums, void *stream) {
  sg_status st = SG_OK;
  double *bad = nullptr;
  cudaStream_t s = SG_STREAM(stream);
  SG_TRY(check("sg_dist_loss_sums_cuda", dt, batch, per, p, t, sums));
  if (batch > 0) {
    SG_CUDA(cudaMallocAsync((void **)&bad, (size_t)batch * sizeof *bad, s));
    sums_k<<<sg_grid_for(batch, kThreads), kThreads, 0, s>>>(
        rel != 0, dt == SG_DTYPE_F32, batch, per, p, t, m, sums, bad);
    count_k<<<1, 1, 0, s>>>(batch, bad, sums);
  } else {
    SG_CUDA(cudaMemsetAsync(sums, 0, sizeof *sums, s));
  }
  SG_CUDA(cudaGetLastError());
fail:
  if (bad) cudaFreeAsync(bad, s);
  return st;
}

extern "C" sg_status sg_dist_loss_bwd_cuda(int rel, sg_dtype dt, int64_t batch,
                                           int64_t per, const void *p,
                                           const void *t, const void *m,
                                           const double *sums, double g,
                                           int64_t global_batch, void *dp,
                                           void *stream) {
  sg_status st = SG_OK;
  const int64_t n = batch * per;
  SG_TRY(check("sg_dist_loss_bwd_cuda", dt, batch, per, p, t, dp));
  if (!sums)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_dist_loss_bwd_cuda: sums is NULL");
  if (global_batch < 1)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_dist_loss_bwd_cuda: global batch %lld",
             (long long)global_batch);
  if (n == 0) return SG_OK;
  bwd_k<<<sg_grid_for(n, kThreads), kThreads, 0, SG_STREAM(stream)>>>(
      rel != 0, dt == SG_DTYPE_F32, per, n, p, t, m, sums, g, global_batch, dp);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}
