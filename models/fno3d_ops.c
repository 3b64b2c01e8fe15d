/* shardgrid — the two reshaping ops of FNO-3D (fno_impl.h): the input
 * broadcast along the time axis, and the time window (zero padding,
 * cropping, dropping a channel dim of 1). Private to the model: they run on
 * its plain local blocks (no sharding metadata), the time axis is whole on
 * every rank, so neither communicates. */
#include "fno_impl.h"
#include "op_registry_impl.h"

#include <string.h>

#include "sg_config.h"
#include "sg_ops_inl.h" /* sg_bcast_t_sum, shared with the CUDA kernels */
#if SG_HAVE_CUDA
#include "sg_ops_cuda.h"
#define FNO3D_CUDA(f) f
#else
#define FNO3D_CUDA(f) NULL
#endif

typedef struct bt_attr {
  int64_t nt;
} bt_attr;

/* (N, C, ny, nx) -> (N, C, nt, ny, nx): y[n, c, t] = x[n, c] */
static sg_status bt_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const bt_attr *a = (const bt_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const int64_t P = x->shape[0] * x->shape[1], S = x->shape[2] * x->shape[3];
  const int64_t shape[5] = {x->shape[0], x->shape[1], a->nt, x->shape[2],
                            x->shape[3]};
  const size_t es = sg_dtype_size(x->dtype);
  SG_TRY(sg_node_alloc_out_uninit(node, 0, 5, shape));
  char *y = node->out[0]->value.data;
  for (int64_t p = 0; p < P; ++p)
    for (int64_t t = 0; t < a->nt; ++t)
      memcpy(y + (size_t)((p * a->nt + t) * S) * es,
             (const char *)x->data + (size_t)(p * S) * es, (size_t)S * es);
fail:
  return st;
}

/* dx[n, c] = sum_t dy[n, c, t], in t order (the same bits on every mesh:
 * the time axis is whole; sg_bcast_t_sum, as the CUDA kernel) */
