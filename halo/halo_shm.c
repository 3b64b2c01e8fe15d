/* shardgrid — halo exchange plans: the on-node path (shared windows,
 * pieces, single copy; the layout is described in halo_impl.h). */
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "halo_impl.h"
#include "sg_device.h"
#include "sg_halo_pack.h"
#include "sg_log.h"

static _Atomic uint64_t *shm_flag(char *seg, int kind, int d, int s) {
  return (_Atomic uint64_t *)(void *)(seg + kind + 64 * (2 * d + s));
}

/* MODE word of channel (d, s) for message k (by its buffer parity). */
static _Atomic uint64_t *shm_mode(char *seg, int d, int s, uint64_t k) {
  return (_Atomic uint64_t *)(void *)(seg + SHM_MODE +
                                      8 * (2 * (2 * d + s) + (k & 1)));
}

/* The boxes of channel (d, s) in a segment's SHM_BOX table. */
static sg_halo_box *shm_boxes(char *seg, int d, int s) {
  return (sg_halo_box *)(void *)(seg + SHM_BOX +
                                 2 * sizeof(sg_halo_box) * (2 * d + s));
}

/* Lend a window of the pool with at least need bytes on this rank: the
 * first one that mask (the AND over the ranks of the free windows large
 * enough) names, else a new one (collective; unified memory model on every
 * rank, else none). *w = -1 when there is none; the outcome is the same on
 * every rank. Collective over the mesh. */
static sg_status pool_take(struct sg_halo_plan *p, size_t need, uint64_t mask,
                           int *w) {
  sg_status st = SG_OK;
  halo_comm_cache *c = p->cache;
  *w = -1;
  for (int i = 0; i < c->nwin && *w < 0; ++i)
    if (mask >> i & 1) *w = i;
  if (*w >= 0) {
    c->pool[*w].in_use = 1;
    return SG_OK;
  }
  if (c->nwin == HALO_POOL) return SG_OK;
  halo_win *hw = &c->pool[c->nwin];
  MPI_Info info = MPI_INFO_NULL;
  SG_MPI(MPI_Info_create(&info));
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  int rc = MPI_Win_allocate_shared((MPI_Aint)need, 1, info, c->node, &hw->seg,
                                   &hw->win);
  MPI_Info_free(&info);
  SG_MPI(rc);
  hw->bytes = need;
  int *model = NULL, flag = 0;
  SG_MPI(MPI_Win_get_attr(hw->win, MPI_WIN_MODEL, &model, &flag));
  SG_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, hw->win));
  hw->in_use = 1;
  int i = c->nwin++;
  int uni = flag && *model == MPI_WIN_UNIFIED, all = 0;
  SG_MPI(MPI_Allreduce(&uni, &all, 1, MPI_INT, MPI_MIN, p->comm));
  if (all) *w = i; /* else never lent */
fail:
  return st;
}

/* The free windows of the pool with at least need bytes on this rank. */
static uint64_t pool_free(const halo_comm_cache *c, size_t need) {
  uint64_t m = 0;
  for (int i = 0; i < c->nwin; ++i)
    if (!c->pool[i].in_use && c->pool[i].bytes >= need) m |= 1ull << i;
  return m;
}

/* The on-node path: decided the same way on every rank (SG_HALO_PATH auto
 * or shm everywhere, every neighbour on this node, a window of the pool
 * free on every rank or room for a new one); then this rank's slots are
 * laid out in the window, the flags reset, and after a synchronising
 * reduction each rank reads its neighbours' slot tables. Collective over
 * the mesh. */
