/* sg-train — NetCDF datasets held in memory as per-rank slabs. */
#include "train.h"

#include "sg_comm.h"
#include "sg_dataset.h"
#include "sg_nc.h"
#include "sg_rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static sg_status parse_vars(const char *list, sg_dataset *ds) {
  sg_status st = SG_OK;
  ds->nvars = 0;
  const char *p = list;
  while (p && *p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    while (n && *p == ' ') ++p, --n;
    while (n && p[n - 1] == ' ') --n;
    if (n == 0 || n >= sizeof ds->vars[0])
      SG_RAISE(SG_ERR_CONFIG, "bad variable list '%s'", list);
    if (ds->nvars == 8)
      SG_RAISE(SG_ERR_CONFIG, "at most 8 variables (got '%s')", list);
    memcpy(ds->vars[ds->nvars], p, n);
    ds->vars[ds->nvars][n] = '\0';
    ++ds->nvars;
    p = e ? e + 1 : NULL;
  }
  if (ds->nvars == 0) SG_RAISE(SG_ERR_CONFIG, "no variables given (--vars)");
fail:
  return st;
}

static sg_status open_file(const sg_data_opts *o, sg_nc_t *f) {
  sg_status st = SG_OK;
  sg_nc_open_opts oo = sg_nc_open_opts_default();
  SG_TRY(sg_nc_backend_parse(o->backend && *o->backend ? o->backend : "auto",
                             &oo.backend));
  oo.dim_map = o->dim_map;
  SG_TRY(sg_nc_open(MPI_COMM_WORLD, o->path, &oo, f));
fail:
  return st;
}

/* The shape of every variable must be (sample, time, y, x) or (time, y, x)
 * and the same for all variables. Not collective (header in memory). */
static sg_status check_vars(sg_nc_t f, const sg_data_opts *o, sg_dataset *ds) {
  sg_status st = SG_OK;
  for (int v = 0; v < ds->nvars; ++v) {
    sg_nc_var_info info;
    SG_TRY(sg_nc_inq_var(f, ds->vars[v], &info));
    if (info.ndims != 3 && info.ndims != 4)
      SG_RAISE(
          SG_ERR_SHAPE,
          "variable '%s' in '%s' has %d dims; expected (time, lat, lon) or (sample, time, y, x)",
          ds->vars[v], o->path, info.ndims);
    int climate = info.ndims == 3;
    /* the dims' meaning is read from their names (after dim_map), never
     * guessed from their number: (time, level, lat, lon) is not
     * (sample, time, y, x) */
    const char *want0 = climate ? "time" : "sample";
    if (strcasecmp(info.dim_names[0], want0) != 0 ||
        (!climate && strcasecmp(info.dim_names[1], "time") != 0)) {
      char have[4 * SG_NC_NAME_MAX + 8] = "";
      for (int d = 0; d < info.ndims; ++d) {
        strncat(have, d ? ", " : "", sizeof have - strlen(have) - 1);
        strncat(have, info.dim_names[d], sizeof have - strlen(have) - 1);
      }
      SG_RAISE(
          SG_ERR_SHAPE,
          "variable '%s' in '%s' has dims (%s); sg-train reads (sample, time, y, x) or (time, y, x): "
          "rename dims with dim_map (e.g. TIME=time), a level dim is not supported",
          ds->vars[v], o->path, have);
    }
    int64_t ns = climate ? 1 : info.shape[0], nt = info.shape[climate ? 0 : 1];
    int64_t ny = info.shape[info.ndims - 2], nx = info.shape[info.ndims - 1];
    if (v == 0) {
      ds->climate = climate;
      ds->nseries = ns, ds->nframes = nt, ds->ny_g = ny, ds->nx_g = nx;
    } else if (climate != ds->climate || ns != ds->nseries ||
               nt != ds->nframes || ny != ds->ny_g || nx != ds->nx_g) {
      SG_RAISE(SG_ERR_SHAPE, "variable '%s' does not have the shape of '%s'",
               ds->vars[v], ds->vars[0]);
    }
  }
fail:
  return st;
}

sg_status sg_dataset_peek(const sg_data_opts *o, int64_t *ny, int64_t *nx,
                          int *nvars) {
  sg_status st = SG_OK;
  sg_nc_t f = NULL;
  sg_dataset ds;
  memset(&ds, 0, sizeof ds);
  st = parse_vars(o->vars, &ds);
  st = sg_agree(MPI_COMM_WORLD, st);
  if (st != SG_OK) goto fail;
  SG_TRY(open_file(o, &f));
  st = sg_agree(MPI_COMM_WORLD, check_vars(f, o, &ds));
  if (st != SG_OK) goto fail;
  *ny = ds.ny_g;
  *nx = ds.nx_g;
  *nvars = ds.nvars;
fail:
  sg_nc_close(&f);
  return st;
}

