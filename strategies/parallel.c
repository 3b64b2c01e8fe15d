/* shardgrid — the parallel plan (see sg_parallel.h). */
#include "sg_parallel.h"

#include "precision_impl.h"

#include "sg_comm.h"
#include "sg_ddp.h"
#include "sg_decomp.h"
#include "sg_device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One parameter: its table entry and its ZeRO piece. */
typedef struct pl_param {
  sg_param_info info;
  char name[64];
  int layout;
  int64_t row;       /* elements per dim-0 row of the local box */
  int64_t own_row0;  /* first owned row of the local box */
  int64_t own_rows;  /* owned rows (ZeRO piece; the whole box when zero = 0) */
  int64_t moff;      /* offset of the piece in the optimizer state */
  sg_var *var;       /* its variable (sg_parallel_attach) */
  float *vfull;      /* zero 3: the gathered value while in use */
  sg_bf16 *vfull16;  /* zero 3 under the bf16 policy: what the gather receives */
  float *gfull;      /* zero >= 2: the full gradient during backward */
  int64_t *pcount, *pdispl; /* zero >= 1: every ZeRO-group rank's piece (elements) */
  sg_request_t rs_req;      /* zero >= 1: its reduce-scatter in flight */
  int rs_started;           /* zero 1: started in this step */
} pl_param;

/* A span: a contiguous run of the flat buffer whose parameters share a
 * layout, with its DDP reducer. */
typedef struct pl_span {
  int64_t off, n;
  sg_ddp_t ddp;
} pl_span;

/* Parameters that share (shard_dims): the same groups. */
typedef struct pl_layout {
  unsigned shard_dims, reduce_dims, zero_dims;
  sg_group_t reduce_g;     /* gradient reduction: data dims \ shard */
  sg_group_t zero_g;       /* ZeRO pieces: zero dims \ shard (NULL: none) */
  sg_group_t rest_g;       /* reduce \ zero: all-reduce of the pieces */
  sg_group_t norm_g;       /* zero \cup shard: the norm's distinct parts */
  int *members;            /* parameter indices, table order */
  int nmembers;
  int64_t *counts;         /* per ZeRO-group rank: elements of its pieces */
  int64_t npack;           /* elements of all members (the pack buffer) */
} pl_layout;

struct sg_parallel {
  sg_mesh_t mesh;
  sg_parallel_config cfg;
  sg_dim_role role[SG_MESH_MAX_DIMS];
  unsigned data_dims, zero_dims_all, domain_dims;
  int data_size, data_index;
  int np;
  pl_param *p;
  int nl;
  pl_layout *l;
  int nspan;
  pl_span *span;
  int64_t nlocal, nstate;
  float *params, *grads, *m, *v; /* params/grads: full local boxes (for
                                    zero 3 / zero >= 2 only until attach) */
  float *ppiece, *gpiece;        /* zero 3 / zero >= 2: the pieces */
  sg_var **var_sorted;           /* attached variables by address */
  int *var_index;
  int attached;
  float *pack, *piece; /* ZeRO scratch: npack max, counts max */
  int micro, nmicro;
  int hooked_reductions; /* DDP reducers get grad-ready marks */
  int hooked_rs;         /* zero >= 1, not deterministic: grad-ready starts reduce-scatters */
  int *rs_order;         /* reduce-scatters in flight, in start order: [rs_head, rs_tail) */
  int rs_head, rs_tail;
  int64_t rs_inflight;   /* zero >= 2: floats of full gradients in flight */
  int *uses;             /* zero 3: the parameters' use order (first micro-batch) */
  int nuses, cap_uses, uses_done;
  int in_window, use_pos; /* between begin_micro and the end of backward; the next event */
  int in_backward;        /* in the window, backward has begun */
  int pf;                /* zero 3: the parameter prefetched (-1: none) */
  sg_request_t pf_req;
  int64_t gathered, gathered_peak; /* zero 3: floats of gathered values held */
  sg_ckpt_array *ck;
  char (*ck_names)[96];
  pl_precision prec; /* mixed precision (precision_impl.h) */
};

static const char *const role_names[SG_DIM_ROLE_COUNT] = {"data",     "fsdp",     "domain", "tensor",
                                                          "pipeline", "sequence", "expert"};

const char *sg_dim_role_name(sg_dim_role r) {
  return (unsigned)r < SG_DIM_ROLE_COUNT ? role_names[r] : "invalid";
}

sg_status sg_dim_role_of(const char *name, sg_dim_role *role) {
  static const struct {
    const char *name;
    sg_dim_role role;
  } known[] = {{"dp", SG_DIM_ROLE_DATA},     {"fsdp", SG_DIM_ROLE_FSDP},    {"h", SG_DIM_ROLE_DOMAIN},
               {"w", SG_DIM_ROLE_DOMAIN},    {"d", SG_DIM_ROLE_DOMAIN},     {"tp", SG_DIM_ROLE_TENSOR},
               {"pp", SG_DIM_ROLE_PIPELINE}, {"sp", SG_DIM_ROLE_SEQUENCE},  {"cp", SG_DIM_ROLE_SEQUENCE},
               {"ep", SG_DIM_ROLE_EXPERT}};
  for (size_t i = 0; name && i < sizeof known / sizeof known[0]; ++i)
    if (strcmp(name, known[i].name) == 0) {
      *role = known[i].role;
      return SG_OK;
    }
  return sg_error_set(SG_ERR_MESH, __FILE__, __LINE__,
                      "mesh dim '%s' has no role in the parallel plan (known: dp, fsdp, h, w, d, tp, pp, sp, "
                      "cp, ep)",
                      name ? name : "(null)");
}

sg_parallel_config sg_parallel_defaults(void) {
  sg_parallel_config c;
  memset(&c, 0, sizeof c);
  c.adamw = sg_adamw_defaults();
  return c;
}

float *sg_parallel_params(sg_parallel_t p) { return p ? p->params : NULL; }
float *sg_parallel_grads(sg_parallel_t p) { return p ? p->grads : NULL; }
int64_t sg_parallel_local_count(sg_parallel_t p) { return p ? p->nlocal : 0; }
int64_t sg_parallel_state_count(sg_parallel_t p) { return p ? p->nstate : 0; }
unsigned sg_parallel_data_dims(sg_parallel_t p) { return p ? p->data_dims : 0u; }
int sg_parallel_data_size(sg_parallel_t p) { return p ? p->data_size : 1; }
int sg_parallel_data_index(sg_parallel_t p) { return p ? p->data_index : 0; }

int sg_parallel_dim_of(sg_parallel_t p, sg_dim_role role) {
  for (int d = 0; p && d < sg_mesh_ndims(p->mesh); ++d)
    if (p->role[d] == role) return d;
  return -1;
}

/* Rows [*r0, *r0 + *nr) of `rows` owned by part r of g (the balanced rule). */
static void split_rows(int64_t rows, int g, int r, int64_t *r0, int64_t *nr) {
  *r0 = sg_split_offset(rows, g, r);
  *nr = sg_split_size(rows, g, r);
}

static int64_t numel_of(const sg_param_info *pi) {
  int64_t n = 1;
  for (int d = 0; d < pi->ndim; ++d) n *= pi->count[d];
  return n;
}

/* DDP bucket size; also the bound on the full gradients of zero >= 2 whose
 * reduce-scatter is in flight. */
static int64_t bucket_elems(const struct sg_parallel *p) {
  return (p->cfg.bucket_bytes > 0 ? p->cfg.bucket_bytes : (int64_t)25 << 20) / (int64_t)sizeof(float);
}

/* ---- creation --------------------------------------------------------------- */

