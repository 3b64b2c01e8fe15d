/* shardgrid — the parallel plan: how one run splits its work over a device
 * mesh, built from the mesh, the model's parameter table and nothing else.
 *
 * The plan is the seam every strategy and every driver stands on (sg-train
 * is a thin driver over it; examples/parallel-driver shows a user's own
 * driver in a few calls). It owns:
 *   - the role of every mesh dim, from its name: "dp" replicate-data,
 *     "fsdp" shard-data (ZeRO), "h"/"w"/"d" domain, "tp" tensor (Megatron:
 *     the model splits its layers over it, every tp rank sees the same
 *     data; models without TP support refuse tp > 1), and the names kept
 *     for the strategies still to come: "pp" pipeline (driven by
 *     sg_pipeline.h), "sp"/"cp" sequence, "ep" expert (a size-1 dim of any
 *     known role is fine);
 *   - the flat parameter and gradient buffers of this rank (bind the model
 *     to sg_parallel_params/sg_parallel_grads) and the optimizer state;
 *   - the gradient reduction of every parameter, derived from placements
 *     only: a gradient is Partial over every mesh dim where the data is
 *     split (dp, fsdp, domain) except the dims the parameter is Shard over
 *     (sg_param_info.shard_dims) — never from a strategy's name;
 *   - ZeRO (zero >= 1): each parameter's box is cut along its first dim,
 *     balanced (uneven and empty pieces allowed: a 7x15 parameter on 4
 *     ranks owns rows 2,2,2,1), over the ZeRO group — the "fsdp" dims, plus
 *     the domain dims with shard_over_domain (domain ranks hold replicas of
 *     every replicated parameter) — minus the dims the parameter is
 *     already Shard over (the FNO's mode-sharded spectral weights compose).
 *     Each rank keeps the AdamW moments of its piece only, gradients are
 *     reduce-scattered onto the pieces (then all-reduced over the other
 *     data dims: HSDP), the optimizer updates the piece, and an all-gather
 *     restores the parameters;
 *   - the hooks on the tape (grad-ready starts DDP bucket reductions, and
 *     the ZeRO reduce-scatters, non-blocking while backward goes on;
 *     gradient accumulation reduces on the last micro-batch only), the
 *     ZeRO-3 prefetch (below), the global gradient norm over every mesh
 *     dim (each element counted once), clipping, the optimizer step, the
 *     replica check, and the checkpoint boxes (one global variable per
 *     parameter and per moment, so any mesh reads any other's checkpoint).
 *
 *   sg_parallel_t p;
 *   sg_parallel_create(mesh, &cfg, nparams, table, nlocal, &p);  // table: sg_param_info
 *   sg_model_bind(model, sg_parallel_params(p), sg_parallel_grads(p));
 *   sg_model_init(model, seed);
 *   sg_parallel_attach(p, tape);
 *   for each step t:
 *     for each micro-batch k of K:
 *       sg_parallel_begin_micro(p, k, K);
 *       forward, loss, sg_tape_backward(tape, loss);
 *     sg_parallel_reduce(p, &grad_norm);
 *     sg_parallel_step(p, t, lr, sg_clip_scale(grad_norm, clip));
 *
 * In deterministic mode every reduction is the fixed-order sum of the
 * communication layer over the whole reduction group, so ZeRO gives the
 * same bits as DDP on the same mesh.
 *
 * zero = 2 also keeps only the pieces of the gradients: a parameter's full
 * gradient exists from its first backward use until it is ready, then its
 * reduce-scatter onto the piece starts (non-blocking) and it is freed when
 * that completes (at most bucket_bytes of them in flight). zero = 3 (FSDP)
 * also keeps only the pieces of the parameters: a parameter is
 * all-gathered before each use (forward and backward, by the tape's
 * pre-use / pre-backward hooks) and freed after it; the first micro-batch
 * records the order of the uses, and later ones start the (non-blocking)
 * all-gather of the next use's parameter while the current op computes, so
 * at most one op's parameters plus the next one are gathered at once. Per
 * step that moves 3 parameter volumes (all-gather forward, all-gather
 * backward, reduce-scatter) against DDP's 2 (the ZeRO paper's 1.5x); zero
 * 1 and 2 move DDP's 2. With zero >= 2
 * the reduction runs at every micro-batch (there is no full gradient to
 * accumulate into); in deterministic mode it is the fixed-order all-reduce
 * over the whole group (DDP's bits with one micro-batch per step, at DDP's
 * traffic plus the gathers), blocking in the grad-ready hook, and ZeRO-1
 * takes DDP's buckets: the reduce-scatters overlap backward only when not
 * deterministic.
 * For zero >= 2 the full buffers exist only from create to attach (bind
 * and initialise the model in between); sg_parallel_params/grads return
 * NULL after that where the stage frees them.
 *
 * Tensor parallelism: tp is not a data dim. A parameter Shard over tp
 * (shard_dims) has its gradient reduced over the data dims only, its norm
 * summed over tp (each element once), each tp rank writes its box to the
 * checkpoint; a parameter replicated over tp must get the same gradient on
 * every tp rank (the model's conjugate ops, sg_ag_tp_copy/reduce, see to
 * it), is not summed over tp, is counted once in the norm and is checked
 * identical over tp by the replica check. ZeRO composes (the pieces are
 * cut within each tp rank's box).
 *
 * Not yet: the pp/sp/ep roles with size > 1 are refused with
 * SG_ERR_NOT_SUPPORTED naming what is missing.
 */
