/* shardgrid — the transformer ops of the tape: multi-head self-attention
 * on the fused kernel (sg_attention_*), ring attention over the domain
 * dims when the tokens are split, a field added over the batch (the
 * position embedding), LayerNorm over channels and the MHSA block.
 *
 * Layout (docs/transformers.md). Tokens are the spatial positions of a
 * (N, C, spatial...) variable, C = heads * head_dim with channel
 * c = head * head_dim + j; a rank's tokens are its spatial block in
 * row-major order. The op copies q, k, v into the kernel's
 * (N, heads, tokens, head_dim) layout and o back.
 *
 * Ring attention. On tokens split over the mesh dims of the domain (the
 * group over the dims that split space), every rank keeps its queries and
 * the K/V blocks travel around the ring of that group: at step s rank r
 * holds block (r - s) mod P, posts the receive of the next block and the
 * send of the current one, computes attention on the current block and
 * merges it into its (o, lse) with sg_attention_merge. Backward: the K/V
 * blocks travel again with their dK/dV accumulators (the K/V part is sent
 * before the block's compute, its dK/dV after); a last shift brings every
 * block's dK/dV home. Non-causal attention does not depend on the order of
 * the keys, so the ring order is free. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_impl.h"
#include "autograd_impl.h"
#include "op_registry_impl.h"
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_ops_inl.h" /* sg_field_acc, shared with the CUDA kernel */
#if SG_HAVE_CUDA
#include "sg_ops_cuda.h"
#define ATTN_CUDA(f) f
#else
#define ATTN_CUDA(f) NULL
#endif

enum { RING_TAG_KV = 0x7a11, RING_TAG_DKV = 0x7a12 };

/* Bytes this rank received in the rings (sg_ag_attention_ring_bytes). */
static _Atomic long long ring_rx[3];

