/* shardgrid — dataset helpers: normalisation statistics, sample order. */
#include "sg_dataset.h"

#include "io_impl.h"

#include "sg_comm.h"
#include "sg_device.h"
#include "sg_rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- moments ----------------------------------------------------------------- */

void sg_ds_moments_add(sg_ds_moments *m, const float *x, const double *w,
                       const uint8_t *mask, int64_t n) {
  double W = m->w, mean = m->mean, m2 = m->m2;
  int64_t cnt = m->n;
  for (int64_t i = 0; i < n; ++i) {
    if (mask && !mask[i]) continue;
    double wi = w ? w[i] : 1.0;
    if (!(wi > 0.0)) continue;
    double xi = (double)x[i];
    double wn = W + wi;
    double d = xi - mean;
    mean += (wi / wn) * d;
    m2 += wi * d * (xi - mean);
    W = wn;
    ++cnt;
  }
  m->w = W;
  m->mean = mean;
  m->m2 = m2;
  m->n = cnt;
}

void sg_ds_moments_merge(sg_ds_moments *a, const sg_ds_moments *b) {
  if (b->w <= 0.0) return;
  if (a->w <= 0.0) {
    *a = *b;
    return;
  }
  double W = a->w + b->w, d = b->mean - a->mean;
  a->mean += d * (b->w / W);
  a->m2 += b->m2 + d * d * (a->w * b->w / W);
  a->w = W;
  a->n += b->n;
}

sg_status sg_ds_moments_allmerge(MPI_Comm comm, int nchan, sg_ds_moments *m) {
  sg_status st = SG_OK;
  double *all = NULL, *mine = NULL;
  int size = 1;
  MPI_Comm_size(comm, &size);
  if (nchan < 0 || (nchan > 0 && !m))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_ds_moments_allmerge: %d channels", nchan);
  if (nchan == 0) return SG_OK;
  mine = malloc((size_t)nchan * 4 * sizeof(double));
  all = malloc((size_t)nchan * 4 * (size_t)size * sizeof(double));
  if (!mine || !all) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int c = 0; c < nchan; ++c) {
    mine[4 * c] = m[c].w;
    mine[4 * c + 1] = m[c].mean;
    mine[4 * c + 2] = m[c].m2;
    mine[4 * c + 3] = (double)m[c].n;
  }
  SG_MPI(MPI_Allgather(mine, 4 * nchan, MPI_DOUBLE, all, 4 * nchan, MPI_DOUBLE,
                       comm));
  for (int c = 0; c < nchan; ++c) {
    sg_ds_moments acc = {0, 0, 0, 0};
    for (int r = 0; r < size; ++r) {
      const double *p = all + (size_t)r * 4 * (size_t)nchan + 4 * (size_t)c;
      sg_ds_moments b = {p[0], p[1], p[2], (int64_t)p[3]};
      sg_ds_moments_merge(&acc, &b);
    }
    m[c] = acc;
  }
fail:
  free(mine);
  free(all);
  return st;
}

/* ---- statistics of a file ---------------------------------------------------- */

