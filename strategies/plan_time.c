/* shardgrid — sg-plan's step-time model (docs/choosing-a-mesh-time.md).
 *
 * A step is the ops its model runs (forward + backward) at the rank's
 * local shape, each costed as a roofline max(flops / rate, bytes / bw) at
 * the machine's calibrated rates, plus alpha + beta n for every message
 * the mesh makes it send: halo slabs per convolution, the FFT's
 * transposes, TP all-reduces, ring attention's K/V passes, the gradient
 * reduction of the parallel plan (DDP buckets, ZeRO reduce-scatter +
 * all-gather, HSDP), the pipeline's p2p and its bubble from the simulated
 * schedule. Nothing overlaps in the model (a CPU MPI progresses little in
 * the background): the total is the sum of the parts, with the pipeline's
 * makespan in place of its stages' compute. */
#include "plan_impl.h"
#include "sg_pipeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the run's keys (absent or empty: the sg-train default); the
 * model's are sg_model_config_from_kv's ---- */

static int64_t cfg_int(sg_kv_t kv, const char *key, int64_t def) {
  const char *s = kv ? sg_kv_str(kv, key) : NULL;
  return s && *s ? (int64_t)strtoll(s, NULL, 10) : def;
}

static double cfg_num(sg_kv_t kv, const char *key, double def) {
  const char *s = kv ? sg_kv_str(kv, key) : NULL;
  return s && *s ? strtod(s, NULL) : def;
}

static const char *cfg_str(sg_kv_t kv, const char *key, const char *def) {
  const char *s = kv ? sg_kv_str(kv, key) : NULL;
  return s && *s ? s : def;
}

/* The ranks a group over the named dims spans in the row-major rank order
 * (the product of the sizes after its outermost dim, times that dim's
 * size): the group fits one node when that is at most ranks_per_node. */
static int pt_span(const sg_plan_mesh *m, const char *const *names, int n) {
  int span = 1, stride = 1;
  for (int i = m->ndims - 1; i >= 0; --i) {
    for (int j = 0; j < n; ++j)
      if (!strcmp(m->name[i], names[j]) && m->size[i] > 1)
        span = stride * m->size[i];
    stride *= m->size[i];
  }
  return span;
}

/* A communication group: its size and its link. */
typedef struct pt_group {
  int p;
  double alpha, beta;
} pt_group;

static pt_group pt_group_of(const sg_plan_mesh *m, const sg_plan_hw *hw,
                            const char *const *names, int n) {
  pt_group g = {1, hw->alpha_intra, hw->beta_intra};
  for (int j = 0; j < n; ++j) g.p *= sg_plan_mesh_dim(m, names[j]);
  const int rpn = hw->ranks_per_node > 0 ? hw->ranks_per_node : 1 << 30;
  if (pt_span(m, names, n) > rpn)
    g.alpha = hw->alpha_inter, g.beta = hw->beta_inter;
  return g;
}

/* ---- collectives: the ring algorithm's alpha-beta costs ---- */

double sg_plan_allreduce_s(int p, double bytes, double alpha, double beta) {
  if (p <= 1 || bytes <= 0) return 0.0;
  return 2.0 * (p - 1) * alpha + 2.0 * (p - 1) / p * bytes * beta;
}

/* Reduce-scatter and all-gather of `bytes` in all (each rank ends with or
 * starts from bytes / p); an all-to-all where each rank holds `bytes`. */
double sg_plan_scatter_s(int p, double bytes, double alpha, double beta) {
  if (p <= 1 || bytes <= 0) return 0.0;
  return (p - 1) * alpha + (double)(p - 1) / p * bytes * beta;
}

double sg_plan_p2p_s(double bytes, double alpha, double beta) {
  return bytes > 0 ? alpha + bytes * beta : 0.0;
}

static double g_allreduce(pt_group g, double bytes) {
  return sg_plan_allreduce_s(g.p, bytes, g.alpha, g.beta);
}
static double g_scatter(pt_group g, double bytes) {
  return sg_plan_scatter_s(g.p, bytes, g.alpha, g.beta);
}

/* ---- one micro-batch's costs on this rank ---- */

/* The local problem and the accumulated costs. */
typedef struct pt {
  const sg_plan_mesh *m;
  const sg_plan_hw *hw;
  sg_kv_t kv;
  sg_model_config mc;  /* the model's keys (sg_model_config_from_kv) */
  double wl;           /* the FNO's channels of a tp rank (the largest) */
  double ntp;          /* FNO-3D's padded time axis (0: 2-D) */
  double nb;           /* samples in a micro-batch on this rank */
  int64_t ny, nx;      /* global grid */
  double ly, lx;       /* local grid (the largest shard) */
  int sh, sw, tp;      /* domain and tensor splits */
  double eb;           /* activation bytes per element */
  sg_plan_flops flops; /* counted work of one micro-batch (fwd + bwd) */
  double fwd, bwd;     /* compute seconds of one micro-batch */
  double halo, alltoall, allreduce, ring;
  /* parameters on this rank: gradients reduced over every data dim
   * (replicated), over dp/fsdp only (domain-sharded), and the ViT's
   * tp-sharded ones (reduced over the data dims) */
  double par_rep, par_dom;
  /* the ViT's experts split over ep: reduced over the data dims but ep */
  double par_exp;
  /* parameter tensors on this rank: ZeRO 2 and 3 reduce-scatter and
   * gather them one at a time (parallel_hooks.c) */
  double ntens;
} pt;

