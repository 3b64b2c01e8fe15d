/* shardgrid — U-Net, domain-, data- and tensor-parallel.
 *
 * Tensor parallelism over the mesh dim "tp" (docs/strategies.md): each
 * level's double conv is a Megatron pair over channels, conv1 column-
 * parallel (this rank's output channels: whole GroupNorm groups, groups >=
 * tp) with norm1 and the activation on the channel-split activation, conv2
 * row-parallel (one all-reduce of the partial sums, its bias after), norm2
 * on the replicated sum. Pooling, up-sampling, the skip concatenations and
 * the output layer run on replicated tensors. */
#include "unet.h"

#include "convnet_impl.h"
#include "sg_model_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { UNET_MAX_LEVELS = 6 };

struct sg_unet;
typedef struct unet_level_ctx { /* a level's block as a checkpointed block */
  struct sg_unet *m;
  int l, dec; /* level; 0 encoder, 1 decoder */
} unet_level_ctx;

struct sg_unet {
  sg_cn_base
      b; /* first: the convnet part of the model table (convnet_impl.h) */
  sg_unet_config cfg;
  unet_level_ctx lctx[2 * UNET_MAX_LEVELS];
  int enc[UNET_MAX_LEVELS], dec[UNET_MAX_LEVELS], out; /* parameter indices */
  int64_t gl; /* GroupNorm groups of this tp rank's channels in norm1 */
};

sg_unet_config sg_unet_defaults(void) {
  sg_unet_config c = {
      1, 1, 32, 3, 3, 4, 1, SG_ACT_GELU, {SG_PAD_PERIODIC, SG_PAD_PERIODIC}, 0};
  return c;
}

sg_status sg_unet_destroy(sg_unet_t *model) {
  if (!model || !*model) return SG_OK;
  struct sg_unet *m = *model;
  sg_cn_base_release(&m->b);
  free(m);
  *model = NULL;
  return SG_OK;
}

/* conv1, norm1, conv2, norm2: 8 parameters; conv1 and norm1 split over
 * tp by output channel, conv2 by input channel, norm2 whole */
static int add_block(struct sg_unet *m, const char *name, int64_t cin,
                     int64_t c, int64_t k) {
  sg_cn_params *p = &m->b.p;
  sg_cn_slice col = sg_cn_tp_slice(&m->b.dom, c, m->cfg.groups, 0, &m->gl),
              row = col;
  row.dim = col.dim < 0 ? -1 : 1;
  char nm[32];
  snprintf(nm, sizeof nm, "%s.conv1", name);
  int i = sg_cn_add_conv(p, nm, c, cin, k, &col);
  snprintf(nm, sizeof nm, "%s.norm1", name);
  int ok = i >= 0 && sg_cn_add_norm(p, nm, c, &col) >= 0;
  snprintf(nm, sizeof nm, "%s.conv2", name);
  ok = ok && sg_cn_add_conv(p, nm, c, c, k, &row) >= 0;
  snprintf(nm, sizeof nm, "%s.norm2", name);
  ok = ok && sg_cn_add_norm(p, nm, c, NULL) >= 0;
  return ok ? i : -1;
}

