/* The model interface table (sg_model_impl.h): a model is one table and
 * one registration. A user model ("affine": y = W x + b per grid point,
 * over the channels) registers, is found by name next to the built-ins,
 * is created, bound, initialised and run through the sg_model_t handle,
 * and gives W x + b; bad registrations are refused; the built-ins report
 * their size keys. */
#include "sg_model.h"
#include "sg_model_impl.h"
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct affine {
  int64_t cin, cout, y0, ny, x0, nx;
  sg_var w, b;
  sg_var *ptrs[2];
} affine;

static void af_defaults(sg_model_config *c) { (void)c; }

static sg_status af_create(sg_mesh_t mesh, const sg_model_config *c, int64_t ny,
                           int64_t nx, int64_t batch, void **impl) {
  (void)mesh;
  (void)batch;
  affine *a = calloc(1, sizeof *a);
  if (!a)
    return sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                        "affine: out of memory");
  a->cin = c->cin, a->cout = c->cout, a->ny = ny, a->nx = nx;
  *impl = a;
  return SG_OK;
}
static void af_destroy(void *impl) {
  affine *a = impl;
  sg_var_release(&a->w);
  sg_var_release(&a->b);
  free(a);
}
static int64_t af_count(void *impl) {
  affine *a = impl;
  return a->cout * a->cin + a->cout;
}
static sg_status af_info(void *impl, int i, sg_param_info *pi) {
  affine *a = impl;
  memset(pi, 0, sizeof *pi);
  pi->name = i == 0 ? "w" : "b";
  pi->ndim = i == 0 ? 2 : 1;
  pi->global_shape[0] = pi->count[0] = a->cout;
  if (i == 0) pi->global_shape[1] = pi->count[1] = a->cin;
  pi->offset = i == 0 ? 0 : a->cout * a->cin;
  pi->numel = i == 0 ? a->cout * a->cin : a->cout;
  return SG_OK;
}
static sg_status af_bind(void *impl, float *p, float *g) {
  affine *a = impl;
  sg_status st = SG_OK;
  const int64_t ws[2] = {a->cout, a->cin}, bs[1] = {a->cout};
  SG_TRY(sg_var_init_param(&a->w, "w", SG_DTYPE_F32, 2, ws, p, g));
  SG_TRY(sg_var_init_param(&a->b, "b", SG_DTYPE_F32, 1, bs,
                           p + a->cout * a->cin, g + a->cout * a->cin));
  a->ptrs[0] = &a->w, a->ptrs[1] = &a->b;
fail:
  return st;
}
static sg_status af_init(void *impl, uint64_t seed) {
  affine *a = impl;
  float *p = a->w.value.data;
  for (int64_t i = 0; i < af_count(impl); ++i)
    p[i] = (float)(0.1 * (double)(i + 1) + (double)seed);
  return SG_OK;
}
static int af_params(void *impl, sg_var ***vars) {
  *vars = ((affine *)impl)->ptrs;
  return 2;
}
static void af_box(void *impl, int64_t *y0, int64_t *ny, int64_t *x0,
                   int64_t *nx) {
  affine *a = impl;
  *y0 = 0, *ny = a->ny, *x0 = 0, *nx = a->nx;
}
static void af_describe(void *impl, const sg_model_config *c, char *buf,
                        size_t size) {
  (void)c;
  snprintf(buf, size, "affine: %lld parameters", (long long)af_count(impl));
}
static sg_status af_forward(void *impl, sg_tape_t t, sg_var *x, sg_var **y) {
  affine *a = impl;
  return sg_ag_linear(t, x, &a->w, &a->b, y);
}

static const char *const af_keys[] = {"width", NULL};

