/* shardgrid — halo exchange plans: creation (validation, geometry,
 * neighbours, the communicator cache, persistent requests) and
 * destruction. The on-node path is in halo_shm.c, the exchange itself in
 * halo_exchange.c. */
#include "sg_halo.h"

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
    for (int s = 0; s < 2; ++s)
      desc->halo[d][s] = desc->margin[d][s] = width[d][s];
    desc->mesh_dim[d] = sg_decomp_mesh_dim(dec, d);
    desc->boundary[d] = sg_decomp_boundary(dec, d);
  }
fail:
  return st;
}

/* The region of the block along dim d from local index a, width w; dims
 * exchanged before d span their halos, dims after d their interior. */
sg_halo_box sg_halo_make_box(const struct sg_halo_plan *p, int d, int64_t a,
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
      for (int j = i;
           j > first && desc->strides[perm[j]] > desc->strides[perm[j - 1]];
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
               "halo plan: spatial dim %d on mesh dim %d (mesh has %d dims)", d,
               m, sg_mesh_ndims(mesh));
    for (int e = 0; e < d; ++e)
      if (m >= 0 && desc->mesh_dim[e] == m)
        SG_RAISE(SG_ERR_INVALID_ARG,
                 "halo plan: spatial dims %d and %d both on mesh dim %d", e, d,
                 m);
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

int sg_halo_plan_ndims(sg_halo_plan_t plan) { return plan ? plan->ndims : 0; }

int sg_halo_plan_step_dim(sg_halo_plan_t plan, int step) {
  return plan && step >= 0 && step < plan->ndims ? plan->order[step] : -1;
}

void sg_halo_plan_side(sg_halo_plan_t plan, int d, int s, sg_halo_side *side) {
  if (!plan || !side || d < 0 || d >= plan->ndims || s < 0 || s > 1) return;
  const hdim *q = &plan->dim[d];
  memset(side, 0, sizeof *side);
  side->local = q->local[s];
  side->peer = q->local[s] ? -1 : q->nb[s];
  side->n = q->n;
  side->h = q->h[s];
  side->s = q->s[s];
  side->boundary = plan->bnd[d];
  side->sbox = q->sbox[s];
  side->rbox = q->rbox[s];
}

sg_halo_box sg_halo_plan_box(sg_halo_plan_t plan, int d, int64_t a, int64_t w) {
  return sg_halo_make_box(plan, d, a, w);
}

int sg_halo_tag(const struct sg_halo_plan *p, int d, int up, int adjoint) {
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
      q->sbox[s] = sg_halo_make_box(p, d, s ? q->n - q->s[1] : 0, q->s[s]);
      q->rbox[s] = sg_halo_make_box(p, d, s ? q->n : -q->h[0], q->h[s]);
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
                               sg_halo_tag(p, d, s == 0, 0), p->comm,
                               &q->frecv[s]));
        SG_MPI(MPI_Send_init(q->rbuf[s], rb, MPI_BYTE, q->nb[s],
                             sg_halo_tag(p, d, s == 1, 1), p->comm,
                             &q->areq[q->na++]));
      }
      if (q->s[s] > 0) {
        if (!q->sdirect[s])
          SG_MPI(MPI_Send_init(q->sbuf[s], sb, MPI_BYTE, q->nb[s],
                               sg_halo_tag(p, d, s == 1, 0), p->comm,
                               &q->fsend[s]));
        SG_MPI(MPI_Recv_init(q->sbuf[s], sb, MPI_BYTE, q->nb[s],
                             sg_halo_tag(p, d, s == 0, 1), p->comm,
                             &q->areq[q->na++]));
      }
    }
  }
  (void)mesh;
  (void)desc;
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
      if (env && !strcmp(env, "pack"))
        p->path = HALO_PATH_PACK;
      else if ((env && !strcmp(env, "direct")) || (old && old[0] == '1'))
        p->path = HALO_PATH_DIRECT;
      else if (env && !strcmp(env, "mpi"))
        p->path = HALO_PATH_MPI;
      else if (env && !strcmp(env, "shm"))
        p->path = HALO_PATH_SHM;
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
    SG_MPI(MPI_Allgather(rec, REC_LEN, MPI_INT64_T, table, REC_LEN, MPI_INT64_T,
                         sg_group_comm(g)));
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
  SG_TRY(sg_halo_setup_shm(p));
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
size_t sg_halo_plan_send_bytes(sg_halo_plan_t plan) { return plan->send_bytes; }
const char *sg_halo_plan_path(sg_halo_plan_t plan) {
  if (plan->shm) return "shm";
  switch (plan->path) {
  case HALO_PATH_PACK: return "pack";
  case HALO_PATH_DIRECT: return "direct";
  default: return "mpi";
  }
}