sg_status sg_halo_setup_shm(struct sg_halo_plan *p) {
  sg_status st = SG_OK;
  halo_comm_cache *c = p->cache;
  size_t need = SHM_HDR;
  int can = p->path == HALO_PATH_AUTO || p->path == HALO_PATH_SHM, msgs = 0;
  for (int d = 0; d < p->ndims; ++d) {
    hdim *q = &p->dim[d];
    for (int s = 0; s < 2; ++s) {
      if (q->local[s]) continue;
      if (c->node_rank[q->nb[s]] == MPI_UNDEFINED) can = 0;
      size_t sb = q->s[s] > 0 ? (size_t)sg_halo_box_size(&q->sbox[s]) * p->esize
                              : 0;
      size_t rb = q->h[s] > 0 ? (size_t)sg_halo_box_size(&q->rbox[s]) * p->esize
                              : 0;
      size_t b = sb > rb ? sb : rb;
      msgs += b > 0;
      q->ssize[s] = (b + 63) / 64 * 64;
      q->soff[s] = need;
      need += 2 * q->ssize[s];
    }
  }
  need = (need + 4095) / 4096 * 4096;
  size_t stage = 0; /* the largest message */
  for (int d = 0; d < p->ndims; ++d)
    for (int s = 0; s < 2; ++s)
      if (!p->dim[d].local[s] && p->dim[d].ssize[s] > stage)
        stage = p->dim[d].ssize[s];
  /* [0]: every rank can (and some rank has a message); [1]: the pool
   * windows free and large enough on every rank */
  uint64_t v[3] = {(uint64_t)can, pool_free(c, need), (uint64_t)(msgs > 0)},
           r[3];
  SG_MPI(MPI_Allreduce(v, r, 2, MPI_UINT64_T, MPI_BAND, p->comm));
  SG_MPI(MPI_Allreduce(&v[2], &r[2], 1, MPI_UINT64_T, MPI_BOR, p->comm));
  if (!r[0] || !r[2]) return SG_OK;
  int w = -1;
  SG_TRY(pool_take(p, need, r[1], &w));
  if (w < 0) return SG_OK; /* stays on MPI */
  halo_win *hw = &c->pool[w];
  {
    /* bytes per piece: SG_HALO_SHM_CHUNK, the smallest over the ranks */
    const char *e = getenv("SG_HALO_SHM_CHUNK");
    long long v0 = e && *e ? atoll(e) : HALO_SHM_CHUNK, vmin = 0;
    if (v0 < 64) v0 = 64;
    SG_MPI(MPI_Allreduce(&v0, &vmin, 1, MPI_LONG_LONG, MPI_MIN, p->comm));
    p->chunk = (size_t)vmin;
  }
  /* staging for a piece: at most a message, at most a chunk */
  if (stage > p->chunk) stage = p->chunk < p->esize ? p->esize : p->chunk;
  if (stage > 0) {
    SG_TRY(sg_malloc(sg_device_host(), stage, &p->stage));
    p->stage_bytes = stage;
  }
  p->shm = 1;
  sg_log_debug("halo plan %d: on-node shared-memory path (window %d of %d, "
               "%zu bytes on rank 0)",
               p->id, w, c->nwin, hw->bytes);
  p->win = w;
  p->seg = hw->seg;
  memset(p->seg, 0, SHM_HDR);
  size_t dmin = HALO_SHM_DIRECT_MIN;
  {
    const char *e = getenv("SG_HALO_SHM_DIRECT_MIN");
    if (e && *e) dmin = (size_t)atoll(e);
  }
  int64_t *tab = (int64_t *)(void *)(p->seg + SHM_TABLE);
  for (int d = 0; d < p->ndims; ++d)
    for (int s = 0; s < 2; ++s) {
      tab[2 * (2 * d + s)] = (int64_t)p->dim[d].soff[s];
      tab[2 * (2 * d + s) + 1] = (int64_t)p->dim[d].ssize[s];
      shm_boxes(p->seg, d, s)[0] = p->dim[d].sbox[s];
      shm_boxes(p->seg, d, s)[1] = p->dim[d].rbox[s];
      for (int a = 0; a < 2; ++a) {
        sg_halo_box b = sg_halo_box_simplify(
            a ? p->dim[d].rbox[s] : p->dim[d].sbox[s], 1);
        size_t run = b.stride[3] == 1 || b.count[3] == 1
                         ? (size_t)b.count[3] * p->esize
                         : p->esize;
        p->dim[d].dok[s][a] = run >= dmin;
      }
    }
  SG_MPI(MPI_Win_sync(hw->win));
  int one = 1, sum = 0;
  SG_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, p->comm));
  SG_MPI(MPI_Win_sync(hw->win));
  for (int d = 0; d < p->ndims; ++d) {
    hdim *q = &p->dim[d];
    for (int s = 0; s < 2; ++s) {
      q->nsent[s] = q->nrecv[s] = q->pub[s] = q->got[s] = 0;
      if (q->local[s]) continue;
      MPI_Aint sz = 0;
      int du = 0;
      void *base = NULL;
      SG_MPI(MPI_Win_shared_query(hw->win, c->node_rank[q->nb[s]], &sz, &du,
                                  &base));
      q->pseg[s] = base;
      const int64_t *pt = (const int64_t *)(void *)(q->pseg[s] + SHM_TABLE);
      q->poff[s] = (size_t)pt[2 * (2 * d + 1 - s)];
      q->psize[s] = (size_t)pt[2 * (2 * d + 1 - s) + 1];
      q->psbox[s] = shm_boxes(q->pseg[s], d, 1 - s)[0];
      q->prbox[s] = shm_boxes(q->pseg[s], d, 1 - s)[1];
    }
  }
