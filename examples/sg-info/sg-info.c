/* sg-info: print shardgrid's build configuration and the layout of a mesh.
 *
 *   mpiexec -n N sg-info [--mesh SPEC] [--json] [--log-level L]
 *   sg-info --schedule pp=4,m=8,kind=1f1b[,v=2] [--csv] [--trace FILE]
 *
 * Without --mesh the mesh is one dim, "world=N". With --json, rank 0 prints
 * one JSON object:
 *   {"world": N, "dims": [{"name": "pp", "size": 4}, ...],
 *    "ranks": [{"rank": 0, "coords": {"pp": 0, ...},
 *               "groups": {"pp": [0, 4, 8, 12], ...}}, ...],
 *    "build": {...}}
 * The build part names the backends; with CUDA built, the GPUs rank 0 sees
 * (name, memory), the NCCL version and whether the MPI is CUDA-aware
 * ("yes", "no", "unknown").
 * where groups[d] lists the world ranks of the rank's group along dim d in
 * group-rank order. Bad input gives one clear error line and a non-zero exit
 * on every rank (the ranks agree on the failure first, so none hangs).
 *
 * With --schedule it prints a pipeline schedule instead (sg_pipeline.h):
 * the action lists laid out in simulated time, one row per time slot and
 * one column per stage, after the checker passed; --csv prints every
 * action (transfers included) as CSV; --trace FILE writes the simulated
 * timeline as Chrome-trace JSON. Nothing runs a model: the times are the
 * simulator's, F = B = W = 1 slot, no latency. */
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_device.h"
#include "sg_log.h"
#include "sg_mesh.h"
#include "sg_pipeline.h"
#include "sg_status.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "sg-info"

typedef struct options {
  const char *mesh;
  const char *schedule;
  const char *trace;
  const char *log_name;
  int json, csv;
  int log_level;
  int help;
} options;

static const char usage[] =
    "usage: mpiexec -n N sg-info [--mesh SPEC] [--json] [--log-level L]\n"
    "       sg-info --schedule SPEC [--csv] [--trace FILE]\n"
    "  --mesh SPEC       mesh, outermost dim first, e.g. pp=2,dp=2,tp=2\n"
    "                    (default: world=N)\n"
    "  --json            print the layout as one JSON object (rank 0)\n"
    "  --log-level L     error, warn, info, debug or trace\n"
    "  --schedule SPEC   print a pipeline schedule, e.g. pp=4,m=8,kind=1f1b\n"
    "                    (kind gpipe, 1f1b, interleaved with v=V, zb-h1)\n"
    "  --csv             with --schedule: every action as CSV\n"
    "  --trace FILE      with --schedule: its simulated timeline as a\n"
    "                    Chrome-trace JSON file\n"
    "  --help            this text\n";

/* Where an option that takes a value stores it (NULL: not one of them). */
static const char **value_option(const char *a, size_t nlen, options *o) {
  static const char *const names[] = {"--mesh", "--log-level", "--schedule",
                                      "--trace"};
  const char **slots[] = {&o->mesh, &o->log_name, &o->schedule, &o->trace};
  for (int k = 0; k < 4; ++k)
    if (nlen == strlen(names[k]) && strncmp(a, names[k], nlen) == 0)
      return slots[k];
  return NULL;
}

static sg_status parse_args(int argc, char **argv, options *o) {
  sg_status st = SG_OK;
  memset(o, 0, sizeof *o);
  o->log_level = -1;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    const char *val = NULL;
    const char *eq = strchr(a, '=');
    size_t nlen = eq && strncmp(a, "--", 2) == 0 ? (size_t)(eq - a) : strlen(a);
    const char **slot = value_option(a, nlen, o);
    if (slot) {
      if (eq && (size_t)(eq - a) == nlen) {
        val = eq + 1;
      } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
        val = argv[++i];
      } else {
        SG_RAISE(SG_ERR_INVALID_ARG, "option %.*s needs a value", (int)nlen, a);
      }
      *slot = val;
    } else if (strcmp(a, "--json") == 0) {
      o->json = 1;
    } else if (strcmp(a, "--csv") == 0) {
      o->csv = 1;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      o->help = 1;
    } else {
      SG_RAISE(SG_ERR_INVALID_ARG, "unknown option '%s' (see --help)", a);
    }
  }
  if (o->log_name) {
    o->log_level = sg_log_parse_level(o->log_name);
    if (o->log_level < 0)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "unknown log level '%s' (use error, "
               "warn, info, debug or trace)",
               o->log_name);
  }
  if ((o->csv || o->trace) && !o->schedule)
    SG_RAISE(SG_ERR_INVALID_ARG, "--csv and --trace go with --schedule");
