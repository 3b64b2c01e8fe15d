/* shardgrid — the op device table (sg_op_device.h). A new built-in op gets
 * an entry here (tests/ops/test_op_device.c fails without one). */
#include "sg_op_device.h"

#include <string.h>

/* reasons shared by several entries */
#define NEEDS_NCCL \
  "cuda: its collectives need NCCL on device buffers (issue 22)"

static const sg_op_device table[] = {
    /* im2col + cuBLAS on the padded block (the tape pads device inputs
     * with sg_pad_fwd_cuda) */
    {"conv", "sg_conv_fwd_cuda", "sg_conv_bwd_cuda", NULL},
    {"convt", "sg_convt_fwd_cuda", "sg_convt_bwd_cuda", NULL},
    {"pool", "sg_pool_fwd_cuda", "sg_pool_bwd_cuda", NULL},
    {"upsample_linear", "sg_upsample_fwd_cuda", "sg_upsample_bwd_cuda", NULL},
    {"upsample_nearest", "sg_upsample_fwd_cuda", "sg_upsample_bwd_cuda", NULL},
    {"act", "sg_act_fwd_cuda", "sg_act_bwd_cuda", NULL},
    {"binary", "sg_binary_fwd_cuda", "sg_binary_bwd_cuda", NULL},
    {"binary_add", "sg_binary_fwd_cuda", "sg_binary_bwd_cuda", NULL},
    {"scale", "sg_scale_cuda", "sg_scale_cuda", NULL},
    {"bias", "sg_bias_fwd_cuda", "sg_bias_bwd_cuda", NULL},
    {"linear", "sg_linear_fwd_cuda", "sg_linear_bwd_cuda", NULL},
    {"concat", "sg_cat_part_cuda", "sg_cat_part_cuda", NULL},
    {"split", "sg_cat_part_cuda", "sg_cat_part_cuda", NULL},
    /* instance, group and layer norm; batch norm and sharded inputs are
     * refused on the device (host only) */
    {"norm", "sg_norm_fwd_cuda", "sg_norm_bwd_cuda", NULL},
    {"loss", "sg_loss_partial_cuda", "sg_loss_bwd_cuda", NULL},
    {"dist_loss", NULL, NULL, NEEDS_NCCL},
    /* one process: cuFFT r2c/c2r and the SG_HD mode gather, contraction
     * and scatter of sg_spec_inl.h (sharded device variables are refused) */
    {"spectral_conv", "sg_spectral_conv_forward_cuda",
     "sg_spectral_conv_backward_cuda", NULL},
    {"checkpoint", NULL, NULL,
     "cuda: replays its ops; runs where they run (host today)"},
    /* one process: the layout copies and the SG_HD row kernels of
     * sg_attn_inl.h; Ulysses and USP with one rank are that attention (the
     * ring and the all-to-alls over ranks need NCCL: refused by name) */
    {"attention", "sg_attention_fwd_cuda", "sg_attention_bwd_cuda", NULL},
    {"attention_ulysses", "sg_attention_fwd_cuda", "sg_attention_bwd_cuda",
     NULL},
    {"attention_usp", "sg_attention_fwd_cuda", "sg_attention_bwd_cuda", NULL},
    {"add_field", "sg_add_field_fwd_cuda", "sg_add_field_bwd_cuda", NULL},
    {"tp_copy", NULL, NULL, NEEDS_NCCL},
    {"tp_reduce", NULL, NULL, NEEDS_NCCL},
    {"sp_share", NULL, NULL, NEEDS_NCCL},
    /* one process (sharded device variables are refused) */
    {"roll", "sg_roll_cuda", "sg_roll_cuda", NULL},
    /* one process: the rows of sg_wattn_inl.h, f64 arithmetic as the host */
    {"window_attention", "sg_wattn_fwd_cuda", "sg_wattn_bwd_cuda", NULL},
    {"moe", NULL, NULL,
     "cuda: the routing and the expert GEMMs are not built on the device "
     "(issue 22)"},
    {"fno3d_broadcast_t", "sg_bcast_t_fwd_cuda", "sg_bcast_t_bwd_cuda", NULL},
    {"fno3d_time_window", "sg_time_window_cuda", "sg_time_window_cuda", NULL},
    /* the FNO's fused layer ops (ag_spectral.c): the pieces of spectral_conv
     * and linear in one node; linear_act runs its parts' launchers in a row */
    /* linear_act: the cuBLAS linear, then the act kernels */
    {"linear_act", "sg_linear_fwd_cuda", "sg_linear_bwd_cuda", NULL},
    /* spectral_conv's device path, the cuBLAS linear added, the act
     * kernels (one process) */
    {"spectral_linear_act", "sg_spectral_conv_forward_cuda",
     "sg_spectral_conv_backward_cuda", NULL},
    /* linear_head: sg_ag_linear_head records linear_act + linear on device */
    {"linear_head", NULL, NULL,
     "cuda: a host node; on device variables sg_ag_linear_head records "
     "linear_act and linear instead"},
};

int sg_op_device_count(void) { return (int)(sizeof table / sizeof *table); }

const sg_op_device *sg_op_device_at(int i) {
  return i >= 0 && i < sg_op_device_count() ? &table[i] : NULL;
}

const sg_op_device *sg_op_device_find(const char *op) {
  if (!op) return NULL;
  for (int i = 0; i < sg_op_device_count(); ++i)
    if (!strcmp(table[i].op, op)) return &table[i];
  return NULL;
}

int sg_op_device_on_cuda(const sg_op_device *d) {
  return d && d->cuda_fwd && d->cuda_fwd[0] && d->cuda_bwd && d->cuda_bwd[0];
}