static double roof(double flops, double rate, double bytes, double bw) {
  const double a = rate > 0 ? flops / rate : 0.0, b = bw > 0 ? bytes / bw : 0.0;
  return a > b ? a : b;
}

/* A GEMM-like op: fwd 2 r k n flops, bwd twice that (input and weight
 * gradients); bytes: its operands once. kind 0 GEMM, 1 conv, 2 attention. */
static void op_mm(pt *c, int kind, double r, double k, double n, double bwdx) {
  const double f = 2.0 * r * k * n, by = c->eb * (r * k + k * n + r * n);
  c->flops.act += kind == 2 ? 0.0 : c->eb * r * n; /* the output is kept */
  /* the rate at this shape: Hockney's n / (n + n_half) in the smaller of
   * the GEMM's inner and output dims */
  const double nh = kind == 1   ? c->hw->conv_nhalf
                    : kind == 0 ? c->hw->gemm_nhalf
                                : 0.0,
               small = k < n ? k : n;
  const double base = kind == 1                            ? c->hw->conv_flops
                      : kind == 2 && c->hw->attn_flops > 0 ? c->hw->attn_flops
                                                           : c->hw->gemm_flops;
  const double rate = base * (nh > 0 ? small / (small + nh) : 1.0);
  c->fwd += roof(f, rate, by, c->hw->mem_bw);
  c->bwd += roof(bwdx * f, rate, 2.0 * by, c->hw->mem_bw);
  if (kind == 1)
    c->flops.conv += (1.0 + bwdx) * f;
  else
    c->flops.gemm += (1.0 + bwdx) * f;
}

/* An element-wise op over n elements reading `in` and writing one array
 * (backward reads twice that and writes the input gradients). */
static void op_elem(pt *c, double n, double in) {
  const double by = c->eb * n * (in + 1.0);
  c->flops.act += c->eb * n;
  c->fwd += roof(0, 0, by, c->hw->mem_bw);
  c->bwd += roof(0, 0, 2.0 * by, c->hw->mem_bw);
  c->flops.bytes += 3.0 * by;
}

/* An element-wise kernel over n elements costed at its calibrated rate
 * (elements/s, forward + backward; a third of it forward, as the backward
 * reads twice what the forward does), or as op_elem's memory roofline
 * where the hardware file has no rate. */
static void op_rated(pt *c, double n, double in, double rate) {
  if (!(rate > 0)) {
    op_elem(c, n, in);
    return;
  }
  c->flops.act += c->eb * n;
  c->flops.bytes += 3.0 * c->eb * n * (in + 1.0);
  c->fwd += n / rate / 3.0;
  c->bwd += 2.0 * n / rate / 3.0;
}

/* The activation (GELU) over n elements. */
static void op_act(pt *c, double n) { op_rated(c, n, 1.0, c->hw->act_rate); }

/* A copy of n elements forward and its adjoint backward: padding a block
 * into its margin'd copy, the heads' re-layout of attention. */
static void op_copy(pt *c, double n) {
  const double by = 2.0 * c->eb * n;
  c->fwd += roof(0, 0, by, c->hw->mem_bw);
  c->bwd += roof(0, 0, by, c->hw->mem_bw);
  c->flops.bytes += 2.0 * by;
}

/* Halo slabs of radius r around a (channels x ly x lx) block per sample,
 * forward exchange + backward adjoint exchange; two messages per split
 * dim (both neighbours). */
static void op_halo(pt *c, double ch, double ly, double lx, int r) {
  static const char *const h[1] = {"h"}, *const w[1] = {"w"};
  if (r <= 0) return;
  const pt_group gh = pt_group_of(c->m, c->hw, h, 1),
                 gw = pt_group_of(c->m, c->hw, w, 1);
  const double rows = c->nb * ch * r * c->eb;
  if (gh.p > 1) c->halo += 4.0 * sg_plan_p2p_s(rows * lx, gh.alpha, gh.beta);
  if (gw.p > 1)
    c->halo += 4.0 * sg_plan_p2p_s(rows * (ly + 2 * r), gw.alpha, gw.beta);
}

/* A same-padded k x k convolution at a level of the grid (ly, lx local). */
static void op_conv(pt *c, double cin, double cout, int k, double ly,
                    double lx) {
  const int r = k / 2;
  op_halo(c, cin, ly, lx, r);
  /* the input's copy with its margins (padded on one rank, the halo
   * written around it on a mesh) and the adjoint back */
  if (r > 0) op_copy(c, c->nb * cin * (ly + 2 * r) * (lx + 2 * r));
  op_mm(c, 1, c->nb * ly * lx, cin * k * k, cout, 2.0);
}

/* GroupNorm over a domain-split grid: the statistics are summed over the
 * domain group (forward and backward). */
static void op_groupnorm(pt *c, double ch, double pts) {
  static const char *const dom[2] = {"h", "w"};
  op_rated(c, c->nb * ch * pts, 2.0, c->hw->norm_rate);
  const pt_group g = pt_group_of(c->m, c->hw, dom, 2);
  c->allreduce += 2.0 * g_allreduce(g, 2.0 * 8.0 * c->nb * ch);
}

static double lg2(double x) { return x > 1 ? log2(x) : 0.0; }

/* ---- the models ---- */

/* The chunks a distributed FFT of `batch` fields splits into (fft.c
 * chunk_batch: as many fields as fit 512 KiB of the local complex block,
 * the largest divisor of the batch; SG_FFT_CHUNK_BYTES is not read here):
 * every chunk transposes on its own, a synchronisation each. */
