/* Host pack kernels against the shared per-element index arithmetic
 * (sg_halo_box_offset, what a CUDA thread computes): boxes with count-1
 * dims, contiguous dims that merge, strided rows, every element size, and
 * the add kernels in f32/f64/i32/i64/bf16. No communication. */
#include "sg_halo_pack.h"
#include "sg_test.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rs = 88172645463325252ull;
static int64_t rnd(int64_t n) {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (int64_t)(rs % (uint64_t)n);
}

/* A random box inside a random 4-D block (lead, d0, d1, d2), packed or
 * with the lead innermost (channels-last). */
static sg_halo_box random_box(int64_t *block_count) {
  int64_t ext[4], cnt[4], st[4], org[4];
  for (int k = 0; k < 4; ++k) {
    ext[k] = 1 + rnd(6);
    cnt[k] = 1 + rnd(ext[k]);
    org[k] = rnd(ext[k] - cnt[k] + 1);
  }
  if (rnd(2)) { /* packed, last fastest */
    st[3] = 1;
    for (int k = 2; k >= 0; --k) st[k] = st[k + 1] * ext[k + 1];
  } else { /* lead innermost */
    st[0] = 1;
    st[3] = ext[0];
    st[2] = st[3] * ext[3];
    st[1] = st[2] * ext[2];
  }
  sg_halo_box b;
  b.base = 0;
  for (int k = 0; k < 4; ++k) {
    b.count[k] = cnt[k];
    b.stride[k] = st[k];
    b.base += org[k] * st[k];
  }
  *block_count = ext[0] * ext[1] * ext[2] * ext[3];
  return b;
}

static void test_simplify(void) {
  sg_halo_box b = {{4, 2, 16, 1}, {32, 16, 1, 0}, 5};
  sg_halo_box s = sg_halo_box_simplify(b, 1);
  SG_CHECK(s.count[3] == 4 * 2 * 16 && s.stride[3] == 1 && s.count[0] == 1 &&
               s.count[1] == 1 && s.count[2] == 1 && s.base == 5,
           "contiguous box merges into one row: %lld", (long long)s.count[3]);
  sg_halo_box q = sg_halo_box_simplify(b, 0);
  SG_CHECK(q.count[3] == 16 && q.count[2] == 2 && q.count[1] == 4,
           "squeeze only drops count-1 dims");
  for (int64_t e = 0; e < sg_halo_box_size(&b); ++e)
    SG_CHECK(sg_halo_box_offset(&b, e) == sg_halo_box_offset(&s, e),
             "same offsets at %lld", (long long)e);
}

static void test_kernels(void) {
  const size_t sizes[4] = {1, 2, 4, 8};
  for (int it = 0; it < 400; ++it) {
    int64_t bc;
    sg_halo_box b = random_box(&bc);
    int64_t n = sg_halo_box_size(&b);
    size_t es = sizes[it % 4];
    unsigned char *blk = malloc((size_t)bc * es),
                  *ref = malloc((size_t)bc * es);
    unsigned char *buf = malloc((size_t)n * es), *want = malloc((size_t)n * es);
    for (int64_t i = 0; i < bc * (int64_t)es; ++i)
      blk[i] = (unsigned char)rnd(256);
    for (int64_t e = 0; e < n; ++e)
      memcpy(want + e * es, blk + sg_halo_box_offset(&b, e) * es, es);
    sg_halo_pack_host(blk, &b, es, buf);
    SG_CHECK(memcmp(buf, want, (size_t)n * es) == 0, "pack it %d", it);
    for (int64_t i = 0; i < n * (int64_t)es; ++i)
      buf[i] = (unsigned char)rnd(256);
    memcpy(ref, blk, (size_t)bc * es);
    for (int64_t e = 0; e < n; ++e)
      memcpy(ref + sg_halo_box_offset(&b, e) * es, buf + e * es, es);
    sg_halo_unpack_host(blk, &b, es, buf);
    SG_CHECK(memcmp(blk, ref, (size_t)bc * es) == 0, "unpack it %d", it);
    for (int64_t e = 0; e < n; ++e)
      memset(ref + sg_halo_box_offset(&b, e) * es, 0, es);
    sg_halo_zero_host(blk, &b, es);
    SG_CHECK(memcmp(blk, ref, (size_t)bc * es) == 0, "zero it %d", it);
    free(blk);
    free(ref);
    free(buf);
    free(want);
  }
}

/* The halo of the innermost dim: rows of 1-17 contiguous elements, one per
 * (lead, row) of the block (the short-row kernels for 1-4, 6, 8, 12, 16,
 * the general loop otherwise), small and above the OpenMP threshold, every
 * element size. */
