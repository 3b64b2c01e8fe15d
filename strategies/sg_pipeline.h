/* shardgrid — pipeline schedules as data (issue 18, section 2).
 *
 * A schedule says, for every stage (a coordinate of the `pp` mesh dim), the
 * ordered list of actions it performs in one training step: forward (F),
 * backward (B), weight gradient (W, zero-bubble only) of a micro-batch on
 * one of its model chunks, and the point-to-point transfers between
 * neighbouring stages (SEND_F/RECV_F: activations, SEND_B/RECV_B:
 * gradients). Runs will execute the lists as they are; everything about a
 * schedule that can be proved without running a model is proved here, on
 * the lists:
 *
 *   sg_pp_schedule_create   generators: GPipe, 1F1B, interleaved 1F1B,
 *                           ZB-H1 (see docs/pipeline.md for each)
 *   sg_pp_schedule_check    invariants + a no-deadlock proof + peak memory
 *   sg_pp_simulate          simulated time: per-action start/end, bubble
 *
 * The runtime (strategies/pipeline.c, the second half of this header)
 * executes the lists: sg_pipe_*.
 *
 * Chunks (virtual stages). With v chunks per stage the model is cut into
 * p*v pieces; chunk c of stage s is virtual stage g = c*p + s (Megatron's
 * layout), so activations flow s -> s+1 and from stage p-1 chunk c to
 * stage 0 chunk c+1. v = 1 for every kind but interleaved.
 *
 * Transfers. Every F of a virtual stage g > 0 is preceded by RECV_F of the
 * same (micro-batch, chunk); every F of g < p*v-1 is followed by SEND_F;
 * every B of g < p*v-1 is preceded by RECV_B and every B of g > 0 followed
 * by SEND_B. The action's chunk is the local chunk; its peer is the stage
 * holding virtual stage g-1 or g+1 (sg_pp_peer). A SEND_F of (mb, g)
 * matches the RECV_F of (mb, g+1), a SEND_B of (mb, g) the RECV_B of
 * (mb, g-1). Sends are non-blocking (posted as soon as the data exist),
 * receives block: the semantics under which the checker proves that every
 * list runs to its end. With p = 1 there are no transfers.
 *
 * The schedule functions are pure logic: no MPI, not collective, the same
 * result on every rank.
 */
#ifndef SG_PIPELINE_H
#define SG_PIPELINE_H

#include <stddef.h>

#include "sg_autograd.h"
#include "sg_mesh.h"
#include "sg_model.h"
#include "sg_parallel.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sg_pp_kind {
  SG_PP_GPIPE,       /* all forwards, then all backwards */
  SG_PP_1F1B,        /* PipeDream-flush: warm-up, one F one B, cool-down */
  SG_PP_INTERLEAVED, /* Megatron's interleaved 1F1B, v >= 2 chunks */
  SG_PP_ZB_H1,       /* zero bubble H1: B (input grad) and W split */
  SG_PP_KIND_COUNT
} sg_pp_kind;

typedef enum sg_pp_op {
  SG_PP_F,      /* forward of (mb, chunk) */
  SG_PP_B,      /* backward: input gradient (ZB-H1), full backward else */
  SG_PP_W,      /* weight gradient (ZB-H1 only) */
  SG_PP_SEND_F, /* activations of (mb, chunk) to the next virtual stage */
  SG_PP_RECV_F, /* activations of (mb, chunk) from the previous one */
  SG_PP_SEND_B, /* input gradient of (mb, chunk) to the previous one */
  SG_PP_RECV_B, /* output gradient of (mb, chunk) from the next one */
  SG_PP_OP_COUNT
} sg_pp_op;

typedef struct sg_pp_action {
  sg_pp_op op;
  int mb;    /* micro-batch, 0..m-1 */
  int chunk; /* local chunk, 0..v-1 */
} sg_pp_action;

/* Stage s's actions are act[off[s] .. off[s+1]). */
typedef struct sg_pp_schedule {
  sg_pp_kind kind;
  int p, m, v;
  int *off;          /* p + 1 offsets */
  sg_pp_action *act; /* off[p] actions */
} sg_pp_schedule;