sg_status sg_ds_stats_compute(MPI_Comm comm, const char *path,
                              const char *dim_map, int nvars,
                              const char *const *names, int area_weight,
                              sg_ds_stats *stats) {
  sg_status st = SG_OK, lst = SG_OK;
  sg_nc_t f = NULL;
  float *buf = NULL;
  uint8_t *mask = NULL;
  double *lat = NULL, *w = NULL;
  sg_ds_moments mom[SG_DS_MAX_CHANNELS];
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  memset(mom, 0, sizeof mom);
  if (!stats || nvars < 1 || nvars > SG_DS_MAX_CHANNELS || !names)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "dataset statistics: %d variables (1..%d)", nvars,
                       SG_DS_MAX_CHANNELS);
  SG_TRY(sg_io_agree(comm, lst));
  memset(stats, 0, sizeof *stats);
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  oo.dim_map = dim_map;
  SG_TRY(sg_nc_open(comm, path, &oo, &f));
  for (int c = 0; c < nvars; ++c) {
    sg_nc_var_info vi;
    lst = sg_nc_inq_var(f, names[c], &vi);
    if (lst == SG_OK && (vi.ndims < 3 || vi.ndims > 4 ||
                         strcmp(vi.dim_names[vi.ndims - 2], "lat") ||
                         strcmp(vi.dim_names[vi.ndims - 1], "lon")))
      lst = sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                         "dataset variable %s: expected (time, [level], lat, "
                         "lon), got %d dims ending in %s, %s (set dim_map)",
                         names[c], vi.ndims,
                         vi.ndims >= 2 ? vi.dim_names[vi.ndims - 2] : "-",
                         vi.ndims >= 1 ? vi.dim_names[vi.ndims - 1] : "-");
    SG_TRY(sg_io_agree(comm, lst));
    int nd = vi.ndims - 1; /* the frame's dims */
    int64_t fshape[3];
    for (int d = 0; d < nd; ++d) fshape[d] = vi.shape[d + 1];
    sg_nc_shard s;
    SG_TRY(sg_nc_shard_split(nd, fshape, SG_DTYPE_F32, nd - 2, size, rank, &s));
    int64_t n = sg_nc_shard_numel(&s);
    /* weights: cos(lat) of this rank's rows */
    free(w);
    w = NULL;
    lst = SG_OK;
    int64_t nlat = fshape[nd - 2], nlon = fshape[nd - 1];
    if (!(buf = realloc(buf, (size_t)(n ? n : 1) * sizeof(float))) ||
        !(mask = realloc(mask, (size_t)(n ? n : 1))))
      lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
    SG_TRY(sg_io_agree(comm, lst));
    if (area_weight) {
      int found = 0;
      lat = realloc(lat, (size_t)nlat * sizeof(double));
      w = malloc((size_t)(n ? n : 1) * sizeof(double));
      if (!lat || !w)
        lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
      SG_TRY(sg_io_agree(comm, lst));
      SG_TRY(sg_nc_read_lat(f, nlat, lat, &found));
      if (!found)
        SG_RAISE(SG_ERR_SHAPE, "area weighting: %s has no latitude coordinate",
                 path);
      for (int64_t i = 0; i < n; ++i) {
        int64_t row = (i / nlon) % s.count[nd - 2] + s.start[nd - 2];
        w[i] = cos(lat[row] * 3.14159265358979323846 / 180.0);
        if (w[i] < 0) w[i] = 0;
      }
    }
    sg_nc_read_opts vo = sg_nc_read_opts_default();
    vo.mask_nonfinite = 1; /* NaN/Inf are missing points too */
    for (int64_t t = 0; t < vi.shape[0]; ++t) {
      SG_TRY(sg_nc_read_frame(f, vi.varid, t, &s, &vo, buf, mask));
      sg_ds_moments_add(&mom[c], buf, w, mask, n);
    }
    snprintf(stats->names[c], SG_NC_NAME_MAX, "%s", names[c]);
  }
  SG_TRY(sg_ds_moments_allmerge(comm, nvars, mom));
  stats->nchan = nvars;
  stats->area_weighted = area_weight != 0;
  for (int c = 0; c < nvars; ++c) {
    stats->mean[c] = mom[c].mean;
    stats->std[c] = mom[c].w > 0 ? sqrt(mom[c].m2 / mom[c].w) : 0.0;
    stats->count[c] = mom[c].n;
  }
  SG_TRY(sg_nc_close(&f));
fail:
  if (f) sg_nc_close(&f);
  free(buf);
  free(mask);
  free(lat);
  free(w);
  return st;
}

