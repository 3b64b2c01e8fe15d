/* shardgrid — sg-plan's calibration from the model's own steps
 * (docs/choosing-a-mesh-time.md, "Calibrating from the model").
 *
 * The micro-benchmarks of sg_plan_calibrate time each kernel on a fixed
 * working set; on a shared machine they move by a third between runs a
 * minute apart, and their shapes are not the model's. Here the model
 * itself runs a few steps with the tape's op timers on (sg_tape_time_ops):
 * each op class's seconds per step (sg_plan_op_rec), measured on the real
 * kernels at the real shapes, become the rates that make the time model
 * predict exactly those seconds for that run (sg_plan_hw_from_model), so
 * that across meshes only the communication and the per-rank shapes are
 * modelled. */
#include "sg_log.h"
#include "sg_plan.h"
#include "sg_trace.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const class_names[SG_PLAN_NOPS] = {"gemm", "conv", "fft",
                                                      "attn", "act",  "norm",
                                                      "up",   "other"};

const char *sg_plan_op_class_name(int cls) {
  return cls >= 0 && cls < SG_PLAN_NOPS ? class_names[cls] : "?";
}

/* The tape's ops (sg_op_def names) of each timed class. */
static const struct {
  const char *op;
  int cls;
} op_table[] = {
    {"linear", SG_PLAN_OP_GEMM},
    {"conv", SG_PLAN_OP_CONV},
    {"convt", SG_PLAN_OP_CONV},
    {"spectral_conv", SG_PLAN_OP_FFT},
    {"attention", SG_PLAN_OP_ATTN},
    {"attention_ulysses", SG_PLAN_OP_ATTN},
    {"attention_usp", SG_PLAN_OP_ATTN},
    {"window_attention", SG_PLAN_OP_ATTN},
    {"act", SG_PLAN_OP_ACT},
    {"norm", SG_PLAN_OP_NORM},
    {"upsample_linear", SG_PLAN_OP_UP},
};

/* ---- recording ---- */

enum { NCOL = SG_PLAN_NOPS + 1 }; /* the classes, then compute */

