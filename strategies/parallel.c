/* shardgrid — the parallel plan (see sg_parallel.h). */
#include "parallel_impl.h"

#include "autograd_impl.h" /* ag_mem_*, the tests' faked device */
#include "sg_config.h"
#include "sg_decomp.h"
#include "sg_device.h"
#if SG_HAVE_CUDA
#include "sg_ops_cuda.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The plan's buffers are on a device (sg_parallel_to_device). */
static int pl_on_device(const struct sg_parallel *p) {
  return p->dev.kind != SG_DEVICE_HOST;
}

static const char *const role_names[SG_DIM_ROLE_COUNT] = {
    "data", "fsdp", "domain", "tensor", "pipeline", "sequence", "expert"};

const char *sg_dim_role_name(sg_dim_role r) {
  return (unsigned)r < SG_DIM_ROLE_COUNT ? role_names[r] : "invalid";
}

sg_status sg_dim_role_of(const char *name, sg_dim_role *role) {
  static const struct {
    const char *name;
    sg_dim_role role;
  } known[] = {{"dp", SG_DIM_ROLE_DATA},     {"fsdp", SG_DIM_ROLE_FSDP},
               {"h", SG_DIM_ROLE_DOMAIN},    {"w", SG_DIM_ROLE_DOMAIN},
               {"d", SG_DIM_ROLE_DOMAIN},    {"tp", SG_DIM_ROLE_TENSOR},
               {"pp", SG_DIM_ROLE_PIPELINE}, {"sp", SG_DIM_ROLE_SEQUENCE},
               {"cp", SG_DIM_ROLE_SEQUENCE}, {"ep", SG_DIM_ROLE_EXPERT}};
  for (size_t i = 0; name && i < sizeof known / sizeof known[0]; ++i)
    if (strcmp(name, known[i].name) == 0) {
      *role = known[i].role;
      return SG_OK;
    }
  return sg_error_set(
      SG_ERR_MESH, __FILE__, __LINE__,
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
unsigned sg_parallel_data_dims(sg_parallel_t p) {
  return p ? p->data_dims : 0u;
}
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
int64_t pl_bucket_elems(const struct sg_parallel *p) {
  return (p->cfg.bucket_bytes > 0 ? p->cfg.bucket_bytes : (int64_t)25 << 20) /
         (int64_t)sizeof(float);
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
    case SG_DIM_ROLE_EXPERT:
      /* ep ranks hold different samples, like dp: a parameter replicated
       * over ep is summed over it; the experts (Shard over ep, the
       * model's shard_dims) are not */
      p->data_dims |= 1u << d;
      p->data_index = p->data_index * sz + sg_mesh_coord(p->mesh, d);
      p->data_size *= sz;
      if (p->role[d] == SG_DIM_ROLE_FSDP) p->zero_dims_all |= 1u << d;
      break;
    case SG_DIM_ROLE_DOMAIN:
      p->data_dims |= 1u << d;
      p->domain_dims |= 1u << d;
      break;
    case SG_DIM_ROLE_SEQUENCE:
      /* sp ranks hold the same samples but each its share of the tokens
       * (the vit: sg_ag_sp_scatter): every parameter's gradient is
       * Partial over sp and summed over it, like over a data dim; the
       * samples are not split over it (not a batch dim) */
      p->data_dims |= 1u << d;
      p->seq_dims |= 1u << d;
      break;
    case SG_DIM_ROLE_TENSOR:
      /* tp ranks hold the same data: not a data dim. A parameter Shard
       * over tp is reduced over the data dims only; one replicated over
       * tp gets the same gradient on every tp rank (the model's
       * tp_copy/tp_reduce make it so) and is not summed over tp. */
      break;
    default:
      if (sz > 1)
        SG_RAISE(
            SG_ERR_NOT_SUPPORTED,
            "mesh dim '%s' (size %d): %s parallelism is not supported by the parallel plan yet "
            "(supported: dp, fsdp, h, w, d, tp, sp, ep; a size-1 %s dim is fine)",
            nm, sz, role_names[p->role[d]], nm);
    }
  }
  if (p->cfg.zero < 0 || p->cfg.zero > 3)
    SG_RAISE(
        SG_ERR_CONFIG,
        "zero = %d: the ZeRO stage is 0 (DDP), 1 (optimizer state), 2 (+ gradients) or "
        "3 (+ parameters)",
        p->cfg.zero);
  if (p->cfg.shard_over_domain && p->cfg.zero >= 1)
    p->zero_dims_all |= p->domain_dims;
  unsigned fsdp_big = 0;
  for (int d = 0; d < nd; ++d)
    if (p->role[d] == SG_DIM_ROLE_FSDP && sg_mesh_dim_size(p->mesh, d) > 1)
      fsdp_big |= 1u << d;
  if (fsdp_big && p->cfg.zero == 0)
    SG_RAISE(
        SG_ERR_CONFIG,
        "mesh dim 'fsdp' shards the model state: set zero = 1, 2 or 3 (or use 'dp' for "
        "plain data parallelism)");
  int has_fsdp = 0;
  for (int d = 0; d < nd; ++d) has_fsdp |= p->role[d] == SG_DIM_ROLE_FSDP;
  if (p->cfg.zero >= 1 && !has_fsdp && !p->cfg.shard_over_domain)
    SG_RAISE(
        SG_ERR_CONFIG,
        "zero = %d shards over the 'fsdp' mesh dim (or the domain dims with "
        "zero_over_domain): this mesh has neither",
        p->cfg.zero);
  if (p->cfg.zero == 0) p->zero_dims_all = 0;
fail:
  return st;
}