static int64_t tokens_of(const sg_tensor *t) {
  int64_t n = 1;
  for (int i = 2; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

/* x (B, H*d, T) <-> y (B, H, T, d); back: y -> x. */
#define HEADS_COPY(T_)                                       \
  for (int64_t b = 0; b < B; ++b)                            \
    for (int64_t h = 0; h < H; ++h)                          \
      for (int64_t j = 0; j < d; ++j) {                      \
        T_ *xs = (T_ *)x + ((b * H + h) * d + j) * T;        \
        T_ *ys = (T_ *)y + (b * H + h) * T * d + j;          \
        if (back)                                            \
          for (int64_t t = 0; t < T; ++t) xs[t] = ys[t * d]; \
        else                                                 \
          for (int64_t t = 0; t < T; ++t) ys[t * d] = xs[t]; \
      }

void ag_heads_copy(sg_dtype dt, int64_t B, int64_t H, int64_t T, int64_t d,
                   void *x, void *y, int back) {
  if (dt == SG_DTYPE_F32) {
    HEADS_COPY(float)
  } else {
    HEADS_COPY(double)
  }
}

static void add_into(sg_dtype dt, int64_t n, void *y, const void *x) {
  if (dt == SG_DTYPE_F32)
    for (int64_t i = 0; i < n; ++i) ((float *)y)[i] += ((const float *)x)[i];
  else
    for (int64_t i = 0; i < n; ++i) ((double *)y)[i] += ((const double *)x)[i];
}

typedef struct attn_attr {
  int64_t heads;
  int given;      /* 1: the ring is grp (token pieces of the sp dim) */
  sg_group_t grp; /* else the group of the dims that split space */
} attn_attr;

void ag_ring_geo_release(attn_geo *g) {
  free(g->tok);
  g->tok = NULL;
}

sg_status ag_ring_geo(sg_dtype dt, int64_t B, int64_t H, int64_t T, int64_t d,
                      sg_group_t grp, attn_geo *g) {
  sg_status st = SG_OK;
  memset(g, 0, sizeof *g);
  g->dt = dt;
  g->es = sg_dtype_size(dt);
  g->B = B, g->H = H, g->T = T, g->d = d;
  g->n = g->B * g->H * g->T * g->d;
  g->comm = MPI_COMM_NULL;
  g->P = 1;
  if (grp && sg_group_size(grp) > 1) {
    g->comm = sg_group_comm(grp);
    SG_MPI(MPI_Comm_size(g->comm, &g->P));
    SG_MPI(MPI_Comm_rank(g->comm, &g->r));
  }
  g->tok = calloc((size_t)g->P, sizeof *g->tok);
  if (!g->tok) SG_RAISE(SG_ERR_ALLOC, "attention: token table");
  g->tok[0] = g->T;
  if (g->P > 1)
    SG_MPI(
        MPI_Allgather(&g->T, 1, MPI_INT64_T, g->tok, 1, MPI_INT64_T, g->comm));
  for (int p = 0; p < g->P; ++p)
    if (g->tok[p] > g->tmax) g->tmax = g->tok[p];
fail:
  return st;
}

/* The geometry of a node; the tokens of every ring rank by an all-gather. */
static sg_status geo_of(const sg_node *node, attn_geo *g) {
  sg_status st = SG_OK;
  const attn_attr *a = (const attn_attr *)node->attr;
  const sg_tensor *q = &node->in[0]->value;
  sg_group_t grp = NULL;
  memset(g, 0, sizeof *g);
  if (a->given)
    grp = a->grp;
  else
    SG_TRY(sg_node_group(node, SG_SPLIT_SPACE, &grp));
  SG_TRY(ag_ring_geo(q->dtype, q->shape[0], a->heads, tokens_of(q),
                     q->shape[1] / a->heads, grp, g));
fail:
  return st;
}

/* Tokens, and elements of one of K, V, of ring rank p's block (p taken
 * modulo the ring). */
static int64_t blk_tok(const attn_geo *g, int p) {
  return g->tok[((p % g->P) + g->P) % g->P];
}
static int64_t blk(const attn_geo *g, int p) {
  return g->B * g->H * blk_tok(g, p) * g->d;
}

static MPI_Datatype mpi_type(sg_dtype dt) {
  return dt == SG_DTYPE_F32 ? MPI_FLOAT : MPI_DOUBLE;
}

static sg_attn_desc desc_of(const attn_geo *g, int64_t nk) {
  sg_attn_desc d = {
      .batch = g->B, .heads = g->H, .nq = g->T, .nk = nk, .head_dim = g->d};
  return d;
}

/* Post the receive of `rn` elements from the left into rbuf and the send of
 * `sn` elements of sbuf to the right (tag). */
static sg_status ring_post(const attn_geo *g, int tag, void *rbuf, int64_t rn,
                           const void *sbuf, int64_t sn, MPI_Request *req,
                           int what) {
  sg_status st = SG_OK;
  ring_rx[what] += (long long)((size_t)rn * g->es);
  const int left = (g->r - 1 + g->P) % g->P, right = (g->r + 1) % g->P;
  SG_MPI(
      MPI_Irecv(rbuf, (int)rn, mpi_type(g->dt), left, tag, g->comm, &req[0]));
  SG_MPI(
      MPI_Isend(sbuf, (int)sn, mpi_type(g->dt), right, tag, g->comm, &req[1]));
fail:
  return st;
}

static sg_status ring_wait(const attn_geo *g, MPI_Request *req, int n) {
  sg_status st = SG_OK;
  for (int i = 0; i < n; ++i)
    SG_TRY(sg_wait_timed(&req[i], MPI_STATUS_IGNORE, 1, "ring attention",
                         g->comm));
fail:
  return st;
}

/* saved: qt, kt, vt, ot (n each), lse (B*H*T); kt and vt are adjacent, so
 * the local K/V block is one buffer. */
static char *saved_at(const sg_node *node, const attn_geo *g, int k) {
  return (char *)node->saved + (size_t)(k * g->n) * g->es;
}

/* o, lse of the local queries over every block of the ring. */
sg_status ag_ring_forward(const attn_geo *g, const void *qt, void *kvt,
                          void *ot, void *lse) {
  sg_status st = SG_OK;
  const int64_t rows = g->B * g->H * g->T;
  void *buf[2] = {NULL, NULL}, *ob = NULL, *lb = NULL;
  MPI_Request req[2];
  if (g->P > 1) {
    const size_t kv = (size_t)(2 * g->B * g->H * g->tmax * g->d) * g->es;
    buf[0] = malloc(kv ? kv : 1), buf[1] = malloc(kv ? kv : 1);
    ob = malloc(g->n ? (size_t)g->n * g->es : 1);
    lb = malloc(rows ? (size_t)rows * g->es : 1);
    if (!buf[0] || !buf[1] || !ob || !lb) st = SG_ERR_ALLOC;
    if (st) sg_error_set(st, __FILE__, __LINE__, "ring attention buffers");
    SG_TRY(sg_agree(g->comm, st)); /* no rank left in the ring alone */
  }
  void *cur = kvt;
  for (int s = 0; s < g->P; ++s) {
    const int64_t nb = blk(g, g->r - s);
    const int last = s == g->P - 1;
    if (!last)
      SG_TRY(ring_post(g, RING_TAG_KV, buf[s % 2], 2 * blk(g, g->r - s - 1),
                       cur, 2 * nb, req, SG_RING_FWD_KV));
    sg_attn_desc d = desc_of(g, blk_tok(g, g->r - s));
    const void *k = cur, *v = (const char *)cur + (size_t)nb * g->es;
    if (rows == 0) {
      /* no queries here (an empty shard): only pass the blocks on */
    } else if (s == 0) {
      SG_TRY(sg_attention_forward(&d, g->dt, qt, k, v, ot, lse, NULL));
    } else {
      SG_TRY(sg_attention_forward(&d, g->dt, qt, k, v, ob, lb, NULL));
      SG_TRY(sg_attention_merge(g->dt, rows, g->d, ot, lse, ob, lb));
    }
    if (!last) {
      SG_TRY(ring_wait(g, req, 2));
      cur = buf[s % 2];
    }
  }
fail:
  free(buf[0]), free(buf[1]), free(ob), free(lb);
  return st;
}

static sg_status attn_fwd(sg_node *node) {
  sg_status st = SG_OK;
  attn_geo g;
  SG_TRY(geo_of(node, &g));
  const sg_tensor *q = &node->in[0]->value;
  void *sv = NULL;
  SG_TRY(sg_node_save(node, (size_t)(4 * g.n + g.B * g.H * g.T) * g.es, &sv));
  for (int i = 0; i < 3; ++i)
    ag_heads_copy(g.dt, g.B, g.H, g.T, g.d, node->in[i]->value.data,
                  saved_at(node, &g, i), 0);
  SG_TRY(sg_node_alloc_out_uninit(node, 0, q->ndim, q->shape));
  SG_TRY(ag_ring_forward(&g, saved_at(node, &g, 0), saved_at(node, &g, 1),
                         saved_at(node, &g, 3), saved_at(node, &g, 4)));
  ag_heads_copy(g.dt, g.B, g.H, g.T, g.d, node->out[0]->value.data,
                saved_at(node, &g, 3), 1);
fail:
  ag_ring_geo_release(&g);
  return st;
}

/* The backward buffers: dout and dq in the kernel's layout, the block's
 * dq, dk, dv, two travelling blocks [k | v | dk | dv]. */
typedef struct ring_bwd {
  void *dot, *dq, *tq, *tk, *tv, *buf[2];
} ring_bwd;

static void ring_bwd_free(ring_bwd *w) {
  free(w->dot), free(w->dq), free(w->tq), free(w->tk), free(w->tv);
  free(w->buf[0]), free(w->buf[1]);
  memset(w, 0, sizeof *w);
}

static sg_status ring_bwd_alloc(const attn_geo *g, ring_bwd *w) {
  sg_status st = SG_OK;
  const size_t n = (size_t)(g->n ? g->n : 1) * g->es;
  const size_t m = (size_t)(g->B * g->H * g->tmax * g->d) * g->es + 1;
  w->dot = malloc(n), w->dq = calloc(1, n), w->tq = malloc(n);
  w->tk = malloc(m), w->tv = malloc(m);
  w->buf[0] = calloc(4, m), w->buf[1] = calloc(4, m);
  if (!w->dot || !w->dq || !w->tq || !w->tk || !w->tv || !w->buf[0] ||
      !w->buf[1])
    SG_RAISE(SG_ERR_ALLOC, "ring attention backward buffers");
fail:
  return st;
}

/* One block's backward: dq += its share; the block's dk, dv += its own. */
static sg_status block_bwd(const ring_saved *sv, const attn_geo *g, ring_bwd *w,
                           void *blkbuf, int p) {
  sg_status st = SG_OK;
  const int64_t nb = blk(g, p);
  sg_attn_desc d = desc_of(g, blk_tok(g, p));
  if (g->n == 0) return SG_OK; /* no queries here: nothing to add */
  char *k = blkbuf, *v = k + (size_t)nb * g->es, *dk = v + (size_t)nb * g->es,
       *dv = dk + (size_t)nb * g->es;
  SG_TRY(sg_attention_backward(&d, g->dt, sv->q, k, v, sv->o, sv->lse, w->dot,
                               w->tq, w->tk, w->tv, NULL));
  add_into(g->dt, g->n, w->dq, w->tq);
  add_into(g->dt, nb, dk, w->tk);
  add_into(g->dt, nb, dv, w->tv);
fail:
  return st;
}

static sg_status ring_backward(const ring_saved *sv, const attn_geo *g,
                               ring_bwd *w, void **home) {
  sg_status st = SG_OK;
  MPI_Request req[4];
  char *cur = w->buf[1]; /* zero dK/dV (calloc) */
  const int64_t n0 = blk(g, g->r);
  if (n0 > 0) memcpy(cur, sv->kv, (size_t)(2 * n0) * g->es);
  for (int s = 0; s < g->P; ++s) {
    const int64_t nb = blk(g, g->r - s), nn = blk(g, g->r - s - 1);
    char *nxt = w->buf[s % 2];
    const int last = s == g->P - 1;
    if (!last)
      SG_TRY(ring_post(g, RING_TAG_KV, nxt, 2 * nn, cur, 2 * nb, req,
                       SG_RING_BWD_KV));
    SG_TRY(block_bwd(sv, g, w, cur, g->r - s));
    if (!last) {
      /* this block's dK/dV follow its K/V to the right */
      SG_TRY(ring_post(g, RING_TAG_DKV, nxt + (size_t)(2 * nn) * g->es, 2 * nn,
                       cur + (size_t)(2 * nb) * g->es, 2 * nb, req + 2,
                       SG_RING_BWD_DKV));
      SG_TRY(ring_wait(g, req, 4));
      cur = nxt;
    }
  }
  if (g->P > 1) {
    /* cur holds block r+1's dK/dV: one shift brings every block's home */
    char *own = cur == w->buf[0] ? w->buf[1] : w->buf[0];
    const int64_t nb = blk(g, g->r + 1);
    SG_TRY(ring_post(g, RING_TAG_DKV, own + (size_t)(2 * n0) * g->es, 2 * n0,
                     cur + (size_t)(2 * nb) * g->es, 2 * nb, req,
                     SG_RING_BWD_DKV));
    SG_TRY(ring_wait(g, req, 2));
    cur = own;
  }
  *home = cur + (size_t)(2 * n0) * g->es;
fail:
  return st;
}

sg_status ag_ring_backward(const attn_geo *g, const ring_saved *sv,
                           void *const *dx) {
  sg_status st = SG_OK;
  ring_bwd w;
  memset(&w, 0, sizeof w);
  if (g->P == 1) {
    /* one block: the kernel writes dq, dk, dv in place (the ring's zeroed
     * accumulators, copies and sums were 0 + x: the same values) */
    if (g->n == 0) return SG_OK;
    const sg_attn_desc d = desc_of(g, blk_tok(g, g->r));
    const char *k = sv->kv, *v = k + (size_t)blk(g, g->r) * g->es;
    return sg_attention_backward(&d, g->dt, sv->q, k, v, sv->o, sv->lse,
                                 sv->dout, dx[0], dx[1], dx[2], NULL);
  }
  st = ring_bwd_alloc(g, &w);
  if (g->P > 1) st = sg_agree(g->comm, st);
  if (st) goto fail;
  if (g->n) memcpy(w.dot, sv->dout, (size_t)g->n * g->es);
  void *dkv = NULL;
  SG_TRY(ring_backward(sv, g, &w, &dkv));
  const void *parts[3] = {w.dq, dkv, (char *)dkv + (size_t)g->n * g->es};
  for (int i = 0; i < 3; ++i)
    if (dx[i] && g->n) memcpy(dx[i], parts[i], (size_t)g->n * g->es);
fail:
  ring_bwd_free(&w);
  return st;
}

static sg_status attn_bwd(sg_node *node) {
  sg_status st = SG_OK;
  attn_geo g;
  void *buf = NULL;
  memset(&g, 0, sizeof g);
  SG_TRY(geo_of(node, &g));
  const size_t n = (size_t)g.n * g.es;
  buf = malloc(4 * n + 1); /* dout, dq, dk, dv in the kernel's layout */
  if (!buf)
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                      "attention backward buffers");
  if (g.P > 1) st = sg_agree(g.comm, st);
  SG_TRY(st);
  char *b = buf;
  ag_heads_copy(g.dt, g.B, g.H, g.T, g.d, node->out[0]->grad.data, b, 0);
  ring_saved sv = {.q = saved_at(node, &g, 0),
                   .kv = saved_at(node, &g, 1),
                   .o = saved_at(node, &g, 3),
                   .lse = saved_at(node, &g, 4),
                   .dout = b};
  void *dx[3] = {b + n, b + 2 * n, b + 3 * n};
  SG_TRY(ag_ring_backward(&g, &sv, dx));
  for (int i = 0; i < 3; ++i)
    if (node->gin[i])
      ag_heads_copy(g.dt, g.B, g.H, g.T, g.d, node->gin[i], dx[i], 1);
fail:
  free(buf);
  ag_ring_geo_release(&g);
  return st;
}

#if SG_HAVE_CUDA
/* On one device, one process: the ring has one block (sharded device
 * variables are refused before this, ag_node_device), so the kernel runs
 * once on the whole key set: the layout copies and the attention kernels
 * of sg_ops_cuda.h on the legacy default stream; saved state as on the
 * host, in device memory. */
static sg_status attn_one_block(const attn_geo *g) {
  sg_status st = SG_OK;
  if (g->P != 1)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "attention on cuda: a ring of %d ranks needs NCCL (issue 22)",
             g->P);
fail:
  return st;
}

