/* sg-plan's step-time model, piece by piece (one process, no messages):
 * the ring collectives' alpha-beta formulas, a tiny FNO's counted FLOPs
 * and parameters against a hand count, the costs a mesh adds (halo,
 * transposes, gradient all-reduce, ZeRO, TP, ring, the experts'
 * all-to-alls, pipeline bubble) where
 * they must appear, and a hardware file's round trip. */
#define _POSIX_C_SOURCE 200809L
#include "sg_plan.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const sg_kv_key keys[] = {
    {"model", SG_KV_STRING, "fno", ""},
    {"width", SG_KV_INT, "32", ""},
    {"modes", SG_KV_INT, "12", ""},
    {"layers", SG_KV_INT, "4", ""},
    {"proj_width", SG_KV_INT, "128", ""},
    {"blocks", SG_KV_INT, "4", ""},
    {"levels", SG_KV_INT, "3", ""},
    {"kernel", SG_KV_INT, "3", ""},
    {"patch", SG_KV_INT, "4", ""},
    {"heads", SG_KV_INT, "4", ""},
    {"depth", SG_KV_INT, "4", ""},
    {"tp_sequence", SG_KV_BOOL, "false", ""},
    {"batch", SG_KV_INT, "8", ""},
    {"history", SG_KV_INT, "1", ""},
    {"grid", SG_KV_BOOL, "true", ""},
    {"zero", SG_KV_INT, "0", ""},
    {"microbatches", SG_KV_INT, "1", ""},
    {"pp_schedule", SG_KV_STRING, "1f1b", ""},
    {"modes_t", SG_KV_INT, "1", ""},
    {"pad_t", SG_KV_INT, "0", ""},
    {"out_frames", SG_KV_INT, "1", ""},
    {"moe_experts", SG_KV_INT, "0", ""},
    {"moe_topk", SG_KV_INT, "1", ""},
    {"moe_every", SG_KV_INT, "1", ""},
    {"moe_capacity", SG_KV_FLOAT, "1.25", ""},
};

static int close_to(double a, double b) {
  return fabs(a - b) <= 1e-12 * (fabs(a) + fabs(b)) + 1e-300;
}

static sg_plan_mesh mesh1(const char *a, int na, const char *b, int nb) {
  sg_plan_mesh m = {0};
  if (a) snprintf(m.name[m.ndims], 8, "%s", a), m.size[m.ndims++] = na;
  if (b) snprintf(m.name[m.ndims], 8, "%s", b), m.size[m.ndims++] = nb;
  return m;
}

static sg_plan_hw hw_test(void) {
  sg_plan_hw hw = {.gemm_flops = 1e10,
                   .conv_flops = 5e9,
                   .fft_flops = 2e9,
                   .mem_bw = 1e10,
                   .mem_bytes = 1e9,
                   .alpha_intra = 1e-6,
                   .beta_intra = 1e-10,
                   .alpha_inter = 5e-6,
                   .beta_inter = 1e-9,
                   .ranks_per_node = 2};
  snprintf(hw.name, sizeof hw.name, "test");
  return hw;
}

static void formulas(void) {
  SG_CHECK(close_to(sg_plan_allreduce_s(4, 1000, 1e-6, 1e-9), 7.5e-6),
           "all-reduce 2(p-1)a + 2(p-1)/p n b: %g",
           sg_plan_allreduce_s(4, 1000, 1e-6, 1e-9));
  SG_CHECK(close_to(sg_plan_scatter_s(4, 1000, 1e-6, 1e-9), 3.75e-6),
           "reduce-scatter (p-1)a + (p-1)/p n b: %g",
           sg_plan_scatter_s(4, 1000, 1e-6, 1e-9));
  SG_CHECK(sg_plan_allreduce_s(1, 1000, 1, 1) == 0.0, "p = 1 costs nothing");
  SG_CHECK(close_to(sg_plan_p2p_s(1000, 1e-6, 1e-9), 2e-6), "p2p a + n b");
}

/* Set the keys, count the FLOPs of the 8 x 8, 1-variable problem on one
 * rank, and compare with the hand counts. */