/* Every rank must describe the same parameters (names, global shapes,
 * layouts); local boxes may differ. Collective. */
static sg_status plan_check_table(struct sg_parallel *p) {
  sg_status st = SG_OK;
  uint64_t h = 1469598103934665603ull;
#define PL_HASH(ptr, n)                                     \
  do {                                                      \
    const unsigned char *b_ = (const unsigned char *)(ptr); \
    for (size_t i_ = 0; i_ < (size_t)(n); ++i_)             \
      h = (h ^ b_[i_]) * 1099511628211ull;                  \
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
  SG_MPI(MPI_Allreduce(hh, mx, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX,
                       sg_mesh_comm(p->mesh)));
  if (mx[0] != hh[0] || mx[1] != hh[1])
    SG_RAISE(
        SG_ERR_INVALID_ARG,
        "parallel plan: the ranks describe different parameter tables (names, "
        "global shapes or layouts differ)");
fail:
  return st;
}

static const pl_param *cmp_params;
static int cmp_by_offset(const void *a, const void *b) {
  int64_t x = cmp_params[*(const int *)a].info.offset,
          y = cmp_params[*(const int *)b].info.offset;
  return x < y ? -1 : x > y;
}

/* Table entries: validity on this rank. Not collective. */
static sg_status plan_params(struct sg_parallel *p,
                             const sg_param_info *table) {
  sg_status st = SG_OK;
  int *by_offset = NULL, nby = 0;
  const unsigned all = (1u << sg_mesh_ndims(p->mesh)) - 1u;
  for (int i = 0; i < p->np; ++i) {
    pl_param *q = &p->p[i];
    q->info = table[i];
    if (!table[i].name || !*table[i].name)
      SG_RAISE(SG_ERR_INVALID_ARG, "parallel plan: parameter %d has no name",
               i);
    snprintf(q->name, sizeof q->name, "%s", table[i].name);
    q->info.name = q->name;
    const sg_param_info *pi = &q->info;
    if (pi->ndim < 1 || pi->ndim > SG_PARAM_MAX_DIMS)
      SG_RAISE(SG_ERR_INVALID_ARG, "parallel plan: parameter '%s' has %d dims",
               q->name, pi->ndim);
    if (pi->shard_dims & ~all)
      SG_RAISE(
          SG_ERR_INVALID_ARG,
          "parallel plan: parameter '%s' is Shard over mesh dims 0x%x the mesh lacks",
          q->name, pi->shard_dims);
    for (int d = 0; d < pi->ndim; ++d)
      if (pi->count[d] < 0 || pi->start[d] < 0 ||
          pi->start[d] + pi->count[d] > pi->global_shape[d])
        SG_RAISE(
            SG_ERR_INVALID_ARG,
            "parallel plan: parameter '%s': box [%lld, +%lld) outside extent %lld "
            "in dim %d",
            q->name, (long long)pi->start[d], (long long)pi->count[d],
            (long long)pi->global_shape[d], d);
    if (numel_of(pi) != pi->numel || pi->offset < 0 ||
        pi->offset + pi->numel > p->nlocal)
      SG_RAISE(
          SG_ERR_INVALID_ARG,
          "parallel plan: parameter '%s': %lld elements at offset %lld do not fit "
          "the %lld local floats",
          q->name, (long long)pi->numel, (long long)pi->offset,
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
      SG_RAISE(
          SG_ERR_INVALID_ARG,
          "parallel plan: parameters '%s' and '%s' overlap in the flat buffer",
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
    const int g = L->zero_g ? sg_group_size(L->zero_g) : 1,
              me = L->zero_g ? sg_group_rank(L->zero_g) : 0;
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
      if (p->cfg.zero >= 1 &&
          g > 1) { /* the pieces tile the box row-major, in rank order */
        q->pcount = malloc((size_t)g * sizeof *q->pcount);
        q->pdispl = malloc((size_t)g * sizeof *q->pdispl);
        if (!q->pcount || !q->pdispl)
          SG_RAISE(SG_ERR_ALLOC, "parallel plan: out of memory");
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
  p->npack_max = maxpack;
  p->npiece_max = maxpiece + 1;
  if ((p->cfg.zero == 1 || p->cfg.zero == 2) &&
      maxpack > 0) { /* zero 3 gathers per parameter */
    SG_TRY(sg_malloc(h, (size_t)maxpack * sizeof(float), (void **)&p->pack));
    SG_TRY(sg_malloc(h, (size_t)(maxpiece + 1) * sizeof(float),
                     (void **)&p->piece));
  }
  if (p->cfg.zero == 0)
    p->nstate = p->nlocal; /* the moments mirror the flat buffer */
  { /* a ZeRO dim of size > 1 with nothing to cut is a mistake, not DDP */
    long long cut = 0;
    for (int k = 0; k < p->nl; ++k)
      if (p->l[k].zero_g && sg_group_size(p->l[k].zero_g) > 1)
        cut += p->l[k].npack;
    SG_MPI(MPI_Allreduce(MPI_IN_PLACE, &cut, 1, MPI_LONG_LONG, MPI_MAX,
                         sg_mesh_comm(p->mesh)));
    int big = 0;
    for (int d = 0; d < sg_mesh_ndims(p->mesh); ++d)
      big |= (p->zero_dims_all >> d & 1u) && sg_mesh_dim_size(p->mesh, d) > 1;
    if (big && cut == 0)
      SG_RAISE(
          SG_ERR_CONFIG,
          "zero = %d: the model has no parameter to shard over the ZeRO dims (every "
          "parameter is Shard over them already, or there are none)",
          p->cfg.zero);
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
    brk[i] = i == 0 || q->layout != p->p[i - 1].layout ||
             (q->info.numel > 0 && end >= 0 && q->info.offset != end);
    if (brk[i]) end = -1;
    if (q->info.numel > 0) end = q->info.offset + q->info.numel;
  }
  if (p->np > 0 && MPI_Allreduce(MPI_IN_PLACE, brk, p->np, MPI_INT, MPI_MAX,
                                 sg_mesh_comm(p->mesh)) != MPI_SUCCESS) {
    free(brk);
    SG_RAISE(SG_ERR_MPI,
             "parallel plan: MPI_Allreduce of the span breaks failed");
  }
  int *span_layout = brk; /* reused: the layout of each span */
  for (int i = 0; i < p->np; ++i) {
    const pl_param *q = &p->p[i];
    if (brk[i]) {
      p->span[p->nspan].off = 0;
      p->span[p->nspan].n = 0;
      p->span[p->nspan].layout = q->layout;
      span_layout[p->nspan] = q->layout;
      p->nspan++;
    }
    pl_span *sp = &p->span[p->nspan - 1];
    if (q->info.numel == 0) continue;
    if (sp->n == 0) sp->off = q->info.offset;
    sp->n += q->info.numel;
  }
  const int64_t bucket = pl_bucket_elems(p);
  for (int k = 0; k < p->nspan && st == SG_OK && p->hooked_reductions; ++k)
    st = sg_ddp_create(p->mesh, p->l[span_layout[k]].reduce_dims,
                       p->grads + p->span[k].off, p->span[k].n, bucket,
                       p->cfg.deterministic, &p->span[k].ddp);
  free(brk);
fail:
  return st;
}

sg_status sg_parallel_check_mesh(sg_mesh_t mesh, const sg_parallel_config *cfg,
                                 sg_parallel_mesh_info *info) {
  sg_status st = SG_OK;
  struct sg_parallel p;
  if (!mesh)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_parallel_check_mesh: NULL mesh");
  memset(&p, 0, sizeof p);
  p.mesh = mesh;
  p.cfg = cfg ? *cfg : sg_parallel_defaults();
  st = sg_agree(sg_mesh_comm(mesh), plan_roles(&p));
  if (st == SG_OK && info) {
    info->batch_dims = p.data_dims & ~(p.domain_dims | p.seq_dims);
    info->domain_dims = p.domain_dims;
    info->data_size = p.data_size;
    info->data_index = p.data_index;
  }
  return st;
}

sg_status sg_parallel_create(sg_mesh_t mesh, const sg_parallel_config *cfg,
                             int nparams, const sg_param_info *table,
                             int64_t nlocal, sg_parallel_t *out) {
  sg_status st = SG_OK;
  struct sg_parallel *p = NULL;
  if (!mesh || !out)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_parallel_create: NULL mesh or plan");
  *out = NULL;
  const MPI_Comm comm = sg_mesh_comm(mesh);
  if (nparams < 0 || nlocal < 0 || (nparams > 0 && !table))
    st = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                      "sg_parallel_create: %d parameters, %lld floats", nparams,
                      (long long)nlocal);
  if (st == SG_OK && !(p = calloc(1, sizeof *p)))
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                      "sg_parallel_create: out of memory");
  if (st == SG_OK) {
    p->mesh = mesh;
    p->cfg = cfg ? *cfg : sg_parallel_defaults();
    p->np = nparams;
    p->nlocal = nlocal;
    p->nmicro = 1;
    p->p = calloc((size_t)(nparams + 1), sizeof *p->p);
    p->rs_order = calloc((size_t)(nparams + 1), sizeof *p->rs_order);
    if (!p->p || !p->rs_order)
      st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                        "sg_parallel_create: out of memory");
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
  if (p)
    p->hooked_reductions = p->cfg.zero == 0 ||
                           (p->cfg.zero == 1 && p->cfg.deterministic);
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
    if (st == SG_OK && p->cfg.zero >= 2)
      st = sg_calloc(h, nb, (void **)&p->gpiece);
    if (st == SG_OK && p->cfg.zero >= 3)
      st = sg_calloc(h, nb, (void **)&p->ppiece);
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
  sg_status st = sg_wait(
      &p->pf_req); /* nothing may still write a buffer freed here */
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
  if (pl_on_device(p)) { /* the device buffers, then the host copies */
    ag_mem_free(p->dev, (void **)&p->params);
    ag_mem_free(p->dev, (void **)&p->grads);
    ag_mem_free(p->dev, (void **)&p->m);
    ag_mem_free(p->dev, (void **)&p->v);
    ag_mem_free(p->dev, (void **)&p->pack);
    ag_mem_free(p->dev, (void **)&p->piece);
    ag_mem_free(p->dev, (void **)&p->gpiece);
    for (int i = 0; i < p->np; ++i)
      ag_mem_free(p->dev, (void **)&p->p[i].gfull);
    p->params = p->hparams, p->m = p->hm, p->v = p->hv;
  }
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
    o += (size_t)snprintf(buf + o < buf + size ? buf + o : buf,
                          o < size ? size - o : 0, " over");
    for (int d = 0, first = 1; d < sg_mesh_ndims(p->mesh) && o < size; ++d)
      if (p->zero_dims_all & (1u << d)) {
        o += (size_t)snprintf(buf + o, size - o, "%s%s", first ? " " : ",",
                              sg_mesh_dim_name(p->mesh, d));
        first = 0;
      }
  }
  if (o < size)
    o += (size_t)snprintf(
        buf + o, size - o,
        "; %d data replicas; %d layouts, %d spans; %lld floats, %lld of "
        "optimizer state per moment",
        p->data_size, p->nl, p->nspan, (long long)p->nlocal,
        (long long)p->nstate);
  if (o < size && p->cfg.param_dtype == SG_DTYPE_BF16)
    o += (size_t)snprintf(buf + o, size - o,
                          "; bf16 compute, f32 master weights, %s reductions",
                          sg_dtype_name(p->cfg.reduce_dtype));
  if (o < size && pl_on_device(p))
    snprintf(buf + o, size - o, "; parameters, gradients and state on %s:%d",
             sg_device_kind_name(p->dev.kind), p->dev.index);
}

/* ---- the plan on a device ---------------------------------------------------- */

/* The buffers are host memory: a host plan or the tests' faked device. */
static int pl_host_memory(const struct sg_parallel *p) {
  return !pl_on_device(p) || ag_fake_cuda;
}

static sg_status pl_sumsq(const struct sg_parallel *p, const float *g,
                          int64_t n, double *s) {
  if (pl_host_memory(p)) {
    *s = sg_sumsq_f32(g, n);
    return SG_OK;
  }
#if SG_HAVE_CUDA
  return sg_sumsq_f32_cuda(g, n, s, NULL);
#else
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "parallel plan on %s: built without CUDA",
                      sg_device_kind_name(p->dev.kind));
#endif
}

static sg_status pl_adamw(const struct sg_parallel *p, float *w, const float *g,
                          float *m, float *v, int64_t n, int64_t t, double lr,
                          double scale) {
  if (pl_host_memory(p))
    return sg_adamw_step_f32(w, g, m, v, n, t, lr, scale, &p->cfg.adamw);
#if SG_HAVE_CUDA
  return sg_adamw_step_f32_cuda(w, g, m, v, n, t, lr, scale, &p->cfg.adamw,
                                NULL);
#else
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "parallel plan on %s: built without CUDA",
                      sg_device_kind_name(p->dev.kind));
#endif
}

