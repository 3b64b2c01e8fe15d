/* shardgrid — the parallel plan's tape hooks: ZeRO-3 gathers and their
 * prefetch, the reduce-scatters overlapped with backward, DDP's grad-ready
 * marks, attach and micro-batches (see sg_parallel.h, parallel_impl.h). */
#include "parallel_impl.h"

#include "autograd_impl.h" /* ag_mem_*, ag_sum_det: a device plan */
#include "sg_decomp.h"
#include "sg_device.h"

#include <stdlib.h>
#include <string.h>

/* ---- hooks --------------------------------------------------------------------- */

/* The span holding offset off (spans are few: linear). */
static pl_span *span_at(struct sg_parallel *p, int64_t off) {
  for (int k = 0; k < p->nspan; ++k)
    if (off >= p->span[k].off && off < p->span[k].off + p->span[k].n)
      return &p->span[k];
  return NULL;
}

/* The table entry of an attached variable, -1 if none (binary search). */
static int param_of_var(const struct sg_parallel *p, const sg_var *v) {
  int lo = 0, hi = p->np - 1;
  while (p->var_sorted && lo <= hi) {
    int mid = (lo + hi) / 2;
    if ((uintptr_t)v < (uintptr_t)p->var_sorted[mid])
      hi = mid - 1;
    else if ((uintptr_t)v > (uintptr_t)p->var_sorted[mid])
      lo = mid + 1;
    else
      return p->var_index[mid];
  }
  return -1;
}

/* ZeRO group of parameter q and its size and rank (1, 0 without one). */
static sg_group_t zgroup(const struct sg_parallel *p, const pl_param *q, int *g,
                         int *me) {
  sg_group_t zg = p->l[q->layout].zero_g;
  *g = zg ? sg_group_size(zg) : 1;
  *me = zg ? sg_group_rank(zg) : 0;
  return zg;
}

/* zero 3: the whole local box of q from the pieces of its ZeRO group. */
sg_status pl_gather_value(struct sg_parallel *p, pl_param *q, float *out) {
  sg_status st = SG_OK;
  int g, me;
  sg_group_t zg = zgroup(p, q, &g, &me);
  if (!zg || g == 1)
    memcpy(out, p->ppiece + q->moff, (size_t)q->info.numel * sizeof *out);
  else
    SG_TRY(sg_allgatherv(zg, p->ppiece + q->moff, q->pcount[me], out, q->pcount,
                         q->pdispl, SG_DTYPE_F32));
fail:
  return st;
}

/* zero 3: what the gather of q for a use sends (its piece) and receives:
 * the master piece in f32, or under the bf16 policy its bf16 values (half
 * the bytes), widened into vfull by use_widen once they are in. */
static sg_status use_buffers(struct sg_parallel *p, pl_param *q,
                             const void **send, void **recv, sg_dtype *dt) {
  sg_status st = SG_OK;
  *dt = SG_DTYPE_F32;
  *send = p->ppiece + q->moff;
  *recv = q->vfull;
  if (p->prec.param_dt == SG_DTYPE_BF16) {
    const sg_bf16 *pieces = pl_precision_pieces(&p->prec, p->ppiece, p->nstate);
    if (!pieces)
      SG_RAISE(SG_ERR_ALLOC,
               "parallel plan: out of memory for the bf16 pieces");
    *dt = SG_DTYPE_BF16;
    *send = pieces + q->moff;
    *recv = q->vfull16;
  }
fail:
  return st;
}

static void use_widen(pl_param *q) {
  if (q->vfull16)
    (void)sg_dtype_convert(q->vfull16, SG_DTYPE_BF16, q->vfull, SG_DTYPE_F32,
                           q->info.numel);
}

/* zero 3: q's value for a use into vfull (allocated): a copy of the piece
 * when the group has one rank, else the all-gather of use_buffers. */
static sg_status gather_use(struct sg_parallel *p, pl_param *q) {
  sg_status st = SG_OK;
  int g, me;
  sg_group_t zg = zgroup(p, q, &g, &me);
  if (!zg || g == 1) return pl_gather_value(p, q, q->vfull);
  const void *send;
  void *recv;
  sg_dtype dt;
  SG_TRY(use_buffers(p, q, &send, &recv, &dt));
  SG_TRY(
      sg_allgatherv(zg, send, q->pcount[me], recv, q->pcount, q->pdispl, dt));
  use_widen(q);
fail:
  return st;
}

