/* The op device table (models/sg_op_device.h) against the op registry
 * (sg_op_registry.h): every op of the registry has exactly one entry,
 * every entry names an op of the registry, and each entry either names
 * both CUDA entry points or is host-only with a reason (never both, never
 * half), and the ops' definitions have CUDA entry points exactly where
 * the table says (in the cuda build; none without CUDA). The checker is also fed broken tables (a missing op, a
 * duplicate, a reason-less host-only entry, a half CUDA entry) and must
 * reject each. Prints the coverage: n of m ops with CUDA kernels. Then
 * the tape on device variables (sg_op_def.forward_cuda), with inputs
 * marked as living on cuda:0 and the tape's faked device (ag_fake_cuda:
 * "CUDA" memory is host memory): a user op without CUDA entry points and a
 * built-in op without them are refused with SG_ERR_NOT_SUPPORTED and the
 * op's name; a user op with them runs a 3-node tape forward and backward
 * through its CUDA entries, with outputs and gradients on the device and
 * the two gradients of a reused input summed there, and a user addition's
 * identity gradients routed there (hand-over, copy, sum); mixed devices and the
 * bf16 storage policy are refused; on the host the same op runs its host
 * kernels. And the CUDA kernels' backward gathers
 * of pooling and up-sampling (sg_pool_grad_cell, sg_up_grad_cell of
 * sg_ops_inl.h, one per input cell), run here on the host, against the
 * host's scatters in f64 (1e-12): their index arithmetic without a GPU;
 * likewise the im2col/col2im/convt maps, the padding gathers, max
 * pooling's margin fill (sg_fill_outside_geom / sg_fill_outside_cell
 * against sg_pad_fill_outside) and the layout maps.
 * Runs in every build (release and cuda); needs no GPU. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h" /* sg_pool_win_make, sg_up_geom_make */

#include "autograd_impl.h" /* ag_fake_cuda */
#include "sg_autograd.h"
#include "sg_config.h"
#include "sg_op_device.h"
#include "sg_op_registry.h"

#define MAXE 128

static int in_registry(const char *op) {
  return op && sg_ag_op_find(op) != NULL;
}

/* Problems of table e[0..n) (printed when loud); 0 when it is complete. */
static int check(const sg_op_device *e, int n, int loud) {
  int bad = 0;
  for (int i = 0; i < sg_ag_op_count(); ++i) {
    const char *op = sg_ag_op(i)->name;
    int seen = 0;
    for (int j = 0; j < n; ++j) seen += e[j].op && !strcmp(e[j].op, op);
    if (seen != 1) {
      if (loud)
        printf("op '%s' of the registry is %s the device table "
               "(models/op_device.c)\n",
               op, seen ? "listed twice in" : "missing from");
      ++bad;
    }
  }
  for (int j = 0; j < n; ++j) {
    const char *why = NULL;
    int fwd = e[j].cuda_fwd && e[j].cuda_fwd[0];
    int bwd = e[j].cuda_bwd && e[j].cuda_bwd[0];
    int host = e[j].host_only != NULL;
    if (!in_registry(e[j].op))
      why = "is not an op of the registry";
    else if (host && !e[j].host_only[0])
      why = "is host-only without a reason";
    else if (host && (fwd || bwd))
      why = "is both host-only and on cuda";
    else if (!host && !(fwd && bwd))
      why = "needs both CUDA entry points or a host-only reason";
    if (why) {
      if (loud) printf("device table entry '%s' %s\n", e[j].op, why);
      ++bad;
    }
  }
  return bad;
}

/* The broken variants of the real table t[0..n) must each be rejected. */
static int check_rejects(const sg_op_device *t, int n) {
  sg_op_device e[MAXE + 1];
  int fails = 0;
  memcpy(e, t, (size_t)n * sizeof *e);
  if (!check(e + 1, n - 1, 0)) /* the first op missing */
    fails += printf("FAIL: a table without '%s' was accepted\n", t[0].op) > 0;
  e[n] = t[n - 1]; /* the last op twice */
  if (!check(e, n + 1, 0))
    fails += printf("FAIL: a duplicate entry was accepted\n") > 0;
  sg_op_device noreason = {t[0].op, NULL, NULL, ""};
  e[0] = noreason;
  if (!check(e, n, 0))
    fails += printf("FAIL: host-only without a reason was accepted\n") > 0;
  sg_op_device half = {t[0].op, "fwd", NULL, NULL};
  e[0] = half;
  if (!check(e, n, 0))
    fails += printf("FAIL: a CUDA forward without backward was accepted\n") > 0;
  return fails;
}

/* The ops whose device entries are built in every build: those that
 * launch no kernel of their own (copies, the comm layer, the tape's device
 * helpers), dist_loss and the attentions, whose bodies run their kernels
 * on a real device and the host's code on host memory (the faked device). */
static int comm_only(const char *op) {
  return !strcmp(op, "tp_copy") || !strcmp(op, "tp_reduce") ||
         !strcmp(op, "sp_share") || !strcmp(op, "dist_loss") ||
         !strcmp(op, "attention") || !strcmp(op, "attention_ulysses") ||
         !strcmp(op, "attention_usp");
}

/* The table against the op definitions: an op listed on cuda has CUDA
 * entry points in its sg_op_def in the cuda build (and none without
 * CUDA, but for comm_only); a host-only op has none. The checkpoint op has
 * no entry points at all (the tape runs it, replaying its ops on their
 * device): listed on cuda by the tape's functions. */