fail:
  return st;
}

sg_status sg_halo_plan_alloc_block(sg_halo_plan_t p, void **block) {
  sg_status st = SG_OK, local = SG_OK;
  void *priv = NULL;
  if (block) *block = NULL;
  if (!p || !block)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_halo_plan_alloc_block: NULL argument");
  const size_t bytes = (size_t)p->count * p->esize;
  if (p->nblk == SG_HALO_MAX_BLOCKS)
    local = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                         "sg_halo_plan_alloc_block: a plan has at most %d "
                         "blocks",
                         SG_HALO_MAX_BLOCKS);
  else if (p->phase != PHASE_IDLE)
    local = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                         "sg_halo_plan_alloc_block: an exchange is in "
                         "flight");
  else if (!p->shm)
    local = sg_calloc(sg_device_host(), bytes > 0 ? bytes : 1, &priv);
  st = sg_agree(p->comm, local);
  if (st != SG_OK) {
    sg_free(sg_device_host(), &priv);
    return st;
  }
  if (!p->shm) {
    p->bwin[p->nblk] = -1;
    p->blk[p->nblk++] = priv;
    *block = priv;
    return SG_OK;
  }
  {
    size_t need = (bytes + 4095) / 4096 * 4096;
    if (need == 0) need = 4096;
    uint64_t v = pool_free(p->cache, need), r = 0;
    SG_MPI(MPI_Allreduce(&v, &r, 1, MPI_UINT64_T, MPI_BAND, p->comm));
    int w = -1; /* the same on every rank (pool_take agrees) */
    SG_TRY(pool_take(p, need, r, &w));
    if (w < 0)
      SG_RAISE(SG_ERR_ALLOC,
               "sg_halo_plan_alloc_block: the pool of %d "
               "shared windows is exhausted",
               HALO_POOL);
    halo_win *hw = &p->cache->pool[w];
    const int j = p->nblk;
    memset(hw->seg, 0, bytes);
    SG_MPI(MPI_Win_sync(hw->win));
    for (int d = 0; d < p->ndims; ++d)
      for (int s = 0; s < 2; ++s) {
        hdim *q = &p->dim[d];
        q->pblk[j][s] = NULL;
        if (q->local[s]) continue;
        MPI_Aint sz = 0;
        int du = 0;
        void *base = NULL;
        SG_MPI(MPI_Win_shared_query(hw->win, p->cache->node_rank[q->nb[s]], &sz,
                                    &du, &base));
        q->pblk[j][s] = base;
      }
    /* the neighbours' blocks are zeroed before anyone exchanges */
    int one = 1, sum = 0;
    SG_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, p->comm));
    SG_MPI(MPI_Win_sync(hw->win));
    p->bwin[j] = w;
    p->blk[j] = hw->seg;
    p->nblk = j + 1;
    *block = hw->seg;
  }
fail:
  return st;
}

/* ---- the on-node path ----------------------------------------------------- */

/* A message is moved in pieces of about p->chunk bytes so that the
 * receiver reads each piece while it is still in the writer's cache (and
 * a rank packs its own pieces and unpacks its neighbours' in turn). The
 * pieces are cut from the box's counts alone (not its strides), so the
 * sender's slab and the receiver's halo, which have the same counts, are
 * cut alike: along box dim k, m slices at a time, where k is the outermost
 * dim whose slices are at most chunk bytes. */
