/* shardgrid — a model's config from a key table (sg_model.h): the one place
 * the model keys (model, width, modes, modes_t, pad_t, layers, proj_width,
 * blocks, levels, kernel, groups, patch, heads, depth, window, sp_mode,
 * tp_sequence, moe_experts, moe_topk, moe_every, moe_capacity, moe_aux, grid,
 * shard_spectral, activation_checkpointing, pad_y, pad_x) are read, by sg-train,
 * sg-forecast (a checkpoint's config) and sg-plan alike. */
#include "sg_decomp.h"
#include "sg_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The invalid values seen, joined by "; " (all of them, not the first). */
typedef struct bad_buf {
  char text[1024];
  size_t len;
} bad_buf;

static void bad_add(bad_buf *b, const char *fmt, const char *key,
                    const char *value) {
  if (b->len >= sizeof b->text) return;
  int n = snprintf(b->text + b->len, sizeof b->text - b->len, "%s",
                   b->len ? "; " : "");
  if (n > 0) b->len += (size_t)n;
  if (b->len >= sizeof b->text) return;
  n = snprintf(b->text + b->len, sizeof b->text - b->len, fmt, key, value);
  if (n > 0) b->len += (size_t)n;
}

/* An integer key: absent or empty keeps *v. */
static void get_int(sg_kv_t kv, const char *key, int64_t *v) {
  if (*sg_kv_str(kv, key)) *v = sg_kv_int(kv, key);
}

static void get_bool(sg_kv_t kv, const char *key, int *v) {
  if (*sg_kv_str(kv, key)) *v = sg_kv_bool(kv, key);
}

static void get_small(sg_kv_t kv, const char *key, int *v) {
  if (*sg_kv_str(kv, key)) *v = (int)sg_kv_int(kv, key);
}

static void get_float(sg_kv_t kv, const char *key, double *v) {
  if (*sg_kv_str(kv, key)) *v = sg_kv_float(kv, key);
}

/* none, blocks (1) or every:K (K >= 1); -1 otherwise. */
static int parse_ckpt(const char *ac) {
  char *end = NULL;
  if (!strcmp(ac, "none")) return 0;
  if (!strcmp(ac, "blocks")) return 1;
  if (strncmp(ac, "every:", 6) != 0) return -1;
  const long k = strtol(ac + 6, &end, 10);
  return end != ac + 6 && *end == '\0' && k >= 1 && k <= 1000000 ? (int)k : -1;
}

/* The keys with a fixed set of values. */
static void get_choices(sg_kv_t kv, sg_model_config *mc, bad_buf *bad) {
  const char *s = sg_kv_str(kv, "sp_mode");
  sg_sp_mode spm = SG_SP_RING;
  if (*s && sg_sp_mode_parse(s, &spm) != SG_OK)
    bad_add(bad, "%s must be ring, ulysses or usp, not '%s'", "sp_mode", s);
  else if (*s)
    mc->sp_mode = (int)spm;
  s = sg_kv_str(kv, "activation_checkpointing");
  const int k = *s ? parse_ckpt(s) : mc->act_ckpt_every;
  if (k < 0)
    bad_add(bad, "%s must be none, blocks or every:K with K >= 1, not '%s'",
            "activation_checkpointing", s);
  else
    mc->act_ckpt_every = k;
  static const char *const pk[2] = {"pad_y", "pad_x"};
  for (int i = 0; i < 2; ++i) {
    s = sg_kv_str(kv, pk[i]);
    sg_boundary b;
    if (*s && sg_boundary_parse(s, &b) != SG_OK)
      bad_add(bad, "%s must be periodic, zero, reflect or replicate, not '%s'",
              pk[i], s);
    else if (*s)
      mc->pad[i] = b;
  }
}

sg_status sg_model_config_from_kv(sg_kv_t kv, sg_model_config *mc) {
  sg_model_kind kind;
  if (!kv || !mc)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_model_config_from_kv: NULL argument");
  sg_status st = sg_model_kind_parse(sg_kv_str(kv, "model"), &kind);
  if (st != SG_OK) return st;
  *mc = sg_model_defaults(kind);
  static const char *const ik[] = {"width",  "modes",      "modes_t", "pad_t",
                                   "layers", "proj_width", "blocks",  "levels",
                                   "kernel", "groups",     "patch",   "heads",
                                   "depth",  "window"};
  int64_t *const iv[] = {&mc->width,  &mc->modes,  &mc->modes_t,
                         &mc->pad_t,  &mc->layers, &mc->proj_width,
                         &mc->blocks, &mc->levels, &mc->kernel,
                         &mc->groups, &mc->patch,  &mc->heads,
                         &mc->depth,  &mc->window};
  _Static_assert(sizeof ik / sizeof *ik == sizeof iv / sizeof *iv,
                 "a key for every integer field");
  for (size_t i = 0; i < sizeof ik / sizeof *ik; ++i) get_int(kv, ik[i], iv[i]);
  get_bool(kv, "grid", &mc->add_grid);
  get_bool(kv, "shard_spectral", &mc->shard_spectral);
  get_bool(kv, "tp_sequence", &mc->tp_sequence);
  get_int(kv, "moe_experts", &mc->moe_experts);
  get_small(kv, "moe_topk", &mc->moe_topk);
  get_small(kv, "moe_every", &mc->moe_every);
  get_float(kv, "moe_capacity", &mc->moe_capacity);
  get_float(kv, "moe_aux", &mc->moe_aux);
  bad_buf bad = {.len = 0};
  get_choices(kv, mc, &bad);
  if (bad.len)
    return sg_error_set(SG_ERR_CONFIG, __FILE__, __LINE__, "%s", bad.text);
  return SG_OK;
}