/* "gpipe", "1f1b", "interleaved", "zb-h1" (the sg-train pp_schedule
 * values); "?" for an invalid kind. Op names: "F", "B", "W", "SEND_F", ... */
const char *sg_pp_kind_name(sg_pp_kind kind);
const char *sg_pp_op_name(sg_pp_op op);
sg_status sg_pp_kind_parse(const char *name, sg_pp_kind *kind);
/* An action's label, as sg-info's table and the traces show it: the op
 * and micro-batch ("F3", "RECV_B0"), with ".chunk" when s->v > 1
 * ("B3.1"). Truncated to n - 1 characters. */
void sg_pp_action_label(const sg_pp_schedule *s, const sg_pp_action *a,
                        char *out, size_t n);

/* Generate a schedule for p stages, m micro-batches, v chunks per stage.
 * Errors (SG_ERR_INVALID_ARG, message says which): p < 1, m < 1, v < 1,
 * v > 1 for a kind without chunks; interleaved with p < 2, v < 2, m < p or
 * m not a multiple of p (Megatron's rule: micro-batches go round in groups
 * of p). Free with sg_pp_schedule_destroy. */
sg_status sg_pp_schedule_create(sg_pp_kind kind, int p, int m, int v,
                                sg_pp_schedule **out);
/* The same from a spec "pp=4,m=8,kind=1f1b[,v=2]" (keys in any order; p is
 * an alias of pp; v defaults to 1; pp, m and kind are required). */
sg_status sg_pp_schedule_parse(const char *spec, sg_pp_schedule **out);
sg_status sg_pp_schedule_destroy(sg_pp_schedule **s);

/* Virtual stage of (stage, chunk) and the stage a transfer goes to or comes
 * from (-1 for a compute action). */
int sg_pp_virtual_stage(const sg_pp_schedule *s, int stage, int chunk);
int sg_pp_peer(const sg_pp_schedule *s, int stage, const sg_pp_action *a);

/* The peak number of (micro-batch, chunk) pairs a stage holds between F
 * and B, as the schedule's formula says (docs/pipeline.md):
 *   gpipe m;  1f1b and zb-h1 min(m, p - s);
 *   interleaved min(m v, (v - 1) p + 2 (p - 1 - s) + 1). */
int sg_pp_peak_formula(const sg_pp_schedule *s, int stage);
/* The peak number of pairs between F and W (a pair whose B is done but not
 * its W still holds the weight gradient's inputs): ZB-H1 min(m, p) on every
 * stage, the peak of 1F1B's first stage; the F..B peak for the others. */
int sg_pp_peak_fw_formula(const sg_pp_schedule *s, int stage);

/* Check a schedule (any list, generated or not):
 *  - every action well formed (op, micro-batch, chunk, no transfer past the
 *    first or last virtual stage, no W outside ZB-H1);
 *  - per (stage, chunk, micro-batch) exactly one F and one B (and one W for
 *    ZB-H1); B after its F, W after its B; RECV_F before the F that needs
 *    it, SEND_F after it, RECV_B before B, SEND_B after it; no transfer
 *    twice;
 *  - every SEND has its RECV on the peer stage and the other way round, and
 *    the lists, run with non-blocking sends and blocking receives, all
 *    complete (no deadlock: a stuck run names the stages and what they wait
 *    for);
 *  - per stage the peak of pairs between F and B equals
 *    sg_pp_peak_formula, the peak between F and W sg_pp_peak_fw_formula.
 * peak_fb[s] (may be NULL): that peak; peak_fw[s] (may be NULL): the peak
 * of pairs between F and W (the weight gradient's inputs are still held;
 * equal to peak_fb for kinds without W). Arrays of p ints.
 * SG_ERR_INVALID_ARG with the first violation found. */
sg_status sg_pp_schedule_check(const sg_pp_schedule *s, int *peak_fb,
                               int *peak_fw);

/* Durations of one action (per chunk): F, B (the full backward for kinds
 * without W), W, and the latency of a transfer (from its send to the
 * earliest end of the matching receive). Transfers cost their stage no
 * time. */
