/* shardgrid — the ring-attention pieces of models/ag_attention.c that the
 * other sequence-parallel attention ops reuse (models/ag_ulysses.c: USP,
 * Ulysses over one domain dim and the ring over the other). Private. */
#ifndef SG_ATTENTION_IMPL_H
#define SG_ATTENTION_IMPL_H

#include "sg_autograd.h"
#include "sg_comm.h"

/* The local geometry of an attention and its ring: B samples, H heads of
 * d, T local query (and key) tokens in the kernel's (B, H, T, d) layout;
 * the ring over comm (P ranks, this one r), each ring rank's tokens. */
typedef struct attn_geo {
  sg_dtype dt;
  size_t es;
  int64_t B, H, T, d, n; /* n = B*H*T*d: one of q, k, v, o */
  MPI_Comm comm;         /* the ring; MPI_COMM_NULL: one block */
  int P, r;
  int64_t *tok; /* tokens of each ring rank (P entries) */
  int64_t tmax;
} attn_geo;

/* The geometry; grp NULL or of size 1: no ring. Collective over grp (an
 * all-gather of the token counts). Release with ag_ring_geo_release. */
sg_status ag_ring_geo(sg_dtype dt, int64_t B, int64_t H, int64_t T, int64_t d,
                      sg_group_t grp, attn_geo *g);
void ag_ring_geo_release(attn_geo *g);

/* o, lse of the local queries qt over every K/V block of the ring; kvt is
 * the local [K | V] (2 n elements, adjacent). Collective over the ring. */
sg_status ag_ring_forward(const attn_geo *g, const void *qt, void *kvt,
                          void *ot, void *lse);

/* What the ring's backward reads: the forward's q, [K | V], o, lse and the
 * output gradient, all in the kernel's layout. */
typedef struct ring_saved {
  const void *q, *kv, *o, *lse, *dout;
} ring_saved;

/* dx[0..2] = dq, dk, dv of the local tokens (n elements each, the kernel's
 * layout; NULL: not wanted). Collective over the ring. */
sg_status ag_ring_backward(const attn_geo *g, const ring_saved *sv,
                           void *const *dx);

/* The ring attention op with its ring over grp (NULL: none), not over the
 * dims that split q's space: for token pieces (N, C, T_r) of the sp dim
 * (sg_ag_attention_seq). */
sg_status ag_attention_ring_in(sg_tape_t t, int64_t heads, sg_group_t grp,
                               sg_var *q, sg_var *k, sg_var *v, sg_var **o);

/* The attention of node's q, k, v (B, H*d, T) on one CUDA device in one
 * process (g a ring of one rank; else SG_ERR_NOT_SUPPORTED): the layout
 * copies and sg_attention_fwd_cuda / _bwd_cuda of sg_ops_cuda.h; saved q,
 * k, v, o, lse in the kernel's layout (4 n + B*H*T elements) on the device;
 * the backward writes gin. The attention op's CUDA entries, and Ulysses'
 * and USP's with one rank (ag_ulysses.c). CUDA builds only. */
sg_status ag_attention_fwd_device(sg_node *node, const attn_geo *g);
sg_status ag_attention_bwd_device(sg_node *node, const attn_geo *g);

#endif /* SG_ATTENTION_IMPL_H */
