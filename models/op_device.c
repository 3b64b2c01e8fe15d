/* shardgrid — the op device table (sg_op_device.h). A new built-in op gets
 * an entry here (tests/ops/test_op_device.c fails without one). */
#include "sg_op_device.h"

#include <string.h>

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
    /* instance, group and layer norm; batch norm is refused on the device
     * (host only) */
    {"norm", "sg_norm_fwd_cuda", "sg_norm_bwd_cuda", NULL},
    {"loss", "sg_loss_partial_cuda", "sg_loss_bwd_cuda", NULL},
    /* the masked per-sample sums and the NaN/Inf count (one thread per
     * sample, the host's order) and the gradient: the SG_HD functions of
     * dist_loss_inl.h; the reductions stay host doubles (as loss's). Its
     * device entries are built in every build (the faked device runs them
     * on the host loops). */
    {"dist_loss", "sg_dist_loss_sums_cuda", "sg_dist_loss_bwd_cuda", NULL},
    /* one process: cuFFT r2c/c2r and the SG_HD mode gather, contraction
     * and scatter of sg_spec_inl.h; a split domain: the FFT's transposes on
     * the device buffers (sg_spectral_conv_forward_dev) */
    {"spectral_conv", "sg_spectral_conv_forward_cuda",
     "sg_spectral_conv_backward_cuda", NULL},
    /* no kernel of its own: the tape runs it (sg_ag_checkpoint records the
     * block, ag_ckpt_backward replays it), each op of the block on its
     * inputs' device, the copies through the tape's device helpers */
    {"checkpoint", "sg_ag_checkpoint", "ag_ckpt_backward", NULL},
    /* the layout copies and the SG_HD row kernels of sg_attn_inl.h;
     * Ulysses and USP add the all-to-alls' packing (the SG_HD index maps
     * of ag_ulysses_inl.h, models/cuda/ulysses_cuda.cu) */
    {"attention", "sg_attention_fwd_cuda", "sg_attention_bwd_cuda", NULL},
    {"attention_ulysses", "sg_attention_fwd_cuda", "sg_attention_bwd_cuda",
     NULL},
    {"attention_usp", "sg_attention_fwd_cuda", "sg_attention_bwd_cuda", NULL},
    {"add_field", "sg_add_field_fwd_cuda", "sg_add_field_bwd_cuda", NULL},
    /* the collectives on the node's device buffers through the comm layer
     * (NCCL on a GPU, MPI on host memory): the fixed-order sum is an
     * all-to-all-v, the rank-order sum of the blocks (the binary add
     * kernel) and an all-gather-v, the same bits as the host's
     * sg_allreduce_det; the copies are cudaMemcpy. No kernel of their own:
     * their device entries are built in every build (ag_tp.c). */
    {"tp_copy", "cudaMemcpy", "sg_alltoallv+sg_binary_fwd_cuda+sg_allgatherv",
     NULL},
    {"tp_reduce", "sg_alltoallv+sg_binary_fwd_cuda+sg_allgatherv", "cudaMemcpy",
     NULL},
    {"sp_share", "cudaMemcpy", "sg_scale_cuda", NULL},
    {"roll", "sg_roll_cuda", "sg_roll_cuda", NULL},
    /* the rows of sg_wattn_inl.h, f64 arithmetic as the host */
    {"window_attention", "sg_wattn_fwd_cuda", "sg_wattn_bwd_cuda", NULL},
    {"moe", NULL, NULL,
     "cuda: the token dispatch, the expert GEMMs and their backward are not "
     "built on the device (the routing's arithmetic is SG_HD, moe_inl.h; "
     "issue 22)"},
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

/* Every op on cuda on sharded device variables (a mesh): NULL, it runs
 * there (its kernels are local to the shard, or its collectives run on the
 * device buffers through the comm layer), or why the tape refuses it.
 * tests/ops/test_op_device.c checks that every op on cuda is listed once
 * (an op turned cuda is refused on a mesh until it is listed). */
#define RING \
  "the ring's K/V send/recv on device buffers is not built (issue 22)"
#define SHIFT \
  "the shifted windows' halo plan on device buffers is not built (issue 22)"
static const struct {
  const char *op, *why;
} sharded[] = {
    /* the window's exchange on the device buffers (models/ag_halo.c: the
     * halo plan's slabs packed by the CUDA kernels, sent through the comm
     * layer), then the op's kernels on the box; the crop of an up-sampled
     * output by the pack kernel */
    {"conv", NULL},
    {"convt", NULL},
    {"pool", NULL},
    {"upsample_linear", NULL},
    {"upsample_nearest", NULL},
    /* per element, per channel or per token: local to the shard (bias: the
     * global channel offset on the device pointer; loss: its partials are
     * copied to the host and reduced there, as on the host) */
    {"act", NULL},
    {"binary", NULL},
    {"binary_add", NULL},
    {"scale", NULL},
    {"bias", NULL},
    {"linear", NULL},
    {"linear_act", NULL},
    {"concat", NULL},
    {"split", NULL},
    {"loss", NULL},
    /* its sums copied to the host and reduced over the domain and data
     * groups there (host doubles, as on the host) */
    {"dist_loss", NULL},
    {"add_field", NULL},
    {"fno3d_broadcast_t", NULL},
    {"fno3d_time_window", NULL},
    /* instance and group norm merge their statistics and backward sums
     * over the spatial split (a few numbers per sample and group, merged
     * on the host in rank order: the host's bits); layer norm's are local
     * on a spatial split */
    {"norm", NULL},
    {"attention", RING},
    /* the all-to-alls on the device buffers through the comm layer
     * (sg_alltoallv: NCCL on a GPU's mesh), packed and unpacked by the
     * kernels of ulysses_cuda.cu, the local attention by its kernel; USP
     * with a ring (a split of the other spatial dims) is refused by name
     * at its first run, on every rank (the ring's K/V send/recv) */
    {"attention_ulysses", NULL},
    {"attention_usp", NULL},
    {"roll", SHIFT},
    {"window_attention", SHIFT},
    /* a split domain: the FFT re-planned with device stages, its
     * transposes packed and unpacked on the device (fft_dev_inl.h's box
     * copy) and moved by the comm layer over the mesh's groups, cuFFT per
     * pencil, the contraction of the rank's own modes
     * (sg_spectral_conv_forward_dev); one GPU holding the whole domain:
     * the one-process path */
    {"spectral_conv", NULL},
    {"spectral_linear_act", NULL},
    /* its ops are checked one by one as they are recorded */
    {"checkpoint", NULL},
    /* the collectives on device buffers (ag_sum_det) */
    {"tp_copy", NULL},
    {"tp_reduce", NULL},
    {"sp_share", NULL},
};

int sg_op_device_sharded_count(void) {
  return (int)(sizeof sharded / sizeof *sharded);
}

const char *sg_op_device_sharded_at(int i, const char **why) {
  if (i < 0 || i >= sg_op_device_sharded_count()) return NULL;
  if (why) *why = sharded[i].why;
  return sharded[i].op;
}

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

const char *sg_op_device_sharded_why(const char *op) {
  const sg_op_device *d = sg_op_device_find(op);
  if (!d) return "not in the device table";
  if (!sg_op_device_on_cuda(d))
    return d->host_only ? d->host_only : "no cuda entry points";
  for (int i = 0; i < sg_op_device_sharded_count(); ++i)
    if (!strcmp(sharded[i].op, op)) return sharded[i].why;
  return "its device path on a mesh is not built (not in the sharded list "
         "of models/op_device.c)";
}
