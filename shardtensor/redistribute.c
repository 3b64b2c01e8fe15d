/* shardgrid — redistribution of ShardTensors between placements.
 *
 * A redistribution is planned as a list of steps, each changing the
 * placement of one mesh dim and communicating over that dim's group only
 * (the order is documented in sg_shardtensor.h and
 * docs/concepts-placements.md). Each step runs on plain views: the source
 * holds this rank's box under the current placements, the target its box
 * under the next ones. Intermediate blocks are contiguous; the last step
 * writes straight into the caller's target view (e.g. y's interior).
 */
#include <stdlib.h>
#include <string.h>

#include "shardtensor_impl.h"

typedef enum st_kind {
  ST_ALLREDUCE = 0,  /* Partial -> Replicate */
  ST_ALLGATHER,      /* Shard -> Replicate */
  ST_ALLTOALL,       /* Shard(i) -> Shard(j) */
  ST_REDUCE_SCATTER, /* Partial -> Shard(j) */
  ST_SLICE,          /* Replicate -> Shard(j) */
  ST_TO_PARTIAL      /* Replicate -> Partial */
} st_kind;

typedef struct st_step {
  int m;            /* mesh dim */
  st_kind kind;
  sg_placement to;  /* its placement after the step */
} st_step;

#define ST_MAX_STEPS (2 * SG_MESH_MAX_DIMS)

static int is_shard(sg_placement p, int d) {
  return p.kind == SG_PLACEMENT_SHARD && p.dim == d;
}

/* 1 if a and b shard tensor dim d on the same mesh dims below m. */
static int chain_equal_before(const sg_placement *a, const sg_placement *b,
                              int d, int m) {
  for (int k = 0; k < m; ++k)
    if (is_shard(a[k], d) != is_shard(b[k], d)) return 0;
  return 1;
}

/* 1 if no mesh dim after m shards tensor dim d under pl. */
static int inner_free(const sg_placement *pl, int nm, int d, int m) {
  for (int k = m + 1; k < nm; ++k)
    if (is_shard(pl[k], d)) return 0;
  return 1;
}

static sg_status plan(int nm, const sg_placement *src, const sg_placement *dst,
                      st_step *steps, int *nsteps) {
  sg_status st = SG_OK;
  sg_placement cur[SG_MESH_MAX_DIMS];
  int n = 0, stable[SG_MESH_MAX_DIMS];
  for (int m = 0; m < nm; ++m) {
    cur[m] = src[m];
    stable[m] = src[m].kind == SG_PLACEMENT_SHARD &&
                sg_placement_equal(src[m], dst[m]) &&
                chain_equal_before(src, dst, src[m].dim, m);
  }
#define ST_ADD(mm, kk, pp)                                                    \
  do {                                                                        \
    if (n >= ST_MAX_STEPS)                                                    \
      SG_RAISE(SG_ERR_INTERNAL, "redistribute: plan too long");               \
    steps[n].m = (mm);                                                        \
    steps[n].kind = (kk);                                                     \
    steps[n].to = (pp);                                                       \
    cur[mm] = (pp);                                                           \
    ++n;                                                                      \
  } while (0)
  /* 1. Partial -> Replicate (the block keeps its box) */
  for (int m = 0; m < nm; ++m)
    if (cur[m].kind == SG_PLACEMENT_PARTIAL &&
        dst[m].kind == SG_PLACEMENT_REPLICATE)
      ST_ADD(m, ST_ALLREDUCE, sg_replicate());
  /* 2. shards that must change, innermost first: each is then the
   *    innermost shard of its tensor dim */
  for (int m = nm - 1; m >= 0; --m) {
    if (cur[m].kind != SG_PLACEMENT_SHARD || stable[m]) continue;
    if (!inner_free(cur, nm, cur[m].dim, m))
      SG_RAISE(SG_ERR_INTERNAL, "redistribute: mesh dim %d is not the "
               "innermost shard of tensor dim %d", m, cur[m].dim);
    if (dst[m].kind == SG_PLACEMENT_SHARD &&
        chain_equal_before(cur, dst, dst[m].dim, m) &&
        inner_free(cur, nm, dst[m].dim, m))
      ST_ADD(m, ST_ALLTOALL, dst[m]);
    else
      ST_ADD(m, ST_ALLGATHER, sg_replicate());
  }
  /* 3. Partial -> Shard, outermost first */
  for (int m = 0; m < nm; ++m) {
    if (cur[m].kind != SG_PLACEMENT_PARTIAL ||
        dst[m].kind != SG_PLACEMENT_SHARD)
      continue;
    if (chain_equal_before(cur, dst, dst[m].dim, m) &&
        inner_free(cur, nm, dst[m].dim, m))
      ST_ADD(m, ST_REDUCE_SCATTER, dst[m]);
    else
      ST_ADD(m, ST_ALLREDUCE, sg_replicate());
  }
  /* 4. Replicate -> Shard / Partial, outermost first */
  for (int m = 0; m < nm; ++m) {
    if (cur[m].kind != SG_PLACEMENT_REPLICATE) continue;
    if (dst[m].kind == SG_PLACEMENT_SHARD) {
      if (!chain_equal_before(cur, dst, dst[m].dim, m) ||
          !inner_free(cur, nm, dst[m].dim, m))
        SG_RAISE(SG_ERR_INTERNAL, "redistribute: cannot slice mesh dim %d",
                 m);
      ST_ADD(m, ST_SLICE, dst[m]);
    } else if (dst[m].kind == SG_PLACEMENT_PARTIAL) {
      ST_ADD(m, ST_TO_PARTIAL, dst[m]);
    }
  }
#undef ST_ADD
  for (int m = 0; m < nm; ++m)
    if (!sg_placement_equal(cur[m], dst[m]))
      SG_RAISE(SG_ERR_INTERNAL, "redistribute: plan ends at the wrong "
               "placement on mesh dim %d", m);
  *nsteps = n;
fail:
  return st;
}