sg_status sg_unet_create(sg_mesh_t mesh, const sg_unet_config *cfg, int64_t ny,
                         int64_t nx, int64_t batch, sg_unet_t *out) {
  sg_status st = SG_OK;
  struct sg_unet *m = NULL;
  if (!mesh || !cfg || !out)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_unet_create: NULL argument");
  *out = NULL;
  if (cfg->cin < 1 || cfg->cout < 1 || cfg->width < 1 || batch < 1)
    SG_RAISE(SG_ERR_CONFIG, "U-Net: cin, cout, width and batch must be >= 1");
  if (cfg->levels < 1 || cfg->levels > UNET_MAX_LEVELS)
    SG_RAISE(SG_ERR_CONFIG, "U-Net: levels must be in 1..%d (got %lld)",
             UNET_MAX_LEVELS, (long long)cfg->levels);
  if (cfg->act_ckpt_every < 0)
    SG_RAISE(SG_ERR_CONFIG, "U-Net: act_ckpt_every must be >= 0 (got %d)",
             cfg->act_ckpt_every);
  SG_TRY(
      sg_cn_check_kernel_groups("U-Net", cfg->kernel, cfg->groups, cfg->width));
  SG_TRY(sg_cn_check_tp_groups(mesh, cfg->groups, "U-Net"));
  const int64_t f = (int64_t)1 << (cfg->levels - 1);
  if (ny % f || nx % f || ny / f < cfg->kernel || nx / f < cfg->kernel)
    SG_RAISE(
        SG_ERR_SHAPE,
        "U-Net: a %lldx%lld grid does not fit %lld levels (each dim divisible by %lld and at least %lld "
        "cells at the coarsest level)",
        (long long)ny, (long long)nx, (long long)cfg->levels, (long long)f,
        (long long)cfg->kernel);
  m = calloc(1, sizeof *m);
  if (!m) SG_RAISE(SG_ERR_ALLOC, "sg_unet_create: out of memory");
  m->cfg = *cfg;
  m->b.p.stream = 3000;
  SG_TRY(sg_cn_domain_init_tp(&m->b.dom, mesh, ny, nx, batch, cfg->add_grid,
                              "U-Net"));
  const int64_t L = cfg->levels, w = cfg->width, k = cfg->kernel;
  int64_t c_in = cfg->cin + (cfg->add_grid ? 2 : 0);
  int ok = 1;
  for (int l = 0; ok && l < (int)L; ++l) {
    char nm[16];
    snprintf(nm, sizeof nm, "enc%d", l);
    ok = (m->enc[l] = add_block(m, nm, c_in, w << l, k)) >= 0;
    c_in = w << l;
  }
  for (int l = (int)L - 2; ok && l >= 0; --l) {
    char nm[16];
    snprintf(nm, sizeof nm, "dec%d", l);
    ok = (m->dec[l] = add_block(m, nm, (w << (l + 1)) + (w << l), w << l, k)) >=
         0;
  }
  ok = ok && (m->out = sg_cn_add_linear(&m->b.p, "out", cfg->cout, w)) >= 0;
  if (!ok)
    SG_RAISE(SG_ERR_CONFIG, "U-Net: too many parameter tensors (at most %d)",
             SG_CN_MAX_PARAMS);
  *out = m;
  return SG_OK;
fail:
  sg_unet_destroy(&m);
  return st;
}


static sg_status block(struct sg_unet *m, sg_tape_t t, int first, sg_var *x,
                       sg_var **y) {
  sg_status st = SG_OK;
  sg_var *q = &m->b.p.vars[first], *h = x;
  for (int j = 0; j < 2; ++j, q += 4) {
    /* j = 0 column-, j = 1 row-parallel: norm1 on this rank's groups */
    sg_norm_desc nd = {.kind = SG_NORM_GROUP,
                       .groups = j ? m->cfg.groups : m->gl,
                       .eps = 1e-5};
    SG_TRY(
        sg_cn_conv_same_tp(t, m->b.dom.tp, j, h, &q[0], &q[1], m->cfg.pad, &h));
    SG_TRY(sg_ag_norm(t, &nd, h, &q[2], &q[3], &h));
    SG_TRY(sg_ag_act(t, m->cfg.act, h, &h));
  }
  *y = h;
fail:
  return st;
}

/* A level: encoder l > 0: pool, block; encoder 0: block; decoder l:
 * up-sample in[0], concat with the skip in[1], block. */
static sg_status unet_level(sg_tape_t t, void *ctx, sg_var *const *in,
                            sg_var **out) {
  sg_status st = SG_OK;
  const unet_level_ctx *lc = ctx;
  struct sg_unet *m = lc->m;
  const int64_t two[2] = {2, 2};
  sg_var *h = in[0];
  if (!lc->dec && lc->l > 0) {
    const sg_window pw[2] = {{.kernel = 2, .stride = 2},
                             {.kernel = 2, .stride = 2}};
    SG_TRY(sg_ag_pool(t, SG_POOL_AVG, h, pw, &h));
  }
  if (lc->dec) {
    sg_var *parts[2] = {NULL, in[1]};
    SG_TRY(sg_ag_upsample(t, SG_UPSAMPLE_LINEAR, h, two, &parts[0]));
    SG_TRY(sg_ag_concat(t, 2, parts, &h));
  }
  SG_TRY(block(m, t, lc->dec ? m->dec[lc->l] : m->enc[lc->l], h, &out[0]));
fail:
  return st;
}

