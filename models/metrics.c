/* shardgrid — latitude-weighted forecast metrics (sg_metrics.h). */
#include "sg_metrics.h"

#include "sg_comm.h"

#include <math.h>
#include <stdlib.h>

sg_status sg_lat_weights(int64_t n, const double *lat_deg, double *w) {
  sg_status st = SG_OK;
  const double rad = acos(-1.0) / 180.0;
  double sum = 0.0;
  if (n < 1 || !lat_deg || !w)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_lat_weights: no latitudes");
  for (int64_t j = 0; j < n; ++j) {
    if (!isfinite(lat_deg[j]) || fabs(lat_deg[j]) > 90.0)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "sg_lat_weights: latitude %lld is %g, not in [-90, 90] degrees",
               (long long)j, lat_deg[j]);
    /* cos(90 deg) rounds to 6e-17, not 0 */
    w[j] = fabs(lat_deg[j]) == 90.0 ? 0.0 : cos(lat_deg[j] * rad);
    sum += w[j];
  }
  if (!(sum > 0.0))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_lat_weights: every latitude is a pole");
  for (int64_t j = 0; j < n; ++j) w[j] *= (double)n / sum;
fail:
  return st;
}

enum { NS = 5 }; /* per (i, v): sum w m, (f-o)^2, f'o', f'^2, o'^2 */

static inline double ld(const void *p, sg_dtype dt, int64_t i) {
  return dt == SG_DTYPE_F32 ? (double)((const float *)p)[i]
                            : ((const double *)p)[i];
}

/* The sums of forecast i, variable v over this rank's block into s[NS];
 * returns the number of non-finite values at valid points. */
static double block_sums(const sg_metric_block *b, int64_t i, int64_t v,
                         double *s) {
  const int64_t plane = b->ny * b->nx, off = (i * b->nvars + v) * plane;
  double bad = 0.0;
  for (int k = 0; k < NS; ++k) s[k] = 0.0;
  for (int64_t j = 0; j < b->ny; ++j) {
    const double wj = b->wrow ? b->wrow[j] : 1.0;
    for (int64_t x = 0; x < b->nx; ++x) {
      const int64_t e = off + j * b->nx + x, ce = v * plane + j * b->nx + x;
      const double w = wj * (b->mask ? ld(b->mask, b->dtype, e) : 1.0);
      if (w == 0.0) continue; /* masked: skipped whatever it holds */
      const double f = ld(b->f, b->dtype, e), o = ld(b->o, b->dtype, e),
                   c = b->c ? ld(b->c, b->dtype, ce) : 0.0;
      if (!isfinite(f) || !isfinite(o) || !isfinite(c) || !isfinite(w)) {
        bad += 1.0;
        continue;
      }
      const double fa = f - c, oa = o - c;
      s[0] += w;
      s[1] += w * (f - o) * (f - o);
      s[2] += w * fa * oa;
      s[3] += w * fa * fa;
      s[4] += w * oa * oa;
    }
  }
  return bad;
}

/* Every (forecast, variable) block's sums, NS each, into *out (allocated
 * here, NS * n * nvars), summed over the domain group in rank order; a
 * NaN/Inf at a valid point anywhere is an error on every rank. */
static sg_status metric_sums(const sg_metric_block *b, sg_group_t domain,
                             const char *who, double **out) {
  sg_status st = SG_OK;
  *out = NULL;
  if (!b || !b->f || !b->o || b->n < 0 || b->nvars < 1 || b->ny < 0 ||
      b->nx < 0 || (b->dtype != SG_DTYPE_F32 && b->dtype != SG_DTYPE_F64))
    return sg_error_set(
        SG_ERR_INVALID_ARG, __FILE__, __LINE__,
        "%s: bad block (f32/f64 f and o; n, nvars, ny, nx >= 0)", who);
  const int64_t nv = b->n * b->nvars, ns = NS * nv + 1;
  double *s = malloc((size_t)ns * sizeof *s);
  if (!s)
    return sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  s[ns - 1] = 0.0;
#pragma omp parallel for schedule(static) if (nv * b->ny * b->nx > 65536)
  for (int64_t k = 0; k < nv; ++k) {
    const double bad = block_sums(b, k / b->nvars, k % b->nvars, s + NS * k);
    if (bad > 0) {
#pragma omp atomic
      s[ns - 1] += bad;
    }
  }
  if (domain && sg_group_size(domain) > 1)
    SG_TRY(sg_allreduce_det(domain, s, s, ns, SG_DTYPE_F64, SG_REDUCE_SUM));
  if (s[ns - 1] > 0)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "%s: %.0f NaN/Inf value(s) in the forecast, the observation or "
             "the climatology at valid points",
             who, s[ns - 1]);
  *out = s;
  s = NULL;
