/* shardgrid — ShardTensors: placements, the box rule, create/destroy,
 * scatter and gather. Redistribution lives in redistribute.c. */
#include "sg_shardtensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardtensor_impl.h"

/* ---- placements and the box rule ------------------------------------------ */

sg_status sg_placements_check(int mesh_ndims, int ndim,
                              const sg_placement *placements) {
  sg_status st = SG_OK;
  if (mesh_ndims < 0 || mesh_ndims > SG_MESH_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG, "placements: mesh has %d dims (0..%d)",
             mesh_ndims, SG_MESH_MAX_DIMS);
  if (ndim < 0 || ndim > SG_TENSOR_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG, "placements: tensor ndim %d is outside 0..%d",
             ndim, SG_TENSOR_MAX_DIMS);
  if (mesh_ndims > 0 && !placements)
    SG_RAISE(SG_ERR_INVALID_ARG, "placements: NULL placement list");
  for (int m = 0; m < mesh_ndims; ++m) {
    const sg_placement p = placements[m];
    switch (p.kind) {
    case SG_PLACEMENT_REPLICATE: break;
    case SG_PLACEMENT_SHARD:
      if (p.dim < 0 || p.dim >= ndim)
        SG_RAISE(SG_ERR_INVALID_ARG,
                 "placements: mesh dim %d is Shard(%d) but the tensor has %d "
                 "dims",
                 m, p.dim, ndim);
      break;
    case SG_PLACEMENT_PARTIAL:
      if (p.op != SG_REDUCE_SUM)
        SG_RAISE(SG_ERR_NOT_SUPPORTED,
                 "placements: mesh dim %d is Partial with reduce op %d; only "
                 "Partial(sum) is supported",
                 m, (int)p.op);
      break;
    default:
      SG_RAISE(SG_ERR_INVALID_ARG,
               "placements: mesh dim %d has unknown kind %d", m, (int)p.kind);
    }
  }
fail:
  return st;
}

const char *sg_placements_format(int mesh_ndims, const sg_placement *pl,
                                 char *buf, size_t size) {
  if (!buf || size == 0) return buf;
  size_t used = 0;
  buf[0] = '\0';
#define SG_PUT(...)                                            \
  do {                                                         \
    if (used < size) {                                         \
      int w_ = snprintf(buf + used, size - used, __VA_ARGS__); \
      if (w_ > 0) used += (size_t)w_;                          \
    }                                                          \
  } while (0)
  SG_PUT("(");
  for (int m = 0; pl && m < mesh_ndims && m < SG_MESH_MAX_DIMS; ++m) {
    if (m) SG_PUT(", ");
    switch (pl[m].kind) {
    case SG_PLACEMENT_REPLICATE: SG_PUT("Replicate"); break;
    case SG_PLACEMENT_SHARD: SG_PUT("Shard(%d)", pl[m].dim); break;
    case SG_PLACEMENT_PARTIAL:
      if (pl[m].op == SG_REDUCE_SUM)
        SG_PUT("Partial");
      else
        SG_PUT("Partial(op %d)", (int)pl[m].op);
      break;
    default: SG_PUT("?%d", (int)pl[m].kind);
    }
  }
  SG_PUT(")");
#undef SG_PUT
  return buf;
}

sg_status sg_shardtensor_box_coords(int mesh_ndims, const int *mesh_sizes,
                                    const int *coords, int ndim,
                                    const int64_t *global_shape,
                                    const sg_placement *placements,
                                    int64_t *offset, int64_t *shape) {
  sg_status st = SG_OK;
  SG_TRY(sg_placements_check(mesh_ndims, ndim, placements));
  if ((mesh_ndims > 0 && (!mesh_sizes || !coords)) ||
      (ndim > 0 && (!global_shape || !offset || !shape)))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_shardtensor_box: NULL argument");
  for (int m = 0; m < mesh_ndims; ++m)
    if (mesh_sizes[m] < 1 || coords[m] < 0 || coords[m] >= mesh_sizes[m])
      SG_RAISE(SG_ERR_INVALID_ARG,
               "sg_shardtensor_box: mesh dim %d: coordinate %d of size %d", m,
               coords[m], mesh_sizes[m]);
  for (int d = 0; d < ndim; ++d) {
    if (global_shape[d] < 0)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "sg_shardtensor_box: global shape[%d] = %lld", d,
               (long long)global_shape[d]);
    offset[d] = 0;
    shape[d] = global_shape[d];
  }
  for (int m = 0; m < mesh_ndims; ++m) {
    if (placements[m].kind != SG_PLACEMENT_SHARD) continue;
    const int d = placements[m].dim;
    int64_t o, n;
    sg_split_part(shape[d], mesh_sizes[m], coords[m], &o, &n);
    offset[d] += o;
    shape[d] = n;
  }
