/* shardgrid — autograd tape: the window exchange of a sharded windowed
 * node on device buffers (issue 22). The host path is
 * sg_sharded_exchange_forward/_adjoint (shardtensor/ops/exchange.c) over
 * the halo plan's MPI or shared-memory messages; on a device the same plan
 * (sg_halo_plan_side: its steps, slabs and neighbours) is run here:
 *  - the interior is copied into a zeroed block (the unpack kernel), the
 *    plan's dims are filled one after another as the host fills them
 *    (corners without diagonal messages): per dim the owned slabs are
 *    packed on the device (sg_halo_pack_cuda, the index arithmetic of
 *    sg_halo_pack.h shared with the host), sent to the neighbours in one
 *    all-to-all-v over the group of the dim's mesh dim (the comm layer:
 *    NCCL on device buffers,
 *    MPI on host memory, a faked device included), unpacked into the
 *    halos; edge fills (zero, reflect, replicate, local wrap) are one-cell
 *    copies through the same kernels; the kernel's box is packed out of
 *    the block;
 *  - the adjoint: dbox into a zeroed block, the dims in reverse order, the
 *    local fills' adjoint (a halo cell added into the cell it was copied
 *    from, then zeroed) before the neighbours' slabs are added (the host's
 *    order, so the sums are the same bits), the interior packed out.
 * The crop of an up-sampled output and its adjoint are pack/unpack too. */
#include "autograd_impl.h"

#include <stdlib.h>
#include <string.h>

#include "sg_comm.h"
#include "sg_config.h"
#include "sg_device.h"
#include "sg_exchange.h"
#include "sg_halo.h"
#include "sg_halo_pack.h"

/* Host memory: the host or the faked device (ag_fake_cuda). */
static int hm(sg_device dev) {
  return dev.kind == SG_DEVICE_HOST || ag_fake_cuda;
}

#if SG_HAVE_CUDA
#define AG_CUDA_OR(call) return (call)
#else
#define AG_CUDA_OR(call)                                             \
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,      \
                      "the halo exchange on %s: built without CUDA", \
                      sg_device_kind_name(dev.kind))
#endif

static sg_status ag_dev_box_pack(sg_device dev, const void *block,
                                 const sg_halo_box *box, size_t es, void *buf) {
  if (sg_halo_box_size(box) <= 0) return SG_OK;
  if (hm(dev)) {
    sg_halo_pack_host(block, box, es, buf);
    return SG_OK;
  }
  AG_CUDA_OR(sg_halo_pack_cuda(block, box, es, buf, NULL));
}

static sg_status ag_dev_box_unpack(sg_device dev, void *block,
                                   const sg_halo_box *box, size_t es,
                                   const void *buf) {
  if (sg_halo_box_size(box) <= 0) return SG_OK;
  if (hm(dev)) {
    sg_halo_unpack_host(block, box, es, buf);
    return SG_OK;
  }
  AG_CUDA_OR(sg_halo_unpack_cuda(block, box, es, buf, NULL));
}

static sg_status box_add(sg_device dev, void *block, const sg_halo_box *box,
                         sg_dtype dt, const void *buf) {
  if (sg_halo_box_size(box) <= 0) return SG_OK;
  if (hm(dev)) return sg_halo_unpack_add_host(block, box, dt, buf);
  AG_CUDA_OR(sg_halo_unpack_add_cuda(block, box, dt, buf, NULL));
}

static sg_status box_zero(sg_device dev, void *block, const sg_halo_box *box,
                          size_t es) {
  if (sg_halo_box_size(box) <= 0) return SG_OK;
  if (hm(dev)) {
    sg_halo_zero_host(block, box, es);
    return SG_OK;
  }
  AG_CUDA_OR(sg_halo_zero_cuda(block, box, es, NULL));
}

/* A box of a (lead, spatial...) region: lead elements of stride ls, then
 * count[d] cells of stride sp[d] per spatial dim, from base. */
static sg_halo_box ag_box(int nsp, int64_t lead, int64_t ls,
                          const int64_t *count, const int64_t *sp,
                          int64_t base) {
  sg_halo_box b;
  b.base = base;
  b.count[0] = lead;
  b.stride[0] = ls;
  for (int k = 1; k < SG_HALO_BOX_DIMS; ++k) {
    b.count[k] = k - 1 < nsp ? count[k - 1] : 1;
    b.stride[k] = k - 1 < nsp ? sp[k - 1] : 0;
  }
  return b;
}

/* The local fills of side s of dim d (sg_halo_fill_local's rule): zero, or
 * per halo cell a copy of its source cell (adjoint: added into it, then
 * zeroed), through a one-cell scratch slab. */