/* Mesh dims and their roles; what this plan does not do yet is refused. */
static sg_status plan_roles(struct sg_parallel *p) {
  sg_status st = SG_OK;
  const int nd = sg_mesh_ndims(p->mesh);
  p->data_size = 1;
  p->data_index = 0;
  for (int d = 0; d < nd; ++d) {
    const char *nm = sg_mesh_dim_name(p->mesh, d);
    const int sz = sg_mesh_dim_size(p->mesh, d);
    SG_TRY(sg_dim_role_of(nm, &p->role[d]));
    switch (p->role[d]) {
    case SG_DIM_ROLE_DATA:
    case SG_DIM_ROLE_FSDP:
      p->data_dims |= 1u << d;
      p->data_index = p->data_index * sz + sg_mesh_coord(p->mesh, d);
      p->data_size *= sz;
      if (p->role[d] == SG_DIM_ROLE_FSDP) p->zero_dims_all |= 1u << d;
      break;
    case SG_DIM_ROLE_DOMAIN:
      p->data_dims |= 1u << d;
      p->domain_dims |= 1u << d;
      break;
    default:
      if (sz > 1)
        SG_RAISE(SG_ERR_NOT_SUPPORTED,
                 "mesh dim '%s' (size %d): %s parallelism is not supported by the parallel plan yet "
                 "(supported: dp, fsdp, h, w, d; a size-1 %s dim is fine)",
                 nm, sz, role_names[p->role[d]], nm);
    }
  }
  if (p->cfg.zero < 0 || p->cfg.zero > 3)
    SG_RAISE(SG_ERR_CONFIG, "zero = %d: the ZeRO stage is 0 (DDP), 1 (optimizer state), 2 (+ gradients) or "
             "3 (+ parameters)", p->cfg.zero);
  if (p->cfg.shard_over_domain && p->cfg.zero >= 1) p->zero_dims_all |= p->domain_dims;
  unsigned fsdp_big = 0;
  for (int d = 0; d < nd; ++d)
    if (p->role[d] == SG_DIM_ROLE_FSDP && sg_mesh_dim_size(p->mesh, d) > 1) fsdp_big |= 1u << d;
  if (fsdp_big && p->cfg.zero == 0)
    SG_RAISE(SG_ERR_CONFIG, "mesh dim 'fsdp' shards the model state: set zero = 1, 2 or 3 (or use 'dp' for "
             "plain data parallelism)");
  int has_fsdp = 0;
  for (int d = 0; d < nd; ++d) has_fsdp |= p->role[d] == SG_DIM_ROLE_FSDP;
  if (p->cfg.zero >= 1 && !has_fsdp && !p->cfg.shard_over_domain)
    SG_RAISE(SG_ERR_CONFIG, "zero = %d shards over the 'fsdp' mesh dim (or the domain dims with "
             "zero_over_domain): this mesh has neither", p->cfg.zero);
  if (p->cfg.zero == 0) p->zero_dims_all = 0;
fail:
  return st;
}

/* Every rank must describe the same parameters (names, global shapes,
 * layouts); local boxes may differ. Collective. */
static sg_status plan_check_table(struct sg_parallel *p) {
  sg_status st = SG_OK;
  uint64_t h = 1469598103934665603ull;
#define PL_HASH(ptr, n)                                                                                         \
  do {                                                                                                        \
    const unsigned char *b_ = (const unsigned char *)(ptr);                                                   \
    for (size_t i_ = 0; i_ < (size_t)(n); ++i_) h = (h ^ b_[i_]) * 1099511628211ull;                           \
  } while (0)
  PL_HASH(&p->np, sizeof p->np);
  for (int i = 0; i < p->np; ++i) {
    const sg_param_info *pi = &p->p[i].info;
    PL_HASH(pi->name, strlen(pi->name));
    PL_HASH(&pi->ndim, sizeof pi->ndim);
    PL_HASH(pi->global_shape, (size_t)pi->ndim * sizeof *pi->global_shape);
    PL_HASH(&pi->shard_dims, sizeof pi->shard_dims);
  }
#undef PL_HASH
  unsigned long long hh[2] = {h, ~h}, mx[2];
  SG_MPI(MPI_Allreduce(hh, mx, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, sg_mesh_comm(p->mesh)));
  if (mx[0] != hh[0] || mx[1] != hh[1])
    SG_RAISE(SG_ERR_INVALID_ARG, "parallel plan: the ranks describe different parameter tables (names, "
             "global shapes or layouts differ)");
fail:
  return st;
}

static const pl_param *cmp_params;
static int cmp_by_offset(const void *a, const void *b) {
  int64_t x = cmp_params[*(const int *)a].info.offset, y = cmp_params[*(const int *)b].info.offset;
  return x < y ? -1 : x > y;
}

/* Table entries: validity on this rank. Not collective. */
static sg_status plan_params(struct sg_parallel *p, const sg_param_info *table) {
  sg_status st = SG_OK;
  int *by_offset = NULL, nby = 0;
  const unsigned all = (1u << sg_mesh_ndims(p->mesh)) - 1u;
  for (int i = 0; i < p->np; ++i) {
    pl_param *q = &p->p[i];
    q->info = table[i];
    if (!table[i].name || !*table[i].name)
      SG_RAISE(SG_ERR_INVALID_ARG, "parallel plan: parameter %d has no name", i);
    snprintf(q->name, sizeof q->name, "%s", table[i].name);
    q->info.name = q->name;
    const sg_param_info *pi = &q->info;
    if (pi->ndim < 1 || pi->ndim > SG_PARAM_MAX_DIMS)
      SG_RAISE(SG_ERR_INVALID_ARG, "parallel plan: parameter '%s' has %d dims", q->name, pi->ndim);
    if (pi->shard_dims & ~all)
      SG_RAISE(SG_ERR_INVALID_ARG, "parallel plan: parameter '%s' is Shard over mesh dims 0x%x the mesh lacks",
               q->name, pi->shard_dims);
    for (int d = 0; d < pi->ndim; ++d)
      if (pi->count[d] < 0 || pi->start[d] < 0 || pi->start[d] + pi->count[d] > pi->global_shape[d])
        SG_RAISE(SG_ERR_INVALID_ARG, "parallel plan: parameter '%s': box [%lld, +%lld) outside extent %lld "
                 "in dim %d", q->name, (long long)pi->start[d], (long long)pi->count[d],
                 (long long)pi->global_shape[d], d);
    if (numel_of(pi) != pi->numel || pi->offset < 0 || pi->offset + pi->numel > p->nlocal)
      SG_RAISE(SG_ERR_INVALID_ARG, "parallel plan: parameter '%s': %lld elements at offset %lld do not fit "
               "the %lld local floats", q->name, (long long)pi->numel, (long long)pi->offset,
               (long long)p->nlocal);
    q->row = pi->count[0] > 0 ? pi->numel / pi->count[0] : 0;
  }
  /* no two parameters overlap in the buffer: sorted by offset */
  by_offset = malloc((size_t)(p->np + 1) * sizeof *by_offset);
  if (!by_offset) SG_RAISE(SG_ERR_ALLOC, "parallel plan: out of memory");
  for (int i = 0; i < p->np; ++i)
    if (p->p[i].info.numel > 0) by_offset[nby++] = i;
  cmp_params = p->p;
  qsort(by_offset, (size_t)nby, sizeof *by_offset, cmp_by_offset);
  for (int k = 1; k < nby; ++k) {
    const pl_param *a = &p->p[by_offset[k - 1]], *b = &p->p[by_offset[k]];
    if (a->info.offset + a->info.numel > b->info.offset)
      SG_RAISE(SG_ERR_INVALID_ARG, "parallel plan: parameters '%s' and '%s' overlap in the flat buffer",
               a->name, b->name);
  }
fail:
  free(by_offset);
  return st;
}

/* Layouts, their groups, the ZeRO pieces and the DDP spans. Collective
 * (groups are made in the same order on every rank: the table is agreed). */
