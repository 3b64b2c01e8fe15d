/* shardgrid — Ulysses sequence parallelism (DeepSpeed-Ulysses) for the
 * attention op of the tape (docs/transformers.md, "Ulysses").
 *
 * q, k, v arrive token-sharded: every rank of the group that splits the
 * tokens (the mesh dims that split space) holds its tokens of all heads.
 * One all-to-all(v) turns them head-sharded: rank p then holds every token
 * of heads [p H/P, (p+1) H/P). The attention of those heads is local (the
 * fused kernel on the whole sequence), and one more all-to-all(v) returns
 * o to the token split. The backward is the adjoint: dout goes token ->
 * head, the kernel's backward runs locally, dq, dk, dv go head -> token.
 * The per-rank token counts may differ (all-to-allv); heads % P != 0 is
 * refused (SG_ERR_CONFIG) by every rank before anything moves.
 *
 * Sequence order: the head-sharded sequence is the ranks' token blocks in
 * group rank order. Non-causal attention does not depend on the order of
 * the keys, and every query's output goes back to where it came from, so
 * the result is one process's.
 *
 * USP (the hybrid of Ulysses and ring attention on a 2-D token split):
 * the all-to-alls run over the mesh dims that split the LAST spatial dim
 * (w) only, and the head-sharded sequence of that group (the tokens of
 * this rank's row of the mesh) is attended by ring attention over the
 * mesh dims that split the other spatial dims (h): the ring's ranks hold
 * the same heads (the same w coordinate), its blocks are the rows' token
 * sets. Without a split of w it is ring attention, without a split of h
 * Ulysses. The local attention of Ulysses is the ring's code with a ring
 * of one rank. */
#include <stdlib.h>
#include <string.h>

#include "ag_ulysses_inl.h"
#include "attention_impl.h"
#include "autograd_impl.h"
#include "op_registry_impl.h"
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_device.h"
#include "sg_ops.h" /* sg_attn_desc */
#if SG_HAVE_CUDA
#include "sg_ops_cuda.h"
#define ULY_GPU(call) (call)
#else
#define ULY_GPU(call)                                    \
  sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__, \
               "attention (ulysses) on a GPU: built without CUDA")
#endif

/* Bytes this rank received (sg_ag_attention_ulysses_bytes). */
static _Atomic long long uly_rx[SG_ULYSSES_NBYTES];

typedef struct uly_attr {
  int64_t heads;
  int usp;   /* 0: Ulysses over every split spatial dim; 1: USP */
  int given; /* 1: the groups below (token pieces of the sp dim) */
  sg_group_t a2a, ring;
} uly_attr;

/* The geometry of a node: H heads, Hl = H/P of them per rank after the
 * all-to-all; T this rank's tokens, N the sequence's; tok/off each rank's
 * token count and its first position in the sequence. */
typedef struct uly_geo {
  sg_dtype dt;
  size_t es;
  int64_t B, H, Hl, T, N, d;
  sg_group_t g;    /* the all-to-all's; NULL: P = 1 */
  sg_group_t ring; /* USP: the ring's (NULL: none) */
  int P, r;
  int64_t *tok, *off;
  int64_t *sc, *sd, *rc, *rd; /* all-to-all counts (P each) */
  sg_device dev;              /* the node's: every buffer is there */
  int gpu; /* 1: device memory that only kernels touch (a real GPU);
                    0: host memory (the host, or a faked device) */
} uly_geo;

static void geo_release(uly_geo *g) {
  free(g->tok);
  g->tok = NULL;
}

/* The all-to-all's group and (USP) the ring's: the mesh dims that split
 * the last spatial dim, and the others that split space. */
