/* sg-plan — choose a mesh before a run (docs/choosing-a-mesh.md).
 *
 *   sg-plan --config examples/configs/ns2d_fno.cfg --ranks 8 \
 *           [--hardware machine.toml] [--json] [--key value ...]
 *
 * Reads sg-train's config keys (the same table: examples/sg-train/keys.c)
 * and the data's shape: from --data (the NetCDF header), or, for a dataset
 * that is not here, --data-grid NYxNX (the variables are the names in
 * --vars). Enumerates the meshes over pp, dp, fsdp, tp, h, w whose sizes
 * multiply to --ranks (or takes --mesh), keeps those that fit the model
 * (sg_plan_check; --all lists the others with their violations), and
 * prints each with its predicted peak memory per rank (sg_plan_memory) and,
 * when the time model is available, its step time and split
 * (sg_plan_step_time; "-" otherwise), ranked by time (by memory while time
 * is missing), with the binding constraint. One process; nothing runs. */
#include "keys.h"
#include "sg_plan.h"
#include "train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sg_kv_key plan_keys[] = {
    {"ranks", SG_KV_INT, "1", "sg-plan: the ranks of the run"},
    {"hardware", SG_KV_STRING, "",
     "sg-plan: the machine (a hardware file; time is predicted with one)"},
    {"json", SG_KV_BOOL, "false", "sg-plan: print JSON lines, not a table"},
    {"all", SG_KV_BOOL, "false",
     "sg-plan: also list the meshes that do not fit, with why"},
    {"data_grid", SG_KV_STRING, "",
     "sg-plan: the grid NYxNX of a dataset that is not here (instead of reading --data)"},
    {"threads", SG_KV_INT, "1",
     "sg-plan: OpenMP threads per rank (the kernels' workspaces are per thread)"},
    {"calibrate_from_model", SG_KV_STRING, "",
     "sg-plan: ONE[,SHARED,SHARED...]: sg-train op_times files of this model "
     "(one rank alone; the same run on every core at once) into a hardware "
     "file (--hardware-out), --hardware's links kept "
     "(docs/choosing-a-mesh-time.md)"},
    {"hardware_out", SG_KV_STRING, "this-machine-model",
     "sg-plan: the hardware file --calibrate-from-model writes"},
};

enum { MAX_MESHES = 4096 };
/* the ViT's meshes also over sp (only the ViT splits tokens), the ViT's and
 * the Swin's with experts over ep */
static const char *const dim_names[] = {"pp", "dp", "fsdp", "tp",
                                        "h",  "w",  "sp",   "ep"};
#define NDIMS 8

typedef struct row {
  sg_plan_mesh mesh;
  char spec[96];
  int fits, has_mem, has_time;
  sg_plan_mem mem;
  sg_plan_time time;
  char why[1024];
} row;

/* Every factorisation of n over the first nd dims, in order. */
static void enumerate(int n, int d, int nd, const int *dims, int *sz, row *rows,
                      int *nrows) {
  if (d == nd) {
    if (n != 1 || *nrows >= MAX_MESHES) return;
    row *r = &rows[(*nrows)++];
    memset(r, 0, sizeof *r);
    for (int i = 0; i < nd; ++i)
      if (sz[i] > 1) {
        snprintf(r->mesh.name[r->mesh.ndims], sizeof r->mesh.name[0], "%s",
                 dim_names[dims[i]]);
        r->mesh.size[r->mesh.ndims++] = sz[i];
      }
    if (r->mesh.ndims == 0) { /* one rank: sg-train's default mesh */
      snprintf(r->mesh.name[0], sizeof r->mesh.name[0], "h");
      r->mesh.size[0] = 1;
      r->mesh.ndims = 1;
    }
    sg_plan_mesh_format(&r->mesh, r->spec, sizeof r->spec);
    return;
  }
  for (int f = 1; f <= n; ++f)
    if (n % f == 0) {
      sz[d] = f;
      enumerate(n / f, d + 1, nd, dims, sz, rows, nrows);
    }
}

