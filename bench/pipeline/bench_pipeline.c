/* bench/pipeline: the pipeline's bubble, measured on stages running as
 * processes, beside the formula and the simulator fed the measured costs;
 * the peak activation memory per stage (issue 18, section 4).
 *
 *   mpiexec -n P bench_pipeline [--m 4,8,16,32]
 *       [--kinds gpipe,1f1b,interleaved,zb-h1] [--v 2] [--steps 3]
 *       [--warmup 1] [--work-ms 2] [--elems 4096] [--trace FILE]
 *
 * The mesh is pp=P (one rank per stage). The model: P*V blocks (V = --v)
 * of y = w x (w a scalar parameter) on a (1, 1, elems) activation, each of
 * which also runs a fixed amount of arithmetic (a blocked compute of the
 * same work every time, calibrated once to about --work-ms) in its forward,
 * in its input gradient and in its weight gradient. So a stage's F, B
 * (input gradient) and W (weight gradient) cost the same work, F = B = W,
 * whenever the runtime runs B and W apart; while it runs the whole backward
 * in B (W empty) B = 2F. The benchmark reports what it measures.
 *
 * Per schedule and m: warm-up steps, then timed steps (a barrier before
 * each). From each step's timeline (sg_pipe_get_timeline): the step time
 * T = the last run's end over the stages - the first run's start, each
 * stage's busy time (its F, B, W intervals) and its bubble 1 - busy / T;
 * the median over the steps. Beside it: the formula (docs/pipeline.md:
 * GPipe and 1F1B (p-1)/(m+p-1), interleaved (p-1)/(v m+p-1), ZB-H1
 * (p-1)/(3m+p-1) with F = B = W), and the simulator (sg_pp_simulate) run
 * on the same lists with the measured mean F, B, W durations, once with no
 * transfer latency and once with the measured one (the mean time from a
 * send's post to the end of a receive that had to wait for it: the
 * transfer and the waiting stage's wake-up). Peak memory per stage
 * (sg_pipe_get_stats): the tapes' bytes (activations held between F and
 * B) and the received inputs'.
 *
 * Output: one JSON line per run on stdout; a table on stderr (rank 0).
 * With more ranks than cores the stages share cores and the measured
 * times include that: the output says so (oversubscribed), and cpu_share
 * (the CPU time over the wall time of the fixed work, all stages) says how
 * much of its compute a stage had a core for: 1 on a quiet machine with a
 * core per stage, less under load or oversubscription. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

#include "sg_pipeline.h"
#include "sg_trace.h"

enum { MAX_LIST = 16, MAX_STEPS = 64 };

/* ---- a block of fixed work ------------------------------------------------ */

static float spin_buf[1024];
static volatile float spin_sink;
static long spin_units = 1000; /* per forward, input and weight gradient */

static double spin_wall, spin_cpu; /* summed over the timed steps */

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A fixed amount of arithmetic: units passes over a block in L1. Its wall
 * and CPU time are summed: their ratio says how much of the compute the
 * process had a core for (< 1: other processes, or other stages, ran). */
static void spin(long units) {
  const double w0 = now(), c0 = cpu_now();
  for (long r = 0; r < units; ++r)
    for (int i = 0; i < 1024; ++i) spin_buf[i] = spin_buf[i] * 0.9999f + 1e-4f;
  spin_sink = spin_buf[units % 1024];
  spin_cpu += cpu_now() - c0;
  spin_wall += now() - w0;
}

static sg_status busy_fwd(sg_node *node) {
  sg_status st = SG_OK;
  const sg_tensor *x = &node->in[0]->value;
  const float w = *(const float *)node->in[1]->value.data;
  SG_TRY(sg_node_alloc_out_uninit(node, 0, x->ndim, x->shape));
  const float *xd = x->data;
  float *y = node->out[0]->value.data;
  for (int64_t i = 0; i < sg_tensor_numel(x); ++i) y[i] = w * xd[i];
  spin(spin_units);
fail:
  return st;
}

