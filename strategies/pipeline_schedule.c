/* Pipeline schedules as data: generators, checker, simulated time.
 * See sg_pipeline.h and docs/pipeline.md. */
#include "sg_pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[SG_PP_KIND_COUNT] = {"gpipe", "1f1b",
                                                         "interleaved",
                                                         "zb-h1"};
static const char *const op_names[SG_PP_OP_COUNT] = {
    "F", "B", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};

const char *sg_pp_kind_name(sg_pp_kind kind) {
  return kind >= 0 && kind < SG_PP_KIND_COUNT ? kind_names[kind] : "?";
}

const char *sg_pp_op_name(sg_pp_op op) {
  return op >= 0 && op < SG_PP_OP_COUNT ? op_names[op] : "?";
}

void sg_pp_action_label(const sg_pp_schedule *s, const sg_pp_action *a,
                        char *out, size_t n) {
  if (s->v > 1)
    snprintf(out, n, "%s%d.%d", sg_pp_op_name(a->op), a->mb, a->chunk);
  else
    snprintf(out, n, "%s%d", sg_pp_op_name(a->op), a->mb);
}

sg_status sg_pp_kind_parse(const char *name, sg_pp_kind *kind) {
  sg_status st = SG_OK;
  for (int k = 0; k < SG_PP_KIND_COUNT; ++k)
    if (name && strcmp(name, kind_names[k]) == 0) {
      *kind = (sg_pp_kind)k;
      return SG_OK;
    }
  SG_RAISE(SG_ERR_INVALID_ARG,
           "unknown pipeline schedule '%s' (use gpipe, "
           "1f1b, interleaved or zb-h1)",
           name ? name : "(null)");
fail:
  return st;
}

int sg_pp_virtual_stage(const sg_pp_schedule *s, int stage, int chunk) {
  return chunk * s->p + stage;
}

int sg_pp_peer(const sg_pp_schedule *s, int stage, const sg_pp_action *a) {
  int g = sg_pp_virtual_stage(s, stage, a->chunk);
  switch (a->op) {
  case SG_PP_SEND_F:
  case SG_PP_RECV_B: return (g + 1) % s->p;
  case SG_PP_RECV_F:
  case SG_PP_SEND_B: return (g - 1 + s->p) % s->p;
  default: return -1;
  }
}

static int imin(int a, int b) { return a < b ? a : b; }

int sg_pp_peak_formula(const sg_pp_schedule *s, int stage) {
  switch (s->kind) {
  case SG_PP_GPIPE: return s->m;
  case SG_PP_1F1B:
  case SG_PP_ZB_H1: return imin(s->m, s->p - stage);
  case SG_PP_INTERLEAVED:
    return imin(s->m * s->v, (s->v - 1) * s->p + 2 * (s->p - 1 - stage) + 1);
  default: return -1;
  }
}

int sg_pp_peak_fw_formula(const sg_pp_schedule *s, int stage) {
  return s->kind == SG_PP_ZB_H1 ? imin(s->m, s->p)
                                : sg_pp_peak_formula(s, stage);
}

/* ---- generators --------------------------------------------------------- */

static sg_status check_params(sg_pp_kind kind, int p, int m, int v) {
  sg_status st = SG_OK;
  const char *k = sg_pp_kind_name(kind);
  if (kind < 0 || kind >= SG_PP_KIND_COUNT)
    SG_RAISE(SG_ERR_INVALID_ARG, "pipeline schedule: invalid kind %d",
             (int)kind);
  if (p < 1)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "pipeline schedule %s: p = %d stages, need p >= 1", k, p);
  if (m < 1)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "pipeline schedule %s: m = %d micro-batches, need m >= 1", k, m);
  if (v < 1)
    SG_RAISE(
        SG_ERR_INVALID_ARG,
        "pipeline schedule %s: v = %d virtual stages per rank, need v >= 1", k,
        v);
  if (kind != SG_PP_INTERLEAVED && v != 1)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "pipeline schedule %s has no virtual stages: v must be 1, "
             "not %d (use kind = interleaved)",
             k, v);
  if (kind == SG_PP_INTERLEAVED) {
    if (v < 2)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "pipeline schedule interleaved needs v >= 2 virtual "
               "stages per rank, not %d (v = 1 is kind = 1f1b)",
               v);
    if (p < 2)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "pipeline schedule interleaved needs p >= 2 stages, not %d", p);
    if (m < p)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "pipeline schedule interleaved needs m >= p: m = %d "
               "micro-batches < p = %d stages",
               m, p);
    if (m % p)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "pipeline schedule interleaved needs m to be a multiple "
               "of p (Megatron's rule): m = %d, p = %d",
               m, p);
  }
