/* Training on one GPU (issue 22) against the host: what sg-train does with
 * device = cuda (sg_parallel_to_device, sg_model_set_device, the batch
 * copied to the device each step by sg_train_ar_loss), for the FNO-2D
 * (grid channels on) and the CNN (grid channels on, periodic padding),
 * each with the mse and the rel_l2 loss: four AdamW steps (clip 1.0) of
 * the same model, data and seed on the host and on cuda:0.
 * Tolerances (f32; the plan and the models are f32 only, so there is no
 * f64 trajectory): every step's loss within 1e-4 relative (cuFFT and
 * FFTW, cuBLAS and the host GEMM round differently) and every parameter
 * within 2e-3 absolute after the four steps (AdamW's normalised step
 * turns a rounding-sized difference of a near-zero gradient into up to
 * lr = 1e-3 per step). The checkpoint arrays of the device plan (host
 * copies) hold the device's values.
 * Without a CUDA device: "no CUDA device: skipped", exit 77 (1 with
 * SG_REQUIRE_GPU, as tools/test-gpu sets). Labels gpu and core. */
#include <cuda_runtime.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_model.h"
#include "sg_parallel.h"
#include "sg_rollout_train.h"

static int fails;

#define CK(call)                                                \
  do {                                                          \
    if ((call) != 0) {                                          \
      printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
             sg_last_error());                                  \
      ++fails;                                                  \
      goto fail;                                                \
    }                                                           \
  } while (0)

enum { NB = 2, CIN = 2, NY = 12, NX = 10, STEPS = 4 };

typedef struct run {
  sg_model_t m;
  sg_parallel_t p;
  sg_tape_t tape;
  sg_var leaves[3];
  void *dx, *dy;
  sg_device dev;
} run;

static sg_status run_create(sg_mesh_t mesh, const sg_model_config *c,
                            sg_device dev, run *r) {
  sg_status st = SG_OK;
  sg_param_info *tab = NULL;
  sg_var **vars = NULL;
  memset(r, 0, sizeof *r);
  r->dev = dev;
  SG_TRY(sg_model_create(mesh, c, NY, NX, NB, &r->m));
  const int np = sg_model_params(r->m, &vars);
  tab = calloc((size_t)np + 1, sizeof *tab);
  for (int i = 0; i < np; ++i) SG_TRY(sg_model_param_info(r->m, i, &tab[i]));
  sg_parallel_config pc = sg_parallel_defaults();
  SG_TRY(sg_parallel_create(mesh, &pc, np, tab, sg_model_param_count(r->m),
                            &r->p));
  SG_TRY(
      sg_model_bind(r->m, sg_parallel_params(r->p), sg_parallel_grads(r->p)));
  SG_TRY(sg_model_init(r->m, 7));
  if (dev.kind != SG_DEVICE_HOST) {
    SG_TRY(sg_parallel_to_device(r->p, dev));
    SG_TRY(
        sg_model_bind(r->m, sg_parallel_params(r->p), sg_parallel_grads(r->p)));
    SG_TRY(sg_model_set_device(r->m, dev));
    SG_TRY(sg_malloc(dev, NB * CIN * NY * NX * sizeof(float), &r->dx));
    SG_TRY(sg_malloc(dev, NB * 1 * NY * NX * sizeof(float), &r->dy));
  }
  SG_TRY(sg_tape_create(&r->tape));
  sg_model_params(r->m, &vars);
  SG_TRY(sg_parallel_attach(r->p, r->tape, vars));
fail:
  free(tab);
  return st;
}

static void run_destroy(run *r) {
  sg_tape_destroy(&r->tape);
  sg_model_destroy(&r->m);
  sg_parallel_destroy(&r->p);
  if (r->dev.kind != SG_DEVICE_HOST) {
    sg_free(r->dev, &r->dx);
    sg_free(r->dev, &r->dy);
  }
}

/* One optimizer step on the batch of step t; *loss its value. */
static sg_status run_step(run *r, sg_loss_kind kind, int64_t t, float *x,
                          float *y, double *loss) {
  sg_status st = SG_OK;
  const sg_train_ar a = {.model = r->m,
                         .dtype = SG_DTYPE_F32,
                         .tape = r->tape,
                         .n = NB,
                         .nvars = CIN,
                         .cout = 1,
                         .history = 1,
                         .ny = NY,
                         .nx = NX,
                         .steps = 1,
                         .loss = kind,
                         .lc = {NULL, NULL, NB},
                         .div = 1,
                         .x = x,
                         .y = y,
                         .m = NULL,
                         .device = r->dev,
                         .dx = r->dx,
                         .dy = r->dy};
  sg_var *l = NULL;
  double gn = 0.0;
  SG_TRY(sg_parallel_begin_micro(r->p, 0, 1));
  SG_TRY(sg_train_ar_loss(&a, r->leaves, &l, loss));
  SG_TRY(sg_tape_backward(r->tape, l));
  sg_train_ar_release(r->leaves, 1);
  SG_TRY(sg_parallel_reduce(r->p, &gn));
  SG_TRY(sg_parallel_step(r->p, t, 1e-3, sg_clip_scale(gn, 1.0)));
fail:
  return st;
}