static void hand_count(sg_kv_t kv, const char *model, const char *(*set)[2],
                       size_t nset, double gemm, double fft, double params) {
  for (size_t i = 0; i < nset; ++i)
    SG_CHECK_OK(sg_kv_set(kv, set[i][0], set[i][1]));
  sg_plan_problem pb = {.cfg = kv, .ny = 8, .nx = 8, .vars = 1};
  sg_plan_mesh m = mesh1("h", 1, NULL, 0);
  sg_plan_hw hw = hw_test();
  sg_plan_flops f;
  SG_CHECK_OK(sg_plan_flops_of(&pb, &m, &hw, &f));
  SG_CHECK(close_to(f.gemm, gemm), "%s gemm flops %g (%g)", model, f.gemm,
           gemm);
  SG_CHECK(close_to(f.fft, fft), "%s fft flops %g (%g)", model, f.fft, fft);
  SG_CHECK(close_to(f.params, params), "%s params %g (%g)", model, f.params,
           params);
}

/* FNO on 8 x 8, 1 variable, no grid channels, width 2, one layer, 2 modes,
 * projection 4, batch 1: every GEMM 3 x 2 r k n (forward + two backward):
 *   lift 64x1x2 = 256, mode mix 8 modes x 2 x (4 x 2) = 256 (complex: 4x),
 *   linear 64x2x2 = 512, proj 64x2x4 = 1024, out 64x4x1 = 512 -> 7680;
 * FFT: 4 transforms of 2 channels x (8 rows x 2.5 x 8 x 3 + 2 columns x
 *   5 x 8 x 3) = 4 x 1440 = 5760;
 * parameters: lift 2 + 2, spectral 2 x 2 x (4 x 2) complex = 64, linear
 *   4 + 2, proj 8 + 4, out 4 + 1 -> 91. */
static void fno_hand_count(sg_kv_t kv) {
  const char *set[][2] = {{"width", "2"},  {"layers", "1"},
                          {"modes", "2"},  {"proj_width", "4"},
                          {"batch", "1"},  {"grid", "false"},
                          {"model", "fno"}};
  hand_count(kv, "fno", set, sizeof set / sizeof set[0], 7680, 5760, 91);
}

/* FNO-3D on 8 x 8, 1 variable, history 1, grid channels (3), width 2, one
 * layer, 2 modes, modes_t 1, one output frame padded by 1 (ntp 2),
 * projection 4, batch 1: every GEMM 3 x 2 r k n:
 *   lift 64x4x2 = 1536, mode mix (2 x 2 x 2 x 2 modes) 16 x 2 x 8 = 768,
 *   linear 128x2x2 = 1536, proj 64x2x4 = 1536, out 64x4x1 = 768 -> 12288;
 * FFT: 4 transforms of 2 channels x (16 rows x 2.5 x 8 x 3 + 2 columns x
 *   2 steps x 5 x 8 x 3 + 8 (t, y) modes x 5 x 2 x 1) = 4 x 3040 = 12160;
 * parameters: lift 8 + 2, spectral 2 x 2 x 16 complex = 128, linear 4 + 2,
 *   proj 8 + 4, out 4 + 1 -> 161. */
static void fno3d_hand_count(sg_kv_t kv) {
  const char *set[][2] = {{"width", "2"},     {"layers", "1"},
                          {"modes", "2"},     {"proj_width", "4"},
                          {"batch", "1"},     {"grid", "true"},
                          {"model", "fno3d"}, {"modes_t", "1"},
                          {"pad_t", "1"},     {"out_frames", "1"}};
  hand_count(kv, "fno3d", set, sizeof set / sizeof set[0], 12288, 12160, 161);
  const char *reset[][2] = {{"model", "fno"},
                            {"pad_t", "0"},
                            {"grid", "false"}};
  for (size_t i = 0; i < sizeof reset / sizeof reset[0]; ++i)
    SG_CHECK_OK(sg_kv_set(kv, reset[i][0], reset[i][1]));
}

/* The hand-count FNO's one activation (the projection's, 64 points x 4
 * channels) at a calibrated act_rate costs 256 / act_rate in place of its
 * memory roofline (2 x 4 B x 256 forward, twice that backward, at
 * mem_bw). */