/* zero 3: q's gathered value (vfull), counted in the floats gathered at
 * once (sg_parallel_gathered_peak). */
static sg_status vfull_alloc(struct sg_parallel *p, pl_param *q) {
  sg_status st = sg_malloc(sg_device_host(),
                           (size_t)q->info.numel * sizeof(float),
                           (void **)&q->vfull);
  if (st == SG_OK && p->prec.param_dt == SG_DTYPE_BF16)
    st = sg_malloc(sg_device_host(), (size_t)q->info.numel * sizeof(sg_bf16),
                   (void **)&q->vfull16);
  if (st == SG_OK && (p->gathered += q->info.numel) > p->gathered_peak)
    p->gathered_peak = p->gathered;
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
      if (!u)
        SG_RAISE(SG_ERR_ALLOC,
                 "parallel plan: out of memory for the prefetch order");
      p->uses = u;
      p->cap_uses = cap;
    }
    p->uses[p->nuses++] = i;
  } else if (p->use_pos < 0 || p->use_pos >= p->nuses ||
             p->uses[p->use_pos] != i) {
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
  if (p->pf >= 0 || q->info.numel == 0 || q->var->value.data || q->vfull ||
      !zg || g == 1)
    return SG_OK;
  SG_TRY(vfull_alloc(p, q));
  const void *send;
  void *recv;
  sg_dtype dt;
  SG_TRY(use_buffers(p, q, &send, &recv, &dt));
  SG_TRY(sg_iallgatherv(zg, send, q->pcount[me], recv, q->pcount, q->pdispl, dt,
                        &p->pf_req));
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
  const int next = p->in_window && p->uses_done && p->use_pos >= 0 &&
                           p->use_pos < p->nuses
                       ? p->uses[p->use_pos]
                       : -1;
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

sg_status pl_rs_drain(struct sg_parallel *p) {
  sg_status st = SG_OK;
  while (st == SG_OK && p->rs_head < p->rs_tail) st = rs_complete(p);
  return st;
}

/* Start parameter i's reduce-scatter (nothing to start with one piece: the
 * box is the piece). Collective over its ZeRO group (non-blocking). */
sg_status pl_rs_start(struct sg_parallel *p, int i) {
  sg_status st = SG_OK;
  pl_param *q = &p->p[i];
  int g, me;
  sg_group_t zg = zgroup(p, q, &g, &me);
  float *full = full_grad(p, q);
  if (p->rs_tail == p->np)
    SG_TRY(pl_rs_drain(p)); /* a backward without begin_micro */
  q->rs_started = 1;
  if (zg && g > 1)
    SG_TRY(sg_ireduce_scatter(zg, full, full, q->pcount, SG_DTYPE_F32,
                              SG_REDUCE_SUM, &q->rs_req));
  p->rs_order[p->rs_tail++] = i;
  if (p->cfg.zero >= 2) p->rs_inflight += q->info.numel;
  while (p->cfg.zero >= 2 && p->rs_inflight > pl_bucket_elems(p) &&
         p->rs_tail - p->rs_head > 1)
    SG_TRY(rs_complete(p));
fail:
  return st;
}

/* zero >= 2, deterministic (or on a device): the all-reduce of q's full
 * gradient over the whole group, its rows added to the piece, the full
 * gradient freed. Deterministic: the fixed-order sum (DDP's bits; on a
 * device the same sum on the device buffers, ag_sum_det); a device plan
 * not deterministic: the comm layer's all-reduce (NCCL on a GPU; the
 * host's overlapped in-place reduce-scatters are host code). */
static sg_status reduce_piece_det(struct sg_parallel *p, pl_param *q) {
  sg_status st = SG_OK;
  const pl_layout *L = &p->l[q->layout];
  const int64_t n = q->own_rows * q->row;
  if (sg_group_size(L->reduce_g) > 1 && p->cfg.deterministic)
    SG_TRY(ag_sum_det(L->reduce_g, p->dev, SG_DTYPE_F32, q->info.numel,
                      q->gfull, q->gfull));
  else if (sg_group_size(L->reduce_g) > 1)
    SG_TRY(sg_allreduce(L->reduce_g, q->gfull, q->gfull, q->info.numel,
                        SG_DTYPE_F32, SG_REDUCE_SUM));
  const float *src = q->gfull + q->own_row0 * q->row;
  float *dst = p->gpiece + q->moff;
  if (p->dev.kind != SG_DEVICE_HOST)
    SG_TRY(ag_dev_add(p->dev, SG_DTYPE_F32, n, dst, src, dst));
  else
    for (int64_t k = 0; k < n; ++k) dst[k] += src[k];
fail:
  ag_mem_free(p->dev, (void **)&q->gfull);
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
  if (q->gfull && !v->grad.data)
    SG_TRY(pl_rs_drain(
        p));           /* still in flight from a backward without begin_micro */
  if (!v->grad.data) { /* the full gradient until it is ready */
    SG_TRY(ag_mem_alloc(p->dev, (size_t)q->info.numel * sizeof(float), 1,
                        (void **)&q->gfull));
    v->grad.data = q->gfull;
  }
fail:
  return st;
}

static sg_status on_grad_ready(sg_var *v, void *user) {
  struct sg_parallel *p = user;
  const int i = param_of_var(p, v);
  if (i < 0 || p->p[i].info.numel == 0)
    return SG_OK; /* not one of the plan's */
  pl_param *q = &p->p[i];
  if (p->cfg.zero >= 2) {
    if (!q->gfull)
      return sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__,
                          "parallel plan: '%s' has no gradient", q->name);
    v->grad.data =
        NULL; /* the tape is done with it; the buffer lives until the reduction completes */
    return p->cfg.deterministic || p->dev.kind != SG_DEVICE_HOST
               ? reduce_piece_det(p, q)
               : pl_rs_start(p, i);
  }
  if (p->micro != p->nmicro - 1) return SG_OK; /* no_sync */
  if (p->hooked_rs) return pl_rs_start(p, i);
  if (!p->hooked_reductions) return SG_OK;
  pl_span *sp = span_at(p, q->info.offset);
  if (!sp)
    return sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__,
                        "parallel plan: '%s' is in no span", q->name);
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
  uintptr_t x = (uintptr_t)sort_vars_base[*(const int *)a],
            y = (uintptr_t)sort_vars_base[*(const int *)b];
  return x < y ? -1 : x > y;
}

