/* shardgrid — local tensors: allocation, views, strided copy (pack/unpack)
 * and fill. */
#include "sg_tensor.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "tensor_impl.h"

/* This thread's share [r0, r1) of rows (static, contiguous). */
static void sg_thread_rows(int64_t rows, int64_t *r0, int64_t *r1) {
#ifdef _OPENMP
  const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
#else
  const int64_t nt = 1, t = 0;
#endif
  *r0 = rows * t / nt;
  *r1 = rows * (t + 1) / nt;
}

/* Spread rows over threads when a copy or fill moves at least this many
 * bytes (below it the fork costs more than it saves). */
#define SG_TENSOR_OMP_BYTES ((int64_t)1 << 18)

static sg_status check_ndim(const char *fn, int ndim) {
  sg_status st = SG_OK;
  if (ndim < 0 || ndim > SG_TENSOR_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: ndim %d is outside 0..%d", fn, ndim,
             SG_TENSOR_MAX_DIMS);
fail:
  return st;
}

static sg_status check_tensor(const char *fn, const sg_tensor *t) {
  sg_status st = SG_OK;
  if (!t) SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL tensor", fn);
  SG_TRY(check_ndim(fn, t->ndim));
  if (!sg_dtype_valid(t->dtype))
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: invalid dtype %d", fn, (int)t->dtype);
  for (int d = 0; d < t->ndim; ++d)
    if (t->shape[d] < 0 || t->strides[d] < 0)
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: dim %d has shape %lld, stride %lld", fn,
               d, (long long)t->shape[d], (long long)t->strides[d]);
  if (sg_tensor_numel(t) > 0 && !t->data)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL data for %lld elements", fn,
             (long long)sg_tensor_numel(t));
fail:
  return st;
}

static void contiguous_strides(int ndim, const int64_t *shape,
                               int64_t *strides) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d] > 0 ? shape[d] : 1;
  }
}

sg_status sg_tensor_alloc(sg_tensor *t, sg_dtype dtype, sg_device device,
                          int ndim, const int64_t *shape) {
  sg_status st = SG_OK;
  if (!t) SG_RAISE(SG_ERR_INVALID_ARG, "sg_tensor_alloc: NULL tensor");
  memset(t, 0, sizeof *t);
  SG_TRY(check_ndim("sg_tensor_alloc", ndim));
  if (!sg_dtype_valid(dtype))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_tensor_alloc: invalid dtype %d",
             (int)dtype);
  if (ndim > 0 && !shape)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_tensor_alloc: NULL shape");
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] < 0)
      SG_RAISE(SG_ERR_INVALID_ARG, "sg_tensor_alloc: shape[%d] = %lld < 0", d,
               (long long)shape[d]);
    if (shape[d] > 0 && n > INT64_MAX / shape[d])
      SG_RAISE(SG_ERR_INVALID_ARG, "sg_tensor_alloc: element count overflows");
    n *= shape[d];
  }
  size_t es = sg_dtype_size(dtype);
  if ((uint64_t)n > SIZE_MAX / es)
    SG_RAISE(SG_ERR_ALLOC,
             "sg_tensor_alloc: %lld elements do not fit in memory",
             (long long)n);
  t->dtype = dtype;
  t->device = device;
  t->ndim = ndim;
  for (int d = 0; d < ndim; ++d) t->shape[d] = shape[d];
  contiguous_strides(ndim, t->shape, t->strides);
  SG_TRY(sg_calloc(device, (size_t)n * es, &t->data));
  t->owns = t->data != NULL;
  return SG_OK;
fail:
  if (t) memset(t, 0, sizeof *t);
  return st;
}

sg_status sg_tensor_free(sg_tensor *t) {
  sg_status st = SG_OK;
  if (!t) return SG_OK;
  if (t->owns && t->data) st = sg_free(t->device, &t->data);
  memset(t, 0, sizeof *t);
  return st;
}

sg_status sg_tensor_view(const sg_tensor *t, const int64_t *offset,
                         const int64_t *shape, sg_tensor *view) {
  sg_status st = SG_OK;
  if (!view) SG_RAISE(SG_ERR_INVALID_ARG, "sg_tensor_view: NULL view");
  SG_TRY(check_tensor("sg_tensor_view", t));
  if (t->ndim > 0 && (!offset || !shape))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_tensor_view: NULL offset or shape");
  int64_t lin = 0, n = 1;
  for (int d = 0; d < t->ndim; ++d) {
    if (offset[d] < 0 || shape[d] < 0 || offset[d] > t->shape[d] ||
        shape[d] > t->shape[d] - offset[d])
      SG_RAISE(
          SG_ERR_SHAPE,
          "sg_tensor_view: box [%lld, %lld) of dim %d is outside [0, %lld)",
          (long long)offset[d], (long long)(offset[d] + shape[d]), d,
          (long long)t->shape[d]);
    lin += offset[d] * t->strides[d];
    n *= shape[d];
  }
  sg_tensor v = *t;
  v.owns = 0;
  for (int d = 0; d < t->ndim; ++d) v.shape[d] = shape[d];
  /* an empty view keeps the base pointer (no arithmetic past the end) */
  if (n > 0) v.data = (char *)t->data + (size_t)lin * sg_dtype_size(t->dtype);
  *view = v;
fail:
  return st;
}

