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

/* The header of every transfer: what the payload is, or that the sender's
 * pipeline failed (then no payload follows). Sent as bytes: every rank
 * runs the same binary. */
typedef struct pp_hdr {
  int32_t failed, dtype, ndim, sharded;
  int64_t shape[SG_TENSOR_MAX_DIMS], gshape[SG_TENSOR_MAX_DIMS];
  sg_placement pl[SG_MESH_MAX_DIMS];
} pp_hdr;

/* Per (micro-batch, chunk) of this stage, for one step. */
typedef struct pp_slot {
  sg_var in; /* the activation received (a leaf), when has_in */
  int has_in;
  sg_var *out;     /* the forward's output (tape-owned) until B */
  sg_tensor gin;   /* the output's gradient, received (RECV_B) */
  sg_tensor gzero; /* zeros sent when the input got no gradient */
  int gin_posted;
  pp_hdr rf, rb, sf, sb; /* headers received (F, B) and sent */
  int src_f, tag_f;      /* where the activation's payload comes from */
  MPI_Request rq_rf, rq_rb, rq_in, rq_gin,
      sq[4]; /* sq: F header, payload; B ... */
} pp_slot;

static void pp_slot_reset(pp_slot *sl) {
  memset(sl, 0, sizeof *sl);
  sl->rq_rf = sl->rq_rb = sl->rq_in = sl->rq_gin = MPI_REQUEST_NULL;
  for (int k = 0; k < 4; ++k) sl->sq[k] = MPI_REQUEST_NULL;
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
  if (flag && 4.0 * pp->nv * pp->m > (double)*ub + 1)
    SG_RAISE(
        SG_ERR_INVALID_ARG,
        "pipeline: %d virtual stages x %d micro-batches need %d message tags, MPI "
        "offers %d",
        pp->nv, pp->m, 4 * pp->nv * pp->m, *ub + 1);
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
  if (cfg->zero >= 2)
    SG_RAISE(
        SG_ERR_NOT_SUPPORTED,
        "pipeline: zero = %d inside a stage is not supported yet (the plan's hooks "
        "would be needed on every micro-batch's tape): use zero 0 or 1",
        cfg->zero);
  if (cfg->param_dtype == SG_DTYPE_BF16)
    SG_RAISE(
        SG_ERR_NOT_SUPPORTED,
        "pipeline: param_dtype = bf16 is not supported yet (its rounding hooks would "
        "be needed on every micro-batch's tape)");
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

/* The slot of this stage's last B: its tape gets the plan's hooks. */
sg_status sg_pipe_attach(sg_pipe_t pp, sg_parallel_t plan,
                         sg_var *const *vars) {
  sg_status st = SG_OK;
  if (!pp || !plan)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_pipe_attach: pipe and plan are required");
  if (pp->plan)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_pipe_attach: a plan is attached already");
  const sg_pp_schedule *s = pp->sched;
  for (int i = s->off[pp->stage]; i < s->off[pp->stage + 1]; ++i)
    if (s->act[i].op == SG_PP_B)
      pp->hooked = s->act[i].mb * pp->v + s->act[i].chunk;
  SG_TRY(sg_parallel_attach(plan, pp->tapes[pp->hooked], vars));
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
  double loss;
} pp_run;

/* Message tags: (direction, sending virtual stage, micro-batch, part). */
static int pp_tag(const struct sg_pipe *pp, int dir, int g_src, int mb,
                  int part) {
  return (((dir * pp->nv + g_src) * pp->m + mb) << 1) | part;
}

static MPI_Datatype pp_mpi_type(sg_dtype dt) {
  return dt == SG_DTYPE_F64 ? MPI_DOUBLE : MPI_FLOAT;
}

static sg_status pp_wait(MPI_Request *rq, const char *what,
                         struct sg_pipe *pp) {
  if (*rq == MPI_REQUEST_NULL) return SG_OK;
  return sg_wait_timed(rq, MPI_STATUS_IGNORE, 1, what, pp->comm);
}

/* A local failure, agreed over the stage (its ranks compute together). */
static void pp_fail_check(pp_run *r, sg_status st) {
  if (sg_mesh_size(r->pp->sub) > 1) st = sg_agree(sg_mesh_comm(r->pp->sub), st);
  if (st != SG_OK) {
    if (r->st == SG_OK) r->st = st;
    r->failed = 1;
  }
}

static void pp_hdr_of(pp_hdr *h, const sg_var *v, const sg_tensor *t,
                      int failed) {
  memset(h, 0, sizeof *h);
  h->failed = failed;
  if (failed) return;
  h->dtype = (int32_t)t->dtype;
  h->ndim = t->ndim;
  memcpy(h->shape, t->shape, sizeof h->shape);
  h->sharded = sg_var_is_sharded(v);
  if (h->sharded) {
    memcpy(h->gshape, v->global_shape, sizeof h->gshape);
    memcpy(h->pl, v->placements, sizeof h->pl);
  }
}

/* Send a header and, unless failed, the tensor t (SEND_F, SEND_B). */
static sg_status pp_send(pp_run *r, int dir, int g, int mb, int peer, pp_hdr *h,
                         const sg_tensor *t, MPI_Request *rq) {
  sg_status st = SG_OK;
  struct sg_pipe *pp = r->pp;
  const int dest = pp->rank_of[peer];
  SG_MPI(MPI_Isend(h, (int)sizeof *h, MPI_BYTE, dest, pp_tag(pp, dir, g, mb, 0),
                   pp->comm, &rq[0]));
  if (!h->failed)
    SG_MPI(MPI_Isend(t->data, (int)sg_tensor_numel(t), pp_mpi_type(t->dtype),
                     dest, pp_tag(pp, dir, g, mb, 1), pp->comm, &rq[1]));
fail:
  return st;
}

/* Post the header receives of this stage's list. */
static sg_status pp_post_headers(pp_run *r) {
  sg_status st = SG_OK;
  struct sg_pipe *pp = r->pp;
  const sg_pp_schedule *s = pp->sched;
  for (int i = s->off[pp->stage]; i < s->off[pp->stage + 1]; ++i) {
    const sg_pp_action *a = &s->act[i];
    if (a->op != SG_PP_RECV_F && a->op != SG_PP_RECV_B) continue;
    pp_slot *sl = &pp->slots[a->mb * pp->v + a->chunk];
    const int g = sg_pp_virtual_stage(s, pp->stage, a->chunk),
              f = a->op == SG_PP_RECV_F;
    const int src = pp->rank_of[sg_pp_peer(s, pp->stage, a)];
    SG_MPI(MPI_Irecv(f ? &sl->rf : &sl->rb, (int)sizeof(pp_hdr), MPI_BYTE, src,
                     pp_tag(pp, f ? 0 : 1, f ? g - 1 : g + 1, a->mb, 0),
                     pp->comm, f ? &sl->rq_rf : &sl->rq_rb));
    if (f) sl->src_f = src, sl->tag_f = pp_tag(pp, 0, g - 1, a->mb, 1);
  }
fail:
  return st;
}

/* The payload a header announces, into t (allocated here). */
static sg_status pp_recv_payload(pp_run *r, const pp_hdr *h, int src, int tag,
                                 sg_tensor *t) {
  sg_status st = SG_OK;
  MPI_Request rq;
  SG_TRY(sg_tensor_alloc(t, (sg_dtype)h->dtype, sg_device_host(), h->ndim,
                         h->shape));
  SG_MPI(MPI_Irecv(t->data, (int)sg_tensor_numel(t), pp_mpi_type(t->dtype), src,
                   tag, r->pp->comm, &rq));
  SG_TRY(pp_wait(&rq, "pipeline: receive", r->pp));
fail:
  return st;
}

/* The activation's header has arrived: its payload's receive, straight
 * into a new leaf (the sharding is set at the RECV_F: it is collective). */
static sg_status pp_post_in(struct sg_pipe *pp, pp_slot *sl) {
  sg_status st = SG_OK;
  const pp_hdr *h = &sl->rf;
  SG_TRY(sg_var_init(&sl->in, "pipeline.in", (sg_dtype)h->dtype, h->ndim,
                     h->shape, NULL, 1));
  sl->has_in = 1;
  SG_MPI(MPI_Irecv(sl->in.value.data, (int)sg_tensor_numel(&sl->in.value),
                   pp_mpi_type(sl->in.value.dtype), sl->src_f, sl->tag_f,
                   pp->comm, &sl->rq_in));
fail:
  return st;
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
  SG_TRY(pp_wait(&sl->rq_in, "pipeline: activation", pp));
  if (r->failed) { /* consumed, not used */
    sg_var_release(&sl->in);
    sl->has_in = 0;
    return SG_OK;
  }
  pp_fail_check(r, sl->rf.sharded
                       ? sg_var_set_sharding(&sl->in, pp->sub, sl->rf.pl,
                                             sl->rf.gshape)
                       : SG_OK);
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
    if (sl->gin_posted) { /* nothing will come */
      MPI_Cancel(&sl->rq_gin);
      SG_MPI(MPI_Wait(&sl->rq_gin, MPI_STATUS_IGNORE));
    }
    return SG_OK;
  }
  if (sl->gin_posted)
    SG_TRY(pp_wait(&sl->rq_gin, "pipeline: gradient", pp));
  else
    SG_TRY(pp_recv_payload(r, &sl->rb, src, pp_tag(pp, 1, g + 1, a->mb, 1),
                           &sl->gin));
  sl->gin_posted = 1;
fail:
  return st;
}

