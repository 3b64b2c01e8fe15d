/* shardgrid — test helpers for tensors and sharded variables. */
#include "sg_test_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_device.h"
#include "sg_shardtensor.h"

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double sg_test_rand(uint64_t seed, int64_t i, double lo, double hi) {
  uint64_t z = mix64(mix64(seed + 0x9E3779B97F4A7C15ull) +
                     (uint64_t)i * 0x9E3779B97F4A7C15ull);
  return lo + (hi - lo) * ((double)(z >> 11) / 9007199254740992.0);
}

void sg_test_rand_fill(double *a, int64_t n, uint64_t seed, double lo,
                       double hi) {
  for (int64_t i = 0; i < n; ++i) a[i] = sg_test_rand(seed, i, lo, hi);
}

int64_t sg_test_numel(int nd, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < nd; ++d) n *= shape[d];
  return n;
}

double sg_test_get(const void *p, sg_dtype dt, int64_t i) {
  return dt == SG_DTYPE_F32 ? (double)((const float *)p)[i]
                            : ((const double *)p)[i];
}

void sg_test_set(void *p, sg_dtype dt, int64_t i, double v) {
  if (dt == SG_DTYPE_F32)
    ((float *)p)[i] = (float)v;
  else
    ((double *)p)[i] = v;
}

void sg_test_box_copy(int nd, const int64_t *gshape, const int64_t *off,
                      const int64_t *shape, double *global, void *local,
                      sg_dtype dt, int to_global) {
  const int64_t n = sg_test_numel(nd, shape);
  for (int64_t l = 0; l < n; ++l) {
    int64_t r = l, g = 0, stride = 1;
    for (int d = nd - 1; d >= 0; --d) {
      g += (off[d] + r % shape[d]) * stride;
      r /= shape[d];
      stride *= gshape[d];
    }
    if (to_global)
      global[g] = sg_test_get(local, dt, l);
    else
      sg_test_set(local, dt, l, global[g]);
  }
}

sg_status sg_test_var_box(const sg_var *v, int64_t *off, int64_t *shape) {
  const int nd = v->value.ndim;
  if (!v->mesh) {
    for (int d = 0; d < nd; ++d) off[d] = 0, shape[d] = v->value.shape[d];
    return SG_OK;
  }
  return sg_shardtensor_box(v->mesh, nd, v->global_shape, v->placements,
                            sg_mesh_rank(v->mesh), off, shape);
}

/* ---- guarded buffers ------------------------------------------------------- */

static void sentinel(sg_dtype dt, void *p) {
  if (dt == SG_DTYPE_F32) {
    uint32_t s = 0x7fa0deadu; /* a signalling NaN with a payload */
    memcpy(p, &s, sizeof s);
  } else {
    uint64_t s = 0x7ff4dead0000beefull;
    memcpy(p, &s, sizeof s);
  }
}

sg_status sg_test_buf_alloc(sg_test_buf *b, sg_dtype dt, int64_t n) {
  const size_t es = dt == SG_DTYPE_F32 ? 4 : 8;
  memset(b, 0, sizeof *b);
  if (n < 0)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_test_buf_alloc: n < 0");
  b->base = calloc((size_t)n + 2 * SG_TEST_GUARD, es);
  if (!b->base)
    return sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                        "sg_test_buf_alloc: out of memory");
  b->data = (char *)b->base + SG_TEST_GUARD * es;
  b->n = n;
  b->dtype = dt;
  for (int64_t i = 0; i < SG_TEST_GUARD; ++i) {
    sentinel(dt, (char *)b->base + (size_t)i * es);
    sentinel(dt, (char *)b->data + (size_t)(n + i) * es);
  }
  return SG_OK;
}

int sg_test_buf_guards_ok(const sg_test_buf *b) {
  const size_t es = b->dtype == SG_DTYPE_F32 ? 4 : 8;
  unsigned char s[8];
  if (!b->base) return 1;
  sentinel(b->dtype, s);
  for (int64_t i = 0; i < SG_TEST_GUARD; ++i)
    if (memcmp((char *)b->base + (size_t)i * es, s, es) ||
        memcmp((char *)b->data + (size_t)(b->n + i) * es, s, es))
      return 0;
  return 1;
}

sg_status sg_test_buf_free(sg_test_buf *b) {
  if (!b) return SG_OK;
  free(b->base);
  memset(b, 0, sizeof *b);
  return SG_OK;
}

/* ---- sharded leaves ---------------------------------------------------------- */