static piece_plan pieces_of(const sg_halo_box *b, size_t esize, size_t chunk) {
  piece_plan pp;
  int64_t inner = 1, outer = 1;
  int k = SG_HALO_BOX_DIMS - 1;
  while (k > 0 && (size_t)(inner * b->count[k]) * esize <= chunk) {
    inner *= b->count[k];
    --k;
  }
  for (int j = 0; j < k; ++j) outer *= b->count[j];
  pp.k = k;
  pp.inner = inner;
  pp.m = (int64_t)(chunk / ((size_t)inner * esize));
  if (pp.m < 1) pp.m = 1;
  pp.nk = (b->count[k] + pp.m - 1) / pp.m;
  pp.n = outer * pp.nk;
  return pp;
}

/* Piece i of box b as a box, and its first element in the packed order. */
static sg_halo_box piece_box(const sg_halo_box *b, const piece_plan *pp,
                             int64_t i, int64_t *first) {
  sg_halo_box o = *b;
  int64_t pre = i / pp->nk, a = (i % pp->nk) * pp->m;
  int64_t len = b->count[pp->k] - a < pp->m ? b->count[pp->k] - a : pp->m;
  *first = pre * b->count[pp->k] * pp->inner + a * pp->inner;
  for (int j = pp->k - 1; j >= 0; --j) {
    o.base += (pre % b->count[j]) * b->stride[j];
    pre /= b->count[j];
    o.count[j] = 1;
  }
  o.base += a * b->stride[pp->k];
  o.count[pp->k] = len;
  return o;
}

/* One poll of a spin: a pause; every 64 polls a call into MPI (other
 * plans' messages keep progressing); after about 10^5 polls (a neighbour
 * that is not running) a yield every 1024 polls. Yielding early costs
 * whole time slices when niced jobs share the cores, except when the
 * node's ranks outnumber its cores (early_yield): then the neighbour may
 * be waiting for this very core, and every poll after the first 64
 * yields. */
static void shm_pause(const struct sg_halo_plan *p, unsigned *spins) {
  ++*spins;
  const int yield = p->cache->early_yield
                        ? *spins > 64
                        : *spins > 100000 && *spins % 1024 == 0;
  if (*spins % 64 == 0) {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, p->comm, &flag, MPI_STATUS_IGNORE);
  }
  if (yield) {
    sched_yield();
  } else if (*spins % 64 != 0) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

/* The box a side sends (forward: the owned slab; adjoint: the halo) and
 * the box it receives into. */
static const sg_halo_box *send_box(const struct sg_halo_plan *p, const hdim *q,
                                   int s) {
  return p->phase == PHASE_ADJ ? &q->rbox[s] : &q->sbox[s];
}
static const sg_halo_box *recv_box(const struct sg_halo_plan *p, const hdim *q,
                                   int s) {
  return p->phase == PHASE_ADJ ? &q->sbox[s] : &q->rbox[s];
}

/* Begin the next message on channel (d, s): wait until its buffer is free
 * (the receiver acknowledged message k - 2). */
static sg_status shm_send_begin(struct sg_halo_plan *p, int d, int s) {
  hdim *q = &p->dim[d];
  uint64_t k = ++q->nsent[s];
  _Atomic uint64_t *ack = shm_flag(q->pseg[s], SHM_ACK, d, 1 - s);
  unsigned spins = 0;
  sg_deadline dl;
  sg_deadline_start(&dl);
  while (atomic_load_explicit(ack, memory_order_acquire) + 2 < k) {
    shm_pause(p, &spins);
    if (sg_deadline_passed(&dl))
      return sg_halo_timeout(
          p, &dl, d, s,
          "shared memory: the neighbour never took an earlier message");
  }
  q->spp[s] = pieces_of(send_box(p, q, s), p->esize, p->chunk);
  q->sdir[s] = p->cur >= 0 && q->dok[s][p->phase == PHASE_ADJ];
  if (q->sdir[s]) q->spp[s].n = 1; /* left in place: one publication */
  q->spos[s] = 0;
  return SG_OK;
}

/* Pack the next piece into the buffer and publish it (the adjoint zeroes
 * the halo piece it sent). */