fail:
  return st;
}

void sg_st_mesh_info(sg_mesh_t mesh, int *nm, int *sizes, int *coords) {
  *nm = sg_mesh_ndims(mesh);
  for (int m = 0; m < *nm; ++m) sizes[m] = sg_mesh_dim_size(mesh, m);
  if (coords) sg_mesh_coords(mesh, coords);
}

sg_status sg_shardtensor_box(sg_mesh_t mesh, int ndim,
                             const int64_t *global_shape,
                             const sg_placement *placements, int mesh_rank,
                             int64_t *offset, int64_t *shape) {
  sg_status st = SG_OK;
  int nm, sizes[SG_MESH_MAX_DIMS], coords[SG_MESH_MAX_DIMS];
  if (!mesh) SG_RAISE(SG_ERR_INVALID_ARG, "sg_shardtensor_box: NULL mesh");
  sg_st_mesh_info(mesh, &nm, sizes, NULL);
  SG_TRY(sg_mesh_coords_of(mesh, mesh_rank, coords));
  SG_TRY(sg_shardtensor_box_coords(nm, sizes, coords, ndim, global_shape,
                                   placements, offset, shape));
fail:
  return st;
}

sg_status sg_shardtensor_box_table(const sg_shardtensor *x, int64_t *offsets,
                                   int64_t *shapes) {
  sg_status st = SG_OK;
  SG_TRY(sg_st_check("sg_shardtensor_box_table", x));
  if (!offsets || !shapes)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_shardtensor_box_table: NULL table");
  const int p = sg_mesh_size(x->mesh);
  for (int r = 0; r < p; ++r)
    SG_TRY(sg_shardtensor_box(x->mesh, x->ndim, x->global_shape, x->placements,
                              r, offsets + (size_t)r * x->ndim,
                              shapes + (size_t)r * x->ndim));
fail:
  return st;
}

/* ---- create / destroy ------------------------------------------------------ */

sg_status sg_st_check(const char *fn, const sg_shardtensor *x) {
  sg_status st = SG_OK;
  if (!x || !x->mesh)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL or destroyed ShardTensor", fn);
  if (x->ndim < 0 || x->ndim > SG_TENSOR_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: ndim %d", fn, x->ndim);
  if (x->local.ndim != x->ndim || !sg_dtype_valid(x->local.dtype))
    SG_RAISE(SG_ERR_INVALID_ARG,
             "%s: the local block does not match (ndim %d, "
             "local ndim %d)",
             fn, x->ndim, x->local.ndim);
  if (x->local.device.kind != SG_DEVICE_HOST)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: local blocks on %s are not supported",
             fn, sg_device_kind_name(x->local.device.kind));
  {
    const int nm = sg_mesh_ndims(x->mesh);
    SG_TRY(sg_placements_check(nm, x->ndim, x->placements));
    int64_t off[SG_TENSOR_MAX_DIMS], len[SG_TENSOR_MAX_DIMS];
    SG_TRY(sg_shardtensor_box(x->mesh, x->ndim, x->global_shape, x->placements,
                              sg_mesh_rank(x->mesh), off, len));
    for (int d = 0; d < x->ndim; ++d) {
      if (off[d] != x->local_offset[d] || len[d] != x->local_shape[d])
        SG_RAISE(SG_ERR_SHAPE,
                 "%s: local box of dim %d is [%lld, +%lld) but "
                 "the placements give [%lld, +%lld)",
                 fn, d, (long long)x->local_offset[d],
                 (long long)x->local_shape[d], (long long)off[d],
                 (long long)len[d]);
      if (x->halo[d][0] < 0 || x->halo[d][1] < 0 ||
          x->local.shape[d] != len[d] + x->halo[d][0] + x->halo[d][1])
        SG_RAISE(SG_ERR_SHAPE,
                 "%s: local block of dim %d has %lld elements "
                 "for interior %lld and margins %lld, %lld",
                 fn, d, (long long)x->local.shape[d], (long long)len[d],
                 (long long)x->halo[d][0], (long long)x->halo[d][1]);
    }
  }
fail:
  return st;
}