static double fft_chunks(double batch, double ny, double nx, double dom) {
  const double per = 2.0 * 4.0 * ny * nx / dom;
  double target = floor(524288.0 / per);
  if (target >= batch) return 1.0;
  if (target < 1) target = 1;
  for (double c = target; c > 1; --c)
    if (fmod(batch, c) == 0) return batch / c;
  return batch;
}

/* One FFT transpose of `bytes` per rank over group g in `chunks` pieces:
 * alpha per piece, the bytes at the link's beta, and the pack into the
 * send block and the unpack out of the received one (fft_layout.c: two
 * local copies, read and write, at mem_bw). */
static double fft_transpose(const pt *c, pt_group g, double bytes,
                            double chunks) {
  return chunks * (g.p - 1) * g.alpha + (g.p - 1.0) / g.p * bytes * g.beta +
         roof(0, 0, 4.0 * bytes, c->hw->mem_bw);
}

/* One FNO transform on ch channels (forward or backward): r2c along x,
 * truncated to modes columns, c2c along y on them. Domain splits add the
 * transposes (docs/spectral.md): h alone one, w alone two, both three,
 * moving the truncated spectrum (the first w transpose moves the real
 * block). */
static void fno_transform(pt *c, double ch, int bwd) {
  static const char *const hw2[2] = {"h", "w"}, *const wn[1] = {"w"};
  /* FNO-3D: every (y, x) plane of its ntp time steps, then a c2c along
   * time on the 2 modes x modes kept (y, x) modes; whole on every rank */
  const double T = c->ntp > 0 ? c->ntp : 1.0;
  const double md = (double)c->mc.modes, ny = (double)c->ny * T,
               nx = (double)c->nx, pts = c->ly * c->lx * T, dom = c->sh * c->sw;
  const double ff = c->nb * ch *
                    (ny * 2.5 * nx * lg2(nx) + md * 5.0 * ny * lg2(ny / T) +
                     (T > 1 ? 2.0 * md * md * 5.0 * T * lg2(T) : 0.0)) /
                    dom;
  const double fb = c->nb * ch * 4.0 * (pts + 2.0 * md * ny / dom);
  *(bwd ? &c->bwd : &c->fwd) += roof(ff, c->hw->fft_flops, fb, c->hw->mem_bw);
  c->flops.fft += ff;
  c->flops.act += 2.0 * c->nb * ch * 2.0 * md * ny / dom; /* spectra */
  if (dom <= 1) return;
  const pt_group g = pt_group_of(c->m, c->hw, hw2, 2),
                 gw = pt_group_of(c->m, c->hw, wn, 1);
  const double spec = c->nb * ch * 8.0 * ny * md / dom,
               chunks = fft_chunks(c->nb * ch, ny, nx, dom);
  if (c->sw > 1)
    c->alltoall += fft_transpose(c, gw, c->nb * ch * c->eb * pts, chunks);
  c->alltoall += ((c->sh > 1) + (c->sw > 1)) *
                 fft_transpose(c, g, spec, chunks);
}

/* FNO spectral layer l: act(spectral conv + 1x1 linear), split over tp by
 * its role (fno.c, ag_tp.c sg_ag_spectral_linear_tp): a column-parallel
 * layer takes the w replicated channels (a copy in, its gradient
 * all-reduced over tp backward) and makes wl; a row-parallel one takes wl,
 * all-reduces its w partial outputs forward (after agreeing on the ranks'
 * status) and adds the bias after. Forward transforms its input (ci
 * channels) and inverse-transforms its output (co); backward the
 * reverse. */
static void fno_layer(pt *c, int l) {
  static const char *const tpn[1] = {"tp"};
  const double w = (double)c->mc.width, md = (double)c->mc.modes;
  /* FNO-3D: ntp time steps a point, 2 modes_t kept along time */
  const double T = c->ntp > 0 ? c->ntp : 1.0,
               mt = c->ntp > 0 ? 2.0 * (double)c->mc.modes_t : 1.0;
  const double n = c->nb * c->ly * c->lx * T, dom = c->sh * c->sw;
  const int role = sg_plan_fno_role(&c->mc, c->tp, l);
  const double ci = role == 2 ? c->wl : w, co = role == 1 ? c->wl : w;
  const pt_group gt = pt_group_of(c->m, c->hw, tpn, 1);
  if (role == 1) {
    op_copy(c, n * w);
    c->allreduce += g_allreduce(gt, n * w * c->eb);
  }
  fno_transform(c, ci, 0);
  fno_transform(c, co, 0);
  fno_transform(c, co, 1);
  fno_transform(c, ci, 1);
  /* the mode mix: a complex ci x co product per kept mode (8 flops a
   * complex multiply-add: 4x a real GEMM of the same shape) */
  op_mm(c, 0, c->nb * 2.0 * md * md * mt / dom, ci, 4.0 * co, 2.0);
  op_mm(c, 0, n, ci, co, 2.0);
  op_elem(c, n * co, 2.0);
  if (role == 2) {
    c->allreduce += g_allreduce(gt, n * w * c->eb) + g_allreduce(gt, 4.0);
    op_elem(c, n * w, 1.0); /* the bias */
  }
  if (l + 1 < (int)c->mc.layers) op_act(c, n * co);
  const double spectral = 2.0 * ci * co * 2.0 * md * md * mt;
  if (c->mc.shard_spectral)
    c->par_dom += spectral / dom;
  else
    c->par_rep += spectral;
  c->par_rep += ci * co + (role == 1 ? c->wl : w);
  c->ntens += 3.0; /* spectral weight, skip weight and bias */
}

