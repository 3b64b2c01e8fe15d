/* shardgrid — one interface over FNO, CNN and U-Net. */
#include "sg_model.h"

#include "cnn.h"
#include "convnet_impl.h"
#include "sg_decomp.h"
#include "sg_fno.h"
#include "unet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sg_model {
  sg_model_config cfg;
  sg_fno_t fno;
  sg_cnn_t cnn;
  sg_unet_t unet;
  sg_cn_base *cn; /* CNN / U-Net: parameter table and domain */
};

static const char *const kind_names[SG_MODEL_COUNT] = {"fno", "cnn", "unet"};

const char *sg_model_kind_name(sg_model_kind k) {
  return (unsigned)k < SG_MODEL_COUNT ? kind_names[k] : "invalid";
}

sg_status sg_model_kind_parse(const char *name, sg_model_kind *k) {
  for (int i = 0; i < SG_MODEL_COUNT; ++i)
    if (name && strcmp(name, kind_names[i]) == 0) {
      *k = (sg_model_kind)i;
      return SG_OK;
    }
  return sg_error_set(SG_ERR_CONFIG, __FILE__, __LINE__, "unknown model '%s' (choose fno, cnn or unet)",
                      name ? name : "(null)");
}

sg_model_config sg_model_defaults(sg_model_kind kind) {
  sg_model_config c;
  memset(&c, 0, sizeof c);
  sg_fno_config f = sg_fno_defaults();
  sg_cnn_config n = sg_cnn_defaults();
  sg_unet_config u = sg_unet_defaults();
  c.kind = kind;
  c.cin = c.cout = 1;
  c.width = kind == SG_MODEL_FNO ? f.width : kind == SG_MODEL_CNN ? n.width : u.width;
  c.proj_width = kind == SG_MODEL_FNO ? f.proj_width : n.proj_width;
  c.modes = f.modes1;
  c.layers = f.layers;
  c.blocks = n.blocks;
  c.levels = u.levels;
  c.kernel = n.kernel;
  c.groups = n.groups;
  c.add_grid = 1;
  c.act = SG_ACT_GELU;
  c.pad[0] = n.pad[0];
  c.pad[1] = n.pad[1];
  c.shard_spectral = f.shard_spectral;
  return c;
}

void sg_model_destroy(sg_model_t *model) {
  if (!model || !*model) return;
  struct sg_model *m = *model;
  sg_fno_destroy(&m->fno);
  sg_cnn_destroy(&m->cnn);
  sg_unet_destroy(&m->unet);
  free(m);
  *model = NULL;
}

sg_status sg_model_create(sg_mesh_t mesh, const sg_model_config *c, int64_t ny, int64_t nx, int64_t batch,
                          sg_model_t *out) {
  sg_status st = SG_OK;
  struct sg_model *m = NULL;
  if (!mesh || !c || !out) SG_RAISE(SG_ERR_INVALID_ARG, "sg_model_create: NULL argument");
  *out = NULL;
  m = calloc(1, sizeof *m);
  if (!m) SG_RAISE(SG_ERR_ALLOC, "sg_model_create: out of memory");
  m->cfg = *c;
  switch (c->kind) {
  case SG_MODEL_FNO: {
    sg_fno_config f = sg_fno_defaults();
    f.cin = c->cin, f.cout = c->cout, f.width = c->width;
    f.modes1 = f.modes2 = c->modes;
    f.layers = c->layers, f.proj_width = c->proj_width, f.add_grid = c->add_grid, f.act = c->act;
    f.shard_spectral = c->shard_spectral;
    SG_TRY(sg_fno_create(mesh, &f, ny, nx, batch, &m->fno));
    break;
  }
  case SG_MODEL_CNN: {
    sg_cnn_config n = {c->cin, c->cout, c->width, c->blocks, c->kernel, c->groups, c->proj_width,
                       c->add_grid, c->act, {c->pad[0], c->pad[1]}};
    SG_TRY(sg_cnn_create(mesh, &n, ny, nx, batch, &m->cnn));
    m->cn = sg_cnn_base(m->cnn);
    break;
  }
  case SG_MODEL_UNET: {
    sg_unet_config u = {c->cin, c->cout, c->width, c->levels, c->kernel, c->groups,
                        c->add_grid, c->act, {c->pad[0], c->pad[1]}};
    SG_TRY(sg_unet_create(mesh, &u, ny, nx, batch, &m->unet));
    m->cn = sg_unet_base(m->unet);
    break;
  }
  default:
    SG_RAISE(SG_ERR_CONFIG, "sg_model_create: unknown model kind %d", (int)c->kind);
  }
  *out = m;
  return SG_OK;
fail:
  sg_model_destroy(&m);
  return st;
}

sg_model_kind sg_model_kind_of(sg_model_t m) { return m->cfg.kind; }