#ifndef SG_PARALLEL_H
#define SG_PARALLEL_H

#include <stdint.h>

#include "sg_autograd.h"
#include "sg_ckpt.h"
#include "sg_mesh.h"
#include "sg_optim.h"
#include "sg_param.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sg_dim_role {
  SG_DIM_ROLE_DATA = 0, /* "dp": replicate-data */
  SG_DIM_ROLE_FSDP,     /* "fsdp": shard-data (ZeRO) */
  SG_DIM_ROLE_DOMAIN,   /* "h", "w", "d": the spatial grid */
  SG_DIM_ROLE_TENSOR,   /* "tp" */
  SG_DIM_ROLE_PIPELINE, /* "pp" */
  SG_DIM_ROLE_SEQUENCE, /* "sp", "cp" */
  SG_DIM_ROLE_EXPERT,   /* "ep" */
  SG_DIM_ROLE_COUNT
} sg_dim_role;

/* The role of a mesh dim by its name; SG_ERR_MESH naming the known names
 * for any other. Not collective. */
sg_status sg_dim_role_of(const char *dim_name, sg_dim_role *role);
/* "data", "fsdp", "domain", "tensor", "pipeline", "sequence", "expert". */
const char *sg_dim_role_name(sg_dim_role role);

typedef struct sg_parallel_config {
  int zero;              /* 0: DDP; 1: optimizer state sharded; 2: + gradients;
                            3: + parameters (FSDP) */
  int shard_over_domain; /* ZeRO also shards over the domain dims */
  int deterministic;     /* fixed-order reductions: same bits every run */
  int64_t bucket_bytes;  /* DDP bucket size (0: 25 MiB, like PyTorch) */
  /* Mixed precision. param_dtype SG_DTYPE_BF16: the model computes with
   * the parameters rounded to bf16 and stores bf16 activations and
   * activation gradients; parameter gradients are rounded to bf16 when
   * ready, then reduced in reduce_dtype (f32: the only one supported);
   * the optimizer keeps fp32 master weights and fp32 moments (checkpoints
   * hold them). Buffers stay f32 (holding bf16 values) until the bf16
   * kernels exist. SG_DTYPE_F32 (the default, 0): plain fp32. */
  sg_dtype param_dtype;
  sg_dtype reduce_dtype;
  sg_adamw_config adamw;
} sg_parallel_config;

sg_parallel_config sg_parallel_defaults(void);

/* What a driver needs before the model exists: the dims where the batch is
 * split (dp, fsdp), the domain dims, the number of data replicas (the
 * product of the batch dims' sizes) and this rank's index among them (the
 * batch dims nested in mesh order, as the box rule nests Shard(0)). */
typedef struct sg_parallel_mesh_info {
  unsigned batch_dims, domain_dims;
  int data_size, data_index;
} sg_parallel_mesh_info;

