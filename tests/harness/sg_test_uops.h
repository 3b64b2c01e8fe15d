/* shardgrid tests — user ops whose "CUDA" entries are their host code, for
 * the tape's faked device (ag_fake_cuda: "CUDA" tensors are host memory):
 * a run on faked cuda:0 differs from a host run only in the tape's device
 * path, and sg_uop_calls counts the kernel calls by where they ran.
 *   lin:  y[n, o, s] = sum_c w[o, c] x[n, c, s] (x an activation, w (O, C)
 *         a parameter), double accumulation in c order
 *   tanh: y = tanh(x)
 *   add:  y = a + b (both activations)
 * Header-only (static inline): one test file includes it. */
#ifndef SG_TEST_UOPS_H
#define SG_TEST_UOPS_H

#include <math.h>
#include <string.h>

#include "sg_autograd.h"

static int sg_uop_calls[2]; /* user-op kernel calls: [on cuda] */

static inline double sg_uop_ld(const void *p, sg_dtype dt, int64_t i) {
  return dt == SG_DTYPE_F32 ? (double)((const float *)p)[i]
                            : ((const double *)p)[i];
}
static inline void sg_uop_st(void *p, sg_dtype dt, int64_t i, double v) {
  if (dt == SG_DTYPE_F32)
    ((float *)p)[i] = (float)v;
  else
    ((double *)p)[i] = v;
}
static inline void sg_uop_count(const sg_node *node) {
  sg_uop_calls[node->device.kind == SG_DEVICE_CUDA]++;
}
static inline int64_t sg_uop_spatial(const sg_tensor *t) {
  int64_t s = 1;
  for (int d = 2; d < t->ndim; ++d) s *= t->shape[d];
  return s;
}

static inline sg_status sg_uop_lin_fwd(sg_node *node) {
  const sg_tensor *x = &node->in[0]->value, *w = &node->in[1]->value;
  sg_uop_count(node);
  int64_t shape[SG_TENSOR_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[1] = w->shape[0];
  sg_status st = sg_node_alloc_out_uninit(node, 0, x->ndim, shape);
  if (st != SG_OK) return st;
  const int64_t S = sg_uop_spatial(x), Ci = x->shape[1], Co = w->shape[0];
  void *y = node->out[0]->value.data;
  for (int64_t n = 0; n < x->shape[0]; ++n)
    for (int64_t o = 0; o < Co; ++o)
      for (int64_t s = 0; s < S; ++s) {
        double a = 0;
        for (int64_t c = 0; c < Ci; ++c)
          a += sg_uop_ld(w->data, w->dtype, o * Ci + c) *
               sg_uop_ld(x->data, x->dtype, (n * Ci + c) * S + s);
        sg_uop_st(y, x->dtype, (n * Co + o) * S + s, a);
      }
  return SG_OK;
}

static inline sg_status sg_uop_lin_bwd(sg_node *node) {
  const sg_tensor *x = &node->in[0]->value, *w = &node->in[1]->value;
  const sg_tensor *dy = &node->out[0]->grad;
  const sg_dtype dt = x->dtype;
  sg_uop_count(node);
  const int64_t S = sg_uop_spatial(x), Ci = x->shape[1], Co = w->shape[0];
  for (int64_t n = 0; node->gin[0] && n < x->shape[0]; ++n)
    for (int64_t c = 0; c < Ci; ++c)
      for (int64_t s = 0; s < S; ++s) {
        double a = 0;
        for (int64_t o = 0; o < Co; ++o)
          a += sg_uop_ld(w->data, dt, o * Ci + c) *
               sg_uop_ld(dy->data, dt, (n * Co + o) * S + s);
        sg_uop_st(node->gin[0], dt, (n * Ci + c) * S + s, a);
      }
  for (int64_t o = 0; node->gin[1] && o < Co; ++o)
    for (int64_t c = 0; c < Ci; ++c) {
      double a = sg_uop_ld(node->gin[1], dt, o * Ci + c);
      for (int64_t n = 0; n < x->shape[0]; ++n)
        for (int64_t s = 0; s < S; ++s)
          a += sg_uop_ld(dy->data, dt, (n * Co + o) * S + s) *
               sg_uop_ld(x->data, dt, (n * Ci + c) * S + s);
      sg_uop_st(node->gin[1], dt, o * Ci + c, a);
    }
  return SG_OK;
}

static inline sg_status sg_uop_tanh_fwd(sg_node *node) {
  const sg_tensor *x = &node->in[0]->value;
  sg_uop_count(node);
  sg_status st = sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape);
  for (int64_t i = 0; st == SG_OK && i < sg_tensor_numel(x); ++i)
    sg_uop_st(node->out[0]->value.data, x->dtype, i,
              tanh(sg_uop_ld(x->data, x->dtype, i)));
  return st;
}

static inline sg_status sg_uop_tanh_bwd(sg_node *node) {
  const sg_tensor *y = &node->out[0]->value, *dy = &node->out[0]->grad;
  sg_uop_count(node);
  for (int64_t i = 0; node->gin[0] && i < sg_tensor_numel(y); ++i) {
    const double v = sg_uop_ld(y->data, y->dtype, i);
    sg_uop_st(node->gin[0], y->dtype, i,
              sg_uop_ld(dy->data, y->dtype, i) * (1 - v * v));
  }
  return SG_OK;
}

static inline sg_status sg_uop_add_fwd(sg_node *node) {
  const sg_tensor *a = &node->in[0]->value, *b = &node->in[1]->value;
  sg_uop_count(node);
  sg_status st = sg_node_alloc_out_uninit(node, 0, a->ndim, a->shape);
  for (int64_t i = 0; st == SG_OK && i < sg_tensor_numel(a); ++i)
    sg_uop_st(node->out[0]->value.data, a->dtype, i,
              sg_uop_ld(a->data, a->dtype, i) +
                  sg_uop_ld(b->data, a->dtype, i));
  return st;
}

static inline sg_status sg_uop_add_bwd(sg_node *node) {
  const sg_tensor *dy = &node->out[0]->grad;
  sg_uop_count(node);
  for (int k = 0; k < 2; ++k)
    for (int64_t i = 0; node->gin[k] && i < sg_tensor_numel(dy); ++i)
      sg_uop_st(node->gin[k], dy->dtype, i, sg_uop_ld(dy->data, dy->dtype, i));
  return SG_OK;
}

/* The op definitions (functions, so a test that uses a few of them has no
 * unused constants). */
#define SG_UOP_DEF(nm, wg, ...)                                      \
  static inline const sg_op_def *sg_uop_##nm(void) {                 \
    static const sg_op_def d = {.name = "test_" #nm,                 \
                                .slots = {__VA_ARGS__},              \
                                .forward = sg_uop_##nm##_fwd,        \
                                .backward = sg_uop_##nm##_bwd,       \
                                .rule = {.windowed_input = -1,       \
                                         .accepts = SG_ACCEPT_ALL,   \
                                         .out = SG_OUT_LIKE_INPUT,   \
                                         .writes_gin = wg},          \
                                .forward_cuda = sg_uop_##nm##_fwd,   \
                                .backward_cuda = sg_uop_##nm##_bwd}; \
    return &d;                                                       \
  }
SG_UOP_DEF(lin, 1u, SG_SLOT_ACT, SG_SLOT_PARAM)
SG_UOP_DEF(tanh, 1u, SG_SLOT_ACT)
SG_UOP_DEF(add, 3u, SG_SLOT_ACT, SG_SLOT_ACT)
#undef SG_UOP_DEF

#endif