sg_status ag_attention_fwd_device(sg_node *node, const attn_geo *g) {
  sg_status st = SG_OK;
  SG_TRY(attn_one_block(g));
  const sg_tensor *q = &node->in[0]->value;
  void *sv = NULL;
  SG_TRY(sg_node_save_uninit(
      node, (size_t)(4 * g->n + g->B * g->H * g->T) * g->es, &sv));
  for (int i = 0; i < 3; ++i)
    SG_TRY(sg_heads_copy_cuda(g->dt, g->B, g->H, g->T, g->d,
                              (void *)node->in[i]->value.data,
                              saved_at(node, g, i), 0, NULL));
  SG_TRY(sg_node_alloc_out_uninit(node, 0, q->ndim, q->shape));
  const sg_attn_desc d = desc_of(g, g->T);
  SG_TRY(sg_attention_fwd_cuda(&d, g->dt, saved_at(node, g, 0),
                               saved_at(node, g, 1), saved_at(node, g, 2),
                               saved_at(node, g, 3), saved_at(node, g, 4),
                               NULL));
  SG_TRY(sg_heads_copy_cuda(g->dt, g->B, g->H, g->T, g->d,
                            node->out[0]->value.data, saved_at(node, g, 3), 1,
                            NULL));
fail:
  return st;
}

