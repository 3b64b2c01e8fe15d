/* shardgrid — FNO-2D, domain- and data-parallel. */
#include "sg_fno.h"
#include "op_registry_impl.h"
#include "sg_model_impl.h"

#include "convnet_impl.h"
#include "sg_rng.h"
#include "sg_spectral.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FNO_MAX_LAYERS = 16, FNO_MAX_PARAMS = 8 + 3 * FNO_MAX_LAYERS };

struct sg_fno;
typedef struct fno_layer_ctx { /* a spectral layer as a checkpointed block */
  struct sg_fno *m;
  int l, p;
} fno_layer_ctx;

struct sg_fno {
  sg_fno_config cfg;
  fno_layer_ctx lctx[FNO_MAX_LAYERS];
  int64_t batch, ny_g, nx_g;
  int64_t y0, ny, x0, nx;
  sg_spectral_conv_t spec;
  int nparams;
  sg_var params[FNO_MAX_PARAMS];
  sg_var *param_ptrs[FNO_MAX_PARAMS];
  int64_t offset[FNO_MAX_PARAMS], count[FNO_MAX_PARAMS];
  int fan_in[FNO_MAX_PARAMS];
  int kind[FNO_MAX_PARAMS]; /* 0 linear weight/bias, 1 spectral */
  int64_t ndim_p[FNO_MAX_PARAMS];
  int64_t shape_p[FNO_MAX_PARAMS][2];
  char name[FNO_MAX_PARAMS][40];
  int64_t total;
  /* spectral weights: (width, width, K0, K1, 2) global, this rank's box of
   * modes [koff, koff + klen) when sharded (else the whole K) */
  int64_t K[2], koff[2], klen[2];
  unsigned domain_mask; /* mesh dims h, w (those present) */
  int bound;
  sg_var grid; /* (batch, 2, ny, nx) coordinates, constant */
  float *grid_data;
};

sg_fno_config sg_fno_defaults(void) {
  sg_fno_config c = {1, 1, 32, 12, 12, 4, 128, 1, SG_ACT_GELU, 1, 0};
  return c;
}

static void add_param(struct sg_fno *m, const char *name, int kind, int64_t d0,
                      int64_t d1, int fan_in) {
  int i = m->nparams++;
  snprintf(m->name[i], sizeof m->name[i], "%s", name);
  m->kind[i] = kind;
  m->fan_in[i] = fan_in;
  m->ndim_p[i] = d1 > 0 ? 2 : 1;
  m->shape_p[i][0] = d0;
  m->shape_p[i][1] = d1;
  m->count[i] = d1 > 0 ? d0 * d1 : d0;
}

/* Offsets in the flat buffer: the Replicate parameters first, then the
 * spectral weights when they are Shard over the domain, each layout one
 * contiguous span (in model order) for its gradient reduction. */
static void place_params(struct sg_fno *m) {
  m->total = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < m->nparams; ++i)
      if ((m->kind[i] == 1 && m->cfg.shard_spectral) == pass) {
        m->offset[i] = m->total;
        m->total += m->count[i];
      }
}

sg_status sg_fno_destroy(sg_fno_t *model) {
  if (!model || !*model) return SG_OK;
  struct sg_fno *m = *model;
  sg_spectral_conv_destroy(&m->spec);
  for (int i = 0; i < m->nparams; ++i) sg_var_release(&m->params[i]);
  sg_var_release(&m->grid);
  free(m->grid_data);
  free(m);
  *model = NULL;
  return SG_OK;
}

