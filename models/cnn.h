/* shardgrid — a ResNet-style CNN for fields on a 2-D grid, domain- and
 * data-parallel.
 *
 *   lift:    x (+ grid coordinates) -> width channels, conv k x k
 *   blocks:  h = h + conv(act(GroupNorm(conv(h))))   (k x k, "same" size)
 *   proj:    width -> proj_width -> act -> cout, channel-wise linears
 *
 * Every convolution pads by (k-1)/2 with the boundary of its spatial dim
 * (periodic for the Navier-Stokes box and for longitude, replicate or zero
 * for latitude). Activations are (batch, channels, ny, nx) blocks of the
 * global grid split over the mesh dims "h" (y) and "w" (x); "dp" ranks hold
 * other samples. The model marks its input with that sharding, so the
 * convolutions exchange halos and GroupNorm reduces its statistics over the
 * domain: the same function as on one process.
 *
 * Parameters live in one flat f32 buffer (sg_model_bind), in the order
 * lift w, b; per block conv1 w, b, norm gamma, beta, conv2 w, b; proj1 w, b;
 * proj2 w, b. They are Replicate; their gradients are Partial over every
 * mesh dim where the data is split and are reduced by the caller (DDP).
 * Initialisation: weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in))
 * (PyTorch's default for Conv2d/Linear), GroupNorm gamma 1, beta 0, drawn
 * from the counter-based RNG by (seed, parameter index, element), so every
 * mesh starts from the same model.
 */
#ifndef SG_CNN_H
#define SG_CNN_H

#include <stdint.h>

#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_cnn_config {
  int64_t cin, cout;  /* data channels in and out */
  int64_t width;      /* channels of the residual stream (32) */
  int64_t blocks;     /* residual blocks (4) */
  int64_t kernel;     /* odd kernel size (3) */
  int64_t groups;     /* GroupNorm groups (4), divides width */
  int64_t proj_width; /* projection hidden channels (128) */
  int add_grid;       /* append (x, y) in [0,1) as two input channels */
  sg_act act;         /* SG_ACT_GELU */
  sg_pad_mode pad[2]; /* boundary of y and of x (periodic) */
  int act_ckpt_every; /* activation checkpointing (sg_ag_checkpoint) of the
                          residual blocks: 0 none (default), K >= 1 every
                          K-th (1: all) */
} sg_cnn_config;

sg_cnn_config sg_cnn_defaults(void);

typedef struct sg_cnn *sg_cnn_t;

/* A model for a global grid ny x nx and `batch` local samples per step on
 * this rank's part of the mesh (dims dp, h, w; others must have size 1).
 * Not collective (no communication at create). */
sg_status sg_cnn_create(sg_mesh_t mesh, const sg_cnn_config *cfg, int64_t ny,
                        int64_t nx, int64_t batch, sg_cnn_t *model);
/* NULL and *model == NULL are fine (SG_OK); sets *model to NULL. */
sg_status sg_cnn_destroy(sg_cnn_t *model);

/* y = model(x). x: (batch, cin, ny, nx), this rank's block; it is marked
 * with the model's sharding. y: (batch, cout, ny, nx), on the tape.
 * Collective over the mesh when the grid is split (halos, statistics). */
/* Pipeline pieces (docs/pipeline.md): the CNN as sg_cnn_nblocks = blocks + 2
 * pieces in sequence: 0 the lift (from the model input, grid channels
 * included), 1..blocks the residual blocks, blocks + 1 the projection.
 * sg_cnn_block_params: piece k's parameters are the table entries
 * [*first, *first + *count). sg_cnn_forward_blocks runs pieces
 * first .. first + count - 1 on x: the model input when first == 0 (as
 * sg_cnn_forward, which runs them all), else the output of piece
 * first - 1. Collective like sg_cnn_forward. */
int sg_cnn_nblocks(sg_cnn_t m);
void sg_cnn_block_params(sg_cnn_t m, int k, int *first, int *count);
sg_status sg_cnn_forward_blocks(sg_cnn_t m, sg_tape_t t, int first, int count,
                                sg_var *x, sg_var **y);
sg_status sg_cnn_forward(sg_cnn_t model, sg_tape_t tape, sg_var *x, sg_var **y);

#ifdef __cplusplus
}
#endif
#endif /* SG_CNN_H */
