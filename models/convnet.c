/* shardgrid — parameter table and domain of the convolutional models. */
#include "convnet_impl.h"

#include "sg_decomp.h"
#include "sg_rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sg_cn_params_add(sg_cn_params *p, const char *name, int ndim,
                     const int64_t *shape, sg_cn_init init, int64_t fan_in) {
  return sg_cn_params_add_slice(p, name, ndim, shape, NULL, init, fan_in);
}

int sg_cn_params_add_slice(sg_cn_params *p, const char *name, int ndim,
                           const int64_t *global, const sg_cn_slice *s,
                           sg_cn_init init, int64_t fan_in) {
  if (p->n >= SG_CN_MAX_PARAMS || ndim < 1 || ndim > 4) return -1;
  const int cut = s && s->dim >= 0 && s->dim < ndim;
  int i = p->n++;
  p->ndim[i] = ndim;
  p->count[i] = 1;
  p->shard[i] = cut ? s->mask : 0u;
  for (int d = 0; d < ndim; ++d) {
    p->global[i][d] = global[d];
    p->start[i][d] = cut && d == s->dim ? s->c0 : 0;
    p->shape[i][d] = cut && d == s->dim ? s->cl : global[d];
    p->count[i] *= p->shape[i][d];
  }
  p->init[i] = init;
  p->fan_in[i] = fan_in > 0 ? fan_in : 1;
  snprintf(p->name[i], sizeof p->name[i], "%s", name);
  p->offset[i] = p->total;
  p->total += p->count[i];
  return i;
}

int sg_cn_add_conv(sg_cn_params *p, const char *name, int64_t cout, int64_t cin,
                   int64_t k, const sg_cn_slice *s) {
  char nm[32];
  int64_t ws[4] = {cout, cin, k, k}, bs[1] = {cout};
  snprintf(nm, sizeof nm, "%s.w", name);
  int i = sg_cn_params_add_slice(p, nm, 4, ws, s, SG_CN_INIT_UNIFORM,
                                 cin * k * k);
  snprintf(nm, sizeof nm, "%s.b", name);
  /* a row-parallel conv's bias is added after the reduction: whole */
  const sg_cn_slice *sb = s && s->dim == 0 ? s : NULL;
  if (sg_cn_params_add_slice(p, nm, 1, bs, sb, SG_CN_INIT_UNIFORM,
                             cin * k * k) < 0)
    return -1;
  return i;
}

int sg_cn_add_linear(sg_cn_params *p, const char *name, int64_t cout,
                     int64_t cin) {
  char nm[32];
  int64_t ws[2] = {cout, cin}, bs[1] = {cout};
  snprintf(nm, sizeof nm, "%s.w", name);
  int i = sg_cn_params_add(p, nm, 2, ws, SG_CN_INIT_UNIFORM, cin);
  snprintf(nm, sizeof nm, "%s.b", name);
  if (sg_cn_params_add(p, nm, 1, bs, SG_CN_INIT_UNIFORM, cin) < 0) return -1;
  return i;
}

int sg_cn_add_norm(sg_cn_params *p, const char *name, int64_t c,
                   const sg_cn_slice *s) {
  char nm[32];
  int64_t sh[1] = {c};
  snprintf(nm, sizeof nm, "%s.gamma", name);
  int i = sg_cn_params_add_slice(p, nm, 1, sh, s, SG_CN_INIT_ONE, 1);
  snprintf(nm, sizeof nm, "%s.beta", name);
  if (sg_cn_params_add_slice(p, nm, 1, sh, s, SG_CN_INIT_ZERO, 1) < 0)
    return -1;
  return i;
}

sg_status sg_cn_params_bind(sg_cn_params *p, float *params, float *grads) {
  sg_status st = SG_OK;
  if (!params || !grads) SG_RAISE(SG_ERR_INVALID_ARG, "bind: NULL buffer");
  for (int i = 0; i < p->n; ++i) {
    sg_var_release(&p->vars[i]);
    SG_TRY(sg_var_init_param(&p->vars[i], p->name[i], SG_DTYPE_F32, p->ndim[i],
                             p->shape[i], params + p->offset[i],
                             grads + p->offset[i]));
    p->ptrs[i] = &p->vars[i];
  }
  p->bound = 1;
fail:
  return st;
}

sg_status sg_cn_params_init(sg_cn_params *p, uint64_t seed) {
  sg_status st = SG_OK;
  if (!p->bound)
    SG_RAISE(SG_ERR_INVALID_ARG, "init: model not bound to a buffer");
  for (int i = 0; i < p->n; ++i) {
    float *v = p->vars[i].value.data;
    if (p->init[i] == SG_CN_INIT_UNIFORM) {
      double hi = 1.0 / sqrt((double)p->fan_in[i]);
      /* a slice by global index (the whole array: the same values) */
      SG_TRY(sg_rng_fill_box(SG_RNG_UNIFORM, -hi, hi, seed,
                             p->stream + (uint64_t)i, p->ndim[i], p->global[i],
                             p->start[i], p->shape[i], SG_DTYPE_F32, v));
    } else {
      const float c = p->init[i] == SG_CN_INIT_ONE ? 1.0f : 0.0f;
      for (int64_t k = 0; k < p->count[i]; ++k) v[k] = c;
    }
  }
fail:
  return st;
}

