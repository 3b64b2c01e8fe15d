/* shardgrid — autograd: a tape of ops recorded as the model runs.
 *
 * Variables (sg_var) hold a value tensor and, when they require it, a
 * gradient of the same shape. Parameters and inputs are made by the user
 * (leaves); every other variable is made by an op and belongs to the tape.
 *
 *   sg_tape_t tape; sg_tape_create(&tape);
 *   sg_var x, w, b;  sg_var_init(&x, ...); sg_var_init_param(&w, ...); ...
 *   sg_var *h, *y, *loss;
 *   sg_ag_conv(tape, &x, &w, &b, &args, &h);
 *   sg_ag_act(tape, SG_ACT_RELU, h, &y);
 *   sg_ag_loss(tape, SG_LOSS_MSE, y, &target, &loss);
 *   double l = sg_var_item(loss);    // read before backward
 *   sg_tape_backward(tape, loss);    // w.grad += dloss/dw; tape emptied
 *
 * Rules:
 *  - Parameter (leaf) gradients ACCUMULATE over backward calls until
 *    sg_var_zero_grad / sg_tape_zero_grad; the op kernels add into them.
 *  - Activation gradients are written (overwritten) by the op kernels;
 *    an activation used twice gets the sum (the framework adds).
 *  - Backward walks the tape in reverse and releases each op's saved state
 *    and its outputs' memory as soon as it is no longer needed; when it
 *    returns, the tape is empty and every variable the tape produced is
 *    gone (pointers to them are invalid). sg_tape_clear does the same
 *    without a backward (e.g. after an evaluation forward). The split
 *    backward (B, then W: sg_tape_backward_split) empties it after W.
 *  - No-grad mode (sg_tape_set_grad_enabled(tape, 0)): ops compute their
 *    outputs but record nothing and keep no saved state.
 *
 * An op is one table (sg_op_def): forward and backward on local blocks, and
 * its sharding rule: which input carries a window (kernel, stride,
 * dilation, padding and boundary mode per spatial dim, and an up-sampling
 * factor), the placements it accepts and the placement of its output. The
 * FRAMEWORK gives the windowed input its margins before forward (one
 * process: sg_pad_forward with the window's padding and modes; on a sharded
 * variable: the halo exchange of the halo layer, sg_sharded_exchange_*) and
 * runs the adjoint after backward (sg_pad_backward / the reverse halo
 * exchange with sum). A user kernel is the same table passed to
 * sg_tape_apply: write forward and backward for a local block, declare the
 * window, and domain parallelism comes with it (docs/user-kernels.md).
 *
 * Domain parallelism. A variable may be the local block of a global tensor
 * (N, C, spatial...) split over a device mesh (sg_var_set_sharding: mesh,
 * placements per mesh dim as in sg_shardtensor.h, global shape): batch
 * Shard(0) (e.g. over a "dp" mesh dim), spatial dims Shard(2..) (each by at
 * most one mesh dim), the rest Replicate. Model code is the same on one
 * process and on any mesh: an op whose activation inputs are sharded runs
 * on the local blocks and its outputs inherit the sharding (with their own
 * global shape). Per kind of op:
 *  - window ops (conv, pool, up-sampling, convt, user windows): the output
 *    is the BALANCED split of the output's global extent (the
 *    output-partition rule, grid/sg_decomp.h), so each rank gets exactly
 *    the input cells its outputs read (halos per rank and side, possibly
 *    negative; periodic wraps across ranks); halo plans are created once
 *    per (layout, window) and cached on the tape;
 *  - normalisation: global statistics over the sharded dims (deterministic
 *    rank-order merge); losses: the global value on every rank;
 *  - pointwise, bias, linear, concat/split: local; inputs of an op with
 *    several activation inputs must be sharded alike.
 * Parameters stay plain (Replicate) variables; their gradients are this
 * rank's PARTIAL sums, to be summed over the mesh dims that split the data
 * (sg_sharded_reduce_dims; DDP in strategies/ does it).
 * Every op on sharded inputs is collective over the mesh (all ranks call
 * the same ops in the same order, as a model does) and errors (shapes,
 * placements an op does not accept, a shard thinner than its halo) are
 * returned on every rank, found from global information before any halo
 * message.
 *
 * Hooks (function pointers with user data) where strategies attach:
 * before a parameter is used by an op (FSDP gather / prefetch), when a
 * parameter's gradient is final in this backward (DDP/FSDP bucket reduce,
 * overlapped with the rest of backward; only parameters the tape used),
 * and after backward.
 *
 * Host tensors, f32 or f64. Functions on unsharded variables are not
 * collective. A tape is used by one thread; destroy it before the meshes
 * of its sharded variables (it caches halo plans on them).
 */
#ifndef SG_AUTOGRAD_H
#define SG_AUTOGRAD_H

#include <stdint.h>

#include "sg_decomp.h"
#include "sg_ops.h"
#include "sg_shardtensor.h"
#include "sg_status.h"
#include "sg_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_NODE_MAX_IN 8
#define SG_NODE_MAX_OUT 8

typedef struct sg_tape *sg_tape_t;
typedef struct sg_node sg_node;

typedef struct sg_var {
  sg_tensor value;   /* (N, C, spatial...) for the spatial ops */
  sg_tensor grad;    /* same shape; data NULL until a gradient exists */
  int requires_grad; /* set by the user for leaves, derived for op outputs */
  int is_param;      /* parameters: hooks fire for them */
  char name[32];
  /* framework state (read-only for users) */
  int is_leaf; /* made by the user: gradient accumulates */
  int owns_value, owns_grad;
  int pending;  /* recorded uses whose backward has not run yet */
  int has_grad; /* an activation gradient arrived in this backward */
  int held;     /* nodes deferred to a split backward's W that read the value */
  sg_node *producer; /* NULL for leaves */
  /* domain sharding (sg_var_set_sharding; op outputs inherit it): value is
   * this rank's block of a global tensor; mesh NULL: not sharded */
  sg_mesh_t mesh;                            /* not owned */
  sg_placement placements[SG_MESH_MAX_DIMS]; /* one per mesh dim */
  int64_t global_shape[SG_TENSOR_MAX_DIMS];
} sg_var;

/* What flows from one pipeline piece to the next (docs/pipeline.md, "A zoo
 * model as pieces"): v[0] the main activation, v[1..n-1] the tensors that
 * stay alive across the cut (the U-Net's skips, in the model's order).
 * The CNN and the FNO pass a bundle of one. */
enum { SG_BUNDLE_MAX = 8 };
typedef struct sg_bundle {
  int n;
  sg_var *v[SG_BUNDLE_MAX];
} sg_bundle;

/* ---- variables ------------------------------------------------------------
 * A leaf over caller memory (not owned; data must outlive its uses) or,
 * with data == NULL, over a zero-filled allocation the variable owns.
 * Not collective. */
sg_status sg_var_init(sg_var *v, const char *name, sg_dtype dtype, int ndim,
                      const int64_t *shape, void *data, int requires_grad);
/* A parameter: requires_grad, hooks fire. grad_data: caller memory for the
 * gradient (e.g. a view into one flat gradient buffer, as DDP/FSDP want);
 * NULL allocates a zero-filled one. */
