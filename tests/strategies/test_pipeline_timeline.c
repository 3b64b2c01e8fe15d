/* The pipeline runtime's timeline (sg_pipe_get_timeline) and its Chrome
 * trace.
 *
 * On pp = ranks (1-4), for GPipe, 1F1B and ZB-H1 with m in {1, 3, 4} and
 * interleaved (v = 2, m = p and 2p), two steps of a model of linear blocks:
 * after each step every action of the stage's list is recorded once and in
 * the list's order (the timeline's list is the schedule's), each starts no
 * later than it ends, no two overlap on a stage, all lie inside the run,
 * and, across stages (one machine: one monotonic clock), no receive ends
 * before the matching send started. With tracing on, the trace file holds
 * exactly one event per action of each rank's list, named as sg-info
 * names them. Verdict over all ranks. */
#include "sg_pipeline.h"
#include "sg_test.h"
#include "sg_trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { C = 4, N = 2, S = 3, NBMAX = 16, MMAX = 8 };

typedef struct lmodel {
  sg_pipe_t pipe;
  int m;
  sg_var w[NBMAX];
  sg_var x[MMAX], t[MMAX];
} lmodel;

static sg_status lm_leaf(sg_var *v, const char *name, int rg, double phase) {
  sg_status st = SG_OK;
  const int64_t shape[3] = {N, C, S};
  SG_TRY(sg_var_init(v, name, SG_DTYPE_F32, 3, shape, NULL, rg));
  float *d = v->value.data;
  for (int64_t i = 0; i < N * C * S; ++i) d[i] = (float)sin(0.7 * i + phase);
fail:
  return st;
}

/* The blocks of this stage's chunk: linear maps; the loss: MSE / m. */
static sg_status lm_forward(sg_tape_t tape, void *ctx, int mb, int chunk,
                            sg_bundle *io) {
  sg_status st = SG_OK;
  lmodel *M = ctx;
  int first, count;
  sg_pipe_blocks(M->pipe, chunk, &first, &count);
  sg_var *x = io->n ? io->v[0] : NULL;
  if (!x) {
    SG_TRY(lm_leaf(&M->x[mb], "x", 0, mb));
    x = &M->x[mb];
  }
  for (int k = first; k < first + count; ++k)
    SG_TRY(sg_ag_linear(tape, x, &M->w[k], NULL, &x));
  const sg_pp_schedule *s = sg_pipe_schedule(M->pipe);
  if (first + count == s->p * s->v * 2) { /* the last block */
    SG_TRY(lm_leaf(&M->t[mb], "t", 0, 0.5));
    SG_TRY(sg_ag_loss(tape, SG_LOSS_MSE, x, &M->t[mb], &x));
    SG_TRY(sg_ag_scale(tape, 1.0 / M->m, x, &x));
  }
  *io = (sg_bundle){.n = 1, .v = {x}};
fail:
  return st;
}

/* The send that a receive (action a on stage s) waits for: its global
 * index in the schedule, -1 if none. */
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

/* One step's timeline on this stage, then every stage's (gathered) for
 * the receives' causality. */
static void check_timeline(sg_pipe_t pipe, int64_t runs, const char *what) {
  const sg_pp_schedule *s = sg_pipe_schedule(pipe);
  const int me = sg_pipe_stage(pipe), total = s->off[s->p];
  sg_pipe_timeline tl;
  sg_pipe_get_timeline(pipe, &tl);
  SG_CHECK(tl.runs == runs, "%s: runs %lld, expected %lld", what,
           (long long)tl.runs, (long long)runs);
  SG_CHECK(tl.n == s->off[me + 1] - s->off[me] && tl.act == s->act + s->off[me],
           "%s: stage %d's timeline is not its list (%d actions)", what, me,
           tl.n);
  int ok = tl.n > 0 && tl.t0 <= tl.start[0] && tl.end[tl.n - 1] <= tl.t1;
  for (int i = 0; i < tl.n; ++i)
    ok = ok && tl.start[i] <= tl.end[i] &&
         (i + 1 == tl.n || tl.end[i] <= tl.start[i + 1]);
  SG_CHECK(ok,
           "%s: stage %d: actions out of order, overlapping or outside "
           "the run",
           what, me);
  double *st = malloc(2 * (size_t)total * sizeof *st), *en = st + total;
  int *cnt = malloc(2 * (size_t)s->p * sizeof *cnt), *dis = cnt + s->p;
  for (int q = 0; q < s->p; ++q) {
    cnt[q] = s->off[q + 1] - s->off[q];
    dis[q] = s->off[q];
  }
  MPI_Allgatherv(tl.start, tl.n, MPI_DOUBLE, st, cnt, dis, MPI_DOUBLE,
                 MPI_COMM_WORLD);
  MPI_Allgatherv(tl.end, tl.n, MPI_DOUBLE, en, cnt, dis, MPI_DOUBLE,
                 MPI_COMM_WORLD);
  int causal = 1;
  for (int i = 0; i < tl.n; ++i) {
    const sg_pp_action *a = &tl.act[i];
    if (a->op != SG_PP_RECV_F && a->op != SG_PP_RECV_B) continue;
    const int j = matching_send(s, me, a);
    causal = causal && j >= 0 && tl.end[i] >= st[j];
  }
  SG_CHECK(causal, "%s: stage %d: a receive ended before its send started",
           what, me);
  free(st);
  free(cnt);
}

