/* shardgrid — ViT on a sharded grid (docs/transformers.md): patch
 * embedding (a strided convolution of the field), a learned 2-D position
 * embedding Shard over h, w like the tokens, pre-LN blocks (multi-head
 * self-attention, MLP with GELU; ring attention when the tokens are split),
 * a final LayerNorm and the un-patchify (a per-token linear map to
 * cout x p x p values and the pixel shuffle back to the grid: a transposed
 * convolution with kernel = stride = p).
 *
 * Tokens are the patches of the grid: the embedding's outputs are the
 * balanced split of the patch grid over h, w (the output-partition rule of
 * the window ops), so the domain dims split the sequence; the un-patchify
 * returns to the balanced split of the field (the target's). A grid not
 * divisible by the patch is refused (SG_ERR_CONFIG, no padding); so is a
 * patch larger than the smallest shard. */
#include "convnet_impl.h"
#include "sg_decomp.h"
#include "sg_model_impl.h"
#include "sg_rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { VIT_MAX_DEPTH = 24, VIT_MLP_RATIO = 4 };

struct vit;
typedef struct vit_block_ctx { /* a block as a checkpointed block */
  struct vit *m;
  int b;
} vit_block_ctx;

/* A parameter split over tp: its box of the global array (the local
 * variable is that box, stored contiguously). */
typedef struct vit_box {
  int ndim;
  unsigned mask; /* the mesh dims it is split over (tp or ep) */
  int64_t global[3], start[3], count[3];
} vit_box;

typedef struct vit {
  sg_cn_base b; /* first: the shared part of the model table */
  int swin;     /* Swin: windowed attention, shifted in odd blocks */
  vit_block_ctx bctx[VIT_MAX_DEPTH];
  sg_model_config cfg;
  int64_t hp, wp;               /* global patch grid */
  int64_t hp0, nhp, wp0, nwp;   /* this rank's patches (the tokens) */
  unsigned domain_mask;         /* mesh dims h, w: the position field's */
  int embed, pos, block0, head; /* parameter indices */
  int blk[VIT_MAX_DEPTH + 1];   /* block b's first parameter; [depth]: head */
  /* mixture of experts: the ep group (NULL: none or size 1), this rank's
   * experts [e0, e0 + el), the mesh dim's bit */
  sg_group_t ep;
  unsigned ep_mask;
  int64_t e0, el;
  /* tensor parallelism: the tp group (NULL: no tp dim), its size and this
   * rank's index, the mesh dim's bit; this rank's channels [c0, c0 + cl)
   * of the width and [f0, f0 + fl) of the MLP's hidden width */
  sg_group_t tp;
  int tps, tpr;
  unsigned tp_mask;
  int64_t c0, cl, f0, fl;
  /* Megatron-SP (cfg.tp_sequence with tp > 1): between the TP regions the
   * tokens are split over tp; `like` is the shape and sharding of what tp
   * slices (the embedding's output, or with the sp dim this rank's sp
   * piece; no data), set by each forward */
  int seq;
  sg_var like;
  /* the sp dim (sequence parallelism): its group (NULL: none or size 1);
   * after the embedding the tokens are split over sp until the head;
   * `splike` is the full token tensor's shape and sharding */
  sg_group_t sp;
  int sps;
  unsigned sp_mask;
  sg_var splike;
  int64_t gbatch;                /* the global batch (dom.gbatch) */
  sg_attn_groups ag;             /* the attention's: domain x sp, sp, domain */
  vit_box box[SG_CN_MAX_PARAMS]; /* ndim 0: not split over tp */
} vit;

static void vit_destroy(void *impl) {
  vit *m = impl;
  if (!m) return;
  sg_cn_base_release(&m->b);
  free(m);
}

/* The size of mesh dim `name` (1 if absent). */
static int vit_dim(sg_mesh_t mesh, const char *name) {
  const int k = sg_mesh_find_dim(mesh, name);
  return k >= 0 ? sg_mesh_dim_size(mesh, k) : 1;
}

/* Mixture of experts: its keys, E % ep, the experts' hidden width % tp
 * (it is split over tp), no ep without experts. */
static sg_status vit_moe_check(sg_mesh_t mesh, const sg_model_config *c) {
  sg_status st = SG_OK;
  const int ep = vit_dim(mesh, "ep"), tp = vit_dim(mesh, "tp");
  if (c->moe_experts < 0)
    SG_RAISE(SG_ERR_CONFIG, "vit: moe_experts must be >= 0 (got %lld)",
             (long long)c->moe_experts);
  if (c->moe_experts == 0) {
    if (ep > 1)
      SG_RAISE(SG_ERR_CONFIG,
               "vit: mesh dim ep (size %d) splits the experts: set "
               "moe_experts (divisible by ep) or use dp",
               ep);
    goto fail;
  }
  if (c->moe_every < 1)
    SG_RAISE(SG_ERR_CONFIG, "vit: moe_every must be >= 1 (got %d)",
             c->moe_every);
  if ((VIT_MLP_RATIO * c->width) % tp)
    SG_RAISE(SG_ERR_CONFIG,
             "vit: the experts' hidden width (%d x width = %lld) must be "
             "divisible by tp (%d): tensor parallelism splits it",
             VIT_MLP_RATIO, (long long)(VIT_MLP_RATIO * c->width), tp);
  const sg_moe_desc d = {.experts = c->moe_experts, .topk = c->moe_topk};
  SG_TRY(sg_moe_check(&d, c->width));
  if (c->moe_experts % ep)
    SG_RAISE(SG_ERR_CONFIG,
             "vit: moe_experts (%lld) must be divisible by ep (%d): every ep "
             "rank holds moe_experts/ep experts",
             (long long)c->moe_experts, ep);
fail:
  return st;
}

/* tp_sequence: at least one token per tp rank on the rank with the fewest
 * tokens (with the sp dim: in the smallest sp piece, which tp slices
 * further). With pp the slices cross the stage boundary (vit_run). */