sg_status sg_shardtensor_create(sg_shardtensor *x, sg_mesh_t mesh,
                                sg_dtype dtype, int ndim,
                                const int64_t *global_shape,
                                const sg_placement *placements,
                                const int64_t (*halo)[2]) {
  sg_status st = SG_OK;
  if (!x) SG_RAISE(SG_ERR_INVALID_ARG, "sg_shardtensor_create: NULL result");
  memset(x, 0, sizeof *x);
  if (!mesh) SG_RAISE(SG_ERR_INVALID_ARG, "sg_shardtensor_create: NULL mesh");
  if (!sg_dtype_valid(dtype))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_shardtensor_create: invalid dtype %d",
             (int)dtype);
  if (ndim < 0 || ndim > SG_TENSOR_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_shardtensor_create: ndim %d is outside "
             "0..%d",
             ndim, SG_TENSOR_MAX_DIMS);
  const int nm = sg_mesh_ndims(mesh);
  SG_TRY(sg_shardtensor_box(mesh, ndim, global_shape, placements,
                            sg_mesh_rank(mesh), x->local_offset,
                            x->local_shape));
  int64_t lshape[SG_TENSOR_MAX_DIMS];
  for (int d = 0; d < ndim; ++d) {
    int64_t lo = halo ? halo[d][0] : 0, hi = halo ? halo[d][1] : 0;
    if (lo < 0 || hi < 0)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "sg_shardtensor_create: halo of dim %d is "
               "(%lld, %lld); margins must be >= 0",
               d, (long long)lo, (long long)hi);
    x->halo[d][0] = lo;
    x->halo[d][1] = hi;
    x->global_shape[d] = global_shape[d];
    lshape[d] = x->local_shape[d] + lo + hi;
  }
  for (int m = 0; m < nm; ++m) x->placements[m] = placements[m];
  for (int m = nm; m < SG_MESH_MAX_DIMS; ++m) x->placements[m] = sg_replicate();
  x->ndim = ndim;
  SG_TRY(sg_tensor_alloc(&x->local, dtype, sg_device_host(), ndim, lshape));
  x->mesh = mesh;
  return SG_OK;
fail:
  if (x) memset(x, 0, sizeof *x);
  return st;
}

sg_status sg_shardtensor_destroy(sg_shardtensor *x) {
  if (!x) return SG_OK;
  sg_status st = sg_tensor_free(&x->local);
  memset(x, 0, sizeof *x);
  return st;
}

sg_tensor sg_shardtensor_interior(const sg_shardtensor *x) {
  sg_tensor v;
  int64_t off[SG_TENSOR_MAX_DIMS];
  if (x && x->ndim >= 0 && x->ndim <= SG_TENSOR_MAX_DIMS) {
    for (int d = 0; d < x->ndim; ++d) off[d] = x->halo[d][0];
    if (sg_tensor_view(&x->local, off, x->local_shape, &v) == SG_OK) return v;
    sg_clear_error();
  }
  v = sg_tensor_wrap(NULL, SG_DTYPE_F32, sg_device_host(), -1, NULL);
  return v;
}

/* ---- shared helpers ------------------------------------------------------- */

int64_t sg_st_box_isect(int ndim, const int64_t *ao, const int64_t *al,
                        const int64_t *bo, const int64_t *bl, int64_t *o,
                        int64_t *l) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) {
    int64_t lo = ao[d] > bo[d] ? ao[d] : bo[d];
    int64_t ae = ao[d] + al[d], be = bo[d] + bl[d];
    int64_t hi = ae < be ? ae : be;
    o[d] = lo;
    l[d] = hi > lo ? hi - lo : 0;
    n *= l[d];
  }
  return n;
}

