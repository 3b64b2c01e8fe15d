/* The plan's mixed-precision policy (param_dtype = bf16, fp32 master
 * weights) on the toy model (toy_model.h), for DDP and zero 1-3 at 1-4
 * ranks:
 *  1. what the model computes with is bf16: every parameter value a kernel
 *     reads (a listener after the plan's sees it) and every activation
 *     (the first layer's output) is a bf16 value, and a parameter's
 *     gradient is a bf16 value when it is ready (one data rank, zero < 2);
 *  2. the master weights are fp32: after the steps most parameters are not
 *     bf16 values;
 *  3. the bf16 run on N ranks follows the bf16 run of one process (losses,
 *     gradient norms and parameters within the bf16 tolerance below: the
 *     ranks round their partial gradients before the sum, as a bf16
 *     framework does: losses and norms within one bf16 step, 2^-8
 *     relative, parameters within 2e-3 after 6 steps of lr 1e-2) and the
 *     fp32 run (losses within 1e-2 relative);
 *  4. a checkpoint load (the plan's arrays read into) refreshes the compute
 *     copy: the next use sees the new master, rounded;
 *  5. under zero 3 the parameters' all-gathers move bf16: half the bytes
 *     of the fp32 run's (PMPI wrappers count the bytes);
 *  6. bad policies: param_dtype = f64 and reduce_dtype = bf16 are refused
 *     on every rank.
 * Verdict reduced over all ranks. */
#include "sg_test.h"
#include "toy_model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { STEPS = 6 };

/* ---- PMPI: bytes all-gathered --------------------------------------------- */
static int count_on;
static double gathered_bytes;

static void add_gathered(MPI_Datatype t, const int rc[], MPI_Comm c) {
  if (!count_on) return;
  int p = 0, sz = 0;
  PMPI_Comm_size(c, &p);
  PMPI_Type_size(t, &sz);
  if (t != MPI_FLOAT && sz != 2)
    return; /* parameters: f32 or bf16, not the loss's or norm's doubles */
  for (int i = 0; i < p; ++i) gathered_bytes += (double)rc[i] * sz;
}
int MPI_Allgatherv(const void *s, int sc, MPI_Datatype st, void *r,
                   const int rc[], const int d[], MPI_Datatype rt, MPI_Comm c) {
  add_gathered(rt, rc, c);
  return PMPI_Allgatherv(s, sc, st, r, rc, d, rt, c);
}
int MPI_Iallgatherv(const void *s, int sc, MPI_Datatype st, void *r,
                    const int rc[], const int d[], MPI_Datatype rt, MPI_Comm c,
                    MPI_Request *q) {
  add_gathered(rt, rc, c);
  return PMPI_Iallgatherv(s, sc, st, r, rc, d, rt, c, q);
}

static int is_bf16(float x) {
  float r = x;
  sg_round_bf16(&r, 1);
  return memcmp(&r, &x, sizeof r) == 0;
}

static int64_t count_not_bf16(const float *x, int64_t n) {
  int64_t c = 0;
  for (int64_t k = 0; k < n; ++k) c += !is_bf16(x[k]);
  return c;
}

/* A listener after the plan's: what the kernels read. */
typedef struct seen {
  int64_t values, not_bf16, grads, grads_not_bf16;
  int check_grads;
  float first_w1; /* w1[0] at its last use */
  const sg_var *w1;
} seen;

static sg_status see_value(sg_var *v, void *user) {
  seen *s = user;
  const int64_t n = sg_tensor_numel(&v->value);
  if (v->value.data) {
    s->values += n;
    s->not_bf16 += count_not_bf16(v->value.data, n);
    if (v == s->w1) s->first_w1 = ((const float *)v->value.data)[0];
  }
  return SG_OK;
}

static sg_status see_grad(sg_var *v, void *user) {
  seen *s = user;
  const int64_t n = sg_tensor_numel(&v->grad);
  if (s->check_grads && v->grad.data) {
    s->grads += n;
    s->grads_not_bf16 += count_not_bf16(v->grad.data, n);
  }
  return SG_OK;
}

static sg_status add_listener(toy *t, seen *s) {
  memset(s, 0, sizeof *s);
  s->w1 = &t->v[0];
  /* one data rank (nothing summed after the rounding) and a gradient that
   * outlives the plan's grad-ready (zero >= 2 frees it there) */
  s->check_grads = sg_parallel_data_size(t->plan) == 1 &&
                   sg_parallel_grads(t->plan) != NULL;
  sg_hooks hk;
  memset(&hk, 0, sizeof hk);
  hk.pre_use = see_value;
  hk.pre_backward = see_value;
  hk.grad_ready = see_grad;
  hk.user = s;
  return sg_tape_add_hooks(t->tape, &hk, NULL);
}