static int check_defs(void) {
  int bad = 0;
  for (int i = 0; i < sg_ag_op_count(); ++i) {
    const sg_op_def *op = sg_ag_op(i);
    if (!strcmp(op->name, "checkpoint")) {
      if (op->forward || op->forward_cuda ||
          !sg_op_device_on_cuda(sg_op_device_find(op->name)))
        bad += printf("FAIL: the checkpoint op: entry points, or host-only "
                      "in the table\n") > 0;
      continue;
    }
    const int want = (SG_HAVE_CUDA || comm_only(op->name)) &&
                     sg_op_device_on_cuda(sg_op_device_find(op->name));
    const int has = op->forward_cuda && op->backward_cuda;
    if (want != has)
      bad += printf("FAIL: op '%s' %s CUDA entry points in its definition\n",
                    op->name, has ? "has" : "lacks") > 0;
  }
  return bad;
}

/* The list of the ops on cuda on sharded device variables: every op on
 * cuda once, nothing else; each listed reason non-empty. Prints the ops
 * that run there. */
static int check_sharded_list(int loud) {
  int bad = 0, runs = 0;
  const int n = sg_op_device_sharded_count();
  for (int i = 0; i < sg_op_device_count(); ++i) {
    const sg_op_device *d = sg_op_device_at(i);
    int seen = 0;
    for (int j = 0; j < n; ++j)
      seen += !strcmp(sg_op_device_sharded_at(j, NULL), d->op);
    if (seen != sg_op_device_on_cuda(d))
      bad += printf("FAIL: op '%s' (%s) is listed %d times on sharded "
                    "device variables\n",
                    d->op, sg_op_device_on_cuda(d) ? "on cuda" : "host-only",
                    seen) > 0;
  }
  for (int j = 0; j < n; ++j) {
    const char *why = NULL, *op = sg_op_device_sharded_at(j, &why);
    if (!sg_op_device_find(op))
      bad += printf("FAIL: sharded list: '%s' is not in the device table\n",
                    op) > 0;
    if (why && !why[0])
      bad += printf("FAIL: sharded list: '%s' refused without a reason\n", op) >
             0;
    if (!why && loud) printf("%s%s", runs++ ? ", " : "on a mesh: ", op);
  }
  if (loud) printf(" (%d of %d ops on cuda)\n", runs, n);
  if (sg_op_device_sharded_why("conv") != NULL ||
      sg_op_device_sharded_why("attention") == NULL ||
      sg_op_device_sharded_why("tp_copy") != NULL ||
      sg_op_device_sharded_why("moe") == NULL ||
      sg_op_device_sharded_why("dist_loss") != NULL ||
      sg_op_device_sharded_at(n, NULL) != NULL)
    bad += printf("FAIL: sg_op_device_sharded_why / _at\n") > 0;
  return bad;
}

/* A user op: y = x (f64). Its CUDA entry points are the same host code
 * (the device is faked: "CUDA" tensors are host memory) and count their
 * calls, so the test sees which kernels the tape chose. */
static int ncalls[2][2]; /* [cuda][backward] */
static sg_status copy_fwd(sg_node *node) {
  const sg_tensor *x = &node->in[0]->value;
  ncalls[node->device.kind == SG_DEVICE_CUDA][0]++;
  sg_status st = sg_node_alloc_out(node, 0, x->ndim, x->shape);
  if (st == SG_OK)
    memcpy(node->out[0]->value.data, x->data,
           (size_t)x->shape[0] * sizeof(double));
  return st;
}
static sg_status copy_bwd(sg_node *node) {
  ncalls[node->device.kind == SG_DEVICE_CUDA][1]++;
  if (node->gin[0])
    memcpy(node->gin[0], node->out[0]->grad.data,
           (size_t)node->in[0]->value.shape[0] * sizeof(double));
  return SG_OK;
}
#define COPY_OP(nm, cf, cb)                                  \
  {                                                          \
    .name = nm, .slots = {SG_SLOT_ACT}, .forward = copy_fwd, \
    .backward = copy_bwd,                                    \
    .rule = {.windowed_input = -1,                           \
             .accepts = SG_ACCEPT_ALL,                       \
             .out = SG_OUT_LIKE_INPUT,                       \
             .writes_gin = 1u},                              \
    .forward_cuda = cf, .backward_cuda = cb                  \
  }
static const sg_op_def host_op = COPY_OP("user_host", NULL, NULL);
static const sg_op_def cuda_op = COPY_OP("user_cuda", copy_fwd, copy_bwd);

/* A user addition whose input gradients are the output's (grad_identity):
 * the tape routes them (hand-over, copy, sum) on the device. */
static sg_status uadd_fwd(sg_node *node) {
  const sg_tensor *a = &node->in[0]->value, *b = &node->in[1]->value;
  ncalls[node->device.kind == SG_DEVICE_CUDA][0]++;
  sg_status st = sg_node_alloc_out(node, 0, a->ndim, a->shape);
  for (int64_t i = 0; st == SG_OK && i < a->shape[0]; ++i)
    ((double *)node->out[0]->value.data)[i] = ((const double *)a->data)[i] +
                                              ((const double *)b->data)[i];
  return st;
}
static sg_status uadd_bwd(sg_node *node) {
  ncalls[node->device.kind == SG_DEVICE_CUDA][1]++;
  return SG_OK;
}
static const sg_op_def uadd_op = {.name = "user_add",
                                  .slots = {SG_SLOT_ACT, SG_SLOT_ACT},
                                  .forward = uadd_fwd,
                                  .backward = uadd_bwd,
                                  .rule = {.windowed_input = -1,
                                           .accepts = SG_ACCEPT_ALL,
                                           .out = SG_OUT_LIKE_INPUT,
                                           .writes_gin = 3u,
                                           .grad_identity = 3u},
                                  .forward_cuda = uadd_fwd,
                                  .backward_cuda = uadd_bwd};