typedef struct sg_pp_costs {
  double f, b, w, p2p;
} sg_pp_costs;

/* The result of a simulated run: start/end of every action (indexed like
 * act), per stage its busy time (F, B, W) and its bubble = 1 - busy /
 * makespan (the idle fraction of the step), and the makespan (the end of
 * the last action; every stage starts at 0). */
typedef struct sg_pp_sim {
  double makespan;
  double *start, *end;   /* off[p] each */
  double *busy, *bubble; /* p each */
} sg_pp_sim;

/* Execute the lists in simulated time: a compute action starts when its
 * stage is free, a receive ends when its stage reaches it and the message
 * has arrived (send time + p2p). Fails like the deadlock part of
 * sg_pp_schedule_check. Free with sg_pp_sim_free. */
sg_status sg_pp_simulate(const sg_pp_schedule *s, const sg_pp_costs *costs,
                         sg_pp_sim *out);
sg_status sg_pp_sim_free(sg_pp_sim *sim);


/* ---- execution (strategies/pipeline.c) ----------------------------------
 * The runtime runs a schedule's lists on a mesh with a "pp" dim: the rank's
 * coordinate along pp is its stage; the other dims form the stage's
 * sub-mesh (sg_pipe_stage_mesh), on which the stage builds its own
 * parallel plan with its own blocks' parameters only, so dp, fsdp (ZeRO 1-3)
 * and domain dims work inside a stage as they do without a pipeline. An
 * activation goes from a rank to the rank of the next stage with the same
 * coordinates in the other dims (its block of a domain-sharded tensor
 * included), its gradient back the same way.
 *
 *   sg_pipe_t pp;
 *   sg_pipe_create(mesh, &(sg_pipe_config){.kind = SG_PP_1F1B, .m = 4,
 *                  .nblocks = L}, &pp);
 *   for each chunk c: sg_pipe_blocks(pp, c, &first, &count);  // my blocks
 *   sg_pipe_plan_create(pp, &pcfg, nparams, table, nlocal, &plan);
 *   bind and initialise the stage's parameters (sg_parallel_params/grads);
 *   sg_pipe_attach(pp, plan, vars);
 *   for each step t:
 *     sg_pipe_run(pp, forward, ctx, &loss);    // every F, B, transfer
 *     sg_pipe_reduce(pp, &grad_norm);          // norm over all stages
 *     sg_parallel_step(plan, t, lr, sg_clip_scale(grad_norm, clip));
 *
 * forward(tape, ctx, mb, chunk, io) runs the blocks of `chunk` of this
 * stage on micro-batch mb, recording on `tape`; io is a bundle (sg_bundle:
 * the activation and the tensors alive across the cut, e.g. the U-Net's
 * skips; one tensor for a plain chain of blocks), in place:
 *  - on entry, on the first virtual stage io->n == 0: the function makes
 *    the micro-batch's input itself (its share of it under dp/domain
 *    dims); elsewhere io holds leaves with the tensors received (shape,
 *    dtype and sharding as the previous stage's outputs; requires_grad);
 *  - on return, on the last virtual stage io is {the micro-batch's scalar
 *    loss}, as its part of the step's loss (e.g. the mean over the
 *    micro-batch / m): backward starts from it with gradient 1, and the
 *    step's loss is the sum over micro-batches; elsewhere io is the
 *    bundle to send (1 .. SG_BUNDLE_MAX tensors). An output may be an
 *    input itself (passed through: a skip this stage neither makes nor
 *    uses): its received gradient is added to that input's.
 * Every tensor of a bundle travels with its own payload, and its gradient
 * comes back the same way.
 * Each (micro-batch, chunk) has its own tape (a backward clears its tape;
 * other micro-batches are in flight). Gradients accumulate in the plan's
 * buffers over the micro-batches (sg_parallel_begin_micro before every B,
 * counting the stage's B's); the plan's hooks are on the tape of the
 * stage's last B (ZB-H1: last W), so the DDP buckets are reduced while
 * that backward (weight pass) runs, and every other tape gets the hooks a
 * micro-batch needs on its own (sg_parallel_attach_tape: zero 2/3's
 * gathers and reduce-scatters onto the gradient pieces, bf16's rounding).
 *
 * ZB-H1: B is the tape's split backward's input-gradient pass
 * (sg_tape_backward_split / _from_split: the gradient is sent back at
 * once), W its weight pass (sg_tape_backward_weights) on the same
 * (micro-batch, chunk)'s tape; between them the tape holds what W needs
 * (sg_autograd.h), counted in the stats' peak bytes. Activation
 * checkpoints run whole in B.
 *
 * Transfers: the receive of every header (shape, dtype, sharding, a
 * failure flag) is posted when the step starts; the receive of an
 * activation as soon as its header is seen to have arrived (tested
 * between actions), straight into the leaf; the receive of a gradient as
 * soon as the forward made the output it belongs to. Sends are
 * non-blocking; an input is freed once its gradient has been sent (ZB-H1:
 * and its W has run). Failures: a stage
 * whose forward or backward fails (agreed over its sub-mesh) stops
 * computing but keeps every transfer of its list, flagged failed, so the
 * stages it talks to stop computing too and nobody waits for a message
 * that never comes; sg_pipe_run then returns the failing rank's error on
 * every rank.
 *
 * Every (micro-batch, chunk) tape carries the plan's hooks (sg_pipe_attach),
 * so ZeRO 2/3 (gathers in every F, B and W; the gradient pieces) and bf16
 * work inside a stage. */