sg_status sg_ds_stats_save(MPI_Comm comm, const char *path,
                           const sg_ds_stats *stats) {
  sg_status st = SG_OK;
  sg_nc_t f = NULL;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  sg_status lst = (!stats || stats->nchan < 1 ||
                   stats->nchan > SG_DS_MAX_CHANNELS)
                      ? sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                                     "statistics: no channels")
                      : SG_OK;
  SG_TRY(sg_io_agree(comm, lst));
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.overwrite = 1;
  SG_TRY(sg_nc_create(comm, path, &co, &f));
  int64_t nc = stats->nchan;
  const char *dn[1] = {"channel"};
  int vm = -1, vs = -1, vc = -1;
  SG_TRY(sg_nc_def_dim(f, "channel", nc, NULL));
  SG_TRY(sg_nc_def_var(f, "mean", SG_DTYPE_F64, 1, dn, NULL, &vm));
  SG_TRY(sg_nc_def_var(f, "std", SG_DTYPE_F64, 1, dn, NULL, &vs));
  SG_TRY(sg_nc_def_var(f, "count", SG_DTYPE_I64, 1, dn, NULL, &vc));
  SG_TRY(sg_nc_put_att_text(f, vm, "long_name", "per-channel mean"));
  SG_TRY(
      sg_nc_put_att_text(f, vs, "long_name", "per-channel standard deviation"));
  {
    char chans[SG_DS_MAX_CHANNELS * 64] = "";
    for (int c = 0; c < stats->nchan; ++c)
      snprintf(chans + strlen(chans), sizeof chans - strlen(chans), "%s%s",
               c ? "," : "", stats->names[c]);
    SG_TRY(sg_nc_put_att_text(f, SG_NC_GLOBAL, "channels", chans));
  }
  int32_t aw = stats->area_weighted;
  SG_TRY(sg_nc_put_att(f, SG_NC_GLOBAL, "area_weighted", SG_DTYPE_I32, 1, &aw));
  SG_TRY(
      sg_nc_put_global_cf(f, "shardgrid normalisation statistics", NULL, NULL));
  SG_TRY(sg_nc_enddef(f));
  sg_nc_shard s[3];
  int ids[3] = {vm, vs, vc};
  const void *d[3] = {stats->mean, stats->std, stats->count};
  for (int i = 0; i < 3; ++i) {
    SG_TRY(sg_nc_shard_split(1, &nc, i == 2 ? SG_DTYPE_I64 : SG_DTYPE_F64, 0, 1,
                             0, &s[i]));
    if (rank != 0) s[i].count[0] = 0;
  }
  SG_TRY(sg_nc_write_many(f, 3, ids, s, d));
  SG_TRY(sg_nc_close(&f));
fail:
  if (f) sg_nc_close(&f);
  return st;
}

sg_status sg_ds_stats_load(MPI_Comm comm, const char *path,
                           sg_ds_stats *stats) {
  sg_status st = SG_OK, lst = SG_OK;
  sg_nc_t f = NULL;
  sg_ds_stats t;
  memset(&t, 0, sizeof t);
  SG_TRY(sg_nc_open(comm, path, NULL, &f));
  sg_nc_var_info vm, vs, vc;
  char chans[SG_DS_MAX_CHANNELS * 64] = "";
  lst = sg_nc_inq_var(f, "mean", &vm);
  if (lst == SG_OK) lst = sg_nc_inq_var(f, "std", &vs);
  if (lst == SG_OK) lst = sg_nc_inq_var(f, "count", &vc);
  if (lst == SG_OK)
    lst = sg_nc_get_att_text(f, SG_NC_GLOBAL, "channels", chans, sizeof chans);
  if (lst == SG_OK &&
      (vm.ndims != 1 || vm.shape[0] < 1 || vm.shape[0] > SG_DS_MAX_CHANNELS))
    lst = sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                       "%s: not a statistics file", path);
  SG_TRY(sg_io_agree(comm, lst));
  t.nchan = (int)vm.shape[0];
  int64_t nc = t.nchan, k = 0;
  int32_t aw = 0;
  int64_t awv = 0;
  if (sg_nc_get_att_i64(f, SG_NC_GLOBAL, "area_weighted", &awv, 1, &k) == SG_OK)
    aw = (int32_t)awv;
  t.area_weighted = aw;
  char *save = NULL, *tok = strtok_r(chans, ",", &save);
  for (int c = 0; c < t.nchan && tok; ++c, tok = strtok_r(NULL, ",", &save))
    snprintf(t.names[c], SG_NC_NAME_MAX, "%s", tok);
  sg_nc_shard s;
  SG_TRY(sg_nc_shard_split(1, &nc, SG_DTYPE_F64, 0, 1, 0, &s));
  SG_TRY(sg_nc_read(f, vm.varid, &s, NULL, t.mean, NULL));
  SG_TRY(sg_nc_read(f, vs.varid, &s, NULL, t.std, NULL));
  s.dtype = SG_DTYPE_I64;
  SG_TRY(sg_nc_read(f, vc.varid, &s, NULL, t.count, NULL));
  SG_TRY(sg_nc_close(&f));
  *stats = t;