static sg_status groups_of(const sg_node *node, int usp, uly_geo *g) {
  sg_status st = SG_OK;
  const uly_attr *a = (const uly_attr *)node->attr;
  if (a->given) {
    g->g = a->a2a, g->ring = a->ring;
    return SG_OK;
  }
  if (!usp) return sg_node_group(node, SG_SPLIT_SPACE, &g->g);
  const sg_var *q = node->in[0];
  unsigned last = 0, rest = 0;
  for (int m = 0; node->mesh && m < sg_mesh_ndims(node->mesh); ++m)
    if (node->split_space & (1u << m)) {
      if (q->placements[m].dim == q->value.ndim - 1)
        last |= 1u << m;
      else
        rest |= 1u << m;
    }
  if (last) SG_TRY(sg_mesh_group(node->mesh, last, &g->g));
  if (rest) SG_TRY(sg_mesh_group(node->mesh, rest, &g->ring));
fail:
  return st;
}

static sg_status geo_of(const sg_node *node, uly_geo *g) {
  sg_status st = SG_OK;
  const sg_tensor *q = &node->in[0]->value;
  memset(g, 0, sizeof *g);
  g->dt = q->dtype;
  g->es = sg_dtype_size(q->dtype);
  g->B = q->shape[0];
  g->H = ((const uly_attr *)node->attr)->heads;
  g->d = q->shape[1] / g->H;
  g->T = 1;
  for (int i = 2; i < q->ndim; ++i) g->T *= q->shape[i];
  g->P = 1;
  g->dev = node->device;
  g->gpu = node->device.kind != SG_DEVICE_HOST && !ag_fake_cuda;
  SG_TRY(groups_of(node, ((const uly_attr *)node->attr)->usp, g));
  if (g->g) g->P = sg_group_size(g->g), g->r = sg_group_rank(g->g);
  /* On a device (faked or not; every rank of both groups decides alike,
   * before anything moves): the all-to-alls run on the device buffers
   * through the comm layer; the ring's K/V send/recv is not built. */
  if (node->device.kind != SG_DEVICE_HOST) {
    const int ring = g->ring ? sg_group_size(g->ring) : 1;
    if (ring > 1)
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "%s on %s: a ring of %d ranks (the mesh dims that split the "
               "other spatial dims) needs the ring's K/V send/recv on device "
               "buffers, which is not built (issue 22); split only the last "
               "spatial dim, or use attention_ulysses",
               node->op->name, sg_device_kind_name(node->device.kind), ring);
    SG_TRY(ag_dev_comm_ok(g->g, node->device, "attention (ulysses)"));
  }
  if (g->H % g->P)
    SG_RAISE(SG_ERR_CONFIG,
             "attention (ulysses): heads (%lld) must be divisible by the "
             "ranks of its all-to-all (%d): Ulysses gives every rank "
             "heads/%d whole heads (use sp_mode = ring)",
             (long long)g->H, g->P, g->P);
  g->Hl = g->H / g->P;
  g->tok = calloc((size_t)(6 * g->P), sizeof *g->tok);
  if (!g->tok) SG_RAISE(SG_ERR_ALLOC, "attention (ulysses): token table");
  g->off = g->tok + g->P, g->sc = g->off + g->P, g->sd = g->sc + g->P;
  g->rc = g->sd + g->P, g->rd = g->rc + g->P;
  g->tok[0] = g->T;
  if (g->P > 1)
    SG_MPI(MPI_Allgather(&g->T, 1, MPI_INT64_T, g->tok, 1, MPI_INT64_T,
                         sg_group_comm(g->g)));
  for (int p = 0; p < g->P; ++p) g->off[p] = g->N, g->N += g->tok[p];
fail:
  return st;
}

/* The token side of an exchange of nt tensors: x[t] (B, H, T, d) in the
 * kernel's layout <-> buf (P, nt, B, Hl, T, d), the part for rank p first
 * (back: buf -> x); the index maps of ag_ulysses_inl.h, row copies on the
 * host, a kernel per part on a GPU. */
