/* sg-train — what a checkpoint records beside the parameters, shared with
 * sg-forecast: the model's kind and sizes from a config (sg-train's keys, or
 * a checkpoint's config text loaded into a table of its own keys), and the
 * config text a checkpoint stores: the run's config plus the grid and the
 * normalisation of the data, so a forecast needs no training data. */
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sg_status sg_train_model_config(sg_kv_t kv, sg_model_config *mc) {
  sg_status st = SG_OK;
  sg_model_kind kind;
  SG_TRY(sg_model_kind_parse(sg_kv_str(kv, "model"), &kind));
  *mc = sg_model_defaults(kind);
  mc->width = sg_kv_int(kv, "width");
  mc->modes = sg_kv_int(kv, "modes");
  mc->layers = sg_kv_int(kv, "layers");
  mc->proj_width = sg_kv_int(kv, "proj_width");
  mc->blocks = sg_kv_int(kv, "blocks");
  mc->levels = sg_kv_int(kv, "levels");
  mc->kernel = sg_kv_int(kv, "kernel");
  mc->groups = sg_kv_int(kv, "groups");
  mc->patch = sg_kv_int(kv, "patch");
  mc->heads = sg_kv_int(kv, "heads");
  mc->depth = sg_kv_int(kv, "depth");
  mc->window = sg_kv_int(kv, "window");
  {
    sg_sp_mode spm = SG_SP_RING;
    SG_TRY(sg_sp_mode_parse(sg_kv_str(kv, "sp_mode"), &spm));
    mc->sp_mode = (int)spm;
  }
  mc->add_grid = sg_kv_bool(kv, "grid");
  mc->shard_spectral = sg_kv_bool(kv, "shard_spectral");
  {
    const char *ac = sg_kv_str(kv, "activation_checkpointing");
    char *end = NULL;
    long k = 0;
    if (strcmp(ac, "none") == 0)
      mc->act_ckpt_every = 0;
    else if (strcmp(ac, "blocks") == 0)
      mc->act_ckpt_every = 1;
    else if (strncmp(ac, "every:", 6) == 0 &&
             (k = strtol(ac + 6, &end, 10)) >= 1 && k <= 1000000 &&
             end != ac + 6 && *end == '\0')
      mc->act_ckpt_every = (int)k;
    else
      SG_RAISE(
          SG_ERR_CONFIG,
          "activation_checkpointing must be none, blocks or every:K with K >= 1, not '%s'",
          ac);
  }
  const char *pk[2] = {"pad_y", "pad_x"};
  for (int i = 0; i < 2; ++i)
    if (sg_boundary_parse(sg_kv_str(kv, pk[i]), &mc->pad[i]) != SG_OK)
      SG_RAISE(SG_ERR_CONFIG,
               "%s must be periodic, zero, reflect or replicate, not '%s'",
               pk[i], sg_kv_str(kv, pk[i]));
fail:
  return st;
}

char *sg_train_ckpt_config(const run_t *r) {
  char *kv = sg_kv_dump(r->kv), *s = NULL;
  const size_t cap = (kv ? strlen(kv) : 0) + 256 + 2 * 8 * 32;
  if (!kv || !(s = malloc(cap))) {
    free(kv);
    return NULL;
  }
  size_t n = (size_t)snprintf(s, cap, "%s# %s = %lld x %lld\n# %s = %lld\n", kv,
                              SG_CKPT_GRID_KEY, (long long)r->ds.ny_g,
                              (long long)r->ds.nx_g, SG_CKPT_EXAMPLES_KEY,
                              (long long)r->ntrain);
  for (int k = 0; k < 2; ++k) {
    n += (size_t)snprintf(s + n, cap - n,
                          "# %s = ", k ? SG_CKPT_STD_KEY : SG_CKPT_MEAN_KEY);
    for (int v = 0; v < r->ds.nvars; ++v)
      n += (size_t)snprintf(s + n, cap - n, "%s%.17g", v ? "," : "",
                            k ? r->ds.std[v] : r->ds.mean[v]);
    n += (size_t)snprintf(s + n, cap - n, "\n");
  }
  free(kv);
  return s;
}
