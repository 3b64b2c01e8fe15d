/* Megatron sequence parallelism on the tape (models/ag_tp.c, tp_sequence),
 * and the vit's sp dim (the same group as an sp group),
 * on a mesh "tp=P" (P = 1..4 ranks), f64:
 *  - sp_scatter (backward: zero padding) and sp_share (backward: 1/P) by
 *    the adjoint identity (the gradient Partial over the group);
 *  - the ViT block with its tokens split over sp (the attention of the
 *    pieces over sp by ring, Ulysses and USP) on 45 and 35 tokens (uneven
 *    pieces), and on h=2 x sp=2 (rows 3 + 2 of the 5 x 9 tokens, the
 *    attention over the 4 ranks; USP: Ulysses over sp, ring over h),
 *    and on sp=2 x tp=2 with tp_sequence (the tp slices of each sp piece:
 *    45 tokens 23+22 over sp, 12+11 and 11+11 over tp, ring; 35 tokens,
 *    Ulysses), against one process at 1e-10;
 *  - the four token-slice ops alone (scatter, gather, all-gather,
 *    reduce-scatter over tp) on 45 tokens (5 x 9: 23+22, 15 x 3, 12+11x3)
 *    and 10 tokens (2 x 5: 4+3+3, 3+3+2+2): their values, and the adjoint
 *    identity <A x, w> = <x, A^T w> with A^T the op's backward (inner
 *    products over the ranks' slices, or once for a replicated tensor);
 *  - a whole pre-LN ViT block on 45 and 35 tokens (LayerNorm, MHSA with heads over tp, residual,
 *    LayerNorm, fc1 column-parallel, GELU, fc2 row-parallel, residual) on
 *    token slices: x scattered, y gathered, against one process at 1e-10:
 *    y, loss, dx, every parameter's gradient on this rank's box (the
 *    LayerNorms' and the row biases' summed over tp by their tp_copy);
 *  - the bytes the tp ops receive per block: all-gather + reduce-scatter
 *    per rank as the formula, and over the ranks 2 (P - 1) payloads per
 *    pair: the volume of a ring all-reduce, so 2/P of the fixed-order
 *    all-reduce's that plain TP runs (measured on the same block): equal
 *    at tp = 2. */
#include "sg_autograd.h"
#include "sg_comm.h"
#include "sg_decomp.h"
#include "sg_mesh.h"
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double val(int seed, int64_t i) {
  return sin(0.7 + 1.3 * seed + 0.61 * (double)i);
}

static sg_status var_f64(sg_var *v, const char *nm, int nd, const int64_t *sh,
                         int param) {
  return param ? sg_var_init_param(v, nm, SG_DTYPE_F64, nd, sh, NULL, NULL)
               : sg_var_init(v, nm, SG_DTYPE_F64, nd, sh, NULL, 1);
}

static double dot(const sg_var *a, const double *b) {
  double s = 0;
  const double *x = a->value.data;
  for (int64_t i = 0; i < sg_tensor_numel(&a->value); ++i) s += x[i] * b[i];
  return s;
}

/* ---- the ops alone ------------------------------------------------------- */

enum { ON = 2, OC = 3 };

/* Op k (0 scatter, 1 gather, 2 all-gather, 3 reduce-scatter; 4 the sp
 * dim's scatter, whose backward pads with zeros: x replicated, the full
 * gradient Partial over the group) on tokens (a, b): values and
 * <A x, w> = <x, A^T w>. */