static void act_rate_cost(void) {
  sg_kv_t kv = NULL;
  const char *set[][2] = {{"width", "2"},  {"layers", "1"},
                          {"modes", "2"},  {"proj_width", "4"},
                          {"batch", "1"},  {"grid", "false"},
                          {"model", "fno"}};
  SG_REQUIRE_OK(sg_kv_create(keys, (int)(sizeof keys / sizeof keys[0]), &kv));
  for (size_t i = 0; i < sizeof set / sizeof set[0]; ++i)
    SG_CHECK_OK(sg_kv_set(kv, set[i][0], set[i][1]));
  sg_plan_problem pb = {.cfg = kv, .ny = 8, .nx = 8, .vars = 1};
  sg_plan_mesh m = mesh1("h", 1, NULL, 0);
  sg_plan_hw hw = hw_test();
  sg_plan_time t0, t1;
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t0));
  hw.act_rate = 1e3;
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t1));
  const double want = 256.0 / 1e3 - 3.0 * 2.0 * 4.0 * 256.0 / 1e10;
  SG_CHECK(fabs(t1.compute - t0.compute - want) < 1e-12,
           "activation at act_rate: +%.12g s (%.12g)", t1.compute - t0.compute,
           want);
done:
  sg_kv_destroy(&kv);
}

