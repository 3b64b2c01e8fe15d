/* shardgrid — one interface over the model zoo: the handle dispatches
 * through the model tables (sg_model_impl.h) of a registry. */
#include "sg_model.h"

#include "sg_model_impl.h"

#include "autograd_impl.h" /* ag_mem_* (the faked device of the tests) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MODELS_MAX = 16 };

/* The registry: the built-ins first, in the order of sg_model_kind. */
static const sg_model_i *registry[MODELS_MAX] = {
    &sg_fno_model_i, &sg_cnn_model_i,   &sg_unet_model_i,
    &sg_vit_model_i, &sg_fno3d_model_i, &sg_swin_model_i};
static int nregistry = SG_MODEL_COUNT;

#define MODEL_MAX_CONSTS 8

struct sg_model {
  sg_model_config cfg;
  const sg_model_i *i;
  void *impl;
  sg_device dev;                     /* sg_model_set_device (host: none) */
  void *const_mem[MODEL_MAX_CONSTS]; /* the constants' copies on dev */
  int nconst_mem;
};

sg_status sg_model_register(const sg_model_i *m) {
  sg_status st = SG_OK;
  if (!m || !m->name || !*m->name || !m->size_keys || !m->defaults ||
      !m->create || !m->destroy || !m->param_count || !m->param_info ||
      !m->bind || !m->init || !m->params || !m->box || !m->describe ||
      !m->forward)
    SG_RAISE(
        SG_ERR_INVALID_ARG,
        "sg_model_register: a name, size_keys and every function but mark and "
        "collective_seconds are required");
  for (int k = 0; k < nregistry; ++k)
    if (strcmp(registry[k]->name, m->name) == 0)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "sg_model_register: a model named '%s' is registered already",
               m->name);
  if (nregistry == MODELS_MAX)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_model_register: %d models already",
             MODELS_MAX);
  registry[nregistry++] = m;
fail:
  return st;
}

const char *sg_model_kind_name(sg_model_kind k) {
  return (int)k >= 0 && (int)k < nregistry ? registry[k]->name : "invalid";
}

sg_status sg_model_kind_parse(const char *name, sg_model_kind *k) {
  char names[256] = "";
  size_t o = 0;
  for (int i = 0; i < nregistry; ++i) {
    if (name && strcmp(name, registry[i]->name) == 0) {
      *k = (sg_model_kind)i;
      return SG_OK;
    }
    o += (size_t)snprintf(names + o, o < sizeof names ? sizeof names - o : 0,
                          "%s%s",
                          i == 0               ? ""
                          : i == nregistry - 1 ? " or "
                                               : ", ",
                          registry[i]->name);
    if (o >= sizeof names) o = sizeof names - 1;
  }
  return sg_error_set(SG_ERR_CONFIG, __FILE__, __LINE__,
                      "unknown model '%s' (choose %s)", name ? name : "(null)",
                      names);
}

sg_model_config sg_model_defaults(sg_model_kind kind) {
  sg_model_config c;
  memset(&c, 0, sizeof c);
  c.cin = c.cout = 1;
  c.add_grid = 1;
  c.act = SG_ACT_GELU;
  c.pad[0] = c.pad[1] = SG_PAD_PERIODIC;
  /* every model's fields get its defaults; the kind's own come last and
   * win where fields are shared (width, proj_width, ...) */
  for (int i = 0; i < nregistry; ++i)
    if (i != (int)kind) registry[i]->defaults(&c);
  if ((int)kind >= 0 && (int)kind < nregistry) registry[kind]->defaults(&c);
  c.kind = kind;
  return c;
}

sg_status sg_model_destroy(sg_model_t *model) {
  if (!model || !*model) return SG_OK;
  struct sg_model *m = *model;
  if (m->impl) m->i->destroy(m->impl);
  for (int k = 0; k < m->nconst_mem; ++k) ag_mem_free(m->dev, &m->const_mem[k]);
  free(m);
  *model = NULL;
  return SG_OK;
}

sg_status sg_model_sp_check(sg_mesh_t mesh, const char *model) {
  for (int k = 0; k < sg_mesh_ndims(mesh); ++k) {
    const char *nm = sg_mesh_dim_name(mesh, k);
    const int sz = sg_mesh_dim_size(mesh, k);
    if ((!strcmp(nm, "sp") || !strcmp(nm, "cp")) && sz > 1 &&
        strcmp(model, "vit"))
      return sg_error_set(
          SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
          "%s: mesh dim '%s' (size %d) splits the token sequence: sequence "
          "parallelism is built for the vit only (split %s with dp, fsdp, "
          "h or w instead)",
          model, nm, sz, model);
  }
  return SG_OK;
}

sg_status sg_model_create(sg_mesh_t mesh, const sg_model_config *c, int64_t ny,
                          int64_t nx, int64_t batch, sg_model_t *out) {
  sg_status st = SG_OK;
  struct sg_model *m = NULL;
  if (!mesh || !c || !out)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_model_create: NULL argument");
  *out = NULL;
  if ((int)c->kind < 0 || (int)c->kind >= nregistry)
    SG_RAISE(SG_ERR_CONFIG, "sg_model_create: unknown model kind %d",
             (int)c->kind);
  SG_TRY(sg_model_sp_check(mesh, registry[c->kind]->name));
  m = calloc(1, sizeof *m);
  if (!m) SG_RAISE(SG_ERR_ALLOC, "sg_model_create: out of memory");
  m->cfg = *c;
  m->i = registry[c->kind];
  SG_TRY(m->i->create(mesh, c, ny, nx, batch, &m->impl));
  *out = m;
  return SG_OK;
fail:
  sg_model_destroy(&m);
  return st;
}

