// shardgrid — Ulysses' all-to-all packing on CUDA (models/ag_ulysses.c on
// device variables): a thin layer over the SG_HD index maps of
// models/ag_ulysses_inl.h, which the host's row copies call too. One
// thread per element; elements moved as 4- or 8-byte words (the same bits).
#include <cuda_runtime.h>
#include <stdint.h>

#include "ag_ulysses_inl.h"
#include "cuda/launch_inl.h"

namespace {

const int kThreads = 256;

template <typename W>
__global__ void tok_k(int64_t total, int64_t n, int64_t P, int64_t p, int back,
                      W *x, W *buf) {
  SG_GRID_STRIDE(j, total) {
    const int64_t i = sg_uly_tok_x(j, n, P, p);
    if (back)
      x[i] = buf[j];
    else
      buf[j] = x[i];
  }
}

template <typename W>
__global__ void head_k(int64_t total, int64_t m, int64_t N, int64_t off_p,
                       int64_t d, int back, W *y, W *buf) {
  SG_GRID_STRIDE(j, total) {
    const int64_t i = sg_uly_head_y(j, m, N, off_p, d);
    if (back)
      buf[j] = y[i];
    else
      y[i] = buf[j];
  }
}

sg_status check(const char *fn, size_t es, const void *a, const void *b,
                int64_t total) {
  sg_status st = SG_OK;
  if (es != 4 && es != 8)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: %zu-byte elements (4 or 8)", fn, es);
  if (total < 0 || (total > 0 && (!a || !b)))
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: %lld elements, NULL buffer", fn,
             (long long)total);
fail:
  return st;
}

}  // namespace

extern "C" sg_status sg_uly_tok_pack_cuda(size_t es, int64_t B, int64_t n,
                                          int64_t P, int64_t p, void *x,
                                          void *buf, int back, void *stream) {
  sg_status st = SG_OK;
  const int64_t total = B * n;
  SG_TRY(check("sg_uly_tok_pack_cuda", es, x, buf, total));
  if (total == 0) goto fail;
  if (es == 4)
    tok_k<uint32_t>
        <<<sg_grid_for(total, kThreads), kThreads, 0, SG_STREAM(stream)>>>(
            total, n, P, p, back, (uint32_t *)x, (uint32_t *)buf);
  else
    tok_k<uint64_t>
        <<<sg_grid_for(total, kThreads), kThreads, 0, SG_STREAM(stream)>>>(
            total, n, P, p, back, (uint64_t *)x, (uint64_t *)buf);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

extern "C" sg_status sg_uly_head_pack_cuda(size_t es, int64_t rows, int64_t m,
                                           int64_t N, int64_t off_p, int64_t d,
                                           void *y, void *buf, int back,
                                           void *stream) {
  sg_status st = SG_OK;
  const int64_t total = rows * m;
  SG_TRY(check("sg_uly_head_pack_cuda", es, y, buf, total));
  if (total == 0) goto fail;
  if (es == 4)
    head_k<uint32_t>
        <<<sg_grid_for(total, kThreads), kThreads, 0, SG_STREAM(stream)>>>(
            total, m, N, off_p, d, back, (uint32_t *)y, (uint32_t *)buf);
  else
    head_k<uint64_t>
        <<<sg_grid_for(total, kThreads), kThreads, 0, SG_STREAM(stream)>>>(
            total, m, N, off_p, d, back, (uint64_t *)y, (uint64_t *)buf);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}