/* What each mesh dim adds, on the default models. */
static void mesh_costs(sg_kv_t kv) {
  sg_plan_problem pb = {.cfg = kv, .ny = 64, .nx = 64, .vars = 1};
  sg_plan_hw hw = hw_test();
  sg_plan_time t1, t;
  SG_CHECK_OK(sg_kv_set(kv, "model", "cnn"));
  SG_CHECK_OK(sg_kv_set(kv, "batch", "8"));
  sg_plan_mesh m = mesh1("h", 1, NULL, 0);
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t1));
  SG_CHECK(t1.total > 0 && t1.halo == 0 && t1.allreduce == 0,
           "one rank: compute only (%g %g)", t1.halo, t1.allreduce);
  m = mesh1("h", 2, NULL, 0);
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t));
  SG_CHECK(t.halo > 0 && t.allreduce > 0 && t.compute < 0.6 * t1.compute,
           "h=2: halos, gradient all-reduce, half the compute");
  m = mesh1("dp", 2, NULL, 0);
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t));
  SG_CHECK(t.halo == 0 && t.allreduce > 0, "dp=2: no halo");
  SG_CHECK_OK(sg_kv_set(kv, "zero", "3"));
  m = mesh1("fsdp", 2, NULL, 0);
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t));
  SG_CHECK(t.reduce_scatter > 0 && t.allgather > t.reduce_scatter,
           "zero 3: two all-gathers per reduce-scatter");
  SG_CHECK_OK(sg_kv_set(kv, "zero", "0"));
  SG_CHECK_OK(sg_kv_set(kv, "model", "fno"));
  m = mesh1("h", 2, "w", 1);
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t));
  SG_CHECK(t.alltoall > 0 && t.halo == 0, "fno h=2: transposes, no halo");
  /* fno tp=2 (4 layers: two column/row pairs): per pair one all-reduce
   * of the activations forward (and its status agreement), one of the
   * input gradient backward; the spectral layers' work halves (the lift
   * and the projection stay replicated) */
  sg_plan_time f1;
  const char *big[][2] = {{"width", "32"},
                          {"layers", "4"},
                          {"modes", "12"},
                          {"proj_width", "128"}},
             *small[][2] = {{"width", "2"},
                            {"layers", "1"},
                            {"modes", "2"},
                            {"proj_width", "4"}};
  for (int i = 0; i < 4; ++i) SG_CHECK_OK(sg_kv_set(kv, big[i][0], big[i][1]));
  m = mesh1("h", 1, NULL, 0);
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &f1));
  m = mesh1("tp", 2, NULL, 0);
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t));
  const double act = 4.0 * 8 * 64 * 64 * 32;
  const double ar = 2.0 * (2.0 * sg_plan_allreduce_s(2, act, 1e-6, 1e-10) +
                           sg_plan_allreduce_s(2, 4.0, 1e-6, 1e-10));
  SG_CHECK(close_to(t.allreduce, ar), "fno tp=2: all-reduces %g (%g)",
           t.allreduce, ar);
  SG_CHECK(t.compute < 0.9 * f1.compute && t.alltoall == 0,
           "fno tp=2: the layers split (%g of %g)", t.compute, f1.compute);
  for (int i = 0; i < 4; ++i)
    SG_CHECK_OK(sg_kv_set(kv, small[i][0], small[i][1]));
  SG_CHECK_OK(sg_kv_set(kv, "model", "vit"));
  m = mesh1("tp", 2, "h", 2);
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t));
  SG_CHECK(t.ring > 0 && t.allreduce > 0, "vit tp=2,h=2: ring and tp");
  { /* tp_sequence: 2 all-gathers + 2 reduce-scatters per block each way,
     * the ring time of plain TP's 4 all-reduces; besides, 12 agreements
     * (plain: 2) and the 6 replicated vectors' gradients summed over tp */
    sg_plan_time tq, ts;
    m = mesh1("tp", 2, NULL, 0);
    SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &tq));
    SG_CHECK_OK(sg_kv_set(kv, "tp_sequence", "true"));
    SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &ts));
    SG_CHECK_OK(sg_kv_set(kv, "tp_sequence", "false"));
    const double ar4 = sg_plan_allreduce_s(2, 4.0, 1e-6, 1e-10),
                 arc = sg_plan_allreduce_s(2, 4.0 * sg_kv_int(kv, "width"),
                                           1e-6, 1e-10);
    const double want = sg_kv_int(kv, "depth") * (10 * ar4 + 6 * arc);
    SG_CHECK(fabs(ts.allreduce - tq.allreduce - want) <= 1e-9 * want,
             "vit tp=2 tp_sequence: %g s of tp collectives, plain %g s",
             ts.allreduce, tq.allreduce);
  }
  { /* the sp dim: the ring of h=2 (2 ranks, half the tokens each), the
     * gradient all-reduce of dp=2 (every gradient summed over sp), less
     * compute than one rank */
    sg_plan_time ts, th, td, t0;
    m = mesh1("sp", 2, NULL, 0);
    SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &ts));
    m = mesh1("h", 2, NULL, 0);
    SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &th));
    m = mesh1("dp", 2, NULL, 0);
    SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &td));
    m = mesh1("h", 1, NULL, 0);
    SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t0));
    SG_CHECK(ts.ring > 0 && close_to(ts.ring, th.ring),
             "vit sp=2: the ring %g s, h=2's %g s", ts.ring, th.ring);
    SG_CHECK(close_to(ts.allreduce, td.allreduce),
             "vit sp=2: gradient all-reduce %g s, dp=2's %g s", ts.allreduce,
             td.allreduce);
    SG_CHECK(ts.compute < 0.9 * t0.compute, "vit sp=2: compute %g of %g",
             ts.compute, t0.compute);
  }
  { /* experts (4, top-2) over ep=2: the all-to-alls over ep, 4 per MoE
     * block (S (C+1) f64 values out, S C back and twice S C backward, S =
     * the rank's tokens x 2), the gradient all-reduce of dp=2 less the
     * experts' half (theirs is not reduced over ep); one rank: none */
    sg_plan_time te, t0, td;
    SG_CHECK_OK(sg_kv_set(kv, "moe_experts", "4"));
    SG_CHECK_OK(sg_kv_set(kv, "moe_topk", "2"));
    m = mesh1("ep", 2, NULL, 0);
    SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &te));
    m = mesh1("dp", 2, NULL, 0);
    SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &td));
    m = mesh1("h", 1, NULL, 0);
    SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t0));
    SG_CHECK_OK(sg_kv_set(kv, "moe_experts", "0"));
    SG_CHECK_OK(sg_kv_set(kv, "moe_topk", "1"));
    const double C = (double)sg_kv_int(kv, "width"),
                 p = (double)sg_kv_int(kv, "patch"),
                 S = 4.0 * (pb.ny / p) * (pb.nx / p) * 2.0,
                 want = (double)sg_kv_int(kv, "depth") *
                        (sg_plan_scatter_s(2, 8.0 * S * (C + 1), 1e-6, 1e-10) +
                         3.0 * sg_plan_scatter_s(2, 8.0 * S * C, 1e-6, 1e-10));
    SG_CHECK(te.alltoall > 0 && fabs(te.alltoall - want) <= 1e-9 * want &&
                 t0.alltoall == 0 && td.alltoall == 0,
             "vit ep=2 experts: all-to-alls %g s (%g), one rank %g, dp=2 %g",
             te.alltoall, want, t0.alltoall, td.alltoall);
    SG_CHECK(te.allreduce > 0 && te.allreduce < td.allreduce,
             "vit ep=2 experts: gradient all-reduce %g s, dp=2's %g s",
             te.allreduce, td.allreduce);
  }
  SG_CHECK_OK(sg_kv_set(kv, "model", "unet"));
  SG_CHECK_OK(sg_kv_set(kv, "microbatches", "4"));
  m = mesh1("pp", 2, NULL, 0);
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t));
  SG_CHECK(t.bubble > 0 && t.p2p > 0 && t.compute < t1.compute,
           "pp=2: a bubble and p2p (%g %g)", t.bubble, t.p2p);
  SG_CHECK_OK(sg_kv_set(kv, "microbatches", "1"));
  /* 4 ranks on a node of 2 cores: the compute stretches by 2 */
  sg_plan_time t4;
  m = mesh1("h", 4, NULL, 0);
  hw.ranks_per_node = 4;
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t));
  hw.cores_per_node = 2;
  SG_CHECK_OK(sg_plan_step_time(&pb, &m, &hw, &t4));
  SG_CHECK(fabs(t4.compute - 2.0 * t.compute) < 0.05 * t4.compute,
           "oversubscribed compute x2: %g vs %g", t4.compute, t.compute);
}

