/* shardgrid — forecast metrics on the sphere (WeatherBench 2 definitions).
 *
 * A forecast f and the observation o (N, V, ny, nx), N forecasts (e.g. init
 * times) of V variables on a latitude-longitude grid split over the domain
 * group (each rank its block of rows and columns), weighted by
 *
 *   w(lat) = cos(lat) / mean over the latitudes of cos(lat)
 *
 * and a mask m (1 valid, 0 masked: fill values, land), excluded from every
 * sum. Per forecast i and variable v, over the grid:
 *
 *   MSE_iv = sum w m (f - o)^2 / sum w m
 *   ACC_iv = sum w m f' o' / sqrt(sum w m f'^2 * sum w m o'^2),
 *            f' = f - c, o' = o - c, c the climatology
 *
 * and over the N forecasts (WeatherBench 2):
 *
 *   RMSE_v = sqrt(mean_i MSE_iv),  ACC_v = mean_i ACC_iv.
 *
 * The sums are local sums in double in a fixed order, then summed over the
 * domain group with the deterministic (rank-order) reduction: every rank
 * gets the same bits, and any split equals one process to rounding.
 */
#ifndef SG_METRICS_H
#define SG_METRICS_H

#include <stdint.h>

#include "sg_dtype.h"
#include "sg_mesh.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* w[j] = cos(lat[j]) over the mean of cos over the n latitudes (degrees;
 * the poles get 0). SG_ERR_INVALID_ARG when a latitude is not
 * finite or outside [-90, 90], or no weight is positive. Not collective:
 * pass the whole axis, then take this rank's rows. */
sg_status sg_lat_weights(int64_t n, const double *lat_deg, double *w);

/* This rank's block of N forecasts: f, o, mask (N, V, ny, nx) of dtype
 * (f32 or f64; mask may be NULL: all valid), c the climatology (V, ny, nx),
 * the same for every forecast (NULL: no ACC), wrow the weights of the ny
 * rows (NULL: all 1). */
typedef struct sg_metric_block {
  sg_dtype dtype;
  int64_t n, nvars, ny, nx;
  const double *wrow;
  const void *f, *o, *c, *mask;
} sg_metric_block;

/* Per forecast i and variable v (index i * V + v): mse (MSE_iv), acc
 * (ACC_iv; may be NULL, needs c) and wsum (sum w m, may be NULL: a forecast
 * with none valid has wsum 0 and MSE = ACC = 0; leave it out of the means).
 * A NaN/Inf in f or o at a valid point (or in c there) is
 * SG_ERR_INVALID_ARG on every rank of the domain group. Collective over
 * domain (NULL: not split). */
sg_status sg_dist_metrics(const sg_metric_block *b, sg_group_t domain,
                          double *mse, double *acc, double *wsum);

/* The relative L2 error over several blocks at once (the FNO paper's
 * rollout metric, Li et al. 2021: per sample, over all its predicted
 * frames, ||f - o|| / ||o||): per forecast i of this block, add the sums
 * over its variables and valid points of w m (f - o)^2 to sums[2 i] and of
 * w m o^2 to sums[2 i + 1] (b->c must be NULL), the same on every rank of
 * the domain group (deterministic reduction). After the last block, the
 * error of forecast i is sqrt(sums[2 i] / sums[2 i + 1]). A NaN/Inf at a
 * valid point is SG_ERR_INVALID_ARG on every rank, sums untouched.
 * Collective over domain (NULL: not split). */
sg_status sg_rel_l2_sums_add(const sg_metric_block *b, sg_group_t domain,
                             double *sums);

/* Scores accumulated over many forecasts (WeatherBench 2's means): per
 * slot (a lead time, a kind of forecast: the model, persistence,
 * climatology, ...) and variable, the sums of MSE_iv and ACC_iv over the
 * forecasts i scored into it and their counts. RMSE_v = sqrt(mean MSE),
 * ACC_v = mean ACC. sum: (nslots, nvars, 4) = sum MSE, count, sum ACC,
 * count of ACC; a driver may move it as a whole (e.g. broadcast it). */
typedef struct sg_scores {
  int64_t nslots, nvars;
  double *sum;
} sg_scores;

/* A zeroed accumulator (NULL: out of memory); free with sg_scores_free. */
sg_scores *sg_scores_new(int64_t nslots, int64_t nvars);
void sg_scores_free(sg_scores *s);
/* Score the first `valid` forecasts of a block (sg_dist_metrics; ACC when
 * b->c is given) into slot; a forecast with no valid point is left out.
 * Collective over domain (NULL: not split). */
sg_status sg_scores_add(sg_scores *s, int64_t slot, const sg_metric_block *b,
                        int64_t valid, sg_group_t domain);
/* Sum the accumulators of the ranks of group (they scored different
 * forecasts) in rank order: the same bits on every rank. Collective over
 * group (NULL or one rank: nothing). */
sg_status sg_scores_allreduce(sg_scores *s, sg_group_t group);
/* The RMSE and ACC of variable v in slot (NaN: nothing scored). */
double sg_scores_rmse(const sg_scores *s, int64_t slot, int64_t v);
double sg_scores_acc(const sg_scores *s, int64_t slot, int64_t v);

#ifdef __cplusplus
}
#endif
#endif /* SG_METRICS_H */