static int plan_reduces(const st_step *steps, int n) {
  for (int i = 0; i < n; ++i)
    if (steps[i].kind == ST_ALLREDUCE || steps[i].kind == ST_REDUCE_SCATTER)
      return 1;
  return 0;
}

/* ---- executing one step ---------------------------------------------------- */

typedef struct st_ctx {
  sg_mesh_t mesh;
  int nm, sizes[SG_MESH_MAX_DIMS], coords[SG_MESH_MAX_DIMS];
  int nd;
  const int64_t *gshape;
  sg_dtype dt;
  size_t es;
} st_ctx;

/* Box of the member r of this rank's group along mesh dim m. */
static sg_status member_box(const st_ctx *c, const sg_placement *pl, int m,
                            int r, int64_t *o, int64_t *l) {
  int co[SG_MESH_MAX_DIMS];
  memcpy(co, c->coords, sizeof co);
  co[m] = r;
  return sg_shardtensor_box_coords(c->nm, c->sizes, co, c->nd, c->gshape, pl,
                                   o, l);
}

/* 1 if blocks split along tensor dim d, packed in order, lay out exactly
 * like a contiguous block of shape l (every dim before d has length 1). */
static int packs_in_place(int d, const int64_t *l) {
  for (int k = 0; k < d; ++k)
    if (l[k] != 1) return 0;
  return 1;
}

static sg_status host_alloc(size_t bytes, char **p, sg_status *lst) {
  if (*lst != SG_OK || bytes == 0) return *lst;
  *lst = sg_malloc(sg_device_host(), bytes, (void **)p);
  return *lst;
}