/* The shared rates: a mesh of 2 ranks on a node of them runs at the
 * shared rates (here every rate halved: the compute doubles against the
 * same mesh without them), a 1-rank mesh and one rank per node at the
 * single-stream ones; between 1 and shared_ranks, 1 / rate interpolates. */
static void shared_rates(sg_kv_t kv) {
  sg_plan_problem pb = {.cfg = kv, .ny = 64, .nx = 64, .vars = 1};
  sg_plan_hw one = hw_test(), sh = hw_test(), half = hw_test(), on;
  one.act_rate = half.act_rate = sh.act_rate = 4e8;
  sh.shared_ranks = 2;
  sh.shared = (struct sg_plan_rates){.gemm_flops = 0.5 * one.gemm_flops,
                                     .conv_flops = 0.5 * one.conv_flops,
                                     .fft_flops = 0.5 * one.fft_flops,
                                     .mem_bw = 0.5 * one.mem_bw,
                                     .act_rate = 0.5 * one.act_rate};
  half.gemm_flops *= 0.5, half.conv_flops *= 0.5, half.fft_flops *= 0.5;
  half.mem_bw *= 0.5, half.act_rate *= 0.5;
  sg_plan_time t1, t2, th;
  const sg_plan_mesh m1 = mesh1("h", 1, NULL, 0), m2 = mesh1("dp", 2, NULL, 0);
  SG_CHECK_OK(sg_plan_step_time(&pb, &m1, &one, &t1));
  SG_CHECK_OK(sg_plan_step_time(&pb, &m1, &sh, &t2));
  SG_CHECK(t1.total == t2.total, "1 rank: single-stream rates %g %g", t1.total,
           t2.total);
  SG_CHECK_OK(sg_plan_step_time(&pb, &m2, &sh, &t2));
  SG_CHECK_OK(sg_plan_step_time(&pb, &m2, &half, &th));
  SG_CHECK(close_to(t2.compute, th.compute) && t2.total == th.total,
           "2 ranks on a node: shared rates %g %g", t2.compute, th.compute);
  sh.cores_per_node = one.cores_per_node = 1; /* one runs at a time */
  SG_CHECK_OK(sg_plan_step_time(&pb, &m2, &sh, &t2));
  SG_CHECK_OK(sg_plan_step_time(&pb, &m2, &one, &th));
  SG_CHECK(t2.compute == th.compute,
           "2 ranks on 1 core: single-stream rates (stretched alike)");
  sh.cores_per_node = one.cores_per_node = 0;
  sh.ranks_per_node = 1; /* one rank a node: nothing shared */
  SG_CHECK_OK(sg_plan_step_time(&pb, &m2, &sh, &t2));
  SG_CHECK_OK(sg_plan_step_time(&pb, &m2, &one, &th));
  SG_CHECK(t2.compute == th.compute, "1 rank a node: single-stream rates");
  sh.shared_ranks = 3;
  sg_plan_hw_on_node(&sh, 2, &on);
  SG_CHECK(fabs(on.mem_bw - 1.0 / (0.5 / 1e10 + 0.5 / 5e9)) < 1e-3 &&
               on.attn_flops == 0 && on.norm_rate == 0,
           "2 of 3 shared ranks: 1 / rate halfway (%g); uncalibrated stay 0",
           on.mem_bw);
  sg_plan_hw_on_node(&sh, 8, &on);
  SG_CHECK(on.mem_bw == 5e9, "beyond shared_ranks: the shared rate");
}