fail:
  return st;
}

/* JSON string literal (quotes, backslashes and control characters). */
static void json_str(const char *s) {
  putchar('"');
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

/* First line of the MPI library's version string, trimmed. */
static void mpi_library(char *out, size_t n) {
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  MPI_Get_library_version(v, &len);
  char *nl = strpbrk(v, "\r\n");
  if (nl) *nl = '\0';
  /* collapse tabs and runs of blanks */
  size_t k = 0;
  for (const char *c = v; *c && k + 1 < n; ++c) {
    char ch = *c == '\t' ? ' ' : *c;
    if (ch == ' ' && (k == 0 || out[k - 1] == ' ')) continue;
    out[k++] = ch;
  }
  while (k && out[k - 1] == ' ') --k;
  out[k] = '\0';
}

/* "2.27.3" from ncclGetVersion's code; "" when NCCL is not there. */
static void nccl_version_str(char *out, size_t n) {
  int v = sg_nccl_version();
  if (v <= 0)
    snprintf(out, n, "%s", "");
  else if (v >= 10000) /* NCCL >= 2.9: major*10000 + minor*100 + patch */
    snprintf(out, n, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  else
    snprintf(out, n, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
}

static const char *cuda_aware_str(void) {
  int a = sg_mpi_cuda_aware();
  return a > 0 ? "yes" : (a == 0 ? "no" : "unknown");
}

/* Device i's name and memory in GiB (its name "?" if it cannot say). */
static double cuda_device(int i, char *name, size_t n) {
  size_t bytes = 0;
  if (sg_device_describe((sg_device){SG_DEVICE_CUDA, i}, name, n, &bytes) !=
      SG_OK)
    snprintf(name, n, "?");
  return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

static void print_cuda_text(int cuda_devices) {
  char nccl[32], name[300];
  nccl_version_str(nccl, sizeof nccl);
  printf("  NCCL       %s\n", nccl[0] ? nccl : "not available");
  printf("  MPI+CUDA   CUDA-aware MPI: %s\n", cuda_aware_str());
  for (int i = 0; i < cuda_devices; ++i) {
    double gib = cuda_device(i, name, sizeof name);
    printf("  GPU %-6d %s, %.1f GiB\n", i, name, gib);
  }
  if (cuda_devices > 0)
    printf("  placement  one rank per GPU: node-local rank mod %d\n",
           cuda_devices);
}

static void print_build_text(int cuda_devices) {
  char lib[256];
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  mpi_library(lib, sizeof lib);
  printf("shardgrid %s (%s build, %s)\n", SG_VERSION_STRING, SG_BUILD_TYPE,
         SG_C_COMPILER);
  printf("  MPI        %d.%d: %s\n", major, minor, lib);
  printf("  backends   host (OpenMP %s)", SG_HAVE_OPENMP ? "on" : "off");
  if (SG_HAVE_CUDA)
    printf(", cuda (NCCL %s, %d device%s)\n", SG_HAVE_NCCL ? "on" : "off",
           cuda_devices, cuda_devices == 1 ? "" : "s");
  else
    printf("; cuda not built\n");
  if (SG_HAVE_CUDA) print_cuda_text(cuda_devices);
  const char *core = sg_blas_core(), *hint = sg_blas_coretype_hint();
  printf("  BLAS       %s", SG_BLAS_NAME);
  if (core) printf(" (kernels: %s)", core);
  printf("\n");
  if (hint)
    printf(
        "  note       this CPU has wider vectors than the BLAS kernels in use: "
        "export OPENBLAS_CORETYPE=%s\n",
        hint);
  printf("  FFT        %s\n", SG_FFT_NAME);
  printf("  netCDF     %s%s\n", SG_HAVE_NETCDF ? "yes" : "no",
         SG_HAVE_NETCDF
             ? (SG_HAVE_NETCDF_PAR ? " (parallel netCDF-4)" : " (serial only)")
             : "");
  printf("  PnetCDF    %s\n", SG_HAVE_PNETCDF ? "yes" : "no");
}

static void print_build_json(int cuda_devices) {
  char lib[256];
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  mpi_library(lib, sizeof lib);
  printf("\"build\": {\"version\": ");
  json_str(SG_VERSION_STRING);
  printf(", \"build_type\": ");
  json_str(SG_BUILD_TYPE);
  printf(", \"compiler\": ");
  json_str(SG_C_COMPILER);
  printf(", \"mpi_version\": \"%d.%d\", \"mpi_library\": ", major, minor);
  json_str(lib);
  printf(", \"backends\": [\"host\"%s], \"openmp\": %s, \"cuda\": %s, "
         "\"nccl\": %s, \"cuda_devices\": %d, \"blas\": ",
         SG_HAVE_CUDA ? ", \"cuda\"" : "", SG_HAVE_OPENMP ? "true" : "false",
         SG_HAVE_CUDA ? "true" : "false", SG_HAVE_NCCL ? "true" : "false",
         cuda_devices);
  json_str(SG_BLAS_NAME);
  printf(", \"blas_core\": ");
  json_str(sg_blas_core() ? sg_blas_core() : "");
  printf(", \"blas_coretype_hint\": ");
  json_str(sg_blas_coretype_hint() ? sg_blas_coretype_hint() : "");
  printf(", \"fft\": ");
  json_str(SG_FFT_NAME);
  char nccl[32], name[300];
  nccl_version_str(nccl, sizeof nccl);
  printf(", \"nccl_version\": ");
  json_str(nccl);
  printf(", \"cuda_aware_mpi\": ");
  json_str(cuda_aware_str());
  printf(", \"cuda_device_list\": [");
  for (int i = 0; i < cuda_devices; ++i) {
    double gib = cuda_device(i, name, sizeof name);
    printf("%s{\"index\": %d, \"name\": ", i ? ", " : "", i);
    json_str(name);
    printf(", \"memory_gib\": %.2f}", gib);
  }
  printf("]");
  printf(", \"netcdf\": %s, \"netcdf_parallel\": %s, \"pnetcdf\": %s}",
         SG_HAVE_NETCDF ? "true" : "false",
         SG_HAVE_NETCDF_PAR ? "true" : "false",
         SG_HAVE_PNETCDF ? "true" : "false");
}

/* Per rank: ndims coords, then for each dim its group's world ranks. */
static sg_status gather_layout(sg_mesh_t m, int **table, int *rec) {
  sg_status st = SG_OK;
  int nd = sg_mesh_ndims(m), n = sg_mesh_size(m);
  int len = nd, *mine = NULL;
  for (int d = 0; d < nd; ++d) len += sg_mesh_dim_size(m, d);
  *rec = len;
  *table = NULL;
  mine = malloc((size_t)len * sizeof *mine);
  if (!mine) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  sg_mesh_coords(m, mine);
  int k = nd;
  for (int d = 0; d < nd; ++d) {
    sg_group_t g = NULL;
    SG_TRY(sg_mesh_group(m, 1u << d, &g));
    for (int r = 0; r < sg_group_size(g); ++r)
      mine[k++] = sg_group_mesh_rank(g, r);
  }
  if (sg_mesh_rank(m) == 0) {
    *table = malloc((size_t)len * (size_t)n * sizeof **table);
    if (!*table) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  }
  SG_MPI(
      MPI_Gather(mine, len, MPI_INT, *table, len, MPI_INT, 0, sg_mesh_comm(m)));
fail:
  free(mine);
  return st;
}

static void print_layout_text(sg_mesh_t m, const int *table, int rec) {
  int nd = sg_mesh_ndims(m), n = sg_mesh_size(m);
  printf("mesh: %d ranks =", n);
  for (int d = 0; d < nd; ++d)
    printf("%s %s=%d", d ? " x" : "", sg_mesh_dim_name(m, d),
           sg_mesh_dim_size(m, d));
  printf(" (row-major, last dim fastest)\n");
  for (int r = 0; r < n; ++r) {
    const int *t = table + (size_t)r * rec;
    printf("  rank %3d  coords (", r);
    for (int d = 0; d < nd; ++d)
      printf("%s%s=%d", d ? ", " : "", sg_mesh_dim_name(m, d), t[d]);
    printf(")  groups");
    int k = nd;
    for (int d = 0; d < nd; ++d) {
      printf(" %s=[", sg_mesh_dim_name(m, d));
      for (int i = 0; i < sg_mesh_dim_size(m, d); ++i)
        printf("%s%d", i ? "," : "", t[k++]);
      printf("]");
    }
    printf("\n");
  }
}

static void print_layout_json(sg_mesh_t m, const int *table, int rec) {
  int nd = sg_mesh_ndims(m), n = sg_mesh_size(m);
  printf("\"world\": %d, \"dims\": [", n);
  for (int d = 0; d < nd; ++d) {
    printf("%s{\"name\": ", d ? ", " : "");
    json_str(sg_mesh_dim_name(m, d));
    printf(", \"size\": %d}", sg_mesh_dim_size(m, d));
  }
  printf("], \"ranks\": [");
  for (int r = 0; r < n; ++r) {
    const int *t = table + (size_t)r * rec;
    printf("%s\n  {\"rank\": %d, \"coords\": {", r ? "," : "", r);
    for (int d = 0; d < nd; ++d) {
      printf("%s", d ? ", " : "");
      json_str(sg_mesh_dim_name(m, d));
      printf(": %d", t[d]);
    }
    printf("}, \"groups\": {");
    int k = nd;
    for (int d = 0; d < nd; ++d) {
      printf("%s", d ? ", " : "");
      json_str(sg_mesh_dim_name(m, d));
      printf(": [");
      for (int i = 0; i < sg_mesh_dim_size(m, d); ++i)
        printf("%s%d", i ? ", " : "", t[k++]);
      printf("]");
    }
    printf("}}");
  }
  printf("]");
}

/* ---- --schedule -------------------------------------------------------- */

static int is_compute(sg_pp_op op) {
  return op == SG_PP_F || op == SG_PP_B || op == SG_PP_W;
}

/* One row per time slot, one column per stage: with unit costs every
 * compute action fills exactly one slot. */
static sg_status print_schedule_table(const sg_pp_schedule *s,
                                      const sg_pp_sim *sim, const int *peak_fb,
                                      const int *peak_fw) {
  sg_status st = SG_OK;
  int rows = (int)(sim->makespan + 0.5), p = s->p;
  enum { W = 10 };
  char *cells = calloc((size_t)rows * (size_t)p, W);
  if (!cells) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int stage = 0; stage < p; ++stage)
    for (int i = s->off[stage]; i < s->off[stage + 1]; ++i)
      if (is_compute(s->act[i].op)) {
        int t = (int)(sim->start[i] + 0.5);
        sg_pp_action_label(s, &s->act[i], cells + ((size_t)t * p + stage) * W,
                           W);
      }
  printf(
      "pipeline schedule %s: p = %d stages, m = %d micro-batches, v = %d\n"
      "(simulated: one slot per F, B or W, no latency; a cell is op micro-batch%s; "
      ". idle)\n",
      sg_pp_kind_name(s->kind), p, s->m, s->v, s->v > 1 ? ".chunk" : "");
  printf("slot");
  for (int stage = 0; stage < p; ++stage)
    printf(stage + 1 < p ? "  stage %-3d" : "  stage %d", stage);
  for (int t = 0; t < rows; ++t) {
    printf("\n%4d", t);
    for (int stage = 0; stage < p; ++stage) {
      const char *c = cells + ((size_t)t * p + stage) * W;
      printf(stage + 1 < p ? "  %-9s" : "  %s", *c ? c : ".");
    }
  }
  printf("\npeak in flight (F..B)");
  for (int stage = 0; stage < p; ++stage) printf(" %d", peak_fb[stage]);
  if (s->kind == SG_PP_ZB_H1) {
    printf("\npeak in flight (F..W)");
    for (int stage = 0; stage < p; ++stage) printf(" %d", peak_fw[stage]);
  }
  printf("\nbubble (idle fraction)");
  for (int stage = 0; stage < p; ++stage)
    printf(" %.1f%%", 100 * sim->bubble[stage]);
  printf(
      "\nchecked: one F and B%s per micro-batch, stage and chunk in order, matched "
      "transfers, no deadlock\n",
      s->kind == SG_PP_ZB_H1 ? " and W" : "");
fail:
  free(cells);
  return st;
}

static void print_schedule_csv(const sg_pp_schedule *s, const sg_pp_sim *sim) {
  printf("stage,index,op,microbatch,chunk,peer,start,end\n");
  for (int stage = 0; stage < s->p; ++stage)
    for (int i = s->off[stage]; i < s->off[stage + 1]; ++i) {
      const sg_pp_action *a = &s->act[i];
      printf("%d,%d,%s,%d,%d,%d,%g,%g\n", stage, i - s->off[stage],
             sg_pp_op_name(a->op), a->mb, a->chunk, sg_pp_peer(s, stage, a),
             sim->start[i], sim->end[i]);
    }
}

/* Chrome trace: one thread per stage, one slot = 1 ms. */
static sg_status write_schedule_trace(const sg_pp_schedule *s,
                                      const sg_pp_sim *sim, const char *path) {
  sg_status st = SG_OK;
  FILE *f = fopen(path, "w");
  if (!f) SG_RAISE(SG_ERR_IO, "cannot write trace file '%s'", path);
  fprintf(f, "{\"traceEvents\": [");
  for (int stage = 0; stage < s->p; ++stage)
    fprintf(
        f,
        "%s\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
        "\"args\": {\"name\": \"stage %d\"}}",
        stage ? "," : "", stage, stage);
  for (int stage = 0; stage < s->p; ++stage)
    for (int i = s->off[stage]; i < s->off[stage + 1]; ++i) {
      char name[16];
      if (!is_compute(s->act[i].op)) continue;
      sg_pp_action_label(s, &s->act[i], name, sizeof name);
      fprintf(
          f,
          ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, "
          "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}",
          name, sg_pp_op_name(s->act[i].op), stage, 1000 * sim->start[i],
          1000 * (sim->end[i] - sim->start[i]));
    }
  fprintf(f, "\n], \"displayTimeUnit\": \"ms\"}\n");
  if (fclose(f) != 0) SG_RAISE(SG_ERR_IO, "cannot write trace file '%s'", path);
fail:
  return st;
}

/* Generate, check, simulate and print (rank 0 prints and writes). */
static sg_status show_schedule(const options *o, int rank) {
  sg_status st = SG_OK;
  sg_pp_schedule *s = NULL;
  sg_pp_sim sim = {0};
  int *peaks = NULL;
  SG_TRY(sg_pp_schedule_parse(o->schedule, &s));
  peaks = malloc(2 * (size_t)s->p * sizeof *peaks);
  if (!peaks) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  SG_TRY(sg_pp_schedule_check(s, peaks, peaks + s->p));
  SG_TRY(sg_pp_simulate(s, &(sg_pp_costs){1.0, 1.0, 1.0, 0.0}, &sim));
  if (rank == 0) {
    if (o->csv)
      print_schedule_csv(s, &sim);
    else
      SG_TRY(print_schedule_table(s, &sim, peaks, peaks + s->p));
    if (o->trace) SG_TRY(write_schedule_trace(s, &sim, o->trace));
    fflush(stdout);
  }
fail:
  free(peaks);
  sg_pp_sim_free(&sim);
  sg_pp_schedule_destroy(&s);
  return st;
}

/* After the ranks agreed on a failure: rank 0 prints the one error line
 * (sg_die), every rank finalises MPI and exits with code. */
static void die_agreed(int rank, sg_status st, int code) {
  if (rank == 0) sg_die(PROG, st, code);
  MPI_Finalize();
  exit(code);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  options o;
  sg_status st = sg_agree(MPI_COMM_WORLD, parse_args(argc, argv, &o));
  if (st != SG_OK) die_agreed(rank, st, 2);
  if (o.help) {
    if (rank == 0) fputs(usage, stdout);
    MPI_Finalize();
    return 0;
  }
  if (o.log_level >= 0) sg_log_set_level(o.log_level);
  if (o.schedule) {
    st = sg_agree(MPI_COMM_WORLD, show_schedule(&o, rank));
    if (st != SG_OK) die_agreed(rank, st, 2);
    MPI_Finalize();
    return 0;
  }

  char spec[64];
  snprintf(spec, sizeof spec, "world=%d", size);
  sg_mesh_t mesh = NULL;
  /* the mesh agrees on its own errors (same status and message everywhere) */
  st = sg_mesh_create(MPI_COMM_WORLD, o.mesh ? o.mesh : spec, &mesh);
  st = sg_agree(MPI_COMM_WORLD, st);
  if (st != SG_OK) die_agreed(rank, st, 2);
  sg_log_debug("mesh created: %d dims over %d ranks", sg_mesh_ndims(mesh),
               size);

  int cuda_devices = 0;
  if (sg_device_count(SG_DEVICE_CUDA, &cuda_devices) != SG_OK) cuda_devices = 0;
  int *table = NULL, rec = 0;
  st = sg_agree(MPI_COMM_WORLD, gather_layout(mesh, &table, &rec));
  if (st != SG_OK) {
    free(table);
    sg_mesh_destroy(&mesh);
    die_agreed(rank, st, 1);
  }
  if (rank == 0) {
    if (o.json) {
      printf("{");
      print_layout_json(mesh, table, rec);
      printf(",\n ");
      print_build_json(cuda_devices);
      printf("}\n");
    } else {
      print_build_text(cuda_devices);
      print_layout_text(mesh, table, rec);
    }
    fflush(stdout);
  }
  free(table);
  sg_mesh_destroy(&mesh);
  MPI_Finalize();
  return 0;
}