/* st must be SG_ERR_NOT_SUPPORTED with want in the message. */
static int refused(const char *what, sg_status st, const char *want) {
  const char *msg = sg_last_error();
  if (st == SG_ERR_NOT_SUPPORTED && msg && strstr(msg, want)) {
    printf("tape on cuda input: %s refused: %s\n", what, msg);
    return 0;
  }
  printf("FAIL: %s on a cuda input: status %d (%s), expected \"%s\"\n", what,
         (int)st, msg ? msg : "", want);
  return 1;
}

static int on_cuda(const sg_tensor *t) {
  return t->device.kind == SG_DEVICE_CUDA && t->device.index == 0;
}

/* The device tape (faked cuda:0): y1 = op(x), y2 = op(y1), y3 = op(x),
 * backward from (y2, ga), (y3, gb): the CUDA entries run (3 forward, 3
 * backward, no host kernel), outputs and gradients are allocated on the
 * device, and x's gradient is ga + gb, summed on the device. */
static int check_device_tape(sg_tape_t tape, sg_var *x) {
  double ga[3] = {1, 2, 4}, gb[3] = {8, 16, 32};
  const int64_t shape[1] = {3};
  sg_var *y1 = NULL, *y2 = NULL, *y3 = NULL;
  sg_tensor g[2] = {sg_tensor_wrap(ga, SG_DTYPE_F64, x->value.device, 1, shape),
                    sg_tensor_wrap(gb, SG_DTYPE_F64, x->value.device, 1,
                                   shape)};
  int fails = 0;
  memset(ncalls, 0, sizeof ncalls);
  ag_fake_cuda = 1;
  const int64_t allocs = ag_fake_cuda_allocs;
  sg_status st = sg_tape_apply(tape, &cuda_op, 1, &x, 1, NULL, NULL, 0, &y1);
  if (st == SG_OK)
    st = sg_tape_apply(tape, &cuda_op, 1, &y1, 1, NULL, NULL, 0, &y2);
  if (st == SG_OK)
    st = sg_tape_apply(tape, &cuda_op, 1, &x, 1, NULL, NULL, 0, &y3);
  int ok = st == SG_OK && on_cuda(&y1->value) && on_cuda(&y2->value) &&
           on_cuda(&y3->value) && ((double *)y2->value.data)[2] == 3;
  if (ok) st = sg_tape_backward_from(tape, 2, (sg_var *[]){y2, y3}, g);
  ok = ok && st == SG_OK && on_cuda(&x->grad);
  for (int i = 0; ok && i < 3; ++i)
    ok = ((double *)x->grad.data)[i] == ga[i] + gb[i];
  ok = ok && ncalls[1][0] == 3 && ncalls[1][1] == 3 && !ncalls[0][0] &&
       !ncalls[0][1] && ag_fake_cuda_allocs - allocs >= 5;
  printf("device tape (faked cuda:0): %d cuda forwards, %d cuda backwards, "
         "%lld device allocations, x.grad on %s:%d %s\n",
         ncalls[1][0], ncalls[1][1], (long long)(ag_fake_cuda_allocs - allocs),
         sg_device_kind_name(x->grad.device.kind), x->grad.device.index,
         ok ? "ok" : "FAIL");
  fails += !ok;
  /* the identity routing: y1 = op(x), y3 = op(x), s = y1 + y3, t = s + x,
   * backward from (t, ga): s takes t's gradient over, x gets it added, y1
   * takes s's over, y3 a copy; x.grad grows by 3 ga */
  sg_var *s = NULL, *t = NULL;
  double before[3];
  memcpy(before, x->grad.data, sizeof before);
  memset(ncalls, 0, sizeof ncalls);
  st = sg_tape_apply(tape, &cuda_op, 1, &x, 1, NULL, NULL, 0, &y1);
  if (st == SG_OK)
    st = sg_tape_apply(tape, &cuda_op, 1, &x, 1, NULL, NULL, 0, &y3);
  if (st == SG_OK)
    st = sg_tape_apply(tape, &uadd_op, 2, (sg_var *[]){y1, y3}, 1, NULL, NULL,
                       0, &s);
  if (st == SG_OK)
    st = sg_tape_apply(tape, &uadd_op, 2, (sg_var *[]){s, x}, 1, NULL, NULL, 0,
                       &t);
  ok = st == SG_OK && on_cuda(&t->value) && ((double *)t->value.data)[1] == 6;
  if (ok) st = sg_tape_backward_from(tape, 1, &t, g);
  ok = ok && st == SG_OK;
  for (int i = 0; ok && i < 3; ++i)
    ok = ((double *)x->grad.data)[i] == before[i] + 3 * ga[i];
  ok = ok && ncalls[1][0] == 4 && ncalls[1][1] == 4 && !ncalls[0][0];
  printf("device tape (faked cuda:0): identity routing (hand-over, copy, "
         "sum) %s\n",
         ok ? "ok" : "FAIL");
  fails += !ok;
  /* the parts not on device yet, and mixed devices, are refused */
  sg_tape_clear(tape);
  (void)sg_tape_set_storage_dtype(tape, SG_DTYPE_BF16);
  st = sg_tape_apply(tape, &cuda_op, 1, &x, 1, NULL, NULL, 0, &y1);
  fails += refused("bf16 storage policy", st, "bf16 storage policy");
  (void)sg_tape_set_storage_dtype(tape, SG_DTYPE_F32);
  sg_var h;
  if (sg_var_init(&h, "h", SG_DTYPE_F64, 1, shape, ga, 0) != SG_OK) return 1;
  st = sg_ag_binary(tape, SG_BINARY_ADD, x, &h, &y1);
  fails += refused("mixed devices", st, "does not copy between devices");
  sg_var_release(&h);
  ag_fake_cuda = 0;
  return fails;
}