/* The plan's own hooks (gathers, reductions, the micro-batch window). */
static sg_status attach_plan_hooks(struct sg_parallel *p, sg_tape_t tape) {
  sg_hooks hk;
  memset(&hk, 0, sizeof hk);
  hk.pre_use = on_pre_use;
  hk.post_use = on_post_use;
  hk.pre_backward = on_pre_backward;
  hk.post_backward_use = on_post_use;
  hk.grad_ready = on_grad_ready;
  hk.post_backward = on_post_backward;
  hk.user = p;
  return sg_tape_add_hooks(tape, &hk, NULL);
}

/* The plan's hooks on a tape: the bf16 gradient rounding first (before
 * the plan reduces), the plan's own, then the bf16 value rounding (after
 * the gathers). master: the flat parameters to bind the bf16 compute copy
 * to (the first tape), NULL for a further tape. */
static sg_status attach_hooks(struct sg_parallel *p, sg_tape_t tape,
                              const float *master, sg_var *const *vars,
                              int plan_hooks) {
  sg_status st = SG_OK;
  SG_TRY(pl_precision_attach_grads(&p->prec, tape));
  if (plan_hooks) SG_TRY(attach_plan_hooks(p, tape));
  SG_TRY(pl_precision_attach_values(&p->prec, tape, master, p->nlocal, p->np,
                                    vars));
  sg_tape_set_comm(tape, sg_mesh_comm(p->mesh));
fail:
  return st;
}