typedef struct sg_pipe *sg_pipe_t;

typedef struct sg_pipe_config {
  sg_pp_kind kind;
  int m;                /* micro-batches per step, >= 1 */
  int v;                /* chunks per stage; 0: 1 (2 for interleaved) */
  int nblocks;          /* blocks of the model, cut into p * v pieces */
  const int *split;     /* NULL: balanced (the first nblocks % (p v) pieces get
                       one more block); else p v - 1 increasing block
                       indices in (0, nblocks): where pieces 1.. start */
  sg_mesh_t stage_mesh; /* NULL: the runtime makes its stage mesh; else
                           one from sg_pipe_stage_mesh_create on the same
                           mesh (not owned; outlives the runtime), e.g.
                           the mesh a model was built on: received
                           activations are placed on it */
} sg_pipe_config;

typedef sg_status (*sg_pipe_forward_fn)(sg_tape_t tape, void *ctx, int mb,
                                        int chunk, sg_bundle *io);

/* The runtime for mesh (its "pp" dim: the stages; no pp dim: one stage).
 * Errors (SG_ERR_INVALID_ARG naming the rule, on every rank): m < 1, more
 * virtual stages than blocks, a bad split, the schedule's own rules.
 * Collective over the mesh. */
sg_status sg_pipe_create(sg_mesh_t mesh, const sg_pipe_config *cfg,
                         sg_pipe_t *pipe);
/* A mesh like sg_pipe_stage_mesh, owned by the caller (sg_mesh_destroy):
 * to build a model on a stage before the runtime exists (the model's
 * pieces give cfg.nblocks); pass it as cfg.stage_mesh. Collective over
 * mesh. */
sg_status sg_pipe_stage_mesh_create(sg_mesh_t mesh, sg_mesh_t *sub);
/* NULL and *pipe == NULL are fine; sets *pipe to NULL. Collective. */
sg_status sg_pipe_destroy(sg_pipe_t *pipe);

/* Queries, not collective. The stage mesh: the mesh without pp (a mesh
 * "dp=1" of this rank alone when pp was the only dim); owned by the
 * runtime. */
int sg_pipe_stage(sg_pipe_t pipe);
int sg_pipe_nstages(sg_pipe_t pipe);
sg_mesh_t sg_pipe_stage_mesh(sg_pipe_t pipe);
const sg_pp_schedule *sg_pipe_schedule(sg_pipe_t pipe);
/* The blocks [*first, *first + *count) of this stage's chunk. */
void sg_pipe_blocks(sg_pipe_t pipe, int chunk, int *first, int *count);

