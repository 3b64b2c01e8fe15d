/* shardgrid — the spectral convolution (the FNO layer) as a public op of
 * the autograd tape (sg_ag_spectral_conv in sg_autograd.h), and the fused
 * layer ops: the linear with its activation (sg_ag_linear_act) and the
 * whole FNO layer, act(spectral(x) + linear(x)) (sg_ag_spectral_linear_act).
 */
#include <string.h>

#include "op_registry_impl.h"
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_ops.h"
#if SG_HAVE_CUDA
#include "autograd_impl.h" /* ag_mem_alloc */
#include "sg_ops_cuda.h"
#endif
#include "sg_spectral.h"

typedef struct spec_attr {
  sg_spectral_conv_t conv;
  int64_t cout;
} spec_attr;

#if SG_HAVE_CUDA
/* The convolution on the node's device: on a mesh the split domain's
 * device path (the FFT's transposes on the device buffers through the comm
 * layer over the node's mesh; the faked device's buffers are host memory,
 * so it runs that path's host steps), else the one-process cuFFT path. */
static sg_status spec_conv_fwd_dev(const sg_node *node, sg_spectral_conv_t c,
                                   const void *x, const void *w, void *y,
                                   void *xhat) {
  if (!node->mesh) return sg_spectral_conv_forward_cuda(c, x, w, y, xhat);
  return sg_spectral_conv_forward_dev(c, node->mesh,
                                      ag_fake_cuda ? sg_device_host()
                                                   : node->device,
                                      x, w, y, xhat);
}

static sg_status spec_conv_bwd_dev(const sg_node *node, sg_spectral_conv_t c,
                                   const void *x, const void *xhat,
                                   const void *w, const void *dy, void *dx,
                                   void *dw) {
  if (!node->mesh)
    return sg_spectral_conv_backward_cuda(c, x, xhat, w, dy, dx, dw);
  return sg_spectral_conv_backward_dev(c, node->mesh,
                                       ag_fake_cuda ? sg_device_host()
                                                    : node->device,
                                       x, xhat, w, dy, dx, dw);
}
#endif

/* The node's forward on the host (spec_fwd) or its device (spec_fwd_cuda:
 * the convolution's device path, one process or a split domain; the same
 * outputs and saved spectrum, written in full, so not zeroed first). */