static sg_status plan_layouts(struct sg_parallel *p) {
  sg_status st = SG_OK;
  p->l = calloc((size_t)(p->np + 1), sizeof *p->l);
  if (!p->l) SG_RAISE(SG_ERR_ALLOC, "parallel plan: out of memory");
  for (int i = 0; i < p->np; ++i) {
    pl_param *q = &p->p[i];
    int k = 0;
    while (k < p->nl && p->l[k].shard_dims != q->info.shard_dims) ++k;
    if (k == p->nl) {
      pl_layout *L = &p->l[p->nl++];
      L->shard_dims = q->info.shard_dims;
      L->reduce_dims = p->data_dims & ~L->shard_dims;
      L->zero_dims = p->zero_dims_all & ~L->shard_dims;
      L->members = malloc((size_t)p->np * sizeof *L->members);
      if (!L->members) SG_RAISE(SG_ERR_ALLOC, "parallel plan: out of memory");
    }
    q->layout = k;
    p->l[k].members[p->l[k].nmembers++] = i;
  }
  int64_t maxpack = 0, maxpiece = 0;
  p->nstate = 0;
  for (int k = 0; k < p->nl; ++k) {
    pl_layout *L = &p->l[k];
    SG_TRY(sg_mesh_group(p->mesh, L->reduce_dims, &L->reduce_g));
    SG_TRY(sg_mesh_group(p->mesh, L->reduce_dims & ~L->zero_dims, &L->rest_g));
    SG_TRY(sg_mesh_group(p->mesh, L->zero_dims | L->shard_dims, &L->norm_g));
    if (L->zero_dims) SG_TRY(sg_mesh_group(p->mesh, L->zero_dims, &L->zero_g));
    const int g = L->zero_g ? sg_group_size(L->zero_g) : 1, me = L->zero_g ? sg_group_rank(L->zero_g) : 0;
    L->counts = calloc((size_t)g, sizeof *L->counts);
    if (!L->counts) SG_RAISE(SG_ERR_ALLOC, "parallel plan: out of memory");
    for (int j = 0; j < L->nmembers; ++j) {
      pl_param *q = &p->p[L->members[j]];
      const int64_t rows = q->info.numel > 0 ? q->info.count[0] : 0;
      for (int r = 0; r < g; ++r) {
        int64_t r0 = 0, nr = 0;
        split_rows(rows, g, r, &r0, &nr);
        L->counts[r] += nr * q->row;
        if (r == me) {
          q->own_row0 = r0;
          q->own_rows = nr;
        }
      }
      q->moff = p->nstate;
      p->nstate += q->own_rows * q->row;
      if (p->cfg.zero >= 1 && g > 1) { /* the pieces tile the box row-major, in rank order */
        q->pcount = malloc((size_t)g * sizeof *q->pcount);
        q->pdispl = malloc((size_t)g * sizeof *q->pdispl);
        if (!q->pcount || !q->pdispl) SG_RAISE(SG_ERR_ALLOC, "parallel plan: out of memory");
        for (int r = 0; r < g; ++r) {
          int64_t r0, nr;
          split_rows(rows, g, r, &r0, &nr);
          q->pcount[r] = nr * q->row;
          q->pdispl[r] = r0 * q->row;
        }
      }
      L->npack += q->info.numel;
    }
    if (L->npack > maxpack) maxpack = L->npack;
    if (L->counts[me] > maxpiece) maxpiece = L->counts[me];
  }
  sg_device h = sg_device_host();
  if ((p->cfg.zero == 1 || p->cfg.zero == 2) && maxpack > 0) { /* zero 3 gathers per parameter */
    SG_TRY(sg_malloc(h, (size_t)maxpack * sizeof(float), (void **)&p->pack));
    SG_TRY(sg_malloc(h, (size_t)(maxpiece + 1) * sizeof(float), (void **)&p->piece));
  }
  if (p->cfg.zero == 0) p->nstate = p->nlocal; /* the moments mirror the flat buffer */
  { /* a ZeRO dim of size > 1 with nothing to cut is a mistake, not DDP */
    long long cut = 0;
    for (int k = 0; k < p->nl; ++k)
      if (p->l[k].zero_g && sg_group_size(p->l[k].zero_g) > 1) cut += p->l[k].npack;
    SG_MPI(MPI_Allreduce(MPI_IN_PLACE, &cut, 1, MPI_LONG_LONG, MPI_MAX, sg_mesh_comm(p->mesh)));
    int big = 0;
    for (int d = 0; d < sg_mesh_ndims(p->mesh); ++d)
      big |= (p->zero_dims_all >> d & 1u) && sg_mesh_dim_size(p->mesh, d) > 1;
    if (big && cut == 0)
      SG_RAISE(SG_ERR_CONFIG, "zero = %d: the model has no parameter to shard over the ZeRO dims (every "
               "parameter is Shard over them already, or there are none)", p->cfg.zero);
  }
  /* DDP spans: runs of parameters of one layout, contiguous in the buffer
   * (an empty parameter joins any run). Where a run breaks is agreed over
   * the mesh, so every rank has the same spans (their lengths may differ:
   * sharded boxes). */
  int *brk = calloc((size_t)(p->np + 1), sizeof *brk);
  p->span = calloc((size_t)(p->np + 1), sizeof *p->span);
  if (!brk || !p->span) {
    free(brk);
    SG_RAISE(SG_ERR_ALLOC, "parallel plan: out of memory");
  }
  int64_t end = -1;
  for (int i = 0; i < p->np; ++i) {
    const pl_param *q = &p->p[i];
    brk[i] = i == 0 || q->layout != p->p[i - 1].layout || (q->info.numel > 0 && end >= 0 && q->info.offset != end);
    if (brk[i]) end = -1;
    if (q->info.numel > 0) end = q->info.offset + q->info.numel;
  }
  if (p->np > 0 && MPI_Allreduce(MPI_IN_PLACE, brk, p->np, MPI_INT, MPI_MAX, sg_mesh_comm(p->mesh)) != MPI_SUCCESS) {
    free(brk);
    SG_RAISE(SG_ERR_MPI, "parallel plan: MPI_Allreduce of the span breaks failed");
  }
  int *span_layout = brk; /* reused: the layout of each span */
  for (int i = 0; i < p->np; ++i) {
    const pl_param *q = &p->p[i];
    if (brk[i]) {
      p->span[p->nspan].off = 0;
      p->span[p->nspan].n = 0;
      span_layout[p->nspan] = q->layout;
      p->nspan++;
    }
    pl_span *sp = &p->span[p->nspan - 1];
    if (q->info.numel == 0) continue;
    if (sp->n == 0) sp->off = q->info.offset;
    sp->n += q->info.numel;
  }
  const int64_t bucket = bucket_elems(p);
  for (int k = 0; k < p->nspan && st == SG_OK && p->hooked_reductions; ++k)
    st = sg_ddp_create(p->mesh, p->l[span_layout[k]].reduce_dims, p->grads + p->span[k].off, p->span[k].n, bucket,
                       p->cfg.deterministic, &p->span[k].ddp);
  free(brk);
fail:
  return st;
}

sg_status sg_parallel_check_mesh(sg_mesh_t mesh, const sg_parallel_config *cfg, sg_parallel_mesh_info *info) {
  sg_status st = SG_OK;
  struct sg_parallel p;
  if (!mesh) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "sg_parallel_check_mesh: NULL mesh");
  memset(&p, 0, sizeof p);
  p.mesh = mesh;
  p.cfg = cfg ? *cfg : sg_parallel_defaults();
  st = sg_agree(sg_mesh_comm(mesh), plan_roles(&p));
  if (st == SG_OK && info) {
    info->batch_dims = p.data_dims & ~p.domain_dims;
    info->domain_dims = p.domain_dims;
    info->data_size = p.data_size;
    info->data_index = p.data_index;
  }
  return st;
}

