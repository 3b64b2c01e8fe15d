/* shardgrid — the pipeline runtime: a stage executes its schedule's list
 * (sg_pipeline.h, "execution"). */
#include "sg_pipeline.h"

#include "sg_comm.h"
#include "sg_device.h"
#include "sg_model.h"
#include "sg_trace.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A transfer carries a bundle (sg_bundle: the activation and the tensors
 * alive across the cut, e.g. the U-Net's skips) or its gradients: one
 * header, then one payload per tensor. */
enum { PP_NT = SG_BUNDLE_MAX, PP_PART_BITS = 4 };
_Static_assert(PP_NT + 1 <= 1 << PP_PART_BITS, "a tag part per payload");

/* What one payload is. */
typedef struct pp_meta {
  int32_t dtype, ndim, sharded, unused;
  int64_t shape[SG_TENSOR_MAX_DIMS], gshape[SG_TENSOR_MAX_DIMS];
  sg_placement pl[SG_MESH_MAX_DIMS];
} pp_meta;

/* The header of every transfer: its n payloads, or that the sender's
 * pipeline failed (then no payload follows). Sent as bytes: every rank
 * runs the same binary. */
typedef struct pp_hdr {
  int32_t failed, n;
  pp_meta t[PP_NT];
} pp_hdr;

/* Per (micro-batch, chunk) of this stage, for one step. */
typedef struct pp_slot {
  sg_var in[PP_NT]; /* the bundle received (leaves; rf.n), when has_in */
  int has_in;
  sg_bundle out;        /* the forward's outputs until B: tape-owned, or an
                           input passed through */
  sg_tensor gin[PP_NT]; /* the outputs' gradients, received (RECV_B) */
  sg_tensor gx[PP_NT];  /* per input, sent by SEND_B instead of its tape
                           gradient: zeros when it got none, the sum when
                           it was also passed through */
  int gin_posted;
  pp_hdr rf, rb, sf, sb; /* headers received (F, B) and sent */
  int src_f, tag_f;      /* where the activation's header comes from */
  MPI_Request rq_rf, rq_rb, rq_in[PP_NT], rq_gin[PP_NT];
  MPI_Request sqf[PP_NT + 1], sqb[PP_NT + 1]; /* sends: header, payloads */
} pp_slot;

static void pp_slot_reset(pp_slot *sl) {
  memset(sl, 0, sizeof *sl);
  sl->rq_rf = sl->rq_rb = MPI_REQUEST_NULL;
  for (int k = 0; k < PP_NT; ++k)
    sl->rq_in[k] = sl->rq_gin[k] = MPI_REQUEST_NULL;
  for (int k = 0; k <= PP_NT; ++k) sl->sqf[k] = sl->sqb[k] = MPI_REQUEST_NULL;
}

struct sg_pipe {
  sg_mesh_t mesh,
      sub; /* the mesh (not owned), the stage mesh (owned unless given) */
  int own_sub;
  MPI_Comm comm;  /* the transfers' own communicator */
  sg_group_t ppg; /* the stages of this rank's coordinates */
  int p, stage, m, v, nv;
  int *rank_of; /* mesh rank of each stage, same other coordinates */
  int *first;   /* nv + 1: blocks of virtual stage g: [first[g], first[g+1]) */
  sg_pp_schedule *sched;
  sg_parallel_t plan;
  sg_tape_t *tapes; /* m * v */
  pp_slot *slots;   /* m * v */
  int hooked;       /* the slot whose tape carries the plan's hooks */
  sg_pipe_stats stats;
  double *tl; /* the last run's start and end of each action of the list */
  double run_t0, run_t1;
  int64_t runs;
};

/* ---- creation ---------------------------------------------------------------- */

/* Where the virtual stages start: balanced or the caller's split points. */
static sg_status pp_cut(struct sg_pipe *pp, const sg_pipe_config *cfg) {
  sg_status st = SG_OK;
  const int n = cfg->nblocks, nv = pp->nv;
  if (n < nv)
    SG_RAISE(
        SG_ERR_INVALID_ARG,
        "pipeline: %d virtual stages (pp = %d x v = %d) but the model has %d blocks: "
        "every virtual stage needs at least one block",
        nv, pp->p, pp->v, n);
  pp->first[0] = 0;
  pp->first[nv] = n;
  for (int g = 1; g < nv; ++g) {
    pp->first[g] = cfg->split ? cfg->split[g - 1]
                              : g * (n / nv) + (g < n % nv ? g : n % nv);
    if (pp->first[g] <= pp->first[g - 1] || pp->first[g] >= n)
      SG_RAISE(
          SG_ERR_INVALID_ARG,
          "pipeline: split point %d is block %d: split points must increase "
          "within 1 .. %d (the model has %d blocks)",
          g - 1, pp->first[g], n - 1, n);
  }
fail:
  return st;
}

/* The length of this stage's list. */
static int pp_nact(const struct sg_pipe *pp) {
  return pp->sched->off[pp->stage + 1] - pp->sched->off[pp->stage];
}