fail:
  free(s);
  return st;
}

sg_status sg_dist_metrics(const sg_metric_block *b, sg_group_t domain,
                          double *mse, double *acc, double *wsum) {
  sg_status st = SG_OK;
  double *s = NULL;
  if (!mse || (b && acc && !b->c))
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_dist_metrics: no output, or the ACC without c");
  SG_TRY(metric_sums(b, domain, "sg_dist_metrics", &s));
  for (int64_t k = 0; k < b->n * b->nvars; ++k) {
    const double *q = s + NS * k, den = sqrt(q[3] * q[4]);
    mse[k] = q[0] > 0.0 ? q[1] / q[0] : 0.0;
    if (acc) acc[k] = q[0] > 0.0 && den > 0.0 ? q[2] / den : 0.0;
    if (wsum) wsum[k] = q[0];
  }
fail:
  free(s);
  return st;
}

sg_status sg_rel_l2_sums_add(const sg_metric_block *b, sg_group_t domain,
                             double *sums) {
  sg_status st = SG_OK;
  double *s = NULL;
  if (!sums || (b && b->c))
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_rel_l2_sums_add: no sums, or a climatology (the "
                        "relative L2 is of the fields themselves)");
  SG_TRY(metric_sums(b, domain, "sg_rel_l2_sums_add", &s));
  for (int64_t i = 0; i < b->n; ++i)
    for (int64_t v = 0; v < b->nvars; ++v) {
      const double *q = s + NS * (i * b->nvars + v);
      sums[2 * i] += q[1];     /* sum w m (f - o)^2 */
      sums[2 * i + 1] += q[4]; /* sum w m o^2 (c = 0) */
    }
fail:
  free(s);
  return st;
}

sg_scores *sg_scores_new(int64_t nslots, int64_t nvars) {
  sg_scores *s = calloc(1, sizeof *s);
  if (!s || nslots < 1 || nvars < 1) {
    free(s);
    return NULL;
  }
  s->nslots = nslots, s->nvars = nvars;
  s->sum = calloc((size_t)(4 * nslots * nvars), sizeof *s->sum);
  if (!s->sum) {
    free(s);
    return NULL;
  }
  return s;
}

void sg_scores_free(sg_scores *s) {
  if (!s) return;
  free(s->sum);
  free(s);
}

sg_status sg_scores_add(sg_scores *s, int64_t slot, const sg_metric_block *b,
                        int64_t valid, sg_group_t domain) {
  sg_status st = SG_OK;
  const int64_t V = b->nvars, n = b->n * V;
  double *mse = NULL;
  if (!s || slot < 0 || slot >= s->nslots || V != s->nvars || valid > b->n)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_scores_add: slot %lld of %lld, %lld variables of %lld, %lld "
             "valid of %lld forecasts",
             (long long)slot, (long long)(s ? s->nslots : 0), (long long)V,
             (long long)(s ? s->nvars : 0), (long long)valid, (long long)b->n);
  mse = malloc((size_t)(3 * n + 1) * sizeof *mse);
  if (!mse) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  double *acc = mse + n, *wsum = acc + n;
  SG_TRY(sg_dist_metrics(b, domain, mse, b->c ? acc : NULL, wsum));
  for (int64_t j = 0; j < valid; ++j)
    for (int64_t v = 0; v < V; ++v) {
      if (!(wsum[j * V + v] > 0)) continue; /* nothing valid */
      double *a = s->sum + (slot * V + v) * 4;
      a[0] += mse[j * V + v];
      a[1] += 1.0;
      if (b->c) a[2] += acc[j * V + v], a[3] += 1.0;
    }
fail:
  free(mse);
  return st;
}

sg_status sg_scores_allreduce(sg_scores *s, sg_group_t group) {
  if (!group || sg_group_size(group) < 2) return SG_OK;
  return sg_allreduce_det(group, s->sum, s->sum, 4 * s->nslots * s->nvars,
                          SG_DTYPE_F64, SG_REDUCE_SUM);
}

double sg_scores_rmse(const sg_scores *s, int64_t slot, int64_t v) {
  const double *a = s->sum + (slot * s->nvars + v) * 4;
  return a[1] > 0 ? sqrt(a[0] / a[1]) : NAN;
}

double sg_scores_acc(const sg_scores *s, int64_t slot, int64_t v) {
  const double *a = s->sum + (slot * s->nvars + v) * 4;
  return a[3] > 0 ? a[2] / a[3] : NAN;
}