/* sg_parallel_create on the stage mesh with this stage's parameter table
 * (any zero stage, bf16 too). The caller owns the plan (sg_parallel_destroy). Collective. */
sg_status sg_pipe_plan_create(sg_pipe_t pipe, const sg_parallel_config *cfg,
                              int nparams, const sg_param_info *table,
                              int64_t nlocal, sg_parallel_t *plan);
/* The plan (not owned) whose gradients the runs accumulate; vars as for
 * sg_parallel_attach. Once. Not collective. */
sg_status sg_pipe_attach(sg_pipe_t pipe, sg_parallel_t plan,
                         sg_var *const *vars);
/* Split points balanced by cost (strategies/pipeline_cost.c): the
 * nblocks blocks of costs cost[0..nblocks) cut into `parts` contiguous
 * pieces, each of at least one block, so that the most expensive piece is
 * as cheap as possible (exact: dynamic programming); split[0..parts-2] as
 * sg_pipe_config.split takes them (the first block of pieces 1, 2, ...).
 * SG_ERR_INVALID_ARG for fewer blocks than parts or a negative cost. Not
 * collective. */
sg_status sg_pp_split_by_cost(int nblocks, const double *cost, int parts,
                              int *split);
/* The measured cost of each piece of a zoo model (sg_model_nblocks of
 * them), for pp_split = auto: the model — built on the stage mesh, not
 * yet bound — is bound to scratch buffers and initialised, and every piece
 * runs forward in turn on a random input of batch x cin x its local box,
 * recording on a tape as in training; cost[k] is piece k's median forward
 * time over reps runs after a warm-up, the largest over the ranks of mesh
 * (the whole mesh: every rank gets the same costs, hence the same split).
 * The backward is taken to scale with the forward. Afterwards the model's
 * parameters must be bound again (sg_pipe_model_plan does). Collective
 * over mesh. */
sg_status sg_pipe_model_piece_costs(sg_mesh_t mesh, sg_model_t model,
                                    int64_t batch, int64_t cin, int reps,
                                    double *cost);

/* All of the above for a model of the zoo with pieces (sg_model_nblocks
 * == cfg.nblocks), built on the stage mesh: the plan over this stage's
 * pieces (every chunk's, in chunk order; the model's own offsets, the
 * other stages' parameters are gaps in its buffers), the model bound to
 * it and initialised from seed (the values of one process), the pieces'
 * variables attached. The caller owns the plan. Collective. */
sg_status sg_pipe_model_plan(sg_pipe_t pipe, sg_model_t model,
                             const sg_parallel_config *cfg, uint64_t seed,
                             sg_parallel_t *plan);

/* One step's forwards and backwards: this stage's list, in order. *loss
 * (may be NULL): the step's loss (the sum of the last stage's micro-batch
 * losses), the same on every rank. Collective over the mesh. */
sg_status sg_pipe_run(sg_pipe_t pipe, sg_pipe_forward_fn fn, void *ctx,
                      double *loss);
/* sg_parallel_reduce on the stage, and the global gradient norm over
 * every stage (each element counted once; stage order: deterministic).
 * Collective over the mesh. */
sg_status sg_pipe_reduce(sg_pipe_t pipe, double *grad_norm);

/* Measured on this stage over the runs so far (after each F and B): the
 * peak number of (micro-batch, chunk) pairs between F and B, the
 * schedule's formula for it (sg_pp_peak_formula), the peak bytes of the
 * stage's tapes (sg_tape_bytes: the activations and saved state of the
 * pairs in flight; ZB-H1: and what the pairs waiting for their W hold) and
 * of the inputs received (from the arrival of their header, when their
 * receive is posted, until their gradient has been sent and, ZB-H1, their
 * W has run: W may read them), and the payload bytes this rank sent
 * (every bundle tensor and gradient). */
