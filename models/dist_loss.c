/* shardgrid — losses over sharded predictions. */
#include "sg_dist_loss.h"

#include "autograd_impl.h" /* ag_mem_copy, ag_fake_cuda */
#include "dist_loss_inl.h"
#include "op_registry_impl.h"
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct dist_loss_attr {
  sg_loss_kind kind;
  int has_mask;
  sg_dist_loss_ctx ctx;
} dist_loss_attr;

/* saved: [value, then MSE: (S, M) | REL_L2: (a_i, b_i) per local sample] */

/* sums[2i] = sum m (p-t)^2, sums[2i+1] = sum m t^2 (REL_L2) or sum m (MSE)
 * per sample, in a fixed order; sums[2 batch] = the number of NaN/Inf
 * values of p or t at unmasked points (masked points are skipped whatever
 * they hold: 0 * NaN would be NaN). The per-sample loop is
 * sg_dloss_sample_sums (dist_loss_inl.h), the device kernel's too. */
static void local_sums(sg_loss_kind kind, sg_dtype dt, int64_t batch,
                       int64_t per, const void *p, const void *t, const void *m,
                       double *sums) {
  double bad = 0.0;
  const int rel = kind == SG_LOSS_REL_L2, f32 = dt == SG_DTYPE_F32;
#pragma omp parallel for schedule(static) if (batch * per > 65536) reduction(+ : bad)
  for (int64_t i = 0; i < batch; ++i)
    bad += sg_dloss_sample_sums(rel, f32, i * per, (i + 1) * per, p, t, m,
                                &sums[2 * i], &sums[2 * i + 1]);
  sums[2 * batch] = bad;
}

/* The error every rank returns when the (reduced, hence equal) count of
 * non-finite values is not 0, or the loss itself is not finite. */
static sg_status nonfinite_error(const char *what, double bad, double value) {
  if (bad > 0)
    return sg_error_set(
        SG_ERR_INVALID_ARG, __FILE__, __LINE__,
        "%s: %.0f NaN/Inf value(s) in the prediction or the target at unmasked points "
        "(a diverged model, or missing data that are not masked)",
        what, bad);
  return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                      "%s: the loss is %g (overflow: a diverged model?)", what,
                      value);
}

static int same_shape(const sg_tensor *a, const sg_tensor *b) {
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; ++d)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

static sg_status reduce(sg_group_t g, double *v, int64_t n) {
  if (!g || sg_group_size(g) == 1 || n == 0) return SG_OK;
  return sg_allreduce_det(g, v, v, n, SG_DTYPE_F64, SG_REDUCE_SUM);
}

/* Per-sample relative L2 over the domain group; the count of non-finite
 * values summed over the domain, and over `data` too when given. */
static sg_status rel_l2(sg_dtype dt, int64_t batch, int64_t per_sample,
                        const void *pred, const void *target, const void *mask,
                        sg_group_t domain, sg_group_t data, double *rel) {
  sg_status st = SG_OK;
  double *s = NULL;
  if (batch < 0 || per_sample < 0 || (batch > 0 && (!pred || !target || !rel)))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_dist_rel_l2: bad arguments");
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_dist_rel_l2: dtype %s (f32 or f64)",
             sg_dtype_name(dt));
  s = malloc((size_t)(2 * batch + 1) * sizeof *s);
  if (!s) SG_RAISE(SG_ERR_ALLOC, "sg_dist_rel_l2: out of memory");
  local_sums(SG_LOSS_REL_L2, dt, batch, per_sample, pred, target, mask, s);
  SG_TRY(reduce(domain, s, 2 * batch + 1));
  double bad = s[2 * batch];
  SG_TRY(reduce(data, &bad, 1));
  if (bad > 0) SG_TRY(nonfinite_error("relative L2", bad, 0.0));
  for (int64_t i = 0; i < batch; ++i)
    rel[i] = s[2 * i + 1] > 0 ? sqrt(s[2 * i] / s[2 * i + 1]) : 0.0;
fail:
  free(s);
  return st;
}

sg_status sg_dist_rel_l2(sg_dtype dt, int64_t batch, int64_t per_sample,
                         const void *pred, const void *target, const void *mask,
                         sg_group_t domain, double *rel) {
  return rel_l2(dt, batch, per_sample, pred, target, mask, domain, NULL, rel);
}

sg_status sg_dist_rel_l2_ctx(sg_dtype dt, int64_t batch, int64_t per_sample,
                             const void *pred, const void *target,
                             const void *mask, const sg_dist_loss_ctx *ctx,
                             double *rel) {
  if (!ctx)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_dist_rel_l2_ctx: ctx is NULL");
  return rel_l2(dt, batch, per_sample, pred, target, mask, ctx->domain,
                ctx->data, rel);
}