sg_device sg_parallel_device(sg_parallel_t p) {
  return p ? p->dev : sg_device_host();
}

sg_status sg_parallel_to_device(sg_parallel_t p, sg_device dev) {
  sg_status st = SG_OK;
  float *d[7] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  sg_ddp_t *made = NULL; /* zero 1 without reducers: DDP's, made here */
  if (!p)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_parallel_to_device: NULL plan");
  if (dev.kind == SG_DEVICE_HOST) return SG_OK;
  const MPI_Comm comm = sg_mesh_comm(p->mesh);
  const char *dn = sg_device_kind_name(dev.kind);
  /* the verdicts come from the config and the mesh: alike on every rank,
   * and before any device call */
  if (p->attached || pl_on_device(p))
    st = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                      "sg_parallel_to_device: call it once, before "
                      "sg_parallel_attach");
  else if (p->cfg.zero >= 3)
    st = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "parallel plan on %s: zero = %d is not supported on "
                      "devices yet (zero 0-2: the parameters' gathers and "
                      "their prefetch are host code; issue 22)",
                      dn, p->cfg.zero);
  else if (p->cfg.param_dtype == SG_DTYPE_BF16)
    st = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "parallel plan on %s: param_dtype = bf16 is not "
                      "supported on devices yet (its compute copy and "
                      "rounding are host code; issue 22)",
                      dn);
  /* the gradients' groups move device buffers (NCCL or a CUDA-aware MPI) */
  for (int k = 0; k < p->nl && st == SG_OK; ++k)
    st = ag_dev_comm_ok(p->l[k].reduce_g, dev,
                        "parallel plan: the gradient reduction");
  SG_TRY(sg_agree(comm, st));
  const size_t nb = (size_t)(p->nlocal + 1) * sizeof(float),
               ns = (size_t)(p->nstate + 1) * sizeof(float);
  if (p->cfg.zero >= 2) /* the gradients' pieces on dev */
    st = ag_mem_alloc(dev, ns, 1, (void **)&d[6]);
  if (st == SG_OK && p->pack) { /* the gather's scratch on dev */
    st = ag_mem_alloc(dev, (size_t)p->npack_max * sizeof(float), 0,
                      (void **)&d[4]);
    if (st == SG_OK)
      st = ag_mem_alloc(dev, (size_t)p->npiece_max * sizeof(float), 0,
                        (void **)&d[5]);
  }
  if (st == SG_OK) st = ag_mem_alloc(dev, nb, 0, (void **)&d[0]);
  if (st == SG_OK) st = ag_mem_alloc(dev, nb, 1, (void **)&d[1]);
  if (st == SG_OK) st = ag_mem_alloc(dev, ns, 0, (void **)&d[2]);
  if (st == SG_OK) st = ag_mem_alloc(dev, ns, 0, (void **)&d[3]);
  if (st == SG_OK) st = ag_mem_copy(dev, d[0], sg_device_host(), p->params, nb);
  if (st == SG_OK) st = ag_mem_copy(dev, d[2], sg_device_host(), p->m, ns);
  if (st == SG_OK) st = ag_mem_copy(dev, d[3], sg_device_host(), p->v, ns);
  SG_TRY(sg_agree(comm, st));
  /* the DDP reducers on the device gradients: their buckets through the
   * comm layer (NCCL on a GPU), the deterministic sum the host's
   * fixed-order one on the device buffers (ag_sum_det: the same bits) */
  st = SG_OK;
  /* zero 1 on a device reduces by DDP's buckets, deterministic or not
   * (the in-place reduce-scatters of its overlapped path are host code):
   * the full gradients summed, then each rank updates its piece and the
   * all-gather restores the parameters, on the device buffers */
  if (p->cfg.zero == 1 && !p->hooked_reductions) {
    made = calloc((size_t)p->nspan + 1, sizeof *made);
    if (!made)
      st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                        "parallel plan: out of memory");
    for (int k = 0; k < p->nspan && st == SG_OK; ++k)
      st = sg_ddp_create(p->mesh, p->l[p->span[k].layout].reduce_dims,
                         d[1] + p->span[k].off, p->span[k].n,
                         pl_bucket_elems(p), p->cfg.deterministic, &made[k]);
  }
  for (int k = 0; k < p->nspan && st == SG_OK; ++k) {
    sg_ddp_t r = made ? made[k] : p->span[k].ddp;
    if (r) st = sg_ddp_set_buffer(r, d[1] + p->span[k].off, dev);
  }
  SG_TRY(sg_agree(comm, st));
  if (made) {
    for (int k = 0; k < p->nspan; ++k) p->span[k].ddp = made[k];
    free(made);
    made = NULL;
    p->hooked_reductions = 1;
    p->hooked_rs = 0;
  }
  sg_free(sg_device_host(), (void **)&p->grads);
  if (d[4]) {
    sg_free(sg_device_host(), (void **)&p->pack);
    sg_free(sg_device_host(), (void **)&p->piece);
    p->pack = d[4], p->piece = d[5];
  }
  if (d[6]) { /* zero 2 reduces each gradient when ready (reduce_piece_det) */
    sg_free(sg_device_host(), (void **)&p->gpiece);
    p->gpiece = d[6];
    p->hooked_rs = 0;
  }
  p->hparams = p->params, p->hm = p->m, p->hv = p->v;
  p->params = d[0], p->grads = d[1], p->m = d[2], p->v = d[3];
  p->dev = dev;
  return SG_OK;