static sg_status vit_check_seq(sg_mesh_t mesh, const sg_model_config *c,
                               int64_t ny, int64_t nx) {
  sg_status st = SG_OK;
  const int tp = vit_dim(mesh, "tp"),
            sp = vit_dim(mesh, "sp") * vit_dim(mesh, "cp");
  const int64_t p = c->patch > 0 ? c->patch : 1,
                tok = (ny / p / vit_dim(mesh, "h")) *
                      (nx / p / vit_dim(mesh, "w")) / sp;
  if (tp > 1 && tok < tp)
    SG_RAISE(SG_ERR_CONFIG,
             "vit: tp_sequence needs at least one token per tp rank (%lld "
             "tokens on the smallest %s, tp = %d)",
             (long long)tok, sp > 1 ? "sp piece" : "shard", tp);
fail:
  return st;
}

/* The sp dim: not both sp and cp, and at least one token per sp rank on
 * the rank with the fewest tokens. */
static sg_status vit_check_sp(sg_mesh_t mesh, const sg_model_config *c,
                              int64_t ny, int64_t nx) {
  sg_status st = SG_OK;
  const int sp = vit_dim(mesh, "sp") * vit_dim(mesh, "cp");
  const int64_t p = c->patch > 0 ? c->patch : 1,
                tok = (ny / p / vit_dim(mesh, "h")) *
                      (nx / p / vit_dim(mesh, "w"));
  if (sp == 1) goto fail;
  if (vit_dim(mesh, "sp") > 1 && vit_dim(mesh, "cp") > 1)
    SG_RAISE(SG_ERR_CONFIG, "vit: mesh dims sp and cp are the same role: "
                            "use one");
  if (tok < sp)
    SG_RAISE(SG_ERR_CONFIG,
             "vit: the sp dim needs at least one token per sp rank (%lld "
             "tokens on the smallest shard, sp = %d)",
             (long long)tok, sp);
fail:
  return st;
}

/* The checks that need only the config and the mesh: every rank finds
 * the same error. */
static sg_status vit_check(sg_mesh_t mesh, const sg_model_config *c, int64_t ny,
                           int64_t nx, int64_t batch, int swin) {
  sg_status st = SG_OK;
  const int64_t p = c->patch;
  const char *who = swin ? "swin" : "vit";
  if (c->cin < 1 || c->cout < 1 || c->width < 1 || batch < 1)
    SG_RAISE(SG_ERR_CONFIG, "%s: cin, cout, width and batch must be >= 1", who);
  if (c->act_ckpt_every < 0)
    SG_RAISE(SG_ERR_CONFIG, "%s: act_ckpt_every must be >= 0 (got %d)", who,
             c->act_ckpt_every);
  if (c->depth < 0 || c->depth > VIT_MAX_DEPTH)
    SG_RAISE(SG_ERR_CONFIG, "%s: depth must be in 0..%d (got %lld)", who,
             VIT_MAX_DEPTH, (long long)c->depth);
  if (c->heads < 1 || c->width % c->heads)
    SG_RAISE(SG_ERR_CONFIG, "%s: heads (%lld) must divide width (%lld)", who,
             (long long)c->heads, (long long)c->width);
  for (int k = 0; k < sg_mesh_ndims(mesh); ++k)
    if (!strcmp(sg_mesh_dim_name(mesh, k), "tp") &&
        c->heads % sg_mesh_dim_size(mesh, k))
      SG_RAISE(SG_ERR_CONFIG,
               "%s: heads (%lld) must be divisible by tp (%d): tensor "
               "parallelism splits the heads over the tp ranks",
               who, (long long)c->heads, sg_mesh_dim_size(mesh, k));
  if (swin && c->sp_mode != SG_SP_RING)
    SG_RAISE(SG_ERR_CONFIG,
             "swin: sp_mode does not apply (window attention is local to a "
             "rank; the shifted windows get their tokens by the halo layer)");
  SG_TRY(sg_sp_mode_check(mesh, (sg_sp_mode)c->sp_mode, c->heads, who));
  if (c->tp_sequence) SG_TRY(vit_check_seq(mesh, c, ny, nx));
  SG_TRY(vit_check_sp(mesh, c, ny, nx));
  SG_TRY(vit_moe_check(mesh, c));
  if (p < 1)
    SG_RAISE(SG_ERR_CONFIG, "%s: patch must be >= 1 (got %lld)", who,
             (long long)p);
  if (ny % p || nx % p)
    SG_RAISE(SG_ERR_CONFIG,
             "%s: grid %lldx%lld is not divisible by patch %lld (patches "
             "are not padded: choose a patch that divides both)",
             who, (long long)ny, (long long)nx, (long long)p);
  int ph = 1, pw = 1;
  for (int k = 0; k < sg_mesh_ndims(mesh); ++k) {
    const char *nm = sg_mesh_dim_name(mesh, k);
    const int sz = sg_mesh_dim_size(mesh, k);
    const int64_t n = !strcmp(nm, "h") ? ny : !strcmp(nm, "w") ? nx : 0;
    if (!strcmp(nm, "h")) ph = sz;
    if (!strcmp(nm, "w")) pw = sz;
    if (n && p > n / sz)
      SG_RAISE(SG_ERR_CONFIG,
               "%s: patch %lld is larger than the smallest shard (%lld "
               "cells of %lld over %s=%d): use a smaller patch or fewer "
               "%s ranks",
               who, (long long)p, (long long)(n / sz), (long long)n, nm, sz,
               nm);
  }
  char msg[256];
  if (swin &&
      !sg_swin_windows_fit(ny / p, nx / p, c->window, ph, pw, msg, sizeof msg))
    SG_RAISE(SG_ERR_CONFIG, "%s", msg);
fail:
  return st;
}

/* A parameter whose local variable is the box (start, count) of a global
 * array (ndim dims; the variable has vdim dims of vshape, the same
 * elements), U(-1/sqrt(fan_in), +) by global index. */
static int vit_add_box(vit *m, const char *name, int vdim,
                       const int64_t *vshape, int ndim, const int64_t *global,
                       const int64_t *start, const int64_t *count,
                       int64_t fan_in, unsigned mask) {
  const int i = sg_cn_params_add(&m->b.p, name, vdim, vshape,
                                 SG_CN_INIT_UNIFORM, fan_in);
  if (i < 0) return -1;
  vit_box *bx = &m->box[i];
  bx->ndim = ndim;
  bx->mask = mask;
  for (int d = 0; d < ndim; ++d)
    bx->global[d] = global[d], bx->start[d] = start[d], bx->count[d] = count[d];
  return i;
}

