/* sg-forecast — forecasts from a checkpoint of sg-train, on any mesh.
 *
 *   mpiexec -n 4 sg-forecast --ckpt ck/step_000200.nc --init data.nc \
 *       --init-index 120 --steps 24 --out forecast.nc --mesh h=2,w=2
 *
 * The checkpoint's config names the model (kind and sizes), the variables,
 * the history window, the lead and (written by sg-train since it records
 * them) the grid and the normalisation; the parameters load on any mesh
 * (io/sg_ckpt.h). The initial window is read sharded from --init, the model
 * rolls forward --steps times, its own predictions feeding the window (as
 * sg-train's rollout does: nothing is read past the window, so a forecast
 * may run past the end of the file), and every step is written in parallel
 * to a CF-1.8 file. --ensemble M adds members 1 .. M-1 whose initial
 * conditions carry Gaussian perturbations (--perturb sigma, in units of
 * each variable's training std) drawn from the counter-based RNG at their
 * global indices: the same forecast on every mesh. */
#include "forecast.h"

#include "sg_ckpt.h"
#include "sg_comm.h"
#include "sg_log.h"
#include "sg_rollout_train.h"
#include "train.h" /* SG_CKPT_*_KEY */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const sg_kv_key keys[] = {
    {"ckpt", SG_KV_STRING, "", "checkpoint written by sg-train"},
    {"init", SG_KV_STRING, "", "NetCDF file with the initial conditions"},
    {"init_index", SG_KV_INT, "0",
     "first frame of the initial window (history frames)"},
    {"init_sample", SG_KV_INT, "0",
     "sample of a (sample, time, y, x) init file"},
    {"steps", SG_KV_INT, "0", "forecast steps (each the model's lead)"},
    {"out", SG_KV_STRING, "", "forecast NetCDF file (CF-1.8)"},
    {"mesh", SG_KV_STRING, "", "domain mesh, e.g. h=2,w=2 (default h=ranks)"},
    {"ensemble", SG_KV_INT, "1",
     "members: 0 the control, 1.. perturbed (--perturb)"},
    {"perturb", SG_KV_FLOAT, "0",
     "std of the Gaussian perturbations (units of each variable's std)"},
    {"seed", SG_KV_INT, "0", "seed of the perturbations"},
    {"model", SG_KV_STRING, "",
     "the model kind expected in the checkpoint (default: any)"},
    {"dim_map", SG_KV_STRING, "",
     "map the init file's dim names (default: the checkpoint's)"},
    {"backend", SG_KV_STRING, "auto", "auto | pnetcdf | netcdf4 | serial"},
    {"log_level", SG_KV_STRING, "info", "error | warn | info | debug"},
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

/* The command line's values no forecast can use. Not collective. */
static sg_status check_args(sg_kv_t kv) {
  sg_status st = SG_OK;
  static const char *const need[] = {"ckpt", "init", "out"};
  for (int i = 0; i < 3; ++i)
    if (!*sg_kv_str(kv, need[i]))
      SG_RAISE(SG_ERR_CONFIG, "--%s is required (see --help)", need[i]);
  if (sg_kv_int(kv, "steps") < 1)
    SG_RAISE(SG_ERR_CONFIG, "--steps must be >= 1, not %lld",
             (long long)sg_kv_int(kv, "steps"));
  if (sg_kv_int(kv, "ensemble") < 1 || sg_kv_int(kv, "ensemble") > 4096)
    SG_RAISE(SG_ERR_CONFIG, "--ensemble must be in 1 .. 4096, not %lld",
             (long long)sg_kv_int(kv, "ensemble"));
  const double s = sg_kv_float(kv, "perturb");
  if (!(isfinite(s) && s >= 0.0))
    SG_RAISE(SG_ERR_CONFIG, "--perturb must be a finite number >= 0, not %g",
             s);
  if (sg_kv_int(kv, "init_index") < 0 || sg_kv_int(kv, "init_sample") < 0)
    SG_RAISE(SG_ERR_CONFIG, "--init-index and --init-sample must be >= 0");
fail:
  return st;
}

/* A table of the keys of a config text ("key = value" lines), every key a
 * string, so the checkpoint's config loads whatever program wrote it.
 * names: storage the table points into (freed by the caller). */
static sg_status config_table(const char *text, sg_kv_key **keys_out,
                              int *n_out, char **names) {
  sg_status st = SG_OK;
  int n = 0, cap = 16;
  sg_kv_key *k = malloc((size_t)cap * sizeof *k);
  char *buf = strdup(text);
  if (!k || !buf) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (char *line = buf; line && *line;) {
    char *e = strchr(line, '\n'), *eq = strstr(line, " = ");
    if (e) *e = '\0';
    if (eq && *line != '#') {
      *eq = '\0';
      if (n == cap) {
        sg_kv_key *g = realloc(k, (size_t)(cap *= 2) * sizeof *k);
        if (!g) SG_RAISE(SG_ERR_ALLOC, "out of memory");
        k = g;
      }
      k[n++] = (sg_kv_key){line, SG_KV_STRING, "", NULL};
    }
    line = e ? e + 1 : NULL;
  }
  *keys_out = k;
  *n_out = n;
  *names = buf;
  return SG_OK;
fail:
  free(k);
  free(buf);
  return st;
}

