/* A field written on one decomposition and read on another is bit for bit
 * the original: every process grid that fits the rank count, 2-D and 3-D,
 * uneven splits and empty shards, with each backend built; files pass
 * ncdump -h and ncvalidator and carry the CF attributes. Also: appended
 * frames along the unlimited time dim, descending latitude flipped on read,
 * scale_factor/add_offset unpacking, and reserved header space (adding an
 * attribute later does not move the data). */
#include "io_test_util.h"
#include "sg_config.h"
#include "sg_device.h"
#include "sg_nc.h"
#include "sg_rng.h"
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef SG_NCDUMP
#define SG_NCDUMP ""
#endif
#ifndef SG_NCVALIDATOR
#define SG_NCVALIDATOR ""
#endif

typedef struct tcase {
  const char *name;
  int nd;
  int64_t shape[3];
  const char *dims[3];
  sg_dtype dt;
  int with_record; /* also a (time, lat, lon) record variable */
} tcase;

static const tcase cases[] = {
    {"f2d", 2, {17, 23}, {"lat", "lon"}, SG_DTYPE_F32, 1},
    {"f3d", 3, {3, 13, 11}, {"level", "lat", "lon"}, SG_DTYPE_F64, 0},
};

static void fill(const tcase *c, const sg_nc_shard *s, uint64_t stream,
                 void *buf) {
  if (sg_nc_shard_numel(s) == 0) return;
  sg_status st = sg_rng_fill_box(SG_RNG_NORMAL, 0.0, 1.0, 42, stream, s->ndims,
                                 s->global_shape, s->start, s->count, s->dtype,
                                 buf);
  SG_CHECK(st == SG_OK, "rng fill: %s", sg_last_error());
  (void)c;
}

static int run_tool(const char *tool, const char *args, const char *path) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s %s %s > /dev/null 2>&1", tool, args, path);
  return system(cmd);
}

