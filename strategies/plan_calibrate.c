/* shardgrid — sg-plan --calibrate: this machine's rates, measured with
 * the library's own kernels (the ones a step runs, one thread per rank as
 * sg-train runs them) twice: on rank 0 alone (the single-stream rates, a
 * 1-rank run's) and on every rank of comm at once (the shared rates, a
 * busy node's: its ranks share one memory system), and the MPI link
 * fitted to alpha + beta n from ping-pongs between ranks 0 and 1. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "sg_fft.h"
#include "sg_ops.h"
#include "sg_plan.h"

#include <math.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef sg_status (*bench_fn)(void *ctx);

static int use_cpu_time;
/* 1: rank 0 runs the kernels alone (the single-stream rates), the others
 * wait at the barriers; 0: every rank runs them at once (the shared
 * rates). */
static int solo;

/* Wall time, or this thread's CPU time (SG_PLAN_CAL_CPU_TIME). */
static double now(void) {
  if (!use_cpu_time) return MPI_Wtime();
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of `reps` timings of fn (all ranks start together): the
 * typical time, not the luckiest one (on a shared machine the best of a
 * few runs is the one no other job disturbed, which a training run is
 * not). */
static sg_status median_of(MPI_Comm comm, int reps, bench_fn fn, void *ctx,
                           double *med) {
  sg_status st = SG_OK;
  double t[16];
  int rank;
  MPI_Comm_rank(comm, &rank);
  const int run = !solo || rank == 0; /* an idle rank's time is 0 */
  if (reps > 16) reps = 16;
  if (run) SG_TRY(fn(ctx)); /* warm-up: plans, caches, page faults */
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(comm);
    const double t0 = now();
    if (run) SG_TRY(fn(ctx));
    t[r] = run ? now() - t0 : 0.0;
  }
  qsort(t, (size_t)reps, sizeof t[0], cmp_double);
  *med = t[reps / 2];
fail:
  return st;
}

typedef struct cal_buf {
  sg_attn_desc ad;
  int64_t n, c, s; /* batch, channels, spatial points */
  float *x, *y, *w, *dx, *dw, *ws;
  sg_conv_desc cd;
  sg_norm_desc nd;
  sg_fft_plan_t fft;
} cal_buf;

static sg_status run_linear(void *p) {
  cal_buf *b = p;
  sg_status st = SG_OK;
  SG_TRY(sg_linear_forward(SG_DTYPE_F32, b->n, b->c, b->c, b->s, b->x, b->w,
                           NULL, b->y));
  SG_TRY(sg_linear_backward(SG_DTYPE_F32, b->n, b->c, b->c, b->s, b->x, b->w,
                            b->y, b->dx, b->dw, NULL));
fail:
  return st;
}

static sg_status run_conv(void *p) {
  cal_buf *b = p;
  sg_status st = SG_OK;
  SG_TRY(sg_conv_forward(&b->cd, SG_DTYPE_F32, b->x, b->w, NULL, b->y, b->ws));
  SG_TRY(sg_conv_backward(&b->cd, SG_DTYPE_F32, b->x, b->w, b->y, b->dx, b->dw,
                          NULL, b->ws));
fail:
  return st;
}

static sg_status run_fft(void *p) {
  cal_buf *b = p;
  sg_status st = SG_OK;
  SG_TRY(sg_fft_forward(b->fft, b->x, b->y));
  SG_TRY(sg_fft_inverse(b->fft, b->y, b->dx));
fail:
  return st;
}

static sg_status run_attn(void *p) {
  cal_buf *b = p;
  sg_status st = SG_OK;
  const int64_t sz = b->ad.batch * b->ad.heads * b->ad.nq * b->ad.head_dim;
  float *q = b->x, *k = b->x + sz, *v = b->x + 2 * sz, *o = b->y,
        *lse = b->y + sz, *dq = b->dx, *dk = b->dx + sz, *dv = b->dx + 2 * sz;
  SG_TRY(sg_attention_forward(&b->ad, SG_DTYPE_F32, q, k, v, o, lse, b->ws));
  SG_TRY(sg_attention_backward(&b->ad, SG_DTYPE_F32, q, k, v, o, lse, o, dq, dk,
                               dv, b->ws));
fail:
  return st;
}

