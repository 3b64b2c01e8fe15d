/* shardgrid — one interface over the model zoo's field-to-field models
 * (FNO-2D, ResNet-style CNN, U-Net, ViT, FNO-3D), so a training driver handles them
 * alike.
 *
 *   sg_model_config c = sg_model_defaults(SG_MODEL_CNN);
 *   c.cin = 10; c.cout = 1; c.width = 16;
 *   sg_model_t m;  sg_model_create(mesh, &c, ny, nx, local_batch, &m);
 *   sg_model_bind(m, params, grads);  sg_model_init(m, seed);
 *   sg_model_forward(m, tape, x, &y);
 *
 * Every model: one flat f32 parameter buffer (bind), deterministic
 * initialisation from the counter-based RNG (the same model on every mesh),
 * the parameter variables with their offsets and layouts (sg_param_info:
 * for DDP hooks, gradient norms, checkpoints), and this rank's box of the
 * grid (the balanced split over the mesh dims "h" and "w"; samples over
 * "dp"). Parameter gradients are Partial over every mesh dim where the
 * data is split and the parameter is not sharded: the caller reduces them
 * (DDP).
 */
#ifndef SG_MODEL_H
#define SG_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "sg_autograd.h"
#include "sg_kv.h"
#include "sg_mesh.h"
#include "sg_param.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The built-in models; a model registered with sg_model_register
 * (sg_model_impl.h) gets the next kind after SG_MODEL_COUNT - 1. */
typedef enum sg_model_kind {
  SG_MODEL_FNO = 0,
  SG_MODEL_CNN,
  SG_MODEL_UNET,
  SG_MODEL_VIT,
  SG_MODEL_FNO3D, /* the FNO over (t, y, x): cout output time steps */
  SG_MODEL_SWIN,  /* the ViT with shifted-window attention */
  SG_MODEL_COUNT
} sg_model_kind;

/* "fno", "cnn", "unet", "vit", "fno3d", "swin" or a registered model's name; "invalid" otherwise. */
const char *sg_model_kind_name(sg_model_kind kind);
/* SG_ERR_CONFIG (naming the choices) for an unknown name. Not collective. */
sg_status sg_model_kind_parse(const char *name, sg_model_kind *kind);

typedef struct sg_model_config {
  sg_model_kind kind;
  int64_t cin, cout; /* data channels in and out */
  int64_t width;     /* all: channels (FNO, CNN) / at full resolution (U-Net) */
  int64_t proj_width; /* FNO, CNN: projection hidden channels */
  int64_t modes;      /* FNO: modes kept per dim */
  int64_t modes_t;    /* FNO-3D: modes kept along time */
  int64_t pad_t;      /* FNO-3D: zero steps padding the time axis */
  int64_t layers;     /* FNO: spectral layers */
  int64_t blocks;     /* CNN: residual blocks */
  int64_t levels;     /* U-Net: resolutions */
  int64_t kernel;     /* CNN, U-Net: odd convolution kernel size */
  int64_t groups;     /* CNN, U-Net: GroupNorm groups */
  int add_grid;       /* append (x, y) coordinates as input channels */
  sg_act act;
  sg_pad_mode pad[2]; /* CNN, U-Net: boundary of y and of x */
  int shard_spectral; /* FNO: spectral weights Shard by modes over the
                          domain (1, the default) or Replicate (0) */
  int64_t patch;      /* ViT: patch size (divides the grid) */
  int64_t heads;      /* ViT: attention heads (divides width) */
  int64_t depth;      /* ViT: transformer blocks */
  int64_t window;     /* Swin: attention window (tokens per side) */
  int sp_mode;        /* ViT: sg_sp_mode, how the tokens split over the
                          domain dims are attended (ring, the default,
                          ulysses or usp) */
  int tp_sequence;    /* ViT: Megatron sequence parallelism with tp > 1
                          (LayerNorms and residuals on token slices over
                          tp; all-gather / reduce-scatter instead of the
                          all-reduces); 0 off (default) */
  /* ViT mixture of experts (docs/transformers.md, "Mixture of experts"):
   * moe_experts E > 0 replaces the MLP of every moe_every-th block (the
   * last of each moe_every) by E expert MLPs (sg_ag_moe), top moe_topk
   * (1, 2) routing, capacity factor moe_capacity (<= 0: no dropping),
   * load-balancing loss coefficient moe_aux; the experts split over the
   * mesh dim ep. 0 (the default): the dense MLP. */
  int64_t moe_experts;
  int moe_topk, moe_every;
  double moe_capacity, moe_aux;
  int act_ckpt_every; /* activation checkpointing of the blocks (FNO
                          spectral layers, CNN residual blocks, U-Net
                          levels: sg_ag_checkpoint): 0 none (default), K >= 1
                          every K-th block (1: every block); the same
                          function and gradients, less activation memory */
} sg_model_config;

/* Swin: do the blocks of an hp x wp token grid split over ph x pw ranks
 * (balanced) hold whole window x window windows, and is the window at most
 * the grid? 1 if so; else 0 and the reason in msg (the words vit.c and
 * sg_plan_check report). Not collective. */
int sg_swin_windows_fit(int64_t hp, int64_t wp, int64_t window, int ph, int pw,
                        char *msg, size_t size);

/* The defaults of a kind (the FNO paper's sizes for the FNO). */
sg_model_config sg_model_defaults(sg_model_kind kind);