/* The data's shape: --data-grid, or the NetCDF header of --data. */
static sg_status data_shape(sg_kv_t kv, sg_plan_problem *pb) {
  sg_status st = SG_OK;
  const char *g = sg_kv_str(kv, "data_grid");
  int nv = 1;
  for (const char *p = sg_kv_str(kv, "vars"); *p; ++p) nv += *p == ',';
  if (*g) {
    long long ny = 0, nx = 0;
    char tail = 0;
    if (sscanf(g, "%lldx%lld%c", &ny, &nx, &tail) != 2 || ny < 1 || nx < 1)
      SG_RAISE(SG_ERR_CONFIG,
               "data_grid must be NYxNX (e.g. 721x1440), not '%s'", g);
    pb->ny = ny, pb->nx = nx, pb->vars = nv;
    return SG_OK;
  }
  sg_data_opts o;
  memset(&o, 0, sizeof o);
  o.path = sg_kv_str(kv, "data");
  o.vars = sg_kv_str(kv, "vars");
  o.dim_map = sg_kv_str(kv, "dim_map");
  o.backend = sg_kv_str(kv, "backend");
  if (!*o.path)
    SG_RAISE(SG_ERR_CONFIG,
             "no data shape: give --data FILE or --data-grid NYxNX");
  int64_t ny = 0, nx = 0;
  SG_TRY(sg_dataset_peek(&o, &ny, &nx, &nv));
  pb->ny = ny, pb->nx = nx, pb->vars = nv;
fail:
  return st;
}

static double mib(double b) { return b / 1048576.0; }

/* What binds a mesh: the larger part of its memory, or with a time the
 * largest part of its step. */
static const char *binding(const row *r) {
  if (r->has_time) {
    static const char *const nm[] = {
        "compute",  "halo", "allreduce", "reduce_scatter", "allgather",
        "alltoall", "ring", "p2p",       "bubble",         "io"};
    const double v[] = {r->time.compute,   r->time.halo,
                        r->time.allreduce, r->time.reduce_scatter,
                        r->time.allgather, r->time.alltoall,
                        r->time.ring,      r->time.p2p,
                        r->time.bubble,    r->time.io};
    int k = 0;
    for (int i = 1; i < (int)(sizeof v / sizeof v[0]); ++i)
      if (v[i] > v[k]) k = i;
    return nm[k];
  }
  const double wo = r->mem.params + r->mem.grads + r->mem.optim;
  return wo >= r->mem.activations ? "weights/optimizer" : "activations";
}

static int by_rank(const void *a, const void *b) {
  const row *x = a, *y = b;
  if (x->fits != y->fits) return y->fits - x->fits;
  if (x->has_mem != y->has_mem) return y->has_mem - x->has_mem;
  double kx = x->has_time ? x->time.total : x->mem.peak,
         ky = y->has_time ? y->time.total : y->mem.peak;
  return (kx > ky) - (kx < ky);
}

static void print_table(const row *rows, int n, int all, const sg_plan_hw *hw,
                        int have_hw) {
  printf("%-26s %10s %10s %10s %10s %12s  %s\n", "mesh", "peak MiB", "weights",
         "activ.", "workspace", "step s", "binding");
  for (int i = 0; i < n; ++i) {
    const row *r = &rows[i];
    if (!r->fits) {
      if (all) printf("%-26s does not fit: %s\n", r->spec, r->why);
      continue;
    }
    char t[32] = "-";
    if (r->has_time) snprintf(t, sizeof t, "%.4g", r->time.total);
    if (!r->has_mem) {
      printf("%-26s %10s %10s %10s %10s %12s  (memory not modelled)\n", r->spec,
             "-", "-", "-", "-", t);
      continue;
    }
    const char *over = have_hw && hw->mem_bytes > 0 &&
                               r->mem.peak > hw->mem_bytes
                           ? " (over the memory per rank)"
                           : "";
    printf("%-26s %10.1f %10.1f %10.1f %10.1f %12s  %s%s\n", r->spec,
           mib(r->mem.peak), mib(r->mem.params + r->mem.grads + r->mem.optim),
           mib(r->mem.activations), mib(r->mem.workspace), t, binding(r), over);
  }
}