static sg_status run_stream(void *p) {
  cal_buf *b = p;
  return sg_binary_forward(SG_BINARY_ADD, SG_DTYPE_F32, b->n, b->x, b->dx,
                           b->y);
}

static sg_status run_act(void *p) {
  cal_buf *b = p;
  sg_status st = SG_OK;
  SG_TRY(sg_act_forward(SG_ACT_GELU, SG_DTYPE_F32, b->n, b->x, b->y));
  SG_TRY(sg_act_backward(SG_ACT_GELU, SG_DTYPE_F32, b->n, b->x, b->y, b->dx));
fail:
  return st;
}

/* A norm forward + backward as the tape runs it (statistics, normalise;
 * the backward's sums, then the gradients). */
static sg_status run_norm(void *p) {
  cal_buf *b = p;
  sg_status st = SG_OK;
  sg_moments *m = (sg_moments *)b->ws;
  double *sums = (double *)(m + b->c);
  SG_TRY(sg_norm_stats(&b->nd, SG_DTYPE_F32, b->x, m));
  SG_TRY(sg_norm_forward(&b->nd, SG_DTYPE_F32, b->x, m, b->w, NULL, b->y));
  SG_TRY(
      sg_norm_backward_sums(&b->nd, SG_DTYPE_F32, b->x, m, b->w, b->y, sums));
  SG_TRY(sg_norm_backward(&b->nd, SG_DTYPE_F32, b->x, m, b->w, b->y, sums,
                          b->dx, b->dw, NULL));
fail:
  return st;
}

static sg_status run_up(void *p) {
  cal_buf *b = p;
  sg_status st = SG_OK;
  const int64_t in[2] = {b->s + 2, b->s + 2}, sc[2] = {2, 2};
  SG_TRY(sg_upsample_forward(SG_UPSAMPLE_LINEAR, 2, b->c, in, sc, SG_DTYPE_F32,
                             b->x, b->y));
  SG_TRY(sg_upsample_backward(SG_UPSAMPLE_LINEAR, 2, b->c, in, sc, SG_DTYPE_F32,
                              b->y, b->dx));
fail:
  return st;
}

static float *falloc(int64_t n) {
  float *a = malloc((size_t)n * sizeof *a);
  if (a)
    for (int64_t i = 0; i < n; ++i) a[i] = (float)((i % 17) - 8) * 0.01f;
  return a;
}

static void cal_free(cal_buf *b) {
  free(b->x), free(b->y), free(b->w), free(b->dx), free(b->dw), free(b->ws);
  sg_fft_plan_destroy(&b->fft);
  memset(b, 0, sizeof *b);
}

/* The rates of the 1x1 linear and the 3x3 conv (same padding) at c -> c
 * channels on n x g x g points, forward + backward (6 n c c g^2 and
 * 6 n c c 9 g^2 flops); the slowest rank's best time. */
static sg_status mm_rates(MPI_Comm comm, int reps, int64_t n, int64_t g,
                          int64_t c, double *gemm, double *conv) {
  sg_status st = SG_OK;
  cal_buf b = {0};
  double t;
  b.n = n, b.c = c, b.s = g * g;
  b.x = falloc(n * c * (g + 2) * (g + 2)), b.y = falloc(n * c * g * g);
  b.dx = falloc(n * c * (g + 2) * (g + 2)), b.w = falloc(c * c * 9);
  b.dw = falloc(c * c * 9);
  if (!b.x || !b.y || !b.dx || !b.w || !b.dw)
    SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  SG_TRY(median_of(comm, reps, run_linear, &b, &t));
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
  *gemm = 6.0 * n * c * c * g * g / t;
  b.cd = (sg_conv_desc){.nsp = 2,
                        .batch = n,
                        .cin = c,
                        .cout = c,
                        .in = {g + 2, g + 2},
                        .kernel = {3, 3},
                        .stride = {1, 1},
                        .dilation = {1, 1}};
  b.ws = malloc(sg_conv_workspace_bytes(&b.cd, SG_DTYPE_F32) + 64);
  if (!b.ws) SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  SG_TRY(median_of(comm, reps, run_conv, &b, &t));
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
  *conv = 6.0 * n * c * c * 9.0 * g * g / t;
fail:
  cal_free(&b);
  return st;
}

