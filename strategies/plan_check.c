/* shardgrid — the mesh check of sg-plan (sg_plan.h): every way a candidate
 * mesh does not fit a model, named in one message.
 *
 * The rules are the ones the code enforces when it builds a run, restated
 * here as pure functions of the config, the grid and the mesh sizes so that
 * they can be evaluated without building anything (and without MPI):
 *   - the parallel plan's mesh roles and ZeRO stages (parallel.c
 *     plan_roles), the pipeline's limits (pipeline.c, sg-train's pipe.c);
 *   - sg-train's batch split: the global batch over dp x fsdp, then over the
 *     micro-batches (main.c setup);
 *   - each model's refusals at build time (fno.c, cnn.c, unet.c, vit.c,
 *     convnet.c), and the thin-shard check of every window op the model
 *     runs on a split grid (sg_window_halos + sg_halo_check, the same pure
 *     functions the halo exchange calls). */
#include "sg_autograd.h"
#include "sg_decomp.h"
#include "sg_model.h"
#include "sg_op_device.h"
#include "sg_pipeline.h"
#include "plan_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the mesh ------------------------------------------------------------ */

sg_status sg_plan_mesh_parse(const char *spec, sg_plan_mesh *m) {
  sg_status st = SG_OK;
  if (!spec || !m) SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_mesh_parse: NULL");
  memset(m, 0, sizeof *m);
  for (const char *p = spec; *p;) {
    const char *eq = strchr(p, '='), *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    char *e = NULL;
    long v = eq && eq < end ? strtol(eq + 1, &e, 10) : 0;
    if (!eq || eq > end || eq == p || (size_t)(eq - p) >= sizeof m->name[0] ||
        e != end || v < 1 || v > 1000000)
      SG_RAISE(SG_ERR_CONFIG,
               "mesh '%s': expected name=size,... (sizes >= 1, names of at "
               "most %d characters)",
               spec, (int)sizeof m->name[0] - 1);
    if (m->ndims == SG_PLAN_MAX_DIMS)
      SG_RAISE(SG_ERR_CONFIG, "mesh '%s': at most %d dims", spec,
               SG_PLAN_MAX_DIMS);
    memcpy(m->name[m->ndims], p, (size_t)(eq - p));
    m->size[m->ndims++] = (int)v;
    p = *end ? end + 1 : end;
    if (*end && !*p)
      SG_RAISE(SG_ERR_CONFIG, "mesh '%s' ends with a comma", spec);
  }
fail:
  return st;
}

int sg_plan_mesh_dim(const sg_plan_mesh *m, const char *name) {
  for (int i = 0; m && i < m->ndims; ++i)
    if (!strcmp(m->name[i], name)) return m->size[i];
  return 1;
}

int sg_plan_mesh_ranks(const sg_plan_mesh *m) {
  int n = 1;
  for (int i = 0; m && i < m->ndims; ++i) n *= m->size[i];
  return n;
}

void sg_plan_mesh_format(const sg_plan_mesh *m, char *buf, size_t cap) {
  size_t len = 0;
  if (cap) buf[0] = '\0';
  for (int i = 0; m && i < m->ndims && len < cap; ++i)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s=%d", i ? "," : "",
                            m->name[i], m->size[i]);
}

/* ---- the facts the checks need, from the config ---------------------------- */

sg_status sg_plan_model(const sg_plan_problem *pb, sg_model_config *mc) {
  memset(mc, 0, sizeof *mc);
  mc->kind = (sg_model_kind)-1;
  const sg_status st = sg_model_config_from_kv(pb->cfg, mc);
  /* history: sg-train's default where a table lacks it */
  mc->cin = pb->vars *
            (*sg_kv_str(pb->cfg, "history") ? sg_plan_int(pb, "history") : 1);
  mc->cout = pb->vars;
  return st;
}

int64_t sg_plan_int(const sg_plan_problem *pb, const char *key) {
  return sg_kv_int(pb->cfg, key);
}

int sg_plan_pieces(const sg_model_config *mc) {
  switch (mc->kind) {
  case SG_MODEL_FNO:
  case SG_MODEL_FNO3D: return (int)mc->layers + 2;
  case SG_MODEL_CNN: return (int)mc->blocks + 2;
  case SG_MODEL_UNET: return 2 * (int)mc->levels;
  case SG_MODEL_VIT:
  case SG_MODEL_SWIN: return (int)mc->depth + 2;
  default: return 0;
  }
}