/* The checks that need no communication; the same on every rank. */
static sg_status pp_setup(struct sg_pipe *pp, const sg_pipe_config *cfg) {
  sg_status st = SG_OK;
  const int d = sg_mesh_find_dim(pp->mesh, "pp");
  pp->p = d >= 0 ? sg_mesh_dim_size(pp->mesh, d) : 1;
  pp->stage = d >= 0 ? sg_mesh_coord(pp->mesh, d) : 0;
  if (cfg->m < 1)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "pipeline: m = %d micro-batches: m must be >= 1", cfg->m);
  pp->m = cfg->m;
  pp->v = cfg->v > 0 ? cfg->v : cfg->kind == SG_PP_INTERLEAVED ? 2 : 1;
  pp->nv = pp->p * pp->v;
  SG_TRY(sg_pp_schedule_create(cfg->kind, pp->p, pp->m, pp->v, &pp->sched));
  int *ub, flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  const double ntags = 2.0 * pp->nv * pp->m * (1 << PP_PART_BITS);
  if (flag && ntags > (double)*ub + 1)
    SG_RAISE(
        SG_ERR_INVALID_ARG,
        "pipeline: %d virtual stages x %d micro-batches need %.0f message tags, MPI "
        "offers %d",
        pp->nv, pp->m, ntags, *ub + 1);
  pp->first = calloc((size_t)pp->nv + 1, sizeof *pp->first);
  pp->rank_of = calloc((size_t)pp->p, sizeof *pp->rank_of);
  pp->tapes = calloc((size_t)(pp->m * pp->v), sizeof *pp->tapes);
  pp->slots = calloc((size_t)(pp->m * pp->v), sizeof *pp->slots);
  pp->tl = calloc(2 * (size_t)pp_nact(pp) + 1, sizeof *pp->tl);
  if (!pp->first || !pp->rank_of || !pp->tapes || !pp->slots || !pp->tl)
    SG_RAISE(SG_ERR_ALLOC, "pipeline: out of memory");
  SG_TRY(pp_cut(pp, cfg));
  int c[SG_MESH_MAX_DIMS];
  sg_mesh_coords(pp->mesh, c);
  for (int s = 0; s < pp->p; ++s) {
    if (d >= 0) c[d] = s;
    SG_TRY(sg_mesh_rank_of(pp->mesh, c, &pp->rank_of[s]));
  }
fail:
  return st;
}

/* The stage mesh: the mesh without pp, over the group of the other dims
 * (its ranks follow their coordinates row-major, as the mesh lays them
 * out); "dp=1" when nothing is left. */
sg_status sg_pipe_stage_mesh_create(sg_mesh_t mesh, sg_mesh_t *sub) {
  sg_status st = SG_OK;
  const int nd = sg_mesh_ndims(mesh), d = sg_mesh_find_dim(mesh, "pp");
  sg_mesh_spec spec;
  memset(&spec, 0, sizeof spec);
  unsigned mask = 0;
  for (int k = 0; k < nd; ++k) {
    if (k == d) continue;
    mask |= 1u << k;
    snprintf(spec.names[spec.ndims], SG_MESH_NAME_MAX, "%s",
             sg_mesh_dim_name(mesh, k));
    spec.sizes[spec.ndims++] = sg_mesh_dim_size(mesh, k);
  }
  if (spec.ndims == 0) {
    snprintf(spec.names[0], SG_MESH_NAME_MAX, "dp");
    spec.sizes[spec.ndims++] = 1;
  }
  sg_group_t g;
  SG_TRY(sg_mesh_group(mesh, mask, &g));
  SG_TRY(sg_mesh_create_from_spec(sg_group_comm(g), &spec, sub));
fail:
  return st;
}

static sg_status pp_stage_mesh(struct sg_pipe *pp, sg_mesh_t given) {
  sg_status st = SG_OK;
  const int d = sg_mesh_find_dim(pp->mesh, "pp");
  pp->own_sub = !given;
  if (given)
    pp->sub = given;
  else
    SG_TRY(sg_pipe_stage_mesh_create(pp->mesh, &pp->sub));
  SG_TRY(sg_mesh_group(pp->mesh, d >= 0 ? 1u << d : 0u, &pp->ppg));
fail:
  return st;
}

sg_status sg_pipe_create(sg_mesh_t mesh, const sg_pipe_config *cfg,
                         sg_pipe_t *pipe) {
  sg_status st = SG_OK;
  struct sg_pipe *pp = NULL;
  if (!pipe)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_pipe_create: pipe is NULL");
  *pipe = NULL;
  if (!mesh || !cfg)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_pipe_create: mesh and config are required");
  pp = calloc(1, sizeof *pp);
  if (!pp) SG_RAISE(SG_ERR_ALLOC, "pipeline: out of memory");
  pp->mesh = mesh;
  pp->comm = MPI_COMM_NULL;
  pp->hooked = -1;
  st = sg_agree(sg_mesh_comm(mesh),
                pp_setup(pp, cfg)); /* no collective before every rank passed */
  if (st != SG_OK) goto fail;
  SG_TRY(pp_stage_mesh(pp, cfg->stage_mesh));
  SG_MPI(MPI_Comm_dup(sg_mesh_comm(mesh), &pp->comm));
  for (int i = 0; i < pp->m * pp->v; ++i) SG_TRY(sg_tape_create(&pp->tapes[i]));
  pp->stats.peak_formula = sg_pp_peak_formula(pp->sched, pp->stage);
  pp->stats.peak_fw_formula = sg_pp_peak_fw_formula(pp->sched, pp->stage);
  *pipe = pp;
  return SG_OK;
fail:
  if (pp) {
    sg_status keep = st;
    sg_pipe_t q = pp;
    sg_pipe_destroy(&q);
    st = keep;
  }
  return st;
}

sg_status sg_pipe_destroy(sg_pipe_t *pipe) {
  if (!pipe || !*pipe) return SG_OK;
  struct sg_pipe *pp = *pipe;
  if (pp->tapes)
    for (int i = 0; i < pp->m * pp->v; ++i) sg_tape_destroy(&pp->tapes[i]);
  sg_status st = pp->own_sub ? sg_mesh_destroy(&pp->sub) : SG_OK;
  if (pp->comm != MPI_COMM_NULL) MPI_Comm_free(&pp->comm);
  sg_pp_schedule_destroy(&pp->sched);
  free(pp->first);
  free(pp->rank_of);
  free(pp->tapes);
  free(pp->slots);
  free(pp->tl);
  free(pp);
  *pipe = NULL;
  return st;
}

int sg_pipe_stage(sg_pipe_t pipe) { return pipe ? pipe->stage : -1; }
int sg_pipe_nstages(sg_pipe_t pipe) { return pipe ? pipe->p : 0; }
sg_mesh_t sg_pipe_stage_mesh(sg_pipe_t pipe) { return pipe ? pipe->sub : NULL; }
sg_mesh_t sg_pipe_mesh(sg_pipe_t pipe) { return pipe ? pipe->mesh : NULL; }
const sg_pp_schedule *sg_pipe_schedule(sg_pipe_t pipe) {
  return pipe ? pipe->sched : NULL;
}