fail:
  return st;
}

/* Appends the actions of one stage, with the transfers around each compute
 * action (sg_pipeline.h, "Transfers"). */
typedef struct emitter {
  sg_pp_schedule *s;
  int stage, n;
  int wdone, bdone; /* ZB-H1: W follows B in order, deferred */
} emitter;

static void put(emitter *e, sg_pp_op op, int mb, int chunk) {
  e->s->act[e->n++] = (sg_pp_action){op, mb, chunk};
}

static void compute(emitter *e, sg_pp_op op, int mb, int chunk) {
  int g = sg_pp_virtual_stage(e->s, e->stage, chunk);
  int last = e->s->p * e->s->v - 1, multi = e->s->p > 1;
  if (multi && op == SG_PP_F && g > 0) put(e, SG_PP_RECV_F, mb, chunk);
  if (multi && op == SG_PP_B && g < last) put(e, SG_PP_RECV_B, mb, chunk);
  put(e, op, mb, chunk);
  if (multi && op == SG_PP_F && g < last) put(e, SG_PP_SEND_F, mb, chunk);
  if (multi && op == SG_PP_B && g > 0) put(e, SG_PP_SEND_B, mb, chunk);
}

/* ZB-H1: stage s keeps up to s weight gradients pending (the last stage
 * defers the most: its B's are the head of the gradient chain, and its
 * deferred W's fill the cool-down, where 1F1B idles). */
static void backward_zb(emitter *e, int mb, int lag) {
  compute(e, SG_PP_B, mb, 0);
  ++e->bdone;
  if (lag >= 0 && e->bdone - e->wdone > lag) compute(e, SG_PP_W, e->wdone++, 0);
}

/* Interleaved: the k-th forward (backward) of a stage is micro-batch
 * (k / pv) p + k % p on chunk (k / p) % v (backward: v-1 minus that),
 * micro-batches going round in groups of p (Megatron). */
static void interleaved_step(emitter *e, sg_pp_op op, int k) {
  int p = e->s->p, v = e->s->v;
  int mb = (k / (p * v)) * p + k % p, c = (k / p) % v;
  compute(e, op, mb, op == SG_PP_B ? v - 1 - c : c);
}

static void gen_stage(emitter *e) {
  const sg_pp_schedule *s = e->s;
  int p = s->p, m = s->m, st = e->stage;
  if (s->kind == SG_PP_GPIPE) {
    for (int j = 0; j < m; ++j) compute(e, SG_PP_F, j, 0);
    for (int j = 0; j < m; ++j) compute(e, SG_PP_B, j, 0);
  } else if (s->kind == SG_PP_INTERLEAVED) {
    int total = m * s->v;
    int warm = imin(total, 2 * (p - st - 1) + (s->v - 1) * p);
    for (int k = 0; k < warm; ++k) interleaved_step(e, SG_PP_F, k);
    for (int i = 0; i < total - warm; ++i) {
      interleaved_step(e, SG_PP_F, warm + i);
      interleaved_step(e, SG_PP_B, i);
    }
    for (int i = total - warm; i < total; ++i) interleaved_step(e, SG_PP_B, i);
  } else { /* 1F1B; ZB-H1 is 1F1B with W split off and deferred */
    int warm = imin(p - st - 1, m);
    int lag = s->kind == SG_PP_ZB_H1 ? st : -1;
    for (int j = 0; j < warm; ++j) compute(e, SG_PP_F, j, 0);
    for (int i = 0; i < m - warm; ++i) {
      compute(e, SG_PP_F, warm + i, 0);
      backward_zb(e, i, lag);
    }
    for (int i = m - warm; i < m; ++i) backward_zb(e, i, lag);
    while (lag >= 0 && e->wdone < m) compute(e, SG_PP_W, e->wdone++, 0);
  }
}