int sg_plan_fno_role(const sg_model_config *mc, int tp, int l) {
  if (tp <= 1) return 0;
  return l % 2 ? 2 : l + 1 < mc->layers ? 1 : 0;
}

int sg_plan_units(const sg_model_config *mc, int tp) {
  int n = sg_plan_pieces(mc);
  if (mc->kind != SG_MODEL_FNO) return n;
  for (int l = 0; l < (int)mc->layers; ++l)
    n -= sg_plan_fno_role(mc, tp, l) == 2;
  return n;
}

int sg_plan_unit_start(const sg_model_config *mc, int tp, int u) {
  int k = 0;
  for (int i = 0; i < u; ++i) { /* piece k is layer k - 1 of the FNO */
    const int pair = mc->kind == SG_MODEL_FNO && k >= 1 && k <= mc->layers &&
                     sg_plan_fno_role(mc, tp, k - 1) == 1;
    k += pair ? 2 : 1;
  }
  return k;
}

int sg_plan_data_ranks(const sg_plan_mesh *m) {
  return sg_plan_mesh_dim(m, "dp") * sg_plan_mesh_dim(m, "fsdp") *
         sg_plan_mesh_dim(m, "ep");
}

int64_t sg_plan_micro(const sg_plan_problem *pb, const sg_plan_mesh *m) {
  return sg_plan_int(pb,
                     sg_plan_has_dim(m, "pp") ? "microbatches" : "grad_accum");
}

int sg_plan_has_dim(const sg_plan_mesh *m, const char *name) {
  for (int i = 0; m && i < m->ndims; ++i)
    if (!strcmp(m->name[i], name)) return 1;
  return 0;
}

/* An error message without its "[rank r] " head and " (file.c:line)" tail. */
static void strip_error(const char *e, char *msg, size_t cap) {
  if (e[0] == '[' && strstr(e, "] ")) e = strstr(e, "] ") + 2;
  snprintf(msg, cap, "%s", e);
  char *tail = strrchr(msg, '(');
  if (tail && tail > msg && tail[-1] == ' ' && strstr(tail, ".c:"))
    tail[-1] = '\0';
}

/* ---- the verdict ------------------------------------------------------------ */

typedef struct why_buf {
  char text[4096];
  size_t len;
  int n;
} why_buf;