fail:
  for (int k = 0; made && k < p->nspan; ++k) (void)sg_ddp_destroy(&made[k]);
  free(made);
  for (int k = 0; k < p->nspan && !pl_on_device(p); ++k) /* back on the host */
    if (p->span[k].ddp)
      (void)sg_ddp_set_buffer(p->span[k].ddp, p->grads + p->span[k].off,
                              sg_device_host());
  for (int k = 0; k < 7; ++k) ag_mem_free(dev, (void **)&d[k]);
  return st;
}

sg_status sg_parallel_ckpt_loaded(sg_parallel_t p) {
  sg_status st = SG_OK;
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_ckpt_loaded: NULL plan");
  if (!pl_on_device(p)) goto fail;
  const sg_device h = sg_device_host();
  SG_TRY(ag_mem_copy(p->dev, p->params, h, p->hparams,
                     (size_t)p->nlocal * sizeof(float)));
  SG_TRY(
      ag_mem_copy(p->dev, p->m, h, p->hm, (size_t)p->nstate * sizeof(float)));
  SG_TRY(
      ag_mem_copy(p->dev, p->v, h, p->hv, (size_t)p->nstate * sizeof(float)));
fail:
  return st;
}

/* ---- reduction, norm, step --------------------------------------------------- */

/* n bytes from src to dst in the plan's buffers (host or its device). */
static sg_status pl_copy(const struct sg_parallel *p, void *dst,
                         const void *src, size_t n) {
  if (!pl_on_device(p)) {
    if (n) memcpy(dst, src, n);
    return SG_OK;
  }
  return ag_mem_copy(p->dev, dst, p->dev, src, n);
}