sg_status sg_var_init_param(sg_var *v, const char *name, sg_dtype dtype,
                            int ndim, const int64_t *shape, void *data,
                            void *grad_data);
/* Declare that a leaf's memory lives on dev: its value (and its gradient
 * buffer, when given to sg_var_init_param) are the caller's memory there,
 * e.g. from sg_malloc(dev). The tape then runs the ops reading v on dev
 * (sg_op_def.forward_cuda) and allocates their outputs and v's gradient
 * there. SG_ERR_INVALID_ARG for memory the variable allocated itself
 * (host memory). Not collective. */
sg_status sg_var_set_device(sg_var *v, sg_device dev);
/* Free what a leaf owns and reset it. NULL is fine. */
void sg_var_release(sg_var *v);
/* Set the gradient to zero (keeps the buffer). */
sg_status sg_var_zero_grad(sg_var *v);
/* The single element of a scalar variable as double (NaN if not scalar);
 * a device variable's is copied to the host. */
double sg_var_item(const sg_var *v);

/* Mark v (a leaf: the model input, a target, a mask) as this rank's block
 * of a global tensor (N, C, spatial...) split over mesh by placements (one
 * per mesh dim; Shard(0) batch, Shard(2..) spatial, Replicate; see
 * sg_shardtensor.h). v's local shape must be this rank's box of
 * global_shape (sg_shardtensor_box; the balanced split). mesh NULL clears
 * the sharding. Collective over the mesh (checks that every rank describes
 * the same global tensor; every rank gets the same status). */
sg_status sg_var_set_sharding(sg_var *v, sg_mesh_t mesh,
                              const sg_placement *placements,
                              const int64_t *global_shape);
/* Data in and out of the tape, without box arithmetic (models/var_io.c):
 * sg_var_scatter makes v (a leaf owning its block) this rank's block of
 * a global tensor of the given dtype and global shape held on mesh rank
 * root (the others pass global = NULL), split by placements, and marks it
 * sharded; sg_var_read_nc does the same from a NetCDF variable, each rank
 * reading its box (any backend; the global shape is the variable's);
 * sg_var_gather collects a sharded variable's value (grad = 0) or gradient
 * (grad = 1) into global (the global shape and dtype, host) on root, or on
 * every rank when root < 0. Collective over the mesh; every rank gets the
 * same status. */
sg_status sg_var_scatter(sg_var *v, const char *name, sg_mesh_t mesh,
                         const sg_placement *placements, sg_dtype dtype,
                         int ndim, const int64_t *global_shape,
                         const sg_tensor *global, int root, int requires_grad);
sg_status sg_var_gather(const sg_var *v, int grad, sg_tensor *global, int root);
struct sg_nc_t_; /* sg_nc_t of io/sg_nc.h */
sg_status sg_var_read_nc(sg_var *v, const char *name, sg_mesh_t mesh,
                         const sg_placement *placements, struct sg_nc_t_ *file,
                         const char *varname, sg_dtype dtype,
                         int requires_grad);

/* 1 if v is the block of a sharded global tensor. Not collective. */
int sg_var_is_sharded(const sg_var *v);
/* The global shape (v->value.ndim entries): the sharded tensor's, or the
 * local shape of an unsharded variable. NULL for NULL. Not collective. */
const int64_t *sg_var_global_shape(const sg_var *v);

/* ---- the sharding rule and the op table ---------------------------------- */

/* The window of a windowed op: one sg_window (grid/sg_decomp.h: kernel,
 * stride, dilation, padding (lo, hi), up-sampling factor, boundary) per
 * spatial dim of the windowed input, the same struct the halo layer and
 * the exchange take. With an up-sampling factor u > 1 the window's outputs
 * are "coarse", and coarse output z gives outputs u*z .. u*z+u-1 (nearest
 * up-sampling: kernel 1, up s). On a sharded input the framework may crop
 * the outputs the forward computes to this rank's balanced share (and
 * zero-pads their gradients back before backward): an op with up > 1 must
 * not read its outputs' values in backward. */

/* Placements an op accepts for its inputs (bit mask). */
enum {
  SG_ACCEPT_REPLICATE = 1u << 0,
  SG_ACCEPT_SHARD_BATCH = 1u << 1,   /* tensor dim 0 */
  SG_ACCEPT_SHARD_CHANNEL = 1u << 2, /* tensor dim 1 */
  SG_ACCEPT_SHARD_SPATIAL = 1u << 3, /* tensor dims 2.. (with halos) */
  SG_ACCEPT_ALL = 0xfu
};

/* Placement of the outputs. */
typedef enum sg_out_rule {
  SG_OUT_LIKE_INPUT = 0, /* sharded like the activation inputs; the global
                            shape follows from the local one (window ops:
                            from the window) */
  SG_OUT_PARTIAL,        /* forward gives this rank's partial sum; the
                            framework sums it over the mesh dims that split
                            the inputs (deterministic) and the result is
                            the same plain variable on every rank; backward
                            gets the upstream gradient as is */
  SG_OUT_REPLICATE       /* forward gives the same plain (unsharded) value
                            on every rank itself (e.g. a global reduction
                            through sg_node_group) */
} sg_out_rule;

/* How backward treats an input's gradient buffer. */
typedef enum sg_slot {
  SG_SLOT_ACT = 0, /* backward OVERWRITES node->gin[i] */
  SG_SLOT_PARAM    /* backward ACCUMULATES (+=) into node->gin[i] */
} sg_slot;

typedef struct sg_op_rule {
  int windowed_input; /* input that needs the window's margins, -1: none */
  unsigned accepts;   /* SG_ACCEPT_* for the activation inputs (slot ACT);
                         Partial is never accepted; 0 means
                         SG_ACCEPT_REPLICATE | SHARD_BATCH | SHARD_SPATIAL */
  sg_out_rule out;
  /* Bit i set: backward writes every element of gin[i] (it does not add
   * into it), so the tape hands it an uninitialised buffer instead of a
   * zero-filled one. Only for activation inputs (slot ACT); parameter
   * gradients are always accumulated into. 0 (the default): zero-filled. */
  unsigned writes_gin;
  /* Bit i set: the gradient of input i (slot ACT, not windowed) is the
   * gradient of output 0 unchanged (same shape), e.g. both inputs of an
   * addition. The tape routes it itself (gin[i] is NULL for the op): it
   * hands the output's gradient buffer over to the first such input that
   * has no gradient yet, and copies or adds it for the others. */
  unsigned grad_identity;
  /* 1: the outputs are kept in f32 under a bf16 storage policy
   * (sg_tape_set_storage_dtype): reductions such as losses, as autocast
   * keeps them. */
  int keep_f32;
  /* 1: under a bf16 storage policy the op's forward rounds its f32 outputs
   * on the host itself (sg_ag_rounds_bf16), in its kernels' pass over the
   * data, so the tape skips its own rounding pass; the same values. */
  int rounds_bf16;
  /* 1: backward never reads the outputs' values, so a split backward
   * (sg_tape_backward_split) frees them in B for an op deferred to W (the
   * built-in ops with parameters); 0 (the default): they are kept until W. */
  int out_unread;
} sg_op_rule;

