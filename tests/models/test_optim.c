/* Optimizers: AdamW against a reference, partition invariance (a sharded
 * step equals the whole step bit for bit), schedules, clipping, and the
 * deterministic global gradient norm over a mesh group. */
#include "sg_mesh.h"
#include "sg_optim.h"
#include "sg_rng.h"
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_adamw_reference(void) {
  enum { N = 1000 };
  float p[N], g[N], m[N], v[N];
  double pr[N], mr[N], vr[N];
  SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 1, 0, 0, N, SG_DTYPE_F32, p));
  for (int i = 0; i < N; ++i) {
    pr[i] = p[i];
    m[i] = v[i] = 0;
    mr[i] = vr[i] = 0;
  }
  sg_adamw_config c = sg_adamw_defaults();
  c.weight_decay = 0.01;
  for (int t = 1; t <= 5; ++t) {
    SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 2, (uint64_t)t, 0, N,
                            SG_DTYPE_F32, g));
    SG_CHECK_OK(sg_adamw_step_f32(p, g, m, v, N, t, 1e-2, 0.5, &c));
    for (int i = 0; i < N; ++i) {
      double gi = 0.5 * g[i];
      mr[i] = 0.9 * mr[i] + 0.1 * gi;
      vr[i] = 0.999 * vr[i] + 0.001 * gi * gi;
      double mh = mr[i] / (1 - pow(0.9, t)), vh = vr[i] / (1 - pow(0.999, t));
      pr[i] -= 1e-2 * (mh / (sqrt(vh) + 1e-8) + 0.01 * pr[i]);
    }
  }
  float pf[N];
  for (int i = 0; i < N; ++i) pf[i] = (float)pr[i];
  sg_test_cmp_f32("adamw vs reference", p, pf, N, 1e-5, 1e-6);
  SG_CHECK_STATUS(sg_adamw_step_f32(p, g, m, v, N, 0, 1e-2, 1, &c),
                  SG_ERR_INVALID_ARG);
}

static void test_partition_invariance(void) {
  enum { N = 777 };
  float a[N], b[N], g[N], ma[N] = {0}, va[N] = {0}, mb[N] = {0}, vb[N] = {0};
  SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 3, 0, 0, N, SG_DTYPE_F32, a));
  memcpy(b, a, sizeof a);
  sg_adamw_config c = sg_adamw_defaults();
  c.weight_decay = 0.1;
  for (int t = 1; t <= 3; ++t) {
    SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 4, (uint64_t)t, 0, N,
                            SG_DTYPE_F32, g));
    SG_CHECK_OK(sg_adamw_step_f32(a, g, ma, va, N, t, 3e-3, 1.0, &c));
    /* the same step on three uneven shards */
    int64_t cut[4] = {0, 259, 500, N};
    for (int s = 0; s < 3; ++s)
      SG_CHECK_OK(sg_adamw_step_f32(b + cut[s], g + cut[s], mb + cut[s],
                                    vb + cut[s], cut[s + 1] - cut[s], t, 3e-3,
                                    1.0, &c));
  }
  sg_test_cmp_bytes("sharded adamw == whole", a, b, sizeof a);
  sg_test_cmp_bytes("sharded state == whole", va, vb, sizeof va);
  float s1[N], ms[N] = {0};
  memcpy(s1, a, sizeof a);
  SG_CHECK_OK(sg_sgd_step_f32(s1, g, ms, N, 0.1, 0.9, 0.0, 1.0));
  SG_CHECK(fabsf(s1[0] - (a[0] - 0.1f * g[0])) < 1e-6f, "sgd first step");
}

static void test_schedule(void) {
  sg_lr_config c = {SG_LR_COSINE, 1.0, 0.1, 10, 110, 0, 0};
  SG_CHECK(fabs(sg_lr_at(&c, 5) - 0.5) < 1e-15, "warmup");
  SG_CHECK(fabs(sg_lr_at(&c, 10) - 1.0) < 1e-15, "end of warmup");
  SG_CHECK(fabs(sg_lr_at(&c, 60) - 0.55) < 1e-12, "cosine middle %g",
           sg_lr_at(&c, 60));
  SG_CHECK(fabs(sg_lr_at(&c, 110) - 0.1) < 1e-12, "cosine end");
  SG_CHECK(fabs(sg_lr_at(&c, 500) - 0.1) < 1e-12, "after end");
  sg_lr_config s = {SG_LR_STEP, 1.0, 0, 0, 0, 10, 0.5};
  SG_CHECK(sg_lr_at(&s, 9) == 1.0 && sg_lr_at(&s, 10) == 0.5 &&
               sg_lr_at(&s, 25) == 0.25,
           "step");
  sg_lr_schedule k;
  SG_CHECK_OK(sg_lr_schedule_parse("cosine", &k));
  SG_CHECK(k == SG_LR_COSINE, "parse");
  SG_CHECK_STATUS(sg_lr_schedule_parse("linear", &k), SG_ERR_CONFIG);
  SG_CHECK(sg_clip_scale(2.0, 1.0) < 0.5 + 1e-6 &&
               sg_clip_scale(2.0, 1.0) > 0.49,
           "clip");
  SG_CHECK(sg_clip_scale(0.5, 1.0) == 1.0 && sg_clip_scale(5.0, 0.0) == 1.0,
           "no clip");
}

static void test_global_norm(void) {
  /* a vector of 1001 elements split over the world group: the norm equals
   * the one-process norm, and is the same bits on every rank */
  enum { N = 1001 };
  float x[N];
  SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 5, 0, 0, N, SG_DTYPE_F32, x));
  double whole = 0;
  for (int i = 0; i < N; ++i) whole += (double)x[i] * x[i];
  whole = sqrt(whole);
  sg_mesh_t mesh = NULL;
  char spec[32];
  snprintf(spec, sizeof spec, "dp=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_group_t g = NULL;
  SG_REQUIRE_OK(sg_mesh_group(mesh, 1u, &g));
  int64_t base = N / sg_test_size, extra = N % sg_test_size, r = sg_test_rank;
  int64_t off = r * base + (r < extra ? r : extra), cnt = base + (r < extra);
  double norm = 0;
  SG_CHECK_OK(sg_grad_global_norm(sg_sumsq_f32(x + off, cnt), g, &norm));
  SG_CHECK(fabs(norm - whole) <= 1e-12 * whole, "norm %.17g vs %.17g", norm,
           whole);
  double all[2] = {norm, -norm}, mx[2];
  MPI_Allreduce(all, mx, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  SG_CHECK(mx[0] == norm && -mx[1] == norm, "same bits on every rank");
  double local = 0;
  SG_CHECK_OK(sg_grad_global_norm(4.0, NULL, &local));
  SG_CHECK(local == 2.0, "local norm");
done:
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  test_adamw_reference();
  test_partition_invariance();
  test_schedule();
  test_global_norm();
  return sg_test_finish();
}