static void test_op(sg_group_t g, int k, int64_t a, int64_t b) {
  static const char *nm[5] = {"scatter", "gather", "allgather",
                              "reduce_scatter", "sp_scatter"};
  const int P = g ? sg_group_size(g) : 1, r = g ? sg_group_rank(g) : 0;
  const int64_t T = a * b, t0 = sg_split_offset(T, P, r),
                tn = sg_split_size(T, P, r);
  const int64_t fs[4] = {ON, OC, a, b}, ps[3] = {ON, OC, tn}, nf = ON * OC * T,
                np = ON * OC * tn;
  /* the slice of a full (row-major (n, c, token)) tensor */
#define SLICE_OF(i) (((i) / tn) * T + t0 + (i) % tn)
  const int in_full = k == 0 || k == 3 || k == 4, out_full = k == 1 || k == 2;
  sg_tape_t tape = NULL;
  sg_var x, like, *y = NULL, *l = NULL;
  memset(&x, 0, sizeof x), memset(&like, 0, sizeof like);
  double *w = NULL, *want = NULL;
  SG_REQUIRE_OK(var_f64(&x, "x", in_full ? 4 : 3, in_full ? fs : ps, 0));
  SG_REQUIRE_OK(var_f64(&like, "like", 4, fs, 0));
  double *xd = x.value.data;
  /* x: scatter's replicated, reduce-scatter's different per rank, the
   * slices of the global 1 (gather, all-gather) */
  for (int64_t i = 0; i < (in_full ? nf : np); ++i)
    xd[i] = k == 0 || k == 4 ? val(1, i)
            : k == 3         ? val(2 + r, i)
                             : val(1, SLICE_OF(i));
  const int64_t ny = out_full ? nf : np;
  w = calloc((size_t)ny, sizeof *w), want = calloc((size_t)ny, sizeof *want);
  SG_REQUIRE_OK(w && want ? SG_OK : SG_ERR_ALLOC);
  for (int64_t i = 0; i < ny; ++i) { /* gather's w replicated */
    w[i] = k == 1 ? val(9, i) : val(10 + r, i);
    if (k == 0 || k == 4) want[i] = val(1, SLICE_OF(i));
    if (out_full) want[i] = val(1, i);
    if (k == 3)
      for (int q = 0; q < P; ++q) want[i] += val(2 + q, SLICE_OF(i));
  }
  SG_REQUIRE_OK(sg_tape_create(&tape));
  sg_status st = k == 0   ? sg_ag_tp_seq_scatter(tape, g, &x, &y)
                 : k == 1 ? sg_ag_tp_seq_gather(tape, g, &x, &like, &y)
                 : k == 2 ? sg_ag_tp_seq_allgather(tape, g, &x, &like, &y)
                 : k == 3 ? sg_ag_tp_seq_reduce_scatter(tape, g, &x, &y)
                          : sg_ag_sp_scatter(tape, g, &x, &y);
  SG_REQUIRE_OK(st);
  SG_CHECK(sg_tensor_numel(&y->value) == ny, "%s: %lld outputs, want %lld",
           nm[k], (long long)sg_tensor_numel(&y->value), (long long)ny);
  SG_CHECK(sg_test_cmp_f64(nm[k], y->value.data, want, ny, 1e-14, 1e-14) == 0,
           "%s (%lldx%lld tokens, tp=%d): values", nm[k], (long long)a,
           (long long)b, P);
  double ip[2] = {dot(y, w), 0};
  sg_var wv, *yw = NULL;
  memset(&wv, 0, sizeof wv);
  SG_REQUIRE_OK(
      sg_var_init(&wv, "w", SG_DTYPE_F64, y->value.ndim, y->value.shape, w, 0));
  SG_REQUIRE_OK(sg_ag_binary(tape, SG_BINARY_MUL, y, &wv, &yw));
  SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_SUM, yw, NULL, &l));
  SG_REQUIRE_OK(sg_tape_backward(tape, l));
  ip[1] = dot(&x, x.grad.data);
  /* over the ranks; a replicated tensor's product once (sp_scatter's x is
   * replicated but its gradient Partial: the sum over the ranks is the
   * adjoint's) */
  if (k == 1) ip[0] /= P;
  if (k == 0) ip[1] /= P;
  if (k == 4) { /* the padding: zeros outside this rank's slice */
    int64_t bad = 0;
    const double *gx = x.grad.data;
    for (int64_t i = 0; i < nf; ++i) {
      const int64_t tk = i % T;
      bad += (tk < t0 || tk >= t0 + tn) && gx[i] != 0;
    }
    SG_CHECK(bad == 0, "sp_scatter: %lld gradients outside the slice",
             (long long)bad);
  }
  MPI_Allreduce(MPI_IN_PLACE, ip, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  SG_CHECK(fabs(ip[0] - ip[1]) <= 1e-12 * (1 + fabs(ip[0])),
           "%s (tp=%d): <Ax,w> = %.17g, <x,A^T w> = %.17g", nm[k], P, ip[0],
           ip[1]);
#undef SLICE_OF
done:
  free(w), free(want);
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&like);
}