sg_status ag_attention_bwd_device(sg_node *node, const attn_geo *g) {
  sg_status st = SG_OK;
  void *buf = NULL;
  SG_TRY(attn_one_block(g));
  const size_t n = (size_t)g->n * g->es;
  /* dout, dq, dk, dv in the kernel's layout, on the device */
  SG_TRY(ag_mem_alloc(node->device, 4 * n + 1, 0, &buf));
  char *b = buf;
  SG_TRY(sg_heads_copy_cuda(g->dt, g->B, g->H, g->T, g->d,
                            node->out[0]->grad.data, b, 0, NULL));
  void *dx[3] = {node->gin[0] ? b + n : NULL, node->gin[1] ? b + 2 * n : NULL,
                 node->gin[2] ? b + 3 * n : NULL};
  const sg_attn_desc d = desc_of(g, g->T);
  SG_TRY(sg_attention_bwd_cuda(&d, g->dt, saved_at(node, g, 0),
                               saved_at(node, g, 1), saved_at(node, g, 2),
                               saved_at(node, g, 3), saved_at(node, g, 4), b,
                               dx[0], dx[1], dx[2], NULL));
  for (int i = 0; i < 3; ++i)
    if (node->gin[i])
      SG_TRY(sg_heads_copy_cuda(g->dt, g->B, g->H, g->T, g->d, node->gin[i],
                                dx[i], 1, NULL));
fail:
  if (buf) ag_mem_free(node->device, &buf);
  return st;
}