static void test_short_rows(void) {
  const size_t sizes[4] = {1, 2, 4, 8};
  const int64_t shapes[2][2] = {{3, 7}, {4, 8200}}; /* (lead, rows) */
  for (int sh = 0; sh < 2; ++sh)
    for (int64_t w = 1; w <= 17; ++w)
      for (int k = 0; k < 4; ++k) {
        size_t es = sizes[k];
        int64_t lead = shapes[sh][0], rows = shapes[sh][1], cols = 19;
        int64_t bc = lead * rows * cols;
        /* the hi halo: columns [cols - w, cols) */
        sg_halo_box b = {{1, lead, rows, w},
                         {0, rows * cols, cols, 1},
                         cols - w};
        int64_t n = sg_halo_box_size(&b);
        unsigned char *blk = malloc((size_t)bc * es),
                      *ref = malloc((size_t)bc * es);
        unsigned char *buf = malloc((size_t)n * es),
                      *want = malloc((size_t)n * es);
        for (int64_t i = 0; i < bc * (int64_t)es; ++i)
          blk[i] = (unsigned char)rnd(256);
        for (int64_t e = 0; e < n; ++e)
          memcpy(want + e * es, blk + sg_halo_box_offset(&b, e) * es, es);
        sg_halo_pack_host(blk, &b, es, buf);
        SG_CHECK(memcmp(buf, want, (size_t)n * es) == 0,
                 "short pack rows %lld w %lld esize %zu", (long long)rows,
                 (long long)w, es);
        for (int64_t i = 0; i < n * (int64_t)es; ++i)
          buf[i] = (unsigned char)rnd(256);
        memcpy(ref, blk, (size_t)bc * es);
        for (int64_t e = 0; e < n; ++e)
          memcpy(ref + sg_halo_box_offset(&b, e) * es, buf + e * es, es);
        sg_halo_unpack_host(blk, &b, es, buf);
        SG_CHECK(memcmp(blk, ref, (size_t)bc * es) == 0,
                 "short unpack rows %lld w %lld esize %zu", (long long)rows,
                 (long long)w, es);
        for (int64_t e = 0; e < n; ++e)
          memset(ref + sg_halo_box_offset(&b, e) * es, 0, es);
        sg_halo_zero_host(blk, &b, es);
        SG_CHECK(memcmp(blk, ref, (size_t)bc * es) == 0,
                 "short zero rows %lld w %lld esize %zu", (long long)rows,
                 (long long)w, es);
        free(blk);
        free(ref);
        free(buf);
        free(want);
      }
}

static void test_add(void) {
  for (int it = 0; it < 100; ++it) {
    int64_t bc;
    sg_halo_box b = random_box(&bc);
    int64_t n = sg_halo_box_size(&b);
    double *bd = malloc((size_t)bc * sizeof *bd),
           *rd = malloc((size_t)bc * sizeof *rd);
    double *buf = malloc((size_t)n * sizeof *buf);
    float *bf = malloc((size_t)bc * sizeof *bf),
          *buff = malloc((size_t)n * sizeof *buff);
    int32_t *bi = malloc((size_t)bc * sizeof *bi),
            *bufi = malloc((size_t)n * sizeof *bufi);
    for (int64_t i = 0; i < bc; ++i)
      bd[i] = rd[i] = bf[i] = bi[i] = (int32_t)rnd(100);
    for (int64_t e = 0; e < n; ++e)
      buf[e] = buff[e] = bufi[e] = (int32_t)rnd(100);
    for (int64_t e = 0; e < n; ++e) rd[sg_halo_box_offset(&b, e)] += buf[e];
    SG_CHECK_OK(sg_halo_unpack_add_host(bd, &b, SG_DTYPE_F64, buf));
    SG_CHECK_OK(sg_halo_unpack_add_host(bf, &b, SG_DTYPE_F32, buff));
    SG_CHECK_OK(sg_halo_unpack_add_host(bi, &b, SG_DTYPE_I32, bufi));
    int bad = 0;
    for (int64_t i = 0; i < bc; ++i)
      bad += bd[i] != rd[i] || (double)bf[i] != rd[i] || (double)bi[i] != rd[i];
    SG_CHECK(bad == 0, "unpack_add it %d: %d wrong", it, bad);
    free(bd);
    free(rd);
    free(buf);
    free(bf);
    free(buff);
    free(bi);
    free(bufi);
  }
  sg_bf16 x = sg_bf16_from_f32(1.5f), y = sg_bf16_from_f32(2.25f);
  sg_halo_box one = {{1, 1, 1, 1}, {0, 0, 0, 1}, 0};
  SG_CHECK_OK(sg_halo_unpack_add_host(&x, &one, SG_DTYPE_BF16, &y));
  SG_CHECK(sg_bf16_to_f32(x) == 3.75f, "bf16 add %g", sg_bf16_to_f32(x));
  SG_CHECK_STATUS(sg_halo_unpack_add_host(&x, &one, SG_DTYPE_COUNT, &y),
                  SG_ERR_INVALID_ARG);
  /* move-add: dst += src, src = 0 */
  double m[4] = {1, 2, 10, 20};
  sg_halo_box d = {{1, 1, 1, 2}, {0, 0, 0, 1}, 0};
  sg_halo_box s = {{1, 1, 1, 2}, {0, 0, 0, 1}, 2};
  SG_CHECK_OK(sg_halo_move_add_host(m, &d, &s, SG_DTYPE_F64));
  SG_CHECK(m[0] == 11 && m[1] == 22 && m[2] == 0 && m[3] == 0, "move_add");
  double c[4] = {1, 2, 0, 0};
  sg_halo_copy_host(c, &s, &d, sizeof(double));
  SG_CHECK(c[2] == 1 && c[3] == 2, "copy");
  /* edge sources */
  SG_CHECK(sg_halo_edge_source(SG_BOUNDARY_REFLECT, 5, -2) == 2 &&
               sg_halo_edge_source(SG_BOUNDARY_REFLECT, 5, 6) == 2 &&
               sg_halo_edge_source(SG_BOUNDARY_REPLICATE, 5, 7) == 4 &&
               sg_halo_edge_source(SG_BOUNDARY_PERIODIC, 5, -1) == 4 &&
               sg_halo_edge_source(SG_BOUNDARY_PERIODIC, 5, 5) == 0 &&
               sg_halo_edge_source(SG_BOUNDARY_ZERO, 5, -1) == -1,
           "edge sources");
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  test_simplify();
  test_kernels();
  test_short_rows();
  test_add();
  return sg_test_finish();
}