void sg_pipe_blocks(sg_pipe_t pipe, int chunk, int *first, int *count) {
  const int g = sg_pp_virtual_stage(pipe->sched, pipe->stage, chunk);
  *first = pipe->first[g];
  *count = pipe->first[g + 1] - pipe->first[g];
}

void sg_pipe_get_stats(sg_pipe_t pipe, sg_pipe_stats *stats) {
  if (pipe && stats) *stats = pipe->stats;
}

void sg_pipe_get_timeline(sg_pipe_t pipe, sg_pipe_timeline *tl) {
  if (!tl) return;
  memset(tl, 0, sizeof *tl);
  if (!pipe) return;
  const int n = pp_nact(pipe);
  *tl = (sg_pipe_timeline){.n = n,
                           .act = pipe->sched->act +
                                  pipe->sched->off[pipe->stage],
                           .start = pipe->tl,
                           .end = pipe->tl + n,
                           .t0 = pipe->run_t0,
                           .t1 = pipe->run_t1,
                           .runs = pipe->runs};
}

sg_status sg_pipe_plan_create(sg_pipe_t pp, const sg_parallel_config *cfg,
                              int nparams, const sg_param_info *table,
                              int64_t nlocal, sg_parallel_t *plan) {
  sg_status st = SG_OK;
  if (!pp || !cfg || !plan)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_pipe_plan_create: pipe, config and plan are required");
  SG_TRY(sg_parallel_create(pp->sub, cfg, nparams, table, nlocal, plan));
fail:
  return st;
}

/* The stage's entries of the model's table (its chunks' pieces, in chunk
 * order) and their indices in it. */
static sg_status pp_model_table(sg_pipe_t pp, sg_model_t model,
                                sg_param_info *tab, int *idx, int *n) {
  sg_status st = SG_OK;
  *n = 0;
  for (int c = 0; c < pp->v; ++c) {
    int b0, nb;
    sg_pipe_blocks(pp, c, &b0, &nb);
    for (int b = b0; b < b0 + nb; ++b) {
      int q0, qn;
      sg_model_block_params(model, b, &q0, &qn);
      for (int i = q0; i < q0 + qn; ++i) {
        SG_TRY(sg_model_param_info(model, i, &tab[*n]));
        idx[(*n)++] = i;
      }
    }
  }
fail:
  return st;
}

sg_status sg_pipe_model_plan(sg_pipe_t pp, sg_model_t model,
                             const sg_parallel_config *cfg, uint64_t seed,
                             sg_parallel_t *plan) {
  sg_status st = SG_OK;
  sg_var **all = NULL, **mine = NULL;
  if (!pp || !model || !plan)
    return sg_error_set(
        SG_ERR_INVALID_ARG, __FILE__, __LINE__,
        "sg_pipe_model_plan: pipe, model and plan are required");
  const int np = sg_model_params(model, &all);
  sg_param_info *tab = calloc((size_t)np + 1, sizeof *tab);
  int *idx = calloc((size_t)np + 1, sizeof *idx), n = 0;
  mine = calloc((size_t)np + 1, sizeof *mine);
  if (!tab || !idx || !mine)
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                      "pipeline: out of memory");
  else if (sg_model_nblocks(model) != pp->first[pp->nv])
    st = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                      "sg_pipe_model_plan: the model has %d pieces, "
                      "the pipeline was cut for %d",
                      sg_model_nblocks(model), pp->first[pp->nv]);
  else
    st = pp_model_table(pp, model, tab, idx, &n);
  SG_TRY(sg_agree(sg_mesh_comm(pp->mesh), st));
  SG_TRY(
      sg_pipe_plan_create(pp, cfg, n, tab, sg_model_param_count(model), plan));
  SG_TRY(sg_model_bind(model, sg_parallel_params(*plan),
                       sg_parallel_grads(*plan)));
  SG_TRY(sg_model_init(model, seed));
  sg_model_params(model, &all); /* the variables exist once bound */
  for (int i = 0; i < n; ++i) mine[i] = all[idx[i]];
  SG_TRY(sg_pipe_attach(pp, *plan, mine));
fail:
  free(tab);
  free(idx);
  free(mine);
  return st;
}

/* The slot of this stage's last B (ZB-H1: its last W, where the last
 * parameter gradients are made): its tape gets the plan's hooks, where
 * zero 0 and 1 start their reductions. Every other tape gets what a
 * micro-batch needs on its own (sg_parallel_attach_tape): zero 2 and 3
 * reduce-scatter a gradient onto the pieces once no micro-batch in flight
 * still uses the parameter, zero 3 gathers the parameters of every F, B
 * and W, bf16 rounds. */
sg_status sg_pipe_attach(sg_pipe_t pp, sg_parallel_t plan,
                         sg_var *const *vars) {
  sg_status st = SG_OK;
  if (!pp || !plan)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_pipe_attach: pipe and plan are required");
  if (pp->plan)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_pipe_attach: a plan is attached already");
  const sg_pp_schedule *s = pp->sched;
  for (int i = s->off[pp->stage]; i < s->off[pp->stage + 1]; ++i)
    if (s->act[i].op == SG_PP_B || s->act[i].op == SG_PP_W)
      pp->hooked = s->act[i].mb * pp->v + s->act[i].chunk;
  SG_TRY(sg_parallel_attach(plan, pp->tapes[pp->hooked], vars));
  for (int i = 0; i < pp->m * pp->v; ++i)
    if (i != pp->hooked) SG_TRY(sg_parallel_attach_tape(plan, pp->tapes[i]));
  pp->plan = plan;
fail:
  return st;
}

/* ---- one step ------------------------------------------------------------------ */

