/* shardgrid — halo exchange plans: dim-by-dim forward exchange with corners,
 * boundary fills, and the adjoint (reverse, summing). */
#include "sg_halo.h"

#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sg_comm.h"
#include "sg_device.h"
#include "sg_halo_pack.h"
#include "sg_log.h"

enum { PHASE_IDLE = 0, PHASE_FWD, PHASE_ADJ };

/* Forward message paths (SG_HALO_PATH=auto|pack|direct; SG_HALO_DTYPES=1 is
 * the older spelling of direct). auto: a slab that is one contiguous run of
 * the block goes direct (no pack, no unpack: MPI reads the block and writes
 * the margin), the rest is packed. direct: every slab goes through an MPI
 * datatype; MPICH 4.0 (built without yaksa) moves a datatype of several
 * runs 10-40x slower than pack + contiguous message + unpack, even when
 * the runs are 16 KiB long (bench/RESULTS.md, halo), so auto does not. */
enum {
  HALO_PATH_AUTO = 0,
  HALO_PATH_PACK,
  HALO_PATH_DIRECT,
  HALO_PATH_MPI, /* auto's MPI choice: direct for one run, else pack */
  HALO_PATH_SHM  /* on-node shared window (falls back to mpi off-node) */
};

/* On-node path (SG_HALO_PATH=auto or shm, when every neighbour of every
 * rank shares the node): each rank owns a segment of an MPI-3 shared
 * window (halo_win, pooled on the halo communicator) laid out as
 *   [SHM_READY]  6 cache lines: ready[d][s], the sequence number of the
 *                last message this rank put on channel (d, s), i.e. to
 *                its neighbour nb[s] along dim d;
 *   [SHM_ACK]    6 cache lines: ack[d][s], the sequence number of the last
 *                message from nb[s] along dim d that this rank consumed;
 *   [SHM_TABLE]  per channel the byte offset and size of its slot;
 *   [SHM_MODE]   per channel and buffer parity, how message k was sent:
 *                0 packed into the slot, j + 1 left in place in the
 *                plan's shared block j (single copy, below);
 *   [SHM_BOX]    per channel the boxes this rank sends forward (its owned
 *                slab) and in the adjoint (its halo slab), in its block;
 *   [SHM_HDR..]  the slots: two buffers per channel (message k uses buffer
 *                k & 1), each large enough for the forward slab and the
 *                adjoint slab of that side.
 * Each flag has one writer (the segment's owner); readers poll it with
 * acquire loads, writers publish with MPI_Win_sync + release stores (the
 * window is in the unified model, locked once with lock_all). A message is
 * one copy into the own segment (pack, or memcpy for one run) and one copy
 * out of the peer's segment (unpack, or unpack-add for the adjoint); the
 * sender waits for ack >= k - 2 before reusing a buffer. Forward and
 * adjoint messages share the channels and their sequence numbers.
 *
 * Single copy: when the block passed to start is one the plan allocated in
 * a shared window (sg_halo_plan_alloc_block; every rank has the same
 * number of them, so block j of a neighbour is mapped here as pblk[j]),
 * the sender publishes no data, only "message k is block j" in its MODE
 * word, and the receiver copies (or, in the adjoint, adds) the slab
 * straight from the neighbour's block, using the neighbour's box from its
 * SHM_BOX table. The sender then must not touch that slab until the
 * receiver acknowledges message k: its step (and so finish) waits for the
 * ack, and in the adjoint it zeroes its halo slab only then. Each side
 * chooses per message, so ranks may mix shared and private blocks. Slabs
 * whose contiguous runs are shorter than SG_HALO_SHM_DIRECT_MIN bytes
 * (default 64, a cache line) are packed all the same: reading short rows
 * across cores moves a whole line per row, and gathering them locally
 * into one contiguous message is cheaper (bench/RESULTS.md, halo). */
#define HALO_SHM_DIRECT_MIN 64
enum {
  SHM_READY = 0,
  SHM_ACK = 384,
  SHM_TABLE = 768,
  SHM_MODE = 896,
  SHM_BOX = 1024,
  SHM_HDR = 2048
};
#define HALO_POOL 64
#define HALO_SHM_CHUNK 262144 /* default bytes per piece of a message */

typedef struct piece_plan {
  int k;                  /* box dim cut into pieces */
  int64_t m, nk, n, inner; /* slices per piece, pieces per row of dim k,
                              pieces, elements per slice */
} piece_plan;

typedef struct hdim {
  int64_t n;              /* owned cells */
  int64_t h[2];           /* halo widths this rank fills (lo, hi) */
  int64_t s[2];           /* widths this rank supplies to its lo/hi neighbour */
  int nb[2];              /* neighbour ranks, MPI_PROC_NULL at an edge */
  int local[2];           /* side filled locally (edge or local wrap) */
  sg_halo_box sbox[2];    /* owned slabs sent to the neighbours */
  sg_halo_box rbox[2];    /* halo slabs received */
  void *sbuf[2], *rbuf[2];
  MPI_Request frecv[2], fsend[2]; /* persistent, forward, packed sides */
  MPI_Request areq[4];            /* persistent, adjoint (always packed) */
  int na;
  /* forward without packing (direct sides): the message goes straight
   * from the block and into the margin, described by stype/rtype (one
   * contiguous run: MPI_BYTE x scount/rcount bytes; several runs: an MPI
   * datatype, count 1) */
  int sdirect[2], rdirect[2];
  MPI_Datatype stype[2], rtype[2];
  int scount[2], rcount[2];
  MPI_Request req[8]; /* the current forward step's requests */
  int unpack[8];      /* side to unpack when req[i] completes, or -1 */
  int nreq, pending;
  /* shared-memory path: my slot towards nb[s] (offset of buffer 0 in my
   * segment, bytes per buffer), nb[s]'s segment and its slot towards me,
   * the sequence numbers sent on / received from side s, and the sides
   * still to receive in the current step */
  size_t soff[2], ssize[2], poff[2], psize[2];
  char *pseg[2];
  uint64_t nsent[2], nrecv[2]; /* messages sent / received per side */
  uint64_t pub[2], got[2];     /* pieces published / consumed per side */
  struct piece_plan spp[2], rpp[2]; /* the current messages' pieces */
  int64_t spos[2], rpos[2];         /* pieces done of them */
  int sending[2], want[2];          /* sides with a message out / in */
  /* single copy: nb[s]'s shared blocks as mapped here, its boxes towards
   * me (forward: its owned slab; adjoint: its halo slab), and the sides
   * whose message left in place waits for its ack */
  char *pblk[SG_HALO_MAX_BLOCKS][2];
  sg_halo_box psbox[2], prbox[2];
  int dsend[2];
  /* whether a slab of side s may be left in place ([0] forward: its rows
   * are long enough; [1] adjoint), and whether the current message is */
  int dok[2][2], sdir[2];
} hdim;