/* Peak bytes of the stage's tapes and of its received inputs. */
static void pp_note_bytes(struct sg_pipe *pp) {
  size_t b = 0, in = 0;
  for (int i = 0; i < pp->m * pp->v; ++i) {
    b += sg_tape_bytes(pp->tapes[i]);
    if (pp->slots[i].has_in) in += sg_tensor_nbytes(&pp->slots[i].in.value);
  }
  if (b > pp->stats.peak_bytes) pp->stats.peak_bytes = b;
  if (in > pp->stats.peak_input_bytes) pp->stats.peak_input_bytes = in;
}

static sg_status pp_forward(pp_run *r, const sg_pp_action *a, pp_slot *sl,
                            int g) {
  sg_status st = SG_OK;
  struct sg_pipe *pp = r->pp;
  if (r->failed) return SG_OK;
  sg_tape_t tape = pp->tapes[a->mb * pp->v + a->chunk];
  sg_status s2 = r->fn(tape, r->ctx, a->mb, a->chunk, g > 0 ? &sl->in : NULL,
                       &sl->out);
  if (s2 == SG_OK && !sl->out)
    s2 = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                      "pipeline: the forward of micro-batch %d chunk %d "
                      "gave no output",
                      a->mb, a->chunk);
  if (s2 == SG_OK && g == pp->nv - 1 && sg_tensor_numel(&sl->out->value) != 1)
    s2 = sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                      "pipeline: the last stage's forward must give the scalar "
                      "loss of micro-batch %d, not %lld elements",
                      a->mb, (long long)sg_tensor_numel(&sl->out->value));
  pp_fail_check(r, s2);
  if (r->failed) return SG_OK;
  if (g == pp->nv - 1) r->loss += sg_var_item(sl->out);
  if (++r->inflight > pp->stats.peak_inflight)
    pp->stats.peak_inflight = r->inflight;
  pp_note_bytes(pp);
  if (g < pp->nv - 1) { /* the gradient's receive, posted ahead */
    const sg_tensor *o = &sl->out->value;
    const int src = pp->rank_of[(g + 1) % pp->p];
    SG_TRY(sg_tensor_alloc(&sl->gin, o->dtype, sg_device_host(), o->ndim,
                           o->shape));
    SG_MPI(MPI_Irecv(sl->gin.data, (int)sg_tensor_numel(&sl->gin),
                     pp_mpi_type(o->dtype), src, pp_tag(pp, 1, g + 1, a->mb, 1),
                     pp->comm, &sl->rq_gin));
    sl->gin_posted = 1;
  }