typedef struct sg_op_def {
  const char *name;
  sg_slot slots[SG_NODE_MAX_IN]; /* per input */
  /* Compute node->out[*]->value (allocate with sg_node_alloc_out) from the
   * inputs' values; the windowed input is node->xin (with margins). May keep
   * state for backward in node->saved (sg_node_save). */
  sg_status (*forward)(sg_node *node);
  /* Given node->out[j]->grad (always present), write node->gin[i] for the
   * inputs with gin[i] != NULL (for the windowed input: the gradient of the
   * block with margins, shaped like node->xin). */
  sg_status (*backward)(sg_node *node);
  sg_op_rule rule;
  /* CUDA entry points (both or neither), for inputs whose values live on a
   * CUDA device (value.device.kind == SG_DEVICE_CUDA, every input on the
   * same device): the same contract as forward/backward on device memory.
   * The tape allocates the outputs (sg_node_alloc_out), the saved state
   * (sg_node_save) and the gradients (gin[i], the outputs' grad) on that
   * device and sums gradients there. An op without them refuses device
   * inputs with SG_ERR_NOT_SUPPORTED ("op X has no cuda implementation"):
   * the tape never copies a device tensor to the host behind the caller's
   * back. Not yet on device (refused, issue 22): sharded variables, the
   * bf16 storage policy, checkpointed blocks (window margins are padded,
   * max pooling's -inf margins filled, on the device). The
   * built-in ops' device kernels are listed in models/sg_op_device.h. */
  sg_status (*forward_cuda)(sg_node *node);
  sg_status (*backward_cuda)(sg_node *node);
} sg_op_def;

struct sg_node {
  const sg_op_def *op;
  int nin, nout;
  sg_var *in[SG_NODE_MAX_IN];
  sg_var *out[SG_NODE_MAX_OUT];
  int has_window;
  int nsp;                           /* spatial dims of the windowed input */
  sg_window win[SG_OPS_MAX_SPATIAL]; /* normalised: no zeros that mean 1 */
  sg_tensor xin;                     /* windowed input with margins */
  void *gin[SG_NODE_MAX_IN];         /* backward targets, NULL: not needed */
  unsigned char attr[256];           /* op attributes (copied at apply) */
  void *saved; /* op state for backward (freed by the tape) */
  size_t saved_bytes;
  /* framework state: sharded inputs (mesh NULL: none) */
  sg_mesh_t mesh;
  sg_placement placements[SG_MESH_MAX_DIMS];
  unsigned split_batch, split_channel, split_space; /* mesh dim masks */
  void *ex;         /* the windowed input's exchange (cached) */
  unsigned cropped; /* outputs cropped to this rank's share */
  sg_device device; /* where it runs: its inputs' device (outputs, gradients
                       and saved state are allocated there) */
  /* bf16 storage policy, backward: bit i of round_gin: gin[i] is input
   * i's whole gradient, and an op whose kernels can round it to bf16
   * values while writing it does so and sets bit i of rounded_gin (the
   * tape then skips its own rounding pass over that gradient). */
  unsigned round_gin, rounded_gin;
  /* bit j: output j's whole gradient already holds bf16 values */
  unsigned grad_bf16;
};

/* Record (or, in no-grad mode, just run) an op. attr (attr_bytes <= 256) is
 * copied into node->attr; win (one entry per spatial dim of the windowed
 * input) is required iff op->rule.windowed_input >= 0.
 * Outputs are tape-owned variables returned in out[0..nout). */
sg_status sg_tape_apply(sg_tape_t tape, const sg_op_def *op, int nin,
                        sg_var *const *in, int nout, const sg_window *win,
                        const void *attr, size_t attr_bytes, sg_var **out);
/* For op forwards: allocate output j (zero-filled, dtype of input 0). */
sg_status sg_node_alloc_out(sg_node *node, int j, int ndim,
                            const int64_t *shape);
/* The same, not zero-filled: for forwards that write every element of the
 * output (the built-in convolution, activation, element-wise, linear and
 * normalisation ops; the zero fill was 5% of a CNN step). */
sg_status sg_node_alloc_out_uninit(sg_node *node, int j, int ndim,
                                   const int64_t *shape);
/* For op forwards: a zero-filled buffer kept until the node is released. */
sg_status sg_node_save(sg_node *node, size_t bytes, void **ptr);
/* The same, not zero-filled: for state the forward writes in full (the
 * fused layer ops' pre-activation: the fill was a pass over the output). */
sg_status sg_node_save_uninit(sg_node *node, size_t bytes, void **ptr);

/* For op kernels that reduce over the global tensor (statistics, losses):
 * *g = the group over the mesh dims that split the activation inputs'
 * tensor dims selected by `which` (SG_SPLIT_* bits), or NULL when the node
 * is not sharded or no such mesh dim exists (then the local block is the
 * whole tensor along those dims). A reduction over it is collective over
 * that group; e.g. sg_sum_allreduce(v, n, sg_group_comm(g)) when g. Not
 * collective. */
enum {
  SG_SPLIT_BATCH = 1u << 0,
  SG_SPLIT_CHANNEL = 1u << 1,
  SG_SPLIT_SPACE = 1u << 2
};
sg_status sg_node_group(const sg_node *node, unsigned which, sg_group_t *g);
/* The global shape of input i (its local shape if it is not sharded). */
const int64_t *sg_node_in_global_shape(const sg_node *node, int i);

/* ---- the tape ------------------------------------------------------------ */

/* Hooks: where strategies attach (DDP/FSDP/ZeRO in strategies/). Every
 * member may be NULL. A tape has up to SG_TAPE_MAX_HOOKS listeners, called
 * in the order they were added, each for every parameter input (is_param)
 * of an op:
 *  - pre_use: before a forward reads the parameter, and BEFORE the tape
 *    checks its data, so a released (ZeRO-3) parameter whose value.data is
 *    NULL can be gathered here;
 *  - post_use: after the forward (e.g. release the gathered value);
 *  - pre_backward: before a recorded op's backward (its kernels read the
 *    parameter's value again: gather it);
 *  - post_backward_use: after that backward (release);
 *  - grad_ready: the parameter's gradient is final in this backward (the
 *    last recorded use has run): start its reduction;
 *  - post_backward: once, at the end of a backward.
 * Collective safety: a hook's failure on one rank becomes the op's failure
 * on every rank. For a sharded op the hooks' status joins the op's own
 * agreement over its mesh; for an op on plain variables the tape agrees
 * over the communicator given by sg_tape_set_comm (a strategy sets it when
 * it attaches), so a rank whose hook failed never leaves the others in the
 * next collective. Hooks that communicate must do so alike on every rank
 * (every rank runs the same ops in the same order). */
typedef struct sg_hooks {
  sg_status (*pre_use)(sg_var *param, void *user);
  sg_status (*post_use)(sg_var *param, void *user);
  sg_status (*pre_backward)(sg_var *param, void *user);
  sg_status (*post_backward_use)(sg_var *param, void *user);
  sg_status (*grad_ready)(sg_var *param, void *user);
  sg_status (*post_backward)(sg_tape_t tape, void *user);
  void *user;
} sg_hooks;

#define SG_TAPE_MAX_HOOKS 8

