/* shardgrid — sg-plan's hardware files: "key = value" lines (sg_kv's
 * format, which is also TOML when the name is quoted), rates in per-second
 * units and link costs as latency (s) and bandwidth (bytes/s):
 *
 *   name = "8 x H100 SXM, NVLink 4"
 *   gemm_flops = 6.0e14      # per rank
 *   alpha_intra = 3.0e-6     # s per message
 *   bw_intra = 3.6e11        # bytes/s per rank (beta = 1 / bw)
 *
 * Unknown keys are errors (a typo must not silently keep a default). */
#include "sg_plan.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const sg_kv_key hw_keys[] = {
    {"name", SG_KV_STRING, "unnamed", "what the machine is"},
    {"gemm_flops", SG_KV_FLOAT, "1e10", "GEMM rate per rank, flop/s"},
    {"conv_flops", SG_KV_FLOAT, "1e10", "convolution rate per rank, flop/s"},
    {"fft_flops", SG_KV_FLOAT, "2e9",
     "FFT rate per rank, flop/s counted as 2.5 N log2 N per real transform"},
    {"mem_bw", SG_KV_FLOAT, "1e10", "memory bandwidth per rank, bytes/s"},
    {"attn_flops", SG_KV_FLOAT, "0",
     "fused attention rate per rank, flop/s (0: gemm_flops)"},
    {"gemm_nhalf", SG_KV_FLOAT, "0",
     "channels at which a GEMM reaches half of gemm_flops (0: flat)"},
    {"conv_nhalf", SG_KV_FLOAT, "0",
     "channels at which a conv reaches half of conv_flops (0: flat)"},
    {"act_rate", SG_KV_FLOAT, "0",
     "activation forward + backward, elements/s (0: memory roofline)"},
    {"norm_rate", SG_KV_FLOAT, "0",
     "GroupNorm forward + backward, elements/s (0: memory roofline)"},
    {"lnorm_rate", SG_KV_FLOAT, "0",
     "LayerNorm forward + backward, elements/s (0: memory roofline)"},
    {"up_rate", SG_KV_FLOAT, "0",
     "linear 2x up-sample forward + backward, output elements/s (0: memory "
     "roofline)"},
    {"mem_bytes", SG_KV_FLOAT, "8e9", "memory per rank, bytes"},
    {"alpha_intra", SG_KV_FLOAT, "1e-6", "latency inside a node, s"},
    {"bw_intra", SG_KV_FLOAT, "1e10", "bandwidth inside a node, bytes/s"},
    {"alpha_inter", SG_KV_FLOAT, "5e-6", "latency between nodes, s"},
    {"bw_inter", SG_KV_FLOAT, "1e10", "bandwidth between nodes, bytes/s"},
    {"ranks_per_node", SG_KV_INT, "1", "ranks (GPUs) per node"},
    {"cores_per_node", SG_KV_INT, "0",
     "cores per node (0: one per rank); more ranks share them"},
    {"io_bw", SG_KV_FLOAT, "0", "data read rate per rank, bytes/s (0: off)"},
    {"shared_ranks", SG_KV_INT, "0",
     "ranks that ran at once for the *_shared rates (0: none)"},
#define SHARED_KEY(k)                                                        \
  {                                                                          \
#k "_shared", SG_KV_FLOAT, "0",                                          \
        #k " per rank with shared_ranks ranks of a node at once (0: " #k ")" \
  }
    SHARED_KEY(gemm_flops),
    SHARED_KEY(conv_flops),
    SHARED_KEY(fft_flops),
    SHARED_KEY(mem_bw),
    SHARED_KEY(attn_flops),
    SHARED_KEY(act_rate),
    SHARED_KEY(norm_rate),
    SHARED_KEY(lnorm_rate),
    SHARED_KEY(up_rate),
#undef SHARED_KEY
};

/* The rates that have a shared value: key, single-stream field, shared
 * field (one table for the load, the save and sg_plan_hw_on_node). */