sg_status sg_parallel_create(sg_mesh_t mesh, const sg_parallel_config *cfg, int nparams,
                             const sg_param_info *table, int64_t nlocal, sg_parallel_t *out) {
  sg_status st = SG_OK;
  struct sg_parallel *p = NULL;
  if (!mesh || !out) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "sg_parallel_create: NULL mesh or plan");
  *out = NULL;
  const MPI_Comm comm = sg_mesh_comm(mesh);
  if (nparams < 0 || nlocal < 0 || (nparams > 0 && !table))
    st = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "sg_parallel_create: %d parameters, %lld floats",
                      nparams, (long long)nlocal);
  if (st == SG_OK && !(p = calloc(1, sizeof *p)))
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "sg_parallel_create: out of memory");
  if (st == SG_OK) {
    p->mesh = mesh;
    p->cfg = cfg ? *cfg : sg_parallel_defaults();
    p->np = nparams;
    p->nlocal = nlocal;
    p->nmicro = 1;
    p->p = calloc((size_t)(nparams + 1), sizeof *p->p);
    p->rs_order = calloc((size_t)(nparams + 1), sizeof *p->rs_order);
    if (!p->p || !p->rs_order) st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "sg_parallel_create: out of memory");
  }
  if (st == SG_OK) st = plan_roles(p);
  if (st == SG_OK) st = pl_precision_check(&p->cfg);
  if (p) {
    p->prec.param_dt = p->cfg.param_dtype;
    p->prec.reduce_dt = p->cfg.reduce_dtype;
  }
  /* DDP reducers take grad-ready marks unless ZeRO reduce-scatters (not
   * deterministic; deterministic zero 1 sums DDP's buckets in fixed order,
   * zero >= 2 each gradient when it is ready) */
  if (p) p->hooked_reductions = p->cfg.zero == 0 || (p->cfg.zero == 1 && p->cfg.deterministic);
  if (p) p->hooked_rs = p->cfg.zero >= 1 && !p->cfg.deterministic;
  if (p) p->pf = -1;
  if (st == SG_OK) st = plan_params(p, table);
  SG_TRY(sg_agree(comm, st));
  SG_TRY(plan_check_table(p));
  {
    sg_device h = sg_device_host();
    size_t nb = (size_t)(nlocal + 1) * sizeof(float);
    st = sg_calloc(h, nb, (void **)&p->params);
    if (st == SG_OK) st = sg_calloc(h, nb, (void **)&p->grads);
    SG_TRY(sg_agree(comm, st));
  }
  st = plan_layouts(p);
  if (st == SG_OK) {
    sg_device h = sg_device_host();
    size_t nb = (size_t)(p->nstate + 1) * sizeof(float);
    st = sg_calloc(h, nb, (void **)&p->m);
    if (st == SG_OK) st = sg_calloc(h, nb, (void **)&p->v);
    if (st == SG_OK && p->cfg.zero >= 2) st = sg_calloc(h, nb, (void **)&p->gpiece);
    if (st == SG_OK && p->cfg.zero >= 3) st = sg_calloc(h, nb, (void **)&p->ppiece);
  }
  SG_TRY(sg_agree(comm, st));
  *out = p;
  return SG_OK;
fail:
  sg_parallel_destroy(&p);
  return st;
}

sg_status sg_parallel_destroy(sg_parallel_t *plan) {
  if (!plan || !*plan) return SG_OK;
  struct sg_parallel *p = *plan;
  sg_status st = sg_wait(&p->pf_req); /* nothing may still write a buffer freed here */
  for (int i = 0; i < p->np; ++i) {
    sg_status s2 = sg_wait(&p->p[i].rs_req);
    if (st == SG_OK) st = s2;
  }
  for (int k = 0; k < p->nspan; ++k) {
    sg_status s2 = sg_ddp_destroy(&p->span[k].ddp);
    if (st == SG_OK) st = s2;
  }
  for (int k = 0; k < p->nl; ++k) {
    free(p->l[k].members);
    free(p->l[k].counts);
  }
  sg_device h = sg_device_host();
  sg_free(h, (void **)&p->params);
  sg_free(h, (void **)&p->grads);
  sg_free(h, (void **)&p->m);
  sg_free(h, (void **)&p->v);
  sg_free(h, (void **)&p->pack);
  sg_free(h, (void **)&p->piece);
  sg_free(h, (void **)&p->ppiece);
  sg_free(h, (void **)&p->gpiece);
  for (int i = 0; i < p->np; ++i) {
    sg_free(h, (void **)&p->p[i].vfull);
    sg_free(h, (void **)&p->p[i].vfull16);
    sg_free(h, (void **)&p->p[i].gfull);
    free(p->p[i].pcount);
    free(p->p[i].pdispl);
  }
  free(p->var_sorted);
  free(p->var_index);
  free(p->rs_order);
  free(p->uses);
  free(p->l);
  free(p->span);
  free(p->p);
  free(p->ck);
  free(p->ck_names);
  pl_precision_free(&p->prec);
  free(p);
  *plan = NULL;
  return st;
}

void sg_parallel_describe(sg_parallel_t p, char *buf, size_t size) {
  if (!p || !buf || size == 0) return;
  size_t o = 0;
  o += (size_t)snprintf(buf + o, size - o, "zero %d", p->cfg.zero);
  if (p->zero_dims_all) {
    o += (size_t)snprintf(buf + o < buf + size ? buf + o : buf, o < size ? size - o : 0, " over");
    for (int d = 0, first = 1; d < sg_mesh_ndims(p->mesh) && o < size; ++d)
      if (p->zero_dims_all & (1u << d)) {
        o += (size_t)snprintf(buf + o, size - o, "%s%s", first ? " " : ",", sg_mesh_dim_name(p->mesh, d));
        first = 0;
      }
  }
  if (o < size)
    o += (size_t)snprintf(buf + o, size - o, "; %d data replicas; %d layouts, %d spans; %lld floats, %lld of "
                          "optimizer state per moment", p->data_size, p->nl, p->nspan, (long long)p->nlocal,
                          (long long)p->nstate);
  if (o < size && p->cfg.param_dtype == SG_DTYPE_BF16)
    snprintf(buf + o, size - o, "; bf16 compute, f32 master weights, %s reductions", sg_dtype_name(p->cfg.reduce_dtype));
}

/* ---- hooks --------------------------------------------------------------------- */

/* The span holding offset off (spans are few: linear). */
static pl_span *span_at(struct sg_parallel *p, int64_t off) {
  for (int k = 0; k < p->nspan; ++k)
    if (off >= p->span[k].off && off < p->span[k].off + p->span[k].n) return &p->span[k];
  return NULL;
}

/* The table entry of an attached variable, -1 if none (binary search). */
static int param_of_var(const struct sg_parallel *p, const sg_var *v) {
  int lo = 0, hi = p->np - 1;
  while (p->var_sorted && lo <= hi) {
    int mid = (lo + hi) / 2;
    if ((uintptr_t)v < (uintptr_t)p->var_sorted[mid]) hi = mid - 1;
    else if ((uintptr_t)v > (uintptr_t)p->var_sorted[mid]) lo = mid + 1;
    else return p->var_index[mid];
  }
  return -1;
}

/* ZeRO group of parameter q and its size and rank (1, 0 without one). */
static sg_group_t zgroup(const struct sg_parallel *p, const pl_param *q, int *g, int *me) {
  sg_group_t zg = p->l[q->layout].zero_g;
  *g = zg ? sg_group_size(zg) : 1;
  *me = zg ? sg_group_rank(zg) : 0;
  return zg;
}

/* zero 3: the whole local box of q from the pieces of its ZeRO group. */
static sg_status gather_value(struct sg_parallel *p, pl_param *q, float *out) {
  sg_status st = SG_OK;
  int g, me;
  sg_group_t zg = zgroup(p, q, &g, &me);
  if (!zg || g == 1) memcpy(out, p->ppiece + q->moff, (size_t)q->info.numel * sizeof *out);
  else SG_TRY(sg_allgatherv(zg, p->ppiece + q->moff, q->pcount[me], out, q->pcount, q->pdispl, SG_DTYPE_F32));
fail:
  return st;
}

/* zero 3: what the gather of q for a use sends (its piece) and receives:
 * the master piece in f32, or under the bf16 policy its bf16 values (half
 * the bytes), widened into vfull by use_widen once they are in. */
