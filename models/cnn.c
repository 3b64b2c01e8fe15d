/* shardgrid — ResNet-style CNN, domain-, data- and tensor-parallel.
 *
 * Tensor parallelism over the mesh dim "tp" (docs/strategies.md): each
 * residual block is a Megatron pair over channels, conv1 column-parallel
 * (this rank's output channels: whole GroupNorm groups, groups >= tp), the
 * norm and the activation on the channel-split activation, conv2
 * row-parallel (its input channels, one all-reduce of the partial sums,
 * the bias after); the lift, the residual sums and the projection are
 * replicated over tp. */
#include "cnn.h"

#include "convnet_impl.h"
#include "sg_model_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CNN_MAX_BLOCKS = 24 };

struct sg_cnn;
typedef struct cnn_block_ctx { /* a residual block as a checkpointed block */
  struct sg_cnn *m;
  int b;
} cnn_block_ctx;

struct sg_cnn {
  sg_cn_base
      b; /* first: the convnet part of the model table (convnet_impl.h) */
  sg_cnn_config cfg;
  cnn_block_ctx bctx[CNN_MAX_BLOCKS];
  int lift, block0, proj; /* parameter indices */
  int64_t gl;             /* GroupNorm groups of this tp rank's channels */
};

sg_cnn_config sg_cnn_defaults(void) {
  sg_cnn_config c = {
      1, 1,   32, 4,           3,
      4, 128, 1,  SG_ACT_GELU, {SG_PAD_PERIODIC, SG_PAD_PERIODIC},
      0};
  return c;
}

sg_status sg_cnn_destroy(sg_cnn_t *model) {
  if (!model || !*model) return SG_OK;
  struct sg_cnn *m = *model;
  sg_cn_base_release(&m->b);
  free(m);
  *model = NULL;
  return SG_OK;
}

sg_status sg_cnn_create(sg_mesh_t mesh, const sg_cnn_config *cfg, int64_t ny,
                        int64_t nx, int64_t batch, sg_cnn_t *out) {
  sg_status st = SG_OK;
  struct sg_cnn *m = NULL;
  if (!mesh || !cfg || !out)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_cnn_create: NULL argument");
  *out = NULL;
  if (cfg->cin < 1 || cfg->cout < 1 || cfg->width < 1 || cfg->proj_width < 1 ||
      batch < 1)
    SG_RAISE(SG_ERR_CONFIG,
             "CNN: cin, cout, width, proj_width and batch must be >= 1");
  if (cfg->blocks < 0 || cfg->blocks > CNN_MAX_BLOCKS)
    SG_RAISE(SG_ERR_CONFIG, "CNN: blocks must be in 0..%d (got %lld)",
             CNN_MAX_BLOCKS, (long long)cfg->blocks);
  if (cfg->act_ckpt_every < 0)
    SG_RAISE(SG_ERR_CONFIG, "CNN: act_ckpt_every must be >= 0 (got %d)",
             cfg->act_ckpt_every);
  SG_TRY(
      sg_cn_check_kernel_groups("CNN", cfg->kernel, cfg->groups, cfg->width));
  SG_TRY(sg_cn_check_tp_groups(mesh, cfg->groups, "CNN"));
  if (ny < cfg->kernel || nx < cfg->kernel)
    SG_RAISE(SG_ERR_SHAPE, "CNN: grid %lldx%lld smaller than the kernel %lld",
             (long long)ny, (long long)nx, (long long)cfg->kernel);
  m = calloc(1, sizeof *m);
  if (!m) SG_RAISE(SG_ERR_ALLOC, "sg_cnn_create: out of memory");
  m->cfg = *cfg;
  m->b.p.stream = 2000;
  SG_TRY(sg_cn_domain_init_tp(&m->b.dom, mesh, ny, nx, batch, cfg->add_grid,
                              "CNN"));
  const int64_t cin = cfg->cin + (cfg->add_grid ? 2 : 0), w = cfg->width,
                k = cfg->kernel;
  /* a block's channel slice over tp: conv1's and the norm's output
   * channels, conv2's input channels */
  sg_cn_slice col = sg_cn_tp_slice(&m->b.dom, w, cfg->groups, 0, &m->gl),
              row = col;
  row.dim = col.dim < 0 ? -1 : 1;
  int ok = (m->lift = sg_cn_add_conv(&m->b.p, "lift", w, cin, k, NULL)) >= 0;
  m->block0 = m->b.p.n;
  for (int b = 0; ok && b < (int)cfg->blocks; ++b) {
    char nm[24];
    snprintf(nm, sizeof nm, "block%d.conv1", b);
    ok = ok && sg_cn_add_conv(&m->b.p, nm, w, w, k, &col) >= 0;
    snprintf(nm, sizeof nm, "block%d.norm", b);
    ok = ok && sg_cn_add_norm(&m->b.p, nm, w, &col) >= 0;
    snprintf(nm, sizeof nm, "block%d.conv2", b);
    ok = ok && sg_cn_add_conv(&m->b.p, nm, w, w, k, &row) >= 0;
  }
  m->proj = m->b.p.n;
  ok = ok && sg_cn_add_linear(&m->b.p, "proj1", cfg->proj_width, w) >= 0;
  ok = ok &&
       sg_cn_add_linear(&m->b.p, "proj2", cfg->cout, cfg->proj_width) >= 0;
  if (!ok)
    SG_RAISE(SG_ERR_CONFIG, "CNN: too many parameters tensors (at most %d)",
             SG_CN_MAX_PARAMS);
  *out = m;
  return SG_OK;
fail:
  sg_cnn_destroy(&m);
  return st;
}


