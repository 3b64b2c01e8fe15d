/* shardgrid — sharded ops: communication from the sharding rule + local
 * kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sg_comm.h"
#include "sg_device.h"
#include "sg_halo.h"
#include "sg_sharded_ops.h"

enum { CTX_CONV = 1, CTX_POOL, CTX_NORM, CTX_LOSS, CTX_UP, CTX_CONVT };

struct sg_sharded_ctx {
  int kind;
  sg_mesh_t mesh;
  sg_dtype dtype;
  int ndim;
  int64_t global[SG_TENSOR_MAX_DIMS];
  sg_placement placements[SG_MESH_MAX_DIMS];
  /* window ops: the exchange, its geometry, the input box */
  int nsp;
  sg_sharded_exchange_t ex;
  sg_exchange_info xi;
  void *xin; /* (n, c, box...) contiguous */
  sg_conv_desc cd;
  sg_pool_kind pool;
  /* up-sampling, transposed convolution */
  sg_upsample_kind up;
  int64_t scale[SG_OPS_MAX_SPATIAL];
  /* normalisation */
  sg_norm_desc nd;
  sg_moments *stats;
  int64_t nstat;
  MPI_Comm comm;
  const void *x; /* caller's interior (must stay valid) */
  void *x_own;
  /* losses */
  sg_loss_kind loss;
  double *partial;
  double grad_scale;
  int64_t npartial, local_batch, global_batch, local_n;
  const void *p, *t;
  void *p_own, *t_own;
};

void sg_sharded_ctx_destroy(sg_sharded_ctx_t *ctx) {
  if (!ctx || !*ctx) return;
  sg_sharded_ctx_t c = *ctx;
  sg_sharded_exchange_destroy(&c->ex);
  sg_free(sg_device_host(), &c->xin);
  sg_free(sg_device_host(), &c->x_own);
  sg_free(sg_device_host(), &c->p_own);
  sg_free(sg_device_host(), &c->t_own);
  free(c->stats);
  free(c->partial);
  free(c);
  *ctx = NULL;
}

/* ---- placements ------------------------------------------------------------- */

typedef struct layout {
  int batch_dim;                      /* mesh dim sharding tensor dim 0 */
  int space_dim[SG_OPS_MAX_SPATIAL];  /* mesh dim sharding tensor dim 2+d */
  unsigned batch_mask, channel_mask, space_mask;
} layout;

/* The mesh dims that split each tensor dim. Channels (Shard(1)) only when
 * allow_channel; Partial never. */
static sg_status layout_of(sg_mesh_t mesh, int ndim, const sg_placement *pl, const char *op,
                           int allow_channel, layout *l) {
  sg_status st = SG_OK;
  memset(l, 0, sizeof *l);
  l->batch_dim = -1;
  for (int d = 0; d < SG_OPS_MAX_SPATIAL; ++d) l->space_dim[d] = -1;
  if (ndim < 2 || ndim > 2 + SG_OPS_MAX_SPATIAL)
    SG_RAISE(SG_ERR_SHAPE, "%s: input must be (N, C) + 1..3 spatial dims, has %d dims", op, ndim);
  SG_TRY(sg_placements_check(sg_mesh_ndims(mesh), ndim, pl));
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m) {
    sg_placement p = pl[m];
    if (p.kind == SG_PLACEMENT_PARTIAL)
      SG_RAISE(SG_ERR_INVALID_ARG, "%s: placement Partial (mesh dim %d) is not accepted", op, m);
    if (p.kind != SG_PLACEMENT_SHARD) continue;
    if (p.dim == 1) {
      if (!allow_channel)
        SG_RAISE(SG_ERR_INVALID_ARG,
                 "%s: placement Shard(1) (channels, mesh dim %d) is not accepted", op, m);
      l->channel_mask |= 1u << m;
    } else if (p.dim == 0) {
      if (l->batch_dim >= 0)
        SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: batch split by two mesh dims", op);
      l->batch_dim = m;
      l->batch_mask |= 1u << m;
    } else {
      if (l->space_dim[p.dim - 2] >= 0)
        SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: spatial dim %d split by two mesh dims", op, p.dim);
      l->space_dim[p.dim - 2] = m;
      l->space_mask |= 1u << m;
    }
  }
fail:
  return st;
}