sg_status sg_st_pack(const sg_tensor *t, const int64_t *toff, const int64_t *bo,
                     const int64_t *bl, void *buf) {
  sg_status st = SG_OK;
  if (sg_st_numel(t->ndim, bl) == 0) return SG_OK;
  int64_t rel[SG_TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; ++d) rel[d] = bo[d] - toff[d];
  sg_tensor v, b = sg_tensor_wrap(buf, t->dtype, t->device, t->ndim, bl);
  SG_TRY(sg_tensor_view(t, rel, bl, &v));
  SG_TRY(sg_tensor_copy(&b, &v));
fail:
  return st;
}

sg_status sg_st_unpack(sg_tensor *t, const int64_t *toff, const int64_t *bo,
                       const int64_t *bl, const void *buf) {
  sg_status st = SG_OK;
  if (sg_st_numel(t->ndim, bl) == 0) return SG_OK;
  int64_t rel[SG_TENSOR_MAX_DIMS];
  for (int d = 0; d < t->ndim; ++d) rel[d] = bo[d] - toff[d];
  sg_tensor v,
      b = sg_tensor_wrap((void *)buf, t->dtype, t->device, t->ndim, bl);
  SG_TRY(sg_tensor_view(t, rel, bl, &v));
  SG_TRY(sg_tensor_copy(&v, &b));
fail:
  return st;
}

/* The description of up to two ShardTensors as integers, compared over the
 * mesh with one all-reduce of (v, -v) under MAX. */
#define SG_ST_DESC_LEN (3 + SG_TENSOR_MAX_DIMS + 3 * SG_MESH_MAX_DIMS)
#define SG_ST_DESC_MAX 2

sg_status sg_st_agree_descs(sg_mesh_t mesh, sg_status local, int n,
                            const sg_shardtensor *const *xs) {
  sg_status st = SG_OK;
  /* [lowest failing rank as p - rank (0: none), desc, -desc] */
  int64_t v[1 + 2 * SG_ST_DESC_MAX * SG_ST_DESC_LEN];
  const int len = n * SG_ST_DESC_LEN;
  if (local == SG_OK && (n < 1 || n > SG_ST_DESC_MAX))
    local = sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__,
                         "sg_st_agree_descs: %d tensors", n);
  if (n < 1 || n > SG_ST_DESC_MAX) n = 1;
  const int nm = sg_mesh_ndims(mesh);
  const int p = sg_mesh_size(mesh), me = sg_mesh_rank(mesh);
  memset(v, 0, sizeof v);
  v[0] = local != SG_OK ? p - me : 0;
  for (int i = 0; local == SG_OK && i < n; ++i) {
    int64_t *w = v + 1 + (size_t)i * SG_ST_DESC_LEN;
    const sg_shardtensor *x = xs[i];
    w[0] = x->local.dtype;
    w[1] = x->ndim;
    w[2] = nm;
    for (int d = 0; d < x->ndim; ++d) w[3 + d] = x->global_shape[d];
    for (int m = 0; m < nm; ++m) {
      const sg_placement q = x->placements[m];
      int64_t *u = w + 3 + SG_TENSOR_MAX_DIMS + 3 * m;
      u[0] = q.kind;
      u[1] = q.kind == SG_PLACEMENT_SHARD ? q.dim : -1;
      u[2] = q.kind == SG_PLACEMENT_PARTIAL ? (int64_t)q.op : -1;
    }
  }
  for (int i = 0; i < len; ++i) v[1 + len + i] = -v[1 + i];
  SG_MPI(MPI_Allreduce(MPI_IN_PLACE, v, 1 + 2 * len, MPI_INT64_T, MPI_MAX,
                       sg_mesh_comm(mesh)));
  if (v[0] > 0) /* some rank failed: every rank learns its status and why */
    return sg_agree(sg_mesh_comm(mesh), local);
  for (int i = 0; i < len; ++i)
    if (v[1 + i] != -v[1 + len + i]) {
      const int which = i / SG_ST_DESC_LEN, k = i % SG_ST_DESC_LEN;
      const char *what = k == 0                       ? "dtype"
                         : k <= 2                     ? "ndim"
                         : k < 3 + SG_TENSOR_MAX_DIMS ? "global shape"
                                                      : "placements";
      SG_RAISE(SG_ERR_SHAPE,
               "ShardTensor %d: the %s differs between ranks of "
               "the mesh (every rank must describe the same global tensor)",
               which, what);
    }
