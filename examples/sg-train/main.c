/* sg-train — train a spectral or convolutional model on a sharded NetCDF
 * dataset under mpiexec, on any mesh the parallel plan supports (data: dp;
 * sharded data, ZeRO: fsdp; domain: h, w; pipeline stages: pp, for models
 * with pieces, see pipe.c). The parallelism itself lives in the library
 * (strategies/sg_parallel.h, sg_pipeline.h); this is a thin driver over it.
 *
 *   mpiexec -n 4 sg-train --config examples/configs/ns2d_fno.cfg \
 *                         --mesh dp=2,h=2 --steps 200
 *
 * Rank 0 prints one line per step (step, loss, lr, samples/s, and the time
 * split compute / halo / collectives / io); --metrics writes JSON lines.
 * SIGTERM or SIGINT (to mpiexec or any rank) stops every rank at the next
 * step with a checkpoint and exit status 128 + signal (docs/reliability.md). */
#if SG_TRAIN_CKPT
#include "sg_ckpt.h"
#endif
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_decomp.h"
#include "sg_device.h"
#include "sg_dist_loss.h"
#include "sg_kv.h"
#include "sg_log.h"
#include "sg_mesh.h"
#include "sg_model.h"
#include "sg_nc.h"
#include "sg_optim.h"
#include "sg_parallel.h"
#include "sg_plan.h"
#include "sg_stop.h"
#include "sg_threads.h"
#include "sg_trace.h"
#include "keys.h"
#include "train.h"

#include <errno.h>
#include <math.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


/* A JSON number: non-finite values are written as null (JSON has no NaN). */
static void json_num(FILE *f, double x) {
  if (isfinite(x))
    fprintf(f, "%.17g", x);
  else
    fputs("null", f);
}

/* One metrics line {"step": s, key: value, ...} (rank 0's file). */
static void metrics_line(run_t *r, int64_t step, int n,
                         const char *const *names, const double *vals) {
  if (!r->metrics) return;
  fprintf(r->metrics, "{\"step\": %lld", (long long)step);
  for (int i = 0; i < n; ++i) {
    fprintf(r->metrics, ", \"%s\": ", names[i]);
    json_num(r->metrics, vals[i]);
  }
  fputs("}\n", r->metrics);
  fflush(r->metrics); /* a killed run's metrics end where the run did */
}

/* The checkpoint of a step: <ckpt_dir>/step_NNNNNN.nc */
static void ckpt_path(const run_t *r, int64_t step, char *buf, size_t size) {
  snprintf(buf, size, "%s/step_%06lld.nc", sg_kv_str(r->kv, "ckpt_dir"),
           (long long)step);
}

#if SG_TRAIN_CKPT
/* The checkpoint's arrays: the plan's, or under a pipeline the whole
 * model's (each stage its parameters, the others' with count 0), so a
 * pipeline writes one file in the same format. Collective. */
static sg_status ckpt_arrays(run_t *r, int writing, sg_ckpt_array **arr,
                             int *narr) {
  return r->pipe ? sg_pipe_model_ckpt_arrays(r->pipe, r->plan, r->model,
                                             writing, arr, narr)
                 : sg_parallel_ckpt_arrays(r->plan, writing, arr, narr);
}

/* Checkpoints: every parameter and its AdamW moments as a global variable
 * ("params.<name>", "adam_m.<name>", "adam_v.<name>") of the parameter's
 * global shape, written by its shards — one rank of each replica group
 * writes its box (rank 0 for Replicate parameters) — and read by any mesh
 * as the boxes it needs; the step, seed, data position, config and mesh
 * are metadata. */
static sg_status save_checkpoint(run_t *r, int64_t step) {
  sg_status st = SG_OK;
  char path[4096];
  sg_ckpt_array *arr = NULL;
  int narr = 0;
  sg_ckpt_meta meta;
  memset(&meta, 0, sizeof meta);
  ckpt_path(r, step, path, sizeof path);
  SG_TRY(ckpt_arrays(r, 1, &arr, &narr));
  meta.step = step;
  meta.rng_seed = (uint64_t)sg_kv_int(r->kv, "seed");
  meta.data_position = step * r->gbatch;
  snprintf(meta.mesh, sizeof meta.mesh, "%s", r->mesh_spec);
  meta.config = sg_train_ckpt_config(r);
  double t0 = sg_wtime();
  sg_trace_begin("io");
  st = sg_ckpt_write(MPI_COMM_WORLD, path, narr, arr, &meta, NULL);
  sg_trace_end("io");
  free(meta.config);
  if (r->pipe) sg_pipe_ckpt_arrays_free(&arr);
  SG_TRY(st);
  sg_log_info("checkpoint %s written (%.2f s)", path, sg_wtime() - t0);
fail:
  return st;
}

/* The value of `key` in a config dump ("key = value" lines) into buf. */
static int config_value(const char *text, const char *key, char *buf,
                        size_t size) {
  size_t kl = strlen(key);
  for (const char *p = text; p && *p;) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n > kl + 3 && strncmp(p, key, kl) == 0 &&
        strncmp(p + kl, " = ", 3) == 0) {
      size_t vl = n - kl - 3 < size - 1 ? n - kl - 3 : size - 1;
      memcpy(buf, p + kl + 3, vl);
      buf[vl] = '\0';
      return 1;
    }
    p = e ? e + 1 : NULL;
  }
  return 0;
}

/* The checkpoint must hold the model this run builds: same kind (recorded
 * in the checkpoint's config; checkpoints without one are FNO checkpoints)
 * and the same sizes. Not collective. */
static sg_status check_ckpt_model(run_t *r, const char *path,
                                  const char *config) {
  sg_status st = SG_OK;
  const char *kind = sg_kv_str(r->kv, "model");
  char ck[256] = "fno", mine[256];
  if (config) config_value(config, "model", ck, sizeof ck);
  if (strcmp(ck, kind) != 0)
    SG_RAISE(
        SG_ERR_CONFIG,
        "checkpoint %s holds a '%s' model; this run builds '%s' (--model %s to resume it)",
        path, ck, kind, ck);
  const char *const *skeys = sg_model_size_keys(
      r->model); /* the model table's */
  for (int i = 0; config && skeys && skeys[i]; ++i) {
    if (!config_value(config, skeys[i], ck, sizeof ck)) continue;
    snprintf(mine, sizeof mine, "%s", sg_kv_str(r->kv, skeys[i]));
    if (strcmp(ck, mine) != 0)
      SG_RAISE(
          SG_ERR_CONFIG,
          "checkpoint %s holds a %s model with %s = %s; this run has %s = %s",
          path, kind, skeys[i], ck, skeys[i], mine);
  }
fail:
  return st;
}

/* The checkpoint must have seen the data this run sees, in the same order:
 * the same grid and training examples (recorded by sg_train_ckpt_config; not
 * checked for checkpoints without them) and the same global batch. Not
 * collective. */
