/* sg-train — internal interfaces of the training driver. */
#ifndef SG_TRAIN_H
#define SG_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_dist_loss.h"
#include "sg_kv.h"
#include "sg_metrics.h"
#include "sg_mesh.h"
#include "sg_model.h"
#include "sg_nc.h"
#include "sg_parallel.h"
#include "sg_pipeline.h"
#include "sg_rollout_train.h"
#include "sg_status.h"

/* A dataset held in memory: every rank keeps its (y, x) slab of every
 * series, frame and variable, normalised, with a validity mask.
 *   NS-style files: var(sample, time, y, x)   -> nseries = samples
 *   climate files:  var(time, lat, lon)       -> nseries = 1 */
typedef struct sg_dataset {
  int nvars;
  char vars[8][64];
  int64_t nseries, nframes, ny_g, nx_g; /* global */
  int64_t y0, ny, x0, nx;               /* this rank's slab */
  float *data;                          /* (nseries, nframes, nvars, ny, nx) */
  float *mask;                          /* same; 1 valid, 0 masked */
  int has_mask;                         /* any masked value anywhere */
  double mean[8], std[8];               /* per variable (training part) */
  int climate;                          /* 1: series split by time */
  double *lat;  /* latitudes of the ny_g rows (degrees), NULL: none */
  double *wrow; /* their weights (sg_lat_weights), this rank's ny rows */
} sg_dataset;

/* An example: inputs are frames [t0, t0 + history), the target of
 * autoregressive step k (0 for the one-step target) is frame
 * t0 + history - 1 + (k + 1) * lead of the same series
 * (sg_dataset_target_frame). */
typedef struct sg_example {
  int64_t series, t0;
} sg_example;

typedef struct sg_data_opts {
  const char *path;
  const char *vars;    /* comma-separated */
  const char *dim_map; /* "FROM=to,..." */
  const char *backend; /* auto | pnetcdf | netcdf4 | serial */
  int64_t history, lead;
  /* frames predicted at once (>= 1; > 1: a space-time sample, e.g. for
   * fno3d): the targets of an example are the frames of steps 0 ..
   * out_frames - 1 (sg_dataset_target_frame), as out_frames x nvars
   * channels (frame-major); sample datasets, one-step training only */
  int64_t out_frames;
  /* autoregressive steps of a training example (rollout_train): its
   * targets are steps 0 .. steps - 1 (0 or 1: the one-step target). The
   * test examples stay one-step. */
  int64_t steps;
  int64_t test_samples; /* NS: last samples held out */
  int64_t test_frames;  /* climate: last frames held out (targets) */
  int split_h, split_w; /* mesh dims splitting y and x (-1: none) */
  /* NaN/Inf values that are not _FillValue/missing_value: 0 (default)
   * treats them as missing (mask 0, like fill values: real files mark land
   * points with NaN while declaring _FillValue = 1e20); 1 rejects the file
   * (SG_ERR_CORRUPT naming the file, the variable and the count). */
  int reject_nonfinite;
} sg_data_opts;

/* Load the slab of this rank (given by the box) and normalise with
 * statistics over the training part, reduced over `domain`. Masked points
 * (_FillValue, missing_value, and NaN/Inf unless reject_nonfinite) get
 * mask 0 and value 0 and stay out of the statistics. Collective over
 * MPI_COMM_WORLD. */
sg_status sg_dataset_load(const sg_data_opts *o, int64_t y0, int64_t ny,
                          int64_t x0, int64_t nx, sg_group_t domain,
                          sg_dataset *ds);
/* Only the global shape (ny, nx) and the number of variables, read from the
 * header (to build the model before the slab is known). Collective. */
sg_status sg_dataset_peek(const sg_data_opts *o, int64_t *ny, int64_t *nx,
                          int *nvars);
sg_status sg_dataset_free(sg_dataset *ds);

/* Train and test examples (malloc'd arrays). */
sg_status sg_dataset_examples(const sg_dataset *ds, const sg_data_opts *o,
                              sg_example **train, int64_t *ntrain,
                              sg_example **test, int64_t *ntest);

/* The frame of the target of autoregressive step k of an example that
 * starts at frame t0 (k = 0: the one-step target). */
int64_t sg_dataset_target_frame(const sg_data_opts *o, int64_t t0, int64_t k);

/* Copy the inputs and target of `n` examples into x (n, nvars*history, ny,
 * nx), y (n, out_frames*nvars, ny, nx) and m (mask of y). */
void sg_dataset_fill(const sg_dataset *ds, const sg_data_opts *o,
                     const sg_example *ex, int64_t n, float *x, float *y,
                     float *m);
/* The same with the targets of autoregressive steps 0 .. steps - 1: y and
 * m (steps, n, nvars, ny, nx), step-major. */