fail:
  return st;
}

/* ---- scatter and gather ---------------------------------------------------- */

/* 1 if the rank with these coordinates has coordinate 0 on every non-Shard
 * mesh dim: such ranks hold each box once. */
static int st_is_leader(int nm, const int *coords, const sg_placement *pl) {
  for (int m = 0; m < nm; ++m)
    if (pl[m].kind != SG_PLACEMENT_SHARD && coords[m] != 0) return 0;
  return 1;
}

static sg_status check_global(const char *fn, const sg_shardtensor *x,
                              const sg_tensor *g) {
  sg_status st = SG_OK;
  if (!g) SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL global tensor", fn);
  if (g->dtype != x->local.dtype)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: global tensor is %s, ShardTensor is %s",
             fn, sg_dtype_name(g->dtype), sg_dtype_name(x->local.dtype));
  if (g->ndim != x->ndim)
    SG_RAISE(SG_ERR_SHAPE, "%s: global tensor has %d dims, ShardTensor %d", fn,
             g->ndim, x->ndim);
  for (int d = 0; d < x->ndim; ++d)
    if (g->shape[d] != x->global_shape[d])
      SG_RAISE(SG_ERR_SHAPE,
               "%s: global tensor dim %d has %lld elements, "
               "ShardTensor %lld",
               fn, d, (long long)g->shape[d], (long long)x->global_shape[d]);
  if (g->device.kind != SG_DEVICE_HOST)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: global tensor must be in host memory",
             fn);
  if (sg_tensor_numel(g) > 0 && !g->data)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: global tensor has NULL data", fn);
fail:
  return st;
}