static sg_status attn_fwd_gpu(sg_node *node) {
  sg_status st = SG_OK;
  attn_geo g;
  SG_TRY(geo_of(node, &g));
  SG_TRY(ag_attention_fwd_device(node, &g));
fail:
  ag_ring_geo_release(&g);
  return st;
}

static sg_status attn_bwd_gpu(sg_node *node) {
  sg_status st = SG_OK;
  attn_geo g;
  SG_TRY(geo_of(node, &g));
  SG_TRY(ag_attention_bwd_device(node, &g));
fail:
  ag_ring_geo_release(&g);
  return st;
}
#endif

/* The device entries, built in every build: on a faked device (host
 * memory) the host's bodies, on a GPU the kernels above. */
static int attn_on_gpu(const sg_node *node) {
  return node->device.kind != SG_DEVICE_HOST && !ag_fake_cuda;
}

#if SG_HAVE_CUDA
#define ATTN_GPU(f) f(node)
#else
#define ATTN_GPU(f)                                      \
  sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__, \
               "attention on a GPU: built without CUDA")
#endif

static sg_status attn_fwd_cuda(sg_node *node) {
  return attn_on_gpu(node) ? ATTN_GPU(attn_fwd_gpu) : attn_fwd(node);
}

static sg_status attn_bwd_cuda(sg_node *node) {
  return attn_on_gpu(node) ? ATTN_GPU(attn_bwd_gpu) : attn_bwd(node);
}