static sg_status check_ckpt_data(const run_t *r, const char *path,
                                 const sg_ckpt_meta *m) {
  sg_status st = SG_OK;
  char v[64];
  long long ny = 0, nx = 0;
  if (m->config && config_value(m->config, "# grid", v, sizeof v) &&
      (sscanf(v, "%lld x %lld", &ny, &nx) != 2 || ny != r->ds.ny_g ||
       nx != r->ds.nx_g))
    SG_RAISE(
        SG_ERR_CONFIG,
        "checkpoint %s was written for a %s grid; the data %s are %lld x %lld",
        path, v, sg_kv_str(r->kv, "data"), (long long)r->ds.ny_g,
        (long long)r->ds.nx_g);
  if (m->config && config_value(m->config, "# train_examples", v, sizeof v) &&
      strtoll(v, NULL, 10) != r->ntrain)
    SG_RAISE(
        SG_ERR_CONFIG,
        "checkpoint %s was written with %s training examples, this run has %lld: the data order would not continue",
        path, v, (long long)r->ntrain);
  if (m->data_position != m->step * r->gbatch)
    SG_RAISE(
        SG_ERR_CONFIG,
        "checkpoint %s was written with global batch %lld (%lld examples consumed), this run has %lld: the data order would not continue",
        path, (long long)(m->step > 0 ? m->data_position / m->step : 0),
        (long long)m->data_position, (long long)r->gbatch);
fail:
  return st;
}

static sg_status load_checkpoint(run_t *r, const char *path, int64_t *step) {
  sg_status st = SG_OK;
  sg_ckpt_array *arr = NULL;
  int narr = 0;
  sg_ckpt_meta meta;
  memset(&meta, 0, sizeof meta);
  SG_TRY(ckpt_arrays(r, 0, &arr, &narr));
  sg_trace_begin("io");
  st = sg_ckpt_read(MPI_COMM_WORLD, path, 0, arr, &meta);
  if (st == SG_OK)
    st = sg_agree(MPI_COMM_WORLD, check_ckpt_model(r, path, meta.config));
  if (st == SG_OK)
    st = sg_agree(MPI_COMM_WORLD, check_ckpt_data(r, path, &meta));
  if (st == SG_OK) st = sg_ckpt_read(MPI_COMM_WORLD, path, narr, arr, NULL);
  sg_trace_end("io");
  SG_TRY(st);
  if (!r->pipe) /* a device plan: the host copies to the device */
    SG_TRY(sg_agree(MPI_COMM_WORLD, sg_parallel_ckpt_loaded(r->plan)));
  if (meta.rng_seed != (uint64_t)sg_kv_int(r->kv, "seed"))
    SG_RAISE(SG_ERR_CONFIG,
             "checkpoint %s was written with seed %llu, this run has seed %lld",
             path, (unsigned long long)meta.rng_seed,
             (long long)sg_kv_int(r->kv, "seed"));
  *step = meta.step;
  sg_log_info("resumed from %s: step %lld (written on mesh %s)", path,
              (long long)meta.step, meta.mesh);
fail:
  if (r->pipe) sg_pipe_ckpt_arrays_free(&arr);
  free(meta.config);
  return st;
}

#else
static sg_status save_checkpoint(run_t *r, int64_t step) {
  (void)r;
  (void)step;
  return sg_error_set(
      SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
      "checkpoints are not supported by this build (io/sg_ckpt.h missing)");
}
static sg_status load_checkpoint(run_t *r, const char *path, int64_t *step) {
  (void)r;
  (void)step;
  return sg_error_set(
      SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
      "cannot resume from %s: checkpoints are not supported by this build",
      path);
}
#endif

/* mkdir -p on rank 0; every rank learns the outcome. Collective. */
static sg_status make_dir(const char *path, int rank) {
  sg_status st = SG_OK;
  if (rank == 0) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; st == SG_OK; ++p) {
      char c = *p;
      if (c == '/' || c == '\0') {
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
          st = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                            "cannot create directory '%s': %s", buf,
                            strerror(errno));
        *p = c;
        if (c == '\0') break;
      }
    }
  }
  return sg_agree(MPI_COMM_WORLD, st);
}

/* A clean stop (sg_stop.h): at a step boundary, after `done` steps, the
 * ranks agree whether any of them received SIGTERM or SIGINT. If so, the
 * checkpoint of step `done` is written (with ckpt_dir, unless `saved`: the
 * schedule just wrote it; none when this run did no step, first > done),
 * rank 0 says so, and r->stop is set: the caller ends the run, which exits
 * with 128 + the signal. Collective. */
static sg_status stop_check(run_t *r, int64_t done, int64_t first, int saved) {
  sg_status st = SG_OK;
  int sig = 0;
  SG_TRY(sg_stop_agree(MPI_COMM_WORLD, SG_OK, &sig));
  if (!sig) return SG_OK;
  const int ck = *sg_kv_str(r->kv, "ckpt_dir") && done >= first;
  char path[4096] = "";
  if (ck && !saved) SG_TRY(save_checkpoint(r, done));
  if (ck) ckpt_path(r, done, path, sizeof path);
  if (r->rank == 0) {
    printf("sg-train: stopped by %s after step %lld (exit status %d); %s%s\n",
           sg_stop_signal_name(sig), (long long)done, sg_stop_exit_code(sig),
           !ck ? "no checkpoint of this run"
               : "checkpoint written: resume with --resume ",
           ck ? path : "");
    fflush(stdout);
  }
  r->stop = sig;
fail:
  return st;
}

/* Values no run can use, refused before anything starts (every rank
 * parses the same config, so every rank finds the same error). Not
 * collective. */
static sg_status check_config(sg_kv_t kv) {
  sg_status st = SG_OK;
  static const char *const positive[] = {"batch",     "width",
                                         "history",   "lead",
                                         "log_every", "rollout_train",
                                         "out_frames"};
  static const char *const nonneg[] = {"steps",        "epochs",
                                       "test_samples", "test_frames",
                                       "warmup",       "eval_every",
                                       "rollout",      "check_every",
                                       "ckpt_every",   "rollout_curriculum"};
  for (size_t i = 0; i < sizeof positive / sizeof *positive; ++i)
    if (sg_kv_int(kv, positive[i]) < 1)
      SG_RAISE(SG_ERR_CONFIG, "%s must be >= 1, not %lld", positive[i],
               (long long)sg_kv_int(kv, positive[i]));
  for (size_t i = 0; i < sizeof nonneg / sizeof *nonneg; ++i)
    if (sg_kv_int(kv, nonneg[i]) < 0)
      SG_RAISE(SG_ERR_CONFIG, "%s must be >= 0, not %lld", nonneg[i],
               (long long)sg_kv_int(kv, nonneg[i]));
  if (sg_kv_int(kv, "steps") == 0 && sg_kv_int(kv, "epochs") == 0)
    SG_RAISE(SG_ERR_CONFIG, "nothing to train: steps and epochs are both 0");
  static const char *const finite_nonneg[] = {"lr", "min_lr", "weight_decay",
                                              "clip", "time_budget"};
  for (size_t i = 0; i < sizeof finite_nonneg / sizeof *finite_nonneg; ++i) {
    const double x = sg_kv_float(kv, finite_nonneg[i]);
    if (!(isfinite(x) && x >= 0.0))
      SG_RAISE(SG_ERR_CONFIG, "%s must be a finite number >= 0, not %g",
               finite_nonneg[i], x);
  }
  const char *clock = sg_kv_str(kv, "time_budget_clock");
  if (strcmp(clock, "wall") && strcmp(clock, "cpu"))
    SG_RAISE(SG_ERR_CONFIG, "time_budget_clock must be wall or cpu, not '%s'",
             clock);
  if (!(sg_kv_float(kv, "lr") > 0.0))
    SG_RAISE(SG_ERR_CONFIG, "lr must be > 0, not %g", sg_kv_float(kv, "lr"));
  if (*sg_kv_str(kv, "op_times") && sg_kv_int(kv, "epochs") == 0 &&
      sg_kv_int(kv, "steps") < 2)
    SG_RAISE(SG_ERR_CONFIG,
             "op_times needs steps >= 2 (the first step is a warm-up, not "
             "timed), not %lld",
             (long long)sg_kv_int(kv, "steps"));
fail:
  return st;
}