sg_status sg_fno_create(sg_mesh_t mesh, const sg_fno_config *cfg, int64_t ny,
                        int64_t nx, int64_t batch, sg_fno_t *out) {
  sg_status st = SG_OK;
  struct sg_fno *m = NULL;
  if (!mesh || !cfg || !out)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_fno_create: NULL argument");
  *out = NULL;
  if (cfg->layers < 1 || cfg->layers > FNO_MAX_LAYERS || cfg->width < 1 ||
      cfg->cin < 1 || cfg->cout < 1 || cfg->proj_width < 1 || batch < 1)
    SG_RAISE(
        SG_ERR_CONFIG,
        "FNO: need 1 <= layers <= %d, width, cin, cout, proj_width, batch >= 1",
        FNO_MAX_LAYERS);
  if (cfg->act_ckpt_every < 0)
    SG_RAISE(SG_ERR_CONFIG, "FNO: act_ckpt_every must be >= 0 (got %d)",
             cfg->act_ckpt_every);
  if (cfg->modes1 < 1 || cfg->modes2 < 1 || 2 * cfg->modes1 > ny ||
      cfg->modes2 > nx / 2 + 1)
    SG_RAISE(
        SG_ERR_CONFIG,
        "FNO: modes %lldx%lld do not fit a %lldx%lld grid (2*modes1 <= ny, modes2 <= nx/2+1)",
        (long long)cfg->modes1, (long long)cfg->modes2, (long long)ny,
        (long long)nx);
  SG_TRY(sg_cn_refuse_tp(mesh, "FNO"));
  m = calloc(1, sizeof *m);
  if (!m) SG_RAISE(SG_ERR_ALLOC, "sg_fno_create: out of memory");
  m->cfg = *cfg;
  m->batch = batch;
  m->ny_g = ny;
  m->nx_g = nx;
  /* the spectral convolutions share one object: same shapes in every layer */
  sg_fft_desc d;
  sg_fft_desc_init(&d);
  d.dtype = SG_DTYPE_F32;
  d.ndim = 2;
  d.shape[0] = ny;
  d.shape[1] = nx;
  d.batch = batch;
  d.keep[0] = cfg->modes1;
  d.keep[1] = cfg->modes2;
  static const char *const hw[2] = {"h", "w"};
  MPI_Comm axes[2], comm;
  unsigned mask = 0;
  SG_TRY(sg_fft_mesh_axes(mesh, 2, hw, axes, d.split, &comm, &mask));
  /* Every domain rank needs rows and columns: an empty slab would fail in
   * the pointwise layers while its peers wait in the FFT redistribution.
   * From global information (grid and mesh sizes), so every rank fails
   * alike, before any transpose. */
  for (int i = 0; i < 2; ++i) {
    int parts = 1;
    if (axes[i] != MPI_COMM_NULL) SG_MPI(MPI_Comm_size(axes[i], &parts));
    const int64_t n = i == 0 ? ny : nx;
    if (n < parts)
      SG_RAISE(
          SG_ERR_CONFIG,
          "FNO: a %lldx%lld grid split over %s=%d leaves %lld rank(s) with empty %s "
          "(the FNO needs at least one %s per rank: %s <= %lld)",
          (long long)ny, (long long)nx, hw[i], parts, (long long)(parts - n),
          i == 0 ? "rows" : "columns", i == 0 ? "row" : "column", hw[i],
          (long long)n);
  }
  SG_TRY(sg_spectral_conv_create_comms(comm, 2, axes, &d, cfg->width,
                                       cfg->width, &m->spec));
  int64_t off[2], shp[2];
  sg_fft_plan_local_box(sg_spectral_conv_plan(m->spec, 0), SG_FFT_SPACE_REAL,
                        off, shp);
  m->y0 = off[0], m->ny = shp[0], m->x0 = off[1], m->nx = shp[1];

  m->domain_mask = mask;
  sg_spectral_conv_weight_box(m->spec, m->K, m->koff, m->klen);
  if (cfg->shard_spectral) {
    SG_TRY(sg_spectral_conv_set_weight_layout(m->spec,
                                              SG_SPECTRAL_WEIGHT_SHARD_MODES));
  } else {
    m->koff[0] = m->koff[1] = 0;
    m->klen[0] = m->K[0], m->klen[1] = m->K[1];
  }

  const int64_t cin = cfg->cin + (cfg->add_grid ? 2 : 0), w = cfg->width;
  add_param(m, "lift.w", 0, w, cin, (int)cin);
  add_param(m, "lift.b", 0, w, 0, (int)cin);
  for (int64_t l = 0; l < cfg->layers; ++l) {
    char nm[40];
    snprintf(nm, sizeof nm, "layer%lld.spectral", (long long)l);
    add_param(m, nm, 1,
              cfg->shard_spectral ? sg_spectral_conv_local_weight_count(m->spec)
                                  : sg_spectral_conv_weight_count(m->spec),
              0, (int)(w * w));
    snprintf(nm, sizeof nm, "layer%lld.w", (long long)l);
    add_param(m, nm, 0, w, w, (int)w);
    snprintf(nm, sizeof nm, "layer%lld.b", (long long)l);
    add_param(m, nm, 0, w, 0, (int)w);
  }
  add_param(m, "proj.w", 0, cfg->proj_width, w, (int)w);
  add_param(m, "proj.b", 0, cfg->proj_width, 0, (int)w);
  add_param(m, "out.w", 0, cfg->cout, cfg->proj_width, (int)cfg->proj_width);
  add_param(m, "out.b", 0, cfg->cout, 0, (int)cfg->proj_width);
  place_params(m);

  if (cfg->add_grid)
    SG_TRY(sg_cn_grid_init(&m->grid, &m->grid_data, batch, m->y0, m->ny, m->x0,
                           m->nx, ny, nx, "sg_fno_create"));
  *out = m;
  return SG_OK;
fail:
  sg_fno_destroy(&m);
  return st;
}