/* A model's config from a key table with sg-train's model keys (model,
 * width, modes, modes_t, pad_t, layers, proj_width, blocks, levels, kernel,
 * groups, patch, heads, depth, sp_mode, tp_sequence, grid, shard_spectral,
 * activation_checkpointing, pad_y, pad_x): the kind's defaults, then every key the table holds with a
 * value (a key absent or empty keeps the default). cin and cout are the
 * data's: the caller sets them. The one reader of these keys (sg-train,
 * sg-forecast, sg-plan). SG_ERR_CONFIG for an unknown model, or naming
 * every invalid value at once ("; "-joined; *mc then holds the defaults for
 * those keys and the table's values for the others). */
sg_status sg_model_config_from_kv(sg_kv_t kv, sg_model_config *mc);

typedef struct sg_model *sg_model_t;

/* A model for a global grid ny x nx and `batch` local samples per step.
 * Collective over the mesh (the FNO plans its FFTs). */
sg_status sg_model_create(sg_mesh_t mesh, const sg_model_config *cfg,
                          int64_t ny, int64_t nx, int64_t batch,
                          sg_model_t *model);
/* A mesh dim sp (or cp) of size > 1 with a model other than the vit:
 * SG_ERR_NOT_SUPPORTED with the words sg-plan's check uses too (the same on
 * every rank). sg_model_create runs it. */
sg_status sg_model_sp_check(sg_mesh_t mesh, const char *model);
/* NULL and *model == NULL are fine (SG_OK); sets *model to NULL. */
sg_status sg_model_destroy(sg_model_t *model);

sg_model_kind sg_model_kind_of(sg_model_t model);
/* The config keys that fix the model's parameter shapes (NULL-ended), e.g.
 * for checking that a checkpoint holds this model. Not collective. */
const char *const *sg_model_size_keys(sg_model_t model);
/* Number of f32 parameters this rank holds (the flat buffer's length;
 * with sharded parameters it differs between domain ranks). */
int64_t sg_model_param_count(sg_model_t model);
/* Where parameter i (0 <= i < sg_model_params) lives: global shape, this
 * rank's box, offset, the mesh dims it is Shard over (sg_param.h). Not
 * collective. */
sg_status sg_model_param_info(sg_model_t model, int i, sg_param_info *info);
/* Point parameters and gradients at caller buffers of param_count floats.
 * Not collective. */
sg_status sg_model_bind(sg_model_t model, float *params, float *grads);
/* Deterministic initialisation of the bound parameters. Not collective. */
sg_status sg_model_init(sg_model_t model, uint64_t seed);
/* The parameter variables in model order. */
int sg_model_params(sg_model_t model, sg_var ***vars);
/* Offset of a parameter in the flat buffer (-1 if not this model's). */
int64_t sg_model_param_offset(sg_model_t model, const sg_var *param);
/* This rank's box of the grid. */
void sg_model_box(sg_model_t model, int64_t *y0, int64_t *ny, int64_t *x0,
                  int64_t *nx);
/* A one-line description ("cnn: width 16, blocks 4, ..."). */
void sg_model_describe(sg_model_t model, char *buf, size_t size);

/* Mark a leaf v (N, C, ny, nx) of this rank — the target or mask that
 * meets the output in a loss — with the sharding of the model's outputs
 * (nothing to do for the FNO, whose outputs are plain local blocks).
 * Collective over the mesh. */
sg_status sg_model_mark(sg_model_t model, sg_var *v);

/* Run the model on dev (issue 22; one GPU per rank): after sg_model_bind to
 * parameters and gradients in dev's memory (and sg_model_init, or the
 * values copied there), marks every parameter as on dev and copies the
 * model's constants (the grid-coordinate channels) to dev (freed by
 * sg_model_destroy). The input, targets and masks of sg_model_forward are
 * the caller's, on dev too. SG_ERR_NOT_SUPPORTED, naming the model, for a
 * model not built for devices (the FNO, FNO-3D and the CNN are). A split
 * model's sharded constants move their local box; an op that does not run
 * on sharded device variables is refused by the tape by name
 * (sg_op_device_sharded_at; sg_plan_check names such a mesh up front).
 * dev: host is a no-op. Not collective. */
sg_status sg_model_set_device(sg_model_t model, sg_device dev);

/* y = model(x); x: (batch, cin, ny, nx), this rank's block. Collective over
 * the mesh when the grid is split. */
sg_status sg_model_forward(sg_model_t model, sg_tape_t tape, sg_var *x,
                           sg_var **y);

/* Pipeline pieces (docs/pipeline.md): the model as a sequence of pieces
 * that stages can split; 0 for a model without them (the FNO, the CNN and
 * the U-Net have them). Piece k's parameters are the entries [*first,
 * *first + *count) of the model's table. sg_model_forward_blocks runs
 * pieces first .. first + count - 1 on the bundle io (on entry the model
 * input {x} when first == 0, else the bundle piece first - 1 gave; on
 * return what piece first + count - 1 gives: {y} after the last piece);
 * SG_ERR_NOT_SUPPORTED for a model without pieces. Collective over the
 * mesh like sg_model_forward. */
int sg_model_nblocks(sg_model_t model);
void sg_model_block_params(sg_model_t model, int k, int *first, int *count);
sg_status sg_model_forward_blocks(sg_model_t model, sg_tape_t tape, int first,
                                  int count, sg_bundle *io);

/* Seconds spent so far in the model's own collectives that the halo timer
 * does not see (the FNO's FFT transposes; 0 for the conv nets). */
double sg_model_collective_seconds(sg_model_t model);

#ifdef __cplusplus
}
#endif
#endif /* SG_MODEL_H */
