/* shardgrid — a U-Net for fields on a 2-D grid, domain- and data-parallel.
 *
 * With L levels and width w (level l has w * 2^l channels):
 *   block(c_in -> c):  [conv k x k -> GroupNorm -> act] x 2
 *   encoder:  e_0 = block(x (+ grid)),  e_l = block(avgpool2(e_{l-1}))
 *   decoder:  d_{L-1} = e_{L-1};
 *             d_l = block(concat(upsample2(d_{l+1}), e_l))  (bilinear,
 *             align_corners=False)
 *   out:      1 x 1 conv (channel-wise linear) w -> cout
 *
 * The grid must be divisible by 2^(L-1) in both dims. Convolutions pad with
 * the boundary of each spatial dim (periodic for the Navier-Stokes box and
 * for longitude); the up-sampling clamps at the edge (PyTorch's
 * interpolate). Activations are (batch, channels, ny, nx) blocks split over
 * the mesh dims "h" (y) and "w" (x), samples over "dp"; the model marks its
 * input with that sharding, so every op exchanges its halos and GroupNorm
 * reduces over the domain: the same function as on one process.
 *
 * Parameters: one flat f32 buffer (sg_model_bind) in the order encoder
 * blocks 0..L-1, decoder blocks L-2..0 (each conv1 w, b, norm1 gamma, beta,
 * conv2 w, b, norm2 gamma, beta), out w, b. Replicate; gradients Partial
 * over the mesh dims where the data is split (reduced by the caller).
 * Initialisation as sg_cnn: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for
 * weights and biases, gamma 1, beta 0, from the counter-based RNG by
 * (seed, parameter index, element).
 */
#ifndef SG_UNET_H
#define SG_UNET_H

#include <stdint.h>

#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_unet_config {
  int64_t cin, cout;  /* data channels in and out */
  int64_t width;      /* channels at full resolution (32) */
  int64_t levels;     /* resolutions, 1..6 (3) */
  int64_t kernel;     /* odd kernel size (3) */
  int64_t groups;     /* GroupNorm groups (4), divides width */
  int add_grid;       /* append (x, y) in [0,1) as two input channels */
  sg_act act;         /* SG_ACT_GELU */
  sg_pad_mode pad[2]; /* boundary of y and of x (periodic) */
  int act_ckpt_every; /* activation checkpointing (sg_ag_checkpoint) of the
                         levels' blocks (encoder 0..L-1 with its pooling,
                         then decoder L-2..0 with its up-sampling and
                         concat): 0 none (default), K >= 1 every K-th */
} sg_unet_config;

sg_unet_config sg_unet_defaults(void);

typedef struct sg_unet *sg_unet_t;

/* A model for a global grid ny x nx and `batch` local samples per step on
 * this rank's part of the mesh (dims dp, h, w). Not collective. */
sg_status sg_unet_create(sg_mesh_t mesh, const sg_unet_config *cfg, int64_t ny,
                         int64_t nx, int64_t batch, sg_unet_t *model);
/* NULL and *model == NULL are fine (SG_OK); sets *model to NULL. */
sg_status sg_unet_destroy(sg_unet_t *model);

/* y = model(x). x: (batch, cin, ny, nx), this rank's block (marked with the
 * model's sharding); y: (batch, cout, ny, nx) on the tape. Collective over
 * the mesh when the grid is split. */
sg_status sg_unet_forward(sg_unet_t model, sg_tape_t tape, sg_var *x,
                          sg_var **y);

/* Pipeline pieces (docs/pipeline.md): the U-Net as sg_unet_nblocks =
 * 2 levels pieces in sequence: 0 .. levels-1 the encoder levels, then the
 * decoder levels levels-2 .. 0, then the output layer. Piece k's
 * parameters are the table entries [*first, *first + *count)
 * (sg_unet_block_params). sg_unet_forward_blocks runs pieces first ..
 * first + count - 1 on the bundle io, in place: io->v[0] the activation,
 * io->v[1 + j] the skip of encoder level j still to be consumed. On entry
 * {x} when first == 0 (as sg_unet_forward, which runs them all); after
 * encoder level l or decoder level l the bundle holds l skips (encoder
 * level l's output is the activation itself, and becomes skip l when the
 * next encoder level runs); after the output layer {y}. A skip the pieces
 * neither make nor use is passed on as the same variable. Collective like
 * sg_unet_forward. */
int sg_unet_nblocks(sg_unet_t m);
void sg_unet_block_params(sg_unet_t m, int k, int *first, int *count);
sg_status sg_unet_forward_blocks(sg_unet_t m, sg_tape_t t, int first, int count,
                                 sg_bundle *io);

#ifdef __cplusplus
}
#endif
#endif /* SG_UNET_H */