sg_status sg_shardtensor_scatter(sg_shardtensor *x, const sg_tensor *global,
                                 int root) {
  sg_status st = SG_OK, lst = SG_OK;
  char *sendbuf = NULL, *tmp = NULL;
  sg_request_t *reqs = NULL;
  int nreq = 0;
  int64_t *counts = NULL;
  const char *fn = "sg_shardtensor_scatter";

  /* local checks, then agreement (x may be unusable: agree on the raw mesh
   * only when it is there) */
  lst = sg_st_check(fn, x);
  if (!x || !x->mesh) return lst; /* no mesh to agree over */
  const int p = sg_mesh_size(x->mesh), me = sg_mesh_rank(x->mesh);
  if (lst == SG_OK && (root < 0 || root >= p))
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "%s: root %d is not a rank of the mesh (0..%d)", fn,
                       root, p - 1);
  if (lst == SG_OK && me == root) lst = check_global(fn, x, global);

  sg_mesh_t mesh = x->mesh;
  int nm, sizes[SG_MESH_MAX_DIMS], coords[SG_MESH_MAX_DIMS];
  sg_st_mesh_info(mesh, &nm, sizes, coords);
  const int nd = x->ndim;
  const size_t es = sg_dtype_size(x->local.dtype);
  sg_tensor in = sg_shardtensor_interior(x);
  int64_t nloc = 0;
  int contig = 1, leader = 0;
  if (lst == SG_OK) {
    nloc = sg_st_numel(nd, x->local_shape);
    contig = sg_tensor_is_contiguous(&in);
    leader = st_is_leader(nm, coords, x->placements);
  }
  sg_group_t all = NULL;

  /* buffers, before the agreement: root packs every leader's box; ranks
   * with a strided interior receive and broadcast through tmp */
  int64_t total = 0;
  if (lst != SG_OK) {
  } else if (me == root) {
    counts = calloc((size_t)p + 1, sizeof *counts);
    reqs = calloc((size_t)p + 1, sizeof *reqs);
    if (!counts || !reqs)
      lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "%s: out of memory",
                         fn);
    for (int r = 0; lst == SG_OK && r < p; ++r) {
      int c[SG_MESH_MAX_DIMS];
      int64_t o[SG_TENSOR_MAX_DIMS], l[SG_TENSOR_MAX_DIMS];
      if ((lst = sg_mesh_coords_of(mesh, r, c)) != SG_OK) break;
      if (!st_is_leader(nm, c, x->placements) || r == me) continue;
      if ((lst = sg_shardtensor_box_coords(nm, sizes, c, nd, x->global_shape,
                                           x->placements, o, l)) != SG_OK)
        break;
      counts[r] = sg_st_numel(nd, l);
      total += counts[r];
    }
    if (lst == SG_OK)
      lst = sg_malloc(sg_device_host(), (size_t)total * es, (void **)&sendbuf);
  } else {
    reqs = calloc(1, sizeof *reqs);
    if (!reqs)
      lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "%s: out of memory",
                         fn);
  }
  if (lst == SG_OK && !contig)
    lst = sg_malloc(sg_device_host(), (size_t)nloc * es, (void **)&tmp);
  {
    const sg_shardtensor *xs[1] = {x};
    SG_TRY(sg_st_agree_descs(mesh, lst, 1, xs));
  }
  SG_TRY(sg_mesh_group(mesh, (1u << nm) - 1u, &all));

  /* root to leaders, point to point */
  if (me == root) {
    const sg_tensor *g = global;
    int64_t pos = 0;
    for (int r = 0; r < p; ++r) {
      int c[SG_MESH_MAX_DIMS];
      int64_t o[SG_TENSOR_MAX_DIMS], l[SG_TENSOR_MAX_DIMS],
          z[SG_TENSOR_MAX_DIMS] = {0};
      SG_TRY(sg_mesh_coords_of(mesh, r, c));
      if (!st_is_leader(nm, c, x->placements)) continue;
      SG_TRY(sg_shardtensor_box_coords(nm, sizes, c, nd, x->global_shape,
                                       x->placements, o, l));
      if (r == me) {
        sg_tensor v;
        SG_TRY(sg_tensor_view(g, o, l, &v));
        SG_TRY(sg_tensor_copy(&in, &v));
        continue;
      }
      if (counts[r] == 0) continue;
      SG_TRY(sg_st_pack(g, z, o, l, sendbuf + (size_t)pos * es));
      SG_TRY(sg_isend(all, sendbuf + (size_t)pos * es, counts[r],
                      x->local.dtype, r, SG_ST_TAG, &reqs[nreq++]));
      pos += counts[r];
    }
  } else if (leader && nloc > 0) {
    SG_TRY(sg_irecv(all, contig ? in.data : tmp, nloc, x->local.dtype, root,
                    SG_ST_TAG, &reqs[nreq++]));
  }
  SG_TRY(sg_waitall(nreq, reqs));
  nreq = 0;
  if (me != root && leader && !contig && nloc > 0) {
    sg_tensor b = sg_tensor_wrap(tmp, in.dtype, in.device, nd, x->local_shape);
    SG_TRY(sg_tensor_copy(&in, &b));
  }
  if (!leader) SG_TRY(sg_tensor_fill(&in, 0.0));

  /* along each Replicate mesh dim, coordinate 0 broadcasts; after dim m
   * every rank with coordinate 0 on the remaining Replicate dims holds its
   * box (Partial groups off their first rank broadcast zeros) */
  for (int m = 0; m < nm; ++m) {
    if (x->placements[m].kind != SG_PLACEMENT_REPLICATE || sizes[m] == 1)
      continue;
    sg_group_t g;
    SG_TRY(sg_mesh_group(mesh, 1u << m, &g));
    if (nloc == 0) continue; /* the whole group has the same empty box */
    if (contig) {
      SG_TRY(sg_bcast(g, in.data, nloc, x->local.dtype, 0));
    } else {
      sg_tensor b = sg_tensor_wrap(tmp, in.dtype, in.device, nd,
                                   x->local_shape);
      if (coords[m] == 0) SG_TRY(sg_tensor_copy(&b, &in));
      SG_TRY(sg_bcast(g, tmp, nloc, x->local.dtype, 0));
      if (coords[m] != 0) SG_TRY(sg_tensor_copy(&in, &b));
    }
  }