struct sg_halo_plan {
  MPI_Comm comm; /* cached on the mesh communicator; not owned */
  int id;        /* plan number on that communicator (tag range) */
  int ndims;
  sg_dtype dtype;
  size_t esize;
  int64_t lead;
  int64_t strides[1 + SG_HALO_MAX_DIMS];
  int64_t origin, count;
  sg_boundary bnd[SG_HALO_MAX_DIMS];
  hdim dim[SG_HALO_MAX_DIMS];
  size_t send_bytes;
  int path;     /* HALO_PATH_*: how forward messages are formed */
  int order[SG_HALO_MAX_DIMS]; /* forward step -> dim: dims filled locally
                                  on both sides first, then the split dims */
  int pos[SG_HALO_MAX_DIMS];   /* dim -> forward step */
  int perm[SG_HALO_BOX_DIMS];  /* box dims outermost first: (lead, d0, d1,
                                  d2) sorted by stride, so that a slab is
                                  enumerated in memory order (one run when
                                  it is contiguous, e.g. channels-last) */
  int phase, step;
  char *block;
  /* shared-memory path (path SHM once agreed; else shm = 0) */
  int shm;
  struct halo_comm_cache *cache;
  int win;  /* pool index */
  char *seg; /* own segment */
  size_t chunk; /* bytes per piece (SG_HALO_SHM_CHUNK, same on all ranks) */
  /* blocks from sg_halo_plan_alloc_block: in pool windows bwin[] on the
   * shm path (bwin = -1: private memory, freed with the plan); the index
   * of the block of the exchange in flight, or -1 */
  int nblk;
  void *blk[SG_HALO_MAX_BLOCKS];
  int bwin[SG_HALO_MAX_BLOCKS];
  int cur;
  /* private staging for pieces gathered from several runs (one piece) */
  void *stage;
  size_t stage_bytes;
};

void sg_halo_desc_init(sg_halo_desc *desc) {
  memset(desc, 0, sizeof *desc);
  desc->ndims = 1;
  desc->lead = 1;
  desc->dtype = SG_DTYPE_F32;
  for (int d = 0; d < SG_HALO_MAX_DIMS; ++d) {
    desc->mesh_dim[d] = -1;
    desc->boundary[d] = SG_BOUNDARY_ZERO;
  }
}

sg_status sg_halo_desc_from_decomp(sg_decomp_t dec, const sg_window *w,
                                   int64_t lead, sg_dtype dtype,
                                   sg_halo_desc *desc) {
  sg_status st = SG_OK;
  int64_t width[SG_HALO_MAX_DIMS][2];
  sg_halo_desc_init(desc);
  SG_TRY(sg_decomp_local_halo(dec, w, width));
  desc->ndims = sg_decomp_ndims(dec);
  desc->lead = lead;
  desc->dtype = dtype;
  sg_decomp_shard(dec, NULL, desc->interior, NULL);
  for (int d = 0; d < desc->ndims; ++d) {
    for (int s = 0; s < 2; ++s) desc->halo[d][s] = desc->margin[d][s] = width[d][s];
    desc->mesh_dim[d] = sg_decomp_mesh_dim(dec, d);
    desc->boundary[d] = sg_decomp_boundary(dec, d);
  }
fail:
  return st;
}

/* The region of the block along dim d from local index a, width w; dims
 * exchanged before d span their halos, dims after d their interior. */
static sg_halo_box make_box(const struct sg_halo_plan *p, int d, int64_t a,
                            int64_t w) {
  sg_halo_box b;
  b.base = p->origin;
  b.count[0] = p->lead;
  b.stride[0] = p->strides[0];
  for (int e = 0; e < SG_HALO_MAX_DIMS; ++e) {
    int k = 1 + e;
    if (e >= p->ndims) {
      b.count[k] = 1;
      b.stride[k] = 0;
      continue;
    }
    const hdim *q = &p->dim[e];
    b.stride[k] = p->strides[k];
    if (e == d) {
      b.count[k] = w;
      b.base += a * p->strides[k];
    } else if (p->pos[e] < p->pos[d]) {
      b.count[k] = q->h[0] + q->n + q->h[1];
      b.base -= q->h[0] * p->strides[k];
    } else {
      b.count[k] = q->n;
    }
  }
  sg_halo_box o = b;
  for (int k = 0; k < SG_HALO_BOX_DIMS; ++k) {
    o.count[k] = b.count[p->perm[k]];
    o.stride[k] = b.stride[p->perm[k]];
  }
  return o;
}

/* The order of the box dims (lead, d0, d1, d2) by decreasing stride in this
 * rank's desc (unused dims first), and a code for it. */
static int box_memory_order(const sg_halo_desc *desc, int *perm) {
  int nd = desc->ndims >= 1 && desc->ndims <= SG_HALO_MAX_DIMS ? desc->ndims
                                                               : 1;
  int packed = 1, n = 0, code = 0;
  for (int k = 0; k <= nd; ++k)
    if (desc->strides[k] != 0) packed = 0;
  for (int k = nd + 1; k < SG_HALO_BOX_DIMS; ++k) perm[n++] = k;
  for (int k = 0; k <= nd; ++k) perm[n++] = k;
  const int first = SG_HALO_BOX_DIMS - 1 - nd; /* perm[first..] used */
  if (!packed) /* stable insertion sort, larger strides first */
    for (int i = first + 1; i < SG_HALO_BOX_DIMS; ++i)
      for (int j = i; j > first && desc->strides[perm[j]] >
                                       desc->strides[perm[j - 1]];
           --j) {
        int t = perm[j];
        perm[j] = perm[j - 1];
        perm[j - 1] = t;
      }
  for (int k = 0; k < SG_HALO_BOX_DIMS; ++k) code = 4 * code + perm[k];
  return code;
}