static sg_status run_step(const st_ctx *c, const st_step *s,
                          const sg_placement *cpl, const sg_placement *npl,
                          const sg_tensor *src, const int64_t *so,
                          sg_tensor *dst, const int64_t *dof, int agree,
                          sg_status prior) {
  sg_status st = SG_OK, lst = prior;
  const int m = s->m, P = c->sizes[m], q = c->coords[m], nd = c->nd;
  const size_t es = c->es;
  const int64_t nsrc = sg_tensor_numel(src), ndst = sg_tensor_numel(dst);
  const int src_contig = sg_tensor_is_contiguous(src);
  const int dst_contig = sg_tensor_is_contiguous(dst);
  int64_t *cnt = NULL, *rcnt = NULL;
  char *sbuf = NULL, *rbuf = NULL;
  int direct = 0;
  sg_group_t g = NULL;
  int64_t o[SG_TENSOR_MAX_DIMS], l[SG_TENSOR_MAX_DIMS];
  int64_t io[SG_TENSOR_MAX_DIMS], il[SG_TENSOR_MAX_DIMS];

  SG_TRY(sg_mesh_group(c->mesh, 1u << m, &g));
  /* scratch for this step, agreed before any message */
  cnt = calloc((size_t)P, sizeof *cnt);
  rcnt = calloc((size_t)P, sizeof *rcnt);
  if (lst == SG_OK && (!cnt || !rcnt))
    lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                       "redistribute: out of memory");
  switch (s->kind) {
  case ST_ALLREDUCE:
    if (!src_contig) host_alloc((size_t)nsrc * es, &sbuf, &lst);
    if (!dst_contig) host_alloc((size_t)ndst * es, &rbuf, &lst);
    break;
  case ST_ALLGATHER:
    if (!src_contig) host_alloc((size_t)nsrc * es, &sbuf, &lst);
    direct = dst_contig && packs_in_place(cpl[m].dim, dst->shape);
    if (!direct) host_alloc((size_t)ndst * es, &rbuf, &lst);
    break;
  case ST_ALLTOALL: {
    int64_t ts = 0, tr = 0;
    for (int r = 0; lst == SG_OK && r < P; ++r) {
      if ((lst = member_box(c, npl, m, r, o, l)) != SG_OK) break;
      cnt[r] = sg_st_box_isect(nd, so, src->shape, o, l, io, il);
      ts += cnt[r];
      if ((lst = member_box(c, cpl, m, r, o, l)) != SG_OK) break;
      rcnt[r] = sg_st_box_isect(nd, o, l, dof, dst->shape, io, il);
      tr += rcnt[r];
    }
    host_alloc((size_t)ts * es, &sbuf, &lst);
    host_alloc((size_t)tr * es, &rbuf, &lst);
    break;
  }
  case ST_REDUCE_SCATTER:
    direct = src_contig && packs_in_place(npl[m].dim, src->shape);
    if (!direct) host_alloc((size_t)nsrc * es, &sbuf, &lst);
    if (!dst_contig) host_alloc((size_t)ndst * es, &rbuf, &lst);
    break;
  case ST_SLICE:
  case ST_TO_PARTIAL:
    break;
  }
  if (agree) SG_TRY(sg_agree(sg_mesh_comm(c->mesh), lst));
  else SG_TRY(lst);

  switch (s->kind) {
  case ST_ALLREDUCE: {
    if (nsrc == 0) break; /* the whole group has this empty box */
    const void *send = src->data;
    void *recv = dst_contig ? dst->data : rbuf;
    if (!src_contig) {
      sg_tensor b = sg_tensor_wrap(sbuf, c->dt, src->device, nd, src->shape);
      SG_TRY(sg_tensor_copy(&b, src));
      send = sbuf;
    }
    SG_TRY(sg_allreduce(g, send, recv, nsrc, c->dt, SG_REDUCE_SUM));
    if (!dst_contig) {
      sg_tensor b = sg_tensor_wrap(rbuf, c->dt, dst->device, nd, dst->shape);
      SG_TRY(sg_tensor_copy(dst, &b));
    }
    break;
  }
  case ST_ALLGATHER: {
    const void *send = src->data;
    if (!src_contig) {
      sg_tensor b = sg_tensor_wrap(sbuf, c->dt, src->device, nd, src->shape);
      SG_TRY(sg_tensor_copy(&b, src));
      send = sbuf;
    }
    for (int r = 0; r < P; ++r) {
      SG_TRY(member_box(c, cpl, m, r, o, l));
      cnt[r] = sg_st_numel(nd, l);
    }
    SG_TRY(sg_allgatherv(g, send, nsrc, direct ? dst->data : rbuf, cnt, NULL,
                         c->dt));
    if (!direct) {
      int64_t pos = 0;
      for (int r = 0; r < P; ++r) {
        SG_TRY(member_box(c, cpl, m, r, o, l));
        SG_TRY(sg_st_unpack(dst, dof, o, l, rbuf + (size_t)pos * es));
        pos += cnt[r];
      }
    }
    break;
  }
  case ST_ALLTOALL: {
    int64_t pos = 0;
    for (int r = 0; r < P; ++r) {
      SG_TRY(member_box(c, npl, m, r, o, l));
      sg_st_box_isect(nd, so, src->shape, o, l, io, il);
      SG_TRY(sg_st_pack(src, so, io, il, sbuf + (size_t)pos * es));
      pos += cnt[r];
    }
    SG_TRY(sg_alltoallv(g, sbuf, cnt, NULL, rbuf, rcnt, NULL, c->dt));
    pos = 0;
    for (int r = 0; r < P; ++r) {
      SG_TRY(member_box(c, cpl, m, r, o, l));
      sg_st_box_isect(nd, o, l, dof, dst->shape, io, il);
      SG_TRY(sg_st_unpack(dst, dof, io, il, rbuf + (size_t)pos * es));
      pos += rcnt[r];
    }
    break;
  }
  case ST_REDUCE_SCATTER: {
    int64_t pos = 0;
    for (int r = 0; r < P; ++r) {
      SG_TRY(member_box(c, npl, m, r, o, l));
      cnt[r] = sg_st_numel(nd, l);
      if (!direct) SG_TRY(sg_st_pack(src, so, o, l, sbuf + (size_t)pos * es));
      pos += cnt[r];
    }
    if (pos == 0) break; /* the whole group has an empty box */
    SG_TRY(sg_reduce_scatter(g, direct ? src->data : sbuf,
                             dst_contig ? dst->data : rbuf, cnt, c->dt,
                             SG_REDUCE_SUM));
    if (!dst_contig) {
      sg_tensor b = sg_tensor_wrap(rbuf, c->dt, dst->device, nd, dst->shape);
      SG_TRY(sg_tensor_copy(dst, &b));
    }
    break;
  }
  case ST_SLICE: {
    sg_tensor v;
    int64_t rel[SG_TENSOR_MAX_DIMS];
    for (int d = 0; d < nd; ++d) rel[d] = dof[d] - so[d];
    SG_TRY(sg_tensor_view(src, rel, dst->shape, &v));
    SG_TRY(sg_tensor_copy(dst, &v));
    break;
  }
  case ST_TO_PARTIAL:
    if (q == 0) SG_TRY(sg_tensor_copy(dst, src));
    else SG_TRY(sg_tensor_fill(dst, 0.0));
    break;
  }