sg_model_kind sg_model_kind_of(sg_model_t m) { return m->cfg.kind; }

const char *const *sg_model_size_keys(sg_model_t m) {
  return m ? m->i->size_keys : NULL;
}

int64_t sg_model_param_count(sg_model_t m) {
  return m ? m->i->param_count(m->impl) : 0;
}

sg_status sg_model_bind(sg_model_t m, float *params, float *grads) {
  if (!m)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_model_bind: NULL model");
  return m->i->bind(m->impl, params, grads);
}

sg_status sg_model_init(sg_model_t m, uint64_t seed) {
  if (!m)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_model_init: NULL model");
  return m->i->init(m->impl, seed);
}

int sg_model_params(sg_model_t m, sg_var ***vars) {
  return m->i->params(m->impl, vars);
}

sg_status sg_model_param_info(sg_model_t m, int i, sg_param_info *pi) {
  if (!m || !pi)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_model_param_info: NULL argument");
  return m->i->param_info(m->impl, i, pi);
}

int64_t sg_model_param_offset(sg_model_t m, const sg_var *p) {
  sg_var **vars = NULL;
  const int n = sg_model_params(m, &vars);
  for (int i = 0; i < n; ++i) {
    sg_param_info pi;
    if (vars[i] == p && sg_model_param_info(m, i, &pi) == SG_OK)
      return pi.offset;
  }
  return -1;
}

void sg_model_box(sg_model_t m, int64_t *y0, int64_t *ny, int64_t *x0,
                  int64_t *nx) {
  m->i->box(m->impl, y0, ny, x0, nx);
}

void sg_model_describe(sg_model_t m, char *buf, size_t size) {
  m->i->describe(m->impl, &m->cfg, buf, size);
}

sg_status sg_model_mark(sg_model_t m, sg_var *v) {
  if (!m)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_model_mark: NULL model");
  return m->i->mark ? m->i->mark(m->impl, v) : SG_OK;
}

sg_status sg_model_set_device(sg_model_t m, sg_device dev) {
  sg_status st = SG_OK;
  sg_var **vars = NULL, *consts[MODEL_MAX_CONSTS];
  if (!m) SG_RAISE(SG_ERR_INVALID_ARG, "sg_model_set_device: NULL model");
  if (dev.kind == SG_DEVICE_HOST) goto fail;
  if (!m->i->device_ok)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "model %s does not run on %s yet (fno, fno3d and cnn do; "
             "issue 22)",
             m->i->name, sg_device_kind_name(dev.kind));
  if (m->nconst_mem > 0 || m->dev.kind != SG_DEVICE_HOST)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_model_set_device: model %s is on %s "
             "already",
             m->i->name, sg_device_kind_name(m->dev.kind));
  const int np = sg_model_params(m, &vars);
  const int nc = m->i->constants
                     ? m->i->constants(m->impl, consts, MODEL_MAX_CONSTS)
                     : 0;
  /* sharded variables (a split grid's grid channels) move their local
   * box: the tape runs the ops on sharded device variables or refuses
   * them by name (sg_op_device_sharded_at) */
  for (int i = 0; i < np; ++i) SG_TRY(sg_var_set_device(vars[i], dev));
  m->dev = dev;
  for (int k = 0; k < nc; ++k) { /* a copy on dev: the host one stays */
    sg_var *v = consts[k];
    const size_t nb = ag_nbytes(&v->value);
    void *d = NULL;
    SG_TRY(ag_mem_alloc(dev, nb, 0, &d));
    m->const_mem[m->nconst_mem++] = d;
    SG_TRY(ag_mem_copy(dev, d, v->value.device, v->value.data, nb));
    v->value.data = d;
    SG_TRY(sg_var_set_device(v, dev));
  }
fail:
  return st;
}

sg_status sg_model_forward(sg_model_t m, sg_tape_t t, sg_var *x, sg_var **y) {
  if (!m)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_model_forward: NULL model");
  return m->i->forward(m->impl, t, x, y);
}

int sg_model_nblocks(sg_model_t m) {
  return m && m->i->nblocks && m->i->block_params && m->i->forward_blocks
             ? m->i->nblocks(m->impl)
             : 0;
}

void sg_model_block_params(sg_model_t m, int k, int *first, int *count) {
  *first = *count = 0;
  if (sg_model_nblocks(m) > 0) m->i->block_params(m->impl, k, first, count);
}

sg_status sg_model_forward_blocks(sg_model_t m, sg_tape_t t, int first,
                                  int count, sg_bundle *io) {
  if (sg_model_nblocks(m) <= 0)
    return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                        "model %s has no pipeline pieces yet",
                        m ? m->i->name : "(null)");
  return m->i->forward_blocks(m->impl, t, first, count, io);
}

sg_status sg_model_bundle_one(const sg_bundle *io, const char *model) {
  if (!io || io->n != 1 || !io->v[0])
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "%s: the pieces pass one tensor, not a bundle of %d",
                        model, io ? io->n : 0);
  return SG_OK;
}

double sg_model_collective_seconds(sg_model_t m) {
  return m && m->i->collective_seconds ? m->i->collective_seconds(m->impl)
                                       : 0.0;
}