/* Hockney's r(n) = r_inf n / (n + n_half) fitted to rates r[i] at n[i]
 * channels: 1 / r = 1 / r_inf + (n_half / r_inf) / n is a line in 1 / n,
 * fitted by least squares; (the largest n's rate, 0) when the points do
 * not show a rate that saturates. */
static void fit_nhalf(int m, const double *n, const double *r, double *rinf,
                      double *nhalf) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < m; ++i) {
    const double x = 1.0 / n[i], y = 1.0 / r[i];
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double slope = (m * sxy - sx * sy) / (m * sxx - sx * sx),
               icpt = (sy - slope * sx) / m;
  if (slope > 0 && icpt > 0)
    *rinf = 1.0 / icpt, *nhalf = slope / icpt;
  else
    *rinf = r[m - 1], *nhalf = 0.0;
}

/* Fused attention forward + backward: B 8, 4 heads of 16, 256 tokens (the
 * shape of bench/plan's ViT); 14 B H N^2 d flops. */
static sg_status attn_rate(MPI_Comm comm, int reps, double *rate) {
  sg_status st = SG_OK;
  cal_buf b = {0};
  double t;
  b.ad = (sg_attn_desc){
      .batch = 8, .heads = 4, .nq = 256, .nk = 256, .head_dim = 16};
  const int64_t sz = 8 * 4 * 256 * 16;
  b.x = falloc(3 * sz), b.y = falloc(sz + 8 * 4 * 256), b.dx = falloc(3 * sz);
  b.ws = malloc(sg_attention_workspace_bytes(&b.ad, SG_DTYPE_F32) + 64);
  if (!b.x || !b.y || !b.dx || !b.ws)
    SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  SG_TRY(median_of(comm, reps, run_attn, &b, &t));
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
  *rate = 14.0 * 8 * 4 * 256.0 * 256.0 * 16 / t;
fail:
  cal_free(&b);
  return st;
}

/* Elements per second of fn over `elems` elements (x, y, dx of `elems`
 * floats plus margins; w, dw of 4096; ws for a norm's statistics). */
static sg_status elem_rate(MPI_Comm comm, int reps, bench_fn fn, cal_buf *b,
                           double elems, double *rate) {
  sg_status st = SG_OK;
  double t;
  const int64_t n = (int64_t)elems;
  b->x = falloc(2 * n), b->y = falloc(2 * n), b->dx = falloc(2 * n);
  b->w = falloc(4096), b->dw = falloc(4096);
  b->ws = malloc((size_t)n * (sizeof(sg_moments) + 2 * sizeof(double)) / 16 +
                 4096);
  if (!b->x || !b->y || !b->dx || !b->w || !b->dw || !b->ws)
    SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  SG_TRY(median_of(comm, reps, fn, b, &t));
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
  *rate = elems / t;
fail:
  cal_free(b);
  return st;
}

/* The element-wise kernels that are compute-bound at activation sizes
 * (1 Mi elements, 4 MiB, the size of an activation in bench/plan):
 * GELU, GroupNorm (32 channels, 4 groups), LayerNorm over 64 channels
 * of 256 tokens (the ViT's) and the linear 2x up-sample, forward + backward each. */
static sg_status elem_rates(MPI_Comm comm, int reps, sg_plan_hw *hw) {
  sg_status st = SG_OK;
  const double e = 1 << 20;
  cal_buf b = {0};
  b.n = 1 << 20;
  SG_TRY(elem_rate(comm, reps, run_act, &b, e, &hw->act_rate));
  b.nd = (sg_norm_desc){.kind = SG_NORM_GROUP,
                        .batch = 8,
                        .channels = 32,
                        .spatial = 4096,
                        .groups = 4,
                        .eps = 1e-5};
  b.c = 32;
  SG_TRY(elem_rate(comm, reps, run_norm, &b, e, &hw->norm_rate));
  b.nd = (sg_norm_desc){
      .kind = SG_NORM_LAYER, .batch = 64, .channels = 64, .spatial = 256};
  b.nd.eps = 1e-5, b.c = 64 * 256;
  SG_TRY(elem_rate(comm, reps, run_norm, &b, e, &hw->lnorm_rate));
  b.c = 256, b.s = 32; /* 256 planes 34 x 34 (margins) -> 64 x 64 */
  SG_TRY(elem_rate(comm, reps, run_up, &b, e, &hw->up_rate));
fail:
  return st;
}