/* "a,b,c" numbers into v[0..n); returns how many were read. */
static int parse_list(const char *s, double *v, int cap) {
  int n = 0;
  for (char *e = NULL; s && *s && n < cap; s = *e == ',' ? e + 1 : e) {
    v[n++] = strtod(s, &e);
    if (e == s) return -1;
  }
  return n;
}

/* The variable list of the config. Not collective. */
static sg_status config_vars(forecast *f, const char *path) {
  sg_status st = SG_OK;
  char list[512];
  snprintf(list, sizeof list, "%s", sg_kv_str(f->cfg, "vars"));
  f->nvars = 0;
  for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
    while (*t == ' ') ++t;
    if (f->nvars == FC_MAX_VARS || strlen(t) >= sizeof f->vars[0])
      SG_RAISE(SG_ERR_CONFIG, "checkpoint %s: bad variable list '%s'", path,
               sg_kv_str(f->cfg, "vars"));
    snprintf(f->vars[f->nvars++], sizeof f->vars[0], "%s", t);
  }
  if (f->nvars == 0)
    SG_RAISE(SG_ERR_CONFIG, "checkpoint %s names no variables (vars)", path);
fail:
  return st;
}

/* The value of a comment line "# key = value" of a config text into buf
 * ("" when absent). */
static void comment_value(const char *text, const char *key, char *buf,
                          size_t size) {
  const size_t kl = strlen(key);
  buf[0] = '\0';
  for (const char *p = text; p && *p;) {
    const char *e = strchr(p, '\n');
    const size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n > kl + 5 && strncmp(p, "# ", 2) == 0 &&
        strncmp(p + 2, key, kl) == 0 && strncmp(p + 2 + kl, " = ", 3) == 0) {
      const size_t vl = n - kl - 5 < size - 1 ? n - kl - 5 : size - 1;
      memcpy(buf, p + kl + 5, vl);
      buf[vl] = '\0';
    }
    p = e ? e + 1 : NULL;
  }
}

/* What the forecast needs from the checkpoint's config: the variables,
 * window, lead, grid and normalisation. Not collective. */
static sg_status config_data(forecast *f, const char *path) {
  sg_status st = SG_OK;
  sg_kv_t c = f->cfg;
  const char *want = sg_kv_str(f->kv, "model"), *have = sg_kv_str(c, "model");
  if (!*have)
    SG_RAISE(SG_ERR_CONFIG,
             "checkpoint %s has no model config (not written by sg-train?)",
             path);
  if (*want && strcmp(want, have) != 0)
    SG_RAISE(SG_ERR_CONFIG, "checkpoint %s holds a '%s' model, not '%s'", path,
             have, want);
  SG_TRY(config_vars(f, path));
  f->history = sg_kv_int(c, "history");
  f->lead = sg_kv_int(c, "lead");
  f->dim_map = *sg_kv_str(f->kv, "dim_map") ? sg_kv_str(f->kv, "dim_map")
                                            : sg_kv_str(c, "dim_map");
  long long gy = 0, gx = 0;
  char grid[64], mean[512], sd[512];
  comment_value(f->cfg_text, SG_CKPT_GRID_KEY, grid, sizeof grid);
  comment_value(f->cfg_text, SG_CKPT_MEAN_KEY, mean, sizeof mean);
  comment_value(f->cfg_text, SG_CKPT_STD_KEY, sd, sizeof sd);
  if (sscanf(grid, "%lld x %lld", &gy, &gx) != 2 ||
      parse_list(mean, f->mean, FC_MAX_VARS) != f->nvars ||
      parse_list(sd, f->std, FC_MAX_VARS) != f->nvars)
    SG_RAISE(
        SG_ERR_CONFIG,
        "checkpoint %s does not record the grid and the data normalisation (# %s, %s, %s): "
        "written by an older sg-train; train again or resume it for one step",
        path, SG_CKPT_GRID_KEY, SG_CKPT_MEAN_KEY, SG_CKPT_STD_KEY);
  f->ny_g = gy, f->nx_g = gx;
  if (f->history < 1 || f->lead < 1)
    SG_RAISE(SG_ERR_CONFIG, "checkpoint %s: history %lld, lead %lld", path,
             (long long)f->history, (long long)f->lead);
fail:
  return st;
}

