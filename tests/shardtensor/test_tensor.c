/* Local tensors: alloc/free (accounted), views, wrap, strided copy (the
 * pack/unpack of communication) and fill, against brute-force references;
 * and error paths. */
#include <stdlib.h>
#include <string.h>

#include "sg_test.h"
#include "sg_tensor.h"

static int64_t off_of(const sg_tensor *t, const int64_t *idx) {
  int64_t o = 0;
  for (int d = 0; d < t->ndim; ++d) o += idx[d] * t->strides[d];
  return o;
}

/* advance a row-major multi-index; 0 at the end */
static int next_index(int nd, const int64_t *shape, int64_t *idx) {
  for (int d = nd - 1; d >= 0; --d) {
    if (++idx[d] < shape[d]) return 1;
    idx[d] = 0;
  }
  return 0;
}

static void test_alloc_and_accounting(void) {
  sg_mem_info a, b, c;
  SG_CHECK_OK(sg_mem_get_info(sg_device_host(), &a));
  sg_tensor t;
  const int64_t shape[3] = {7, 5, 3};
  SG_CHECK_OK(sg_tensor_alloc(&t, SG_DTYPE_F64, sg_device_host(), 3, shape));
  SG_CHECK_OK(sg_mem_get_info(sg_device_host(), &b));
  SG_CHECK(b.current_bytes == a.current_bytes + 7 * 5 * 3 * 8,
           "accounted %zu -> %zu", a.current_bytes, b.current_bytes);
  SG_CHECK(t.owns && sg_tensor_is_contiguous(&t), "owned contiguous");
  SG_CHECK(t.strides[0] == 15 && t.strides[1] == 3 && t.strides[2] == 1,
           "strides %lld %lld %lld", (long long)t.strides[0],
           (long long)t.strides[1], (long long)t.strides[2]);
  SG_CHECK(sg_tensor_numel(&t) == 105 && sg_tensor_nbytes(&t) == 840, "numel");
  int zero = 1;
  for (int i = 0; i < 105; ++i) zero &= ((double *)t.data)[i] == 0.0;
  SG_CHECK(zero, "zero-filled");
  sg_tensor_free(&t);
  SG_CHECK(t.data == NULL && t.ndim == 0, "reset after free");
  sg_tensor_free(&t); /* twice is fine */
  sg_tensor_free(NULL);
  SG_CHECK_OK(sg_mem_get_info(sg_device_host(), &c));
  SG_CHECK(c.current_bytes == a.current_bytes, "released");

  /* scalar and empty tensors */
  SG_CHECK_OK(sg_tensor_alloc(&t, SG_DTYPE_I32, sg_device_host(), 0, NULL));
  SG_CHECK(sg_tensor_numel(&t) == 1 && t.data, "scalar has one element");
  SG_CHECK_OK(sg_tensor_fill(&t, 42.0));
  SG_CHECK(*(int32_t *)t.data == 42, "scalar fill");
  sg_tensor_free(&t);
  const int64_t e[2] = {3, 0};
  SG_CHECK_OK(sg_tensor_alloc(&t, SG_DTYPE_F32, sg_device_host(), 2, e));
  SG_CHECK(sg_tensor_numel(&t) == 0 && !t.data, "empty");
  SG_CHECK_OK(sg_tensor_fill(&t, 1.0));
  sg_tensor_free(&t);

  /* errors */
  const int64_t bad[2] = {3, -1};
  SG_CHECK_STATUS(sg_tensor_alloc(&t, SG_DTYPE_F32, sg_device_host(), 2, bad),
                  SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_tensor_alloc(&t, SG_DTYPE_F32, sg_device_host(), 6, shape),
                  SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_tensor_alloc(&t, (sg_dtype)99, sg_device_host(), 2, shape),
                  SG_ERR_INVALID_ARG);
  sg_tensor w = sg_tensor_wrap(NULL, SG_DTYPE_F32, sg_device_host(), 7, shape);
  SG_CHECK(w.ndim == -1, "invalid wrap is marked");
  SG_CHECK_STATUS(sg_tensor_fill(&w, 0.0), SG_ERR_INVALID_ARG);
}

/* Every dtype: views of every box shape class, copied into a contiguous
 * buffer and back into a strided view of a bigger tensor, checked element by
 * element against index arithmetic. */