static sg_status spec_fwd_on(sg_node *node, int dev) {
  sg_status st = SG_OK;
  const spec_attr *a = (const spec_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  int64_t shape[SG_TENSOR_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[1] = a->cout;
  void *xhat = NULL;
  SG_TRY((dev ? sg_node_alloc_out_uninit : sg_node_alloc_out)(node, 0, x->ndim,
                                                              shape));
  int64_t ns = sg_spectral_conv_spectrum_count(a->conv);
  SG_TRY((dev ? sg_node_save_uninit : sg_node_save)(
      node, (size_t)(ns > 0 ? ns : 1) * sg_dtype_size(x->dtype), &xhat));
#if SG_HAVE_CUDA
  if (dev) {
    SG_TRY(spec_conv_fwd_dev(node, a->conv, x->data, node->in[1]->value.data,
                             node->out[0]->value.data, xhat));
    goto fail;
  }
#endif
  SG_TRY(sg_spectral_conv_forward(a->conv, x->data, node->in[1]->value.data,
                                  node->out[0]->value.data, xhat));
fail:
  return st;
}

static sg_status spec_bwd_on(sg_node *node, int dev) {
  const spec_attr *a = (const spec_attr *)node->attr;
#if SG_HAVE_CUDA
  if (dev)
    return spec_conv_bwd_dev(node, a->conv, node->in[0]->value.data,
                             node->saved, node->in[1]->value.data,
                             node->out[0]->grad.data, node->gin[0],
                             node->gin[1]);
#else
  (void)dev;
#endif
  return sg_spectral_conv_backward(a->conv, node->in[0]->value.data,
                                   node->saved, node->in[1]->value.data,
                                   node->out[0]->grad.data, node->gin[0],
                                   node->gin[1]);
}

static sg_status spec_fwd(sg_node *node) { return spec_fwd_on(node, 0); }
static sg_status spec_bwd(sg_node *node) { return spec_bwd_on(node, 0); }

#if SG_HAVE_CUDA
static sg_status spec_fwd_cuda(sg_node *node) { return spec_fwd_on(node, 1); }
static sg_status spec_bwd_cuda(sg_node *node) { return spec_bwd_on(node, 1); }
#define SPEC_CUDA(f) f
#else
#define SPEC_CUDA(f) NULL
#endif

/* Batch and spatial splits: the FFT redistributes the spatial slabs itself
 * (its plan was made for this layout), so no window and no halo. */
static const sg_op_def spec_op = {.name = "spectral_conv",
                                  .slots = {SG_SLOT_ACT, SG_SLOT_PARAM},
                                  .forward = spec_fwd,
                                  .backward = spec_bwd,
                                  .forward_cuda = SPEC_CUDA(spec_fwd_cuda),
                                  .backward_cuda = SPEC_CUDA(spec_bwd_cuda),
                                  .rule = {.windowed_input = -1,
                                           .accepts = SG_ACCEPT_SHARD_BATCH |
                                                      SG_ACCEPT_SHARD_SPATIAL,
                                           .out = SG_OUT_LIKE_INPUT,
                                           .out_unread = 1,
                                           .writes_gin = 1u}};

const sg_op_def *sg_ag_spectral_op_def(void) { return &spec_op; }

/* x and w against the convolution's plans (this rank's blocks), *cout. */
static sg_status spec_check(sg_spectral_conv_t conv, const sg_var *x,
                            const sg_var *w, int64_t *cout) {
  sg_status st = SG_OK;
  const sg_fft_desc *di = sg_fft_plan_desc(sg_spectral_conv_plan(conv, 0));
  const sg_fft_desc *dout = sg_fft_plan_desc(sg_spectral_conv_plan(conv, 1));
  const sg_tensor *v = &x->value;
  if (v->dtype != di->dtype || w->value.dtype != di->dtype)
    SG_RAISE(
        SG_ERR_SHAPE,
        "spectral conv: input '%s' and weight '%s' must be %s (the plan's dtype)",
        x->name, w->name, sg_dtype_name(di->dtype));
  if (v->ndim != 2 + di->ndim || v->shape[0] < 1 ||
      v->shape[0] * v->shape[1] != di->batch)
    SG_RAISE(
        SG_ERR_SHAPE,
        "spectral conv: input '%s' must be this rank's (N, Cin, spatial...) "
        "block of the plan (%d spatial dims, N*Cin = %lld)",
        x->name, di->ndim, (long long)di->batch);
  int64_t off[SG_FFT_MAX_DIMS], shp[SG_FFT_MAX_DIMS];
  sg_fft_plan_local_box(sg_spectral_conv_plan(conv, 0), SG_FFT_SPACE_REAL, off,
                        shp);
  for (int d = 0; d < di->ndim; ++d)
    if (v->shape[2 + d] != shp[d])
      SG_RAISE(
          SG_ERR_SHAPE,
          "spectral conv: input '%s' has %lld cells in spatial dim %d, the plan's "
          "block %lld",
          x->name, (long long)v->shape[2 + d], d, (long long)shp[d]);
  const int64_t nw = sg_tensor_numel(&w->value);
  if (nw != sg_spectral_conv_weight_count(conv) &&
      nw != sg_spectral_conv_local_weight_count(conv))
    SG_RAISE(
        SG_ERR_SHAPE,
        "spectral conv: weight '%s' has %lld scalars, not the %lld of W or the "
        "%lld of this rank's modes",
        w->name, (long long)nw, (long long)sg_spectral_conv_weight_count(conv),
        (long long)sg_spectral_conv_local_weight_count(conv));
  *cout = dout->batch / v->shape[0];
fail:
  return st;
}

sg_status sg_ag_spectral_conv(sg_tape_t t, struct sg_spectral_conv *conv,
                              sg_var *x, sg_var *w, sg_var **y) {
  sg_status st = SG_OK;
  if (!conv || !x || !w || !y)
    SG_RAISE(
        SG_ERR_INVALID_ARG,
        "spectral conv: convolution, input, weight and output are required");
  spec_attr at = {.conv = conv};
  st = spec_check(conv, x, w, &at.cout);
  /* the blocks are per rank: agree before the op's collectives */
  if (x->mesh) st = sg_agree(sg_mesh_comm(x->mesh), st);
  if (st != SG_OK) goto fail;
  sg_var *in[2] = {x, w};
  SG_TRY(sg_tape_apply(t, &spec_op, 2, in, 1, NULL, &at, sizeof at, y));
fail:
  return st;
}

/* ---- the fused layer ops ---------------------------------------------------
 * y = act(spectral(x; W) + (w x + b)), act < 0: none, conv NULL: no
 * spectral part. Forward: the spectral convolution writes z, the linear
 * adds itself and applies act per cache-hot chunk (sg_linear_act_forward)
 * instead of three passes (linear, sum, act) over the output; z kept for
 * backward. Backward: dz = act'(z) dy, the spectral backward writes dx, the
 * linear's adds to it (the sum the tape would have formed). */

typedef struct sla_attr {
  sg_spectral_conv_t conv; /* NULL: linear_act */
  int64_t cout;
  int act, has_bias;
} sla_attr;

/* The linear's weight is input iw, its bias iw + 1. */
static int sla_iw(const sla_attr *a) { return a->conv ? 2 : 1; }

static int64_t sla_spatial(const sg_tensor *t) {
  int64_t n = 1;
  for (int i = 2; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

/* node->saved: z (act >= 0), then the spectrum (conv), at these offsets */
static void sla_saved(const sg_node *node, size_t *zb, size_t *hb) {
  const sla_attr *a = (const sla_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const size_t es = sg_dtype_size(x->dtype);
  const int64_t nz = x->shape[0] * a->cout * sla_spatial(x),
                ns = a->conv ? sg_spectral_conv_spectrum_count(a->conv) : 0;
  *zb = a->act >= 0 ? ((size_t)nz * es + 63) / 64 * 64 : 0;
  *hb = a->conv ? (size_t)(ns > 0 ? ns : 1) * es : 0;
}

static sg_status sla_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const sla_attr *a = (const sla_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const int iw = sla_iw(a);
  int64_t shape[SG_TENSOR_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[1] = a->cout;
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, shape));
  void *y = node->out[0]->value.data;
  size_t zb, hb;
  sla_saved(node, &zb, &hb);
  char *sv = NULL;
  /* z is written in full below; the spectrum zeroed, as spec_fwd has it */
  if (zb + hb) SG_TRY(sg_node_save_uninit(node, zb + hb, (void **)&sv));
  if (hb) memset(sv + zb, 0, hb);
  void *z = a->act >= 0 ? sv : y;
  if (a->conv)
    SG_TRY(sg_spectral_conv_forward(a->conv, x->data, node->in[1]->value.data,
                                    z, sv + zb));
  SG_TRY(sg_linear_act_forward(
      x->dtype, x->shape[0], x->shape[1], a->cout, sla_spatial(x), x->data,
      node->in[iw]->value.data,
      a->has_bias ? node->in[iw + 1]->value.data : NULL, a->conv != NULL,
      a->act, z, a->act >= 0 ? y : NULL));
fail:
  return st;
}

static sg_status sla_bwd(sg_node *node) {
  sg_status st = SG_OK;
  const sla_attr *a = (const sla_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const int iw = sla_iw(a);
  const sg_dtype dt = x->dtype;
  const int64_t nz = x->shape[0] * a->cout * sla_spatial(x);
  size_t zb, hb;
  sla_saved(node, &zb, &hb);
  void *dz = node->out[0]->grad.data, *tmp = NULL, *gx = node->gin[0];
  if (!a->conv && a->act >= 0) { /* dz in cache-sized chunks, not stored */
    SG_TRY(sg_linear_act_backward(dt, x->shape[0], x->shape[1], a->cout,
                                  sla_spatial(x), x->data,
                                  node->in[iw]->value.data, a->act, node->saved,
                                  dz, 0, gx, node->gin[iw],
                                  a->has_bias ? node->gin[iw + 1] : NULL));
    goto fail;
  }
  if (a->act >= 0 && nz > 0) {
    SG_TRY(sg_malloc(sg_device_host(), (size_t)nz * sg_dtype_size(dt), &tmp));
    SG_TRY(sg_act_backward((sg_act)a->act, dt, nz, node->saved, dz, tmp));
    dz = tmp;
  }
  if (a->conv) /* collective (the FFT's transposes): on every rank alike */
    SG_TRY(sg_spectral_conv_backward(a->conv, x->data, (char *)node->saved + zb,
                                     node->in[1]->value.data, dz, gx,
                                     node->gin[1]));
  void *gb = a->has_bias ? node->gin[iw + 1] : NULL;
  if (gx || node->gin[iw] || gb)
    SG_TRY((a->conv ? sg_linear_backward_add : sg_linear_backward)(
        dt, x->shape[0], x->shape[1], a->cout, sla_spatial(x), x->data,
        node->in[iw]->value.data, dz, gx, node->gin[iw], gb));
fail:
  sg_free(sg_device_host(), &tmp);
  return st;
}

#if SG_HAVE_CUDA
/* linear_act and spectral_linear_act on a device: the spectral part on the
 * convolution's cuFFT path (sg_spectral_conv_forward_cuda) into z, the
 * linear on cuBLAS (added to z through a scratch when there is a spectral
 * part), then the activation kernel (sg_act_f32/f64 of sg_ops_inl.h, as
 * the host's). The backward: dz = act'(z) dy, the spectral backward writes
 * dx and adds to dW, the linear's dx is added to it (the sum the host's
 * sg_linear_backward_add forms). Scratch on the node's device. */
static sg_status la_fwd_cuda(sg_node *node) {
  sg_status st = SG_OK;
  const sla_attr *a = (const sla_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const sg_dtype dt = x->dtype;
  const int iw = sla_iw(a);
  const int64_t nz = x->shape[0] * a->cout * sla_spatial(x);
  int64_t shape[SG_TENSOR_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[1] = a->cout;
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, shape));
  void *y = node->out[0]->value.data, *z = y, *lin = NULL;
  size_t zb, hb;
  sla_saved(node, &zb, &hb);
  char *sv = NULL;
  if (zb + hb) SG_TRY(sg_node_save_uninit(node, zb + hb, (void **)&sv));
  if (zb) z = sv;
  if (a->conv) {
    SG_TRY(spec_conv_fwd_dev(node, a->conv, x->data, node->in[1]->value.data, z,
                             sv + zb));
    if (nz > 0)
      SG_TRY(
          ag_mem_alloc(node->device, (size_t)nz * sg_dtype_size(dt), 0, &lin));
  }
  SG_TRY(sg_linear_fwd_cuda(dt, x->shape[0], x->shape[1], a->cout,
                            sla_spatial(x), x->data, node->in[iw]->value.data,
                            a->has_bias ? node->in[iw + 1]->value.data : NULL,
                            lin ? lin : z, NULL));
  if (lin) SG_TRY(sg_binary_fwd_cuda(SG_BINARY_ADD, dt, nz, z, lin, z, NULL));
  if (a->act >= 0 && nz > 0)
    SG_TRY(sg_act_fwd_cuda((sg_act)a->act, dt, nz, z, y, NULL));
fail:
  ag_mem_free(node->device, &lin);
  return st;
}

static sg_status la_bwd_cuda(sg_node *node) {
  sg_status st = SG_OK;
  const sla_attr *a = (const sla_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const sg_dtype dt = x->dtype;
  const int iw = sla_iw(a);
  const int64_t nz = x->shape[0] * a->cout * sla_spatial(x),
                nx = sg_tensor_numel(x);
  void *dz = node->out[0]->grad.data, *tmp = NULL, *dxl = NULL;
  void *gx = node->gin[0], *gb = a->has_bias ? node->gin[iw + 1] : NULL;
  size_t zb, hb;
  sla_saved(node, &zb, &hb);
  if (a->act >= 0 && nz > 0) {
    SG_TRY(ag_mem_alloc(node->device, (size_t)nz * sg_dtype_size(dt), 0, &tmp));
    SG_TRY(sg_act_bwd_cuda((sg_act)a->act, dt, nz, node->saved, dz, tmp, NULL));
    dz = tmp;
  }
  if (a->conv) {
    SG_TRY(spec_conv_bwd_dev(node, a->conv, x->data, (char *)node->saved + zb,
                             node->in[1]->value.data, dz, gx, node->gin[1]));
    if (gx && nx > 0)
      SG_TRY(
          ag_mem_alloc(node->device, (size_t)nx * sg_dtype_size(dt), 0, &dxl));
  }
  if (gx || node->gin[iw] || gb)
    SG_TRY(sg_linear_bwd_cuda(dt, x->shape[0], x->shape[1], a->cout,
                              sla_spatial(x), x->data, node->in[iw]->value.data,
                              dz, dxl ? dxl : gx, node->gin[iw], gb, NULL));
  if (dxl) SG_TRY(sg_binary_fwd_cuda(SG_BINARY_ADD, dt, nx, gx, dxl, gx, NULL));
fail:
  ag_mem_free(node->device, &tmp);
  ag_mem_free(node->device, &dxl);
  return st;
}
#define LA_CUDA(f) f
#else
#define LA_CUDA(f) NULL
#endif

static const sg_op_def linear_act_op = {
    .name = "linear_act",
    .slots = {SG_SLOT_ACT, SG_SLOT_PARAM, SG_SLOT_PARAM},
    .forward = sla_fwd,
    .backward = sla_bwd,
    .forward_cuda = LA_CUDA(la_fwd_cuda),
    .backward_cuda = LA_CUDA(la_bwd_cuda),
    .rule = {.windowed_input = -1,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .out_unread = 1,
             .writes_gin = 1u}};

static const sg_op_def spectral_linear_act_op = {
    .name = "spectral_linear_act",
    .slots = {SG_SLOT_ACT, SG_SLOT_PARAM, SG_SLOT_PARAM, SG_SLOT_PARAM},
    .forward = sla_fwd,
    .backward = sla_bwd,
    .forward_cuda = LA_CUDA(la_fwd_cuda),
    .backward_cuda = LA_CUDA(la_bwd_cuda),
    .rule = {.windowed_input = -1,
             .accepts = SG_ACCEPT_SHARD_BATCH | SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .out_unread = 1,
             .writes_gin = 1u}};

const sg_op_def *sg_ag_linear_act_op_def(void) { return &linear_act_op; }
const sg_op_def *sg_ag_spectral_linear_act_op_def(void) {
  return &spectral_linear_act_op;
}

/* w (Cout, Cin) against x, b (Cout) or NULL; act < 0 or an sg_act. */
static sg_status sla_check(const sg_var *x, const sg_var *w, const sg_var *b,
                           int act) {
  sg_status st = SG_OK;
  if (!x || !w)
    SG_RAISE(SG_ERR_INVALID_ARG, "linear_act: x and w are required");
  if (act >= SG_ACT_COUNT)
    SG_RAISE(SG_ERR_INVALID_ARG, "linear_act: unknown activation %d", act);
  if (x->value.ndim < 2 || w->value.ndim != 2 ||
      w->value.shape[1] != sg_var_global_shape(x)[1])
    SG_RAISE(SG_ERR_SHAPE, "linear_act: needs x (N, C, ...) and w (Cout, C)");
  if (b && (b->value.ndim != 1 || b->value.shape[0] != w->value.shape[0]))
    SG_RAISE(SG_ERR_SHAPE, "linear_act: bias must be (%lld)",
             (long long)w->value.shape[0]);
fail:
  return st;
}

/* Under a bf16 storage policy every op's output is rounded: there the ops
 * run one after the other, so the results do not depend on the fusion. */
static int sla_fused(sg_tape_t t) {
  return sg_tape_storage_dtype(t) == SG_DTYPE_F32;
}

sg_status sg_ag_linear_act(sg_tape_t t, sg_var *x, sg_var *w, sg_var *b,
                           int act, sg_var **y) {
  sg_status st = SG_OK;
  SG_TRY(sla_check(x, w, b, act));
  if (!sla_fused(t)) {
    SG_TRY(sg_ag_linear(t, x, w, b, y));
    if (act >= 0) SG_TRY(sg_ag_act(t, (sg_act)act, *y, y));
    goto fail;
  }
  sla_attr at = {.conv = NULL,
                 .cout = w->value.shape[0],
                 .act = act < 0 ? -1 : act,
                 .has_bias = b != NULL};
  sg_var *in[3] = {x, w, b};
  SG_TRY(sg_tape_apply(t, &linear_act_op, b ? 3 : 2, in, 1, NULL, &at,
                       sizeof at, y));
fail:
  return st;
}

sg_status sg_ag_spectral_linear_act(sg_tape_t t, struct sg_spectral_conv *conv,
                                    sg_var *x, sg_var *W, sg_var *w, sg_var *b,
                                    int act, sg_var **y) {
  sg_status st = SG_OK;
  if (!conv || !W || !y)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "spectral_linear_act: convolution, weights and output are "
             "required");
  st = sla_check(x, w, b, act);
  if (!sla_fused(t)) {
    sg_var *s = NULL, *c = NULL;
    SG_TRY(st);
    SG_TRY(sg_ag_spectral_conv(t, conv, x, W, &s));
    SG_TRY(sg_ag_linear(t, x, w, b, &c));
    SG_TRY(sg_ag_binary(t, SG_BINARY_ADD, s, c, y));
    if (act >= 0) SG_TRY(sg_ag_act(t, (sg_act)act, *y, y));
    goto fail;
  }
  sla_attr at = {.conv = conv,
                 .act = act < 0 ? -1 : act,
                 .has_bias = b != NULL};
  if (st == SG_OK) st = spec_check(conv, x, W, &at.cout);
  if (st == SG_OK && at.cout != w->value.shape[0])
    st = sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                      "spectral_linear_act: the convolution gives %lld "
                      "channels, the linear %lld",
                      (long long)at.cout, (long long)w->value.shape[0]);
  /* the blocks are per rank: agree before the op's collectives */
  if (x && x->mesh) st = sg_agree(sg_mesh_comm(x->mesh), st);
  if (st != SG_OK) goto fail;
  sg_var *in[4] = {x, W, w, b};
  SG_TRY(sg_tape_apply(t, &spectral_linear_act_op, b ? 4 : 3, in, 1, NULL, &at,
                       sizeof at, y));
fail:
  return st;
}

/* ---- the projection head: y = w2 act(w1 x + b1) + b2 ------------------------
 * The FNO's last two linears in one node (sg_linear_head_forward /
 * backward): z = w1 x + b1 is kept for backward; a = act(z) only where the
 * kernels are not fused (sg_linear_head_fused: f32 GELU on the AVX2 tier
 * forms a per cache-sized chunk in forward and again from z in backward,
 * so the tape holds neither a nor its gradient). Inputs x, w1, b1, w2, b2
 * (both biases present: the builder composes the ops otherwise). */
typedef struct lh_attr {
  int64_t cmid, cout;
  int act, fused;
} lh_attr;

/* node->saved: z, then a where not fused */
static size_t lh_zbytes(const sg_node *node) {
  const lh_attr *a = (const lh_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const size_t nz = (size_t)(x->shape[0] * a->cmid * sla_spatial(x));
  return (nz * sg_dtype_size(x->dtype) + 63) / 64 * 64;
}

static sg_status lh_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const lh_attr *a = (const lh_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  int64_t shape[SG_TENSOR_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[1] = a->cout;
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, shape));
  const size_t zb = lh_zbytes(node);
  char *sv = NULL;
  SG_TRY(sg_node_save_uninit(node, a->fused ? zb : 2 * zb, (void **)&sv));
  SG_TRY(sg_linear_head_forward(
      x->dtype, x->shape[0], x->shape[1], a->cmid, a->cout, sla_spatial(x),
      x->data, node->in[1]->value.data, node->in[2]->value.data, a->act,
      node->in[3]->value.data, node->in[4]->value.data, sv,
      a->fused ? NULL : sv + zb, node->out[0]->value.data));
fail:
  return st;
}

static sg_status lh_bwd(sg_node *node) {
  sg_status st = SG_OK;
  const lh_attr *a = (const lh_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  const char *sv = (const char *)node->saved;
  SG_TRY(sg_linear_head_backward(
      x->dtype, x->shape[0], x->shape[1], a->cmid, a->cout, sla_spatial(x),
      x->data, node->in[1]->value.data, a->act, node->in[3]->value.data, sv,
      a->fused ? NULL : sv + lh_zbytes(node), node->out[0]->grad.data,
      node->gin[0], node->gin[1], node->gin[2], node->gin[3], node->gin[4]));
fail:
  return st;
}

static const sg_op_def linear_head_op = {
    .name = "linear_head",
    .slots = {SG_SLOT_ACT, SG_SLOT_PARAM, SG_SLOT_PARAM, SG_SLOT_PARAM,
              SG_SLOT_PARAM},
    .forward = lh_fwd,
    .backward = lh_bwd,
    .rule = {.windowed_input = -1,
             .accepts = SG_ACCEPT_REPLICATE | SG_ACCEPT_SHARD_BATCH |
                        SG_ACCEPT_SHARD_SPATIAL,
             .out = SG_OUT_LIKE_INPUT,
             .out_unread = 1,
             .writes_gin = 1u}};

const sg_op_def *sg_ag_linear_head_op_def(void) { return &linear_head_op; }

sg_status sg_ag_linear_head(sg_tape_t t, sg_var *x, sg_var *w1, sg_var *b1,
                            int act, sg_var *w2, sg_var *b2, sg_var **y) {
  sg_status st = SG_OK;
  SG_TRY(sla_check(x, w1, b1, act));
  if (!w2 || !y) SG_RAISE(SG_ERR_INVALID_ARG, "linear_head: w2 is required");
  if (w2->value.ndim != 2 || w2->value.shape[1] != w1->value.shape[0])
    SG_RAISE(SG_ERR_SHAPE, "linear_head: w2 must be (Cout, %lld)",
             (long long)w1->value.shape[0]);
  if (b2 && (b2->value.ndim != 1 || b2->value.shape[0] != w2->value.shape[0]))
    SG_RAISE(SG_ERR_SHAPE, "linear_head: b2 must be (%lld)",
             (long long)w2->value.shape[0]);
  /* composed: bf16 storage (every output rounded), no activation or bias,
   * device variables (the node has no CUDA entries) */
  if (!sla_fused(t) || act < 0 || !b1 || !b2 ||
      x->value.device.kind == SG_DEVICE_CUDA) {
    SG_TRY(sg_ag_linear_act(t, x, w1, b1, act, y));
    SG_TRY(sg_ag_linear(t, *y, w2, b2, y));
    goto fail;
  }
  lh_attr at = {.cmid = w1->value.shape[0],
                .cout = w2->value.shape[0],
                .act = act,
                .fused = sg_linear_head_fused(x->value.dtype, act)};
  sg_var *in[5] = {x, w1, b1, w2, b2};
  SG_TRY(sg_tape_apply(t, &linear_head_op, 5, in, 1, NULL, &at, sizeof at, y));
fail:
  return st;
}
