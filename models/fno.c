/* shardgrid — FNO-2D, domain-, data- and tensor-parallel.
 *
 * Tensor parallelism over the mesh dim "tp" (docs/strategies.md): the
 * spectral layers are paired Megatron-style, layer 2k column-parallel (its
 * output channels split over tp: W (width, width_local, modes) and the
 * skip linear's rows), layer 2k + 1 row-parallel (its input channels: W
 * (width_local, width, modes), the skip linear's columns, one all-reduce of
 * the partial sums); the activation between them is channel-split. With an
 * odd number of layers the last one is replicated over tp, as are the lift
 * and the projection. */
#include "sg_fno.h"
#include "op_registry_impl.h"
#include "sg_model_impl.h"

#include "convnet_impl.h"
#include "fno_impl.h"
#include "sg_decomp.h"
#include "sg_rng.h"
#include "sg_spectral.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FNO_MAX_LAYERS = 16, FNO_MAX_PARAMS = 8 + 3 * FNO_MAX_LAYERS };
/* a spectral layer's split over tp */
enum { FNO_REP = 0, FNO_COL = 1, FNO_ROW = 2 };

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
  int d3;                  /* FNO-3D: a time axis before (y, x) */
  int64_t ntp;             /* its padded length, nt + pad_t */
  sg_spectral_conv_t spec; /* width -> width (tp = 1, a replicated layer) */
  /* tp > 1: [0] width -> wl (column-parallel), [1] wl -> width (row) */
  sg_spectral_conv_t spec_tp[2];
  /* tensor parallelism: the tp group (NULL: one tp rank), its size, this
   * rank's index and the mesh dim's bit; this rank's channels [c0, c0 +
   * wl) of the width; each spectral layer's role */
  sg_group_t tp;
  int tps, tpr;
  unsigned tp_mask;
  int64_t c0, wl;
  int role[FNO_MAX_LAYERS];
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
  /* each parameter's box of its global array (the local variable is the
   * box, contiguous) and the mesh dims it is Shard over: the spectral
   * weights (width, width, K0, K1, 2) by modes when sharded, the tp-split
   * ones by channel */
  int bndim[FNO_MAX_PARAMS];
  int64_t bglob[FNO_MAX_PARAMS][5], bstart[FNO_MAX_PARAMS][5],
      bcount[FNO_MAX_PARAMS][5];
  unsigned bshard[FNO_MAX_PARAMS];
  unsigned domain_mask; /* mesh dims h, w (those present) */
  int bound;
  sg_var grid; /* (batch, 2, ny, nx) coordinates, constant */
  float *grid_data;
};

sg_fno_config sg_fno_defaults(void) {
  sg_fno_config c = {1, 1, 32, 12, 12, 4, 128, 1, SG_ACT_GELU, 1, 0, 0, 0, 0};
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
  m->bndim[i] = (int)m->ndim_p[i];
  for (int d = 0; d < m->bndim[i]; ++d)
    m->bglob[i][d] = m->bcount[i][d] = m->shape_p[i][d], m->bstart[i][d] = 0;
}

/* The last parameter's box: (global, start, count) of ndim dims, Shard
 * over the mesh dims shard. */
static void set_box(struct sg_fno *m, int ndim, const int64_t *global,
                    const int64_t *start, const int64_t *count,
                    unsigned shard) {
  const int i = m->nparams - 1;
  m->bndim[i] = ndim;
  m->bshard[i] = shard;
  for (int d = 0; d < ndim; ++d)
    m->bglob[i][d] = global[d], m->bstart[i][d] = start[d],
    m->bcount[i][d] = count[d];
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
  sg_spectral_conv_destroy(&m->spec_tp[0]);
  sg_spectral_conv_destroy(&m->spec_tp[1]);
  for (int i = 0; i < m->nparams; ++i) sg_var_release(&m->params[i]);
  sg_var_release(&m->grid);
  free(m->grid_data);
  free(m);
  *model = NULL;
  return SG_OK;
}

/* The convolution of a layer of this role. */
static sg_spectral_conv_t fno_conv(const struct sg_fno *m, int role) {
  return role == FNO_COL   ? m->spec_tp[0]
         : role == FNO_ROW ? m->spec_tp[1]
                           : m->spec;
}

/* One of them (they share the grid's layout). */
static sg_spectral_conv_t fno_any_conv(const struct sg_fno *m) {
  return m->spec ? m->spec : m->spec_tp[0];
}

