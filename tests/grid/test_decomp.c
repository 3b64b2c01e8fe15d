/* Domain decomposition: balanced splits, shard tables, halos of window ops by
 * the output-partition rule (checked against a brute-force derivation),
 * thin-shard errors. Pure functions: no MPI communication. */
#include "sg_decomp.h"
#include "sg_test.h"

#include <stdlib.h>
#include <string.h>

static void test_split(void) {
  int64_t sizes[4], offs[4];
  SG_CHECK_OK(sg_split_table(721, 4, 0, sizes, offs));
  SG_CHECK(sizes[0] == 181 && sizes[1] == 180 && sizes[2] == 180 &&
               sizes[3] == 180,
           "721 over 4: %lld %lld %lld %lld", (long long)sizes[0],
           (long long)sizes[1], (long long)sizes[2], (long long)sizes[3]);
  SG_CHECK(offs[0] == 0 && offs[1] == 181 && offs[2] == 361 && offs[3] == 541,
           "721 over 4 offsets");
  SG_CHECK_OK(sg_split_table(10, 4, 0, sizes, offs));
  SG_CHECK(sizes[0] == 3 && sizes[1] == 3 && sizes[2] == 2 && sizes[3] == 2,
           "10 over 4");
  /* every split: sizes sum to n, offsets contiguous, owner consistent */
  for (int64_t n = 0; n <= 40; ++n) {
    for (int p = 1; p <= 9; ++p) {
      int64_t sum = 0;
      for (int r = 0; r < p; ++r) {
        int64_t s = sg_split_size(n, p, r), o = sg_split_offset(n, p, r);
        SG_CHECK(o == sum, "n=%lld p=%d r=%d offset %lld != %lld", (long long)n,
                 p, r, (long long)o, (long long)sum);
        SG_CHECK(s == n / p || s == n / p + 1, "unbalanced");
        for (int64_t i = o; i < o + s; ++i)
          SG_CHECK(sg_split_owner(n, p, i) == r, "owner of %lld", (long long)i);
        sum += s;
      }
      SG_CHECK(sum == n, "sizes sum");
    }
  }
  SG_CHECK_STATUS(sg_split_table(3, 4, 0, sizes, offs), SG_ERR_SHAPE);
  SG_CHECK(strstr(sg_last_error(), "empty") != NULL, "message: %s",
           sg_last_error());
  SG_CHECK_OK(sg_split_table(3, 4, 1, sizes, offs));
  SG_CHECK(sizes[3] == 0 && offs[3] == 3, "empty allowed");
}

static void test_issue_case(void) {
  /* N=10, P=4, k=s=2, p=0: exchanged halos [[0,1],[0,0],[0,0],[0,0]]; rank 1
   * holds one input it does not need (signed lower halo -1). */
  sg_window w = SG_WINDOW_SYM(2, 2, 0, 1);
  int64_t halo[8], width[8], osz[4], ooff[4];
  SG_CHECK_OK(sg_window_halos(10, 4, w, halo, osz, ooff));
  sg_halo_widths(4, halo, width);
  const int64_t want_w[8] = {0, 1, 0, 0, 0, 0, 0, 0};
  const int64_t want_h[8] = {0, 1, -1, 0, 0, 0, 0, 0};
  SG_CHECK(memcmp(width, want_w, sizeof want_w) == 0,
           "widths [[%lld,%lld],[%lld,%lld],[%lld,%lld],[%lld,%lld]]",
           (long long)width[0], (long long)width[1], (long long)width[2],
           (long long)width[3], (long long)width[4], (long long)width[5],
           (long long)width[6], (long long)width[7]);
  SG_CHECK(memcmp(halo, want_h, sizeof want_h) == 0, "signed halos");
  SG_CHECK(osz[0] == 2 && osz[1] == 1 && osz[2] == 1 && osz[3] == 1,
           "output shard sizes");
  SG_CHECK(ooff[0] == 0 && ooff[1] == 2 && ooff[2] == 3 && ooff[3] == 4,
           "output shard offsets");
  int64_t sizes[4];
  SG_CHECK_OK(sg_split_table(10, 4, 0, sizes, NULL));
  SG_CHECK_OK(sg_halo_check(0, 4, sizes, SG_BOUNDARY_ZERO, halo));

  /* 3-wide conv, padding 1 on 17 over 3: halos 1 everywhere */
  sg_window c3 = SG_WINDOW_SYM(3, 1, 1, 1);
  int64_t h3[6];
  SG_CHECK_OK(sg_window_halos(17, 3, c3, h3, osz, NULL));
  for (int i = 0; i < 6; ++i) SG_CHECK(h3[i] == 1, "conv3 halo %d", i);
  SG_CHECK(osz[0] == 6 && osz[1] == 6 && osz[2] == 5, "conv3 out sizes");
  /* identity op: no halo */
  sg_window id = SG_WINDOW_SYM(1, 1, 0, 1);
  SG_CHECK_OK(sg_window_halos(17, 3, id, h3, NULL, NULL));
  for (int i = 0; i < 6; ++i) SG_CHECK(h3[i] == 0, "identity halo %d", i);
}

