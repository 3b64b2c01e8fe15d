/* Dataset helpers: Welford/Chan moments merged over ranks equal a one-pass
 * serial computation; per-channel statistics of real data (coads SST and
 * AIRT, cos(lat) weighted, land masked) on 1-4 ranks equal a serial
 * two-pass reference; statistics files round-trip; the sample order depends
 * only on (seed, epoch) and data ranks get disjoint batch slices; a dataset
 * shorter than one sample is a clear error; sg_nc_read_lat reads the lat
 * dim's coordinate (after dim_map), or finds none. */
#include "sg_dataset.h"
#include "sg_nc.h"
#include "sg_rng.h"
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COADS "/usr/share/ferret-vis/data/coads_climatology.cdf"

static void test_moments(void) {
  enum { N = 10007 };
  float *x = malloc(N * sizeof(float));
  double *w = malloc(N * sizeof(double));
  sg_rng_fill(SG_RNG_NORMAL, 3.0, 2.0, 5, 1, 0, N, SG_DTYPE_F32, x);
  sg_rng_fill(SG_RNG_UNIFORM, 0.1, 1.0, 5, 2, 0, N, SG_DTYPE_F64, w);
  /* reference: two-pass weighted */
  double W = 0, S = 0, M2 = 0;
  for (int i = 0; i < N; ++i) W += w[i], S += w[i] * x[i];
  double mean = S / W;
  for (int i = 0; i < N; ++i) M2 += w[i] * (x[i] - mean) * (x[i] - mean);
  /* this rank's balanced part, merged over ranks */
  int64_t q = N / sg_test_size, r = N % sg_test_size;
  int64_t a = sg_test_rank * q + (sg_test_rank < r ? sg_test_rank : r);
  int64_t c = q + (sg_test_rank < r ? 1 : 0);
  sg_ds_moments m = {0, 0, 0, 0};
  sg_ds_moments_add(&m, x + a, w + a, NULL, c);
  SG_CHECK_OK(sg_ds_moments_allmerge(MPI_COMM_WORLD, 1, &m));
  SG_CHECK(fabs(m.mean - mean) <= 1e-12 * fabs(mean) &&
               fabs(m.m2 - M2) <= 1e-10 * M2 && m.n == N,
           "merged mean %.17g vs %.17g, M2 %.17g vs %.17g", m.mean, mean, m.m2,
           M2);
  /* the same bits on every rank */
  double all[2] = {m.mean, m.m2}, mx[2], mn[2];
  MPI_Allreduce(all, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(all, mn, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  SG_CHECK(mx[0] == mn[0] && mx[1] == mn[1], "ranks disagree");
  free(x);
  free(w);
}

static void test_stats_coads(void) {
  if (access(COADS, R_OK) != 0) {
    if (sg_test_rank == 0)
      printf("ferret-datasets missing: statistics on real data not tested\n");
    return;
  }
  const char *map = "COADSX=lon,COADSY=lat,TIME=time";
  const char *names[2] = {"SST", "AIRT"};
  sg_ds_stats st;
  SG_CHECK_OK(
      sg_ds_stats_compute(MPI_COMM_WORLD, COADS, map, 2, names, 1, &st));
  /* serial two-pass reference */
  sg_nc_t f = NULL;
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  oo.backend = SG_NC_BACKEND_SERIAL;
  oo.dim_map = map;
  SG_REQUIRE_OK(sg_nc_open(MPI_COMM_SELF, COADS, &oo, &f));
  double lat[90];
  sg_nc_var_info li;
  SG_REQUIRE_OK(sg_nc_inq_var(f, "COADSY", &li));
  int64_t nl = 90;
  sg_nc_shard ls;
  sg_nc_shard_split(1, &nl, SG_DTYPE_F64, 0, 1, 0, &ls);
  SG_CHECK_OK(sg_nc_read(f, li.varid, &ls, NULL, lat, NULL));
  { /* sg_nc_read_lat: the coordinate of the dim mapped to lat */
    double lat2[90];
    int found = 0;
    SG_CHECK_OK(sg_nc_read_lat(f, 90, lat2, &found));
    SG_CHECK(found && !memcmp(lat, lat2, sizeof lat),
             "sg_nc_read_lat: found %d, not the COADSY values", found);
    SG_CHECK_STATUS(sg_nc_read_lat(f, 89, lat2, &found), SG_ERR_SHAPE);
    sg_nc_t g = NULL; /* without dim_map the file has no "lat" */
    oo.dim_map = NULL;
    SG_REQUIRE_OK(sg_nc_open(MPI_COMM_SELF, COADS, &oo, &g));
    SG_CHECK_OK(sg_nc_read_lat(g, 90, lat2, &found));
    SG_CHECK(!found, "sg_nc_read_lat found a lat without dim_map");
    sg_nc_close(&g);
  }
  for (int c = 0; c < 2; ++c) {
    sg_nc_var_info vi;
    SG_REQUIRE_OK(sg_nc_inq_var(f, names[c], &vi));
    int64_t n = vi.shape[0] * vi.shape[1] * vi.shape[2];
    float *x = malloc((size_t)n * sizeof(float));
    uint8_t *mk = malloc((size_t)n);
    sg_nc_shard s;
    sg_nc_shard_split(3, vi.shape, SG_DTYPE_F32, 0, 1, 0, &s);
    SG_CHECK_OK(sg_nc_read(f, vi.varid, &s, NULL, x, mk));
    double W = 0, S = 0, M2 = 0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!mk[i]) continue;
      double wi = cos(lat[(i / 180) % 90] * 3.14159265358979323846 / 180.0);
      W += wi, S += wi * x[i], ++cnt;
    }
    double mean = S / W;
    for (int64_t i = 0; i < n; ++i) {
      if (!mk[i]) continue;
      double wi = cos(lat[(i / 180) % 90] * 3.14159265358979323846 / 180.0);
      M2 += wi * (x[i] - mean) * (x[i] - mean);
    }
    double sd = sqrt(M2 / W);
    SG_CHECK(fabs(st.mean[c] - mean) <= 1e-10 * fabs(mean) &&
                 fabs(st.std[c] - sd) <= 1e-10 * sd && st.count[c] == cnt,
             "%s: mean %.15g vs %.15g, std %.15g vs %.15g, count %lld vs %lld",
             names[c], st.mean[c], mean, st.std[c], sd, (long long)st.count[c],
             (long long)cnt);
    SG_CHECK(cnt < n, "%s: nothing masked", names[c]);
    free(x);
    free(mk);
  }
  SG_CHECK_OK(sg_nc_close(&f));
  /* save and load */
  char path[64];
  snprintf(path, sizeof path, "stats_np%d.nc", sg_test_size);
  SG_CHECK_OK(sg_ds_stats_save(MPI_COMM_WORLD, path, &st));
  sg_ds_stats back;
  SG_CHECK_OK(sg_ds_stats_load(MPI_COMM_WORLD, path, &back));
  SG_CHECK(back.nchan == 2 && back.area_weighted == 1 &&
               !memcmp(back.mean, st.mean, 2 * sizeof(double)) &&
               !memcmp(back.std, st.std, 2 * sizeof(double)) &&
               back.count[0] == st.count[0] && !strcmp(back.names[1], "AIRT"),
           "statistics file round trip");
  MPI_Barrier(MPI_COMM_WORLD);
  if (sg_test_rank == 0) remove(path);
done:
  sg_nc_close(&f);
}