/* Block b has the experts: the last of every moe_every blocks. */
static int vit_moe_block(const vit *m, int b) {
  return m->cfg.moe_experts > 0 && (b + 1) % m->cfg.moe_every == 0;
}

/* Block b's mixture of experts (sg_ag_moe): the router (E, C), replicated;
 * the experts' fc1 (E, hid, C), its bias (E, hid), fc2 (E, C, hid), its
 * bias (E, C), each Shard over ep by expert (this rank's el experts from
 * e0) and fc1, its bias and fc2 over tp by hidden unit (this rank's fl
 * from f0, as the dense MLP's), initialised by global index like the dense
 * MLP's linears. */
static int vit_add_experts(vit *m, int b) {
  const int64_t C = m->cfg.width, hid = VIT_MLP_RATIO * C,
                E = m->cfg.moe_experts, e0 = m->e0, el = m->el, f0 = m->f0,
                fl = m->fl;
  const int64_t rs[2] = {E, C};
  const int64_t g[4][3] = {{E, hid, C}, {E, hid}, {E, C, hid}, {E, C}},
                n[4][3] = {{el, fl, C}, {el, fl}, {el, C, fl}, {el, C}},
                s0[4][3] = {{e0, f0, 0}, {e0, f0}, {e0, 0, f0}, {e0, 0}},
                nd[4] = {3, 2, 3, 2}, fan[4] = {C, C, hid, hid};
  const unsigned mask[4] = {m->ep_mask | m->tp_mask, m->ep_mask | m->tp_mask,
                            m->ep_mask | m->tp_mask, m->ep_mask};
  static const char *const sfx[4] = {"fc1.w", "fc1.b", "fc2.w", "fc2.b"};
  char nm[32];
  snprintf(nm, sizeof nm, "block%d.moe.router", b);
  int ok = sg_cn_params_add(&m->b.p, nm, 2, rs, SG_CN_INIT_UNIFORM, C) >= 0;
  for (int i = 0; ok && i < 4; ++i) {
    snprintf(nm, sizeof nm, "block%d.moe.%s", b, sfx[i]);
    ok = vit_add_box(m, nm, (int)nd[i], n[i], (int)nd[i], g[i], s0[i], n[i],
                     fan[i], mask[i]) >= 0;
  }
  return ok;
}

/* Block b's attention and MLP linears, split over tp (Megatron): qkv
 * (3, C, C) Shard by output channel (this rank's heads: rows c0.. of each
 * of q, k, v), its bias (3, C) alike; out (C, C) Shard by input channel,
 * its bias (C) replicated; fc1 (hid, C) Shard by output channel, its bias
 * (hid) alike; fc2 (C, hid) Shard by input channel, its bias replicated.
 * Without tp the boxes are the whole arrays. */
static int vit_add_block_linears(vit *m, int b) {
  sg_cn_params *P = &m->b.p;
  const int64_t C = m->cfg.width, hid = VIT_MLP_RATIO * C, c0 = m->c0,
                cl = m->cl, f0 = m->f0, fl = m->fl;
  char nm[32];
  int ok = 1;
#define VIT_NAME(suffix) snprintf(nm, sizeof nm, "block%d.%s", b, suffix)
  {
    const int64_t v[2] = {3 * cl, C}, g[3] = {3, C, C}, s0[3] = {0, c0, 0},
                  n[3] = {3, cl, C}, vb[1] = {3 * cl};
    VIT_NAME("qkv.w");
    ok = ok && vit_add_box(m, nm, 2, v, 3, g, s0, n, C, m->tp_mask) >= 0;
    VIT_NAME("qkv.b");
    ok = ok && vit_add_box(m, nm, 1, vb, 2, g, s0, n, C, m->tp_mask) >= 0;
  }
  {
    const int64_t v[2] = {C, cl}, g[2] = {C, C}, s0[2] = {0, c0}, bs[1] = {C};
    VIT_NAME("out.w");
    ok = ok && vit_add_box(m, nm, 2, v, 2, g, s0, v, C, m->tp_mask) >= 0;
    VIT_NAME("out.b");
    ok = ok && sg_cn_params_add(P, nm, 1, bs, SG_CN_INIT_UNIFORM, C) >= 0;
  }
  VIT_NAME("ln2");
  ok = ok && sg_cn_add_norm(P, nm, C, NULL) >= 0;
  if (vit_moe_block(m, b)) {
    ok = ok && vit_add_experts(m, b);
  } else {
    const int64_t v[2] = {fl, C}, g[2] = {hid, C}, s0[2] = {f0, 0};
    VIT_NAME("fc1.w");
    ok = ok && vit_add_box(m, nm, 2, v, 2, g, s0, v, C, m->tp_mask) >= 0;
    VIT_NAME("fc1.b");
    ok = ok && vit_add_box(m, nm, 1, v, 1, g, s0, v, C, m->tp_mask) >= 0;
    const int64_t v2[2] = {C, fl}, g2[2] = {C, hid}, s2[2] = {0, f0},
                  bs[1] = {C};
    VIT_NAME("fc2.w");
    ok = ok && vit_add_box(m, nm, 2, v2, 2, g2, s2, v2, hid, m->tp_mask) >= 0;
    VIT_NAME("fc2.b");
    ok = ok && sg_cn_params_add(P, nm, 1, bs, SG_CN_INIT_UNIFORM, hid) >= 0;
  }
  if (m->swin) { /* the relative position bias: (heads, (2W-1)^2), the
                    rank's heads over tp; Swin's trunc-normal(0.02) init is
                    U(-1/sqrt(R^2), +) here */
    const int64_t R = 2 * m->cfg.window - 1, H = m->cfg.heads, hl = H / m->tps,
                  v[2] = {hl, R * R}, g[2] = {H, R * R},
                  s0[2] = {hl * m->tpr, 0};
    VIT_NAME("rpb");
    ok = ok && vit_add_box(m, nm, 2, v, 2, g, s0, v, R * R, m->tp_mask) >= 0;
  }
#undef VIT_NAME
  return ok;
}