int64_t sg_fno_param_count(sg_fno_t m) { return m ? m->total : 0; }

void sg_fno_box(sg_fno_t m, int64_t *y0, int64_t *ny, int64_t *x0,
                int64_t *nx) {
  *y0 = m->y0, *ny = m->ny, *x0 = m->x0, *nx = m->nx;
}

sg_status sg_fno_bind(sg_fno_t m, float *params, float *grads) {
  sg_status st = SG_OK;
  if (!m || !params || !grads)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_fno_bind: NULL argument");
  for (int i = 0; i < m->nparams; ++i) {
    sg_var_release(&m->params[i]);
    int64_t shape[2] = {m->shape_p[i][0], m->shape_p[i][1]};
    SG_TRY(sg_var_init_param(&m->params[i], m->name[i], SG_DTYPE_F32,
                             (int)m->ndim_p[i], shape, params + m->offset[i],
                             grads + m->offset[i]));
    m->param_ptrs[i] = &m->params[i];
  }
  m->bound = 1;
fail:
  return st;
}

sg_status sg_fno_init(sg_fno_t m, uint64_t seed) {
  sg_status st = SG_OK;
  if (!m || !m->bound)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_fno_init: model not bound to a buffer");
  for (int i = 0; i < m->nparams; ++i) {
    float *p = m->params[i].value.data;
    double lo, hi;
    if (m->kind[i] == 1) {
      /* the box of global W (width, width, K0, K1, re/im) this rank holds:
       * drawn by global index, so every mesh gets the same W */
      sg_param_info pi;
      sg_fno_param_info(m, i, &pi);
      SG_TRY(sg_rng_fill_box(SG_RNG_UNIFORM, 0.0, 1.0 / (double)m->fan_in[i],
                             seed, 1000 + (uint64_t)i, pi.ndim, pi.global_shape,
                             pi.start, pi.count, SG_DTYPE_F32, p));
      continue;
    }
    hi = 1.0 / sqrt((double)m->fan_in[i]);
    lo = -hi;
    SG_TRY(sg_rng_fill(SG_RNG_UNIFORM, lo, hi, seed, 1000 + (uint64_t)i, 0,
                       m->count[i], SG_DTYPE_F32, p));
  }
fail:
  return st;
}

int sg_fno_params(sg_fno_t m, sg_var ***vars) {
  *vars = m->param_ptrs;
  return m->nparams;
}

sg_status sg_fno_param_info(sg_fno_t m, int i, sg_param_info *pi) {
  if (!m || !pi || i < 0 || i >= m->nparams)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_fno_param_info: bad parameter index %d", i);
  memset(pi, 0, sizeof *pi);
  pi->name = m->name[i];
  pi->offset = m->offset[i];
  pi->numel = m->count[i];
  if (m->kind[i] == 1) {
    const int64_t w = m->cfg.width;
    int64_t gs[5] = {w, w, m->K[0], m->K[1], 2},
            s0[5] = {0, 0, m->koff[0], m->koff[1], 0},
            c0[5] = {w, w, m->klen[0], m->klen[1], 2};
    pi->ndim = 5;
    for (int d = 0; d < 5; ++d)
      pi->global_shape[d] = gs[d], pi->start[d] = s0[d], pi->count[d] = c0[d];
    pi->shard_dims = m->cfg.shard_spectral ? m->domain_mask : 0u;
    return SG_OK;
  }
  pi->ndim = (int)m->ndim_p[i];
  for (int d = 0; d < pi->ndim; ++d)
    pi->global_shape[d] = pi->count[d] = m->shape_p[i][d];
  return SG_OK;
}

int64_t sg_fno_param_offset(sg_fno_t m, const sg_var *param) {
  for (int i = 0; i < m->nparams; ++i)
    if (&m->params[i] == param) return m->offset[i];
  return -1;
}

void sg_fno_fft_times(sg_fno_t m, double *fft_s, double *transpose_s) {
  double f0 = 0, t0 = 0, f1 = 0, t1 = 0;
  sg_fft_plan_t p0 = sg_spectral_conv_plan(m->spec, 0),
                p1 = sg_spectral_conv_plan(m->spec, 1);
  sg_fft_plan_times(p0, &f0, &t0);
  if (p1 != p0) sg_fft_plan_times(p1, &f1, &t1); /* one plan when cin == cout */
  *fft_s = f0 + f1;
  *transpose_s = t0 + t1;
}

