/* shardgrid — the communication of the sharded ops (sg_exchange.h): the
 * halo exchange of a window op, the loss reduction, the split masks. */
#include <stdlib.h>
#include <string.h>

#include "sg_comm.h"
#include "sg_device.h"
#include "sg_exchange.h"
#include "sg_halo.h"

/* ---- placements ------------------------------------------------------------- */

typedef struct layout {
  int space_dim[SG_OPS_MAX_SPATIAL]; /* mesh dim sharding tensor dim 2+d */
  unsigned batch_mask, channel_mask, space_mask;
} layout;

/* The mesh dims that split each tensor dim. Channels (Shard(1)) only when
 * allow_channel; Partial never. The batch (Shard(0)) may be split by
 * several mesh dims (HSDP on a split domain: dp and fsdp), nested in mesh
 * order as sg_shardtensor_box cuts it: no op exchanges samples, and every
 * reduction over the batch (loss, batch norm statistics) runs over
 * batch_mask, all of them. A spatial dim is split by one mesh dim at most
 * (the halo exchange walks one ring per spatial dim). */
static sg_status layout_of(sg_mesh_t mesh, int ndim, const sg_placement *pl,
                           const char *op, int allow_channel, layout *l) {
  sg_status st = SG_OK;
  memset(l, 0, sizeof *l);
  for (int d = 0; d < SG_OPS_MAX_SPATIAL; ++d) l->space_dim[d] = -1;
  if (ndim < 2 || ndim > 2 + SG_OPS_MAX_SPATIAL)
    SG_RAISE(SG_ERR_SHAPE,
             "%s: input must be (N, C) + 1..3 spatial dims, has %d dims", op,
             ndim);
  SG_TRY(sg_placements_check(sg_mesh_ndims(mesh), ndim, pl));
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m) {
    sg_placement p = pl[m];
    if (p.kind == SG_PLACEMENT_PARTIAL)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "%s: placement Partial (mesh dim %d) is not accepted", op, m);
    if (p.kind != SG_PLACEMENT_SHARD) continue;
    if (p.dim == 1) {
      if (!allow_channel)
        SG_RAISE(
            SG_ERR_INVALID_ARG,
            "%s: placement Shard(1) (channels, mesh dim %d) is not accepted",
            op, m);
      l->channel_mask |= 1u << m;
    } else if (p.dim == 0) {
      l->batch_mask |= 1u << m;
    } else {
      if (l->space_dim[p.dim - 2] >= 0)
        SG_RAISE(SG_ERR_NOT_SUPPORTED,
                 "%s: spatial dim %d split by two mesh dims", op, p.dim);
      l->space_dim[p.dim - 2] = m;
      l->space_mask |= 1u << m;
    }
  }
fail:
  return st;
}

sg_status sg_sharded_split_masks(sg_mesh_t mesh, int ndim,
                                 const sg_placement *placements,
                                 unsigned *batch, unsigned *channel,
                                 unsigned *space) {
  sg_status st = SG_OK;
  layout l;
  if (!mesh || !placements)
    SG_RAISE(SG_ERR_INVALID_ARG, "split masks: mesh and placements");
  SG_TRY(layout_of(mesh, ndim, placements, "split masks", 1, &l));
  if (batch) *batch = l.batch_mask;
  if (channel) *channel = l.channel_mask;
  if (space) *space = l.space_mask;
fail:
  return st;
}

/* Strided box copy of up to 5 dims (element strides), same dtype. */
static void copy_box(size_t es, int nd, const int64_t *shape, const char *src,
                     const int64_t *ss, char *dst, const int64_t *ds, int add,
                     sg_dtype dt) {
  int64_t sh[5] = {1, 1, 1, 1, 1}, s1[5] = {0}, d1[5] = {0};
  int off = 5 - nd;
  for (int i = 0; i < nd; ++i) {
    sh[off + i] = shape[i];
    s1[off + i] = ss[i];
    d1[off + i] = ds[i];
  }
  int64_t outer = sh[0] * sh[1] * sh[2] * sh[3];
#pragma omp parallel for schedule(static) if (outer * sh[4] > 65536)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t i3 = o % sh[3], r = o / sh[3];
    int64_t i2 = r % sh[2];
    r /= sh[2];
    int64_t i1 = r % sh[1], i0 = r / sh[1];
    const char *sp = src + (size_t)(i0 * s1[0] + i1 * s1[1] + i2 * s1[2] +
                                    i3 * s1[3]) *
                               es;
    char *dp = dst +
               (size_t)(i0 * d1[0] + i1 * d1[1] + i2 * d1[2] + i3 * d1[3]) * es;
    if (!add && s1[4] == 1 && d1[4] == 1) {
      memcpy(dp, sp, (size_t)sh[4] * es);
    } else if (!add) {
      for (int64_t i = 0; i < sh[4]; ++i)
        memcpy(dp + (size_t)(i * d1[4]) * es, sp + (size_t)(i * s1[4]) * es,
               es);
    } else if (dt == SG_DTYPE_F32) {
      for (int64_t i = 0; i < sh[4]; ++i)
        ((float *)dp)[i * d1[4]] += ((const float *)sp)[i * s1[4]];
    } else {
      for (int64_t i = 0; i < sh[4]; ++i)
        ((double *)dp)[i * d1[4]] += ((const double *)sp)[i * s1[4]];
    }
  }
}