typedef struct sg_pipe_stats {
  int peak_inflight, peak_formula;
  size_t peak_bytes, peak_input_bytes;
  /* the peak number of pairs between F and W (ZB-H1: a pair whose B is
   * done holds the W state until its W; other kinds: between F and B) and
   * the formula for it (sg_pp_peak_fw_formula) */
  int peak_fw, peak_fw_formula;
  size_t bytes_sent; /* payloads (activations and gradients) sent */
} sg_pipe_stats;
void sg_pipe_get_stats(sg_pipe_t pipe, sg_pipe_stats *stats);

/* A forward-only run (evaluation, prediction): on this stage, for each of
 * the m micro-batches and each chunk in turn, RECV_F, F, SEND_F — no
 * backward, no gradient transfers. fn as for sg_pipe_run, recording on a
 * tape with gradients off; on the last virtual stage fn consumes the
 * model's output itself (metrics, predictions: *out is ignored there and
 * may be NULL), elsewhere *out is the activation to send. The same
 * micro-batch size as training (a model is built for it); the lists are
 * ordered by (micro-batch, virtual stage) on every stage, so they cannot
 * deadlock. Failures as for sg_pipe_run: the failing rank's error on every
 * rank. Collective over the mesh. */
sg_status sg_pipe_forward(sg_pipe_t pipe, sg_pipe_forward_fn fn, void *ctx);
/* n elements of dtype from the last stage (where a forward-only run's
 * metrics and predictions are) to every stage, into buf: a broadcast over
 * pp, between the ranks with this rank's stage-mesh coordinates.
 * Collective over the mesh. */
sg_status sg_pipe_bcast_last(sg_pipe_t pipe, void *buf, int64_t n,
                             sg_dtype dtype);

/* The whole mesh the runtime was created on (pp and the stage dims; not
 * owned). Not collective. */
sg_mesh_t sg_pipe_mesh(sg_pipe_t pipe);

/* ---- a zoo model's runs (strategies/pipeline_model.c) --------------------
 * The forward function every driver of a zoo model (sg_model_nblocks
 * pieces, a plan from sg_pipe_model_plan) would write, with the driver's
 * data in three callbacks: per (micro-batch, chunk) the stage runs its
 * chunk's pieces (sg_model_forward_blocks); on the first virtual stage the
 * micro-batch's input comes from `input`, on the last the model's output
 * goes to `output`:
 *  - fill(ctx, mb) (may be NULL): before the forward of micro-batch mb on
 *    the first or the last virtual stage, once per such forward: read the
 *    micro-batch's data (input, target, mask) into the driver's buffers;
 *  - input(ctx, mb, x): initialise the leaf x (zeroed; sg_var_init over
 *    the driver's buffer of this rank's share of the input): the run
 *    releases it when it ends;
 *  - output(ctx, tape, mb, y, loss): y is the model's output of mb. In a
 *    training run *loss is set to the micro-batch's scalar loss recorded
 *    on tape (its part of the step's loss, as for sg_pipe_run: e.g. the
 *    mean / m); in a forward-only run loss is NULL and the driver consumes
 *    y (scores it, keeps the predictions) before returning.
 * Variables the callbacks init and mark for the tape (a target) are the
 * driver's, alive until the run returns. */
typedef struct sg_pipe_model_io {
  sg_model_t model;
  sg_status (*fill)(void *ctx, int mb);
  sg_status (*input)(void *ctx, int mb, sg_var *x);
  sg_status (*output)(void *ctx, sg_tape_t tape, int mb, sg_var *y,
                      sg_var **loss);
  void *ctx;
} sg_pipe_model_io;

/* sg_pipe_run over the model's pieces: one training step's forwards and
 * backwards; *loss (may be NULL) as there. Collective over the mesh. */
sg_status sg_pipe_model_run(sg_pipe_t pipe, const sg_pipe_model_io *io,
                            double *loss);
/* sg_pipe_forward over the model's pieces: a forward-only run of m
 * micro-batches, each consumed by `output` on the last stage. Collective
 * over the mesh. */