/* An output file that will be written at the end must be writable now,
 * not after the training (rank 0 tries; every rank learns). Collective. */
static sg_status check_writable(const char *path, int rank) {
  sg_status st = SG_OK;
  if (!path || !*path) return SG_OK;
  if (rank == 0) {
    FILE *f = fopen(path, "a");
    if (!f)
      st = sg_error_set(SG_ERR_IO, __FILE__, __LINE__, "cannot write '%s': %s",
                        path, strerror(errno));
    else
      fclose(f);
  }
  return sg_agree(MPI_COMM_WORLD, st);
}

/* Multi-step training and the rollout: what they can run (config and
 * mesh only: the same verdict on every rank). A prediction fed back is the
 * newest input frame, so it must be the frame after the last input: lead 1,
 * or history 1 (then the frames are lead apart). Not collective. */
static sg_status check_rollout(run_t *r, sg_kv_t kv, sg_mesh_t mesh) {
  sg_status st = SG_OK;
  const char *g = sg_kv_str(kv, "rollout_grad");
  r->ar_steps = sg_kv_int(kv, "rollout_train");
  r->ar_curriculum = sg_kv_int(kv, "rollout_curriculum");
  if (strcmp(g, "full") != 0 && strcmp(g, "pushforward") != 0)
    SG_RAISE(SG_ERR_CONFIG,
             "rollout_grad must be full or pushforward, not '%s'", g);
  r->ar_pushforward = strcmp(g, "pushforward") == 0;
  if (r->ar_steps > 1000)
    SG_RAISE(SG_ERR_CONFIG, "rollout_train = %lld: at most 1000 steps",
             (long long)r->ar_steps);
  const int64_t H = sg_kv_int(kv, "history"), L = sg_kv_int(kv, "lead");
  if ((r->ar_steps > 1 || sg_kv_int(kv, "rollout") > 0) && H > 1 && L > 1)
    SG_RAISE(
        SG_ERR_CONFIG,
        "multi-step training (rollout_train > 1) and the rollout feed each prediction back as the "
        "newest input frame: with history = %lld that needs lead = 1 (or history = 1), not lead = %lld",
        (long long)H, (long long)L);
  if (sg_kv_int(kv, "out_frames") > 1 &&
      (r->ar_steps > 1 || sg_kv_int(kv, "rollout") > 0))
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "out_frames = %lld predicts its frames at once: multi-step "
             "training (rollout_train > 1) and the rollout feed one frame "
             "back at a time (use rollout_train = 1, rollout = 0)",
             (long long)sg_kv_int(kv, "out_frames"));
  if (r->ar_steps > 1 && !r->ar_pushforward && sg_train_pp_on(mesh))
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "rollout_train = %lld, rollout_grad = full with a pp mesh dim: "
             "the gradient through every step would run the pipeline K "
             "times within one backward; not built (use rollout_grad = "
             "pushforward, which runs through the pipeline, or a mesh "
             "without pp)",
             (long long)r->ar_steps);
fail:
  return st;
}

/* The mesh against the model, the config and the data's shape
 * (sg_plan_check: every violation named in one message). Not collective:
 * every rank finds the same verdict. */
static sg_status check_mesh(sg_kv_t kv, const char *spec, int ranks, int64_t ny,
                            int64_t nx, int nv) {
  sg_plan_mesh pm;
  sg_status st = sg_plan_mesh_parse(spec, &pm);
  if (st != SG_OK) return st;
  const sg_plan_problem pb = {
      .cfg = kv, .ny = ny, .nx = nx, .vars = nv, .ranks = ranks};
  return sg_plan_check(&pb, &pm, NULL, 0);
}

/* The parallel plan's settings from the config. Not collective. */
static sg_status plan_config(sg_kv_t kv, sg_parallel_config *pc) {
  sg_status st = SG_OK;
  *pc = sg_parallel_defaults();
  const int64_t zero = sg_kv_int(kv, "zero");
  if (zero < 0 || zero > 3)
    SG_RAISE(SG_ERR_CONFIG, "zero must be 0, 1, 2 or 3, not %lld",
             (long long)zero);
  pc->zero = (int)zero;
  pc->shard_over_domain = sg_kv_bool(kv, "zero_over_domain");
  pc->deterministic = sg_kv_bool(kv, "deterministic");
  const double mib = sg_kv_float(kv, "bucket_mib");
  if (!(mib > 0.0 && mib < 1e6))
    SG_RAISE(SG_ERR_CONFIG, "bucket_mib must be > 0, not %g", mib);
  pc->bucket_bytes = (int64_t)(mib * 1048576.0);
  pc->adamw.weight_decay = sg_kv_float(kv, "weight_decay");
  if (sg_dtype_parse(sg_kv_str(kv, "param_dtype"), &pc->param_dtype) != SG_OK ||
      (pc->param_dtype != SG_DTYPE_F32 && pc->param_dtype != SG_DTYPE_BF16))
    SG_RAISE(SG_ERR_CONFIG, "param_dtype must be f32 or bf16, not '%s'",
             sg_kv_str(kv, "param_dtype"));
  if (sg_dtype_parse(sg_kv_str(kv, "reduce_dtype"), &pc->reduce_dtype) !=
          SG_OK ||
      !sg_dtype_is_float(pc->reduce_dtype))
    SG_RAISE(SG_ERR_CONFIG, "reduce_dtype must be f32, not '%s'",
             sg_kv_str(kv, "reduce_dtype"));
fail:
  return st;
}

/* The parallel plan over the model's parameter table; the model is bound to
 * the plan's buffers. Collective. */
static sg_status make_plan(run_t *r) {
  sg_status st = SG_OK;
  sg_var **vars = NULL;
  const uint64_t seed = (uint64_t)sg_kv_int(r->kv, "seed");
  if (r->pipe)
    return sg_pipe_model_plan(r->pipe, r->model, &r->pcfg, seed,
                              &r->plan); /* the stage's pieces */
  const int np = sg_model_params(r->model, &vars);
  sg_param_info *tab = calloc((size_t)np + 1, sizeof *tab);
  if (!tab)
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  for (int i = 0; i < np && st == SG_OK; ++i)
    st = sg_model_param_info(r->model, i, &tab[i]);
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  SG_TRY(sg_parallel_create(r->mesh, &r->pcfg, np, tab,
                            sg_model_param_count(r->model), &r->plan));
  SG_TRY(sg_model_bind(r->model, sg_parallel_params(r->plan),
                       sg_parallel_grads(r->plan)));
  SG_TRY(sg_model_init(r->model, seed));
  if (r->dev.kind != SG_DEVICE_HOST) { /* device = cuda: one GPU per rank */
    SG_TRY(sg_parallel_to_device(r->plan, r->dev));
    SG_TRY(sg_model_bind(r->model, sg_parallel_params(r->plan),
                         sg_parallel_grads(r->plan)));
    SG_TRY(sg_model_set_device(r->model, r->dev));
  }
  SG_TRY(sg_tape_create(&r->tape));
  sg_model_params(r->model, &vars);
  SG_TRY(sg_parallel_attach(r->plan, r->tape, vars));
fail:
  free(tab);
  return st;
}