/* The state of one run. */
typedef struct pp_run {
  struct sg_pipe *pp;
  sg_pipe_forward_fn fn;
  void *ctx;
  sg_status st;     /* this rank's own failure (agreed over the stage) */
  int failed;       /* this stage computes no more: own or a peer's failure */
  int inflight, nb; /* pairs between F and B; B's done */
  int fw;           /* pairs between F and W (ZB-H1), F and B otherwise */
  double loss;
} pp_run;

/* Message tags: (direction, sending virtual stage, micro-batch, part);
 * part 0 the header, 1 + k the payload of tensor k. */
static int pp_tag(const struct sg_pipe *pp, int dir, int g_src, int mb,
                  int part) {
  return (((dir * pp->nv + g_src) * pp->m + mb) << PP_PART_BITS) | part;
}

static MPI_Datatype pp_mpi_type(sg_dtype dt) {
  return dt == SG_DTYPE_F64 ? MPI_DOUBLE : MPI_FLOAT;
}

static sg_status pp_wait(MPI_Request *rq, const char *what,
                         struct sg_pipe *pp) {
  if (*rq == MPI_REQUEST_NULL) return SG_OK;
  return sg_wait_timed(rq, MPI_STATUS_IGNORE, 1, what, pp->comm);
}

/* pp_wait on n requests, in order. */
static sg_status pp_wait_n(MPI_Request *rq, int n, const char *what,
                           struct sg_pipe *pp) {
  sg_status st = SG_OK;
  for (int k = 0; k < n && st == SG_OK; ++k) st = pp_wait(&rq[k], what, pp);
  return st;
}

/* A local failure, agreed over the stage (its ranks compute together). */
static void pp_fail_check(pp_run *r, sg_status st) {
  if (sg_mesh_size(r->pp->sub) > 1) st = sg_agree(sg_mesh_comm(r->pp->sub), st);
  if (st != SG_OK) {
    if (r->st == SG_OK) r->st = st;
    r->failed = 1;
  }
}

/* The header of n payloads t[k], the values or gradients of v[k]. */
static void pp_hdr_of(pp_hdr *h, int n, sg_var *const *v,
                      const sg_tensor *const *t, int failed) {
  memset(h, 0, sizeof *h);
  h->failed = failed;
  if (failed) return;
  h->n = n;
  for (int k = 0; k < n; ++k) {
    pp_meta *e = &h->t[k];
    e->dtype = (int32_t)t[k]->dtype;
    e->ndim = t[k]->ndim;
    memcpy(e->shape, t[k]->shape, sizeof e->shape);
    e->sharded = sg_var_is_sharded(v[k]);
    if (e->sharded) {
      memcpy(e->gshape, v[k]->global_shape, sizeof e->gshape);
      memcpy(e->pl, v[k]->placements, sizeof e->pl);
    }
  }
}

/* Send a header and, unless failed, its payloads t (SEND_F, SEND_B). */
static sg_status pp_send(pp_run *r, int dir, int g, int mb, int peer, pp_hdr *h,
                         const sg_tensor *const *t, MPI_Request *rq) {
  sg_status st = SG_OK;
  struct sg_pipe *pp = r->pp;
  const int dest = pp->rank_of[peer];
  SG_MPI(MPI_Isend(h, (int)sizeof *h, MPI_BYTE, dest, pp_tag(pp, dir, g, mb, 0),
                   pp->comm, &rq[0]));
  for (int k = 0; k < h->n && !h->failed; ++k) {
    SG_MPI(MPI_Isend(t[k]->data, (int)sg_tensor_numel(t[k]),
                     pp_mpi_type(t[k]->dtype), dest,
                     pp_tag(pp, dir, g, mb, 1 + k), pp->comm, &rq[1 + k]));
    pp->stats.bytes_sent += sg_tensor_nbytes(t[k]);
  }
fail:
  return st;
}

/* Post the header receives of this stage's list. */
static sg_status pp_post_headers_of(pp_run *r, const sg_pp_action *act, int n) {
  sg_status st = SG_OK;
  struct sg_pipe *pp = r->pp;
  const sg_pp_schedule *s = pp->sched;
  for (int i = 0; i < n; ++i) {
    const sg_pp_action *a = &act[i];
    if (a->op != SG_PP_RECV_F && a->op != SG_PP_RECV_B) continue;
    pp_slot *sl = &pp->slots[a->mb * pp->v + a->chunk];
    const int g = sg_pp_virtual_stage(s, pp->stage, a->chunk),
              f = a->op == SG_PP_RECV_F;
    const int src = pp->rank_of[sg_pp_peer(s, pp->stage, a)];
    SG_MPI(MPI_Irecv(f ? &sl->rf : &sl->rb, (int)sizeof(pp_hdr), MPI_BYTE, src,
                     pp_tag(pp, f ? 0 : 1, f ? g - 1 : g + 1, a->mb, 0),
                     pp->comm, f ? &sl->rq_rf : &sl->rq_rb));
    if (f) sl->src_f = src, sl->tag_f = pp_tag(pp, 0, g - 1, a->mb, 0);
  }
fail:
  return st;
}

static sg_status pp_post_headers(pp_run *r) {
  const sg_pp_schedule *s = r->pp->sched;
  const int s0 = s->off[r->pp->stage];
  return pp_post_headers_of(r, s->act + s0, s->off[r->pp->stage + 1] - s0);
}

/* Post the receive of each payload a header announces, into t[k]
 * (allocated here, with the header's dtype and shape). */
static sg_status pp_post_payloads(struct sg_pipe *pp, const pp_hdr *h, int src,
                                  int tag0, sg_tensor *t, MPI_Request *rq) {
  sg_status st = SG_OK;
  for (int k = 0; k < h->n; ++k) {
    const pp_meta *e = &h->t[k];
    SG_TRY(sg_tensor_alloc(&t[k], (sg_dtype)e->dtype, sg_device_host(), e->ndim,
                           e->shape));
    SG_MPI(MPI_Irecv(t[k].data, (int)sg_tensor_numel(&t[k]),
                     pp_mpi_type(t[k].dtype), src, tag0 + 1 + k, pp->comm,
                     &rq[k]));
  }
fail:
  return st;
}

