/* Pipeline schedules as data (issue 18): every generated schedule passes
 * the checker (one F, B [, W] per stage, chunk and micro-batch in order,
 * matched transfers, no deadlock, peak in-flight = formula) for every kind,
 * p in {1..4}, m in {1..8}, v in {1, 2, 3}; the checker catches broken
 * lists; the simulated bubble equals the formulas for p = 2, 4 and
 * m = 4, 8, 16, 32; bad input gives clear errors. Pure logic: one rank. */
#include "sg_pipeline.h"
#include "sg_test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define ACT(op, mb) ((sg_pp_action){SG_PP_##op, (mb), 0})

static void invariants(void) {
  int valid[SG_PP_KIND_COUNT] = {0};
  for (int k = 0; k < SG_PP_KIND_COUNT; ++k)
    for (int p = 1; p <= 4; ++p)
      for (int m = 1; m <= 8; ++m)
        for (int v = 1; v <= 3; ++v) {
          sg_pp_schedule *s = NULL;
          if (sg_pp_schedule_create((sg_pp_kind)k, p, m, v, &s) != SG_OK)
            continue;
          int fb[4], fw[4];
          sg_status st = sg_pp_schedule_check(s, fb, fw);
          SG_CHECK(st == SG_OK, "%s p=%d m=%d v=%d: %s", sg_pp_kind_name(k), p,
                   m, v, sg_last_error());
          /* the formulas as the issue states them, stage by stage */
          for (int q = 0; st == SG_OK && q < p; ++q) {
            int fbw = k == SG_PP_GPIPE ? m : m < p - q ? m : p - q;
            if (k == SG_PP_INTERLEAVED) {
              int warm = (v - 1) * p + 2 * (p - 1 - q) + 1;
              fbw = m * v < warm ? m * v : warm;
            }
            int fww = k == SG_PP_ZB_H1 ? (m < p ? m : p) : fbw;
            SG_CHECK(fb[q] == fbw && fw[q] == fww,
                     "%s p=%d m=%d v=%d stage %d: peak %d "
                     "(%d until W), want %d (%d)",
                     sg_pp_kind_name(k), p, m, v, q, fb[q], fw[q], fbw, fww);
          }
          valid[k] += st == SG_OK;
          sg_pp_schedule_destroy(&s);
        }
  /* what "where valid" amounts to: v = 1 for three kinds (4 x 8 each);
   * interleaved: p in {2,3,4}, v in {2,3}, m a multiple of p */
  SG_CHECK(valid[SG_PP_GPIPE] == 32 && valid[SG_PP_1F1B] == 32 &&
               valid[SG_PP_ZB_H1] == 32,
           "valid schedules: gpipe %d, 1f1b %d, zb-h1 %d", valid[0], valid[1],
           valid[3]);
  SG_CHECK(valid[SG_PP_INTERLEAVED] == 2 * (4 + 2 + 2), "valid interleaved: %d",
           valid[SG_PP_INTERLEAVED]);
}

/* A hand-written two-stage list with one micro-batch: stage 0's actions,
 * then stage 1's. */
static sg_status check_list(sg_pp_kind kind, const sg_pp_action *a0, int n0,
                            const sg_pp_action *a1, int n1) {
  sg_pp_action act[16];
  int off[3] = {0, n0, n0 + n1};
  memcpy(act, a0, (size_t)n0 * sizeof *act);
  memcpy(act + n0, a1, (size_t)n1 * sizeof *act);
  sg_pp_schedule s = {kind, 2, 1, 1, off, act};
  return sg_pp_schedule_check(&s, NULL, NULL);
}

static void expect_error(sg_status st, const char *what, const char *needle) {
  SG_CHECK(st == SG_ERR_INVALID_ARG && strstr(sg_last_error(), needle),
           "%s: got %s '%s', expected '%s'", what, sg_status_name(st),
           sg_last_error(), needle);
  sg_clear_error();
}

