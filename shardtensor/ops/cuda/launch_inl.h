// shardgrid — what every CUDA op file launches with: grid-stride kernels
// over n elements, a grid of blocks of `threads` capped at 65535 (the
// loop covers the rest), and the stream handle the C API passes as void *.
#ifndef SG_CUDA_LAUNCH_INL_H
#define SG_CUDA_LAUNCH_INL_H

#include <cuda_runtime.h>
#include <stdint.h>

inline unsigned sg_grid_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return (unsigned)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

#define SG_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); \
       i += (int64_t)gridDim.x * blockDim.x)
#define SG_STREAM(s) ((cudaStream_t)(s))

#endif
