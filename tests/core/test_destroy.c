/* The destroy rule (docs/architecture.md, "Code habits"): every destroy or
 * free returns sg_status, takes the handle by address, resets it (NULL or a
 * zeroed struct), and is a no-op returning SG_OK on NULL, on a NULL handle
 * and on an object already destroyed. */
#include "cnn.h"
#include "fft_impl.h"
#include "sg_autograd.h"
#include "sg_decomp.h"
#include "sg_kv.h"
#include "sg_model.h"
#include "sg_shardtensor.h"
#include "sg_test.h"
#include "sg_test_tensor.h"
#include "unet.h"

#include <string.h>

/* 1 if the n bytes at p are all zero. */
static int zeroed(const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; ++i)
    if (c[i]) return 0;
  return 1;
}

static void opaque_handles(void) {
  static const sg_kv_key keys[] = {{"steps", SG_KV_INT, "1", "steps"}};
  sg_kv_t kv = NULL;
  SG_CHECK_OK(sg_kv_create(keys, 1, &kv));
  SG_CHECK_OK(sg_kv_destroy(&kv));
  SG_CHECK(kv == NULL, "sg_kv_destroy leaves the handle set");
  SG_CHECK_OK(sg_kv_destroy(&kv));
  SG_CHECK_OK(sg_kv_destroy(NULL));

  sg_decomp_desc dd;
  memset(&dd, 0, sizeof dd);
  dd.ndims = 1;
  dd.global[0] = 8;
  dd.mesh_dim[0] = -1;
  int parts = 1;
  sg_decomp_t dec = NULL;
  SG_CHECK_OK(sg_decomp_create_parts(&dd, &parts, NULL, &dec));
  SG_CHECK_OK(sg_decomp_destroy(&dec));
  SG_CHECK(dec == NULL, "sg_decomp_destroy leaves the handle set");
  SG_CHECK_OK(sg_decomp_destroy(&dec));
  SG_CHECK_OK(sg_decomp_destroy(NULL));

  sg_tape_t tape = NULL;
  SG_CHECK_OK(sg_tape_create(&tape));
  SG_CHECK_OK(sg_tape_destroy(&tape));
  SG_CHECK(tape == NULL, "sg_tape_destroy leaves the handle set");
  SG_CHECK_OK(sg_tape_destroy(&tape));
  SG_CHECK_OK(sg_tape_destroy(NULL));

  /* models: the NULL cases (creating one needs a full configuration) */
  sg_model_t model = NULL;
  sg_cnn_t cnn = NULL;
  sg_unet_t unet = NULL;
  SG_CHECK_OK(sg_model_destroy(&model));
  SG_CHECK_OK(sg_model_destroy(NULL));
  SG_CHECK_OK(sg_cnn_destroy(&cnn));
  SG_CHECK_OK(sg_cnn_destroy(NULL));
  SG_CHECK_OK(sg_unet_destroy(&unet));
  SG_CHECK_OK(sg_unet_destroy(NULL));
}

static void value_structs(void) {
  const int64_t shape[2] = {3, 5};
  sg_tensor t;
  SG_CHECK_OK(sg_tensor_alloc(&t, SG_DTYPE_F32, sg_device_host(), 2, shape));
  SG_CHECK_OK(sg_tensor_free(&t));
  SG_CHECK(zeroed(&t, sizeof t), "sg_tensor_free leaves the struct set");
  SG_CHECK_OK(sg_tensor_free(&t));
  SG_CHECK_OK(sg_tensor_free(NULL));

  sg_shardtensor x;
  memset(&x, 0, sizeof x);
  x.ndim = 2;
  SG_CHECK_OK(
      sg_tensor_alloc(&x.local, SG_DTYPE_F64, sg_device_host(), 2, shape));
  SG_CHECK_OK(sg_shardtensor_destroy(&x));
  SG_CHECK(zeroed(&x, sizeof x), "sg_shardtensor_destroy leaves it set");
  SG_CHECK_OK(sg_shardtensor_destroy(&x));
  SG_CHECK_OK(sg_shardtensor_destroy(NULL));

  sg_test_buf b;
  SG_CHECK_OK(sg_test_buf_alloc(&b, SG_DTYPE_F32, 16));
  SG_CHECK_OK(sg_test_buf_free(&b));
  SG_CHECK(zeroed(&b, sizeof b), "sg_test_buf_free leaves the struct set");
  SG_CHECK_OK(sg_test_buf_free(&b));
  SG_CHECK_OK(sg_test_buf_free(NULL));

  /* a redistribution in its reset state (what a failed create leaves) */
  sg_fft_redist rd;
  memset(&rd, 0, sizeof rd);
  rd.etype = MPI_DATATYPE_NULL;
  rd.win = MPI_WIN_NULL;
  SG_CHECK_OK(sg_fft_redist_free(&rd));
  SG_CHECK(rd.send_off == NULL && rd.etype == MPI_DATATYPE_NULL &&
               rd.win == MPI_WIN_NULL,
           "sg_fft_redist_free does not reset the struct");
  SG_CHECK_OK(sg_fft_redist_free(&rd));
  SG_CHECK_OK(sg_fft_redist_free(NULL));
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  opaque_handles();
  value_structs();
  return sg_test_finish();
}