static sg_status tok_pack(const uly_geo *g, int nt, char *const *x, char *buf,
                          int back) {
  sg_status st = SG_OK;
  const int64_t n = g->Hl * g->T * g->d;
  if (n == 0) return SG_OK;
  for (int p = 0; p < g->P; ++p)
    for (int t = 0; t < nt; ++t) {
      char *part = buf + (size_t)sg_uly_tok_base(p, t, nt, g->B, n) * g->es;
      if (g->gpu) {
        SG_TRY(ULY_GPU(sg_uly_tok_pack_cuda(g->es, g->B, n, g->P, p, x[t], part,
                                            back, NULL)));
        continue;
      }
      for (int64_t b = 0; b < g->B; ++b) {
        char *xs = x[t] + (size_t)sg_uly_tok_x(b * n, n, g->P, p) * g->es;
        char *bs = part + (size_t)(b * n) * g->es;
        memcpy(back ? xs : bs, back ? bs : xs, (size_t)n * g->es);
      }
    }
fail:
  return st;
}

/* The head side: y[t] (B, Hl, N, d) <-> buf whose part from rank p,
 * (nt, B, Hl, tok[p], d), starts at nt B Hl off[p] d (back: y -> buf). */
static sg_status head_pack(const uly_geo *g, int nt, char *const *y, char *buf,
                           int back) {
  sg_status st = SG_OK;
  const int64_t rows = g->B * g->Hl;
  for (int p = 0; p < g->P; ++p) {
    const int64_t m = g->tok[p] * g->d;
    if (m == 0) continue;
    for (int t = 0; t < nt; ++t) {
      char *part = buf +
                   (size_t)sg_uly_head_base(t, nt, rows, g->off[p], g->d, m) *
                       g->es;
      if (g->gpu) {
        SG_TRY(ULY_GPU(sg_uly_head_pack_cuda(g->es, rows, m, g->N, g->off[p],
                                             g->d, y[t], part, back, NULL)));
        continue;
      }
      for (int64_t bh = 0; bh < rows; ++bh) {
        char *ys = y[t] +
                   (size_t)sg_uly_head_y(bh * m, m, g->N, g->off[p], g->d) *
                       g->es;
        char *bs = part + (size_t)(bh * m) * g->es;
        memcpy(back ? bs : ys, back ? ys : bs, (size_t)m * g->es);
      }
    }
  }
fail:
  return st;
}

/* The (B, H*d, T) <-> (B, H, T, d) layout copy on the node's device. */
static sg_status heads_copy(const uly_geo *g, void *x, void *y, int back) {
  if (g->gpu)
    return ULY_GPU(
        sg_heads_copy_cuda(g->dt, g->B, g->H, g->T, g->d, x, y, back, NULL));
  ag_heads_copy(g->dt, g->B, g->H, g->T, g->d, x, y, back);
  return SG_OK;
}

/* The all-to-all(v) of nt tensors: to_head = 1 sends tbuf (token side) and
 * receives hbuf (head side); 0 the reverse. Counts the bytes received from
 * the other ranks into uly_rx[what]. */
static sg_status exchange(uly_geo *g, int nt, char *tbuf, char *hbuf,
                          int to_head, int what) {
  sg_status st = SG_OK;
  const int64_t unit = nt * g->B * g->Hl * g->d;
  long long rx = 0;
  for (int p = 0; p < g->P; ++p) {
    const int64_t tc = unit * g->T, hc = unit * g->tok[p];
    g->sc[p] = to_head ? tc : hc,
    g->sd[p] = to_head ? p * tc : unit * g->off[p];
    g->rc[p] = to_head ? hc : tc,
    g->rd[p] = to_head ? unit * g->off[p] : p * tc;
    if (p != g->r) rx += (long long)((size_t)g->rc[p] * g->es);
  }
  uly_rx[what] += rx;
  char *src = to_head ? tbuf : hbuf, *dst = to_head ? hbuf : tbuf;
  if (!g->g) {
    if (g->rc[0])
      SG_TRY(ag_mem_copy(g->dev, dst, g->dev, src, (size_t)g->rc[0] * g->es));
    return SG_OK;
  }
  if (g->dev.kind != SG_DEVICE_HOST) {
    /* device buffers (host memory on a faked device): the comm layer's
     * blocking all-to-all-v, NCCL on a GPU's mesh */
    SG_TRY(sg_alltoallv(g->g, src, g->sc, g->sd, dst, g->rc, g->rd, g->dt));
    goto fail;
  }
  sg_request_t req = NULL;
  SG_TRY(
      sg_ialltoallv(g->g, src, g->sc, g->sd, dst, g->rc, g->rd, g->dt, &req));
  SG_TRY(sg_wait(&req));
fail:
  return st;
}

