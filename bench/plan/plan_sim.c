/* sg-plan-sim: the step-time model without running anything (one process).
 *
 *   sg-plan-sim predict --hardware F --ny N --nx N --vars V
 *               --meshes "h=1;h=2;dp=2" [--<sg-train key> value ...]
 *       one JSON line per mesh: the predicted split of a step (bench/plan
 *       compares them with sg-train's measured step times) and
 *       sg_plan_memory's peak per rank (null where it is not modelled);
 *   sg-plan-sim scale --hardware F
 *       the at-scale tables of docs/choosing-a-mesh-time.md: the FNO and
 *       the ViT on the 0.25 degree ERA5 grid and an analytic 3-D FNO on a
 *       1024^3 grid, 8 .. 4096 GPUs, the best mesh per GPU count.
 *
 * The memory column is sg_plan_memory's accounting (the replay of the
 * tape's allocations, tested within 5% of measured peaks) where it models
 * the configuration, else (marked "~") a rough estimate: parameters,
 * gradients and AdamW state plus the op outputs the cost model counts. */
#include "keys.h"
#include "sg_plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sg-train's keys (the model's and the plan's, with sg-train's
 * defaults: sg_plan_memory reads them all) but "vars", and this
 * program's own. */
static const sg_kv_key sim_keys[] = {
    {"hardware", SG_KV_STRING, "", "hardware file"},
    {"ny", SG_KV_INT, "64", ""},
    {"nx", SG_KV_INT, "64", ""},
    {"vars", SG_KV_INT, "1", ""},
    {"meshes", SG_KV_STRING, "h=1", "meshes separated by ';'"},
};

static sg_status make_kv(sg_kv_t *kv, sg_kv_key **tab) {
  const int ns = (int)(sizeof sim_keys / sizeof *sim_keys);
  int n = 0;
  *tab = malloc((size_t)(sg_train_nkeys + ns) * sizeof **tab);
  if (!*tab)
    return sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  for (int i = 0; i < sg_train_nkeys; ++i)
    if (strcmp(sg_train_keys[i].name, "vars")) (*tab)[n++] = sg_train_keys[i];
  memcpy(*tab + n, sim_keys, sizeof sim_keys);
  return sg_kv_create(*tab, n + ns, kv);
}

static void print_time(const char *mesh, const sg_plan_time *t, double mem) {
  printf("{\"mesh\": \"%s\", \"total_s\": %.6g, \"compute_s\": %.6g, "
         "\"halo_s\": %.6g, \"allreduce_s\": %.6g, \"reduce_scatter_s\": "
         "%.6g, \"allgather_s\": %.6g, \"alltoall_s\": %.6g, \"ring_s\": "
         "%.6g, \"p2p_s\": %.6g, \"bubble_s\": %.6g, \"io_s\": %.6g, ",
         mesh, t->total, t->compute, t->halo, t->allreduce, t->reduce_scatter,
         t->allgather, t->alltoall, t->ring, t->p2p, t->bubble, t->io);
  if (mem >= 0)
    printf("\"memory_bytes\": %.6g}\n", mem);
  else
    printf("\"memory_bytes\": null}\n");
}

static int predict(sg_kv_t kv, const sg_plan_hw *hw) {
  sg_plan_problem pb = {.cfg = kv,
                        .ny = sg_kv_int(kv, "ny"),
                        .nx = sg_kv_int(kv, "nx"),
                        .vars = sg_kv_int(kv, "vars")};
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", sg_kv_str(kv, "meshes"));
  for (char *save = NULL, *s = strtok_r(buf, ";", &save); s;
       s = strtok_r(NULL, ";", &save)) {
    sg_plan_mesh m;
    sg_plan_time t;
    if (sg_plan_mesh_parse(s, &m) != SG_OK) {
      fprintf(stderr, "sg-plan-sim: bad mesh '%s'\n", s);
      return 1;
    }
    if (sg_plan_step_time(&pb, &m, hw, &t) != SG_OK) {
      fprintf(stderr, "sg-plan-sim: %s: %s\n", s, sg_last_error());
      return 1;
    }
    sg_plan_mem pm; /* null where sg_plan_memory does not model it */
    const int mem_ok = sg_plan_memory(&pb, &m, &pm) == SG_OK;
    print_time(s, &t, mem_ok ? pm.peak : -1.0);
  }
  return 0;
}

/* ---- at scale ---- */

/* One candidate's outcome. */
typedef struct cand {
  sg_plan_mesh m;
  sg_plan_time t;
  double mem, eff;
  int fits, lb; /* lb: samples per data rank */
  int est;      /* mem is the rough estimate, not sg_plan_memory's */
} cand;