static sg_status analyze(const sg_shardtensor *x, const char *op, layout *l) {
  sg_status st = SG_OK;
  if (!x || !x->mesh) SG_RAISE(SG_ERR_INVALID_ARG, "%s: input is NULL or not created", op);
  if (x->local.dtype != SG_DTYPE_F32 && x->local.dtype != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%s: f32 or f64, not %s", op, sg_dtype_name(x->local.dtype));
  SG_TRY(layout_of(x->mesh, x->ndim, x->placements, op, 0, l));
fail:
  return st;
}

sg_status sg_sharded_split_masks(sg_mesh_t mesh, int ndim, const sg_placement *placements,
                                 unsigned *batch, unsigned *channel, unsigned *space) {
  sg_status st = SG_OK;
  layout l;
  if (!mesh || !placements) SG_RAISE(SG_ERR_INVALID_ARG, "split masks: mesh and placements");
  SG_TRY(layout_of(mesh, ndim, placements, "split masks", 1, &l));
  if (batch) *batch = l.batch_mask;
  if (channel) *channel = l.channel_mask;
  if (space) *space = l.space_mask;
fail:
  return st;
}

unsigned sg_sharded_reduce_dims(const sg_shardtensor *x) {
  layout l;
  if (analyze(x, "sg_sharded_reduce_dims", &l) != SG_OK) {
    sg_clear_error();
    return 0;
  }
  return l.batch_mask | l.space_mask;
}

static int same_layout(const sg_shardtensor *a, const sg_shardtensor *b) {
  if (a->mesh != b->mesh || a->ndim != b->ndim || a->local.dtype != b->local.dtype) return 0;
  for (int d = 0; d < a->ndim; ++d)
    if (a->global_shape[d] != b->global_shape[d]) return 0;
  for (int m = 0; m < sg_mesh_ndims(a->mesh); ++m)
    if (a->placements[m].kind != b->placements[m].kind ||
        (a->placements[m].kind == SG_PLACEMENT_SHARD && a->placements[m].dim != b->placements[m].dim))
      return 0;
  return 1;
}

/* Strided box copy of up to 5 dims (element strides), same dtype. */
static void copy_box(size_t es, int nd, const int64_t *shape, const char *src,
                     const int64_t *ss, char *dst, const int64_t *ds, int add, sg_dtype dt) {
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
    const char *sp = src + (size_t)(i0 * s1[0] + i1 * s1[1] + i2 * s1[2] + i3 * s1[3]) * es;
    char *dp = dst + (size_t)(i0 * d1[0] + i1 * d1[1] + i2 * d1[2] + i3 * d1[3]) * es;
    if (!add && s1[4] == 1 && d1[4] == 1) {
      memcpy(dp, sp, (size_t)sh[4] * es);
    } else if (!add) {
      for (int64_t i = 0; i < sh[4]; ++i)
        memcpy(dp + (size_t)(i * d1[4]) * es, sp + (size_t)(i * s1[4]) * es, es);
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

/* A contiguous copy of x's interior, or its data when it is contiguous. */
static sg_status interior_contig(const sg_shardtensor *x, const void **data, void **own) {
  sg_status st = SG_OK;
  sg_tensor in = sg_shardtensor_interior(x);
  int64_t rs[SG_TENSOR_MAX_DIMS], n = 1;
  row_major_strides(x->ndim, x->local_shape, rs);
  int contig = 1;
  for (int d = 0; d < x->ndim; ++d) {
    n *= x->local_shape[d];
    if (x->local_shape[d] > 1 && in.strides[d] != rs[d]) contig = 0;
  }
  *own = NULL;
  if (contig || n == 0) {
    *data = in.data;
    goto fail;
  }
  size_t es = sg_dtype_size(x->local.dtype);
  SG_TRY(sg_malloc(sg_device_host(), (size_t)n * es, own));
  copy_box(es, x->ndim, x->local_shape, in.data, in.strides, *own, rs, 0, x->local.dtype);
  *data = *own;
fail:
  return st;
}

/* Output ShardTensor placed like x with a new global shape. */
static sg_status make_like(const sg_shardtensor *x, const int64_t *global, sg_shardtensor *y) {
  return sg_shardtensor_create(y, x->mesh, x->local.dtype, x->ndim, global, x->placements, NULL);
}

static void *interior_ptr(const sg_shardtensor *y) { return sg_shardtensor_interior(y).data; }

static sg_status ctx_new(const sg_shardtensor *x, int kind, sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  if (!ctx) SG_RAISE(SG_ERR_INVALID_ARG, "context pointer is NULL");
  if (!x || !x->mesh) SG_RAISE(SG_ERR_INVALID_ARG, "input is NULL or has no mesh");
  *ctx = calloc(1, sizeof **ctx);
  if (!*ctx) SG_RAISE(SG_ERR_ALLOC, "context");
  (*ctx)->kind = kind;
  (*ctx)->mesh = x->mesh;
  (*ctx)->dtype = x->local.dtype;
  (*ctx)->ndim = x->ndim;
  memcpy((*ctx)->global, x->global_shape, sizeof (*ctx)->global);
  memcpy((*ctx)->placements, x->placements, sizeof (*ctx)->placements);
  (*ctx)->comm = MPI_COMM_NULL;
fail:
  return st;
}

/* ---- the exchange of a window op -------------------------------------------- */

struct sg_sharded_exchange {
  sg_dtype dtype;
  int ndim;
  int64_t local[SG_TENSOR_MAX_DIMS]; /* this rank's input interior */
  sg_halo_plan_t plan;               /* NULL when nothing moves anywhere */
  int64_t block_count, origin;
  int64_t ds[SG_TENSOR_MAX_DIMS];    /* element strides of the block */
  int64_t box_start[SG_OPS_MAX_SPATIAL];
  int box_is_block;
  sg_exchange_info info;
};

static sg_exchange_dim dim_normal(sg_exchange_dim w) {
  if (w.kernel == 0) w.kernel = 1;
  if (w.stride == 0) w.stride = 1;
  if (w.dilation == 0) w.dilation = 1;
  if (w.up == 0) w.up = 1;
  return w;
}

/* Signed halos (2 per part) and sizes of the input parts along one dim of
 * n cells over p parts, for the window w; *nout: the global output extent. */
static sg_status span_halos(int dim, int64_t n, int p, sg_exchange_dim w, int64_t *halo,
                            int64_t *sizes, int64_t *nout) {
  sg_status st = SG_OK;
  if (w.kernel < 1 || w.stride < 1 || w.dilation < 1 || w.up < 1 || w.pad[0] < 0 || w.pad[1] < 0)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "spatial dim %d: window kernel %lld, stride %lld, dilation %lld, padding (%lld, %lld), "
             "up-sampling %lld", dim, (long long)w.kernel, (long long)w.stride,
             (long long)w.dilation, (long long)w.pad[0], (long long)w.pad[1], (long long)w.up);
  if ((int)w.boundary < 0 || w.boundary >= SG_BOUNDARY_COUNT)
    SG_RAISE(SG_ERR_INVALID_ARG, "spatial dim %d: boundary kind %d", dim, (int)w.boundary);
  int64_t span = n + w.pad[0] + w.pad[1] - w.dilation * (w.kernel - 1) - 1;
  if (n < 1 || span < 0)
    SG_RAISE(SG_ERR_SHAPE, "spatial dim %d: a window of %lld (dilation %lld) does not fit %lld "
             "cells with padding (%lld, %lld)", dim, (long long)w.kernel, (long long)w.dilation,
             (long long)n, (long long)w.pad[0], (long long)w.pad[1]);
  *nout = w.up * (span / w.stride + 1);
  if (n < p || *nout < p)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "spatial dim %d: %lld input / %lld output cells over %d ranks: "
             "a shard would be empty", dim, (long long)n, (long long)*nout, p);
  for (int r = 0; r < p; ++r) {
    int64_t x0 = sg_split_offset(n, p, r), x1 = x0 + sg_split_size(n, p, r) - 1;
    int64_t y0 = sg_split_offset(*nout, p, r), y1 = y0 + sg_split_size(*nout, p, r) - 1;
    int64_t z0 = y0 / w.up, z1 = y1 / w.up;
    halo[2 * r] = x0 - (w.stride * z0 - w.pad[0]);
    halo[2 * r + 1] = w.stride * z1 - w.pad[0] + w.dilation * (w.kernel - 1) - x1;
    sizes[r] = x1 - x0 + 1;
  }
  SG_TRY(sg_halo_check(dim, p, sizes, w.boundary, halo));
fail:
  return st;
}

void sg_sharded_exchange_destroy(sg_sharded_exchange_t *ex) {
  if (!ex || !*ex) return;
  sg_halo_plan_destroy(&(*ex)->plan);
  free(*ex);
  *ex = NULL;
}

void sg_sharded_exchange_get_info(sg_sharded_exchange_t ex, sg_exchange_info *info) {
  if (ex && info) *info = ex->info;
}

sg_status sg_sharded_exchange_create(sg_mesh_t mesh, sg_dtype dtype, int ndim,
                                     const int64_t *global_shape, const sg_placement *placements,
                                     const sg_exchange_dim *win, sg_sharded_exchange_t *ex) {
  sg_status st = SG_OK;
  struct sg_sharded_exchange *e = NULL;
  int64_t *tab = NULL;
  layout l;
  if (ex) *ex = NULL;
  if (!mesh || !global_shape || !placements || !win || !ex)
    SG_RAISE(SG_ERR_INVALID_ARG, "exchange: NULL argument");
  if (dtype != SG_DTYPE_F32 && dtype != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "exchange: f32 or f64, not %s", sg_dtype_name(dtype));
  SG_TRY(layout_of(mesh, ndim, placements, "window op", 0, &l));
  if (ndim < 3) SG_RAISE(SG_ERR_SHAPE, "window op: input (N, C) has no spatial dims");
  e = calloc(1, sizeof *e);
  const int P = sg_mesh_size(mesh);
  tab = malloc(3 * (size_t)P * sizeof *tab);
  if (!e || !tab) SG_RAISE(SG_ERR_ALLOC, "exchange");
  e->dtype = dtype;
  e->ndim = ndim;
  int64_t off[SG_TENSOR_MAX_DIMS];
  SG_TRY(sg_shardtensor_box(mesh, ndim, global_shape, placements, sg_mesh_rank(mesh), off,
                            e->local));
  sg_exchange_info *in = &e->info;
  in->nsp = ndim - 2;
  in->identity = 1;
  sg_halo_desc hd;
  sg_halo_desc_init(&hd);
  hd.ndims = in->nsp;
  hd.dtype = dtype;
  hd.lead = e->local[0] * e->local[1] > 0 ? e->local[0] * e->local[1] : 1;
  for (int d = 0; d < in->nsp; ++d) {
    sg_exchange_dim w = dim_normal(win[d]);
    int m = l.space_dim[d];
    int p = m >= 0 ? sg_mesh_dim_size(mesh, m) : 1, r = m >= 0 ? sg_mesh_coord(mesh, m) : 0;
    int64_t n = global_shape[2 + d], nout = 0, *halo = tab, *sizes = tab + 2 * P;
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
    e->box_is_block &= e->box_start[d] == 0 &&
                       in->box[d] == e->local[2 + d] + hd.halo[d][0] + hd.halo[d][1];
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

static void describe_box(const struct sg_sharded_exchange *e, sg_tensor *t, void *data) {
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

static int local_matches(const struct sg_sharded_exchange *e, const sg_tensor *x) {
  if (!x || x->ndim != e->ndim || x->dtype != e->dtype) return 0;
  for (int d = 0; d < e->ndim; ++d)
    if (x->shape[d] != e->local[d]) return 0;
  return 1;
}

sg_status sg_sharded_exchange_forward(sg_sharded_exchange_t e, const sg_tensor *x,
                                      sg_tensor *box) {
  sg_status st = SG_OK;
  void *block = NULL, *data = NULL;
  if (box) memset(box, 0, sizeof *box);
  if (!e || !box) SG_RAISE(SG_ERR_INVALID_ARG, "exchange forward: NULL argument");
  if (!local_matches(e, x))
    SG_RAISE(SG_ERR_SHAPE, "exchange forward: the input is not this rank's block of the layout");
  const size_t es = sg_dtype_size(e->dtype);
  describe_box(e, box, NULL);
  const int64_t n = numel_of(box->shape, box->ndim);
  if (e->info.identity) {
    if (n > 0) {
      SG_TRY(sg_malloc(sg_device_host(), (size_t)n * es, &data));
      copy_box(es, x->ndim, x->shape, x->data, x->strides, data, box->strides, 0, e->dtype);
    }
    goto done;
  }
  SG_TRY(sg_calloc(sg_device_host(), (size_t)e->block_count * es, &block));
  if (n > 0)
    copy_box(es, x->ndim, x->shape, x->data, x->strides, (char *)block + (size_t)e->origin * es,
             e->ds, 0, e->dtype);
  SG_TRY(sg_halo_exchange(e->plan, block));
  if (n == 0) goto done;
  if (e->box_is_block) {
    data = block;
    block = NULL;
  } else {
    int64_t src = 0;
    for (int d = 0; d < e->info.nsp; ++d) src += e->box_start[d] * e->ds[2 + d];
    SG_TRY(sg_malloc(sg_device_host(), (size_t)n * es, &data));
    copy_box(es, box->ndim, box->shape, (char *)block + (size_t)src * es, e->ds, data,
             box->strides, 0, e->dtype);
  }
done:
  describe_box(e, box, data);
  data = NULL;
fail:
  sg_free(sg_device_host(), &block);
  sg_free(sg_device_host(), &data);
  return st;
}

sg_status sg_sharded_exchange_adjoint(sg_sharded_exchange_t e, void *dbox, const sg_tensor *dx) {
  sg_status st = SG_OK;
  void *block = NULL;
  sg_tensor bt;
  if (!e) SG_RAISE(SG_ERR_INVALID_ARG, "exchange adjoint: NULL exchange");
  if (!local_matches(e, dx))
    SG_RAISE(SG_ERR_SHAPE, "exchange adjoint: dx is not this rank's block of the layout");
  const size_t es = sg_dtype_size(e->dtype);
  describe_box(e, &bt, NULL);
  const int64_t n = numel_of(bt.shape, bt.ndim);
  if (n > 0 && !dbox) SG_RAISE(SG_ERR_INVALID_ARG, "exchange adjoint: dbox is NULL");
  if (e->info.identity) {
    if (n > 0) copy_box(es, dx->ndim, dx->shape, dbox, bt.strides, dx->data, dx->strides, 0, e->dtype);
    goto fail;
  }
  if (e->box_is_block && n > 0) {
    block = dbox;
  } else {
    int64_t dst = 0;
    for (int d = 0; d < e->info.nsp; ++d) dst += e->box_start[d] * e->ds[2 + d];
    SG_TRY(sg_calloc(sg_device_host(), (size_t)e->block_count * es, &block));
    if (n > 0)
      copy_box(es, bt.ndim, bt.shape, dbox, bt.strides, (char *)block + (size_t)dst * es, e->ds,
               1, e->dtype);
  }
  SG_TRY(sg_halo_adjoint(e->plan, block));
  if (n > 0)
    copy_box(es, dx->ndim, dx->shape, (char *)block + (size_t)e->origin * es, e->ds, dx->data,
             dx->strides, 0, e->dtype);
fail:
  if (block != dbox) sg_free(sg_device_host(), &block);
  return st;
}

/* ---- window ops: exchange, box ------------------------------------------------ */

static sg_status window_prepare(const sg_shardtensor *x, const sg_sharded_window *win,
                                const char *op, sg_sharded_ctx_t c, int64_t *out_global,
                                int64_t *out_local) {
  sg_status st = SG_OK;
  sg_exchange_dim xd[SG_OPS_MAX_SPATIAL];
  sg_tensor box;
  layout l;
  SG_TRY(analyze(x, op, &l));
  if (!win || win->nsp != x->ndim - 2)
    SG_RAISE(SG_ERR_SHAPE, "%s: window for %d spatial dims, input has %d", op,
             win ? win->nsp : -1, x->ndim - 2);
  c->nsp = win->nsp;
  for (int d = 0; d < win->nsp; ++d) {
    sg_exchange_dim e = {.kernel = win->w[d].kernel, .stride = win->w[d].stride,
                         .dilation = win->w[d].dilation,
                         .pad = {win->w[d].padding, win->w[d].padding},
                         .up = 1, .boundary = win->boundary[d]};
    xd[d] = e;
  }
  SG_TRY(sg_sharded_exchange_create(x->mesh, x->local.dtype, x->ndim, x->global_shape,
                                    x->placements, xd, &c->ex));
  sg_sharded_exchange_get_info(c->ex, &c->xi);
  for (int d = 0; d < win->nsp; ++d) {
    out_global[d] = c->xi.out_global[d];
    out_local[d] = c->xi.out_local[d];
  }
  sg_tensor in = sg_shardtensor_interior(x);
  SG_TRY(sg_sharded_exchange_forward(c->ex, &in, &box));
  c->xin = box.data;
fail:
  return st;
}

/* dxin (box layout; consumed) -> dx: the adjoint exchange. */
/* The upstream gradient of a context's backward: on the context's mesh, in
 * its dtype (a gradient of another dtype would be read as this one). From
 * global information, so every rank finds the same. */
static sg_status grad_check(const sg_sharded_ctx_t c, const sg_shardtensor *dy, const char *op) {
  sg_status st = SG_OK;
  if (!dy || !dy->mesh) SG_RAISE(SG_ERR_INVALID_ARG, "%s backward: dy is NULL or not created", op);
  if (dy->mesh != c->mesh)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s backward: dy is on another mesh than the forward", op);
  if (dy->local.dtype != c->dtype)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s backward: dy is %s, the forward ran in %s", op,
             sg_dtype_name(dy->local.dtype), sg_dtype_name(c->dtype));
fail:
  return st;
}

static sg_status window_finish_grad(sg_sharded_ctx_t c, const sg_shardtensor *like, void *dxin,
                                    sg_shardtensor *dx) {
  sg_status st = SG_OK;
  SG_TRY(make_like(like, like->global_shape, dx));
  sg_tensor out = sg_shardtensor_interior(dx);
  SG_TRY(sg_sharded_exchange_adjoint(c->ex, dxin, &out));
fail:
  return st;
}

/* The end of a forward that makes a context: the ranks agree on the outcome
 * over `mesh` (none when NULL); on failure the context and y (when given)
 * are freed; *ctx (when given) receives the context or NULL. */
static sg_status forward_end(sg_status st, sg_mesh_t mesh, sg_sharded_ctx_t c, sg_shardtensor *y,
                             sg_sharded_ctx_t *ctx) {
  if (mesh) st = sg_agree(sg_mesh_comm(mesh), st);
  if (st != SG_OK) {
    sg_sharded_ctx_destroy(&c);
    if (y) sg_shardtensor_destroy(y);
  }
  if (ctx) *ctx = c;
  return st;
}

/* The local input of a window op's backward, dx in the box layout of the
 * exchange (uninitialised). */
static sg_status box_grad_alloc(const sg_sharded_ctx_t c, const sg_shardtensor *like, void **dxin) {
  int64_t shape[SG_TENSOR_MAX_DIMS] = {like->local_shape[0], like->local_shape[1]};
  for (int d = 0; d < c->nsp; ++d) shape[2 + d] = c->xi.box[d];
  return sg_malloc(sg_device_host(), (size_t)numel_of(shape, c->ndim) * sg_dtype_size(c->dtype),
                   dxin);
}

/* The local descriptor of a conv (cout >= 1) or pool (cout 0: as many as
 * cin) over the input box of the exchange. */
static void window_desc(sg_sharded_ctx_t c, const sg_shardtensor *x, const sg_sharded_window *win,
                        int64_t cout) {
  memset(&c->cd, 0, sizeof c->cd);
  c->cd.nsp = c->nsp;
  c->cd.batch = x->local_shape[0];
  c->cd.cin = x->local_shape[1];
  c->cd.cout = cout > 0 ? cout : x->local_shape[1];
  for (int d = 0; d < c->nsp; ++d) {
    c->cd.in[d] = c->xi.box[d];
    c->cd.kernel[d] = win->w[d].kernel;
    c->cd.stride[d] = win->w[d].stride;
    c->cd.dilation[d] = win->w[d].dilation;
  }
}

/* A ShardTensor-shaped description of the input (mesh, dtype, shapes,
 * placements; no data), for the backward: make_like creates the input's
 * gradient from it, so it carries the input's dtype (it once did not, and
 * every f64 gradient was created in f32: issue 20). */
static sg_shardtensor input_like(const sg_sharded_ctx_t c) {
  sg_shardtensor x;
  memset(&x, 0, sizeof x);
  x.mesh = c->mesh;
  x.local.dtype = c->dtype;
  x.ndim = c->ndim;
  memcpy(x.global_shape, c->global, sizeof x.global_shape);
  memcpy(x.placements, c->placements, sizeof x.placements);
  sg_shardtensor_box(c->mesh, c->ndim, c->global, c->placements, sg_mesh_rank(c->mesh),
                     x.local_offset, x.local_shape);
  return x;
}


sg_status sg_sharded_conv_forward(const sg_shardtensor *x, const sg_sharded_window *win,
                                  int64_t cout, const void *w, const void *b,
                                  sg_shardtensor *y, sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  int64_t og[SG_OPS_MAX_SPATIAL], ol[SG_OPS_MAX_SPATIAL];
  if (y) memset(y, 0, sizeof *y);
  SG_TRY(ctx_new(x, CTX_CONV, &c));
  SG_TRY(window_prepare(x, win, "conv", c, og, ol));
  if (cout < 1 || !w) SG_RAISE(SG_ERR_INVALID_ARG, "conv: cout %lld, weight %p", (long long)cout, w);
  window_desc(c, x, win, cout);
  int64_t gshape[SG_TENSOR_MAX_DIMS] = {x->global_shape[0], cout};
  for (int d = 0; d < c->nsp; ++d) gshape[2 + d] = og[d];
  SG_TRY(make_like(x, gshape, y));
  for (int d = 0; d < c->nsp; ++d)
    if (y->local_shape[2 + d] != ol[d])
      SG_RAISE(SG_ERR_INTERNAL, "conv: output shard %lld vs window partition %lld",
               (long long)y->local_shape[2 + d], (long long)ol[d]);
  SG_TRY(sg_conv_forward(&c->cd, c->dtype, c->xin, w, b, interior_ptr(y), NULL));
fail:
  return forward_end(st, x && x->mesh && c ? x->mesh : NULL, c, y, ctx);
}

sg_status sg_sharded_conv_backward(sg_sharded_ctx_t c, const void *w, const sg_shardtensor *dy,
                                   sg_shardtensor *dx, void *dw, void *db) {
  sg_status st = SG_OK;
  void *dxin = NULL, *dy_own = NULL;
  const void *dyp = NULL;
  if (dx) memset(dx, 0, sizeof *dx);
  if (!c || c->kind != CTX_CONV) SG_RAISE(SG_ERR_INVALID_ARG, "conv backward: not a conv context");
  SG_TRY(grad_check(c, dy, "conv"));
  SG_TRY(interior_contig(dy, &dyp, &dy_own));
  sg_shardtensor like = input_like(c);
  if (dx) SG_TRY(box_grad_alloc(c, &like, &dxin));
  SG_TRY(sg_conv_backward(&c->cd, c->dtype, c->xin, w, dyp, dxin, dw, db, NULL));
  if (dx) SG_TRY(window_finish_grad(c, &like, dxin, dx));
fail:
  sg_free(sg_device_host(), &dy_own);
  sg_free(sg_device_host(), &dxin);
  if (c) st = sg_agree(sg_mesh_comm(c->mesh), st);
  return st;
}

sg_status sg_sharded_pool_forward(sg_pool_kind kind, const sg_shardtensor *x,
                                  const sg_sharded_window *win, sg_shardtensor *y,
                                  sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  int64_t og[SG_OPS_MAX_SPATIAL], ol[SG_OPS_MAX_SPATIAL];
  if (y) memset(y, 0, sizeof *y);
  SG_TRY(ctx_new(x, CTX_POOL, &c));
  SG_TRY(window_prepare(x, win, "pool", c, og, ol));
  c->pool = kind;
  window_desc(c, x, win, 0);
  int64_t gshape[SG_TENSOR_MAX_DIMS] = {x->global_shape[0], x->global_shape[1]};
  for (int d = 0; d < c->nsp; ++d) gshape[2 + d] = og[d];
  if (kind == SG_POOL_MAX)
    SG_TRY(sg_pad_fill_outside(c->dtype, c->nsp, x->local_shape[0] * x->local_shape[1],
                               c->xi.box, c->xi.box_origin, x->global_shape + 2, win->boundary,
                               -INFINITY, c->xin));
  SG_TRY(make_like(x, gshape, y));
  SG_TRY(sg_pool_forward(kind, &c->cd, c->dtype, c->xin, interior_ptr(y)));
fail:
  return forward_end(st, x && x->mesh && c ? x->mesh : NULL, c, y, ctx);
}

sg_status sg_sharded_pool_backward(sg_sharded_ctx_t c, const sg_shardtensor *dy,
                                   sg_shardtensor *dx) {
  sg_status st = SG_OK;
  void *dxin = NULL, *dy_own = NULL;
  const void *dyp = NULL;
  if (dx) memset(dx, 0, sizeof *dx);
  if (!c || c->kind != CTX_POOL) SG_RAISE(SG_ERR_INVALID_ARG, "pool backward: not a pool context");
  if (!dy || !dx) SG_RAISE(SG_ERR_INVALID_ARG, "pool backward: dy and dx are required");
  SG_TRY(grad_check(c, dy, "pool"));
  SG_TRY(interior_contig(dy, &dyp, &dy_own));
  sg_shardtensor like = input_like(c);
  SG_TRY(box_grad_alloc(c, &like, &dxin));
  SG_TRY(sg_pool_backward(c->pool, &c->cd, c->dtype, c->xin, dyp, dxin));
  SG_TRY(window_finish_grad(c, &like, dxin, dx));
fail:
  sg_free(sg_device_host(), &dxin);
  sg_free(sg_device_host(), &dy_own);
  if (c) st = sg_agree(sg_mesh_comm(c->mesh), st);
  return st;
}

/* ---- up-sampling and transposed convolution (output = scale x input) ----------- */

/* Every sharded spatial extent must split evenly, so that scale x the input
 * shard is the balanced output shard. */
static sg_status check_even(const sg_shardtensor *x, const layout *l, const char *op) {
  sg_status st = SG_OK;
  for (int d = 0; d < x->ndim - 2; ++d) {
    int m = l->space_dim[d];
    if (m < 0) continue;
    int p = sg_mesh_dim_size(x->mesh, m);
    if (x->global_shape[2 + d] % p)
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "%s: spatial dim %d of extent %lld does not split evenly over %d ranks "
               "(the scaled shards would not be the balanced split of the output)",
               op, d, (long long)x->global_shape[2 + d], p);
  }
fail:
  return st;
}

sg_status sg_sharded_upsample_forward(sg_upsample_kind kind, const sg_shardtensor *x,
                                      const int64_t *scale, sg_shardtensor *y,
                                      sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  layout l;
  if (y) memset(y, 0, sizeof *y);
  SG_TRY(analyze(x, "upsample", &l));
  SG_TRY(check_even(x, &l, "upsample"));
  if (!scale) SG_RAISE(SG_ERR_INVALID_ARG, "upsample: scale is NULL");
  SG_TRY(ctx_new(x, CTX_UP, &c));
  c->up = kind;
  c->nsp = x->ndim - 2;
  int64_t gshape[SG_TENSOR_MAX_DIMS] = {x->global_shape[0], x->global_shape[1]};
  for (int d = 0; d < c->nsp; ++d) {
    if (scale[d] < 1) SG_RAISE(SG_ERR_INVALID_ARG, "upsample: scale %lld", (long long)scale[d]);
    c->scale[d] = scale[d];
    gshape[2 + d] = scale[d] * x->global_shape[2 + d];
  }
  int64_t in[SG_OPS_MAX_SPATIAL];
  if (kind == SG_UPSAMPLE_LINEAR) {
    sg_sharded_window win;
    memset(&win, 0, sizeof win);
    win.nsp = c->nsp;
    for (int d = 0; d < c->nsp; ++d) {
      sg_window w1 = {.kernel = 3, .stride = 1, .padding = 1, .dilation = 1};
      win.w[d] = w1;
      win.boundary[d] = SG_BOUNDARY_REPLICATE;
    }
    int64_t og[SG_OPS_MAX_SPATIAL], ol[SG_OPS_MAX_SPATIAL];
    SG_TRY(window_prepare(x, &win, "upsample", c, og, ol));
    for (int d = 0; d < c->nsp; ++d) in[d] = c->xi.box[d];
  } else {
    SG_TRY(interior_contig(x, (const void **)&c->x, &c->x_own));
    for (int d = 0; d < c->nsp; ++d) in[d] = x->local_shape[2 + d];
  }
  SG_TRY(make_like(x, gshape, y));
  SG_TRY(sg_upsample_forward(kind, c->nsp, x->local_shape[0] * x->local_shape[1], in, c->scale,
                             c->dtype, kind == SG_UPSAMPLE_LINEAR ? c->xin : c->x,
                             interior_ptr(y)));
fail:
  return forward_end(st, x && x->mesh ? x->mesh : NULL, c, y, ctx);
}

sg_status sg_sharded_upsample_backward(sg_sharded_ctx_t c, const sg_shardtensor *dy,
                                       sg_shardtensor *dx) {
  sg_status st = SG_OK;
  void *dxin = NULL, *own = NULL;
  const void *dyp = NULL;
  if (dx) memset(dx, 0, sizeof *dx);
  if (!c || c->kind != CTX_UP) SG_RAISE(SG_ERR_INVALID_ARG, "upsample backward: not an upsample context");
  if (!dy || !dx) SG_RAISE(SG_ERR_INVALID_ARG, "upsample backward: dy and dx are required");
  SG_TRY(grad_check(c, dy, "upsample"));
  SG_TRY(interior_contig(dy, &dyp, &own));
  sg_shardtensor like = input_like(c);
  int64_t in[SG_OPS_MAX_SPATIAL], planes = like.local_shape[0] * like.local_shape[1];
  if (c->up == SG_UPSAMPLE_LINEAR) {
    for (int d = 0; d < c->nsp; ++d) in[d] = c->xi.box[d];
    SG_TRY(box_grad_alloc(c, &like, &dxin));
    SG_TRY(sg_upsample_backward(c->up, c->nsp, planes, in, c->scale, c->dtype, dyp, dxin));
    SG_TRY(window_finish_grad(c, &like, dxin, dx));
  } else {
    for (int d = 0; d < c->nsp; ++d) in[d] = like.local_shape[2 + d];
    SG_TRY(make_like(&like, c->global, dx));
    SG_TRY(sg_upsample_backward(c->up, c->nsp, planes, in, c->scale, c->dtype, dyp,
                                interior_ptr(dx)));
  }
fail:
  sg_free(sg_device_host(), &dxin);
  sg_free(sg_device_host(), &own);
  if (c) st = sg_agree(sg_mesh_comm(c->mesh), st);
  return st;
}

sg_status sg_sharded_convt_forward(const sg_shardtensor *x, const int64_t *kernel, int64_t cout,
                                   const void *w, const void *b, sg_shardtensor *y,
                                   sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  layout l;
  if (y) memset(y, 0, sizeof *y);
  SG_TRY(analyze(x, "convt", &l));
  SG_TRY(check_even(x, &l, "convt"));
  if (!kernel || !w || cout < 1) SG_RAISE(SG_ERR_INVALID_ARG, "convt: kernel, weight and cout");
  SG_TRY(ctx_new(x, CTX_CONVT, &c));
  c->nsp = x->ndim - 2;
  SG_TRY(interior_contig(x, (const void **)&c->x, &c->x_own));
  memset(&c->cd, 0, sizeof c->cd);
  c->cd.nsp = c->nsp;
  c->cd.batch = x->local_shape[0];
  c->cd.cin = x->local_shape[1];
  c->cd.cout = cout;
  int64_t gshape[SG_TENSOR_MAX_DIMS] = {x->global_shape[0], cout};
  for (int d = 0; d < c->nsp; ++d) {
    c->cd.in[d] = x->local_shape[2 + d];
    c->cd.kernel[d] = c->cd.stride[d] = kernel[d];
    c->cd.dilation[d] = 1;
    gshape[2 + d] = kernel[d] * x->global_shape[2 + d];
  }
  SG_TRY(make_like(x, gshape, y));
  if (c->cd.batch > 0) SG_TRY(sg_convt_forward(&c->cd, c->dtype, c->x, w, b, interior_ptr(y)));
fail:
  return forward_end(st, x && x->mesh ? x->mesh : NULL, c, y, ctx);
}

sg_status sg_sharded_convt_backward(sg_sharded_ctx_t c, const void *w, const sg_shardtensor *dy,
                                    sg_shardtensor *dx, void *dw, void *db) {
  sg_status st = SG_OK;
  void *own = NULL;
  const void *dyp = NULL;
  if (dx) memset(dx, 0, sizeof *dx);
  if (!c || c->kind != CTX_CONVT) SG_RAISE(SG_ERR_INVALID_ARG, "convt backward: not a convt context");
  SG_TRY(grad_check(c, dy, "convt"));
  SG_TRY(interior_contig(dy, &dyp, &own));
  sg_shardtensor like = input_like(c);
  if (dx) SG_TRY(make_like(&like, c->global, dx));
  if (c->cd.batch > 0)
    SG_TRY(sg_convt_backward(&c->cd, c->dtype, c->x, w, dyp, dx ? interior_ptr(dx) : NULL, dw, db));
fail:
  sg_free(sg_device_host(), &own);
  if (c) st = sg_agree(sg_mesh_comm(c->mesh), st);
  return st;
}

/* ---- channel-wise linear, bias ------------------------------------------------------ */

sg_status sg_sharded_linear_forward(const sg_shardtensor *x, int64_t cout, const void *w,
                                    const void *b, sg_shardtensor *y) {
  sg_status st = SG_OK;
  const void *xp = NULL;
  void *own = NULL;
  layout l;
  if (y) memset(y, 0, sizeof *y);
  SG_TRY(analyze(x, "linear", &l));
  if (cout < 1 || !w) SG_RAISE(SG_ERR_INVALID_ARG, "linear: cout %lld, weight %p", (long long)cout, w);
  SG_TRY(interior_contig(x, &xp, &own));
  int64_t gshape[SG_TENSOR_MAX_DIMS];
  memcpy(gshape, x->global_shape, sizeof gshape);
  gshape[1] = cout;
  SG_TRY(make_like(x, gshape, y));
  SG_TRY(sg_linear_forward(x->local.dtype, x->local_shape[0], x->local_shape[1], cout,
                           numel_of(x->local_shape + 2, x->ndim - 2), xp, w, b, interior_ptr(y)));
fail:
  sg_free(sg_device_host(), &own);
  return st;
}

sg_status sg_sharded_linear_backward(const sg_shardtensor *x, const void *w,
                                     const sg_shardtensor *dy, sg_shardtensor *dx, void *dw,
                                     void *db) {
  sg_status st = SG_OK;
  const void *xp = NULL, *dyp = NULL;
  void *o1 = NULL, *o2 = NULL;
  layout l;
  if (dx) memset(dx, 0, sizeof *dx);
  SG_TRY(analyze(x, "linear backward", &l));
  if (!dy || dy->ndim != x->ndim || dy->local_shape[0] != x->local_shape[0] ||
      dy->local.dtype != x->local.dtype)
    SG_RAISE(SG_ERR_SHAPE, "linear backward: dy does not match x (shape or dtype)");
  SG_TRY(interior_contig(x, &xp, &o1));
  SG_TRY(interior_contig(dy, &dyp, &o2));
  if (dx) SG_TRY(make_like(x, x->global_shape, dx));
  SG_TRY(sg_linear_backward(x->local.dtype, x->local_shape[0], x->local_shape[1],
                            dy->local_shape[1], numel_of(x->local_shape + 2, x->ndim - 2), xp, w,
                            dyp, dx ? interior_ptr(dx) : NULL, dw, db));
fail:
  sg_free(sg_device_host(), &o1);
  sg_free(sg_device_host(), &o2);
  return st;
}

sg_status sg_sharded_bias_forward(const sg_shardtensor *x, const void *b, sg_shardtensor *y) {
  sg_status st = SG_OK;
  const void *xp = NULL;
  void *own = NULL;
  layout l;
  if (y) memset(y, 0, sizeof *y);
  SG_TRY(analyze(x, "bias", &l));
  SG_TRY(interior_contig(x, &xp, &own));
  SG_TRY(make_like(x, x->global_shape, y));
  SG_TRY(sg_bias_forward(x->local.dtype, x->local_shape[0], x->local_shape[1],
                         numel_of(x->local_shape + 2, x->ndim - 2), xp, b, interior_ptr(y)));
fail:
  sg_free(sg_device_host(), &own);
  return st;
}

sg_status sg_sharded_bias_backward(const sg_shardtensor *dy, void *db) {
  sg_status st = SG_OK;
  const void *dyp = NULL;
  void *own = NULL;
  layout l;
  SG_TRY(analyze(dy, "bias backward", &l));
  SG_TRY(interior_contig(dy, &dyp, &own));
  SG_TRY(sg_bias_backward(dy->local.dtype, dy->local_shape[0], dy->local_shape[1],
                          numel_of(dy->local_shape + 2, dy->ndim - 2), dyp, db));
fail:
  sg_free(sg_device_host(), &own);
  return st;
}

/* ---- pointwise ------------------------------------------------------------------ */

sg_status sg_sharded_act_forward(sg_act act, const sg_shardtensor *x, sg_shardtensor *y) {
  sg_status st = SG_OK;
  const void *xp = NULL;
  void *own = NULL;
  layout l;
  if (y) memset(y, 0, sizeof *y);
  SG_TRY(analyze(x, "act", &l));
  SG_TRY(interior_contig(x, &xp, &own));
  SG_TRY(make_like(x, x->global_shape, y));
  SG_TRY(sg_act_forward(act, x->local.dtype, numel_of(x->local_shape, x->ndim), xp,
                        interior_ptr(y)));
fail:
  sg_free(sg_device_host(), &own);
  return st;
}

sg_status sg_sharded_act_backward(sg_act act, const sg_shardtensor *x, const sg_shardtensor *dy,
                                  sg_shardtensor *dx) {
  sg_status st = SG_OK;
  const void *xp = NULL, *dyp = NULL;
  void *own = NULL, *own2 = NULL;
  layout l;
  if (dx) memset(dx, 0, sizeof *dx);
  SG_TRY(analyze(x, "act backward", &l));
  if (!dy || !same_layout(x, dy))
    SG_RAISE(SG_ERR_SHAPE, "act backward: dy is not placed and shaped like x");
  SG_TRY(interior_contig(x, &xp, &own));
  SG_TRY(interior_contig(dy, &dyp, &own2));
  SG_TRY(make_like(x, x->global_shape, dx));
  SG_TRY(sg_act_backward(act, x->local.dtype, numel_of(x->local_shape, x->ndim), xp, dyp,
                         interior_ptr(dx)));
fail:
  sg_free(sg_device_host(), &own);
  sg_free(sg_device_host(), &own2);
  return st;
}

sg_status sg_sharded_binary_forward(sg_binary op, const sg_shardtensor *a,
                                    const sg_shardtensor *b, sg_shardtensor *y) {
  sg_status st = SG_OK;
  const void *ap = NULL, *bp = NULL;
  void *o1 = NULL, *o2 = NULL;
  layout l;
  if (y) memset(y, 0, sizeof *y);
  SG_TRY(analyze(a, "binary", &l));
  if (!b || !same_layout(a, b)) SG_RAISE(SG_ERR_SHAPE, "binary: operands placed or shaped differently");
  SG_TRY(interior_contig(a, &ap, &o1));
  SG_TRY(interior_contig(b, &bp, &o2));
  SG_TRY(make_like(a, a->global_shape, y));
  SG_TRY(sg_binary_forward(op, a->local.dtype, numel_of(a->local_shape, a->ndim), ap, bp,
                           interior_ptr(y)));
fail:
  sg_free(sg_device_host(), &o1);
  sg_free(sg_device_host(), &o2);
  return st;
}

sg_status sg_sharded_binary_backward(sg_binary op, const sg_shardtensor *a,
                                     const sg_shardtensor *b, const sg_shardtensor *dy,
                                     sg_shardtensor *da, sg_shardtensor *db) {
  sg_status st = SG_OK;
  const void *ap = NULL, *bp = NULL, *dyp = NULL;
  void *o1 = NULL, *o2 = NULL, *o3 = NULL;
  layout l;
  if (da) memset(da, 0, sizeof *da);
  if (db) memset(db, 0, sizeof *db);
  SG_TRY(analyze(a, "binary backward", &l));
  if (!b || !dy || !same_layout(a, b) || !same_layout(a, dy))
    SG_RAISE(SG_ERR_SHAPE, "binary backward: operands placed or shaped differently");
  SG_TRY(interior_contig(a, &ap, &o1));
  SG_TRY(interior_contig(b, &bp, &o2));
  SG_TRY(interior_contig(dy, &dyp, &o3));
  if (da) SG_TRY(make_like(a, a->global_shape, da));
  if (db) SG_TRY(make_like(a, a->global_shape, db));
  SG_TRY(sg_binary_backward(op, a->local.dtype, numel_of(a->local_shape, a->ndim), ap, bp, dyp,
                            da ? interior_ptr(da) : NULL, db ? interior_ptr(db) : NULL));
fail:
  sg_free(sg_device_host(), &o1);
  sg_free(sg_device_host(), &o2);
  sg_free(sg_device_host(), &o3);
  return st;
}

/* ---- normalisation ---------------------------------------------------------------- */

sg_status sg_sharded_norm_forward(const sg_norm_desc *d, const sg_shardtensor *x,
                                  const void *gamma, const void *beta, sg_shardtensor *y,
                                  sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  layout l;
  if (y) memset(y, 0, sizeof *y);
  if (!d) SG_RAISE(SG_ERR_INVALID_ARG, "norm: descriptor is NULL");
  SG_TRY(analyze(x, "norm", &l));
  SG_TRY(ctx_new(x, CTX_NORM, &c));
  c->nd = *d;
  c->nd.batch = x->local_shape[0];
  c->nd.channels = x->local_shape[1];
  c->nd.spatial = numel_of(x->local_shape + 2, x->ndim - 2);
  SG_TRY(sg_norm_nstat(&c->nd, &c->nstat));
  SG_TRY(interior_contig(x, &c->x, &c->x_own));
  c->stats = calloc((size_t)(c->nstat > 0 ? c->nstat : 1), sizeof *c->stats);
  if (!c->stats) SG_RAISE(SG_ERR_ALLOC, "norm statistics");
  SG_TRY(sg_norm_stats(&c->nd, c->dtype, c->x, c->stats));
  unsigned mask = d->kind == SG_NORM_BATCH ? (l.batch_mask | l.space_mask)
                  : d->kind == SG_NORM_LAYER ? 0u : l.space_mask;
  if (mask) {
    sg_group_t g;
    SG_TRY(sg_mesh_group(x->mesh, mask, &g));
    c->comm = sg_group_comm(g);
    SG_TRY(sg_norm_stats_allreduce(c->stats, c->nstat, c->comm));
  }
  SG_TRY(make_like(x, x->global_shape, y));
  SG_TRY(sg_norm_forward(&c->nd, c->dtype, c->x, c->stats, gamma, beta, interior_ptr(y)));
fail:
  return forward_end(st, x && x->mesh ? x->mesh : NULL, c, y, ctx);
}

sg_status sg_sharded_norm_backward(sg_sharded_ctx_t c, const void *gamma,
                                   const sg_shardtensor *dy, sg_shardtensor *dx, void *dgamma,
                                   void *dbeta) {
  sg_status st = SG_OK;
  double *sums = NULL;
  const void *dyp = NULL;
  void *own = NULL;
  if (dx) memset(dx, 0, sizeof *dx);
  if (!c || c->kind != CTX_NORM) SG_RAISE(SG_ERR_INVALID_ARG, "norm backward: not a norm context");
  if (!dy || !dx) SG_RAISE(SG_ERR_INVALID_ARG, "norm backward: dy and dx are required");
  SG_TRY(grad_check(c, dy, "norm"));
  SG_TRY(interior_contig(dy, &dyp, &own));
  sums = calloc((size_t)(2 * c->nstat + 1), sizeof *sums);
  if (!sums) SG_RAISE(SG_ERR_ALLOC, "norm sums");
  SG_TRY(sg_norm_backward_sums(&c->nd, c->dtype, c->x, c->stats, gamma, dyp, sums));
  if (c->comm != MPI_COMM_NULL) SG_TRY(sg_sum_allreduce(sums, 2 * c->nstat, c->comm));
  sg_shardtensor like = input_like(c);
  SG_TRY(make_like(&like, c->global, dx));
  SG_TRY(sg_norm_backward(&c->nd, c->dtype, c->x, c->stats, gamma, dyp, sums, interior_ptr(dx),
                          dgamma, dbeta));
fail:
  free(sums);
  sg_free(sg_device_host(), &own);
  if (c) st = sg_agree(sg_mesh_comm(c->mesh), st);
  return st;
}

/* ---- losses ------------------------------------------------------------------------- */

sg_status sg_sharded_loss_reduce(sg_mesh_t mesh, sg_loss_kind kind, unsigned space,
                                 unsigned batch, int64_t local_batch, int64_t global_batch,
                                 double *partial, double *value, double *grad_scale) {
  sg_status st = SG_OK;
  sg_group_t g;
  if (!mesh || !partial || !value || !grad_scale)
    SG_RAISE(SG_ERR_INVALID_ARG, "loss reduce: NULL argument");
  *grad_scale = 1.0;
  if (kind != SG_LOSS_REL_L2) {
    SG_TRY(sg_mesh_group(mesh, space | batch, &g));
    SG_TRY(sg_sum_allreduce(partial, sg_loss_npartial(kind, local_batch), sg_group_comm(g)));
    SG_TRY(sg_loss_finish(kind, 1, partial, value));
  } else {
    if (global_batch < 1) SG_RAISE(SG_ERR_SHAPE, "loss reduce: empty global batch");
    SG_TRY(sg_mesh_group(mesh, space, &g));
    SG_TRY(sg_sum_allreduce(partial, sg_loss_npartial(kind, local_batch), sg_group_comm(g)));
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

sg_status sg_sharded_loss_forward(sg_loss_kind kind, const sg_shardtensor *p,
                                  const sg_shardtensor *t, double *value, sg_sharded_ctx_t *ctx) {
  sg_status st = SG_OK;
  sg_sharded_ctx_t c = NULL;
  layout l;
  if (!value) SG_RAISE(SG_ERR_INVALID_ARG, "loss: value is NULL");
  SG_TRY(analyze(p, "loss", &l));
  int needs_t = kind == SG_LOSS_MSE || kind == SG_LOSS_REL_L2;
  if (needs_t && (!t || !same_layout(p, t)))
    SG_RAISE(SG_ERR_SHAPE, "loss: target missing, or placed or shaped unlike the prediction");
  SG_TRY(ctx_new(p, CTX_LOSS, &c));
  c->loss = kind;
  c->local_batch = p->local_shape[0];
  c->global_batch = p->global_shape[0];
  c->local_n = numel_of(p->local_shape, p->ndim);
  SG_TRY(interior_contig(p, &c->p, &c->p_own));
  if (needs_t) SG_TRY(interior_contig(t, &c->t, &c->t_own));
  c->npartial = sg_loss_npartial(kind, c->local_batch);
  c->partial = calloc((size_t)(c->npartial + 1), sizeof *c->partial);
  if (!c->partial) SG_RAISE(SG_ERR_ALLOC, "loss partials");
  if (c->local_batch > 0)
    SG_TRY(sg_loss_partial(kind, c->dtype, c->local_batch, c->local_n, c->p, c->t, c->partial));
  SG_TRY(sg_sharded_loss_reduce(p->mesh, kind, l.space_mask, l.batch_mask, c->local_batch,
                                c->global_batch, c->partial, value, &c->grad_scale));
fail:
  return forward_end(st, p && p->mesh ? p->mesh : NULL, c, NULL, ctx);
}

sg_status sg_sharded_loss_backward(sg_sharded_ctx_t c, double g, sg_shardtensor *dp,
                                   sg_shardtensor *dt) {
  sg_status st = SG_OK;
  if (dp) memset(dp, 0, sizeof *dp);
  if (dt) memset(dt, 0, sizeof *dt);
  if (!c || c->kind != CTX_LOSS) SG_RAISE(SG_ERR_INVALID_ARG, "loss backward: not a loss context");
  if (!dp) SG_RAISE(SG_ERR_INVALID_ARG, "loss backward: dp is required");
  sg_shardtensor like = input_like(c);
  SG_TRY(make_like(&like, c->global, dp));
  int needs_t = c->loss == SG_LOSS_MSE || c->loss == SG_LOSS_REL_L2;
  if (dt && needs_t) SG_TRY(make_like(&like, c->global, dt));
  double ge = g * c->grad_scale;
  if (c->local_batch > 0 && c->local_n > 0)
    SG_TRY(sg_loss_backward(c->loss, c->dtype, c->local_batch, c->local_n, c->p, c->t,
                            c->partial, ge, interior_ptr(dp),
                            dt && needs_t ? interior_ptr(dt) : NULL));
fail:
  if (c) st = sg_agree(sg_mesh_comm(c->mesh), st);
  return st;
}