/* The parameter table: embedding, position field, blocks, head. */
static int vit_params(vit *m, int64_t cin) {
  sg_cn_params *P = &m->b.p;
  const int64_t w = m->cfg.width, p = m->cfg.patch, cout = m->cfg.cout;
  int ok = (m->embed = sg_cn_add_conv(P, "embed", w, cin, p, NULL)) >= 0;
  const int64_t pos_local[3] = {w, m->nhp, m->nwp};
  ok = ok && (m->pos = sg_cn_params_add(P, "pos", 3, pos_local, SG_CN_INIT_ZERO,
                                        1)) >= 0;
  m->block0 = P->n;
  for (int b = 0; ok && b < (int)m->cfg.depth; ++b) {
    char nm[24];
    m->blk[b] = P->n;
    snprintf(nm, sizeof nm, "block%d.ln1", b);
    ok = ok && sg_cn_add_norm(P, nm, w, NULL) >= 0;
    ok = ok && vit_add_block_linears(m, b);
  }
  m->head = m->blk[m->cfg.depth] = P->n;
  ok = ok && sg_cn_add_norm(P, "ln_f", w, NULL) >= 0;
  /* un-patchify: (C, cout, p, p), a transposed convolution k = s = p */
  const int64_t us[4] = {w, cout, p, p}, ub[1] = {cout};
  ok = ok &&
       sg_cn_params_add(P, "unpatch.w", 4, us, SG_CN_INIT_UNIFORM, w) >= 0;
  ok = ok &&
       sg_cn_params_add(P, "unpatch.b", 1, ub, SG_CN_INIT_UNIFORM, w) >= 0;
  return ok;
}

/* The tp group and this rank's channel slices (heads % tp == 0 checked). */
static sg_status vit_tp_init(vit *m, sg_mesh_t mesh) {
  sg_status st = SG_OK;
  const int64_t C = m->cfg.width, hid = VIT_MLP_RATIO * C;
  SG_TRY(sg_cn_tp_group(mesh, &m->tp, &m->tps, &m->tpr, &m->tp_mask));
  m->cl = C / m->tps, m->c0 = m->cl * m->tpr;
  /* the experts over ep (E % ep == 0 checked) */
  m->el = m->cfg.moe_experts, m->e0 = 0;
  const int k = sg_mesh_find_dim(mesh, "ep");
  if (k >= 0 && m->cfg.moe_experts > 0) {
    m->ep_mask = 1u << k;
    m->el /= sg_mesh_dim_size(mesh, k);
    m->e0 = m->el * sg_mesh_coord(mesh, k);
    if (sg_mesh_dim_size(mesh, k) > 1)
      SG_TRY(sg_mesh_group(mesh, m->ep_mask, &m->ep));
  }
  m->fl = hid / m->tps, m->f0 = m->fl * m->tpr;
  m->seq = m->cfg.tp_sequence && m->tps > 1;
  m->sps = 1;
  for (int d = 0; d < sg_mesh_ndims(mesh); ++d) {
    const char *nm = sg_mesh_dim_name(mesh, d);
    if ((!strcmp(nm, "sp") || !strcmp(nm, "cp")) &&
        sg_mesh_dim_size(mesh, d) > 1) {
      m->sps = sg_mesh_dim_size(mesh, d);
      m->sp_mask = 1u << d;
      SG_TRY(sg_mesh_group(mesh, 1u << d, &m->sp));
    }
  }
fail:
  return st;
}

static sg_status vit_create_as(sg_mesh_t mesh, const sg_model_config *c,
                               int64_t ny, int64_t nx, int64_t batch,
                               void **impl, int swin) {
  sg_status st = SG_OK;
  vit *m = NULL;
  if (!mesh || !c || !impl) SG_RAISE(SG_ERR_INVALID_ARG, "vit: NULL argument");
  *impl = NULL;
  SG_TRY(vit_check(mesh, c, ny, nx, batch, swin));
  m = calloc(1, sizeof *m);
  if (!m) SG_RAISE(SG_ERR_ALLOC, "vit: out of memory");
  m->cfg = *c;
  m->swin = swin;
  m->b.p.stream = 4000;
  SG_TRY(
      sg_cn_domain_init_tp(&m->b.dom, mesh, ny, nx, batch, c->add_grid, "vit"));
  /* samples split over several of dp, fsdp, ep: the activations are
   * Shard(0) over every one of them, as the conv nets' (the tape and the
   * sharded ops take a dim split over several mesh dims); no op of the
   * model communicates over a batch dim */
  m->gbatch = m->b.dom.gbatch;
  SG_TRY(vit_tp_init(m, mesh));
  m->hp = ny / c->patch, m->wp = nx / c->patch;
  m->hp0 = 0, m->nhp = m->hp, m->wp0 = 0, m->nwp = m->wp;
  for (int k = 0; k < sg_mesh_ndims(mesh); ++k) {
    const char *nm = sg_mesh_dim_name(mesh, k);
    const int sz = sg_mesh_dim_size(mesh, k), co = sg_mesh_coord(mesh, k);
    if (!strcmp(nm, "h"))
      m->hp0 = sg_split_offset(m->hp, sz, co),
      m->nhp = sg_split_size(m->hp, sz, co), m->domain_mask |= 1u << k;
    if (!strcmp(nm, "w"))
      m->wp0 = sg_split_offset(m->wp, sz, co),
      m->nwp = sg_split_size(m->wp, sz, co), m->domain_mask |= 1u << k;
  }
  if (m->sp) {
    m->ag.sp = m->sp;
    SG_TRY(sg_mesh_group(mesh, m->domain_mask | m->sp_mask, &m->ag.seq));
    SG_TRY(sg_mesh_group(mesh, m->domain_mask, &m->ag.domain));
  }
  if (!vit_params(m, c->cin + (c->add_grid ? 2 : 0)))
    SG_RAISE(SG_ERR_CONFIG, "vit: too many parameter tensors (at most %d)",
             SG_CN_MAX_PARAMS);
  *impl = m;
  return SG_OK;
fail:
  vit_destroy(m);
  return st;
}

static sg_status vit_create(sg_mesh_t mesh, const sg_model_config *c,
                            int64_t ny, int64_t nx, int64_t batch,
                            void **impl) {
  return vit_create_as(mesh, c, ny, nx, batch, impl, 0);
}