/* The node's data are device memory that only kernels may touch (a real
 * device: the launchers of dist_loss_inl.h), not host memory (the host or
 * the tape's faked device: the host loops). */
static int on_gpu(const sg_node *node) {
  return node->device.kind != SG_DEVICE_HOST && !ag_fake_cuda;
}

#if SG_HAVE_CUDA
#define DLOSS_GPU(call) (call)
#else
#define DLOSS_GPU(call)                                  \
  sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__, \
               "dist_loss on %s: built without CUDA",    \
               sg_device_kind_name(node->device.kind))
#endif

/* One body for both devices. saved (on the node's device): [value, then
 * the sums as the backward reads them, then the count]. On a device the
 * local sums are made there (sg_dist_loss_sums_cuda), copied to the host,
 * reduced over the ranks as host doubles as on the host, and copied back
 * for the backward (a few doubles per sample). */
static sg_status dloss_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const dist_loss_attr *a = (const dist_loss_attr *)node->attr;
  const sg_tensor *p = &node->in[0]->value;
  const sg_device dev = node->device, host = sg_device_host();
  const int gpu = on_gpu(node);
  const int64_t batch = p->shape[0];
  int64_t n = 1;
  for (int d = 0; d < p->ndim; ++d) n *= p->shape[d];
  const int64_t per = batch ? n / batch : 0;
  const size_t nsaved = (size_t)(1 + 2 * batch + 2);
  double *saved = NULL, *h = NULL, value = 0.0;
  const void *t = node->in[1]->value.data,
             *m = a->has_mask ? node->in[2]->value.data : NULL;
  SG_TRY(sg_node_save(node, nsaved * sizeof(double), (void **)&saved));
  h = gpu ? calloc(nsaved, sizeof *h) : saved;
  if (!h) SG_RAISE(SG_ERR_ALLOC, "dist_loss: the sums");
  double *sums = h + 1;
  if (gpu) {
    SG_TRY(DLOSS_GPU(sg_dist_loss_sums_cuda(a->kind == SG_LOSS_REL_L2, p->dtype,
                                            batch, per, p->data, t, m,
                                            saved + 1, NULL)));
    SG_TRY(ag_mem_copy(host, sums, dev, saved + 1,
                       (size_t)(2 * batch + 1) * sizeof *sums));
  } else {
    local_sums(a->kind, p->dtype, batch, per, p->data, t, m, sums);
  }
  /* the count of NaN/Inf values travels with the sums: after both
   * reductions every rank holds the same count and fails alike */
  SG_TRY(reduce(a->ctx.domain, sums, 2 * batch + 1));
  double bad = sums[2 * batch];
  if (a->kind == SG_LOSS_MSE) {
    double sm[3] = {0.0, 0.0, bad};
    for (int64_t i = 0; i < batch; ++i) {
      sm[0] += sums[2 * i];
      sm[1] += sums[2 * i + 1];
    }
    SG_TRY(reduce(a->ctx.data, sm, 3));
    sums[0] = sm[0]; /* keep the global (S, M) for backward */
    sums[1] = sm[1];
    bad = sm[2];
    value = sm[1] > 0 ? sm[0] / sm[1] : 0.0;
  } else {
    double r[2] = {0.0, bad};
    for (int64_t i = 0; i < batch; ++i)
      r[0] += sums[2 * i + 1] > 0 ? sqrt(sums[2 * i] / sums[2 * i + 1]) : 0.0;
    SG_TRY(reduce(a->ctx.data, r, 2));
    bad = r[1];
    value = r[0] / (double)a->ctx.global_batch;
  }
  if (bad > 0 || !isfinite(value))
    SG_TRY(nonfinite_error(
        a->kind == SG_LOSS_MSE ? "MSE loss" : "relative L2 loss", bad, value));
  h[0] = value;
  if (gpu) SG_TRY(ag_mem_copy(dev, saved, host, h, nsaved * sizeof *h));
  int64_t one = 1;
  SG_TRY(sg_node_alloc_out(node, 0, 1, &one));
  {
    const float v32 = (float)value;
    const int f32 = p->dtype == SG_DTYPE_F32;
    SG_TRY(ag_mem_copy(dev, node->out[0]->value.data, host,
                       f32 ? (const void *)&v32 : (const void *)&value,
                       f32 ? sizeof v32 : sizeof value));
  }
fail:
  if (gpu) free(h);
  return st;
}