static sg_parallel_config policy(int zero, sg_dtype dt) {
  sg_parallel_config pc = sg_parallel_defaults();
  pc.zero = zero;
  pc.param_dtype = dt;
  return pc;
}

/* 1-3 on one mesh. */
static void check_mesh(const char *spec, int zero) {
  sg_mesh_t mesh = NULL, self = NULL;
  toy t, r, f;
  memset(&t, 0, sizeof t);
  memset(&r, 0, sizeof r);
  memset(&f, 0, sizeof f);
  seen s;
  float hidden[GB * HID * S], got[NTOT], want[NTOT];
  double n1 = 0, n2 = 0, n3 = 0, l1 = 0, l2 = 0, l3 = 0, worst_ref = 0,
         worst_f32 = 0;
  int64_t hid_bad = 0;
  const sg_parallel_config bf = policy(zero, SG_DTYPE_BF16),
                           fp = policy(zero, SG_DTYPE_F32);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_SELF, "fsdp=1", &self));
  SG_REQUIRE_OK(toy_create_cfg(mesh, &bf, &t));
  SG_REQUIRE_OK(toy_create_cfg(self, &bf, &r));
  SG_REQUIRE_OK(toy_create_cfg(mesh, &fp, &f));
  SG_REQUIRE_OK(add_listener(&t, &s));
  const int64_t lb = GB / sg_parallel_data_size(t.plan);
  for (int64_t k = 1; k <= STEPS; ++k) {
    SG_REQUIRE_OK(toy_step(&t, k, &n1, &l1, hidden));
    SG_REQUIRE_OK(toy_step(&r, k, &n2, &l2, NULL));
    SG_REQUIRE_OK(toy_step(&f, k, &n3, &l3, NULL));
    hid_bad += count_not_bf16(hidden, lb * HID * S);
    worst_ref = fmax(worst_ref,
                     fmax(fabs(l1 - l2) / fabs(l2), fabs(n1 - n2) / n2));
    worst_f32 = fmax(worst_f32, fabs(l1 - l3) / fabs(l3));
  }
  SG_CHECK(s.values > 0 && s.not_bf16 == 0,
           "%s zero %d: %lld of %lld parameter values used are not bf16", spec,
           zero, (long long)s.not_bf16, (long long)s.values);
  SG_CHECK(hid_bad == 0, "%s zero %d: %lld activations are not bf16", spec,
           zero, (long long)hid_bad);
  SG_CHECK(
      !s.check_grads || (s.grads > 0 && s.grads_not_bf16 == 0),
      "%s zero %d: %lld of %lld gradient values at grad-ready are not bf16",
      spec, zero, (long long)s.grads_not_bf16, (long long)s.grads);
  SG_REQUIRE_OK(toy_params(&t, got));
  SG_REQUIRE_OK(toy_params(&r, want));
  const int64_t master_f32 = count_not_bf16(got, NTOT);
  SG_CHECK(master_f32 > NTOT / 2,
           "%s zero %d: only %lld of %d master weights are not bf16 values",
           spec, zero, (long long)master_f32, NTOT);
  double dp = 0;
  for (int k = 0; k < NTOT; ++k) dp = fmax(dp, fabs((double)got[k] - want[k]));
  SG_CHECK(
      worst_ref < 0x1.0p-8 && dp < 2e-3,
      "%s zero %d: bf16 differs from one process's bf16 run: losses/norms %.3g relative, parameters %.3g",
      spec, zero, worst_ref, dp);
  SG_CHECK(worst_f32 < 1e-2,
           "%s zero %d: bf16 losses differ from fp32's by %.3g relative", spec,
           zero, worst_f32);
  if (sg_test_rank == 0)
    printf(
        "%-12s zero %d: bf16 vs one process bf16: %.2e (losses, norms), %.2e (parameters); vs fp32 losses "
        "%.2e\n",
        spec, zero, worst_ref, dp, worst_f32);
done:
  toy_destroy(&t);
  toy_destroy(&r);
  toy_destroy(&f);
  sg_mesh_destroy(&mesh);
  sg_mesh_destroy(&self);
}