/* The pipeline step's context: data, loss and buffers of every
 * micro-batch. Not collective. */
static sg_status pp_step_init(run_t *r) {
  sg_status st = SG_OK;
  sg_train_pp_step *S = &r->pps;
  *S = (sg_train_pp_step){.pipe = r->pipe,
                          .model = r->model,
                          .ds = &r->ds,
                          .dopt = &r->dopt,
                          .train = r->train,
                          .lbatch = r->lbatch,
                          .cin = r->cin,
                          .cout = r->cout,
                          .gbatch = r->gbatch,
                          .micro = (int)r->micro,
                          .has_mask = r->ds.has_mask,
                          .loss = r->loss_kind,
                          .domain = r->domain,
                          .data = r->data,
                          .x = r->xb,
                          .y = r->yb,
                          .mask = r->mb};
  S->history = r->dopt.history;
  S->nvars = r->ds.nvars;
  S->steps = 1;
  S->vy = calloc((size_t)r->micro, sizeof *S->vy);
  S->vm = calloc((size_t)r->micro, sizeof *S->vm);
  if (r->ar_steps > 1)
    S->pred = malloc(
        (size_t)(r->micro * r->lbatch * r->ds.nvars * r->ds.ny * r->ds.nx + 1) *
        sizeof *S->pred);
  if (!S->vy || !S->vm || (r->ar_steps > 1 && !S->pred))
    SG_RAISE(SG_ERR_ALLOC, "out of memory");
  sg_log_info(
      "pipeline: %d stages, schedule %s, %lld micro-batches, %d chunk(s) per stage",
      sg_pipe_nstages(r->pipe),
      sg_pp_kind_name(sg_pipe_schedule(r->pipe)->kind), (long long)r->micro,
      sg_pipe_schedule(r->pipe)->v);
fail:
  return st;
}

/* device = cuda: the GPU of this rank, one rank per GPU: the node-local
 * rank's (MPI_Comm_split_type shared, modulo the GPUs it sees), or
 * device_index; two ranks of a node on one GPU are refused, naming the
 * counts (NCCL puts no two ranks on one GPU). What device runs cannot do
 * yet is refused by sg_plan_check (check_mesh), with the mesh's other
 * problems, before this runs. Collective. */
static sg_status pick_device(run_t *r) {
  sg_status st = SG_OK;
  r->dev = sg_device_host();
  if (strcmp(sg_kv_str(r->kv, "device"), "cuda")) return SG_OK;
  const int64_t want = sg_kv_int(r->kv, "device_index");
  int idx = -1, ndev = 0, share = 1, local = 1;
  st = sg_device_count(SG_DEVICE_CUDA, &ndev);
  if (st == SG_OK && want >= ndev && ndev > 0)
    st = sg_error_set(SG_ERR_CONFIG, __FILE__, __LINE__,
                      "device_index = %lld: this process sees %d CUDA "
                      "device(s) (0 .. %d)",
                      (long long)want, ndev, ndev - 1);
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  sg_cuda_device_pin(want >= 0 ? (int)want : -1);
  SG_TRY(sg_cuda_device_local(MPI_COMM_WORLD, &idx));
  SG_TRY(sg_node_rank(MPI_COMM_WORLD, NULL, &local));
  SG_TRY(sg_cuda_device_sharing(MPI_COMM_WORLD, idx, &share));
  if (idx < 0)
    st = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "device = cuda: no CUDA device visible to this "
                      "process%s",
                      SG_HAVE_CUDA ? ""
                                   : " (built without CUDA: the cuda preset)");
  else if (share > 1)
    st = sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "device = cuda: %d ranks of this node would share GPU "
                      "%d (%d rank(s) on the node, %d GPU(s) visible to each): "
                      "one rank per GPU; run at most as many ranks per node "
                      "as GPUs, or give each rank its own GPU "
                      "(CUDA_VISIBLE_DEVICES or device_index)",
                      share, idx, local, ndev);
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  r->dev = (sg_device){SG_DEVICE_CUDA, idx};
  SG_TRY(sg_device_check(r->dev));
  char name[128] = "";
  size_t mem = 0;
  if (sg_device_describe(r->dev, name, sizeof name, &mem) == SG_OK)
    sg_log_info("device cuda:%d (%s, %.1f GiB)", idx, name,
                (double)mem / (1024.0 * 1024.0 * 1024.0));
fail:
  return st;
}

/* device = cuda on several ranks: the mesh's groups move device buffers
 * through NCCL (or, built without it, a CUDA-aware MPI). Collective. */
static sg_status device_comm(run_t *r) {
  if (r->dev.kind == SG_DEVICE_HOST || r->size == 1) return SG_OK;
  const sg_status st = sg_mesh_enable_nccl(r->mesh);
  if (st == SG_OK) return SG_OK;
  if (st == SG_ERR_NOT_SUPPORTED && sg_mpi_cuda_aware() == 1) {
    sg_log_info("device = cuda: no NCCL; the MPI is CUDA-aware");
    return SG_OK;
  }
  return st;
}

