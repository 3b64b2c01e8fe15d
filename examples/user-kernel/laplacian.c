/* The periodic 5-point Laplacian as an sg_op_def: forward and backward on a
 * local block with margins, a 3x3 periodic window; the framework does the
 * margins (one process) or the halo exchange and its adjoint (sharded). */
#include "laplacian.h"

#include <string.h>

static sg_status lap_forward(sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->xin; /* (N, C, H+2, W+2): margins filled */
  const int64_t P = x->shape[0] * x->shape[1], H = x->shape[2] - 2,
                W = x->shape[3] - 2;
  const int64_t shape[4] = {x->shape[0], x->shape[1], H, W};
  SG_TRY(sg_node_alloc_out(node, 0, 4, shape));
  const double *in = x->data;
  double *y = node->out[0]->value.data;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j) {
        const double *c = in + (p * (H + 2) + i + 1) * (W + 2) + j + 1;
        y[(p * H + i) * W + j] = c[-(W + 2)] + c[W + 2] + c[-1] + c[1] -
                                 4 * c[0];
      }
fail:
  return st;
}

static sg_status lap_backward(sg_node *node) {
  const sg_tensor *x = &node->xin;
  const int64_t P = x->shape[0] * x->shape[1], H = x->shape[2] - 2,
                W = x->shape[3] - 2;
  const double *dy = node->out[0]->grad.data;
  double *dx = node->gin[0]; /* shaped like xin; OVERWRITE */
  if (!dx) return SG_OK;
  memset(dx, 0, (size_t)(P * (H + 2) * (W + 2)) * sizeof *dx);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j) {
        double g = dy[(p * H + i) * W + j];
        double *c = dx + (p * (H + 2) + i + 1) * (W + 2) + j + 1;
        c[-(W + 2)] += g;
        c[W + 2] += g;
        c[-1] += g;
        c[1] += g;
        c[0] -= 4 * g;
      }
  return SG_OK;
}

static const sg_op_def lap_op = {.name = "laplacian",
                                 .slots = {SG_SLOT_ACT},
                                 .forward = lap_forward,
                                 .backward = lap_backward,
                                 .rule = {.windowed_input = 0,
                                          .accepts = SG_ACCEPT_REPLICATE |
                                                     SG_ACCEPT_SHARD_BATCH |
                                                     SG_ACCEPT_SHARD_SPATIAL,
                                          .out = SG_OUT_LIKE_INPUT}};

sg_status ag_laplacian(sg_tape_t t, sg_var *x, sg_var **y) {
  /* one window per spatial dim: 3 wide, one periodic cell each side */
  const sg_window w = {.kernel = 3,
                       .pad = {1, 1},
                       .boundary = SG_BOUNDARY_PERIODIC};
  const sg_window win[2] = {w, w};
  return sg_tape_apply(t, &lap_op, 1, &x, 1, win, NULL, 0, y);
}