static void print_json(const row *rows, int n, int all) {
  for (int i = 0; i < n; ++i) {
    const row *r = &rows[i];
    if (!r->fits && !all) continue;
    printf("{\"mesh\": \"%s\", \"fits\": %s", r->spec,
           r->fits ? "true" : "false");
    if (!r->fits) {
      printf(", \"why\": \"");
      for (const char *p = r->why; *p; ++p)
        printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
      printf("\"}\n");
      continue;
    }
    /* a mesh whose memory is not modelled still has its time */
    if (!r->has_mem)
      printf(", \"peak_mib\": null");
    else
      printf(", \"peak_mib\": %.3f, \"params_mib\": %.3f, \"grads_mib\": "
             "%.3f, \"optim_mib\": %.3f, \"activations_mib\": %.3f, "
             "\"workspace_mib\": %.3f",
             mib(r->mem.peak), mib(r->mem.params), mib(r->mem.grads),
             mib(r->mem.optim), mib(r->mem.activations), mib(r->mem.workspace));
    if (r->has_time)
      printf(", \"step_s\": %.6g, \"compute_s\": %.6g, \"halo_s\": %.6g, "
             "\"allreduce_s\": %.6g, \"reduce_scatter_s\": %.6g, "
             "\"allgather_s\": %.6g, \"alltoall_s\": %.6g, \"ring_s\": %.6g, "
             "\"p2p_s\": %.6g, \"bubble_s\": %.6g",
             r->time.total, r->time.compute, r->time.halo, r->time.allreduce,
             r->time.reduce_scatter, r->time.allgather, r->time.alltoall,
             r->time.ring, r->time.p2p, r->time.bubble);
    else
      printf(", \"step_s\": null");
    printf(", \"binding\": \"%s\"}\n", binding(r));
  }
}

/* sg-train's keys and sg-plan's own in one table. */
static sg_status make_kv(sg_kv_t *kv, sg_kv_key **tab) {
  const int n = sg_train_nkeys + (int)(sizeof plan_keys / sizeof *plan_keys);
  *tab = malloc((size_t)n * sizeof **tab);
  if (!*tab)
    return sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  memcpy(*tab, sg_train_keys, (size_t)sg_train_nkeys * sizeof **tab);
  memcpy(*tab + sg_train_nkeys, plan_keys, sizeof plan_keys);
  return sg_kv_create(*tab, n, kv);
}

/* --calibrate-from-model: the op-times files (the first a run alone, the
 * rest the copies that ran at once: the slowest of them) into rates. */
static sg_status calibrate_from_model(sg_kv_t kv, const sg_plan_problem *pb,
                                      const sg_plan_hw *base) {
  sg_status st = SG_OK;
  char *list = strdup(sg_kv_str(kv, "calibrate_from_model")), *save = NULL;
  sg_plan_op_times one, sh, t;
  sg_plan_mesh m;
  sg_plan_hw hw;
  int n = 0;
  char why[1024];
  if (!list) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  const char *mesh = *sg_kv_str(kv, "mesh") ? sg_kv_str(kv, "mesh") : "h=1";
  SG_TRY(sg_plan_mesh_parse(mesh, &m));
  SG_TRY(sg_plan_check(pb, &m, why, sizeof why));
  for (char *f = strtok_r(list, ",", &save); f;
       f = strtok_r(NULL, ",", &save)) {
    SG_TRY(sg_plan_op_times_load(f, n ? &t : &one));
    if (n++ == 1 || (n > 2 && t.compute > sh.compute)) sh = t;
  }
  if (n == 2)
    SG_RAISE(SG_ERR_CONFIG,
             "--calibrate-from-model: one shared file; give the op times of "
             "every copy that ran at once (2 or more), or none");
  SG_TRY(sg_plan_hw_from_model(pb, &m, base, &one, n > 2 ? &sh : NULL, n - 1,
                               &hw));
  SG_TRY(sg_plan_hw_save(sg_kv_str(kv, "hardware_out"), &hw));
  printf("%s: from %s's steps on %s: gemm %.3g flop/s, conv %.3g, fft %.3g, "
         "attn %.3g, memory %.3g B/s",
         sg_kv_str(kv, "hardware_out"), sg_kv_str(kv, "model"), mesh,
         hw.gemm_flops, hw.conv_flops, hw.fft_flops, hw.attn_flops, hw.mem_bw);
  if (hw.shared_ranks > 1)
    printf("; %d at once: gemm %.3g, conv %.3g, fft %.3g, attn %.3g, memory "
           "%.3g",
           hw.shared_ranks, hw.shared.gemm_flops, hw.shared.conv_flops,
           hw.shared.fft_flops, hw.shared.attn_flops, hw.shared.mem_bw);
  printf("\n");
fail:
  free(list);
  return st;
}