static sg_status fill_local(sg_device dev, sg_halo_plan_t plan, int d, int s,
                            const sg_halo_side *q, sg_dtype dt, char *block,
                            int adjoint, char *tmp) {
  sg_status st = SG_OK;
  const size_t es = sg_dtype_size(dt);
  if (q->h == 0) goto fail;
  if (q->boundary == SG_BOUNDARY_ZERO) {
    sg_halo_box b = sg_halo_plan_box(plan, d, s ? q->n : -q->h, q->h);
    SG_TRY(box_zero(dev, block, &b, es));
    goto fail;
  }
  for (int64_t j = 0; j < q->h; ++j) {
    int64_t i = s ? q->n + j : -1 - j;
    int64_t src = sg_halo_edge_source(q->boundary, q->n, i);
    sg_halo_box hb = sg_halo_plan_box(plan, d, i, 1);
    sg_halo_box sb = sg_halo_plan_box(plan, d, src, 1);
    if (adjoint) {
      SG_TRY(ag_dev_box_pack(dev, block, &hb, es, tmp));
      SG_TRY(box_zero(dev, block, &hb, es));
      SG_TRY(box_add(dev, block, &sb, dt, tmp));
    } else {
      SG_TRY(ag_dev_box_pack(dev, block, &sb, es, tmp));
      SG_TRY(ag_dev_box_unpack(dev, block, &hb, es, tmp));
    }
  }
fail:
  return st;
}

/* The group of the mesh dim that splits a plan's dim (the one coordinate
 * in which a neighbour differs) and the neighbours' ranks in it. */
static sg_status dim_group(sg_mesh_t mesh, const sg_halo_side *q, sg_group_t *g,
                           int *pr) {
  sg_status st = SG_OK;
  int me[SG_MESH_MAX_DIMS], nb[SG_MESH_MAX_DIMS], m = -1;
  sg_mesh_coords(mesh, me);
  for (int s = 0; s < 2; ++s) {
    pr[s] = -1;
    if (q[s].local) continue;
    SG_TRY(sg_mesh_coords_of(mesh, q[s].peer, nb));
    for (int k = 0; k < sg_mesh_ndims(mesh) && m < 0; ++k)
      if (nb[k] != me[k]) m = k;
    if (m < 0) SG_RAISE(SG_ERR_INTERNAL, "halo exchange: a neighbour is me");
    pr[s] = nb[m];
  }
  SG_TRY(sg_mesh_group(mesh, 1u << m, g));
fail:
  return st;
}

/* The plan's exchange (forward) or adjoint on a device block. Per dim: the
 * local fills, and for a split dim one all-to-all-v over the group of its
 * mesh dim (collective over that group: every rank of a split dim has a
 * neighbour; the ranks of a batch shard, empty ones included, go through
 * the same steps as the host's plan). */