/* The activations' header has arrived: their payloads' receives, straight
 * into new leaves (the sharding is set at the RECV_F: it is collective). */
static sg_status pp_post_in(struct sg_pipe *pp, pp_slot *sl) {
  sg_status st = SG_OK;
  const pp_hdr *h = &sl->rf;
  sl->has_in = 1;
  for (int k = 0; k < h->n; ++k) {
    const pp_meta *e = &h->t[k];
    SG_TRY(sg_var_init(&sl->in[k], "pipeline.in", (sg_dtype)e->dtype, e->ndim,
                       e->shape, NULL, 1));
    SG_MPI(MPI_Irecv(sl->in[k].value.data,
                     (int)sg_tensor_numel(&sl->in[k].value),
                     pp_mpi_type(sl->in[k].value.dtype), sl->src_f,
                     sl->tag_f + 1 + k, pp->comm, &sl->rq_in[k]));
  }
fail:
  return st;
}

static void pp_release_in(pp_slot *sl) {
  for (int k = 0; k < PP_NT; ++k) {
    sg_var_release(&sl->in[k]);
    sg_tensor_free(&sl->gx[k]);
  }
  sl->has_in = 0;
}

static sg_status pp_recv_f(pp_run *r, pp_slot *sl) {
  sg_status st = SG_OK;
  struct sg_pipe *pp = r->pp;
  SG_TRY(pp_wait(&sl->rq_rf, "pipeline: activation header", pp));
  if (sl->rf.failed) {
    r->failed = 1;
    return SG_OK;
  }
  if (!sl->has_in) SG_TRY(pp_post_in(pp, sl));
  SG_TRY(pp_wait_n(sl->rq_in, sl->rf.n, "pipeline: activation", pp));
  if (r->failed) { /* consumed, not used */
    pp_release_in(sl);
    return SG_OK;
  }
  sg_status s2 = SG_OK; /* every tensor's (collective) call, in order */
  for (int k = 0; k < sl->rf.n; ++k) {
    const pp_meta *e = &sl->rf.t[k];
    sg_status s3 = e->sharded ? sg_var_set_sharding(&sl->in[k], pp->sub, e->pl,
                                                    e->gshape)
                              : SG_OK;
    if (s2 == SG_OK) s2 = s3;
  }
  pp_fail_check(r, s2);
fail:
  return st;
}

static sg_status pp_recv_b(pp_run *r, const sg_pp_action *a, pp_slot *sl,
                           int g) {
  sg_status st = SG_OK;
  struct sg_pipe *pp = r->pp;
  const int src = pp->rank_of[sg_pp_peer(pp->sched, pp->stage, a)];
  SG_TRY(pp_wait(&sl->rq_rb, "pipeline: gradient header", pp));
  if (sl->rb.failed) {
    r->failed = 1;
    for (int k = 0; k < PP_NT && sl->gin_posted; ++k) { /* nothing will come */
      if (sl->rq_gin[k] == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&sl->rq_gin[k]);
      SG_MPI(MPI_Wait(&sl->rq_gin[k], MPI_STATUS_IGNORE));
    }
    return SG_OK;
  }
  if (!sl->gin_posted)
    SG_TRY(pp_post_payloads(pp, &sl->rb, src, pp_tag(pp, 1, g + 1, a->mb, 0),
                            sl->gin, sl->rq_gin));
  sl->gin_posted = 1;
  SG_TRY(pp_wait_n(sl->rq_gin, sl->rb.n, "pipeline: gradient", pp));
fail:
  return st;
}

/* Peak bytes of the stage's tapes and of its received inputs. */
static void pp_note_bytes(struct sg_pipe *pp) {
  size_t b = 0, in = 0;
  for (int i = 0; i < pp->m * pp->v; ++i) {
    b += sg_tape_bytes(pp->tapes[i]);
    for (int k = 0; k < pp->slots[i].rf.n && pp->slots[i].has_in; ++k)
      in += sg_tensor_nbytes(&pp->slots[i].in[k].value);
  }
  if (b > pp->stats.peak_bytes) pp->stats.peak_bytes = b;
  if (in > pp->stats.peak_input_bytes) pp->stats.peak_input_bytes = in;
}

/* What the forward gave: a bundle of 1 .. PP_NT variables; the scalar
 * loss alone on the last virtual stage. */
static sg_status pp_check_out(const struct sg_pipe *pp, const sg_bundle *o,
                              const sg_pp_action *a, int g) {
  int ok = o->n >= 1 && o->n <= PP_NT;
  for (int k = 0; k < o->n && ok; ++k) ok = o->v[k] != NULL;
  if (!ok)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "pipeline: the forward of micro-batch %d chunk %d "
                        "gave no output (a bundle of %d, at most %d)",
                        a->mb, a->chunk, o->n, PP_NT);
  if (g == pp->nv - 1 && (o->n != 1 || sg_tensor_numel(&o->v[0]->value) != 1))
    return sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                        "pipeline: the last stage's forward must give the "
                        "scalar loss of micro-batch %d, not %d tensor(s) of "
                        "%lld elements",
                        a->mb, o->n,
                        (long long)sg_tensor_numel(&o->v[0]->value));
  return SG_OK;
}

static sg_status pp_forward(pp_run *r, const sg_pp_action *a, pp_slot *sl,
                            int g) {
  sg_status st = SG_OK;
  struct sg_pipe *pp = r->pp;
  if (r->failed) return SG_OK;
  sg_tape_t tape = pp->tapes[a->mb * pp->v + a->chunk];
  sg_bundle io = {.n = g > 0 ? sl->rf.n : 0};
  for (int k = 0; k < io.n; ++k) io.v[k] = &sl->in[k];
  sg_status s2 = r->fn(tape, r->ctx, a->mb, a->chunk, &io);
  if (s2 == SG_OK) s2 = pp_check_out(pp, &io, a, g);
  pp_fail_check(r, s2);
  if (r->failed) return SG_OK;
  sl->out = io;
  if (g == pp->nv - 1) r->loss += sg_var_item(io.v[0]);
  if (++r->inflight > pp->stats.peak_inflight)
    pp->stats.peak_inflight = r->inflight;
  if (++r->fw > pp->stats.peak_fw) pp->stats.peak_fw = r->fw;
  pp_note_bytes(pp);
  if (g < pp->nv - 1) { /* the gradients' receives, posted ahead */
    pp_hdr h;
    const sg_tensor *t[PP_NT];
    for (int k = 0; k < io.n; ++k) t[k] = &io.v[k]->value;
    pp_hdr_of(&h, io.n, io.v, t, 0);
    SG_TRY(pp_post_payloads(pp, &h, pp->rank_of[(g + 1) % pp->p],
                            pp_tag(pp, 1, g + 1, a->mb, 0), sl->gin,
                            sl->rq_gin));
    sl->gin_posted = 1;
  }
fail:
  return st;
}