/* Each tp rank needs a channel: width >= tp (any split, uneven too). From
 * the config and the mesh, so every rank fails alike. */
static sg_status fno_tp_check(sg_mesh_t mesh, int64_t width) {
  for (int k = 0; k < sg_mesh_ndims(mesh); ++k)
    if (!strcmp(sg_mesh_dim_name(mesh, k), "tp") &&
        width < sg_mesh_dim_size(mesh, k))
      return sg_error_set(
          SG_ERR_CONFIG, __FILE__, __LINE__,
          "FNO: width (%lld) must be >= tp (%d): tensor parallelism splits "
          "the channels of the spectral layers over the tp ranks",
          (long long)width, sg_mesh_dim_size(mesh, k));
  return SG_OK;
}

/* The tp group, this rank's channel slice and the layers' roles: pairs
 * (column, row), the last of an odd count replicated. */
static sg_status fno_tp_init(struct sg_fno *m, sg_mesh_t mesh) {
  sg_status st = SG_OK;
  const int64_t w = m->cfg.width, L = m->cfg.layers;
  SG_TRY(sg_cn_tp_group(mesh, &m->tp, &m->tps, &m->tpr, &m->tp_mask));
  m->c0 = sg_split_offset(w, m->tps, m->tpr);
  m->wl = sg_split_size(w, m->tps, m->tpr);
  for (int64_t l = 0; l < L; ++l)
    m->role[l] = m->tps == 1 ? FNO_REP
                 : l % 2     ? FNO_ROW
                 : l + 1 < L ? FNO_COL
                             : FNO_REP;
fail:
  return st;
}

static int fno_has_role(const struct sg_fno *m, int role) {
  for (int64_t l = 0; l < m->cfg.layers; ++l)
    if (m->role[l] == role) return 1;
  return 0;
}

/* The spectral convolutions the layers use (one per shape: the replicated
 * one, the column- and the row-parallel one), the grid's box and the
 * spectral weights' layout. */