static sg_status setup(run_t *r) {
  sg_status st = SG_OK;
  sg_kv_t kv = r->kv;
  r->dev = sg_device_host();
  SG_TRY(sg_agree(MPI_COMM_WORLD, check_config(kv)));
  SG_TRY(check_writable(sg_kv_str(kv, "predict"), r->rank));
  SG_TRY(check_writable(sg_kv_str(kv, "trace"), r->rank));
  char spec[128];
  const char *m = sg_kv_str(kv, "mesh");
  if (*m)
    snprintf(spec, sizeof spec, "%s", m);
  else
    snprintf(spec, sizeof spec, "h=%d", r->size);
  /* the data's description and shape, then the mesh against the model:
   * every violation in one message, before anything is built */
  r->dopt.path = sg_kv_str(kv, "data");
  r->dopt.vars = sg_kv_str(kv, "vars");
  r->dopt.dim_map = sg_kv_str(kv, "dim_map");
  r->dopt.backend = sg_kv_str(kv, "backend");
  r->dopt.history = sg_kv_int(kv, "history");
  r->dopt.lead = sg_kv_int(kv, "lead");
  r->dopt.steps = sg_kv_int(kv, "rollout_train");
  r->dopt.out_frames = sg_kv_int(kv, "out_frames");
  r->dopt.test_samples = sg_kv_int(kv, "test_samples");
  r->dopt.test_frames = sg_kv_int(kv, "test_frames");
  r->dopt.reject_nonfinite = sg_kv_bool(kv, "reject_nonfinite");
  if (!*r->dopt.path) SG_RAISE(SG_ERR_CONFIG, "no dataset given (--data FILE)");
  if (r->dopt.history < 1 || r->dopt.lead < 1)
    SG_RAISE(SG_ERR_CONFIG, "history and lead must be >= 1");
  int64_t ny = 0, nx = 0;
  int nv = 0;
  double t_io = sg_wtime();
  SG_TRY(sg_dataset_peek(&r->dopt, &ny, &nx, &nv));
  SG_TRY(sg_agree(MPI_COMM_WORLD, check_mesh(kv, spec, r->size, ny, nx, nv)));
  SG_TRY(pick_device(r));
  SG_TRY(sg_mesh_create(MPI_COMM_WORLD, spec, &r->mesh));
  SG_TRY(device_comm(r));
  SG_TRY(sg_agree(MPI_COMM_WORLD, sg_train_pp_check(kv, r->mesh)));
  SG_TRY(sg_agree(MPI_COMM_WORLD, check_rollout(r, kv, r->mesh)));
  r->smesh = r->mesh;
  if (sg_train_pp_on(r->mesh))
    SG_TRY(sg_pipe_stage_mesh_create(r->mesh, &r->smesh));
  { /* one OpenMP thread per core of the node, shared by its ranks */
    int nth = 1, on_node = 1;
    SG_TRY(sg_threads_auto(MPI_COMM_WORLD, &nth, &on_node));
    sg_log_info("%d rank(s) on this node, %d OpenMP thread(s) per rank",
                on_node, nth);
    /* libgomp's waiting threads spin ~300000 rounds (milliseconds) by
     * default: on a node busy with other jobs every barrier then waits for
     * a descheduled partner while spinning (bench/RESULTS.md, "Two threads
     * per rank") */
    double load = 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    FILE *la = nth > 1 ? fopen("/proc/loadavg", "r") : NULL;
    if (la) {
      if (fscanf(la, "%lf", &load) != 1) load = 0;
      fclose(la);
    }
    if (nth > 1 && !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT") &&
        cores > 0 && load >= (double)cores)
      sg_log_warn("load average %.1f on %ld cores with %d OpenMP threads per "
                  "rank: set GOMP_SPINCOUNT=10000 (or OMP_WAIT_POLICY=passive) "
                  "so that threads waiting at barriers give way",
                  load, cores, nth);
  }
  /* activation blocks are freed and reallocated every step: keep them */
  if (sg_host_keep_memory() != SG_OK) sg_log_info("%s", sg_last_error());
  snprintf(r->mesh_spec, sizeof r->mesh_spec, "%s", spec);
  SG_TRY(plan_config(kv, &r->pcfg));
  sg_parallel_mesh_info mi;
  SG_TRY(sg_parallel_check_mesh(r->smesh, &r->pcfg, &mi));
  r->ndp = mi.data_size;
  r->cdp = mi.data_index;
  SG_TRY(sg_mesh_group(r->smesh, mi.domain_dims, &r->domain));
  SG_TRY(sg_mesh_group(r->smesh, mi.batch_dims, &r->data));
  sg_model_config mc;
  SG_TRY(sg_model_config_from_kv(kv, &mc));
  r->ar_ckpt = mc.act_ckpt_every > 0;
  const char *lk = sg_kv_str(kv, "loss");
  if (strcmp(lk, "rel_l2") == 0)
    r->loss_kind = SG_LOSS_REL_L2;
  else if (strcmp(lk, "mse") == 0)
    r->loss_kind = SG_LOSS_MSE;
  else
    SG_RAISE(SG_ERR_CONFIG, "--loss must be rel_l2 or mse, not '%s'", lk);
  r->gbatch = sg_kv_int(kv, "batch");
  if (r->gbatch < 1 || r->gbatch % r->ndp)
    SG_RAISE(
        SG_ERR_CONFIG,
        "global batch %lld is not divisible by the %d data-parallel ranks (dp x fsdp x ep)",
        (long long)r->gbatch, r->ndp);
  const int pp = sg_train_pp_on(r->mesh);
  r->micro = sg_kv_int(kv, pp ? "microbatches" : "grad_accum");
  if (r->micro < 1 || (r->gbatch / r->ndp) % r->micro)
    SG_RAISE(
        SG_ERR_CONFIG,
        "%s = %lld must be >= 1 and divide the %lld samples per data rank (batch %lld "
        "over %d data-parallel ranks)",
        pp ? "microbatches" : "grad_accum", (long long)r->micro,
        (long long)(r->gbatch / r->ndp), (long long)r->gbatch, r->ndp);
  r->lbatch = r->gbatch / r->ndp /
              r->micro; /* the model's batch: one micro-batch */
  r->ebatch = r->lbatch * r->ndp;
  r->deterministic = sg_kv_bool(kv, "deterministic");
  sg_comm_set_deterministic(r->deterministic);

  /* the model (which fixes the slab) */
  mc.cin = nv * r->dopt.history;
  mc.cout = nv * r->dopt.out_frames; /* fno3d: its time steps */
  r->cin = mc.cin;
  r->cout = mc.cout;
  SG_TRY(sg_agree(MPI_COMM_WORLD, sg_model_create(r->smesh, &mc, ny, nx,
                                                  r->lbatch, &r->model)));
  if (pp)
    SG_TRY(sg_train_pp_create(kv, r->mesh, r->smesh, r->model,
                              sg_kv_str(kv, "model"), r->lbatch, r->cin,
                              &r->pipe));
  int64_t y0, lny, x0, lnx;
  sg_model_box(r->model, &y0, &lny, &x0, &lnx);
  sg_trace_begin("io");
  SG_TRY(sg_dataset_load(&r->dopt, y0, lny, x0, lnx, r->domain, &r->ds));
  sg_trace_end("io");
  SG_TRY(sg_dataset_examples(&r->ds, &r->dopt, &r->train, &r->ntrain, &r->test,
                             &r->ntest));
  if (r->micro > 1 && r->loss_kind == SG_LOSS_MSE && r->ds.has_mask)
    SG_RAISE(
        SG_ERR_NOT_SUPPORTED,
        "grad_accum > 1 with loss = mse on masked data is not supported (the mean's "
        "denominator differs between micro-batches): use loss = rel_l2 or grad_accum = 1");
  if (r->dev.kind != SG_DEVICE_HOST && r->ds.has_mask)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "device = cuda: %s has masked points (fill values or NaN): the "
             "masked loss is not supported on devices yet",
             r->dopt.path);
  if (r->ntrain < r->gbatch)
    SG_RAISE(SG_ERR_CONFIG,
             "only %lld training examples for a global batch of %lld",
             (long long)r->ntrain, (long long)r->gbatch);
  sg_log_info(
      "data %s: %lld series x %lld frames of %lldx%lld, %d var(s); %lld train / %lld test examples "
      "(loaded in %.2f s)",
      r->dopt.path, (long long)r->ds.nseries, (long long)r->ds.nframes,
      (long long)ny, (long long)nx, nv, (long long)r->ntrain,
      (long long)r->ntest, sg_wtime() - t_io);

  /* parameters, gradients and optimizer state: the plan's flat buffers */
  SG_TRY(make_plan(r));
  /* a pipeline holds every micro-batch; multi-step training every step's
   * targets */
  const int64_t plane = lny * lnx,
                nbuf = r->pipe ? r->micro * r->ar_steps : r->ar_steps;
  r->xb = malloc(
      (size_t)((r->pipe ? r->micro : 1) * r->lbatch * r->cin * plane + 1) *
      sizeof *r->xb);
  r->yb = malloc((size_t)(nbuf * r->lbatch * r->cout * plane + 1) *
                 sizeof *r->yb);
  r->mb = malloc((size_t)(nbuf * r->lbatch * r->cout * plane + 1) *
                 sizeof *r->mb);
  r->ar_leaves = calloc((size_t)(1 + 2 * r->ar_steps), sizeof *r->ar_leaves);
  r->clim = malloc((size_t)(r->cout * plane + 1) * sizeof *r->clim);
  if (!r->xb || !r->yb || !r->mb || !r->ar_leaves || !r->clim)
    SG_RAISE(SG_ERR_ALLOC, "out of memory");
  if (r->dev.kind != SG_DEVICE_HOST) { /* each batch copied there */
    SG_TRY(sg_malloc(r->dev,
                     (size_t)(r->lbatch * r->cin * plane + 1) * sizeof(float),
                     &r->dxb));
    SG_TRY(sg_malloc(r->dev,
                     (size_t)(nbuf * r->lbatch * r->cout * plane + 1) *
                         sizeof(float),
                     &r->dyb));
  }
  SG_TRY(sg_dataset_climatology(&r->ds, &r->dopt, r->clim));
  if (r->pipe) SG_TRY(pp_step_init(r));
  SG_TRY(sg_agree(MPI_COMM_WORLD, sg_train_loss_weights(r)));
  char desc[256];
  sg_model_describe(r->model, desc, sizeof desc);
  char pdesc[256];
  sg_parallel_describe(r->plan, pdesc, sizeof pdesc);
  sg_log_info(
      "model %s; mesh %s (%d data replicas), global batch %lld in %lld micro-batch(es); plan: %s",
      desc, spec, r->ndp, (long long)r->gbatch, (long long)r->micro, pdesc);