/* Brute force: for each output y, the inputs its window touches; the union
 * over a part's outputs must be exactly the needed range implied by its
 * halos, and the parts' output shards tile [0, n_out). */
static void test_brute_force(void) {
  int cases = 0;
  for (int64_t n = 4; n <= 30; n += 3) {
    for (int p = 1; p <= 4; ++p) {
      for (int64_t k = 1; k <= 4; ++k)
        for (int64_t s = 1; s <= 3; ++s)
          for (int64_t pad = 0; pad <= 2; ++pad)
            for (int64_t d = 1; d <= 2; ++d) {
              sg_window w = SG_WINDOW_SYM(k, s, pad, d);
              int64_t n_out;
              if (sg_window_output_size(w, n, &n_out) != SG_OK) continue;
              if (n_out < p) continue;
              int64_t halo[8], osz[4], ooff[4];
              SG_CHECK_OK(sg_window_halos(n, p, w, halo, osz, ooff));
              int64_t tiled = 0;
              for (int r = 0; r < p; ++r) {
                SG_CHECK(ooff[r] == tiled, "output tiling");
                tiled += osz[r];
                int64_t lo = INT64_MAX, hi = INT64_MIN;
                for (int64_t y = ooff[r]; y < ooff[r] + osz[r]; ++y)
                  for (int64_t t = 0; t < k; ++t) {
                    int64_t x = y * s - pad + t * d;
                    if (x < lo) lo = x;
                    if (x > hi) hi = x;
                  }
                int64_t x0 = sg_split_offset(n, p, r);
                int64_t x1 = x0 + sg_split_size(n, p, r) - 1;
                SG_CHECK(x0 - halo[2 * r] == lo && x1 + halo[2 * r + 1] == hi,
                         "n=%lld p=%d k=%lld s=%lld p=%lld d=%lld r=%d",
                         (long long)n, p, (long long)k, (long long)s,
                         (long long)pad, (long long)d, r);
              }
              SG_CHECK(tiled == n_out, "output tiles n_out");
              ++cases;
            }
    }
  }
  SG_CHECK(cases > 500, "brute force covered %d cases", cases);
  /* output size formula (PyTorch's) */
  int64_t n_out;
  sg_window w = SG_WINDOW_SYM(3, 2, 1, 2);
  SG_CHECK_OK(sg_window_output_size(w, 10, &n_out));
  SG_CHECK(n_out == 4, "output size %lld", (long long)n_out);
  sg_window big = SG_WINDOW_SYM(5, 1, 0, 3);
  SG_CHECK_STATUS(sg_window_output_size(big, 10, &n_out), SG_ERR_SHAPE);
  sg_window bad = SG_WINDOW_SYM(-1, 1, 0, 1); /* 0 would mean 1 */
  SG_CHECK_STATUS(sg_window_output_size(bad, 10, &n_out), SG_ERR_INVALID_ARG);
}

static void test_thin(void) {
  /* 7 cells over 4 parts (2,2,2,1) with a 5-wide window (halo 2): the last
   * part (1 cell) would have to supply 2 cells to part 2. */
  int64_t sizes[4], halo[8];
  SG_CHECK_OK(sg_split_table(7, 4, 0, sizes, NULL));
  sg_window w = SG_WINDOW_SYM(5, 1, 2, 1);
  SG_CHECK_OK(sg_window_halos(7, 4, w, halo, NULL, NULL));
  SG_CHECK_STATUS(sg_halo_check(1, 4, sizes, SG_BOUNDARY_ZERO, halo),
                  SG_ERR_HALO);
  const char *msg = sg_last_error();
  SG_CHECK(strstr(msg, "dim 1") && strstr(msg, "1 cells") &&
               strstr(msg, "width 2"),
           "thin message: %s", msg);
  /* periodic wrap: part 0 needs 2 cells from part 3 too */
  SG_CHECK_STATUS(sg_halo_check(0, 4, sizes, SG_BOUNDARY_PERIODIC, halo),
                  SG_ERR_HALO);
  /* 8 cells over 4 (2 each), halo 2: fine for zero, periodic, replicate */
  SG_CHECK_OK(sg_split_table(8, 4, 0, sizes, NULL));
  SG_CHECK_OK(sg_window_halos(8, 4, w, halo, NULL, NULL));
  SG_CHECK_OK(sg_halo_check(0, 4, sizes, SG_BOUNDARY_ZERO, halo));
  SG_CHECK_OK(sg_halo_check(0, 4, sizes, SG_BOUNDARY_PERIODIC, halo));
  SG_CHECK_OK(sg_halo_check(0, 4, sizes, SG_BOUNDARY_REPLICATE, halo));
  /* reflect at the edge needs cells 0..2 of a 2-cell shard */
  SG_CHECK_STATUS(sg_halo_check(0, 4, sizes, SG_BOUNDARY_REFLECT, halo),
                  SG_ERR_HALO);
  SG_CHECK(strstr(sg_last_error(), "reflect") != NULL, "reflect message: %s",
           sg_last_error());
  /* one part, periodic: local wrap needs h <= n */
  int64_t one[1] = {2}, h1[2] = {3, 0};
  SG_CHECK_STATUS(sg_halo_check(2, 1, one, SG_BOUNDARY_PERIODIC, h1),
                  SG_ERR_HALO);
  h1[0] = 2;
  SG_CHECK_OK(sg_halo_check(2, 1, one, SG_BOUNDARY_PERIODIC, h1));
  /* a needed range that does not touch the own shard */
  int64_t two[2] = {2, 2}, hneg[4] = {-3, 3, 0, 0};
  SG_CHECK_STATUS(sg_halo_check(0, 2, two, SG_BOUNDARY_ZERO, hneg),
                  SG_ERR_HALO);
}