/* Buffers of an exchange: nt tensors on each side. */
typedef struct uly_bufs {
  char *tk, *tbuf, *hbuf; /* tk: nt tensors (B, H, T, d) */
} uly_bufs;

static void bufs_free(const uly_geo *g, uly_bufs *w) {
  if (w->tk) ag_mem_free(g->dev, (void **)&w->tk);
  if (w->tbuf) ag_mem_free(g->dev, (void **)&w->tbuf);
  if (w->hbuf) ag_mem_free(g->dev, (void **)&w->hbuf);
  memset(w, 0, sizeof *w);
}

/* Allocated on every rank, the failure agreed over the group (no rank
 * enters the all-to-all alone). */
static sg_status bufs_alloc(const uly_geo *g, int nt, uly_bufs *w) {
  sg_status st = SG_OK;
  const size_t nt_ = (size_t)(nt * g->B * g->H * g->T * g->d) * g->es + 1,
               nh = (size_t)(nt * g->B * g->Hl * g->N * g->d) * g->es + 1;
  void *p[3] = {NULL, NULL, NULL};
  st = ag_mem_alloc(g->dev, nt_, 0, &p[0]);
  if (!st) st = ag_mem_alloc(g->dev, nt_, 0, &p[1]);
  if (!st) st = ag_mem_alloc(g->dev, nh, 0, &p[2]);
  w->tk = p[0], w->tbuf = p[1], w->hbuf = p[2];
  if (g->g) st = sg_agree(sg_group_comm(g->g), st);
  return st;
}

/* Token side -> head side: the (B, C, T) tensors src[t] into y[t]
 * (B, Hl, N, d). */
static sg_status to_heads(uly_geo *g, int nt, void *const *src, char *const *y,
                          uly_bufs *w, int what) {
  sg_status st = SG_OK;
  char *tk[3];
  const size_t n = (size_t)(g->B * g->H * g->T * g->d) * g->es;
  for (int t = 0; t < nt; ++t) {
    tk[t] = w->tk + (size_t)t * n;
    SG_TRY(heads_copy(g, src[t], tk[t], 0));
  }
  SG_TRY(tok_pack(g, nt, tk, w->tbuf, 0));
  SG_TRY(exchange(g, nt, w->tbuf, w->hbuf, 1, what));
  SG_TRY(head_pack(g, nt, y, w->hbuf, 0));
fail:
  return st;
}

/* Head side -> token side: y[t] (B, Hl, N, d) into the (B, C, T) tensors
 * dst[t] (a NULL dst[t] is exchanged but not written). */
static sg_status to_tokens(uly_geo *g, int nt, char *const *y, void *const *dst,
                           uly_bufs *w, int what) {
  sg_status st = SG_OK;
  char *tk[3];
  const size_t n = (size_t)(g->B * g->H * g->T * g->d) * g->es;
  for (int t = 0; t < nt; ++t) tk[t] = w->tk + (size_t)t * n;
  SG_TRY(head_pack(g, nt, y, w->hbuf, 1));
  SG_TRY(exchange(g, nt, w->tbuf, w->hbuf, 0, what));
  SG_TRY(tok_pack(g, nt, tk, w->tbuf, 1));
  for (int t = 0; t < nt; ++t)
    if (dst[t]) SG_TRY(heads_copy(g, dst[t], tk[t], 1));
fail:
  return st;
}

/* The attention of the head-sharded sequence: a ring over g->ring (USP)
 * or of one rank (Ulysses). */
static sg_status ring_of(const uly_geo *g, attn_geo *rg) {
  return ag_ring_geo(g->dt, g->B, g->Hl, g->N, g->d, g->ring, rg);
}