sg_status sg_tape_create(sg_tape_t *tape);
/* Frees everything the tape owns and sets *tape to NULL. NULL and
 * *tape == NULL are fine (SG_OK). */
sg_status sg_tape_destroy(sg_tape_t *tape);
/* Replace every listener by `hooks` (NULL: none). Not collective. */
void sg_tape_set_hooks(sg_tape_t tape, const sg_hooks *hooks);
/* Add a listener; *id (may be NULL) identifies it for removal.
 * SG_ERR_INVALID_ARG when SG_TAPE_MAX_HOOKS are installed. Not collective. */
sg_status sg_tape_add_hooks(sg_tape_t tape, const sg_hooks *hooks, int *id);
/* Remove listener `id` (from sg_tape_add_hooks). Not collective. */
sg_status sg_tape_remove_hooks(sg_tape_t tape, int id);
/* The communicator over which the tape agrees on hook failures of ops on
 * plain (unsharded) variables; MPI_COMM_NULL (the default): none. The
 * communicator is not duplicated: it must outlive the tape's use.
 * Not collective. */
void sg_tape_set_comm(sg_tape_t tape, MPI_Comm comm);
/* 1: every op's forward and backward kernels run inside a timer region
 * named after the op (sg_timer_total(op->name): its seconds so far, both
 * passes, excluding its halo exchange), for the per-op-class times of
 * sg-plan's calibration from the model (sg-train's op_times key); 0 (the
 * default): untimed. Process-wide. */
void sg_tape_time_ops(int on);
/* 1: record (default); 0: no-grad mode. Returns the previous setting. */
int sg_tape_set_grad_enabled(sg_tape_t tape, int enabled);

/* Mixed precision: the dtype activations are stored in. SG_DTYPE_BF16:
 * every f32 output of an op (but ops whose rule says keep_f32: losses) and
 * every activation gradient (when whole, before its producer's backward)
 * is rounded to the nearest bf16 value, in place: the values a bf16
 * kernel stores, which accumulates in f32 as these kernels do. The
 * buffers stay f32; the numerics are bf16's, and the direct convolution
 * multiplies in bf16 (AMX, f32 accumulation) where the CPU can. SG_DTYPE_F32 (the default): no rounding. A
 * checkpointed block's child tape follows. The parallel plan sets it from
 * its param_dtype. */
sg_status sg_tape_set_storage_dtype(sg_tape_t tape, sg_dtype dt);
sg_dtype sg_tape_storage_dtype(sg_tape_t tape);
/* Backward from a scalar variable produced on this tape, seeded with 1;
 * then the tape is cleared. */
sg_status sg_tape_backward(sg_tape_t tape, sg_var *loss);
/* Backward from n (variable, gradient) pairs: vars[i] was produced on this
 * tape, grads[i] has its value's dtype and shape (a pipeline stage seeds
 * its output with the gradient received from the next stage). The
 * gradients are copied; then the tape is cleared. Collective like the ops
 * it runs backward. */
sg_status sg_tape_backward_from(sg_tape_t tape, int n, sg_var *const *vars,
                                const sg_tensor *grads);
/* The split backward (zero-bubble pipelines, ZB-H1): B computes the
 * gradients of everything but the parameters (the input gradients a
 * pipeline stage sends back at once), W the parameters' gradients, later.
 *
 * B walks the tape in reverse like sg_tape_backward, but an op with a
 * parameter input (a leaf requiring a gradient in a SG_SLOT_PARAM slot)
 * runs its backward with that input's gin NULL and stays on the tape
 * ("deferred"), keeping its outputs' gradients, its saved state and
 * margins block, the values of the inputs it reads and, unless its rule
 * says out_unread, its outputs' values; the rest is released as in one
 * pass. Leaves a deferred op reads (a received input) must stay alive
 * until W. After B the gradients of every non-parameter leaf are final and
 * the parameters' gradients untouched.
 *
 * W runs the deferred ops' backwards for their parameter inputs only, in
 * B's order, so every parameter gradient gets its parts in the one-pass
 * order (the same bits as sg_tape_backward); grad_ready fires when a
 * parameter's last use has run, post_backward at the end; then the tape
 * is cleared. sg_tape_bytes counts what W still holds. pre_backward and
 * post_backward_use run in both passes for a deferred op (both read the
 * parameter).
 *
 * Run whole in B (W has nothing for them): activation checkpoints
 * (sg_ag_checkpoint: the recomputation and its inner backward are one
 * unit; grad_ready for a parameter used only inside fires in B; one used
 * inside and outside gets its parts in another order than one pass: equal
 * to rounding) and a non-leaf in a parameter slot (a computed weight is on
 * the input-gradient path). Collective like the ops: both passes make the
 * same calls on every rank (a rank holding none of a sharded parameter
 * defers alike). A tape that waits for W refuses another backward
 * (SG_ERR_INVALID_ARG); sg_tape_clear drops the deferred ops without
 * their W. */
sg_status sg_tape_backward_split(sg_tape_t tape, sg_var *loss);
sg_status sg_tape_backward_from_split(sg_tape_t tape, int n,
                                      sg_var *const *vars,
                                      const sg_tensor *grads);
/* W of a split backward; then the tape is cleared (also on failure).
 * SG_ERR_INVALID_ARG when no split B ran. */
sg_status sg_tape_backward_weights(sg_tape_t tape);
/* 1 between a split backward's B and its W. */
int sg_tape_weights_pending(sg_tape_t tape);
/* Drop every recorded op and tape-owned variable (keeps the cached halo
 * plans). */
void sg_tape_clear(sg_tape_t tape);
/* Zero the gradients of n leaf variables. */
sg_status sg_tape_zero_grad(sg_var *const *vars, int n);
/* Bytes held now by the tape's activations and saved state (a running
 * checkpointed block's included). */
size_t sg_tape_bytes(sg_tape_t tape);
/* Number of recorded ops (after a split backward's B: the deferred ops). */
int sg_tape_size(sg_tape_t tape);

/* ---- activation checkpointing --------------------------------------------
 * A block: a sequence of ops run by fn on `tape` from in[0..nin) to
 * out[0..nout). ctx is fn's own state (the model, a layer index). */
typedef sg_status (*sg_block_fn)(sg_tape_t tape, void *ctx, sg_var *const *in,
                                 sg_var **out);

/* out = fn(in), checkpointed: forward runs fn without recording (on a
 * private tape that has this tape's hooks, so a released ZeRO-3 parameter
 * is gathered and released as usual) and keeps only the references to the
 * inputs and the outputs; the block's activations are freed when fn
 * returns. Backward runs fn again with gradients (the recomputation) and
 * backward through it from the outputs' gradients, then hands the inputs
 * their gradients. The result is the same function with the same
 * gradients as fn called on the tape directly, bit for bit (the kernels
 * are deterministic and the gradients are accumulated in the same order),
 * for a peak activation memory of the block's inputs and outputs plus one
 * block's activations at a time (docs/strategies.md, "Activation
 * checkpointing").
 *
 * Parameters: fn reaches its parameters (and any constant leaf) through
 * ctx. The tape counts each parameter's uses inside the block as one use
 * of the checkpoint, so grad_ready fires once per parameter per backward,
 * after its last use (inside or outside the block); the private tape runs
 * pre_use/post_use/pre_backward/post_backward_use for every op of both
 * runs but never grad_ready or post_backward.
 *
 * Rules for fn: it computes the same thing both times (no dropout drawn
 * from a changing state, no side effects on ctx); it reads activations of
 * the enclosing tape only through in (SG_ERR_INVALID_ARG otherwise, found
 * in forward); its outputs are made by its ops (an input returned as is is
 * refused). ctx must stay valid until the backward (or sg_tape_clear).
 * Blocks nest. Sharded inputs are fine: both runs make the same
 * collective calls on every rank. nin, nout: 1..SG_NODE_MAX_IN /
 * SG_NODE_MAX_OUT. In no-grad mode the block runs once and nothing is
 * kept. Collective like the ops fn runs. */