/* The checkpoint's metadata and config. Collective. */
static sg_status load_config(forecast *f) {
  sg_status st = SG_OK;
  const char *path = sg_kv_str(f->kv, "ckpt");
  sg_ckpt_meta meta;
  memset(&meta, 0, sizeof meta);
  int nk = 0;
  SG_TRY(sg_ckpt_read(MPI_COMM_WORLD, path, 0, NULL, &meta));
  f->ckpt_step = meta.step;
  f->cfg_text = meta.config ? meta.config : strdup("");
  meta.config = NULL;
  st = f->cfg_text ? config_table(f->cfg_text, &f->cfg_keys, &nk, &f->cfg_names)
                   : SG_ERR_ALLOC;
  if (st == SG_OK) st = sg_kv_create(f->cfg_keys, nk, &f->cfg);
  if (st == SG_OK) st = sg_kv_load_string(f->cfg, f->cfg_text, path);
  if (st == SG_OK) st = config_data(f, path);
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
fail:
  return st;
}

/* The mesh (domain dims only), the model of the checkpoint's config for
 * `members` samples, its parameters read from the checkpoint. Collective. */
static sg_status build_model(forecast *f) {
  sg_status st = SG_OK;
  sg_param_info *tab = NULL;
  sg_var **vars = NULL;
  sg_ckpt_array *arr = NULL;
  int narr = 0;
  const char *m = sg_kv_str(f->kv, "mesh");
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (*m)
    snprintf(f->mesh_spec, sizeof f->mesh_spec, "%s", m);
  else
    snprintf(f->mesh_spec, sizeof f->mesh_spec, "h=%d", size);
  SG_TRY(sg_mesh_create(MPI_COMM_WORLD, f->mesh_spec, &f->mesh));
  sg_parallel_config pc = sg_parallel_defaults();
  const char *pd = sg_kv_str(f->cfg, "param_dtype"); /* the training's */
  if (*pd && sg_dtype_parse(pd, &pc.param_dtype) != SG_OK)
    SG_RAISE(SG_ERR_CONFIG, "checkpoint: unknown param_dtype '%s'", pd);
  sg_parallel_mesh_info mi;
  SG_TRY(sg_parallel_check_mesh(f->mesh, &pc, &mi));
  if (mi.data_size > 1)
    SG_RAISE(SG_ERR_CONFIG,
             "sg-forecast splits the domain only: mesh '%s' has data-parallel "
             "dims (use h and w)",
             f->mesh_spec);
  SG_TRY(sg_mesh_group(f->mesh, mi.domain_dims, &f->domain));
  sg_model_config mc;
  SG_TRY(sg_agree(MPI_COMM_WORLD, sg_model_config_from_kv(f->cfg, &mc)));
  if (mc.kind == SG_MODEL_FNO3D || sg_kv_int(f->cfg, "out_frames") > 1)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "sg-forecast rolls out one frame at a time: a checkpoint of a "
             "model predicting several frames at once (fno3d, out_frames > "
             "1) is not supported yet");
  mc.cin = f->nvars * f->history;
  mc.cout = f->nvars;
  mc.act_ckpt_every = 0; /* no backward here */
  SG_TRY(
      sg_agree(MPI_COMM_WORLD, sg_model_create(f->mesh, &mc, f->ny_g, f->nx_g,
                                               f->members, &f->model)));
  sg_model_box(f->model, &f->y0, &f->ny, &f->x0, &f->nx);
  const int np = sg_model_params(f->model, &vars);
  tab = calloc((size_t)np + 1, sizeof *tab);
  st = tab ? SG_OK : SG_ERR_ALLOC;
  for (int i = 0; i < np && st == SG_OK; ++i)
    st = sg_model_param_info(f->model, i, &tab[i]);
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  SG_TRY(sg_parallel_create(f->mesh, &pc, np, tab,
                            sg_model_param_count(f->model), &f->plan));
  SG_TRY(sg_model_bind(f->model, sg_parallel_params(f->plan),
                       sg_parallel_grads(f->plan)));
  SG_TRY(sg_tape_create(&f->tape));
  SG_TRY(sg_parallel_ckpt_arrays(f->plan, 0, &arr, &narr));
  SG_TRY(
      sg_ckpt_read(MPI_COMM_WORLD, sg_kv_str(f->kv, "ckpt"), narr, arr, NULL));
fail:
  free(tab);
  return st;
}

/* One step: the model's prediction of the next frame of every member
 * (no tape kept). Collective over the domain. */