/* FNO: lift, `layers` spectral layers, the projection. */
static void model_fno(pt *c, double cin, double cout) {
  const double w = (double)c->mc.width, pw = (double)c->mc.proj_width;
  const double n = c->nb * c->ly * c->lx;
  op_mm(c, 0, n, cin, w, 2.0);
  for (int l = 0; l < (int)c->mc.layers; ++l) fno_layer(c, l);
  op_mm(c, 0, n, w, pw, 2.0);
  op_act(c, n * pw);
  op_mm(c, 0, n, pw, cout, 2.0);
  c->par_rep += cin * w + w + w * pw + pw + pw * cout + cout;
  c->ntens += 6.0;
}

/* FNO-3D (fno.c with a time axis): the input broadcast along its nt
 * output steps and concatenated with 3 coordinate channels, the lift, the
 * time padding to ntp; the spectral layers on (ntp, y, x); the padding
 * cropped, the projection to one channel and the channel dim dropped
 * (copies, as the reshaping ops of fno3d_ops.c make). */
static void model_fno3d(pt *c) {
  const double w = (double)c->mc.width, pw = (double)c->mc.proj_width;
  const double nt = c->ntp - (double)c->mc.pad_t,
               n = c->nb * c->ly * c->lx * nt, x = (double)c->mc.cin,
               ci = x + (c->mc.add_grid ? 3.0 : 0.0);
  op_copy(c, n * x);
  if (c->mc.add_grid) op_copy(c, n * ci);
  op_mm(c, 0, n, ci, w, 2.0);
  if (c->ntp > nt) op_copy(c, c->nb * c->ly * c->lx * c->ntp * w);
  for (int l = 0; l < (int)c->mc.layers; ++l) fno_layer(c, l);
  if (c->ntp > nt) op_copy(c, n * w);
  op_mm(c, 0, n, w, pw, 2.0);
  op_act(c, n * pw);
  op_mm(c, 0, n, pw, 1.0, 2.0);
  op_copy(c, n);
  c->par_rep += ci * w + w + w * pw + pw + pw + 1.0;
  c->ntens += 6.0;
}

/* The conv nets' split over tp (convnet.c sg_cn_tp_slice): the largest
 * tp rank's share of ch channels, whole GroupNorm groups. */
static double cn_tp_ch(const pt *c, double ch) {
  const double g = cfg_int(c->kv, "groups", 4);
  return c->tp > 1 && g >= 1 ? ch / g * ceil(g / c->tp) : ch;
}

/* A column-/row-parallel conv pair's collectives over tp (models/ag_tp.c):
 * the row conv's all-reduce of its n elements forward, the column conv's
 * backward, the forward reduce's status agreement, tp_copy's copy. */
static void cn_tp_pair(pt *c, double n) {
  static const char *const tpn[1] = {"tp"};
  const pt_group gt = pt_group_of(c->m, c->hw, tpn, 1);
  if (gt.p <= 1) return;
  c->allreduce += 2.0 * g_allreduce(gt, n * c->eb) + g_allreduce(gt, 4.0);
  op_copy(c, n);
}

/* CNN: a k x k lift, `blocks` residual blocks (conv, GroupNorm, act, conv,
 * add; the convs a column-/row-parallel pair over tp), the projection. */
static void model_cnn(pt *c, double cin, double cout) {
  const double w = (double)c->mc.width, B = (double)c->mc.blocks,
               pw = (double)c->mc.proj_width;
  const int k = (int)c->mc.kernel;
  const double pts = c->ly * c->lx, n = c->nb * pts;
  op_conv(c, cin, w, k, c->ly, c->lx);
  const double wl = cn_tp_ch(c, w);
  for (int b = 0; b < (int)B; ++b) {
    op_conv(c, w, wl, k, c->ly, c->lx);
    op_groupnorm(c, wl, pts);
    op_act(c, n * wl);
    op_conv(c, wl, w, k, c->ly, c->lx);
    cn_tp_pair(c, n * w);
    op_elem(c, n * w, 2.0);
    c->par_rep += 2.0 * k * k * w * wl + wl + w + 2.0 * wl;
    c->ntens += 6.0; /* two convs and a norm */
  }
  op_mm(c, 0, n, w, pw, 2.0);
  op_act(c, n * pw);
  op_mm(c, 0, n, pw, cout, 2.0);
  c->par_rep += k * k * cin * w + w + w * pw + pw + pw * cout + cout;
  c->ntens += 6.0;
}

/* U-Net block: 2 x (conv, GroupNorm, act) at a level, the convs a
 * column-/row-parallel pair over tp (the first norm on the split). */
static void unet_block(pt *c, double cin, double ch, int k, double ly,
                       double lx) {
  const double cl = cn_tp_ch(c, ch), n = c->nb * ly * lx;
  for (int j = 0; j < 2; ++j) {
    const double co = j ? ch : cl;
    op_conv(c, j ? cl : cin, co, k, ly, lx);
    if (j) cn_tp_pair(c, n * ch);
    op_groupnorm(c, co, ly * lx);
    op_act(c, n * co);
    c->par_rep += k * k * (j ? cl : cin) * co + (j ? ch : cl) + 2.0 * co;
    c->ntens += 4.0; /* a conv and a norm */
  }
}