static void test_views_and_copy(sg_dtype dt) {
  const size_t es = sg_dtype_size(dt);
  const int64_t shape[4] = {6, 5, 4, 7};
  sg_tensor a, b;
  SG_CHECK_OK(sg_tensor_alloc(&a, dt, sg_device_host(), 4, shape));
  SG_CHECK_OK(sg_tensor_alloc(&b, dt, sg_device_host(), 4, shape));
  const int64_t n = sg_tensor_numel(&a);
  for (int64_t i = 0; i < n; ++i)
    for (size_t k = 0; k < es; ++k)
      ((unsigned char *)a.data)[i * (int64_t)es + (int64_t)k] =
          (unsigned char)(i * 7 + (int64_t)k * 31 + 1);
  const int64_t boxes[][8] = {
      {0, 0, 0, 0, 6, 5, 4, 7}, /* whole */
      {1, 0, 0, 0, 3, 5, 4, 7}, /* outer slab: contiguous */
      {0, 1, 0, 0, 6, 3, 4, 7}, /* runs of 28 */
      {2, 1, 1, 2, 3, 3, 2, 4}, /* general */
      {0, 0, 0, 3, 6, 5, 4, 1}, /* one column: stride 7 */
      {5, 4, 3, 6, 1, 1, 1, 1}, /* one element */
      {2, 2, 2, 2, 0, 3, 1, 1}, /* empty */
  };
  for (size_t k = 0; k < sizeof boxes / sizeof boxes[0]; ++k) {
    const int64_t *o = boxes[k], *l = boxes[k] + 4;
    sg_tensor va, vb;
    SG_CHECK_OK(sg_tensor_view(&a, o, l, &va));
    SG_CHECK(!va.owns, "view does not own");
    int64_t cnt = l[0] * l[1] * l[2] * l[3];
    unsigned char *buf = malloc((size_t)(cnt > 0 ? cnt : 1) * es);
    sg_tensor pk = sg_tensor_wrap(buf, dt, sg_device_host(), 4, l);
    SG_CHECK_OK(sg_tensor_copy(&pk, &va)); /* pack */
    int64_t idx[4] = {0, 0, 0, 0}, bad = 0, j = 0;
    if (cnt > 0) do {
        int64_t g[4] = {o[0] + idx[0], o[1] + idx[1], o[2] + idx[2],
                        o[3] + idx[3]};
        if (memcmp(buf + j * (int64_t)es,
                   (unsigned char *)a.data + off_of(&a, g) * (int64_t)es, es))
          ++bad;
        ++j;
      } while (next_index(4, l, idx));
    SG_CHECK(bad == 0 && j == cnt, "%s box %zu: %lld packed elements wrong",
             sg_dtype_name(dt), k, (long long)bad);
    /* unpack into b at the same box and compare the box; the rest of b stays
     * as it was (a guard value) */
    SG_CHECK_OK(sg_tensor_fill(&b, 3.0));
    SG_CHECK_OK(sg_tensor_view(&b, o, l, &vb));
    SG_CHECK_OK(sg_tensor_copy(&vb, &pk));
    sg_tensor guard;
    const int64_t one = 1;
    SG_CHECK_OK(sg_tensor_alloc(&guard, dt, sg_device_host(), 1, &one));
    SG_CHECK_OK(sg_tensor_fill(&guard, 3.0));
    int64_t all[4] = {0, 0, 0, 0};
    bad = 0;
    do {
      int in = 1;
      for (int d = 0; d < 4; ++d) in &= all[d] >= o[d] && all[d] < o[d] + l[d];
      const unsigned char *pb = (unsigned char *)b.data +
                                off_of(&b, all) * (int64_t)es;
      const unsigned char *want = in ? (unsigned char *)a.data +
                                           off_of(&a, all) * (int64_t)es
                                     : (unsigned char *)guard.data;
      if (memcmp(pb, want, es)) ++bad;
    } while (next_index(4, shape, all));
    SG_CHECK(bad == 0, "%s box %zu: %lld unpacked elements wrong",
             sg_dtype_name(dt), k, (long long)bad);
    sg_tensor_free(&guard);
    free(buf);
  }
  /* strided to strided (both views non-contiguous) */
  {
    const int64_t o1[4] = {1, 1, 0, 1}, o2[4] = {2, 0, 1, 0},
                  l[4] = {3, 4, 3, 5};
    sg_tensor va, vb;
    SG_CHECK_OK(sg_tensor_view(&a, o1, l, &va));
    SG_CHECK_OK(sg_tensor_view(&b, o2, l, &vb));
    SG_CHECK_OK(sg_tensor_copy(&vb, &va));
    int64_t idx[4] = {0, 0, 0, 0}, bad = 0;
    do {
      int64_t g1[4], g2[4];
      for (int d = 0; d < 4; ++d) {
        g1[d] = o1[d] + idx[d];
        g2[d] = o2[d] + idx[d];
      }
      if (memcmp((unsigned char *)b.data + off_of(&b, g2) * (int64_t)es,
                 (unsigned char *)a.data + off_of(&a, g1) * (int64_t)es, es))
        ++bad;
    } while (next_index(4, l, idx));
    SG_CHECK(bad == 0, "%s strided->strided: %lld wrong", sg_dtype_name(dt),
             (long long)bad);
  }
  /* errors: out-of-range box, shape and dtype mismatch */
  {
    const int64_t o[4] = {5, 0, 0, 0}, l[4] = {2, 1, 1, 1},
                  neg[4] = {-1, 0, 0, 0};
    sg_tensor v;
    SG_CHECK_STATUS(sg_tensor_view(&a, o, l, &v), SG_ERR_SHAPE);
    SG_CHECK_STATUS(sg_tensor_view(&a, neg, l, &v), SG_ERR_SHAPE);
    const int64_t ok[4] = {0, 0, 0, 0};
    SG_CHECK_OK(sg_tensor_view(&a, ok, l, &v));
    SG_CHECK_STATUS(sg_tensor_copy(&b, &v), SG_ERR_SHAPE);
    sg_tensor c;
    SG_CHECK_OK(
        sg_tensor_alloc(&c, dt == SG_DTYPE_F64 ? SG_DTYPE_F32 : SG_DTYPE_F64,
                        sg_device_host(), 4, shape));
    SG_CHECK_STATUS(sg_tensor_copy(&b, &c), SG_ERR_INVALID_ARG);
    sg_tensor_free(&c);
  }
  sg_tensor_free(&a);
  sg_tensor_free(&b);
}