static int64_t numel_of(const int64_t *shape, int nd) {
  int64_t n = 1;
  for (int i = 0; i < nd; ++i) n *= shape[i];
  return n;
}

static void row_major_strides(int nd, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
}

/* ---- the exchange of a window op -------------------------------------------- */

struct sg_sharded_exchange {
  sg_dtype dtype;
  int ndim;
  int64_t local[SG_TENSOR_MAX_DIMS]; /* this rank's input interior */
  sg_halo_plan_t plan;               /* NULL when nothing moves anywhere */
  int64_t block_count, origin;
  int64_t ds[SG_TENSOR_MAX_DIMS]; /* element strides of the block */
  int64_t box_start[SG_OPS_MAX_SPATIAL];
  int box_is_block;
  sg_exchange_info info;
};

/* Signed halos (2 per part) and sizes of the input parts along one dim of
 * n cells over p parts, for the window w; *nout: the global output extent.
 * The halo formula is grid's (sg_window_halos: the output-partition rule);
 * an empty shard is refused here as not supported (sharded ops need every
 * rank to hold cells). */
static sg_status span_halos(int dim, int64_t n, int p, sg_window w,
                            int64_t *halo, int64_t *sizes, int64_t *nout) {
  sg_status st = SG_OK;
  SG_TRY(sg_window_output_size(w, n, nout));
  if (n < p || *nout < p)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "spatial dim %d: %lld input / %lld output cells over %d ranks: "
             "a shard would be empty",
             dim, (long long)n, (long long)*nout, p);
  SG_TRY(sg_window_halos(n, p, w, halo, NULL, NULL));
  SG_TRY(sg_split_table(n, p, 0, sizes, NULL));
  SG_TRY(sg_halo_check(dim, p, sizes, w.boundary, halo));
fail:
  return st;
}

sg_status sg_sharded_exchange_destroy(sg_sharded_exchange_t *ex) {
  if (!ex || !*ex) return SG_OK;
  sg_halo_plan_destroy(&(*ex)->plan);
  free(*ex);
  *ex = NULL;
  return SG_OK;
}

void sg_sharded_exchange_get_info(sg_sharded_exchange_t ex,
                                  sg_exchange_info *info) {
  if (ex && info) *info = ex->info;
}