void sg_dataset_fill_steps(const sg_dataset *ds, const sg_data_opts *o,
                           const sg_example *ex, int64_t n, int64_t steps,
                           float *x, float *y, float *m);

/* Climatology: the mean of the training targets (the one-step targets of
 * the training examples: frames history - 1 + lead .. of the training
 * series, or of the training frames of a time series) per variable and
 * grid point of this rank's slab, normalised, over the valid values (0, the
 * training mean, where none is valid). clim: (nvars, ny, nx). The same
 * value on every mesh (per-point sums in a fixed order). Not collective. */
sg_status sg_dataset_climatology(const sg_dataset *ds, const sg_data_opts *o,
                                 float *clim);

/* The order of the training examples in an epoch: a permutation of
 * [0, n) keyed by (seed, epoch), the same on every rank and mesh. */
void sg_epoch_order(uint64_t seed, int64_t epoch, int64_t n, int64_t *perm);

/* Climate data (climate.c). ds->lat and ds->wrow when the y dim is named
 * "lat" (after dim_map) and has a coordinate variable (else NULL). f: the
 * open dataset. Collective. */
sg_status sg_dataset_latitudes(sg_nc_t f, sg_dataset *ds);

/* Pipeline parallelism (pipe.c): a "pp" mesh dim runs the model's pieces
 * (sg_model_nblocks) as stages under strategies/pipeline.c. */
int sg_train_pp_on(sg_mesh_t mesh);
/* Refuse what a pipeline cannot do yet and pipeline keys without pp
 * (config only: the same verdict on every rank). Not collective. */
sg_status sg_train_pp_check(sg_kv_t kv, sg_mesh_t mesh);
/* The runtime from pp_schedule, microbatches, pp_virtual, pp_split for a
 * model built on stage_mesh (sg_pipe_stage_mesh_create of mesh) for
 * micro-batches of batch samples of cin channels (pp_split = auto times
 * its pieces on them: the model is bound again afterwards); "model X has
 * no pipeline pieces yet" for a model without pieces. Collective over
 * mesh. */
sg_status sg_train_pp_create(sg_kv_t kv, sg_mesh_t mesh, sg_mesh_t stage_mesh,
                             sg_model_t model, const char *model_name,
                             int64_t batch, int64_t cin, sg_pipe_t *pipe);
/* One step's pipeline run: micro-batch k is the training examples
 * perm[k * lbatch .. (k + 1) * lbatch) of this data rank; x, y, mask hold
 * micro micro-batches (vy, vm: the last stage's targets and masks, micro
 * variables each; the inputs are sg_pipe_model_run's). Multi-step
 * training (steps K > 1, rollout_grad = pushforward): y and mask hold K
 * targets per micro-batch (step-major, sg_dataset_fill_steps); steps
 * 1 .. K-1 run forward only through the stages (the last one's
 * predictions, pred, sent to every stage, which feed them back), and the
 * training run's loss is step K's. */
typedef struct sg_train_pp_step {
  sg_pipe_t pipe;
  sg_model_t model;
  const sg_dataset *ds;
  const sg_data_opts *dopt;
  const sg_example *train;
  const int64_t *perm;
  int64_t lbatch, cin, cout, gbatch;
  int micro, has_mask;
  sg_loss_kind loss;
  sg_group_t domain, data;
  float *x, *y, *mask;
  sg_var *vy, *vm;
  sg_var *weight; /* loss_weighting = latitude: run_t's lw, else NULL */
  int64_t steps;  /* this step's K (1: one-step training) */
  int64_t history, nvars;
  float *pred; /* K > 1: micro * lbatch predicted frames */
} sg_train_pp_step;
/* Forwards and backwards of the step (sg_pipe_model_run); *loss the step's loss
 * on every rank. Collective. */
sg_status sg_train_pp_run(sg_train_pp_step *s, double *loss);