/* The members of layout L between buf and pack, pack in ZeRO-group rank
 * order: rank r's rows of every member, members in table order
 * (to_pack: buf -> pack, else pack -> buf). */
static sg_status zero_pack(const struct sg_parallel *p, const pl_layout *L,
                           float *buf, float *pack, int to_pack) {
  sg_status st = SG_OK;
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
      SG_TRY(to_pack ? pl_copy(p, pack + o, b, nb)
                     : pl_copy(p, b, pack + o, nb));
      o += nr * q->row;
    }
fail:
  return st;
}

/* This rank's pieces of layout L (members in table order) <-> buf. */
static sg_status piece_io(const struct sg_parallel *p, const pl_layout *L,
                          float *buf, float *piece, int to_piece) {
  sg_status st = SG_OK;
  int64_t o = 0;
  for (int j = 0; j < L->nmembers; ++j) {
    const pl_param *q = &p->p[L->members[j]];
    float *b = buf + q->info.offset + q->own_row0 * q->row;
    const size_t nb = (size_t)(q->own_rows * q->row) * sizeof *b;
    SG_TRY(to_piece ? pl_copy(p, piece + o, b, nb)
                    : pl_copy(p, b, piece + o, nb));
    o += q->own_rows * q->row;
  }
fail:
  return st;
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
    SG_TRY(piece_io(p, L, p->grads, p->piece, 1));
    SG_TRY(sg_allreduce(L->rest_g, p->piece, p->piece, n, SG_DTYPE_F32,
                        SG_REDUCE_SUM));
    SG_TRY(piece_io(p, L, p->grads, p->piece, 0));
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
    if (p->p[i].info.numel > 0 && !p->p[i].rs_started)
      SG_TRY(pl_rs_start(p, i));
  SG_TRY(pl_rs_drain(p));
  for (int k = 0; k < p->nl; ++k) SG_TRY(rest_reduce(p, &p->l[k]));
fail:
  for (int i = 0; i < p->np; ++i) p->p[i].rs_started = 0;
  return st;
}

