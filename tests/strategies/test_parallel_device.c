/* The parallel plan on a device (sg_parallel_to_device; issue 22) without
 * a GPU: the tape's faked device (ag_fake_cuda: "CUDA" buffers are host
 * memory and the plan's device branches run the host kernels), so the
 * plan's device logic runs here.
 *   1 rank: a plan moved to cuda:0 against the same plan on the host over
 *   three steps of the same gradients: the norm (with clipping), the AdamW
 *   step and the zeroed gradients bit for bit; the host buffer copied at
 *   the move (a new allocation, counted); gather_param; checkpoint arrays
 *   (host copies filled when writing, the file format's names and boxes
 *   unchanged) and sg_parallel_ckpt_loaded copying a read back; attach
 *   refusing host variables on a device plan (and a second move); zero 3
 *   and bf16 refused by name. sg_model_set_device: the FNO's grid
 *   channels copied to the device and its parameters marked; the U-Net
 *   refused by name. The multi-step loss on a device refusing masks by
 *   name before any copy.
 *   2-4 ranks (mesh_case): dp=2, h=2, w=2, tp=2; dp=3, h=3, w=3; dp=2,h=2,
 *   h=2,w=2, dp=2,tp=2, tp=2,w=2, dp=4, deterministic and not: the device
 *   plan's DDP reductions (buckets on the "device" gradients through the
 *   comm layer: MPI here, NCCL on a GPU; deterministic: the host's
 *   fixed-order sum on the device buffers), norm, AdamW and checkpoint
 *   arrays against the host plan's, bit for bit over three steps; ZeRO-1
 *   on fsdp=2, fsdp=3, dp=2,fsdp=2, fsdp=2,tp=2, fsdp=4 (the pieces'
 *   AdamW and the all-gather on the device buffers): deterministic bit for
 *   bit, not deterministic within 1e-5 (the host reduce-scatters, the
 *   device sums by DDP's buckets); ZeRO-3 refused by name on every rank,
 *   no hang.
 * Label core: the cuda build runs it too (no GPU needed). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd_impl.h" /* ag_fake_cuda */
#include "sg_model.h"
#include "sg_parallel.h"
#include "sg_rollout_train.h"

static int fails;

#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
      ++fails;                                    \
    }                                             \
  } while (0)
