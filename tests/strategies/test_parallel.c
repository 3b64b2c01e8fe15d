/* The parallel plan on a toy model whose parameters have awkward shapes
 * (toy_model.h: W1 7x15 — uneven ZeRO pieces on 2, 3, 4 ranks):
 *  1. for zero = 0..3, on fsdp=N (and dp x fsdp when N = 4), 6 AdamW steps
 *     give the parameters of one process (each rank also runs the one-
 *     process reference on MPI_COMM_SELF), and the same global gradient
 *     norms; for zero 1..3 also with 2 or 3 micro-batches per step;
 *  2. memory (core's accounting): with zero = 3 the parameters, gradients
 *     and optimizer state a rank holds are at most 1/N of one process's
 *     plus the largest parameter (the largest gathered unit);
 *  3. communication volume per step (float elements, counted by PMPI
 *     wrappers in this executable; an all-reduce of n counts 2n, as in the
 *     ZeRO paper): zero 1 and 2 move what DDP moves, zero 3 1.5x;
 *  4. overlap, from a log of the PMPI wrappers and a listener on the tape:
 *     the reduce-scatters of zero 1, 2, 3 start from grad-ready before
 *     backward ends (before the first layer's backward), none is blocking;
 *     zero 3 starts the all-gather of the next layer's weight before the
 *     current layer's op ends, in forward and in backward, and holds at
 *     most the op's parameters plus the prefetched one;
 *  5. zero 3 with a checkpointed layer: the parameters of one process,
 *     the recomputation's gathers prefetched, and the block's last weight
 *     kept from its recomputation to its backward (2 gathers, not 3).
 * Runs at 1-4 ranks; verdict reduced over all ranks. */
#include "sg_comm.h"
#include "sg_device.h"
#include "sg_dist_loss.h"
#include "sg_parallel.h"
#include "sg_test.h"
#include "toy_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- PMPI counting of float traffic ------------------------------------- */
static int count_on;
static double moved; /* float elements, all-reduce counted twice */

/* The event log of test 4: collectives started (kind, elements) and the
 * listener's hook events (kind, parameter index). */
enum { MAXEV = 256 };
static int log_on, nev;
static struct {
  char kind;
  int id;
} ev[MAXEV];

static void log_event(char kind, int id) {
  if (log_on && nev < MAXEV) {
    ev[nev].kind = kind;
    ev[nev++].id = id;
  }
}

static void add_moved(MPI_Datatype t, double n) {
  if (count_on && t == MPI_FLOAT) moved += n;
}

static double sum_counts(const int rc[], MPI_Comm c) {
  int p = 0;
  PMPI_Comm_size(c, &p);
  double n = 0;
  for (int i = 0; i < p; ++i) n += rc[i];
  return n;
}
int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op,
                  MPI_Comm c) {
  add_moved(t, 2.0 * n);
  return PMPI_Allreduce(s, r, n, t, op, c);
}
int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op,
                   MPI_Comm c, MPI_Request *q) {
  add_moved(t, 2.0 * n);
  return PMPI_Iallreduce(s, r, n, t, op, c, q);
}
int MPI_Reduce_scatter(const void *s, void *r, const int rc[], MPI_Datatype t,
                       MPI_Op op, MPI_Comm c) {
  add_moved(t, sum_counts(rc, c));
  log_event('r', (int)sum_counts(rc, c));
  return PMPI_Reduce_scatter(s, r, rc, t, op, c);
}
int MPI_Ireduce_scatter(const void *s, void *r, const int rc[], MPI_Datatype t,
                        MPI_Op op, MPI_Comm c, MPI_Request *q) {
  add_moved(t, sum_counts(rc, c));
  log_event('R', (int)sum_counts(rc, c));
  return PMPI_Ireduce_scatter(s, r, rc, t, op, c, q);
}
int MPI_Allgatherv(const void *s, int sc, MPI_Datatype st, void *r,
                   const int rc[], const int d[], MPI_Datatype rt, MPI_Comm c) {
  add_moved(rt, sum_counts(rc, c));
  log_event('g', (int)sum_counts(rc, c));
  return PMPI_Allgatherv(s, sc, st, r, rc, d, rt, c);
}
int MPI_Iallgatherv(const void *s, int sc, MPI_Datatype st, void *r,
                    const int rc[], const int d[], MPI_Datatype rt, MPI_Comm c,
                    MPI_Request *q) {
  add_moved(rt, sum_counts(rc, c));
  log_event('G', (int)sum_counts(rc, c));
  return PMPI_Iallgatherv(s, sc, st, r, rc, d, rt, c, q);
}