static sg_status shm_send_piece(struct sg_halo_plan *p, int d, int s) {
  sg_status st = SG_OK;
  hdim *q = &p->dim[d];
  const sg_halo_box *b = send_box(p, q, s);
  if (q->spos[s] == 0)
    atomic_store_explicit(shm_mode(p->seg, d, s, q->nsent[s]),
                          (uint64_t)(q->sdir[s] ? p->cur + 1 : 0),
                          memory_order_relaxed);
  if (q->sdir[s]) {
    q->spos[s]++;
    q->dsend[s] = 1; /* the slab stays put until the ack */
  } else {
    int64_t first = 0;
    sg_halo_box pb = piece_box(b, &q->spp[s], q->spos[s]++, &first);
    char *dst = p->seg + q->soff[s] + (q->nsent[s] & 1) * q->ssize[s] +
                (size_t)first * p->esize;
    const sg_halo_box sq = sg_halo_box_simplify(pb, 1);
    const size_t bytes = (size_t)sg_halo_box_size(&pb) * p->esize;
    if (sq.count[0] * sq.count[1] * sq.count[2] > 1 &&
        bytes <= p->stage_bytes) {
      /* gathered from several runs: into private memory first, then one
       * memcpy into the window. Stores of a few bytes into lines the
       * receiver still holds (it read the buffer two messages ago) each
       * wait for the line to be taken back (9 us per 64 KiB of 16-byte
       * rows here, against 1-2 us for the gather plus the memcpy). */
      sg_halo_pack_host(p->block, &pb, p->esize, p->stage);
      memcpy(dst, p->stage, bytes);
    } else {
      sg_halo_pack_host(p->block, &pb, p->esize, dst);
    }
    if (p->phase == PHASE_ADJ) sg_halo_zero_host(p->block, &pb, p->esize);
  }
  SG_MPI(MPI_Win_sync(p->cache->pool[p->win].win));
  atomic_store_explicit(shm_flag(p->seg, SHM_READY, d, s), ++q->pub[s],
                        memory_order_release);
fail:
  return st;
}

/* Consume the pieces of the current message from side s of dim d that have
 * arrived: unpack them into the halo (forward) or add them into the edge
 * cells (adjoint) straight from the neighbour's segment; acknowledge the
 * message when its last piece is in. */
static sg_status shm_recv(struct sg_halo_plan *p, int d, int s, int64_t most) {
  sg_status st = SG_OK;
  hdim *q = &p->dim[d];
  MPI_Win win = p->cache->pool[p->win].win;
  uint64_t ready = atomic_load_explicit(
      shm_flag(q->pseg[s], SHM_READY, d, 1 - s), memory_order_acquire);
  int64_t avail = (int64_t)(ready - q->got[s]);
  if (avail <= 0 && q->rpos[s] < q->rpp[s].n) return SG_OK;
  if (avail > q->rpp[s].n - q->rpos[s]) avail = q->rpp[s].n - q->rpos[s];
  if (most >= 0 && avail > most) avail = most;
  SG_MPI(MPI_Win_sync(win));
  const sg_halo_box *b = recv_box(p, q, s);
  const uint64_t mode = q->rpos[s] == 0 && avail > 0
                            ? atomic_load_explicit(shm_mode(q->pseg[s], d,
                                                            1 - s,
                                                            q->nrecv[s] + 1),
                                                   memory_order_relaxed)
                            : 0;
  if (mode > 0) {
    /* left in place in the neighbour's shared block mode - 1 */
    if (mode > (uint64_t)p->nblk)
      SG_RAISE(SG_ERR_MPI, "halo: neighbour %d names shared block %llu of %d",
               q->nb[s], (unsigned long long)mode, p->nblk);
    const char *pb = q->pblk[mode - 1][s];
    if (p->phase == PHASE_ADJ)
      SG_TRY(sg_halo_add2_host(p->block, b, p->dtype, pb, &q->prbox[s]));
    else
      sg_halo_copy2_host(p->block, b, pb, &q->psbox[s], p->esize);
    q->rpos[s] = q->rpp[s].n;
    avail = 1;
  } else {
    const char *src = q->pseg[s] + q->poff[s] +
                      ((q->nrecv[s] + 1) & 1) * q->psize[s];
    for (int64_t i = 0; i < avail; ++i) {
      int64_t first = 0;
      sg_halo_box pb = piece_box(b, &q->rpp[s], q->rpos[s]++, &first);
      const char *from = src + (size_t)first * p->esize;
      if (p->phase == PHASE_ADJ)
        SG_TRY(sg_halo_unpack_add_host(p->block, &pb, p->dtype, from));
      else
        sg_halo_unpack_host(p->block, &pb, p->esize, from);
    }
  }
  q->got[s] += (uint64_t)avail;
  if (q->rpos[s] == q->rpp[s].n) {
    q->want[s] = 0;
    ++q->nrecv[s];
    SG_MPI(MPI_Win_sync(win));
    atomic_store_explicit(shm_flag(p->seg, SHM_ACK, d, s), q->nrecv[s],
                          memory_order_release);
  }
fail:
  return st;
}