static const sg_op_def attention_op = {
    .name = "attention",
    .slots = {SG_SLOT_ACT, SG_SLOT_ACT, SG_SLOT_ACT},
    .forward = attn_fwd,
    .backward = attn_bwd,
    .forward_cuda = attn_fwd_cuda,
    .backward_cuda = attn_bwd_cuda,
    .rule = {.windowed_input = -1,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .writes_gin = 7u}};

sg_status sg_ag_attention_check(int64_t heads, const sg_var *q, const sg_var *k,
                                const sg_var *v, sg_var **o) {
  sg_status st = SG_OK;
  if (!q || !k || !v || !o)
    SG_RAISE(SG_ERR_INVALID_ARG, "attention: q, k, v and o are required");
  const sg_var *x[3] = {q, k, v};
  for (int i = 0; i < 3; ++i)
    if (x[i]->value.ndim < 3 || x[i]->value.ndim != q->value.ndim ||
        memcmp(sg_var_global_shape(x[i]), sg_var_global_shape(q),
               sizeof(int64_t) * (size_t)q->value.ndim))
      SG_RAISE(SG_ERR_SHAPE,
               "attention: q, k, v must be (N, C, spatial...) of one shape");
  const int64_t c = sg_var_global_shape(q)[1];
  if (heads < 1 || c % heads)
    SG_RAISE(SG_ERR_CONFIG,
             "attention: heads (%lld) must divide the channels (%lld)",
             (long long)heads, (long long)c);
fail:
  return st;
}

static sg_status attn_apply(sg_tape_t t, int64_t heads, int given,
                            sg_group_t grp, sg_var *q, sg_var *k, sg_var *v,
                            sg_var **o) {
  sg_status st = SG_OK;
  SG_TRY(sg_ag_attention_check(heads, q, k, v, o));
  attn_attr at = {.heads = heads, .given = given, .grp = grp};
  sg_var *in[3] = {q, k, v};
  SG_TRY(sg_tape_apply(t, &attention_op, 3, in, 1, NULL, &at, sizeof at, o));
fail:
  return st;
}

sg_status sg_ag_attention(sg_tape_t t, int64_t heads, sg_var *q, sg_var *k,
                          sg_var *v, sg_var **o) {
  return attn_apply(t, heads, 0, NULL, q, k, v, o);
}

sg_status ag_attention_ring_in(sg_tape_t t, int64_t heads, sg_group_t grp,
                               sg_var *q, sg_var *k, sg_var *v, sg_var **o) {
  return attn_apply(t, heads, 1, grp, q, k, v, o);
}

