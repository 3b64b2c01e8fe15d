/* shardgrid — internal pieces shared by the convolutional models (CNN,
 * U-Net): the flat parameter table and the domain a model runs on (the
 * FNO uses the grid-coordinate channels too).
 *
 * Parameter table: parameters are appended with their shape and their
 * initialisation; their offsets in one flat f32 buffer follow the order of
 * appending. Initialisation draws from the counter-based RNG keyed by
 * (seed, stream + parameter index, element), so every mesh starts from the
 * same model.
 *
 * Domain: the balanced split of the global grid (ny, nx) over the mesh dims
 * "h" (y) and "w" (x), the local batch of the "dp" rank, the placements of
 * an activation (batch Shard(0) on dp, Shard(2) on h, Shard(3) on w,
 * Replicate elsewhere) and the grid-coordinate channels of the local box.
 */
#ifndef SG_CONVNET_IMPL_H
#define SG_CONVNET_IMPL_H

#include <stdint.h>

#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_param.h"
#include "sg_shardtensor.h"
#include "sg_status.h"

enum { SG_CN_MAX_PARAMS = 160, SG_CN_MAX_MESH_DIMS = 8 };

typedef enum sg_cn_init {
  SG_CN_INIT_UNIFORM =
      0, /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's default) */
  SG_CN_INIT_ONE,
  SG_CN_INIT_ZERO
} sg_cn_init;

typedef struct sg_cn_params {
  int n;
  uint64_t stream; /* RNG stream of parameter 0 */
  sg_var vars[SG_CN_MAX_PARAMS];
  sg_var *ptrs[SG_CN_MAX_PARAMS];
  int ndim[SG_CN_MAX_PARAMS];
  int64_t shape[SG_CN_MAX_PARAMS][4];
  int64_t offset[SG_CN_MAX_PARAMS], count[SG_CN_MAX_PARAMS];
  int64_t fan_in[SG_CN_MAX_PARAMS];
  sg_cn_init init[SG_CN_MAX_PARAMS];
  char name[SG_CN_MAX_PARAMS][32];
  /* each parameter's global shape and this rank's start (the local
   * variable is the box shape[] from start[]: the whole array unless it is
   * split over tp), the mesh dims it is Shard over (0: replicated) */
  int64_t global[SG_CN_MAX_PARAMS][4], start[SG_CN_MAX_PARAMS][4];
  unsigned shard[SG_CN_MAX_PARAMS];
  int64_t total;
  int bound;
} sg_cn_params;

/* A layer's channel slice over tp (Megatron pairing, docs/strategies.md):
 * a parameter's dim `dim` holds [c0, c0 + cl) of its global extent here,
 * Shard over the mesh dims `mask`. dim 0: output channels (a column-
 * parallel conv, its bias, a GroupNorm's gamma/beta), dim 1: input
 * channels (a row-parallel conv's weight; its bias is whole). A NULL slice
 * or dim < 0: the whole array, replicated over tp. */
typedef struct sg_cn_slice {
  int dim;
  int64_t c0, cl;
  unsigned mask;
} sg_cn_slice;

/* Append a parameter of ndim (1..4) dims; returns its index or -1 when the
 * table is full. */
int sg_cn_params_add(sg_cn_params *p, const char *name, int ndim,
                     const int64_t *shape, sg_cn_init init, int64_t fan_in);
/* The same for this rank's slice s (NULL: whole) of a global array of
 * shape global; the initialisation draws by global index (every split
 * starts alike); fan_in is the global one. */
int sg_cn_params_add_slice(sg_cn_params *p, const char *name, int ndim,
                           const int64_t *global, const sg_cn_slice *s,
                           sg_cn_init init, int64_t fan_in);
/* Convolution weight (cout, cin, k, k) and bias (cout); channel-wise linear
 * weight (cout, cin) and bias (cout); GroupNorm gamma (c) = 1, beta (c) = 0.
 * Each returns the index of its first parameter, -1 when the table is full.
 * s: this rank's channel slice over tp (NULL: whole): of the weight, and
 * of the bias when it splits the output channels (dim 0). */
int sg_cn_add_conv(sg_cn_params *p, const char *name, int64_t cout, int64_t cin,
                   int64_t k, const sg_cn_slice *s);
int sg_cn_add_linear(sg_cn_params *p, const char *name, int64_t cout,
                     int64_t cin);
int sg_cn_add_norm(sg_cn_params *p, const char *name, int64_t c,
                   const sg_cn_slice *s);
sg_status sg_cn_params_bind(sg_cn_params *p, float *params, float *grads);
sg_status sg_cn_params_init(sg_cn_params *p, uint64_t seed);
int64_t sg_cn_params_offset(const sg_cn_params *p, const sg_var *v);
void sg_cn_params_release(sg_cn_params *p);

typedef struct sg_cn_domain {
  sg_mesh_t mesh;
  int64_t ny_g, nx_g;     /* global grid */
  int64_t y0, ny, x0, nx; /* this rank's box */
  int64_t batch, gbatch;  /* local and global samples */
  int split;              /* the grid is split over h or w */
  int nmesh;
  sg_placement place[SG_CN_MAX_MESH_DIMS]; /* placements of an activation */
  int add_grid;
  /* tensor parallelism: the tp group (NULL: tp = 1), its size, this
   * rank's index, the mesh dim's bit (0: no tp dim) */
  sg_group_t tp;
  int tps, tpr;
  unsigned tp_mask;
  sg_var grid; /* (batch, 2, ny, nx) coordinates x/nx, y/ny; constant */
  float *grid_data;
} sg_cn_domain;