sg_status sg_test_var_scatter(sg_var *v, sg_test_buf *val, sg_test_buf *grad,
                              const char *name, sg_dtype dt, sg_mesh_t mesh,
                              const sg_placement *pl, int nd,
                              const int64_t *gshape, const double *global,
                              int requires_grad) {
  sg_status st = SG_OK;
  int64_t off[SG_TENSOR_MAX_DIMS] = {0}, shape[SG_TENSOR_MAX_DIMS];
  memset(v, 0, sizeof *v);
  memset(val, 0, sizeof *val);
  if (grad) memset(grad, 0, sizeof *grad);
  memcpy(shape, gshape, (size_t)nd * sizeof *shape);
  if (mesh)
    SG_TRY(sg_shardtensor_box(mesh, nd, gshape, pl, sg_mesh_rank(mesh), off,
                              shape));
  const int64_t n = sg_test_numel(nd, shape);
  SG_TRY(sg_test_buf_alloc(val, dt, n));
  sg_test_box_copy(nd, gshape, off, shape, (double *)global, val->data, dt, 0);
  SG_TRY(sg_var_init(v, name, dt, nd, shape, val->data, requires_grad));
  if (requires_grad && grad) {
    /* the gradient in caller memory: the tape adds into a leaf's buffer */
    SG_TRY(sg_test_buf_alloc(grad, dt, n));
    v->grad = v->value;
    v->grad.data = grad->data;
    v->grad.owns = 0;
    v->owns_grad = 0;
  }
  if (mesh) SG_TRY(sg_var_set_sharding(v, mesh, pl, gshape));
fail:
  return st;
}

sg_status sg_test_var_gather(const sg_var *v, int grad, double *global) {
  sg_status st = SG_OK;
  sg_tensor g;
  memset(&g, 0, sizeof g);
  const int nd = v->value.ndim;
  const int64_t *gs = sg_var_global_shape(v);
  const int64_t n = sg_test_numel(nd, gs);
  if (!v->mesh) {
    const sg_tensor *t = grad ? &v->grad : &v->value;
    if (!t->data)
      SG_RAISE(SG_ERR_INVALID_ARG, "sg_test_var_gather: '%s' has no data",
               v->name);
    for (int64_t i = 0; i < n; ++i)
      global[i] = sg_test_get(t->data, t->dtype, i);
    return SG_OK;
  }
  SG_TRY(sg_tensor_alloc(&g, v->value.dtype, sg_device_host(), nd, gs));
  SG_TRY(sg_var_gather(v, grad, &g, -1));
  for (int64_t i = 0; i < n; ++i) global[i] = sg_test_get(g.data, g.dtype, i);
fail:
  sg_tensor_free(&g);
  return st;
}

/* ---- comparisons --------------------------------------------------------------- */

double sg_test_rel_tol(sg_dtype dt) {
  return dt == SG_DTYPE_F32 ? 1e-5 : 1e-11;
}

int64_t sg_test_cmp_ref(const void *a, sg_dtype dt, const double *ref,
                        int64_t n, double rel, char *msg, size_t msg_size) {
  double scale = 0.0;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i)
    if (isfinite(ref[i]) && fabs(ref[i]) > scale) scale = fabs(ref[i]);
  for (int64_t i = 0; i < n; ++i) {
    const double x = sg_test_get(a, dt, i), y = ref[i];
    const int ok = isfinite(x) && isfinite(y) &&
                   fabs(x - y) <= rel * (fabs(y) + scale);
    if (!ok && bad++ == 0) first = i;
  }
  if (msg && msg_size) {
    if (bad)
      snprintf(
          msg, msg_size,
          "%lld of %lld differ; first at %lld: %.17g vs reference %.17g (rel %.1g, scale %.3g)",
          (long long)bad, (long long)n, (long long)first,
          sg_test_get(a, dt, first), ref[first], rel, scale);
    else
      msg[0] = '\0';
  }
  return bad;
}

void sg_test_nchw_placements(sg_mesh_t mesh, sg_placement *pl) {
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m) {
    const char *n = sg_mesh_dim_name(mesh, m);
    pl[m] = !strcmp(n, "dp") || !strcmp(n, "ep") ? sg_shard(0)
            : !strcmp(n, "c")                    ? sg_shard(1)
            : !strcmp(n, "h")                    ? sg_shard(2)
            : !strcmp(n, "w")                    ? sg_shard(3)
                                                 : sg_replicate();
  }
}