static sg_status dev_halo(sg_mesh_t mesh, sg_halo_plan_t plan, sg_device dev,
                          sg_dtype dt, char *block, int adjoint) {
  sg_status st = SG_OK;
  const size_t es = sg_dtype_size(dt);
  const int nd = sg_halo_plan_ndims(plan);
  int64_t *cnt = NULL;
  char *sbuf = NULL, *rbuf = NULL, *tmp = NULL;
  for (int k = 0; k < nd; ++k) {
    const int d = sg_halo_plan_step_dim(plan, adjoint ? nd - 1 - k : k);
    sg_halo_side q[2];
    sg_halo_plan_side(plan, d, 0, &q[0]);
    sg_halo_plan_side(plan, d, 1, &q[1]);
    sg_group_t g = NULL;
    int pr[2] = {-1, -1}, P = 1;
    if (!q[0].local || !q[1].local) {
      SG_TRY(dim_group(mesh, q, &g, pr));
      SG_TRY(ag_dev_comm_ok(g, dev, "the halo exchange"));
      P = sg_group_size(g);
    }
    /* what goes out (forward: owned slabs; adjoint: halo slabs) and what
     * comes in, per peer in rank order; within a peer side 0 then side 1
     * on the sender, so the receiver's side 1 then side 0 */
    const sg_halo_box *out[2], *in[2];
    int64_t on[2] = {0, 0}, inn[2] = {0, 0}, ooff[2] = {0, 0}, ioff[2] = {0, 0};
    for (int s = 0; s < 2; ++s) {
      out[s] = adjoint ? &q[s].rbox : &q[s].sbox;
      in[s] = adjoint ? &q[s].sbox : &q[s].rbox;
      if (q[s].local) continue;
      on[s] = (adjoint ? q[s].h : q[s].s) > 0 ? sg_halo_box_size(out[s]) : 0;
      inn[s] = (adjoint ? q[s].s : q[s].h) > 0 ? sg_halo_box_size(in[s]) : 0;
    }
    st = SG_OK;
    cnt = calloc(4 * (size_t)P, sizeof *cnt);
    if (!cnt) st = SG_ERR_ALLOC;
    int64_t *sd = cnt + P, *rc = cnt + 2 * P, *rd = cnt + 3 * P;
    int64_t so = 0, ro = 0;
    for (int s = 0; cnt && s < 2; ++s) {
      if (on[s]) cnt[pr[s]] += on[s];
      if (inn[s]) rc[pr[s]] += inn[s];
    }
    for (int r = 0; cnt && r < P; ++r) {
      sd[r] = so, so += cnt[r];
      rd[r] = ro, ro += rc[r];
    }
    for (int s = 0; cnt && s < 2; ++s) { /* sender: side 0 first */
      if (!on[s]) continue;
      ooff[s] = sd[pr[s]] + (s == 1 && on[0] && pr[0] == pr[1] ? on[0] : 0);
    }
    for (int s = 1; cnt && s >= 0; --s) { /* receiver: side 1 first */
      if (!inn[s]) continue;
      ioff[s] = rd[pr[s]] + (s == 0 && inn[1] && pr[0] == pr[1] ? inn[1] : 0);
    }
    int64_t lmax = 0; /* one-cell slabs of the local fills */
    for (int s = 0; s < 2; ++s)
      if (q[s].local && q[s].h > 0 && q[s].boundary != SG_BOUNDARY_ZERO) {
        sg_halo_box b = sg_halo_plan_box(plan, d, 0, 1);
        lmax = sg_halo_box_size(&b);
      }
    /* both buffers on every rank of the group, even empty: the comm layer
     * picks NCCL by the receive pointer, and send == recv is in place */
    if (st == SG_OK && g)
      st = ag_mem_alloc(dev, (size_t)(so > 0 ? so : 1) * es, 0, (void **)&sbuf);
    if (st == SG_OK && g)
      st = ag_mem_alloc(dev, (size_t)(ro > 0 ? ro : 1) * es, 0, (void **)&rbuf);
    if (st == SG_OK && lmax > 0)
      st = ag_mem_alloc(dev, (size_t)lmax * es, 0, (void **)&tmp);
    if (g) st = sg_group_agree(g, st);
    SG_TRY(st);
    for (int s = 0; s < 2; ++s)
      if (on[s]) {
        SG_TRY(ag_dev_box_pack(dev, block, out[s], es, sbuf + ooff[s] * es));
        if (adjoint) SG_TRY(box_zero(dev, block, out[s], es));
      }
    for (int s = 0; s < 2; ++s)
      if (q[s].local)
        SG_TRY(fill_local(dev, plan, d, s, &q[s], dt, block, adjoint, tmp));
    if (g) SG_TRY(sg_alltoallv(g, sbuf, cnt, sd, rbuf, rc, rd, dt));
    for (int s = 0; s < 2; ++s)
      if (inn[s]) {
        if (adjoint)
          SG_TRY(box_add(dev, block, in[s], dt, rbuf + ioff[s] * es));
        else
          SG_TRY(ag_dev_box_unpack(dev, block, in[s], es, rbuf + ioff[s] * es));
      }
    ag_mem_free(dev, (void **)&sbuf);
    ag_mem_free(dev, (void **)&rbuf);
    ag_mem_free(dev, (void **)&tmp);
    free(cnt);
    cnt = NULL;
  }
fail:
  ag_mem_free(dev, (void **)&sbuf);
  ag_mem_free(dev, (void **)&rbuf);
  ag_mem_free(dev, (void **)&tmp);
  free(cnt);
  return st;
}

/* The interior box (all of x's cells) and the kernel's box in the block. */
static void boxes(const sg_exchange_block *eb, const sg_exchange_info *info,
                  const int64_t *local, sg_halo_box *ib, sg_halo_box *kb) {
  const int64_t lead = local[0] * local[1];
  *ib = ag_box(info->nsp, lead, eb->ds[1], local + 2, eb->ds + 2, eb->origin);
  *kb = ag_box(info->nsp, lead, eb->ds[1], info->box, eb->ds + 2, eb->box_base);
}

/* A failed allocation agreed over the ranks that exchange with each other
 * (the node's spatial split; the ranks of another batch shard may skip the
 * adjoint, an empty shard has no gradient). */