/* Move the current step along: send the next piece of each side, take in
 * what has arrived (forward: both sides as they land; adjoint: the hi side
 * only after the lo side, so overlapping edge cells add in the same order
 * as on the MPI path). lazy: one round (one piece out and at most one in
 * per side; sg_halo_start and sg_halo_progress, so that the copies spread
 * over the caller's interior work); else until every piece is out and,
 * with wait, every piece is in. *done when nothing is left. */
sg_status sg_halo_shm_pump(struct sg_halo_plan *p, int d, int wait, int lazy,
                           int *done) {
  sg_status st = SG_OK;
  hdim *q = &p->dim[d];
  const int adj = p->phase == PHASE_ADJ;
  unsigned spins = 0;
  sg_deadline dl;
  sg_deadline_start(&dl);
  for (;;) {
    int moved = 0, out = 0;
    for (int s = 0; s < 2; ++s)
      if (q->sending[s] && q->spos[s] < q->spp[s].n) {
        SG_TRY(shm_send_piece(p, d, s));
        moved = 1;
        out += q->spos[s] < q->spp[s].n;
      }
    for (int s = 0; s < 2; ++s) {
      if (!q->want[s]) continue;
      if (adj && s == 1 && q->want[0]) break;
      int64_t before = q->rpos[s];
      SG_TRY(shm_recv(p, d, s, lazy ? 1 : -1));
      moved |= q->rpos[s] != before || !q->want[s];
    }
    /* slabs left in place: free once the neighbour has them (the adjoint
     * zeroes its halo slab then) */
    for (int s = 0; s < 2; ++s)
      if (q->dsend[s] && q->spos[s] == q->spp[s].n &&
          atomic_load_explicit(shm_flag(q->pseg[s], SHM_ACK, d, 1 - s),
                               memory_order_acquire) >= q->nsent[s]) {
        if (adj) sg_halo_zero_host(p->block, send_box(p, q, s), p->esize);
        q->dsend[s] = 0;
        moved = 1;
      }
    int left = q->want[0] || q->want[1] || q->dsend[0] || q->dsend[1];
    if (lazy || (!out && (!left || !wait))) {
      *done = !out && !left;
      break;
    }
    if (!moved) {
      shm_pause(p, &spins);
      if (sg_deadline_passed(&dl)) {
        int side = q->want[0] || q->dsend[0] ? 0 : 1;
        SG_TRY(sg_halo_timeout(p, &dl, d, side,
                               "shared memory: no message from the neighbour"));
      }
    }
  }
fail:
  return st;
}

/* Start a step on the shm path: the local fills (first, so that the
 * adjoint adds in the MPI path's order), then one round of pieces. */
sg_status sg_halo_shm_begin(struct sg_halo_plan *p, int d) {
  sg_status st = SG_OK;
  hdim *q = &p->dim[d];
  const int adj = p->phase == PHASE_ADJ;
  int ok = 0;
  for (int s = 0; s < 2; ++s)
    if (q->local[s]) SG_TRY(sg_halo_fill_local(p, d, s, adj));
  for (int s = 0; s < 2; ++s) {
    q->sending[s] = !q->local[s] && (adj ? q->h[s] : q->s[s]) > 0;
    q->want[s] = !q->local[s] && (adj ? q->s[s] : q->h[s]) > 0;
    if (q->want[s]) {
      q->rpp[s] = pieces_of(recv_box(p, q, s), p->esize, p->chunk);
      q->rpos[s] = 0;
    }
  }
  for (int s = 0; s < 2; ++s)
    if (q->sending[s]) SG_TRY(shm_send_begin(p, d, s));
  SG_TRY(sg_halo_shm_pump(p, d, 0, 1, &ok));
fail:
  return st;
}