/* Rank 0: the trace file has one event per action of each rank's list. */
static void check_trace_file(const char *path, const sg_pp_schedule *s) {
  FILE *f = fopen(path, "r");
  SG_CHECK(f != NULL, "trace file %s", path);
  if (!f) return;
  int *events = calloc((size_t)s->p, sizeof *events), f0 = 0;
  char line[512], label[32], want[48];
  sg_pp_action_label(s, &(sg_pp_action){SG_PP_F, 0, 0}, label, sizeof label);
  snprintf(want, sizeof want, "\"name\": \"%s\"", label);
  while (fgets(line, sizeof line, f)) {
    int pid;
    const char *p = strstr(line, "\"pid\": ");
    if (!strstr(line, "\"ph\": \"X\"") || !p ||
        sscanf(p, "\"pid\": %d", &pid) != 1)
      continue;
    if (pid >= 0 && pid < s->p) events[pid]++;
    f0 += strstr(line, want) != NULL;
  }
  fclose(f);
  for (int q = 0; q < s->p; ++q)
    SG_CHECK(events[q] == s->off[q + 1] - s->off[q],
             "trace: rank %d has %d events for %d actions", q, events[q],
             s->off[q + 1] - s->off[q]);
  SG_CHECK(f0 == s->p, "trace: %d events %s, expected one per stage (%d)", f0,
           label, s->p);
  free(events);
  remove(path);
}

static void run_kind(sg_pp_kind kind, int m, int v, int trace) {
  char spec[32], what[96];
  const int p = sg_test_size;
  snprintf(spec, sizeof spec, "pp=%d", p);
  snprintf(what, sizeof what, "%s p=%d m=%d v=%d", sg_pp_kind_name(kind), p, m,
           v);
  sg_mesh_t mesh = NULL;
  lmodel M = {.m = m};
  SG_CHECK_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  const int nb = 2 * p * v;
  SG_CHECK_OK(sg_pipe_create(
      mesh, &(sg_pipe_config){.kind = kind, .m = m, .v = v, .nblocks = nb},
      &M.pipe));
  if (!M.pipe) goto done;
  SG_CHECK(sg_pipe_stage(M.pipe) == sg_test_rank, "pp=%d: stage = rank", p);
  const int64_t ws[2] = {C, C};
  for (int k = 0; k < nb; ++k) {
    SG_CHECK_OK(sg_var_init(&M.w[k], "w", SG_DTYPE_F32, 2, ws, NULL, 1));
    float *d = M.w[k].value.data;
    for (int e = 0; e < C * C; ++e) d[e] = (float)(0.3 * cos(e + k));
  }
  sg_pipe_timeline none;
  sg_pipe_get_timeline(M.pipe, &none);
  SG_CHECK(none.runs == 0, "%s: no run yet", what);
  if (trace) {
    sg_trace_clear();
    sg_trace_enable(1);
  }
  for (int step = 1; step <= 2; ++step) {
    SG_CHECK_OK(sg_pipe_run(M.pipe, lm_forward, &M, NULL));
    for (int i = 0; i < m; ++i) {
      sg_var_release(&M.x[i]);
      sg_var_release(&M.t[i]);
    }
    check_timeline(M.pipe, step, what);
    if (trace) { /* the trace of the first step only */
      char path[64];
      snprintf(path, sizeof path, "test_pipeline_timeline_np%d.json", p);
      SG_CHECK_OK(sg_trace_write(path, MPI_COMM_WORLD));
      if (sg_test_rank == 0) check_trace_file(path, sg_pipe_schedule(M.pipe));
      sg_trace_enable(0);
      sg_trace_clear();
      trace = 0;
    }
  }
done:
  for (int k = 0; k < NBMAX; ++k) sg_var_release(&M.w[k]);
  sg_pipe_destroy(&M.pipe);
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  const int p = sg_test_size;
  const sg_pp_kind kinds[] = {SG_PP_GPIPE, SG_PP_1F1B, SG_PP_ZB_H1};
  for (int k = 0; k < 3; ++k)
    for (int m = 1; m <= 4; m += m == 1 ? 2 : 1) /* 1, 3, 4 */
      run_kind(kinds[k], m, 1, k == 1 && m == 4);
  if (p >= 2) {
    run_kind(SG_PP_INTERLEAVED, p, 2, 1);
    run_kind(SG_PP_INTERLEAVED, 2 * p, 2, 0);
  }
  return sg_test_finish();
}
