/* shardgrid — the parallel plan's mixed-precision policy (internal).
 *
 * param_dtype = bf16: the optimizer keeps the fp32 master weights and its
 * fp32 moments (the plan's buffers); the model computes with the master
 * weights rounded to bf16 and the tape stores bf16 activations
 * (sg_tape_set_storage_dtype). Two tape listeners carry it:
 *   - the gradient listener, installed before the plan's, rounds a
 *     parameter's gradient to bf16 when it is ready (the gradient a bf16
 *     backward produces), before the plan reduces it in reduce_dtype;
 *   - the value listener, installed after the plan's: for zero < 3 the
 *     variables are bound to a compute copy (the master rounded), made
 *     fresh at the first use after the master changed (a step, a
 *     checkpoint load); for zero = 3 it rounds the gathered parameter
 *     (the plan gathers the pieces' bf16 values: half the bytes on the
 *     wire, widened to f32 for the kernels).
 * The buffers are f32 holding bf16 values; the tape's convolution reads
 * the policy from the tape and multiplies in bf16 where the CPU can
 * (shardtensor/ops/conv_amx.c).
 */
#ifndef SG_PRECISION_IMPL_H
#define SG_PRECISION_IMPL_H

#include "sg_autograd.h"
#include "sg_parallel.h"

typedef struct pl_precision {
  sg_dtype param_dt, reduce_dt;
  const float *master; /* zero < 3: the plan's full parameter buffer */
  float *compute;      /* zero < 3: master rounded (f32 storage) */
  int64_t n;
  sg_bf16 *pieces; /* zero = 3: the master pieces as bf16 (what is gathered) */
  int64_t npieces;
  int stale;
} pl_precision;

/* The policy's dtypes are ones this plan supports (SG_ERR_INVALID_ARG or
 * SG_ERR_NOT_SUPPORTED naming the key). Not collective. */
sg_status pl_precision_check(const sg_parallel_config *cfg);
/* Install the gradient listener (call before the plan adds its own). */
sg_status pl_precision_attach_grads(pl_precision *pp, sg_tape_t tape);
/* Install the value listener (after the plan's) and set the tape's
 * storage dtype. master: the plan's full buffer of n floats that vars[0..np)
 * are bound to (zero < 3), NULL for zero = 3. */
sg_status pl_precision_attach_values(pl_precision *pp, sg_tape_t tape,
                                     const float *master, int64_t n, int np,
                                     sg_var *const *vars);
/* zero = 3: the bf16 values of the n floats of master pieces, refreshed
 * when the master changed (NULL on allocation failure, with the error
 * set). */
const sg_bf16 *pl_precision_pieces(pl_precision *pp, const float *pieces,
                                   int64_t n);
/* The master weights changed: refresh the compute copy before next use. */
void pl_precision_invalidate(pl_precision *pp);
/* Bytes held for the policy (the compute copy). */
size_t pl_precision_bytes(const pl_precision *pp);
void pl_precision_free(pl_precision *pp);

#endif /* SG_PRECISION_IMPL_H */