int64_t sg_cn_params_offset(const sg_cn_params *p, const sg_var *v) {
  if (v < &p->vars[0] || v >= &p->vars[p->n]) return -1;
  return p->offset[v - &p->vars[0]];
}

void sg_cn_params_release(sg_cn_params *p) {
  for (int i = 0; i < p->n; ++i) sg_var_release(&p->vars[i]);
  p->bound = 0;
}

sg_status sg_cn_grid_init(sg_var *grid, float **data, int64_t batch, int64_t y0,
                          int64_t ny, int64_t x0, int64_t nx, int64_t ny_g,
                          int64_t nx_g, const char *who) {
  sg_status st = SG_OK;
  const int64_t n = batch * 2 * ny * nx, gshape[4] = {batch, 2, ny, nx};
  float *g = *data = malloc((size_t)(n > 0 ? n : 1) * sizeof *g);
  if (!g) SG_RAISE(SG_ERR_ALLOC, "%s: out of memory", who);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < ny; ++j)
      for (int64_t i = 0; i < nx; ++i) {
        g[((b * 2 + 0) * ny + j) * nx + i] = (float)((double)(x0 + i) /
                                                     (double)nx_g);
        g[((b * 2 + 1) * ny + j) * nx + i] = (float)((double)(y0 + j) /
                                                     (double)ny_g);
      }
  SG_TRY(sg_var_init(grid, "grid", SG_DTYPE_F32, 4, gshape, g, 0));
fail:
  return st;
}

int sg_cn_mesh_tp(sg_mesh_t mesh) {
  for (int k = 0; k < sg_mesh_ndims(mesh); ++k)
    if (!strcmp(sg_mesh_dim_name(mesh, k), "tp"))
      return sg_mesh_dim_size(mesh, k);
  return 1;
}

sg_status sg_cn_tp_group(sg_mesh_t mesh, sg_group_t *tp, int *tps, int *tpr,
                         unsigned *mask) {
  *tp = NULL, *tps = 1, *tpr = 0, *mask = 0u;
  for (int k = 0; k < sg_mesh_ndims(mesh); ++k)
    if (!strcmp(sg_mesh_dim_name(mesh, k), "tp")) {
      *tps = sg_mesh_dim_size(mesh, k), *tpr = sg_mesh_coord(mesh, k);
      *mask = 1u << k;
    }
  return *tps > 1 ? sg_mesh_group(mesh, *mask, tp) : SG_OK;
}

sg_status sg_cn_check_tp_groups(sg_mesh_t mesh, int64_t groups,
                                const char *who) {
  const int tp = sg_cn_mesh_tp(mesh);
  if (tp > 1 && groups < tp)
    return sg_error_set(
        SG_ERR_CONFIG, __FILE__, __LINE__,
        "%s: groups (%lld) must be >= tp (%d): tensor parallelism splits the "
        "channels of the blocks over the tp ranks by whole GroupNorm groups",
        who, (long long)groups, tp);
  return SG_OK;
}

sg_cn_slice sg_cn_tp_slice(const sg_cn_domain *d, int64_t c, int64_t groups,
                           int dim, int64_t *gl) {
  sg_cn_slice s = {.dim = -1, .c0 = 0, .cl = c, .mask = 0u};
  *gl = groups;
  if (d->tps <= 1) return s;
  const int64_t cpg = c / groups; /* groups divides c: checked */
  *gl = sg_split_size(groups, d->tps, d->tpr);
  s.dim = dim;
  s.c0 = sg_split_offset(groups, d->tps, d->tpr) * cpg;
  s.cl = *gl * cpg;
  s.mask = d->tp_mask;
  return s;
}