/* The estimate of the peak per rank (marked as such in the tables):
 * fp32 master weights, gradients and two AdamW moments (16 B a
 * parameter, ZeRO dividing them over fsdp), plus the op outputs a
 * micro-batch keeps, times the micro-batches a 1F1B stage holds. */
static double mem_estimate(const sg_plan_flops *f, const sg_plan_mesh *m,
                           int zero) {
  int fsdp = 1, pp = 1;
  for (int i = 0; i < m->ndims; ++i) {
    if (!strcmp(m->name[i], "fsdp")) fsdp = m->size[i];
    if (!strcmp(m->name[i], "pp")) pp = m->size[i];
  }
  const double state = f->params * (zero >= 3   ? 16.0 / fsdp
                                    : zero == 2 ? 4.0 + 12.0 / fsdp
                                    : zero == 1 ? 8.0 + 8.0 / fsdp
                                                : 16.0);
  /* 1F1B: stage 0 holds p micro-batches of its 1/p of the model (f->act
   * is the whole model's for one micro-batch) */
  (void)pp;
  return state + f->act;
}

static void mesh_set(sg_plan_mesh *m, const char *const *names,
                     const int *sizes, int n) {
  memset(m, 0, sizeof *m);
  for (int i = 0; i < n; ++i)
    if (sizes[i] > 1 || i == 0) {
      snprintf(m->name[m->ndims], 8, "%s", names[i]);
      m->size[m->ndims++] = sizes[i];
    }
}

static void mesh_str(const sg_plan_mesh *m, char *buf, size_t cap) {
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < m->ndims && o < cap; ++i)
    o += (size_t)snprintf(buf + o, cap - o, "%s%s=%d", i ? "," : "", m->name[i],
                          m->size[i]);
}

/* The binding constraint of a chosen mesh: memory (when the fastest
 * candidate did not fit), else the largest non-compute part. */
static const char *binding(const cand *c, int mem_bound) {
  const sg_plan_time *t = &c->t;
  const double comm[] = {t->halo,
                         t->allreduce + t->reduce_scatter + t->allgather,
                         t->alltoall, t->ring, t->p2p + t->bubble};
  const char *name[] = {"halo", "gradient sync", "FFT transposes",
                        "ring attention", "pipeline"};
  int k = 0;
  for (int i = 1; i < 5; ++i)
    if (comm[i] > comm[k]) k = i;
  if (comm[k] > 0.25 * t->compute) return name[k];
  return mem_bound ? "memory (forces model parallelism)" : "compute";
}

/* One mesh with `lb` samples per data rank: its time, memory estimate and
 * efficiency against t1 (a 1-GPU step of one sample, no messages). */
static int evaluate(sg_kv_t kv, const sg_plan_problem *pb, const sg_plan_hw *hw,
                    const sg_plan_mesh *m, int dp, int lb, int N, double t1,
                    cand *c) {
  sg_plan_flops f;
  char b[16];
  c->m = *m, c->lb = lb;
  snprintf(b, sizeof b, "%d", dp * lb);
  sg_kv_set(kv, "batch", b);
  if (sg_plan_step_time_ex(pb, m, hw, &c->t, &f) != SG_OK) return 0;
  sg_plan_mem pm;
  c->est = sg_plan_memory(pb, m, &pm) != SG_OK;
  c->mem = c->est ? mem_estimate(&f, m, (int)sg_kv_int(kv, "zero")) : pm.peak;
  c->fits = c->mem <= 0.9 * hw->mem_bytes;
  c->eff = t1 * dp * lb / (N * c->t.total);
  return 1;
}

/* Split N GPUs over the data dim and the given model-parallel dims
 * (powers of two); each data rank takes the most samples (1 .. 16) that
 * fit; keep the mesh of the highest efficiency (samples/s against N
 * GPUs each running one sample without messages, as if it fitted). */