/* GEMM (the 1x1 linear) and 3x3 conv at 16, 32 and 64 channels, 2-D r2c
 * FFT and a streaming add; the slowest rank's median time. */
static sg_status compute_rates(MPI_Comm comm, int quick, sg_plan_hw *hw) {
  sg_status st = SG_OK;
  cal_buf b = {0};
  const int reps = quick ? 3 : 9;
  const int64_t g = quick ? 64 : 128, n = 4, c = 32;
  const double ch[3] = {16, 32, 64};
  double t, gr[3], cr[3];
  for (int i = 0; i < 3; ++i)
    SG_TRY(mm_rates(comm, reps, n, g, (int64_t)ch[i], &gr[i], &cr[i]));
  fit_nhalf(3, ch, gr, &hw->gemm_flops, &hw->gemm_nhalf);
  fit_nhalf(3, ch, cr, &hw->conv_flops, &hw->conv_nhalf);
  SG_TRY(attn_rate(comm, reps, &hw->attn_flops));
  SG_TRY(elem_rates(comm, reps, hw));
  /* FFT: r2c + c2r of `planes` planes g x g, one rank each: at least an
   * activation's 4 MiB (1 Mi points; quick: 256 planes of 64^2), so that
   * the transforms leave the core's L2 as the runs' do, and ranks sharing
   * the node's memory system see each other */
  const int64_t planes = n * c * g * g >= (1 << 20) ? n * c : (1 << 20) / g / g;
  sg_fft_desc d;
  sg_fft_desc_init(&d);
  d.dtype = SG_DTYPE_F32, d.ndim = 2, d.shape[0] = g, d.shape[1] = g;
  d.split[0] = d.split[1] = -1, d.batch = planes, d.nthreads = 1;
  SG_TRY(sg_fft_plan_create_comms(MPI_COMM_SELF, 0, NULL, &d, &b.fft));
  b.x = falloc(planes * g * g), b.dx = falloc(planes * g * g);
  b.y = falloc(2 * planes * g * (g / 2 + 1));
  if (!b.x || !b.dx || !b.y) SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  SG_TRY(median_of(comm, reps, run_fft, &b, &t));
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
  hw->fft_flops = 2.0 * planes * 2.5 * g * g * log2((double)g * g) / t;
  cal_free(&b);
  /* memory: y = x + z over 3 x 64 MiB (beyond the caches) */
  b.n = (quick ? 4 : 16) << 20;
  b.x = falloc(b.n), b.dx = falloc(b.n), b.y = falloc(b.n);
  if (!b.x || !b.dx || !b.y) SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  SG_TRY(median_of(comm, reps, run_stream, &b, &t));
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
  hw->mem_bw = 12.0 * (double)b.n / t;
fail:
  cal_free(&b);
  return st;
}

/* One-way time of a ping-pong of `bytes` between ranks 0 and 1: the best
 * over reps of k round trips in a row / 2k (k amortises the start's skew
 * between the two ranks); every rank returns rank 0's number. */
static double pingpong(MPI_Comm comm, char *buf, int bytes, int reps) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  const int k = bytes < (1 << 16) ? 32 : 4;
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(comm);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < k; ++i) {
      if (rank == 0) {
        MPI_Send(buf, bytes, MPI_BYTE, 1, 7, comm);
        MPI_Recv(buf, bytes, MPI_BYTE, 1, 7, comm, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(buf, bytes, MPI_BYTE, 0, 7, comm, MPI_STATUS_IGNORE);
        MPI_Send(buf, bytes, MPI_BYTE, 0, 7, comm);
      }
    }
    const double t = (MPI_Wtime() - t0) / (2.0 * k);
    if (t < best) best = t;
  }
  MPI_Bcast(&best, 1, MPI_DOUBLE, 0, comm);
  return best;
}