fail:
  free(cnt);
  free(rcnt);
  sg_free(sg_device_host(), (void **)&sbuf);
  sg_free(sg_device_host(), (void **)&rbuf);
  return st;
}

sg_status sg_st_redistribute_views(sg_mesh_t mesh, sg_dtype dtype, int ndim,
                                   const int64_t *global_shape,
                                   const sg_placement *spl,
                                   const sg_tensor *src,
                                   const sg_placement *dpl, sg_tensor *dst) {
  sg_status st = SG_OK;
  st_ctx c;
  st_step steps[ST_MAX_STEPS];
  int nsteps = 0;
  sg_placement cpl[SG_MESH_MAX_DIMS], npl[SG_MESH_MAX_DIMS];
  int64_t so[SG_TENSOR_MAX_DIMS], sl[SG_TENSOR_MAX_DIMS];
  int64_t no[SG_TENSOR_MAX_DIMS], nl[SG_TENSOR_MAX_DIMS];
  sg_tensor cur, nxt;
  memset(&cur, 0, sizeof cur);
  memset(&nxt, 0, sizeof nxt);

  c.mesh = mesh;
  sg_st_mesh_info(mesh, &c.nm, c.sizes, c.coords);
  c.nd = ndim;
  c.gshape = global_shape;
  c.dt = dtype;
  c.es = sg_dtype_size(dtype);
  SG_TRY(plan(c.nm, spl, dpl, steps, &nsteps));
  if (dtype == SG_DTYPE_BF16 && plan_reduces(steps, nsteps))
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "redistribute: a Partial bf16 tensor "
             "cannot be summed (bf16 is for moves only)");
  if (nsteps == 0) return sg_tensor_copy(dst, src);

  memcpy(cpl, spl, sizeof(sg_placement) * (size_t)c.nm);
  SG_TRY(sg_shardtensor_box_coords(c.nm, c.sizes, c.coords, ndim, global_shape,
                                   cpl, so, sl));
  cur = *src;
  cur.owns = 0;
  for (int i = 0; i < nsteps; ++i) {
    const int last = i == nsteps - 1;
    memcpy(npl, cpl, sizeof(sg_placement) * (size_t)c.nm);
    npl[steps[i].m] = steps[i].to;
    SG_TRY(sg_shardtensor_box_coords(c.nm, c.sizes, c.coords, ndim,
                                     global_shape, npl, no, nl));
    sg_status lst = SG_OK;
    if (last) {
      nxt = *dst;
      nxt.owns = 0;
    } else {
      lst = sg_tensor_alloc(&nxt, dtype, sg_device_host(), ndim, nl);
    }
    const int comm = steps[i].kind != ST_SLICE &&
                     steps[i].kind != ST_TO_PARTIAL;
    /* one agreement per step on its allocations (the same decision on every
     * rank: the plan is the same everywhere) */
    SG_TRY(run_step(&c, &steps[i], cpl, npl, &cur, so, &nxt, no,
                    comm || !last, lst));
    sg_tensor_free(&cur);
    cur = nxt;
    memset(&nxt, 0, sizeof nxt);
    memcpy(cpl, npl, sizeof(sg_placement) * (size_t)c.nm);
    memcpy(so, no, sizeof so);
  }
  cur.owns = 0; /* the caller's dst */