fail:
  if (reqs) {
    for (int i = 0; i < nreq; ++i) sg_wait(&reqs[i]);
    free(reqs);
  }
  free(counts);
  sg_free(sg_device_host(), (void **)&sendbuf);
  sg_free(sg_device_host(), (void **)&tmp);
  return st;
}

sg_status sg_shardtensor_gather(const sg_shardtensor *x, sg_tensor *global,
                                int root) {
  sg_status st = SG_OK, lst = SG_OK;
  char *buf = NULL;
  sg_request_t *reqs = NULL;
  int nreq = 0;
  sg_shardtensor tmpx;
  sg_st_redist R;
  memset(&tmpx, 0, sizeof tmpx);
  memset(&R, 0, sizeof R);
  const char *fn = "sg_shardtensor_gather";

  lst = sg_st_check(fn, x);
  if (!x || !x->mesh) return lst;
  sg_mesh_t mesh = x->mesh;
  const int p = sg_mesh_size(mesh), me = sg_mesh_rank(mesh);
  if (lst == SG_OK && root >= p)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "%s: root %d is not a rank of the mesh (0..%d, or < 0 "
                       "for all)",
                       fn, root, p - 1);
  if (lst == SG_OK && (root < 0 || me == root))
    lst = check_global(fn, x, global);
  int nm, sizes[SG_MESH_MAX_DIMS], coords[SG_MESH_MAX_DIMS];
  sg_st_mesh_info(mesh, &nm, sizes, coords);
  int has_partial = 0;
  for (int m = 0; lst == SG_OK && m < nm; ++m)
    if (x->placements[m].kind == SG_PLACEMENT_PARTIAL) has_partial = 1;
  if (lst == SG_OK && has_partial && x->local.dtype == SG_DTYPE_BF16)
    lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                       "%s: a Partial bf16 tensor cannot be summed", fn);
  const int nd = x->ndim;
  const size_t es = sg_dtype_size(x->local.dtype);
  sg_placement pl[SG_MESH_MAX_DIMS];
  const sg_shardtensor *src = x;
  sg_tensor in;
  memset(&in, 0, sizeof in);
  int64_t nloc = 0, total = 0;
  int leader = 0;

  /* everything local first: the plan and every buffer */
  if (lst == SG_OK && root < 0) {
    /* every rank: redistribute straight into the global tensor */
    for (int m = 0; m < SG_MESH_MAX_DIMS; ++m) pl[m] = sg_replicate();
    in = sg_shardtensor_interior(x);
    lst = sg_st_redist_prepare(&R, mesh, x->local.dtype, nd, x->global_shape,
                               x->placements, &in, pl, global);
  } else if (lst == SG_OK) {
    if (has_partial) { /* sum the Partial dims first (they become Replicate) */
      for (int m = 0; m < nm; ++m)
        pl[m] = x->placements[m].kind == SG_PLACEMENT_PARTIAL
                    ? sg_replicate()
                    : x->placements[m];
      lst = sg_shardtensor_create(&tmpx, mesh, x->local.dtype, nd,
                                  x->global_shape, pl, NULL);
      if (lst == SG_OK) {
        sg_tensor xi = sg_shardtensor_interior(x);
        sg_tensor ti = sg_shardtensor_interior(&tmpx);
        lst = sg_st_redist_prepare(&R, mesh, x->local.dtype, nd,
                                   x->global_shape, x->placements, &xi, pl,
                                   &ti);
      }
      src = &tmpx;
    }
    if (lst == SG_OK) {
      in = sg_shardtensor_interior(src);
      nloc = sg_st_numel(nd, src->local_shape);
      leader = st_is_leader(nm, coords, src->placements);
      if (me == root) {
        for (int r = 0; lst == SG_OK && r < p; ++r) {
          int c[SG_MESH_MAX_DIMS];
          int64_t o[SG_TENSOR_MAX_DIMS], l[SG_TENSOR_MAX_DIMS];
          if ((lst = sg_mesh_coords_of(mesh, r, c)) != SG_OK) break;
          if (r == me || !st_is_leader(nm, c, src->placements)) continue;
          lst = sg_shardtensor_box_coords(nm, sizes, c, nd, src->global_shape,
                                          src->placements, o, l);
          total += sg_st_numel(nd, l);
        }
        reqs = calloc((size_t)p + 1, sizeof *reqs);
      } else {
        if (leader && !sg_tensor_is_contiguous(&in)) total = nloc;
        reqs = calloc(1, sizeof *reqs);
      }
      if (lst == SG_OK && !reqs)
        lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                           "%s: out of memory", fn);
      if (lst == SG_OK)
        lst = sg_malloc(sg_device_host(), (size_t)total * es, (void **)&buf);
    }
  }
  {
    const sg_shardtensor *xs[1] = {x};
    SG_TRY(sg_st_agree_descs(mesh, lst, 1, xs));
  }
  if (root < 0) {
    SG_TRY(sg_st_redist_run(&R, &in, global));
    goto fail; /* done: release */
  }
  if (has_partial) {
    sg_tensor xi = sg_shardtensor_interior(x);
    sg_tensor ti = sg_shardtensor_interior(&tmpx);
    SG_TRY(sg_st_redist_run(&R, &xi, &ti));
  }
  sg_group_t all = NULL;
  SG_TRY(sg_mesh_group(mesh, (1u << nm) - 1u, &all));

  if (me == root) {
    int64_t pos = 0, z[SG_TENSOR_MAX_DIMS] = {0};
    for (int r = 0; r < p; ++r) {
      int c[SG_MESH_MAX_DIMS];
      int64_t o[SG_TENSOR_MAX_DIMS], l[SG_TENSOR_MAX_DIMS];
      SG_TRY(sg_mesh_coords_of(mesh, r, c));
      if (!st_is_leader(nm, c, src->placements)) continue;
      SG_TRY(sg_shardtensor_box_coords(nm, sizes, c, nd, src->global_shape,
                                       src->placements, o, l));
      const int64_t n = sg_st_numel(nd, l);
      if (r == me) {
        sg_tensor v;
        SG_TRY(sg_tensor_view(global, o, l, &v));
        SG_TRY(sg_tensor_copy(&v, &in));
        continue;
      }
      if (n == 0) continue;
      SG_TRY(sg_irecv(all, buf + (size_t)pos * es, n, src->local.dtype, r,
                      SG_ST_TAG, &reqs[nreq++]));
      pos += n;
    }
    SG_TRY(sg_waitall(nreq, reqs));
    nreq = 0;
    pos = 0;
    for (int r = 0; r < p; ++r) {
      int c[SG_MESH_MAX_DIMS];
      int64_t o[SG_TENSOR_MAX_DIMS], l[SG_TENSOR_MAX_DIMS];
      SG_TRY(sg_mesh_coords_of(mesh, r, c));
      if (r == me || !st_is_leader(nm, c, src->placements)) continue;
      SG_TRY(sg_shardtensor_box_coords(nm, sizes, c, nd, src->global_shape,
                                       src->placements, o, l));
      SG_TRY(sg_st_unpack(global, z, o, l, buf + (size_t)pos * es));
      pos += sg_st_numel(nd, l);
    }
  } else if (leader && nloc > 0) {
    const void *send = in.data;
    if (buf) {
      sg_tensor b = sg_tensor_wrap(buf, in.dtype, in.device, nd,
                                   src->local_shape);
      SG_TRY(sg_tensor_copy(&b, &in));
      send = buf;
    }
    SG_TRY(sg_isend(all, send, nloc, src->local.dtype, root, SG_ST_TAG,
                    &reqs[nreq++]));
    SG_TRY(sg_waitall(nreq, reqs));
    nreq = 0;
  }
fail:
  if (reqs) {
    for (int i = 0; i < nreq; ++i) sg_wait(&reqs[i]);
    free(reqs);
  }
  sg_free(sg_device_host(), (void **)&buf);
  sg_st_redist_release(&R);
  sg_shardtensor_destroy(&tmpx);
  return st;
}