/* saved: q, k, v, o head-sharded ((B, Hl, N, d) each), lse (B, Hl, N) */
static char *saved_at(const sg_node *node, const uly_geo *g, int k) {
  return (char *)node->saved + (size_t)(k * g->B * g->Hl * g->N * g->d) * g->es;
}

/* The attention of the head-sharded sequence (q, [k | v], o, lse in the
 * kernel's layout): the ring's code on host memory (a faked device
 * included: a ring of one rank there), the CUDA kernel on a GPU (no ring:
 * geo_of refused one). */
static sg_status local_fwd(const uly_geo *g, const attn_geo *rg, char *q,
                           char *kv, char *o, char *lse) {
  if (!g->gpu) return ag_ring_forward(rg, q, kv, o, lse);
  const sg_attn_desc d = {
      .batch = g->B, .heads = g->Hl, .nq = g->N, .nk = g->N, .head_dim = g->d};
  const size_t nh = (size_t)(g->B * g->Hl * g->N * g->d) * g->es;
  (void)d, (void)nh;
  return ULY_GPU(
      sg_attention_fwd_cuda(&d, g->dt, q, kv, kv + nh, o, lse, NULL));
}

static sg_status local_bwd(const uly_geo *g, const attn_geo *rg,
                           const ring_saved *sv, char *const *dx) {
  if (!g->gpu) return ag_ring_backward(rg, sv, (void *const *)dx);
  const sg_attn_desc d = {
      .batch = g->B, .heads = g->Hl, .nq = g->N, .nk = g->N, .head_dim = g->d};
  const size_t nh = (size_t)(g->B * g->Hl * g->N * g->d) * g->es;
  (void)d, (void)nh;
  return ULY_GPU(sg_attention_bwd_cuda(&d, g->dt, sv->q, sv->kv,
                                       (const char *)sv->kv + nh, sv->o,
                                       sv->lse, sv->dout, dx[0], dx[1], dx[2],
                                       NULL));
}

/* One body for the host and a device (the node's buffers on its device:
 * the layout copies, the packing and the local attention by kernels on a
 * GPU, the host's code on host memory; the all-to-alls through the comm
 * layer on the device buffers). */
static sg_status uly_fwd(sg_node *node) {
  sg_status st = SG_OK;
  uly_geo g;
  attn_geo rg = {0};
  uly_bufs w = {0};
  void *sv = NULL;
  SG_TRY(geo_of(node, &g));
  const sg_tensor *q = &node->in[0]->value;
  SG_TRY(sg_node_save(node, (size_t)(g.B * g.Hl * g.N * (4 * g.d + 1)) * g.es,
                      &sv));
  SG_TRY(sg_node_alloc_out_uninit(node, 0, q->ndim, q->shape));
  SG_TRY(bufs_alloc(&g, 3, &w));
  void *in[3] = {node->in[0]->value.data, node->in[1]->value.data,
                 node->in[2]->value.data};
  char *hd[4];
  for (int i = 0; i < 4; ++i) hd[i] = saved_at(node, &g, i);
  SG_TRY(to_heads(&g, 3, in, hd, &w, SG_ULYSSES_FWD_QKV));
  SG_TRY(ring_of(&g, &rg));
  SG_TRY(local_fwd(&g, &rg, hd[0], hd[1], hd[3], saved_at(node, &g, 4)));
  void *out[1] = {node->out[0]->value.data};
  SG_TRY(to_tokens(&g, 1, hd + 3, out, &w, SG_ULYSSES_FWD_O));
fail:
  bufs_free(&g, &w);
  ag_ring_geo_release(&rg);
  geo_release(&g);
  return st;
}