sg_tensor sg_tensor_wrap(void *data, sg_dtype dtype, sg_device device, int ndim,
                         const int64_t *shape) {
  sg_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  t.device = device;
  if (ndim < 0 || ndim > SG_TENSOR_MAX_DIMS || (ndim > 0 && !shape)) {
    t.ndim = -1;
    return t;
  }
  t.ndim = ndim;
  for (int d = 0; d < ndim; ++d) t.shape[d] = shape[d];
  contiguous_strides(ndim, t.shape, t.strides);
  t.data = data;
  return t;
}

int64_t sg_tensor_numel(const sg_tensor *t) {
  if (!t || t->ndim < 0) return 0;
  int64_t n = 1;
  for (int d = 0; d < t->ndim && d < SG_TENSOR_MAX_DIMS; ++d) n *= t->shape[d];
  return n;
}

size_t sg_tensor_nbytes(const sg_tensor *t) {
  if (!t) return 0;
  return (size_t)sg_tensor_numel(t) * sg_dtype_size(t->dtype);
}

int sg_tensor_is_contiguous(const sg_tensor *t) {
  if (!t || t->ndim < 0 || t->ndim > SG_TENSOR_MAX_DIMS) return 0;
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] != 1 && t->strides[d] != s) return 0;
    s *= t->shape[d];
  }
  return 1;
}

int sg_tensor_same_shape(const sg_tensor *a, const sg_tensor *b) {
  if (!a || !b || a->ndim != b->ndim || a->ndim < 0) return 0;
  for (int d = 0; d < a->ndim && d < SG_TENSOR_MAX_DIMS; ++d)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

/* ---- strided copy and fill ------------------------------------------------
 * Both work on a layout with merged dims: size-1 dims dropped, and dim d
 * merged into d+1 when every operand steps over d exactly as far as over the
 * whole of d+1. What remains is rows (the outer dims) of one innermost run. */

void sg_layout_merge(int ndim, const int64_t *shape, int nop,
                     const int64_t *const *strides, sg_layout *out) {
  out->nd = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    int k = out->nd;
    if (k > 0) {
      int merge = 1;
      for (int o = 0; o < nop; ++o)
        if (out->stride[o][k - 1] != strides[o][d] * shape[d]) merge = 0;
      if (merge) {
        out->shape[k - 1] *= shape[d];
        for (int o = 0; o < nop; ++o) out->stride[o][k - 1] = strides[o][d];
        continue;
      }
    }
    out->shape[k] = shape[d];
    for (int o = 0; o < nop; ++o) out->stride[o][k] = strides[o][d];
    out->nd = k + 1;
  }
  if (out->nd == 0) { /* a single element */
    out->nd = 1;
    out->shape[0] = 1;
    for (int o = 0; o < nop; ++o) out->stride[o][0] = 1;
  }
}

static void copy_elems(char *dst, int64_t ds, const char *src, int64_t ss,
                       int64_t n, size_t es) {
  switch (es) {
  case 2:
    for (int64_t i = 0; i < n; ++i)
      ((uint16_t *)dst)[i * ds] = ((const uint16_t *)src)[i * ss];
    break;
  case 4:
    for (int64_t i = 0; i < n; ++i)
      ((uint32_t *)dst)[i * ds] = ((const uint32_t *)src)[i * ss];
    break;
  case 8:
    for (int64_t i = 0; i < n; ++i)
      ((uint64_t *)dst)[i * ds] = ((const uint64_t *)src)[i * ss];
    break;
  default:
    for (int64_t i = 0; i < n; ++i)
      memcpy(dst + (size_t)(i * ds) * es, src + (size_t)(i * ss) * es, es);
  }
}