static sg_status fno_convs(struct sg_fno *m, sg_mesh_t mesh) {
  sg_status st = SG_OK;
  const sg_fno_config *cfg = &m->cfg;
  const int64_t ny = m->ny_g, nx = m->nx_g, w = cfg->width;
  const int t = m->d3, nd = 2 + t; /* FNO-3D: (t, y, x), t whole */
  sg_fft_desc d;
  sg_fft_desc_init(&d);
  d.dtype = SG_DTYPE_F32;
  d.ndim = nd;
  d.shape[0] = m->ntp;
  d.keep[0] = cfg->modes_t;
  d.shape[t] = ny;
  d.shape[t + 1] = nx;
  d.batch = m->batch;
  d.keep[t] = cfg->modes1;
  d.keep[t + 1] = cfg->modes2;
  /* no mesh dim has the time axis's name: it is never split */
  static const char *const dims[3] = {"(time)", "h", "w"};
  const char *const *hw = dims + 1;
  MPI_Comm axes[3], comm;
  unsigned mask = 0;
  SG_TRY(sg_fft_mesh_axes(mesh, nd, dims + 1 - t, axes, d.split, &comm, &mask));
  /* Every domain rank needs rows and columns: an empty slab would fail in
   * the pointwise layers while its peers wait in the FFT redistribution.
   * From global information (grid and mesh sizes), so every rank fails
   * alike, before any transpose. */
  for (int i = 0; i < 2; ++i) {
    int parts = 1;
    if (axes[t + i] != MPI_COMM_NULL)
      SG_MPI(MPI_Comm_size(axes[t + i], &parts));
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
  sg_spectral_conv_t *cv[3] = {&m->spec, &m->spec_tp[0], &m->spec_tp[1]};
  const int64_t cin[3] = {w, w, m->wl}, cout[3] = {w, m->wl, w};
  for (int k = 0; k < 3; ++k) {
    if (!fno_has_role(m, k)) continue; /* FNO_REP, FNO_COL, FNO_ROW */
    SG_TRY(sg_spectral_conv_create_comms(comm, nd, axes, &d, cin[k], cout[k],
                                         cv[k]));
    if (cfg->shard_spectral)
      SG_TRY(sg_spectral_conv_set_weight_layout(
          *cv[k], SG_SPECTRAL_WEIGHT_SHARD_MODES));
  }
  int64_t off[3], shp[3];
  sg_fft_plan_local_box(sg_spectral_conv_plan(fno_any_conv(m), 0),
                        SG_FFT_SPACE_REAL, off, shp);
  m->y0 = off[t], m->ny = shp[t], m->x0 = off[t + 1], m->nx = shp[t + 1];
  m->domain_mask = mask;
fail:
  return st;
}

/* Layer l's spectral weight (global (width, width, K0, K1, 2), FNO-3D
 * (width, width, K0, K1, 2 K2): re/im folded into the last dim): this
 * rank's modes when sharded, its input or output channels when split over
 * tp. */
static void fno_add_spectral(struct sg_fno *m, int64_t l) {
  const int role = m->role[l];
  sg_spectral_conv_t cv = fno_conv(m, role);
  const int64_t w = m->cfg.width;
  int64_t K[3], ko[3], kl[3];
  const int nd = sg_spectral_conv_weight_box(cv, K, ko, kl);
  int64_t g[5] = {w, w, 1, 1, 2},
          s0[5] = {role == FNO_ROW ? m->c0 : 0, role == FNO_COL ? m->c0 : 0},
          c0[5] = {role == FNO_ROW ? m->wl : w, role == FNO_COL ? m->wl : w, 1,
                   1, 2};
  for (int d = 0; d < nd; ++d) {
    const int j = 2 + d; /* 3-D: re/im folded into dim 4 */
    const int sh = m->cfg.shard_spectral;
    g[j] = K[d] * (j == 4 ? 2 : 1);
    s0[j] = (sh ? ko[d] : 0) * (j == 4 ? 2 : 1);
    c0[j] = (sh ? kl[d] : K[d]) * (j == 4 ? 2 : 1);
  }
  char nm[40];
  snprintf(nm, sizeof nm, "layer%lld.spectral", (long long)l);
  add_param(m, nm, 1, c0[0] * c0[1] * c0[2] * c0[3] * c0[4], 0, (int)(w * w));
  set_box(m, 5, g, s0, c0,
          (m->cfg.shard_spectral ? m->domain_mask : 0u) |
              (role != FNO_REP ? m->tp_mask : 0u));
}

/* Layer l's skip linear (width, width) and bias: rows and bias slice
 * Shard over tp in a column-parallel layer, columns in a row-parallel one
 * (its bias replicated: added after the reduction). */
static void fno_add_skip(struct sg_fno *m, int64_t l) {
  const int role = m->role[l];
  const int64_t w = m->cfg.width, c0 = m->c0, wl = m->wl;
  const int64_t g[2] = {w, w},
                s0[2] = {role == FNO_ROW ? 0 : c0, role == FNO_ROW ? c0 : 0},
                ct[2] = {role == FNO_COL ? wl : w, role == FNO_ROW ? wl : w};
  char nm[40];
  snprintf(nm, sizeof nm, "layer%lld.w", (long long)l);
  add_param(m, nm, 0, ct[0], ct[1], (int)w);
  if (role != FNO_REP) set_box(m, 2, g, s0, ct, m->tp_mask);
  snprintf(nm, sizeof nm, "layer%lld.b", (long long)l);
  add_param(m, nm, 0, role == FNO_COL ? wl : w, 0, (int)w);
  if (role == FNO_COL) set_box(m, 1, g, &c0, &wl, m->tp_mask);
}

static void fno_add_params(struct sg_fno *m) {
  const sg_fno_config *cfg = &m->cfg;
  const int64_t cin = cfg->cin + (cfg->add_grid ? 2 + m->d3 : 0),
                w = cfg->width;
  add_param(m, "lift.w", 0, w, cin, (int)cin);
  add_param(m, "lift.b", 0, w, 0, (int)cin);
  for (int64_t l = 0; l < cfg->layers; ++l) {
    fno_add_spectral(m, l);
    fno_add_skip(m, l);
  }
  add_param(m, "proj.w", 0, cfg->proj_width, w, (int)w);
  add_param(m, "proj.b", 0, cfg->proj_width, 0, (int)w);
  add_param(m, "out.w", 0, cfg->cout, cfg->proj_width, (int)cfg->proj_width);
  add_param(m, "out.b", 0, cfg->cout, 0, (int)cfg->proj_width);
}

/* FNO-3D's own limits (from the config and the mesh: every rank fails
 * alike): one output value per space-time point, modes_t that fit the
 * padded time axis, no tensor parallelism yet. */
static sg_status fno3d_check(sg_mesh_t mesh, const sg_fno_config *cfg) {
  sg_status st = SG_OK;
  if (cfg->nt < 0 || cfg->pad_t < 0)
    SG_RAISE(SG_ERR_CONFIG, "FNO-3D: nt and pad_t must be >= 0");
  if (cfg->nt == 0) return SG_OK;
  if (cfg->cout != 1)
    SG_RAISE(SG_ERR_CONFIG,
             "FNO-3D: one output value per space-time point (cout = 1, got "
             "%lld): the output channels are the nt time steps",
             (long long)cfg->cout);
  if (cfg->modes_t < 1 || 2 * cfg->modes_t > cfg->nt + cfg->pad_t)
    SG_RAISE(SG_ERR_CONFIG,
             "FNO-3D: modes_t = %lld does not fit %lld time steps + %lld "
             "padding (1 <= modes_t, 2*modes_t <= nt + pad_t)",
             (long long)cfg->modes_t, (long long)cfg->nt,
             (long long)cfg->pad_t);
  for (int k = 0; k < sg_mesh_ndims(mesh); ++k)
    if (!strcmp(sg_mesh_dim_name(mesh, k), "tp") &&
        sg_mesh_dim_size(mesh, k) > 1)
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "FNO-3D: mesh dim 'tp' (size %d): this model has no tensor "
               "parallelism (models with TP: vit, fno, cnn, unet); split it "
               "with dp, fsdp, h or w instead",
               sg_mesh_dim_size(mesh, k));
fail:
  return st;
}