sg_status sg_dataset_free(sg_dataset *ds) {
  if (!ds) return SG_OK;
  free(ds->data);
  free(ds->mask);
  free(ds->lat);
  free(ds->wrow);
  ds->data = ds->mask = NULL;
  ds->lat = ds->wrow = NULL;
  return SG_OK;
}

static int64_t n_test_frames(const sg_dataset *ds, const sg_data_opts *o) {
  return ds->climate ? o->test_frames : 0;
}

/* Autoregressive steps of a training example, and the frames it spans
 * (out_frames targets at once span as many). */
static int64_t train_steps(const sg_data_opts *o) {
  return o->steps > 1 ? o->steps : 1;
}
static int64_t out_frames(const sg_data_opts *o) {
  return o->out_frames > 1 ? o->out_frames : 1;
}
static int64_t train_span(const sg_data_opts *o) {
  const int64_t k = train_steps(o), f = out_frames(o);
  return o->history + (k > f ? k : f) * o->lead;
}

int64_t sg_dataset_target_frame(const sg_data_opts *o, int64_t t0, int64_t k) {
  return t0 + o->history - 1 + (k + 1) * o->lead;
}

sg_status sg_dataset_load(const sg_data_opts *o, int64_t y0, int64_t ny,
                          int64_t x0, int64_t nx, sg_group_t domain,
                          sg_dataset *ds) {
  sg_status st = SG_OK, lst = SG_OK;
  sg_nc_t f = NULL;
  float *buf = NULL;
  uint8_t *mbuf = NULL;
  memset(ds, 0, sizeof *ds);
  SG_TRY(sg_agree(MPI_COMM_WORLD, parse_vars(o->vars, ds)));
  SG_TRY(open_file(o, &f));
  SG_TRY(sg_agree(MPI_COMM_WORLD, check_vars(f, o, ds)));
  ds->y0 = y0, ds->ny = ny, ds->x0 = x0, ds->nx = nx;
  const int64_t S = ds->nseries, T = ds->nframes, V = ds->nvars,
                plane = ny * nx;
  const int64_t K = train_steps(o), span = train_span(o);
  if (T < o->history + out_frames(o) * o->lead)
    lst = sg_error_set(
        SG_ERR_SHAPE, __FILE__, __LINE__,
        "dataset '%s' has %lld frames, shorter than one sample (history %lld + out_frames %lld x lead %lld)",
        o->path, (long long)T, (long long)o->history, (long long)out_frames(o),
        (long long)o->lead);
  else if (ds->climate && out_frames(o) > 1)
    lst = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                       "out_frames = %lld needs a sample dataset (sample, "
                       "time, y, x); '%s' is a time series",
                       (long long)out_frames(o), o->path);
  else if (!ds->climate && o->test_samples >= S)
    lst = sg_error_set(SG_ERR_CONFIG, __FILE__, __LINE__,
                       "test_samples (%lld) leaves no training samples of %lld",
                       (long long)o->test_samples, (long long)S);
  else if (ds->climate && T - o->test_frames < o->history + o->lead)
    lst = sg_error_set(
        SG_ERR_CONFIG, __FILE__, __LINE__,
        "test_frames (%lld) leaves no training sample in %lld frames",
        (long long)o->test_frames, (long long)T);
  else if (K > 1 && T - n_test_frames(ds, o) < span)
    lst = sg_error_set(
        SG_ERR_SHAPE, __FILE__, __LINE__,
        "rollout_train = %lld needs %lld consecutive %sframes per training example (history %lld + "
        "%lld x lead %lld); dataset '%s' has %lld",
        (long long)K, (long long)span, ds->climate ? "training " : "",
        (long long)o->history, (long long)K, (long long)o->lead, o->path,
        (long long)(T - n_test_frames(ds, o)));
  SG_TRY(sg_agree(MPI_COMM_WORLD, lst));
  const size_t total = (size_t)(S * T * V * plane);
  ds->data = malloc((total ? total : 1) * sizeof *ds->data);
  ds->mask = malloc((total ? total : 1) * sizeof *ds->mask);
  const int64_t nslab = S * T * plane > 0 ? S * T * plane : 1;
  buf = malloc((size_t)nslab * sizeof *buf);
  mbuf = malloc((size_t)nslab);
  lst = (!ds->data || !ds->mask || !buf || !mbuf)
            ? sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                           "out of memory loading '%s'", o->path)
            : SG_OK;
  SG_TRY(sg_agree(MPI_COMM_WORLD, lst));
  /* statistics over the training part, per variable: Welford on each
   * rank's slab */
  const int64_t s_train = ds->climate ? 1 : S - o->test_samples;
  const int64_t t_train = ds->climate ? T - n_test_frames(ds, o) : T;
  sg_ds_moments mom[8];
  memset(mom, 0, sizeof mom);
  sg_nc_read_opts ro = sg_nc_read_opts_default();
  ro.masked_value = 0.0;
  ro.mask_nonfinite =
      !o->reject_nonfinite; /* NaN/Inf: missing, or checked below */
  for (int64_t v = 0; v < V; ++v) {
    sg_nc_var_info info;
    SG_TRY(sg_nc_inq_var(f, ds->vars[v], &info));
    sg_nc_shard sh;
    memset(&sh, 0, sizeof sh);
    sh.ndims = info.ndims;
    sh.dtype = SG_DTYPE_F32;
    for (int d = 0; d < info.ndims; ++d) {
      sh.global_shape[d] = info.shape[d];
      sh.start[d] = 0;
      sh.count[d] = info.shape[d];
    }
    sh.start[info.ndims - 2] = y0;
    sh.count[info.ndims - 2] = ny;
    sh.start[info.ndims - 1] = x0;
    sh.count[info.ndims - 1] = nx;
    SG_TRY(sg_nc_read(f, info.varid, &sh, &ro, buf, mbuf));
    if (o->reject_nonfinite) { /* NaN/Inf that are not fill values: an error */
      double bad = 0;
      for (int64_t i = 0; i < S * T * plane; ++i)
        bad += mbuf[i] && !isfinite(buf[i]);
      SG_MPI(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_DOUBLE, MPI_SUM,
                           MPI_COMM_WORLD));
      if (bad > 0)
        SG_RAISE(
            SG_ERR_CORRUPT,
            "dataset '%s': variable '%s' has %.0f NaN/Inf values that are not its _FillValue or "
            "missing_value (reject_nonfinite is set; unset it to treat them as missing points)",
            o->path, ds->vars[v], bad);
    }
    for (int64_t s = 0; s < S; ++s)
      for (int64_t t = 0; t < T; ++t) {
        const float *src = buf + (s * T + t) * plane;
        const uint8_t *ms = mbuf + (s * T + t) * plane;
        float *dst = ds->data + ((s * T + t) * V + v) * plane;
        float *md = ds->mask + ((s * T + t) * V + v) * plane;
        for (int64_t i = 0; i < plane; ++i) {
          dst[i] = src[i];
          md[i] = ms[i] ? 1.0f : 0.0f;
        }
        if (s < s_train && t < t_train)
          sg_ds_moments_add(&mom[v], src, NULL, ms, plane);
      }
  }
  /* statistics over the training part (accumulated while reading): merge
   * over the domain in rank order (the same bits on every rank) */
  if (domain && sg_group_size(domain) > 1)
    SG_TRY(sg_ds_moments_allmerge(sg_group_comm(domain), (int)V, mom));
  double nmask = 0;
  for (int64_t v = 0; v < V; ++v) {
    ds->mean[v] = mom[v].w > 0 ? mom[v].mean : 0.0;
    double var = mom[v].w > 0 ? mom[v].m2 / mom[v].w : 0.0;
    ds->std[v] = var > 1e-20 ? sqrt(var) : 1.0;
  }
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t v = 0; v < V; ++v) {
        float *d = ds->data + ((s * T + t) * V + v) * plane;
        const float *mk = ds->mask + ((s * T + t) * V + v) * plane;
        const float mu = (float)ds->mean[v], inv = (float)(1.0 / ds->std[v]);
        for (int64_t i = 0; i < plane; ++i) {
          d[i] = mk[i] != 0.0f ? (d[i] - mu) * inv : 0.0f;
          nmask += mk[i] == 0.0f;
        }
      }
  double any = nmask;
  SG_MPI(MPI_Allreduce(&nmask, &any, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  ds->has_mask = any > 0;
  SG_TRY(sg_dataset_latitudes(f, ds));
fail:
  sg_nc_close(&f);
  free(buf);
  free(mbuf);
  if (st != SG_OK) sg_dataset_free(ds);
  return st;
}

sg_status sg_dataset_examples(const sg_dataset *ds, const sg_data_opts *o,
                              sg_example **train, int64_t *ntrain,
                              sg_example **test, int64_t *ntest) {
  sg_status st = SG_OK;
  /* test examples: one step; training examples: all their steps' targets
   * in the training part (frames before the test frames of a time series) */
  const int64_t T = ds->nframes, span = o->history + out_frames(o) * o->lead,
                tend = T - n_test_frames(ds, o), tspan = train_span(o);
  int64_t cap = ds->nseries * (T - span + 1);
  *train = malloc((size_t)(cap > 0 ? cap : 1) * sizeof **train);
  *test = malloc((size_t)(cap > 0 ? cap : 1) * sizeof **test);
  if (!*train || !*test) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  *ntrain = *ntest = 0;
  for (int64_t s = 0; s < ds->nseries; ++s)
    for (int64_t t0 = 0; t0 + span <= T; ++t0) {
      sg_example e = {s, t0};
      int is_test = ds->climate ? (t0 + span - 1 >= T - o->test_frames)
                                : (s >= ds->nseries - o->test_samples);
      if (is_test)
        (*test)[(*ntest)++] = e;
      else if (t0 + tspan <= tend)
        (*train)[(*ntrain)++] = e;
    }
fail:
  return st;
}

/* The inputs and the targets of steps 0 .. steps - 1: step-major
 * (steps, n, nvars, ...) or example-major (n, steps * nvars, ...). */
static void fill_targets(const sg_dataset *ds, const sg_data_opts *o,
                         const sg_example *ex, int64_t n, int64_t steps,
                         int step_major, float *x, float *y, float *m) {
  const int64_t T = ds->nframes, V = ds->nvars, plane = ds->ny * ds->nx;
  const size_t fr = (size_t)(V * plane);
  for (int64_t b = 0; b < n; ++b) {
    const float *ser = ds->data + ex[b].series * T * V * plane,
                *mser = ds->mask + ex[b].series * T * V * plane;
    for (int64_t h = 0; h < o->history; ++h)
      memcpy(x + (b * o->history + h) * V * plane,
             ser + (ex[b].t0 + h) * V * plane, fr * sizeof *x);
    for (int64_t k = 0; k < steps; ++k) {
      const int64_t tt = sg_dataset_target_frame(o, ex[b].t0, k),
                    at = (step_major ? k * n + b : b * steps + k) * V * plane;
      memcpy(y + at, ser + tt * V * plane, fr * sizeof *y);
      if (m) memcpy(m + at, mser + tt * V * plane, fr * sizeof *m);
    }
  }
}

void sg_dataset_fill_steps(const sg_dataset *ds, const sg_data_opts *o,
                           const sg_example *ex, int64_t n, int64_t steps,
                           float *x, float *y, float *m) {
  fill_targets(ds, o, ex, n, steps, 1, x, y, m);
}

void sg_dataset_fill(const sg_dataset *ds, const sg_data_opts *o,
                     const sg_example *ex, int64_t n, float *x, float *y,
                     float *m) {
  fill_targets(ds, o, ex, n, out_frames(o), 0, x, y, m);
}

sg_status sg_dataset_climatology(const sg_dataset *ds, const sg_data_opts *o,
                                 float *clim) {
  sg_status st = SG_OK;
  const int64_t T = ds->nframes, V = ds->nvars, plane = ds->ny * ds->nx;
  const int64_t s_train = ds->climate ? 1 : ds->nseries - o->test_samples,
                t1 = ds->climate ? T - o->test_frames : T,
                t0 = sg_dataset_target_frame(o, 0, 0);
  double *sum = calloc((size_t)(2 * V * plane + 1), sizeof *sum);
  if (!sum) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  double *cnt = sum + V * plane;
  for (int64_t s = 0; s < s_train; ++s)
    for (int64_t t = t0; t < t1; ++t) {
      const float *d = ds->data + (s * T + t) * V * plane,
                  *mk = ds->mask + (s * T + t) * V * plane;
      for (int64_t i = 0; i < V * plane; ++i) {
        sum[i] += (double)d[i] * mk[i];
        cnt[i] += mk[i];
      }
    }
  for (int64_t i = 0; i < V * plane; ++i)
    clim[i] = cnt[i] > 0 ? (float)(sum[i] / cnt[i]) : 0.0f;
fail:
  free(sum);
  return st;
}

static int cmp_key(const void *a, const void *b) {
  const double *x = a, *y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : (x[1] > y[1]);
}

void sg_epoch_order(uint64_t seed, int64_t epoch, int64_t n, int64_t *perm) {
  double *k = malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof *k);
  if (!k) { /* no memory: the identity order (same on every rank) */
    for (int64_t i = 0; i < n; ++i) perm[i] = i;
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    k[2 * i] = sg_rng_uniform_f64(seed, 0x5eed0000u + (uint64_t)epoch,
                                  (uint64_t)i);
    k[2 * i + 1] = (double)i;
  }
  qsort(k, (size_t)n, 2 * sizeof *k, cmp_key);
  for (int64_t i = 0; i < n; ++i) perm[i] = (int64_t)k[2 * i + 1];
  free(k);
}