/* The input an output is (passed through), or -1. */
static int pp_input_of(const pp_slot *sl, const sg_var *v) {
  for (int j = 0; j < sl->rf.n && sl->has_in; ++j)
    if (v == &sl->in[j]) return j;
  return -1;
}

/* a += b (same dtype and shape, contiguous). */
static void pp_add(sg_tensor *a, const sg_tensor *b) {
  const int64_t n = sg_tensor_numel(a);
  if (a->dtype == SG_DTYPE_F64)
    for (int64_t i = 0; i < n; ++i)
      ((double *)a->data)[i] += ((const double *)b->data)[i];
  else
    for (int64_t i = 0; i < n; ++i)
      ((float *)a->data)[i] += ((const float *)b->data)[i];
}

/* Backward from the outputs seeded with their received gradients. An
 * output that is an input passed through (a skip the stage neither made
 * nor used) is no variable of the tape: its gradient goes to that input's
 * gx, which SEND_B adds to what the tape gives the input. split (ZB-H1):
 * the input-gradient pass only, the tape keeps the weight-gradient work. */
static sg_status pp_backward_from(sg_tape_t tape, pp_slot *sl, int split) {
  sg_status st = SG_OK;
  sg_var *v[PP_NT];
  sg_tensor g[PP_NT];
  int n = 0;
  for (int k = 0; k < sl->out.n; ++k) {
    const int j = pp_input_of(sl, sl->out.v[k]);
    if (j < 0) {
      v[n] = sl->out.v[k];
      g[n++] = sl->gin[k];
      continue;
    }
    const sg_tensor *x = &sl->in[j].value;
    if (!sl->gx[j].data)
      SG_TRY(sg_tensor_alloc(&sl->gx[j], x->dtype, sg_device_host(), x->ndim,
                             x->shape));
    pp_add(&sl->gx[j], &sl->gin[k]);
  }
  if (n == 0) {
    sg_tape_clear(tape); /* nothing of the tape reaches an output */
    return SG_OK;
  }
  return split ? sg_tape_backward_from_split(tape, n, v, g)
               : sg_tape_backward_from(tape, n, v, g);
fail:
  sg_tape_clear(tape);
  return st;
}

/* B: the whole backward, or with ZB-H1 its input-gradient pass (the
 * tape keeps the weight-gradient work for W). */
static sg_status pp_backward(pp_run *r, const sg_pp_action *a, pp_slot *sl,
                             int g) {
  sg_status st = SG_OK;
  struct sg_pipe *pp = r->pp;
  sg_tape_t tape = pp->tapes[a->mb * pp->v + a->chunk];
  const int split = pp->sched->kind == SG_PP_ZB_H1;
  /* the outputs' memory goes with the tape */
  SG_TRY(pp_wait_n(sl->sqf, PP_NT + 1, "pipeline: send", pp));
  if (r->failed || sl->out.n == 0) {
    sg_tape_clear(tape);
    sl->out.n = 0;
    return SG_OK;
  }
  sg_status s2 = pp->plan
                     ? sg_parallel_begin_micro(pp->plan, r->nb, pp->m * pp->v)
                     : SG_OK;
  if (s2 == SG_OK && g == pp->nv - 1)
    s2 = split ? sg_tape_backward_split(tape, sl->out.v[0])
               : sg_tape_backward(tape, sl->out.v[0]);
  else if (s2 == SG_OK)
    s2 = pp_backward_from(tape, sl, split);
  else
    sg_tape_clear(tape);
  sl->out.n = 0;
  r->nb++;
  r->inflight--;
  if (!split) r->fw--;
  for (int k = 0; k < PP_NT; ++k) sg_tensor_free(&sl->gin[k]);
  pp_note_bytes(pp); /* ZB-H1: what W still holds */
  pp_fail_check(r, s2);
fail:
  return st;
}

/* W (ZB-H1): the weight-gradient pass of the pair's tape; the parameter
 * gradients accumulate in the plan's buffer in B's order, the same bits
 * as a whole backward. After a failure the tape is just cleared. */
static sg_status pp_weights(pp_run *r, const sg_pp_action *a) {
  struct sg_pipe *pp = r->pp;
  sg_tape_t tape = pp->tapes[a->mb * pp->v + a->chunk];
  if (!sg_tape_weights_pending(tape)) { /* its F or B did not run */
    sg_tape_clear(tape);
    return SG_OK;
  }
  r->fw--;
  if (r->failed) {
    sg_tape_clear(tape);
    return SG_OK;
  }
  pp_fail_check(r, sg_tape_backward_weights(tape));
  return SG_OK;
}

static sg_status pp_send_f(pp_run *r, const sg_pp_action *a, pp_slot *sl,
                           int g) {
  const sg_tensor *t[PP_NT] = {NULL};
  const int n = sl->out.n;
  for (int k = 0; k < n; ++k) t[k] = &sl->out.v[k]->value;
  pp_hdr_of(&sl->sf, n, sl->out.v, t, r->failed || n == 0);
  return pp_send(r, 0, g, a->mb, sg_pp_peer(r->pp->sched, r->pp->stage, a),
                 &sl->sf, t, sl->sqf);
}