/* The constant coordinate channels of FNO-3D, (batch, 3, nt, ny, nx):
 * x, y and t in [0, 1) (t over the output steps, before padding). */
static sg_status fno3d_grid_init(struct sg_fno *m) {
  sg_status st = SG_OK;
  const int64_t T = m->cfg.nt, ny = m->ny, nx = m->nx,
                sh[5] = {m->batch, 3, T, ny, nx};
  const int64_t n = sh[0] * 3 * T * ny * nx;
  float *g = m->grid_data = malloc((size_t)(n > 0 ? n : 1) * sizeof *g);
  if (!g) SG_RAISE(SG_ERR_ALLOC, "sg_fno_create: out of memory");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ix = i % nx, iy = i / nx % ny, it = i / (nx * ny) % T,
                  c = i / (nx * ny * T) % 3;
    g[i] = (float)(c == 0   ? (double)(m->x0 + ix) / (double)m->nx_g
                   : c == 1 ? (double)(m->y0 + iy) / (double)m->ny_g
                            : (double)it / (double)T);
  }
  SG_TRY(sg_var_init(&m->grid, "grid", SG_DTYPE_F32, 5, sh, g, 0));
fail:
  return st;
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
  SG_TRY(fno3d_check(mesh, cfg));
  SG_TRY(fno_tp_check(mesh, cfg->width));
  m = calloc(1, sizeof *m);
  if (!m) SG_RAISE(SG_ERR_ALLOC, "sg_fno_create: out of memory");
  m->cfg = *cfg;
  m->batch = batch;
  m->ny_g = ny;
  m->nx_g = nx;
  m->d3 = cfg->nt > 0;
  m->ntp = cfg->nt + cfg->pad_t;
  SG_TRY(fno_tp_init(m, mesh));
  SG_TRY(fno_convs(m, mesh));
  fno_add_params(m);
  place_params(m);

  if (cfg->add_grid && m->d3)
    SG_TRY(fno3d_grid_init(m));
  else if (cfg->add_grid)
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
  /* every parameter's box of its global array drawn by global index, so
   * every mesh (domain, modes or tp split) starts alike */
  for (int i = 0; i < m->nparams; ++i) {
    const double hi = m->kind[i] == 1 ? 1.0 / (double)m->fan_in[i]
                                      : 1.0 / sqrt((double)m->fan_in[i]),
                 lo = m->kind[i] == 1 ? 0.0 : -hi;
    SG_TRY(sg_rng_fill_box(SG_RNG_UNIFORM, lo, hi, seed, 1000 + (uint64_t)i,
                           m->bndim[i], m->bglob[i], m->bstart[i], m->bcount[i],
                           SG_DTYPE_F32, m->params[i].value.data));
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
  pi->ndim = m->bndim[i];
  for (int d = 0; d < pi->ndim; ++d)
    pi->global_shape[d] = m->bglob[i][d], pi->start[d] = m->bstart[i][d],
    pi->count[d] = m->bcount[i][d];
  pi->shard_dims = m->bshard[i];
  return SG_OK;
}