static sg_status uly_bwd(sg_node *node) {
  sg_status st = SG_OK;
  uly_geo g;
  attn_geo rg = {0};
  uly_bufs w = {0};
  void *dh = NULL;
  SG_TRY(geo_of(node, &g));
  const size_t nh = (size_t)(g.B * g.Hl * g.N * g.d) * g.es;
  /* dout, dq, dk, dv head-sharded */
  st = ag_mem_alloc(g.dev, 4 * nh + 1, 0, &dh);
  if (g.g) st = sg_agree(sg_group_comm(g.g), st);
  SG_TRY(st);
  SG_TRY(bufs_alloc(&g, 3, &w));
  char *dd[4] = {dh, (char *)dh + nh, (char *)dh + 2 * nh, (char *)dh + 3 * nh};
  void *dout[1] = {node->out[0]->grad.data};
  SG_TRY(to_heads(&g, 1, dout, dd, &w, SG_ULYSSES_BWD_DO));
  SG_TRY(ring_of(&g, &rg));
  ring_saved sv = {.q = saved_at(node, &g, 0),
                   .kv = saved_at(node, &g, 1),
                   .o = saved_at(node, &g, 3),
                   .lse = saved_at(node, &g, 4),
                   .dout = dd[0]};
  SG_TRY(local_bwd(&g, &rg, &sv, dd + 1));
  void *gin[3] = {node->gin[0], node->gin[1], node->gin[2]};
  SG_TRY(to_tokens(&g, 3, dd + 1, gin, &w, SG_ULYSSES_BWD_DQKV));
fail:
  if (dh) ag_mem_free(g.dev, &dh);
  bufs_free(&g, &w);
  ag_ring_geo_release(&rg);
  geo_release(&g);
  return st;
}

/* The device entries are the same bodies (built in every build: on a
 * faked device they run the host's code on its host memory). */
static const sg_op_def ulysses_op = {
    .name = "attention_ulysses",
    .slots = {SG_SLOT_ACT, SG_SLOT_ACT, SG_SLOT_ACT},
    .forward = uly_fwd,
    .backward = uly_bwd,
    .forward_cuda = uly_fwd,
    .backward_cuda = uly_bwd,
    .rule = {.windowed_input = -1,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .writes_gin = 7u}};

static const sg_op_def usp_op = {
    .name = "attention_usp",
    .slots = {SG_SLOT_ACT, SG_SLOT_ACT, SG_SLOT_ACT},
    .forward = uly_fwd,
    .backward = uly_bwd,
    .forward_cuda = uly_fwd,
    .backward_cuda = uly_bwd,
    .rule = {.windowed_input = -1,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .writes_gin = 7u}};

static sg_status uly_apply_in(sg_tape_t t, int usp, const uly_attr *in_at,
                              int64_t heads, sg_var *q, sg_var *k, sg_var *v,
                              sg_var **o) {
  sg_status st = SG_OK;
  SG_TRY(sg_ag_attention_check(heads, q, k, v, o));
  uly_attr at = {.heads = heads, .usp = usp};
  if (in_at) at.given = 1, at.a2a = in_at->a2a, at.ring = in_at->ring;
  sg_var *in[3] = {q, k, v};
  SG_TRY(sg_tape_apply(t, usp ? &usp_op : &ulysses_op, 3, in, 1, NULL, &at,
                       sizeof at, o));
fail:
  return st;
}

static sg_status uly_apply(sg_tape_t t, int usp, int64_t heads, sg_var *q,
                           sg_var *k, sg_var *v, sg_var **o) {
  return uly_apply_in(t, usp, NULL, heads, q, k, v, o);
}

sg_status sg_ag_attention_ulysses(sg_tape_t t, int64_t heads, sg_var *q,
                                  sg_var *k, sg_var *v, sg_var **o) {
  return uly_apply(t, 0, heads, q, k, v, o);
}

sg_status sg_ag_attention_usp(sg_tape_t t, int64_t heads, sg_var *q, sg_var *k,
                              sg_var *v, sg_var **o) {
  return uly_apply(t, 1, heads, q, k, v, o);
}

sg_status sg_ag_attention_sp(sg_tape_t t, sg_sp_mode mode, int64_t heads,
                             sg_var *q, sg_var *k, sg_var *v, sg_var **o) {
  switch (mode) {
  case SG_SP_RING: return sg_ag_attention(t, heads, q, k, v, o);
  case SG_SP_ULYSSES: return sg_ag_attention_ulysses(t, heads, q, k, v, o);
  case SG_SP_USP: return sg_ag_attention_usp(t, heads, q, k, v, o);
  }
  return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                      "attention: unknown sequence-parallel mode %d",
                      (int)mode);
}