static sg_status toy_create(sg_mesh_t mesh, int zero, int det, toy *t) {
  sg_parallel_config pc = sg_parallel_defaults();
  pc.zero = zero;
  pc.deterministic = det;
  return toy_create_cfg(mesh, &pc, t);
}

enum { STEPS = 6 };

/* 1. the same parameters and norms as one process (K micro-batches per
 * step); 3. traffic. */
static void check_mesh_k(const char *spec, int zero, int det, int K,
                         double *traffic) {
  sg_mesh_t mesh = NULL, self = NULL;
  toy t, r;
  memset(&t, 0, sizeof t);
  memset(&r, 0, sizeof r);
  float got[NTOT], want[NTOT];
  double n1 = 0, n2 = 0, l1 = 0, l2 = 0;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_SELF, "fsdp=1", &self));
  SG_REQUIRE_OK(toy_create(mesh, zero, det, &t));
  SG_REQUIRE_OK(toy_create(self, zero, det, &r));
  int bad = 0;
  moved = 0;
  for (int64_t s = 1; s <= STEPS; ++s) {
    count_on = s == 2;
    sg_status st = toy_step_k(&t, s, K, &n1, &l1);
    count_on = 0;
    SG_REQUIRE_OK(st);
    SG_REQUIRE_OK(toy_step_k(&r, s, K, &n2, &l2));
    bad += fabs(n1 - n2) > 1e-5 * n2 || fabs(l1 - l2) > 1e-5 * fabs(l2);
  }
  if (traffic) *traffic = moved;
  SG_CHECK(
      bad == 0,
      "%s zero %d: norms or losses differ from one process (last %.9g vs %.9g, loss %.9g vs %.9g)",
      spec, zero, n1, n2, l1, l2);
  SG_REQUIRE_OK(toy_params(&t, got));
  SG_REQUIRE_OK(toy_params(&r, want));
  char what[96];
  snprintf(what, sizeof what,
           "parameters after %d steps, %s zero %d%s, %d micro-batches", STEPS,
           spec, zero, det ? " det" : "", K);
  sg_test_cmp_f32(what, got, want, NTOT, 1e-5, 1e-7);
  SG_CHECK_OK(sg_parallel_check_replicas(t.plan, STEPS));
done:
  toy_destroy(&t);
  toy_destroy(&r);
  sg_mesh_destroy(&mesh);
  sg_mesh_destroy(&self);
}

static void check_mesh(const char *spec, int zero, int det, double *traffic) {
  check_mesh_k(spec, zero, det, 1, traffic);
}

/* 2. memory held by the plan after attach, zero 3 against one process. */
static void check_memory(const char *spec) {
  sg_mesh_t mesh = NULL, self = NULL;
  toy t, r;
  memset(&t, 0, sizeof t);
  memset(&r, 0, sizeof r);
  sg_mem_info m0, m1, m2;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_SELF, "fsdp=1", &self));
  sg_mem_get_info(sg_device_host(), &m0);
  SG_REQUIRE_OK(toy_create(self, 0, 0, &r));
  sg_mem_get_info(sg_device_host(), &m1);
  SG_REQUIRE_OK(toy_create(mesh, 3, 0, &t));
  sg_mem_get_info(sg_device_host(), &m2);
  const double one = (double)(m1.current_bytes - m0.current_bytes);
  const double mine = (double)(m2.current_bytes - m1.current_bytes);
  const double unit = (double)(HID * CIN) * sizeof(float);
  int n = 1;
  MPI_Comm_size(sg_mesh_comm(mesh), &n);
  SG_CHECK(mine <= one / n + 4.0 * unit,
           "zero 3 on %s: %.0f bytes held, one process %.0f (limit %.0f)", spec,
           mine, one, one / n + 4.0 * unit);
  if (sg_test_rank == 0)
    printf(
        "memory: one process %.0f B of parameters, gradients, moments; zero 3 on %s: %.0f B on rank 0\n",
        one, spec, mine);