static void hw_round_trip(void) {
  char path[] = "/tmp/sg_plan_hw_XXXXXX";
  const int fd = mkstemp(path);
  SG_CHECK(fd >= 0, "mkstemp");
  if (fd < 0) return;
  close(fd);
  sg_plan_hw a = hw_test(), b;
  a.cores_per_node = 2, a.io_bw = 3e8, a.conv_nhalf = 12.5;
  a.act_rate = 5e8, a.norm_rate = 2e8, a.lnorm_rate = 5e7, a.up_rate = 6e7;
  a.shared_ranks = 2, a.shared.mem_bw = 3e9, a.shared.up_rate = 1.5e7;
  SG_CHECK_OK(sg_plan_hw_save(path, &a));
  SG_CHECK_OK(sg_plan_hw_load(path, &b));
  SG_CHECK(!strcmp(a.name, b.name) && a.gemm_flops == b.gemm_flops &&
               a.fft_flops == b.fft_flops && a.mem_bw == b.mem_bw &&
               a.alpha_inter == b.alpha_inter &&
               close_to(a.beta_intra, b.beta_intra) &&
               close_to(a.beta_inter, b.beta_inter) &&
               a.ranks_per_node == b.ranks_per_node &&
               a.cores_per_node == b.cores_per_node && a.io_bw == b.io_bw &&
               a.conv_nhalf == b.conv_nhalf && a.act_rate == b.act_rate &&
               a.norm_rate == b.norm_rate && a.lnorm_rate == b.lnorm_rate &&
               a.up_rate == b.up_rate && a.shared_ranks == b.shared_ranks &&
               !memcmp(&a.shared, &b.shared, sizeof a.shared),
           "hardware file round trip");
  FILE *f = fopen(path, "w");
  if (f) fputs("gemm_flopz = 1\n", f), fclose(f);
  SG_CHECK(sg_plan_hw_load(path, &b) != SG_OK, "an unknown key is an error");
  unlink(path);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_kv_t kv = NULL;
  SG_REQUIRE_OK(sg_kv_create(keys, (int)(sizeof keys / sizeof keys[0]), &kv));
  formulas();
  fno_hand_count(kv);
  fno3d_hand_count(kv);
  act_rate_cost();
  SG_CHECK_OK(sg_kv_set(kv, "width", "8"));
  SG_CHECK_OK(sg_kv_set(kv, "modes", "4"));
  SG_CHECK_OK(sg_kv_set(kv, "proj_width", "16"));
  SG_CHECK_OK(sg_kv_set(kv, "layers", "2"));
  mesh_costs(kv);
  shared_rates(kv);
  hw_round_trip();
done:
  sg_kv_destroy(&kv);
  return sg_test_finish();
}