/* sp_share: y = p; dp = dy / P, so the sum over the group is dy. */
static void test_share(sg_group_t g) {
  const int P = g ? sg_group_size(g) : 1;
  const int64_t n = 7;
  sg_tape_t tape = NULL;
  sg_var p, wv, *y = NULL, *l = NULL;
  memset(&p, 0, sizeof p), memset(&wv, 0, sizeof wv);
  double w[7];
  SG_REQUIRE_OK(var_f64(&p, "p", 1, &n, 1));
  for (int64_t i = 0; i < n; ++i)
    ((double *)p.value.data)[i] = val(5, i), w[i] = val(6, i);
  SG_REQUIRE_OK(sg_var_init(&wv, "w", SG_DTYPE_F64, 1, &n, w, 0));
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_REQUIRE_OK(sg_ag_sp_share(tape, g, &p, &y));
  SG_REQUIRE_OK(sg_ag_binary(tape, SG_BINARY_MUL, y, &wv, &y));
  SG_REQUIRE_OK(sg_ag_loss(tape, SG_LOSS_SUM, y, NULL, &l));
  SG_REQUIRE_OK(sg_tape_backward(tape, l));
  double sum[7];
  MPI_Allreduce(p.grad.data, sum, 7, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  SG_CHECK(sg_test_cmp_f64("sp_share", sum, w, n, 1e-15, 1e-15) == 0,
           "sp_share (sp=%d): the gradient summed over the ranks", P);
done:
  sg_tape_destroy(&tape);
  sg_var_release(&p);
}

/* ---- a ViT block -------------------------------------------------------- */

enum { N = 2, C = 12, HEADS = 12, HID = 4 * C, TMAX = 45 };
/* the block's token grid A x B (T tokens), set by test_block */
static int64_t A = 5, B = 9, T = 45;
enum { NP = 12 }; /* ln1 g b, qkv w b, out w b, ln2 g b, fc1 w b, fc2 w b */
static const int64_t GN[NP] = {C, C, 3 * C *C, 3 * C, C *C,   C,
                               C, C, HID *C,   HID,   C *HID, C};

typedef struct split {
  int64_t c0, cl, f0, fl; /* this rank's channels and hidden channels */
} split;

/* Global index of local element l of parameter p. */
static int64_t glob(const split *s, int p, int64_t l) {
  switch (p) {
  case 2: { /* (3 cl, C): rows c0.. of each of q, k, v */
    const int64_t k = l / C;
    return ((k / s->cl) * C + s->c0 + k % s->cl) * C + l % C;
  }
  case 3: return (l / s->cl) * C + s->c0 + l % s->cl;
  case 4: /* (C, cl): columns c0.. */
    return (l / s->cl) * C + s->c0 + l % s->cl;
  case 8: /* (fl, C): rows f0.. */ return (s->f0 + l / C) * C + l % C;
  case 9: return s->f0 + l;
  case 10: /* (C, fl): columns f0.. */
    return (l / s->fl) * HID + s->f0 + l % s->fl;
  default: /* replicated */ return l;
  }
}

static void local_shape(const split *s, int p, int *nd, int64_t *sh) {
  const int64_t cl = s->cl, fl = s->fl;
  const int64_t rows[NP] = {C, C, 3 * cl, 3 * cl, C, C, C, C, fl, fl, C, C};
  const int64_t cols[NP] = {0, 0, C, 0, cl, 0, 0, 0, C, 0, fl, 0};
  *nd = cols[p] ? 2 : 1;
  sh[0] = rows[p], sh[1] = cols[p];
}

static double pval(int p, int64_t g) {
  const int ln = p == 0 || p == 6;
  const double scale = p == 10 ? 1.0 / sqrt(HID) : 1.0 / sqrt(C);
  return ln ? 1.0 + 0.1 * val(20 + p, g) : scale * val(20 + p, g);
}

typedef struct result {
  double y[N * C * TMAX], loss, dx[N * C * TMAX];
  double *grad[NP]; /* global layout, this rank's box filled */
  long long bytes_fwd, bytes_bwd;
} result;

static void result_free(result *r) {
  for (int p = 0; p < NP; ++p) free(r->grad[p]), r->grad[p] = NULL;
}

/* The block on group g (NULL: one process); seq: on token slices. sp > 0:
 * g is an sp group instead (the vit's sp dim, vit.c vit_block): the
 * parameters whole, the tokens split over g after x (sp_scatter), the
 * attention of the pieces over g by sp_mode sp - 1 (ring, Ulysses, USP),
 * gathered at the end; every gradient (dx too) is Partial over g: summed
 * here. */
/* With DOM (the sp block on a 2-D group): this rank's rows [Y0, Y0 + NY)
 * of the A x B tokens (a domain split), the attention over SEQ (the
 * domain x sp), USP's ring over DOM; the results summed over DOM into the
 * whole arrays. */
static sg_group_t DOM, SEQ;
static int64_t Y0, NY;

/* Sum the whole array a (n) over DOM (each rank filled its rows). */
static void dom_sum(double *a, int64_t n) {
  if (DOM)
    MPI_Allreduce(MPI_IN_PLACE, a, (int)n, MPI_DOUBLE, MPI_SUM,
                  sg_group_comm(DOM));
}

/* Local (n, c, rows, B) -> the whole (n, c, A, B) at rows Y0.. (zeros
 * elsewhere). */
static void to_whole(const double *loc, double *whole, int64_t ny) {
  const int64_t y0 = ny < A ? Y0 : 0;
  memset(whole, 0, (size_t)(N * C * T) * sizeof *whole);
  for (int64_t nc = 0; nc < N * C; ++nc)
    memcpy(whole + (nc * A + y0) * B, loc + nc * ny * B,
           (size_t)(ny * B) * sizeof *whole);
}

/* The tp group g (NULL: none) and, with sp, the sp group spg: the tp
 * slices (seq) are of this rank's sp piece, as vit.c vit_split. */
static sg_status block_run_tp(sg_group_t g, sg_group_t spg, int seq, int sp,
                              result *res) {
  sg_status st = SG_OK;
  const int64_t ny = sp && DOM ? NY : A, y0 = sp && DOM ? Y0 : 0;
  const int P = g ? sg_group_size(g) : 1, r = g ? sg_group_rank(g) : 0;
  const split s = {C / P * r, C / P, HID / P * r, HID / P};
  const int64_t xs[4] = {N, C, ny, B}, nl = N * C * ny * B;
  sg_tape_t tape = NULL;
  sg_var x, t, prm[NP];
  sg_var *q = prm, *h = NULL, *u = NULL, *l = NULL;
  memset(&x, 0, sizeof x), memset(&t, 0, sizeof t);
  memset(prm, 0, sizeof prm);
  SG_TRY(var_f64(&x, "x", 4, xs, 0));
  SG_TRY(sg_var_init(&t, "t", SG_DTYPE_F64, 4, xs, NULL, 0));
  for (int64_t i = 0; i < nl; ++i) { /* by global index */
    const int64_t gi = ((i / (ny * B)) * A + y0) * B + i % (ny * B);
    ((double *)x.value.data)[i] = val(3, gi),
             ((double *)t.value.data)[i] = val(4, gi);
  }
  for (int p = 0; p < NP; ++p) {
    int nd;
    int64_t sh[2];
    local_shape(&s, p, &nd, sh);
    SG_TRY(var_f64(&prm[p], "p", nd, sh, 1));
    for (int64_t i = 0; i < sg_tensor_numel(&prm[p].value); ++i)
      ((double *)prm[p].value.data)[i] = pval(p, glob(&s, p, i));
  }
  sg_var *g0 = &q[0], *b0 = &q[1], *g6 = &q[6], *b6 = &q[7];
  SG_TRY(sg_tape_create(&tape));
  sg_ag_tp_bytes(NULL, 1);
  h = &x;
  if (sp) SG_TRY(sg_ag_sp_scatter(tape, spg, h, &h));
  const sg_var *piece = h, *like = seq ? piece : NULL;
  if (seq) {
    SG_TRY(sg_ag_tp_seq_scatter(tape, g, h, &h));
    SG_TRY(sg_ag_tp_param(tape, g, g0, &g0));
    SG_TRY(sg_ag_tp_param(tape, g, b0, &b0));
    SG_TRY(sg_ag_tp_param(tape, g, g6, &g6));
    SG_TRY(sg_ag_tp_param(tape, g, b6, &b6));
  }
  SG_TRY(sg_ag_layernorm(tape, 1e-5, h, g0, b0, &u));
  if (sp) { /* vit.c vit_attention_sp */
    const int64_t parts[3] = {C / P, C / P, C / P};
    const sg_attn_groups ag = {.seq = DOM ? SEQ : spg,
                               .sp = spg,
                               .domain = DOM};
    sg_var *qkv[3];
    SG_TRY(sg_ag_linear_col_seq(tape, g, like, u, &q[2], &q[3], &u));
    SG_TRY(sg_ag_split(tape, u, 3, parts, qkv));
    SG_TRY(sg_ag_attention_seq(tape, (sg_sp_mode)(sp - 1), HEADS / P, &ag,
                               qkv[0], qkv[1], qkv[2], &u));
    SG_TRY(sg_ag_linear_row_seq(tape, g, seq, u, &q[4], &q[5], &u));
  } else {
    SG_TRY(sg_ag_mhsa_seq(tape, g, like, SG_SP_RING, HEADS / P, u, &q[2], &q[3],
                          &q[4], &q[5], &u));
  }
  SG_TRY(sg_ag_binary(tape, SG_BINARY_ADD, h, u, &h));
  SG_TRY(sg_ag_layernorm(tape, 1e-5, h, g6, b6, &u));
  SG_TRY(sg_ag_linear_col_seq(tape, g, like, u, &q[8], &q[9], &u));
  SG_TRY(sg_ag_act(tape, SG_ACT_GELU, u, &u));
  SG_TRY(sg_ag_linear_row_seq(tape, g, seq, u, &q[10], &q[11], &u));
  SG_TRY(sg_ag_binary(tape, SG_BINARY_ADD, h, u, &h));
  if (seq) SG_TRY(sg_ag_tp_seq_gather(tape, g, h, piece, &h));
  if (sp) SG_TRY(sg_ag_tp_seq_gather(tape, spg, h, &x, &h));
  sg_ag_tp_bytes(&res->bytes_fwd, 1);
  to_whole(h->value.data, res->y, ny);
  SG_TRY(sg_ag_binary(tape, SG_BINARY_MUL, h, &t, &h));
  SG_TRY(sg_ag_loss(tape, SG_LOSS_SUM, h, NULL, &l));
  res->loss = sg_var_item(l);
  if (sp) dom_sum(&res->loss, 1);
  SG_TRY(sg_tape_backward(tape, l));
  sg_ag_tp_bytes(&res->bytes_bwd, 1);
  to_whole(x.grad.data, res->dx, ny);
  if (sp) {
    MPI_Allreduce(MPI_IN_PLACE, res->dx, (int)(N * C * T), MPI_DOUBLE, MPI_SUM,
                  sg_group_comm(spg));
    for (int p = 0; p < NP; ++p) {
      MPI_Allreduce(MPI_IN_PLACE, prm[p].grad.data,
                    (int)sg_tensor_numel(&prm[p].value), MPI_DOUBLE, MPI_SUM,
                    sg_group_comm(spg));
      dom_sum(prm[p].grad.data, sg_tensor_numel(&prm[p].value));
    }
    dom_sum(res->y, N * C * T), dom_sum(res->dx, N * C * T);
  }
  for (int p = 0; p < NP; ++p) {
    res->grad[p] = calloc((size_t)GN[p], sizeof(double));
    if (!res->grad[p]) SG_RAISE(SG_ERR_ALLOC, "test: out of memory");
    for (int64_t i = 0; i < sg_tensor_numel(&prm[p].value); ++i)
      res->grad[p][glob(&s, p, i)] = ((double *)prm[p].grad.data)[i];
  }
fail:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&t);
  for (int p = 0; p < NP; ++p) sg_var_release(&prm[p]);
  return st;
}