#define OK(call)                                          \
  do {                                                    \
    sg_status s_ = (call);                                \
    CHECK(s_ == SG_OK, "%s: %s", #call, sg_last_error()); \
  } while (0)

enum { NA = 15, NB = 7, NL = NA + NB };
static const sg_device CU = {SG_DEVICE_CUDA, 0};

static void table(sg_param_info t[2]) {
  memset(t, 0, 2 * sizeof *t);
  t[0].name = "a", t[0].ndim = 2, t[0].global_shape[0] = t[0].count[0] = 3;
  t[0].global_shape[1] = t[0].count[1] = 5, t[0].numel = NA;
  t[1].name = "b", t[1].ndim = 1, t[1].global_shape[0] = t[1].count[0] = NB;
  t[1].offset = NA, t[1].numel = NB;
}

static sg_status plan(sg_mesh_t mesh, int zero, sg_dtype pdt,
                      sg_parallel_t *p) {
  sg_param_info t[2];
  table(t);
  sg_parallel_config c = sg_parallel_defaults();
  c.zero = zero;
  c.param_dtype = pdt;
  return sg_parallel_create(mesh, &c, 2, t, NL, p);
}

/* the plan's variables, bound to its buffers, on its device */
static void bind(sg_parallel_t p, sg_var v[2], sg_var *pv[2]) {
  const int64_t sa[2] = {3, 5}, sb[1] = {NB};
  float *w = sg_parallel_params(p), *g = sg_parallel_grads(p);
  OK(sg_var_init_param(&v[0], "a", SG_DTYPE_F32, 2, sa, w, g));
  OK(sg_var_init_param(&v[1], "b", SG_DTYPE_F32, 1, sb, w + NA, g + NA));
  for (int i = 0; i < 2; ++i) {
    OK(sg_var_set_device(&v[i], sg_parallel_device(p)));
    pv[i] = &v[i];
  }
}

static void one_rank(void) {
  sg_mesh_t mesh = NULL;
  OK(sg_mesh_create(MPI_COMM_WORLD, "h=1", &mesh));
  ag_fake_cuda = 1;
  const int64_t allocs0 = ag_fake_cuda_allocs;
  sg_parallel_t H = NULL, D = NULL;
  OK(plan(mesh, 0, SG_DTYPE_F32, &H));
  OK(plan(mesh, 0, SG_DTYPE_F32, &D));
  for (int i = 0; i < NL; ++i)
    sg_parallel_params(H)[i] = sg_parallel_params(D)[i] = (float)sin(0.7 * i +
                                                                     0.3);
  const float *hostbuf = sg_parallel_params(D);
  OK(sg_parallel_to_device(H, sg_device_host())); /* a no-op */
  OK(sg_parallel_to_device(D, CU));
  CHECK(sg_parallel_device(D).kind == SG_DEVICE_CUDA &&
            sg_parallel_device(H).kind == SG_DEVICE_HOST,
        "devices of the plans");
  CHECK(sg_parallel_params(D) != hostbuf &&
            ag_fake_cuda_allocs - allocs0 == 4 &&
            !memcmp(sg_parallel_params(D), sg_parallel_params(H),
                    NL * sizeof(float)),
        "the move: new buffers (%lld device allocations), the values copied",
        (long long)(ag_fake_cuda_allocs - allocs0));
  CHECK(sg_parallel_to_device(D, CU) == SG_ERR_INVALID_ARG,
        "a second move is refused");
  char desc[512];
  sg_parallel_describe(D, desc, sizeof desc);
  CHECK(strstr(desc, "state on cuda:0") != NULL, "describe: %s", desc);
  sg_var hv[2], dv[2], *hp[2], *dp[2];
  bind(H, hv, hp);
  bind(D, dv, dp);
  sg_tape_t th = NULL, td = NULL;
  OK(sg_tape_create(&th));
  OK(sg_tape_create(&td));
  { /* host variables on a device plan's buffers: refused by name */
    sg_var w[2], *wp[2];
    for (int i = 0; i < 2; ++i) w[i] = dv[i], wp[i] = &w[i];
    w[1].value.device = w[1].grad.device = sg_device_host();
    const sg_status s = sg_parallel_attach(D, td, wp);
    CHECK(s == SG_ERR_NOT_SUPPORTED &&
              strstr(sg_last_error(), "variable 1 ('b') is on host:0") &&
              strstr(sg_last_error(), "on cuda:0"),
          "host variable on a device plan: %d %s", (int)s, sg_last_error());
  }
  OK(sg_parallel_attach(H, th, hp));
  OK(sg_parallel_attach(D, td, dp));
  double nh = 0, nd = 0;
  for (int64_t t = 1; t <= 3; ++t) {
    for (int i = 0; i < NL; ++i) /* the same gradients ("device": host) */
      sg_parallel_grads(H)[i] = sg_parallel_grads(
          D)[i] = (float)(cos(1.3 * i + (double)t) * (double)(t * 4));
    OK(sg_parallel_begin_micro(H, 0, 1));
    OK(sg_parallel_begin_micro(D, 0, 1));
    OK(sg_parallel_reduce(H, &nh));
    OK(sg_parallel_reduce(D, &nd));
    CHECK(nh == nd && nh > 0, "step %lld: norm %.17g (host %.17g)",
          (long long)t, nd, nh);
    OK(sg_parallel_step(H, t, 1e-2, sg_clip_scale(nh, 1.0)));
    OK(sg_parallel_step(D, t, 1e-2, sg_clip_scale(nd, 1.0)));
    CHECK(!memcmp(sg_parallel_params(D), sg_parallel_params(H),
                  NL * sizeof(float)),
          "step %lld: parameters differ from the host plan's", (long long)t);
    int zero = 1;
    for (int i = 0; i < NL; ++i) zero &= sg_parallel_grads(D)[i] == 0.0f;
    CHECK(zero, "step %lld: gradients zeroed on the device", (long long)t);
  }
  float ga[NA], gh[NA];
  OK(sg_parallel_gather_param(D, 0, ga));
  OK(sg_parallel_gather_param(H, 0, gh));
  CHECK(!memcmp(ga, gh, sizeof ga), "gather_param of a device plan");
  OK(sg_parallel_check_replicas(D, 3));
  { /* checkpoints: host copies, the same arrays as the host plan's */
    sg_ckpt_array *ah = NULL, *ad = NULL;
    int nah = 0, nad = 0;
    OK(sg_parallel_ckpt_arrays(H, 1, &ah, &nah));
    OK(sg_parallel_ckpt_arrays(D, 1, &ad, &nad));
    int same = nah == nad && nah == 6;
    for (int k = 0; same && k < nah; ++k) {
      const int64_t n = ah[k].shard.count[0] *
                        (ah[k].shard.ndims > 1 ? ah[k].shard.count[1] : 1);
      same = !strcmp(ah[k].name, ad[k].name) &&
             ah[k].shard.count[0] == ad[k].shard.count[0] &&
             ad[k].data != (void *)sg_parallel_params(D) &&
             !memcmp(ah[k].data, ad[k].data, (size_t)n * sizeof(float));
    }
    CHECK(same, "checkpoint arrays of the device plan (host copies) differ "
                "from the host plan's");
    OK(sg_parallel_ckpt_arrays(D, 0, &ad, &nad)); /* a read: into the copies */
    for (int k = 0; k < nad; ++k) {
      float *x = ad[k].data;
      const int64_t n = ad[k].shard.count[0] *
                        (ad[k].shard.ndims > 1 ? ad[k].shard.count[1] : 1);
      for (int64_t i = 0; i < n; ++i) x[i] = (float)(k + 1);
    }
    OK(sg_parallel_ckpt_loaded(D));
    OK(sg_parallel_ckpt_loaded(H)); /* host: nothing to do */
    CHECK(sg_parallel_params(D)[0] == 1.0f && sg_parallel_params(D)[NA] == 4.0f,
          "ckpt_loaded copies the read values to the device (%g %g)",
          (double)sg_parallel_params(D)[0], (double)sg_parallel_params(D)[NA]);
  }
  sg_tape_destroy(&th);
  sg_tape_destroy(&td);
  for (int i = 0; i < 2; ++i) sg_var_release(&hv[i]), sg_var_release(&dv[i]);
  OK(sg_parallel_destroy(&H));
  OK(sg_parallel_destroy(&D));
  /* ZeRO and bf16: refused by name before any allocation */
  sg_mesh_t fm = NULL;
  OK(sg_mesh_create(MPI_COMM_WORLD, "fsdp=1", &fm));
  OK(plan(fm, 3, SG_DTYPE_F32, &D));
  sg_status s = sg_parallel_to_device(D, CU);
  CHECK(s == SG_ERR_NOT_SUPPORTED && strstr(sg_last_error(), "zero = 3"),
        "zero 3 on a device: %d %s", (int)s, sg_last_error());
  OK(sg_parallel_destroy(&D));
  OK(plan(mesh, 0, SG_DTYPE_BF16, &D));
  s = sg_parallel_to_device(D, CU);
  CHECK(s == SG_ERR_NOT_SUPPORTED && strstr(sg_last_error(), "bf16"),
        "bf16 on a device: %d %s", (int)s, sg_last_error());
  OK(sg_parallel_destroy(&D));
  sg_mesh_destroy(&fm);

  /* sg_model_set_device: the FNO's grid channels and parameters */
  sg_model_config c = sg_model_defaults(SG_MODEL_FNO);
  c.cin = 1, c.cout = 1, c.width = 4, c.modes = 2, c.layers = 1;
  c.proj_width = 4, c.add_grid = 1;
  sg_model_t m = NULL;
  OK(sg_model_create(mesh, &c, 8, 6, 2, &m));
  const int64_t np = sg_model_param_count(m);
  float *w = calloc((size_t)np, sizeof *w), *g = calloc((size_t)np, sizeof *g);
  OK(sg_model_bind(m, w, g));
  OK(sg_model_init(m, 3));
  OK(sg_model_set_device(m, sg_device_host())); /* a no-op */
  const int64_t a1 = ag_fake_cuda_allocs;
  OK(sg_model_set_device(m, CU));
  sg_var **pv = NULL;
  const int npv = sg_model_params(m, &pv);
  int on = npv > 0;
  for (int i = 0; i < npv; ++i)
    on &= pv[i]->value.device.kind == SG_DEVICE_CUDA;
  CHECK(on && ag_fake_cuda_allocs - a1 == 1,
        "FNO on the device: parameters marked, the grid copied (%lld)",
        (long long)(ag_fake_cuda_allocs - a1));
  CHECK(sg_model_set_device(m, CU) == SG_ERR_INVALID_ARG,
        "a second move of the model is refused");
  OK(sg_model_destroy(&m));
  free(w), free(g);
  c = sg_model_defaults(SG_MODEL_UNET);
  c.cin = 1, c.cout = 1, c.width = 4, c.levels = 2, c.groups = 2;
  OK(sg_model_create(mesh, &c, 8, 8, 2, &m));
  s = sg_model_set_device(m, CU);
  CHECK(s == SG_ERR_NOT_SUPPORTED && strstr(sg_last_error(), "model unet"),
        "unet on a device: %d %s", (int)s, sg_last_error());
  OK(sg_model_destroy(&m));

  { /* the multi-step loss on a device: masks refused by name */
    float x[4] = {0}, y[4] = {0}, mk[4] = {0};
    sg_var leaves[3];
    memset(leaves, 0, sizeof leaves);
    sg_var *loss = NULL;
    double lv = 0;
    const sg_train_ar a = {.dtype = SG_DTYPE_F32,
                           .n = 1,
                           .nvars = 1,
                           .history = 1,
                           .ny = 2,
                           .nx = 2,
                           .steps = 1,
                           .masked = 1,
                           .loss = SG_LOSS_MSE,
                           .div = 1,
                           .x = x,
                           .y = y,
                           .m = mk,
                           .device = CU,
                           .dx = x,
                           .dy = y};
    s = sg_train_ar_loss(&a, leaves, &loss, &lv);
    CHECK(s == SG_ERR_NOT_SUPPORTED && strstr(sg_last_error(), "masked data"),
          "masked loss on a device: %d %s", (int)s, sg_last_error());
    sg_train_ar_release(leaves, 1);
  }
  ag_fake_cuda = 0;
  sg_mesh_destroy(&mesh);
}

/* Several ranks: mesh spec over the world, a plan on the host and the same
 * plan on the faked cuda:0, the same gradients on both (different on every
 * rank of a data dim, the same over tp for the replicated parameter, as
 * the model's conjugate ops make them), three steps: the norm, the
 * parameters and the checkpoint arrays bit for bit; the replica check on
 * the device plan. Parameter "b" is Shard over tp where there is one (its
 * box a slice of a larger global). Small buckets (4 floats): several per
 * span, the last one short. */
static void mesh_case(const char *spec, int deterministic, int zero) {
  sg_mesh_t mesh = NULL;
  OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  if (!mesh) return;
  int tpd = -1, key = 0;
  for (int d = 0; d < sg_mesh_ndims(mesh); ++d)
    if (!strcmp(sg_mesh_dim_name(mesh, d), "tp"))
      tpd = d;
    else /* this rank's place among the data ranks (tp ranks alike) */
      key = key * sg_mesh_dim_size(mesh, d) + sg_mesh_coord(mesh, d);
  sg_param_info t[2];
  table(t);
  if (tpd >= 0) {
    const int tps = sg_mesh_dim_size(mesh, tpd), c = sg_mesh_coord(mesh, tpd);
    t[1].global_shape[0] = NB * tps;
    t[1].start[0] = NB * c;
    t[1].shard_dims = 1u << tpd;
  }
  sg_parallel_config c = sg_parallel_defaults();
  c.deterministic = deterministic;
  c.zero = zero;
  c.bucket_bytes = 4 * sizeof(float);
  sg_parallel_t H = NULL, D = NULL;
  OK(sg_parallel_create(mesh, &c, 2, t, NL, &H));
  OK(sg_parallel_create(mesh, &c, 2, t, NL, &D));
  if (!H || !D) goto out;
  const int c1 = tpd >= 0 ? sg_mesh_coord(mesh, tpd) : 0;
  for (int i = 0; i < NL; ++i) /* b differs over tp: its boxes */
    sg_parallel_params(H)[i] = sg_parallel_params(D)[i] = (float)sin(
        0.7 * i + 0.3 + (i >= NA ? 0.1 * c1 : 0.0));
  ag_fake_cuda = 1;
  OK(sg_parallel_to_device(D, CU));
  sg_var hv[2], dv[2], *hp[2], *dp[2];
  bind(H, hv, hp);
  bind(D, dv, dp);
  sg_tape_t th = NULL, td = NULL;
  OK(sg_tape_create(&th));
  OK(sg_tape_create(&td));
  OK(sg_parallel_attach(H, th, hp));
  OK(sg_parallel_attach(D, td, dp));
  for (int64_t s = 1; s <= 3; ++s) {
    for (int i = 0; i < NL; ++i) {
      const double r = i >= NA ? 10.0 * key + 3.0 * c1 : 10.0 * key;
      sg_parallel_grads(H)[i] = sg_parallel_grads(D)[i] =
          (float)(cos(1.3 * i + (double)s + 0.37 * r) * (double)(s * 4) / 3.0);
    }
    double nh = 0, nd = 0;
    OK(sg_parallel_begin_micro(H, 0, 1));
    OK(sg_parallel_begin_micro(D, 0, 1));
    OK(sg_parallel_reduce(H, &nh));
    OK(sg_parallel_reduce(D, &nd));
    /* zero 1 not deterministic: the host reduce-scatters, the device sums
     * by DDP's buckets (another order: rounding apart) */
    const int exact = zero == 0 || deterministic;
    CHECK(exact ? nh == nd && nh > 0 : fabs(nh - nd) <= 1e-6 * nh,
          "%s zero %d det %d step %lld: norm %.17g (host %.17g)", spec, zero,
          deterministic, (long long)s, nd, nh);
    CHECK(!exact || !memcmp(sg_parallel_grads(D), sg_parallel_grads(H),
                            NL * sizeof(float)),
          "%s det %d step %lld: the reduced gradients differ from the host "
          "plan's",
          spec, deterministic, (long long)s);
    OK(sg_parallel_step(H, s, 1e-2, sg_clip_scale(nh, 1.0)));
    OK(sg_parallel_step(D, s, 1e-2, sg_clip_scale(nd, 1.0)));
    double dmax = 0.0;
    for (int i = 0; i < NL; ++i)
      dmax = fmax(dmax, fabs((double)sg_parallel_params(D)[i] -
                             (double)sg_parallel_params(H)[i]));
    CHECK(exact ? !memcmp(sg_parallel_params(D), sg_parallel_params(H),
                          NL * sizeof(float))
                : dmax <= 1e-5,
          "%s zero %d det %d step %lld: parameters differ from the host "
          "plan's (max %.3g)",
          spec, zero, deterministic, (long long)s, dmax);
    OK(sg_parallel_check_replicas(D, s));
  }
  { /* checkpoints: the host plan's arrays (writers, boxes, values) */
    sg_ckpt_array *ah = NULL, *ad = NULL;
    int nah = 0, nad = 0;
    OK(sg_parallel_ckpt_arrays(H, 1, &ah, &nah));
    OK(sg_parallel_ckpt_arrays(D, 1, &ad, &nad));
    int same = nah == nad && nah == 6;
    for (int k = 0; same && k < nah; ++k) {
      const int64_t n = ah[k].shard.count[0] *
                        (ah[k].shard.ndims > 1 ? ah[k].shard.count[1] : 1);
      same = !strcmp(ah[k].name, ad[k].name) &&
             ah[k].shard.start[0] == ad[k].shard.start[0] &&
             ah[k].shard.count[0] == ad[k].shard.count[0] &&
             (!(zero == 0 || deterministic) ||
              !memcmp(ah[k].data, ad[k].data, (size_t)n * sizeof(float)));
    }
    CHECK(same, "%s: checkpoint arrays of the device plan differ", spec);
  }
  sg_tape_destroy(&th);
  sg_tape_destroy(&td);
  for (int i = 0; i < 2; ++i) sg_var_release(&hv[i]), sg_var_release(&dv[i]);
out: /* the faked device's buffers are host memory: freed as such */
  OK(sg_parallel_destroy(&H));
  OK(sg_parallel_destroy(&D));
  ag_fake_cuda = 0;
  sg_mesh_destroy(&mesh);
}

/* ZeRO-3 on a device over several ranks: refused by name on every rank, no
 * hang, the plan still usable on the host. */
static void zero_refused(int size) {
  char spec[32];
  snprintf(spec, sizeof spec, "fsdp=%d", size);
  sg_mesh_t mesh = NULL;
  sg_parallel_t p = NULL;
  OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  OK(plan(mesh, 3, SG_DTYPE_F32, &p));
  ag_fake_cuda = 1;
  const sg_status s = sg_parallel_to_device(p, CU);
  ag_fake_cuda = 0;
  CHECK(s == SG_ERR_NOT_SUPPORTED && strstr(sg_last_error(), "zero = 3"),
        "%s zero 3 on a device: %d %s", spec, (int)s, sg_last_error());
  CHECK(sg_parallel_device(p).kind == SG_DEVICE_HOST,
        "a refused move leaves the plan on the host");
  OK(sg_parallel_destroy(&p));
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) {
    one_rank();
  } else {
    static const char *const meshes[5][6] = {
        {NULL},
        {NULL},
        {"dp=2", "h=2", "w=2", "tp=2", NULL},
        {"dp=3", "h=3", "w=3", NULL},
        {"dp=2,h=2", "h=2,w=2", "dp=2,tp=2", "tp=2,w=2", "dp=4", NULL}};
    /* ZeRO-1: the optimizer state's pieces over fsdp (HSDP with dp) */
    static const char *const zmeshes[5][4] = {{NULL},
                                              {NULL},
                                              {"fsdp=2", NULL},
                                              {"fsdp=3", NULL},
                                              {"dp=2,fsdp=2", "fsdp=2,tp=2",
                                               "fsdp=4", NULL}};
    for (int k = 0; size <= 4 && meshes[size][k]; ++k)
      for (int det = 0; det < 2; ++det) mesh_case(meshes[size][k], det, 0);
    for (int k = 0; size <= 4 && zmeshes[size][k]; ++k)
      for (int det = 0; det < 2; ++det) mesh_case(zmeshes[size][k], det, 1);
    zero_refused(size);
  }
  int all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("parallel plan on a (faked) device, %d rank(s): %s\n", size,
           all ? "FAIL" : "ok");
  MPI_Finalize();
  return all ? 1 : 0;
}