static sg_status validate(const sg_mesh_t mesh, const sg_halo_desc *desc) {
  sg_status st = SG_OK;
  if (desc->ndims < 1 || desc->ndims > SG_HALO_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG, "halo plan of %d spatial dims (1..%d)",
             desc->ndims, SG_HALO_MAX_DIMS);
  if (!sg_dtype_valid(desc->dtype))
    SG_RAISE(SG_ERR_INVALID_ARG, "halo plan: invalid dtype %d",
             (int)desc->dtype);
  if (desc->lead < 1)
    SG_RAISE(SG_ERR_INVALID_ARG, "halo plan: lead %lld (need >= 1)",
             (long long)desc->lead);
  for (int d = 0; d < desc->ndims; ++d) {
    if (desc->interior[d] < 0)
      SG_RAISE(SG_ERR_INVALID_ARG, "halo plan: dim %d interior %lld", d,
               (long long)desc->interior[d]);
    for (int s = 0; s < 2; ++s)
      if (desc->halo[d][s] < 0)
        SG_RAISE(SG_ERR_INVALID_ARG,
                 "halo plan: dim %d halo width %lld (widths are >= 0; a "
                 "negative halo of a window op is an offset, not a width)",
                 d, (long long)desc->halo[d][s]);
    if ((int)desc->boundary[d] < 0 || desc->boundary[d] >= SG_BOUNDARY_COUNT)
      SG_RAISE(SG_ERR_INVALID_ARG, "halo plan: dim %d invalid boundary %d", d,
               (int)desc->boundary[d]);
    int m = desc->mesh_dim[d];
    if (m >= sg_mesh_ndims(mesh) || m < -1)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "halo plan: spatial dim %d on mesh dim %d (mesh has %d dims)",
               d, m, sg_mesh_ndims(mesh));
    for (int e = 0; e < d; ++e)
      if (m >= 0 && desc->mesh_dim[e] == m)
        SG_RAISE(SG_ERR_INVALID_ARG,
                 "halo plan: spatial dims %d and %d both on mesh dim %d", e,
                 d, m);
  }
fail:
  return st;
}

/* Per-rank record shared along a split dim. */
enum { REC_LEAD = 0, REC_DIMS = 1, REC_LEN = 1 + 3 * SG_HALO_MAX_DIMS };

static sg_status check_dim(const sg_halo_desc *desc, int d, int parts,
                           const int64_t *table, sg_mesh_t mesh) {
  sg_status st = SG_OK;
  int64_t *sizes = malloc((size_t)parts * sizeof *sizes);
  int64_t *halo = malloc(2 * (size_t)parts * sizeof *halo);
  if (!sizes || !halo) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int r = 0; r < parts; ++r) {
    const int64_t *rec = table + (size_t)r * REC_LEN;
    sizes[r] = rec[REC_DIMS + 3 * d];
    halo[2 * r] = rec[REC_DIMS + 3 * d + 1];
    halo[2 * r + 1] = rec[REC_DIMS + 3 * d + 2];
    if (rec[REC_LEAD] != table[REC_LEAD])
      SG_RAISE(SG_ERR_SHAPE,
               "halo plan: ranks along spatial dim %d (mesh dim %s) carry "
               "different leading counts (%lld and %lld)",
               d, sg_mesh_dim_name(mesh, desc->mesh_dim[d]),
               (long long)table[REC_LEAD], (long long)rec[REC_LEAD]);
    for (int e = 0; e < desc->ndims; ++e) {
      if (e == d) continue;
      for (int k = 0; k < 3; ++k)
        if (rec[REC_DIMS + 3 * e + k] != table[REC_DIMS + 3 * e + k])
          SG_RAISE(SG_ERR_SHAPE,
                   "halo plan: neighbours along spatial dim %d disagree on "
                   "the %s of spatial dim %d (%lld vs %lld)",
                   d, k == 0 ? "interior" : "halo width", e,
                   (long long)table[REC_DIMS + 3 * e + k],
                   (long long)rec[REC_DIMS + 3 * e + k]);
    }
  }
  SG_TRY(sg_halo_check(d, parts, sizes, desc->boundary[d], halo));
fail:
  free(sizes);
  free(halo);
  return st;
}

/* Halo messages travel on one duplicate of the mesh communicator, cached on
 * it as an attribute (freed with it), so creating a plan needs no
 * MPI_Comm_dup; each plan gets its own tag range. The cache also holds the
 * ranks sharing this rank's node (node, and each comm rank's rank in it or
 * MPI_UNDEFINED) and the pool of shared windows of the on-node path: a
 * window is allocated (collectively) by a plan creation that finds no free
 * one large enough on every rank, lent to one plan at a time, returned by
 * sg_halo_plan_destroy (not collective) and freed with the communicator,
 * in allocation order on every rank. */
typedef struct halo_win {
  MPI_Win win;
  char *seg;
  size_t bytes;
  int in_use;
} halo_win;

typedef struct halo_comm_cache {
  MPI_Comm comm;
  int next_id;
  MPI_Comm node;
  int *node_rank; /* comm rank -> node rank, or MPI_UNDEFINED */
  int nwin;
  int early_yield; /* more ranks on the node than cores (SG_HALO_YIELD) */
  halo_win pool[HALO_POOL];
} halo_comm_cache;

static int halo_keyval = MPI_KEYVAL_INVALID;

static int halo_cache_delete(MPI_Comm comm, int keyval, void *attr,
                             void *extra) {
  (void)comm;
  (void)keyval;
  (void)extra;
  halo_comm_cache *c = attr;
  if (c) {
    for (int i = 0; i < c->nwin; ++i) {
      MPI_Win_unlock_all(c->pool[i].win);
      MPI_Win_free(&c->pool[i].win);
    }
    if (c->node != MPI_COMM_NULL) MPI_Comm_free(&c->node);
    if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
    free(c->node_rank);
    free(c);
  }
  return MPI_SUCCESS;
}

/* Collective over mcomm on first use (every rank reaches it in the same
 * plan creation, so the attribute is present on all ranks or on none). */