/* sp > 0: g is an sp group (no tp) */
static sg_status block_run_as(sg_group_t g, int seq, int sp, result *res) {
  return sp ? block_run_tp(NULL, g, seq, sp, res)
            : block_run_tp(g, NULL, seq, 0, res);
}

static sg_status block_run(sg_group_t g, int seq, result *res) {
  return block_run_as(g, seq, 0, res);
}

static double maxabs(const double *a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = fmax(m, fabs(a[i]));
  return m;
}

/* Every parameter's gradient on this rank's box (split s) against one
 * process's, 1e-10 of its largest. */
static void cmp_grads(const split *s, const result *ref, const result *got,
                      const char *what, int tp, int sp) {
  for (int p = 0; p < NP; ++p) {
    int nd;
    int64_t sh[2], bad = 0;
    local_shape(s, p, &nd, sh);
    const int64_t n = sh[0] * (nd == 2 ? sh[1] : 1);
    const double m = maxabs(ref->grad[p], GN[p]);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t gi = glob(s, p, i);
      bad += !(fabs(got->grad[p][gi] - ref->grad[p][gi]) <= 1e-10 * m);
    }
    SG_CHECK(bad == 0, "%s tp=%d sp=%d: gradient of parameter %d: %lld differ",
             what, tp, sp, p, (long long)bad);
  }
}