/* Level block k (encoder 0..L-1, then decoder L-2..0), checkpointed when
 * act_ckpt_every selects it. */
static sg_status unet_run_level(struct sg_unet *m, sg_tape_t t, int k, int l,
                                int dec, int nin, sg_var **in, sg_var **out) {
  unet_level_ctx *lc = &m->lctx[k];
  lc->m = m, lc->l = l, lc->dec = dec;
  if (m->cfg.act_ckpt_every > 0 && (k + 1) % m->cfg.act_ckpt_every == 0)
    return sg_ag_checkpoint(t, unet_level, lc, nin, in, 1, out);
  return unet_level(t, lc, in, out);
}

/* Pipeline pieces: 0 .. L-1 the encoder levels, L .. 2L-2 the decoder
 * levels L-2 .. 0, 2L-1 the output layer (8 parameters a level, in the
 * order the pieces run; 2 for the output layer). */
int sg_unet_nblocks(sg_unet_t m) { return m ? 2 * (int)m->cfg.levels : 0; }

void sg_unet_block_params(sg_unet_t m, int k, int *first, int *count) {
  const int out = k == sg_unet_nblocks(m) - 1;
  *first = out ? m->out : 8 * k;
  *count = out ? 2 : 8;
}

/* The bundle's size after piece k: 1 + the skips still to be consumed. */
static int unet_bundle_n(const struct sg_unet *m, int k) {
  const int L = (int)m->cfg.levels;
  return 1 + (k < L ? k : k < 2 * L - 1 ? 2 * L - 2 - k : 0);
}

/* Piece k on the bundle io (v[0] the activation, v[1 + j] skip j). */
static sg_status unet_piece(struct sg_unet *m, sg_tape_t t, int k,
                            sg_bundle *io) {
  sg_status st = SG_OK;
  const int L = (int)m->cfg.levels;
  sg_var **v = io->v;
  if (k == 0) {
    SG_TRY(sg_cn_domain_check_input(&m->b.dom, v[0], m->cfg.cin,
                                    "sg_unet_forward"));
    SG_TRY(sg_cn_domain_input(&m->b.dom, t, v[0], &v[0]));
    SG_TRY(unet_run_level(m, t, 0, 0, 0, 1, v, &v[0]));
  } else if (k < L) { /* encoder level k: its input becomes skip k - 1 */
    v[k] = v[0];
    SG_TRY(unet_run_level(m, t, k, k, 0, 1, &v[k], &v[0]));
  } else if (k < 2 * L - 1) { /* decoder level l consumes skip l */
    const int l = 2 * L - 2 - k;
    sg_var *in2[2] = {v[0], v[1 + l]};
    SG_TRY(unet_run_level(m, t, k, l, 1, 2, in2, &v[0]));
  } else {
    SG_TRY(sg_ag_linear(t, v[0], &m->b.p.vars[m->out], &m->b.p.vars[m->out + 1],
                        &v[0]));
  }
  io->n = unet_bundle_n(m, k);
fail:
  return st;
}

sg_status sg_unet_forward_blocks(sg_unet_t m, sg_tape_t t, int first, int count,
                                 sg_bundle *io) {
  sg_status st = SG_OK;
  const int nb = sg_unet_nblocks(m);
  if (!m || !t || !io || !m->b.p.bound || first < 0 || count < 1 ||
      first + count > nb)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_unet_forward: bad arguments (pieces %d..%d of %d)", first,
             first + count - 1, nb);
  const int want = first == 0 ? 1 : unet_bundle_n(m, first - 1);
  if (io->n != want)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_unet_forward: piece %d takes a bundle of %d (the activation "
             "and %d skips), not %d",
             first, want, want - 1, io->n);
  for (int k = 0; k < io->n; ++k)
    if (!io->v[k])
      SG_RAISE(SG_ERR_INVALID_ARG, "sg_unet_forward: tensor %d is NULL", k);
  for (int k = first; k < first + count; ++k) SG_TRY(unet_piece(m, t, k, io));