fail:
  return st;
}

/* Forward and backward of one micro-batch k: the examples perm[0..lbatch)
 * of the training set over K autoregressive steps (K = 1: one step
 * ahead); *lval accumulates the loss. Collective. */
static sg_status micro_step(run_t *r, const int64_t *perm, sg_example *ex,
                            int k, int64_t K, double *lval) {
  sg_status st = SG_OK;
  for (int64_t j = 0; j < r->lbatch; ++j) ex[j] = r->train[perm[j]];
  if (K == 1) /* one step: its out_frames targets, example-major */
    sg_dataset_fill(&r->ds, &r->dopt, ex, r->lbatch, r->xb, r->yb, r->mb);
  else
    sg_dataset_fill_steps(&r->ds, &r->dopt, ex, r->lbatch, K, r->xb, r->yb,
                          r->mb);
  const sg_train_ar a = {.model = r->model,
                         .dtype = SG_DTYPE_F32,
                         .tape = r->tape,
                         .n = r->lbatch,
                         .nvars = r->ds.nvars,
                         .cout = r->cout,
                         .history = r->dopt.history,
                         .ny = r->ds.ny,
                         .nx = r->ds.nx,
                         .steps = K,
                         .pushforward = r->ar_pushforward,
                         .ckpt = r->ar_ckpt && K > 1,
                         .masked = r->ds.has_mask,
                         .weight = r->has_lw ? &r->lw : NULL,
                         .loss = r->loss_kind,
                         .lc = {r->domain, r->data, r->gbatch},
                         .div = r->loss_kind == SG_LOSS_MSE ? r->micro : 1,
                         .x = r->xb,
                         .y = r->yb,
                         .m = r->mb,
                         .device = r->dev,
                         .dx = r->dxb,
                         .dy = r->dyb};
  sg_var *loss = NULL;
  double lv = 0.0;
  sg_trace_begin("forward");
  st = sg_train_ar_detached(&a);
  if (st == SG_OK) st = sg_parallel_begin_micro(r->plan, k, (int)r->micro);
  if (st == SG_OK) st = sg_train_ar_loss(&a, r->ar_leaves, &loss, &lv);
  sg_trace_end("forward");
  SG_TRY(st);
  *lval += lv;
  sg_trace_begin("backward");
  st = sg_tape_backward(r->tape, loss);
  sg_trace_end("backward");
fail:
  if (st != SG_OK) sg_tape_clear(r->tape);
  sg_train_ar_release(r->ar_leaves, K);
  return st;
}

/* The metrics keys of an evaluation (EV_*). */
static const char *const eval_keys[EV_N] = {"eval_rel_l2",
                                            "eval_persistence_rel_l2",
                                            "eval_climatology_rel_l2"};

/* The rollout's errors per lead (rollout()'s layout) and over all frames
 * (rollout_rel_l2_seq) on stdout (rank 0) and as one metrics line. */
static void report_rollout(run_t *r, int64_t step, int64_t n,
                           const double *roll) {
  static const char *const label[EV_N] = {"rollout relative L2 per frame:",
                                          "  persistence:", "  climatology:"};
  static const char *const key[EV_N] = {"rollout_rel_l2",
                                        "rollout_persistence_rel_l2",
                                        "rollout_climatology_rel_l2"};
  for (int i = 0; i < EV_N && r->rank == 0; ++i) {
    printf("%s", label[i]);
    for (int64_t k = 0; k < n; ++k) printf(" %.4f", roll[i * n + k]);
    printf("\n");
  }
  if (r->rank == 0)
    printf("rollout relative L2 over all %lld frames (per sample, mean): "
           "%.5f\n",
           (long long)n, roll[EV_N * n]);
  if (!r->metrics) return;
  fprintf(r->metrics, "{\"step\": %lld", (long long)step);
  for (int i = 0; i < EV_N; ++i) {
    fprintf(r->metrics, ", \"%s\": [", key[i]);
    for (int64_t k = 0; k < n; ++k) {
      fputs(k ? ", " : "", r->metrics);
      json_num(r->metrics, roll[i * n + k]);
    }
    fputs("]", r->metrics);
  }
  fputs(", \"rollout_rel_l2_seq\": ", r->metrics);
  json_num(r->metrics, roll[EV_N * n]);
  fputs("}\n", r->metrics);
  fflush(r->metrics);
}

/* The loop's end under a budget: its wall and CPU seconds (sg_budget_used)
 * as one metrics line, and on rank 0 a line when the budget ended it
 * early. Collective when a budget is set. */
static sg_status budget_report(run_t *r, const sg_budget *b, int64_t last,
                               int64_t steps, int hit) {
  sg_status st = SG_OK;
  double v[3] = {0.0, 0.0, (double)hit};
  if (b->limit <= 0.0) return SG_OK;
  SG_TRY(sg_budget_used(b, &v[0], &v[1]));
  if (hit && r->rank == 0)
    printf("sg-train: time budget of %g %s seconds spent after step %lld of "
           "%lld (%.1f s wall, %.1f CPU-s); checkpoint and evaluation follow\n",
           b->limit, b->cpu ? "CPU" : "wall", (long long)last, (long long)steps,
           v[0], v[1]);
  static const char *const k[] = {"train_wall_s", "train_cpu_s", "budget_stop"};
  metrics_line(r, last, 3, k, v);
fail:
  return st;
}

/* The op classes' seconds per step, the steps after the first (rank 0's
 * times: the file of a 1-rank run); the status agreed over the ranks. */
static sg_status write_op_times(const run_t *r, const sg_plan_op_rec *rec,
                                const char *path) {
  sg_status st = SG_OK;
  sg_plan_op_times t;
  if (r->rank == 0) {
    st = sg_plan_op_rec_times(rec, 1, &t);
    if (st == SG_OK) st = sg_plan_op_times_save(path, &t);
  }
  int bad = st != SG_OK;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (bad && st == SG_OK)
    st = sg_error_set(SG_ERR_PEER, __FILE__, __LINE__,
                      "op_times: rank 0 could not write %s", path);
  return st;
}