sg_status sg_sharded_exchange_create(sg_mesh_t mesh, sg_dtype dtype, int ndim,
                                     const int64_t *global_shape,
                                     const sg_placement *placements,
                                     const sg_window *win,
                                     sg_sharded_exchange_t *ex) {
  sg_status st = SG_OK;
  struct sg_sharded_exchange *e = NULL;
  int64_t *tab = NULL;
  layout l;
  if (ex) *ex = NULL;
  if (!mesh || !global_shape || !placements || !win || !ex)
    SG_RAISE(SG_ERR_INVALID_ARG, "exchange: NULL argument");
  if (dtype != SG_DTYPE_F32 && dtype != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "exchange: f32 or f64, not %s",
             sg_dtype_name(dtype));
  SG_TRY(layout_of(mesh, ndim, placements, "window op", 0, &l));
  if (ndim < 3)
    SG_RAISE(SG_ERR_SHAPE, "window op: input (N, C) has no spatial dims");
  e = calloc(1, sizeof *e);
  const int P = sg_mesh_size(mesh);
  tab = malloc(3 * (size_t)P * sizeof *tab);
  if (!e || !tab) SG_RAISE(SG_ERR_ALLOC, "exchange");
  e->dtype = dtype;
  e->ndim = ndim;
  int64_t off[SG_TENSOR_MAX_DIMS];
  SG_TRY(sg_shardtensor_box(mesh, ndim, global_shape, placements,
                            sg_mesh_rank(mesh), off, e->local));
  sg_exchange_info *in = &e->info;
  in->nsp = ndim - 2;
  in->identity = 1;
  sg_halo_desc hd;
  sg_halo_desc_init(&hd);
  hd.ndims = in->nsp;
  hd.dtype = dtype;
  hd.lead = e->local[0] * e->local[1] > 0 ? e->local[0] * e->local[1] : 1;
  for (int d = 0; d < in->nsp; ++d) {
    sg_window w = sg_window_normal(win[d]);
    int m = l.space_dim[d];
    int p = m >= 0 ? sg_mesh_dim_size(mesh, m) : 1,
        r = m >= 0 ? sg_mesh_coord(mesh, m) : 0;
    int64_t n = global_shape[2 + d], nout = 0, *halo = tab,
            *sizes = tab + 2 * P;
    SG_TRY(span_halos(d, n, p, w, halo, sizes, &nout));
    for (int q = 0; q < 2 * p; ++q) in->identity &= halo[q] == 0;
    int64_t y0 = sg_split_offset(nout, p, r), ny = sg_split_size(nout, p, r);
    int64_t z0 = y0 / w.up, z1 = (y0 + ny - 1) / w.up;
    int64_t lo = halo[2 * r], hi = halo[2 * r + 1];
    in->in_local[d] = e->local[2 + d];
    in->out_global[d] = nout;
    in->out_local[d] = ny;
    in->box[d] = (z1 - z0) * w.stride + w.dilation * (w.kernel - 1) + 1;
    in->box_origin[d] = w.stride * z0 - w.pad[0];
    in->natural[d] = w.up * (z1 - z0 + 1);
    in->crop[d] = y0 - w.up * z0;
    in->cropped |= in->natural[d] != ny;
    e->box_start[d] = (lo > 0 ? lo : 0) - lo;
    hd.interior[d] = e->local[2 + d];
    hd.halo[d][0] = hd.margin[d][0] = lo > 0 ? lo : 0;
    hd.halo[d][1] = hd.margin[d][1] = hi > 0 ? hi : 0;
    hd.mesh_dim[d] = m;
    hd.boundary[d] = w.boundary;
  }
  e->box_is_block = 1;
  for (int d = 0; d < in->nsp; ++d)
    e->box_is_block &= e->box_start[d] == 0 && in->box[d] == e->local[2 + d] +
                                                                 hd.halo[d][0] +
                                                                 hd.halo[d][1];
  if (!in->identity) {
    SG_TRY(sg_halo_plan_create(mesh, &hd, &e->plan));
    e->block_count = sg_halo_plan_block_count(e->plan);
    e->origin = sg_halo_plan_origin(e->plan);
    int64_t bs[1 + SG_HALO_MAX_DIMS];
    sg_halo_plan_strides(e->plan, bs);
    e->ds[0] = e->local[1] * bs[0];
    e->ds[1] = bs[0];
    for (int d = 0; d < in->nsp; ++d) e->ds[2 + d] = bs[1 + d];
  }
  *ex = e;
  e = NULL;
fail:
  free(tab);
  free(e);
  return st;
}

void sg_sharded_exchange_get_block(sg_sharded_exchange_t ex,
                                   sg_exchange_block *block) {
  if (!ex || !block) return;
  memset(block, 0, sizeof *block);
  block->plan = ex->plan;
  block->count = ex->block_count;
  block->origin = ex->origin;
  for (int d = 0; d < ex->info.nsp; ++d)
    block->box_base += ex->box_start[d] * ex->ds[2 + d];
  memcpy(block->ds, ex->ds, sizeof block->ds);
}

static void describe_box(const struct sg_sharded_exchange *e, sg_tensor *t,
                         void *data) {
  memset(t, 0, sizeof *t);
  t->dtype = e->dtype;
  t->device = sg_device_host();
  t->ndim = e->ndim;
  t->shape[0] = e->local[0];
  t->shape[1] = e->local[1];
  for (int d = 0; d < e->info.nsp; ++d) t->shape[2 + d] = e->info.box[d];
  row_major_strides(t->ndim, t->shape, t->strides);
  t->data = data;
  t->owns = data != NULL;
}

static int local_matches(const struct sg_sharded_exchange *e,
                         const sg_tensor *x) {
  if (!x || x->ndim != e->ndim || x->dtype != e->dtype) return 0;
  for (int d = 0; d < e->ndim; ++d)
    if (x->shape[d] != e->local[d]) return 0;
  return 1;
}

