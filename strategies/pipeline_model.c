/* shardgrid — a zoo model's stage forward for the pipeline runtime
 * (sg_pipeline.h, "a zoo model's runs"): feed the first virtual stage's
 * input, run the stage's pieces, hand the last one's output to the
 * driver; the part every pipelined driver would otherwise write. */
#include "sg_pipeline.h"

#include <stdlib.h>

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