static sg_status plan(sg_kv_t kv) {
  sg_status st = SG_OK;
  row *rows = calloc(MAX_MESHES, sizeof *rows);
  if (!rows) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  sg_plan_problem pb = {.cfg = kv,
                        .ranks = (int)sg_kv_int(kv, "ranks"),
                        .threads = (int)sg_kv_int(kv, "threads")};
  if (pb.ranks < 1) SG_RAISE(SG_ERR_CONFIG, "--ranks must be >= 1");
  SG_TRY(data_shape(kv, &pb));
  sg_plan_hw hw;
  memset(&hw, 0, sizeof hw);
  const int have_hw = *sg_kv_str(kv, "hardware") != '\0';
  if (have_hw) SG_TRY(sg_plan_hw_load(sg_kv_str(kv, "hardware"), &hw));
  if (*sg_kv_str(kv, "calibrate_from_model")) {
    if (!have_hw)
      SG_RAISE(SG_ERR_CONFIG,
               "--calibrate-from-model needs --hardware: the file whose links "
               "(and memory, nodes) it keeps (sg-plan-calibrate writes one)");
    SG_TRY(calibrate_from_model(kv, &pb, &hw));
    goto fail; /* done: nothing to plan */
  }
  int n = 0, sz[NDIMS];
  if (*sg_kv_str(kv, "mesh")) {
    SG_TRY(sg_plan_mesh_parse(sg_kv_str(kv, "mesh"), &rows[0].mesh));
    sg_plan_mesh_format(&rows[0].mesh, rows[0].spec, sizeof rows[0].spec);
    n = 1;
  } else {
    const char *model = sg_kv_str(kv, "model");
    const int vit = !strcmp(model, "vit"),
              moe = (vit || !strcmp(model, "swin")) &&
                    sg_kv_int(kv, "moe_experts") > 0;
    int dims[NDIMS], nd = 0;
    for (int i = 0; i < NDIMS; ++i)
      if ((i != 6 || vit) && (i != 7 || moe)) dims[nd++] = i;
    enumerate(pb.ranks, 0, nd, dims, sz, rows, &n);
  }
  int nfit = 0;
  char nomem[512] = ""; /* why a mesh that fits has no memory estimate */
  for (int i = 0; i < n; ++i) {
    row *r = &rows[i];
    r->fits = sg_plan_check(&pb, &r->mesh, r->why, sizeof r->why) == SG_OK;
    /* a mesh that fits but whose memory is not modelled shows "-" */
    r->has_mem = r->fits && sg_plan_memory(&pb, &r->mesh, &r->mem) == SG_OK;
    if (r->fits && !r->has_mem && !*nomem)
      snprintf(nomem, sizeof nomem, "%s", sg_last_error());
    if (r->fits && have_hw)
      r->has_time = sg_plan_step_time(&pb, &r->mesh, &hw, &r->time) == SG_OK;
    nfit += r->fits;
  }
  qsort(rows, (size_t)n, sizeof *rows, by_rank);
  const int all = sg_kv_bool(kv, "all") || n == 1;
  if (sg_kv_bool(kv, "json")) {
    print_json(rows, n, all);
  } else {
    printf(
        "sg-plan: %s on a %lldx%lld grid, %lld var(s), batch %lld, %d rank(s): "
        "%d of %d meshes fit\n",
        sg_kv_str(kv, "model"), (long long)pb.ny, (long long)pb.nx,
        (long long)pb.vars, (long long)sg_kv_int(kv, "batch"), pb.ranks, nfit,
        n);
    print_table(rows, n, all, &hw, have_hw);
    if (*nomem) printf("note: %s\n", nomem);
    if (nfit > 0 && rows[0].has_mem)
      printf("best: %s (%s: %.1f MiB per rank; bound by %s)\n", rows[0].spec,
             rows[0].has_time ? "fastest" : "least memory",
             mib(rows[0].mem.peak), binding(&rows[0]));
  }
  if (nfit == 0 && n == 1) SG_RAISE(SG_ERR_CONFIG, "%s", rows[0].why);
  if (nfit == 0)
    SG_RAISE(SG_ERR_CONFIG, "no mesh of %d ranks fits (--all lists why)",
             pb.ranks);
fail:
  free(rows);
  return st;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sg_kv_t kv = NULL;
  sg_kv_key *tab = NULL;
  sg_status st = make_kv(&kv, &tab);
  for (int i = 1; st == SG_OK && i < argc; ++i)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: sg-plan [--config FILE] --ranks N [--hardware FILE] "
             "[--json] [--key value ...]\n\n");
      sg_kv_print_help(kv, stdout);
      sg_kv_destroy(&kv);
      free(tab);
      MPI_Finalize();
      return 0;
    }
  if (st == SG_OK) st = sg_kv_parse_args(kv, argc, argv, 1, NULL);
  if (st == SG_OK) st = plan(kv);
  sg_kv_destroy(&kv);
  free(tab);
  if (st != SG_OK) {
    fprintf(stderr, "sg-plan: error: %s\n", sg_last_error());
    MPI_Finalize();
    return 1;
  }
  MPI_Finalize();
  return 0;
}