/* The gradient SEND_B sends for input k: its tape gradient, plus what it
 * got as an output passed through (gx), or zeros when it got nothing. */
static sg_status pp_input_grad(pp_slot *sl, int k, const sg_tensor **t) {
  sg_status st = SG_OK;
  const sg_tensor *x = &sl->in[k].value, *tg = &sl->in[k].grad;
  if (!sl->gx[k].data && tg->data) {
    *t = tg;
    return SG_OK;
  }
  if (!sl->gx[k].data)
    SG_TRY(sg_tensor_alloc(&sl->gx[k], x->dtype, sg_device_host(), x->ndim,
                           x->shape));
  else if (tg->data)
    pp_add(&sl->gx[k], tg);
  *t = &sl->gx[k];
fail:
  return st;
}

static sg_status pp_send_b(pp_run *r, const sg_pp_action *a, pp_slot *sl,
                           int g) {
  sg_status st = SG_OK;
  const int failed = r->failed || !sl->has_in, n = sl->rf.n;
  const sg_tensor *t[PP_NT] = {NULL};
  sg_var *v[PP_NT] = {NULL};
  for (int k = 0; k < n && !failed; ++k) {
    v[k] = &sl->in[k];
    SG_TRY(pp_input_grad(sl, k, &t[k]));
  }
  pp_hdr_of(&sl->sb, n, v, t, failed);
  SG_TRY(pp_send(r, 1, g, a->mb, sg_pp_peer(r->pp->sched, r->pp->stage, a),
                 &sl->sb, t, sl->sqb));
fail:
  return st;
}

/* Between actions: post the payload receives of every activation header
 * that has arrived, and free the received activations whose gradients
 * have been sent (a stage holds an input only while its micro-batch is in
 * flight). */
static sg_status pp_progress(struct sg_pipe *pp) {
  sg_status st = SG_OK;
  for (int i = 0; i < pp->m * pp->v; ++i) {
    pp_slot *sl = &pp->slots[i];
    int done = 0;
    if (sl->rq_rf != MPI_REQUEST_NULL) {
      SG_MPI(MPI_Test(&sl->rq_rf, &done, MPI_STATUS_IGNORE));
      if (done && !sl->rf.failed) SG_TRY(pp_post_in(pp, sl));
    }
    if (!sl->has_in || sl->sqb[0] == MPI_REQUEST_NULL ||
        sg_tape_weights_pending(pp->tapes[i]))
      continue; /* ZB-H1: W may read the inputs (held until W) */
    done = 1;
    for (int k = 0; k <= PP_NT && done; ++k)
      SG_MPI(MPI_Test(&sl->sqb[k], &done, MPI_STATUS_IGNORE));
    if (done) pp_release_in(sl);
  }
fail:
  return st;
}

static sg_status pp_action(pp_run *r, const sg_pp_action *a) {
  struct sg_pipe *pp = r->pp;
  pp_slot *sl = &pp->slots[a->mb * pp->v + a->chunk];
  const int g = sg_pp_virtual_stage(pp->sched, pp->stage, a->chunk);
  switch (a->op) {
  case SG_PP_F: return pp_forward(r, a, sl, g);
  case SG_PP_B: return pp_backward(r, a, sl, g);
  case SG_PP_W: return pp_weights(r, a);
  case SG_PP_SEND_F: return pp_send_f(r, a, sl, g);
  case SG_PP_RECV_F: return pp_recv_f(r, sl);
  case SG_PP_SEND_B: return pp_send_b(r, a, sl, g);
  case SG_PP_RECV_B: return pp_recv_b(r, a, sl, g);
  default:
    return sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__,
                        "pipeline: bad action %d", (int)a->op);
  }
}

/* The last run's actions as Chrome-trace events (sg_trace_add: only when
 * tracing is enabled), named as sg-info names them. */
static void pp_trace(const struct sg_pipe *pp) {
  if (!sg_trace_enabled()) return;
  const int n = pp_nact(pp);
  const sg_pp_action *a = pp->sched->act + pp->sched->off[pp->stage];
  for (int i = 0; i < n; ++i) {
    char name[32];
    sg_pp_action_label(pp->sched, &a[i], name, sizeof name);
    sg_trace_add(name, pp->tl[i], pp->tl[n + i]);
  }
}

/* Complete the sends, free what the step held. */
static sg_status pp_finish(struct sg_pipe *pp) {
  sg_status st = SG_OK;
  for (int i = 0; i < pp->m * pp->v; ++i) {
    pp_slot *sl = &pp->slots[i];
    for (int k = 0; k <= PP_NT; ++k) {
      sg_status s2 = pp_wait(&sl->sqf[k], "pipeline: send", pp);
      if (st == SG_OK) st = s2;
      s2 = pp_wait(&sl->sqb[k], "pipeline: send", pp);
      if (st == SG_OK) st = s2;
    }
    pp_release_in(sl);
    for (int k = 0; k < PP_NT; ++k) sg_tensor_free(&sl->gin[k]);
    sg_tape_clear(pp->tapes[i]);
    pp_slot_reset(sl);
  }
  return st;
}

sg_status sg_pipe_run(sg_pipe_t pp, sg_pipe_forward_fn fn, void *ctx,
                      double *loss) {
  sg_status st = SG_OK;
  if (!pp || !fn)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_pipe_run: pipe and forward function are required");
  pp_run r = {.pp = pp, .fn = fn, .ctx = ctx};
  for (int i = 0; i < pp->m * pp->v; ++i) pp_slot_reset(&pp->slots[i]);
  const sg_pp_schedule *s = pp->sched;
  const int n = pp_nact(pp);
  double *t0 = pp->tl, *t1 = pp->tl + n;
  pp->run_t0 = sg_wtime();
  SG_TRY(pp_post_headers(&r));
  for (int i = 0; i < n; ++i) { /* the timeline: each action's interval */
    t0[i] = sg_wtime();
    SG_TRY(pp_action(&r, &s->act[s->off[pp->stage] + i]));
    t1[i] = sg_wtime();
    SG_TRY(pp_progress(pp));
  }
  SG_TRY(pp_finish(pp));
  pp->run_t1 = sg_wtime();
  pp->runs++;
  pp_trace(pp);
  st = sg_agree(sg_mesh_comm(pp->mesh),
                r.st); /* the failing rank's message on every rank */
  if (st != SG_OK) goto fail;
  SG_TRY(sg_bcast(pp->ppg, &r.loss, 1, SG_DTYPE_F64, pp->p - 1));
  if (loss) *loss = r.loss;
fail:
  return st;
}