/* The checks of sg_parallel_create that need only the mesh and the config
 * (every dim has a role this plan supports, the ZeRO stage), so a driver
 * reports a bad mesh before it loads data. info may be NULL. Collective
 * over the mesh (every rank gets the same status). */
sg_status sg_parallel_check_mesh(sg_mesh_t mesh, const sg_parallel_config *cfg,
                                 sg_parallel_mesh_info *info);

typedef struct sg_parallel *sg_parallel_t;

/* A plan for a model whose parameters are described by table[0..nparams)
 * (offsets into a flat buffer of nlocal floats on this rank). Checks that
 * every mesh dim has a role this plan supports and that every rank has the
 * same parameter table (names, global shapes, layouts); every rank gets the
 * same status. Allocates the flat buffers (zero-filled) and the optimizer
 * state. The table's names are copied. Collective over the mesh. */
sg_status sg_parallel_create(sg_mesh_t mesh, const sg_parallel_config *cfg,
                             int nparams, const sg_param_info *table,
                             int64_t nlocal, sg_parallel_t *plan);
/* Waits for reductions in flight; NULL and *plan == NULL are fine; sets
 * *plan to NULL. Not collective (a plan must not be destroyed while a
 * reduction is in flight on other ranks). */
sg_status sg_parallel_destroy(sg_parallel_t *plan);

/* The plan on a device (issue 22): after sg_parallel_create, the model
 * bound to the host buffers and initialised, and before
 * sg_parallel_attach, moves the parameters (copied), the gradients and the
 * AdamW moments to dev. sg_parallel_params/grads then return the device
 * buffers: bind the model to them again and sg_model_set_device it. The
 * gradients stay on the device: the DDP buckets are reduced on the device
 * buffers through the comm layer (NCCL on a GPU: sg_mesh_enable_nccl
 * first; MPI where the buffers are host memory, the tests' faked device),
 * in deterministic mode by the host's fixed-order sum on the device
 * buffers (the same blocks and rank-order adds: the host plan's bits);
 * sg_parallel_reduce sums the norm's squares there (only the norm comes
 * back, summed over the ranks as on the host) and sg_parallel_step runs
 * AdamW there; checkpoint arrays and the replica check's checksums use
 * host copies (sg_parallel_ckpt_arrays copies the state to the host when
 * writing; sg_parallel_ckpt_loaded copies a read back), so the file format
 * is the host's. ZeRO on a device sums whole gradients (the host's
 * overlapped in-place reduce-scatters are host code): zero 1 by DDP's
 * buckets, zero 2 each gradient when it is ready (its full buffer on the
 * device until then, the rows added to the device piece), deterministic
 * or not; then the pieces' AdamW and the all-gather of the parameters on
 * the device buffers. Any mesh of this plan's roles with zero 0-2 and
 * f32: zero 3 and the bf16 policy are SG_ERR_NOT_SUPPORTED naming what,
 * and so are
 * device buffers the mesh's groups can move neither through NCCL nor a
 * CUDA-aware MPI, on every rank alike (before any device call but the
 * allocation). dev: host is a no-op. Collective over the mesh. */
sg_status sg_parallel_to_device(sg_parallel_t plan, sg_device dev);
/* The plan's device (host unless sg_parallel_to_device). */
sg_device sg_parallel_device(sg_parallel_t plan);

/* This rank's flat buffers (nlocal floats each); grads must be zero before
 * the first backward of a step (sg_parallel_step zeroes them). */
float *sg_parallel_params(sg_parallel_t plan);
float *sg_parallel_grads(sg_parallel_t plan);
int64_t sg_parallel_local_count(sg_parallel_t plan);
/* Floats of optimizer state per moment on this rank (the ZeRO pieces). */
int64_t sg_parallel_state_count(sg_parallel_t plan);
/* Mesh dims where the data is split (dp, fsdp, domain): the dims a loss
 * is summed over. */
unsigned sg_parallel_data_dims(sg_parallel_t plan);
/* Number of data-parallel replicas: the product of the dp and fsdp sizes
 * (the global batch is split over them), and this rank's index among them. */