static void checker_catches(void) {
  const sg_pp_action s0[] = {ACT(F, 0), ACT(SEND_F, 0), ACT(RECV_B, 0),
                             ACT(B, 0)};
  const sg_pp_action s1[] = {ACT(RECV_F, 0), ACT(F, 0), ACT(B, 0),
                             ACT(SEND_B, 0)};
  SG_CHECK_OK(check_list(SG_PP_1F1B, s0, 4, s1, 4));
  const sg_pp_action no_recv[] = {ACT(F, 0), ACT(B, 0), ACT(SEND_B, 0)};
  expect_error(check_list(SG_PP_1F1B, s0, 4, no_recv, 3), "no RECV_F",
               "F of micro-batch 0 chunk 0 before its RECV_F");
  const sg_pp_action b_first[] = {ACT(RECV_F, 0), ACT(B, 0), ACT(F, 0),
                                  ACT(SEND_B, 0)};
  expect_error(check_list(SG_PP_1F1B, s0, 4, b_first, 4), "B before F",
               "B of micro-batch 0 chunk 0 before its F");
  const sg_pp_action twice[] = {ACT(F, 0), ACT(SEND_F, 0), ACT(SEND_F, 0),
                                ACT(RECV_B, 0), ACT(B, 0)};
  expect_error(check_list(SG_PP_1F1B, twice, 5, s1, 4), "send twice",
               "SEND_F of micro-batch 0 chunk 0 twice");
  const sg_pp_action no_b[] = {ACT(F, 0), ACT(SEND_F, 0)};
  expect_error(check_list(SG_PP_1F1B, no_b, 2, s1, 4), "no B",
               "stage 0 has no B of micro-batch 0");
  const sg_pp_action w[] = {ACT(RECV_F, 0), ACT(F, 0), ACT(B, 0), ACT(W, 0),
                            ACT(SEND_B, 0)};
  expect_error(check_list(SG_PP_1F1B, s0, 4, w, 5), "W in 1f1b",
               "W in a 1f1b schedule");
  expect_error(check_list(SG_PP_ZB_H1, s0, 4, s1, 4), "zb-h1 without W",
               "has no W of micro-batch 0");
  const sg_pp_action past_end[] = {ACT(RECV_F, 0), ACT(F, 0), ACT(SEND_F, 0),
                                   ACT(B, 0), ACT(SEND_B, 0)};
  expect_error(check_list(SG_PP_1F1B, s0, 4, past_end, 5),
               "send past the last stage", "has no neighbour");
  const sg_pp_action bad_mb[] = {ACT(RECV_F, 3), ACT(F, 0), ACT(B, 0),
                                 ACT(SEND_B, 0)};
  expect_error(check_list(SG_PP_1F1B, s0, 4, bad_mb, 4), "micro-batch 3 of 1",
               "out of range");
}

/* GPipe p = 2, m = 2 with stage 0 waiting for B0 before it sends F1, while
 * stage 1 waits for F1 before it sends B0: a deadlock. Plus a SEND_B that
 * nobody receives, which only the simulator (no order check) can meet. */
static void deadlocks(void) {
  sg_pp_schedule *s = NULL;
  SG_REQUIRE_OK(sg_pp_schedule_create(SG_PP_GPIPE, 2, 2, 1, &s));
  SG_CHECK_OK(sg_pp_schedule_check(s, NULL, NULL));
  const sg_pp_action stuck[] = {ACT(F, 0),      ACT(SEND_F, 0), ACT(RECV_B, 0),
                                ACT(B, 0),      ACT(F, 1),      ACT(SEND_F, 1),
                                ACT(RECV_B, 1), ACT(B, 1)};
  SG_REQUIRE_OK(s->off[1] == 8 ? SG_OK : SG_ERR_INTERNAL);
  memcpy(s->act, stuck, sizeof stuck);
  expect_error(
      sg_pp_schedule_check(s, NULL, NULL), "deadlock",
      "gpipe deadlocks: stage 0 waits at RECV_B of micro-batch 0 chunk 0 (action 2); "
      "stage 1 waits at RECV_F of micro-batch 1 chunk 0 (action 2)");
  sg_pp_sim sim;
  expect_error(sg_pp_simulate(s, &(sg_pp_costs){1, 1, 1, 0}, &sim),
               "simulated deadlock", "deadlocks");
  sg_pp_action lone[] = {ACT(F, 0),      ACT(SEND_F, 0), ACT(B, 0),
                         ACT(RECV_F, 0), ACT(F, 0),      ACT(B, 0),
                         ACT(SEND_B, 0)};
  int off[3] = {0, 3, 7};
  sg_pp_schedule l = {SG_PP_1F1B, 2, 1, 1, off, lone};
  expect_error(
      sg_pp_simulate(&l, &(sg_pp_costs){1, 1, 1, 0}, &sim), "unmatched send",
      "SEND_B of micro-batch 0 to virtual stage 0 (stage 0 chunk 0) has no matching RECV_B");
done:
  sg_pp_schedule_destroy(&s);
}