#define RATE(k)                                                               \
  {                                                                           \
#k "_shared", offsetof(sg_plan_hw, k), offsetof(sg_plan_hw, shared.k),    \
        offsetof(sg_plan_hw, spread.k), offsetof(sg_plan_hw, shared_spread.k) \
  }
static const struct {
  const char *key;
  size_t one, shared, spread, shared_spread;
} rates[] = {RATE(gemm_flops), RATE(conv_flops), RATE(fft_flops),
             RATE(mem_bw),     RATE(attn_flops), RATE(act_rate),
             RATE(norm_rate),  RATE(lnorm_rate), RATE(up_rate)};
#undef RATE
enum { NRATES = (int)(sizeof rates / sizeof rates[0]) };

static double *field(sg_plan_hw *hw, size_t off) {
  return (double *)((char *)hw + off);
}
static double value(const sg_plan_hw *hw, size_t off) {
  return *(const double *)((const char *)hw + off);
}

void sg_plan_hw_on_node(const sg_plan_hw *hw, int on_node, sg_plan_hw *out) {
  *out = *hw;
  if (on_node <= 1 || hw->shared_ranks < 2) return;
  double f = (double)(on_node - 1) / (hw->shared_ranks - 1);
  if (f > 1) f = 1;
  for (int i = 0; i < NRATES; ++i) {
    double *one = field(out, rates[i].one);
    const double sh = value(out, rates[i].shared);
    /* a rate of 0 means "not calibrated" (attn_flops, act_rate, ...):
     * it stays 0 and its fallback applies */
    if (sh > 0 && *one > 0 && sh != *one)
      *one = 1.0 / ((1 - f) / *one + f / sh);
  }
}

sg_status sg_plan_hw_load(const char *path, sg_plan_hw *hw) {
  sg_status st = SG_OK;
  sg_kv_t kv = NULL;
  if (!path || !hw) SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_hw_load: NULL");
  SG_TRY(sg_kv_create(hw_keys, (int)(sizeof hw_keys / sizeof hw_keys[0]), &kv));
  SG_TRY(sg_kv_load_file(kv, path));
  memset(hw, 0, sizeof *hw);
  snprintf(hw->name, sizeof hw->name, "%s", sg_kv_str(kv, "name"));
  hw->gemm_flops = sg_kv_float(kv, "gemm_flops");
  hw->conv_flops = sg_kv_float(kv, "conv_flops");
  hw->fft_flops = sg_kv_float(kv, "fft_flops");
  hw->mem_bw = sg_kv_float(kv, "mem_bw");
  hw->gemm_nhalf = sg_kv_float(kv, "gemm_nhalf");
  hw->attn_flops = sg_kv_float(kv, "attn_flops");
  hw->conv_nhalf = sg_kv_float(kv, "conv_nhalf");
  hw->act_rate = sg_kv_float(kv, "act_rate");
  hw->norm_rate = sg_kv_float(kv, "norm_rate");
  hw->lnorm_rate = sg_kv_float(kv, "lnorm_rate");
  hw->up_rate = sg_kv_float(kv, "up_rate");
  hw->mem_bytes = sg_kv_float(kv, "mem_bytes");
  hw->alpha_intra = sg_kv_float(kv, "alpha_intra");
  hw->alpha_inter = sg_kv_float(kv, "alpha_inter");
  const double bi = sg_kv_float(kv, "bw_intra"),
               be = sg_kv_float(kv, "bw_inter");
  if (!(bi > 0) || !(be > 0) || !(hw->gemm_flops > 0) ||
      !(hw->conv_flops > 0) || !(hw->fft_flops > 0) || !(hw->mem_bw > 0))
    SG_RAISE(SG_ERR_CONFIG,
             "%s: rates and bandwidths must be > 0 (gemm_flops, conv_flops, "
             "fft_flops, mem_bw, bw_intra, bw_inter)",
             path);
  hw->beta_intra = 1.0 / bi, hw->beta_inter = 1.0 / be;
  hw->ranks_per_node = (int)sg_kv_int(kv, "ranks_per_node");
  hw->cores_per_node = (int)sg_kv_int(kv, "cores_per_node");
  hw->io_bw = sg_kv_float(kv, "io_bw");
  if (hw->ranks_per_node < 1)
    SG_RAISE(SG_ERR_CONFIG, "%s: ranks_per_node must be >= 1", path);
  hw->shared_ranks = (int)sg_kv_int(kv, "shared_ranks");
  for (int i = 0; i < NRATES; ++i) {
    const double v = sg_kv_float(kv, rates[i].key);
    if (v < 0) SG_RAISE(SG_ERR_CONFIG, "%s: %s < 0", path, rates[i].key);
    *field(hw, rates[i].shared) = v;
  }
fail:
  sg_kv_destroy(&kv);
  return st;
}