static void test_samples(void) {
  int64_t ns = 0;
  SG_CHECK_STATUS(sg_ds_num_samples(3, 2, 2, &ns), SG_ERR_SHAPE);
  SG_CHECK(strstr(sg_last_error(), "shorter than one sample") != NULL,
           "message: %s", sg_last_error());
  SG_CHECK_OK(sg_ds_num_samples(12, 2, 1, &ns));
  SG_CHECK(ns == 10, "samples %lld", (long long)ns);
  enum { N = 101 };
  int64_t o[N], o2[N], all[N];
  SG_CHECK_OK(sg_ds_sample_order(42, 3, N, o));
  SG_CHECK_OK(sg_ds_sample_order(42, 4, N, o2));
  int seen[N] = {0}, perm = 1, same = 1;
  for (int i = 0; i < N; ++i) {
    if (o[i] < 0 || o[i] >= N || seen[o[i]]++) perm = 0;
    same &= o[i] == o2[i];
  }
  SG_CHECK(perm, "not a permutation");
  SG_CHECK(!same, "epochs 3 and 4 give the same order");
  MPI_Allreduce(o, all, N, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  SG_CHECK(memcmp(all, o, sizeof o) == 0, "order differs between ranks");
  /* data ranks: disjoint slices whose union is the global batch */
  int64_t batch = 10, step = 3, got[N], cnt = 0, mark[N] = {0};
  for (int d = 0; d < sg_test_size; ++d) {
    SG_CHECK_OK(
        sg_ds_batch_samples(o, N, batch, step, d, sg_test_size, got, &cnt));
    for (int64_t i = 0; i < cnt; ++i) mark[got[i]]++;
  }
  int ok = 1;
  for (int64_t i = 0; i < batch; ++i) ok &= mark[o[step * batch + i]] == 1;
  int64_t tot = 0;
  for (int i = 0; i < N; ++i) tot += mark[i];
  SG_CHECK(ok && tot == batch, "batch slices not a partition");
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  test_moments();
  test_samples();
  if (sg_nc_backend_available(SG_NC_BACKEND_AUTO, 1) &&
      sg_nc_backend_available(SG_NC_BACKEND_SERIAL, 0))
    test_stats_coads();
  return sg_test_finish();
}