static sg_status halo_comm(MPI_Comm mcomm, MPI_Comm *comm, int *id,
                           halo_comm_cache **cache) {
  sg_status st = SG_OK;
  halo_comm_cache *c = NULL;
  int flag = 0;
  MPI_Group g = MPI_GROUP_NULL, ng = MPI_GROUP_NULL;
  int *all = NULL;
  if (halo_keyval == MPI_KEYVAL_INVALID)
    SG_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, halo_cache_delete,
                                  &halo_keyval, NULL));
  SG_MPI(MPI_Comm_get_attr(mcomm, halo_keyval, &c, &flag));
  if (!flag) {
    int size = 0;
    MPI_Comm_size(mcomm, &size);
    c = calloc(1, sizeof *c);
    all = malloc((size_t)size * sizeof *all);
    MPI_Comm dup = MPI_COMM_NULL, node = MPI_COMM_NULL;
    SG_MPI(MPI_Comm_dup(mcomm, &dup));
    SG_MPI(MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                               &node));
    if (!c || !all) {
      MPI_Comm_free(&node);
      MPI_Comm_free(&dup);
      free(c);
      c = NULL;
      SG_RAISE(SG_ERR_ALLOC, "out of memory");
    }
    c->comm = dup;
    c->node = node;
    {
      /* waits yield early when this node's ranks outnumber its cores: a
       * spinning rank then holds the core its neighbour needs */
      int nn = 1;
      MPI_Comm_size(node, &nn);
      long cores = sysconf(_SC_NPROCESSORS_ONLN);
      const char *e = getenv("SG_HALO_YIELD");
      c->early_yield = e && !strcmp(e, "early")  ? 1
                       : e && !strcmp(e, "late") ? 0
                                                 : cores > 0 && nn > cores;
    }
    c->next_id = 0;
    c->node_rank = all;
    all = NULL;
    for (int r = 0; r < size; ++r) c->node_rank[r] = r;
    SG_MPI(MPI_Comm_group(dup, &g));
    SG_MPI(MPI_Comm_group(node, &ng));
    int *from = malloc((size_t)size * sizeof *from);
    if (!from) SG_RAISE(SG_ERR_ALLOC, "out of memory");
    memcpy(from, c->node_rank, (size_t)size * sizeof *from);
    int rc = MPI_Group_translate_ranks(g, size, from, ng, c->node_rank);
    free(from);
    SG_MPI(rc);
    SG_MPI(MPI_Comm_set_attr(mcomm, halo_keyval, c));
  }
  *comm = c->comm;
  *id = c->next_id++;
  *cache = c;
fail:
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (ng != MPI_GROUP_NULL) MPI_Group_free(&ng);
  free(all);
  return st;
}

static void free_plan(struct sg_halo_plan *p) {
  if (!p) return;
  if (p->shm) p->cache->pool[p->win].in_use = 0; /* back to the pool */
  sg_free(sg_device_host(), &p->stage);
  for (int j = 0; j < p->nblk; ++j) {
    if (p->bwin[j] >= 0)
      p->cache->pool[p->bwin[j]].in_use = 0;
    else
      sg_free(sg_device_host(), &p->blk[j]);
  }
  for (int d = 0; d < SG_HALO_MAX_DIMS; ++d) {
    hdim *q = &p->dim[d];
    for (int s = 0; s < 2; ++s) {
      if (q->frecv[s] != MPI_REQUEST_NULL) MPI_Request_free(&q->frecv[s]);
      if (q->fsend[s] != MPI_REQUEST_NULL) MPI_Request_free(&q->fsend[s]);
    }
    for (int i = 0; i < q->na; ++i)
      if (q->areq[i] != MPI_REQUEST_NULL) MPI_Request_free(&q->areq[i]);
    for (int s = 0; s < 2; ++s) {
      if (q->stype[s] != MPI_DATATYPE_NULL && q->stype[s] != MPI_BYTE)
        MPI_Type_free(&q->stype[s]);
      if (q->rtype[s] != MPI_DATATYPE_NULL && q->rtype[s] != MPI_BYTE)
        MPI_Type_free(&q->rtype[s]);
    }
    for (int s = 0; s < 2; ++s) {
      sg_free(sg_device_host(), &q->sbuf[s]);
      sg_free(sg_device_host(), &q->rbuf[s]);
    }
  }
  free(p);
}

static int tag_of(const struct sg_halo_plan *p, int d, int up, int adjoint) {
  return 100 + 16 * (p->id % 1024) + 4 * d + 2 * adjoint + up;
}

/* An MPI datatype for a box (offsets relative to the box's first element). */
static sg_status box_type(const sg_halo_box *b0, size_t esize,
                          MPI_Datatype *type) {
  sg_status st = SG_OK;
  sg_halo_box b = sg_halo_box_simplify(*b0, 1);
  MPI_Datatype cur = MPI_DATATYPE_NULL, nxt = MPI_DATATYPE_NULL;
  SG_MPI(MPI_Type_contiguous((int)esize, MPI_BYTE, &cur));
  for (int k = SG_HALO_BOX_DIMS - 1; k >= 0; --k) {
    if (b.count[k] == 1 && k < SG_HALO_BOX_DIMS - 1) continue;
    SG_MPI(MPI_Type_create_hvector((int)b.count[k], 1,
                                   (MPI_Aint)(b.stride[k] * (int64_t)esize),
                                   cur, &nxt));
    MPI_Type_free(&cur);
    cur = nxt;
    nxt = MPI_DATATYPE_NULL;
  }
  SG_MPI(MPI_Type_commit(&cur));
  *type = cur;
  return SG_OK;
fail:
  if (cur != MPI_DATATYPE_NULL) MPI_Type_free(&cur);
  return st;
}

/* How the forward message of one side is formed: *direct = 0 (packed
 * buffer), or 1 with the datatype and count describing the box in the block
 * (from the box's first element). */
static sg_status direct_type(const struct sg_halo_plan *p,
                             const sg_halo_box *box, int *direct,
                             MPI_Datatype *type, int *count) {
  sg_status st = SG_OK;
  sg_halo_box b = sg_halo_box_simplify(*box, 1);
  int64_t n = sg_halo_box_size(&b);
  int one_run = n == (b.stride[3] == 1 ? b.count[3] : 1);
  *direct = 0;
  *type = MPI_DATATYPE_NULL;
  *count = 0;
  if (p->path == HALO_PATH_PACK) return SG_OK;
  if (p->path != HALO_PATH_DIRECT && !one_run) return SG_OK;
  *direct = 1;
  if (one_run) {
    *type = MPI_BYTE;
    *count = (int)(n * (int64_t)p->esize);
  } else {
    SG_TRY(box_type(box, p->esize, type));
    *count = 1;
  }
fail:
  return st;
}