/* ---- a field added over the batch ------------------------------------------ */

/* p: (C, spatial...) this rank's spatial block, the shape of x's (C,
 * spatial...) block. */
static sg_status field_check(const sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->in[0]->value, *p = &node->in[1]->value;
  int same = p->ndim == x->ndim - 1;
  for (int i = 1; same && i < x->ndim; ++i)
    same = p->shape[i - 1] == x->shape[i];
  if (!same)
    SG_RAISE(SG_ERR_SHAPE,
             "add_field: the field block must be x's (C, spatial...) block "
             "(%lld dims, x has %lld)",
             (long long)p->ndim, (long long)x->ndim);
fail:
  return st;
}

/* y[b] = x[b] + p (fwd) or p += sum_b x[b] (!fwd, sg_field_acc: the CUDA
 * kernel's sum), m elements a sample. */
#define FIELD_LOOP(T_, S_)                                                     \
  if (fwd) {                                                                   \
    for (int64_t b = 0; b < nb; ++b)                                           \
      for (int64_t i = 0; i < m; ++i)                                          \
        ((T_ *)y)[b * m + i] = ((const T_ *)x)[b * m + i] + ((T_ *)p)[i];      \
  } else {                                                                     \
    for (int64_t i = 0; i < m; ++i)                                            \
      ((T_ *)p)[i] = sg_field_acc_##S_(((T_ *)p)[i], (const T_ *)x, nb, m, i); \
  }

static void field_loop(sg_dtype dt, int fwd, int64_t nb, int64_t m,
                       const void *x, void *p, void *y) {
  if (dt == SG_DTYPE_F32) {
    FIELD_LOOP(float, f32)
  } else {
    FIELD_LOOP(double, f64)
  }
}

static sg_status field_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->in[0]->value;
  SG_TRY(field_check(node));
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  const int64_t m = sg_tensor_numel(x) / (x->shape[0] ? x->shape[0] : 1);
  field_loop(x->dtype, 1, x->shape[0], m, x->data,
             (void *)node->in[1]->value.data, node->out[0]->value.data);
fail:
  return st;
}

static sg_status field_bwd(sg_node *node) {
  const sg_tensor *x = &node->out[0]->grad;
  const int64_t m = sg_tensor_numel(x) / (x->shape[0] ? x->shape[0] : 1);
  if (node->gin[0]) memcpy(node->gin[0], x->data, sg_tensor_nbytes(x));
  if (node->gin[1]) /* dp += sum over the batch of dy */
    field_loop(x->dtype, 0, x->shape[0], m, x->data, node->gin[1], NULL);
  return SG_OK;
}

#if SG_HAVE_CUDA
static sg_status field_fwd_cuda(sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->in[0]->value;
  SG_TRY(field_check(node));
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  const int64_t m = sg_tensor_numel(x) / (x->shape[0] ? x->shape[0] : 1);
  SG_TRY(sg_add_field_fwd_cuda(x->dtype, x->shape[0], m, x->data,
                               node->in[1]->value.data,
                               node->out[0]->value.data, NULL));
fail:
  return st;
}

static sg_status field_bwd_cuda(sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *g = &node->out[0]->grad;
  const int64_t m = sg_tensor_numel(g) / (g->shape[0] ? g->shape[0] : 1);
  if (node->gin[0])
    SG_TRY(ag_mem_copy(node->device, node->gin[0], node->device, g->data,
                       sg_tensor_nbytes(g)));
  if (node->gin[1])
    SG_TRY(sg_add_field_bwd_cuda(g->dtype, g->shape[0], m, g->data,
                                 node->gin[1], NULL));
fail:
  return st;
}
#endif

static const sg_op_def add_field_op = {
    .name = "add_field",
    .slots = {SG_SLOT_ACT, SG_SLOT_PARAM},
    .forward = field_fwd,
    .backward = field_bwd,
    .forward_cuda = ATTN_CUDA(field_fwd_cuda),
    .backward_cuda = ATTN_CUDA(field_bwd_cuda),
    .rule = {.windowed_input = -1,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .writes_gin = 1u}};