static void test_block(sg_group_t g, int64_t a, int64_t b) {
  A = a, B = b, T = a * b;
  const int P = g ? sg_group_size(g) : 1, r = g ? sg_group_rank(g) : 0;
  const split s = {C / P * r, C / P, HID / P * r, HID / P};
  static result ref, got, tp;
  SG_REQUIRE_OK(block_run(NULL, 0, &ref));
  SG_REQUIRE_OK(block_run(g, 1, &got));
  SG_REQUIRE_OK(block_run(g, 0, &tp));
  const double my = maxabs(ref.y, N * C * T), mx = maxabs(ref.dx, N * C * T);
  SG_CHECK(sg_test_cmp_f64("y", got.y, ref.y, N * C * T, 0, 1e-10 * my) == 0,
           "tp_sequence block y (tp=%d)", P);
  SG_CHECK(fabs(got.loss - ref.loss) <= 1e-10 * fabs(ref.loss),
           "loss %.17g vs %.17g", got.loss, ref.loss);
  SG_CHECK(sg_test_cmp_f64("dx", got.dx, ref.dx, N * C * T, 0, 1e-10 * mx) == 0,
           "tp_sequence block dx (tp=%d)", P);
  cmp_grads(&s, &ref, &got, "tp_sequence", P, 1);
  /* volume: per rank 2 x (all-gather + reduce-scatter) each way; besides,
   * the test's scatter of x (backward: an all-gather), the gather of y
   * (forward: an all-gather) and the sums over tp of the 6 replicated
   * vectors' gradients (LayerNorms, row biases: C each) */
  const int64_t tn = sg_split_size(T, P, r), pay = N * C * T * 8;
  const long long want = P > 1 ? 2 * (T - tn + (P - 1) * tn) * N * C * 8 : 0,
                  ef = P > 1 ? (T - tn) * N * C * 8 : 0,
                  eb = ef + 6LL * (P - 1) * C * 8;
  SG_CHECK(got.bytes_fwd == want + ef && got.bytes_bwd == want + eb,
           "tp=%d rank %d: tp_sequence received %lld B forward, %lld B "
           "backward, want %lld + %lld, %lld + %lld",
           P, r, got.bytes_fwd, got.bytes_bwd, want, ef, want, eb);
  SG_CHECK(tp.bytes_fwd == 2LL * (P - 1) * pay && tp.bytes_bwd == tp.bytes_fwd,
           "tp=%d: plain TP received %lld B forward, want %lld", P,
           tp.bytes_fwd, 2LL * (P - 1) * pay);
  long long tot[2] = {got.bytes_fwd + got.bytes_bwd - ef - eb,
                      tp.bytes_fwd + tp.bytes_bwd};
  MPI_Allreduce(MPI_IN_PLACE, tot, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  /* over the ranks: 2 (P - 1) payloads per pair, a ring all-reduce's */
  SG_CHECK(tot[0] == 2LL * 2 * 2 * (P - 1) * pay && tot[0] * P == tot[1] * 2,
           "tp=%d: over the ranks tp_sequence %lld B, plain TP %lld B", P,
           tot[0], tot[1]);
  if (r == 0)
    printf("tp=%d, %lld tokens: per block and step, over the tp ranks: "
           "tp_sequence %lld "
           "B, plain TP (fixed-order all-reduce) %lld B, ring all-reduce "
           "%lld B\n",
           P, (long long)T, tot[0], tot[1], 2LL * 2 * 2 * (P - 1) * pay);
done:
  result_free(&ref), result_free(&got), result_free(&tp);
}

/* The block with its tokens split over an sp group of P ranks (and with
 * a tp group tg, its heads and hidden width over tp; seq: tp_sequence, the
 * tp slices of each sp piece) against one process (1e-10): y, loss, dx
 * and every gradient summed over sp, on this rank's box. */
static void test_block_sp_tp(sg_group_t tg, sg_group_t g, int seq, int64_t a,
                             int64_t b, int mode) {
  A = a, B = b, T = a * b;
  const int P = g ? sg_group_size(g) : 1, tp = tg ? sg_group_size(tg) : 1,
            r = tg ? sg_group_rank(tg) : 0;
  const split s = {C / tp * r, C / tp, HID / tp * r, HID / tp};
  static result ref, got;
  SG_REQUIRE_OK(block_run(NULL, 0, &ref));
  SG_REQUIRE_OK(block_run_tp(tg, g, seq, 1 + mode, &got));
  const double my = maxabs(ref.y, N * C * T), mx = maxabs(ref.dx, N * C * T);
  SG_CHECK(sg_test_cmp_f64("y", got.y, ref.y, N * C * T, 0, 1e-10 * my) == 0,
           "sp block y (sp=%d, tp=%d, seq %d)", P, tp, seq);
  SG_CHECK(fabs(got.loss - ref.loss) <= 1e-10 * fabs(ref.loss),
           "sp loss %.17g vs %.17g", got.loss, ref.loss);
  SG_CHECK(sg_test_cmp_f64("dx", got.dx, ref.dx, N * C * T, 0, 1e-10 * mx) == 0,
           "sp block dx (sp=%d, tp=%d, seq %d)", P, tp, seq);
  cmp_grads(&s, &ref, &got, seq ? "sp block, tp_sequence" : "sp block", tp, P);
done:
  result_free(&ref), result_free(&got);
}

static void test_block_sp(sg_group_t g, int64_t a, int64_t b, int mode) {
  test_block_sp_tp(NULL, g, 0, a, b, mode);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_mesh_t mesh = NULL;
  sg_group_t g = NULL;
  char spec[32];
  snprintf(spec, sizeof spec, "tp=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  SG_REQUIRE_OK(sg_mesh_group(mesh, 1u, &g));
  for (int k = 0; k < 5; ++k) {
    test_op(g, k, 5, 9);
    test_op(g, k, 2, 5);
  }
  test_share(g);
  test_block(g, 5, 9);                   /* 45 tokens: 23+22, 15x3, 12+11x3 */
  test_block(g, 5, 7);                   /* 35 tokens: 18+17, 12+12+11, 9x3+8 */
  for (int mode = 0; mode < 3; ++mode) { /* ring, Ulysses, USP over sp */
    test_block_sp(g, 5, 9, mode);        /* the same group as an sp dim's */
    test_block_sp(g, 5, 7, mode);
  }
  if (sg_test_size == 4) { /* h=2 x sp=2: rows 3 + 2 of 5 (27 + 18 tokens
                              over sp: 14+13, 9+9) */
    sg_mesh_t m2 = NULL;
    sg_group_t sp2 = NULL;
    SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, "h=2,sp=2", &m2));
    SG_REQUIRE_OK(sg_mesh_group(m2, 1u, &DOM));
    SG_REQUIRE_OK(sg_mesh_group(m2, 2u, &sp2));
    SG_REQUIRE_OK(sg_mesh_group(m2, 3u, &SEQ));
    Y0 = sg_split_offset(5, 2, sg_mesh_coord(m2, 0));
    NY = sg_split_size(5, 2, sg_mesh_coord(m2, 0));
    for (int mode = 0; mode < 3; ++mode) test_block_sp(sp2, 5, 9, mode);
    DOM = SEQ = NULL;
    sg_mesh_destroy(&m2);
    /* sp=2 x tp=2 with tp_sequence: 45 tokens over sp 23+22, each piece
     * over tp 12+11, 11+11 (ring); 35: 18+17, 9+9, 9+8 (Ulysses); the
     * attention over sp of the pieces all-gathered over tp, 6 heads per tp
     * rank (the flavours see the same gathered pieces as without tp) */
    sg_group_t tp2 = NULL;
    SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, "sp=2,tp=2", &m2));
    SG_REQUIRE_OK(sg_mesh_group(m2, 1u, &sp2));
    SG_REQUIRE_OK(sg_mesh_group(m2, 2u, &tp2));
    test_block_sp_tp(tp2, sp2, 1, 5, 9, 0);
    test_block_sp_tp(tp2, sp2, 1, 5, 7, 1);
    sg_mesh_destroy(&m2);
  }
done:
  sg_mesh_destroy(&mesh);
  return sg_test_finish();
}