static sg_status swin_create(sg_mesh_t mesh, const sg_model_config *c,
                             int64_t ny, int64_t nx, int64_t batch,
                             void **impl) {
  return vit_create_as(mesh, c, ny, nx, batch, impl, 1);
}

static void vit_defaults(sg_model_config *c) {
  c->patch = 4, c->heads = 4, c->depth = 4;
  c->moe_topk = 1, c->moe_every = 1, c->moe_capacity = 1.25, c->moe_aux = 0.01;
}

static void swin_defaults(sg_model_config *c) {
  c->patch = 4, c->heads = 4, c->depth = 4, c->window = 4;
  c->moe_topk = 1, c->moe_every = 1, c->moe_capacity = 1.25, c->moe_aux = 0.01;
}

int sg_swin_windows_fit(int64_t hp, int64_t wp, int64_t window, int ph, int pw,
                        char *msg, size_t size) {
  const int64_t n[2] = {hp, wp};
  const int P[2] = {ph, pw};
  if (window < 1 || window > hp || window > wp) {
    snprintf(msg, size,
             window < 1
                 ? "swin: window must be >= 1 (got %lld; the token grid "
                   "is %lldx%lld)"
                 : "swin: window %lld is larger than the %lldx%lld token "
                   "grid (grid / patch)",
             (long long)window, (long long)hp, (long long)wp);
    return 0;
  }
  for (int d = 0; d < 2; ++d)
    if (n[d] % window) {
      snprintf(msg, size,
               "swin: the %lld token %s are not a multiple of window %lld "
               "(windows are not padded: choose a window that divides the "
               "token grid)",
               (long long)n[d], d ? "columns" : "rows", (long long)window);
      return 0;
    }
  for (int d = 0; d < 2; ++d) /* balanced blocks: the sizes of coords 0, P-1 */
    if (P[d] > 1 && (sg_split_size(n[d], P[d], 0) % window ||
                     sg_split_size(n[d], P[d], P[d] - 1) % window)) {
      snprintf(msg, size,
               "swin: the %s=%d split of %lld token %s gives blocks of %lld "
               "and %lld: every rank's block must hold whole windows (a "
               "multiple of window %lld; choose %s ranks that divide the "
               "%lld windows)",
               d ? "w" : "h", P[d], (long long)n[d], d ? "columns" : "rows",
               (long long)sg_split_size(n[d], P[d], 0),
               (long long)sg_split_size(n[d], P[d], P[d] - 1),
               (long long)window, d ? "w" : "h", (long long)(n[d] / window));
      return 0;
    }
  return 1;
}

/* The position field: this rank's box of (C, hp, wp). */
static sg_status vit_param_info(void *impl, int i, sg_param_info *pi) {
  sg_status st = SG_OK;
  vit *m = impl;
  SG_TRY(sg_cn_i_param_info(impl, i, pi));
  if (i == m->pos) {
    pi->global_shape[1] = m->hp, pi->global_shape[2] = m->wp;
    pi->start[1] = m->hp0, pi->start[2] = m->wp0;
    pi->shard_dims = m->domain_mask;
  }
  const vit_box *bx = &m->box[i];
  if (bx->ndim > 0) { /* split over tp (when there is a tp dim) */
    pi->ndim = bx->ndim;
    for (int d = 0; d < bx->ndim; ++d)
      pi->global_shape[d] = bx->global[d], pi->start[d] = bx->start[d],
      pi->count[d] = bx->count[d];
    pi->shard_dims = bx->mask;
  }
fail:
  return st;
}

static sg_status vit_init(void *impl, uint64_t seed) {
  sg_status st = SG_OK;
  vit *m = impl;
  SG_TRY(sg_cn_i_init(impl, seed));
  /* the position field by global index (the same on every mesh), N(0, 0.02)
   * as ViT's */
  const int64_t g[3] = {m->cfg.width, m->hp, m->wp},
                off[3] = {0, m->hp0, m->wp0},
                ext[3] = {m->cfg.width, m->nhp, m->nwp};
  SG_TRY(sg_rng_fill_box(SG_RNG_NORMAL, 0.0, 0.02, seed,
                         m->b.p.stream + (uint64_t)m->pos, 3, g, off, ext,
                         SG_DTYPE_F32, m->b.p.vars[m->pos].value.data));
  /* the tp-split linears by global index too: every tp starts alike */
  for (int i = 0; i < m->b.p.n; ++i) {
    const vit_box *bx = &m->box[i];
    if (bx->ndim == 0) continue;
    const double hi = 1.0 / sqrt((double)m->b.p.fan_in[i]);
    SG_TRY(sg_rng_fill_box(SG_RNG_UNIFORM, -hi, hi, seed,
                           m->b.p.stream + (uint64_t)i, bx->ndim, bx->global,
                           bx->start, bx->count, SG_DTYPE_F32,
                           m->b.p.vars[i].value.data));
  }
fail:
  return st;
}

/* LayerNorm with the parameters at P[0], P[1]: on token slices
 * (Megatron-SP) their gradients are partial over tp (sg_ag_tp_param). */
static sg_status vit_ln(vit *m, sg_tape_t t, sg_var *P, sg_var *x, sg_var **y) {
  sg_status st = SG_OK;
  sg_var *g = &P[0], *b = &P[1];
  if (m->seq) {
    SG_TRY(sg_ag_tp_param(t, m->tp, g, &g));
    SG_TRY(sg_ag_tp_param(t, m->tp, b, &b));
  }
  SG_TRY(sg_ag_layernorm(t, 1e-5, x, g, b, y));
fail:
  return st;
}

/* Swin's attention of block b (parameters q): in odd blocks the tokens
 * are rolled by W/2 in both dims (periodic: the halo layer brings the
 * neighbours' rows) before the QKV projection and rolled back before the
 * output projection (both act per token, so they commute with the roll);
 * the attention is in the W x W windows with the block's relative
 * position bias (the block's last parameter), and in a dim that is not
 * periodic (pad_y / pad_x other than periodic) with Swin's mask: the
 * tokens that wrapped around do not attend to the others. With Megatron-SP x is this
 * tp rank's token slice: the QKV projection runs on the all-gathered
 * tokens and the roll on its output (the slices are of the unrolled
 * tokens); the output projection's sums are reduce-scattered to the
 * slices. */
