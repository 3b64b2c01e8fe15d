/* shardgrid — the model interface table, for model authors (ggml-backend
 * style: the public handle sg_model_t in sg_model.h dispatches through this
 * table).
 *
 * A model is one file that defines a `const sg_model_i` and one
 * registration: the built-in models (FNO, CNN, U-Net, ViT) are listed in
 * model.c; a user's model calls sg_model_register once before
 * sg_model_kind_parse / sg_model_create, and is then selectable by name
 * (sg-train's --model) like the built-ins. Nothing else changes: the
 * parallel plan, checkpoints and the drivers see the model through its
 * parameter table (sg_param_info) and these functions.
 *
 * Every function receives the model's own state (`impl`, made by create).
 */
#ifndef SG_MODEL_IMPL_H
#define SG_MODEL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "sg_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_model_i {
  const char *name; /* "fno", "cnn", ...: a valid config value, unique */
  /* The config keys whose values fix the parameters' shapes (NULL-ended):
   * a checkpoint written with other values is refused, naming the key. */
  const char *const *size_keys;
  /* Fill the model's fields of c with its defaults (kind, cin, cout and
   * the fields other models use are set by the caller). */
  void (*defaults)(sg_model_config *c);
  /* Collective over the mesh (a model may plan FFTs or check its split). */
  sg_status (*create)(sg_mesh_t mesh, const sg_model_config *c, int64_t ny,
                      int64_t nx, int64_t batch, void **impl);
  void (*destroy)(void *impl);
  int64_t (*param_count)(void *impl);
  sg_status (*param_info)(void *impl, int i, sg_param_info *info);
  sg_status (*bind)(void *impl, float *params, float *grads);
  sg_status (*init)(void *impl, uint64_t seed);
  int (*params)(void *impl, sg_var ***vars);
  void (*box)(void *impl, int64_t *y0, int64_t *ny, int64_t *x0, int64_t *nx);
  void (*describe)(void *impl, const sg_model_config *c, char *buf,
                   size_t size);
  /* Mark a target/mask leaf with the outputs' sharding (NULL: nothing). */
  sg_status (*mark)(void *impl, sg_var *v);
  sg_status (*forward)(void *impl, sg_tape_t tape, sg_var *x, sg_var **y);
  /* Seconds in the model's own collectives (NULL: 0). */
  double (*collective_seconds)(void *impl);
  /* Pipeline parallelism (docs/pipeline.md; all NULL: the model is not
   * cut into stages): the model as a sequence of nblocks pieces; piece k's
   * parameters are the table entries [*first, *first + *count); forward of
   * pieces first .. first + count - 1 on the bundle io, in place: on entry
   * {x} (first == 0) or what piece first - 1 gave, on return what piece
   * first + count - 1 gives ({y} after the last). A tensor the pieces
   * neither make nor use (a skip crossing them) is passed on as the same
   * variable: the pipeline routes its gradient back. */
  int (*nblocks)(void *impl);
  void (*block_params)(void *impl, int k, int *first, int *count);
  sg_status (*forward_blocks)(void *impl, sg_tape_t tape, int first, int count,
                              sg_bundle *io);
  /* The model's constant leaves (the grid-coordinate channels): up to max
   * of them into out, their number returned (NULL: the model has none).
   * sg_model_set_device moves them with the parameters. */
  int (*constants)(void *impl, sg_var **out, int max);
  /* The model runs on a device (sg_model_set_device): 0 (NULL) refuses it
   * by name. */
  int device_ok;
} sg_model_i;

/* Register a model (the table must outlive its use; at most 16 models in
 * all). SG_ERR_INVALID_ARG for a missing function or a name already taken.
 * Call it alike on every rank, before the model is parsed or created.
 * Not collective. */
sg_status sg_model_register(const sg_model_i *iface);

/* For a model whose pieces pass one tensor (the CNN, the FNO): SG_OK when
 * io holds exactly one variable, else SG_ERR_INVALID_ARG naming the model. */
sg_status sg_model_bundle_one(const sg_bundle *io, const char *model);

/* The built-in models' tables (fno.c, cnn.c, unet.c, vit.c: vit, swin). */
extern const sg_model_i sg_fno_model_i;
extern const sg_model_i sg_fno3d_model_i;
extern const sg_model_i sg_cnn_model_i;
extern const sg_model_i sg_unet_model_i;
extern const sg_model_i sg_vit_model_i;
extern const sg_model_i sg_swin_model_i;

#ifdef __cplusplus
}
#endif
#endif /* SG_MODEL_IMPL_H */
