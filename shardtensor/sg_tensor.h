/* shardgrid — local tensors.
 *
 * A tensor is a plain struct: dtype, device, up to SG_TENSOR_MAX_DIMS dims,
 * shape and strides in elements (row-major when made by sg_tensor_alloc), and
 * a data pointer that the tensor may own. Views share data and never own it.
 * ndim may be 0 (a scalar: one element). Owned data comes from sg_malloc, so
 * it is accounted per device. None of these functions is collective.
 */
#ifndef SG_TENSOR_H
#define SG_TENSOR_H

#include <stdint.h>

#include "sg_device.h"
#include "sg_dtype.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_TENSOR_MAX_DIMS 5

typedef struct sg_tensor {
  sg_dtype dtype;
  sg_device device;
  int ndim;
  int64_t shape[SG_TENSOR_MAX_DIMS];   /* elements per dim */
  int64_t strides[SG_TENSOR_MAX_DIMS]; /* elements between neighbours */
  void *data;                          /* first element */
  int owns;                            /* 1: sg_tensor_free releases data */
} sg_tensor;

/* Allocate a zero-filled, contiguous row-major tensor. */
sg_status sg_tensor_alloc(sg_tensor *t, sg_dtype dtype, sg_device device,
                          int ndim, const int64_t *shape);
/* Release owned data and reset the struct; NULL and empty tensors are fine
 * (a no-op, SG_OK). The status of freeing the data (the struct is reset
 * all the same). */
sg_status sg_tensor_free(sg_tensor *t);
/* A non-owning view of a box [offset, offset + shape) of t. */
sg_status sg_tensor_view(const sg_tensor *t, const int64_t *offset,
                         const int64_t *shape, sg_tensor *view);
/* Wrap caller memory (contiguous row-major); never owned. An invalid ndim
 * (< 0 or > SG_TENSOR_MAX_DIMS) gives a tensor with ndim -1 that every
 * other function rejects. */
sg_tensor sg_tensor_wrap(void *data, sg_dtype dtype, sg_device device, int ndim,
                         const int64_t *shape);

int64_t sg_tensor_numel(const sg_tensor *t);
size_t sg_tensor_nbytes(const sg_tensor *t);
int sg_tensor_is_contiguous(const sg_tensor *t);
/* 1 if both have the same ndim and shape. */
int sg_tensor_same_shape(const sg_tensor *a, const sg_tensor *b);

/* Copy src into dst (same shape and dtype, any strides, host memory; two
 * contiguous tensors may live on any devices). Strided copies merge
 * adjacent dims, copy contiguous innermost runs with memcpy and spread rows
 * over OpenMP threads: this is the pack/unpack used by communication
 * (view a box, copy it to or from a wrapped contiguous buffer). The two
 * tensors must not overlap. */
sg_status sg_tensor_copy(sg_tensor *dst, const sg_tensor *src);
/* Set every element to a value (f32/f64/i32/i64; bf16 rounds the value;
 * integers truncate toward zero). Host memory, any strides. */
sg_status sg_tensor_fill(sg_tensor *t, double value);

#ifdef __cplusplus
}
#endif
#endif /* SG_TENSOR_H */