sg_status sg_pp_schedule_create(sg_pp_kind kind, int p, int m, int v,
                                sg_pp_schedule **out) {
  sg_status st = SG_OK;
  sg_pp_schedule *s = NULL;
  *out = NULL;
  SG_TRY(check_params(kind, p, m, v));
  s = calloc(1, sizeof *s);
  if (!s) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  *s = (sg_pp_schedule){kind, p, m, v, NULL, NULL};
  /* at most F, B, W and four transfers per (stage, chunk, micro-batch) */
  s->off = malloc((size_t)(p + 1) * sizeof *s->off);
  s->act = malloc((size_t)7 * (size_t)p * (size_t)m * (size_t)v *
                  sizeof *s->act);
  if (!s->off || !s->act) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  emitter e = {s, 0, 0, 0, 0};
  for (int stg = 0; stg < p; ++stg) {
    s->off[stg] = e.n;
    e.stage = stg;
    e.wdone = e.bdone = 0;
    gen_stage(&e);
  }
  s->off[p] = e.n;
  *out = s;
  s = NULL;
fail:
  sg_pp_schedule_destroy(&s);
  return st;
}

sg_status sg_pp_schedule_destroy(sg_pp_schedule **s) {
  if (!s || !*s) return SG_OK;
  free((*s)->off);
  free((*s)->act);
  free(*s);
  *s = NULL;
  return SG_OK;
}

/* ---- spec parsing --------------------------------------------------------- */

static sg_status parse_int(const char *spec, const char *key, const char *val,
                           int *out) {
  sg_status st = SG_OK;
  char *end = NULL;
  long x = strtol(val, &end, 10);
  if (!*val || *end || x < -1000000 || x > 1000000)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "pipeline spec '%s': %s needs an integer, not '%s'", spec, key,
             val);
  *out = (int)x;
fail:
  return st;
}

/* One "key=value" entry of a spec; buf is modified. */
static sg_status parse_entry(const char *spec, char *entry, int *p, int *m,
                             int *v, sg_pp_kind *kind, int *have_kind) {
  sg_status st = SG_OK;
  char *eq = strchr(entry, '=');
  if (!eq || eq == entry)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "pipeline spec '%s': entry '%s' is not key=value", spec, entry);
  *eq = '\0';
  const char *key = entry, *val = eq + 1;
  if (strcmp(key, "pp") == 0 || strcmp(key, "p") == 0) {
    SG_TRY(parse_int(spec, key, val, p));
  } else if (strcmp(key, "m") == 0) {
    SG_TRY(parse_int(spec, key, val, m));
  } else if (strcmp(key, "v") == 0) {
    SG_TRY(parse_int(spec, key, val, v));
  } else if (strcmp(key, "kind") == 0) {
    SG_TRY(sg_pp_kind_parse(val, kind));
    *have_kind = 1;
  } else {
    SG_RAISE(SG_ERR_INVALID_ARG,
             "pipeline spec '%s': unknown key '%s' (use pp, m, "
             "kind, v)",
             spec, key);
  }
fail:
  return st;
}

sg_status sg_pp_schedule_parse(const char *spec, sg_pp_schedule **out) {
  sg_status st = SG_OK;
  int p = 0, m = 0, v = 1, have_kind = 0, have_p = 0, have_m = 0;
  sg_pp_kind kind = SG_PP_1F1B;
  char *buf = NULL;
  *out = NULL;
  if (!spec) SG_RAISE(SG_ERR_INVALID_ARG, "pipeline spec is NULL");
  buf = malloc(strlen(spec) + 1);
  if (!buf) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  strcpy(buf, spec);
  for (char *e = buf, *next; e; e = next) {
    next = strchr(e, ',');
    if (next) *next++ = '\0';
    have_p |= strncmp(e, "pp=", 3) == 0 || strncmp(e, "p=", 2) == 0;
    have_m |= strncmp(e, "m=", 2) == 0;
    SG_TRY(parse_entry(spec, e, &p, &m, &v, &kind, &have_kind));
  }
  if (!have_p || !have_m || !have_kind)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "pipeline spec '%s' needs pp, m and kind, e.g. "
             "pp=4,m=8,kind=1f1b",
             spec);
  SG_TRY(sg_pp_schedule_create(kind, p, m, v, out));
