/* shardgrid — the CUDA device backend (CUDA runtime API from C).
 *
 * Compiled only when the CUDA backend is enabled. Device detection turns
 * "no driver", "driver version is insufficient" and "no device" into a
 * count of 0, so a machine without a GPU runs the host backend. */
#include "device_impl.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Sizes of live device blocks, for memory accounting (open addressing). */
typedef struct {
  const void *ptr;
  size_t bytes;
} sg_cuda_block;

static sg_cuda_block *sg_blocks;
static size_t sg_nblocks_cap, sg_nblocks;
static pthread_mutex_t sg_blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static const void *const sg_tomb = (const void *)1;

static size_t sg_hash(const void *p, size_t cap) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)(x & (cap - 1));
}

static int sg_blocks_insert(const void *p, size_t bytes) {
  if ((sg_nblocks + 1) * 2 > sg_nblocks_cap) {
    size_t cap = sg_nblocks_cap ? 2 * sg_nblocks_cap : 256;
    sg_cuda_block *nb = calloc(cap, sizeof *nb);
    if (!nb) return 0;
    for (size_t i = 0; i < sg_nblocks_cap; ++i)
      if (sg_blocks[i].ptr && sg_blocks[i].ptr != sg_tomb) {
        size_t h = sg_hash(sg_blocks[i].ptr, cap);
        while (nb[h].ptr) h = (h + 1) & (cap - 1);
        nb[h] = sg_blocks[i];
      }
    free(sg_blocks);
    sg_blocks = nb;
    sg_nblocks_cap = cap;
  }
  size_t h = sg_hash(p, sg_nblocks_cap);
  while (sg_blocks[h].ptr && sg_blocks[h].ptr != sg_tomb)
    h = (h + 1) & (sg_nblocks_cap - 1);
  sg_blocks[h].ptr = p;
  sg_blocks[h].bytes = bytes;
  ++sg_nblocks;
  return 1;
}

static size_t sg_blocks_remove(const void *p) {
  if (!sg_nblocks_cap) return 0;
  size_t h = sg_hash(p, sg_nblocks_cap);
  for (size_t n = 0; n < sg_nblocks_cap && sg_blocks[h].ptr; ++n) {
    if (sg_blocks[h].ptr == p) {
      size_t b = sg_blocks[h].bytes;
      sg_blocks[h].ptr = sg_tomb;
      --sg_nblocks;
      return b;
    }
    h = (h + 1) & (sg_nblocks_cap - 1);
  }
  return 0;
}

size_t sg_device_cuda_block_size(const void *ptr) {
  pthread_mutex_lock(&sg_blocks_lock);
  size_t b = sg_blocks_remove(ptr);
  pthread_mutex_unlock(&sg_blocks_lock);
  return b;
}

static sg_status cuda_count(int *count) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the sticky error */
    n = 0;                    /* no driver, old driver, or no device */
  }
  *count = n;
  return SG_OK;
}

static sg_status cuda_alloc(int index, size_t bytes, void **ptr) {
  sg_status st = SG_OK;
  SG_CUDA(cudaSetDevice(index));
  SG_CUDA(cudaMalloc(ptr, bytes));
  pthread_mutex_lock(&sg_blocks_lock);
  int ok = sg_blocks_insert(*ptr, bytes);
  pthread_mutex_unlock(&sg_blocks_lock);
  if (!ok) {
    cudaFree(*ptr);
    *ptr = NULL;
    SG_RAISE(SG_ERR_ALLOC, "cuda_alloc: out of host memory for bookkeeping");
  }
fail:
  return st;
}

static sg_status cuda_release(int index, void *ptr) {
  sg_status st = SG_OK;
  SG_CUDA(cudaSetDevice(index));
  SG_CUDA(cudaFree(ptr));
fail:
  return st;
}

static sg_status cuda_copy(sg_device dst_dev, void *dst, sg_device src_dev,
                           const void *src, size_t bytes) {
  sg_status st = SG_OK;
  enum cudaMemcpyKind kind = cudaMemcpyDefault;
  if (dst_dev.kind == SG_DEVICE_HOST && src_dev.kind == SG_DEVICE_CUDA)
    kind = cudaMemcpyDeviceToHost;
  else if (dst_dev.kind == SG_DEVICE_CUDA && src_dev.kind == SG_DEVICE_HOST)
    kind = cudaMemcpyHostToDevice;
  else if (dst_dev.kind == SG_DEVICE_CUDA && src_dev.kind == SG_DEVICE_CUDA)
    kind = cudaMemcpyDeviceToDevice;
  SG_CUDA(cudaMemcpy(dst, src, bytes, kind));
fail:
  return st;
}

static sg_status cuda_set(int index, void *ptr, int value, size_t bytes) {
  sg_status st = SG_OK;
  SG_CUDA(cudaSetDevice(index));
  SG_CUDA(cudaMemset(ptr, value, bytes));
fail:
  return st;
}

static sg_status cuda_stream_create(int index, void **native) {
  sg_status st = SG_OK;
  cudaStream_t s = NULL;
  SG_CUDA(cudaSetDevice(index));
  SG_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  *native = s;
fail:
  return st;
}

static sg_status cuda_stream_destroy(void *native) {
  sg_status st = SG_OK;
  if (native) SG_CUDA(cudaStreamDestroy((cudaStream_t)native));
fail:
  return st;
}

static sg_status cuda_stream_sync(void *native) {
  sg_status st = SG_OK;
  SG_CUDA(cudaStreamSynchronize((cudaStream_t)native));
fail:
  return st;
}

static sg_status cuda_event_create(int index, void **native) {
  sg_status st = SG_OK;
  cudaEvent_t e = NULL;
  SG_CUDA(cudaSetDevice(index));
  SG_CUDA(cudaEventCreate(&e));
  *native = e;
fail:
  return st;
}

static sg_status cuda_event_destroy(void *native) {
  sg_status st = SG_OK;
  if (native) SG_CUDA(cudaEventDestroy((cudaEvent_t)native));
fail:
  return st;
}

static sg_status cuda_event_record(void *event, void *stream) {
  sg_status st = SG_OK;
  SG_CUDA(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
fail:
  return st;
}

static sg_status cuda_stream_wait(void *stream, void *event) {
  sg_status st = SG_OK;
  SG_CUDA(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
fail:
  return st;
}

static sg_status cuda_event_sync(void *event) {
  sg_status st = SG_OK;
  SG_CUDA(cudaEventSynchronize((cudaEvent_t)event));
fail:
  return st;
}

static sg_status cuda_event_elapsed(void *start, void *end, float *ms) {
  sg_status st = SG_OK;
  SG_CUDA(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
fail:
  return st;
}

static sg_status cuda_describe(int index, char *name, size_t n, size_t *bytes) {
  sg_status st = SG_OK;
  struct cudaDeviceProp p;
  SG_CUDA(cudaGetDeviceProperties(&p, index));
  if (n) snprintf(name, n, "%s (sm_%d%d)", p.name, p.major, p.minor);
  *bytes = p.totalGlobalMem;
fail:
  return st;
}

static const sg_device_ops sg_cuda_ops = {
    .name = "cuda",
    .count = cuda_count,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .copy = cuda_copy,
    .set = cuda_set,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_sync = cuda_stream_sync,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait = cuda_stream_wait,
    .event_sync = cuda_event_sync,
    .event_elapsed = cuda_event_elapsed,
    .describe = cuda_describe,
};

const sg_device_ops *sg_device_ops_cuda(void) { return &sg_cuda_ops; }