/* 4. a load into the plan's arrays is seen, rounded, at the next use. */
static void check_reload(int zero) {
  sg_mesh_t mesh = NULL;
  toy t;
  memset(&t, 0, sizeof t);
  seen s;
  double n, l;
  char spec[32];
  snprintf(spec, sizeof spec, "%s=%d", zero ? "fsdp" : "dp", sg_test_size);
  const sg_parallel_config bf = policy(zero, SG_DTYPE_BF16);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(toy_create_cfg(mesh, &bf, &t));
  SG_REQUIRE_OK(add_listener(&t, &s));
  SG_REQUIRE_OK(toy_step(&t, 1, &n, &l, NULL));
  { /* a use after the step (an evaluation): the compute copy is fresh */
    float x[CIN * S];
    memset(x, 0, sizeof x);
    const int64_t xs[3] = {1, CIN, S};
    sg_var xv, *h = NULL;
    SG_REQUIRE_OK(sg_var_init(&xv, "x", SG_DTYPE_F32, 3, xs, x, 0));
    const int was = sg_tape_set_grad_enabled(t.tape, 0);
    SG_REQUIRE_OK(sg_ag_linear(t.tape, &xv, &t.v[0], &t.v[1], &h));
    sg_tape_set_grad_enabled(t.tape, was);
    sg_tape_clear(t.tape);
  }
  sg_ckpt_array *a = NULL;
  int na = 0;
  SG_REQUIRE_OK(sg_parallel_ckpt_arrays(t.plan, 0, &a, &na));
  /* "params.w1": this rank's rows; w1[0] lives on the rank owning row 0 */
  const float loaded = 1.0f + 0x1.0p-9f; /* not a bf16 value: rounds to 1 */
  if (a[0].shard.start[0] == 0 && a[0].shard.count[0] > 0)
    ((float *)a[0].data)[0] = loaded;
  SG_REQUIRE_OK(toy_step(&t, 2, &n, &l, NULL));
  SG_CHECK(
      s.first_w1 == 1.0f,
      "zero %d on %s: after a load w1[0] is used as %.9g, want 1 (the load, rounded)",
      zero, spec, (double)s.first_w1);
done:
  toy_destroy(&t);
  sg_mesh_destroy(&mesh);
}

/* 5. zero 3's gathers in bf16 move half the bytes of fp32's. */
static double gather_bytes_per_step(sg_mesh_t mesh, sg_dtype dt) {
  toy t;
  memset(&t, 0, sizeof t);
  double n, l, bytes = -1;
  const sg_parallel_config pc = policy(3, dt);
  SG_REQUIRE_OK(toy_create_cfg(mesh, &pc, &t));
  SG_REQUIRE_OK(toy_step(&t, 1, &n, &l, NULL));
  gathered_bytes = 0;
  count_on = 1;
  sg_status st = toy_step(&t, 2, &n, &l, NULL);
  count_on = 0;
  SG_REQUIRE_OK(st);
  bytes = gathered_bytes;
done:
  toy_destroy(&t);
  return bytes;
}

static void check_wire(void) {
  sg_mesh_t mesh = NULL;
  char spec[32];
  snprintf(spec, sizeof spec, "fsdp=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  const double b32 = gather_bytes_per_step(mesh, SG_DTYPE_F32),
               b16 = gather_bytes_per_step(mesh, SG_DTYPE_BF16);
  if (sg_test_size > 1) {
    SG_CHECK(
        b32 > 0 && b16 * 2 == b32,
        "zero 3 on %s: bf16 gathers %.0f bytes per step, fp32 %.0f (want half)",
        spec, b16, b32);
    if (sg_test_rank == 0)
      printf("zero 3 on %s: all-gathered per step: fp32 %.0f B, bf16 %.0f B\n",
             spec, b32, b16);
  }
done:
  sg_mesh_destroy(&mesh);
}

/* 6. refused policies: the same status on every rank. */
static void check_refused(void) {
  sg_mesh_t mesh = NULL;
  sg_parallel_t p = NULL;
  sg_param_info tab;
  memset(&tab, 0, sizeof tab);
  tab.name = "w";
  tab.ndim = 1;
  tab.global_shape[0] = tab.count[0] = 3;
  tab.numel = 3;
  char spec[32];
  snprintf(spec, sizeof spec, "dp=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_parallel_config pc = policy(0, SG_DTYPE_F64);
  SG_CHECK_STATUS(sg_parallel_create(mesh, &pc, 1, &tab, 3, &p),
                  SG_ERR_INVALID_ARG);
  pc = policy(0, SG_DTYPE_BF16);
  pc.reduce_dtype = SG_DTYPE_BF16;
  SG_CHECK_STATUS(sg_parallel_create(mesh, &pc, 1, &tab, 3, &p),
                  SG_ERR_NOT_SUPPORTED);
  SG_CHECK(p == NULL, "no plan on a refused policy");
done:
  sg_parallel_destroy(&p);
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  char dspec[32], fspec[32];
  snprintf(dspec, sizeof dspec, "dp=%d", sg_test_size);
  snprintf(fspec, sizeof fspec, "fsdp=%d", sg_test_size);
  for (int zero = 0; zero <= 3; ++zero) check_mesh(zero ? fspec : dspec, zero);
  if (sg_test_size == 4) check_mesh("dp=2,fsdp=2", 3);
  check_reload(0);
  check_reload(3);
  check_wire();
  check_refused();
  return sg_test_finish();
}