done:
  toy_destroy(&t);
  toy_destroy(&r);
  sg_mesh_destroy(&mesh);
  sg_mesh_destroy(&self);
}

/* 4. overlap and prefetch: a listener added after the plan's logs the
 * hook events, after the plan's own hooks ran. */
static toy *log_toy;
static int param_index(const sg_var *v) {
  for (int i = 0; i < NP; ++i)
    if (log_toy && v == log_toy->pv[i]) return i;
  return -1;
}
static sg_status ev_pre_use(sg_var *v, void *u) {
  (void)u;
  log_event('U', param_index(v));
  return SG_OK;
}
static sg_status ev_post_use(sg_var *v, void *u) {
  (void)u;
  log_event('E', param_index(v));
  return SG_OK;
}
static sg_status ev_pre_bwd(sg_var *v, void *u) {
  (void)u;
  log_event('B', param_index(v));
  return SG_OK;
}
static sg_status ev_post_bwd_use(sg_var *v, void *u) {
  (void)u;
  log_event('F', param_index(v));
  return SG_OK;
}
static sg_status ev_post_bwd(sg_tape_t tape, void *u) {
  (void)tape;
  (void)u;
  log_event('Z', -1);
  return SG_OK;
}

/* The first event (kind, id) at or after `from`; nev if none. */
static int find_ev(int from, char kind, int id) {
  for (int k = from; k < nev; ++k)
    if (ev[k].kind == kind && ev[k].id == id) return k;
  return nev;
}
static int count_ev(char kind) {
  int c = 0;
  for (int k = 0; k < nev; ++k) c += ev[k].kind == kind;
  return c;
}

static void check_overlap(const char *spec, int zero) {
  sg_mesh_t mesh = NULL;
  toy t;
  memset(&t, 0, sizeof t);
  double gn, lv;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(toy_create(mesh, zero, 0, &t));
  sg_hooks hk = {ev_pre_use, ev_post_use, ev_pre_bwd, ev_post_bwd_use,
                 NULL,       ev_post_bwd, NULL};
  SG_REQUIRE_OK(sg_tape_add_hooks(t.tape, &hk, NULL));
  log_toy = &t;
  SG_REQUIRE_OK(
      toy_step(&t, 1, &gn, &lv, NULL)); /* zero 3 records the order of uses */
  (void)sg_parallel_gathered_peak(t.plan);
  nev = 0;
  log_on = 1;
  sg_status st = toy_step(&t, 2, &gn, &lv, NULL);
  log_on = 0;
  SG_REQUIRE_OK(st);
  SG_CHECK(nev < MAXEV, "%s zero %d: event log full", spec, zero);
  /* the last op of backward is the first layer's: its last pre-backward */
  int last_b = -1, end = find_ev(0, 'Z', -1),
      first_r = find_ev(0, 'R', NTOT_W2);
  for (int k = 0; k < nev; ++k)
    if (ev[k].kind == 'B') last_b = k;
  SG_CHECK(count_ev('R') == NP && count_ev('r') == 0,
           "%s zero %d: %d reduce-scatters started non-blocking, %d "
           "blocking (want %d, 0)",
           spec, zero, count_ev('R'), count_ev('r'), NP);
  SG_CHECK(
      first_r < last_b && last_b < end,
      "%s zero %d: w2's reduce-scatter (event %d) did not start before the "
      "first layer's backward (event %d)",
      spec, zero, first_r, last_b);
  if (zero == 3) {
    /* forward: w2's gather starts before linear(w1, b1) ends (post-use of w1) */
    const int f_end = find_ev(0, 'E', 0), f_g = find_ev(0, 'G', NTOT_W2);
    SG_CHECK(
        f_g < f_end,
        "%s zero 3: w2's all-gather (event %d) not in flight before w1's op ended (event %d)",
        spec, f_g, f_end);
    /* backward: w1's gather starts before linear(w2, b2)'s backward ends */
    const int b0 = find_ev(0, 'B', 2), b_end = find_ev(b0, 'F', 2),
              b_g = find_ev(b0, 'G', NTOT_W1);
    SG_CHECK(
        b_g < b_end,
        "%s zero 3: w1's all-gather (event %d) not in flight before w2's backward ended (event "
        "%d)",
        spec, b_g, b_end);
    /* memory: the op's parameters (at most w1 + b1) plus the prefetched one (at most w1) */
    const int64_t pk = sg_parallel_gathered_peak(t.plan),
                  bound = 2 * NTOT_W1 + HID;
    SG_CHECK(pk <= bound && pk > NTOT_W1 + HID,
             "%s zero 3: %lld floats gathered at once (want prefetch, at most "
             "%lld)",
             spec, (long long)pk, (long long)bound);
    if (sg_test_rank == 0)
      printf("zero 3 on %s: at most %lld floats gathered at once\n", spec,
             (long long)pk);
  }
done:
  log_on = 0;
  log_toy = NULL;
  toy_destroy(&t);
  sg_mesh_destroy(&mesh);
}

