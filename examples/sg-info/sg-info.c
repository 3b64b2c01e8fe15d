/* sg-info: print shardgrid's build configuration and the layout of a mesh.
 *
 *   mpiexec -n N sg-info [--mesh SPEC] [--json] [--log-level L]
 *
 * Without --mesh the mesh is one dim, "world=N". With --json, rank 0 prints
 * one JSON object:
 *   {"world": N, "dims": [{"name": "pp", "size": 4}, ...],
 *    "ranks": [{"rank": 0, "coords": {"pp": 0, ...},
 *               "groups": {"pp": [0, 4, 8, 12], ...}}, ...],
 *    "build": {...}}
 * where groups[d] lists the world ranks of the rank's group along dim d in
 * group-rank order. Bad input gives one clear error line and a non-zero exit
 * on every rank (the ranks agree on the failure first, so none hangs). */
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_device.h"
#include "sg_log.h"
#include "sg_mesh.h"
#include "sg_status.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "sg-info"

typedef struct options {
  const char *mesh;
  int json;
  int log_level;
  int help;
} options;

static const char usage[] =
    "usage: mpiexec -n N sg-info [--mesh SPEC] [--json] [--log-level L]\n"
    "  --mesh SPEC       mesh, outermost dim first, e.g. pp=2,dp=2,tp=2\n"
    "                    (default: world=N)\n"
    "  --json            print the layout as one JSON object (rank 0)\n"
    "  --log-level L     error, warn, info, debug or trace\n"
    "  --help            this text\n";

static sg_status parse_args(int argc, char **argv, options *o) {
  sg_status st = SG_OK;
  memset(o, 0, sizeof *o);
  o->log_level = -1;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    const char *val = NULL;
    const char *eq = strchr(a, '=');
    size_t nlen = eq && strncmp(a, "--", 2) == 0 ? (size_t)(eq - a) : strlen(a);
    int takes_value = (nlen == 6 && strncmp(a, "--mesh", 6) == 0) ||
                      (nlen == 11 && strncmp(a, "--log-level", 11) == 0);
    if (takes_value) {
      if (eq && (size_t)(eq - a) == nlen) {
        val = eq + 1;
      } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
        val = argv[++i];
      } else {
        SG_RAISE(SG_ERR_INVALID_ARG, "option %.*s needs a value", (int)nlen, a);
      }
      if (a[2] == 'm') {
        o->mesh = val;
      } else {
        o->log_level = sg_log_parse_level(val);
        if (o->log_level < 0)
          SG_RAISE(SG_ERR_INVALID_ARG, "unknown log level '%s' (use error, "
                   "warn, info, debug or trace)", val);
      }
    } else if (strcmp(a, "--json") == 0) {
      o->json = 1;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      o->help = 1;
    } else {
      SG_RAISE(SG_ERR_INVALID_ARG, "unknown option '%s' (see --help)", a);
    }
  }
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
  printf("  BLAS       %s\n", SG_BLAS_NAME);
  printf("  FFT        %s\n", SG_FFT_NAME);
  printf("  netCDF     %s%s\n", SG_HAVE_NETCDF ? "yes" : "no",
         SG_HAVE_NETCDF ? (SG_HAVE_NETCDF_PAR ? " (parallel netCDF-4)"
                                              : " (serial only)")
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
  printf(", \"fft\": ");
  json_str(SG_FFT_NAME);
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
    for (int r = 0; r < sg_group_size(g); ++r) mine[k++] = sg_group_mesh_rank(g, r);
  }
  if (sg_mesh_rank(m) == 0) {
    *table = malloc((size_t)len * (size_t)n * sizeof **table);
    if (!*table) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  }
  SG_MPI(MPI_Gather(mine, len, MPI_INT, *table, len, MPI_INT, 0,
                    sg_mesh_comm(m)));
fail:
  free(mine);
  return st;
}

static void print_layout_text(sg_mesh_t m, const int *table, int rec) {
  int nd = sg_mesh_ndims(m), n = sg_mesh_size(m);
  printf("mesh: %d ranks =", n);
  for (int d = 0; d < nd; ++d)
    printf("%s %s=%d", d ? " x" : "", sg_mesh_dim_name(m, d), sg_mesh_dim_size(m, d));
  printf(" (row-major, last dim fastest)\n");
  for (int r = 0; r < n; ++r) {
    const int *t = table + (size_t)r * rec;
    printf("  rank %3d  coords (", r);
    for (int d = 0; d < nd; ++d) printf("%s%s=%d", d ? ", " : "", sg_mesh_dim_name(m, d), t[d]);
    printf(")  groups");
    int k = nd;
    for (int d = 0; d < nd; ++d) {
      printf(" %s=[", sg_mesh_dim_name(m, d));
      for (int i = 0; i < sg_mesh_dim_size(m, d); ++i) printf("%s%d", i ? "," : "", t[k++]);
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
      for (int i = 0; i < sg_mesh_dim_size(m, d); ++i) printf("%s%d", i ? ", " : "", t[k++]);
      printf("]");
    }
    printf("}}");
  }
  printf("]");
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

  char spec[64];
  snprintf(spec, sizeof spec, "world=%d", size);
  sg_mesh_t mesh = NULL;
  /* the mesh agrees on its own errors (same status and message everywhere) */
  st = sg_mesh_create(MPI_COMM_WORLD, o.mesh ? o.mesh : spec, &mesh);
  st = sg_agree(MPI_COMM_WORLD, st);
  if (st != SG_OK) die_agreed(rank, st, 2);
  sg_log_debug("mesh created: %d dims over %d ranks", sg_mesh_ndims(mesh), size);

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