static sg_status setup_local(struct sg_halo_plan *p, sg_mesh_t mesh,
                             const sg_halo_desc *desc) {
  sg_status st = SG_OK;
  const sg_device host = sg_device_host();
  for (int d = 0; d < p->ndims; ++d) {
    hdim *q = &p->dim[d];
    for (int s = 0; s < 2; ++s) {
      q->sbox[s] = make_box(p, d, s ? q->n - q->s[1] : 0, q->s[s]);
      q->rbox[s] = make_box(p, d, s ? q->n : -q->h[0], q->h[s]);
      if (q->local[s]) continue;
      size_t sb = (size_t)sg_halo_box_size(&q->sbox[s]) * p->esize;
      size_t rb = (size_t)sg_halo_box_size(&q->rbox[s]) * p->esize;
      if (sb > (size_t)INT_MAX || rb > (size_t)INT_MAX)
        SG_RAISE(SG_ERR_NOT_SUPPORTED,
                 "halo plan: a message of %zu bytes along dim %d exceeds "
                 "INT_MAX bytes",
                 sb > rb ? sb : rb, d);
      if (q->s[s] > 0) {
        SG_TRY(sg_malloc(host, sb, &q->sbuf[s]));
        p->send_bytes += sb;
      }
      if (q->h[s] > 0) SG_TRY(sg_malloc(host, rb, &q->rbuf[s]));
    }
    for (int i = 0; i < 4; ++i) q->areq[i] = MPI_REQUEST_NULL;
    q->frecv[0] = q->frecv[1] = q->fsend[0] = q->fsend[1] = MPI_REQUEST_NULL;
    for (int i = 0; i < 8; ++i) q->req[i] = MPI_REQUEST_NULL;
    for (int s = 0; s < 2; ++s) {
      if (q->local[s]) continue;
      if (q->s[s] > 0)
        SG_TRY(direct_type(p, &q->sbox[s], &q->sdirect[s], &q->stype[s],
                           &q->scount[s]));
      if (q->h[s] > 0)
        SG_TRY(direct_type(p, &q->rbox[s], &q->rdirect[s], &q->rtype[s],
                           &q->rcount[s]));
    }
    /* forward: my lo halo comes up from nb[0], my hi halo down from nb[1] */
    for (int s = 0; s < 2; ++s) {
      if (q->local[s]) continue;
      int rb = (int)(sg_halo_box_size(&q->rbox[s]) * (int64_t)p->esize);
      int sb = (int)(sg_halo_box_size(&q->sbox[s]) * (int64_t)p->esize);
      if (q->h[s] > 0) {
        if (!q->rdirect[s])
          SG_MPI(MPI_Recv_init(q->rbuf[s], rb, MPI_BYTE, q->nb[s],
                               tag_of(p, d, s == 0, 0), p->comm,
                               &q->frecv[s]));
        SG_MPI(MPI_Send_init(q->rbuf[s], rb, MPI_BYTE, q->nb[s],
                             tag_of(p, d, s == 1, 1), p->comm, &q->areq[q->na++]));
      }
      if (q->s[s] > 0) {
        if (!q->sdirect[s])
          SG_MPI(MPI_Send_init(q->sbuf[s], sb, MPI_BYTE, q->nb[s],
                               tag_of(p, d, s == 1, 0), p->comm,
                               &q->fsend[s]));
        SG_MPI(MPI_Recv_init(q->sbuf[s], sb, MPI_BYTE, q->nb[s],
                             tag_of(p, d, s == 0, 1), p->comm, &q->areq[q->na++]));
      }
    }
  }
  (void)mesh;
  (void)desc;
fail:
  return st;
}

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
static sg_status pool_take(struct sg_halo_plan *p, size_t need,
                           uint64_t mask, int *w) {
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
  int rc = MPI_Win_allocate_shared((MPI_Aint)need, 1, info, c->node,
                                   &hw->seg, &hw->win);
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
static sg_status setup_shm(struct sg_halo_plan *p) {
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

sg_status sg_halo_plan_create(sg_mesh_t mesh, const sg_halo_desc *desc,
                              sg_halo_plan_t *plan) {
  sg_status st = SG_OK, local = SG_OK;
  struct sg_halo_plan *p = NULL;
  int64_t *table = NULL;
  if (!mesh || !desc || !plan)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_halo_plan_create: NULL argument");
  *plan = NULL;
  MPI_Comm mcomm = sg_mesh_comm(mesh);
  /* One reduction: every rank's argument check, and the same layout on
   * every rank (else the per-dim collectives below would not match). */
  {
    int sig[2 * 10], red[2 * 10], perm[SG_HALO_BOX_DIMS];
    local = validate(mesh, desc);
    p = calloc(1, sizeof *p);
    if (p) {
      p->comm = MPI_COMM_NULL;
      p->cur = -1;
      for (int d = 0; d < SG_HALO_MAX_DIMS; ++d) {
        hdim *q = &p->dim[d];
        for (int k = 0; k < 2; ++k) {
          q->stype[k] = q->rtype[k] = MPI_DATATYPE_NULL;
          q->frecv[k] = q->fsend[k] = MPI_REQUEST_NULL;
        }
        for (int i = 0; i < 4; ++i) q->areq[i] = MPI_REQUEST_NULL;
        for (int i = 0; i < 8; ++i) q->req[i] = MPI_REQUEST_NULL;
      }
      const char *env = getenv("SG_HALO_PATH");
      const char *old = getenv("SG_HALO_DTYPES");
      p->path = HALO_PATH_AUTO;
      if (env && !strcmp(env, "pack")) p->path = HALO_PATH_PACK;
      else if ((env && !strcmp(env, "direct")) || (old && old[0] == '1'))
        p->path = HALO_PATH_DIRECT;
      else if (env && !strcmp(env, "mpi")) p->path = HALO_PATH_MPI;
      else if (env && !strcmp(env, "shm")) p->path = HALO_PATH_SHM;
    }
    table = malloc((size_t)sg_mesh_size(mesh) * REC_LEN * sizeof *table);
    if (local == SG_OK && (!p || !table))
      local = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
    int rank = sg_mesh_rank(mesh), size = sg_mesh_size(mesh);
    sig[0] = local != SG_OK ? rank : size; /* lowest failing rank */
    sig[1] = desc->ndims;
    sig[2] = (int)desc->dtype;
    for (int d = 0; d < SG_HALO_MAX_DIMS; ++d) {
      int on = d < desc->ndims;
      sig[3 + d] = on ? desc->mesh_dim[d] : -2;
      sig[6 + d] = on ? (int)desc->boundary[d] : -2;
    }
    sig[9] = box_memory_order(desc, perm);
    for (int i = 0; i < 10; ++i) sig[10 + i] = -sig[i];
    SG_MPI(MPI_Allreduce(sig, red, 20, MPI_INT, MPI_MIN, mcomm));
    if (red[0] != size) {
      /* someone's arguments are bad: share that rank's message */
      SG_TRY(sg_agree(mcomm, local));
    }
    for (int i = 1; i < 9; ++i)
      if (red[i] != -red[10 + i])
        SG_RAISE(SG_ERR_INVALID_ARG,
                 "halo plan: ranks disagree on the layout (spatial dims, "
                 "dtype, mesh dims or boundary kinds)");
    /* slabs are enumerated in memory order when every rank stores the
     * dims in the same order, else in (lead, d0, d1, d2) order */
    for (int k = 0; k < SG_HALO_BOX_DIMS; ++k)
      p->perm[k] = red[9] == -red[19] ? perm[k] : k;
  }

  p->comm = MPI_COMM_NULL;
  p->ndims = desc->ndims;
  p->dtype = desc->dtype;
  p->esize = sg_dtype_size(desc->dtype);
  p->lead = desc->lead;

  /* geometry */
  int64_t ext[SG_HALO_MAX_DIMS], mlo[SG_HALO_MAX_DIMS];
  for (int d = 0; d < p->ndims; ++d) {
    int64_t m0 = desc->margin[d][0] > desc->halo[d][0] ? desc->margin[d][0]
                                                      : desc->halo[d][0];
    int64_t m1 = desc->margin[d][1] > desc->halo[d][1] ? desc->margin[d][1]
                                                      : desc->halo[d][1];
    ext[d] = m0 + desc->interior[d] + m1;
    mlo[d] = m0;
    p->bnd[d] = desc->boundary[d];
    p->dim[d].n = desc->interior[d];
    p->dim[d].h[0] = desc->halo[d][0];
    p->dim[d].h[1] = desc->halo[d][1];
  }
  int packed = 1;
  for (int k = 0; k <= p->ndims; ++k)
    if (desc->strides[k] != 0) packed = 0;
  if (packed) {
    int64_t s = 1;
    for (int d = p->ndims - 1; d >= 0; --d) {
      p->strides[1 + d] = s;
      s *= ext[d];
    }
    p->strides[0] = s;
    p->count = s * p->lead;
  } else {
    int64_t hi = 0;
    for (int k = 0; k <= p->ndims; ++k) {
      p->strides[k] = desc->strides[k];
      int64_t c = k == 0 ? p->lead : ext[k - 1];
      if (desc->strides[k] < 1) {
        local = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                             "halo plan: stride %d is %lld (all must be >= 1, "
                             "or all 0 for packed)",
                             k, (long long)desc->strides[k]);
        break;
      }
      hi += (c - 1) * desc->strides[k];
    }
    p->count = hi + 1;
  }
  p->origin = 0;
  for (int d = 0; d < p->ndims; ++d) p->origin += mlo[d] * p->strides[1 + d];

  /* neighbours and widths; the thin-shard check before any message */
  int64_t rec[REC_LEN];
  memset(rec, 0, sizeof rec);
  rec[REC_LEAD] = desc->lead;
  for (int d = 0; d < p->ndims; ++d) {
    rec[REC_DIMS + 3 * d] = desc->interior[d];
    rec[REC_DIMS + 3 * d + 1] = desc->halo[d][0];
    rec[REC_DIMS + 3 * d + 2] = desc->halo[d][1];
  }
  for (int d = 0; d < p->ndims; ++d) {
    hdim *q = &p->dim[d];
    int m = desc->mesh_dim[d];
    int parts = m >= 0 ? sg_mesh_dim_size(mesh, m) : 1;
    int periodic = p->bnd[d] == SG_BOUNDARY_PERIODIC;
    if (parts == 1) {
      q->nb[0] = q->nb[1] = MPI_PROC_NULL;
      q->local[0] = q->local[1] = 1;
      if (local == SG_OK)
        local = sg_halo_check(d, 1, &q->n, p->bnd[d], desc->halo[d]);
      continue;
    }
    sg_group_t g = NULL;
    SG_TRY(sg_mesh_group(mesh, 1u << m, &g));
    SG_MPI(MPI_Allgather(rec, REC_LEN, MPI_INT64_T, table, REC_LEN,
                         MPI_INT64_T, sg_group_comm(g)));
    int c = sg_mesh_coord(mesh, m);
    if (local == SG_OK) local = check_dim(desc, d, parts, table, mesh);
    SG_TRY(sg_mesh_neighbor(mesh, m, -1, periodic, &q->nb[0]));
    SG_TRY(sg_mesh_neighbor(mesh, m, +1, periodic, &q->nb[1]));
    for (int s = 0; s < 2; ++s) {
      q->local[s] = q->nb[s] == MPI_PROC_NULL;
      if (q->local[s]) continue;
      int nc = (c + (s ? 1 : -1) + parts) % parts;
      /* my lo neighbour fills its hi halo from me, and vice versa */
      q->s[s] = table[(size_t)nc * REC_LEN + REC_DIMS + 3 * d + (s ? 1 : 2)];
    }
  }

  /* step order: a dim filled locally on both sides needs no message, so it
   * goes first (its fills over the interior of the split dims are done
   * when sg_halo_start returns); corners come out the same in any order */
  {
    int k = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (int d = 0; d < p->ndims; ++d) {
        int loc = p->dim[d].local[0] && p->dim[d].local[1];
        if (loc == (pass == 0)) p->order[k++] = d;
      }
    for (int i = 0; i < p->ndims; ++i) p->pos[p->order[i]] = i;
  }

  {
    /* collective on first use: every rank calls it */
    sg_status cst = halo_comm(mcomm, &p->comm, &p->id, &p->cache);
    if (local == SG_OK) local = cst;
  }
  if (local == SG_OK) local = setup_local(p, mesh, desc);
  SG_TRY(sg_agree(mcomm, local));
  SG_TRY(setup_shm(p));
  free(table);
  *plan = p;
  return SG_OK;
fail:
  free(table);
  free_plan(p);
  return st;
}

sg_status sg_halo_plan_destroy(sg_halo_plan_t *plan) {
  sg_status st = SG_OK;
  if (!plan || !*plan) return SG_OK;
  if ((*plan)->phase != PHASE_IDLE)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_halo_plan_destroy: an exchange is still in flight");
  free_plan(*plan);
  *plan = NULL;
fail:
  return st;
}

int64_t sg_halo_plan_block_count(sg_halo_plan_t plan) { return plan->count; }
int64_t sg_halo_plan_origin(sg_halo_plan_t plan) { return plan->origin; }
void sg_halo_plan_strides(sg_halo_plan_t plan, int64_t *strides) {
  for (int k = 0; k <= plan->ndims; ++k) strides[k] = plan->strides[k];
}
size_t sg_halo_plan_send_bytes(sg_halo_plan_t plan) {
  return plan->send_bytes;
}
const char *sg_halo_plan_path(sg_halo_plan_t plan) {
  if (plan->shm) return "shm";
  switch (plan->path) {
  case HALO_PATH_PACK: return "pack";
  case HALO_PATH_DIRECT: return "direct";
  default: return "mpi";
  }
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
      SG_RAISE(SG_ERR_ALLOC, "sg_halo_plan_alloc_block: the pool of %d "
               "shared windows is exhausted", HALO_POOL);
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
        SG_MPI(MPI_Win_shared_query(hw->win, p->cache->node_rank[q->nb[s]],
                                    &sz, &du, &base));
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

/* ---- local fills at physical edges / local wrap -------------------------- */

static sg_status fill_local(struct sg_halo_plan *p, int d, int s,
                            int adjoint) {
  sg_status st = SG_OK;
  hdim *q = &p->dim[d];
  int64_t h = q->h[s];
  if (h == 0) return SG_OK;
  if (p->bnd[d] == SG_BOUNDARY_ZERO) {
    sg_halo_box b = make_box(p, d, s ? q->n : -h, h);
    sg_halo_zero_host(p->block, &b, p->esize);
    return SG_OK;
  }
  for (int64_t j = 0; j < h; ++j) {
    int64_t i = s ? q->n + j : -1 - j;
    int64_t src = sg_halo_edge_source(p->bnd[d], q->n, i);
    sg_halo_box hb = make_box(p, d, i, 1);
    sg_halo_box sb = make_box(p, d, src, 1);
    if (adjoint)
      SG_TRY(sg_halo_move_add_host(p->block, &sb, &hb, p->dtype));
    else
      sg_halo_copy_host(p->block, &hb, &sb, p->esize);
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

/* The error of a halo wait past the timeout (sg_comm_set_timeout) on dim
 * d: side >= 0: waiting for that side's neighbour (known exactly); -1:
 * for the messages of both neighbours (MPI: which one is late is not
 * known). */
static sg_status halo_timeout(const struct sg_halo_plan *p, const sg_deadline *dl, int d, int side,
                              const char *how) {
  const hdim *q = &p->dim[d];
  char what[256];
  if (side >= 0) {
    snprintf(what, sizeof what, "halo exchange (dim %d, %s)", d, how);
    return sg_timeout_error(dl, what, p->comm, q->nb[side]);
  }
  snprintf(what, sizeof what, "halo exchange (dim %d, %s, neighbours: ranks %d and %d of the halo's "
           "communicator; one of them did not arrive)", d, how, q->nb[0], q->nb[1]);
  return sg_timeout_error(dl, what, MPI_COMM_NULL, -1);
}

/* The box a side sends (forward: the owned slab; adjoint: the halo) and
 * the box it receives into. */
static const sg_halo_box *send_box(const struct sg_halo_plan *p,
                                   const hdim *q, int s) {
  return p->phase == PHASE_ADJ ? &q->rbox[s] : &q->sbox[s];
}
static const sg_halo_box *recv_box(const struct sg_halo_plan *p,
                                   const hdim *q, int s) {
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
      return halo_timeout(p, &dl, d, s, "shared memory: the neighbour never took an earlier message");
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
    if (sq.count[0] * sq.count[1] * sq.count[2] > 1 && bytes <= p->stage_bytes) {
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
static sg_status shm_recv(struct sg_halo_plan *p, int d, int s,
                          int64_t most) {
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
    const char *src =
        q->pseg[s] + q->poff[s] + ((q->nrecv[s] + 1) & 1) * q->psize[s];
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
static sg_status shm_pump(struct sg_halo_plan *p, int d, int wait, int lazy,
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
        SG_TRY(halo_timeout(p, &dl, d, side, "shared memory: no message from the neighbour"));
      }
    }
  }
fail:
  return st;
}

/* Start a step on the shm path: the local fills (first, so that the
 * adjoint adds in the MPI path's order), then one round of pieces. */
static sg_status shm_begin(struct sg_halo_plan *p, int d) {
  sg_status st = SG_OK;
  hdim *q = &p->dim[d];
  const int adj = p->phase == PHASE_ADJ;
  int ok = 0;
  for (int s = 0; s < 2; ++s)
    if (q->local[s]) SG_TRY(fill_local(p, d, s, adj));
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
  SG_TRY(shm_pump(p, d, 0, 1, &ok));
fail:
  return st;
}

/* ---- the state machine ---------------------------------------------------- */

static int step_dim(const struct sg_halo_plan *p, int step) {
  return p->order[p->phase == PHASE_ADJ ? p->ndims - 1 - step : step];
}

static sg_status begin_step(struct sg_halo_plan *p) {
  sg_status st = SG_OK;
  int d = step_dim(p, p->step);
  hdim *q = &p->dim[d];
  const int64_t es = (int64_t)p->esize;
  if (p->shm) {
    SG_TRY(shm_begin(p, d));
  } else if (p->phase == PHASE_FWD) {
    /* receives first, then each side's send as soon as it is packed;
     * persistent handles stay valid (inactive) after completion */
    q->nreq = 0;
    for (int s = 0; s < 2; ++s) {
      if (q->local[s] || q->h[s] == 0) continue;
      if (q->rdirect[s]) {
        SG_MPI(MPI_Irecv(p->block + q->rbox[s].base * es, q->rcount[s],
                         q->rtype[s], q->nb[s], tag_of(p, d, s == 0, 0),
                         p->comm, &q->req[q->nreq]));
        q->unpack[q->nreq++] = -1;
      } else {
        SG_MPI(MPI_Start(&q->frecv[s]));
        q->req[q->nreq] = q->frecv[s];
        q->unpack[q->nreq++] = s;
      }
    }
    for (int s = 0; s < 2; ++s) {
      if (q->local[s] || q->s[s] == 0) continue;
      if (q->sdirect[s]) {
        SG_MPI(MPI_Isend(p->block + q->sbox[s].base * es, q->scount[s],
                         q->stype[s], q->nb[s], tag_of(p, d, s == 1, 0),
                         p->comm, &q->req[q->nreq]));
      } else {
        sg_halo_pack_host(p->block, &q->sbox[s], p->esize, q->sbuf[s]);
        SG_MPI(MPI_Start(&q->fsend[s]));
        q->req[q->nreq] = q->fsend[s];
      }
      q->unpack[q->nreq++] = -1;
    }
    q->pending = q->nreq;
    for (int s = 0; s < 2; ++s)
      if (q->local[s]) SG_TRY(fill_local(p, d, s, 0));
  } else {
    for (int s = 0; s < 2; ++s)
      if (!q->local[s] && q->h[s] > 0) {
        sg_halo_pack_host(p->block, &q->rbox[s], p->esize, q->rbuf[s]);
        sg_halo_zero_host(p->block, &q->rbox[s], p->esize);
      }
    if (q->na) SG_MPI(MPI_Startall(q->na, q->areq));
    for (int s = 0; s < 2; ++s)
      if (q->local[s]) SG_TRY(fill_local(p, d, s, 1));
  }
fail:
  return st;
}

/* Adjoint: add what came back into the edge cells (the forward unpacks
 * each side as it arrives, in wait_fwd). */
static sg_status end_step(struct sg_halo_plan *p) {
  sg_status st = SG_OK;
  int d = step_dim(p, p->step);
  hdim *q = &p->dim[d];
  if (p->shm) return SG_OK; /* received in shm_pump */
  for (int s = 0; s < 2; ++s) {
    if (q->local[s]) continue;
    if (p->phase == PHASE_ADJ && q->s[s] > 0) {
      SG_TRY(sg_halo_unpack_add_host(p->block, &q->sbox[s], p->dtype,
                                     q->sbuf[s]));
    }
  }
fail:
  return st;
}

/* Forward step of dim q: complete what has arrived (all of it with wait),
 * unpacking each packed side as its message lands while the others are
 * still in flight. *done when nothing is pending. */
static sg_status wait_fwd(struct sg_halo_plan *p, hdim *q, int wait,
                          int *done) {
  sg_status st = SG_OK;
  sg_deadline dl;
  sg_deadline_start(&dl);
  const int timed = wait && dl.limit > 0; /* poll, to give up at the deadline */
  while (q->pending > 0) {
    int idx[8], out = 0;
    MPI_Status stats[8]; /* not MPI_STATUSES_IGNORE: gcc 12 misreads it */
    if (wait && !timed)
      SG_MPI(MPI_Waitsome(q->nreq, q->req, &out, idx, stats));
    else
      SG_MPI(MPI_Testsome(q->nreq, q->req, &out, idx, stats));
    if (timed && out == 0) {
      if (sg_deadline_passed(&dl))
        SG_TRY(halo_timeout(p, &dl, (int)(q - p->dim), -1, "MPI messages"));
      continue;
    }
    if (out == MPI_UNDEFINED) { /* no active request left */
      q->pending = 0;
      break;
    }
    for (int i = 0; i < out; ++i) {
      int s = q->unpack[idx[i]];
      --q->pending;
      if (s >= 0)
        sg_halo_unpack_host(p->block, &q->rbox[s], p->esize, q->rbuf[s]);
    }
    if (!wait) break;
  }
  *done = q->pending == 0;
fail:
  return st;
}

/* Advance as far as possible; with wait, to the end. */
static sg_status advance(struct sg_halo_plan *p, int wait, int *done) {
  sg_status st = SG_OK;
  while (p->step < p->ndims) {
    hdim *q = &p->dim[step_dim(p, p->step)];
    int n = p->phase == PHASE_ADJ ? q->na : 0;
    MPI_Request *r = q->areq;
    MPI_Status stats[8]; /* not MPI_STATUSES_IGNORE: gcc 12 misreads it */
    if (p->shm) {
      int ok = 0;
      SG_TRY(shm_pump(p, step_dim(p, p->step), wait, !wait, &ok));
      if (!ok) break;
      n = 0;
    } else if (p->phase == PHASE_FWD) {
      int ok = 0;
      SG_TRY(wait_fwd(p, q, wait, &ok));
      if (!ok) break;
    }
    if (n) {
      if (wait && sg_comm_timeout() > 0) {
        sg_deadline dl;
        sg_deadline_start(&dl);
        for (int flag = 0; !flag;) {
          SG_MPI(MPI_Testall(n, r, &flag, stats));
          if (!flag && sg_deadline_passed(&dl))
            SG_TRY(halo_timeout(p, &dl, step_dim(p, p->step), -1, "adjoint, MPI messages"));
        }
      } else if (wait) {
        SG_MPI(MPI_Waitall(n, r, stats));
      } else {
        int flag = 0;
        SG_MPI(MPI_Testall(n, r, &flag, stats));
        if (!flag) break;
      }
    }
    SG_TRY(end_step(p));
    ++p->step;
    if (p->step < p->ndims) SG_TRY(begin_step(p));
  }
  if (done) *done = p->step >= p->ndims;
fail:
  return st;
}

static sg_status start(struct sg_halo_plan *p, void *block, int phase,
                       const char *what) {
  sg_status st = SG_OK;
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL plan", what);
  if (p->phase != PHASE_IDLE)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: an exchange is already in flight", what);
  if (!block && p->count > 0)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL block", what);
  p->block = block;
  p->cur = -1;
  for (int j = 0; j < p->nblk; ++j)
    if (p->shm && p->bwin[j] >= 0 && block == p->blk[j]) p->cur = j;
  p->phase = phase;
  p->step = 0;
  SG_TRY(begin_step(p));
  SG_TRY(advance(p, 0, NULL));
fail:
  return st;
}

static sg_status finish(struct sg_halo_plan *p, int phase, const char *what) {
  sg_status st = SG_OK;
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "%s: NULL plan", what);
  if (p->phase != phase)
    SG_RAISE(SG_ERR_INVALID_ARG, "%s: no matching exchange was started", what);
  SG_TRY(advance(p, 1, NULL));
  p->phase = PHASE_IDLE;
  p->block = NULL;
  p->cur = -1;
fail:
  return st;
}

sg_status sg_halo_start(sg_halo_plan_t plan, void *block) {
  return start(plan, block, PHASE_FWD, "sg_halo_start");
}

sg_status sg_halo_progress(sg_halo_plan_t plan, int *done) {
  sg_status st = SG_OK;
  if (!plan) SG_RAISE(SG_ERR_INVALID_ARG, "sg_halo_progress: NULL plan");
  if (plan->phase == PHASE_IDLE) {
    if (done) *done = 1;
    return SG_OK;
  }
  SG_TRY(advance(plan, 0, done));
fail:
  return st;
}

sg_status sg_halo_finish(sg_halo_plan_t plan) {
  return finish(plan, PHASE_FWD, "sg_halo_finish");
}

sg_status sg_halo_exchange(sg_halo_plan_t plan, void *block) {
  sg_status st = SG_OK;
  SG_TRY(sg_halo_start(plan, block));
  SG_TRY(sg_halo_finish(plan));
fail:
  return st;
}

sg_status sg_halo_adjoint_start(sg_halo_plan_t plan, void *block) {
  return start(plan, block, PHASE_ADJ, "sg_halo_adjoint_start");
}

sg_status sg_halo_adjoint_finish(sg_halo_plan_t plan) {
  return finish(plan, PHASE_ADJ, "sg_halo_adjoint_finish");
}

sg_status sg_halo_adjoint(sg_halo_plan_t plan, void *block) {
  sg_status st = SG_OK;
  SG_TRY(sg_halo_adjoint_start(plan, block));
  SG_TRY(sg_halo_adjoint_finish(plan));
fail:
  return st;
}
