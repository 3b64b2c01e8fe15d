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

// One thread per element of a box, grid-stride; Op says what happens
// between the block's element at offset o and the buffer's element e.
template <typename T, typename Op>
__global__ void box_k(T *__restrict__ block, sg_halo_box box,
                      T *__restrict__ buf, int64_t n) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    Op::at(block, sg_halo_box_offset(&box, e), buf, e);
}

struct PackOp {  // buf[e] = block[o]
  template <typename T>
  __device__ static void at(T *block, int64_t o, T *buf, int64_t e) {
    buf[e] = block[o];
  }
};
struct UnpackOp {  // block[o] = buf[e]
  template <typename T>
  __device__ static void at(T *block, int64_t o, T *buf, int64_t e) {
    block[o] = buf[e];
  }
};
struct ZeroOp {  // block[o] = 0 (no buffer)
  template <typename T>
  __device__ static void at(T *block, int64_t o, T *, int64_t) {
    block[o] = T(0);
  }
};
struct AddOp {  // block[o] += buf[e]; bf16 summed in f32 and rounded once
  template <typename T>
  __device__ static void at(T *block, int64_t o, T *buf, int64_t e) {
    block[o] += buf[e];
  }
  __device__ static void at(sg_bf16 *block, int64_t o, sg_bf16 *buf,
                            int64_t e) {
    block[o] = sg_bf16_from_f32(sg_bf16_to_f32(block[o]) +
                                sg_bf16_to_f32(buf[e]));
  }
};

template <typename T, typename Op>
void launch(void *block, const sg_halo_box &box, const void *buf, int64_t n,
            cudaStream_t s) {
  box_k<T, Op><<<grid_for(n), kThreads, 0, s>>>((T *)block, box, (T *)buf, n);
}

// The box of a call simplified, its element count, and the stream.
struct Launch {
  sg_halo_box box;
  int64_t n;
  cudaStream_t s;
};
inline Launch launch_of(const sg_halo_box *box, void *stream) {
  Launch l;
  l.box = sg_halo_box_simplify(*box, 1);
  l.n = sg_halo_box_size(&l.box);
  l.s = (cudaStream_t)stream;
  return l;
}

// Moves of raw elements only need the element size.
template <typename Op>
sg_status launch_by_size(const char *what, size_t esize, void *block,
                         const sg_halo_box *box, const void *buf,
                         void *stream) {
  sg_status st = SG_OK;
  const Launch l = launch_of(box, stream);
  if (l.n == 0) return SG_OK;
  switch (esize) {
  case 1: launch<uint8_t, Op>(block, l.box, buf, l.n, l.s); break;
  case 2: launch<uint16_t, Op>(block, l.box, buf, l.n, l.s); break;
  case 4: launch<uint32_t, Op>(block, l.box, buf, l.n, l.s); break;
  case 8: launch<uint64_t, Op>(block, l.box, buf, l.n, l.s); break;
  default:
    SG_RAISE(SG_ERR_INVALID_ARG, "halo %s: element size %zu", what, esize);
  }
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}

}  // namespace

extern "C" sg_status sg_halo_pack_cuda(const void *block,
                                       const sg_halo_box *box, size_t esize,
                                       void *buf, void *stream) {
  return launch_by_size<PackOp>("pack", esize, (void *)block, box, buf, stream);
}

extern "C" sg_status sg_halo_unpack_cuda(void *block, const sg_halo_box *box,
                                         size_t esize, const void *buf,
                                         void *stream) {
  return launch_by_size<UnpackOp>("unpack", esize, block, box, buf, stream);
}

extern "C" sg_status sg_halo_zero_cuda(void *block, const sg_halo_box *box,
                                       size_t esize, void *stream) {
  return launch_by_size<ZeroOp>("zero", esize, block, box, NULL, stream);
}

extern "C" sg_status sg_halo_unpack_add_cuda(void *block,
                                             const sg_halo_box *box,
                                             sg_dtype dt, const void *buf,
                                             void *stream) {
  sg_status st = SG_OK;
  const Launch l = launch_of(box, stream);
  if (l.n == 0) return SG_OK;
  switch (dt) {
  case SG_DTYPE_F32: launch<float, AddOp>(block, l.box, buf, l.n, l.s); break;
  case SG_DTYPE_F64: launch<double, AddOp>(block, l.box, buf, l.n, l.s); break;
  case SG_DTYPE_I32: launch<int32_t, AddOp>(block, l.box, buf, l.n, l.s); break;
  case SG_DTYPE_I64: launch<int64_t, AddOp>(block, l.box, buf, l.n, l.s); break;
  case SG_DTYPE_BF16:
    launch<sg_bf16, AddOp>(block, l.box, buf, l.n, l.s);
    break;
  default: SG_RAISE(SG_ERR_INVALID_ARG, "halo add: invalid dtype %d", (int)dt);
  }
  SG_CUDA(cudaGetLastError());
fail:
  return st;
}