/* Simulated makespan and per-stage bubble of a generated schedule. */
static double bubble_of(sg_pp_kind k, int p, int m, int v, sg_pp_costs c,
                        double *makespan) {
  sg_pp_schedule *s = NULL;
  sg_pp_sim sim = {0};
  double worst = -1;
  *makespan = -1;
  SG_REQUIRE_OK(sg_pp_schedule_create(k, p, m, v, &s));
  SG_REQUIRE_OK(sg_pp_simulate(s, &c, &sim));
  *makespan = sim.makespan;
  for (int st = 0; st < p; ++st) {
    /* every stage is busy for the same time, so all idle the same fraction */
    if (st)
      SG_CHECK(fabs(sim.bubble[st] - sim.bubble[0]) < 1e-12,
               "%s p=%d m=%d stage %d "
               "bubble %g vs %g",
               sg_pp_kind_name(k), p, m, st, sim.bubble[st], sim.bubble[0]);
    if (sim.bubble[st] > worst) worst = sim.bubble[st];
  }
done:
  sg_pp_sim_free(&sim);
  sg_pp_schedule_destroy(&s);
  return worst;
}

static void near(const char *what, int p, int m, double got, double want) {
  SG_CHECK(fabs(got - want) < 1e-12, "%s p=%d m=%d: %.6f, formula %.6f", what,
           p, m, got, want);
}

/* The bubble table of issue 18, section 4, in simulated time: F = 1, B = 2
 * (the full backward), zero latency; interleaved chunks cost 1/v of that;
 * ZB-H1 with F = B = W = 1. Idle fractions of the step: */