static sg_status swin_attention(vit *m, sg_tape_t t, int b, sg_var *q,
                                sg_var *x, sg_var **y) {
  sg_status st = SG_OK;
  const int64_t W = m->cfg.window, cl = m->cl, s = W / 2, fwd[2] = {s, s},
                back[2] = {-s, -s}, parts[3] = {cl, cl, cl};
  const int shift = b % 2 == 1 && s > 0;
  sg_var *h = x, *qkv[3] = {NULL, NULL, NULL};
  if (shift && !m->seq) SG_TRY(sg_ag_roll(t, h, fwd, &h));
  SG_TRY(sg_ag_linear_col_seq(t, m->tp, m->seq ? &m->like : NULL, h, &q[2],
                              &q[3], &h));
  if (shift && m->seq) SG_TRY(sg_ag_roll(t, h, fwd, &h));
  SG_TRY(sg_ag_split(t, h, 3, parts, qkv));
  /* Swin's mask where a dim is not periodic (pad_y, pad_x: the data's
   * boundary, as the conv nets' halos take it) */
  const int per[2] = {m->cfg.pad[0] == SG_PAD_PERIODIC,
                      m->cfg.pad[1] == SG_PAD_PERIODIC};
  SG_TRY(sg_ag_window_attention_masked(t, m->cfg.heads / m->tps, W,
                                       shift ? fwd : NULL, per, qkv[0], qkv[1],
                                       qkv[2],
                                       &q[m->blk[b + 1] - m->blk[b] - 1], &h));
  if (shift) SG_TRY(sg_ag_roll(t, h, back, &h));
  SG_TRY(sg_ag_linear_row_seq(t, m->tp, m->seq, h, &q[4], &q[5], y));
fail:
  return st;
}

/* The attention of block (parameters q) on this rank's token piece of the
 * sp dim: the QKV and output projections on the piece (over tp as
 * Megatron's; with tp_sequence x is this tp rank's slice of the piece:
 * all-gathered over tp before QKV, the output reduce-scattered back), the
 * attention over the ranks of the whole sequence (the domain dims x sp) by
 * sp_mode. */
static sg_status vit_attention_sp(vit *m, sg_tape_t t, sg_var *q, sg_var *x,
                                  sg_var **y) {
  sg_status st = SG_OK;
  const int64_t cl = m->cl, parts[3] = {cl, cl, cl};
  sg_var *h = NULL, *qkv[3] = {NULL, NULL, NULL};
  SG_TRY(sg_ag_linear_col_seq(t, m->tp, m->seq ? &m->like : NULL, x, &q[2],
                              &q[3], &h));
  SG_TRY(sg_ag_split(t, h, 3, parts, qkv));
  SG_TRY(sg_ag_attention_seq(t, (sg_sp_mode)m->cfg.sp_mode,
                             m->cfg.heads / m->tps, &m->ag, qkv[0], qkv[1],
                             qkv[2], &h));
  SG_TRY(sg_ag_linear_row_seq(t, m->tp, m->seq, h, &q[4], &q[5], y));
fail:
  return st;
}

static sg_status vit_gather(vit *m, sg_tape_t t, sg_var **h);

/* Block's experts (parameters q: router, fc1, its bias, fc2, its bias)
 * on x, their hidden width split over tp. With Megatron-SP or the sp dim x
 * is this rank's token piece: the experts run on the rank's whole tokens
 * (gathered over tp, then sp; the same routing on every tp and sp rank)
 * and the output is split again (backward: the pieces' gradients
 * all-gathered, so every sp rank runs the same backward); the experts'
 * parameters enter by their sp share (sp_share: 1/sp, the plan sums over
 * sp). */
static sg_status vit_moe(vit *m, sg_tape_t t, sg_var *q, sg_var *x,
                         sg_var **y) {
  sg_status st = SG_OK;
  const sg_moe_desc d = {.experts = m->cfg.moe_experts,
                         .topk = m->cfg.moe_topk,
                         .capacity = m->cfg.moe_capacity,
                         .aux_coef = m->cfg.moe_aux,
                         .ep = m->ep,
                         .tp = m->tp,
                         .batch = m->gbatch};
  sg_var *p[5];
  for (int i = 0; i < 5; ++i) {
    p[i] = &q[i];
    if (m->sp) SG_TRY(sg_ag_sp_share(t, m->sp, p[i], &p[i]));
  }
  SG_TRY(vit_gather(m, t, &x));
  SG_TRY(sg_ag_moe(t, &d, x, p[0], p[1], p[2], p[3], p[4], &x));
  if (m->sp) SG_TRY(sg_ag_tp_seq_scatter(t, m->sp, x, &x));
  if (m->seq) SG_TRY(sg_ag_tp_seq_scatter(t, m->tp, x, &x));
  *y = x;
fail:
  return st;
}

/* Pre-LN block: h + mhsa(ln1(h)), then h + fc2(gelu(fc1(ln2(h)))). With
 * Megatron-SP h, the LayerNorms and the residuals are token slices. */
static sg_status vit_block(sg_tape_t t, void *ctx, sg_var *const *in,
                           sg_var **out) {
  sg_status st = SG_OK;
  const vit_block_ctx *bc = ctx;
  vit *m = bc->m;
  sg_var *q = &m->b.p.vars[m->blk[bc->b]], *r = NULL, *h = in[0];
  const sg_var *like = m->seq ? &m->like : NULL;
  SG_TRY(vit_ln(m, t, &q[0], h, &r));
  if (m->swin)
    SG_TRY(swin_attention(m, t, bc->b, q, r, &r));
  else if (m->sp)
    SG_TRY(vit_attention_sp(m, t, q, r, &r));
  else
    SG_TRY(sg_ag_mhsa_seq(t, m->tp, like, (sg_sp_mode)m->cfg.sp_mode,
                          m->cfg.heads / m->tps, r, &q[2], &q[3], &q[4], &q[5],
                          &r));
  SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, h, r, &h));
  SG_TRY(vit_ln(m, t, &q[6], h, &r));
  if (vit_moe_block(m, bc->b)) {
    SG_TRY(vit_moe(m, t, &q[8], r, &r));
  } else {
    SG_TRY(sg_ag_linear_col_seq(t, m->tp, like, r, &q[8], &q[9], &r));
    SG_TRY(sg_ag_act(t, SG_ACT_GELU, r, &r));
    SG_TRY(sg_ag_linear_row_seq(t, m->tp, m->seq, r, &q[10], &q[11], &r));
  }
  SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, h, r, &out[0]));