sg_status sg_sharded_exchange_forward(sg_sharded_exchange_t e,
                                      const sg_tensor *x, sg_tensor *box) {
  sg_status st = SG_OK;
  void *block = NULL, *data = NULL;
  if (box) memset(box, 0, sizeof *box);
  if (!e || !box)
    SG_RAISE(SG_ERR_INVALID_ARG, "exchange forward: NULL argument");
  if (!local_matches(e, x))
    SG_RAISE(
        SG_ERR_SHAPE,
        "exchange forward: the input is not this rank's block of the layout");
  const size_t es = sg_dtype_size(e->dtype);
  describe_box(e, box, NULL);
  const int64_t n = numel_of(box->shape, box->ndim);
  if (e->info.identity) {
    if (n > 0) {
      SG_TRY(sg_malloc(sg_device_host(), (size_t)n * es, &data));
      copy_box(es, x->ndim, x->shape, x->data, x->strides, data, box->strides,
               0, e->dtype);
    }
    goto done;
  }
  SG_TRY(sg_calloc(sg_device_host(), (size_t)e->block_count * es, &block));
  if (n > 0)
    copy_box(es, x->ndim, x->shape, x->data, x->strides,
             (char *)block + (size_t)e->origin * es, e->ds, 0, e->dtype);
  SG_TRY(sg_halo_exchange(e->plan, block));
  if (n == 0) goto done;
  if (e->box_is_block) {
    data = block;
    block = NULL;
  } else {
    int64_t src = 0;
    for (int d = 0; d < e->info.nsp; ++d) src += e->box_start[d] * e->ds[2 + d];
    SG_TRY(sg_malloc(sg_device_host(), (size_t)n * es, &data));
    copy_box(es, box->ndim, box->shape, (char *)block + (size_t)src * es, e->ds,
             data, box->strides, 0, e->dtype);
  }
done:
  describe_box(e, box, data);
  data = NULL;
fail:
  sg_free(sg_device_host(), &block);
  sg_free(sg_device_host(), &data);
  return st;
}

sg_status sg_sharded_exchange_adjoint(sg_sharded_exchange_t e, void *dbox,
                                      const sg_tensor *dx) {
  sg_status st = SG_OK;
  void *block = NULL;
  sg_tensor bt;
  if (!e) SG_RAISE(SG_ERR_INVALID_ARG, "exchange adjoint: NULL exchange");
  if (!local_matches(e, dx))
    SG_RAISE(SG_ERR_SHAPE,
             "exchange adjoint: dx is not this rank's block of the layout");
  const size_t es = sg_dtype_size(e->dtype);
  describe_box(e, &bt, NULL);
  const int64_t n = numel_of(bt.shape, bt.ndim);
  if (n > 0 && !dbox)
    SG_RAISE(SG_ERR_INVALID_ARG, "exchange adjoint: dbox is NULL");
  if (e->info.identity) {
    if (n > 0)
      copy_box(es, dx->ndim, dx->shape, dbox, bt.strides, dx->data, dx->strides,
               0, e->dtype);
    goto fail;
  }
  if (e->box_is_block && n > 0) {
    block = dbox;
  } else {
    int64_t dst = 0;
    for (int d = 0; d < e->info.nsp; ++d) dst += e->box_start[d] * e->ds[2 + d];
    SG_TRY(sg_calloc(sg_device_host(), (size_t)e->block_count * es, &block));
    if (n > 0)
      copy_box(es, bt.ndim, bt.shape, dbox, bt.strides,
               (char *)block + (size_t)dst * es, e->ds, 1, e->dtype);
  }
  SG_TRY(sg_halo_adjoint(e->plan, block));
  if (n > 0)
    copy_box(es, dx->ndim, dx->shape, (char *)block + (size_t)e->origin * es,
             e->ds, dx->data, dx->strides, 0, e->dtype);
fail:
  if (block != dbox) sg_free(sg_device_host(), &block);
  return st;
}

/* ---- losses ------------------------------------------------------------------------- */

sg_status sg_sharded_loss_reduce(sg_mesh_t mesh, sg_loss_kind kind,
                                 unsigned space, unsigned batch,
                                 int64_t local_batch, int64_t global_batch,
                                 double *partial, double *value,
                                 double *grad_scale) {
  sg_status st = SG_OK;
  sg_group_t g;
  if (!mesh || !partial || !value || !grad_scale)
    SG_RAISE(SG_ERR_INVALID_ARG, "loss reduce: NULL argument");
  *grad_scale = 1.0;
  if (kind != SG_LOSS_REL_L2) {
    SG_TRY(sg_mesh_group(mesh, space | batch, &g));
    SG_TRY(sg_sum_allreduce(partial, sg_loss_npartial(kind, local_batch),
                            sg_group_comm(g)));
    SG_TRY(sg_loss_finish(kind, 1, partial, value));
  } else {
    if (global_batch < 1)
      SG_RAISE(SG_ERR_SHAPE, "loss reduce: empty global batch");
    SG_TRY(sg_mesh_group(mesh, space, &g));
    SG_TRY(sg_sum_allreduce(partial, sg_loss_npartial(kind, local_batch),
                            sg_group_comm(g)));
    double s = 0;
    if (local_batch > 0) {
      SG_TRY(sg_loss_finish(kind, local_batch, partial, &s));
      s *= (double)local_batch;
    }
    SG_TRY(sg_mesh_group(mesh, batch, &g));
    SG_TRY(sg_sum_allreduce(&s, 1, sg_group_comm(g)));
    *value = s / (double)global_batch;
    *grad_scale = (double)local_batch / (double)global_batch;
  }
fail:
  return st;
}