static sg_status use_buffers(struct sg_parallel *p, pl_param *q, const void **send, void **recv, sg_dtype *dt) {
  sg_status st = SG_OK;
  *dt = SG_DTYPE_F32;
  *send = p->ppiece + q->moff;
  *recv = q->vfull;
  if (p->prec.param_dt == SG_DTYPE_BF16) {
    const sg_bf16 *pieces = pl_precision_pieces(&p->prec, p->ppiece, p->nstate);
    if (!pieces) SG_RAISE(SG_ERR_ALLOC, "parallel plan: out of memory for the bf16 pieces");
    *dt = SG_DTYPE_BF16;
    *send = pieces + q->moff;
    *recv = q->vfull16;
  }
fail:
  return st;
}

static void use_widen(pl_param *q) {
  if (q->vfull16) (void)sg_dtype_convert(q->vfull16, SG_DTYPE_BF16, q->vfull, SG_DTYPE_F32, q->info.numel);
}

/* zero 3: q's value for a use into vfull (allocated): a copy of the piece
 * when the group has one rank, else the all-gather of use_buffers. */
static sg_status gather_use(struct sg_parallel *p, pl_param *q) {
  sg_status st = SG_OK;
  int g, me;
  sg_group_t zg = zgroup(p, q, &g, &me);
  if (!zg || g == 1) return gather_value(p, q, q->vfull);
  const void *send;
  void *recv;
  sg_dtype dt;
  SG_TRY(use_buffers(p, q, &send, &recv, &dt));
  SG_TRY(sg_allgatherv(zg, send, q->pcount[me], recv, q->pcount, q->pdispl, dt));
  use_widen(q);
fail:
  return st;
}

/* zero 3: q's gathered value (vfull), counted in the floats gathered at
 * once (sg_parallel_gathered_peak). */
static sg_status vfull_alloc(struct sg_parallel *p, pl_param *q) {
  sg_status st = sg_malloc(sg_device_host(), (size_t)q->info.numel * sizeof(float), (void **)&q->vfull);
  if (st == SG_OK && p->prec.param_dt == SG_DTYPE_BF16)
    st = sg_malloc(sg_device_host(), (size_t)q->info.numel * sizeof(sg_bf16), (void **)&q->vfull16);
  if (st == SG_OK && (p->gathered += q->info.numel) > p->gathered_peak) p->gathered_peak = p->gathered;
  return st;
}

static void vfull_free(struct sg_parallel *p, pl_param *q) {
  if (!q->vfull) return;
  p->gathered -= q->info.numel;
  sg_free(sg_device_host(), (void **)&q->vfull);
  sg_free(sg_device_host(), (void **)&q->vfull16);
}

/* ---- zero 3: prefetch -------------------------------------------------------
 * The first micro-batch records the order of the parameters' uses (every
 * pre-use and pre-backward event: forward, then backward with a
 * checkpointed block's recomputation in place); later micro-batches replay
 * it: when the parameter of event k is about to be used, the all-gather of
 * event k+1's parameter starts, non-blocking, so it moves while event k's op
 * computes, and its pre-use waits for it. At most the parameters of the op
 * in use plus that one are gathered at once. The events are the same on
 * every rank (the same ops in the same order), hence so are the predictions
 * and the collectives; whether a gather is needed depends only on the
 * parameter's own box, alike over its ZeRO group. A use that differs from
 * the recording (another code path) drops the prefetch and stops
 * predicting until the next micro-batch. */

/* Parameter i is about to be used: record the event, or check it against
 * the recording and return the next event's parameter (-1: none). */
static sg_status use_event(struct sg_parallel *p, int i, int *next) {
  sg_status st = SG_OK;
  *next = -1;
  if (!p->in_window) return SG_OK;
  if (!p->uses_done) {
    if (p->nuses == p->cap_uses) {
      const int cap = p->cap_uses ? 2 * p->cap_uses : 64;
      int *u = realloc(p->uses, (size_t)cap * sizeof *u);
      if (!u) SG_RAISE(SG_ERR_ALLOC, "parallel plan: out of memory for the prefetch order");
      p->uses = u;
      p->cap_uses = cap;
    }
    p->uses[p->nuses++] = i;
  } else if (p->use_pos < 0 || p->use_pos >= p->nuses || p->uses[p->use_pos] != i) {
    p->use_pos = -1;
  } else if (++p->use_pos < p->nuses) {
    *next = p->uses[p->use_pos];
  }
fail:
  return st;
}

/* Wait for the prefetch in flight and drop it (a misprediction, or the end
 * of a backward). Not collective. */
static sg_status prefetch_drop(struct sg_parallel *p) {
  if (p->pf < 0) return SG_OK;
  sg_status st = sg_wait(&p->pf_req);
  vfull_free(p, &p->p[p->pf]);
  p->pf = -1;
  return st;
}

/* Start the all-gather of parameter j, unless it is gathered already or has
 * nothing to move (empty, or one piece: copied at its use). */
static sg_status prefetch_start(struct sg_parallel *p, int j) {
  sg_status st = SG_OK;
  pl_param *q = &p->p[j];
  int g, me;
  sg_group_t zg = zgroup(p, q, &g, &me);
  if (p->pf >= 0 || q->info.numel == 0 || q->var->value.data || q->vfull || !zg || g == 1) return SG_OK;
  SG_TRY(vfull_alloc(p, q));
  const void *send;
  void *recv;
  sg_dtype dt;
  SG_TRY(use_buffers(p, q, &send, &recv, &dt));
  SG_TRY(sg_iallgatherv(zg, send, q->pcount[me], recv, q->pcount, q->pdispl, dt, &p->pf_req));
  p->pf = j;
fail:
  if (st != SG_OK) vfull_free(p, q);
  return st;
}

static sg_status on_pre_use(sg_var *v, void *user) {
  struct sg_parallel *p = user;
  sg_status st = SG_OK;
  const int i = p->cfg.zero >= 3 ? param_of_var(p, v) : -1;
  if (i < 0) return SG_OK;
  pl_param *q = &p->p[i];
  int next;
  SG_TRY(use_event(p, i, &next));
  if (p->pf >= 0 && p->pf != i) SG_TRY(prefetch_drop(p));
  if (q->info.numel > 0 && !v->value.data) {
    if (p->pf == i) { /* prefetched: in flight since the previous use */
      p->pf = -1;
      SG_TRY(sg_wait(&p->pf_req));
      use_widen(q);
    } else {
      SG_TRY(vfull_alloc(p, q));
      SG_TRY(gather_use(p, q));
    }
    v->value.data = q->vfull;
  }
  if (next >= 0) SG_TRY(prefetch_start(p, next));
fail:
  return st;
}

static sg_status on_post_use(sg_var *v, void *user) {
  struct sg_parallel *p = user;
  const int i = p->cfg.zero >= 3 ? param_of_var(p, v) : -1;
  if (i < 0 || !p->p[i].vfull || p->pf == i) return SG_OK;
  const int next = p->in_window && p->uses_done && p->use_pos >= 0 && p->use_pos < p->nuses
                       ? p->uses[p->use_pos] : -1;
  /* in backward, a parameter whose use comes next stays gathered (freeing
   * it would gather it again at once): the last op of a checkpointed
   * block's recomputation hands its parameter to its backward. Not between
   * forward and backward: that gather is one the traffic model counts. */
  if (p->in_backward && next == i) return SG_OK;
  v->value.data = NULL;
  vfull_free(p, &p->p[i]);
  /* the next use's parameter may have been in use when it was predicted
   * (the last layer's weight between forward and backward): gather it now */
  return next >= 0 ? prefetch_start(p, next) : SG_OK;
}

/* ---- ZeRO reduce-scatters (zero >= 1, not deterministic) ---------------------
 * A parameter's reduce-scatter over its ZeRO group starts, non-blocking,
 * from its grad-ready hook while backward goes on (zero 1: in the last
 * micro-batch only), in place on its full gradient (the piece lands in the
 * first elements). They complete in start order: zero >= 2 completes the
 * oldest ones when the full gradients in flight pass the bucket size (the
 * memory bound), sg_parallel_reduce (and a new micro-batch) the rest. Only
 * the starts are collective, and they come in grad-ready order, the same on
 * every rank; completions are local. The all-reduce of the pieces over the
 * other data dims (HSDP) runs once per step, over the accumulated pieces
 * (rs_finish). Deterministic mode keeps the fixed-order all-reduce over the
 * whole group (DDP's bits). */