/* Write case c on decomposition A with backend b into path. */
static void write_case(const tcase *c, const iot_decomp *A, sg_nc_backend b,
                       int variant, const char *path) {
  sg_nc_t f = NULL;
  void *buf = NULL, *rbuf = NULL;
  sg_nc_shard s, rs;
  iot_shard(A, sg_test_rank, c->shape, c->dt, &s);
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.backend = b;
  co.overwrite = 1;
  /* odd variants: netCDF-4 independent access and MPI-IO hints that force
   * the other ROMIO write paths, and PnetCDF's own writes instead of the
   * direct MPI-IO writes (which even variants take where the slabs are
   * contiguous runs: splits of the outermost dim) */
  if (variant % 2) {
    co.independent = 1;
    co.no_direct_write = 1;
    co.hints =
        "romio_cb_write=enable, cb_buffer_size=65536;romio_ds_write=disable";
  }
  SG_REQUIRE_OK(sg_nc_create(MPI_COMM_WORLD, path, &co, &f));
  SG_CHECK(sg_nc_backend_of(f) == b, "backend in use %s",
           sg_nc_backend_name(sg_nc_backend_of(f)));
  int vid = -1, rid = -1;
  for (int d = 0; d < c->nd; ++d) {
    double *vals = malloc((size_t)c->shape[d] * sizeof(double));
    for (int64_t i = 0; i < c->shape[d]; ++i)
      vals[i] = strcmp(c->dims[d], "lat") == 0
                    ? -80.0 + 160.0 * (double)i / (double)(c->shape[d] - 1)
                    : (double)i * 10.0;
    const char *units = strcmp(c->dims[d], "lat") == 0   ? "degrees_north"
                        : strcmp(c->dims[d], "lon") == 0 ? "degrees_east"
                                                         : "hPa";
    const char *sn = strcmp(c->dims[d], "lat") == 0   ? "latitude"
                     : strcmp(c->dims[d], "lon") == 0 ? "longitude"
                                                      : "air_pressure";
    const char *ax = strcmp(c->dims[d], "lat") == 0   ? "Y"
                     : strcmp(c->dims[d], "lon") == 0 ? "X"
                                                      : "Z";
    SG_CHECK_OK(
        sg_nc_def_coord(f, c->dims[d], c->shape[d], units, sn, ax, vals, NULL));
    free(vals);
  }
  int tid = -1;
  if (c->with_record)
    SG_CHECK_OK(sg_nc_def_coord(f, "time", SG_NC_UNLIMITED,
                                "hours since 2000-01-01 00:00:00", "time", "T",
                                NULL, &tid));
  sg_nc_var_opts vo;
  memset(&vo, 0, sizeof vo);
  vo.slab_count = s.count;
  SG_CHECK_OK(sg_nc_def_var(f, "field", c->dt, c->nd, c->dims, &vo, &vid));
  sg_nc_cf cf = {"K", "test field", "air_temperature", 1, -9999.0};
  SG_CHECK_OK(sg_nc_put_cf(f, vid, &cf));
  if (c->with_record) {
    const char *rd[3] = {"time", c->dims[0], c->dims[1]};
    SG_CHECK_OK(sg_nc_def_var(f, "rec", SG_DTYPE_F32, 3, rd, NULL, &rid));
    sg_nc_cf rcf = {"m s-1", "record field", "eastward_wind", 1, 1e20};
    SG_CHECK_OK(sg_nc_put_cf(f, rid, &rcf));
  }
  SG_CHECK_OK(sg_nc_put_global_cf(f, "shardgrid io test",
                                  "written by test_nc_roundtrip", NULL));
  SG_REQUIRE_OK(sg_nc_enddef(f));
  int64_t n = sg_nc_shard_numel(&s);
  SG_REQUIRE_OK(sg_malloc(sg_device_host(),
                          (size_t)(n ? n : 1) * sg_dtype_size(c->dt), &buf));
  fill(c, &s, 1, buf);
  SG_CHECK_OK(sg_nc_write(f, vid, &s, buf));
  if (c->with_record) {
    iot_shard(A, sg_test_rank, c->shape, SG_DTYPE_F32, &rs);
    int64_t rn = sg_nc_shard_numel(&rs);
    SG_REQUIRE_OK(
        sg_malloc(sg_device_host(), (size_t)(rn ? rn : 1) * 4, &rbuf));
    for (int k = 0; k < 2; ++k) {
      int64_t fr = -2;
      fill(c, &rs, 100 + (uint64_t)k, rbuf);
      SG_CHECK_OK(sg_nc_write_frame(f, rid, -1, &rs, rbuf, &fr));
      SG_CHECK(fr == k, "appended frame %lld, expected %d", (long long)fr, k);
      sg_nc_shard ts;
      memset(&ts, 0, sizeof ts);
      ts.dtype = SG_DTYPE_F64;
      double tv = 6.0 * k;
      SG_CHECK_OK(sg_nc_write_frame(f, tid, fr, &ts, &tv, NULL));
    }
  }
done:
  SG_CHECK_OK(sg_nc_close(&f));
  sg_free(sg_device_host(), &buf);
  sg_free(sg_device_host(), &rbuf);
}

static void check_tools(const char *path, sg_nc_backend b) {
  if (sg_test_rank != 0) return;
  if (SG_NCDUMP[0]) {
    int rc = run_tool(SG_NCDUMP, "-h", path);
    SG_CHECK(rc == 0, "ncdump -h %s failed (%d)", path, rc);
  }
  if (SG_NCVALIDATOR[0] && b == SG_NC_BACKEND_PNETCDF) {
    int rc = run_tool(SG_NCVALIDATOR, "-q", path);
    SG_CHECK(rc == 0, "ncvalidator %s failed (%d)", path, rc);
  }
}

static void check_cf(const char *path) {
  sg_nc_t f = NULL;
  SG_REQUIRE_OK(sg_nc_open(MPI_COMM_WORLD, path, NULL, &f));
  sg_nc_var_info vi;
  SG_REQUIRE_OK(sg_nc_inq_var(f, "field", &vi));
  const char *va[] = {"units", "long_name", "standard_name", "_FillValue"};
  for (int i = 0; i < 4; ++i)
    SG_CHECK(sg_nc_has_att(f, vi.varid, va[i]), "field lacks %s", va[i]);
  const char *ga[] = {"Conventions", "title", "history"};
  for (int i = 0; i < 3; ++i)
    SG_CHECK(sg_nc_has_att(f, SG_NC_GLOBAL, ga[i]), "no global %s", ga[i]);
  char conv[64];
  SG_CHECK_OK(
      sg_nc_get_att_text(f, SG_NC_GLOBAL, "Conventions", conv, sizeof conv));
  SG_CHECK(strncmp(conv, "CF-", 3) == 0, "Conventions = %s", conv);
  for (int d = 0; d < vi.ndims; ++d) {
    sg_nc_var_info ci;
    SG_CHECK_OK(sg_nc_inq_var(f, vi.dim_names[d], &ci));
    SG_CHECK(sg_nc_has_att(f, ci.varid, "axis") &&
                 sg_nc_has_att(f, ci.varid, "units") &&
                 sg_nc_has_att(f, ci.varid, "standard_name"),
             "coordinate %s lacks CF attributes", vi.dim_names[d]);
  }
done:
  SG_CHECK_OK(sg_nc_close(&f));
}