static void why_add(why_buf *w, const char *fmt, ...) {
  char one[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(one, sizeof one, fmt, ap);
  va_end(ap);
  ++w->n;
  if (w->len < sizeof w->text)
    w->len += (size_t)snprintf(w->text + w->len, sizeof w->text - w->len,
                               "%s(%d) %s", w->n > 1 ? "; " : "", w->n, one);
}

/* The mesh itself: known, supported dims, each once; the rank count
 * (parallel.c plan_roles; the models take h and w, no d). */
static void check_dims(const sg_plan_problem *pb, const sg_model_config *mc,
                       const sg_plan_mesh *m, why_buf *w) {
  const int moe = (mc->kind == SG_MODEL_VIT || mc->kind == SG_MODEL_SWIN) &&
                  mc->moe_experts > 0;
  static const char *const usable[] = {"pp", "dp", "fsdp", "tp",
                                       "h",  "w",  "sp",   "cp"};
  static const char *const later[][2] = {{"d", "domain (3-D)"},
                                         {"ep", "expert"}};
  for (int i = 0; i < m->ndims; ++i) {
    const char *nm = m->name[i];
    int ok = 0, l = -1;
    for (size_t k = 0; k < sizeof usable / sizeof *usable; ++k)
      ok |= !strcmp(nm, usable[k]);
    for (int k = 0; k < 2; ++k)
      if (!strcmp(nm, later[k][0])) l = k;
    if (!strcmp(nm, "ep") && moe) ok = 1, l = -1; /* the vit's experts */
    for (int j = 0; j < i; ++j)
      if (!strcmp(nm, m->name[j]))
        why_add(w, "mesh dim '%s' appears twice", nm);
    if (l >= 0 && m->size[i] > 1)
      why_add(w,
              "mesh dim '%s' (size %d): %s parallelism is not supported by "
              "the parallel plan and the 2-D models yet (supported: pp, dp, "
              "fsdp, tp, h, w, sp for the vit, and ep for the vit and "
              "the swin with moe_experts; a size-1 %s dim is fine)",
              nm, m->size[i], later[l][1], nm);
    else if (!ok && l < 0)
      why_add(w,
              "mesh dim '%s' has no role in the parallel plan (known: dp, "
              "fsdp, h, w, d, tp, pp, sp, cp, ep)",
              nm);
  }
  if (pb->ranks > 0 && sg_plan_mesh_ranks(m) != pb->ranks)
    why_add(w, "the mesh has %d ranks (the product of its sizes), the run %d",
            sg_plan_mesh_ranks(m), pb->ranks);
}

/* The pipeline's schedule and pieces (sg-train's pipe.c, pipeline.c,
 * pipeline_schedule.c: the schedule generator's own refusals). */
static void check_pipeline(const sg_plan_problem *pb, const sg_model_config *mc,
                           const sg_plan_mesh *m, why_buf *w) {
  sg_pp_kind kind;
  char msg[384];
  if (sg_pp_kind_parse(sg_kv_str(pb->cfg, "pp_schedule"), &kind) != SG_OK) {
    strip_error(sg_last_error(), msg, sizeof msg);
    why_add(w, "%s", msg);
    return;
  }
  const int64_t pv = sg_plan_int(pb, "pp_virtual"),
                micro = sg_plan_int(pb, "microbatches");
  const int v = pv > 0 ? (int)pv : kind == SG_PP_INTERLEAVED ? 2 : 1;
  const int np = sg_plan_mesh_dim(m, "pp"),
            pieces = sg_plan_units(mc, sg_plan_mesh_dim(m, "tp"));
  sg_pp_schedule *sch = NULL;
  if (micro >= 1 && micro <= 1000000 &&
      sg_pp_schedule_create(kind, np, (int)micro, v, &sch) != SG_OK) {
    strip_error(sg_last_error(), msg, sizeof msg);
    why_add(w, "%s", msg);
  }
  sg_pp_schedule_destroy(&sch);
  if (pieces > 0 && np * v > pieces)
    why_add(w,
            "pipeline: %d virtual stages (pp = %d x v = %d) but the model has "
            "%d blocks: every virtual stage needs at least one block",
            np * v, np, v, pieces);
}

/* ZeRO stages and the pipeline (parallel.c plan_roles, pipeline.c, sg-train's
 * pipe.c and check_rollout). */
static void check_plan(const sg_plan_problem *pb, const sg_model_config *mc,
                       const sg_plan_mesh *m, why_buf *w) {
  const int64_t zero = sg_plan_int(pb, "zero");
  const int fsdp = sg_plan_mesh_dim(m, "fsdp"), pp = sg_plan_has_dim(m, "pp");
  const int over_domain = sg_kv_bool(pb->cfg, "zero_over_domain");
  if (zero < 0 || zero > 3)
    why_add(w, "zero must be 0, 1, 2 or 3, not %lld", (long long)zero);
  if (fsdp > 1 && zero == 0)
    why_add(w, "mesh dim 'fsdp' shards the model state: set zero = 1, 2 or 3 "
               "(or use 'dp' for plain data parallelism)");
  if (zero >= 1 && !sg_plan_has_dim(m, "fsdp") && !over_domain)
    why_add(w,
            "zero = %lld shards over the 'fsdp' mesh dim (or the domain dims "
            "with zero_over_domain): this mesh has neither",
            (long long)zero);
  if (!pp) {
    if (sg_plan_int(pb, "microbatches") > 1)
      why_add(w,
              "microbatches = %lld needs a 'pp' mesh dim (without a pipeline "
              "use grad_accum)",
              (long long)sg_plan_int(pb, "microbatches"));
    return;
  }
  if (sg_plan_int(pb, "grad_accum") != 1)
    why_add(w,
            "grad_accum = %lld with pp: the pipeline's micro-batches are set "
            "by microbatches",
            (long long)sg_plan_int(pb, "grad_accum"));
  if (sg_plan_int(pb, "rollout_train") > 1 &&
      strcmp(sg_kv_str(pb->cfg, "rollout_grad"), "pushforward") != 0)
    why_add(w,
            "rollout_train = %lld, rollout_grad = full with a pp mesh dim: "
            "the gradient through every step does not run through the "
            "pipeline (rollout_grad = pushforward does)",
            (long long)sg_plan_int(pb, "rollout_train"));
  check_pipeline(pb, mc, m, w);
}

/* sg-train's batch split: batch over dp x fsdp, then over micro-batches. */
static void check_batch(const sg_plan_problem *pb, const sg_plan_mesh *m,
                        why_buf *w) {
  const int64_t batch = sg_plan_int(pb, "batch");
  const int nd = sg_plan_data_ranks(m);
  const int pp = sg_plan_has_dim(m, "pp");
  const int64_t micro = sg_plan_micro(pb, m);
  if (batch < 1 || batch % nd) {
    why_add(
        w,
        "global batch %lld is not divisible by the %d data-parallel ranks (dp x fsdp%s)",
        (long long)batch, nd, sg_plan_has_dim(m, "ep") ? " x ep" : "");
    return;
  }
  if (micro < 1 || (batch / nd) % micro)
    why_add(w,
            "%s = %lld must be >= 1 and divide the %lld samples per data "
            "rank (batch %lld over %d data-parallel ranks)",
            pp ? "microbatches" : "grad_accum", (long long)micro,
            (long long)(batch / nd), (long long)batch, nd);
  else if (pp && batch / nd / micro > 256)
    why_add(w, "pp: a micro-batch of %lld samples per rank (at most 256)",
            (long long)(batch / nd / micro));
}

/* The thin-shard check of one window op on a grid dim of n cells over p
 * ranks; *n_out gets the op's output size. 0 when it fits. */
static int window_fits(int dim, int64_t n, int p, sg_window win, int64_t *n_out,
                       char *msg, size_t cap) {
  int64_t *halo = malloc(2 * (size_t)p * sizeof *halo),
          *sizes = malloc((size_t)p * sizeof *sizes);
  sg_status st = halo && sizes ? SG_OK : SG_ERR_ALLOC;
  if (st == SG_OK) st = sg_window_output_size(sg_window_normal(win), n, n_out);
  if (st == SG_OK) st = sg_window_halos(n, p, win, halo, NULL, NULL);
  for (int r = 0; st == SG_OK && r < p; ++r) sizes[r] = sg_split_size(n, p, r);
  if (st == SG_OK) st = sg_halo_check(dim, p, sizes, win.boundary, halo);
  if (st != SG_OK) strip_error(sg_last_error(), msg, cap);
  free(halo);
  free(sizes);
  return st != SG_OK;
}

/* A 'same' convolution of odd kernel k with boundary b (convnet.c). */
static sg_window conv_same(int64_t k, sg_boundary b) {
  sg_window win = {.kernel = k,
                   .stride = 1,
                   .dilation = 1,
                   .pad = {(k - 1) / 2, k - 1 - (k - 1) / 2},
                   .boundary = b};
  return win;
}

/* The window ops the model runs along one grid dim (i: 0 y over h, 1 x
 * over w), checked in order; the first that does not fit is reported. */
static void check_windows(const sg_plan_problem *pb, const sg_model_config *mc,
                          int i, int p, why_buf *w) {
  const int kind = (int)mc->kind;
  const int64_t n = i == 0 ? pb->ny : pb->nx, k = mc->kernel;
  const char *dim = i == 0 ? "h" : "w";
  const sg_boundary b = mc->pad[i];
  char msg[384] = "";
  int64_t out = 0;
  int bad = 0;
  if (kind == SG_MODEL_CNN) {
    bad = window_fits(i, n, p, conv_same(k, b), &out, msg, sizeof msg);
  } else if (kind == SG_MODEL_UNET) {
    const int L = (int)mc->levels;
    const sg_window pool = {.kernel = 2, .stride = 2};
    const sg_window up = {.kernel = 3,
                          .stride = 1,
                          .dilation = 1,
                          .pad = {1, 1},
                          .up = 2,
                          .boundary = SG_BOUNDARY_REPLICATE};
    for (int l = 0; l < L && !bad; ++l) {
      const int64_t nl = n >> l;
      bad = (l > 0 &&
             window_fits(i, n >> (l - 1), p, pool, &out, msg, sizeof msg)) ||
            window_fits(i, nl, p, conv_same(k, b), &out, msg, sizeof msg) ||
            (l > 0 && window_fits(i, nl, p, up, &out, msg, sizeof msg));
    }
  } else if (kind == SG_MODEL_VIT || kind == SG_MODEL_SWIN) {
    const int64_t ps = mc->patch;
    const sg_window patch = {.kernel = ps, .stride = ps};
    if (ps >= 1 && n % ps == 0)
      bad = window_fits(i, n, p, patch, &out, msg, sizeof msg);
  }
  if (bad)
    why_add(w,
            "%s = %d: a shard of the %lld cells is thinner than a halo the "
            "model needs (%s)",
            dim, p, (long long)n, msg);
}

/* The ViT's mixture of experts (models/vit.c vit_moe_check, in its
 * words). */
static void check_moe(const sg_plan_problem *pb, const sg_model_config *mc,
                      const sg_plan_mesh *m, why_buf *w) {
  const int64_t E = mc->moe_experts, k = mc->moe_topk;
  const int ep = sg_plan_mesh_dim(m, "ep"), tp = sg_plan_mesh_dim(m, "tp");
  if (E <= 0) return;
  if (k < 1 || k > 2 || k > E)
    why_add(w,
            "vit: moe_topk must be 1 or 2 and at most moe_experts (got "
            "moe_topk %lld, %lld experts)",
            (long long)k, (long long)E);
  if (E % ep)
    why_add(w,
            "vit: moe_experts (%lld) must be divisible by ep (%d): every ep "
            "rank holds moe_experts/ep experts",
            (long long)E, ep);
  if ((4 * mc->width) % tp) /* vit.c's VIT_MLP_RATIO */
    why_add(w,
            "vit: the experts' hidden width (4 x width = %lld) must be "
            "divisible by tp (%d): tensor parallelism splits it",
            (long long)(4 * mc->width), tp);
  if (!strcmp(sg_kv_str(pb->cfg, "param_dtype"), "bf16"))
    why_add(w, "vit: mixture of experts with param_dtype = bf16 is not "
               "built (the experts compute in f32/f64)");
  if (mc->moe_every < 1) why_add(w, "vit: moe_every must be >= 1");
}

/* The ViT's attention over the split tokens (sp_mode; models/ag_ulysses.c's
 * sg_sp_mode_check, in its words): Ulysses attends whole heads on every rank
 * of its all-to-all (h and w; USP: w). */
static void check_sp_mode(const sg_model_config *mc, int tp, int ph, int pw,
                          int sp, why_buf *w) {
  const sg_sp_mode mode = (sg_sp_mode)mc->sp_mode;
  const int64_t heads = mc->heads;
  int P = mode == SG_SP_ULYSSES ? ph * pw : pw;
  if (sp > 1) P = mode == SG_SP_USP ? sp : P * sp; /* ag_ulysses.c */
  if (mode != SG_SP_RING && heads >= 1 && (heads % tp || (heads / tp) % P))
    why_add(
        w,
        "vit: sp_mode = %s needs the heads (%lld) divisible by tp x the domain "
        "ranks of its all-to-all (%d x %d: %s): every rank attends whole heads "
        "(use sp_mode = ring, which has no such constraint)",
        mode == SG_SP_USP ? "usp" : "ulysses", (long long)heads, tp, P,
        sp > 1 ? (mode == SG_SP_USP ? "sp" : "h, w and sp")
               : (mode == SG_SP_USP ? "w" : "h and w"));
}

/* The ViT's tp_sequence (vit.c vit_check_seq, in its words): a token per
 * tp rank on the smallest shard (with sp: sp piece). */
static void check_tp_sequence(const sg_plan_problem *pb,
                              const sg_model_config *mc, const sg_plan_mesh *m,
                              int tp, int64_t p, why_buf *w) {
  if (!mc->tp_sequence || p < 1) return;
  const int sp = sg_plan_mesh_dim(m, "sp") * sg_plan_mesh_dim(m, "cp");
  const int64_t tok = (pb->ny / p / sg_plan_mesh_dim(m, "h")) *
                      (pb->nx / p / sg_plan_mesh_dim(m, "w")) / sp;
  if (tp > 1 && tok < tp)
    why_add(w,
            "vit: tp_sequence needs at least one token per tp rank (%lld "
            "tokens on the smallest %s, tp = %d)",
            (long long)tok, sp > 1 ? "sp piece" : "shard", tp);
}

/* The sp (cp) dim (model.c sg_model_sp_check, vit.c vit_check_sp, in
 * their words): the vit only; a token per sp rank on the smallest
 * shard. */
static void check_sp(const sg_plan_problem *pb, const sg_model_config *mc,
                     const sg_plan_mesh *m, why_buf *w) {
  const char *nm = sg_plan_has_dim(m, "cp") ? "cp" : "sp";
  const int sp = sg_plan_mesh_dim(m, "sp") * sg_plan_mesh_dim(m, "cp");
  const char *model = sg_kv_str(pb->cfg, "model");
  const int64_t p = mc->patch;
  if (sp <= 1) return;
  if (mc->kind != SG_MODEL_VIT) {
    why_add(w,
            "%s: mesh dim '%s' (size %d) splits the token sequence: sequence "
            "parallelism is built for the vit only (split %s with dp, fsdp, "
            "h or w instead)",
            model, nm, sp, model);
    return;
  }
  if (sg_plan_mesh_dim(m, "sp") > 1 && sg_plan_mesh_dim(m, "cp") > 1)
    why_add(w, "vit: mesh dims sp and cp are the same role: use one");
  if (p < 1) return;
  const int64_t tok = (pb->ny / p / sg_plan_mesh_dim(m, "h")) *
                      (pb->nx / p / sg_plan_mesh_dim(m, "w"));
  if (tok < sp)
    why_add(w,
            "vit: the sp dim needs at least one token per sp rank (%lld "
            "tokens on the smallest shard, sp = %d)",
            (long long)tok, sp);
}

/* FNO-3D (fno.c): modes that fit the grid and the padded time axis (the
 * out_frames output steps + pad_t), one variable (its output channels are
 * the time steps), no pipeline (no pieces yet). */
static void check_fno3d(const sg_plan_problem *pb, const sg_model_config *mc,
                        const sg_plan_mesh *m, why_buf *w) {
  const int64_t ny = pb->ny, nx = pb->nx, md = mc->modes, mt = mc->modes_t,
                nt = sg_plan_int(pb, "out_frames"), pt = mc->pad_t;
  if (md < 1 || 2 * md > ny || md > nx / 2 + 1)
    why_add(w,
            "FNO-3D: modes %lld do not fit a %lldx%lld grid (2 modes <= ny, "
            "modes <= nx/2+1)",
            (long long)md, (long long)ny, (long long)nx);
  if (pt < 0)
    why_add(w, "FNO-3D: pad_t must be >= 0 (got %lld)", (long long)pt);
  else if (mt < 1 || 2 * mt > nt + pt)
    why_add(w,
            "FNO-3D: modes_t %lld do not fit %lld output frames + %lld "
            "padding (1 <= modes_t, 2 modes_t <= out_frames + pad_t)",
            (long long)mt, (long long)nt, (long long)pt);
  if (pb->vars != 1)
    why_add(w,
            "FNO-3D: one variable (got %d): its output channels are the "
            "out_frames time steps",
            pb->vars);
  if (sg_plan_mesh_dim(m, "pp") > 1)
    why_add(w, "FNO-3D: mesh dim 'pp': the model has no pipeline pieces yet");
}

/* What each model refuses when it is built (fno.c, cnn.c, unet.c, vit.c,
 * convnet.c), and the thin shards of its window ops. */
static void check_model(const sg_plan_problem *pb, const sg_model_config *mc,
                        const sg_plan_mesh *m, why_buf *w) {
  const int kind = (int)mc->kind;
  const int64_t ny = pb->ny, nx = pb->nx, width = mc->width;
  const int ph = sg_plan_mesh_dim(m, "h"), pw = sg_plan_mesh_dim(m, "w"),
            tp = sg_plan_mesh_dim(m, "tp");
  static const char *const whos[] = {"FNO", "CNN",    "U-Net",
                                     "vit", "FNO-3D", "swin"};
  const char *who = kind >= 0 && kind < 6 ? whos[kind] : "model";
  if (tp > 1 && (kind == SG_MODEL_FNO3D || kind < 0 ||
                 kind >= SG_MODEL_COUNT)) /* fno3d or a registered one */
    why_add(
        w,
        "%s: mesh dim 'tp' (size %d): this model has no tensor parallelism (models with TP: vit, swin, fno, cnn, unet)",
        who, tp);
  if (tp > 1 && kind == SG_MODEL_FNO && width < tp)
    why_add(
        w,
        "FNO: width (%lld) must be >= tp (%d): tensor parallelism splits the channels of the spectral layers",
        (long long)width, tp);
  if (ph > ny || pw > nx)
    why_add(
        w,
        "a %lldx%lld grid cannot be split over h = %d, w = %d (empty shards)",
        (long long)ny, (long long)nx, ph, pw);
  if (kind == SG_MODEL_CNN || kind == SG_MODEL_UNET) {
    const int64_t k = mc->kernel, g = mc->groups;
    if (k < 1 || k % 2 == 0)
      why_add(w, "%s: kernel must be odd (got %lld)", who, (long long)k);
    if (g < 1 || width % g)
      why_add(w, "%s: groups (%lld) must divide width (%lld)", who,
              (long long)g, (long long)width);
    if (tp > 1 && g >= 1 && g < tp)
      why_add(
          w,
          "%s: groups (%lld) must be >= tp (%d): tensor parallelism splits the channels of the blocks by whole GroupNorm groups",
          who, (long long)g, tp);
    if (kind == SG_MODEL_CNN && (ny < k || nx < k))
      why_add(w, "CNN: grid %lldx%lld smaller than the kernel %lld",
              (long long)ny, (long long)nx, (long long)k);
    if (kind == SG_MODEL_UNET) {
      const int64_t L = mc->levels;
      const int64_t f = L >= 1 && L < 20 ? (int64_t)1 << (L - 1) : 1;
      if (L < 1 || ny % f || nx % f || ny / f < k || nx / f < k) {
        why_add(
            w,
            "U-Net: a %lldx%lld grid does not fit %lld levels (divisible by %lld, "
            "at least %lld cells at the coarsest level)",
            (long long)ny, (long long)nx, (long long)L, (long long)f,
            (long long)k);
        return; /* the window checks assume the levels fit */
      }
    }
  } else if (kind == SG_MODEL_FNO) {
    const int64_t md = mc->modes;
    if (md < 1 || 2 * md > ny || md > nx / 2 + 1)
      why_add(w,
              "FNO: modes %lld do not fit a %lldx%lld grid (2 modes <= ny, "
              "modes <= nx/2+1)",
              (long long)md, (long long)ny, (long long)nx);
  } else if (kind == SG_MODEL_FNO3D) {
    check_fno3d(pb, mc, m, w);
  } else if (kind == SG_MODEL_VIT || kind == SG_MODEL_SWIN) {
    const int64_t heads = mc->heads, p = mc->patch;
    if (heads < 1 || width % heads)
      why_add(w, "%s: heads (%lld) must divide width (%lld)", who,
              (long long)heads, (long long)width);
    if (heads >= 1 && heads % tp)
      why_add(
          w,
          "%s: heads (%lld) must be divisible by tp (%d): tensor parallelism splits the heads",
          who, (long long)heads, tp);
    check_tp_sequence(pb, mc, m, tp, p, w);
    check_moe(pb, mc, m, w);
    if (kind == SG_MODEL_VIT)
      check_sp_mode(mc, tp, ph, pw,
                    sg_plan_mesh_dim(m, "sp") * sg_plan_mesh_dim(m, "cp"), w);
    else if (mc->sp_mode != SG_SP_RING)
      why_add(w, "swin: sp_mode does not apply (window attention is local "
                 "to a rank; the shifted windows get their tokens by the "
                 "halo layer)");
    char msg[256];
    if (p < 1 || ny % p || nx % p)
      why_add(
          w,
          "%s: grid %lldx%lld is not divisible by patch %lld (patches are not padded)",
          who, (long long)ny, (long long)nx, (long long)p);
    else if (p > ny / ph || p > nx / pw)
      why_add(
          w,
          "%s: patch %lld is larger than the smallest shard (%lldx%lld cells "
          "over h = %d, w = %d)",
          who, (long long)p, (long long)(ny / ph), (long long)(nx / pw), ph,
          pw);
    else if (kind == SG_MODEL_SWIN &&
             !sg_swin_windows_fit(ny / p, nx / p, mc->window, ph, pw, msg,
                                  sizeof msg))
      why_add(w, "%s", msg);
  }
  if (ph > ny || pw > nx) return;
  if (ph > 1) check_windows(pb, mc, 0, ph, w);
  if (pw > 1) check_windows(pb, mc, 1, pw, w);
}

/* device = cuda (sg-train's `device` key): one GPU per rank (the
 * node-local rank's), any mesh of dp, h, w, d and tp whose model's ops run
 * on sharded device variables; what it cannot do yet, by name. */
static void check_device(const sg_plan_problem *pb, const sg_model_config *mc,
                         const sg_plan_mesh *m, why_buf *w) {
  sg_kv_t kv = pb->cfg;
  const char *d = sg_kv_str(kv, "device");
  if (!strcmp(d, "host")) return;
  if (strcmp(d, "cuda")) {
    why_add(w, "device must be host or cuda, not '%s'", d);
    return;
  }
  /* the models whose ops have device paths (sg_model_i.device_ok) */
  if ((int)mc->kind >= 0 && mc->kind != SG_MODEL_FNO &&
      mc->kind != SG_MODEL_FNO3D && mc->kind != SG_MODEL_CNN)
    why_add(w, "device = cuda runs the fno, fno3d and cnn so far, not the %s",
            sg_model_kind_name(mc->kind));
  /* the strategies whose buffers are host code */
  static const char *const host_dims[] = {"pp", "sp", "cp", "ep"};
  for (size_t k = 0; k < sizeof host_dims / sizeof *host_dims; ++k)
    if (sg_plan_mesh_dim(m, host_dims[k]) > 1)
      why_add(w,
              "device = cuda with %s = %d is not supported yet (%s on "
              "devices: issue 22)",
              host_dims[k], sg_plan_mesh_dim(m, host_dims[k]),
              k == 0 ? "the pipeline's stages and transfers are host code"
                     : "the model's sequence and expert splits do not run");
  /* the loss over a split batch or domain is the distributed loss (sg-train,
   * sg_train_ar_loss): on the device when the op device table says so */
  const int dsplit = sg_plan_mesh_dim(m, "dp") * sg_plan_mesh_dim(m, "fsdp"),
            gsplit = sg_plan_mesh_dim(m, "h") * sg_plan_mesh_dim(m, "w") *
                     sg_plan_mesh_dim(m, "d");
  const sg_op_device *dl = sg_op_device_find("dist_loss");
  const char *dl_why = !dl ? "not in the op device table"
                       : !sg_op_device_on_cuda(dl) ? dl->host_only
                       : gsplit > 1 ? sg_op_device_sharded_why("dist_loss")
                                    : NULL;
  if ((dsplit > 1 || gsplit > 1) && dl_why)
    why_add(w,
            "device = cuda with the batch or the domain split (dp x fsdp = %d, "
            "h x w x d = %d): the distributed loss (dist_loss) does not run on "
            "devices yet: %s",
            dsplit, gsplit, dl_why);
  /* the FNO's spectral layers on a split domain: the distributed FFT's
   * transposes on device buffers (the op device table says when) */
  const char *spec = sg_op_device_sharded_why("spectral_conv");
  if ((mc->kind == SG_MODEL_FNO || mc->kind == SG_MODEL_FNO3D) && gsplit > 1 &&
      spec)
    why_add(w,
            "device = cuda: the %s on a split domain (h x w x d = %d ranks) "
            "runs its spectral layers on sharded device variables: %s",
            sg_model_kind_name(mc->kind), gsplit, spec);
  if (sg_plan_int(pb, "zero") >= 3)
    why_add(w,
            "device = cuda with zero = %lld is not supported yet (zero 0-2: "
            "the parameters' gathers and their prefetch are host code)",
            (long long)sg_plan_int(pb, "zero"));
  if (strcmp(sg_kv_str(kv, "param_dtype"), "f32"))
    why_add(w,
            "device = cuda with param_dtype = %s is not supported yet (f32 "
            "only)",
            sg_kv_str(kv, "param_dtype"));
  /* activation_checkpointing runs: a checkpointed block replays its ops on
   * their device (models/ag_checkpoint.c) */
  if (strcmp(sg_kv_str(kv, "rollout_grad"), "full") &&
      sg_plan_int(pb, "rollout_train") > 1)
    why_add(w,
            "device = cuda with rollout_grad = %s is not supported yet (its "
            "feedback runs on the host)",
            sg_kv_str(kv, "rollout_grad"));
  if (strcmp(sg_kv_str(kv, "loss_weighting"), "none"))
    why_add(w, "device = cuda with loss_weighting = %s is not supported yet",
            sg_kv_str(kv, "loss_weighting"));
}

sg_status sg_plan_check(const sg_plan_problem *pb, const sg_plan_mesh *m,
                        char *why, size_t cap) {
  if (why && cap) why[0] = '\0';
  if (!pb || !m)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_plan_check: NULL argument");
  why_buf w;
  memset(&w, 0, sizeof w);
  sg_model_config mc;
  if (sg_plan_model(pb, &mc) != SG_OK) { /* every invalid model key */
    char msg[1024];
    strip_error(sg_last_error(), msg, sizeof msg);
    why_add(&w, "%s", msg);
  }
  check_dims(pb, &mc, m, &w);
  check_sp(pb, &mc, m, &w);
  check_plan(pb, &mc, m, &w);
  check_batch(pb, m, &w);
  check_device(pb, &mc, m, &w);
  if ((int)mc.kind >= 0) check_model(pb, &mc, m, &w);
  if (!w.n) return SG_OK;
  char spec[128], head[256];
  sg_plan_mesh_format(m, spec, sizeof spec);
  snprintf(head, sizeof head,
           "mesh %s does not fit the %s on a %lldx%lld grid (%d problem%s): ",
           spec, sg_kv_str(pb->cfg, "model"), (long long)pb->ny,
           (long long)pb->nx, w.n, w.n > 1 ? "s" : "");
  if (why && cap) snprintf(why, cap, "%s%s", head, w.text);
  return sg_error_set(SG_ERR_CONFIG, __FILE__, __LINE__, "%s%s", head, w.text);
}
