/* shardgrid — the parallel plan's mixed-precision policy (see
 * precision_impl.h). */
#include "precision_impl.h"

#include "sg_device.h"

#include <string.h>

sg_status pl_precision_check(const sg_parallel_config *cfg) {
  sg_status st = SG_OK;
  if (cfg->param_dtype != SG_DTYPE_F32 && cfg->param_dtype != SG_DTYPE_BF16)
    SG_RAISE(SG_ERR_INVALID_ARG, "param_dtype = %s: f32 or bf16",
             sg_dtype_name(cfg->param_dtype));
  if (cfg->reduce_dtype != SG_DTYPE_F32)
    SG_RAISE(
        cfg->reduce_dtype == SG_DTYPE_BF16 ? SG_ERR_NOT_SUPPORTED
                                           : SG_ERR_INVALID_ARG,
        "reduce_dtype = %s: gradients are reduced in f32 (bf16 sums are not supported by the "
        "communication layer)",
        sg_dtype_name(cfg->reduce_dtype));
fail:
  return st;
}

static void round_tensor(sg_tensor *t) {
  if (t->data && t->dtype == SG_DTYPE_F32)
    sg_round_bf16((float *)t->data, sg_tensor_numel(t));
}

static sg_status on_grad_ready(sg_var *v, void *user) {
  (void)user;
  round_tensor(&v->grad);
  return SG_OK;
}

static sg_status on_pre_use(sg_var *v, void *user) {
  pl_precision *pp = user;
  if (!pp->compute) { /* zero 3: the plan has just gathered the value */
    round_tensor(&v->value);
    return SG_OK;
  }
  if (pp->stale) {
    memcpy(pp->compute, pp->master, (size_t)pp->n * sizeof *pp->compute);
    sg_round_bf16(pp->compute, pp->n);
    pp->stale = 0;
  }
  return SG_OK;
}

sg_status pl_precision_attach_grads(pl_precision *pp, sg_tape_t tape) {
  if (pp->param_dt != SG_DTYPE_BF16) return SG_OK;
  sg_hooks hk;
  memset(&hk, 0, sizeof hk);
  hk.grad_ready = on_grad_ready;
  hk.user = pp;
  return sg_tape_add_hooks(tape, &hk, NULL);
}

sg_status pl_precision_attach_values(pl_precision *pp, sg_tape_t tape,
                                     const float *master, int64_t n, int np,
                                     sg_var *const *vars) {
  sg_status st = SG_OK;
  if (pp->param_dt != SG_DTYPE_BF16) return SG_OK;
  if (master) { /* bind the model to the compute copy */
    SG_TRY(sg_malloc(sg_device_host(), (size_t)(n + 1) * sizeof(float),
                     (void **)&pp->compute));
    pp->master = master;
    pp->n = n;
    pp->stale = 1;
    for (int i = 0; i < np; ++i)
      if (vars[i]->value.data)
        vars[i]->value.data = pp->compute +
                              ((const float *)vars[i]->value.data - master);
  }
  sg_hooks hk;
  memset(&hk, 0, sizeof hk);
  hk.pre_use = on_pre_use;
  hk.pre_backward = on_pre_use;
  hk.user = pp;
  SG_TRY(sg_tape_add_hooks(tape, &hk, NULL));
  SG_TRY(sg_tape_set_storage_dtype(tape, SG_DTYPE_BF16));
fail:
  return st;
}

const sg_bf16 *pl_precision_pieces(pl_precision *pp, const float *pieces,
                                   int64_t n) {
  if (!pp->pieces || pp->npieces != n) {
    sg_free(sg_device_host(), (void **)&pp->pieces);
    if (sg_malloc(sg_device_host(), (size_t)(n + 1) * sizeof *pp->pieces,
                  (void **)&pp->pieces) != SG_OK)
      return NULL;
    pp->npieces = n;
    pp->stale = 1;
  }
  if (pp->stale) {
    for (int64_t k = 0; k < n; ++k) pp->pieces[k] = sg_bf16_from_f32(pieces[k]);
    pp->stale = 0;
  }
  return pp->pieces;
}

void pl_precision_invalidate(pl_precision *pp) { pp->stale = 1; }

size_t pl_precision_bytes(const pl_precision *pp) {
  return (pp->compute ? (size_t)pp->n * sizeof(float) : 0) +
         (pp->pieces ? (size_t)pp->npieces * sizeof(sg_bf16) : 0);
}

void pl_precision_free(pl_precision *pp) {
  sg_free(sg_device_host(), (void **)&pp->compute);
  sg_free(sg_device_host(), (void **)&pp->pieces);
}