sg_status sg_cn_domain_init_tp(sg_cn_domain *d, sg_mesh_t mesh, int64_t ny,
                               int64_t nx, int64_t batch, int add_grid,
                               const char *who) {
  sg_status st = SG_OK;
  memset(d, 0, sizeof *d);
  d->mesh = mesh;
  d->ny_g = ny, d->nx_g = nx;
  d->batch = batch;
  d->add_grid = add_grid;
  d->nmesh = sg_mesh_ndims(mesh);
  d->tps = 1;
  if (d->nmesh > SG_CN_MAX_MESH_DIMS)
    SG_RAISE(SG_ERR_MESH, "%s: at most %d mesh dims", who, SG_CN_MAX_MESH_DIMS);
  int ph = 1, ch = 0, pw = 1, cw = 0, pd = 1;
  for (int k = 0; k < d->nmesh; ++k) {
    const char *nm = sg_mesh_dim_name(mesh, k);
    int sz = sg_mesh_dim_size(mesh, k);
    d->place[k] = sg_replicate();
    if (strcmp(nm, "h") == 0)
      ph = sz, ch = sg_mesh_coord(mesh, k), d->place[k] = sg_shard(2);
    else if (strcmp(nm, "w") == 0)
      pw = sz, cw = sg_mesh_coord(mesh, k), d->place[k] = sg_shard(3);
    else if (strcmp(nm, "dp") == 0 || strcmp(nm, "fsdp") == 0 ||
             strcmp(nm, "ep") == 0) /* ep: samples (the ViT's experts) */
      pd *= sz, d->place[k] = sg_shard(0);
    else if (strcmp(nm, "tp") == 0)
      d->tps = sz, d->tpr = sg_mesh_coord(mesh, k), d->tp_mask = 1u << k;
    else if (!strcmp(nm, "sp") || !strcmp(nm, "cp"))
      continue; /* the vit's (sg_model_sp_check): the data replicated */
    else if (sz > 1)
      SG_RAISE(SG_ERR_MESH,
               "%s: mesh dim '%s' (size %d) is not one of dp, fsdp, h, w, tp",
               who, nm, sz);
  }
  if (ph > ny || pw > nx)
    SG_RAISE(SG_ERR_SHAPE,
             "%s: a %lldx%lld grid cannot be split over h=%d, w=%d", who,
             (long long)ny, (long long)nx, ph, pw);
  d->split = ph > 1 || pw > 1;
  if (d->tps > 1) SG_TRY(sg_mesh_group(mesh, d->tp_mask, &d->tp));
  d->gbatch = batch * pd;
  d->y0 = sg_split_offset(ny, ph, ch);
  d->ny = sg_split_size(ny, ph, ch);
  d->x0 = sg_split_offset(nx, pw, cw);
  d->nx = sg_split_size(nx, pw, cw);
  if (add_grid) {
    SG_TRY(sg_cn_grid_init(&d->grid, &d->grid_data, batch, d->y0, d->ny, d->x0,
                           d->nx, ny, nx, who));
    SG_TRY(sg_cn_domain_mark(d, &d->grid, 2));
  }
fail:
  return st;
}

void sg_cn_domain_release(sg_cn_domain *d) {
  sg_var_release(&d->grid);
  free(d->grid_data);
  d->grid_data = NULL;
}

sg_status sg_cn_domain_check_input(const sg_cn_domain *d, const sg_var *x,
                                   int64_t cin, const char *who) {
  sg_status st = SG_OK;
  const sg_tensor *v = &x->value;
  if (v->ndim != 4 || v->shape[0] != d->batch || v->shape[1] != cin ||
      v->shape[2] != d->ny || v->shape[3] != d->nx)
    SG_RAISE(
        SG_ERR_SHAPE,
        "%s: input (%lld, %lld, %lld, %lld), model expects (%lld, %lld, %lld, %lld)",
        who, (long long)v->shape[0], (long long)(v->ndim > 1 ? v->shape[1] : 0),
        (long long)(v->ndim > 2 ? v->shape[2] : 0),
        (long long)(v->ndim > 3 ? v->shape[3] : 0), (long long)d->batch,
        (long long)cin, (long long)d->ny, (long long)d->nx);
fail:
  return st;
}

sg_status sg_cn_domain_mark(const sg_cn_domain *d, sg_var *x,
                            int64_t channels) {
  /* Only a split grid needs the sharded tape (halo exchanges, global
   * statistics); with samples alone split over dp every op is local. */
  if (!d->split || x == NULL) return SG_OK;
  const int64_t gshape[4] = {d->gbatch, channels, d->ny_g, d->nx_g};
  return sg_var_set_sharding(x, d->mesh, d->place, gshape);
}

void sg_cn_base_release(sg_cn_base *b) {
  sg_cn_params_release(&b->p);
  sg_cn_domain_release(&b->dom);
}

sg_status sg_cn_check_kernel_groups(const char *who, int64_t kernel,
                                    int64_t groups, int64_t width) {
  sg_status st = SG_OK;
  if (kernel < 1 || kernel % 2 == 0)
    SG_RAISE(SG_ERR_CONFIG, "%s: kernel must be odd (got %lld)", who,
             (long long)kernel);
  if (groups < 1 || width % groups)
    SG_RAISE(SG_ERR_CONFIG, "%s: groups (%lld) must divide width (%lld)", who,
             (long long)groups, (long long)width);
fail:
  return st;
}