static int check_tape_device(void) {
  double xs[3] = {1, 2, 3};
  const int64_t shape[1] = {3}, shape2[2] = {1, 3}, shape3[3] = {1, 1, 3};
  sg_tape_t tape = NULL;
  sg_var x, x2, x3, *y = NULL;
  int fails = 0;
  if (sg_tape_create(&tape) != SG_OK ||
      sg_var_init(&x, "x", SG_DTYPE_F64, 1, shape, xs, 1) != SG_OK ||
      sg_var_init(&x2, "x2", SG_DTYPE_F64, 2, shape2, xs, 1) != SG_OK ||
      sg_var_init(&x3, "x3", SG_DTYPE_F64, 3, shape3, xs, 1) != SG_OK)
    return printf("FAIL: tape or variable\n") > 0;
  sg_status st = sg_tape_apply(tape, &host_op, 1, (sg_var *[]){&x}, 1, NULL,
                               NULL, 0, &y);
  if (st != SG_OK || !y || ((double *)y->value.data)[2] != 3 || ncalls[1][0])
    fails += printf("FAIL: the user op on the host: status %d\n", (int)st) > 0;
  sg_tape_clear(tape);
  /* faked: the data stay host memory */
  const sg_device cuda0 = {SG_DEVICE_CUDA, 0};
  sg_var own;
  if (sg_var_init(&own, "own", SG_DTYPE_F64, 1, shape, NULL, 0) != SG_OK)
    return 1;
  if (sg_var_set_device(&own, cuda0) != SG_ERR_INVALID_ARG)
    fails += printf("FAIL: a variable's own host memory declared cuda\n") > 0;
  sg_var_release(&own);
  if (sg_var_set_device(&x, cuda0) != SG_OK ||
      sg_var_set_device(&x2, cuda0) != SG_OK ||
      sg_var_set_device(&x3, cuda0) != SG_OK)
    return printf("FAIL: set device\n") > 0;
  st = sg_tape_apply(tape, &host_op, 1, (sg_var *[]){&x}, 1, NULL, NULL, 0, &y);
  fails += refused("user op without cuda entry points", st,
                   "op user_host has no cuda implementation");
  {
    /* a built-in op without cuda entry points: moe (E = 1, C = 1, F = 1) */
    static double one[1] = {1.0}, g1[1];
    const int64_t s3[3] = {1, 1, 1}, s2[2] = {1, 1};
    sg_var mx, mw[5];
    sg_moe_desc md = {.experts = 1, .topk = 1};
    int okv = sg_var_init(&mx, "mx", SG_DTYPE_F64, 3, s3, one, 1) == SG_OK &&
              sg_var_set_device(&mx, cuda0) == SG_OK;
    for (int i = 0; i < 5; ++i)
      okv = okv &&
            sg_var_init_param(&mw[i], "mw", SG_DTYPE_F64, i == 1 ? 3 : 2,
                              i == 1 ? s3 : s2, one, g1) == SG_OK &&
            sg_var_set_device(&mw[i], cuda0) == SG_OK;
    if (!okv) return printf("FAIL: moe variables\n") > 0;
    st = sg_ag_moe(tape, &md, &mx, &mw[0], &mw[1], &mw[2], &mw[3], &mw[4], &y);
    fails += refused("built-in moe", st, "op moe has no cuda implementation");
    sg_var_release(&mx);
    for (int i = 0; i < 5; ++i) sg_var_release(&mw[i]);
  }
  fails += check_device_tape(tape, &x);
  /* the gradient was allocated on the faked device: freed as such */
  ag_fake_cuda = 1;
  sg_var_release(&x);
  ag_fake_cuda = 0;
  sg_var_release(&x2);
  sg_var_release(&x3);
  sg_tape_destroy(&tape);
  return fails;
}

#define GMAX 1024
static double gx[GMAX], gdy[GMAX], ghost[GMAX], ggat[GMAX];

static void fill(double *v, int n, unsigned seed) {
  for (int i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    v[i] = (double)(seed >> 8 & 0xffff) / 32768.0 - 1.0;
  }
}

/* max |gather - host| / max(1, |host|) over n cells, printed. */
static int gather_ok(const char *what, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double e = fabs(ggat[i] - ghost[i]) /
               (fabs(ghost[i]) > 1 ? fabs(ghost[i]) : 1);
    if (!(e <= worst)) worst = e;
  }
  printf("cuda gather %-22s max rel err %.1e %s\n", what, worst,
         worst <= 1e-12 ? "ok" : "FAIL");
  return worst <= 1e-12 ? 0 : 1;
}