sg_status sg_ag_attention_seq(sg_tape_t t, sg_sp_mode mode, int64_t heads,
                              const sg_attn_groups *gr, sg_var *q, sg_var *k,
                              sg_var *v, sg_var **o) {
  if (!gr)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "attention (sp pieces): groups are required");
  uly_attr at = {.a2a = gr->seq};
  switch (mode) {
  case SG_SP_RING: return ag_attention_ring_in(t, heads, gr->seq, q, k, v, o);
  case SG_SP_ULYSSES: return uly_apply_in(t, 0, &at, heads, q, k, v, o);
  case SG_SP_USP:
    at.a2a = gr->sp, at.ring = gr->domain;
    return uly_apply_in(t, 1, &at, heads, q, k, v, o);
  }
  return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                      "attention: unknown sequence-parallel mode %d",
                      (int)mode);
}

sg_status sg_sp_mode_parse(const char *name, sg_sp_mode *mode) {
  if (name && !strcmp(name, "ring")) return *mode = SG_SP_RING, SG_OK;
  if (name && !strcmp(name, "ulysses")) return *mode = SG_SP_ULYSSES, SG_OK;
  if (name && !strcmp(name, "usp")) return *mode = SG_SP_USP, SG_OK;
  return sg_error_set(SG_ERR_CONFIG, __FILE__, __LINE__,
                      "sp_mode must be ring, ulysses or usp, not '%s'",
                      name ? name : "(null)");
}

sg_status sg_sp_mode_check(sg_mesh_t mesh, sg_sp_mode mode, int64_t heads,
                           const char *who) {
  sg_status st = SG_OK;
  int tp = 1, P = 1, sp = 1;
  if (mode != SG_SP_RING && mode != SG_SP_ULYSSES && mode != SG_SP_USP)
    SG_RAISE(SG_ERR_CONFIG, "%s: unknown sp_mode %d (ring, ulysses or usp)",
             who, (int)mode);
  for (int k = 0; mesh && k < sg_mesh_ndims(mesh); ++k) {
    const char *nm = sg_mesh_dim_name(mesh, k);
    const int sz = sg_mesh_dim_size(mesh, k);
    if (!strcmp(nm, "tp")) tp *= sz;
    if (!strcmp(nm, "sp") || !strcmp(nm, "cp")) sp *= sz;
    if ((!strcmp(nm, "h") && mode == SG_SP_ULYSSES) || !strcmp(nm, "w"))
      P *= sz; /* the all-to-all's ranks: h and w, or (USP) w */
  }
  /* with an sp dim: Ulysses over h, w and sp; USP over sp (the ring over
   * h and w) */
  if (sp > 1) P = mode == SG_SP_USP ? sp : P * sp;
  if (mode != SG_SP_RING && (heads % tp || (heads / tp) % P))
    SG_RAISE(SG_ERR_CONFIG,
             "%s: sp_mode = %s needs the heads (%lld) divisible by tp x "
             "the domain ranks of its all-to-all (%d x %d: %s): every rank "
             "attends whole heads (use sp_mode = ring, which has no such "
             "constraint)",
             who, mode == SG_SP_USP ? "usp" : "ulysses", (long long)heads, tp,
             P,
             sp > 1 ? (mode == SG_SP_USP ? "sp" : "h, w and sp")
                    : (mode == SG_SP_USP ? "w" : "h and w"));
fail:
  return st;
}

void sg_ag_attention_ulysses_bytes(long long *bytes, int reset) {
  for (int i = 0; i < SG_ULYSSES_NBYTES; ++i) {
    if (bytes) bytes[i] = uly_rx[i];
    if (reset) uly_rx[i] = 0;
  }
}

const sg_op_def *sg_ag_attention_ulysses_op_def(void) { return &ulysses_op; }
const sg_op_def *sg_ag_attention_usp_op_def(void) { return &usp_op; }