sg_status sg_tensor_copy(sg_tensor *dst, const sg_tensor *src) {
  sg_status st = SG_OK;
  SG_TRY(check_tensor("sg_tensor_copy (dst)", dst));
  SG_TRY(check_tensor("sg_tensor_copy (src)", src));
  if (dst->dtype != src->dtype)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_tensor_copy: dtype %s to %s",
             sg_dtype_name(src->dtype), sg_dtype_name(dst->dtype));
  if (!sg_tensor_same_shape(dst, src))
    SG_RAISE(SG_ERR_SHAPE, "sg_tensor_copy: shapes differ (ndim %d and %d)",
             dst->ndim, src->ndim);
  const int64_t n = sg_tensor_numel(src);
  if (n == 0 || dst->data == src->data) return SG_OK;
  const size_t es = sg_dtype_size(src->dtype);
  const int both_contig = sg_tensor_is_contiguous(dst) &&
                          sg_tensor_is_contiguous(src);
  if (both_contig)
    return sg_memcpy(dst->device, dst->data, src->device, src->data,
                     (size_t)n * es);
  if (dst->device.kind != SG_DEVICE_HOST || src->device.kind != SG_DEVICE_HOST)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "sg_tensor_copy: strided copies are host only (%s to %s)",
             sg_device_kind_name(src->device.kind),
             sg_device_kind_name(dst->device.kind));
  const int64_t *strides[2] = {dst->strides, src->strides};
  sg_layout L;
  sg_layout_merge(src->ndim, src->shape, 2, strides, &L);
  const int in = L.nd - 1;
  const int64_t run = L.shape[in];
  const int64_t rows = n / run;
  const int unit = L.stride[0][in] == 1 && L.stride[1][in] == 1;
  char *const d0 = (char *)dst->data;
  const char *const s0 = (const char *)src->data;
  const int64_t sd = L.stride[0][in], ss = L.stride[1][in];
  const int par = (int64_t)n * (int64_t)es >= SG_TENSOR_OMP_BYTES && rows > 1;
#pragma omp parallel if (par)
  {
    int64_t r0, r1;
    sg_thread_rows(rows, &r0, &r1);
    sg_rows_iter it;
    sg_rows_iter_init(&it, &L, 2, r0);
    for (int64_t r = r0; r < r1; ++r) {
      char *dp = d0 + (size_t)it.off[0] * es;
      const char *sp = s0 + (size_t)it.off[1] * es;
      if (unit)
        memcpy(dp, sp, (size_t)run * es);
      else
        copy_elems(dp, sd, sp, ss, run, es);
      sg_rows_iter_next(&it, &L, 2);
    }
  }
fail:
  return st;
}

sg_status sg_tensor_fill(sg_tensor *t, double value) {
  sg_status st = SG_OK;
  SG_TRY(check_tensor("sg_tensor_fill", t));
  if (t->device.kind != SG_DEVICE_HOST)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "sg_tensor_fill: host tensors only (%s)",
             sg_device_kind_name(t->device.kind));
  const int64_t n = sg_tensor_numel(t);
  if (n == 0) return SG_OK;
  const size_t es = sg_dtype_size(t->dtype);
  unsigned char pat[8];
  switch (t->dtype) {
  case SG_DTYPE_F32: {
    float v = (float)value;
    memcpy(pat, &v, 4);
    break;
  }
  case SG_DTYPE_F64: memcpy(pat, &value, 8); break;
  case SG_DTYPE_I32: {
    int32_t v = (int32_t)value;
    memcpy(pat, &v, 4);
    break;
  }
  case SG_DTYPE_I64: {
    int64_t v = (int64_t)value;
    memcpy(pat, &v, 8);
    break;
  }
  case SG_DTYPE_BF16: {
    sg_bf16 v = sg_bf16_from_f32((float)value);
    memcpy(pat, &v.bits, 2);
    break;
  }
  default: SG_RAISE(SG_ERR_INVALID_ARG, "sg_tensor_fill: invalid dtype");
  }
  const int64_t *strides[1] = {t->strides};
  sg_layout L;
  sg_layout_merge(t->ndim, t->shape, 1, strides, &L);
  const int in = L.nd - 1;
  const int64_t run = L.shape[in], rows = n / run, s_in = L.stride[0][in];
  char *const base = (char *)t->data;
  const int par = (int64_t)n * (int64_t)es >= SG_TENSOR_OMP_BYTES && rows > 1;
#pragma omp parallel if (par)
  {
    int64_t r0, r1;
    sg_thread_rows(rows, &r0, &r1);
    sg_rows_iter it;
    sg_rows_iter_init(&it, &L, 1, r0);
    for (int64_t r = r0; r < r1; ++r) {
      char *p = base + (size_t)it.off[0] * es;
      switch (es) {
      case 2: {
        uint16_t v;
        memcpy(&v, pat, 2);
        for (int64_t i = 0; i < run; ++i) ((uint16_t *)p)[i * s_in] = v;
        break;
      }
      case 4: {
        uint32_t v;
        memcpy(&v, pat, 4);
        for (int64_t i = 0; i < run; ++i) ((uint32_t *)p)[i * s_in] = v;
        break;
      }
      default: {
        uint64_t v;
        memcpy(&v, pat, 8);
        for (int64_t i = 0; i < run; ++i) ((uint64_t *)p)[i * s_in] = v;
      }
      }
      sg_rows_iter_next(&it, &L, 1);
    }
  }
fail:
  return st;
}