static int check_gathers(void) {
  sg_conv_desc d = {.nsp = 2,
                    .batch = 1,
                    .cin = 2,
                    .cout = 2,
                    .in = {9, 11},
                    .kernel = {3, 2},
                    .stride = {2, 1},
                    .dilation = {1, 2}};
  sg_pool_win w;
  int64_t planes = 0, fails = 0;
  fill(gx, GMAX, 7), fill(gdy, GMAX, 11);
  if (sg_pool_win_make(&d, SG_DTYPE_F64, &w, &planes) != SG_OK) return 1;
  const int64_t sin = w.in[1] * w.in[2], sout = w.out[1] * w.out[2];
  for (int kind = SG_POOL_AVG; kind <= SG_POOL_MAX; ++kind) {
    if (sg_pool_backward((sg_pool_kind)kind, &d, SG_DTYPE_F64, gx, gdy,
                         ghost) != SG_OK)
      return 1;
    for (int64_t i = 0; i < planes * sin; ++i)
      ggat[i] = sg_pool_grad_cell_f64(kind, &w, 1.0 / 6, gx + i / sin * sin,
                                      gdy + i / sin * sout, i % sin);
    fails += gather_ok(kind ? "pool max backward" : "pool avg backward",
                       planes * sin);
  }
  const int64_t scale[2] = {2, 3};
  for (int kind = SG_UPSAMPLE_NEAREST; kind <= SG_UPSAMPLE_LINEAR; ++kind) {
    const int64_t in[2] = {5 + 2 * kind, 7 + 2 * kind};
    sg_up_geom g;
    if (sg_up_geom_make((sg_upsample_kind)kind, 2, 2, in, scale, SG_DTYPE_F64,
                        &g) != SG_OK ||
        sg_upsample_backward((sg_upsample_kind)kind, 2, 2, in, scale,
                             SG_DTYPE_F64, gdy, ghost) != SG_OK)
      return 1;
    const int64_t ui = g.in[1] * g.in[2], uo = g.out[1] * g.out[2];
    for (int64_t i = 0; i < 2 * ui; ++i)
      ggat[i] = sg_up_grad_cell_f64(g.in, g.out, g.scale, g.linear,
                                    gdy + i / ui * uo, i % ui);
    fails += gather_ok(kind ? "upsample linear bwd" : "upsample nearest bwd",
                       2 * ui);
  }
  return (int)fails;
}

/* max |got - want| / max(1, |want|) over n values, printed. */
static int close_ok(const char *what, const double *got, const double *want,
                    int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double e = fabs(got[i] - want[i]) / (fabs(want[i]) > 1 ? fabs(want[i]) : 1);
    if (!(e <= worst)) worst = e;
  }
  printf("cuda gemm path %-26s max rel err %.1e %s\n", what, worst,
         worst <= 1e-12 ? "ok" : "FAIL");
  return worst <= 1e-12 ? 0 : 1;
}

/* The CUDA convolution's arithmetic on the host: per batch item the column
 * matrix by sg_im2col_src, the products the cuBLAS GEMMs compute (here as
 * plain loops), dx by the sg_col2im_cell gather; against sg_conv_forward
 * and sg_conv_backward in f64. */
static int check_conv_gemm(const char *what, const sg_conv_desc *d) {
  sg_pool_win w;
  if (sg_conv_win_make(d, 0, SG_DTYPE_F64, &w) != SG_OK) return 1;
  const int64_t nb = d->batch, c = d->cin, k = d->cout;
  const int64_t sin = w.in[0] * w.in[1] * w.in[2];
  const int64_t so = w.out[0] * w.out[1] * w.out[2];
  const int64_t ckk = c * w.ker[0] * w.ker[1] * w.ker[2];
  const int64_t nx = nb * c * sin, ny = nb * k * so, nw = k * ckk;
  double *m = calloc((size_t)(3 * nx + 3 * ny + 4 * nw + 4 * k + 2 * ckk * so),
                     sizeof(double));
  if (!m) return 1;
  double *x = m, *dxh = x + nx, *dxg = dxh + nx, *dy = dxg + nx, *yh = dy + ny,
         *yg = yh + ny, *wt = yg + ny, *dwh = wt + nw, *dwg = dwh + nw,
         *bias = dwg + nw, *dbh = bias + k, *dbg = dbh + k, *col = dbg + k,
         *dcol = col + ckk * so;
  fill(x, (int)nx, 3), fill(dy, (int)ny, 5), fill(wt, (int)nw, 9);
  fill(bias, (int)k, 13);
  int fails = 0;
  if (sg_conv_forward(d, SG_DTYPE_F64, x, wt, bias, yh, NULL) != SG_OK ||
      sg_conv_backward(d, SG_DTYPE_F64, x, wt, dy, dxh, dwh, dbh, NULL) !=
          SG_OK) {
    free(m);
    return printf("FAIL: %s: host convolution\n", what) > 0;
  }
  for (int64_t n = 0; n < nb; ++n) {
    const double *xn = x + n * c * sin, *dyn = dy + n * k * so;
    for (int64_t r = 0; r < ckk; ++r)
      for (int64_t o = 0; o < so; ++o)
        col[r * so + o] = xn[sg_im2col_src(&w, r, o)];
    for (int64_t q = 0; q < k; ++q)
      for (int64_t o = 0; o < so; ++o) {
        double acc = 0;
        for (int64_t r = 0; r < ckk; ++r)
          acc += wt[q * ckk + r] * col[r * so + o];
        yg[(n * k + q) * so + o] = acc + bias[q];
        dbg[q] += dyn[q * so + o];
      }
    for (int64_t r = 0; r < ckk; ++r)
      for (int64_t o = 0; o < so; ++o) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q)
          acc += wt[q * ckk + r] * dyn[q * so + o];
        dcol[r * so + o] = acc;
      }
    for (int64_t q = 0; q < k; ++q)
      for (int64_t r = 0; r < ckk; ++r) {
        double acc = 0;
        for (int64_t o = 0; o < so; ++o)
          acc += dyn[q * so + o] * col[r * so + o];
        dwg[q * ckk + r] += acc;
      }
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < sin; ++i)
        dxg[(n * c + ch) * sin + i] = sg_col2im_cell_f64(&w, dcol, so, ch, i);
  }
  char name[64];
  snprintf(name, sizeof name, "%s y", what);
  fails += close_ok(name, yg, yh, ny);
  snprintf(name, sizeof name, "%s dx", what);
  fails += close_ok(name, dxg, dxh, nx);
  snprintf(name, sizeof name, "%s dw", what);
  fails += close_ok(name, dwg, dwh, nw);
  snprintf(name, sizeof name, "%s db", what);
  fails += close_ok(name, dbg, dbh, k);
  free(m);
  return fails;
}