/* The grid-coordinate input channels of this rank's box (y0, ny, x0, nx) of
 * a global ny_g x nx_g grid: *data = (batch, 2, ny, nx) floats x/nx_g then
 * y/ny_g, wrapped in the constant variable grid (the FNO's as well: one
 * convention for every model). On error *data may be set: the caller frees
 * it. Not collective. */
sg_status sg_cn_grid_init(sg_var *grid, float **data, int64_t batch, int64_t y0,
                          int64_t ny, int64_t x0, int64_t nx, int64_t ny_g,
                          int64_t nx_g, const char *who);
/* The box of this rank, the placements and the tp group: a "tp" mesh dim
 * (any size) replicates the activations (the model splits its layers over
 * it). Not collective. */
sg_status sg_cn_domain_init_tp(sg_cn_domain *d, sg_mesh_t mesh, int64_t ny,
                               int64_t nx, int64_t batch, int add_grid,
                               const char *who);
/* The tp size of the mesh (1 without a tp dim). */
int sg_cn_mesh_tp(sg_mesh_t mesh);
/* The mesh's tp dim: its size *tps (1 without one), this rank's index
 * *tpr, its bit *mask (0 without one) and, when tps > 1, a new group *tp
 * over it (the caller's to destroy; NULL otherwise). Collective over the
 * mesh when it makes the group. */
sg_status sg_cn_tp_group(sg_mesh_t mesh, sg_group_t *tp, int *tps, int *tpr,
                         unsigned *mask);
/* SG_ERR_CONFIG "<who>: groups (G) must be >= tp (P) ..." unless every tp
 * rank gets a whole GroupNorm group (the conv nets split their blocks'
 * channels by groups). Not collective (every rank finds the same). */
sg_status sg_cn_check_tp_groups(sg_mesh_t mesh, int64_t groups,
                                const char *who);
/* This rank's slice of c channels in `groups` GroupNorm groups over tp,
 * as dim `dim` of a parameter: whole groups, balanced (groups 5 on tp 2:
 * 3+2 groups), *gl the local groups. Without tp > 1 the whole (dim -1). */
sg_cn_slice sg_cn_tp_slice(const sg_cn_domain *d, int64_t c, int64_t groups,
                           int dim, int64_t *gl);
void sg_cn_domain_release(sg_cn_domain *d);
/* Check the input block x: (batch, cin, ny, nx) of this rank. */
sg_status sg_cn_domain_check_input(const sg_cn_domain *d, const sg_var *x,
                                   int64_t cin, const char *who);
/* Mark a leaf variable (an input block of this rank) with the activation
 * sharding, so the ops exchange halos and reduce statistics over the mesh.
 * Not collective. */
sg_status sg_cn_domain_mark(const sg_cn_domain *d, sg_var *x, int64_t channels);
/* x, plus the grid channels when the model adds them (concat). */
sg_status sg_cn_domain_input(sg_cn_domain *d, sg_tape_t t, sg_var *x,
                             sg_var **h);

/* What every convolutional model is made of; sg_model.h reaches the
 * parameters and the domain of a CNN or U-Net through it. */
typedef struct sg_cn_base {
  sg_cn_domain dom;
  sg_cn_params p;
} sg_cn_base;
/* Release the parameter variables and the domain's grid (the struct's
 * memory is the caller's). */
void sg_cn_base_release(sg_cn_base *b);
/* SG_ERR_CONFIG "<who>: ..." unless kernel is odd and groups divides width
 * (every conv model's k x k "same" convolutions and GroupNorm). */
sg_status sg_cn_check_kernel_groups(const char *who, int64_t kernel,
                                    int64_t groups, int64_t width);
/* Check v (N, C, ny, nx) against this rank's box and mark it with the
 * activation sharding (a target or a mask that meets the output in a
 * loss). Collective over the mesh when the grid is split. */
sg_status sg_cn_base_mark(sg_cn_base *b, sg_var *v, const char *who);

/* The model-table functions (sg_model_impl.h) every convolutional model
 * shares: impl is the model's handle, whose struct starts with its
 * sg_cn_base. */
int64_t sg_cn_i_param_count(void *impl);
sg_status sg_cn_i_param_info(void *impl, int i, sg_param_info *pi);
sg_status sg_cn_i_bind(void *impl, float *params, float *grads);
sg_status sg_cn_i_init(void *impl, uint64_t seed);
int sg_cn_i_params(void *impl, sg_var ***vars);
void sg_cn_i_box(void *impl, int64_t *y0, int64_t *ny, int64_t *x0,
                 int64_t *nx);
sg_status sg_cn_i_mark(void *impl, sg_var *v);
/* The grid channels when the model adds them (sg_model_i.constants). */
int sg_cn_i_constants(void *impl, sg_var **out, int max);
/* Append to a describe line ending in "<n> parameters", under tp > 1:
 * " on this rank of <global>; tensor parallel over tp=P (...)". */
void sg_cn_describe_tp(void *impl, char *buf, size_t size);

/* conv k x k ("same" size, padding (k-1)/2 with the model's boundaries). */
sg_status sg_cn_conv_same(sg_tape_t t, sg_var *x, sg_var *w, sg_var *b,
                          const sg_pad_mode *mode, sg_var **y);
/* The same split over the tp group tp (NULL or size 1: sg_cn_conv_same):
 * row 0 column-parallel (x replicated, w and b this rank's output
 * channels), row 1 row-parallel (x this rank's channels, w its input
 * channels, the partial sums reduced over tp, b once after). */
sg_status sg_cn_conv_same_tp(sg_tape_t t, sg_group_t tp, int row, sg_var *x,
                             sg_var *w, sg_var *b, const sg_pad_mode *mode,
                             sg_var **y);

#endif /* SG_CONVNET_IMPL_H */