fail:
  return st;
}

/* Block b on the tape, checkpointed if the config says so. */
static sg_status vit_run_block(vit *m, sg_tape_t t, int b, sg_var **h) {
  vit_block_ctx *bc = &m->bctx[b];
  bc->m = m, bc->b = b;
  const int ck = m->cfg.act_ckpt_every > 0 &&
                 (b + 1) % m->cfg.act_ckpt_every == 0;
  return ck ? sg_ag_checkpoint(t, vit_block, bc, 1, h, 1, h)
            : vit_block(t, bc, h, h);
}

/* Pipeline pieces (docs/pipeline.md): 0 the patch embedding and the
 * position field, 1 .. depth the blocks, depth + 1 the final LayerNorm and
 * the un-patchify; the tokens (N, C, hp, wp) pass between them. */
static int vit_nblocks(void *impl) { return (int)((vit *)impl)->cfg.depth + 2; }

static void vit_block_params(void *impl, int k, int *first, int *count) {
  const vit *m = impl;
  const int depth = (int)m->cfg.depth;
  if (k == 0)
    *first = m->embed, *count = m->block0 - m->embed;
  else if (k <= depth)
    *first = m->blk[k - 1], *count = m->blk[k] - m->blk[k - 1];
  else
    *first = m->head, *count = m->b.p.n - m->head;
}

/* A token tensor's shape and sharding, without its data. */
static void vit_like(sg_var *like, const sg_var *h) {
  *like = *h;
  memset(&like->grad, 0, sizeof like->grad);
  like->value.data = NULL, like->producer = NULL;
}

/* This rank's piece of its whole tokens h: over the sp dim (the domain
 * shard's tokens replicated over sp; the gradient Partial over sp), then
 * with tp_sequence over tp (Megatron-SP's slice of the sp piece). `splike`
 * and `like` keep the shapes the gathers return to. */
static sg_status vit_split(vit *m, sg_tape_t t, sg_var **h) {
  sg_status st = SG_OK;
  if (m->sp) {
    vit_like(&m->splike, *h);
    SG_TRY(sg_ag_sp_scatter(t, m->sp, *h, h));
  }
  if (m->seq) {
    vit_like(&m->like, *h);
    SG_TRY(sg_ag_tp_seq_scatter(t, m->tp, *h, h));
  }
fail:
  return st;
}

/* Megatron-SP's slices cross the pipeline's stage boundary as they are
 * (without the sp dim): a stage that starts in the blocks (or at the head)
 * receives this tp rank's slice, and `like`, the whole tokens' shape and
 * sharding that the gathers return to, is made from the domain (the
 * embedding's output: (B, C, nhp, nwp), marked like the field; no data, no
 * message) instead of from a tensor. */
static int vit_pass_slices(const vit *m) { return m->seq && !m->sp; }

static void vit_like_tokens(vit *m, const sg_var *slice) {
  const sg_cn_domain *d = &m->b.dom;
  sg_var *l = &m->like;
  memset(l, 0, sizeof *l);
  l->value.ndim = 4, l->value.dtype = slice->value.dtype;
  l->value.shape[0] = slice->value.shape[0], l->value.shape[1] = m->cfg.width;
  l->value.shape[2] = m->nhp, l->value.shape[3] = m->nwp;
  if (!d->split) return; /* the embedding's output is not marked */
  l->mesh = d->mesh;
  memcpy(l->placements, d->place, (size_t)d->nmesh * sizeof *d->place);
  l->global_shape[0] = d->gbatch, l->global_shape[1] = m->cfg.width;
  l->global_shape[2] = m->hp, l->global_shape[3] = m->wp;
}

/* vit_split's inverse: the whole tokens from this rank's piece. */
static sg_status vit_gather(vit *m, sg_tape_t t, sg_var **h) {
  sg_status st = SG_OK;
  if (m->seq) SG_TRY(sg_ag_tp_seq_gather(t, m->tp, *h, &m->like, h));
  if (m->sp) SG_TRY(sg_ag_tp_seq_gather(t, m->sp, *h, &m->splike, h));
fail:
  return st;
}

/* Pieces first .. first + count - 1 on h (the field for piece 0, else the
 * tokens); the result in *y. The blocks and the final LayerNorm run on
 * this rank's token piece (vit_split: over sp, then tp_sequence's over tp;
 * the whole tokens without either), split at the first of them and
 * gathered before the un-patchify. Between pipeline stages the pieces pass
 * whole tokens (gathered at the end of the range), or with tp_sequence
 * alone the tp slices (vit_pass_slices: the embedding's stage slices
 * before it sends, the next stage takes its input as the slice). */
static sg_status vit_run(vit *m, sg_tape_t t, int first, int count, sg_var *h,
                         sg_var **y) {
  sg_status st = SG_OK;
  sg_var *P = m->b.p.vars;
  const int64_t p = m->cfg.patch;
  const int depth = (int)m->cfg.depth;
  int split = 0; /* h is this rank's token piece */
  if (!m->b.p.bound)
    SG_RAISE(SG_ERR_INVALID_ARG, "vit forward: parameters not bound");
  for (int k = first; k < first + count; ++k) {
    if (k == 0) {
      sg_window pw[2] = {{.kernel = p, .stride = p},
                         {.kernel = p, .stride = p}};
      SG_TRY(sg_cn_domain_check_input(&m->b.dom, h, m->cfg.cin, "vit forward"));
      SG_TRY(sg_cn_domain_input(&m->b.dom, t, h, &h));
      SG_TRY(sg_ag_conv(t, h, &P[m->embed], &P[m->embed + 1], pw, &h));
      SG_TRY(sg_ag_add_field(t, h, &P[m->pos], &h));
    } else {
      if (!split && k == first && vit_pass_slices(m))
        vit_like_tokens(m, h); /* a stage's input: this rank's slice */
      else if (!split)
        SG_TRY(vit_split(m, t, &h));
      split = 1;
      if (k <= depth) {
        SG_TRY(vit_run_block(m, t, k - 1, &h));
        continue;
      }
      split = 0;
      SG_TRY(vit_ln(m, t, &P[m->head], h, &h));
      SG_TRY(vit_gather(m, t, &h));
      /* sp: the un-patchify alike on every sp rank: its parameters' share */
      sg_var *uw = &P[m->head + 2], *ub = &P[m->head + 3];
      if (m->sp) {
        SG_TRY(sg_ag_sp_share(t, m->sp, uw, &uw));
        SG_TRY(sg_ag_sp_share(t, m->sp, ub, &ub));
      }
      SG_TRY(sg_ag_convt(t, h, uw, ub, &h));
    }
  }
  /* a pipeline stage ending in the blocks passes the whole tokens on (the
   * gathers' backward: this rank's piece of the next stage's gradient), or
   * with Megatron-SP alone the slices */
  if (split && !vit_pass_slices(m)) SG_TRY(vit_gather(m, t, &h));
  if (first + count == 1 && vit_pass_slices(m)) /* the embedding's stage */
    SG_TRY(vit_split(m, t, &h));
  *y = h;
fail:
  return st;
}