/* The CUDA transposed convolution's arithmetic on the host: T = W^T x,
 * y by the sg_convt_src gather plus the bias; dy gathered to T's shape by
 * the same map, dx = W T, dW += x T^T; against sg_convt_* in f64. */
static int check_convt_gemm(const char *what, const sg_conv_desc *d) {
  sg_pool_win w;
  if (sg_conv_win_make(d, 1, SG_DTYPE_F64, &w) != SG_OK) return 1;
  const int64_t nb = d->batch, c = d->cin, k = d->cout;
  const int64_t sin = w.in[0] * w.in[1] * w.in[2];
  const int64_t so = w.out[0] * w.out[1] * w.out[2];
  const int64_t mm = k * w.ker[0] * w.ker[1] * w.ker[2]; /* T's rows */
  const int64_t nx = nb * c * sin, ny = nb * k * so, nw = c * mm;
  double *m = calloc((size_t)(3 * nx + 3 * ny + 4 * nw + 4 * k + mm * sin),
                     sizeof(double));
  if (!m) return 1;
  double *x = m, *dxh = x + nx, *dxg = dxh + nx, *dy = dxg + nx, *yh = dy + ny,
         *yg = yh + ny, *wt = yg + ny, *dwh = wt + nw, *dwg = dwh + nw,
         *bias = dwg + nw, *dbh = bias + k, *dbg = dbh + k, *tb = dbg + k;
  fill(x, (int)nx, 17), fill(dy, (int)ny, 19), fill(wt, (int)nw, 23);
  fill(bias, (int)k, 29);
  int fails = 0;
  if (sg_convt_forward(d, SG_DTYPE_F64, x, wt, bias, yh) != SG_OK ||
      sg_convt_backward(d, SG_DTYPE_F64, x, wt, dy, dxh, dwh, dbh) != SG_OK) {
    free(m);
    return printf("FAIL: %s: host transposed convolution\n", what) > 0;
  }
  for (int64_t n = 0; n < nb; ++n) {
    const double *xn = x + n * c * sin, *dyn = dy + n * k * so;
    for (int64_t r = 0; r < mm; ++r)
      for (int64_t j = 0; j < sin; ++j) {
        double acc = 0;
        for (int64_t ch = 0; ch < c; ++ch)
          acc += wt[ch * mm + r] * xn[ch * sin + j];
        tb[r * sin + j] = acc;
      }
    for (int64_t q = 0; q < k; ++q)
      for (int64_t p = 0; p < so; ++p) {
        yg[(n * k + q) * so + p] = tb[sg_convt_src(&w, q, p)] + bias[q];
        dbg[q] += dyn[q * so + p];
      }
    for (int64_t q = 0; q < k; ++q)
      for (int64_t p = 0; p < so; ++p)
        tb[sg_convt_src(&w, q, p)] = dyn[q * so + p];
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t j = 0; j < sin; ++j) {
        double acc = 0;
        for (int64_t r = 0; r < mm; ++r)
          acc += wt[ch * mm + r] * tb[r * sin + j];
        dxg[(n * c + ch) * sin + j] = acc;
      }
      for (int64_t r = 0; r < mm; ++r) {
        double acc = 0;
        for (int64_t j = 0; j < sin; ++j)
          acc += xn[ch * sin + j] * tb[r * sin + j];
        dwg[ch * mm + r] += acc;
      }
    }
  }
  char name[64];
  snprintf(name, sizeof name, "%s y", what);
  fails += close_ok(name, yg, yh, ny);
  snprintf(name, sizeof name, "%s dx", what);
  fails += close_ok(name, dxg, dxh, nx);
  snprintf(name, sizeof name, "%s dw", what);
  fails += close_ok(name, dwg, dwh, nw);
  snprintf(name, sizeof name, "%s db", what);
  fails += close_ok(name, dbg, dbh, k);
  free(m);
  return fails;
}