/* Sum of squares of what this rank updates of layout L (on the plan's
 * device: only the sums come back). */
static sg_status layout_sumsq(const struct sg_parallel *p, const pl_layout *L,
                              double *sum) {
  sg_status st = SG_OK;
  double s = 0.0;
  for (int j = 0; j < L->nmembers; ++j) {
    const pl_param *q = &p->p[L->members[j]];
    const float *g = p->gpiece
                         ? p->gpiece + q->moff
                         : p->grads + q->info.offset + q->own_row0 * q->row;
    double sj = 0.0;
    SG_TRY(pl_sumsq(p, g, q->own_rows * q->row, &sj));
    s += sj;
  }
fail:
  *sum = s;
  return st;
}

sg_status sg_parallel_reduce(sg_parallel_t p, double *grad_norm) {
  sg_status st = SG_OK;
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_reduce: NULL plan");
  if (p->cfg.zero >= 2 && !p->attached)
    SG_RAISE(
        SG_ERR_INVALID_ARG,
        "sg_parallel_reduce: zero = %d reduces through the tape's hooks: attach the "
        "plan first",
        p->cfg.zero);
  if (p->hooked_reductions)
    for (int k = 0; k < p->nspan; ++k)
      SG_TRY(sg_ddp_finish(p->span[k].ddp, 1.0));
  else if (p->hooked_rs)
    SG_TRY(rs_finish(p));
  /* zero >= 2, deterministic: every piece was reduced when its gradient was ready */
  double total = 0.0;
  for (int k = 0; k < p->nl; ++k) {
    double s = 0.0;
    SG_TRY(layout_sumsq(p, &p->l[k], &s));
    if (sg_group_size(p->l[k].norm_g) > 1)
      SG_TRY(sg_allreduce_det(p->l[k].norm_g, &s, &s, 1, SG_DTYPE_F64,
                              SG_REDUCE_SUM));
    total += s;
  }
  if (grad_norm) *grad_norm = sqrt(total);
fail:
  return st;
}