static void scale_row(sg_kv_t kv, const sg_plan_problem *pb,
                      const sg_plan_hw *hw, int N, const char *const *dims,
                      int nd, const int *maxsz, double t1) {
  cand best = {0}, one = {0};
  int have = 0;
  int sz[6] = {1, 1, 1, 1, 1, 1}; /* dims[0] is the data dim */
  sg_plan_mesh m;
  sz[0] = N;
  mesh_set(&m, dims, sz, nd);
  evaluate(kv, pb, hw, &m, N, 1, N, t1, &one); /* pure data parallel */
  for (;;) {
    int prod = 1;
    for (int i = 1; i < nd; ++i) prod *= sz[i];
    if (N % prod == 0) {
      sz[0] = N / prod;
      mesh_set(&m, dims, sz, nd);
      for (int lb = 16; lb >= 1; lb /= 2) {
        cand c;
        if (!evaluate(kv, pb, hw, &m, sz[0], lb, N, t1, &c)) continue;
        if (c.fits) {
          if (!have || c.eff > best.eff) best = c, have = 1;
          break;
        }
      }
    }
    int i = 1; /* next combination of the model-parallel sizes */
    while (i < nd && (sz[i] *= 2) > maxsz[i]) sz[i++] = 1;
    if (i == nd) break;
  }
  char ms[96];
  if (!have) {
    printf("| %d | none fits | %s%.1f GiB (data parallel) | - | - | - | "
           "memory |\n",
           N, one.est ? "~" : "", one.mem / 1073741824.0);
    return;
  }
  mesh_str(&best.m, ms, sizeof ms);
  printf("| %d | %s | %d | %s%.1f GiB | %.3g s | %.2f | %s |\n", N, ms, best.lb,
         best.est ? "~" : "", best.mem / 1073741824.0, best.t.total, best.eff,
         binding(&best, !one.fits));
}

/* The efficiency's base: one GPU's compute time per sample at 16 samples
 * a step (no messages; the optimizer's update amortised as in the rows). */
static double one_gpu(sg_kv_t kv, const sg_plan_problem *pb,
                      const sg_plan_hw *hw) {
  sg_plan_mesh m;
  sg_plan_time t;
  const char *const d[1] = {"dp"};
  const int s[1] = {1};
  mesh_set(&m, d, s, 1);
  sg_kv_set(kv, "batch", "16");
  if (sg_plan_step_time(pb, &m, hw, &t) != SG_OK) return 0;
  return t.compute / 16;
}

static void table(sg_kv_t kv, const sg_plan_problem *pb, const sg_plan_hw *hw,
                  const char *title, const char *const *dims, int nd,
                  const int *maxsz) {
  const double t1 = one_gpu(kv, pb, hw);
  printf("\n%s (1 GPU, compute per sample: %.3g s)\n\n", title, t1);
  printf("| GPUs | mesh | samples/data rank | memory/GPU | step | "
         "efficiency | binding |\n|---|---|---|---|---|---|---|\n");
  for (int N = 8; N <= 4096; N *= 2)
    scale_row(kv, pb, hw, N, dims, nd, maxsz, t1);
}

/* The 3-D FNO on n^3 (analytic: the code's FNO is 2-D). Pencil split
 * h x w of the first two dims, one sample per data group; per layer four
 * transforms (r2c along z on every point, then c2c on the kept modes
 * only), a 1x1 linear, the mode mix, and the transposes: the first moves
 * the real block when w splits the last dim... here h and w split dims 0
 * and 1, so z is whole: two transposes of the truncated spectrum. */
static void fno3d(const sg_plan_hw *hw, int n, int width, int layers,
                  int modes) {
  const double N = (double)n * n * n, w = width, md = modes;
  printf("\n3-D FNO (analytic), %d^3, width %d, %d layers, %d modes per "
         "dim, bf16 activations\n\n",
         n, width, layers, modes);
  printf("| GPUs | mesh | memory/GPU (estimate) | step | efficiency | "
         "binding |\n|---|---|---|---|---|---|\n");
  const double eb = 2.0;
  /* one sample on P ranks of its domain group */
  for (int NG = 8; NG <= 4096; NG *= 2) {
    double best = 1e300, bmem = 0, beff = 0, bc = 0, bt = 0;
    int bh = 0, bw = 0, bdp = 0;
    for (int P = 1; P <= NG && P <= n * n / 16; P *= 2) {
      const int dp = NG / P;
      int h = 1;
      while (h * h < P) h *= 2;
      const int ww = P / h;
      const double pts = N / P;
      const double lin = 3 * 2.0 * pts * w * w / hw->gemm_flops;
      const double fftf = 4 * (pts * w * 2.5 * log2((double)n) +
                               (double)n * n * md * w * 5 * log2((double)n) *
                                   2 / P);
      const double fftb = 4 * 3 * pts * w * eb;
      const double fft = fftf / hw->fft_flops > fftb / hw->mem_bw
                             ? fftf / hw->fft_flops
                             : fftb / hw->mem_bw;
      const double km = 8.0 * md * md * md / P; /* kept modes per rank */
      const double mix = 3 * 8.0 * km * w * w / hw->gemm_flops;
      const double comp = layers * (lin + fft + mix);
      const int inter = P > hw->ranks_per_node;
      const double a = inter ? hw->alpha_inter : hw->alpha_intra,
                   b = inter ? hw->beta_inter : hw->beta_intra;
      const double spec = (double)n * n * md * w * 2 * eb / P;
      const double tr = P > 1
                            ? layers * 4 * 2 *
                                  sg_plan_scatter_s(h > ww ? h : ww, spec, a, b)
                            : 0;
      const double params = layers *
                            (2.0 * w * w * 8 * md * md * md / P + w * w);
      const double ga = NG > 1 ? sg_plan_allreduce_s(NG, 4.0 * params,
                                                     NG > hw->ranks_per_node
                                                         ? hw->alpha_inter
                                                         : hw->alpha_intra,
                                                     NG > hw->ranks_per_node
                                                         ? hw->beta_inter
                                                         : hw->beta_intra)
                               : 0;
      const double mem = 16.0 * params + layers * 8.0 * pts * w * eb;
      const double t = comp + tr + ga;
      const double t1 = layers *
                        (3 * 2.0 * N * w * w / hw->gemm_flops +
                         4 * N * w * 3 * eb / hw->mem_bw +
                         3 * 8.0 * 8 * md * md * md * w * w / hw->gemm_flops);
      const double eff = t1 * dp / (NG * t);
      if (mem <= 0.9 * hw->mem_bytes && t / dp < best)
        best = t / dp, bmem = mem, beff = eff, bc = comp, bt = tr + ga, bh = h,
        bw = ww, bdp = dp;
    }
    if (!bdp) {
      printf("| %d | none fits | - | - | - | memory |\n", NG);
      continue;
    }
    printf("| %d | dp=%d,h=%d,w=%d | %.1f GiB | %.3g s | %.2f | %s |\n", NG,
           bdp, bh, bw, bmem / 1073741824.0, best * bdp, beff,
           bt > 0.25 * bc ? "FFT transposes" : "compute");
  }
}