/* q's full local gradient: its box of the flat buffer (zero 1), or the
 * buffer it has during backward (zero >= 2). */
static float *full_grad(const struct sg_parallel *p, const pl_param *q) {
  return p->cfg.zero == 1 ? p->grads + q->info.offset : q->gfull;
}

/* Complete the oldest reduce-scatter in flight: its piece goes to the owned
 * rows of the flat buffer (zero 1), or is added to the piece (zero >= 2:
 * micro-batches accumulate) and the full gradient freed. Not collective. */
static sg_status rs_complete(struct sg_parallel *p) {
  sg_status st = SG_OK;
  pl_param *q = &p->p[p->rs_order[p->rs_head++]];
  float *full = full_grad(p, q);
  const int64_t n = q->own_rows * q->row;
  SG_TRY(sg_wait(&q->rs_req));
  if (p->cfg.zero == 1) {
    memmove(full + q->own_row0 * q->row, full, (size_t)n * sizeof *full);
  } else {
    float *dst = p->gpiece + q->moff;
    for (int64_t k = 0; k < n; ++k) dst[k] += full[k];
    p->rs_inflight -= q->info.numel;
    sg_free(sg_device_host(), (void **)&q->gfull);
  }
fail:
  if (p->rs_head == p->rs_tail) p->rs_head = p->rs_tail = 0;
  return st;
}

static sg_status rs_drain(struct sg_parallel *p) {
  sg_status st = SG_OK;
  while (st == SG_OK && p->rs_head < p->rs_tail) st = rs_complete(p);
  return st;
}

/* Start parameter i's reduce-scatter (nothing to start with one piece: the
 * box is the piece). Collective over its ZeRO group (non-blocking). */
static sg_status rs_start(struct sg_parallel *p, int i) {
  sg_status st = SG_OK;
  pl_param *q = &p->p[i];
  int g, me;
  sg_group_t zg = zgroup(p, q, &g, &me);
  float *full = full_grad(p, q);
  if (p->rs_tail == p->np) SG_TRY(rs_drain(p)); /* a backward without begin_micro */
  q->rs_started = 1;
  if (zg && g > 1) SG_TRY(sg_ireduce_scatter(zg, full, full, q->pcount, SG_DTYPE_F32, SG_REDUCE_SUM, &q->rs_req));
  p->rs_order[p->rs_tail++] = i;
  if (p->cfg.zero >= 2) p->rs_inflight += q->info.numel;
  while (p->cfg.zero >= 2 && p->rs_inflight > bucket_elems(p) && p->rs_tail - p->rs_head > 1)
    SG_TRY(rs_complete(p));
fail:
  return st;
}

/* zero >= 2, deterministic: the fixed-order all-reduce of q's full gradient
 * over the whole group (DDP's bits), its rows added to the piece, the full
 * gradient freed. */
static sg_status reduce_piece_det(struct sg_parallel *p, pl_param *q) {
  sg_status st = SG_OK;
  const pl_layout *L = &p->l[q->layout];
  const int64_t n = q->own_rows * q->row;
  if (sg_group_size(L->reduce_g) > 1)
    SG_TRY(sg_allreduce_det(L->reduce_g, q->gfull, q->gfull, q->info.numel, SG_DTYPE_F32, SG_REDUCE_SUM));
  const float *src = q->gfull + q->own_row0 * q->row;
  float *dst = p->gpiece + q->moff;
  for (int64_t k = 0; k < n; ++k) dst[k] += src[k];
fail:
  sg_free(sg_device_host(), (void **)&q->gfull);
  return st;
}

static sg_status on_pre_backward(sg_var *v, void *user) {
  struct sg_parallel *p = user;
  sg_status st = SG_OK;
  const int i = p->cfg.zero >= 2 ? param_of_var(p, v) : -1;
  if (i < 0) return SG_OK;
  pl_param *q = &p->p[i];
  p->in_backward = p->in_window;
  SG_TRY(on_pre_use(v, user));
  if (q->info.numel == 0) return SG_OK;
  if (q->gfull && !v->grad.data) SG_TRY(rs_drain(p)); /* still in flight from a backward without begin_micro */
  if (!v->grad.data) { /* the full gradient until it is ready */
    SG_TRY(sg_calloc(sg_device_host(), (size_t)q->info.numel * sizeof(float), (void **)&q->gfull));
    v->grad.data = q->gfull;
  }
fail:
  return st;
}

static sg_status on_grad_ready(sg_var *v, void *user) {
  struct sg_parallel *p = user;
  const int i = param_of_var(p, v);
  if (i < 0 || p->p[i].info.numel == 0) return SG_OK; /* not one of the plan's */
  pl_param *q = &p->p[i];
  if (p->cfg.zero >= 2) {
    if (!q->gfull) return sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__, "parallel plan: '%s' has no gradient", q->name);
    v->grad.data = NULL; /* the tape is done with it; the buffer lives until the reduction completes */
    return p->cfg.deterministic ? reduce_piece_det(p, q) : rs_start(p, i);
  }
  if (p->micro != p->nmicro - 1) return SG_OK; /* no_sync */
  if (p->hooked_rs) return rs_start(p, i);
  if (!p->hooked_reductions) return SG_OK;
  pl_span *sp = span_at(p, q->info.offset);
  if (!sp) return sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__, "parallel plan: '%s' is in no span", q->name);
  return sg_ddp_mark_ready(sp->ddp, q->info.offset - sp->off, q->info.numel);
}

/* zero 3, between ops: nothing stays prefetched or gathered (a parameter
 * kept for a next use that did not come: its value would be stale after
 * the step). Not collective. */
static sg_status release_gathered(struct sg_parallel *p) {
  const sg_status st = prefetch_drop(p);
  for (int i = 0; i < p->np; ++i)
    if (p->p[i].vfull) {
      p->p[i].var->value.data = NULL;
      vfull_free(p, &p->p[i]);
    }
  return st;
}

/* The end of a backward: the recording of the uses (first micro-batch) is
 * complete, and every gathered value is freed. */
static sg_status on_post_backward(sg_tape_t tape, void *user) {
  struct sg_parallel *p = user;
  (void)tape;
  if (p->in_window) p->uses_done = 1;
  p->in_window = p->in_backward = 0;
  return release_gathered(p);
}

static sg_var **sort_vars_base;
static int cmp_var(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)sort_vars_base[*(const int *)a], y = (uintptr_t)sort_vars_base[*(const int *)b];
  return x < y ? -1 : x > y;
}