static sg_status space_agree(const sg_node *node, sg_status st) {
  sg_group_t g = NULL;
  sg_status gs = sg_node_group(node, SG_SPLIT_SPACE, &g);
  if (gs != SG_OK) return gs;
  return g ? sg_group_agree(g, st) : st;
}

static sg_status check_contig(const sg_tensor *t, const char *what) {
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] != 1 && t->strides[d] != s)
      return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                          "%s on a device: a strided tensor", what);
    s *= t->shape[d];
  }
  return SG_OK;
}

sg_status ag_dev_exchange_forward(sg_node *node, const sg_tensor *x,
                                  sg_tensor *box) {
  sg_status st = SG_OK;
  char *block = NULL;
  const sg_device dev = node->device;
  const sg_sharded_exchange_t ex = (sg_sharded_exchange_t)node->ex;
  const size_t es = sg_dtype_size(x->dtype);
  sg_exchange_info info = ag_node_info(node);
  sg_exchange_block eb;
  sg_sharded_exchange_get_block(ex, &eb);
  memset(box, 0, sizeof *box);
  SG_TRY(check_contig(x, "the halo exchange"));
  int64_t shape[SG_TENSOR_MAX_DIMS];
  shape[0] = x->shape[0];
  shape[1] = x->shape[1];
  for (int d = 0; d < info.nsp; ++d) shape[2 + d] = info.box[d];
  sg_halo_box ib, kb;
  boxes(&eb, &info, x->shape, &ib, &kb);
  st = ag_mem_alloc(dev, (size_t)(eb.count > 0 ? eb.count : 1) * es, 1,
                    (void **)&block);
  st = space_agree(node, st);
  SG_TRY(st);
  SG_TRY(ag_dev_box_unpack(dev, block, &ib, es, x->data));
  SG_TRY(dev_halo(node->mesh, eb.plan, dev, x->dtype, block, 0));
  SG_TRY(ag_alloc_dz(box, dev, x->dtype, x->ndim, shape, 0));
  SG_TRY(ag_dev_box_pack(dev, block, &kb, es, box->data));
fail:
  ag_mem_free(dev, (void **)&block);
  return st;
}

sg_status ag_dev_exchange_adjoint(sg_node *node, void *dbox,
                                  const sg_tensor *dx) {
  sg_status st = SG_OK;
  char *block = NULL;
  const sg_device dev = node->device;
  const sg_sharded_exchange_t ex = (sg_sharded_exchange_t)node->ex;
  const size_t es = sg_dtype_size(dx->dtype);
  sg_exchange_info info = ag_node_info(node);
  sg_exchange_block eb;
  sg_sharded_exchange_get_block(ex, &eb);
  SG_TRY(check_contig(dx, "the halo adjoint"));
  sg_halo_box ib, kb;
  boxes(&eb, &info, dx->shape, &ib, &kb);
  st = ag_mem_alloc(dev, (size_t)(eb.count > 0 ? eb.count : 1) * es, 1,
                    (void **)&block);
  st = space_agree(node, st);
  SG_TRY(st);
  SG_TRY(ag_dev_box_unpack(dev, block, &kb, es, dbox));
  SG_TRY(dev_halo(node->mesh, eb.plan, dev, dx->dtype, block, 1));
  SG_TRY(ag_dev_box_pack(dev, block, &ib, es, dx->data));
fail:
  ag_mem_free(dev, (void **)&block);
  return st;
}

/* The owned part of a cropped output / the zero-padded natural extent of
 * its gradient: src (n, c, natural...) <-> dst (n, c, out_local...) at
 * info.crop. to_natural: dst_nat (zeroed) takes owned at the crop. */
sg_status ag_dev_crop(sg_device dev, const sg_exchange_info *info,
                      const sg_tensor *natural, const sg_tensor *owned,
                      int to_natural) {
  sg_status st = SG_OK;
  const size_t es = sg_dtype_size(natural->dtype);
  SG_TRY(check_contig(natural, "the crop"));
  SG_TRY(check_contig(owned, "the crop"));
  int64_t base = 0;
  for (int d = 0; d < info->nsp; ++d)
    base += info->crop[d] * natural->strides[2 + d];
  sg_halo_box b = ag_box(info->nsp, owned->shape[0] * owned->shape[1],
                         natural->strides[1], owned->shape + 2,
                         natural->strides + 2, base);
  if (to_natural)
    SG_TRY(ag_dev_box_unpack(dev, natural->data, &b, es, owned->data));
  else
    SG_TRY(ag_dev_box_pack(dev, natural->data, &b, es, owned->data));
fail:
  return st;
}