static int scale(sg_kv_t kv, const sg_plan_hw *hw) {
  sg_plan_problem pb = {.cfg = kv, .ny = 721, .nx = 1440, .vars = 70};
  static const char *const fno_dims[4] = {"dp", "h", "w", "fsdp"};
  static const int fno_max[4] = {0, 64, 64, 1};
  const char *fno_cfg[][2] = {{"model", "fno"},      {"width", "128"},
                              {"modes", "32"},       {"layers", "8"},
                              {"proj_width", "512"}, {"param_dtype", "bf16"},
                              {"grid", "true"}};
  for (size_t i = 0; i < sizeof fno_cfg / sizeof fno_cfg[0]; ++i)
    sg_kv_set(kv, fno_cfg[i][0], fno_cfg[i][1]);
  table(kv, &pb, hw,
        "FNO on 721 x 1440, 70 variables: width 128, 8 layers, 32 modes, "
        "bf16",
        fno_dims, 3, fno_max);
  /* the ViT needs the patch to divide the grid: 720 x 1440 (the south
   * pole row dropped) */
  pb.ny = 720;
  static const char *const vit_dims[5] = {"dp", "tp", "h", "w", "pp"};
  static const int vit_max[5] = {0, 8, 16, 16, 8};
  const char *vit_cfg[][2] = {{"model", "vit"},     {"width", "1024"},
                              {"heads", "16"},      {"depth", "24"},
                              {"patch", "4"},       {"param_dtype", "bf16"},
                              {"microbatches", "1"}};
  for (size_t i = 0; i < sizeof vit_cfg / sizeof vit_cfg[0]; ++i)
    sg_kv_set(kv, vit_cfg[i][0], vit_cfg[i][1]);
  table(kv, &pb, hw,
        "ViT on 720 x 1440, 70 variables: width 1024, 16 heads, depth 24, "
        "patch 4 (64800 tokens), bf16",
        vit_dims, 5, vit_max);
  fno3d(hw, 1024, 64, 4, 32);
  return 0;
}

int main(int argc, char **argv) {
  sg_kv_t kv = NULL;
  sg_kv_key *tab = NULL;
  sg_plan_hw hw;
  int rc = 2;
  if (argc < 2 || (strcmp(argv[1], "predict") && strcmp(argv[1], "scale"))) {
    fprintf(stderr, "usage: sg-plan-sim predict|scale --hardware FILE ...\n");
    return 2;
  }
  if (make_kv(&kv, &tab) != SG_OK ||
      sg_kv_parse_args(kv, argc, argv, 2, NULL) != SG_OK ||
      sg_plan_hw_load(sg_kv_str(kv, "hardware"), &hw) != SG_OK) {
    fprintf(stderr, "sg-plan-sim: %s\n", sg_last_error());
    goto done;
  }
  if (!strcmp(argv[1], "predict"))
    rc = predict(kv, &hw);
  else {
    printf("hardware: %s\n", hw.name);
    rc = scale(kv, &hw);
  }
done:
  sg_kv_destroy(&kv);
  free(tab);
  return rc;
}