sg_status sg_parallel_attach(sg_parallel_t p, sg_tape_t tape, sg_var *const *vars) {
  sg_status st = SG_OK;
  if (!p || !tape || (p->np > 0 && !vars)) SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_attach: NULL plan, tape or variables");
  if (p->attached) SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_attach: the plan is attached already");
  p->var_sorted = malloc((size_t)(p->np + 1) * sizeof *p->var_sorted);
  p->var_index = malloc((size_t)(p->np + 1) * sizeof *p->var_index);
  if (!p->var_sorted || !p->var_index) SG_RAISE(SG_ERR_ALLOC, "parallel plan: out of memory");
  for (int i = 0; i < p->np; ++i) {
    if (!vars[i]) SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_attach: variable %d ('%s') is NULL", i, p->p[i].name);
    if (vars[i]->value.data != (void *)(p->params + p->p[i].info.offset) && p->p[i].info.numel > 0)
      SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_attach: variable %d ('%s') is not bound to the plan's buffer",
               i, p->p[i].name);
    p->p[i].var = vars[i];
    p->var_index[i] = i;
  }
  sort_vars_base = (sg_var **)vars;
  qsort(p->var_index, (size_t)p->np, sizeof *p->var_index, cmp_var);
  for (int k = 0; k < p->np; ++k) p->var_sorted[k] = vars[p->var_index[k]];
  sg_device h = sg_device_host();
  if (p->cfg.zero >= 2) { /* gradients live in the pieces; full ones only during backward */
    for (int i = 0; i < p->np; ++i) {
      p->p[i].var->grad.data = NULL;
      p->p[i].var->owns_grad = 0;
    }
    sg_free(h, (void **)&p->grads);
  }
  if (p->cfg.zero >= 3) { /* parameters too: each rank keeps its pieces */
    for (int i = 0; i < p->np; ++i) {
      const pl_param *q = &p->p[i];
      memcpy(p->ppiece + q->moff, p->params + q->info.offset + q->own_row0 * q->row,
             (size_t)(q->own_rows * q->row) * sizeof(float));
      q->var->value.data = NULL;
    }
    sg_free(h, (void **)&p->params);
  }
  SG_TRY(pl_precision_attach_grads(&p->prec, tape)); /* rounds before the plan reduces */
  sg_hooks hk;
  memset(&hk, 0, sizeof hk);
  hk.pre_use = on_pre_use;
  hk.post_use = on_post_use;
  hk.pre_backward = on_pre_backward;
  hk.post_backward_use = on_post_use;
  hk.grad_ready = on_grad_ready;
  hk.post_backward = on_post_backward;
  hk.user = p;
  SG_TRY(sg_tape_add_hooks(tape, &hk, NULL));
  SG_TRY(pl_precision_attach_values(&p->prec, tape, p->params, p->nlocal, p->np, vars)); /* after the gathers */
  sg_tape_set_comm(tape, sg_mesh_comm(p->mesh));
  p->attached = 1;
fail:
  return st;
}

sg_status sg_parallel_begin_micro(sg_parallel_t p, int k, int n) {
  sg_status st = SG_OK;
  if (!p || n < 1 || k < 0 || k >= n)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_begin_micro: micro-batch %d of %d", k, n);
  p->micro = k;
  p->nmicro = n;
  /* the previous micro-batch's reduce-scatters complete before its gradient
   * buffers are used again; a new window of uses to record or replay */
  SG_TRY(rs_drain(p));
  SG_TRY(release_gathered(p));
  p->in_window = 1;
  p->in_backward = 0;
  p->use_pos = 0;
  if (!p->uses_done) p->nuses = 0;
  if (k == n - 1 && p->hooked_reductions)
    for (int s = 0; s < p->nspan; ++s) SG_TRY(sg_ddp_begin(p->span[s].ddp));
fail:
  return st;
}

/* ---- reduction, norm, step --------------------------------------------------- */

/* The members of layout L between buf and pack, pack in ZeRO-group rank
 * order: rank r's rows of every member, members in table order
 * (to_pack: buf -> pack, else pack -> buf). */
static void zero_pack(const struct sg_parallel *p, const pl_layout *L, float *buf, float *pack, int to_pack) {
  const int g = L->zero_g ? sg_group_size(L->zero_g) : 1;
  int64_t o = 0;
  for (int r = 0; r < g; ++r)
    for (int j = 0; j < L->nmembers; ++j) {
      const pl_param *q = &p->p[L->members[j]];
      const int64_t rows = q->info.numel > 0 ? q->info.count[0] : 0;
      int64_t r0, nr;
      split_rows(rows, g, r, &r0, &nr);
      float *b = buf + q->info.offset + r0 * q->row;
      const size_t nb = (size_t)(nr * q->row) * sizeof *pack;
      if (to_pack) memcpy(pack + o, b, nb);
      else memcpy(b, pack + o, nb);
      o += nr * q->row;
    }
}

/* This rank's pieces of layout L (members in table order) <-> buf. */
static void piece_io(const struct sg_parallel *p, const pl_layout *L, float *buf, float *piece, int to_piece) {
  int64_t o = 0;
  for (int j = 0; j < L->nmembers; ++j) {
    const pl_param *q = &p->p[L->members[j]];
    float *b = buf + q->info.offset + q->own_row0 * q->row;
    const size_t nb = (size_t)(q->own_rows * q->row) * sizeof *b;
    if (to_piece) memcpy(piece + o, b, nb);
    else memcpy(b, piece + o, nb);
    o += q->own_rows * q->row;
  }
}

/* HSDP: layout L's pieces summed over the data dims outside its ZeRO group
 * (the pieces of zero >= 2 are contiguous per layout). Collective. */
static sg_status rest_reduce(struct sg_parallel *p, const pl_layout *L) {
  sg_status st = SG_OK;
  const int64_t n = L->counts[L->zero_g ? sg_group_rank(L->zero_g) : 0];
  if (sg_group_size(L->rest_g) == 1) return SG_OK;
  if (p->gpiece) {
    float *b = p->gpiece + p->p[L->members[0]].moff;
    SG_TRY(sg_allreduce(L->rest_g, b, b, n, SG_DTYPE_F32, SG_REDUCE_SUM));
  } else {
    piece_io(p, L, p->grads, p->piece, 1);
    SG_TRY(sg_allreduce(L->rest_g, p->piece, p->piece, n, SG_DTYPE_F32, SG_REDUCE_SUM));
    piece_io(p, L, p->grads, p->piece, 0);
  }
fail:
  return st;
}

/* ZeRO, not deterministic: start what grad-ready did not (zero 1: a plan
 * used without hooks, or parameters without a use this step; in table
 * order, alike on every rank), complete every reduce-scatter, then the
 * HSDP all-reduce. Collective. */
static sg_status rs_finish(struct sg_parallel *p) {
  sg_status st = SG_OK;
  for (int i = 0; i < p->np && p->cfg.zero == 1; ++i)
    if (p->p[i].info.numel > 0 && !p->p[i].rs_started) SG_TRY(rs_start(p, i));
  SG_TRY(rs_drain(p));
  for (int k = 0; k < p->nl; ++k) SG_TRY(rest_reduce(p, &p->l[k]));
fail:
  for (int i = 0; i < p->np; ++i) p->p[i].rs_started = 0;
  return st;
}

/* Sum of squares of what this rank updates of layout L. */
static double layout_sumsq(const struct sg_parallel *p, const pl_layout *L) {
  double s = 0.0;
  for (int j = 0; j < L->nmembers; ++j) {
    const pl_param *q = &p->p[L->members[j]];
    const float *g = p->gpiece ? p->gpiece + q->moff : p->grads + q->info.offset + q->own_row0 * q->row;
    s += sg_sumsq_f32(g, q->own_rows * q->row);
  }
  return s;
}

sg_status sg_parallel_reduce(sg_parallel_t p, double *grad_norm) {
  sg_status st = SG_OK;
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_reduce: NULL plan");
  if (p->cfg.zero >= 2 && !p->attached)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_reduce: zero = %d reduces through the tape's hooks: attach the "
             "plan first", p->cfg.zero);
  if (p->hooked_reductions)
    for (int k = 0; k < p->nspan; ++k) SG_TRY(sg_ddp_finish(p->span[k].ddp, 1.0));
  else if (p->hooked_rs)
    SG_TRY(rs_finish(p));
  /* zero >= 2, deterministic: every piece was reduced when its gradient was ready */
  double total = 0.0;
  for (int k = 0; k < p->nl; ++k) {
    double s = layout_sumsq(p, &p->l[k]);
    if (sg_group_size(p->l[k].norm_g) > 1)
      SG_TRY(sg_allreduce_det(p->l[k].norm_g, &s, &s, 1, SG_DTYPE_F64, SG_REDUCE_SUM));
    total += s;
  }
  if (grad_norm) *grad_norm = sqrt(total);
fail:
  return st;
}