static sg_status train(run_t *r) {
  sg_status st = SG_OK;
  sg_kv_t kv = r->kv;
  sg_plan_op_rec rec = {0};
  int64_t *perm = NULL;
  sg_example *ex = NULL;
  double *roll = NULL;
  const int64_t spe = r->ntrain / r->gbatch; /* steps per epoch (drop last) */
  int64_t steps = sg_kv_int(kv, "steps");
  if (sg_kv_int(kv, "epochs") > 0) steps = sg_kv_int(kv, "epochs") * spe;
  sg_lr_config lr = {SG_LR_CONSTANT,
                     sg_kv_float(kv, "lr"),
                     sg_kv_float(kv, "min_lr"),
                     sg_kv_int(kv, "warmup"),
                     steps,
                     sg_kv_int(kv, "step_size"),
                     sg_kv_float(kv, "gamma")};
  SG_TRY(sg_lr_schedule_parse(sg_kv_str(kv, "schedule"), &lr.kind));
  const double clip = sg_kv_float(kv, "clip");
  const int64_t eval_every = sg_kv_int(kv, "eval_every"),
                check_every = sg_kv_int(kv, "check_every");
  const int64_t log_every = sg_kv_int(kv, "log_every") > 0
                                ? sg_kv_int(kv, "log_every")
                                : 1;
  perm = malloc((size_t)r->ntrain * sizeof *perm);
  ex = malloc((size_t)r->lbatch * sizeof *ex);
  if (!perm || !ex) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  int64_t epoch = -1, first = 1;
  const char *resume = sg_kv_str(kv, "resume"),
             *ckdir = sg_kv_str(kv, "ckpt_dir");
  const int64_t ckpt_every = sg_kv_int(kv, "ckpt_every");
  if (*ckdir) SG_TRY(make_dir(ckdir, r->rank));
  if (*resume) {
    int64_t done = 0;
    SG_TRY(load_checkpoint(r, resume, &done));
    if (done >= steps)
      SG_RAISE(
          SG_ERR_CONFIG,
          "checkpoint %s is at step %lld: nothing left of %lld steps (raise --steps to go on)",
          resume, (long long)done, (long long)steps);
    first = done + 1;
  }
  /* stop_after: this run is a segment of the run of `steps` steps */
  const int64_t stop_after = sg_kv_int(kv, "stop_after");
  if (stop_after < 0)
    SG_RAISE(SG_ERR_CONFIG, "stop_after must be >= 0, not %lld",
             (long long)stop_after);
  int64_t last = stop_after > 0 && first - 1 + stop_after < steps
                     ? first - 1 + stop_after
                     : steps;
  int budget_hit = 0; /* time_budget ended the loop at step `last` */
  sg_budget bud;
  sg_budget_start(&bud, MPI_COMM_WORLD, sg_kv_float(kv, "time_budget"),
                  !strcmp(sg_kv_str(kv, "time_budget_clock"), "cpu"));
  double t_start = sg_wtime(), t_coll = 0.0;
  const char *op_times = sg_kv_str(kv, "op_times");
  sg_tape_time_ops(*op_times != '\0');
  sg_mem_info mem0;
  SG_TRY(sg_mem_get_info(sg_device_host(), &mem0));
  SG_TRY(sg_mem_reset_peak(sg_device_host()));
  SG_TRY(stop_check(r, first - 1, first, 0)); /* signalled while setting up */
  for (int64_t step = first; step <= last && !r->stop; ++step) {
    double t0 = sg_wtime(), halo0 = sg_timer_total("halo"),
           io0 = sg_timer_total("io");
    int64_t e = (step - 1) / spe, pos = (step - 1) % spe;
    if (e != epoch) {
      epoch = e;
      sg_epoch_order((uint64_t)sg_kv_int(kv, "seed"), epoch, r->ntrain, perm);
    }
    const double tr0 = sg_model_collective_seconds(r->model);
    const int64_t K = sg_train_ar_steps_at(r->ar_steps, r->ar_curriculum, step);
    double lval = 0.0;
    const int64_t *mine = perm + pos * r->gbatch +
                          r->cdp * r->lbatch * r->micro; /* this data rank's */
    if (r->pipe) {
      r->pps.perm = mine;
      r->pps.steps = K;
      SG_TRY(sg_train_pp_run(&r->pps, &lval));
    } else {
      for (int64_t k = 0; k < r->micro;
           ++k) /* micro-batches: gradients accumulate */
        SG_TRY(micro_step(r, mine + k * r->lbatch, ex, (int)k, K, &lval));
    }
    double tc = sg_wtime();
    sg_trace_begin("collectives");
    double gnorm = 0.0;
    st = r->pipe ? sg_pipe_reduce(r->pipe, &gnorm)
                 : sg_parallel_reduce(r->plan, &gnorm);
    sg_trace_end("collectives");
    SG_TRY(st);
    double tcoll = sg_wtime() - tc;
    double lr_t = sg_lr_at(&lr, step);
    sg_trace_begin("optimizer");
    st = sg_parallel_step(r->plan, step, lr_t, sg_clip_scale(gnorm, clip));
    sg_trace_end("optimizer");
    SG_TRY(st);
    const double tr1 = sg_model_collective_seconds(r->model);
    double dt = sg_wtime() - t0;
    double coll = tcoll + (tr1 - tr0), halo = sg_timer_total("halo") - halo0;
    t_coll += coll;
    if (*op_times) SG_TRY(sg_plan_op_rec_step(&rec, dt - coll - halo));
    if (!isfinite(lval))
      SG_RAISE(SG_ERR_INTERNAL,
               "loss is %g at step %lld: diverged (lower --lr?)", lval,
               (long long)step);
    int spent = 0;
    SG_TRY(sg_budget_spent(&bud, &spent));
    if (spent && step < last) last = step, budget_hit = 1;
    double sps = (double)r->gbatch / dt;
    if (r->rank == 0 && (step % log_every == 0 || step == 1 || step == last)) {
      double el = sg_wtime() - t_start,
             eta = el / (double)(step - first + 1) * (double)(steps - step);
      printf(
          "step %5lld/%lld  loss %.6e  lr %.3e  |g| %.3e  %7.1f samples/s  compute %.3f s  halo %.3f s  "
          "collectives %.3f s  io %.3f s  eta %.0f s\n",
          (long long)step, (long long)steps, lval, lr_t, gnorm, sps,
          dt - coll - halo, halo, coll, sg_timer_total("io") - io0, eta);
      fflush(stdout);
    }
    {
      static const char *const mk[] = {
          "loss",         "lr",        "grad_norm",        "samples_per_s",
          "time_compute", "time_halo", "time_collectives", "rollout_steps"};
      const double mv[] = {lval, lr_t, gnorm,    sps, dt - coll - halo,
                           halo, coll, (double)K};
      metrics_line(r, step, r->ar_steps > 1 ? 8 : 7, mk, mv);
    }
    if (check_every > 0 && step % check_every == 0)
      SG_TRY(sg_parallel_check_replicas(r->plan, step));
    const int saved = *ckdir && ((ckpt_every > 0 && step % ckpt_every == 0) ||
                                 step == last);
    if (saved) SG_TRY(save_checkpoint(r, step));
    if (eval_every > 0 && step % eval_every == 0 && step != steps &&
        !budget_hit) {
      double rel[EV_N] = {0};
      SG_TRY(sg_train_evaluate(r, NULL, rel));
      sg_log_info(
          "step %lld: test relative L2 %.5f (persistence %.5f, climatology %.5f)",
          (long long)step, rel[EV_MODEL], rel[EV_PERSISTENCE],
          rel[EV_CLIMATOLOGY]);
      metrics_line(r, step, EV_N, eval_keys, rel);
      sg_train_wm_report(r, step);
    }
    SG_TRY(stop_check(r, step, first, saved));
  }
  if (*op_times) SG_TRY(write_op_times(r, &rec, op_times));
  if (!r->stop && last < steps && !budget_hit && r->rank == 0)
    printf("sg-train: stopped after step %lld of %lld (stop_after %lld)%s\n",
           (long long)last, (long long)steps, (long long)stop_after,
           *ckdir ? "; resume from its checkpoint to go on" : "");
  if (r->stop || (last < steps && !budget_hit))
    goto fail; /* stopped cleanly or a segment: no final evaluation */
  SG_TRY(budget_report(r, &bud, last, steps, budget_hit));
  steps = last; /* a budget's stop: the evaluation of the steps done */
  SG_TRY(
      sg_stop_uninstall()); /* a signal during the evaluation ends the run as usual */
  /* peak accounted memory per rank during training: all of it, and the
   * part above what was held before the first step (parameters, gradients,
   * optimizer state): activations and workspace */
  sg_mem_info mem1;
  SG_TRY(sg_mem_get_info(sg_device_host(), &mem1));
  double pk[2] = {(double)mem1.peak_bytes / 1048576.0,
                  (double)(mem1.peak_bytes - mem0.current_bytes) / 1048576.0};
  SG_MPI(
      MPI_Allreduce(MPI_IN_PLACE, pk, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  sg_log_info(
      "peak memory per rank (max over ranks): %.1f MiB, of which %.1f MiB activations and workspace",
      pk[0], pk[1]);
  static const char *const pkk[] = {"peak_mem_mib", "peak_work_mib"};
  metrics_line(r, steps, 2, pkk, pk);
  double rel[EV_N] = {0};
  SG_TRY(sg_train_evaluate(r, sg_kv_str(kv, "predict"), rel));
  if (r->rank == 0)
    printf(
        "test relative L2 %.5f after %lld steps (%.1f s; %.1f s in collectives); persistence "
        "%.5f, climatology %.5f\n",
        rel[EV_MODEL], (long long)steps, sg_wtime() - t_start, t_coll,
        rel[EV_PERSISTENCE], rel[EV_CLIMATOLOGY]);
  metrics_line(r, steps, EV_N, eval_keys, rel);
  sg_train_wm_report(r, steps);
  const int64_t nroll = sg_kv_int(kv, "rollout");
  if (nroll > 0 && r->ds.climate) /* per lead, latitude-weighted */
    SG_TRY(sg_train_climate_leads(r, nroll, steps));
  else if (nroll > 0) {
    roll = malloc((size_t)(EV_N * nroll + 1) * sizeof *roll);
    if (!roll) SG_RAISE(SG_ERR_ALLOC, "out of memory");
    SG_TRY(sg_train_rollout(r, nroll, roll));
    report_rollout(r, steps, nroll, roll);
  }
fail:
  sg_plan_op_rec_free(&rec);
  sg_tape_time_ops(0);
  free(roll);
  free(ex);
  free(perm);
  return st;
}

static void cleanup(run_t *r) {
  if (r->metrics) fclose(r->metrics);
  sg_tape_destroy(&r->tape);
  sg_model_destroy(&r->model);
  sg_parallel_destroy(&r->plan);
  sg_pipe_destroy(&r->pipe);
  free(r->pps.vy);
  free(r->pps.vm);
  free(r->pps.pred);
  free(r->xb);
  free(r->yb);
  free(r->mb);
  if (r->dev.kind != SG_DEVICE_HOST) {
    sg_free(r->dev, &r->dxb);
    sg_free(r->dev, &r->dyb);
  }
  free(r->ar_leaves);
  free(r->clim);
  free(r->wmetrics);
  sg_var_release(&r->lw);
  free(r->train);
  free(r->test);
  sg_dataset_free(&r->ds);
  if (r->smesh != r->mesh) sg_mesh_destroy(&r->smesh);
  sg_mesh_destroy(&r->mesh);
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  run_t r;
  memset(&r, 0, sizeof r);
  MPI_Comm_rank(MPI_COMM_WORLD, &r.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &r.size);
  sg_status st =
      sg_stop_install(); /* SIGTERM, SIGINT: stop at the next step boundary */
  if (st == SG_OK) st = sg_kv_create(sg_train_keys, sg_train_nkeys, &r.kv);
  for (int i = 1; i < argc; ++i)
    if (st == SG_OK &&
        (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) {
      if (r.rank == 0) {
        printf(
            "usage: mpiexec -n N sg-train [--config FILE] [--key value ...]\n\n");
        sg_kv_print_help(r.kv, stdout);
      }
      sg_kv_destroy(&r.kv);
      MPI_Finalize();
      return 0;
    }
  if (st == SG_OK) st = sg_kv_parse_args(r.kv, argc, argv, 1, NULL);
  if (st == SG_OK) {
    int lvl = sg_log_parse_level(sg_kv_str(r.kv, "log_level"));
    if (lvl < 0)
      st = sg_error_set(SG_ERR_CONFIG, __FILE__, __LINE__,
                        "unknown --log-level '%s'",
                        sg_kv_str(r.kv, "log_level"));
    else
      sg_log_set_level(lvl);
  }
  st = sg_agree(MPI_COMM_WORLD, st);
  if (st == SG_OK) {
    const char *tr = sg_kv_str(r.kv, "trace");
    sg_trace_enable(*tr != 0);
    st = setup(&r);
    st = sg_agree(MPI_COMM_WORLD, st);
  }
  if (st == SG_OK && r.rank == 0 && *sg_kv_str(r.kv, "metrics")) {
    r.metrics = fopen(sg_kv_str(r.kv, "metrics"), "w");
    if (!r.metrics)
      st = sg_error_set(SG_ERR_IO, __FILE__, __LINE__, "cannot write '%s'",
                        sg_kv_str(r.kv, "metrics"));
  }
  st = sg_agree(MPI_COMM_WORLD, st);
  if (st == SG_OK && r.rank == 0 && sg_blas_coretype_hint())
    sg_log_warn(
        "the BLAS runs %s kernels, narrower than this CPU's: export "
        "OPENBLAS_CORETYPE=%s before mpiexec for faster GEMMs (sg-info)",
        sg_blas_core(), sg_blas_coretype_hint());
  if (st == SG_OK) {
    st = train(&r);
    if (!sg_timed_out()) st = sg_agree(MPI_COMM_WORLD, st);
  }
  /* after a timeout no collective can complete, the clean-up's neither (the
   * FFT's MPI_Win_free would wait for the rank that never came): abort */
  if (sg_timed_out()) sg_die("sg-train", st, 1);
  if (st == SG_OK && *sg_kv_str(r.kv, "trace"))
    st = sg_trace_write(sg_kv_str(r.kv, "trace"), MPI_COMM_WORLD);
  cleanup(&r);
  sg_kv_destroy(&r.kv);
  if (st != SG_OK) {
    if (r.rank == 0) sg_die("sg-train", st, 1);
    MPI_Finalize();
    return 1;
  }
  MPI_Finalize();
  return r.stop ? sg_stop_exit_code(r.stop) : 0;
}