/* Read path (written on A) on decomposition B with reader backend rb. */
static void read_case(const tcase *c, const iot_decomp *A, const iot_decomp *B,
                      sg_nc_backend rb, sg_nc_t f) {
  void *got = NULL, *want = NULL;
  char sa[32], sb[32];
  sg_nc_shard s;
  iot_shard(B, sg_test_rank, c->shape, c->dt, &s);
  int64_t n = sg_nc_shard_numel(&s);
  size_t bytes = (size_t)(n ? n : 1) * sg_dtype_size(c->dt);
  SG_REQUIRE_OK(sg_malloc(sg_device_host(), bytes, &got));
  SG_REQUIRE_OK(sg_malloc(sg_device_host(), bytes, &want));
  sg_nc_var_info vi;
  SG_REQUIRE_OK(sg_nc_inq_var(f, "field", &vi));
  fill(c, &s, 1, want);
  memset(got, 0xA5, bytes);
  SG_CHECK_OK(sg_nc_read(f, vi.varid, &s, NULL, got, NULL));
  char what[160];
  snprintf(what, sizeof what, "%s written %s read %s by %s", c->name,
           iot_decomp_str(A, sa, sizeof sa), iot_decomp_str(B, sb, sizeof sb),
           sg_nc_backend_name(rb));
  SG_CHECK(sg_test_cmp_bytes(what, got, want,
                             (size_t)n * sg_dtype_size(c->dt)) == 0,
           "%s differs", what);
  if (c->with_record) {
    sg_nc_var_info ri;
    SG_REQUIRE_OK(sg_nc_inq_var(f, "rec", &ri));
    SG_CHECK(ri.unlimited0 && ri.shape[0] == 2, "rec has %lld frames",
             (long long)ri.shape[0]);
    sg_nc_shard rs;
    iot_shard(B, sg_test_rank, c->shape, SG_DTYPE_F32, &rs);
    int64_t rn = sg_nc_shard_numel(&rs);
    for (int k = 0; k < 2; ++k) {
      fill(c, &rs, 100 + (uint64_t)k, want);
      SG_CHECK_OK(sg_nc_read_frame(f, ri.varid, k, &rs, NULL, got, NULL));
      SG_CHECK(sg_test_cmp_bytes(what, got, want, (size_t)rn * 4) == 0,
               "%s frame %d differs", what, k);
    }
  }
done:
  sg_free(sg_device_host(), &got);
  sg_free(sg_device_host(), &want);
}