/* The driver's state (main.c; the evaluation in eval.c). */
typedef struct run {
  sg_kv_t kv;
  sg_mesh_t mesh;
  sg_mesh_t
      smesh; /* the model's mesh: the stage mesh under pp (owned), else mesh */
  sg_pipe_t pipe; /* pipeline runtime (a pp dim), else NULL */
  sg_train_pp_step pps;
  int rank, size;
  int ndp, cdp;
  sg_group_t domain, data;
  sg_data_opts dopt;
  sg_dataset ds;
  sg_example *train, *test;
  int64_t ntrain, ntest;
  int64_t gbatch, lbatch,
      ebatch; /* global per step; the model's (a micro-batch); per evaluation batch */
  char mesh_spec[128];
  sg_model_t model;
  int64_t nparam;
  sg_tape_t tape;
  sg_parallel_config pcfg;
  sg_parallel_t plan; /* the parallelism: buffers, reductions, optimizer */
  int64_t micro;      /* micro-batches per step (grad_accum) */
  int deterministic;
  FILE *metrics;
  int64_t cin, cout;
  float *xb, *yb, *mb;
  sg_loss_kind loss_kind;
  int64_t ar_steps, ar_curriculum; /* rollout_train, rollout_curriculum */
  int ar_pushforward, ar_ckpt;     /* rollout_grad; checkpoint each step */
  sg_var *ar_leaves;               /* 1 + 2 * ar_steps */
  float *clim;                     /* climatology (nvars, ny, nx) */
  int stop;  /* the signal that stopped the run (SIGTERM, SIGINT), 0: none */
  sg_var lw; /* loss_weighting = latitude: the loss weights */
  int has_lw;
  sg_device dev;    /* device = cuda: the model's GPU, else the host */
  void *dxb, *dyb;  /* device = cuda: xb, yb on the device (their sizes) */
  double *wmetrics; /* the last evaluation's latitude-weighted RMSE, ACC per
                     * EV_* and variable ([2 * (k * nvars + v)] ..), NULL:
                     * no latitudes */
} run_t;

/* What an evaluation scores: the model and the baselines (persistence:
 * the last input frame; climatology: the training targets' mean). */
enum { EV_MODEL, EV_PERSISTENCE, EV_CLIMATOLOGY, EV_N };

/* Evaluation (eval.c). The mean relative L2 over the test examples, one
 * step ahead, in physical units (every data rank its share; under pp
 * forward through the stages, scored on the last), of the model and the
 * baselines: rel_out[EV_*]; with out the predictions and targets are
 * written there (NetCDF). Collective. */
sg_status sg_train_evaluate(run_t *r, const char *out, double *rel_out);
/* Autoregressive rollout of `steps` frames on the test series (sample
 * datasets): rel_out[i * steps + k] the mean relative L2 at lead k + 1 of
 * the model (i = EV_MODEL) and the baselines, rel_out[EV_N * steps] the
 * model's per-example relative L2 over all the frames at once, mean over
 * the examples (the FNO paper's metric). Collective. */
sg_status sg_train_rollout(run_t *r, int64_t steps, double *rel_out);

/* The model's output (normalised, lbatch examples) of the inputs x, no
 * tape kept (climate.c; eval.c uses it too). Collective over the model's groups. */
sg_status sg_train_predict(run_t *r, const float *x, float *pred);

/* Latitude weighting (climate.c). loss_weighting = none | latitude: r->lw
 * the weights of a micro-batch's targets (cos(lat), sg_lat_weights).
 * Config and dataset only: the same verdict on every rank. */
sg_status sg_train_loss_weights(run_t *r);
/* The latitude-weighted RMSE and ACC of an evaluation (sg_metrics.h):
 * accumulators (NULL without latitudes), the sums of a batch's first
 * `valid` forecasts f of kind EV_* (physical units, masked) against truth
 * (collective over the domain), the result in r->wmetrics (reduced over
 * the data ranks, from the last stage under pp: collective), reported on
 * rank 0's log and as a metrics line. */
sg_scores *sg_train_wm_alloc(const run_t *r);
sg_status sg_train_wm_add(run_t *r, int64_t slot, const float *f,
                          const float *truth, const float *mask, int64_t valid,
                          sg_scores *wm);
sg_status sg_train_wm_finish(run_t *r, sg_scores *wm);
void sg_train_wm_report(const run_t *r, int64_t step);
/* rollout = K on a time series: from every test initialisation, the model
 * fed its own predictions K times; the latitude-weighted RMSE and ACC of
 * the model and the baselines (persistence: the init's last frame) at each
 * lead over the inits whose target lies in the data, on the log and as a
 * metrics line (rmse_VAR[_persistence|_climatology]_leads, acc_..._leads:
 * arrays over the leads). Needs latitudes; not under pp. Collective. */
sg_status sg_train_climate_leads(run_t *r, int64_t K, int64_t step);

/* What a checkpoint records (ckpt_config.c; the model's kind and sizes
 * are read from a config by sg_model_config_from_kv). The config text of a
 * checkpoint (malloc'd; NULL: out of memory): the settings ("key = value" lines, sg_kv_dump), then what else fixes the data
 * a run sees, as comment lines ("# key = value": a config reader skips
 * them): "# grid = NY x NX" and "# train_examples = N" (with the global
 * batch they must match on resume, or the data order would not continue),
 * and the normalisation "# data_mean = m0,m1,..", "# data_std = s0,.."
 * (per variable; sg-forecast's). */
#define SG_CKPT_GRID_KEY "grid"
#define SG_CKPT_EXAMPLES_KEY "train_examples"
#define SG_CKPT_MEAN_KEY "data_mean"
#define SG_CKPT_STD_KEY "data_std"
char *sg_train_ckpt_config(const run_t *r);

#endif /* SG_TRAIN_H */
