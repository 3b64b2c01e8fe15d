/* shardgrid — internal: the op tables each file of models/ gives the
 * registry (op_registry.c, sg_op_registry.h). Not installed. */
#ifndef SG_OP_REGISTRY_IMPL_H
#define SG_OP_REGISTRY_IMPL_H

#include "sg_autograd.h"

/* ag_ops.c: its tables; *n gets their number. */
const sg_op_def *const *sg_ag_ops_builtin(int *n);
/* dist_loss.c: the distributed loss. */
const sg_op_def *sg_dist_loss_op_def(void);
/* ag_spectral.c: the spectral convolution (sg_ag_spectral_conv). */
const sg_op_def *sg_ag_spectral_op_def(void);
/* ag_spectral.c: the fused linear + activation (sg_ag_linear_act) and FNO
 * layer (sg_ag_spectral_linear_act). */
const sg_op_def *sg_ag_linear_act_op_def(void);
const sg_op_def *sg_ag_spectral_linear_act_op_def(void);
const sg_op_def *sg_ag_linear_head_op_def(void);
/* ag_attention.c: attention (sg_ag_attention), the added field
 * (sg_ag_add_field). */
const sg_op_def *sg_ag_attention_op_def(void);
/* ag_ulysses.c: Ulysses attention (sg_ag_attention_ulysses) */
const sg_op_def *sg_ag_attention_ulysses_op_def(void);
const sg_op_def *sg_ag_attention_usp_op_def(void);
const sg_op_def *sg_ag_add_field_op_def(void);
/* ag_swin.c: the periodic roll (sg_ag_roll), window attention
 * (sg_ag_window_attention) */
const sg_op_def *sg_ag_roll_op_def(void);
const sg_op_def *sg_ag_window_attention_op_def(void);
/* ag_tp.c: the conjugate ops of tensor parallelism. */
const sg_op_def *sg_ag_tp_copy_op_def(void);
const sg_op_def *sg_ag_tp_reduce_op_def(void);
const sg_op_def *sg_ag_sp_share_op_def(void);
/* ag_moe.c: the mixture-of-experts MLP (sg_ag_moe). */
const sg_op_def *sg_ag_moe_op_def(void);
/* fno3d_ops.c: FNO-3D's broadcast over time and time window. */
const sg_op_def *sg_fno3d_broadcast_t_op_def(void);
const sg_op_def *sg_fno3d_time_window_op_def(void);
/* autograd.c: the activation checkpoint (sg_ag_checkpoint). */
const sg_op_def *sg_ag_checkpoint_op_def(void);

#endif /* SG_OP_REGISTRY_IMPL_H */