fail:
  return st;
}

sg_status sg_unet_forward(sg_unet_t m, sg_tape_t t, sg_var *x, sg_var **y) {
  sg_status st = SG_OK;
  if (!x || !y) SG_RAISE(SG_ERR_INVALID_ARG, "sg_unet_forward: bad arguments");
  sg_bundle io = {.n = 1, .v = {x}};
  SG_TRY(sg_unet_forward_blocks(m, t, 0, sg_unet_nblocks(m), &io));
  *y = io.v[0];
fail:
  return st;
}

/* ---- the model table ----------------------------------------------------- */

static void unet_defaults(sg_model_config *c) {
  sg_unet_config u = sg_unet_defaults();
  c->width = u.width, c->levels = u.levels, c->kernel = u.kernel,
  c->groups = u.groups;
  c->pad[0] = u.pad[0], c->pad[1] = u.pad[1];
}

static sg_status unet_create(sg_mesh_t mesh, const sg_model_config *c,
                             int64_t ny, int64_t nx, int64_t batch,
                             void **impl) {
  sg_unet_config u = {c->cin,           c->cout,   c->width,
                      c->levels,        c->kernel, c->groups,
                      c->add_grid,      c->act,    {c->pad[0], c->pad[1]},
                      c->act_ckpt_every};
  return sg_unet_create(mesh, &u, ny, nx, batch, (sg_unet_t *)impl);
}

static void unet_destroy(void *impl) {
  sg_unet_t m = impl;
  sg_unet_destroy(&m);
}

static void unet_describe(void *impl, const sg_model_config *c, char *buf,
                          size_t size) {
  snprintf(
      buf, size,
      "unet: width %lld, levels %lld, kernel %lld, groups %lld, pad %s/%s, %lld parameters",
      (long long)c->width, (long long)c->levels, (long long)c->kernel,
      (long long)c->groups, sg_boundary_name(c->pad[0]),
      sg_boundary_name(c->pad[1]), (long long)sg_cn_i_param_count(impl));
  sg_cn_describe_tp(impl, buf, size);
}

static sg_status unet_forward(void *impl, sg_tape_t t, sg_var *x, sg_var **y) {
  return sg_unet_forward(impl, t, x, y);
}

static int unet_nblocks(void *impl) { return sg_unet_nblocks(impl); }
static void unet_block_params(void *impl, int k, int *first, int *count) {
  sg_unet_block_params(impl, k, first, count);
}
static sg_status unet_forward_blocks(void *impl, sg_tape_t t, int first,
                                     int count, sg_bundle *io) {
  return sg_unet_forward_blocks(impl, t, first, count, io);
}

static const char *const unet_size_keys[] = {"width",  "levels", "kernel",
                                             "groups", "pad_y",  "pad_x",
                                             NULL};

const sg_model_i sg_unet_model_i = {.name = "unet",
                                    .size_keys = unet_size_keys,
                                    .defaults = unet_defaults,
                                    .create = unet_create,
                                    .destroy = unet_destroy,
                                    .param_count = sg_cn_i_param_count,
                                    .param_info = sg_cn_i_param_info,
                                    .bind = sg_cn_i_bind,
                                    .init = sg_cn_i_init,
                                    .params = sg_cn_i_params,
                                    .box = sg_cn_i_box,
                                    .describe = unet_describe,
                                    .mark = sg_cn_i_mark,
                                    .forward = unet_forward,
                                    .collective_seconds = NULL,
                                    .nblocks = unet_nblocks,
                                    .block_params = unet_block_params,
                                    .forward_blocks = unet_forward_blocks};