int64_t sg_model_param_count(sg_model_t m) {
  if (!m) return 0;
  return m->fno ? sg_fno_param_count(m->fno) : m->cn->p.total;
}

sg_status sg_model_bind(sg_model_t m, float *params, float *grads) {
  if (!m) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "sg_model_bind: NULL model");
  return m->fno ? sg_fno_bind(m->fno, params, grads) : sg_cn_params_bind(&m->cn->p, params, grads);
}

sg_status sg_model_init(sg_model_t m, uint64_t seed) {
  if (!m) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "sg_model_init: NULL model");
  return m->fno ? sg_fno_init(m->fno, seed) : sg_cn_params_init(&m->cn->p, seed);
}

int sg_model_params(sg_model_t m, sg_var ***vars) {
  if (m->fno) return sg_fno_params(m->fno, vars);
  *vars = m->cn->p.ptrs;
  return m->cn->p.n;
}

sg_status sg_model_param_info(sg_model_t m, int i, sg_param_info *pi) {
  if (!m || !pi) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "sg_model_param_info: NULL argument");
  if (m->fno) return sg_fno_param_info(m->fno, i, pi);
  const sg_cn_params *p = &m->cn->p;
  if (i < 0 || i >= p->n)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "sg_model_param_info: bad parameter index %d", i);
  memset(pi, 0, sizeof *pi);
  pi->name = p->name[i];
  pi->ndim = p->ndim[i];
  for (int d = 0; d < pi->ndim; ++d) pi->global_shape[d] = pi->count[d] = p->shape[i][d];
  pi->offset = p->offset[i];
  pi->numel = p->count[i];
  return SG_OK;
}

int64_t sg_model_param_offset(sg_model_t m, const sg_var *p) {
  return m->fno ? sg_fno_param_offset(m->fno, p) : sg_cn_params_offset(&m->cn->p, p);
}

void sg_model_box(sg_model_t m, int64_t *y0, int64_t *ny, int64_t *x0, int64_t *nx) {
  if (m->fno) {
    sg_fno_box(m->fno, y0, ny, x0, nx);
    return;
  }
  const sg_cn_domain *d = &m->cn->dom;
  *y0 = d->y0, *ny = d->ny, *x0 = d->x0, *nx = d->nx;
}

void sg_model_describe(sg_model_t m, char *buf, size_t size) {
  const sg_model_config *c = &m->cfg;
  long long np = (long long)sg_model_param_count(m), ng = 0;
  sg_var **vars = NULL;
  const int n = sg_model_params(m, &vars);
  for (int i = 0; i < n; ++i) { /* global parameters: every box counted once */
    sg_param_info pi;
    long long e = 1;
    if (sg_model_param_info(m, i, &pi) != SG_OK) continue;
    for (int d = 0; d < pi.ndim; ++d) e *= (long long)pi.global_shape[d];
    ng += e;
  }
  if (m->fno)
    snprintf(buf, size, "fno: width %lld, modes %lld, layers %lld, proj_width %lld, %lld parameters (%lld on this "
             "rank: spectral weights %s)",
             (long long)c->width, (long long)c->modes, (long long)c->layers, (long long)c->proj_width, ng, np,
             c->shard_spectral ? "sharded by modes" : "replicated");
  else if (m->cnn)
    snprintf(buf, size, "cnn: width %lld, blocks %lld, kernel %lld, groups %lld, proj_width %lld, pad %s/%s, "
             "%lld parameters",
             (long long)c->width, (long long)c->blocks, (long long)c->kernel, (long long)c->groups,
             (long long)c->proj_width, sg_boundary_name(c->pad[0]), sg_boundary_name(c->pad[1]), np);
  else
    snprintf(buf, size, "unet: width %lld, levels %lld, kernel %lld, groups %lld, pad %s/%s, %lld parameters",
             (long long)c->width, (long long)c->levels, (long long)c->kernel, (long long)c->groups,
             sg_boundary_name(c->pad[0]), sg_boundary_name(c->pad[1]), np);
}

sg_status sg_model_mark(sg_model_t m, sg_var *v) {
  if (!m) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "sg_model_mark: NULL model");
  return m->fno ? SG_OK : sg_cn_base_mark(m->cn, v, "sg_model_mark");
}

sg_status sg_model_forward(sg_model_t m, sg_tape_t t, sg_var *x, sg_var **y) {
  if (!m) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "sg_model_forward: NULL model");
  return m->fno ? sg_fno_forward(m->fno, t, x, y)
         : m->cnn ? sg_cnn_forward(m->cnn, t, x, y)
                  : sg_unet_forward(m->unet, t, x, y);
}

double sg_model_collective_seconds(sg_model_t m) {
  if (!m || !m->fno) return 0.0;
  double fft = 0.0, tr = 0.0;
  sg_fno_fft_times(m->fno, &fft, &tr);
  return tr;
}
