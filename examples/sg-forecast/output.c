/* sg-forecast — the forecast file: CF-1.8, written in parallel (each rank
 * its box of every step), with the coordinates, units and names of the
 * init file and the provenance of the forecast. */
#include "forecast.h"

#include "sg_comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct fc_out {
  sg_nc_t nc;
  int vid[FC_MAX_VARS];
  float fill[FC_MAX_VARS];
  float *buf; /* (nvars, members, ny, nx) */
};

/* A coordinate of the init file (by its mapped dim name): values (n, all
 * of them, malloc'd) and units; *values NULL when the file has none.
 * Collective. */
typedef struct coord {
  double *values;
  char units[256], calendar[64];
} coord;

static sg_status read_coord(const forecast *f, sg_nc_t nc, const char *dim,
                            int64_t n, coord *c) {
  sg_status st = SG_OK;
  char name[SG_NC_NAME_MAX];
  sg_nc_var_info ci;
  memset(c, 0, sizeof *c);
  fc_dim_file_name(f->dim_map, dim, name, sizeof name);
  if (sg_nc_inq_var(nc, name, &ci) != SG_OK || ci.ndims != 1 ||
      ci.shape[0] != n)
    return SG_OK; /* none: the same on every rank (the header) */
  if (sg_nc_has_att(nc, ci.varid, "units"))
    sg_nc_get_att_text(nc, ci.varid, "units", c->units, sizeof c->units);
  if (sg_nc_has_att(nc, ci.varid, "calendar"))
    sg_nc_get_att_text(nc, ci.varid, "calendar", c->calendar,
                       sizeof c->calendar);
  c->values = malloc((size_t)n * sizeof *c->values);
  st = c->values ? SG_OK
                 : sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "no memory");
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  sg_nc_shard sh = {1, {n}, {0}, {n}, SG_DTYPE_F64};
  sg_nc_read_opts ro = sg_nc_read_opts_default();
  ro.no_mask = 1;
  SG_TRY(sg_nc_read(nc, ci.varid, &sh, &ro, c->values, NULL));
fail:
  return st;
}

/* The forecast's valid times: the time of the window's newest frame plus
 * (k + 1) * lead times the file's time step (its first two times), in the
 * file's units; without a time coordinate, (k + 1) * lead frames. */
static void valid_times(const forecast *f, const coord *t, int64_t T,
                        double *out) {
  const int64_t i0 = sg_kv_int(f->kv, "init_index") + f->history - 1;
  const double t0 = t->values ? t->values[i0] : 0.0,
               dt = t->values && T > 1 ? t->values[1] - t->values[0] : 1.0;
  for (int64_t k = 0; k < f->steps; ++k)
    out[k] = t0 + (double)((k + 1) * f->lead) * dt;
}

/* Dims and coordinates: time, [member], lat/y, lon/x (the init file's
 * names after dim_map when they are lat and lon). dims[] gets the names of
 * a variable's dims. Collective. */