/* The device padding's gathers on the host (sg_pad_src_cell per padded
 * cell, sg_pad_grad_cell per source cell) against sg_pad_forward and
 * sg_pad_backward, every mode, 3-D odd extents and uneven pads, f64. */
static int check_pad_gathers(void) {
  const int64_t in[3] = {3, 4, 5}, pad[3][2] = {{1, 2}, {2, 1}, {0, 2}};
  const int64_t planes = 2;
  static const char *names[] = {"zero", "periodic", "reflect", "replicate"};
  int fails = 0;
  for (int m = 0; m < 4; ++m) {
    const sg_pad_mode mode[3] = {(sg_pad_mode)m, (sg_pad_mode)m,
                                 (sg_pad_mode)m};
    int64_t in3[3], out3[3], lo3[3];
    int mode3[3];
    if (sg_pad_geom(SG_DTYPE_F64, 3, planes, in, pad, mode, in3, out3, lo3,
                    mode3) != SG_OK)
      return 1;
    const int64_t sin = in3[0] * in3[1] * in3[2],
                  sout = out3[0] * out3[1] * out3[2];
    char what[64];
    fill(gx, GMAX, 43 + m), fill(gdy, GMAX, 47 + m);
    if (sg_pad_forward(SG_DTYPE_F64, 3, planes, in, pad, mode, gx, ghost) !=
        SG_OK)
      return 1;
    for (int64_t o = 0; o < planes * sout; ++o) {
      const int64_t i = sg_pad_src_cell(in3, out3, lo3, mode3, o % sout);
      ggat[o] = i >= 0 ? gx[(o / sout) * sin + i] : 0;
    }
    snprintf(what, sizeof what, "pad %s forward", names[m]);
    fails += gather_ok(what, planes * sout);
    if (sg_pad_backward(SG_DTYPE_F64, 3, planes, in, pad, mode, gdy, ghost) !=
        SG_OK)
      return 1;
    for (int64_t i = 0; i < planes * sin; ++i)
      ggat[i] = sg_pad_grad_cell_f64(in3, out3, lo3, mode3,
                                     gdy + (i / sin) * sout, i % sin);
    snprintf(what, sizeof what, "pad %s backward", names[m]);
    fails += gather_ok(what, planes * sin);
  }
  return fails;
}

/* Max pooling's margins on the device (sg_fill_outside_geom, then
 * sg_fill_outside_cell per cell) against sg_pad_fill_outside, f64: a 3-D
 * box past both ends of the domain (zero, periodic, zero dims) and a 2-D
 * box of a shard (origin inside the domain). The fill is 7.5, not -inf,
 * so the comparison is plain arithmetic. */
static int check_fill_outside(void) {
  static const struct {
    int nsp;
    int64_t box[3], origin[3], extent[3];
    sg_pad_mode mode[3];
  } c[2] = {{3,
             {5, 6, 4},
             {-1, -2, 0},
             {3, 3, 2},
             {SG_PAD_ZERO, SG_PAD_PERIODIC, SG_PAD_ZERO}},
            {2, {4, 5}, {2, -1}, {5, 3}, {SG_PAD_ZERO, SG_PAD_ZERO}}};
  const int64_t planes = 3;
  int fails = 0;
  for (int k = 0; k < 2; ++k) {
    int64_t b3[3], lo[3], hi[3], per = 1;
    int zero[3];
    for (int i = 0; i < c[k].nsp; ++i) {
      zero[i] = c[k].mode[i] == SG_PAD_ZERO;
      per *= c[k].box[i];
    }
    fill(gx, GMAX, 53 + k);
    memcpy(ghost, gx, sizeof gx), memcpy(ggat, gx, sizeof gx);
    if (sg_pad_fill_outside(SG_DTYPE_F64, c[k].nsp, planes, c[k].box,
                            c[k].origin, c[k].extent, c[k].mode, 7.5,
                            ghost) != SG_OK)
      return 1;
    if (sg_fill_outside_geom(c[k].nsp, c[k].box, c[k].origin, c[k].extent, zero,
                             b3, lo, hi))
      for (int64_t i = 0; i < planes * per; ++i)
        if (sg_fill_outside_cell(b3, lo, hi, i % per)) ggat[i] = 7.5;
    int nfill = 0;
    for (int64_t i = 0; i < planes * per; ++i) nfill += ghost[i] == 7.5;
    fails += gather_ok(k ? "fill outside 2-D shard" : "fill outside 3-D",
                       planes * per);
    if (nfill == 0) fails += printf("FAIL: no cell filled\n") > 0;
  }
  return fails;
}