static sg_status bt_bwd(sg_node *node) {
  const bt_attr *a = (const bt_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const int64_t P = x->shape[0] * x->shape[1], S = x->shape[2] * x->shape[3];
  if (!node->gin[0]) return SG_OK;
  const void *g = node->out[0]->grad.data;
  for (int64_t e = 0; e < P * S; ++e)
    if (x->dtype == SG_DTYPE_F64)
      ((double *)node->gin[0])[e] = sg_bcast_t_sum_f64(g, a->nt, S, e);
    else
      ((float *)node->gin[0])[e] = sg_bcast_t_sum_f32(g, a->nt, S, e);
  return SG_OK;
}

#if SG_HAVE_CUDA
static sg_status bt_fwd_cuda(sg_node *node) {
  sg_status st = SG_OK;
  const bt_attr *a = (const bt_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const int64_t P = x->shape[0] * x->shape[1], S = x->shape[2] * x->shape[3];
  const int64_t shape[5] = {x->shape[0], x->shape[1], a->nt, x->shape[2],
                            x->shape[3]};
  SG_TRY(sg_node_alloc_out_uninit(node, 0, 5, shape));
  SG_TRY(sg_bcast_t_fwd_cuda(x->dtype, P, a->nt, S, x->data,
                             node->out[0]->value.data, NULL));
fail:
  return st;
}

static sg_status bt_bwd_cuda(sg_node *node) {
  const bt_attr *a = (const bt_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const int64_t P = x->shape[0] * x->shape[1], S = x->shape[2] * x->shape[3];
  if (!node->gin[0]) return SG_OK;
  return sg_bcast_t_bwd_cuda(x->dtype, P, a->nt, S, node->out[0]->grad.data,
                             node->gin[0], NULL);
}
#endif

static const sg_op_def bt_op = {.name = "fno3d_broadcast_t",
                                .slots = {SG_SLOT_ACT},
                                .forward = bt_fwd,
                                .backward = bt_bwd,
                                .forward_cuda = FNO3D_CUDA(bt_fwd_cuda),
                                .backward_cuda = FNO3D_CUDA(bt_bwd_cuda),
                                .rule = {.windowed_input = -1,
                                         .accepts = SG_ACCEPT_REPLICATE |
                                                    SG_ACCEPT_SHARD_BATCH,
                                         .out = SG_OUT_LIKE_INPUT,
                                         .writes_gin = 1u}};

sg_status sg_fno3d_broadcast_t(sg_tape_t t, sg_var *x, int64_t nt, sg_var **y) {
  sg_status st = SG_OK;
  const sg_tensor *v = &x->value;
  if (v->ndim != 4 || nt < 1 ||
      (v->dtype != SG_DTYPE_F32 && v->dtype != SG_DTYPE_F64))
    SG_RAISE(SG_ERR_SHAPE,
             "fno3d: broadcast over time needs an f32/f64 (N, C, ny, nx) "
             "block and nt >= 1");
  bt_attr at = {nt};
  SG_TRY(sg_tape_apply(t, &bt_op, 1, &x, 1, NULL, &at, sizeof at, y));
fail:
  return st;
}

typedef struct tw_attr {
  int64_t nt;  /* the output's time steps */
  int squeeze; /* drop the channel dim (of 1) */
} tw_attr;

/* Copy the first min(t1, t2) time slices of every (n, c) from a block of t1
 * steps to one of t2 steps, zeros after them; S scalars per slice. Its
 * adjoint is the same map from t2 to t1. */
static void tw_copy(const char *in, int64_t t1, char *out, int64_t t2,
                    int64_t P, int64_t S, size_t es) {
  const int64_t tm = t1 < t2 ? t1 : t2;
  for (int64_t p = 0; p < P; ++p) {
    memcpy(out + (size_t)(p * t2 * S) * es, in + (size_t)(p * t1 * S) * es,
           (size_t)(tm * S) * es);
    memset(out + (size_t)((p * t2 + tm) * S) * es, 0,
           (size_t)((t2 - tm) * S) * es);
  }
}

static sg_status tw_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const tw_attr *a = (const tw_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const int64_t P = x->shape[0] * x->shape[1], S = x->shape[3] * x->shape[4];
  const int64_t shape5[5] = {x->shape[0], x->shape[1], a->nt, x->shape[3],
                             x->shape[4]},
                shape4[4] = {x->shape[0], a->nt, x->shape[3], x->shape[4]};
  SG_TRY(sg_node_alloc_out_uninit(node, 0, a->squeeze ? 4 : 5,
                                  a->squeeze ? shape4 : shape5));
  tw_copy(x->data, x->shape[2], node->out[0]->value.data, a->nt, P, S,
          sg_dtype_size(x->dtype));
fail:
  return st;
}

static sg_status tw_bwd(sg_node *node) {
  const tw_attr *a = (const tw_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const int64_t P = x->shape[0] * x->shape[1], S = x->shape[3] * x->shape[4];
  if (node->gin[0])
    tw_copy(node->out[0]->grad.data, a->nt, node->gin[0], x->shape[2], P, S,
            sg_dtype_size(x->dtype));
  return SG_OK;
}

#if SG_HAVE_CUDA
static sg_status tw_fwd_cuda(sg_node *node) {
  sg_status st = SG_OK;
  const tw_attr *a = (const tw_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const int64_t P = x->shape[0] * x->shape[1], S = x->shape[3] * x->shape[4];
  const int64_t shape5[5] = {x->shape[0], x->shape[1], a->nt, x->shape[3],
                             x->shape[4]},
                shape4[4] = {x->shape[0], a->nt, x->shape[3], x->shape[4]};
  SG_TRY(sg_node_alloc_out_uninit(node, 0, a->squeeze ? 4 : 5,
                                  a->squeeze ? shape4 : shape5));
  SG_TRY(sg_time_window_cuda(x->dtype, P, S, x->shape[2], a->nt, x->data,
                             node->out[0]->value.data, NULL));
fail:
  return st;
}

static sg_status tw_bwd_cuda(sg_node *node) {
  const tw_attr *a = (const tw_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const int64_t P = x->shape[0] * x->shape[1], S = x->shape[3] * x->shape[4];
  if (!node->gin[0]) return SG_OK;
  return sg_time_window_cuda(x->dtype, P, S, a->nt, x->shape[2],
                             node->out[0]->grad.data, node->gin[0], NULL);
}
#endif

static const sg_op_def tw_op = {.name = "fno3d_time_window",
                                .slots = {SG_SLOT_ACT},
                                .forward = tw_fwd,
                                .backward = tw_bwd,
                                .forward_cuda = FNO3D_CUDA(tw_fwd_cuda),
                                .backward_cuda = FNO3D_CUDA(tw_bwd_cuda),
                                .rule = {.windowed_input = -1,
                                         .accepts = SG_ACCEPT_REPLICATE |
                                                    SG_ACCEPT_SHARD_BATCH,
                                         .out = SG_OUT_LIKE_INPUT,
                                         .writes_gin = 1u}};

sg_status sg_fno3d_time_window(sg_tape_t t, sg_var *x, int64_t nt, int squeeze,
                               sg_var **y) {
  sg_status st = SG_OK;
  const sg_tensor *v = &x->value;
  if (v->ndim != 5 || nt < 1 || (squeeze && v->shape[1] != 1))
    SG_RAISE(SG_ERR_SHAPE,
             "fno3d: the time window needs an (N, C, T, ny, nx) block, nt >= "
             "1 (and C = 1 to drop the channel dim)");
  tw_attr at = {nt, squeeze};
  SG_TRY(sg_tape_apply(t, &tw_op, 1, &x, 1, NULL, &at, sizeof at, y));
fail:
  return st;
}

const sg_op_def *sg_fno3d_broadcast_t_op_def(void) { return &bt_op; }
const sg_op_def *sg_fno3d_time_window_op_def(void) { return &tw_op; }