static void model_unet(pt *c, double cin, double cout) {
  const double w = (double)c->mc.width;
  const int L = (int)c->mc.levels, k = (int)c->mc.kernel;
  double ci = cin;
  for (int l = 0; l < L; ++l) {
    const double ly = c->ly / (1 << l), lx = c->lx / (1 << l);
    if (l > 0) op_elem(c, c->nb * ly * lx * ci, 4.0); /* 2x2 average pool */
    unet_block(c, ci, w * (1 << l), k, ly, lx);
    ci = w * (1 << l);
  }
  for (int l = L - 2; l >= 0; --l) {
    const double ly = c->ly / (1 << l), lx = c->lx / (1 << l),
                 up = w * (1 << (l + 1)), ch = w * (1 << l);
    op_halo(c, up, ly / 2, lx / 2, 1); /* the linear up-sample's halo */
    op_rated(c, c->nb * ly * lx * up, 0.25, c->hw->up_rate);
    op_elem(c, c->nb * ly * lx * (up + ch), 1.0); /* concat */
    unet_block(c, up + ch, ch, k, ly, lx);
  }
  op_mm(c, 0, c->nb * c->ly * c->lx, w, cout, 2.0);
  c->par_rep += w * cout + cout;
  c->ntens += 2.0;
}

/* ViT: a p x p patch embedding, `depth` pre-norm blocks (LayerNorm,
 * attention with column-parallel QKV and row-parallel output over tp,
 * LayerNorm, MLP 4x over tp), LayerNorm and the un-patchify. The domain
 * splits the tokens: attention is a ring over the domain group (P - 1 K/V
 * passes forward, K/V and dK/dV passes backward); tp adds two all-reduces
 * of the activations per block forward and two backward, or with
 * tp_sequence two all-gathers and two reduce-scatters each way (the same
 * ring volume) and the LayerNorms and residuals on 1/tp of the tokens.
 * The sp dim: the blocks on 1/sp of the rank's tokens, the ring over the
 * domain dims x sp (the embedding and the un-patchify on the whole block).
 * Swin (swin 1): every query attends the W^2 keys of its window (no ring),
 * and the odd blocks roll the tokens by W/2 and back: a one-sided halo of
 * W/2 token rows per split dim, forward and adjoint, per roll. */
static void vit_tp_comm(pt *c, pt_group gt, int seq, double n, double C) {
  const double act = n * C * c->eb;
  if (gt.p <= 1) return;
  if (!seq) {
    c->allreduce += 4.0 * g_allreduce(gt, act);
    /* the TP regions (models/ag_tp.c): each forward reduce first agrees
     * on the ranks' status, each entry copies the replicated input */
    c->allreduce += 2.0 * g_allreduce(gt, 4.0);
    op_copy(c, 2.0 * n * C);
    return;
  }
  c->allreduce += 8.0 * g_scatter(gt, act);
  /* every move agrees on its buffers (12 small all-reduces), and the
   * 6 replicated vectors' gradients (LayerNorms, row biases) sum over tp */
  c->allreduce += 12.0 * g_allreduce(gt, 4.0) + 6.0 * g_allreduce(gt, 4.0 * C);
  op_copy(c, 4.0 * n * C); /* packing the slices, both ways */
}

/* The mixture of experts of a block in place of the MLP (models/ag_moe.c)
 * on the rank's nw whole tokens (gathered over tp with tp_sequence and
 * over sp first, sliced after): the router (C -> E), the S = nw k
 * min(1, cf) kept pairs through their experts (the MLP's GEMMs, the hidden
 * width over tp, in f64: twice f32's time), the token rows to the experts'
 * ep ranks and back by all-to-all(v) (S (C + 1) f64 values out, S C back;
 * backward S C each way, even routing: (ep - 1)/ep of them leave), with tp
 * one all-reduce of the S C output rows forward and of the input-gradient
 * rows backward. Parameters: the router replicated, this ep rank's E/ep
 * experts reduced over the data dims but ep. */
static void vit_moe_time(pt *c, pt_group gt, double nw, int gather) {
  static const char *const epn[1] = {"ep"};
  const double C = (double)c->mc.width, E = (double)c->mc.moe_experts,
               k = (double)c->mc.moe_topk, cf = c->mc.moe_capacity,
               F = 4.0 * C / c->tp, S = nw * k * (cf > 0 && cf < 1 ? cf : 1);
  const pt_group ge = pt_group_of(c->m, c->hw, epn, 1);
  if (gather) op_copy(c, 4.0 * nw * C);
  op_mm(c, 0, nw, C, E, 2.0);
  op_mm(c, 0, 2.0 * S, C, F, 2.0);
  op_act(c, 2.0 * S * F);
  op_mm(c, 0, 2.0 * S, F, C, 2.0);
  op_elem(c, S * C, 2.0); /* the gated combine */
  c->alltoall += g_scatter(ge, 8.0 * S * (C + 1)) +
                 3.0 * g_scatter(ge, 8.0 * S * C);
  if (gt.p > 1) c->allreduce += 2.0 * g_allreduce(gt, 8.0 * S * C);
  c->par_rep += E * C;
  c->par_exp += E / ge.p * ((2.0 * F * C + F) + C);
}

