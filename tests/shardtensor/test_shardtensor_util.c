/* Helpers shared by the ShardTensor and redistribute tests. */
#include "test_shardtensor_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int st_mesh_specs(int p, int with3, char specs[][64]) {
  int n = 0;
  snprintf(specs[n++], 64, "a=%d", p);
  /* 2-D: every factorisation k x p/k with k < p (p x 1 only for p == 1) */
  for (int k = 1; k <= p && n < ST_MAX_SPECS; ++k)
    if (p % k == 0 && (k < p || p == 1))
      snprintf(specs[n++], 64, "a=%d,b=%d", k, p / k);
  if (with3 && p % 2 == 0 && n < ST_MAX_SPECS)
    snprintf(specs[n++], 64, "a=2,b=1,c=%d", p / 2);
  return n;
}

double st_value(int64_t i, sg_dtype dt, uint64_t seed) {
  uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull +
               seed * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 32;
  if (dt == SG_DTYPE_BF16) return (double)((int64_t)(h % 201) - 100);
  return (double)((int64_t)(h % 2001) - 1000);
}

void st_store(void *p, sg_dtype dt, int64_t i, double v) {
  switch (dt) {
  case SG_DTYPE_F32: ((float *)p)[i] = (float)v; break;
  case SG_DTYPE_F64: ((double *)p)[i] = v; break;
  case SG_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case SG_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)v; break;
  default: ((sg_bf16 *)p)[i] = sg_bf16_from_f32((float)v);
  }
}

double st_load(const void *p, sg_dtype dt, int64_t i) {
  switch (dt) {
  case SG_DTYPE_F32: return ((const float *)p)[i];
  case SG_DTYPE_F64: return ((const double *)p)[i];
  case SG_DTYPE_I32: return ((const int32_t *)p)[i];
  case SG_DTYPE_I64: return (double)((const int64_t *)p)[i];
  default: return sg_bf16_to_f32(((const sg_bf16 *)p)[i]);
  }
}

sg_status st_make_global(sg_tensor *g, sg_dtype dt, int ndim,
                         const int64_t *shape, uint64_t seed) {
  sg_status st = sg_tensor_alloc(g, dt, sg_device_host(), ndim, shape);
  if (st != SG_OK) return st;
  for (int64_t i = 0; i < sg_tensor_numel(g); ++i)
    st_store(g->data, dt, i, st_value(i, dt, seed));
  return SG_OK;
}

void st_partial_index(sg_mesh_t mesh, const sg_placement *pl, int *k, int *K) {
  *k = 0;
  *K = 1;
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m)
    if (pl[m].kind == SG_PLACEMENT_PARTIAL) {
      *k = *k * sg_mesh_dim_size(mesh, m) + sg_mesh_coord(mesh, m);
      *K *= sg_mesh_dim_size(mesh, m);
    }
}

/* position of local element idx (interior coordinates) */
static int64_t local_off(const sg_shardtensor *x, const int64_t *idx) {
  int64_t o = 0;
  for (int d = 0; d < x->ndim; ++d)
    o += (idx[d] + x->halo[d][0]) * x->local.strides[d];
  return o;
}

static int64_t global_lin(const sg_shardtensor *x, const int64_t *idx) {
  int64_t o = 0;
  for (int d = 0; d < x->ndim; ++d)
    o = o * x->global_shape[d] + x->local_offset[d] + idx[d];
  return o;
}

static int next_index(int nd, const int64_t *shape, int64_t *idx) {
  for (int d = nd - 1; d >= 0; --d) {
    if (++idx[d] < shape[d]) return 1;
    idx[d] = 0;
  }
  return 0;
}

static int64_t st_numel_local(const sg_shardtensor *x) {
  int64_t n = 1;
  for (int d = 0; d < x->ndim; ++d) n *= x->local_shape[d];
  return n;
}

static double summand_h(int64_t g, int k) {
  return (double)((g * 31 + k * 17) % 7 - 3);
}

sg_status st_fill_summands(sg_shardtensor *x, const sg_tensor *G) {
  int k, K;
  st_partial_index(x->mesh, x->placements, &k, &K);
  const sg_dtype dt = x->local.dtype;
  if (st_numel_local(x) == 0) return SG_OK;
  int64_t idx[SG_TENSOR_MAX_DIMS] = {0};
  do {
    const int64_t g = global_lin(x, idx);
    double v;
    if (k > 0) {
      v = summand_h(g, k);
    } else {
      v = st_load(G->data, dt, g);
      for (int j = 1; j < K; ++j) v -= summand_h(g, j);
    }
    st_store(x->local.data, dt, local_off(x, idx), v);
  } while (next_index(x->ndim, x->local_shape, idx));
  return SG_OK;
}

sg_status st_fill_local(sg_shardtensor *x, double v) {
  return sg_tensor_fill(&x->local, v);
}

int64_t st_margin_changed(const sg_shardtensor *x, double v) {
  const sg_dtype dt = x->local.dtype;
  int64_t bad = 0;
  if (sg_tensor_numel(&x->local) == 0) return 0;
  int64_t idx[SG_TENSOR_MAX_DIMS] = {0};
  const double want = v; /* callers use values exact in every dtype */
  do {
    int in = 1;
    int64_t o = 0;
    for (int d = 0; d < x->ndim; ++d) {
      in &= idx[d] >= x->halo[d][0] &&
            idx[d] < x->halo[d][0] + x->local_shape[d];
      o += idx[d] * x->local.strides[d];
    }
    if (!in && st_load(x->local.data, dt, o) != want) ++bad;
  } while (next_index(x->ndim, x->local.shape, idx));
  return bad;
}

int64_t st_interior_mismatch(const sg_shardtensor *x, const sg_tensor *G,
                             int zero_if_nonfirst) {
  int k = 0, K = 1;
  if (zero_if_nonfirst) st_partial_index(x->mesh, x->placements, &k, &K);
  const sg_dtype dt = x->local.dtype;
  const size_t es = sg_dtype_size(dt);
  int64_t bad = 0;
  if (st_numel_local(x) == 0) return 0;
  unsigned char zero[8] = {0};
  int64_t idx[SG_TENSOR_MAX_DIMS] = {0};
  do {
    const unsigned char *have = (const unsigned char *)x->local.data +
                                local_off(x, idx) * (int64_t)es;
    const unsigned char *want = k > 0 ? zero
                                      : (const unsigned char *)G->data +
                                            global_lin(x, idx) * (int64_t)es;
    if (memcmp(have, want, es)) ++bad;
  } while (next_index(x->ndim, x->local_shape, idx));
  return bad;
}

int st_placement_combos(int nm, int nshard,
                        sg_placement (*out)[SG_MESH_MAX_DIMS], int max) {
  const int opts = nshard + 2;
  int total = 1;
  for (int m = 0; m < nm; ++m) total *= opts;
  if (total > max) total = max;
  for (int c = 0; c < total; ++c) {
    int q = c;
    for (int m = nm - 1; m >= 0; --m) {
      int o = q % opts;
      q /= opts;
      out[c][m] = o < nshard    ? sg_shard(o)
                  : o == nshard ? sg_replicate()
                                : sg_partial();
    }
  }
  return total;
}