int64_t sg_fno_param_offset(sg_fno_t m, const sg_var *param) {
  for (int i = 0; i < m->nparams; ++i)
    if (&m->params[i] == param) return m->offset[i];
  return -1;
}

void sg_fno_fft_times(sg_fno_t m, double *fft_s, double *transpose_s) {
  *fft_s = *transpose_s = 0.0;
  const sg_spectral_conv_t cv[3] = {m->spec, m->spec_tp[0], m->spec_tp[1]};
  for (int k = 0; k < 3; ++k) {
    if (!cv[k]) continue;
    double f0 = 0, t0 = 0, f1 = 0, t1 = 0;
    sg_fft_plan_t p0 = sg_spectral_conv_plan(cv[k], 0),
                  p1 = sg_spectral_conv_plan(cv[k], 1);
    sg_fft_plan_times(p0, &f0, &t0);
    if (p1 != p0) sg_fft_plan_times(p1, &f1, &t1); /* one when cin == cout */
    *fft_s += f0 + f1;
    *transpose_s += t0 + t1;
  }
}

/* Spectral layer l: h -> act(spectral(h) + linear(h)) (no act after the
 * last); its parameters from index p. Split over tp by its role (a column-
 * parallel layer's output is channel-split, a row-parallel one's
 * replicated). */
static sg_status fno_layer(sg_tape_t t, void *ctx, sg_var *const *in,
                           sg_var **out) {
  sg_status st = SG_OK;
  const fno_layer_ctx *lc = ctx;
  struct sg_fno *m = lc->m;
  sg_var *h = in[0];
  const int role = m->role[lc->l], act = lc->l + 1 < m->cfg.layers;
  sg_var *P = &m->params[lc->p];
  if (role == FNO_REP) { /* one fused op: act(spectral(h) + linear(h)) */
    SG_TRY(sg_ag_spectral_linear_act(t, fno_conv(m, role), h, P, P + 1, P + 2,
                                     act ? (int)m->cfg.act : -1, &h));
  } else {
    SG_TRY(sg_ag_spectral_linear_tp(t, m->tp, role == FNO_ROW,
                                    fno_conv(m, role), h, P, P + 1, P + 2, &h));
    if (act) SG_TRY(sg_ag_act(t, m->cfg.act, h, &h));
  }
  out[0] = h;
fail:
  return st;
}

/* Pipeline pieces: 0 the lift, then the units of spectral layers (one
 * layer, or a column-/row-parallel pair under tp: a piece's input and
 * output are replicated over tp), the projection last. Layer l's
 * parameters are 2 + 3 l ..: spectral, w, b. */
static int fno_units(const struct sg_fno *m) {
  int n = 0;
  for (int64_t l = 0; l < m->cfg.layers; ++l) n += m->role[l] != FNO_ROW;
  return n;
}

/* Unit u (0-based): its first layer and its number of layers. */
static void fno_unit(const struct sg_fno *m, int u, int *l0, int *n) {
  int l = 0;
  for (int k = 0; k < u; ++k) l += m->role[l] == FNO_COL ? 2 : 1;
  *l0 = l;
  *n = m->role[l] == FNO_COL ? 2 : 1;
}

int sg_fno_nblocks(sg_fno_t m) { return m ? fno_units(m) + 2 : 0; }