sg_status sg_ag_checkpoint(sg_tape_t tape, sg_block_fn fn, void *ctx, int nin,
                           sg_var *const *in, int nout, sg_var **out);

/* ---- ops (all record on the tape) -----------------------------------------
 * x: (N, C, spatial...). Window ops take a window per spatial dim (win[d],
 * sg_window: stride, dilation, padding (lo, hi) and boundary; zeros mean 1
 * for kernel, stride and dilation); the framework adds the padding (see
 * above). */

/* w: (Cout, Cin, kernel...), b: (Cout) or NULL. The kernel comes from
 * w's shape (win[d].kernel: 0 or the same); no up-sampling. */
sg_status sg_ag_conv(sg_tape_t t, sg_var *x, sg_var *w, sg_var *b,
                     const sg_window *win, sg_var **y);
/* Transposed convolution with kernel == stride; w: (Cin, Cout, kernel...). */
sg_status sg_ag_convt(sg_tape_t t, sg_var *x, sg_var *w, sg_var *b, sg_var **y);
/* Pooling with kernel, stride, dilation, padding and boundary per spatial
 * dim (win[d]; no up-sampling). Max pooling pads zero-boundary dims with
 * -inf (the identity of max, as PyTorch); average pooling divides by the
 * full window, zero padding included (count_include_pad). */
sg_status sg_ag_pool(sg_tape_t t, sg_pool_kind kind, sg_var *x,
                     const sg_window *win, sg_var **y);
/* Up-sampling by integer factors (linear: align_corners=False; the
 * framework adds a replicate margin of 1). */
sg_status sg_ag_upsample(sg_tape_t t, sg_upsample_kind kind, sg_var *x,
                         const int64_t *scale, sg_var **y);
sg_status sg_ag_act(sg_tape_t t, sg_act act, sg_var *x, sg_var **y);
sg_status sg_ag_binary(sg_tape_t t, sg_binary op, sg_var *a, sg_var *b,
                       sg_var **y);
sg_status sg_ag_scale(sg_tape_t t, double alpha, sg_var *x, sg_var **y);
/* y = x + b[c]; b: (C), the global channels. On channel-split x (Shard(1))
 * each rank adds (and its gradient accumulates into) the slice of b of its
 * global channels. */
sg_status sg_ag_bias(sg_tape_t t, sg_var *x, sg_var *b, sg_var **y);
/* Channel-wise linear: w (Cout, Cin), b (Cout) or NULL. */
sg_status sg_ag_linear(sg_tape_t t, sg_var *x, sg_var *w, sg_var *b,
                       sg_var **y);
sg_status sg_ag_concat(sg_tape_t t, int k, sg_var *const *xs, sg_var **y);
sg_status sg_ag_split(sg_tape_t t, sg_var *x, int k, const int64_t *channels,
                      sg_var **ys);
/* Normalisation (kind, groups, eps from d; batch/channels/spatial are
 * taken from x); gamma, beta: (C) or NULL. On a sharded x the statistics
 * are global: BATCH over batch and space, INSTANCE and GROUP over space,
 * LAYER (over channels) local. */
sg_status sg_ag_norm(sg_tape_t t, const sg_norm_desc *d, sg_var *x,
                     sg_var *gamma, sg_var *beta, sg_var **y);
/* The spectral convolution of the FNO (shardtensor/fft/sg_spectral.h):
 * y = irfftn(W . trunc(rfftn(x))) over the spatial dims, on the
 * distributed FFT of conv (made for this layout: its plans' real blocks are
 * the variables' local blocks). x: (N, Cin, spatial...) this rank's block
 * (sharded over batch and the FFT's spatial mesh dims, or plain on one
 * process); w: a parameter holding W in conv's weight layout (all of W,
 * REPLICATE, or this rank's modes, SHARD_MODES); y: (N, Cout, spatial...)
 * placed like x. The FFT's transposes carry the sharded logic (no window,
 * no halo). Checks against conv's plans agree over x's mesh. */
struct sg_spectral_conv; /* sg_spectral_conv_t of sg_spectral.h */
sg_status sg_ag_spectral_conv(sg_tape_t t, struct sg_spectral_conv *conv,
                              sg_var *x, sg_var *w, sg_var **y);
/* Fused layer ops (one pass over the output instead of three; the
 * pre-activation kept for backward): y = act(w x + b), and the FNO layer
 * y = act(spectral(x; W) + w x + b) (conv, x, W as sg_ag_spectral_conv; w
 * (Cout, Cin), b (Cout) or NULL); act < 0: none. The same values as the
 * ops one after the other (sg_ag_spectral_conv, sg_ag_linear, sg_ag_binary
 * add, sg_ag_act), which is what they record under a bf16 storage policy
 * (sg_tape_set_storage_dtype rounds every op's output). */
sg_status sg_ag_linear_act(sg_tape_t t, sg_var *x, sg_var *w, sg_var *b,
                           int act, sg_var **y);
sg_status sg_ag_spectral_linear_act(sg_tape_t t, struct sg_spectral_conv *conv,
                                    sg_var *x, sg_var *W, sg_var *w, sg_var *b,
                                    int act, sg_var **y);
/* The projection head y = w2 act(w1 x + b1) + b2 in one node
 * (sg_linear_head_forward/backward): the values of sg_ag_linear_act then
 * sg_ag_linear, which it records instead under a bf16 storage policy, with
 * no activation or a bias missing, and on device variables. Where the
 * kernels are fused (f32 GELU on the AVX2 tier) the tape keeps z only:
 * act(z) is formed per cache-sized chunk, in forward and again in
 * backward. */
sg_status sg_ag_linear_head(sg_tape_t t, sg_var *x, sg_var *w1, sg_var *b1,
                            int act, sg_var *w2, sg_var *b2, sg_var **y);
/* ---- transformer ops (models/ag_attention.c; docs/transformers.md) ----
 * Tokens are the spatial positions of (N, C, spatial...) variables;
 * C = heads * head_dim, channel c = head * head_dim + j.
 *
 * Multi-head self-attention o = softmax(q k^T / sqrt(head_dim)) v per
 * (sample, head) over every token of the global tensor, on the fused
 * kernel (sg_attention_forward/backward). q, k, v, o: (N, C, spatial...)
 * of one global shape, placed alike. Tokens split over mesh dims (Shard of
 * spatial dims): ring attention over the group of those dims (K/V blocks
 * passed around the ring, merged by sg_attention_merge; backward sends
 * dK/dV back around it); any token counts per rank. heads must divide C
 * (SG_ERR_CONFIG on every rank otherwise). */