/* Residual block b: h + conv2(act(norm(conv1(h)))); conv1 column- and
 * conv2 row-parallel over tp (the norm on this rank's whole groups). */
static sg_status cnn_block(sg_tape_t t, void *ctx, sg_var *const *in,
                           sg_var **out) {
  sg_status st = SG_OK;
  const cnn_block_ctx *bc = ctx;
  struct sg_cnn *m = bc->m;
  sg_var *q = &m->b.p.vars[m->block0 + 6 * bc->b], *h = in[0], *r = NULL;
  const sg_pad_mode *mode = m->cfg.pad;
  sg_group_t tp = m->b.dom.tp;
  sg_norm_desc nd = {.kind = SG_NORM_GROUP, .groups = m->gl, .eps = 1e-5};
  SG_TRY(sg_cn_conv_same_tp(t, tp, 0, h, &q[0], &q[1], mode, &r));
  SG_TRY(sg_ag_norm(t, &nd, r, &q[2], &q[3], &r));
  SG_TRY(sg_ag_act(t, m->cfg.act, r, &r));
  SG_TRY(sg_cn_conv_same_tp(t, tp, 1, r, &q[4], &q[5], mode, &r));
  SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, h, r, &out[0]));
fail:
  return st;
}

/* Pipeline pieces: 0 the lift, 1..blocks the residual blocks, blocks + 1
 * the projection. */
int sg_cnn_nblocks(sg_cnn_t m) { return m ? (int)m->cfg.blocks + 2 : 0; }

void sg_cnn_block_params(sg_cnn_t m, int k, int *first, int *count) {
  const int nb = (int)m->cfg.blocks;
  *first = k == 0 ? m->lift : k <= nb ? m->block0 + 6 * (k - 1) : m->proj;
  *count = k == 0 ? 2 : k <= nb ? 6 : 4;
}

/* Residual block b on the tape, checkpointed if the config says so. */
static sg_status cnn_run_block(struct sg_cnn *m, sg_tape_t t, int b,
                               sg_var **h) {
  cnn_block_ctx *bc = &m->bctx[b];
  bc->m = m, bc->b = b;
  const int ck = m->cfg.act_ckpt_every > 0 &&
                 (b + 1) % m->cfg.act_ckpt_every == 0;
  return ck ? sg_ag_checkpoint(t, cnn_block, bc, 1, h, 1, h)
            : cnn_block(t, bc, h, h);
}

sg_status sg_cnn_forward_blocks(sg_cnn_t m, sg_tape_t t, int first, int count,
                                sg_var *x, sg_var **y) {
  sg_status st = SG_OK;
  const int nb = sg_cnn_nblocks(m);
  if (!m || !t || !x || !y || !m->b.p.bound || first < 0 || count < 1 ||
      first + count > nb)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_cnn_forward: bad arguments (pieces %d..%d of %d)", first,
             first + count - 1, nb);
  sg_var *P = m->b.p.vars, *h = x;
  const sg_pad_mode *mode = m->cfg.pad;
  for (int k = first; k < first + count; ++k) {
    if (k == 0) {
      SG_TRY(
          sg_cn_domain_check_input(&m->b.dom, x, m->cfg.cin, "sg_cnn_forward"));
      SG_TRY(sg_cn_domain_input(&m->b.dom, t, x, &h));
      SG_TRY(sg_cn_conv_same(t, h, &P[m->lift], &P[m->lift + 1], mode, &h));
    } else if (k < nb - 1) {
      SG_TRY(cnn_run_block(m, t, k - 1, &h));
    } else {
      SG_TRY(sg_ag_linear(t, h, &P[m->proj], &P[m->proj + 1], &h));
      SG_TRY(sg_ag_act(t, m->cfg.act, h, &h));
      SG_TRY(sg_ag_linear(t, h, &P[m->proj + 2], &P[m->proj + 3], &h));
    }
  }
  *y = h;