static sg_status predict(forecast *f) {
  sg_status st = SG_OK;
  const int64_t xs[4] = {f->members, f->history * f->nvars, f->ny, f->nx};
  sg_var xv, *y = NULL;
  memset(&xv, 0, sizeof xv);
  int prev = sg_tape_set_grad_enabled(f->tape, 0);
  SG_TRY(sg_var_init(&xv, "x", SG_DTYPE_F32, 4, xs, f->x, 0));
  SG_TRY(sg_model_forward(f->model, f->tape, &xv, &y));
  memcpy(f->pred, y->value.data,
         (size_t)(f->members * f->nvars * f->ny * f->nx) * sizeof *f->pred);
fail:
  sg_tape_clear(f->tape);
  sg_tape_set_grad_enabled(f->tape, prev);
  sg_var_release(&xv);
  return st;
}

static sg_status run(forecast *f) {
  sg_status st = SG_OK;
  fc_out *out = NULL;
  SG_TRY(sg_agree(MPI_COMM_WORLD, check_args(f->kv)));
  f->steps = sg_kv_int(f->kv, "steps");
  f->members = sg_kv_int(f->kv, "ensemble");
  sg_comm_set_deterministic(1); /* the same forecast on every mesh */
  SG_TRY(load_config(f));
  SG_TRY(build_model(f));
  const int64_t fr = f->nvars * f->ny * f->nx;
  f->x = malloc((size_t)(f->members * f->history * fr + 1) * sizeof *f->x);
  f->mask = malloc((size_t)(f->members * fr + 1) * sizeof *f->mask);
  f->pred = malloc((size_t)(f->members * fr + 1) * sizeof *f->pred);
  st = f->x && f->mask && f->pred
           ? SG_OK
           : sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  SG_TRY(fc_read_init(f));
  SG_TRY(fc_out_open(f, &out));
  for (int64_t k = 0; k < f->steps; ++k) {
    SG_TRY(sg_agree(MPI_COMM_WORLD, predict(f)));
    SG_TRY(fc_out_write(f, out, k));
    sg_train_feed_back(f->x, f->pred, f->mask, f->members, f->history, fr);
  }
  st = fc_out_close(&out, 1);
  if (st == SG_OK && f->rank == 0)
    printf("sg-forecast: %lld step(s) of %lld member(s) from %s (step %lld) "
           "written to %s\n",
           (long long)f->steps, (long long)f->members, sg_kv_str(f->kv, "ckpt"),
           (long long)f->ckpt_step, sg_kv_str(f->kv, "out"));
fail:
  if (out) fc_out_close(&out, 0);
  return st;
}

/* The CF history attribute: "<UTC time>: sg-forecast <arguments>". */
static void history(forecast *f, int argc, char **argv) {
  char *h = f->history_att;
  const size_t cap = sizeof f->history_att;
  const time_t now = time(NULL);
  struct tm tm;
  size_t n = strftime(h, cap, "%Y-%m-%dT%H:%M:%SZ: sg-forecast",
                      gmtime_r(&now, &tm));
  for (int i = 1; i < argc && n + 2 < cap; ++i)
    n += (size_t)snprintf(h + n, cap - n, " %s", argv[i]);
}

static void cleanup(forecast *f) {
  free(f->x);
  free(f->mask);
  free(f->pred);
  free(f->cfg_text);
  sg_tape_destroy(&f->tape);
  sg_model_destroy(&f->model);
  sg_parallel_destroy(&f->plan);
  sg_mesh_destroy(&f->mesh);
  sg_kv_destroy(&f->cfg);
  free(f->cfg_keys);
  free(f->cfg_names);
  sg_kv_destroy(&f->kv);
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  forecast f;
  memset(&f, 0, sizeof f);
  MPI_Comm_rank(MPI_COMM_WORLD, &f.rank);
  sg_status st = sg_kv_create(keys, NKEYS, &f.kv);
  for (int i = 1; i < argc && st == SG_OK; ++i)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      if (f.rank == 0) {
        printf("usage: mpiexec -n N sg-forecast --ckpt F --init data.nc "
               "--steps N --out forecast.nc [--key value ...]\n\n");
        sg_kv_print_help(f.kv, stdout);
      }
      sg_kv_destroy(&f.kv);
      MPI_Finalize();
      return 0;
    }
  if (st == SG_OK) st = sg_kv_parse_args(f.kv, argc, argv, 1, NULL);
  history(&f, argc, argv);
  if (st == SG_OK) {
    const int lvl = sg_log_parse_level(sg_kv_str(f.kv, "log_level"));
    if (lvl < 0)
      st = sg_error_set(SG_ERR_CONFIG, __FILE__, __LINE__,
                        "unknown --log-level '%s'",
                        sg_kv_str(f.kv, "log_level"));
    else
      sg_log_set_level(lvl);
  }
  st = sg_agree(MPI_COMM_WORLD, st);
  if (st == SG_OK) st = sg_agree(MPI_COMM_WORLD, run(&f));
  if (sg_timed_out()) sg_die("sg-forecast", st, 1);
  cleanup(&f);
  if (st != SG_OK) sg_die("sg-forecast", st, 1); /* every rank says why */
  MPI_Finalize();
  return 0;
}