static void test_roundtrip(sg_nc_backend wb) {
  if (!sg_nc_backend_available(wb, 1)) {
    if (sg_test_rank == 0)
      printf("backend %s not built: not tested\n", sg_nc_backend_name(wb));
    return;
  }
  /* readers: PnetCDF with its direct MPI-IO reads (the default) and
   * through ncmpi_iget with forced collective buffering; netCDF-4
   * collective and independent; serial */
  typedef struct reader {
    sg_nc_backend b;
    int no_direct, independent;
    const char *hints;
  } reader;
  reader readers[5];
  int nr = 0;
  if (wb == SG_NC_BACKEND_PNETCDF) {
    readers[nr++] = (reader){SG_NC_BACKEND_PNETCDF, 0, 0, NULL};
    readers[nr++] = (reader){SG_NC_BACKEND_PNETCDF, 1, 0,
                             "romio_cb_read=enable,cb_buffer_size=4096"};
  }
  if (sg_nc_backend_available(SG_NC_BACKEND_NETCDF4, 0)) {
    readers[nr++] = (reader){SG_NC_BACKEND_NETCDF4, 0, 0, NULL};
    readers[nr++] = (reader){SG_NC_BACKEND_NETCDF4, 0, 1,
                             "romio_cb_read=disable"};
  }
  if (sg_nc_backend_available(SG_NC_BACKEND_SERIAL, 0))
    readers[nr++] = (reader){SG_NC_BACKEND_SERIAL, 0, 0, NULL};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci) {
    const tcase *c = &cases[ci];
    /* 2-D: every process grid; 3-D: every grid over (lat, lon), plus all
     * ranks along level (3 levels: a rank with an empty shard at 4 ranks) */
    int which[3] = {c->nd == 2, 1, 1};
    iot_decomp dcs[IOT_MAX_DECOMP];
    int nd = iot_all_decomps(c->nd, sg_test_size, which, dcs);
    if (c->nd == 3 && sg_test_size > 1) {
      dcs[nd].nd = 3;
      dcs[nd].p[0] = sg_test_size;
      dcs[nd].p[1] = dcs[nd].p[2] = 1;
      ++nd;
    }
    for (int a = 0; a < nd; ++a) {
      char path[256], sa[32];
      snprintf(path, sizeof path, "rt_%s_%s_%s_np%d.nc", sg_nc_backend_name(wb),
               c->name, iot_decomp_str(&dcs[a], sa, sizeof sa), sg_test_size);
      double t0 = MPI_Wtime();
      write_case(c, &dcs[a], wb, a, path);
      double t1 = MPI_Wtime();
      check_tools(path, wb);
      double t2 = MPI_Wtime();
      if (getenv("IOT_TIME") && sg_test_rank == 0)
        printf("write %.2f tools %.2f\n", t1 - t0, t2 - t1);
      if (a == 0) check_cf(path);
      /* the writer's parallel backend reads on every decomposition, the
       * other readers on a rotating subset (keeps the test short) */
      for (int r = 0; r < nr; ++r) {
        sg_nc_t f = NULL;
        sg_nc_open_opts oo = sg_nc_open_opts_default();
        oo.backend = readers[r].b;
        oo.no_direct_read = readers[r].no_direct;
        oo.independent = readers[r].independent;
        oo.hints = readers[r].hints;
        SG_CHECK_OK(sg_nc_open(MPI_COMM_WORLD, path, &oo, &f));
        if (!f) continue;
        SG_CHECK(sg_nc_backend_of(f) == readers[r].b, "reader backend");
        for (int bb = 0; bb < nd; ++bb)
          if (r == 0 || bb == (a + r) % nd)
            read_case(c, &dcs[a], &dcs[bb], readers[r].b, f);
        SG_CHECK_OK(sg_nc_close(&f));
      }
      MPI_Barrier(MPI_COMM_WORLD);
      if (sg_test_rank == 0) remove(path);
    }
  }
}

/* Latitude stored north to south is returned south to north on request,
 * halos included; packed integers are unpacked. */