static void bubbles(void) {
  if (sg_test_rank == 0)
    printf(
        "bubble (idle fraction)   p   m   gpipe   1f1b    interleaved v=2  v=4   zb-h1\n");
  const int ps[] = {2, 4}, ms[] = {4, 8, 16, 32};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      int p = ps[i], m = ms[j];
      double ms_g, ms_1, ms_i2, ms_i4, ms_z, ms_eq;
      double g = bubble_of(SG_PP_GPIPE, p, m, 1, (sg_pp_costs){1, 2, 0, 0},
                           &ms_g);
      double f = bubble_of(SG_PP_1F1B, p, m, 1, (sg_pp_costs){1, 2, 0, 0},
                           &ms_1);
      double feq = bubble_of(SG_PP_1F1B, p, m, 1, (sg_pp_costs){1, 1, 0, 0},
                             &ms_eq);
      double i2 = bubble_of(SG_PP_INTERLEAVED, p, m, 2,
                            (sg_pp_costs){0.5, 1, 0, 0}, &ms_i2);
      double i4 = p <= m ? bubble_of(SG_PP_INTERLEAVED, p, m, 4,
                                     (sg_pp_costs){0.25, 0.5, 0, 0}, &ms_i4)
                         : 0;
      double z = bubble_of(SG_PP_ZB_H1, p, m, 1, (sg_pp_costs){1, 1, 1, 0},
                           &ms_z);
      near("gpipe", p, m, g, (p - 1.0) / (m + p - 1.0));
      near("1f1b", p, m, f, (p - 1.0) / (m + p - 1.0));
      near("1f1b F = B", p, m, feq, (p - 1.0) / (m + p - 1.0));
      /* interleaved: the bubble time is 1/v of 1F1B's */
      near("interleaved v=2", p, m, i2, (p - 1.0) / (2.0 * m + p - 1.0));
      near("interleaved v=2 bubble time", p, m, ms_i2 - 3.0 * m,
           (ms_1 - 3.0 * m) / 2);
      near("interleaved v=4", p, m, i4, (p - 1.0) / (4.0 * m + p - 1.0));
      /* ZB-H1: bubble time (p-1)(F + B - W), 1/3 of 1F1B's (F + B + W each) */
      near("zb-h1", p, m, z, (p - 1.0) / (3.0 * m + p - 1.0));
      near("zb-h1 bubble time", p, m, ms_z - 3.0 * m, (ms_1 - 3.0 * m) / 3);
      /* and (p-1)(F + B - W) for other costs, as long as W <= B */
      const sg_pp_costs zc[] = {
          {1, 2, 1, 0}, {1, 1, 0.5, 0}, {2, 1, 1, 0}, {1, 1.5, 0.25, 0}};
      for (int q = 0; q < 4; ++q) {
        double mz;
        bubble_of(SG_PP_ZB_H1, p, m, 1, zc[q], &mz);
        near("zb-h1 (p-1)(F+B-W)", p, m, mz - m * (zc[q].f + zc[q].b + zc[q].w),
             (p - 1) * (zc[q].f + zc[q].b - zc[q].w));
      }
      if (sg_test_rank == 0)
        printf(
            "%27d %3d  %5.1f%%  %5.1f%%   %5.1f%%         %5.1f%%  %5.1f%%\n",
            p, m, 100 * g, 100 * f, 100 * i2, 100 * i4, 100 * z);
    }
  double mk;
  SG_CHECK(fabs(
               bubble_of(SG_PP_1F1B, 4, 16, 1, (sg_pp_costs){1, 2, 0, 0}, &mk) -
               0.158) < 5e-4,
           "p=4, m=16 1F1B: 15.8%%");
  /* a transfer latency L: GPipe's step grows by 2 (p-1) L exactly */
  for (int p = 1; p <= 4; ++p) {
    double a, b;
    bubble_of(SG_PP_GPIPE, p, 6, 1, (sg_pp_costs){1, 2, 0, 0}, &a);
    bubble_of(SG_PP_GPIPE, p, 6, 1, (sg_pp_costs){1, 2, 0, 0.25}, &b);
    near("gpipe latency", p, 6, b - a, 2 * (p - 1) * 0.25);
  }
}