fail:
  return st;
}

sg_status sg_cnn_forward(sg_cnn_t m, sg_tape_t t, sg_var *x, sg_var **y) {
  return sg_cnn_forward_blocks(m, t, 0, sg_cnn_nblocks(m), x, y);
}

/* ---- the model table ----------------------------------------------------- */

static void cnn_defaults(sg_model_config *c) {
  sg_cnn_config n = sg_cnn_defaults();
  c->width = n.width, c->blocks = n.blocks, c->kernel = n.kernel,
  c->groups = n.groups;
  c->proj_width = n.proj_width, c->pad[0] = n.pad[0], c->pad[1] = n.pad[1];
}

static sg_status cnn_create(sg_mesh_t mesh, const sg_model_config *c,
                            int64_t ny, int64_t nx, int64_t batch,
                            void **impl) {
  sg_cnn_config n = {c->cin,           c->cout,
                     c->width,         c->blocks,
                     c->kernel,        c->groups,
                     c->proj_width,    c->add_grid,
                     c->act,           {c->pad[0], c->pad[1]},
                     c->act_ckpt_every};
  return sg_cnn_create(mesh, &n, ny, nx, batch, (sg_cnn_t *)impl);
}

static void cnn_destroy(void *impl) {
  sg_cnn_t m = impl;
  sg_cnn_destroy(&m);
}

static void cnn_describe(void *impl, const sg_model_config *c, char *buf,
                         size_t size) {
  snprintf(
      buf, size,
      "cnn: width %lld, blocks %lld, kernel %lld, groups %lld, proj_width %lld, pad %s/%s, "
      "%lld parameters",
      (long long)c->width, (long long)c->blocks, (long long)c->kernel,
      (long long)c->groups, (long long)c->proj_width,
      sg_boundary_name(c->pad[0]), sg_boundary_name(c->pad[1]),
      (long long)sg_cn_i_param_count(impl));
  sg_cn_describe_tp(impl, buf, size);
}

static sg_status cnn_forward(void *impl, sg_tape_t t, sg_var *x, sg_var **y) {
  return sg_cnn_forward(impl, t, x, y);
}

static int cnn_nblocks(void *impl) { return sg_cnn_nblocks(impl); }
static void cnn_block_params(void *impl, int k, int *first, int *count) {
  sg_cnn_block_params(impl, k, first, count);
}
static sg_status cnn_forward_blocks(void *impl, sg_tape_t t, int first,
                                    int count, sg_bundle *io) {
  sg_status st = sg_model_bundle_one(io, "cnn");
  if (st == SG_OK)
    st = sg_cnn_forward_blocks(impl, t, first, count, io->v[0], &io->v[0]);
  return st;
}

static const char *const cnn_size_keys[] = {"width",  "proj_width", "blocks",
                                            "kernel", "groups",     "pad_y",
                                            "pad_x",  NULL};

const sg_model_i sg_cnn_model_i = {.name = "cnn",
                                   .size_keys = cnn_size_keys,
                                   .defaults = cnn_defaults,
                                   .create = cnn_create,
                                   .destroy = cnn_destroy,
                                   .param_count = sg_cn_i_param_count,
                                   .param_info = sg_cn_i_param_info,
                                   .bind = sg_cn_i_bind,
                                   .init = sg_cn_i_init,
                                   .params = sg_cn_i_params,
                                   .box = sg_cn_i_box,
                                   .describe = cnn_describe,
                                   .mark = sg_cn_i_mark,
                                   .forward = cnn_forward,
                                   .collective_seconds = NULL,
                                   .nblocks = cnn_nblocks,
                                   .block_params = cnn_block_params,
                                   .forward_blocks = cnn_forward_blocks,
                                   .constants = sg_cn_i_constants,
                                   .device_ok = 1};