fail:
  return st;
}

static sg_status pp_backward(pp_run *r, const sg_pp_action *a, pp_slot *sl,
                             int g) {
  sg_status st = SG_OK;
  struct sg_pipe *pp = r->pp;
  sg_tape_t tape = pp->tapes[a->mb * pp->v + a->chunk];
  SG_TRY(pp_wait(&sl->sq[0], "pipeline: send",
                 pp)); /* the output's memory goes with the tape */
  SG_TRY(pp_wait(&sl->sq[1], "pipeline: send", pp));
  if (r->failed || !sl->out) {
    sg_tape_clear(tape);
    sl->out = NULL;
    return SG_OK;
  }
  sg_status s2 = pp->plan
                     ? sg_parallel_begin_micro(pp->plan, r->nb, pp->m * pp->v)
                     : SG_OK;
  if (s2 == SG_OK)
    s2 = g == pp->nv - 1 ? sg_tape_backward(tape, sl->out)
                         : sg_tape_backward_from(tape, 1, &sl->out, &sl->gin);
  else
    sg_tape_clear(tape);
  sl->out = NULL;
  r->nb++;
  r->inflight--;
  sg_tensor_free(&sl->gin);
  pp_fail_check(r, s2);
fail:
  return st;
}

static sg_status pp_send_f(pp_run *r, const sg_pp_action *a, pp_slot *sl,
                           int g) {
  pp_hdr_of(&sl->sf, sl->out, sl->out ? &sl->out->value : NULL,
            r->failed || !sl->out);
  return pp_send(r, 0, g, a->mb, sg_pp_peer(r->pp->sched, r->pp->stage, a),
                 &sl->sf, sl->out ? &sl->out->value : NULL, &sl->sq[0]);
}

