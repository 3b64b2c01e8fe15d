/* sg-ns2d — generate a 2-D Navier–Stokes dataset (the FNO paper's setup)
 * domain-parallel under mpiexec and write it as one NetCDF file.
 *
 *   mpiexec -n 4 sg-ns2d --out ns2d.nc --n 64 --samples 200 --frames 20 \
 *                        --mesh h=2,w=2
 *
 * The file holds vorticity(sample, time, y, x) with CF-style metadata and
 * the generation parameters as global attributes. It is written as
 * <out>.partial and renamed to <out> when complete; a run that fails
 * removes it. */
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_kv.h"
#include "sg_log.h"
#include "sg_mesh.h"
#include "sg_nc.h"
#include "sg_ns2d.h"
#include "sg_threads.h"
#include "sg_trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sg_kv_key keys[] = {
    {"out", SG_KV_STRING, "ns2d.nc", "output NetCDF file"},
    {"n", SG_KV_INT, "64", "grid points per side"},
    {"samples", SG_KV_INT, "16", "number of samples (initial conditions)"},
    {"frames", SG_KV_INT, "20", "frames per sample (the first is t = 0)"},
    {"frame_dt", SG_KV_FLOAT, "1.0", "time between frames"},
    {"dt", SG_KV_FLOAT, "1e-3", "solver time step"},
    {"nu", SG_KV_FLOAT, "1e-3", "viscosity"},
    {"forcing", SG_KV_FLOAT, "0.1",
     "forcing amplitude A in A(sin 2pi(x+y) + cos 2pi(x+y))"},
    {"init", SG_KV_STRING, "grf", "initial condition: grf | taylor-green"},
    {"grf_scale", SG_KV_STRING, "code",
     "GRF amplitude: code (the FNO reference generator, 2*7^3 (-lap+49)^-2.5) | text (the paper's printed 7^1.5 (-lap+49)^-2.5)"},
    {"seed", SG_KV_INT, "0", "random seed"},
    {"mesh", SG_KV_STRING, "",
     "device mesh, dims dp (samples), h (y), w (x); default h=<ranks>"},
    {"batch", SG_KV_INT, "16", "samples solved at once per data rank"},
    {"backend", SG_KV_STRING, "auto",
     "NetCDF backend: auto | pnetcdf | netcdf4"},
    {"overwrite", SG_KV_BOOL, "false", "replace an existing output file"},
    {"log_level", SG_KV_STRING, "info", "error | warn | info | debug"},
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

static void usage(sg_kv_t kv) {
  printf(
      "usage: mpiexec -n N sg-ns2d [--config FILE] [--key value ...]\n\n"
      "Generates 2-D Navier-Stokes vorticity data (FNO setup) as NetCDF.\n\n");
  sg_kv_print_help(kv, stdout);
}