static sg_status def_coords(forecast *f, sg_nc_t in, const sg_nc_var_info *vi,
                            fc_out *o, const char **dims, int *nd) {
  sg_status st = SG_OK;
  const int d = vi->ndims - 3;
  coord c[3];
  memset(c, 0, sizeof c);
  double *t = malloc((size_t)f->steps * sizeof *t);
  st = t ? SG_OK : sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "no memory");
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  for (int k = 0; k < 3; ++k)
    SG_TRY(read_coord(f, in, vi->dim_names[d + k], vi->shape[d + k], &c[k]));
  valid_times(f, &c[0], vi->shape[d], t);
  int id;
  SG_TRY(sg_nc_def_coord(o->nc, "time", f->steps,
                         c[0].values ? c[0].units : "1", "time", "T", t, &id));
  if (*c[0].calendar)
    SG_TRY(sg_nc_put_att_text(o->nc, id, "calendar", c[0].calendar));
  SG_TRY(sg_nc_put_att_text(o->nc, id, "long_name",
                            c[0].values ? "valid time" : "lead (frames)"));
  *nd = 0;
  dims[(*nd)++] = "time";
  if (f->members > 1) {
    double *mv = malloc((size_t)f->members * sizeof *mv);
    for (int64_t m = 0; mv && m < f->members; ++m) mv[m] = (double)m;
    st = mv ? sg_nc_def_coord(o->nc, "member", f->members, NULL, NULL, NULL, mv,
                              &id)
            : SG_ERR_ALLOC;
    free(mv);
    SG_TRY(st);
    SG_TRY(sg_nc_put_att_text(o->nc, id, "long_name",
                              "ensemble member (0: control)"));
    dims[(*nd)++] = "member";
  }
  static const char *const geo[2][4] = {
      {"lat", "degrees_north", "latitude", "Y"},
      {"lon", "degrees_east", "longitude", "X"}};
  for (int k = 0; k < 2; ++k) {
    const int is_geo = strcasecmp(vi->dim_names[d + 1 + k], geo[k][0]) == 0;
    const char *name = is_geo ? geo[k][0] : (k ? "x" : "y");
    const coord *ck = &c[1 + k];
    SG_TRY(sg_nc_def_coord(o->nc, name, vi->shape[d + 1 + k],
                           *ck->units ? ck->units : (is_geo ? geo[k][1] : NULL),
                           is_geo ? geo[k][2] : NULL, geo[k][3], ck->values,
                           &id));
    dims[(*nd)++] = name;
  }
fail:
  for (int k = 0; k < 3; ++k) free(c[k].values);
  free(t);
  return st;
}

/* The text attribute `name` of variable vid of the init file into buf
 * ("" when absent). Not collective. */
static void att_text(sg_nc_t in, int vid, const char *name, char *buf,
                     size_t cap) {
  buf[0] = '\0';
  if (sg_nc_has_att(in, vid, name)) sg_nc_get_att_text(in, vid, name, buf, cap);
}

/* The forecast variables: the init file's units and long_name, its
 * _FillValue (else 1e20) at masked points. Collective. */
static sg_status def_vars(forecast *f, sg_nc_t in, fc_out *o, const char **dims,
                          int nd) {
  sg_status st = SG_OK;
  for (int v = 0; v < f->nvars; ++v) {
    sg_nc_var_info vi;
    SG_TRY(sg_nc_inq_var(in, f->vars[v], &vi));
    char units[256], lname[256];
    att_text(in, vi.varid, "units", units, sizeof units);
    att_text(in, vi.varid, "long_name", lname, sizeof lname);
    double fill = 1e20;
    int64_t n = 0;
    if (sg_nc_has_att(in, vi.varid, "_FillValue"))
      sg_nc_get_att_f64(in, vi.varid, "_FillValue", &fill, 1, &n);
    o->fill[v] = (float)fill;
    SG_TRY(sg_nc_def_var(o->nc, f->vars[v], SG_DTYPE_F32, nd, dims, NULL,
                         &o->vid[v]));
    const sg_nc_cf cf = {*units ? units : NULL, *lname ? lname : f->vars[v],
                         NULL, 1, (double)o->fill[v]};
    SG_TRY(sg_nc_put_cf(o->nc, o->vid[v], &cf));
  }
fail:
  return st;
}

/* Global attributes: CF-1.8, the model config, the checkpoint and its
 * step, the initial conditions, the ensemble, the history. Collective. */