sg_status sg_parallel_step(sg_parallel_t p, int64_t t, double lr,
                           double grad_scale) {
  sg_status st = SG_OK;
  if (!p || t < 1)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_parallel_step: NULL plan or step %lld < 1",
             (long long)t);
  if (p->cfg.zero == 0) {
    SG_TRY(pl_adamw(p, p->params, p->grads, p->m, p->v, p->nlocal, t, lr,
                    grad_scale));
  } else {
    for (int i = 0; i < p->np; ++i) {
      const pl_param *q = &p->p[i];
      const int64_t o = q->info.offset + q->own_row0 * q->row,
                    n = q->own_rows * q->row;
      float *w = p->ppiece ? p->ppiece + q->moff : p->params + o;
      const float *g = p->gpiece ? p->gpiece + q->moff : p->grads + o;
      if (n > 0)
        SG_TRY(pl_adamw(p, w, g, p->m + q->moff, p->v + q->moff, n, t, lr,
                        grad_scale));
    }
    for (int k = 0; k < p->nl && p->cfg.zero <= 2;
         ++k) { /* zero 3 keeps the pieces */
      pl_layout *L = &p->l[k];
      if (!L->zero_g || sg_group_size(L->zero_g) == 1) continue;
      const int me = sg_group_rank(L->zero_g);
      SG_TRY(piece_io(p, L, p->params, p->piece, 1));
      SG_TRY(sg_allgatherv(L->zero_g, p->piece, L->counts[me], p->pack,
                           L->counts, NULL, SG_DTYPE_F32));
      SG_TRY(zero_pack(p, L, p->params, p->pack, 0));
    }
  }
  if (p->gpiece && pl_on_device(p))
    SG_TRY(
        ag_mem_zero(p->dev, p->gpiece, (size_t)p->nstate * sizeof *p->gpiece));
  else if (p->gpiece)
    memset(p->gpiece, 0, (size_t)p->nstate * sizeof *p->gpiece);
  else if (pl_on_device(p))
    SG_TRY(ag_mem_zero(p->dev, p->grads, (size_t)p->nlocal * sizeof *p->grads));
  else
    memset(p->grads, 0, (size_t)p->nlocal * sizeof *p->grads);
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
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_parallel_gather_param: bad plan, index %d or buffer", i);
  pl_param *q = &p->p[i];
  if (q->info.numel == 0) goto fail;
  if (p->ppiece)
    SG_TRY(pl_gather_value(p, q, out));
  else if (pl_on_device(p))
    SG_TRY(ag_mem_copy(sg_device_host(), out, p->dev,
                       p->params + q->info.offset,
                       (size_t)q->info.numel * sizeof *out));
  else
    memcpy(out, p->params + q->info.offset,
           (size_t)q->info.numel * sizeof *out);
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
  if (!p)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_parallel_check_replicas: NULL plan");
  if (pl_on_device(p)) /* the checksums of host copies */
    st = ag_mem_copy(sg_device_host(), p->hparams, p->dev, p->params,
                     (size_t)p->nlocal * sizeof(float));
  SG_TRY(sg_agree(sg_mesh_comm(p->mesh), st));
  lo = malloc((size_t)(p->np + 1) * sizeof *lo);
  hi = malloc((size_t)(p->np + 1) * sizeof *hi);
  if (!lo || !hi)
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  SG_TRY(sg_agree(sg_mesh_comm(p->mesh), st));
  const unsigned all = (1u << sg_mesh_ndims(p->mesh)) - 1u;
  for (int i = 0; i < p->np; ++i) {
    const pl_param *q = &p->p[i];
    lo[i] = hi[i] = p->ppiece
                        ? fnv1a(p->ppiece + q->moff,
                                (size_t)(q->own_rows * q->row) * sizeof(float))
                        : fnv1a((pl_on_device(p) ? p->hparams : p->params) +
                                    q->info.offset,
                                (size_t)q->info.numel * sizeof(float));
  }
  for (
      int k = 0; k < p->nl;
      ++k) { /* the ranks holding copies: every dim but the Shard (and, of zero-3
                                       pieces, the ZeRO) ones */
    sg_group_t g = NULL;
    SG_TRY(sg_mesh_group(p->mesh,
                         all & ~(p->l[k].shard_dims |
                                 (p->ppiece ? p->l[k].zero_dims : 0u)),
                         &g));
    for (int j = 0; j < p->l[k].nmembers; ++j) {
      const int i = p->l[k].members[j];
      SG_MPI(MPI_Allreduce(MPI_IN_PLACE, &lo[i], 1, MPI_UINT64_T, MPI_MIN,
                           sg_group_comm(g)));
      SG_MPI(MPI_Allreduce(MPI_IN_PLACE, &hi[i], 1, MPI_UINT64_T, MPI_MAX,
                           sg_group_comm(g)));
    }
  }
  for (int i = 0; i < p->np; ++i)
    if (lo[i] != hi[i])
      SG_RAISE(
          SG_ERR_INTERNAL,
          "replicas diverged at step %lld: parameter %d ('%s', %lld elements) differs across ranks",
          (long long)step, i, p->p[i].name, (long long)p->p[i].info.numel);
