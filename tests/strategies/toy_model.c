/* The toy model of the parallel-plan tests (toy_model.h). */
#include "toy_model.h"

#include "sg_dist_loss.h"

#include <math.h>
#include <string.h>

static const int64_t shapes[NP][2] = {
    {HID, CIN}, {HID, 1}, {COUT, HID}, {COUT, 1}};
static const int ndims[NP] = {2, 1, 2, 1};
static const char *const names[NP] = {"w1", "b1", "w2", "b2"};

int64_t toy_numel(int i) {
  return shapes[i][0] * (ndims[i] > 1 ? shapes[i][1] : 1);
}

static float sample(int64_t s, int64_t c, int64_t k, int which) {
  return (float)sin(0.37 * (double)(s * 31 + c * 7 + k) + 1.1 * which);
}

sg_status toy_create_cfg(sg_mesh_t mesh, const sg_parallel_config *cfg,
                         toy *t) {
  sg_status st = SG_OK;
  sg_param_info tab[NP];
  int64_t off = 0;
  memset(t, 0, sizeof *t);
  memset(tab, 0, sizeof tab);
  for (int i = 0; i < NP; ++i) {
    tab[i].name = names[i];
    tab[i].ndim = ndims[i];
    for (int d = 0; d < ndims[i]; ++d)
      tab[i].global_shape[d] = tab[i].count[d] = shapes[i][d];
    tab[i].offset = off;
    tab[i].numel = toy_numel(i);
    off += tab[i].numel + 1; /* gaps between parameters are allowed */
  }
  sg_parallel_mesh_info mi;
  SG_TRY(sg_parallel_check_mesh(mesh, cfg, &mi));
  t->dsize = mi.data_size;
  t->dindex = mi.data_index;
  SG_TRY(sg_mesh_group(mesh, mi.batch_dims, &t->data));
  SG_TRY(sg_parallel_create(mesh, cfg, NP, tab, off, &t->plan));
  float *pp = sg_parallel_params(t->plan), *gg = sg_parallel_grads(t->plan);
  for (int i = 0; i < NP; ++i) {
    for (int64_t k = 0; k < tab[i].numel; ++k)
      pp[tab[i].offset + k] = 0.3f * sample(i, k, 0, 5);
    SG_TRY(sg_var_init_param(&t->v[i], names[i], SG_DTYPE_F32, ndims[i],
                             shapes[i], pp + tab[i].offset,
                             gg + tab[i].offset));
    t->pv[i] = &t->v[i];
  }
  SG_TRY(sg_tape_create(&t->tape));
  SG_TRY(sg_parallel_attach(t->plan, t->tape, t->pv));
fail:
  return st;
}

void toy_destroy(toy *t) {
  sg_tape_destroy(&t->tape);
  for (int i = 0; i < NP; ++i) sg_var_release(&t->v[i]);
  sg_parallel_destroy(&t->plan);
}

static sg_status toy_block(sg_tape_t tape, void *ctx, sg_var *const *in,
                           sg_var **out) {
  toy *t = ctx;
  sg_var *h = NULL;
  sg_status st = sg_ag_linear(tape, in[0], &t->v[0], &t->v[1], &h);
  if (st == SG_OK) st = sg_ag_act(tape, SG_ACT_GELU, h, &out[0]);
  return st;
}

/* Micro-batch k of K of this rank's share of the global batch of step
 * `step`: forward, loss (mse, 1/K of it: the K add up to the step's mean)
 * and backward. */
sg_status toy_micro(toy *t, int64_t step, int k, int K, double *loss_out,
                    float *hidden) {
  sg_status st = SG_OK;
  const int64_t lb = GB / t->dsize, mb = lb / K;
  float x[GB * CIN * S], y[GB * COUT * S];
  for (int64_t j = 0; j < mb; ++j) {
    const int64_t s = step * GB + t->dindex * lb + k * mb + j;
    for (int64_t c = 0; c < CIN; ++c)
      for (int64_t e = 0; e < S; ++e)
        x[(j * CIN + c) * S + e] = sample(s, c, e, 1);
    for (int64_t c = 0; c < COUT; ++c)
      for (int64_t e = 0; e < S; ++e)
        y[(j * COUT + c) * S + e] = sample(s, c, e, 2);
  }
  const int64_t xs[3] = {mb, CIN, S}, ys[3] = {mb, COUT, S};
  sg_var xv, yv, *h = NULL, *a = NULL, *p = NULL, *loss = NULL;
  SG_TRY(sg_var_init(&xv, "x", SG_DTYPE_F32, 3, xs, x, 0));
  SG_TRY(sg_var_init(&yv, "y", SG_DTYPE_F32, 3, ys, y, 0));
  SG_TRY(sg_parallel_begin_micro(t->plan, k, K));
  sg_var *xin = &xv;
  if (t->ckpt) {
    SG_TRY(sg_ag_checkpoint(t->tape, toy_block, t, 1, &xin, 1, &a));
  } else {
    SG_TRY(sg_ag_linear(t->tape, &xv, &t->v[0], &t->v[1], &h));
    if (hidden)
      memcpy(hidden, h->value.data, (size_t)(mb * HID * S) * sizeof *hidden);
    SG_TRY(sg_ag_act(t->tape, SG_ACT_GELU, h, &a));
  }
  SG_TRY(sg_ag_linear(t->tape, a, &t->v[2], &t->v[3], &p));
  sg_dist_loss_ctx lc = {NULL, t->data, GB};
  SG_TRY(sg_ag_dist_loss(t->tape, SG_LOSS_MSE, p, &yv, NULL, &lc, &loss));
  double lv = sg_dist_loss_value(loss);
  if (K > 1) {
    SG_TRY(sg_ag_scale(t->tape, 1.0 / K, loss, &loss));
    lv /= K;
  }
  *loss_out += lv;
  SG_TRY(sg_tape_backward(t->tape, loss));
fail:
  if (st != SG_OK) sg_tape_clear(t->tape);
  return st;
}

/* One step of K micro-batches. */
sg_status toy_step_k(toy *t, int64_t step, int K, double *gnorm,
                     double *loss_out) {
  sg_status st = SG_OK;
  *loss_out = 0.0;
  for (int k = 0; k < K; ++k) SG_TRY(toy_micro(t, step, k, K, loss_out, NULL));
  SG_TRY(sg_parallel_reduce(t->plan, gnorm));
  SG_TRY(sg_parallel_step(t->plan, step, 1e-2, 1.0));
fail:
  return st;
}

sg_status toy_step(toy *t, int64_t step, double *gnorm, double *loss_out,
                   float *hidden) {
  sg_status st = SG_OK;
  *loss_out = 0.0;
  SG_TRY(toy_micro(t, step, 0, 1, loss_out, hidden));
  SG_TRY(sg_parallel_reduce(t->plan, gnorm));
  SG_TRY(sg_parallel_step(t->plan, step, 1e-2, 1.0));
fail:
  return st;
}

sg_status toy_params(toy *t, float *out) {
  sg_status st = SG_OK;
  int64_t o = 0;
  for (int i = 0; i < NP; ++i) {
    SG_TRY(sg_parallel_gather_param(t->plan, i, out + o));
    o += toy_numel(i);
  }
fail:
  return st;
}