void sg_fno_block_params(sg_fno_t m, int k, int *first, int *count) {
  const int L = (int)m->cfg.layers, U = fno_units(m);
  int l0 = 0, n = 0;
  if (k >= 1 && k <= U) fno_unit(m, k - 1, &l0, &n);
  *first = k == 0 ? 0 : k <= U ? 2 + 3 * l0 : 2 + 3 * L;
  *count = k == 0 ? 2 : k <= U ? 3 * n : 4;
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
      if (m->d3) SG_TRY(sg_fno3d_broadcast_t(t, h, m->cfg.nt, &h));
      if (m->cfg.add_grid) {
        sg_var *parts[2] = {h, &m->grid};
        SG_TRY(sg_ag_concat(t, 2, parts, &h));
      }
      SG_TRY(sg_ag_linear(t, h, &P[0], &P[1], &h));
      if (m->d3 && m->cfg.pad_t > 0)
        SG_TRY(sg_fno3d_time_window(t, h, m->ntp, 0, &h));
    } else if (k < nb - 1) {
      int l0, n;
      fno_unit(m, k - 1, &l0, &n);
      for (int l = l0; l < l0 + n; ++l) SG_TRY(fno_run_layer(m, t, l, &h));
    } else {
      if (m->d3 && m->cfg.pad_t > 0) /* the padding off, before the proj */
        SG_TRY(sg_fno3d_time_window(t, h, m->cfg.nt, 0, &h));
      SG_TRY(sg_ag_linear_head(t, h, &P[pj], &P[pj + 1], (int)m->cfg.act,
                               &P[pj + 2], &P[pj + 3], &h));
      if (m->d3) /* (batch, 1, nt, ny, nx) -> (batch, nt, ny, nx) */
        SG_TRY(sg_fno3d_time_window(t, h, m->cfg.nt, 1, &h));
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
  const sg_fno_t m = impl;
  const size_t n = strlen(buf);
  if (m->tps > 1 && n < size)
    snprintf(buf + n, size - n,
             "; tensor parallel over tp=%d (%lld of the %lld channels of "
             "the paired spectral layers on this rank)",
             m->tps, (long long)m->wl, (long long)c->width);
}

static double fno_collective_seconds(void *impl) {
  double fft = 0.0, tr = 0.0;
  sg_fno_fft_times(impl, &fft, &tr);
  return tr;
}

/* The grid channels (add_grid), the model's one constant. */
static int fno_constants(void *impl, sg_var **out, int max) {
  struct sg_fno *m = impl;
  if (!m->cfg.add_grid || max < 1) return 0;
  out[0] = &m->grid;
  return 1;
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
                                   .forward_blocks = fno_forward_blocks,
                                   .constants = fno_constants,
                                   .device_ok = 1};

/* ---- FNO-3D's table: the same model with a time axis (no pipeline pieces
 * yet) --------------------------------------------------------------------- */

static void fno3d_defaults(sg_model_config *c) {
  /* the paper's FNO-3D for Navier-Stokes: width 20, 8 modes per dim */
  c->width = 20, c->proj_width = 128, c->modes = 8, c->layers = 4;
  c->modes_t = 8, c->pad_t = 6;
  c->shard_spectral = 1;
}

static sg_status fno3d_create(sg_mesh_t mesh, const sg_model_config *c,
                              int64_t ny, int64_t nx, int64_t batch,
                              void **impl) {
  sg_fno_config f = sg_fno_defaults();
  f.cin = c->cin, f.cout = 1, f.nt = c->cout, f.width = c->width;
  f.modes1 = f.modes2 = c->modes;
  f.modes_t = c->modes_t, f.pad_t = c->pad_t;
  f.layers = c->layers, f.proj_width = c->proj_width, f.add_grid = c->add_grid,
  f.act = c->act;
  f.shard_spectral = c->shard_spectral;
  f.act_ckpt_every = c->act_ckpt_every;
  return sg_fno_create(mesh, &f, ny, nx, batch, (sg_fno_t *)impl);
}

static void fno3d_describe(void *impl, const sg_model_config *c, char *buf,
                           size_t size) {
  char inner[512];
  fno_describe(impl, c, inner, sizeof inner);
  snprintf(buf, size,
           "fno3d: %lld time steps out (+%lld padding), modes_t %lld; %s",
           (long long)c->cout, (long long)c->pad_t, (long long)c->modes_t,
           inner + 5 /* after "fno: " */);
}

static const char *const fno3d_size_keys[] = {"width",  "modes",      "modes_t",
                                              "layers", "proj_width", NULL};

const sg_model_i sg_fno3d_model_i = {
    .name = "fno3d",
    .size_keys = fno3d_size_keys,
    .defaults = fno3d_defaults,
    .create = fno3d_create,
    .destroy = fno_destroy,
    .param_count = fno_param_count,
    .param_info = fno_param_info,
    .bind = fno_bind,
    .init = fno_init,
    .params = fno_params,
    .box = fno_box,
    .describe = fno3d_describe,
    .mark = NULL,
    .forward = fno_forward,
    .collective_seconds = fno_collective_seconds,
    .constants = fno_constants,
    .device_ok = 1};