sg_status sg_ag_attention(sg_tape_t t, int64_t heads, sg_var *q, sg_var *k,
                          sg_var *v, sg_var **o);
/* Bytes this rank has received in ring attention since the last reset:
 * bytes[SG_RING_FWD_KV] the K/V blocks of forwards, bytes[SG_RING_BWD_KV]
 * those of backwards, bytes[SG_RING_BWD_DKV] the dK/dV accumulators
 * (docs/transformers.md gives the volumes). reset: set them to 0 after
 * reading. Process-wide; not collective. */
enum { SG_RING_FWD_KV = 0, SG_RING_BWD_KV, SG_RING_BWD_DKV };
void sg_ag_attention_ring_bytes(long long *bytes, int reset);
/* Ulysses (DeepSpeed) sequence parallelism (models/ag_ulysses.c): the
 * same function as sg_ag_attention, computed by one all-to-all(v) of q, k,
 * v from the token split (every rank its tokens of all heads) to the head
 * split (every rank all tokens of heads/P heads, P the ranks of the mesh
 * dims that split the tokens), local attention, and one all-to-all(v) of o
 * back; backward: dout token -> head, dq, dk, dv head -> token. Any token
 * counts per rank. heads % P != 0: SG_ERR_CONFIG on every rank, before any
 * data moves. */
sg_status sg_ag_attention_ulysses(sg_tape_t t, int64_t heads, sg_var *q,
                                  sg_var *k, sg_var *v, sg_var **o);
/* Bytes this rank has received in Ulysses all-to-alls since the last
 * reset: q, k, v and o of forwards, dout and dq, dk, dv of backwards
 * (docs/transformers.md gives the volumes). Process-wide; not collective. */
enum {
  SG_ULYSSES_FWD_QKV = 0,
  SG_ULYSSES_FWD_O,
  SG_ULYSSES_BWD_DO,
  SG_ULYSSES_BWD_DQKV,
  SG_ULYSSES_NBYTES
};
void sg_ag_attention_ulysses_bytes(long long *bytes, int reset);
/* How the sequence split over the domain dims is attended (the key
 * sp_mode): ring attention (sg_ag_attention) or Ulysses. */
typedef enum sg_sp_mode {
  SG_SP_RING = 0,
  SG_SP_ULYSSES = 1,
  SG_SP_USP = 2
} sg_sp_mode;
/* USP (Ulysses x ring on a 2-D token split): the Ulysses all-to-alls over
 * the mesh dims that split the LAST spatial dim only (heads % those ranks
 * must hold), then ring attention of those heads over the mesh dims that
 * split the other spatial dims; backward the adjoints. The same function;
 * the ring's bytes count in sg_ag_attention_ring_bytes, the all-to-alls'
 * in sg_ag_attention_ulysses_bytes. */
sg_status sg_ag_attention_usp(sg_tape_t t, int64_t heads, sg_var *q, sg_var *k,
                              sg_var *v, sg_var **o);
/* "ring" | "ulysses" | "usp"; SG_ERR_CONFIG naming the choices otherwise. */
sg_status sg_sp_mode_parse(const char *name, sg_sp_mode *mode);
sg_status sg_ag_attention_sp(sg_tape_t t, sg_sp_mode mode, int64_t heads,
                             sg_var *q, sg_var *k, sg_var *v, sg_var **o);
/* The attention of token pieces (N, C, T_r) of the sp dim (plain
 * variables: their groups given, not read from a sharding): seq the group
 * of every rank holding a piece of the sequence (the domain dims and sp),
 * sp and domain its two parts. Ring: over seq; Ulysses: the all-to-alls
 * over seq; USP: the all-to-alls over sp, the ring over domain. NULL or
 * size-1 groups: none. The same function as one process. */
typedef struct sg_attn_groups {
  sg_group_t seq, sp, domain;
} sg_attn_groups;
sg_status sg_ag_attention_seq(sg_tape_t t, sg_sp_mode mode, int64_t heads,
                              const sg_attn_groups *groups, sg_var *q,
                              sg_var *k, sg_var *v, sg_var **o);
/* A model's check from the config and the mesh alone (every rank finds the
 * same error, before any data moves): with Ulysses, heads over tp (the
 * mesh dim "tp") must be divisible by the ranks of the domain dims "h",
 * "w" that split the tokens (USP: by the ranks of "w"); with an sp (cp)
 * dim by those of h, w and sp (USP: of sp);
 * SG_ERR_CONFIG naming `who` otherwise. An
 * unknown mode: SG_ERR_CONFIG. Not collective. */
sg_status sg_sp_mode_check(sg_mesh_t mesh, sg_sp_mode mode, int64_t heads,
                           const char *who);
/* y[n, c, s] = x[n, c, s] + p[c, s]: a field added to every sample (the
 * ViT's position embedding). p is a parameter holding THIS rank's
 * (C, spatial...) block of x, i.e. a field Shard over the mesh dims that
 * split x's spatial dims like x (its gradient, summed over the batch, is
 * Partial over the dims that split the batch only). */
sg_status sg_ag_add_field(sg_tape_t t, sg_var *x, sg_var *p, sg_var **y);
/* Swin (models/ag_swin.c, docs/transformers.md "The swin model").
 * A periodic roll of the spatial dims of x (N, C, spatial...): y[.., i] =
 * x[.., (i + shift) mod n] per spatial dim (torch.roll by -shift). On a
 * spatially sharded x it is a halo exchange with a one-sided periodic
 * halo of |shift| cells (neighbour traffic only; backward: the halo
 * adjoint); a shard thinner than |shift| is SG_ERR_HALO on every rank.
 * Collective over x's mesh. */
sg_status sg_ag_roll(sg_tape_t t, sg_var *x, const int64_t *shift, sg_var **y);
/* Multi-head attention inside the non-overlapping window x window
 * windows of q, k, v (N, C, H, W), C = heads * head_dim as for
 * sg_ag_attention, with a relative position bias: score(i, j) += bias[h,
 * (dy + W - 1)(2W - 1) + dx + W - 1] for the offset (dy, dx) of query i
 * from key j; bias (heads, (2W-1)^2) is a parameter (its gradient
 * accumulates). Local on every rank: every rank's block must hold whole
 * windows (SG_ERR_CONFIG on every rank otherwise; agreed over the mesh),
 * a window larger than the token grid is SG_ERR_CONFIG. */
sg_status sg_ag_window_attention(sg_tape_t t, int64_t heads, int64_t window,
                                 sg_var *q, sg_var *k, sg_var *v, sg_var *bias,
                                 sg_var **o);
/* The same with Swin's attention mask for a shifted block: q, k, v came
 * by sg_ag_roll(shift) (shift[2]: y, x); in a spatial dim with
 * periodic[k] == 0 and a shift, a query and a key of which one wrapped
 * across the dim's end (its global index plus the shift outside [0, n))
 * and the other did not, do not attend to each other (probability 0; a
 * token always sees itself). shift or periodic NULL: no mask. One mesh
 * dim per masked spatial dim (SG_ERR_NOT_SUPPORTED on every rank
 * otherwise). */