sg_status sg_cn_base_mark(sg_cn_base *b, sg_var *v, const char *who) {
  sg_status st = SG_OK;
  if (!b || !v) SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL argument", who);
  SG_TRY(sg_cn_domain_check_input(
      &b->dom, v, v->value.ndim == 4 ? v->value.shape[1] : -1, who));
  SG_TRY(sg_cn_domain_mark(&b->dom, v, v->value.shape[1]));
fail:
  return st;
}

sg_status sg_cn_domain_input(sg_cn_domain *d, sg_tape_t t, sg_var *x,
                             sg_var **h) {
  sg_status st = SG_OK;
  SG_TRY(sg_cn_domain_mark(d, x, x->value.shape[1]));
  *h = x;
  if (d->add_grid) {
    sg_var *parts[2] = {x, &d->grid};
    SG_TRY(sg_ag_concat(t, 2, parts, h));
  }
fail:
  return st;
}

static void same_windows(const sg_var *w, const sg_pad_mode *mode,
                         sg_window *a) {
  memset(a, 0, 2 * sizeof *a);
  for (int i = 0; i < 2; ++i) {
    int64_t k = w->value.shape[2 + i];
    a[i].pad[0] = (k - 1) / 2;
    a[i].pad[1] = k - 1 - (k - 1) / 2;
    a[i].boundary = mode[i];
  }
}

sg_status sg_cn_conv_same(sg_tape_t t, sg_var *x, sg_var *w, sg_var *b,
                          const sg_pad_mode *mode, sg_var **y) {
  sg_window a[2];
  same_windows(w, mode, a);
  return sg_ag_conv(t, x, w, b, a, y);
}

sg_status sg_cn_conv_same_tp(sg_tape_t t, sg_group_t tp, int row, sg_var *x,
                             sg_var *w, sg_var *b, const sg_pad_mode *mode,
                             sg_var **y) {
  sg_window a[2];
  same_windows(w, mode, a);
  return sg_ag_conv_tp(t, tp, row, x, w, b, a, y);
}

/* ---- the shared part of the model table ---------------------------------- */

int64_t sg_cn_i_param_count(void *impl) {
  return ((sg_cn_base *)impl)->p.total;
}

sg_status sg_cn_i_param_info(void *impl, int i, sg_param_info *pi) {
  const sg_cn_params *p = &((sg_cn_base *)impl)->p;
  if (i < 0 || i >= p->n)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_model_param_info: bad parameter index %d", i);
  memset(pi, 0, sizeof *pi);
  pi->name = p->name[i];
  pi->ndim = p->ndim[i];
  for (int d = 0; d < pi->ndim; ++d)
    pi->global_shape[d] = p->global[i][d], pi->start[d] = p->start[i][d],
    pi->count[d] = p->shape[i][d];
  pi->shard_dims = p->shard[i];
  pi->offset = p->offset[i];
  pi->numel = p->count[i];
  return SG_OK;
}

sg_status sg_cn_i_bind(void *impl, float *params, float *grads) {
  return sg_cn_params_bind(&((sg_cn_base *)impl)->p, params, grads);
}

sg_status sg_cn_i_init(void *impl, uint64_t seed) {
  return sg_cn_params_init(&((sg_cn_base *)impl)->p, seed);
}

int sg_cn_i_params(void *impl, sg_var ***vars) {
  sg_cn_params *p = &((sg_cn_base *)impl)->p;
  *vars = p->ptrs;
  return p->n;
}

void sg_cn_i_box(void *impl, int64_t *y0, int64_t *ny, int64_t *x0,
                 int64_t *nx) {
  const sg_cn_domain *d = &((sg_cn_base *)impl)->dom;
  *y0 = d->y0, *ny = d->ny, *x0 = d->x0, *nx = d->nx;
}

int sg_cn_i_constants(void *impl, sg_var **out, int max) {
  sg_cn_domain *d = &((sg_cn_base *)impl)->dom;
  if (!d->add_grid || max < 1) return 0;
  out[0] = &d->grid;
  return 1;
}

sg_status sg_cn_i_mark(void *impl, sg_var *v) {
  return sg_cn_base_mark((sg_cn_base *)impl, v, "sg_model_mark");
}

void sg_cn_describe_tp(void *impl, char *buf, size_t size) {
  const sg_cn_base *b = impl;
  const size_t n = strlen(buf);
  if (b->dom.tps <= 1 || n >= size) return;
  long long ng = 0;
  for (int i = 0; i < b->p.n; ++i) {
    long long e = 1;
    for (int d = 0; d < b->p.ndim[i]; ++d) e *= (long long)b->p.global[i][d];
    ng += e;
  }
  snprintf(buf + n, size - n,
           " on this rank of %lld; tensor parallel over tp=%d (the blocks' "
           "channels split by whole GroupNorm groups)",
           ng, b->dom.tps);
}