/* Spectral layer l: h -> act(spectral(h) + linear(h)) (no act after the
 * last); its parameters from index p. */
static sg_status fno_layer(sg_tape_t t, void *ctx, sg_var *const *in,
                           sg_var **out) {
  sg_status st = SG_OK;
  const fno_layer_ctx *lc = ctx;
  struct sg_fno *m = lc->m;
  sg_var *h = in[0], *s = NULL, *c = NULL;
  SG_TRY(sg_ag_spectral_conv(t, m->spec, h, &m->params[lc->p], &s));
  SG_TRY(sg_ag_linear(t, h, &m->params[lc->p + 1], &m->params[lc->p + 2], &c));
  SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, s, c, &h));
  if (lc->l + 1 < m->cfg.layers) SG_TRY(sg_ag_act(t, m->cfg.act, h, &h));
  out[0] = h;
fail:
  return st;
}

/* Pipeline pieces: 0 the lift, 1..layers the spectral layers (parameters
 * 2 + 3 l ..: spectral, w, b), layers + 1 the projection. */
int sg_fno_nblocks(sg_fno_t m) { return m ? (int)m->cfg.layers + 2 : 0; }

void sg_fno_block_params(sg_fno_t m, int k, int *first, int *count) {
  const int L = (int)m->cfg.layers;
  *first = k == 0 ? 0 : k <= L ? 2 + 3 * (k - 1) : 2 + 3 * L;
  *count = k == 0 ? 2 : k <= L ? 3 : 4;
}

static sg_status fno_check_input(const struct sg_fno *m, const sg_var *x) {
  sg_status st = SG_OK;
  const sg_tensor *xv = &x->value;
  if (xv->ndim != 4 || xv->shape[0] != m->batch || xv->shape[1] != m->cfg.cin ||
      xv->shape[2] != m->ny || xv->shape[3] != m->nx)
    SG_RAISE(
        SG_ERR_SHAPE,
        "sg_fno_forward: input (%lld, %lld, %lld, %lld), model expects (%lld, %lld, %lld, %lld)",
        (long long)xv->shape[0], (long long)xv->shape[1],
        (long long)xv->shape[2], (long long)xv->shape[3], (long long)m->batch,
        (long long)m->cfg.cin, (long long)m->ny, (long long)m->nx);
fail:
  return st;
}

/* Spectral layer l on the tape, checkpointed if the config says so. */
static sg_status fno_run_layer(struct sg_fno *m, sg_tape_t t, int l,
                               sg_var **h) {
  fno_layer_ctx *lc = &m->lctx[l];
  lc->m = m, lc->l = l, lc->p = 2 + 3 * l;
  const int ck = m->cfg.act_ckpt_every > 0 &&
                 (l + 1) % m->cfg.act_ckpt_every == 0;
  return ck ? sg_ag_checkpoint(t, fno_layer, lc, 1, h, 1, h)
            : fno_layer(t, lc, h, h);
}

sg_status sg_fno_forward_blocks(sg_fno_t m, sg_tape_t t, int first, int count,
                                sg_var *x, sg_var **y) {
  sg_status st = SG_OK;
  const int nb = sg_fno_nblocks(m);
  if (!m || !t || !x || !y || !m->bound || first < 0 || count < 1 ||
      first + count > nb)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_fno_forward: bad arguments (pieces %d..%d of %d)", first,
             first + count - 1, nb);
  sg_var *P = m->params, *h = x;
  const int pj = 2 + 3 * (int)m->cfg.layers; /* the projection's parameters */
  for (int k = first; k < first + count; ++k) {
    if (k == 0) {
      SG_TRY(fno_check_input(m, x));
      if (m->cfg.add_grid) {
        sg_var *parts[2] = {x, &m->grid};
        SG_TRY(sg_ag_concat(t, 2, parts, &h));
      }
      SG_TRY(sg_ag_linear(t, h, &P[0], &P[1], &h));
    } else if (k < nb - 1) {
      SG_TRY(fno_run_layer(m, t, k - 1, &h));
    } else {
      SG_TRY(sg_ag_linear(t, h, &P[pj], &P[pj + 1], &h));
      SG_TRY(sg_ag_act(t, m->cfg.act, h, &h));
      SG_TRY(sg_ag_linear(t, h, &P[pj + 2], &P[pj + 3], &h));
    }
  }
  *y = h;
fail:
  return st;
}

sg_status sg_fno_forward(sg_fno_t m, sg_tape_t t, sg_var *x, sg_var **y) {
  return sg_fno_forward_blocks(m, t, 0, sg_fno_nblocks(m), x, y);
}