static const sg_model_i affine_i = {.name = "affine",
                                    .size_keys = af_keys,
                                    .defaults = af_defaults,
                                    .create = af_create,
                                    .destroy = af_destroy,
                                    .param_count = af_count,
                                    .param_info = af_info,
                                    .bind = af_bind,
                                    .init = af_init,
                                    .params = af_params,
                                    .box = af_box,
                                    .describe = af_describe,
                                    .forward = af_forward};

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_mesh_t mesh = NULL;
  sg_model_t m = NULL;
  sg_tape_t tape = NULL;
  float buf[64], grad[64], xd[2 * 3 * 4 * 5];
  sg_var x;
  memset(&x, 0, sizeof x);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_SELF, "h=1", &mesh));
  sg_model_kind k;
  SG_CHECK_STATUS(sg_model_kind_parse("affine", &k), SG_ERR_CONFIG);
  SG_CHECK_OK(sg_model_register(&affine_i));
  SG_CHECK_STATUS(sg_model_register(&affine_i), SG_ERR_INVALID_ARG);
  sg_model_i broken = affine_i;
  broken.name = "broken";
  broken.forward = NULL;
  SG_CHECK_STATUS(sg_model_register(&broken), SG_ERR_INVALID_ARG);
  SG_REQUIRE_OK(sg_model_kind_parse("affine", &k));
  SG_CHECK((int)k == SG_MODEL_COUNT,
           "the first registered model gets kind %d, got %d", SG_MODEL_COUNT,
           (int)k);
  SG_CHECK(strcmp(sg_model_kind_name(k), "affine") == 0, "name of kind %d: %s",
           (int)k, sg_model_kind_name(k));
  SG_CHECK_STATUS(sg_model_kind_parse("resnet", &k), SG_ERR_CONFIG);
  SG_CHECK(strstr(sg_last_error(),
                  "choose fno, cnn, unet, vit, fno3d, swin or affine") != NULL,
           "message lists every model: %s", sg_last_error());
  SG_REQUIRE_OK(sg_model_kind_parse("affine", &k));
  sg_model_config c = sg_model_defaults(k);
  c.cin = 3, c.cout = 2;
  SG_REQUIRE_OK(sg_model_create(mesh, &c, 4, 5, 2, &m));
  SG_CHECK(sg_model_param_count(m) == 8, "8 parameters, got %lld",
           (long long)sg_model_param_count(m));
  SG_REQUIRE_OK(sg_model_bind(m, buf, grad));
  SG_REQUIRE_OK(sg_model_init(m, 0));
  for (int i = 0; i < 2 * 3 * 20; ++i) xd[i] = (float)sin(0.3 * i);
  const int64_t xs[4] = {2, 3, 4, 5};
  SG_REQUIRE_OK(sg_var_init(&x, "x", SG_DTYPE_F32, 4, xs, xd, 0));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  sg_var *y = NULL;
  SG_REQUIRE_OK(sg_model_forward(m, tape, &x, &y));
  int bad = 0;
  const float *yd = y->value.data;
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 2; ++o)
      for (int p = 0; p < 20; ++p) {
        double want = buf[6 + o];
        for (int i = 0; i < 3; ++i)
          want += (double)buf[o * 3 + i] * xd[(n * 3 + i) * 20 + p];
        bad += fabs(yd[(n * 2 + o) * 20 + p] - want) > 1e-5 * (1 + fabs(want));
      }
  SG_CHECK(bad == 0, "affine forward: %d values differ from W x + b", bad);
  SG_CHECK(strcmp(sg_model_size_keys(m)[0], "width") == 0,
           "the model's size keys");
  { /* a model without pipeline pieces: 0 pieces, a clear error */
    sg_bundle io = {.n = 1, .v = {&x}};
    SG_CHECK(sg_model_nblocks(m) == 0, "affine has no pieces");
    SG_CHECK_STATUS(sg_model_forward_blocks(m, tape, 0, 1, &io),
                    SG_ERR_NOT_SUPPORTED);
    SG_CHECK(strstr(sg_last_error(),
                    "model affine has no pipeline pieces yet") != NULL,
             "message: %s", sg_last_error());
  }
  sg_tape_clear(tape);
  sg_model_destroy(&m);
  /* the built-ins through their tables */
  const char *const want[5][2] = {{"fno", "modes"},
                                  {"cnn", "blocks"},
                                  {"unet", "levels"},
                                  {"vit", "patch"},
                                  {"swin", "window"}};
  const sg_model_kind kinds[5] = {SG_MODEL_FNO, SG_MODEL_CNN, SG_MODEL_UNET,
                                  SG_MODEL_VIT, SG_MODEL_SWIN};
  for (int i = 0; i < 5; ++i) { /* fno3d: test_fno3d */
    sg_model_config bc = sg_model_defaults(kinds[i]);
    bc.width = 4, bc.modes = 2, bc.layers = 1, bc.proj_width = 4, bc.blocks = 1,
    bc.levels = 2, bc.groups = 2, bc.heads = 2, bc.depth = 1, bc.window = 2;
    SG_REQUIRE_OK(sg_model_create(mesh, &bc, 8, 8, 1, &m));
    const char *const *keys = sg_model_size_keys(m);
    int found = 0;
    for (int j = 0; keys && keys[j]; ++j)
      found |= strcmp(keys[j], want[i][1]) == 0;
    SG_CHECK(found && strcmp(sg_model_kind_name(kinds[i]), want[i][0]) == 0,
             "%s reports '%s' as a size key", want[i][0], want[i][1]);
    /* layers/blocks/depth + 2; the U-Net's 2 L */
    const int pieces[5] = {1 + 2, 1 + 2, 2 * 2, 1 + 2, 1 + 2};
    SG_CHECK(sg_model_nblocks(m) == pieces[i], "%s has %d pieces, want %d",
             want[i][0], sg_model_nblocks(m), pieces[i]);
    sg_model_destroy(&m);
  }
done:
  sg_var_release(&x);
  sg_tape_destroy(&tape);
  sg_model_destroy(&m);
  sg_mesh_destroy(&mesh);
  return sg_test_finish();
}