static void test_decomp_nd(void) {
  sg_decomp_desc desc = {3,
                         {17, 23, 9},
                         {0, 1, -1},
                         {SG_BOUNDARY_ZERO, SG_BOUNDARY_PERIODIC,
                          SG_BOUNDARY_REFLECT},
                         0};
  int parts[3] = {3, 4, 1}, coords[3] = {2, 1, 0};
  sg_decomp_t dec = NULL;
  SG_CHECK_OK(sg_decomp_create_parts(&desc, parts, coords, &dec));
  if (!dec) return;
  int64_t shape[3], off[3];
  sg_decomp_shard(dec, NULL, shape, off);
  SG_CHECK(shape[0] == 5 && shape[1] == 6 && shape[2] == 9, "local shape");
  SG_CHECK(off[0] == 12 && off[1] == 6 && off[2] == 0, "local offset");
  SG_CHECK(sg_decomp_local_count(dec) == 5 * 6 * 9, "local count");
  /* the shard table covers the grid exactly once */
  int64_t total = 0;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 4; ++b) {
      int c[3] = {a, b, 0};
      sg_decomp_shard(dec, c, shape, NULL);
      total += shape[0] * shape[1] * shape[2];
    }
  SG_CHECK(total == 17 * 23 * 9, "table covers the grid");
  sg_window w[3] = {SG_WINDOW_SYM(3, 1, 1, 1), SG_WINDOW_SYM(5, 1, 2, 1),
                    SG_WINDOW_SYM(3, 1, 1, 1)};
  int64_t width[3][2];
  SG_CHECK_OK(sg_decomp_local_halo(dec, w, width));
  SG_CHECK(width[0][0] == 1 && width[0][1] == 1 && width[1][0] == 2 &&
               width[1][1] == 2 && width[2][0] == 1 && width[2][1] == 1,
           "local widths");
  /* too-wide window along dim 1 (shards of 5 and 6 cells) */
  sg_window wide[3] = {SG_WINDOW_SYM(3, 1, 1, 1), SG_WINDOW_SYM(15, 1, 7, 1),
                       SG_WINDOW_SYM(3, 1, 1, 1)};
  SG_CHECK_STATUS(sg_decomp_local_halo(dec, wide, width), SG_ERR_HALO);
  SG_CHECK(strstr(sg_last_error(), "dim 1") != NULL, "dim named: %s",
           sg_last_error());
  sg_decomp_destroy(&dec);
  SG_CHECK(dec == NULL, "destroy sets NULL");
  sg_decomp_destroy(NULL);

  /* empty shards */
  sg_decomp_desc small = {1, {3}, {0}, {SG_BOUNDARY_ZERO}, 0};
  int p4[1] = {4};
  SG_CHECK_STATUS(sg_decomp_create_parts(&small, p4, NULL, &dec), SG_ERR_SHAPE);
  SG_CHECK(dec == NULL, "no handle on failure");
  small.allow_empty = 1;
  SG_CHECK_OK(sg_decomp_create_parts(&small, p4, NULL, &dec));
  sg_decomp_destroy(&dec);

  sg_boundary b;
  SG_CHECK_OK(sg_boundary_parse("reflect", &b));
  SG_CHECK(b == SG_BOUNDARY_REFLECT, "parse");
  SG_CHECK_STATUS(sg_boundary_parse("mirror", &b), SG_ERR_INVALID_ARG);
  SG_CHECK(strcmp(sg_boundary_name(SG_BOUNDARY_PERIODIC), "periodic") == 0,
           "name");
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  test_split();
  test_issue_case();
  test_brute_force();
  test_thin();
  test_decomp_nd();
  return sg_test_finish();
}