fail:
  if (f) sg_nc_close(&f);
  return st;
}

/* ---- samples -------------------------------------------------------------------- */

sg_status sg_ds_num_samples(int64_t ntime, int64_t history, int64_t lead,
                            int64_t *nsamples) {
  sg_status st = SG_OK;
  if (!nsamples || history < 1 || lead < 0)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "samples: history %lld (>= 1), lead %lld (>= 0)",
             (long long)history, (long long)lead);
  *nsamples = ntime - history - lead + 1;
  if (*nsamples < 1)
    SG_RAISE(SG_ERR_SHAPE,
             "the dataset has %lld time frames, shorter than one "
             "sample (%lld history + %lld lead frames)",
             (long long)ntime, (long long)history, (long long)lead);
fail:
  return st;
}

typedef struct keyed {
  uint64_t key;
  int64_t idx;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return (x->idx > y->idx) - (x->idx < y->idx);
}

sg_status sg_ds_sample_order(uint64_t seed, uint64_t epoch, int64_t n,
                             int64_t *order) {
  sg_status st = SG_OK;
  keyed *k = NULL;
  if (n < 0 || (n > 0 && !order))
    SG_RAISE(SG_ERR_INVALID_ARG, "sample order: n = %lld", (long long)n);
  if (n == 0) return SG_OK;
  k = malloc((size_t)n * sizeof *k);
  if (!k) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int64_t i = 0; i < n; ++i) {
    sg_philox4 b = sg_rng_bits(seed, 0x5eed0000ull ^ epoch, (uint64_t)i);
    k[i].key = ((uint64_t)b.v[0] << 32) | b.v[1];
    k[i].idx = i;
  }
  qsort(k, (size_t)n, sizeof *k, cmp_keyed);
  for (int64_t i = 0; i < n; ++i) order[i] = k[i].idx;
fail:
  free(k);
  return st;
}

sg_status sg_ds_batch_samples(const int64_t *order, int64_t n, int64_t batch,
                              int64_t step, int dp_rank, int dp_size,
                              int64_t *samples, int64_t *count) {
  sg_status st = SG_OK;
  if (!order || !samples || !count || batch < 1 || step < 0 || dp_size < 1 ||
      dp_rank < 0 || dp_rank >= dp_size)
    SG_RAISE(SG_ERR_INVALID_ARG, "batch samples: bad arguments");
  if ((step + 1) * batch > n)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "step %lld with batch %lld is past the %lld "
             "samples of the epoch",
             (long long)step, (long long)batch, (long long)n);
  int64_t q = batch / dp_size, r = batch % dp_size;
  int64_t b0 = dp_rank * q + (dp_rank < r ? dp_rank : r);
  int64_t c = q + (dp_rank < r ? 1 : 0);
  for (int64_t i = 0; i < c; ++i) samples[i] = order[step * batch + b0 + i];
  *count = c;
fail:
  return st;
}