/* Gathers (blocking or not) of a parameter of n elements in the log. */
static int gathers_of(int n) {
  int c = 0;
  for (int k = 0; k < nev; ++k)
    c += (ev[k].kind == 'g' || ev[k].kind == 'G') && ev[k].id == n;
  return c;
}

/* 5. zero 3 with the first layer checkpointed: the parameters of one
 * process; the recomputation's gathers are prefetched; w1, used last in
 * the recomputation and first in the block's backward, stays gathered
 * between them (2 gathers a step, not 3; b1, used right after it, 3). */
static void check_ckpt(const char *spec) {
  sg_mesh_t mesh = NULL, self = NULL;
  toy t, r;
  memset(&t, 0, sizeof t);
  memset(&r, 0, sizeof r);
  float got[NTOT], want[NTOT];
  double n1, n2, l1, l2;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_SELF, "fsdp=1", &self));
  SG_REQUIRE_OK(toy_create(mesh, 3, 0, &t));
  SG_REQUIRE_OK(toy_create(self, 0, 0, &r));
  t.ckpt = 1;
  sg_hooks hk = {ev_pre_use, ev_post_use, ev_pre_bwd, ev_post_bwd_use,
                 NULL,       ev_post_bwd, NULL};
  SG_REQUIRE_OK(sg_tape_add_hooks(t.tape, &hk, NULL));
  log_toy = &t;
  for (int64_t s = 1; s <= STEPS; ++s) {
    nev = 0;
    log_on = s == 2;
    sg_status st = toy_step(&t, s, &n1, &l1, NULL);
    log_on = 0;
    SG_REQUIRE_OK(st);
    SG_REQUIRE_OK(toy_step(&r, s, &n2, &l2, NULL));
    if (s == 2 && sg_test_size > 1) {
      SG_CHECK(
          gathers_of(NTOT_W1) == 2 && gathers_of(HID) == 3 &&
              gathers_of(NTOT_W2) == 2,
          "%s zero 3, checkpointed: gathers of w1, b1, w2 per step %d, %d, %d (want 2, 3, 2)",
          spec, gathers_of(NTOT_W1), gathers_of(HID), gathers_of(NTOT_W2));
      /* the recomputation's w1 moves while w2's backward computes */
      const int b0 = find_ev(0, 'B', 2), b_end = find_ev(b0, 'F', 2),
                b_g = find_ev(b0, 'G', NTOT_W1);
      SG_CHECK(
          b_g < b_end,
          "%s zero 3, checkpointed: w1's gather for the recomputation (event %d) not in flight "
          "before w2's backward ended (event %d)",
          spec, b_g, b_end);
    }
  }
  SG_CHECK(fabs(n1 - n2) <= 1e-5 * n2 && fabs(l1 - l2) <= 1e-5 * fabs(l2),
           "%s zero 3, checkpointed: norm %.9g vs %.9g, loss %.9g vs %.9g",
           spec, n1, n2, l1, l2);
  SG_REQUIRE_OK(toy_params(&t, got));
  SG_REQUIRE_OK(toy_params(&r, want));
  sg_test_cmp_f32("parameters, zero 3 with a checkpointed block", got, want,
                  NTOT, 1e-5, 1e-7);
done:
  log_on = 0;
  log_toy = NULL;
  toy_destroy(&t);
  toy_destroy(&r);
  sg_mesh_destroy(&mesh);
  sg_mesh_destroy(&self);
}