static void model_vit(pt *c, double cin, double cout, int swin) {
  static const char *const dom[3] = {"h", "w", "sp"}, *const tpn[1] = {"tp"};
  const double C = (double)c->mc.width, D = (double)c->mc.depth,
               H = (double)c->mc.heads, W = swin ? (double)c->mc.window : 0.0;
  const double p = (double)c->mc.patch, tp = c->tp;
  const double tl = (c->ly / p) * (c->lx / p),
               tg = ((double)c->ny / p) * ((double)c->nx / p);
  const double sp = swin ? 1.0
                         : sg_plan_mesh_dim(c->m, "sp") *
                               sg_plan_mesh_dim(c->m, "cp");
  const double n0 = c->nb * tl, n = n0 / sp; /* the blocks' tokens */
  const int seq = tp > 1 && c->mc.tp_sequence;
  const double ns = seq ? n / tp : n; /* the residual stream's tokens */
  const pt_group gd = pt_group_of(c->m, c->hw, dom, swin ? 2 : 3),
                 gt = pt_group_of(c->m, c->hw, tpn, 1);
  op_mm(c, 1, n0, cin * p * p, C, 2.0);
  op_elem(c, n0 * C, 2.0);
  if (sp > 1) op_copy(c, 2.0 * n0 * C); /* the sp scatter and gather */
  for (int b = 0; b < (int)D; ++b) {
    op_rated(c, ns * C, 1.0, c->hw->lnorm_rate);
    op_mm(c, 0, n, C, 3.0 * C / tp, 2.0);
    op_copy(c, 4.0 * n * C / tp); /* q, k, v and o between layouts */
    /* QK^T and AV of every local head against every token: GEMMs of
     * head_dim columns, 4 nb tl tg C / tp flops, backward 2.5x */
    op_mm(c, 2, n * H / tp, swin ? W * W : tg, 2.0 * C / H, 2.5);
    op_mm(c, 0, n, C / tp, C, 2.0);
    op_elem(c, ns * C, 2.0);
    op_rated(c, ns * C, 1.0, c->hw->lnorm_rate);
    const int moe = c->mc.moe_experts > 0 && c->mc.moe_every > 0 &&
                    (b + 1) % c->mc.moe_every == 0;
    if (moe) {
      vit_moe_time(c, gt, n0, seq || sp > 1);
    } else {
      op_mm(c, 0, n, C, 4.0 * C / tp, 2.0);
      op_act(c, n * 4.0 * C / tp);
      op_mm(c, 0, n, 4.0 * C / tp, C, 2.0);
      c->par_rep += (8.0 * C * C + 4.0 * C) / tp + C; /* fc1, fc2 */
    }
    op_elem(c, ns * C, 2.0);
    const double kv = 2.0 * n * C / tp * c->eb;
    vit_tp_comm(c, gt, seq, n, C);
    if (swin && b % 2 == 1)
      op_halo(c, C, c->ly / p, c->lx / p, (int)(W / 2));
    else if (!swin && gd.p > 1)
      c->ring += 3.0 * gd.p * sg_plan_p2p_s(kv, gd.alpha, gd.beta);
    /* qkv, out, the LayerNorms (the MLP above) */
    c->par_rep += (4.0 * C * C + 3.0 * C) / tp + 2.0 * C / tp + 4.0 * C;
    if (swin) c->par_rep += H * (2 * W - 1) * (2 * W - 1) / tp; /* bias */
    c->ntens += swin ? 13.0 : 12.0;
  }
  op_rated(c, ns * C, 1.0, c->hw->lnorm_rate);
  op_mm(c, 1, n0, C, cout * p * p, 2.0);
  c->par_rep += cin * p * p * C + C + 2.0 * C + C * cout * p * p + cout;
  c->par_dom += tl * C; /* the position field, sharded like the tokens */
  c->ntens += 7.0;
}

/* ---- the step ---- */

/* The latency of the buckets beyond the first of a reduction of `bytes`
 * (the one all-reduce costed by g_allreduce carries the bandwidth). */
static double extra_buckets(pt_group g, double bytes, double bucket) {
  const double nb = ceil(bytes / bucket);
  return nb > 1 && g.p > 1 ? (nb - 1) * 2.0 * (g.p - 1) * g.alpha : 0.0;
}

/* The gradient reduction and the optimizer of the parameters on this rank
 * (already divided over pp stages and tp). */