static sg_status run(sg_kv_t kv, int wsize) {
  sg_status st = SG_OK;
  sg_mesh_t mesh = NULL;
  sg_ns2d_t ns = NULL;
  sg_nc_t file = NULL;
  double *w = NULL;
  float *wf = NULL;
  double *times = NULL, *coords = NULL;
  char spec[128];
  const char *m = sg_kv_str(kv, "mesh");
  if (*m)
    snprintf(spec, sizeof spec, "%s", m);
  else
    snprintf(spec, sizeof spec, "h=%d", wsize);
  SG_TRY(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  { /* one OpenMP thread per core of the node, shared by its ranks */
    int nth = 1, on_node = 1;
    SG_TRY(sg_threads_auto(MPI_COMM_WORLD, &nth, &on_node));
    sg_log_info("%d rank(s) on this node, %d OpenMP thread(s) per rank",
                on_node, nth);
  }
  /* activation blocks are freed and reallocated every step: keep them */
  if (sg_host_keep_memory() != SG_OK) sg_log_info("%s", sg_last_error());
  for (int d = 0; d < sg_mesh_ndims(mesh); ++d) {
    const char *nm = sg_mesh_dim_name(mesh, d);
    if (strcmp(nm, "dp") && strcmp(nm, "h") && strcmp(nm, "w") &&
        sg_mesh_dim_size(mesh, d) > 1)
      SG_RAISE(SG_ERR_MESH,
               "sg-ns2d: mesh dim '%s' of size %d is not one of dp, h, w", nm,
               sg_mesh_dim_size(mesh, d));
  }
  sg_ns2d_config cfg = {0};
  cfg.n = sg_kv_int(kv, "n");
  cfg.nu = sg_kv_float(kv, "nu");
  cfg.dt = sg_kv_float(kv, "dt");
  cfg.forcing = sg_kv_float(kv, "forcing");
  cfg.seed = (uint64_t)sg_kv_int(kv, "seed");
  const char *init = sg_kv_str(kv, "init");
  if (strcmp(init, "grf") == 0)
    cfg.init = SG_NS2D_INIT_GRF;
  else if (strcmp(init, "taylor-green") == 0)
    cfg.init = SG_NS2D_INIT_TAYLOR_GREEN;
  else
    SG_RAISE(SG_ERR_CONFIG, "--init must be grf or taylor-green, not '%s'",
             init);
  const char *grf_scale = sg_kv_str(kv, "grf_scale");
  if (strcmp(grf_scale, "code") == 0)
    cfg.grf_scale = SG_NS2D_GRF_CODE;
  else if (strcmp(grf_scale, "text") == 0)
    cfg.grf_scale = SG_NS2D_GRF_TEXT;
  else
    SG_RAISE(SG_ERR_CONFIG, "--grf-scale must be code or text, not '%s'",
             grf_scale);
  const int64_t nsamp = sg_kv_int(kv, "samples"),
                nframes = sg_kv_int(kv, "frames");
  const double frame_dt = sg_kv_float(kv, "frame_dt");
  if (cfg.n < 4 || nsamp < 1 || nframes < 1 || cfg.dt <= 0 || frame_dt <= 0 ||
      cfg.nu < 0)
    SG_RAISE(
        SG_ERR_CONFIG,
        "sg-ns2d: need n >= 4, samples >= 1, frames >= 1, dt > 0, frame_dt > 0, nu >= 0");
  const int64_t steps_per_frame = (int64_t)llround(frame_dt / cfg.dt);
  if (fabs((double)steps_per_frame * cfg.dt - frame_dt) > 1e-9 * frame_dt)
    SG_RAISE(SG_ERR_CONFIG, "frame_dt (%g) must be a multiple of dt (%g)",
             frame_dt, cfg.dt);

  /* samples over the data-parallel dim, in chunks of `batch` */
  int dp = sg_mesh_find_dim(mesh, "dp");
  int ndp = dp >= 0 ? sg_mesh_dim_size(mesh, dp) : 1,
      cdp = dp >= 0 ? sg_mesh_coord(mesh, dp) : 0;
  int64_t per = (nsamp + ndp - 1) / ndp;
  int64_t my0 = (int64_t)cdp * (nsamp / ndp) +
                (cdp < nsamp % ndp ? cdp : nsamp % ndp);
  int64_t mine = nsamp / ndp + (cdp < nsamp % ndp);
  int64_t batch = sg_kv_int(kv, "batch");
  if (batch < 1) SG_RAISE(SG_ERR_CONFIG, "--batch must be >= 1");
  if (batch > per) batch = per;
  const int64_t nchunks = (per + batch - 1) / batch;
  SG_TRY(sg_ns2d_create(mesh, &cfg, batch, &ns));
  int64_t y0, ny, x0, nx;
  sg_ns2d_box(ns, &y0, &ny, &x0, &nx);

  /* the file */
  sg_nc_create_opts co = sg_nc_create_opts_default();
  SG_TRY(sg_nc_backend_parse(sg_kv_str(kv, "backend"), &co.backend));
  co.overwrite = sg_kv_bool(kv, "overwrite");
  /* written as <out>.partial and renamed when complete: a run that fails
   * (a full disk) or is killed leaves no file at <out> that reads as a
   * valid dataset */
  co.atomic = 1;
  SG_TRY(sg_nc_create(MPI_COMM_WORLD, sg_kv_str(kv, "out"), &co, &file));
  int vid_t, vid_y, vid_x, vid_w, vid_s;
  times = malloc((size_t)nframes * sizeof *times);
  coords = malloc((size_t)(cfg.n > nsamp ? cfg.n : nsamp) * sizeof *coords);
  if (!times || !coords) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int64_t j = 0; j < nframes; ++j) times[j] = (double)j * frame_dt;
  for (int64_t j = 0; j < nsamp; ++j) coords[j] = (double)j;
  SG_TRY(
      sg_nc_def_coord(file, "sample", nsamp, "1", NULL, NULL, coords, &vid_s));
  SG_TRY(
      sg_nc_def_coord(file, "time", nframes, "1", "time", "T", times, &vid_t));
  for (int64_t j = 0; j < cfg.n; ++j) coords[j] = (double)j / (double)cfg.n;
  SG_TRY(sg_nc_def_coord(file, "y", cfg.n, "1", "projection_y_coordinate", "Y",
                         coords, &vid_y));
  SG_TRY(sg_nc_def_coord(file, "x", cfg.n, "1", "projection_x_coordinate", "X",
                         coords, &vid_x));
  const char *dims[] = {"sample", "time", "y", "x"};
  SG_TRY(sg_nc_def_var(file, "vorticity", SG_DTYPE_F32, 4, dims, NULL, &vid_w));
  sg_nc_cf cf = {"s-1", "vorticity of the velocity field",
                 "atmosphere_relative_vorticity", 0, 0};
  SG_TRY(sg_nc_put_cf(file, vid_w, &cf));
  char hist[512];
  snprintf(hist, sizeof hist, "sg-ns2d (shardgrid %s) on %d ranks, mesh %s",
           SG_VERSION_STRING, wsize, spec);
  SG_TRY(sg_nc_put_global_cf(
      file,
      "2-D incompressible Navier-Stokes, vorticity form, periodic unit square",
      hist, NULL));
  double params[6] = {cfg.nu,      cfg.dt,        frame_dt,
                      cfg.forcing, (double)cfg.n, (double)cfg.seed};
  const char *pnames[6] = {"viscosity",         "solver_dt", "frame_dt",
                           "forcing_amplitude", "grid_n",    "seed"};
  for (int i = 0; i < 6; ++i)
    SG_TRY(sg_nc_put_att(file, SG_NC_GLOBAL, pnames[i], SG_DTYPE_F64, 1,
                         &params[i]));
  SG_TRY(sg_nc_put_att_text(file, SG_NC_GLOBAL, "initial_condition",
                            cfg.init == SG_NS2D_INIT_TAYLOR_GREEN
                                ? "sin(2 pi x) sin(2 pi y)"
                            : cfg.grf_scale == SG_NS2D_GRF_TEXT
                                ? "N(0, 7^1.5 (-Laplacian + 49 I)^-2.5)"
                                : "N(0, 2 7^3 (-Laplacian + 49 I)^-2.5)"));
  SG_TRY(sg_nc_put_att_text(file, SG_NC_GLOBAL, "forcing",
                            "A (sin(2 pi (x + y)) + cos(2 pi (x + y)))"));
  SG_TRY(sg_nc_put_att_text(
      file, SG_NC_GLOBAL, "scheme",
      "pseudo-spectral, Heun + Crank-Nicolson, 2/3 dealiasing"));
  SG_TRY(sg_nc_enddef(file));

  w = malloc((size_t)(batch * ny * nx) * sizeof *w);
  wf = malloc((size_t)(batch * ny * nx) * sizeof *wf);
  if (!w || !wf) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  double t0 = sg_wtime(), tio = 0.0;
  for (int64_t c = 0; c < nchunks; ++c) {
    int64_t s0 = my0 + c * batch;
    int64_t cnt = mine - c * batch;
    cnt = cnt < 0 ? 0 : (cnt > batch ? batch : cnt);
    SG_TRY(sg_ns2d_init_state(ns, s0));
    for (int64_t j = 0; j < nframes; ++j) {
      if (j > 0) SG_TRY(sg_ns2d_step(ns, steps_per_frame));
      SG_TRY(sg_ns2d_vorticity(ns, w));
      for (int64_t q = 0; q < batch * ny * nx; ++q) wf[q] = (float)w[q];
      sg_nc_shard sh = {4,
                        {nsamp, nframes, cfg.n, cfg.n},
                        {cnt ? s0 : 0, j, y0, x0},
                        {cnt, 1, ny, nx},
                        SG_DTYPE_F32};
      double ti = sg_wtime();
      SG_TRY(sg_nc_write(file, vid_w, &sh, wf));
      tio += sg_wtime() - ti;
    }
    sg_log_info("chunk %lld/%lld done (samples %lld.., %.1f s)",
                (long long)(c + 1), (long long)nchunks, (long long)s0,
                sg_wtime() - t0);
  }
  SG_TRY(sg_nc_close(&file));
  double tfft, ttr;
  sg_ns2d_times(ns, &tfft, &ttr);
  sg_log_info(
      "wrote %s: %lld samples x %lld frames of %lldx%lld in %.2f s (fft %.2f s, transposes %.2f s, io %.2f s)",
      sg_kv_str(kv, "out"), (long long)nsamp, (long long)nframes,
      (long long)cfg.n, (long long)cfg.n, sg_wtime() - t0, tfft, ttr, tio);
fail:
  if (file) sg_nc_discard(&file); /* a failure: remove the incomplete file */
  sg_ns2d_destroy(&ns);
  sg_mesh_destroy(&mesh);
  free(w);
  free(wf);
  free(times);
  free(coords);
  return st;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sg_kv_t kv = NULL;
  sg_status st = sg_kv_create(keys, NKEYS, &kv);
  int help = 0;
  for (int i = 1; i < argc; ++i)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) help = 1;
  if (st == SG_OK && help) {
    if (rank == 0) usage(kv);
    sg_kv_destroy(&kv);
    MPI_Finalize();
    return 0;
  }
  const char *skip[] = {NULL};
  if (st == SG_OK) st = sg_kv_parse_args(kv, argc, argv, 1, skip);
  if (st == SG_OK) {
    int lvl = sg_log_parse_level(sg_kv_str(kv, "log_level"));
    if (lvl < 0)
      st = sg_error_set(SG_ERR_CONFIG, __FILE__, __LINE__,
                        "unknown --log-level '%s'", sg_kv_str(kv, "log_level"));
    else
      sg_log_set_level(lvl);
  }
  st = sg_agree(MPI_COMM_WORLD,
                st); /* argument errors are the same everywhere */
  if (st == SG_OK) st = run(kv, size);
  st = sg_agree(MPI_COMM_WORLD, st);
  sg_kv_destroy(&kv);
  if (st != SG_OK) {
    if (rank == 0) sg_die("sg-ns2d", st, 1);
    MPI_Finalize();
    return 1;
  }
  MPI_Finalize();
  return 0;
}
