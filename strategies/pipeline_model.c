/* shardgrid — a zoo model's stage forward for the pipeline runtime
 * (sg_pipeline.h, "a zoo model's runs"): feed the first virtual stage's
 * input, run the stage's pieces, hand the last one's output to the
 * driver; the part every pipelined driver would otherwise write. */
#include "sg_pipeline.h"

#include <stdlib.h>
#include <string.h>

/* One run's state: the driver's callbacks and the inputs of the micro-
 * batches (leaves the driver initialises; released after the run). */
typedef struct pm_run {
  sg_pipe_t pipe;
  const sg_pipe_model_io *io;
  sg_var *in; /* m of them */
  int training;
} pm_run;

/* sg_pipe_forward_fn over the model's pieces of `chunk`. */
static sg_status pm_forward(sg_tape_t tape, void *ctx, int mb, int chunk,
                            sg_bundle *b) {
  sg_status st = SG_OK;
  pm_run *r = ctx;
  const sg_pipe_model_io *io = r->io;
  int first, count;
  sg_pipe_blocks(r->pipe, chunk, &first, &count);
  const int last = first + count == sg_model_nblocks(io->model);
  if ((b->n == 0 || last) && io->fill) SG_TRY(io->fill(io->ctx, mb));
  if (b->n == 0) { /* the first virtual stage */
    SG_TRY(io->input(io->ctx, mb, &r->in[mb]));
    *b = (sg_bundle){.n = 1, .v = {&r->in[mb]}};
  }
  SG_TRY(sg_model_forward_blocks(io->model, tape, first, count, b));
  if (last) {
    sg_var *loss = NULL;
    SG_TRY(io->output(io->ctx, tape, mb, b->v[0], r->training ? &loss : NULL));
    if (r->training) *b = (sg_bundle){.n = 1, .v = {loss}};
  }
fail:
  return st;
}

/* A training run (loss non-NULL or training) or a forward-only one. */
static sg_status pm_run_all(sg_pipe_t pipe, const sg_pipe_model_io *io,
                            int training, double *loss) {
  sg_status st = SG_OK;
  if (!pipe || !io || !io->model || !io->input || !io->output)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "pipeline model run: pipe, model, input and output "
                        "are required");
  const int m = sg_pipe_schedule(pipe)->m;
  pm_run r = {.pipe = pipe, .io = io, .training = training};
  r.in = calloc((size_t)m, sizeof *r.in);
  st = r.in ? SG_OK
            : sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__,
                           "pipeline: out of memory");
  SG_TRY(sg_agree(sg_mesh_comm(sg_pipe_mesh(pipe)), st));
  st = training ? sg_pipe_run(pipe, pm_forward, &r, loss)
                : sg_pipe_forward(pipe, pm_forward, &r);
  for (int k = 0; k < m; ++k) sg_var_release(&r.in[k]);
fail:
  free(r.in);
  return st;
}

sg_status sg_pipe_model_run(sg_pipe_t pipe, const sg_pipe_model_io *io,
                            double *loss) {
  return pm_run_all(pipe, io, 1, loss);
}

sg_status sg_pipe_model_forward(sg_pipe_t pipe, const sg_pipe_model_io *io) {
  return pm_run_all(pipe, io, 0, NULL);
}

/* sg_pipe_model_roll's callbacks around the driver's: the output is kept
 * in out before the driver's output sees it. */
typedef struct pm_roll {
  const sg_pipe_model_io *io;
  sg_dtype dtype;
  int64_t count;
  char *out;
} pm_roll;

static sg_status pm_roll_fill(void *ctx, int mb) {
  const pm_roll *r = ctx;
  return r->io->fill ? r->io->fill(r->io->ctx, mb) : SG_OK;
}

static sg_status pm_roll_input(void *ctx, int mb, sg_var *x) {
  const pm_roll *r = ctx;
  return r->io->input(r->io->ctx, mb, x);
}

static sg_status pm_roll_output(void *ctx, sg_tape_t tape, int mb, sg_var *y,
                                sg_var **loss) {
  const pm_roll *r = ctx;
  const size_t es = sg_dtype_size(r->dtype);
  if (y->value.dtype != r->dtype || sg_tensor_numel(&y->value) != r->count)
    return sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                        "pipeline rollout: the model's output has %lld "
                        "elements of %s, %lld of %s expected",
                        (long long)sg_tensor_numel(&y->value),
                        sg_dtype_name(y->value.dtype), (long long)r->count,
                        sg_dtype_name(r->dtype));
  memcpy(r->out + (size_t)mb * (size_t)r->count * es, y->value.data,
         (size_t)r->count * es);
  return r->io->output ? r->io->output(r->io->ctx, tape, mb, y, loss) : SG_OK;
}

sg_status sg_pipe_model_roll(sg_pipe_t pipe, const sg_pipe_model_io *io,
                             int64_t steps, sg_dtype dtype, int64_t count,
                             void *out, sg_status (*next)(void *ctx, int64_t k),
                             void *ctx) {
  sg_status st = SG_OK;
  if (!pipe || !io || !io->input || !out || !next || count < 0 || steps < 0)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_pipe_model_roll: pipe, io with input, out and "
                        "next are required");
  pm_roll r = {.io = io, .dtype = dtype, .count = count, .out = out};
  const sg_pipe_model_io w = {io->model, pm_roll_fill, pm_roll_input,
                              pm_roll_output, &r};
  const int64_t n = (int64_t)sg_pipe_schedule(pipe)->m * count;
  for (int64_t k = 0; k < steps; ++k) {
    SG_TRY(sg_pipe_model_forward(pipe, &w));
    SG_TRY(sg_pipe_bcast_last(pipe, out, n, dtype));
    /* next may score (collective over a stage's domain only): agreed over
     * the pipeline, so no rank goes on to a run the others left */
    SG_TRY(sg_agree(sg_mesh_comm(sg_pipe_mesh(pipe)), next(ctx, k)));
  }
fail:
  return st;
}