static void grad_sync(pt *c, sg_plan_time *o, double micro) {
  /* sp: every gradient is summed over it too (parallel.c plan_roles) */
  /* ep: the samples, like dp (the experts are reduced over the others) */
  static const char *const data[6] = {"dp", "fsdp", "h", "w", "sp", "ep"},
                           *const dpf[4] = {"dp", "fsdp", "sp", "ep"},
                           *const fs[1] = {"fsdp"},
                           *const dpn[3] = {"dp", "sp", "ep"},
                           *const dph[5] = {"dp", "h", "w", "sp", "ep"};
  const int zero = (int)cfg_int(c->kv, "zero", 0);
  const int zod = !strcmp(cfg_str(c->kv, "zero_over_domain", "false"), "true");
  const double gb = 4.0; /* fp32 gradients (reduce_dtype f32) */
  const double bucket = cfg_num(c->kv, "bucket_mib", 25) * 1048576.0;
  const pt_group gall = pt_group_of(c->m, c->hw, data, 6),
                 gdp = pt_group_of(c->m, c->hw, dpf, 4),
                 gexp = pt_group_of(c->m, c->hw, data, 5);
  const double rep = c->par_rep * gb, dom = c->par_dom * gb,
               exp = c->par_exp * gb;
  if (zero == 0 ||
      sg_plan_mesh_dim(c->m, "fsdp") * (zod ? c->sh * c->sw : 1) == 1) {
    /* DDP: buckets of bucket_mib, one ring all-reduce each */
    o->allreduce += g_allreduce(gall, rep) + g_allreduce(gdp, dom) +
                    g_allreduce(gexp, exp) + extra_buckets(gall, rep, bucket) +
                    extra_buckets(gdp, dom, bucket);
  } else {
    /* ZeRO over fsdp (and the domain with zero_over_domain); HSDP: the
     * pieces all-reduced over the other data dims */
    const pt_group gz = zod ? pt_group_of(
                                  c->m, c->hw,
                                  (const char *const[]){"fsdp", "h", "w"}, 3)
                            : pt_group_of(c->m, c->hw, fs, 1);
    const pt_group go = zod ? pt_group_of(c->m, c->hw, dpn, 3)
                            : pt_group_of(c->m, c->hw, dph, 5);
    /* the experts as if reduced over ep too: a slight over-estimate */
    const double v = rep + dom + exp, reps = zero >= 2 ? micro : 1.0;
    /* ZeRO 2 and 3 reduce each tensor's gradient as it is ready, ZeRO 3
     * gathers each tensor before its use forward and backward: the
     * latency of every tensor's collective beyond the first */
    const double more = c->ntens > 1 ? c->ntens - 1 : 0.0;
    o->reduce_scatter += reps * g_scatter(gz, v);
    o->allreduce += reps * g_allreduce(go, v / gz.p);
    if (zero >= 2) {
      o->reduce_scatter += reps * more * (gz.p - 1) * gz.alpha;
      if (go.p > 1) o->allreduce += reps * more * 2.0 * (go.p - 1) * go.alpha;
    }
    o->allgather += (zero == 3 ? 2.0 * micro : 1.0) * g_scatter(gz, v);
    if (zero == 3) o->allgather += 2.0 * micro * more * (gz.p - 1) * gz.alpha;
  }
  /* AdamW: params, grads, two moments read, three written (fp32) */
  const double np = c->par_rep + c->par_dom + c->par_exp;
  o->compute += roof(0, 0, 28.0 * np, c->hw->mem_bw);
}

/* The model's counted work and costs for one micro-batch of nb samples. */
static sg_status run_model(pt *c, const sg_plan_problem *pb) {
  sg_status st = SG_OK;
  const double cin = (double)c->mc.cin + (c->mc.add_grid ? 2.0 : 0.0),
               cout = (double)c->mc.cout;
  (void)pb;
  switch (c->mc.kind) {
  case SG_MODEL_FNO: model_fno(c, cin, cout); break;
  case SG_MODEL_CNN: model_cnn(c, cin, cout); break;
  case SG_MODEL_UNET: model_unet(c, cin, cout); break;
  case SG_MODEL_VIT: model_vit(c, cin, cout, 0); break;
  case SG_MODEL_SWIN: model_vit(c, cin, cout, 1); break;
  case SG_MODEL_FNO3D: model_fno3d(c); break;
  default:
    SG_RAISE(SG_ERR_CONFIG, "sg_plan_step_time: no time model for '%s'",
             sg_model_kind_name(c->mc.kind));
  }
  /* the loss: a few passes over the output (FNO-3D: its steps) */
  op_elem(c,
          c->nb * c->ly * c->lx * cout *
              (c->ntp > 0 ? c->ntp - (double)c->mc.pad_t : 1.0),
          3.0);
fail:
  return st;
}

/* The pipeline: the stage's micro-batches through the schedule, simulated
 * with the stage's per-micro-batch F and B and the activation transfer. */
static sg_status pipeline(pt *c, int pp, int micro, double act_bytes,
                          sg_plan_time *o) {
  sg_status st = SG_OK;
  sg_pp_schedule *s = NULL;
  sg_pp_sim sim = {0};
  sg_pp_kind kind;
  static const char *const ppn[1] = {"pp"};
  const pt_group g = pt_group_of(c->m, c->hw, ppn, 1);
  const double p2p = sg_plan_p2p_s(act_bytes, g.alpha, g.beta);
  SG_TRY(sg_pp_kind_parse(cfg_str(c->kv, "pp_schedule", "1f1b"), &kind));
  int v = (int)cfg_int(c->kv, "pp_virtual", 0);
  if (v < 1) v = kind == SG_PP_INTERLEAVED ? 2 : 1;
  SG_TRY(sg_pp_schedule_create(kind, pp, micro, v, &s));
  const double f = c->fwd / (pp * v), b = c->bwd / (pp * v);
  const sg_pp_costs costs = {.f = f,
                             .b = kind == SG_PP_ZB_H1 ? 0.5 * b : b,
                             .w = kind == SG_PP_ZB_H1 ? 0.5 * b : 0.0,
                             .p2p = p2p};
  SG_TRY(sg_pp_simulate(s, &costs, &sim));
  double busy = 0.0;
  for (int i = 0; i < pp; ++i) busy = sim.busy[i] > busy ? sim.busy[i] : busy;
  o->compute += busy;
  o->p2p += 2.0 * micro * v * p2p;
  o->bubble = sim.makespan - busy - o->p2p > 0 ? sim.makespan - busy - o->p2p
                                               : 0.0;
fail:
  sg_pp_sim_free(&sim);
  sg_pp_schedule_destroy(&s);
  return st;
}