/* alpha + beta n by least squares over sizes 8 B .. 16 MiB (4 MiB quick),
 * weighted by 1 / t so small and large messages count alike. */
static sg_status link_rates(MPI_Comm comm, int quick, sg_plan_hw *hw) {
  sg_status st = SG_OK;
  const int maxb = quick ? 4 << 20 : 16 << 20;
  char *buf = calloc((size_t)maxb, 1);
  if (!buf) SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int b = 8; b <= maxb; b *= 8) {
    const double t = pingpong(comm, buf, b, b < (1 << 20) ? 15 : 5);
    const double w = 1.0 / (t * t);
    sw += w, sx += w * b, sy += w * t, sxx += w * (double)b * b,
        sxy += w * (double)b * t;
  }
  const double den = sw * sxx - sx * sx;
  double beta = den > 0 ? (sw * sxy - sx * sy) / den : 0.0;
  double alpha = (sy - beta * sx) / sw;
  if (!(beta > 0)) beta = 1e-10;
  if (!(alpha > 0)) alpha = 1e-7;
  hw->alpha_intra = hw->alpha_inter = alpha;
  hw->beta_intra = hw->beta_inter = beta;
fail:
  free(buf);
  return st;
}

/* Hockney's rate r n / (n + n_half) at n channels. */
static double rate_at(double r, double nhalf, double n) {
  return nhalf > 0 ? r * n / (n + nhalf) : r;
}

/* The shared rates: every rank of comm runs each kernel at once (all of a
 * node's ranks: sg-plan-calibrate runs on one node). GEMM and conv keep
 * the single-stream half-performance lengths; their shared rate scales
 * the single-stream curve by the ratio of the two at 32 channels (the
 * three-point fits move more between runs than the rates do). */
static sg_status shared_rates(MPI_Comm comm, int quick, sg_plan_hw *hw) {
  sg_status st = SG_OK;
  sg_plan_hw sh = {0};
  struct sg_plan_rates *r = &hw->shared;
  solo = 0;
  SG_TRY(compute_rates(comm, quick, &sh));
  r->gemm_flops = hw->gemm_flops * rate_at(sh.gemm_flops, sh.gemm_nhalf, 32) /
                  rate_at(hw->gemm_flops, hw->gemm_nhalf, 32);
  r->conv_flops = hw->conv_flops * rate_at(sh.conv_flops, sh.conv_nhalf, 32) /
                  rate_at(hw->conv_flops, hw->conv_nhalf, 32);
  r->fft_flops = sh.fft_flops, r->mem_bw = sh.mem_bw;
  r->attn_flops = sh.attn_flops, r->act_rate = sh.act_rate;
  r->norm_rate = sh.norm_rate, r->lnorm_rate = sh.lnorm_rate;
  r->up_rate = sh.up_rate;
  MPI_Comm_size(comm, &hw->shared_ranks);
fail:
  return st;
}

sg_status sg_plan_calibrate(MPI_Comm comm, unsigned flags, sg_plan_hw *out) {
  sg_status st = SG_OK;
  int size = 1;
  const int quick = (flags & SG_PLAN_CAL_QUICK) != 0;
  use_cpu_time = (flags & SG_PLAN_CAL_CPU_TIME) != 0;
  if (!out) SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_calibrate: NULL");
  memset(out, 0, sizeof *out);
  MPI_Comm_size(comm, &size);
  snprintf(out->name, sizeof out->name, "this machine (calibrated)");
  solo = 1;
  SG_TRY(compute_rates(comm, quick, out));
  if (size > 1) SG_TRY(shared_rates(comm, quick, out));
  if (size > 1)
    SG_TRY(link_rates(comm, quick, out));
  else
    out->alpha_intra = out->alpha_inter = 1e-6,
    out->beta_intra = out->beta_inter = 1e-10;
  const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  out->mem_bytes = pages > 0 && psz > 0 ? (double)pages * psz / size : 0.0;
  out->ranks_per_node = 1 << 20; /* one node: every group is intra */
  out->cores_per_node = cores > 0 ? (int)cores : 0;
fail:
  return st;
}