fail:
  free(buf);
  return st;
}

/* ---- execution with blocking receives (checker and simulated time) ----- */

/* A well-formed action: op, micro-batch, chunk in range, no transfer past
 * the ends of the virtual pipeline, W only where B and W are split. */
static sg_status check_action(const sg_pp_schedule *s, int stage, int i) {
  sg_status st = SG_OK;
  const sg_pp_action *a = &s->act[i];
  int idx = i - s->off[stage];
  if (a->op < 0 || a->op >= SG_PP_OP_COUNT || a->mb < 0 || a->mb >= s->m ||
      a->chunk < 0 || a->chunk >= s->v)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "schedule stage %d action %d: op %d, micro-batch %d, "
             "chunk %d out of range (m = %d, v = %d)",
             stage, idx, (int)a->op, a->mb, a->chunk, s->m, s->v);
  int g = sg_pp_virtual_stage(s, stage, a->chunk), last = s->p * s->v - 1;
  int to_next = a->op == SG_PP_SEND_F || a->op == SG_PP_RECV_B;
  int to_prev = a->op == SG_PP_RECV_F || a->op == SG_PP_SEND_B;
  if ((to_next && g == last) || (to_prev && g == 0) ||
      ((to_next || to_prev) && s->p == 1))
    SG_RAISE(SG_ERR_INVALID_ARG,
             "schedule stage %d action %d: %s of micro-batch %d chunk "
             "%d has no neighbour (virtual stage %d of %d)",
             stage, idx, op_names[a->op], a->mb, a->chunk, g, last + 1);
  if (a->op == SG_PP_W && s->kind != SG_PP_ZB_H1)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "schedule stage %d action %d: W in a %s schedule (only "
             "zb-h1 splits the backward)",
             stage, idx, sg_pp_kind_name(s->kind));
fail:
  return st;
}

static sg_status check_actions(const sg_pp_schedule *s) {
  sg_status st = SG_OK;
  for (int stage = 0; stage < s->p; ++stage)
    for (int i = s->off[stage]; i < s->off[stage + 1]; ++i)
      SG_TRY(check_action(s, stage, i));
fail:
  return st;
}

/* Messages in flight, keyed by (direction, receiving virtual stage,
 * micro-batch): arrival time (< 0: not sent) and whether received. */
typedef struct engine {
  const sg_pp_schedule *s;
  const sg_pp_costs *c;
  double *arrive; /* 2 * G * m */
  char *taken;
  int *pc;
  double *clock;
  double *start, *end; /* may be NULL */
} engine;

static size_t msg_key(const sg_pp_schedule *s, int dir_b, int g, int mb) {
  return ((size_t)dir_b * (size_t)(s->p * s->v) + (size_t)g) * (size_t)s->m +
         (size_t)mb;
}

static double duration(const sg_pp_costs *c, sg_pp_op op) {
  return op == SG_PP_F   ? c->f
         : op == SG_PP_B ? c->b
         : op == SG_PP_W ? c->w
                         : 0.0;
}

/* Run one action of stage if it can run now: 1 done, 0 blocked. */
static sg_status step(engine *e, int stage, int *ran) {
  sg_status st = SG_OK;
  const sg_pp_schedule *s = e->s;
  int i = e->pc[stage];
  const sg_pp_action *a = &s->act[i];
  int g = sg_pp_virtual_stage(s, stage, a->chunk);
  double t0 = e->clock[stage], t1 = t0 + duration(e->c, a->op);
  *ran = 0;
  if (a->op == SG_PP_SEND_F || a->op == SG_PP_SEND_B) {
    size_t k = msg_key(s, a->op == SG_PP_SEND_B,
                       a->op == SG_PP_SEND_F ? g + 1 : g - 1, a->mb);
    if (e->arrive[k] >= 0)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "schedule stage %d: %s of micro-batch %d chunk %d "
               "twice",
               stage, op_names[a->op], a->mb, a->chunk);
    e->arrive[k] = t0 + e->c->p2p;
  } else if (a->op == SG_PP_RECV_F || a->op == SG_PP_RECV_B) {
    size_t k = msg_key(s, a->op == SG_PP_RECV_B, g, a->mb);
    if (e->arrive[k] < 0) return SG_OK; /* blocks until the peer sends */
    if (e->taken[k])
      SG_RAISE(SG_ERR_INVALID_ARG,
               "schedule stage %d: %s of micro-batch %d chunk %d "
               "twice",
               stage, op_names[a->op], a->mb, a->chunk);
    e->taken[k] = 1;
    if (e->arrive[k] > t1) t1 = e->arrive[k];
  }
  if (e->start) e->start[i] = t0;
  if (e->end) e->end[i] = t1;
  e->clock[stage] = t1;
  e->pc[stage] = i + 1;
  *ran = 1;