sg_status sg_pipe_reduce(sg_pipe_t pp, double *grad_norm) {
  sg_status st = SG_OK;
  if (!pp || !pp->plan)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_pipe_reduce: attach a plan first");
  double n = 0.0, sq[64],
         *all = pp->p <= 64 ? sq : malloc((size_t)pp->p * sizeof *all),
         total = 0.0;
  if (!all) SG_RAISE(SG_ERR_ALLOC, "pipeline: out of memory");
  st = sg_parallel_reduce(pp->plan, &n);
  n *= n;
  if (st == SG_OK) st = sg_allgather(pp->ppg, &n, 1, all, SG_DTYPE_F64);
  for (int s = 0; s < pp->p && st == SG_OK; ++s) total += all[s];
  if (all != sq) free(all);
  if (st == SG_OK && grad_norm) *grad_norm = sqrt(total);
fail:
  return st;
}

/* ---- forward only (evaluation) -------------------------------------------------- */

/* This stage's forward-only list: per micro-batch, per chunk, RECV_F, F,
 * SEND_F. It is ordered by (micro-batch, virtual stage) on every stage and
 * every receive's data comes from an earlier pair in that order, so the
 * lists run to their end with blocking receives (no deadlock). */
static sg_status pp_fwd_list(const struct sg_pipe *pp, sg_pp_action **act,
                             int *n) {
  sg_status st = SG_OK;
  *n = 0;
  *act = malloc((size_t)(3 * pp->m * pp->v) * sizeof **act);
  if (!*act) SG_RAISE(SG_ERR_ALLOC, "pipeline: out of memory");
  for (int mb = 0; mb < pp->m; ++mb)
    for (int c = 0; c < pp->v; ++c) {
      const int g = sg_pp_virtual_stage(pp->sched, pp->stage, c);
      if (g > 0) (*act)[(*n)++] = (sg_pp_action){SG_PP_RECV_F, mb, c};
      (*act)[(*n)++] = (sg_pp_action){SG_PP_F, mb, c};
      if (g < pp->nv - 1) (*act)[(*n)++] = (sg_pp_action){SG_PP_SEND_F, mb, c};
    }
fail:
  return st;
}

/* A forward with gradients off; the last virtual stage's output is the
 * caller's (fn used it): its tape is cleared at once. The others' outputs
 * stay on their tapes until their sends complete (pp_finish). */
static sg_status pp_fwd_only(pp_run *r, const sg_pp_action *a, pp_slot *sl,
                             int g) {
  struct sg_pipe *pp = r->pp;
  if (r->failed) return SG_OK;
  sg_tape_t tape = pp->tapes[a->mb * pp->v + a->chunk];
  sg_bundle io = {.n = g > 0 ? sl->rf.n : 0};
  for (int k = 0; k < io.n; ++k) io.v[k] = &sl->in[k];
  const int prev = sg_tape_set_grad_enabled(tape, 0);
  sg_status s2 = r->fn(tape, r->ctx, a->mb, a->chunk, &io);
  sg_tape_set_grad_enabled(tape, prev);
  if (s2 == SG_OK && g < pp->nv - 1) s2 = pp_check_out(pp, &io, a, g);
  pp_fail_check(r, s2);
  if (g == pp->nv - 1)
    sg_tape_clear(tape); /* the caller used the output */
  else if (!r->failed)
    sl->out = io;
  return SG_OK;
}

static sg_status pp_fwd_action(pp_run *r, const sg_pp_action *a) {
  struct sg_pipe *pp = r->pp;
  pp_slot *sl = &pp->slots[a->mb * pp->v + a->chunk];
  const int g = sg_pp_virtual_stage(pp->sched, pp->stage, a->chunk);
  switch (a->op) {
  case SG_PP_F: return pp_fwd_only(r, a, sl, g);
  case SG_PP_SEND_F: return pp_send_f(r, a, sl, g);
  case SG_PP_RECV_F: return pp_recv_f(r, sl);
  default:
    return sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__,
                        "pipeline: bad forward-only action %d", (int)a->op);
  }
}

sg_status sg_pipe_forward(sg_pipe_t pp, sg_pipe_forward_fn fn, void *ctx) {
  sg_status st = SG_OK;
  sg_pp_action *act = NULL;
  int n = 0;
  if (!pp || !fn)
    return sg_error_set(
        SG_ERR_INVALID_ARG, __FILE__, __LINE__,
        "sg_pipe_forward: pipe and forward function are required");
  pp_run r = {.pp = pp, .fn = fn, .ctx = ctx};
  for (int i = 0; i < pp->m * pp->v; ++i) pp_slot_reset(&pp->slots[i]);
  SG_TRY(sg_agree(sg_mesh_comm(pp->mesh), pp_fwd_list(pp, &act, &n)));
  SG_TRY(pp_post_headers_of(&r, act, n));
  for (int i = 0; i < n; ++i) {
    SG_TRY(pp_fwd_action(&r, &act[i]));
    SG_TRY(pp_progress(pp));
  }
  SG_TRY(pp_finish(pp));
  st = sg_agree(sg_mesh_comm(pp->mesh), r.st);
fail:
  free(act);
  return st;
}

sg_status sg_pipe_bcast_last(sg_pipe_t pp, void *buf, int64_t n,
                             sg_dtype dtype) {
  if (!pp || (n > 0 && !buf))
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_pipe_bcast_last: NULL argument");
  return n > 0 ? sg_bcast(pp->ppg, buf, n, dtype, pp->p - 1) : SG_OK;
}