static void bad_input(void) {
  sg_pp_schedule *s = NULL;
  struct {
    sg_pp_kind k;
    int p, m, v;
    const char *msg;
  } cases[] = {
      {SG_PP_1F1B, 0, 4, 1,
       "pipeline schedule 1f1b: p = 0 stages, need p >= 1"},
      {SG_PP_GPIPE, 2, 0, 1,
       "pipeline schedule gpipe: m = 0 micro-batches, need m >= 1"},
      {SG_PP_GPIPE, 2, 2, 0, "v = 0 virtual stages per rank, need v >= 1"},
      {SG_PP_1F1B, 2, 4, 2,
       "pipeline schedule 1f1b has no virtual stages: v must be 1, not 2"},
      {SG_PP_ZB_H1, 2, 4, 2, "pipeline schedule zb-h1 has no virtual stages"},
      {SG_PP_INTERLEAVED, 4, 2, 2,
       "interleaved needs m >= p: m = 2 micro-batches < p = 4 stages"},
      {SG_PP_INTERLEAVED, 4, 6, 2,
       "needs m to be a multiple of p (Megatron's rule): m = 6, p = 4"},
      {SG_PP_INTERLEAVED, 2, 4, 1,
       "interleaved needs v >= 2 virtual stages per rank, not 1"},
      {SG_PP_INTERLEAVED, 1, 4, 2, "interleaved needs p >= 2 stages, not 1"},
      {SG_PP_KIND_COUNT, 2, 4, 1, "invalid kind"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; ++i) {
    expect_error(sg_pp_schedule_create(cases[i].k, cases[i].p, cases[i].m,
                                       cases[i].v, &s),
                 cases[i].msg, cases[i].msg);
    SG_CHECK(s == NULL, "no schedule on error");
  }
  struct {
    const char *spec, *msg;
  } specs[] = {
      {"pp=4,m=8,kind=2f2b",
       "unknown pipeline schedule '2f2b' (use gpipe, 1f1b, interleaved or zb-h1)"},
      {"pp=4,m=8", "pipeline spec 'pp=4,m=8' needs pp, m and kind"},
      {"pp=4,m=x,kind=1f1b", "m needs an integer, not 'x'"},
      {"pp=4,m=8,kind=1f1b,q=1", "unknown key 'q'"},
      {"pp=4,,m=8,kind=1f1b", "entry '' is not key=value"},
      {"pp=4,m=6,kind=interleaved,v=2", "multiple of p"},
  };
  for (size_t i = 0; i < sizeof specs / sizeof *specs; ++i)
    expect_error(sg_pp_schedule_parse(specs[i].spec, &s), specs[i].spec,
                 specs[i].msg);
  SG_CHECK_OK(sg_pp_schedule_parse("kind=interleaved,v=2,m=8,p=4", &s));
  SG_CHECK(s && s->kind == SG_PP_INTERLEAVED && s->p == 4 && s->m == 8 &&
               s->v == 2,
           "parsed spec");
  sg_pp_schedule_destroy(&s);
  sg_pp_kind k;
  SG_CHECK(sg_pp_kind_parse("zb-h1", &k) == SG_OK && k == SG_PP_ZB_H1,
           "kind zb-h1");
}

/* The shape of the lists: 1F1B's first stage (warm-up, one F one B,
 * cool-down; the first virtual stage sends no gradient back), ZB-H1's last
 * stage deferring one W (lag = stage), interleaved peers. */
static void shapes(void) {
  sg_pp_schedule *s = NULL;
  SG_REQUIRE_OK(sg_pp_schedule_create(SG_PP_1F1B, 2, 3, 1, &s));
  const sg_pp_action want0[] = {ACT(F, 0),      ACT(SEND_F, 0), ACT(F, 1),
                                ACT(SEND_F, 1), ACT(RECV_B, 0), ACT(B, 0),
                                ACT(F, 2),      ACT(SEND_F, 2), ACT(RECV_B, 1),
                                ACT(B, 1),      ACT(RECV_B, 2), ACT(B, 2)};
  SG_CHECK(s->off[1] == 12 && memcmp(s->act, want0, sizeof want0) == 0,
           "1f1b stage 0 list");
  SG_CHECK(sg_pp_peer(s, 0, &s->act[1]) == 1 &&
               sg_pp_peer(s, 0, &s->act[0]) == -1,
           "peers");
  /* the same list under GPipe's name: stage 0 holds 2 micro-batches, not 3 */
  s->kind = SG_PP_GPIPE;
  expect_error(
      sg_pp_schedule_check(s, NULL, NULL), "1f1b named gpipe",
      "stage 0: 2 micro-batches in flight at the peak (2 until W), the formula says 3 (3)");
  sg_pp_schedule_destroy(&s);
  SG_REQUIRE_OK(sg_pp_schedule_create(SG_PP_ZB_H1, 2, 2, 1, &s));
  const sg_pp_action want1[] = {ACT(RECV_F, 0), ACT(F, 0),      ACT(B, 0),
                                ACT(SEND_B, 0), ACT(RECV_F, 1), ACT(F, 1),
                                ACT(B, 1),      ACT(SEND_B, 1), ACT(W, 0),
                                ACT(W, 1)};
  SG_CHECK(s->off[2] - s->off[1] == 10 &&
               memcmp(s->act + s->off[1], want1, sizeof want1) == 0,
           "zb-h1 last stage list");
  sg_pp_schedule_destroy(&s);
  /* interleaved p = 2, v = 2: stage 1 chunk 0 sends to stage 0 chunk 1 */
  SG_REQUIRE_OK(sg_pp_schedule_create(SG_PP_INTERLEAVED, 2, 2, 2, &s));
  sg_pp_action send = ACT(SEND_F, 0), recv = {SG_PP_RECV_F, 0, 1};
  SG_CHECK(sg_pp_peer(s, 1, &send) == 0 && sg_pp_peer(s, 0, &recv) == 1 &&
               sg_pp_virtual_stage(s, 0, 1) == 2,
           "interleaved peers");
done:
  sg_pp_schedule_destroy(&s);
}

/* The most expensive part of blocks cut at split[0..parts-2]. */
static double max_part(const double *c, int n, int parts, const int *split) {
  double worst = 0.0;
  for (int k = 0; k < parts; ++k) {
    const int a = k ? split[k - 1] : 0, b = k < parts - 1 ? split[k] : n;
    double sum = 0.0;
    for (int i = a; i < b; ++i) sum += c[i];
    worst = sum > worst ? sum : worst;
  }
  return worst;
}

/* The best max part over every contiguous cut (parts <= 4), by brute
 * force: the reference for sg_pp_split_by_cost. */
static double brute(const double *c, int n, int parts) {
  int s[3] = {0, 0, 0};
  double best = 1e300;
  for (s[0] = 1; s[0] < n || parts < 2; ++s[0]) {
    for (s[1] = s[0] + 1; s[1] < n || parts < 3; ++s[1]) {
      for (s[2] = s[1] + 1; s[2] < n || parts < 4; ++s[2]) {
        const double m = max_part(c, n, parts, s);
        best = m < best ? m : best;
        if (parts < 4) break;
      }
      if (parts < 3) break;
    }
    if (parts < 2) break;
  }
  return best;
}

/* pp_split = auto's partition: optimal against brute force on random
 * costs, contiguous, every part non-empty; the obvious cases; bad input. */
static void split_by_cost(void) {
  uint64_t r = 12345;
  int bad = 0, cases = 0;
  for (int n = 1; n <= 9; ++n)
    for (int parts = 1; parts <= 4 && parts <= n; ++parts)
      for (int rep = 0; rep < 20; ++rep) {
        double c[9];
        int split[3];
        for (int i = 0; i < n; ++i) {
          r = r * 6364136223846793005ULL + 1442695040888963407ULL;
          c[i] = (double)(r >> 40) / (double)(1ULL << 24) *
                 (rep % 2 ? 1 : i + 1);
        }
        SG_CHECK_OK(sg_pp_split_by_cost(n, c, parts, split));
        int ok = 1;
        for (int k = 0; k < parts - 1; ++k)
          ok &= split[k] > (k ? split[k - 1] : 0) && split[k] < n;
        ok &= fabs(max_part(c, n, parts, split) - brute(c, n, parts)) <= 1e-12;
        bad += !ok;
        ++cases;
      }
  SG_CHECK(bad == 0, "split by cost: %d of %d cases not optimal or not valid",
           bad, cases);
  /* a heavy last block gets a stage of its own */
  const double heavy[5] = {1, 1, 1, 1, 4};
  int sp[2];
  SG_CHECK(sg_pp_split_by_cost(5, heavy, 2, sp) == SG_OK && sp[0] == 4,
           "1,1,1,1,4 into 2: split at 4, not %d", sp[0]);
  const double even[6] = {1, 1, 1, 1, 1, 1};
  SG_CHECK(sg_pp_split_by_cost(6, even, 3, sp) == SG_OK && sp[0] == 2 &&
               sp[1] == 4,
           "equal costs into 3: 2,4 (got %d,%d)", sp[0], sp[1]);
  SG_CHECK_STATUS(sg_pp_split_by_cost(2, even, 3, sp), SG_ERR_INVALID_ARG);
  const double neg[2] = {1, -1};
  SG_CHECK_STATUS(sg_pp_split_by_cost(2, neg, 2, sp), SG_ERR_INVALID_ARG);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  split_by_cost();
  invariants();
  checker_catches();
  deadlocks();
  bubbles();
  bad_input();
  shapes();
  return sg_test_finish();
}
