/* sg-forecast — internal interfaces: the forecast's state (main.c), the
 * initial conditions (init.c) and the CF output file (output.c). */
#ifndef SG_FORECAST_H
#define SG_FORECAST_H

#include <stdint.h>

#include "sg_kv.h"
#include "sg_mesh.h"
#include "sg_model.h"
#include "sg_nc.h"
#include "sg_parallel.h"
#include "sg_status.h"

#define FC_MAX_VARS 8

typedef struct forecast {
  sg_kv_t kv;  /* the command line */
  sg_kv_t cfg; /* the checkpoint's config (its own keys) */
  char *cfg_text;
  sg_kv_key *cfg_keys; /* cfg's table, and the names it points into */
  char *cfg_names;
  int64_t ckpt_step;
  char mesh_spec[128];
  sg_mesh_t mesh;
  sg_group_t domain;
  sg_parallel_t plan;
  sg_model_t model;
  sg_tape_t tape;
  /* the data: variables, dim map, window, grid and normalisation */
  int nvars;
  char vars[FC_MAX_VARS][64];
  const char *dim_map;
  int64_t history, lead, ny_g, nx_g;
  int64_t y0, ny, x0, nx; /* this rank's box */
  double mean[FC_MAX_VARS], std[FC_MAX_VARS];
  /* the run */
  int64_t members, steps;
  float *x;    /* (members, history * nvars, ny, nx), normalised */
  float *mask; /* (members, nvars, ny, nx): validity of the newest frame */
  float *pred; /* (members, nvars, ny, nx) */
  int rank;
  char history_att[2048]; /* CF history: when, and the command line */
} forecast;

/* init.c: the initial window (frames init_index .. + history - 1 of the
 * init file, sample init_sample of a (sample, time, y, x) file) of every
 * member into f->x (normalised, 0 at masked points) and f->mask, members
 * 1.. perturbed by --perturb (Gaussian, a function of the global index:
 * the same on every mesh). Collective. */
sg_status fc_read_init(forecast *f);

/* output.c: the forecast file (CF-1.8): time, [member], lat/y, lon/x; the
 * variables with the input's units and long_name; provenance. */
typedef struct fc_out fc_out;
sg_status fc_out_open(forecast *f, fc_out **out);
/* Step k's prediction (f->pred, normalised) in physical units, masked
 * points as _FillValue. Collective. */
sg_status fc_out_write(forecast *f, fc_out *out, int64_t k);
sg_status fc_out_close(fc_out **out, int ok);

/* The file's name of a dim that dim_map ("FROM=to,...") maps to `name`,
 * or name itself. */
void fc_dim_file_name(const char *dim_map, const char *name, char *buf,
                      size_t size);
/* Open the init file (the checkpoint's backend, dim map). Collective. */
sg_status fc_open_init(const forecast *f, sg_nc_t *nc);

#endif /* SG_FORECAST_H */