fail:
  return st;
}

/* The stages that did not finish, and what each waits for. */
static sg_status report_deadlock(const engine *e) {
  sg_status st = SG_OK;
  char msg[512];
  int n = 0, shown = 0;
  msg[0] = '\0';
  for (int stage = 0; stage < e->s->p; ++stage) {
    if (e->pc[stage] == e->s->off[stage + 1]) continue;
    const sg_pp_action *a = &e->s->act[e->pc[stage]];
    if (shown++ < 4 && n < (int)sizeof msg)
      n += snprintf(msg + n, sizeof msg - (size_t)n,
                    "%sstage %d waits at %s of micro-batch "
                    "%d chunk %d (action %d)",
                    shown > 1 ? "; " : "", stage, op_names[a->op], a->mb,
                    a->chunk, e->pc[stage] - e->s->off[stage]);
  }
  SG_RAISE(SG_ERR_INVALID_ARG, "schedule %s deadlocks: %s",
           sg_pp_kind_name(e->s->kind), msg);
fail:
  return st;
}

/* Every message sent was received (a receive of a message never sent shows
 * as a deadlock). */
static sg_status check_all_taken(const engine *e) {
  sg_status st = SG_OK;
  const sg_pp_schedule *s = e->s;
  int G = s->p * s->v;
  for (int dir = 0; dir < 2; ++dir)
    for (int g = 0; g < G; ++g)
      for (int mb = 0; mb < s->m; ++mb) {
        size_t k = msg_key(s, dir, g, mb);
        if (e->arrive[k] >= 0 && !e->taken[k])
          SG_RAISE(SG_ERR_INVALID_ARG,
                   "schedule: %s of micro-batch %d to virtual stage "
                   "%d (stage %d chunk %d) has no matching %s",
                   dir ? "SEND_B" : "SEND_F", mb, g, g % s->p, g / s->p,
                   dir ? "RECV_B" : "RECV_F");
      }
fail:
  return st;
}

/* Round robin: each stage runs until it blocks on a receive; a message's
 * arrival time is final when it is posted, so the times do not depend on
 * the order the stages are visited in. */
static sg_status execute(const sg_pp_schedule *s, const sg_pp_costs *c,
                         double *start, double *end, double *clock) {
  sg_status st = SG_OK;
  size_t nmsg = 2 * (size_t)s->p * (size_t)s->v * (size_t)s->m;
  engine e = {s,
              c,
              malloc(nmsg * sizeof(double)),
              calloc(nmsg, 1),
              malloc((size_t)s->p * sizeof(int)),
              clock,
              start,
              end};
  if (!e.arrive || !e.taken || !e.pc) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (size_t k = 0; k < nmsg; ++k) e.arrive[k] = -1.0;
  for (int stage = 0; stage < s->p; ++stage) {
    e.pc[stage] = s->off[stage];
    clock[stage] = 0.0;
  }
  for (int progress = 1; progress;) {
    progress = 0;
    for (int stage = 0; stage < s->p; ++stage)
      for (int ran = 1; ran && e.pc[stage] < s->off[stage + 1];) {
        SG_TRY(step(&e, stage, &ran));
        progress |= ran;
      }
  }
  for (int stage = 0; stage < s->p; ++stage)
    if (e.pc[stage] < s->off[stage + 1]) SG_TRY(report_deadlock(&e));
  SG_TRY(check_all_taken(&e));
fail:
  free(e.arrive);
  free(e.taken);
  free(e.pc);
  return st;
}