sg_status sg_parallel_attach(sg_parallel_t p, sg_tape_t tape,
                             sg_var *const *vars) {
  sg_status st = SG_OK;
  if (!p || !tape || (p->np > 0 && !vars))
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_parallel_attach: NULL plan, tape or variables");
  if (p->attached)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_parallel_attach: the plan is attached already");
  free(p->var_sorted); /* a refused attach may have left them */
  free(p->var_index);
  p->var_sorted = malloc((size_t)(p->np + 1) * sizeof *p->var_sorted);
  p->var_index = malloc((size_t)(p->np + 1) * sizeof *p->var_index);
  if (!p->var_sorted || !p->var_index)
    SG_RAISE(SG_ERR_ALLOC, "parallel plan: out of memory");
  for (int i = 0; i < p->np; ++i) {
    if (!vars[i])
      SG_RAISE(SG_ERR_INVALID_ARG,
               "sg_parallel_attach: variable %d ('%s') is NULL", i,
               p->p[i].name);
    if (vars[i]->value.data != (void *)(p->params + p->p[i].info.offset) &&
        p->p[i].info.numel > 0)
      SG_RAISE(
          SG_ERR_INVALID_ARG,
          "sg_parallel_attach: variable %d ('%s') is not bound to the plan's buffer",
          i, p->p[i].name);
    /* the variables live where the plan's buffers do: a host plan's are
     * read and written by host code, a device plan's (sg_parallel_to_device)
     * by its kernels */
    if (vars[i]->value.device.kind != p->dev.kind ||
        vars[i]->value.device.index != p->dev.index)
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "sg_parallel_attach: variable %d ('%s') is on %s:%d, the "
               "plan's parameters, gradients and optimizer state on %s:%d "
               "(a device plan: sg_parallel_to_device, zero 0-2, f32)",
               i, p->p[i].name, sg_device_kind_name(vars[i]->value.device.kind),
               vars[i]->value.device.index, sg_device_kind_name(p->dev.kind),
               p->dev.index);
    p->p[i].var = vars[i];
    p->var_index[i] = i;
  }
  sort_vars_base = (sg_var **)vars;
  qsort(p->var_index, (size_t)p->np, sizeof *p->var_index, cmp_var);
  for (int k = 0; k < p->np; ++k) p->var_sorted[k] = vars[p->var_index[k]];
  sg_device h = sg_device_host();
  if (p->cfg.zero >=
      2) { /* gradients live in the pieces; full ones only during backward */
    for (int i = 0; i < p->np; ++i) {
      p->p[i].var->grad.data = NULL;
      p->p[i].var->owns_grad = 0;
    }
    ag_mem_free(p->dev, (void **)&p->grads);
  }
  if (p->cfg.zero >= 3) { /* parameters too: each rank keeps its pieces */
    for (int i = 0; i < p->np; ++i) {
      const pl_param *q = &p->p[i];
      memcpy(p->ppiece + q->moff,
             p->params + q->info.offset + q->own_row0 * q->row,
             (size_t)(q->own_rows * q->row) * sizeof(float));
      q->var->value.data = NULL;
    }
    sg_free(h, (void **)&p->params);
  }
  SG_TRY(attach_hooks(p, tape, p->params, vars, 1));
  p->attached = 1;
fail:
  return st;
}

sg_status sg_parallel_attach_tape(sg_parallel_t p, sg_tape_t tape) {
  if (!p || !tape || !p->attached)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_parallel_attach_tape: attach the plan first");
  /* the variables are bound already (to the bf16 compute copy when there
   * is one): only the hooks. zero 0 and 1 reduce from the first tape only
   * (its backward is the step's last): a further tape's gradients just
   * accumulate in the flat buffer. zero >= 2: any tape's backward may
   * make a gradient ready (the last use in flight), and every F, B and W
   * gathers under zero 3. */
  return attach_hooks(p, tape, NULL, NULL, p->cfg.zero >= 2);
}

sg_status sg_parallel_begin_micro(sg_parallel_t p, int k, int n) {
  sg_status st = SG_OK;
  if (!p || n < 1 || k < 0 || k >= n)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_parallel_begin_micro: micro-batch %d of %d", k, n);
  p->micro = k;
  p->nmicro = n;
  /* the previous micro-batch's reduce-scatters complete before its gradient
   * buffers are used again; a new window of uses to record or replay */
  SG_TRY(pl_rs_drain(p));
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