/* The calibration's spreads as comments ("# spread KEY = single shared"):
 * how far to trust each rate (docs/choosing-a-mesh-time.md). */
static void save_spreads(FILE *f, const sg_plan_hw *hw) {
  fprintf(f,
          "# calibration: each rate the median of %d rounds, a sample >= "
          "%.3g s;\n# spread = interquartile range / median of the rounds, "
          "single-stream and shared\n",
          hw->cal_rounds, hw->cal_sample_s);
  for (int i = 0; i < NRATES; ++i) {
    const size_t n = strlen(rates[i].key) - strlen("_shared");
    fprintf(f, "# spread %.*s = %.3f %.3f\n", (int)n, rates[i].key,
            value(hw, rates[i].spread), value(hw, rates[i].shared_spread));
  }
}

sg_status sg_plan_hw_save(const char *path, const sg_plan_hw *hw) {
  sg_status st = SG_OK;
  FILE *f = NULL;
  if (!path || !hw) SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_hw_save: NULL");
  if (strchr(hw->name, '"') || strchr(hw->name, '\n'))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_hw_save: a name without quotes");
  f = fopen(path, "w");
  if (!f) SG_RAISE(SG_ERR_IO, "sg_plan_hw_save: cannot write %s", path);
  /* %.17g: the file reads back to the same doubles */
  fprintf(f,
          "# sg-plan hardware file (docs/choosing-a-mesh-time.md)\n"
          "name = \"%s\"\n"
          "gemm_flops = %.17g\nconv_flops = %.17g\nfft_flops = %.17g\n"
          "mem_bw = %.17g\nmem_bytes = %.17g\n"
          "gemm_nhalf = %.17g\nconv_nhalf = %.17g\nattn_flops = %.17g\n"
          "act_rate = %.17g\nnorm_rate = %.17g\nlnorm_rate = %.17g\n"
          "up_rate = %.17g\n"
          "alpha_intra = %.17g\nbw_intra = %.17g\n"
          "alpha_inter = %.17g\nbw_inter = %.17g\n"
          "ranks_per_node = %d\ncores_per_node = %d\nio_bw = %.17g\n",
          hw->name, hw->gemm_flops, hw->conv_flops, hw->fft_flops, hw->mem_bw,
          hw->mem_bytes, hw->gemm_nhalf, hw->conv_nhalf, hw->attn_flops,
          hw->act_rate, hw->norm_rate, hw->lnorm_rate, hw->up_rate,
          hw->alpha_intra, 1.0 / hw->beta_intra, hw->alpha_inter,
          1.0 / hw->beta_inter, hw->ranks_per_node, hw->cores_per_node,
          hw->io_bw);
  fprintf(f,
          "# per rank with shared_ranks ranks of a node running at once "
          "(0: the single-stream rate)\nshared_ranks = %d\n",
          hw->shared_ranks);
  for (int i = 0; i < NRATES; ++i)
    fprintf(f, "%s = %.17g\n", rates[i].key, value(hw, rates[i].shared));
  if (hw->cal_rounds > 0) save_spreads(f, hw);
  if (ferror(f)) SG_RAISE(SG_ERR_IO, "sg_plan_hw_save: writing %s", path);
fail:
  if (f && fclose(f) && st == SG_OK)
    st = sg_error_set(SG_ERR_IO, __FILE__, __LINE__,
                      "sg_plan_hw_save: closing %s", path);
  return st;
}