fail:
  sg_tensor_free(&cur);
  sg_tensor_free(&nxt);
  return st;
}

sg_status sg_shardtensor_redistribute(const sg_shardtensor *x,
                                      sg_shardtensor *y) {
  sg_status st = SG_OK, lst;
  const char *fn = "sg_shardtensor_redistribute";
  lst = sg_st_check(fn, x);
  if (lst == SG_OK) lst = sg_st_check(fn, y);
  sg_mesh_t mesh = x && x->mesh ? x->mesh : y && y->mesh ? y->mesh : NULL;
  if (!mesh) return lst; /* nothing to agree over */
  if (lst == SG_OK && x->mesh != y->mesh)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "%s: x and y live on different meshes", fn);
  if (lst == SG_OK && x->local.dtype != y->local.dtype)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "%s: x is %s, y is %s", fn,
                       sg_dtype_name(x->local.dtype),
                       sg_dtype_name(y->local.dtype));
  if (lst == SG_OK && x->ndim != y->ndim)
    lst = sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                       "%s: x has %d dims, y has %d", fn, x->ndim, y->ndim);
  for (int d = 0; lst == SG_OK && d < x->ndim; ++d)
    if (x->global_shape[d] != y->global_shape[d])
      lst = sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                         "%s: global dim %d is %lld in x and %lld in y", fn, d,
                         (long long)x->global_shape[d],
                         (long long)y->global_shape[d]);
  if (lst == SG_OK && x->local.dtype == SG_DTYPE_BF16) {
    st_step steps[ST_MAX_STEPS];
    int n = 0;
    lst = plan(sg_mesh_ndims(mesh), x->placements, y->placements, steps, &n);
    if (lst == SG_OK && plan_reduces(steps, n))
      lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                         "%s: a Partial bf16 tensor cannot be summed (bf16 "
                         "is for moves only)", fn);
  }
  if (lst != SG_OK || !x->mesh || !y->mesh) {
    /* agree over the one mesh we have; the descriptions are not usable */
    st = sg_agree(sg_mesh_comm(mesh), lst != SG_OK ? lst : SG_ERR_INVALID_ARG);
    return st;
  }
  {
    const sg_shardtensor *xs[2] = {x, y};
    SG_TRY(sg_st_agree_descs(mesh, SG_OK, 2, xs));
  }
  {
    sg_tensor in = sg_shardtensor_interior(x), out = sg_shardtensor_interior(y);
    SG_TRY(sg_st_redistribute_views(mesh, x->local.dtype, x->ndim,
                                    x->global_shape, x->placements, &in,
                                    y->placements, &out));
  }
fail:
  return st;
}
