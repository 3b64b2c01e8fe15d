/* shardgrid — internal: the autograd tape's state and the helpers its
 * files share (autograd.c: tensors, variables, the tape and its hooks;
 * ag_apply.c: recording an op, its margins or halo exchange and the
 * sharding of its outputs; ag_backward.c: backward; ag_checkpoint.c:
 * activation checkpointing). Not installed. */
#ifndef SG_AUTOGRAD_IMPL_H
#define SG_AUTOGRAD_IMPL_H

#include "sg_autograd.h"
#include "sg_exchange.h"

/* A cached exchange (halo plan) of a window op: key = (mesh, dtype, global
 * shape, placements, window). Every rank makes the same calls in the same
 * order, so every rank hits and misses alike and creates plans (collective)
 * in the same order. Entries in use by a recorded node are not evicted. */
typedef struct ag_xkey {
  sg_mesh_t mesh;
  sg_dtype dtype;
  int ndim;
  int64_t global[SG_TENSOR_MAX_DIMS];
  sg_placement pl[SG_MESH_MAX_DIMS];
  sg_window win[SG_OPS_MAX_SPATIAL];
} ag_xkey;

typedef struct ag_xentry {
  ag_xkey key;
  sg_sharded_exchange_t ex;
  int uses; /* recorded nodes using it */
} ag_xentry;

enum { AG_XCACHE_MAX = 64 };

struct sg_tape {
  sg_node **nodes;
  int nnodes, cap_nodes;
  sg_var **owned; /* variables made by ops */
  int nowned, cap_owned;
  int grad_enabled;
  sg_dtype store_dt; /* SG_DTYPE_BF16: f32 activations rounded to bf16 */
  sg_hooks hooks[SG_TAPE_MAX_HOOKS];
  int hook_id[SG_TAPE_MAX_HOOKS];
  int nhooks, next_hook_id;
  MPI_Comm comm; /* agreement on hook failures of plain ops */
  size_t bytes;
  ag_xentry *xcache;
  int nx, cap_x;
  /* activation checkpointing: checkpointed blocks run on the child (made
   * at the first checkpoint; it keeps its own halo plans) */
  struct sg_tape *child;
  /* while a checkpointed block's forward runs on this tape: the leaves
   * requiring gradients it uses (parameters: first-use order) and the
   * stand-ins of its inputs */
  int collecting;
  sg_var **coll;
  int ncoll, cap_coll;
  sg_var *const *ck_in;
  int ck_nin;
  /* a split backward's B ran (sg_tape_backward_split): the nodes left on
   * the tape are deferred to W (sg_tape_backward_weights) */
  int wpending;
};

/* The checkpoint node (sg_ag_checkpoint; ag_checkpoint.c): its op has no
 * kernels, the tape runs it itself. */
extern const sg_op_def ag_ckpt_op;
typedef struct ag_ckpt {
  sg_block_fn fn;
  void *ctx;
  int ncap;
  sg_var *cap[]; /* leaves requiring gradients used inside (parameters) */
} ag_ckpt;

/* Which per-parameter hook to call. */
typedef enum ag_hook {
  AG_PRE_USE,
  AG_POST_USE,
  AG_PRE_BACKWARD,
  AG_POST_BACKWARD_USE,
  AG_GRAD_READY
} ag_hook;

/* sg_tape_time_ops: time every op's kernels under its name. */
extern int ag_time_ops;

/* The tape of the node being run, for byte accounting in callbacks. */
extern _Thread_local sg_tape_t ag_current_tape;

/* autograd.c: host tensors (contiguous), gradients, hooks, agreement,
 * node and variable memory, arrays */
int64_t ag_numel(const sg_tensor *t);
/* Under a bf16 storage policy: t's f32 values rounded to bf16 in place. */
void ag_store_round(const struct sg_tape *tape, sg_tensor *t);
/* ag_ops.c: 1 unless SG_BF16_FUSED_ROUND=0 (then the tape rounds every
 * output in its own pass, as before: A/B runs). */
