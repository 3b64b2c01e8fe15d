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

#define ST_MAX_STEPS SG_ST_MAX_STEPS

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
                      sg_st_redist *R) {
  sg_status st = SG_OK;
  sg_placement cur[SG_MESH_MAX_DIMS];
  int n = 0, stable[SG_MESH_MAX_DIMS];
  for (int m = 0; m < nm; ++m) {
    cur[m] = src[m];
    stable[m] = src[m].kind == SG_PLACEMENT_SHARD &&
                sg_placement_equal(src[m], dst[m]) &&
                chain_equal_before(src, dst, src[m].dim, m);
  }
#define ST_ADD(mm, kk, pp)                                      \
  do {                                                          \
    if (n >= ST_MAX_STEPS)                                      \
      SG_RAISE(SG_ERR_INTERNAL, "redistribute: plan too long"); \
    R->steps[n].m = (mm);                                       \
    R->steps[n].kind = (kk);                                    \
    R->steps[n].to = (pp);                                      \
    cur[mm] = (pp);                                             \
    ++n;                                                        \
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
      SG_RAISE(SG_ERR_INTERNAL,
               "redistribute: mesh dim %d is not the "
               "innermost shard of tensor dim %d",
               m, cur[m].dim);
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
        SG_RAISE(SG_ERR_INTERNAL, "redistribute: cannot slice mesh dim %d", m);
      ST_ADD(m, ST_SLICE, dst[m]);
    } else if (dst[m].kind == SG_PLACEMENT_PARTIAL) {
      ST_ADD(m, ST_TO_PARTIAL, dst[m]);
    }
  }
#undef ST_ADD
  for (int m = 0; m < nm; ++m)
    if (!sg_placement_equal(cur[m], dst[m]))
      SG_RAISE(SG_ERR_INTERNAL,
               "redistribute: plan ends at the wrong "
               "placement on mesh dim %d",
               m);
  R->nsteps = n;
fail:
  return st;
}

static int plan_reduces(const sg_st_redist *R) {
  for (int i = 0; i < R->nsteps; ++i)
    if (R->steps[i].kind == ST_ALLREDUCE ||
        R->steps[i].kind == ST_REDUCE_SCATTER)
      return 1;
  return 0;
}

/* ---- one step ---------------------------------------------------------------
 * A step moves src (box so, shape src->shape) into dst (box dof). Its
 * scratch needs come from step_needs, which prepare uses to size the
 * workspace and run_step to decide how to move. */

/* Box of the member q of this rank's group along mesh dim m. */
static sg_status member_box(const sg_st_redist *R, const sg_placement *pl,
                            int m, int q, int64_t *o, int64_t *l) {
  int co[SG_MESH_MAX_DIMS];
  memcpy(co, R->coords, sizeof co);
  co[m] = q;
  return sg_shardtensor_box_coords(R->nm, R->sizes, co, R->nd, R->gshape, pl, o,
                                   l);
}

/* 1 if blocks split along tensor dim d, packed in order, lay out exactly
 * like a contiguous block of shape l (every dim before d has length 1). */
static int packs_in_place(int d, const int64_t *l) {
  for (int k = 0; k < d; ++k)
    if (l[k] != 1) return 0;
  return 1;
}

typedef struct st_needs {
  int64_t send, recv; /* scratch elements */
  int direct; /* allgather: receive into dst; reduce-scatter: send src */
} st_needs;

static sg_status step_needs(const sg_st_redist *R, int i,
                            const sg_placement *cpl, const sg_placement *npl,
                            const int64_t *so, const int64_t *sl,
                            int src_contig, const int64_t *dof,
                            const int64_t *dl, int dst_contig, st_needs *n) {
  sg_status st = SG_OK;
  const int m = R->steps[i].m, nd = R->nd;
  const int64_t nsrc = sg_st_numel(nd, sl), ndst = sg_st_numel(nd, dl);
  int64_t o[SG_TENSOR_MAX_DIMS], l[SG_TENSOR_MAX_DIMS];
  int64_t io[SG_TENSOR_MAX_DIMS], il[SG_TENSOR_MAX_DIMS];
  memset(n, 0, sizeof *n);
  switch (R->steps[i].kind) {
  case ST_ALLREDUCE:
    n->send = src_contig ? 0 : nsrc;
    n->recv = dst_contig ? 0 : ndst;
    break;
  case ST_ALLGATHER:
    n->send = src_contig ? 0 : nsrc;
    n->direct = dst_contig && packs_in_place(cpl[m].dim, dl);
    n->recv = n->direct ? 0 : ndst;
    break;
  case ST_ALLTOALL:
    for (int q = 0; q < R->sizes[m]; ++q) {
      SG_TRY(member_box(R, npl, m, q, o, l));
      n->send += sg_st_box_isect(nd, so, sl, o, l, io, il);
      SG_TRY(member_box(R, cpl, m, q, o, l));
      n->recv += sg_st_box_isect(nd, o, l, dof, dl, io, il);
    }
    break;
  case ST_REDUCE_SCATTER:
    n->direct = src_contig && packs_in_place(npl[m].dim, sl);
    n->send = n->direct ? 0 : nsrc;
    n->recv = dst_contig ? 0 : ndst;
    break;
  default: break;
  }
fail:
  return st;
}