sg_status sg_pipe_model_forward(sg_pipe_t pipe, const sg_pipe_model_io *io);
/* An autoregressive rollout through the stages: `steps` forward-only runs
 * (sg_pipe_model_forward). After run k the model's output of every
 * micro-batch (count elements of dtype each; micro-batch mb at element
 * mb * count of out, m * count in all) is in out on every rank of the
 * pipeline (kept on the last stage, then sg_pipe_bcast_last), and
 * next(ctx, k) runs on every rank: it feeds the predictions back into
 * what io->input gives the next run (and may score them). io->fill may be
 * NULL; io->output may be NULL, or runs on the last stage after the copy
 * (loss NULL). An output of another size than count is an error.
 * Collective over the mesh. */
sg_status sg_pipe_model_roll(sg_pipe_t pipe, const sg_pipe_model_io *io,
                             int64_t steps, sg_dtype dtype, int64_t count,
                             void *out, sg_status (*next)(void *ctx, int64_t k),
                             void *ctx);

/* ---- checkpoints (strategies/pipeline_ckpt.c) ----------------------------
 * One checkpoint per step for the whole pipeline, in the format of a run
 * without one (sg_parallel_ckpt_arrays: "params.<name>", "adam_m.<name>",
 * "adam_v.<name>", each a global array), so it loads on any mesh and a
 * pipeline loads any mesh's: every rank of the mesh passes the arrays of
 * the whole model's table (table[0..nparams): every parameter of the
 * model, the same on every rank; a stage builds the whole model, so it
 * knows every global shape), in table order. The arrays of this stage's
 * plan are the plan's (its box; for writing, one writer per group of
 * copies inside the stage); the other stages' parameters get count 0 —
 * each parameter lives on exactly one stage, so the writers partition
 * every array. Hand them to sg_ckpt_write / sg_ckpt_read over the whole
 * mesh's communicator. *arrays is one allocation (sg_pipe_ckpt_arrays_free);
 * the data pointers are the plan's buffers. Errors (a plan parameter that
 * the table lacks) on every rank. Collective over the mesh. */
sg_status sg_pipe_ckpt_arrays(sg_pipe_t pipe, sg_parallel_t plan, int nparams,
                              const sg_param_info *table, int writing,
                              sg_ckpt_array **arrays, int *n);
/* The same with the table of a zoo model (sg_model_param_info of every
 * parameter), for a plan made by sg_pipe_model_plan. Collective. */
sg_status sg_pipe_model_ckpt_arrays(sg_pipe_t pipe, sg_parallel_t plan,
                                    sg_model_t model, int writing,
                                    sg_ckpt_array **arrays, int *n);
sg_status sg_pipe_ckpt_arrays_free(sg_ckpt_array **arrays);

/* The last run's timeline on this stage: for action i of the stage's list
 * (act[i], the schedule's own list) when it started and ended, in
 * sg_wtime() seconds (CLOCK_MONOTONIC: comparable between the processes
 * of one machine). What an interval covers: F the forward and posting its
 * gradient's receive; B completing its outputs' sends, then the backward (ZB-H1: its input-gradient pass);
 * W the weight gradient (ZB-H1's split backward);
 * RECV_F / RECV_B the wait for
 * the message; SEND_* posting it (non-blocking). Between actions the
 * runtime posts the receives of headers that arrived; t0 / t1 are
 * sg_pipe_run's start and end (posting the header receives before the
 * first action, completing the sends after the last). runs: the runs so
 * far (0: the arrays hold zeros). The arrays are the runtime's, valid
 * until the next run or sg_pipe_destroy. When tracing is enabled
 * (sg_trace_enable) every run also adds its actions to the Chrome trace
 * (sg_trace_write: one row per rank, events named "F3", "RECV_B0", "B3.1"
 * as sg-info names them). Not collective. */
typedef struct sg_pipe_timeline {
  int n;                   /* actions in this stage's list */
  const sg_pp_action *act; /* the list: act[0 .. n) */
  const double *start, *end;
  double t0, t1;
  int64_t runs;
} sg_pipe_timeline;
void sg_pipe_get_timeline(sg_pipe_t pipe, sg_pipe_timeline *tl);

#ifdef __cplusplus
}
#endif
#endif /* SG_PIPELINE_H */
