/* shardgrid — the spectral convolution (the FNO layer) as a public op of
 * the autograd tape (sg_ag_spectral_conv in sg_autograd.h). */
#include <string.h>

#include "op_registry_impl.h"
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_spectral.h"

typedef struct spec_attr {
  sg_spectral_conv_t conv;
  int64_t cout;
} spec_attr;

static sg_status spec_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const spec_attr *a = (const spec_attr *)node->attr;
  const sg_tensor *x = &node->in[0]->value;
  int64_t shape[SG_TENSOR_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[1] = a->cout;
  void *xhat = NULL;
  SG_TRY(sg_node_alloc_out(node, 0, x->ndim, shape));
  int64_t ns = sg_spectral_conv_spectrum_count(a->conv);
  SG_TRY(sg_node_save(node, (size_t)(ns > 0 ? ns : 1) * sg_dtype_size(x->dtype),
                      &xhat));
  SG_TRY(sg_spectral_conv_forward(a->conv, x->data, node->in[1]->value.data,
                                  node->out[0]->value.data, xhat));
fail:
  return st;
}

static sg_status spec_bwd(sg_node *node) {
  const spec_attr *a = (const spec_attr *)node->attr;
  return sg_spectral_conv_backward(a->conv, node->in[0]->value.data,
                                   node->saved, node->in[1]->value.data,
                                   node->out[0]->grad.data, node->gin[0],
                                   node->gin[1]);
}

/* Batch and spatial splits: the FFT redistributes the spatial slabs itself
 * (its plan was made for this layout), so no window and no halo. */
static const sg_op_def spec_op = {.name = "spectral_conv",
                                  .slots = {SG_SLOT_ACT, SG_SLOT_PARAM},
                                  .forward = spec_fwd,
                                  .backward = spec_bwd,
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