static void test_flip_and_pack(sg_nc_backend wb) {
  if (!sg_nc_backend_available(wb, 1)) return;
  char path[128];
  snprintf(path, sizeof path, "flip_%s_np%d.nc", sg_nc_backend_name(wb),
           sg_test_size);
  const int64_t NY = 9, NX = 12;
  int64_t shape[2] = {NY, NX};
  sg_nc_t f = NULL;
  float *all = malloc((size_t)(NY * NX) * sizeof(float));
  int32_t *packed = malloc((size_t)(NY * NX) * sizeof(int32_t));
  for (int64_t i = 0; i < NY * NX; ++i) {
    all[i] = (float)i;
    packed[i] = (int32_t)(i % 17) - 3;
  }
  packed[5] = -32767; /* fill */
  double lat[9];
  for (int i = 0; i < NY; ++i) lat[i] = 80.0 - 20.0 * i;
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.backend = wb;
  co.overwrite = 1;
  SG_REQUIRE_OK(sg_nc_create(MPI_COMM_WORLD, path, &co, &f));
  int v = -1, p = -1;
  const char *dims[2] = {"lat", "lon"};
  SG_CHECK_OK(sg_nc_def_coord(f, "lat", NY, "degrees_north", "latitude", "Y",
                              lat, NULL));
  SG_CHECK_OK(sg_nc_def_coord(f, "lon", NX, "degrees_east", "longitude", "X",
                              NULL, NULL));
  SG_CHECK_OK(sg_nc_def_var(f, "v", SG_DTYPE_F32, 2, dims, NULL, &v));
  SG_CHECK_OK(sg_nc_def_var(f, "p", SG_DTYPE_I32, 2, dims, NULL, &p));
  double sc = 0.5, off = 10.0;
  SG_CHECK_OK(sg_nc_put_att(f, p, "scale_factor", SG_DTYPE_F64, 1, &sc));
  SG_CHECK_OK(sg_nc_put_att(f, p, "add_offset", SG_DTYPE_F64, 1, &off));
  int32_t fv = -32767;
  SG_CHECK_OK(sg_nc_put_att(f, p, "_FillValue", SG_DTYPE_I32, 1, &fv));
  SG_REQUIRE_OK(sg_nc_enddef(f));
  sg_nc_shard w;
  sg_nc_shard_split(2, shape, SG_DTYPE_F32, 0, sg_test_size, sg_test_rank, &w);
  SG_CHECK_OK(sg_nc_write(f, v, &w, all + w.start[0] * NX));
  w.dtype = SG_DTYPE_I32;
  SG_CHECK_OK(sg_nc_write(f, p, &w, packed + w.start[0] * NX));
  SG_CHECK_OK(sg_nc_close(&f));

  /* read back flipped, split on lat, halo 1 in lat (non-periodic) and 2 in
   * lon (periodic) */
  SG_REQUIRE_OK(sg_nc_open(MPI_COMM_WORLD, path, NULL, &f));
  sg_nc_shard r;
  sg_nc_shard_split(2, shape, SG_DTYPE_F32, 0, sg_test_size, sg_test_rank, &r);
  sg_nc_read_opts ro = sg_nc_read_opts_default();
  ro.flip_lat = 1;
  ro.periodic_lon = 1;
  ro.halo_lo[0] = ro.halo_hi[0] = 1;
  ro.halo_lo[1] = ro.halo_hi[1] = 2;
  ro.outside_value = -1.0;
  int64_t oy = r.count[0] + 2, ox = NX + 4;
  float *got = malloc((size_t)(oy * ox) * sizeof(float));
  uint8_t *mk = malloc((size_t)(oy * ox));
  SG_CHECK_OK(sg_nc_read(f, v, &r, &ro, got, mk));
  int64_t bad = 0;
  for (int64_t j = 0; r.count[0] > 0 && j < oy; ++j)
    for (int64_t i = 0; i < ox; ++i) {
      int64_t y = r.start[0] - 1 + j, x = ((i - 2) % NX + NX) % NX;
      float want = (y < 0 || y >= NY) ? -1.0f : all[(NY - 1 - y) * NX + x];
      uint8_t wm = (y < 0 || y >= NY) ? 0 : 1;
      if (got[j * ox + i] != want || mk[j * ox + i] != wm) ++bad;
    }
  SG_CHECK(bad == 0, "flipped read with halo: %lld wrong", (long long)bad);
  /* packed: f64 output, fill masked to NaN */
  double *pd = malloc((size_t)(NY * NX) * sizeof(double));
  uint8_t *pm = malloc((size_t)(NY * NX));
  sg_nc_shard pr;
  sg_nc_shard_split(2, shape, SG_DTYPE_F64, 1, sg_test_size, sg_test_rank, &pr);
  SG_CHECK_OK(sg_nc_read(f, p, &pr, NULL, pd, pm));
  bad = 0;
  for (int64_t j = 0; j < pr.count[0]; ++j)
    for (int64_t i = 0; i < pr.count[1]; ++i) {
      int64_t g = (pr.start[0] + j) * NX + pr.start[1] + i;
      double got_v = pd[j * pr.count[1] + i];
      if (g == 5) {
        if (!isnan(got_v) || pm[j * pr.count[1] + i] != 0) ++bad;
      } else if (got_v != packed[g] * 0.5 + 10.0 ||
                 pm[j * pr.count[1] + i] != 1) {
        ++bad;
      }
    }
  SG_CHECK(bad == 0, "unpacked read: %lld wrong", (long long)bad);
  /* an integer output of a packed variable is refused on every rank */
  pr.dtype = SG_DTYPE_I32;
  SG_CHECK_STATUS(sg_nc_read(f, p, &pr, NULL, pd, NULL), SG_ERR_INVALID_ARG);
  SG_CHECK_OK(sg_nc_close(&f));
  free(got);
  free(mk);
  free(pd);
  free(pm);
done:
  sg_nc_close(&f);
  free(all);
  free(packed);
  MPI_Barrier(MPI_COMM_WORLD);
  if (sg_test_rank == 0) remove(path);
}

