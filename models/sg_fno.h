/* shardgrid — FNO-2D (Li et al. 2021), domain- and data-parallel.
 *
 *   lift:  x (+ grid coordinates) -> width channels, a channel-wise linear
 *   L layers:  h = act( K_l(h) + W_l h + b_l ),  K_l the spectral
 *          convolution keeping modes1 x modes2 modes (no act after the last)
 *   proj:  width -> proj_width -> act -> cout, channel-wise linears
 *
 * Activations are (batch, channels, ny, nx) blocks of a grid split over the
 * mesh dims "h" (y) and "w" (x); data-parallel ranks ("dp") hold other
 * samples. Every layer but K_l is pointwise in space, so it needs no halo;
 * K_l runs on the distributed FFT. Parameters live in one flat f32 buffer
 * (sg_fno_bind): the channel-wise linears are Replicate, their gradients
 * Partial over every mesh dim where the data is split; the spectral
 * weights (width, width, K0, K1, re/im) are, by default (shard_spectral),
 * Shard over the domain dims by the modes each rank's spectrum holds
 * (sg_spectral.h, SHARD_MODES), their gradients Partial over the
 * data-parallel dims only. sg_fno_param_info says which is which; the
 * caller reduces the gradients (DDP). The buffer holds the Replicate
 * parameters first, then the spectral weights.
 * Initialisation follows the paper's code: spectral weights
 * U[0,1) / (cin cout) for real and imaginary parts, linears
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)), drawn from the counter-based RNG by
 * (seed, parameter index, element), so every mesh starts from the same
 * model.
 */
#ifndef SG_FNO_H
#define SG_FNO_H

#include <stdint.h>

#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_param.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_fno_config {
  int64_t cin, cout;      /* data channels in and out */
  int64_t width;          /* 32 in the paper */
  int64_t modes1, modes2; /* 12, 12 in the paper */
  int64_t layers;         /* 4 */
  int64_t proj_width;     /* 128 */
  int add_grid;           /* append (x, y) in [0,1) as two input channels */
  sg_act act;             /* SG_ACT_GELU */
  int shard_spectral;     /* 1 (default): spectral weights Shard by modes;
                            0: Replicate on every rank */
  int act_ckpt_every;     /* activation checkpointing (sg_ag_checkpoint) of
                            the spectral layers: 0 none (default), K >= 1
                            every K-th (1: all) */
  /* FNO-3D (nt > 0): the space-time convolution over (t, y, x), see below */
  int64_t nt;      /* output time steps (0: the 2-D FNO) */
  int64_t modes_t; /* modes kept along time (2*modes_t frequencies) */
  int64_t pad_t;   /* zero steps appended to the time axis (6 in the paper) */
} sg_fno_config;

/* FNO-3D (Li et al. 2021, the space-time variant; cfg.nt > 0, cout 1):
 * the input x (batch, cin, ny, nx) (cin: the first time steps) is repeated
 * along a time axis of nt steps, the coordinates (x, y, t) in [0,1) are
 * appended (add_grid), the lift maps to width channels, the time axis is
 * zero-padded by pad_t steps (against the FFT's periodic wrap-around, as
 * the paper does), the layers' spectral convolutions run over (t, y, x)
 * keeping 2*modes_t x 2*modes1 x modes2 modes (the halved dim is x, where
 * the paper halves t: the same box of frequencies up to its boundary
 * planes, as the spectrum of a real field is Hermitian), then the padding
 * is cropped and the projection gives y (batch, nt, ny, nx): all nt steps
 * at once. Activations are (batch, width, nt + pad_t, ny, nx) blocks, the
 * time axis whole on every rank; the FFT splits y over h and x over w, as
 * in 2-D. The spectral weights are (width, width, 2 modes_t, 2 modes1,
 * 2 modes2) (re/im folded into the last dim). No tensor parallelism and
 * no pipeline pieces yet. */
sg_fno_config sg_fno_defaults(void);

typedef struct sg_fno *sg_fno_t;

/* A model for global grids ny x nx and `batch` local samples per step.
 * Collective over the mesh (FFT plans). */
sg_status sg_fno_create(sg_mesh_t mesh, const sg_fno_config *cfg, int64_t ny,
                        int64_t nx, int64_t batch, sg_fno_t *model);
sg_status sg_fno_destroy(sg_fno_t *model);

/* Number of f32 parameters this rank holds (its share of the sharded
 * spectral weights included). */
int64_t sg_fno_param_count(sg_fno_t model);
/* Where parameter i (0 <= i < sg_fno_params) lives. Not collective. */
sg_status sg_fno_param_info(sg_fno_t model, int i, sg_param_info *info);
/* Point the parameters and their gradients at flat buffers of
 * sg_fno_param_count floats (owned by the caller). */
sg_status sg_fno_bind(sg_fno_t model, float *params, float *grads);
/* Deterministic initialisation of the bound parameters. */
sg_status sg_fno_init(sg_fno_t model, uint64_t seed);
/* The parameter variables (for hooks), in model order (lift, layers,
 * projection; sg_fno_param_offset gives their place in the buffer). */
int sg_fno_params(sg_fno_t model, sg_var ***vars);
/* Offset of a parameter variable in the flat buffer (-1 if not ours). */
int64_t sg_fno_param_offset(sg_fno_t model, const sg_var *param);

/* This rank's box of the grid: y0, ny, x0, nx. */
void sg_fno_box(sg_fno_t model, int64_t *y0, int64_t *ny, int64_t *x0,
                int64_t *nx);

/* y = model(x). x: (batch, cin, ny, nx) local block. Collective. */
sg_status sg_fno_forward(sg_fno_t model, sg_tape_t tape, sg_var *x, sg_var **y);

/* Pipeline pieces (docs/pipeline.md): the FNO as sg_fno_nblocks = layers + 2
 * pieces in sequence: 0 the lift (grid channels included), 1..layers the
 * spectral layers, layers + 1 the projection. sg_fno_block_params: piece
 * k's parameters are the table entries [*first, *first + *count) (a
 * layer's spectral weights, Shard over the domain when shard_spectral,
 * among them). sg_fno_forward_blocks runs pieces first .. first + count - 1
 * on x: the model input when first == 0 (as sg_fno_forward, which runs
 * them all), else the output of piece first - 1 (width channels, this
 * rank's block). Collective like sg_fno_forward. */
int sg_fno_nblocks(sg_fno_t m);
void sg_fno_block_params(sg_fno_t m, int k, int *first, int *count);
sg_status sg_fno_forward_blocks(sg_fno_t m, sg_tape_t t, int first, int count,
                                sg_var *x, sg_var **y);

/* Seconds in FFTs and in transposes (all spectral layers). */
void sg_fno_fft_times(sg_fno_t model, double *fft_s, double *transpose_s);

#ifdef __cplusplus
}
#endif
#endif /* SG_FNO_H */