static sg_status run_step(sg_st_redist *R, int i, const sg_placement *cpl,
                          const sg_placement *npl, const sg_tensor *src,
                          const int64_t *so, sg_tensor *dst,
                          const int64_t *dof) {
  sg_status st = SG_OK;
  const int m = R->steps[i].m, P = R->sizes[m], q = R->coords[m], nd = R->nd;
  const size_t es = R->es;
  const sg_dtype dt = R->dt;
  const int64_t nsrc = sg_tensor_numel(src);
  const int src_contig = sg_tensor_is_contiguous(src);
  const int dst_contig = sg_tensor_is_contiguous(dst);
  int64_t *cnt = R->cnt, *rcnt = R->rcnt;
  char *sbuf = R->sbuf, *rbuf = R->rbuf;
  sg_group_t g = NULL;
  st_needs nd_;
  int64_t o[SG_TENSOR_MAX_DIMS], l[SG_TENSOR_MAX_DIMS];
  int64_t io[SG_TENSOR_MAX_DIMS], il[SG_TENSOR_MAX_DIMS];

  SG_TRY(step_needs(R, i, cpl, npl, so, src->shape, src_contig, dof, dst->shape,
                    dst_contig, &nd_));
  SG_TRY(sg_mesh_group(R->mesh, 1u << m, &g));
  switch (R->steps[i].kind) {
  case ST_ALLREDUCE: {
    if (nsrc == 0) break; /* the whole group has this empty box */
    const void *send = src->data;
    void *recv = dst_contig ? dst->data : rbuf;
    if (!src_contig) {
      sg_tensor b = sg_tensor_wrap(sbuf, dt, src->device, nd, src->shape);
      SG_TRY(sg_tensor_copy(&b, src));
      send = sbuf;
    }
    SG_TRY(sg_allreduce(g, send, recv, nsrc, dt, SG_REDUCE_SUM));
    if (!dst_contig) {
      sg_tensor b = sg_tensor_wrap(rbuf, dt, dst->device, nd, dst->shape);
      SG_TRY(sg_tensor_copy(dst, &b));
    }
    break;
  }
  case ST_ALLGATHER: {
    const void *send = src->data;
    if (!src_contig) {
      sg_tensor b = sg_tensor_wrap(sbuf, dt, src->device, nd, src->shape);
      SG_TRY(sg_tensor_copy(&b, src));
      send = sbuf;
    }
    int64_t total = 0;
    for (int r = 0; r < P; ++r) {
      SG_TRY(member_box(R, cpl, m, r, o, l));
      cnt[r] = sg_st_numel(nd, l);
      total += cnt[r];
    }
    if (total == 0) break; /* the whole group has an empty box */
    SG_TRY(sg_allgatherv(g, send, nsrc, nd_.direct ? dst->data : rbuf, cnt,
                         NULL, dt));
    if (!nd_.direct) {
      int64_t pos = 0;
      for (int r = 0; r < P; ++r) {
        SG_TRY(member_box(R, cpl, m, r, o, l));
        SG_TRY(sg_st_unpack(dst, dof, o, l, rbuf + (size_t)pos * es));
        pos += cnt[r];
      }
    }
    break;
  }
  case ST_ALLTOALL: {
    int64_t pos = 0;
    for (int r = 0; r < P; ++r) {
      SG_TRY(member_box(R, npl, m, r, o, l));
      cnt[r] = sg_st_box_isect(nd, so, src->shape, o, l, io, il);
      SG_TRY(sg_st_pack(src, so, io, il, sbuf + (size_t)pos * es));
      pos += cnt[r];
      SG_TRY(member_box(R, cpl, m, r, o, l));
      rcnt[r] = sg_st_box_isect(nd, o, l, dof, dst->shape, io, il);
    }
    SG_TRY(sg_alltoallv(g, sbuf, cnt, NULL, rbuf, rcnt, NULL, dt));
    pos = 0;
    for (int r = 0; r < P; ++r) {
      SG_TRY(member_box(R, cpl, m, r, o, l));
      sg_st_box_isect(nd, o, l, dof, dst->shape, io, il);
      SG_TRY(sg_st_unpack(dst, dof, io, il, rbuf + (size_t)pos * es));
      pos += rcnt[r];
    }
    break;
  }
  case ST_REDUCE_SCATTER: {
    int64_t pos = 0;
    for (int r = 0; r < P; ++r) {
      SG_TRY(member_box(R, npl, m, r, o, l));
      cnt[r] = sg_st_numel(nd, l);
      if (!nd_.direct)
        SG_TRY(sg_st_pack(src, so, o, l, sbuf + (size_t)pos * es));
      pos += cnt[r];
    }
    if (pos == 0) break; /* the whole group has an empty box */
    SG_TRY(sg_reduce_scatter(g, nd_.direct ? src->data : sbuf,
                             dst_contig ? dst->data : rbuf, cnt, dt,
                             SG_REDUCE_SUM));
    if (!dst_contig) {
      sg_tensor b = sg_tensor_wrap(rbuf, dt, dst->device, nd, dst->shape);
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
    if (q == 0)
      SG_TRY(sg_tensor_copy(dst, src));
    else
      SG_TRY(sg_tensor_fill(dst, 0.0));
    break;
  }
fail:
  return st;
}

/* ---- prepare / run / release --------------------------------------------- */

void sg_st_redist_release(sg_st_redist *R) {
  if (!R) return;
  for (int k = 0; k < 2; ++k) sg_free(sg_device_host(), (void **)&R->blk[k]);
  sg_free(sg_device_host(), (void **)&R->sbuf);
  sg_free(sg_device_host(), (void **)&R->rbuf);
  free(R->cnt);
  free(R->rcnt);
  R->cnt = R->rcnt = NULL;
  R->nsteps = 0;
}

sg_status sg_st_redist_prepare(sg_st_redist *R, sg_mesh_t mesh, sg_dtype dtype,
                               int ndim, const int64_t *global_shape,
                               const sg_placement *spl, const sg_tensor *src,
                               const sg_placement *dpl, const sg_tensor *dst) {
  sg_status st = SG_OK;
  memset(R, 0, sizeof *R);
  R->mesh = mesh;
  sg_st_mesh_info(mesh, &R->nm, R->sizes, R->coords);
  R->nd = ndim;
  for (int d = 0; d < ndim; ++d) R->gshape[d] = global_shape[d];
  R->dt = dtype;
  R->es = sg_dtype_size(dtype);
  memcpy(R->spl, spl, sizeof(sg_placement) * (size_t)R->nm);
  memcpy(R->dpl, dpl, sizeof(sg_placement) * (size_t)R->nm);
  SG_TRY(plan(R->nm, spl, dpl, R));
  if (dtype == SG_DTYPE_BF16 && plan_reduces(R))
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "redistribute: a Partial bf16 tensor "
                                   "cannot be summed (bf16 is for moves only)");
  /* walk the plan to size the workspace */
  sg_placement cpl[SG_MESH_MAX_DIMS], npl[SG_MESH_MAX_DIMS];
  int64_t so[SG_TENSOR_MAX_DIMS], sl[SG_TENSOR_MAX_DIMS];
  int64_t no[SG_TENSOR_MAX_DIMS], nl[SG_TENSOR_MAX_DIMS];
  int64_t cap_blk[2] = {0, 0}, cap_s = 0, cap_r = 0;
  memcpy(cpl, spl, sizeof cpl);
  SG_TRY(sg_shardtensor_box_coords(R->nm, R->sizes, R->coords, ndim,
                                   global_shape, cpl, so, sl));
  for (int i = 0; i < R->nsteps; ++i) {
    const int last = i == R->nsteps - 1;
    memcpy(npl, cpl, sizeof npl);
    npl[R->steps[i].m] = R->steps[i].to;
    SG_TRY(sg_shardtensor_box_coords(R->nm, R->sizes, R->coords, ndim,
                                     global_shape, npl, no, nl));
    st_needs n;
    SG_TRY(step_needs(R, i, cpl, npl, so, sl,
                      i == 0 ? sg_tensor_is_contiguous(src) : 1, no, nl,
                      last ? sg_tensor_is_contiguous(dst) : 1, &n));
    if (n.send > cap_s) cap_s = n.send;
    if (n.recv > cap_r) cap_r = n.recv;
    if (!last && sg_st_numel(ndim, nl) > cap_blk[i % 2])
      cap_blk[i % 2] = sg_st_numel(ndim, nl);
    memcpy(cpl, npl, sizeof cpl);
    memcpy(so, no, sizeof so);
    memcpy(sl, nl, sizeof sl);
  }
  for (int k = 0; k < 2; ++k)
    SG_TRY(sg_malloc(sg_device_host(), (size_t)cap_blk[k] * R->es,
                     (void **)&R->blk[k]));
  SG_TRY(sg_malloc(sg_device_host(), (size_t)cap_s * R->es, (void **)&R->sbuf));
  SG_TRY(sg_malloc(sg_device_host(), (size_t)cap_r * R->es, (void **)&R->rbuf));
  int pmax = 1;
  for (int m = 0; m < R->nm; ++m)
    if (R->sizes[m] > pmax) pmax = R->sizes[m];
  R->cnt = calloc((size_t)pmax, sizeof *R->cnt);
  R->rcnt = calloc((size_t)pmax, sizeof *R->rcnt);
  if (!R->cnt || !R->rcnt)
    SG_RAISE(SG_ERR_ALLOC, "redistribute: out of memory for counts");
  return SG_OK;
fail:
  sg_st_redist_release(R);
  return st;
}

sg_status sg_st_redist_run(sg_st_redist *R, const sg_tensor *src,
                           sg_tensor *dst) {
  sg_status st = SG_OK;
  if (R->nsteps == 0) return sg_tensor_copy(dst, src);
  sg_placement cpl[SG_MESH_MAX_DIMS], npl[SG_MESH_MAX_DIMS];
  int64_t so[SG_TENSOR_MAX_DIMS], sl[SG_TENSOR_MAX_DIMS];
  int64_t no[SG_TENSOR_MAX_DIMS], nl[SG_TENSOR_MAX_DIMS];
  memcpy(cpl, R->spl, sizeof cpl);
  SG_TRY(sg_shardtensor_box_coords(R->nm, R->sizes, R->coords, R->nd, R->gshape,
                                   cpl, so, sl));
  sg_tensor cur = *src, nxt;
  for (int i = 0; i < R->nsteps; ++i) {
    const int last = i == R->nsteps - 1;
    memcpy(npl, cpl, sizeof npl);
    npl[R->steps[i].m] = R->steps[i].to;
    SG_TRY(sg_shardtensor_box_coords(R->nm, R->sizes, R->coords, R->nd,
                                     R->gshape, npl, no, nl));
    nxt = last ? *dst
               : sg_tensor_wrap(R->blk[i % 2], R->dt, sg_device_host(), R->nd,
                                nl);
    SG_TRY(run_step(R, i, cpl, npl, &cur, so, &nxt, no));
    cur = nxt;
    memcpy(cpl, npl, sizeof cpl);
    memcpy(so, no, sizeof so);
    (void)sl;
  }
fail:
  return st;
}

sg_status sg_shardtensor_redistribute(const sg_shardtensor *x,
                                      sg_shardtensor *y) {
  sg_status st = SG_OK, lst;
  sg_st_redist R;
  memset(&R, 0, sizeof R);
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
  sg_tensor in, out;
  if (lst == SG_OK) {
    in = sg_shardtensor_interior(x);
    out = sg_shardtensor_interior(y);
    lst = sg_st_redist_prepare(&R, mesh, x->local.dtype, x->ndim,
                               x->global_shape, x->placements, &in,
                               y->placements, &out);
  }
  {
    const sg_shardtensor *xs[2] = {x, y};
    SG_TRY(sg_st_agree_descs(mesh, lst, 2, xs));
  }
  SG_TRY(sg_st_redist_run(&R, &in, &out));
fail:
  sg_st_redist_release(&R);
  return st;
}