/* PnetCDF: attributes added after the data is written do not move it. */
static void test_header_reserve(void) {
  if (!sg_nc_backend_available(SG_NC_BACKEND_PNETCDF, 1)) return;
  char path[128];
  snprintf(path, sizeof path, "reserve_np%d.nc", sg_test_size);
  int64_t shape[2] = {40, 50};
  sg_nc_t f = NULL;
  sg_nc_shard s;
  sg_nc_shard_split(2, shape, SG_DTYPE_F32, 1, sg_test_size, sg_test_rank, &s);
  float *buf = malloc((size_t)(40 * 50) * sizeof(float));
  float *back = malloc((size_t)(40 * 50) * sizeof(float));
  fill(NULL, &s, 7, buf);
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.overwrite = 1;
  SG_REQUIRE_OK(sg_nc_create(MPI_COMM_WORLD, path, &co, &f));
  SG_CHECK(sg_nc_backend_of(f) == SG_NC_BACKEND_PNETCDF,
           "default backend is %s", sg_nc_backend_name(sg_nc_backend_of(f)));
  SG_CHECK(sg_nc_format_of(f) == SG_NC_FORMAT_CDF5, "default format is CDF-5");
  const char *dims[2] = {"y", "x"};
  int v = -1;
  SG_CHECK_OK(sg_nc_def_dim(f, "y", 40, NULL));
  SG_CHECK_OK(sg_nc_def_dim(f, "x", 50, NULL));
  SG_CHECK_OK(sg_nc_def_var(f, "a", SG_DTYPE_F32, 2, dims, NULL, &v));
  SG_CHECK_OK(sg_nc_enddef(f));
  SG_CHECK_OK(sg_nc_write(f, v, &s, buf));
  SG_CHECK_OK(sg_nc_close(&f));
  MPI_Barrier(MPI_COMM_WORLD);
  long long size0 = iot_file_size(path);
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  oo.writable = 1;
  SG_REQUIRE_OK(sg_nc_open(MPI_COMM_WORLD, path, &oo, &f));
  char big[4000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  SG_CHECK_OK(sg_nc_put_att_text(f, v, "comment", big));
  SG_CHECK_OK(sg_nc_put_att_text(f, SG_NC_GLOBAL, "history", "added later"));
  SG_CHECK_OK(sg_nc_close(&f));
  MPI_Barrier(MPI_COMM_WORLD);
  long long size1 = iot_file_size(path);
  SG_CHECK(size0 == size1 && size0 > 0,
           "file size changed from %lld to %lld: data moved", size0, size1);
  SG_REQUIRE_OK(sg_nc_open(MPI_COMM_WORLD, path, NULL, &f));
  s.dtype = SG_DTYPE_F32;
  SG_CHECK_OK(sg_nc_read(f, v, &s, NULL, back, NULL));
  SG_CHECK(sg_test_cmp_bytes("after attribute", back, buf,
                             (size_t)sg_nc_shard_numel(&s) * 4) == 0,
           "data changed");
  SG_CHECK_OK(sg_nc_close(&f));
done:
  sg_nc_close(&f);
  free(buf);
  free(back);
  MPI_Barrier(MPI_COMM_WORLD);
  if (sg_test_rank == 0) remove(path);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  if (!sg_nc_backend_available(SG_NC_BACKEND_AUTO, 1)) {
    sg_test_skip("no parallel NetCDF backend built");
    return sg_test_finish();
  }
  /* argv[1]: the writer backend to test (default: every one built) */
  const char *only = argc > 1 ? argv[1] : NULL;
  sg_nc_backend bs[2] = {SG_NC_BACKEND_PNETCDF, SG_NC_BACKEND_NETCDF4};
  int tested = 0;
  for (int i = 0; i < 2; ++i) {
    if (only && strcmp(only, sg_nc_backend_name(bs[i])) != 0) continue;
    if (!sg_nc_backend_available(bs[i], 1)) continue;
    double t0 = MPI_Wtime();
    test_roundtrip(bs[i]);
    test_flip_and_pack(bs[i]);
    if (bs[i] == SG_NC_BACKEND_PNETCDF) test_header_reserve();
    ++tested;
    if (sg_test_rank == 0)
      printf("backend %s: %.1f s\n", sg_nc_backend_name(bs[i]),
             MPI_Wtime() - t0);
  }
  if (!tested) {
    char why[128];
    snprintf(why, sizeof why, "backend %s is not built", only ? only : "(any)");
    sg_test_skip(why);
  }
  return sg_test_finish();
}