static sg_status def_globals(forecast *f, sg_nc_t nc) {
  sg_status st = SG_OK;
  SG_TRY(sg_nc_put_global_cf(nc, "sg-forecast forecast", f->history_att,
                             "CF-1.8"));
  SG_TRY(sg_nc_put_att_text(nc, SG_NC_GLOBAL, "source",
                            "shardgrid sg-forecast (model rolled forward "
                            "from a checkpoint of sg-train)"));
  SG_TRY(sg_nc_put_att_text(nc, SG_NC_GLOBAL, "model",
                            sg_kv_str(f->cfg, "model")));
  SG_TRY(sg_nc_put_att_text(nc, SG_NC_GLOBAL, "model_config", f->cfg_text));
  SG_TRY(sg_nc_put_att_text(nc, SG_NC_GLOBAL, "checkpoint",
                            sg_kv_str(f->kv, "ckpt")));
  SG_TRY(sg_nc_put_att(nc, SG_NC_GLOBAL, "checkpoint_step", SG_DTYPE_I64, 1,
                       &f->ckpt_step));
  SG_TRY(sg_nc_put_att_text(nc, SG_NC_GLOBAL, "initial_conditions",
                            sg_kv_str(f->kv, "init")));
  const int64_t iv[5] = {sg_kv_int(f->kv, "init_index"),
                         sg_kv_int(f->kv, "init_sample"), f->lead,
                         sg_kv_int(f->kv, "seed"), f->members};
  static const char *const in[5] = {"init_index", "init_sample", "lead_frames",
                                    "perturbation_seed", "ensemble_size"};
  for (int k = 0; k < 5; ++k)
    SG_TRY(sg_nc_put_att(nc, SG_NC_GLOBAL, in[k], SG_DTYPE_I64, 1, &iv[k]));
  const double sigma = sg_kv_float(f->kv, "perturb");
  SG_TRY(sg_nc_put_att(nc, SG_NC_GLOBAL, "perturbation_std", SG_DTYPE_F64, 1,
                       &sigma));
fail:
  return st;
}

sg_status fc_out_open(forecast *f, fc_out **out) {
  sg_status st = SG_OK;
  sg_nc_t in = NULL;
  fc_out *o = calloc(1, sizeof *o);
  const int64_t n = f->nvars * f->members * f->ny * f->nx;
  if (o) o->buf = malloc((size_t)(n + 1) * sizeof *o->buf);
  st = o && o->buf
           ? SG_OK
           : sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "no memory");
  SG_TRY(sg_agree(MPI_COMM_WORLD, st));
  SG_TRY(fc_open_init(f, &in));
  sg_nc_var_info vi;
  SG_TRY(sg_nc_inq_var(in, f->vars[0], &vi)); /* checked by fc_read_init */
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.overwrite = 1;
  co.atomic = 1; /* out holds a whole forecast or nothing */
  SG_TRY(sg_nc_create(MPI_COMM_WORLD, sg_kv_str(f->kv, "out"), &co, &o->nc));
  const char *dims[4];
  int nd = 0;
  SG_TRY(def_coords(f, in, &vi, o, dims, &nd));
  SG_TRY(def_vars(f, in, o, dims, nd));
  SG_TRY(def_globals(f, o->nc));
  SG_TRY(sg_nc_enddef(o->nc));
fail:
  sg_nc_close(&in);
  *out = o;
  return st;
}

sg_status fc_out_write(forecast *f, fc_out *o, int64_t k) {
  const int64_t V = f->nvars, M = f->members, plane = f->ny * f->nx;
  sg_nc_shard sh[FC_MAX_VARS];
  const void *data[FC_MAX_VARS];
  for (int64_t v = 0; v < V; ++v) {
    float *b = o->buf + v * M * plane;
    for (int64_t m = 0; m < M; ++m) {
      const float *p = f->pred + (m * V + v) * plane,
                  *mk = f->mask + (m * V + v) * plane;
      for (int64_t i = 0; i < plane; ++i)
        b[m * plane + i] = mk[i] != 0.0f
                               ? (float)(p[i] * f->std[v] + f->mean[v])
                               : o->fill[v];
    }
    sg_nc_shard s = {M > 1 ? 4 : 3, {0}, {0}, {0}, SG_DTYPE_F32};
    const int64_t g[4] = {f->steps, M, f->ny_g, f->nx_g},
                  st0[4] = {k, 0, f->y0, f->x0}, c[4] = {1, M, f->ny, f->nx};
    for (int a = 0, j = 0; a < 4; ++a) {
      if (a == 1 && M == 1) continue;
      s.global_shape[j] = g[a], s.start[j] = st0[a], s.count[j] = c[a];
      ++j;
    }
    sh[v] = s;
    data[v] = b;
  }
  return sg_nc_write_many(o->nc, (int)V, o->vid, sh, data);
}

sg_status fc_out_close(fc_out **out, int ok) {
  sg_status st = SG_OK;
  fc_out *o = *out;
  if (!o) return SG_OK;
  if (o->nc) st = ok ? sg_nc_close(&o->nc) : sg_nc_discard(&o->nc);
  free(o->buf);
  free(o);
  *out = NULL;
  return st;
}