static sg_status vit_forward(void *impl, sg_tape_t t, sg_var *x, sg_var **y) {
  vit *m = impl;
  if (!m || !t || !x || !y)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "vit forward: bad arguments");
  return vit_run(m, t, 0, vit_nblocks(m), x, y);
}

static sg_status vit_forward_blocks(void *impl, sg_tape_t t, int first,
                                    int count, sg_bundle *io) {
  sg_status st = sg_model_bundle_one(io, "vit");
  if (st == SG_OK) st = vit_run(impl, t, first, count, io->v[0], &io->v[0]);
  return st;
}

static void vit_describe(void *impl, const sg_model_config *c, char *buf,
                         size_t size) {
  const vit *m = impl;
  const int n = snprintf(
      buf, size,
      "%s: width %lld, patch %lld (%lldx%lld tokens), heads %lld, "
      "depth %lld, mlp %lld, %lld parameters",
      m->swin ? "swin" : "vit", (long long)c->width, (long long)c->patch,
      (long long)m->hp, (long long)m->wp, (long long)c->heads,
      (long long)c->depth, (long long)(VIT_MLP_RATIO * c->width),
      (long long)sg_cn_i_param_count(impl));
  if (m->tps > 1 && n > 0 && (size_t)n < size)
    snprintf(buf + n, size - (size_t)n,
             "; tensor parallel over tp=%d (%lld heads and the parameters "
             "counted per rank)",
             m->tps, (long long)(c->heads / m->tps));
  size_t k = strlen(buf);
  if (m->seq && k < size)
    snprintf(buf + k, size - k,
             "; Megatron-SP (tokens split over tp outside the TP regions)");
  k = strlen(buf);
  if (m->sp && k < size)
    snprintf(buf + k, size - k,
             "; sequence parallel over sp=%d (each rank's tokens split "
             "between the embedding and the head; the attention over the "
             "domain dims x sp)",
             m->sps);
  k = strlen(buf);
  if (c->moe_experts > 0 && k < size)
    snprintf(buf + k, size - k,
             "; mixture of experts in every %d block(s): %lld experts (%lld "
             "per ep rank), top-%d, capacity factor %g, aux %g",
             c->moe_every, (long long)c->moe_experts, (long long)m->el,
             c->moe_topk, c->moe_capacity, c->moe_aux);
  if (m->swin && k < size)
    snprintf(buf + k, size - k,
             "; window %lld, shifted by %lld in odd blocks (%s)",
             (long long)c->window, (long long)(c->window / 2),
             c->pad[0] == SG_PAD_PERIODIC && c->pad[1] == SG_PAD_PERIODIC
                 ? "periodic"
             : c->pad[0] == SG_PAD_PERIODIC ? "masked in x"
             : c->pad[1] == SG_PAD_PERIODIC ? "masked in y"
                                            : "masked in y and x");
  k = strlen(buf);
  if (c->sp_mode != SG_SP_RING && k < size)
    snprintf(buf + k, size - k, "; attention by %s",
             c->sp_mode == SG_SP_USP
                 ? (m->sp ? "USP (Ulysses over sp, ring over h, w)"
                          : "USP (Ulysses over w, ring over h)")
                 : "Ulysses");
}

/* heads does not change a shape: a checkpoint may be read with others */
static const char *const vit_size_keys[] = {"width",       "patch",     "depth",
                                            "moe_experts", "moe_every", NULL};

const sg_model_i sg_vit_model_i = {.name = "vit",
                                   .size_keys = vit_size_keys,
                                   .defaults = vit_defaults,
                                   .create = vit_create,
                                   .destroy = vit_destroy,
                                   .param_count = sg_cn_i_param_count,
                                   .param_info = vit_param_info,
                                   .bind = sg_cn_i_bind,
                                   .init = vit_init,
                                   .params = sg_cn_i_params,
                                   .box = sg_cn_i_box,
                                   .describe = vit_describe,
                                   .mark = sg_cn_i_mark,
                                   .forward = vit_forward,
                                   .nblocks = vit_nblocks,
                                   .block_params = vit_block_params,
                                   .forward_blocks = vit_forward_blocks};

/* heads and window fix the relative position bias tables' shape; pad_y
 * and pad_x whether a shifted block masks a non-periodic dim (the function
 * the weights were trained for: a resume with another is refused) */
static const char *const swin_size_keys[] = {
    "width",       "patch",     "depth", "heads", "window",
    "moe_experts", "moe_every", "pad_y", "pad_x", NULL};

const sg_model_i sg_swin_model_i = {.name = "swin",
                                    .size_keys = swin_size_keys,
                                    .defaults = swin_defaults,
                                    .create = swin_create,
                                    .destroy = vit_destroy,
                                    .param_count = sg_cn_i_param_count,
                                    .param_info = vit_param_info,
                                    .bind = sg_cn_i_bind,
                                    .init = vit_init,
                                    .params = sg_cn_i_params,
                                    .box = sg_cn_i_box,
                                    .describe = vit_describe,
                                    .mark = sg_cn_i_mark,
                                    .forward = vit_forward,
                                    .nblocks = vit_nblocks,
                                    .block_params = vit_block_params,
                                    .forward_blocks = vit_forward_blocks};