/* A parameter marked as device memory is refused by attach with a clear
 * error (the plan's buffers and optimizer are host memory), not used by
 * host code. Every rank gets the same verdict (not collective). */
static void check_attach_device(void) {
  sg_mesh_t mesh = NULL;
  sg_parallel_t plan = NULL;
  sg_tape_t tape = NULL;
  sg_var v;
  memset(&v, 0, sizeof v);
  char spec[32];
  snprintf(spec, sizeof spec, "dp=%d", sg_test_size);
  sg_parallel_config cfg = sg_parallel_defaults();
  sg_param_info tab[1];
  memset(tab, 0, sizeof tab);
  tab[0].name = "w";
  tab[0].ndim = 1;
  tab[0].global_shape[0] = tab[0].count[0] = 3;
  tab[0].numel = 3;
  const int64_t shape[1] = {3};
  sg_status st = sg_mesh_create(MPI_COMM_WORLD, spec, &mesh);
  if (st == SG_OK) st = sg_parallel_create(mesh, &cfg, 1, tab, 3, &plan);
  if (st == SG_OK)
    st = sg_var_init_param(&v, "w", SG_DTYPE_F32, 1, shape,
                           sg_parallel_params(plan), sg_parallel_grads(plan));
  sg_device gpu = {SG_DEVICE_CUDA, 0};
  if (st == SG_OK) st = sg_var_set_device(&v, gpu);
  if (st == SG_OK) st = sg_tape_create(&tape);
  SG_CHECK(st == SG_OK, "attach device: setup failed (%d)", (int)st);
  sg_var *pv[1] = {&v};
  sg_status at = st == SG_OK ? sg_parallel_attach(plan, tape, pv) : st;
  SG_CHECK(at == SG_ERR_NOT_SUPPORTED &&
               strstr(sg_last_error(), "is on cuda:0"),
           "attach of a device parameter: status %d, '%s'", (int)at,
           sg_last_error());
  sg_tape_destroy(&tape);
  sg_var_release(&v);
  sg_parallel_destroy(&plan);
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  check_attach_device();
  char spec[32];
  snprintf(spec, sizeof spec, "fsdp=%d", sg_test_size);
  double vol[4] = {0, 0, 0, 0};
  for (int zero = 0; zero <= 3; ++zero) {
    char dspec[32];
    snprintf(dspec, sizeof dspec, "dp=%d", sg_test_size);
    check_mesh(zero ? spec : dspec, zero, 0, &vol[zero]);
    check_mesh(zero ? spec : dspec, zero, 1, NULL);
  }
  if (sg_test_size == 4)
    for (int zero = 1; zero <= 3; ++zero)
      check_mesh("dp=2,fsdp=2", zero, 0, NULL);
  /* gradient accumulation: the reduce-scatters of every micro-batch (zero
   * >= 2) or of the last (zero 1) overlap backward; HSDP sums once a step */
  const int K = (GB / sg_test_size) % 2 == 0 ? 2 : 3;
  for (int zero = 1; zero <= 3; ++zero)
    check_mesh_k(sg_test_size == 4 ? "dp=2,fsdp=2" : spec, zero, 0, K, NULL);
  if (sg_test_size > 1) {
    const double psi = NTOT;
    if (sg_test_rank == 0)
      printf(
          "traffic per step (float elements): ddp %.0f zero1 %.0f zero2 %.0f zero3 %.0f (psi %.0f)\n",
          vol[0], vol[1], vol[2], vol[3], psi);
    SG_CHECK(vol[0] == 2 * psi, "DDP moves 2 psi: %.0f vs %.0f", vol[0],
             2 * psi);
    SG_CHECK(vol[1] == vol[0] && vol[2] == vol[0],
             "zero 1, 2 move DDP's volume: %.0f, %.0f vs %.0f", vol[1], vol[2],
             vol[0]);
    SG_CHECK(vol[3] == 1.5 * vol[0],
             "zero 3 moves 1.5x DDP's volume: %.0f vs %.0f", vol[3],
             1.5 * vol[0]);
  }
  check_memory(spec);
  if (sg_test_size > 1)
    for (int zero = 1; zero <= 3; ++zero) check_overlap(spec, zero);
  check_ckpt(spec);
  return sg_test_finish();
}