sg_status sg_ag_add_field(sg_tape_t t, sg_var *x, sg_var *p, sg_var **y) {
  sg_status st = SG_OK;
  if (!x || !p || !y)
    SG_RAISE(SG_ERR_INVALID_ARG, "add_field: x, p and y are required");
  if (x->value.ndim < 3 || p->value.ndim != x->value.ndim - 1)
    SG_RAISE(SG_ERR_SHAPE,
             "add_field: needs x (N, C, spatial...) and p (C, spatial...)");
  sg_var *in[2] = {x, p};
  SG_TRY(sg_tape_apply(t, &add_field_op, 2, in, 1, NULL, NULL, 0, y));
fail:
  return st;
}

/* ---- LayerNorm and the MHSA block ------------------------------------------ */

sg_status sg_ag_layernorm(sg_tape_t t, double eps, sg_var *x, sg_var *gamma,
                          sg_var *beta, sg_var **y) {
  sg_norm_desc d = {.kind = SG_NORM_LAYER, .eps = eps > 0 ? eps : 1e-5};
  return sg_ag_norm(t, &d, x, gamma, beta, y);
}

sg_status sg_ag_mhsa_tp(sg_tape_t t, sg_group_t tp, int64_t heads_local,
                        sg_var *x, sg_var *wqkv, sg_var *bqkv, sg_var *wo,
                        sg_var *bo, sg_var **y) {
  return sg_ag_mhsa_sp(t, tp, SG_SP_RING, heads_local, x, wqkv, bqkv, wo, bo,
                       y);
}

sg_status sg_ag_mhsa_sp(sg_tape_t t, sg_group_t tp, sg_sp_mode mode,
                        int64_t heads_local, sg_var *x, sg_var *wqkv,
                        sg_var *bqkv, sg_var *wo, sg_var *bo, sg_var **y) {
  return sg_ag_mhsa_seq(t, tp, NULL, mode, heads_local, x, wqkv, bqkv, wo, bo,
                        y);
}

sg_status sg_ag_mhsa_seq(sg_tape_t t, sg_group_t tp, const sg_var *like,
                         sg_sp_mode mode, int64_t heads_local, sg_var *x,
                         sg_var *wqkv, sg_var *bqkv, sg_var *wo, sg_var *bo,
                         sg_var **y) {
  sg_status st = SG_OK;
  if (!x || !wqkv || !wo || !y)
    SG_RAISE(SG_ERR_INVALID_ARG, "mhsa: x, wqkv, wo and y are required");
  const int64_t c = x->value.ndim >= 2 ? sg_var_global_shape(x)[1] : 0,
                cl = wqkv->value.ndim == 2 ? wqkv->value.shape[0] / 3 : 0;
  if (wqkv->value.ndim != 2 || wqkv->value.shape[0] != 3 * cl ||
      wqkv->value.shape[1] != c || (!(tp && sg_group_size(tp) > 1) && cl != c))
    SG_RAISE(SG_ERR_SHAPE,
             "mhsa: wqkv must be (3 C_local, C) with C = %lld (C_local = C "
             "without tensor parallelism)",
             (long long)c);
  sg_var *h = NULL, *qkv[3] = {NULL, NULL, NULL};
  const int64_t parts[3] = {cl, cl, cl};
  SG_TRY(sg_ag_linear_col_seq(t, tp, like, x, wqkv, bqkv, &h));
  SG_TRY(sg_ag_split(t, h, 3, parts, qkv));
  SG_TRY(sg_ag_attention_sp(t, mode, heads_local, qkv[0], qkv[1], qkv[2], &h));
  SG_TRY(sg_ag_linear_row_seq(t, tp, like != NULL, h, wo, bo, y));
fail:
  return st;
}

sg_status sg_ag_mhsa(sg_tape_t t, int64_t heads, sg_var *x, sg_var *wqkv,
                     sg_var *bqkv, sg_var *wo, sg_var *bo, sg_var **y) {
  return sg_ag_mhsa_tp(t, NULL, heads, x, wqkv, bqkv, wo, bo, y);
}

void sg_ag_attention_ring_bytes(long long *bytes, int reset) {
  for (int i = 0; i < 3; ++i) {
    if (bytes) bytes[i] = ring_rx[i];
    if (reset) ring_rx[i] = 0;
  }
}

const sg_op_def *sg_ag_attention_op_def(void) { return &attention_op; }
const sg_op_def *sg_ag_add_field_op_def(void) { return &add_field_op; }