static sg_status pp_send_b(pp_run *r, const sg_pp_action *a, pp_slot *sl,
                           int g) {
  sg_status st = SG_OK;
  const int failed = r->failed || !sl->has_in;
  const sg_tensor *t = NULL;
  if (!failed && !sl->in.grad.data) { /* the input got no gradient: zeros */
    SG_TRY(sg_tensor_alloc(&sl->gzero, sl->in.value.dtype, sg_device_host(),
                           sl->in.value.ndim, sl->in.value.shape));
    t = &sl->gzero;
  } else if (!failed) {
    t = &sl->in.grad;
  }
  pp_hdr_of(&sl->sb, &sl->in, t, failed);
  SG_TRY(pp_send(r, 1, g, a->mb, sg_pp_peer(r->pp->sched, r->pp->stage, a),
                 &sl->sb, t, &sl->sq[2]));
fail:
  return st;
}

/* Between actions: post the payload receive of every activation header
 * that has arrived, and free the received activations whose gradient has
 * been sent (a stage holds an input only while its micro-batch is in
 * flight). */
static sg_status pp_progress(struct sg_pipe *pp) {
  sg_status st = SG_OK;
  for (int i = 0; i < pp->m * pp->v; ++i) {
    pp_slot *sl = &pp->slots[i];
    int hdr = 0, data = 0; /* the SEND_B's header and payload */
    if (sl->rq_rf != MPI_REQUEST_NULL) {
      SG_MPI(MPI_Test(&sl->rq_rf, &hdr, MPI_STATUS_IGNORE));
      if (hdr && !sl->rf.failed) SG_TRY(pp_post_in(pp, sl));
      hdr = 0;
    }
    if (!sl->has_in || sl->sq[2] == MPI_REQUEST_NULL) continue;
    SG_MPI(MPI_Test(&sl->sq[3], &data, MPI_STATUS_IGNORE));
    if (data) SG_MPI(MPI_Test(&sl->sq[2], &hdr, MPI_STATUS_IGNORE));
    if (!hdr) continue;
    sg_var_release(&sl->in);
    sg_tensor_free(&sl->gzero);
    sl->has_in = 0;
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
  case SG_PP_W:
    return SG_OK; /* B ran the whole backward (the tape does not split it yet) */
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
    for (int k = 0; k < 4; ++k) {
      sg_status s2 = pp_wait(&sl->sq[k], "pipeline: send", pp);
      if (st == SG_OK) st = s2;
    }
    if (sl->has_in) sg_var_release(&sl->in);
    sg_tensor_free(&sl->gin);
    sg_tensor_free(&sl->gzero);
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