/* ---- checker ---------------------------------------------------------- */

/* What must have happened on the same (stage, chunk, micro-batch) before
 * an action: -1 nothing, else an op (RECV_F before F is handled apart). */
static int prerequisite(sg_pp_op op) {
  switch (op) {
  case SG_PP_SEND_F:
  case SG_PP_B: return SG_PP_F;
  case SG_PP_SEND_B:
  case SG_PP_W: return SG_PP_B;
  default: return -1;
  }
}

typedef struct order_state {
  char *done; /* [op][g][mb] */
  int fb, fw; /* pairs between F and B, F and W, on the current stage */
} order_state;

static char *done_at(const sg_pp_schedule *s, char *done, int op, int g,
                     int mb) {
  return done +
         ((size_t)op * (size_t)(s->p * s->v) + (size_t)g) * (size_t)s->m +
         (size_t)mb;
}

static sg_status check_order(const sg_pp_schedule *s, order_state *o, int stage,
                             const sg_pp_action *a, int idx) {
  sg_status st = SG_OK;
  int g = sg_pp_virtual_stage(s, stage, a->chunk), last = s->p * s->v - 1;
  int pre = prerequisite(a->op);
  if (s->p > 1 && a->op == SG_PP_F && g > 0) pre = SG_PP_RECV_F;
  const char *what = "";
  if (pre >= 0 && !*done_at(s, o->done, pre, g, a->mb)) what = op_names[pre];
  if (s->p > 1 && a->op == SG_PP_B && g < last &&
      !*done_at(s, o->done, SG_PP_RECV_B, g, a->mb))
    what = "RECV_B";
  if (*what)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "schedule %s stage %d action %d: %s of micro-batch %d "
             "chunk %d before its %s",
             sg_pp_kind_name(s->kind), stage, idx, op_names[a->op], a->mb,
             a->chunk, what);
  char *d = done_at(s, o->done, a->op, g, a->mb);
  if (*d)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "schedule %s stage %d action %d: %s of micro-batch %d "
             "chunk %d twice",
             sg_pp_kind_name(s->kind), stage, idx, op_names[a->op], a->mb,
             a->chunk);
  *d = 1;
fail:
  return st;
}

/* The compute actions each (stage, chunk, micro-batch) must have. */
static sg_status check_complete(const sg_pp_schedule *s, const char *done) {
  sg_status st = SG_OK;
  int nops = s->kind == SG_PP_ZB_H1 ? 3 : 2; /* F, B[, W] */
  for (int g = 0; g < s->p * s->v; ++g)
    for (int mb = 0; mb < s->m; ++mb)
      for (int op = 0; op < nops; ++op)
        if (!*done_at(s, (char *)done, op, g, mb))
          SG_RAISE(SG_ERR_INVALID_ARG,
                   "schedule %s: stage %d has no %s of micro-batch %d "
                   "chunk %d",
                   sg_pp_kind_name(s->kind), g % s->p, op_names[op], mb,
                   g / s->p);
fail:
  return st;
}

/* Walk one stage's list: order, duplicates, and its in-flight peaks. */
static sg_status check_stage(const sg_pp_schedule *s, order_state *o, int stage,
                             int *peak_fb, int *peak_fw) {
  sg_status st = SG_OK;
  int split = s->kind == SG_PP_ZB_H1;
  o->fb = o->fw = 0;
  *peak_fb = *peak_fw = 0;
  for (int i = s->off[stage]; i < s->off[stage + 1]; ++i) {
    const sg_pp_action *a = &s->act[i];
    SG_TRY(check_order(s, o, stage, a, i - s->off[stage]));
    o->fb += (a->op == SG_PP_F) - (a->op == SG_PP_B);
    o->fw += (a->op == SG_PP_F) - (a->op == (split ? SG_PP_W : SG_PP_B));
    if (o->fb > *peak_fb) *peak_fb = o->fb;
    if (o->fw > *peak_fw) *peak_fw = o->fw;
  }
fail:
  return st;
}