int ag_round_fused(void);
/* The op's forward rounded this host output itself (rule.rounds_bf16). */
static inline int ag_rounded_by_op(const sg_op_def *op, const sg_tensor *t) {
  return op->rule.rounds_bf16 && t->device.kind == SG_DEVICE_HOST &&
         ag_round_fused();
}
/* A forward of an op with rule.rounds_bf16: whether to round its f32
 * outputs (the running tape stores bf16). */
static inline int ag_round_outputs(void) {
  return ag_current_tape && ag_current_tape->store_dt == SG_DTYPE_BF16 &&
         ag_round_fused();
}
size_t ag_nbytes(const sg_tensor *t);
sg_status ag_alloc_z(sg_tensor *t, sg_dtype dt, int ndim, const int64_t *shape,
                     int zero);
/* The same on dev (ag_free frees on the tensor's device). */
sg_status ag_alloc_dz(sg_tensor *t, sg_device dev, sg_dtype dt, int ndim,
                      const int64_t *shape, int zero);
sg_status ag_alloc(sg_tensor *t, sg_dtype dt, int ndim, const int64_t *shape);
void ag_free(sg_tensor *t);
void ag_add_into(sg_tensor *y, const sg_tensor *x);
sg_status ag_ensure_grad_z(sg_tape_t tape, sg_var *v, int zero);
sg_status ag_ensure_grad(sg_tape_t tape, sg_var *v);
sg_status ag_call_hooks(sg_tape_t tape, ag_hook which, sg_var *v);
sg_status ag_call_param_hooks(sg_tape_t tape, ag_hook which, int nin,
                              sg_var *const *in);
int ag_hooked(const sg_tape_t tape, int nin, sg_var *const *in);
MPI_Comm ag_agree_comm(sg_tape_t tape, MPI_Comm mesh_comm, int hooked);
sg_status ag_agree(MPI_Comm comm, sg_status st);
void ag_node_release(sg_tape_t tape, sg_node *node);
void ag_var_drop_memory(sg_tape_t tape, sg_var *v);
sg_status ag_grow(void **arr, int *cap, int need, size_t elem);

/* ag_device.c: device variables on the tape. A node runs on its inputs'
 * device (sg_node.device): ag_node_device decides it and refuses what the
 * device path does not run; the memory helpers work on any device (host:
 * malloc/memcpy/memset as before); ag_grad_add is y += x on y's device.
 * ag_fake_cuda (tests only): CUDA tensors are host memory, counted in
 * ag_fake_cuda_allocs, so the device path runs without a GPU.
 * ag_fake_cuda_kernels (tests only, with ag_fake_cuda): a built-in op the
 * op device table lists on cuda runs its host kernels on the faked device
 * (in either build; the device kernels' arithmetic is the host's SG_HD
 * functions, tested apart), so a whole model's device path (its memory,
 * window exchanges, tp collectives, sums) runs without a GPU; host-only
 * ops are still refused by name. */
extern int ag_fake_cuda;
extern int64_t ag_fake_cuda_allocs;
extern int ag_fake_cuda_kernels;
sg_status ag_mem_alloc(sg_device dev, size_t bytes, int zero, void **p);
void ag_mem_free(sg_device dev, void **p);
sg_status ag_mem_copy(sg_device dst_dev, void *dst, sg_device src_dev,
                      const void *src, size_t bytes);
sg_status ag_mem_zero(sg_device dev, void *p, size_t bytes);
sg_status ag_grad_add(sg_tensor *y, const sg_tensor *x);
/* On dev (host memory, a faked device included: the host loops): y = a + b
 * and y = alpha x (sg_binary_fwd_cuda / sg_scale_cuda on a device), n
 * elements of dt; ag_sum_det: dst = the sum of src over g, bitwise
 * sg_allreduce_det's, the collectives on dev's buffers (collective over
 * g; NULL or one rank: a copy). */