static void check(sg_mesh_t mesh, sg_model_kind kind, const char *name,
                  sg_loss_kind loss) {
  run h, d;
  memset(&h, 0, sizeof h);
  memset(&d, 0, sizeof d);
  sg_model_config c = sg_model_defaults(kind);
  c.cin = CIN, c.cout = 1, c.width = 6, c.proj_width = 8, c.add_grid = 1;
  if (kind == SG_MODEL_FNO) c.modes = 3, c.layers = 2;
  if (kind == SG_MODEL_CNN) c.blocks = 1, c.groups = 2, c.kernel = 3;
  float *x = malloc(NB * CIN * NY * NX * sizeof *x),
        *y = malloc(NB * NY * NX * sizeof *y), *ph = NULL, *pd = NULL;
  const sg_device cu = {SG_DEVICE_CUDA, 0};
  CK(run_create(mesh, &c, sg_device_host(), &h));
  CK(run_create(mesh, &c, cu, &d));
  double worst = 0.0;
  for (int64_t t = 1; t <= STEPS; ++t) {
    for (int i = 0; i < NB * CIN * NY * NX; ++i)
      x[i] = (float)sin(0.37 * i + 0.9 * (double)t);
    for (int i = 0; i < NB * NY * NX; ++i)
      y[i] = (float)cos(0.23 * i - 0.4 * (double)t);
    double lh = 0, ld = 0;
    CK(run_step(&h, loss, t, x, y, &lh));
    for (int i = 0; i < NB * CIN * NY * NX; ++i) /* the same batch again */
      x[i] = (float)sin(0.37 * i + 0.9 * (double)t);
    CK(run_step(&d, loss, t, x, y, &ld));
    const double rel = fabs(ld - lh) / fmax(fabs(lh), 1e-30);
    if (rel > worst) worst = rel;
    if (!(rel <= 1e-4)) {
      printf("FAIL %s %s step %lld: loss %.9g on cuda, %.9g on the host\n",
             name, loss == SG_LOSS_MSE ? "mse" : "rel_l2", (long long)t, ld,
             lh);
      ++fails;
    }
  }
  { /* the parameters after the steps, and the device plan's checkpoint */
    const int64_t n = sg_parallel_local_count(h.p);
    ph = malloc((size_t)n * sizeof *ph), pd = malloc((size_t)n * sizeof *pd);
    CK(cudaMemcpy(pd, sg_parallel_params(d.p), (size_t)n * sizeof *pd,
                  cudaMemcpyDeviceToHost) != cudaSuccess);
    memcpy(ph, sg_parallel_params(h.p), (size_t)n * sizeof *ph);
    double dp = 0.0;
    for (int64_t i = 0; i < n; ++i)
      dp = fmax(dp, fabs((double)pd[i] - (double)ph[i]));
    sg_ckpt_array *arr = NULL;
    int na = 0;
    CK(sg_parallel_ckpt_arrays(d.p, 1, &arr, &na));
    const int ck_ok = na > 0 && ((float *)arr[0].data)[0] == pd[0];
    printf("%-4s %-6s cuda vs host, %d steps: loss rel %.2e, parameters "
           "max |diff| %.2e (%lld), checkpoint copy %s  %s\n",
           name, loss == SG_LOSS_MSE ? "mse" : "rel_l2", STEPS, worst, dp,
           (long long)n, ck_ok ? "ok" : "FAIL",
           worst <= 1e-4 && dp <= 2e-3 && ck_ok ? "ok" : "FAIL");
    fails += !(dp <= 2e-3) + !ck_ok;
  }
fail:
  run_destroy(&h);
  run_destroy(&d);
  free(x), free(y), free(ph), free(pd);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    const char *req = getenv("SG_REQUIRE_GPU"); /* tools/test-gpu sets it */
    const int fail = req && req[0] && strcmp(req, "0") != 0;
    printf("no CUDA device: %s\n",
           fail ? "FAILED (SG_REQUIRE_GPU)" : "skipped");
    MPI_Finalize();
    return fail ? 1 : 77;
  }
  cudaSetDevice(0);
  sg_mesh_t mesh = NULL;
  if (sg_mesh_create(MPI_COMM_WORLD, "h=1", &mesh) != SG_OK) {
    printf("FAIL: mesh: %s\n", sg_last_error());
    MPI_Finalize();
    return 1;
  }
  check(mesh, SG_MODEL_FNO, "fno", SG_LOSS_MSE);
  check(mesh, SG_MODEL_FNO, "fno", SG_LOSS_REL_L2);
  check(mesh, SG_MODEL_CNN, "cnn", SG_LOSS_MSE);
  check(mesh, SG_MODEL_CNN, "cnn", SG_LOSS_REL_L2);
  sg_mesh_destroy(&mesh);
  printf("training on cuda:0 against the host: %s\n", fails ? "FAIL" : "ok");
  MPI_Finalize();
  return fails ? 1 : 0;
}