/* Each gradient asked for costs the same work as the forward: B (input
 * gradient) and W (weight gradient) apart, or both in one call. */
static sg_status busy_bwd(sg_node *node) {
  const sg_tensor *x = &node->in[0]->value;
  const float w = *(const float *)node->in[1]->value.data;
  const float *dy = node->out[0]->grad.data, *xd = x->data;
  const int64_t n = sg_tensor_numel(x);
  if (node->gin[0]) {
    float *dx = node->gin[0];
    for (int64_t i = 0; i < n; ++i) dx[i] = w * dy[i];
    spin(spin_units);
  }
  if (node->gin[1]) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) acc += (double)dy[i] * xd[i];
    *(float *)node->gin[1] += (float)acc;
    spin(spin_units);
  }
  return SG_OK;
}

static const sg_op_def busy_op = {
    .name = "bench_busy",
    .slots = {SG_SLOT_ACT, SG_SLOT_PARAM},
    .forward = busy_fwd,
    .backward = busy_bwd,
    .rule = {.windowed_input = -1, .out = SG_OUT_LIKE_INPUT, .writes_gin = 1u}};

/* Calibrate spin_units to about ms milliseconds: the fastest of a few
 * runs on any rank (the same units everywhere: the work is fixed). */
static void calibrate(double ms) {
  const long probe = 2000;
  double best = 1e30;
  for (int k = 0; k < 5; ++k) {
    double t0 = now();
    spin(probe);
    double t = now() - t0;
    if (t < best) best = t;
  }
  MPI_Allreduce(MPI_IN_PLACE, &best, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  spin_units = (long)fmax(1.0, ms * 1e-3 / best * probe);
}

/* ---- the model: blocks of fixed work ---------------------------------------- */

typedef struct bmodel {
  sg_pipe_t pipe;
  int m, nb;
  int64_t elems;
  sg_var *w;     /* nb scalar parameters */
  sg_var *x, *t; /* m inputs and targets */
} bmodel;

static sg_status leaf(sg_var *v, const char *name, int64_t elems, int rg) {
  sg_status st = SG_OK;
  const int64_t shape[3] = {1, 1, elems};
  SG_TRY(sg_var_init(v, name, SG_DTYPE_F32, 3, shape, NULL, rg));
  float *d = v->value.data;
  for (int64_t i = 0; i < elems; ++i) d[i] = 0.5f + 1e-3f * (float)(i % 7);
fail:
  return st;
}

/* The blocks of this chunk; the input needs its gradient too, so stage 0's
 * first block does the same work as every other. */
static sg_status bm_forward(sg_tape_t tape, void *ctx, int mb, int chunk,
                            sg_bundle *io) {
  sg_status st = SG_OK;
  bmodel *M = ctx;
  int first, count;
  sg_pipe_blocks(M->pipe, chunk, &first, &count);
  sg_var *x = io->n ? io->v[0] : NULL;
  if (!x) {
    SG_TRY(leaf(&M->x[mb], "x", M->elems, 1));
    x = &M->x[mb];
  }
  for (int k = first; k < first + count; ++k) {
    sg_var *in2[2] = {x, &M->w[k]};
    SG_TRY(sg_tape_apply(tape, &busy_op, 2, in2, 1, NULL, NULL, 0, &x));
  }
  if (first + count == M->nb) {
    SG_TRY(leaf(&M->t[mb], "t", M->elems, 0));
    SG_TRY(sg_ag_loss(tape, SG_LOSS_MSE, x, &M->t[mb], &x));
    SG_TRY(sg_ag_scale(tape, 1.0 / M->m, x, &x));
  }
  *io = (sg_bundle){.n = 1, .v = {x}};
fail:
  return st;
}

/* ---- measuring -------------------------------------------------------------- */

typedef struct run_cfg {
  sg_pp_kind kind;
  int p, m, v, steps, warmup, cores;
  int64_t elems;
  int trace;
} run_cfg;

/* What one run measured (on every rank after the reductions). */
typedef struct result {
  double f, b, w;      /* mean duration of one F, B, W action (s) */
  double step, lat;    /* median step time; mean receive latency (s) */
  double cpu_share;    /* CPU time / wall time of the fixed work */
  double *bubble;      /* p: median over the steps */
  double sim, sim_lat; /* simulated bubble (stage 0), latency 0 / lat */
  int *inflight, *inf_formula;
  long *tape_bytes, *input_bytes;
} result;

static int is_compute(sg_pp_op op) {
  return op == SG_PP_F || op == SG_PP_B || op == SG_PP_W;
}

/* The stage's busy time and the sums of its F, B, W durations (sum[3],
 * count[3]) over one step's timeline. */
static double stage_busy(const sg_pipe_timeline *tl, double *sum,
                         double *count) {
  double busy = 0.0;
  for (int i = 0; i < tl->n; ++i) {
    const sg_pp_op op = tl->act[i].op;
    if (!is_compute(op)) continue;
    const double d = tl->end[i] - tl->start[i];
    busy += d;
    sum[op] += d; /* SG_PP_F, B, W are 0, 1, 2 */
    count[op] += 1.0;
  }
  return busy;
}

/* The send (global index) a receive (action a of stage) waits for. */
static int matching_send(const sg_pp_schedule *s, int stage,
                         const sg_pp_action *a) {
  const int f = a->op == SG_PP_RECV_F;
  const int g = sg_pp_virtual_stage(s, stage, a->chunk) + (f ? -1 : 1);
  const int q = sg_pp_peer(s, stage, a), c = g / s->p;
  for (int i = s->off[q]; i < s->off[q + 1]; ++i)
    if (s->act[i].op == (f ? SG_PP_SEND_F : SG_PP_SEND_B) &&
        s->act[i].mb == a->mb && s->act[i].chunk == c)
      return i;
  return -1;
}

/* The latency of this stage's receives that waited: from the matching
 * send's post (every stage's timeline gathered: one clock on one
 * machine) to the receive's end. Adds to *lat, *nlat. */
static void recv_latency(const sg_pp_schedule *s, const sg_pipe_timeline *tl,
                         int stage, double *lat, double *nlat) {
  const int total = s->off[s->p];
  double *st = malloc(2 * (size_t)total * sizeof *st), *en = st + total;
  int *cnt = malloc(2 * (size_t)s->p * sizeof *cnt), *dis = cnt + s->p;
  for (int q = 0; q < s->p; ++q) {
    cnt[q] = s->off[q + 1] - s->off[q];
    dis[q] = s->off[q];
  }
  MPI_Allgatherv(tl->start, tl->n, MPI_DOUBLE, st, cnt, dis, MPI_DOUBLE,
                 MPI_COMM_WORLD);
  MPI_Allgatherv(tl->end, tl->n, MPI_DOUBLE, en, cnt, dis, MPI_DOUBLE,
                 MPI_COMM_WORLD);
  for (int i = 0; i < tl->n; ++i) {
    const sg_pp_action *a = &tl->act[i];
    if (a->op != SG_PP_RECV_F && a->op != SG_PP_RECV_B) continue;
    const int j = matching_send(s, stage, a);
    if (j < 0 || en[j] <= tl->start[i]) continue; /* it did not wait */
    *lat += tl->end[i] - en[j];
    *nlat += 1.0;
  }
  free(st);
  free(cnt);
}

/* The schedule's bubble formula (docs/pipeline.md; ZB-H1: F = B = W). */
static double formula(const run_cfg *c) {
  const double p = c->p, m = c->m;
  switch (c->kind) {
  case SG_PP_INTERLEAVED: return (p - 1) / (c->v * m + p - 1);
  case SG_PP_ZB_H1: return (p - 1) / (3 * m + p - 1);
  default: return (p - 1) / (m + p - 1);
  }
}

static sg_status simulate(const sg_pp_schedule *s, const result *r, double p2p,
                          double *bubble) {
  sg_status st = SG_OK;
  sg_pp_sim sim = {0};
  SG_TRY(sg_pp_simulate(s, &(sg_pp_costs){r->f, r->b, r->w, p2p}, &sim));
  *bubble = sim.bubble[0];
fail:
  sg_pp_sim_free(&sim);
  return st;
}

/* One timed step: its time, this stage's bubble, the costs' sums. */
static sg_status timed_step(bmodel *M, int stage, double *step, double *bubble,
                            double *sum, double *count, double *lat,
                            double *nlat) {
  sg_status st = SG_OK;
  MPI_Barrier(MPI_COMM_WORLD);
  SG_TRY(sg_pipe_run(M->pipe, bm_forward, M, NULL));
  sg_pipe_timeline tl;
  sg_pipe_get_timeline(M->pipe, &tl);
  double t0 = tl.t0, t1 = tl.t1;
  MPI_Allreduce(MPI_IN_PLACE, &t0, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &t1, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  *step = t1 - t0;
  *bubble = 1.0 - stage_busy(&tl, sum, count) / *step;
  recv_latency(sg_pipe_schedule(M->pipe), &tl, stage, lat, nlat);
fail:
  return st;
}

static void release_data(bmodel *M) {
  for (int i = 0; i < M->m; ++i) {
    sg_var_release(&M->x[i]);
    sg_var_release(&M->t[i]);
  }
}

/* A span over the step in the trace, named after the run. */
static void trace_span(const run_cfg *c, double t0) {
  char name[64];
  snprintf(name, sizeof name, "step %s p=%d m=%d v=%d",
           sg_pp_kind_name(c->kind), c->p, c->m, c->v);
  sg_trace_add(name, t0, sg_wtime());
}

/* Warm-up and timed steps; the per-stage results reduced over the ranks
 * (rank r is stage r). */
static sg_status measure(const run_cfg *c, bmodel *M, result *r) {
  sg_status st = SG_OK;
  const int me = sg_pipe_stage(M->pipe);
  double sum[3] = {0}, count[3] = {0}, lat = 0.0, nlat = 0.0;
  double steps[MAX_STEPS], bub[MAX_STEPS];
  for (int k = 0; k < c->warmup; ++k) {
    SG_TRY(sg_pipe_run(M->pipe, bm_forward, M, NULL));
    release_data(M);
  }
  spin_wall = spin_cpu = 0.0;
  for (int k = 0; k < c->steps; ++k) {
    const int traced = c->trace && k == c->steps - 1; /* the last step */
    sg_trace_enable(traced);
    const double t0 = sg_wtime();
    SG_TRY(timed_step(M, me, &steps[k], &bub[k], sum, count, &lat, &nlat));
    if (traced) trace_span(c, t0);
    sg_trace_enable(0);
    release_data(M);
  }
  MPI_Allreduce(MPI_IN_PLACE, sum, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, count, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &lat, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &nlat, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double spun[2] = {spin_cpu, spin_wall};
  MPI_Allreduce(MPI_IN_PLACE, spun, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  r->cpu_share = spun[1] > 0 ? spun[0] / spun[1] : 0.0;
  r->f = count[0] > 0 ? sum[0] / count[0] : 0.0;
  r->b = count[1] > 0 ? sum[1] / count[1] : 0.0;
  r->w = count[2] > 0 ? sum[2] / count[2] : 0.0;
  r->lat = nlat > 0 ? lat / nlat : 0.0;
  r->step = median(steps, c->steps);
  const double mine = median(bub, c->steps);
  MPI_Allgather(&mine, 1, MPI_DOUBLE, r->bubble, 1, MPI_DOUBLE, MPI_COMM_WORLD);
  sg_pipe_stats ps;
  sg_pipe_get_stats(M->pipe, &ps);
  const long tb = (long)ps.peak_bytes, ib = (long)ps.peak_input_bytes;
  MPI_Allgather(&ps.peak_inflight, 1, MPI_INT, r->inflight, 1, MPI_INT,
                MPI_COMM_WORLD);
  MPI_Allgather(&ps.peak_formula, 1, MPI_INT, r->inf_formula, 1, MPI_INT,
                MPI_COMM_WORLD);
  MPI_Allgather(&tb, 1, MPI_LONG, r->tape_bytes, 1, MPI_LONG, MPI_COMM_WORLD);
  MPI_Allgather(&ib, 1, MPI_LONG, r->input_bytes, 1, MPI_LONG, MPI_COMM_WORLD);
  const sg_pp_schedule *s = sg_pipe_schedule(M->pipe);
  SG_TRY(simulate(s, r, 0.0, &r->sim));
  SG_TRY(simulate(s, r, r->lat, &r->sim_lat));
fail:
  return st;
}

/* ---- output ----------------------------------------------------------------- */

static void json_doubles(const char *key, const double *v, int n, double f) {
  printf(",\"%s\":[", key);
  for (int i = 0; i < n; ++i) printf("%s%.4f", i ? "," : "", f * v[i]);
  printf("]");
}

static void json_longs(const char *key, const long *v, int n) {
  printf(",\"%s\":[", key);
  for (int i = 0; i < n; ++i) printf("%s%ld", i ? "," : "", v[i]);
  printf("]");
}

static void json_ints(const char *key, const int *v, int n) {
  printf(",\"%s\":[", key);
  for (int i = 0; i < n; ++i) printf("%s%d", i ? "," : "", v[i]);
  printf("]");
}

static void print_json(const run_cfg *c, const result *r) {
  double mean = 0.0;
  for (int s = 0; s < c->p; ++s) mean += r->bubble[s] / c->p;
  printf("{\"bench\":\"pipeline\",\"kind\":\"%s\",\"p\":%d,\"m\":%d,\"v\":%d,"
         "\"steps\":%d,\"cores\":%d,\"oversubscribed\":%s,\"work_units\":%ld,"
         "\"f_ms\":%.4f,\"b_ms\":%.4f,\"w_ms\":%.4f,\"w_separate\":%s,"
         "\"step_ms\":%.3f,\"recv_latency_ms\":%.4f,\"bubble_formula\":%.4f,"
         "\"bubble_sim\":%.4f,\"bubble_sim_latency\":%.4f,"
         "\"bubble_measured_mean\":%.4f,\"cpu_share\":%.3f",
         sg_pp_kind_name(c->kind), c->p, c->m, c->v, c->steps, c->cores,
         c->p > c->cores ? "true" : "false", spin_units, 1e3 * r->f, 1e3 * r->b,
         1e3 * r->w, r->w > 0.5 * r->f ? "true" : "false", 1e3 * r->step,
         1e3 * r->lat, formula(c), r->sim, r->sim_lat, mean, r->cpu_share);
  json_doubles("bubble_measured", r->bubble, c->p, 1.0);
  json_ints("peak_inflight", r->inflight, c->p);
  json_ints("peak_inflight_formula", r->inf_formula, c->p);
  json_longs("peak_tape_bytes", r->tape_bytes, c->p);
  json_longs("peak_input_bytes", r->input_bytes, c->p);
  printf("}\n");
  fflush(stdout);
}

static void print_row(const run_cfg *c, const result *r) {
  char kind[24];
  if (c->kind == SG_PP_INTERLEAVED)
    snprintf(kind, sizeof kind, "interleaved v=%d", c->v);
  else
    snprintf(kind, sizeof kind, "%s", sg_pp_kind_name(c->kind));
  fprintf(stderr,
          "| %d | %d | %s | %.2f/%.2f/%.2f | %.1f | %.1f%% | %.1f%% | "
          "%.1f%% | %.2f | %.0f%% |",
          c->p, c->m, kind, 1e3 * r->f, 1e3 * r->b, 1e3 * r->w, 1e3 * r->step,
          100 * formula(c), 100 * r->sim, 100 * r->sim_lat, 1e3 * r->lat,
          100 * r->cpu_share);
  for (int s = 0; s < c->p; ++s) fprintf(stderr, " %.1f%%", 100 * r->bubble[s]);
  fprintf(stderr, " |");
  for (int s = 0; s < c->p; ++s)
    fprintf(stderr, " %ld", (r->tape_bytes[s] + r->input_bytes[s]) / 1024);
  fprintf(stderr, " |\n");
}

/* ---- driver ------------------------------------------------------------------ */

static sg_status run_one(const run_cfg *c, sg_mesh_t mesh, int rank) {
  sg_status st = SG_OK;
  bmodel M = {.m = c->m, .nb = c->p * c->v, .elems = c->elems};
  result r = {0};
  M.w = calloc((size_t)M.nb, sizeof *M.w);
  M.x = calloc((size_t)c->m, sizeof *M.x);
  M.t = calloc((size_t)c->m, sizeof *M.t);
  r.bubble = calloc((size_t)c->p, sizeof *r.bubble);
  r.inflight = calloc(2 * (size_t)c->p, sizeof *r.inflight);
  r.inf_formula = r.inflight + c->p;
  r.tape_bytes = calloc(2 * (size_t)c->p, sizeof *r.tape_bytes);
  r.input_bytes = r.tape_bytes + c->p;
  if (!M.w || !M.x || !M.t || !r.bubble || !r.inflight || !r.tape_bytes)
    SG_RAISE(SG_ERR_ALLOC, "bench_pipeline: out of memory");
  /* v blocks per stage for every kind: the same work per stage */
  SG_TRY(sg_pipe_create(
      mesh,
      &(sg_pipe_config){.kind = c->kind,
                        .m = c->m,
                        .v = c->kind == SG_PP_INTERLEAVED ? c->v : 1,
                        .nblocks = M.nb},
      &M.pipe));
  const int64_t one = 1;
  for (int k = 0; k < M.nb; ++k) {
    SG_TRY(sg_var_init(&M.w[k], "w", SG_DTYPE_F32, 1, &one, NULL, 1));
    *(float *)M.w[k].value.data = 1.0f;
  }
  run_cfg rc = *c;
  rc.v = sg_pipe_schedule(M.pipe)->v;
  SG_TRY(measure(&rc, &M, &r));
  if (rank == 0) {
    print_json(&rc, &r);
    print_row(&rc, &r);
  }
fail:
  release_data(&M);
  for (int k = 0; M.w && k < M.nb; ++k) sg_var_release(&M.w[k]);
  sg_pipe_destroy(&M.pipe);
  free(M.w);
  free(M.x);
  free(M.t);
  free(r.bubble);
  free(r.inflight);
  free(r.tape_bytes);
  return st;
}

typedef struct options {
  int m[MAX_LIST], nm;
  sg_pp_kind kinds[SG_PP_KIND_COUNT];
  int nkinds, v, steps, warmup;
  double work_ms;
  int64_t elems;
  const char *trace;
} options;

static int parse_ints(char *arg, int *v, int *n) {
  *n = 0;
  for (char *t = strtok(arg, ","); t; t = strtok(NULL, ",")) {
    if (*n == MAX_LIST || (v[*n] = atoi(t)) < 1) return 0;
    ++*n;
  }
  return *n > 0;
}

static int parse_kinds(char *arg, options *o) {
  o->nkinds = 0;
  for (char *t = strtok(arg, ","); t; t = strtok(NULL, ",")) {
    if (o->nkinds == SG_PP_KIND_COUNT ||
        sg_pp_kind_parse(t, &o->kinds[o->nkinds]) != SG_OK)
      return 0;
    ++o->nkinds;
  }
  return o->nkinds > 0;
}

static int parse_args(int argc, char **argv, options *o) {
  *o = (options){.m = {4, 8, 16, 32},
                 .nm = 4,
                 .kinds = {SG_PP_GPIPE, SG_PP_1F1B, SG_PP_INTERLEAVED,
                           SG_PP_ZB_H1},
                 .nkinds = 4,
                 .v = 2,
                 .steps = 3,
                 .warmup = 1,
                 .work_ms = 2.0,
                 .elems = 4096};
  for (int i = 1; i < argc; ++i) {
    const char *k = argv[i];
    char *val = i + 1 < argc ? argv[++i] : NULL;
    if (!val) return 0;
    if (!strcmp(k, "--m")) {
      if (!parse_ints(val, o->m, &o->nm)) return 0;
    } else if (!strcmp(k, "--kinds")) {
      if (!parse_kinds(val, o)) return 0;
    } else if (!strcmp(k, "--v")) {
      o->v = atoi(val);
    } else if (!strcmp(k, "--steps")) {
      o->steps = atoi(val);
    } else if (!strcmp(k, "--warmup")) {
      o->warmup = atoi(val);
    } else if (!strcmp(k, "--work-ms")) {
      o->work_ms = atof(val);
    } else if (!strcmp(k, "--elems")) {
      o->elems = atoll(val);
    } else if (!strcmp(k, "--trace")) {
      o->trace = val;
    } else {
      return 0;
    }
  }
  return o->v >= 2 && o->steps >= 1 && o->steps <= MAX_STEPS &&
         o->warmup >= 0 && o->work_ms > 0 && o->elems >= 1;
}

static void print_header(const options *o, int p, int cores) {
  fprintf(stderr,
          "pipeline bubble: p = %d stages as processes on %d cores%s; "
          "%d blocks of fixed work (about %.2f ms each per F, B, W), "
          "activations of %lld floats; median of %d steps after %d warm-up\n"
          "| p | m | schedule | F/B/W ms | step ms | formula | sim | sim+lat "
          "| lat ms | cpu | measured per stage | peak KiB per stage |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|\n",
          p, cores,
          p > cores ? " (OVERSUBSCRIBED: stages share cores, the measured "
                      "times include that)"
                    : "",
          p * o->v, o->work_ms, (long long)o->elems, o->steps, o->warmup);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  options o;
  if (!parse_args(argc, argv, &o)) {
    if (rank == 0)
      fprintf(stderr,
              "bench_pipeline: error: bad arguments (options: --m 4,8,16,32 "
              "--kinds gpipe,1f1b,interleaved,zb-h1 --v V>=2 --steps 1..%d "
              "--warmup W --work-ms MS --elems N --trace FILE)\n",
              MAX_STEPS);
    MPI_Finalize();
    return 2;
  }
  const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  calibrate(o.work_ms);
  char spec[32];
  snprintf(spec, sizeof spec, "pp=%d", p);
  sg_mesh_t mesh = NULL;
  sg_status st = sg_mesh_create(MPI_COMM_WORLD, spec, &mesh);
  if (rank == 0 && st == SG_OK) print_header(&o, p, cores);
  for (int k = 0; st == SG_OK && k < o.nkinds; ++k)
    for (int i = 0; st == SG_OK && i < o.nm; ++i) {
      const run_cfg c = {.kind = o.kinds[k],
                         .p = p,
                         .m = o.m[i],
                         .v = o.v,
                         .steps = o.steps,
                         .warmup = o.warmup,
                         .cores = cores,
                         .elems = o.elems,
                         .trace = o.trace != NULL};
      if (c.kind == SG_PP_INTERLEAVED && (p < 2 || c.m % p)) continue;
      st = run_one(&c, mesh, rank);
    }
  if (st == SG_OK && o.trace) st = sg_trace_write(o.trace, MPI_COMM_WORLD);
  if (st != SG_OK && rank == 0)
    fprintf(stderr, "bench_pipeline: error: %s\n", sg_last_error());
  sg_mesh_destroy(&mesh);
  MPI_Finalize();
  return st == SG_OK ? 0 : 1;
}