/* The ranks of a node that run kernels at once: the mesh's ranks on it,
 * at most one per core (more share the cores: the stretch below). */
static int busy_on_node(const sg_plan_hw *hw, int on_node) {
  return hw->cores_per_node > 0 && on_node > hw->cores_per_node
             ? hw->cores_per_node
             : on_node;
}

sg_status sg_plan_flops_of(const sg_plan_problem *pb, const sg_plan_mesh *m,
                           const sg_plan_hw *hw, sg_plan_flops *out) {
  sg_plan_time t;
  return sg_plan_step_time_ex(pb, m, hw, &t, out);
}

sg_status sg_plan_step_time(const sg_plan_problem *pb, const sg_plan_mesh *m,
                            const sg_plan_hw *hw, sg_plan_time *out) {
  return sg_plan_step_time_ex(pb, m, hw, out, NULL);
}

sg_status sg_plan_step_time_ex(const sg_plan_problem *pb, const sg_plan_mesh *m,
                               const sg_plan_hw *hw, sg_plan_time *out,
                               sg_plan_flops *work) {
  sg_status st = SG_OK;
  if (!pb || !m || !hw || !out)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_step_time: NULL argument");
  memset(out, 0, sizeof *out);
  /* the rates of a node that runs on_node of the mesh's ranks at once */
  const int rpn = hw->ranks_per_node > 0 ? hw->ranks_per_node : 1;
  const int on_node = sg_plan_mesh_ranks(m) < rpn ? sg_plan_mesh_ranks(m) : rpn;
  sg_plan_hw hwn;
  sg_plan_hw_on_node(hw, busy_on_node(hw, on_node), &hwn);
  hw = &hwn;
  pt c = {.m = m, .hw = hw, .kv = pb->cfg, .ny = pb->ny, .nx = pb->nx};
  SG_TRY(sg_plan_model(pb, &c.mc));
  const int pp = sg_plan_mesh_dim(m, "pp");
  const int data = sg_plan_data_ranks(m); /* dp x fsdp x ep: the samples */
  const int64_t batch = cfg_int(c.kv, "batch", 8);
  const int micro = (int)cfg_int(c.kv, pp > 1 ? "microbatches" : "grad_accum",
                                 1);
  if (batch < 1 || micro < 1 || batch % data || (batch / data) % micro)
    SG_RAISE(SG_ERR_CONFIG,
             "sg_plan_step_time: batch %lld does not split over %d data "
             "ranks x %d micro-batches",
             (long long)batch, data, micro);
  c.sh = sg_plan_mesh_dim(m, "h"), c.sw = sg_plan_mesh_dim(m, "w"),
  c.tp = sg_plan_mesh_dim(m, "tp");
  c.wl = ceil(c.mc.width / (double)c.tp);
  if (c.mc.kind == SG_MODEL_FNO3D) /* out_frames steps + pad_t */
    c.ntp = (double)(cfg_int(c.kv, "out_frames", 1) + c.mc.pad_t);
  c.nb = (double)(batch / data / micro);
  c.ly = ceil((double)pb->ny / c.sh), c.lx = ceil((double)pb->nx / c.sw);
  c.eb = !strcmp(cfg_str(c.kv, "param_dtype", "f32"), "bf16") ? 2.0 : 4.0;
  SG_TRY(run_model(&c, pb));
  /* activation checkpointing recomputes the forward in backward */
  if (c.mc.act_ckpt_every > 0) c.bwd += c.fwd;
  /* oversubscription: more ranks on a node than cores share them */
  if (hw->cores_per_node > 0 && on_node > hw->cores_per_node) {
    const double f = (double)on_node / hw->cores_per_node;
    c.fwd *= f, c.bwd *= f;
  }
  c.par_rep /= pp, c.par_dom /= pp, c.par_exp /= pp, c.ntens /= pp;
  out->halo = micro * c.halo / pp;
  out->alltoall = micro * c.alltoall / pp;
  out->allreduce = micro * c.allreduce / pp;
  out->ring = micro * c.ring / pp;
  if (pp > 1) {
    double act = c.nb * c.ly * c.lx * c.eb * (double)c.mc.width;
    if (c.mc.kind == SG_MODEL_VIT || c.mc.kind == SG_MODEL_SWIN) {
      /* the tokens; with tp_sequence alone this tp rank's slice (vit.c) */
      const double p = (double)c.mc.patch,
                   sp = sg_plan_mesh_dim(m, "sp") * sg_plan_mesh_dim(m, "cp");
      act = c.nb * floor(c.ly / p) * floor(c.lx / p) * c.eb * c.mc.width;
      if (c.tp > 1 && c.mc.tp_sequence && sp <= 1) act = ceil(act / c.tp);
    }
    SG_TRY(pipeline(&c, pp, micro, act, out));
  } else {
    out->compute = micro * (c.fwd + c.bwd);
  }
  grad_sync(&c, out, micro);
  if (hw->io_bw > 0)
    out->io = (double)batch / data * (double)pb->vars *
              (cfg_int(c.kv, "history", 1) + 1) * c.ly * c.lx * 4.0 / hw->io_bw;
  out->total = out->compute + out->halo + out->allreduce + out->reduce_scatter +
               out->allgather + out->alltoall + out->ring + out->p2p +
               out->bubble + out->io;
  if (work) {
    *work = c.flops;
    work->params = c.par_rep + c.par_dom + c.par_exp;
  }
fail:
  return st;
}