sg_status sg_plan_op_rec_step(sg_plan_op_rec *r, double compute_s) {
  sg_status st = SG_OK;
  if (!r) SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_op_rec_step: NULL");
  if (r->n == r->cap) {
    const int cap = r->cap ? 2 * r->cap : 16;
    double *v = realloc(r->v, (size_t)cap * NCOL * sizeof *v);
    if (!v) SG_RAISE(SG_ERR_ALLOC, "sg_plan_op_rec_step: out of memory");
    r->v = v, r->cap = cap;
  }
  double now[SG_PLAN_NOPS] = {0}, *row = r->v + (size_t)r->n * NCOL, sum = 0;
  for (size_t i = 0; i < sizeof op_table / sizeof op_table[0]; ++i)
    now[op_table[i].cls] += sg_timer_total(op_table[i].op);
  for (int c = 0; c < SG_PLAN_OP_OTHER; ++c) {
    row[c] = now[c] - r->last[c], r->last[c] = now[c];
    sum += row[c];
  }
  /* the rest of the step's compute: clock readings of one run, so it is
   * >= 0 but for the timers' resolution */
  row[SG_PLAN_OP_OTHER] = compute_s > sum ? compute_s - sum : 0.0;
  row[SG_PLAN_NOPS] = compute_s;
  ++r->n;
fail:
  return st;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of column col of rows [skip, n) and its spread. */
static double column_median(const sg_plan_op_rec *r, int skip, int col,
                            double *tmp, double *spread) {
  const int n = r->n - skip;
  for (int i = 0; i < n; ++i) tmp[i] = r->v[(size_t)(skip + i) * NCOL + col];
  qsort(tmp, (size_t)n, sizeof tmp[0], cmp_double);
  const double med = n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
  const double q1 = tmp[(n - 1) / 4], q3 = tmp[n - 1 - (n - 1) / 4];
  *spread = med > 0 ? (q3 - q1) / med : 0.0;
  return med;
}

sg_status sg_plan_op_rec_times(const sg_plan_op_rec *r, int skip,
                               sg_plan_op_times *out) {
  sg_status st = SG_OK;
  double *tmp = NULL;
  if (!r || !out) SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_op_rec_times: NULL");
  if (skip < 0 || r->n - skip < 1)
    SG_RAISE(SG_ERR_CONFIG,
             "op times: %d step(s) recorded, none after the %d warm-up "
             "step(s): run more steps",
             r->n, skip);
  memset(out, 0, sizeof *out);
  tmp = malloc((size_t)r->n * sizeof *tmp);
  if (!tmp) SG_RAISE(SG_ERR_ALLOC, "sg_plan_op_rec_times: out of memory");
  out->steps = r->n - skip;
  for (int c = 0; c < SG_PLAN_NOPS; ++c)
    out->t[c] = column_median(r, skip, c, tmp, &out->spread[c]);
  out->compute = column_median(r, skip, SG_PLAN_NOPS, tmp,
                               &out->spread_compute);
  /* the rest as the medians' difference, so that the file's classes sum
   * to its compute; medians of separate columns need not add up: where
   * the classes' exceed the compute's, the compute is their sum */
  double sum = 0.0;
  for (int c = 0; c < SG_PLAN_OP_OTHER; ++c) sum += out->t[c];
  out->t[SG_PLAN_OP_OTHER] = out->compute > sum ? out->compute - sum : 0.0;
  if (sum > out->compute) out->compute = sum;
fail:
  free(tmp);
  return st;
}

void sg_plan_op_rec_free(sg_plan_op_rec *r) {
  if (!r) return;
  free(r->v);
  memset(r, 0, sizeof *r);
}

/* ---- the op-times file ---- */

#define CLASS_KEYS(k)                                             \
  {#k, SG_KV_FLOAT, "0", "seconds per step in the " #k " ops"}, { \
    "spread_" #k, SG_KV_FLOAT, "0", "their spread over the steps" \
  }
static const sg_kv_key op_keys[] = {
    {"steps", SG_KV_INT, "0", "timed steps"},
    {"compute", SG_KV_FLOAT, "0", "compute seconds per step"},
    {"spread_compute", SG_KV_FLOAT, "0", "its spread over the steps"},
    CLASS_KEYS(gemm),
    CLASS_KEYS(conv),
    CLASS_KEYS(fft),
    CLASS_KEYS(attn),
    CLASS_KEYS(act),
    CLASS_KEYS(norm),
    CLASS_KEYS(up),
    CLASS_KEYS(other),
};
#undef CLASS_KEYS

sg_status sg_plan_op_times_save(const char *path, const sg_plan_op_times *t) {
  sg_status st = SG_OK;
  FILE *f = NULL;
  if (!path || !t) SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_op_times_save: NULL");
  f = fopen(path, "w");
  if (!f) SG_RAISE(SG_ERR_IO, "op times: cannot write %s", path);
  fprintf(f,
          "# sg-train op times (sg-plan --calibrate-from-model): seconds per "
          "step by op class,\n# the median over the timed steps; spread = "
          "interquartile range / median\nsteps = %d\ncompute = %.17g\n"
          "spread_compute = %.6g\n",
          t->steps, t->compute, t->spread_compute);
  for (int c = 0; c < SG_PLAN_NOPS; ++c)
    fprintf(f, "%s = %.17g\nspread_%s = %.6g\n", class_names[c], t->t[c],
            class_names[c], t->spread[c]);
  if (ferror(f)) SG_RAISE(SG_ERR_IO, "op times: writing %s", path);
fail:
  if (f && fclose(f) && st == SG_OK)
    st = sg_error_set(SG_ERR_IO, __FILE__, __LINE__, "op times: closing %s",
                      path);
  return st;
}

sg_status sg_plan_op_times_load(const char *path, sg_plan_op_times *t) {
  sg_status st = SG_OK;
  sg_kv_t kv = NULL;
  if (!path || !t) SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_op_times_load: NULL");
  SG_TRY(sg_kv_create(op_keys, (int)(sizeof op_keys / sizeof op_keys[0]), &kv));
  SG_TRY(sg_kv_load_file(kv, path));
  memset(t, 0, sizeof *t);
  t->steps = (int)sg_kv_int(kv, "steps");
  t->compute = sg_kv_float(kv, "compute");
  t->spread_compute = sg_kv_float(kv, "spread_compute");
  double sum = 0.0;
  for (int c = 0; c < SG_PLAN_NOPS; ++c) {
    char key[32];
    t->t[c] = sg_kv_float(kv, class_names[c]);
    snprintf(key, sizeof key, "spread_%s", class_names[c]);
    t->spread[c] = sg_kv_float(kv, key);
    if (!(t->t[c] >= 0) || !(t->spread[c] >= 0))
      SG_RAISE(SG_ERR_CONFIG, "%s: %s must be a number >= 0", path,
               class_names[c]);
    sum += t->t[c];
  }
  if (t->steps < 1 || !(t->compute > 0))
    SG_RAISE(SG_ERR_CONFIG,
             "%s: not an op-times file of a run (steps %d, compute %g s: "
             "sg-train --op-times writes one)",
             path, t->steps, t->compute);
  if (sum > 1.001 * t->compute)
    SG_RAISE(SG_ERR_CONFIG,
             "%s: the op classes' %g s exceed the step's compute %g s", path,
             sum, t->compute);
fail:
  sg_kv_destroy(&kv);
  return st;
}

/* ---- the rates ---- */

/* The rates each class sets (hw field offsets; -1 ends). */
static const ptrdiff_t class_rates[SG_PLAN_NOPS][3] = {
    [SG_PLAN_OP_GEMM] = {offsetof(sg_plan_hw, gemm_flops), -1},
    [SG_PLAN_OP_CONV] = {offsetof(sg_plan_hw, conv_flops), -1},
    [SG_PLAN_OP_FFT] = {offsetof(sg_plan_hw, fft_flops), -1},
    [SG_PLAN_OP_ATTN] = {offsetof(sg_plan_hw, attn_flops), -1},
    [SG_PLAN_OP_ACT] = {offsetof(sg_plan_hw, act_rate), -1},
    [SG_PLAN_OP_NORM] = {offsetof(sg_plan_hw, norm_rate),
                         offsetof(sg_plan_hw, lnorm_rate), -1},
    [SG_PLAN_OP_UP] = {offsetof(sg_plan_hw, up_rate), -1},
    [SG_PLAN_OP_OTHER] = {offsetof(sg_plan_hw, mem_bw), -1},
};

static double *hw_field(sg_plan_hw *hw, ptrdiff_t off) {
  return (double *)((char *)hw + off);
}

/* The predicted compute seconds of a step on mesh m. */
static sg_status compute_s(const sg_plan_problem *pb, const sg_plan_mesh *m,
                           const sg_plan_hw *hw, double *t) {
  sg_plan_time pt;
  const sg_status st = sg_plan_step_time(pb, m, hw, &pt);
  *t = pt.compute;
  return st;
}

/* Every compute rate. */
static const ptrdiff_t all_rates[] = {
    offsetof(sg_plan_hw, gemm_flops), offsetof(sg_plan_hw, conv_flops),
    offsetof(sg_plan_hw, fft_flops),  offsetof(sg_plan_hw, attn_flops),
    offsetof(sg_plan_hw, act_rate),   offsetof(sg_plan_hw, norm_rate),
    offsetof(sg_plan_hw, lnorm_rate), offsetof(sg_plan_hw, up_rate),
    offsetof(sg_plan_hw, mem_bw)};

/* The seconds of the predicted compute that scale as 1 / the class's
 * rates: t(r (1 + e)) = t(r) - P e / (1 + e) for a part P in 1 / r (a
 * roofline term bound by another rate does not move). */
static sg_status class_share(const sg_plan_problem *pb, const sg_plan_mesh *m,
                             const sg_plan_hw *hw, int cls, double *share) {
  sg_status st = SG_OK;
  const double e = 1e-4;
  double t0, t1;
  *share = 0.0;
  SG_TRY(compute_s(pb, m, hw, &t0));
  for (int i = 0; class_rates[cls][i] >= 0; ++i) {
    sg_plan_hw h = *hw;
    *hw_field(&h, class_rates[cls][i]) *= 1.0 + e;
    SG_TRY(compute_s(pb, m, &h, &t1));
    *share += (t0 - t1) * (1.0 + e) / e;
  }
fail:
  return st;
}

/* The rates that make the time model predict times->t per class on the
 * one-rank mesh m, from hw's: each class's rates scaled by its predicted
 * / measured seconds, over the classes in turn until every class is
 * within 1e-6 (the classes couple through the rooflines). */
static sg_status solve_rates(const sg_plan_problem *pb, const sg_plan_mesh *m,
                             const sg_plan_op_times *times, sg_plan_hw *hw) {
  sg_status st = SG_OK;
  double meas[SG_PLAN_NOPS], share;
  /* rates the file leaves at 0 (their fallbacks) start from what their
   * fallbacks cost, so that they have a share to scale */
  if (!(hw->attn_flops > 0)) hw->attn_flops = hw->gemm_flops;
  double *elem[4] = {&hw->act_rate, &hw->norm_rate, &hw->lnorm_rate,
                     &hw->up_rate};
  for (int i = 0; i < 4; ++i)
    if (!(*elem[i] > 0)) *elem[i] = hw->mem_bw / 24.0;
  memcpy(meas, times->t, sizeof meas);
  /* a class this model's time model does not cost: its time joins the
   * memory-bound rest */
  for (int c = 0; c < SG_PLAN_OP_OTHER; ++c) {
    SG_TRY(class_share(pb, m, hw, c, &share));
    if (!(share > 0) && meas[c] > 0)
      meas[SG_PLAN_OP_OTHER] += meas[c], meas[c] = 0.0;
  }
  for (int it = 0; it < 100; ++it) {
    double worst = 0.0;
    for (int c = 0; c < SG_PLAN_NOPS; ++c) {
      if (!(meas[c] > 0)) continue;
      SG_TRY(class_share(pb, m, hw, c, &share));
      if (!(share > 0) && c != SG_PLAN_OP_OTHER) {
        /* the class's ops became memory-bound in the model (mem_bw
         * moved): their time is mem_bw's to predict, and their rates go
         * out of the way (x 1e6), so that they do not bind again when
         * mem_bw rises and count the time twice */
        meas[SG_PLAN_OP_OTHER] += meas[c], meas[c] = 0.0, worst = 1.0;
        for (int i = 0; class_rates[c][i] >= 0; ++i)
          *hw_field(hw, class_rates[c][i]) *= 1e6;
        continue;
      }
      if (!(share > 0)) continue;
      const double f = share / meas[c];
      for (int i = 0; class_rates[c][i] >= 0; ++i)
        *hw_field(hw, class_rates[c][i]) *= f;
      const double d = f > 1 ? f - 1 : 1 - f;
      if (d > worst) worst = d;
    }
    if (worst < 1e-6) break;
  }
  /* where a class's ops sit on both sides of the roofline (some bound by
   * mem_bw, whose time the class's measurement holds) the classes can
   * cycle without meeting: every rate scaled alike then scales every term
   * alike, so that the one-rank prediction is the measured compute */
  double t = 0.0, want = 0.0;
  SG_TRY(compute_s(pb, m, hw, &t));
  for (int c = 0; c < SG_PLAN_NOPS; ++c) want += times->t[c];
  if (t > 0 && want > 0 && (t > 1.001 * want || t < 0.999 * want)) {
    sg_log_warn("calibrating from the model: the op classes did not meet "
                "(%.4g s predicted for %.4g s); every rate scaled by %.3f",
                t, want, t / want);
    for (size_t i = 0; i < sizeof all_rates / sizeof all_rates[0]; ++i)
      *hw_field(hw, all_rates[i]) *= t / want;
  }
fail:
  return st;
}

/* Every calibrated rate: its class and its single-stream, shared and
 * spread fields. */
#define RATE(k, c)                                                            \
  {                                                                           \
    c, offsetof(sg_plan_hw, k), offsetof(sg_plan_hw, shared.k),               \
        offsetof(sg_plan_hw, spread.k), offsetof(sg_plan_hw, shared_spread.k) \
  }
static const struct {
  int cls;
  ptrdiff_t one, shared, spread, shared_spread;
} rate_fields[] = {
    RATE(gemm_flops, SG_PLAN_OP_GEMM), RATE(conv_flops, SG_PLAN_OP_CONV),
    RATE(fft_flops, SG_PLAN_OP_FFT),   RATE(attn_flops, SG_PLAN_OP_ATTN),
    RATE(act_rate, SG_PLAN_OP_ACT),    RATE(norm_rate, SG_PLAN_OP_NORM),
    RATE(lnorm_rate, SG_PLAN_OP_NORM), RATE(up_rate, SG_PLAN_OP_UP),
    RATE(mem_bw, SG_PLAN_OP_OTHER),
};
#undef RATE

sg_status sg_plan_hw_from_model(const sg_plan_problem *pb,
                                const sg_plan_mesh *m, const sg_plan_hw *base,
                                const sg_plan_op_times *one,
                                const sg_plan_op_times *shared, int nshared,
                                sg_plan_hw *out) {
  sg_status st = SG_OK;
  if (!pb || !m || !base || !one || !out)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_hw_from_model: NULL argument");
  if (sg_plan_mesh_ranks(m) != 1)
    SG_RAISE(SG_ERR_CONFIG,
             "calibrating from the model: the timed run is one rank's (mesh "
             "h=1), not a mesh of %d ranks",
             sg_plan_mesh_ranks(m));
  if (shared && nshared < 2)
    SG_RAISE(SG_ERR_CONFIG,
             "calibrating from the model: shared times of %d rank(s) at once "
             "(2 or more)",
             nshared);
  sg_plan_hw h1 = *base, hs;
  memset(&h1.shared, 0, sizeof h1.shared);
  h1.shared_ranks = 0;
  hs = h1;
  SG_TRY(solve_rates(pb, m, one, &h1));
  if (shared) SG_TRY(solve_rates(pb, m, shared, &hs));
  *out = h1;
  out->shared_ranks = shared ? nshared : 0;
  for (size_t i = 0; i < sizeof rate_fields / sizeof rate_fields[0]; ++i) {
    const int c = rate_fields[i].cls;
    *hw_field(out, rate_fields[i].shared) = shared
                                                ? *hw_field(&hs,
                                                            rate_fields[i].one)
                                                : 0.0;
    *hw_field(out, rate_fields[i].spread) = one->spread[c];
    *hw_field(out, rate_fields[i].shared_spread) = shared ? shared->spread[c]
                                                          : 0.0;
  }
  out->cal_rounds = one->steps, out->cal_sample_s = one->compute;
  snprintf(out->name, sizeof out->name, "%s",
           "this machine (calibrated from the model's steps)");
fail:
  return st;
}
