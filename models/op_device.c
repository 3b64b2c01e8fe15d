/* shardgrid — the op device table (sg_op_device.h). A new built-in op gets
 * an entry here (tests/ops/test_op_device.c fails without one). */
#include "sg_op_device.h"

#include <string.h>

/* reasons shared by several entries */
#define NOT_YET "cuda: not built yet (issue 22)"
#define NEEDS_GEMM "cuda: needs the cuBLAS GEMM path, not built yet (issue 22)"
#define NEEDS_NCCL \
  "cuda: its collectives need NCCL on device buffers (issue 22)"
#define NEEDS_ATTN "cuda: needs a device attention kernel (issue 22)"

static const sg_op_device table[] = {
    /* im2col + cuBLAS; valid windows (padding is made on the host today:
     * a padded window on a device input is refused by the tape) */
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
    {"concat", NULL, NULL, NOT_YET},
    {"split", NULL, NULL, NOT_YET},
    /* instance, group and layer norm; batch norm and sharded inputs are
     * refused on the device (host only) */
    {"norm", "sg_norm_fwd_cuda", "sg_norm_bwd_cuda", NULL},
    {"loss", "sg_loss_partial_cuda", "sg_loss_bwd_cuda", NULL},
    {"dist_loss", NULL, NULL, NEEDS_NCCL},
    {"spectral_conv", NULL, NULL,
     "cuda: needs cuFFT plans in the op and a batched complex contraction "
     "(issue 22)"},
    {"checkpoint", NULL, NULL,
     "cuda: replays its ops; runs where they run (host today)"},
    {"attention", NULL, NULL, NEEDS_ATTN},
    {"attention_ulysses", NULL, NULL, NEEDS_ATTN},
    {"attention_usp", NULL, NULL, NEEDS_ATTN},
    {"add_field", NULL, NULL, NOT_YET},
    {"tp_copy", NULL, NULL, NEEDS_NCCL},
    {"tp_reduce", NULL, NULL, NEEDS_NCCL},
    {"sp_share", NULL, NULL, NEEDS_NCCL},
    {"roll", NULL, NULL, NOT_YET},
    {"window_attention", NULL, NULL, NEEDS_ATTN},
    {"moe", NULL, NULL, NEEDS_GEMM},
    {"fno3d_broadcast_t", NULL, NULL, NOT_YET},
    {"fno3d_time_window", NULL, NULL, NOT_YET},
    /* the FNO's fused layer ops (ag_spectral.c): the pieces of spectral_conv
     * and linear in one node */
    {"linear_act", NULL, NULL,
     "cuda: the fused kernel is not built (its parts, linear and act, are; "
     "issue 22)"},
    {"spectral_linear_act", NULL, NULL,
     "cuda: needs spectral_conv's cuFFT path and the cuBLAS GEMM (issue 22)"},
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