sg_status sg_ag_window_attention_masked(sg_tape_t t, int64_t heads,
                                        int64_t window, const int64_t *shift,
                                        const int *periodic, sg_var *q,
                                        sg_var *k, sg_var *v, sg_var *bias,
                                        sg_var **o);
/* LayerNorm over the channels of each token (sg_ag_norm, SG_NORM_LAYER:
 * local on any spatial split); gamma, beta (C) or NULL; eps <= 0: 1e-5. */
sg_status sg_ag_layernorm(sg_tape_t t, double eps, sg_var *x, sg_var *gamma,
                          sg_var *beta, sg_var **y);
/* The MHSA block: qkv = linear(x; wqkv (3C, C), bqkv (3C) or NULL), split
 * into q, k, v, sg_ag_attention, then linear(wo (C, C), bo (C) or NULL). */
sg_status sg_ag_mhsa(sg_tape_t t, int64_t heads, sg_var *x, sg_var *wqkv,
                     sg_var *bqkv, sg_var *wo, sg_var *bo, sg_var **y);

/* ---- tensor parallelism (Megatron; models/ag_tp.c, docs/strategies.md) ----
 * tp: the group of the tensor-parallel mesh dim (sg_mesh_group over the
 * "tp" dim); NULL or a group of size 1 means one tp rank. Inside a TP
 * region a variable is this tp rank's channel slice (its placements over
 * the other mesh dims are the input's; its channel count is the local
 * one). The collectives are fixed-order all-reduces over tp (every tp rank
 * gets the same bits); collective over tp (and over x's mesh like any op).
 *
 * "Copy to TP region": y = x; backward: dx = the sum over tp of dy. */
sg_status sg_ag_tp_copy(sg_tape_t t, sg_group_t tp, sg_var *x, sg_var **y);
/* "Reduce from TP region": y = the sum over tp of x (x is Partial over tp
 * only: each tp rank's partial sum; y is the same on every tp rank);
 * backward: dx = dy. */
sg_status sg_ag_tp_reduce(sg_tape_t t, sg_group_t tp, sg_var *x, sg_var **y);
/* Column-parallel linear: x replicated over tp, w this rank's rows
 * (Cout_local, C) of the global (Cout, C), b its slice (Cout_local) or
 * NULL; y = x w^T + b is this rank's Cout_local output channels
 * (tp_copy, then linear). Any split of the rows (uneven too) is the
 * caller's. */
sg_status sg_ag_linear_col(sg_tape_t t, sg_group_t tp, sg_var *x, sg_var *w,
                           sg_var *b, sg_var **y);
/* Row-parallel linear: x this rank's C_local input channels, w its
 * columns (Cout, C_local) of the global (Cout, C), b the whole (Cout)
 * (replicated) or NULL; y = sum over tp of x w^T, then + b once
 * (linear without bias, tp_reduce, bias). y is replicated over tp. */
sg_status sg_ag_linear_row(sg_tape_t t, sg_group_t tp, sg_var *x, sg_var *w,
                           sg_var *b, sg_var **y);
/* A convolution (sg_ag_conv, windows win) split over tp like the linears
 * above, over channels (Megatron; the conv nets pair them in their
 * blocks). row = 0, column-parallel: x replicated, w this rank's output
 * channels (Cout_local, Cin, k...), b its slice or NULL; y channel-split.
 * row = 1, row-parallel: x this rank's Cin_local channels, w its input
 * channels (Cout, Cin_local, k...), b whole or NULL: the partial sums
 * reduced over tp, then b once; y replicated. A channel-split activation
 * exchanges its halos over the domain dims as any other (the tp group is
 * not one of them). tp NULL or of size 1: sg_ag_conv. */
sg_status sg_ag_conv_tp(sg_tape_t t, sg_group_t tp, int row, sg_var *x,
                        sg_var *w, sg_var *b, const sg_window *win, sg_var **y);


/* ---- mixture of experts (models/ag_moe.c; docs/transformers.md) ----------
 * y = sum over the k chosen experts e of gate_e * MLP_e(x) per token (the
 * spatial positions of x (N, C, spatial...)); MLP_e(x) = W2_e gelu(W1_e x +
 * b1_e) + b2_e. The router is softmax(Wr x), Wr (E, C); k = 1: the top
 * expert's probability is the gate; k = 2: the two top probabilities
 * renormalised. Capacity per sample and expert: ceil(capacity * T * k / E)
 * pairs (T: the sample's tokens, global), filled in (choice slot, global
 * token) order; the pairs beyond it are dropped (a token whose choices are
 * all dropped gives y = 0). capacity <= 0: nothing is dropped. The Switch
 * load-balancing loss aux_coef * E / B * sum_samples sum_e f_e P_e (f_e:
 * the sample's fraction of pairs choosing e, P_e: its mean router
 * probability, B the global batch) is applied as a gradient (added to
 * backward's); its value goes to *aux when aux != NULL (summed over the
 * mesh: the same on every rank). With an ep group of P ranks, this rank
 * holds experts [r E/P, (r+1) E/P): W1 (E/P, F, C), b1 (E/P, F), W2 (E/P,
 * C, F), b2 (E/P, C); the ranks of ep hold different samples and exchange
 * tokens by all-to-all(v). With a tp group of Q ranks every expert's
 * hidden width F is split over it (Megatron inside the expert: fc1
 * column-, fc2 row-parallel): W1 (E/P, F/Q, C), b1 (E/P, F/Q), W2 (E/P,
 * C, F/Q) this tp rank's slices, Wr and b2 whole (replicated over tp, as
 * x is: the routing is the same on every tp rank); one all-reduce over tp
 * of the expert outputs forward and one of their input gradients
 * backward; y and dx are whole on every tp rank. Collective over ep, tp
 * and over the mesh dims that split x's spatial dims. */
typedef struct sg_moe_desc {
  int64_t experts; /* E (global) */
  int topk;        /* 1 or 2 */
  double capacity; /* capacity factor; <= 0: no dropping */
  double aux_coef; /* load-balancing loss coefficient */
  double *aux;     /* NULL or where forward writes the aux loss */
  sg_group_t ep;   /* NULL or the expert-parallel group */
  sg_group_t tp;   /* NULL or the tensor-parallel group (F split over it) */
  int64_t batch;   /* the global batch B of the aux loss (0: x's global batch;
                    a model whose input is not marked sharded over the
                    batch passes it) */
} sg_moe_desc;
/* E >= 1, 1 <= topk <= min(2, E), E % ep == 0: SG_ERR_CONFIG otherwise
 * (from the arguments alone: every rank finds the same). */
sg_status sg_moe_check(const sg_moe_desc *d, int64_t width);
sg_status sg_ag_moe(sg_tape_t t, const sg_moe_desc *d, sg_var *x, sg_var *wr,
                    sg_var *w1, sg_var *b1, sg_var *w2, sg_var *b2, sg_var **y);