fail:
  free(lo);
  free(hi);
  return sg_agree(sg_mesh_comm(p->mesh),
                  st); /* a divergence may show in one group only */
}

sg_status sg_parallel_ckpt_arrays(sg_parallel_t p, int writing,
                                  sg_ckpt_array **arrays, int *n) {
  sg_status st = SG_OK;
  static const char *const states[3] = {"params", "adam_m", "adam_v"};
  if (!p || !arrays || !n)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_parallel_ckpt_arrays: NULL argument");
  free(p->ck);
  free(p->ck_names);
  p->ck = calloc((size_t)(3 * p->np + 1), sizeof *p->ck);
  p->ck_names = calloc((size_t)(3 * p->np + 1), sizeof *p->ck_names);
  if (!p->ck || !p->ck_names)
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  SG_TRY(sg_agree(sg_mesh_comm(p->mesh), st));
  /* a device plan's arrays are its host copies: filled for writing */
  float *const P = pl_on_device(p) ? p->hparams : p->params,
               *const M = pl_on_device(p) ? p->hm : p->m,
               *const V = pl_on_device(p) ? p->hv : p->v;
  if (pl_on_device(p) && writing) {
    const sg_device h = sg_device_host();
    SG_TRY(ag_mem_copy(h, P, p->dev, p->params,
                       (size_t)p->nlocal * sizeof(float)));
    SG_TRY(ag_mem_copy(h, M, p->dev, p->m, (size_t)p->nstate * sizeof(float)));
    SG_TRY(ag_mem_copy(h, V, p->dev, p->v, (size_t)p->nstate * sizeof(float)));
  }
  const unsigned all = (1u << sg_mesh_ndims(p->mesh)) - 1u;
  int c = 0;
  for (int i = 0; i < p->np; ++i) {
    const pl_param *q = &p->p[i];
    const pl_layout *L = &p->l[q->layout];
    if (q->info.ndim > SG_NC_MAX_DIMS)
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "parameter '%s' has %d dims (checkpoints: %d)", q->name,
               q->info.ndim, SG_NC_MAX_DIMS);
    /* identical copies of the parameter: every dim but its Shard dims; of
     * its moments: every dim but the Shard and the ZeRO dims */
    sg_group_t rep = NULL, rep_state = NULL;
    SG_TRY(sg_mesh_group(p->mesh, all & ~L->shard_dims, &rep));
    SG_TRY(sg_mesh_group(p->mesh, all & ~(L->shard_dims | L->zero_dims),
                         &rep_state));
    for (int s = 0; s < 3; ++s) {
      sg_ckpt_array *a = &p->ck[c];
      const int piece = s > 0 ? p->cfg.zero >= 1
                              : p->cfg.zero >= 3; /* this rank's rows only */
      const int writer = sg_group_rank(piece ? rep_state : rep) == 0;
      snprintf(p->ck_names[c], sizeof p->ck_names[c], "%s.%s", states[s],
               q->name);
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
      a->data = s == 0 ? (piece ? p->ppiece + q->moff : P + q->info.offset)
                       : (s == 1 ? M : V) +
                             (p->cfg.zero >= 1 ? q->moff : q->info.offset);
      if (writing && !writer) a->shard.count[0] = 0;
      ++c;
    }
  }
  *arrays = p->ck;
  *n = c;
  if (!writing)
    pl_precision_invalidate(&p->prec); /* the caller reads into the master */
fail:
  return st;
}