sg_status sg_parallel_step(sg_parallel_t p, int64_t t, double lr, double grad_scale) {
  sg_status st = SG_OK;
  if (!p || t < 1) SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_step: NULL plan or step %lld < 1", (long long)t);
  if (p->cfg.zero == 0) {
    SG_TRY(sg_adamw_step_f32(p->params, p->grads, p->m, p->v, p->nlocal, t, lr, grad_scale, &p->cfg.adamw));
  } else {
    for (int i = 0; i < p->np; ++i) {
      const pl_param *q = &p->p[i];
      const int64_t o = q->info.offset + q->own_row0 * q->row, n = q->own_rows * q->row;
      float *w = p->ppiece ? p->ppiece + q->moff : p->params + o;
      const float *g = p->gpiece ? p->gpiece + q->moff : p->grads + o;
      if (n > 0)
        SG_TRY(sg_adamw_step_f32(w, g, p->m + q->moff, p->v + q->moff, n, t, lr, grad_scale, &p->cfg.adamw));
    }
    for (int k = 0; k < p->nl && p->cfg.zero <= 2; ++k) { /* zero 3 keeps the pieces */
      pl_layout *L = &p->l[k];
      if (!L->zero_g || sg_group_size(L->zero_g) == 1) continue;
      const int me = sg_group_rank(L->zero_g);
      piece_io(p, L, p->params, p->piece, 1);
      SG_TRY(sg_allgatherv(L->zero_g, p->piece, L->counts[me], p->pack, L->counts, NULL, SG_DTYPE_F32));
      zero_pack(p, L, p->params, p->pack, 0);
    }
  }
  if (p->gpiece) memset(p->gpiece, 0, (size_t)p->nstate * sizeof *p->gpiece);
  else memset(p->grads, 0, (size_t)p->nlocal * sizeof *p->grads);
  pl_precision_invalidate(&p->prec);
fail:
  return st;
}

int64_t sg_parallel_gathered_peak(sg_parallel_t p) {
  if (!p) return 0;
  const int64_t pk = p->gathered_peak;
  p->gathered_peak = p->gathered;
  return pk;
}

sg_status sg_parallel_gather_param(sg_parallel_t p, int i, float *out) {
  sg_status st = SG_OK;
  if (!p || i < 0 || i >= p->np || (!out && p->p[i].info.numel > 0))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_gather_param: bad plan, index %d or buffer", i);
  pl_param *q = &p->p[i];
  if (q->info.numel == 0) goto fail;
  if (p->ppiece) SG_TRY(gather_value(p, q, out));
  else memcpy(out, p->params + q->info.offset, (size_t)q->info.numel * sizeof *out);
fail:
  return st;
}

/* ---- replicas and checkpoints ------------------------------------------------ */

static uint64_t fnv1a(const void *ptr, size_t n) {
  const unsigned char *b = ptr;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

sg_status sg_parallel_check_replicas(sg_parallel_t p, int64_t step) {
  sg_status st = SG_OK;
  uint64_t *lo = NULL, *hi = NULL;
  if (!p) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "sg_parallel_check_replicas: NULL plan");
  lo = malloc((size_t)(p->np + 1) * sizeof *lo);
  hi = malloc((size_t)(p->np + 1) * sizeof *hi);
  if (!lo || !hi) st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  SG_TRY(sg_agree(sg_mesh_comm(p->mesh), st));
  const unsigned all = (1u << sg_mesh_ndims(p->mesh)) - 1u;
  for (int i = 0; i < p->np; ++i) {
    const pl_param *q = &p->p[i];
    lo[i] = hi[i] = p->ppiece ? fnv1a(p->ppiece + q->moff, (size_t)(q->own_rows * q->row) * sizeof(float))
                              : fnv1a(p->params + q->info.offset, (size_t)q->info.numel * sizeof(float));
  }
  for (int k = 0; k < p->nl; ++k) { /* the ranks holding copies: every dim but the Shard (and, of zero-3
                                       pieces, the ZeRO) ones */
    sg_group_t g = NULL;
    SG_TRY(sg_mesh_group(p->mesh, all & ~(p->l[k].shard_dims | (p->ppiece ? p->l[k].zero_dims : 0u)), &g));
    for (int j = 0; j < p->l[k].nmembers; ++j) {
      const int i = p->l[k].members[j];
      SG_MPI(MPI_Allreduce(MPI_IN_PLACE, &lo[i], 1, MPI_UINT64_T, MPI_MIN, sg_group_comm(g)));
      SG_MPI(MPI_Allreduce(MPI_IN_PLACE, &hi[i], 1, MPI_UINT64_T, MPI_MAX, sg_group_comm(g)));
    }
  }
  for (int i = 0; i < p->np; ++i)
    if (lo[i] != hi[i])
      SG_RAISE(SG_ERR_INTERNAL,
               "replicas diverged at step %lld: parameter %d ('%s', %lld elements) differs across ranks",
               (long long)step, i, p->p[i].name, (long long)p->p[i].info.numel);
fail:
  free(lo);
  free(hi);
  return sg_agree(sg_mesh_comm(p->mesh), st); /* a divergence may show in one group only */
}

sg_status sg_parallel_ckpt_arrays(sg_parallel_t p, int writing, sg_ckpt_array **arrays, int *n) {
  sg_status st = SG_OK;
  static const char *const states[3] = {"params", "adam_m", "adam_v"};
  if (!p || !arrays || !n) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__, "sg_parallel_ckpt_arrays: NULL argument");
  free(p->ck);
  free(p->ck_names);
  p->ck = calloc((size_t)(3 * p->np + 1), sizeof *p->ck);
  p->ck_names = calloc((size_t)(3 * p->np + 1), sizeof *p->ck_names);
  if (!p->ck || !p->ck_names) st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  SG_TRY(sg_agree(sg_mesh_comm(p->mesh), st));
  const unsigned all = (1u << sg_mesh_ndims(p->mesh)) - 1u;
  int c = 0;
  for (int i = 0; i < p->np; ++i) {
    const pl_param *q = &p->p[i];
    const pl_layout *L = &p->l[q->layout];
    if (q->info.ndim > SG_NC_MAX_DIMS)
      SG_RAISE(SG_ERR_NOT_SUPPORTED, "parameter '%s' has %d dims (checkpoints: %d)", q->name, q->info.ndim,
               SG_NC_MAX_DIMS);
    /* identical copies of the parameter: every dim but its Shard dims; of
     * its moments: every dim but the Shard and the ZeRO dims */
    sg_group_t rep = NULL, rep_state = NULL;
    SG_TRY(sg_mesh_group(p->mesh, all & ~L->shard_dims, &rep));
    SG_TRY(sg_mesh_group(p->mesh, all & ~(L->shard_dims | L->zero_dims), &rep_state));
    for (int s = 0; s < 3; ++s) {
      sg_ckpt_array *a = &p->ck[c];
      const int piece = s > 0 ? p->cfg.zero >= 1 : p->cfg.zero >= 3; /* this rank's rows only */
      const int writer = sg_group_rank(piece ? rep_state : rep) == 0;
      snprintf(p->ck_names[c], sizeof p->ck_names[c], "%s.%s", states[s], q->name);
      a->name = p->ck_names[c];
      a->shard.ndims = q->info.ndim;
      a->shard.dtype = SG_DTYPE_F32;
      for (int d = 0; d < q->info.ndim; ++d) {
        a->shard.global_shape[d] = q->info.global_shape[d];
        a->shard.start[d] = q->info.start[d];
        a->shard.count[d] = q->info.count[d];
      }
      if (piece) {
        a->shard.start[0] += q->own_row0;
        a->shard.count[0] = q->own_rows;
      }
      a->data = s == 0 ? (piece ? p->ppiece + q->moff : p->params + q->info.offset)
                       : (s == 1 ? p->m : p->v) + (p->cfg.zero >= 1 ? q->moff : q->info.offset);
      if (writing && !writer) a->shard.count[0] = 0;
      ++c;
    }
  }
  *arrays = p->ck;
  *n = c;
  if (!writing) pl_precision_invalidate(&p->prec); /* the caller reads into the master */
fail:
  return st;
}