/* The FNO spectral layer's pre-activation spectral(x; W) + linear(x; w, b)
 * split over tp (Megatron; models/fno.c pairs the layers). row = 0,
 * column-parallel: x replicated over tp, conv maps Cin to this rank's
 * Cout_local channels, W its (Cin, Cout_local, modes) slice, w its rows
 * (Cout_local, Cin), b its slice: y channel-split (tp_copy, then the two
 * local ops; backward: one all-reduce). row = 1, row-parallel: x this
 * rank's Cin_local channels, conv maps them to Cout, W its (Cin_local,
 * Cout, modes) slice, w its columns (Cout, Cin_local), b whole: the two
 * partial sums added, one tp_reduce, then b: y replicated. b may be NULL.
 * tp NULL or of size 1: spectral(x) + linear(x) on the whole arrays. */
sg_status sg_ag_spectral_linear_tp(sg_tape_t t, sg_group_t tp, int row,
                                   struct sg_spectral_conv *conv, sg_var *x,
                                   sg_var *W, sg_var *w, sg_var *b, sg_var **y);
/* The MHSA block with its heads split over tp: wqkv this rank's
 * (3 C_local, C) rows (its q, k, v channels, in that order), bqkv
 * (3 C_local) or NULL, heads_local heads on them, wo (C, C_local)
 * row-parallel, bo (C) replicated. tp NULL: sg_ag_mhsa. One all-reduce
 * forward (after wo) and one backward (before wqkv). */
sg_status sg_ag_mhsa_tp(sg_tape_t t, sg_group_t tp, int64_t heads_local,
                        sg_var *x, sg_var *wqkv, sg_var *bqkv, sg_var *wo,
                        sg_var *bo, sg_var **y);
/* sg_ag_mhsa_tp with the attention of the local heads by `mode` over the
 * domain dims (ring, Ulysses or USP: heads_local % P must hold for the
 * all-to-all's P ranks). */
sg_status sg_ag_mhsa_sp(sg_tape_t t, sg_group_t tp, sg_sp_mode mode,
                        int64_t heads_local, sg_var *x, sg_var *wqkv,
                        sg_var *bqkv, sg_var *wo, sg_var *bo, sg_var **y);
/* ---- Megatron sequence parallelism (tp_sequence; models/ag_tp.c) --------
 * Outside the TP regions the activations are token slices over tp: tp
 * rank r holds the balanced split r of the T local tokens (the spatial
 * positions of this rank's block, row-major) of a full tensor (N, C,
 * spatial...) as a plain variable (N, C, T_r) (any T, uneven too; T_r may
 * be 0). LayerNorm, bias and residual additions run on the slices. A full
 * tensor is sharded over the other mesh dims like `like` (its local shape,
 * mesh, placements, global shape), e.g. the tensor that was scattered.
 * tp NULL or of size 1: the slice is the whole. Collective over tp (the
 * moves agree allocation failures first).
 *
 * scatter: x full, replicated over tp -> y this rank's slice; backward:
 * all-gather of the slices' gradients. */
sg_status sg_ag_tp_seq_scatter(sg_tape_t t, sg_group_t tp, sg_var *x,
                               sg_var **y);
/* gather: the slices -> y full (replicated over tp: its consumers compute
 * the same on every tp rank); backward: this rank's slice of dy. */
sg_status sg_ag_tp_seq_gather(sg_tape_t t, sg_group_t tp, sg_var *x,
                              const sg_var *like, sg_var **y);
/* all-gather (enters a TP region: before a column-parallel linear): the
 * slices -> y full; backward: reduce-scatter (dx = this rank's slice of
 * the sum over tp of dy, summed in rank order: deterministic). */
sg_status sg_ag_tp_seq_allgather(sg_tape_t t, sg_group_t tp, sg_var *x,
                                 const sg_var *like, sg_var **y);
/* reduce-scatter (leaves a TP region: after a row-parallel linear): x full,
 * Partial over tp -> y this rank's slice of the sum; backward: all-gather. */
sg_status sg_ag_tp_seq_reduce_scatter(sg_tape_t t, sg_group_t tp, sg_var *x,
                                      sg_var **y);
/* The sp mesh dim (sequence parallelism, docs/transformers.md) uses the
 * same token slices over the sp group, but the full tensor before the
 * split is Partial over sp in the backward (every parameter's gradient is
 * summed over sp by the plan). sp_scatter: x full, replicated over sp ->
 * y this rank's slice; backward: dx = dy in this rank's slice, zeros
 * elsewhere. (The gathers are sg_ag_tp_seq_gather, before a part that
 * every sp rank computes alike, and sg_ag_tp_seq_allgather, before the
 * attention, on the sp group.) */
sg_status sg_ag_sp_scatter(sg_tape_t t, sg_group_t sp, sg_var *x, sg_var **y);
/* A parameter p used after the sp gather (the same on every sp rank):
 * q = p; its gradient divided by the sp size (each rank's share of the
 * sum over sp). With sp NULL (one rank) it is the identity, still recorded
 * (the op table runs it so). */
sg_status sg_ag_sp_share(sg_tape_t t, sg_group_t sp, sg_var *p, sg_var **q);
/* Bytes this rank received in the tp ops (tp_copy/tp_reduce: the fixed-order
 * all-reduce's (tp - 1) payloads; all-gather: the other ranks' slices;
 * reduce-scatter: (tp - 1) slices of this rank's), since the last reset;
 * reset != 0 zeroes the counter. Not collective. */
void sg_ag_tp_bytes(long long *bytes, int reset);
/* A replicated parameter p used on token slices: q = tp_copy(p) (its
 * gradient there is partial over tp; the copy's backward sums it), p
 * itself when tp is off. */
sg_status sg_ag_tp_param(sg_tape_t t, sg_group_t tp, sg_var *p, sg_var **q);
/* sg_ag_linear_col with x this rank's token slice: all-gathered to the
 * full tensor (like) first; like NULL: sg_ag_linear_col. */
sg_status sg_ag_linear_col_seq(sg_tape_t t, sg_group_t tp, const sg_var *like,
                               sg_var *x, sg_var *w, sg_var *b, sg_var **y);
/* sg_ag_linear_row with seq != 0: the partial sums reduce-scattered to this
 * rank's token slice, then b (through sg_ag_tp_param) on the slice. */
sg_status sg_ag_linear_row_seq(sg_tape_t t, sg_group_t tp, int seq, sg_var *x,
                               sg_var *w, sg_var *b, sg_var **y);
/* sg_ag_mhsa_sp on token slices (like != NULL): x this rank's slice, the
 * QKV linear after an all-gather, the out linear's sums reduce-scattered:
 * y this rank's slice. like NULL: sg_ag_mhsa_sp. */
sg_status sg_ag_mhsa_seq(sg_tape_t t, sg_group_t tp, const sg_var *like,
                         sg_sp_mode mode, int64_t heads_local, sg_var *x,
                         sg_var *wqkv, sg_var *bqkv, sg_var *wo, sg_var *bo,
                         sg_var **y);
/* A scalar loss (target ignored by SUM/MEAN, may be NULL then). On a
 * sharded pred (target sharded alike) the value is the global loss over all
 * shards, the same on every rank (rank-order sums: deterministic). */
sg_status sg_ag_loss(sg_tape_t t, sg_loss_kind kind, sg_var *pred,
                     sg_var *target, sg_var **loss);

#ifdef __cplusplus
}
#endif
#endif /* SG_AUTOGRAD_H */
