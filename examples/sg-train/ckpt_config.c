/* sg-train — what a checkpoint records beside the parameters, shared with
 * sg-forecast: the config text a checkpoint stores (the run's config plus
 * the grid and the normalisation of the data, so a forecast needs no
 * training data; its model keys are read back by sg_model_config_from_kv). */
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