sg_status ag_dev_add(sg_device dev, sg_dtype dt, int64_t n, const void *a,
                     const void *b, void *y);
sg_status ag_dev_scale(sg_device dev, sg_dtype dt, int64_t n, double alpha,
                       const void *x, void *y);
sg_status ag_sum_det(sg_group_t g, sg_device dev, sg_dtype dt, int64_t n,
                     const void *src, void *dst);
/* SG_OK when g's collectives can take dev's buffers: host memory (a faked
 * device too), one rank, NCCL on g or a CUDA-aware MPI; else
 * SG_ERR_NOT_SUPPORTED naming what (the same on every rank: the mesh's
 * NCCL setting and the MPI library are). Not collective. */
sg_status ag_dev_comm_ok(sg_group_t g, sg_device dev, const char *what);
/* The token slice [off, off + cnt) of each of rows rows of tot elements:
 * to_whole copies part (rows, cnt) into whole (rows, tot), else whole's
 * slice into part; on dev (sg_cat_part_cuda on a device). */
sg_status ag_dev_slice(sg_device dev, sg_dtype dt, int64_t rows, int64_t cnt,
                       int64_t tot, int64_t off, int to_whole, void *whole,
                       void *part);
/* ag_halo.c: a sharded windowed node's exchange on its device's buffers
 * (the halo plan's steps: slabs packed by the CUDA kernels, sent through
 * the comm layer; host memory for a faked device): the forward makes the
 * kernel's box (owned, on the device), the adjoint overwrites dx with dbox
 * summed back (dbox is only read). Collective over the ranks of the
 * node's spatial split.
 * ag_dev_crop: owned = natural's part at info->crop, or (to_natural)
 * natural's part = owned (natural zeroed by the caller). */
sg_status ag_dev_exchange_forward(sg_node *node, const sg_tensor *x,
                                  sg_tensor *box);
sg_status ag_dev_exchange_adjoint(sg_node *node, void *dbox,
                                  const sg_tensor *dx);
sg_status ag_dev_crop(sg_device dev, const sg_exchange_info *info,
                      const sg_tensor *natural, const sg_tensor *owned,
                      int to_natural);
sg_status ag_node_device(sg_tape_t tape, const sg_op_def *op, int nin,
                         sg_var *const *in, sg_device *dev);
/* The node's kernels on its device: forward/backward or their _cuda. */
sg_status ag_node_forward(sg_node *node);
sg_status ag_node_backward_kernel(sg_node *node);

/* ag_apply.c: the geometry of a sharded windowed node's exchange; the
 * padding of a node's window as sg_pad_forward takes it */
sg_exchange_info ag_node_info(const sg_node *node);
void ag_pads(const sg_node *node, int64_t (*pad)[2], sg_pad_mode *mode);
/* ag_backward.c: walk the tape in reverse from gradients already seeded;
 * split: B of a split backward (the nodes with parameter inputs stay on the
 * tape for W, their parameter gradients not computed) */
sg_status ag_backward_walk(sg_tape_t tape, int split);
/* ag_checkpoint.c: note a checkpointed block's reads; a checkpoint node's
 * backward */
sg_status ag_collect(sg_tape_t t, const char *who, int nin, sg_var *const *in);
sg_status ag_ckpt_backward(sg_tape_t tape, sg_node *node);
/* ag_attention.c: x (B, H*d, T) -> y (B, H, T, d), the attention kernel's
 * layout (back = 1: y -> x); used by ag_ulysses.c too */
void ag_heads_copy(sg_dtype dt, int64_t B, int64_t H, int64_t T, int64_t d,
                   void *x, void *y, int back);
/* ag_attention.c: the argument checks of the attention ops (q, k, v of one
 * (N, C, spatial...) shape, heads dividing C) */
sg_status sg_ag_attention_check(int64_t heads, const sg_var *q, const sg_var *k,
                                const sg_var *v, sg_var **o);

#endif /* SG_AUTOGRAD_IMPL_H */