static int check_conv_gemms(void) {
  const sg_conv_desc c1 = {.nsp = 1,
                           .batch = 2,
                           .cin = 3,
                           .cout = 5,
                           .in = {13},
                           .kernel = {3},
                           .stride = {2},
                           .dilation = {1}};
  const sg_conv_desc c2 = {.nsp = 2,
                           .batch = 2,
                           .cin = 3,
                           .cout = 2,
                           .in = {9, 11},
                           .kernel = {3, 2},
                           .stride = {2, 1},
                           .dilation = {1, 2}};
  const sg_conv_desc c3 = {.nsp = 3,
                           .batch = 1,
                           .cin = 2,
                           .cout = 3,
                           .in = {5, 7, 6},
                           .kernel = {3, 1, 2},
                           .stride = {1, 3, 2},
                           .dilation = {2, 1, 1}};
  const sg_conv_desc t1 = {
      .nsp = 1, .batch = 2, .cin = 3, .cout = 2, .in = {7}, .kernel = {3}};
  const sg_conv_desc t2 = {.nsp = 2,
                           .batch = 1,
                           .cin = 3,
                           .cout = 5,
                           .in = {5, 3},
                           .kernel = {2, 3}};
  const sg_conv_desc t3 = {.nsp = 3,
                           .batch = 2,
                           .cin = 2,
                           .cout = 3,
                           .in = {3, 5, 1},
                           .kernel = {2, 1, 3}};
  return check_conv_gemm("conv 1-D", &c1) + check_conv_gemm("conv 2-D", &c2) +
         check_conv_gemm("conv 3-D", &c3) + check_convt_gemm("convt 1-D", &t1) +
         check_convt_gemm("convt 2-D", &t2) +
         check_convt_gemm("convt 3-D", &t3);
}

/* The layout maps of the CUDA kernels on the host: concat / split by
 * sg_cat_index against sg_concat / sg_split, and the time window's
 * sg_twin_src against the copy it stands for (first min(t1, t2) steps,
 * zeros after). (roll's sg_roll_src, the broadcast's and add_field's sums
 * are what the host ops run: their own tests cover them.) */
static int check_layout_maps(void) {
  enum { NB = 3, SP = 5, K = 3 };
  const int64_t ch[K] = {2, 1, 3}, ctot = 6;
  double whole[NB * 6 * SP], got[NB * 6 * SP], parts[K][NB * 3 * SP];
  const void *cparts[K] = {parts[0], parts[1], parts[2]};
  int fails = 0;
  for (int i = 0; i < K; ++i) fill(parts[i], (int)(NB * ch[i] * SP), 31 + i);
  if (sg_concat(SG_DTYPE_F64, NB, SP, K, ch, cparts, whole) != SG_OK) return 1;
  for (int64_t i = 0, off = 0; i < K; off += ch[i], ++i)
    for (int64_t e = 0; e < NB * ch[i] * SP; ++e)
      got[sg_cat_index(e, ch[i], ctot, off, SP)] = parts[i][e];
  fails += close_ok("concat map", got, whole, NB * ctot * SP);
  double back[K][NB * 3 * SP], want[K][NB * 3 * SP];
  void *wparts[K] = {want[0], want[1], want[2]};
  fill(whole, NB * 6 * SP, 37);
  if (sg_split(SG_DTYPE_F64, NB, SP, K, ch, whole, wparts) != SG_OK) return 1;
  for (int64_t i = 0, off = 0; i < K; off += ch[i], ++i) {
    for (int64_t e = 0; e < NB * ch[i] * SP; ++e)
      back[i][e] = whole[sg_cat_index(e, ch[i], ctot, off, SP)];
    fails += close_ok("split map", back[i], want[i], NB * ch[i] * SP);
  }
  /* time window, both ways (crop 7 -> 4, pad 4 -> 7) over 3 planes of 5 */
  double tin[3 * 7 * 5], tout[3 * 7 * 5], tref[3 * 7 * 5];
  const int64_t steps[2][2] = {{7, 4}, {4, 7}};
  for (int w = 0; w < 2; ++w) {
    const int64_t t1 = steps[w][0], t2 = steps[w][1];
    fill(tin, (int)(3 * t1 * 5), 41 + w);
    for (int64_t p = 0; p < 3; ++p)
      for (int64_t t = 0; t < t2; ++t)
        for (int64_t e = 0; e < 5; ++e)
          tref[(p * t2 + t) * 5 + e] = t < t1 ? tin[(p * t1 + t) * 5 + e] : 0;
    for (int64_t j = 0; j < 3 * t2 * 5; ++j) {
      const int64_t i = sg_twin_src(j, t1, t2, 5);
      tout[j] = i >= 0 ? tin[i] : 0;
    }
    fails += close_ok(w ? "time window pad" : "time window crop", tout, tref,
                      3 * t2 * 5);
  }
  return fails;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  sg_op_device t[MAXE];
  int n = sg_op_device_count(), fails = 0;
  if (n < 1 || n > MAXE) {
    printf("FAIL: %d entries in the device table\n", n);
    fails = 1;
  } else {
    for (int i = 0; i < n; ++i) t[i] = *sg_op_device_at(i);
    fails += check(t, n, rank == 0);
    fails += check_rejects(t, n);
  }
  fails += check_defs();
  fails += check_sharded_list(rank == 0);
  fails += check_tape_device();
  fails += check_gathers();
  fails += check_conv_gemms();
  fails += check_pad_gathers();
  fails += check_fill_outside();
  fails += check_layout_maps();
  if (rank == 0 && !fails) {
    int on = 0;
    for (int i = 0; i < n; ++i) on += sg_op_device_on_cuda(&t[i]);
    printf("cuda coverage: %d of %d ops have CUDA forward and backward "
           "kernels:",
           on, sg_ag_op_count());
    for (int i = 0; i < n; ++i)
      if (sg_op_device_on_cuda(&t[i])) printf(" %s", t[i].op);
    printf("\n");
  }
  if (rank == 0) printf("%s\n", fails ? "FAILED" : "PASSED");
  MPI_Finalize();
  return fails ? 1 : 0;
}