static sg_status dloss_bwd(sg_node *node) {
  sg_status st = SG_OK;
  const dist_loss_attr *a = (const dist_loss_attr *)node->attr;
  const sg_tensor *p = &node->in[0]->value;
  const sg_tensor *gt = &node->out[0]->grad;
  const int rel = a->kind == SG_LOSS_REL_L2, f32 = p->dtype == SG_DTYPE_F32;
  double g = 0.0;
  float g32 = 0.0f;
  SG_TRY(ag_mem_copy(sg_device_host(),
                     gt->dtype == SG_DTYPE_F32 ? (void *)&g32 : (void *)&g,
                     node->device, gt->data,
                     gt->dtype == SG_DTYPE_F32 ? sizeof g32 : sizeof g));
  if (gt->dtype == SG_DTYPE_F32) g = (double)g32;
  const int64_t batch = p->shape[0];
  int64_t n = 1;
  for (int d = 0; d < p->ndim; ++d) n *= p->shape[d];
  const int64_t per = batch ? n / batch : 0;
  const double *sums = (const double *)node->saved + 1;
  const void *t = node->in[1]->value.data,
             *m = a->has_mask ? node->in[2]->value.data : NULL;
  void *dp = node->gin[0];
  if (!dp) goto fail;
  if (on_gpu(node)) {
    SG_TRY(DLOSS_GPU(sg_dist_loss_bwd_cuda(rel, p->dtype, batch, per, p->data,
                                           t, m, sums, g, a->ctx.global_batch,
                                           dp, NULL)));
    goto fail;
  }
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < batch; ++i) {
    const double c = sg_dloss_coef(rel, i, sums, g, a->ctx.global_batch);
    for (int64_t j = i * per; j < (i + 1) * per; ++j) {
      const double v = sg_dloss_grad(c, f32, j, p->data, t, m);
      if (f32)
        ((float *)dp)[j] = (float)v;
      else
        ((double *)dp)[j] = v;
    }
  }
fail:
  return st;
}

static const sg_op_def dist_loss_op = {.name = "dist_loss",
                                       .slots = {SG_SLOT_ACT, SG_SLOT_ACT,
                                                 SG_SLOT_ACT},
                                       .forward = dloss_fwd,
                                       .backward = dloss_bwd,
                                       /* the same bodies (on_gpu picks the
                                        * kernels): built in every build, so
                                        * the faked device runs the device
                                        * path without CUDA too */
                                       .forward_cuda = dloss_fwd,
                                       .backward_cuda = dloss_bwd,
                                       .rule = {.windowed_input = -1,
                                                .accepts = SG_ACCEPT_ALL,
                                                .out = SG_OUT_REPLICATE,
                                                .keep_f32 = 1}};

sg_status sg_ag_dist_loss(sg_tape_t tape, sg_loss_kind kind, sg_var *pred,
                          sg_var *target, sg_var *mask,
                          const sg_dist_loss_ctx *ctx, sg_var **loss) {
  sg_status st = SG_OK;
  if (!tape || !pred || !target || !ctx || !loss)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_ag_dist_loss: NULL argument");
  if (kind != SG_LOSS_MSE && kind != SG_LOSS_REL_L2)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "sg_ag_dist_loss: only MSE and REL_L2 are supported");
  if (!same_shape(&pred->value, &target->value) ||
      (mask && !same_shape(&pred->value, &mask->value)))
    SG_RAISE(SG_ERR_SHAPE,
             "sg_ag_dist_loss: prediction, target and mask differ in shape");
  if (pred->value.dtype != target->value.dtype ||
      (mask && mask->value.dtype != pred->value.dtype))
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_ag_dist_loss: prediction, target and mask differ in dtype");
  if (ctx->global_batch < 1)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_ag_dist_loss: global_batch < 1");
  dist_loss_attr at;
  memset(&at, 0, sizeof at);
  at.kind = kind;
  at.has_mask = mask != NULL;
  at.ctx = *ctx;
  sg_var *in[3] = {pred, target, mask};
  SG_TRY(sg_tape_apply(tape, &dist_loss_op, mask ? 3 : 2, in, 1, NULL, &at,
                       sizeof at, loss));
fail:
  return st;
}

double sg_dist_loss_value(const sg_var *loss) {
  if (!loss || !loss->producer || !loss->producer->saved)
    return sg_var_item(loss);
  double v = NAN; /* saved on the node's device (the value first) */
  if (ag_mem_copy(sg_device_host(), &v, loss->producer->device,
                  loss->producer->saved, sizeof v) != SG_OK)
    return NAN;
  return v;
}

const sg_op_def *sg_dist_loss_op_def(void) { return &dist_loss_op; }
