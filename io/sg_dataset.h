/* shardgrid — dataset helpers: normalisation statistics and sample order.
 *
 * Normalisation statistics: per-channel mean and standard deviation over
 * (time, [level], lat, lon), optionally area-weighted by cos(latitude),
 * masked points excluded, computed in parallel in one pass: each rank
 * accumulates its slab with Welford's update, the partial (weight, mean,
 * M2) of the ranks are merged with Chan's formula in rank order on every
 * rank (the same bits on every rank). Stored as a small NetCDF file the
 * loader reuses.
 *
 * Sample order: a permutation of the samples keyed by (seed, epoch) only —
 * the same on every mesh — from the counter-based RNG (sort by random
 * keys). Samples are windows in time: `history` input frames followed by
 * `lead` target frames.
 */
#ifndef SG_DATASET_H
#define SG_DATASET_H

#include <mpi.h>
#include <stdint.h>

#include "sg_nc.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_DS_MAX_CHANNELS 64

/* Running statistics of one channel (weighted Welford). */
typedef struct sg_ds_moments {
  double w;    /* sum of weights */
  double mean; /* weighted mean */
  double m2;   /* sum of w * (x - mean)^2 */
  int64_t n;   /* number of values */
} sg_ds_moments;

/* Add n values (weights may be NULL: all 1; mask may be NULL: all valid).
 * Not collective. */
void sg_ds_moments_add(sg_ds_moments *m, const float *x, const double *w,
                       const uint8_t *mask, int64_t n);
/* Merge b into a (Chan et al.). Not collective. */
void sg_ds_moments_merge(sg_ds_moments *a, const sg_ds_moments *b);
/* Merge the moments of every rank of comm, in rank order (bitwise the same
 * result on every rank). nchan channels. Collective. */
sg_status sg_ds_moments_allmerge(MPI_Comm comm, int nchan, sg_ds_moments *m);

typedef struct sg_ds_stats {
  int nchan;
  char names[SG_DS_MAX_CHANNELS][SG_NC_NAME_MAX];
  double mean[SG_DS_MAX_CHANNELS];
  double std[SG_DS_MAX_CHANNELS]; /* population std, sqrt(M2 / W) */
  int64_t count[SG_DS_MAX_CHANNELS];
  int area_weighted;
} sg_ds_stats;

/* Statistics of the variables `names` (each (time, [level], lat, lon)) of
 * a file: each rank reads a balanced split of the lat dim, frame by frame;
 * masked points (_FillValue/missing_value, and NaN/Inf values) are skipped; with area_weight
 * each point counts cos(lat) (the "lat" coordinate, after dim_map, in
 * degrees). Collective over comm. */
sg_status sg_ds_stats_compute(MPI_Comm comm, const char *path,
                              const char *dim_map, int nvars,
                              const char *const *names, int area_weight,
                              sg_ds_stats *stats);

/* Store / load statistics as a small NetCDF file: variables mean(channel)
 * and std(channel), count(channel), channel names in the "channels"
 * attribute. Collective over comm. */
sg_status sg_ds_stats_save(MPI_Comm comm, const char *path,
                           const sg_ds_stats *stats);
sg_status sg_ds_stats_load(MPI_Comm comm, const char *path, sg_ds_stats *stats);

/* Number of samples of a series of ntime frames with history input and
 * lead target frames: ntime - history - lead + 1. SG_ERR_SHAPE (a clear
 * message) if that is < 1: the dataset is shorter than one sample. Not
 * collective. */
sg_status sg_ds_num_samples(int64_t ntime, int64_t history, int64_t lead,
                            int64_t *nsamples);

/* The sample order of an epoch: a permutation of [0, n) that depends only
 * on (seed, epoch). Not collective. */
sg_status sg_ds_sample_order(uint64_t seed, uint64_t epoch, int64_t n,
                             int64_t *order);

/* The samples of data rank dp_rank (of dp_size) for global step `step`
 * with global batch `batch`: disjoint slices of the epoch's order. Writes
 * *count <= ceil(batch / dp_size) sample indices. Not collective. */
sg_status sg_ds_batch_samples(const int64_t *order, int64_t n, int64_t batch,
                              int64_t step, int dp_rank, int dp_size,
                              int64_t *samples, int64_t *count);

#ifdef __cplusplus
}
#endif
#endif /* SG_DATASET_H */