sg_status sg_pp_schedule_check(const sg_pp_schedule *s, int *peak_fb,
                               int *peak_fw) {
  sg_status st = SG_OK;
  order_state o = {0};
  double *clock = NULL;
  int *pk = NULL;
  if (!s || !s->off || !s->act)
    SG_RAISE(SG_ERR_INVALID_ARG, "schedule is NULL");
  SG_TRY(check_params(s->kind, s->p, s->m, s->v));
  SG_TRY(check_actions(s));
  size_t G = (size_t)s->p * (size_t)s->v;
  o.done = calloc((size_t)SG_PP_OP_COUNT * G * (size_t)s->m, 1);
  pk = malloc(2 * (size_t)s->p * sizeof *pk);
  clock = malloc((size_t)s->p * sizeof *clock);
  if (!o.done || !pk || !clock) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  for (int stage = 0; stage < s->p; ++stage)
    SG_TRY(check_stage(s, &o, stage, &pk[stage], &pk[s->p + stage]));
  SG_TRY(check_complete(s, o.done));
  sg_pp_costs unit = {1.0, 1.0, 1.0, 0.0};
  SG_TRY(execute(s, &unit, NULL, NULL, clock));
  for (int stage = 0; stage < s->p; ++stage) {
    int want = sg_pp_peak_formula(s, stage),
        want_fw = sg_pp_peak_fw_formula(s, stage);
    if (pk[stage] != want || pk[s->p + stage] != want_fw)
      SG_RAISE(
          SG_ERR_INVALID_ARG,
          "schedule %s (p = %d, m = %d, v = %d) stage %d: %d "
          "micro-batches in flight at the peak (%d until W), the formula says %d (%d)",
          sg_pp_kind_name(s->kind), s->p, s->m, s->v, stage, pk[stage],
          pk[s->p + stage], want, want_fw);
    if (peak_fb) peak_fb[stage] = pk[stage];
    if (peak_fw) peak_fw[stage] = pk[s->p + stage];
  }
fail:
  free(o.done);
  free(pk);
  free(clock);
  return st;
}

/* ---- simulated time ------------------------------------------------------ */

sg_status sg_pp_simulate(const sg_pp_schedule *s, const sg_pp_costs *costs,
                         sg_pp_sim *out) {
  sg_status st = SG_OK;
  memset(out, 0, sizeof *out);
  if (!s || !costs) SG_RAISE(SG_ERR_INVALID_ARG, "schedule or costs is NULL");
  if (!(costs->f >= 0 && costs->b >= 0 && costs->w >= 0 && costs->p2p >= 0))
    SG_RAISE(SG_ERR_INVALID_ARG,
             "pipeline costs must be >= 0 (f %g, b %g, w %g, p2p %g)", costs->f,
             costs->b, costs->w, costs->p2p);
  SG_TRY(check_params(s->kind, s->p, s->m, s->v));
  SG_TRY(check_actions(s));
  size_t n = (size_t)s->off[s->p];
  out->start = malloc((n ? n : 1) * sizeof(double));
  out->end = malloc((n ? n : 1) * sizeof(double));
  out->busy = calloc((size_t)s->p, sizeof(double));
  out->bubble = malloc((size_t)s->p * sizeof(double));
  if (!out->start || !out->end || !out->busy || !out->bubble)
    SG_RAISE(SG_ERR_ALLOC, "out of memory");
  SG_TRY(execute(s, costs, out->start, out->end, out->bubble /* clocks */));
  for (int stage = 0; stage < s->p; ++stage) {
    if (out->bubble[stage] > out->makespan) out->makespan = out->bubble[stage];
    for (int i = s->off[stage]; i < s->off[stage + 1]; ++i)
      out->busy[stage] += duration(costs, s->act[i].op);
  }
  for (int stage = 0; stage < s->p; ++stage)
    out->bubble[stage] = out->makespan > 0
                             ? 1.0 - out->busy[stage] / out->makespan
                             : 0.0;
fail:
  if (st != SG_OK) sg_pp_sim_free(out);
  return st;
}

sg_status sg_pp_sim_free(sg_pp_sim *sim) {
  if (!sim) return SG_OK;
  free(sim->start);
  free(sim->end);
  free(sim->busy);
  free(sim->bubble);
  memset(sim, 0, sizeof *sim);
  return SG_OK;
}
