// shardgrid — CUDA halo pack/unpack kernels. The index arithmetic is the
// same inline SG_HD code the host kernels use (sg_halo_pack.h): one thread
// per element of a box, grid-stride loops.
#include <cuda_runtime.h>
#include <stdint.h>

#include "sg_halo_pack.h"

namespace {

const int kThreads = 256;

inline unsigned grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return (unsigned)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

template <typename T>
__global__ void pack_k(const T *__restrict__ block, sg_halo_box box,
                       T *__restrict__ buf, int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    buf[e] = block[sg_halo_box_offset(&box, e)];
}

template <typename T>
__global__ void unpack_k(T *__restrict__ block, sg_halo_box box,
                         const T *__restrict__ buf, int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    block[sg_halo_box_offset(&box, e)] = buf[e];
}

template <typename T>
__global__ void zero_k(T *__restrict__ block, sg_halo_box box, int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    block[sg_halo_box_offset(&box, e)] = T(0);
}

template <typename T>
__global__ void unpack_add_k(T *__restrict__ block, sg_halo_box box,
                             const T *__restrict__ buf, int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    block[sg_halo_box_offset(&box, e)] += buf[e];
}

__global__ void unpack_add_bf16_k(sg_bf16 *__restrict__ block, sg_halo_box box,
                                  const sg_bf16 *__restrict__ buf, int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t o = sg_halo_box_offset(&box, e);
    block[o] = sg_bf16_from_f32(sg_bf16_to_f32(block[o]) +
                                sg_bf16_to_f32(buf[e]));
  }
}


}  // namespace

#define SG_LAUNCH_BY_SIZE(kernel, esize, n, stream, blockp, box, bufp)        \
  do {                                                                        \
    switch (esize) {                                                          \
    case 1:                                                                   \
      kernel<uint8_t><<<grid_for(n), kThreads, 0, stream>>>(                  \
          (uint8_t *)(blockp), box, (uint8_t *)(bufp), n);                    \
      break;                                                                  \
    case 2:                                                                   \
      kernel<uint16_t><<<grid_for(n), kThreads, 0, stream>>>(                 \
          (uint16_t *)(blockp), box, (uint16_t *)(bufp), n);                  \
      break;                                                                  \
    case 4:                                                                   \
      kernel<uint32_t><<<grid_for(n), kThreads, 0, stream>>>(                 \
          (uint32_t *)(blockp), box, (uint32_t *)(bufp), n);                  \
      break;                                                                  \
    case 8:                                                                   \
      kernel<uint64_t><<<grid_for(n), kThreads, 0, stream>>>(                 \
          (uint64_t *)(blockp), box, (uint64_t *)(bufp), n);                  \
      break;                                                                  \
    default:                                                                  \
      SG_RAISE(SG_ERR_INVALID_ARG, "halo pack: element size %zu", esize);     \
    }                                                                         \
  } while (0)

extern "C" sg_status sg_halo_pack_cuda(const void *block,
                                       const sg_halo_box *box, size_t esize,
                                       void *buf, void *stream) {
  sg_status st = SG_OK;
  const sg_halo_box bx = sg_halo_box_simplify(*box, 1);
  int64_t n = sg_halo_box_size(&bx);
  cudaStream_t s = (cudaStream_t)stream;
  if (n == 0) return SG_OK;
  SG_LAUNCH_BY_SIZE(pack_k, esize, n, s, block, bx, buf);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

extern "C" sg_status sg_halo_unpack_cuda(void *block, const sg_halo_box *box,
                                         size_t esize, const void *buf,
                                         void *stream) {
  sg_status st = SG_OK;
  const sg_halo_box bx = sg_halo_box_simplify(*box, 1);
  int64_t n = sg_halo_box_size(&bx);
  cudaStream_t s = (cudaStream_t)stream;
  if (n == 0) return SG_OK;
  SG_LAUNCH_BY_SIZE(unpack_k, esize, n, s, block, bx, buf);
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

extern "C" sg_status sg_halo_zero_cuda(void *block, const sg_halo_box *box,
                                       size_t esize, void *stream) {
  sg_status st = SG_OK;
  const sg_halo_box bx = sg_halo_box_simplify(*box, 1);
  int64_t n = sg_halo_box_size(&bx);
  cudaStream_t s = (cudaStream_t)stream;
  if (n == 0) return SG_OK;
  switch (esize) {
  case 1: zero_k<uint8_t><<<grid_for(n), kThreads, 0, s>>>((uint8_t *)block, bx, n); break;
  case 2: zero_k<uint16_t><<<grid_for(n), kThreads, 0, s>>>((uint16_t *)block, bx, n); break;
  case 4: zero_k<uint32_t><<<grid_for(n), kThreads, 0, s>>>((uint32_t *)block, bx, n); break;
  case 8: zero_k<uint64_t><<<grid_for(n), kThreads, 0, s>>>((uint64_t *)block, bx, n); break;
  default: SG_RAISE(SG_ERR_INVALID_ARG, "halo zero: element size %zu", esize);
  }
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

extern "C" sg_status sg_halo_unpack_add_cuda(void *block,
                                             const sg_halo_box *box,
                                             sg_dtype dt, const void *buf,
                                             void *stream) {
  sg_status st = SG_OK;
  const sg_halo_box bx = sg_halo_box_simplify(*box, 1);
  int64_t n = sg_halo_box_size(&bx);
  cudaStream_t s = (cudaStream_t)stream;
  if (n == 0) return SG_OK;
  switch (dt) {
  case SG_DTYPE_F32:
    unpack_add_k<float><<<grid_for(n), kThreads, 0, s>>>(
        (float *)block, bx, (const float *)buf, n);
    break;
  case SG_DTYPE_F64:
    unpack_add_k<double><<<grid_for(n), kThreads, 0, s>>>(
        (double *)block, bx, (const double *)buf, n);
    break;
  case SG_DTYPE_I32:
    unpack_add_k<int32_t><<<grid_for(n), kThreads, 0, s>>>(
        (int32_t *)block, bx, (const int32_t *)buf, n);
    break;
  case SG_DTYPE_I64:
    unpack_add_k<int64_t><<<grid_for(n), kThreads, 0, s>>>(
        (int64_t *)block, bx, (const int64_t *)buf, n);
    break;
  case SG_DTYPE_BF16:
    unpack_add_bf16_k<<<grid_for(n), kThreads, 0, s>>>(
        (sg_bf16 *)block, bx, (const sg_bf16 *)buf, n);
    break;
  default:
    SG_RAISE(SG_ERR_INVALID_ARG, "halo add: invalid dtype %d", (int)dt);
  }
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}