static void test_fill(void) {
  const int64_t shape[3] = {4, 6, 5};
  const int64_t o[3] = {1, 2, 1}, l[3] = {2, 3, 3};
  sg_dtype dts[5] = {SG_DTYPE_F32, SG_DTYPE_F64, SG_DTYPE_I32, SG_DTYPE_I64,
                     SG_DTYPE_BF16};
  for (int k = 0; k < 5; ++k) {
    sg_tensor t, v;
    SG_CHECK_OK(sg_tensor_alloc(&t, dts[k], sg_device_host(), 3, shape));
    SG_CHECK_OK(sg_tensor_view(&t, o, l, &v));
    SG_CHECK_OK(sg_tensor_fill(&v, 2.5));
    int64_t idx[3] = {0, 0, 0}, bad = 0;
    do {
      int in = 1;
      for (int d = 0; d < 3; ++d) in &= idx[d] >= o[d] && idx[d] < o[d] + l[d];
      const int64_t i = off_of(&t, idx);
      double x = 0;
      switch (dts[k]) {
      case SG_DTYPE_F32: x = ((float *)t.data)[i]; break;
      case SG_DTYPE_F64: x = ((double *)t.data)[i]; break;
      case SG_DTYPE_I32: x = ((int32_t *)t.data)[i]; break;
      case SG_DTYPE_I64: x = (double)((int64_t *)t.data)[i]; break;
      default: x = sg_bf16_to_f32(((sg_bf16 *)t.data)[i]);
      }
      const double want = in ? (dts[k] == SG_DTYPE_I32 || dts[k] == SG_DTYPE_I64
                                    ? 2.0
                                    : 2.5)
                             : 0.0;
      if (x != want) ++bad;
    } while (next_index(3, shape, idx));
    SG_CHECK(bad == 0, "fill %s: %lld wrong", sg_dtype_name(dts[k]),
             (long long)bad);
    sg_tensor_free(&t);
  }
}

/* A copy big enough to take the threaded path, compared with memcmp. */
static void test_large_copy(void) {
  const int64_t shape[3] = {64, 130, 70};
  const int64_t o[3] = {3, 5, 7}, l[3] = {60, 120, 61};
  sg_tensor a, b;
  SG_CHECK_OK(sg_tensor_alloc(&a, SG_DTYPE_F32, sg_device_host(), 3, shape));
  SG_CHECK_OK(sg_tensor_alloc(&b, SG_DTYPE_F32, sg_device_host(), 3, l));
  for (int64_t i = 0; i < sg_tensor_numel(&a); ++i)
    ((float *)a.data)[i] = (float)i;
  sg_tensor v;
  SG_CHECK_OK(sg_tensor_view(&a, o, l, &v));
  SG_CHECK_OK(sg_tensor_copy(&b, &v));
  int64_t bad = 0;
  for (int64_t i = 0; i < l[0]; ++i)
    for (int64_t j = 0; j < l[1]; ++j)
      bad += memcmp((float *)b.data + (i * l[1] + j) * l[2],
                    (float *)a.data +
                        ((o[0] + i) * shape[1] + o[1] + j) * shape[2] + o[2],
                    (size_t)l[2] * 4) != 0;
  SG_CHECK(bad == 0, "large copy: %lld rows wrong", (long long)bad);
  sg_tensor_free(&a);
  sg_tensor_free(&b);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  test_alloc_and_accounting();
  for (int dt = 0; dt < SG_DTYPE_COUNT; ++dt) test_views_and_copy((sg_dtype)dt);
  test_fill();
  test_large_copy();
  return sg_test_finish();
}