int sg_parallel_data_size(sg_parallel_t plan);
int sg_parallel_data_index(sg_parallel_t plan);
/* The mesh dim with a role, -1 if none (the first such dim). */
int sg_parallel_dim_of(sg_parallel_t plan, sg_dim_role role);
/* "zero 1 over fsdp,h; dp 2 fsdp 2 h 2; 3 layouts" into buf. */
void sg_parallel_describe(sg_parallel_t plan, char *buf, size_t size);

/* Install the plan's hooks on the tape and make the tape agree on hook
 * failures over the mesh. vars[i] is the variable of table entry i, bound
 * to the plan's buffers (sg_model_params gives them in table order). From
 * here on, for zero >= 2 the variables' gradients and for zero = 3 their
 * values are NULL between uses (the hooks gather and free them). Once per
 * plan. Not collective. */
sg_status sg_parallel_attach(sg_parallel_t plan, sg_tape_t tape,
                             sg_var *const *vars);
/* The hooks on a further tape, after sg_parallel_attach: a pipeline
 * stage records each (micro-batch, chunk) on its own tape, and every one
 * of them needs the ZeRO-2/3 gathers and reduce-scatters and the bf16
 * rounding (a parameter is ready, hence reduced, when no tape in flight
 * still has to use it: the tape counts uses over all tapes). For zero 0 and 1 a further tape's backwards only
 * accumulate (the reductions start from the first tape's, which must be
 * the step's last backward). Backwards follow begin_micro as on one tape,
 * one at a time. Not collective. */
sg_status sg_parallel_attach_tape(sg_parallel_t plan, sg_tape_t tape);

/* Before the forward of micro-batch k of n (0 <= k < n): gradients
 * accumulate over the micro-batches, and only the backward of the last one
 * (k == n - 1) starts the reductions (no_sync before it). Not collective. */
sg_status sg_parallel_begin_micro(sg_parallel_t plan, int k, int n);

/* After the last backward: complete the gradient reductions (every
 * gradient this rank updates is then the global sum) and return the global
 * gradient norm (every element counted once, over every mesh dim).
 * Collective over the mesh. */
sg_status sg_parallel_reduce(sg_parallel_t plan, double *grad_norm);

/* The optimizer step t (>= 1) with learning rate lr and the gradient
 * multiplied by grad_scale (sg_clip_scale for clipping) on this rank's
 * part, then the parameters made whole again (ZeRO all-gather) and the
 * gradients zeroed. Collective over the mesh. */
sg_status sg_parallel_step(sg_parallel_t plan, int64_t t, double lr,
                           double grad_scale);

/* zero = 3: the most floats of gathered parameter values this rank held at
 * once since the previous call (the parameters of the op in use plus the
 * one prefetched); 0 for the other stages. Not collective. */
int64_t sg_parallel_gathered_peak(sg_parallel_t plan);

/* The whole local box of parameter i into out (numel floats): a copy, or
 * for zero = 3 an all-gather of the pieces. Collective over the mesh when
 * zero = 3 (every rank calls it for the same i). */
sg_status sg_parallel_gather_param(sg_parallel_t plan, int i, float *out);

/* Check that the ranks that must hold identical copies of each parameter
 * (every mesh dim it is not Shard over) do, by checksums. A divergence is
 * SG_ERR_INTERNAL naming the parameter and the step. Collective. */
sg_status sg_parallel_check_replicas(sg_parallel_t plan, int64_t step);

/* The checkpoint arrays: "params.<name>", "adam_m.<name>",
 * "adam_v.<name>" per parameter, each a global variable of the parameter's
 * global shape with this rank's box; for writing (writing = 1) one rank of
 * each group of identical copies writes, the others pass count 0. The
 * array and name storage belong to the plan until the next call or
 * destroy. Collective over the mesh (groups). */
sg_status sg_parallel_ckpt_arrays(sg_parallel_t plan, int writing,
                                  sg_ckpt_array **arrays, int *n);
/* After a checkpoint read into the arrays (writing = 0): a device plan
 * copies them to its device buffers; a host plan has nothing to do. Not
 * collective. */
sg_status sg_parallel_ckpt_loaded(sg_parallel_t plan);

#ifdef __cplusplus
}
#endif
#endif /* SG_PARALLEL_H */