/* ---- the model table ----------------------------------------------------- */

static void fno_defaults(sg_model_config *c) {
  sg_fno_config f = sg_fno_defaults();
  c->width = f.width, c->proj_width = f.proj_width, c->modes = f.modes1,
  c->layers = f.layers;
  c->shard_spectral = f.shard_spectral;
}

static sg_status fno_create(sg_mesh_t mesh, const sg_model_config *c,
                            int64_t ny, int64_t nx, int64_t batch,
                            void **impl) {
  sg_fno_config f = sg_fno_defaults();
  f.cin = c->cin, f.cout = c->cout, f.width = c->width;
  f.modes1 = f.modes2 = c->modes;
  f.layers = c->layers, f.proj_width = c->proj_width, f.add_grid = c->add_grid,
  f.act = c->act;
  f.shard_spectral = c->shard_spectral;
  f.act_ckpt_every = c->act_ckpt_every;
  return sg_fno_create(mesh, &f, ny, nx, batch, (sg_fno_t *)impl);
}

static void fno_destroy(void *impl) {
  sg_fno_t m = impl;
  sg_fno_destroy(&m);
}

static int64_t fno_param_count(void *impl) { return sg_fno_param_count(impl); }
static sg_status fno_param_info(void *impl, int i, sg_param_info *pi) {
  return sg_fno_param_info(impl, i, pi);
}
static sg_status fno_bind(void *impl, float *p, float *g) {
  return sg_fno_bind(impl, p, g);
}
static sg_status fno_init(void *impl, uint64_t seed) {
  return sg_fno_init(impl, seed);
}
static int fno_params(void *impl, sg_var ***vars) {
  return sg_fno_params(impl, vars);
}
static void fno_box(void *impl, int64_t *y0, int64_t *ny, int64_t *x0,
                    int64_t *nx) {
  sg_fno_box(impl, y0, ny, x0, nx);
}
static sg_status fno_forward(void *impl, sg_tape_t t, sg_var *x, sg_var **y) {
  return sg_fno_forward(impl, t, x, y);
}
static int fno_nblocks(void *impl) { return sg_fno_nblocks(impl); }
static void fno_block_params(void *impl, int k, int *first, int *count) {
  sg_fno_block_params(impl, k, first, count);
}
static sg_status fno_forward_blocks(void *impl, sg_tape_t t, int first,
                                    int count, sg_bundle *io) {
  sg_status st = sg_model_bundle_one(io, "fno");
  if (st == SG_OK)
    st = sg_fno_forward_blocks(impl, t, first, count, io->v[0], &io->v[0]);
  return st;
}

static void fno_describe(void *impl, const sg_model_config *c, char *buf,
                         size_t size) {
  long long ng = 0;
  for (int i = 0; i < ((sg_fno_t)impl)->nparams;
       ++i) { /* global parameters: every box counted once */
    sg_param_info pi;
    long long e = 1;
    if (sg_fno_param_info(impl, i, &pi) != SG_OK) continue;
    for (int d = 0; d < pi.ndim; ++d) e *= (long long)pi.global_shape[d];
    ng += e;
  }
  snprintf(
      buf, size,
      "fno: width %lld, modes %lld, layers %lld, proj_width %lld, %lld parameters (%lld on this "
      "rank: spectral weights %s)",
      (long long)c->width, (long long)c->modes, (long long)c->layers,
      (long long)c->proj_width, ng, (long long)sg_fno_param_count(impl),
      c->shard_spectral ? "sharded by modes" : "replicated");
}

static double fno_collective_seconds(void *impl) {
  double fft = 0.0, tr = 0.0;
  sg_fno_fft_times(impl, &fft, &tr);
  return tr;
}

static const char *const fno_size_keys[] = {"width", "modes", "layers",
                                            "proj_width", NULL};

const sg_model_i sg_fno_model_i = {.name = "fno",
                                   .size_keys = fno_size_keys,
                                   .defaults = fno_defaults,
                                   .create = fno_create,
                                   .destroy = fno_destroy,
                                   .param_count = fno_param_count,
                                   .param_info = fno_param_info,
                                   .bind = fno_bind,
                                   .init = fno_init,
                                   .params = fno_params,
                                   .box = fno_box,
                                   .describe = fno_describe,
                                   .mark = NULL,
                                   .forward = fno_forward,
                                   .collective_seconds = fno_collective_seconds,
                                   .nblocks = fno_nblocks,
                                   .block_params = fno_block_params,
                                   .forward_blocks = fno_forward_blocks};
