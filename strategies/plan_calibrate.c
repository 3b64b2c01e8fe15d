/* shardgrid — sg-plan --calibrate: this machine's rates, measured with
 * the library's own kernels (the ones a step runs, one thread per rank as
 * sg-train runs them, on working sets the size of bench/plan's
 * activations) twice, alternating round by round: on rank 0 alone (the
 * single-stream rates, a 1-rank run's) and on every rank of comm at once
 * (the shared rates, a busy node's: its ranks share one memory system);
 * and the MPI link fitted to alpha + beta n from ping-pongs between ranks
 * 0 and 1. */
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
/* the sampling: rounds per rate, the least seconds per sample, the
 * ranks (1: no shared rates) */
static int rounds, nranks;
static double sample_s;

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

/* One kernel's seconds per call, single-stream [0] and shared [1] (0:
 * one rank), each the median of the rounds, and their spread (the
 * interquartile range over the median). */
typedef struct kern_time {
  double t[2], spread[2];
} kern_time;

/* MPI_Allreduce (MAX) of v[0..n) that sleeps while it waits: the ranks
 * idle during rank 0's single-stream sample give their cores away (as
 * sg-train's yielding waits do) instead of busy-polling them, so rank 0
 * runs as a 1-rank run does, alone. */
static void max_yielding(MPI_Comm comm, double *v, int n) {
  const struct timespec nap = {0, 100000}; /* 0.1 ms */
  MPI_Request rq;
  int done = 0;
  MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_MAX, comm, &rq);
  for (MPI_Test(&rq, &done, MPI_STATUS_IGNORE); !done;
       MPI_Test(&rq, &done, MPI_STATUS_IGNORE))
    nanosleep(&nap, NULL);
}

/* One sample: `reps` calls of fn in a row on the ranks that run (rank 0
 * alone, or all), started together after a barrier; seconds per call of
 * the slowest rank. */
static sg_status sample(MPI_Comm comm, int all, int reps, bench_fn fn,
                        void *ctx, double *t) {
  sg_status st = SG_OK;
  int rank;
  MPI_Comm_rank(comm, &rank);
  const int run = all || rank == 0; /* an idle rank's time is 0 */
  *t = 0.0;
  MPI_Barrier(comm);
  const double t0 = now();
  for (int i = 0; run && i < reps; ++i) SG_TRY(fn(ctx));
  *t = run ? (now() - t0) / reps : 0.0;
fail:;
  /* the slowest rank's time, and a failure agreed over the ranks */
  double v[2] = {*t, st != SG_OK};
  max_yielding(comm, v, 2);
  *t = v[0];
  if (st == SG_OK && v[1] > 0)
    st = sg_error_set(SG_ERR_PEER, __FILE__, __LINE__,
                      "calibrate: a kernel failed on another rank");
  return st;
}

/* The median of t[0..n) (sorted in place) and the spread around it. */
static double median_spread(double *t, int n, double *spread) {
  qsort(t, (size_t)n, sizeof t[0], cmp_double);
  const double med = t[n / 2], q1 = t[(n - 1) / 4], q3 = t[n - 1 - (n - 1) / 4];
  *spread = med > 0 ? (q3 - q1) / med : 0.0;
  return med;
}

/* fn timed on rank 0 alone and on every rank at once, the two in
 * alternating order round by round (so that both see the same minutes
 * of the machine), each sample long enough to leave the timer's and the
 * scheduler's noise behind (>= sample_s; the call count from a warm
 * call, the largest over the ranks so that every rank runs as long);
 * the median of the rounds, the typical time, not the luckiest (on a
 * shared machine the best of a few runs is the one no other job
 * disturbed, which a training run is not). */
static sg_status time_kernel(MPI_Comm comm, bench_fn fn, void *ctx,
                             kern_time *k) {
  sg_status st = SG_OK;
  double t[2][16], t1;
  const int n = rounds > 16 ? 16 : rounds, modes = nranks > 1 ? 2 : 1;
  memset(k, 0, sizeof *k);
  SG_TRY(sample(comm, 1, 1, fn, ctx, &t1)); /* plans, caches, page faults */
  SG_TRY(sample(comm, 1, 1, fn, ctx, &t1));
  double reps = t1 > 0 ? ceil(sample_s / t1) : 1.0;
  MPI_Allreduce(MPI_IN_PLACE, &reps, 1, MPI_DOUBLE, MPI_MAX, comm);
  const int r = reps < 1 ? 1 : reps > 1e6 ? 1000000 : (int)reps;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < modes; ++j) {
      const int shared = (i + j) % modes; /* which goes first alternates */
      SG_TRY(sample(comm, shared, r, fn, ctx, &t[shared][i]));
    }
  for (int j = 0; j < modes; ++j)
    k->t[j] = median_spread(t[j], n, &k->spread[j]);
fail:
  return st;
}

/* hw's rate `key` (and its shared value and spreads) = work / time. */
#define PUT_RATE(hw, key, work, k)                            \
  ((hw)->key = (work) / (k).t[0],                             \
   (hw)->shared.key = (k).t[1] > 0 ? (work) / (k).t[1] : 0.0, \
   (hw)->spread.key = (k).spread[0], (hw)->shared_spread.key = (k).spread[1])

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

/* The times of the 1x1 linear and the 3x3 conv (same padding) at c -> c
 * channels on n x g x g points, forward + backward (6 n c c g^2 and
 * 6 n c c 9 g^2 flops). */
static sg_status mm_times(MPI_Comm comm, int64_t n, int64_t g, int64_t c,
                          kern_time *gemm, kern_time *conv) {
  sg_status st = SG_OK;
  cal_buf b = {0};
  b.n = n, b.c = c, b.s = g * g;
  b.x = falloc(n * c * (g + 2) * (g + 2)), b.y = falloc(n * c * g * g);
  b.dx = falloc(n * c * (g + 2) * (g + 2)), b.w = falloc(c * c * 9);
  b.dw = falloc(c * c * 9);
  if (!b.x || !b.y || !b.dx || !b.w || !b.dw)
    SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  SG_TRY(time_kernel(comm, run_linear, &b, gemm));
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
  SG_TRY(time_kernel(comm, run_conv, &b, conv));
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
static sg_status attn_rate(MPI_Comm comm, sg_plan_hw *hw) {
  sg_status st = SG_OK;
  cal_buf b = {0};
  kern_time k;
  b.ad = (sg_attn_desc){
      .batch = 8, .heads = 4, .nq = 256, .nk = 256, .head_dim = 16};
  const int64_t sz = 8 * 4 * 256 * 16;
  b.x = falloc(3 * sz), b.y = falloc(sz + 8 * 4 * 256), b.dx = falloc(3 * sz);
  b.ws = malloc(sg_attention_workspace_bytes(&b.ad, SG_DTYPE_F32) + 64);
  if (!b.x || !b.y || !b.dx || !b.ws)
    SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  SG_TRY(time_kernel(comm, run_attn, &b, &k));
  PUT_RATE(hw, attn_flops, 14.0 * 8 * 4 * 256.0 * 256.0 * 16, k);
fail:
  cal_free(&b);
  return st;
}

/* The time of fn over `elems` elements (x, y, dx of `elems` floats plus
 * margins; w, dw of 4096; ws for a norm's statistics). */
static sg_status elem_time(MPI_Comm comm, bench_fn fn, cal_buf *b, double elems,
                           kern_time *k) {
  sg_status st = SG_OK;
  const int64_t n = (int64_t)elems;
  b->x = falloc(2 * n), b->y = falloc(2 * n), b->dx = falloc(2 * n);
  b->w = falloc(4096), b->dw = falloc(4096);
  b->ws = malloc((size_t)n * (sizeof(sg_moments) + 2 * sizeof(double)) / 16 +
                 4096);
  if (!b->x || !b->y || !b->dx || !b->w || !b->dw || !b->ws)
    SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  SG_TRY(time_kernel(comm, fn, b, k));
fail:
  cal_free(b);
  return st;
}

/* The element-wise kernels that are compute-bound at activation sizes
 * (1 Mi elements, 4 MiB, the size of an activation in bench/plan):
 * GELU, GroupNorm (32 channels, 4 groups), LayerNorm over 64 channels
 * of 256 tokens (the ViT's) and the linear 2x up-sample, forward +
 * backward each; elements per second. */
static sg_status elem_rates(MPI_Comm comm, sg_plan_hw *hw) {
  sg_status st = SG_OK;
  const double e = 1 << 20;
  cal_buf b = {0};
  kern_time k;
  b.n = 1 << 20;
  SG_TRY(elem_time(comm, run_act, &b, e, &k));
  PUT_RATE(hw, act_rate, e, k);
  b.nd = (sg_norm_desc){.kind = SG_NORM_GROUP,
                        .batch = 8,
                        .channels = 32,
                        .spatial = 4096,
                        .groups = 4,
                        .eps = 1e-5};
  b.c = 32;
  SG_TRY(elem_time(comm, run_norm, &b, e, &k));
  PUT_RATE(hw, norm_rate, e, k);
  b.nd = (sg_norm_desc){
      .kind = SG_NORM_LAYER, .batch = 64, .channels = 64, .spatial = 256};
  b.nd.eps = 1e-5, b.c = 64 * 256;
  SG_TRY(elem_time(comm, run_norm, &b, e, &k));
  PUT_RATE(hw, lnorm_rate, e, k);
  b.c = 256, b.s = 32; /* 256 planes 34 x 34 (margins) -> 64 x 64 */
  SG_TRY(elem_time(comm, run_up, &b, e, &k));
  PUT_RATE(hw, up_rate, e, k);
fail:
  return st;
}

/* GEMM (the 1x1 linear) and 3x3 conv at 16, 32 and 64 channels on 8 x
 * 64^2 points (an activation of bench/plan's: 4 MiB at 32 channels,
 * beyond a core's L2), fitted to Hockney's curve; the shared rates keep
 * the single-stream half-performance lengths and scale the curve by the
 * shared / single-stream ratio measured at 32 channels (the three-point
 * fits move more between runs than the rates do). */
static sg_status mm_rates(MPI_Comm comm, sg_plan_hw *hw) {
  sg_status st = SG_OK;
  const int64_t n = 8, g = 64;
  const double ch[3] = {16, 32, 64};
  double gr[3], cr[3];
  kern_time kg[3], kc[3];
  for (int i = 0; i < 3; ++i) {
    SG_TRY(mm_times(comm, n, g, (int64_t)ch[i], &kg[i], &kc[i]));
    gr[i] = 6.0 * n * ch[i] * ch[i] * g * g / kg[i].t[0];
    cr[i] = 9.0 * gr[i] * kg[i].t[0] / kc[i].t[0];
  }
  double rg, rc; /* the fitted r_inf as the work of one call at 32 */
  fit_nhalf(3, ch, gr, &rg, &hw->gemm_nhalf);
  fit_nhalf(3, ch, cr, &rc, &hw->conv_nhalf);
  rg *= kg[1].t[0], rc *= kc[1].t[0];
  PUT_RATE(hw, gemm_flops, rg, kg[1]);
  PUT_RATE(hw, conv_flops, rc, kc[1]);
fail:
  return st;
}

/* The 2-D r2c + c2r FFT of 256 planes of 64^2 (an activation's 4 MiB,
 * so that the transforms leave the core's L2 as the runs' do, and ranks
 * sharing the node's memory system see each other), flops counted as
 * 2.5 N log2 N per transform; and the memory bandwidth of y = x + z
 * (3 x 16 MiB, quick, or 3 x 64 MiB: beyond the caches). */
static sg_status fft_mem_rates(MPI_Comm comm, int quick, sg_plan_hw *hw) {
  sg_status st = SG_OK;
  cal_buf b = {0};
  kern_time k;
  const int64_t g = 64, planes = 256;
  sg_fft_desc d;
  sg_fft_desc_init(&d);
  d.dtype = SG_DTYPE_F32, d.ndim = 2, d.shape[0] = g, d.shape[1] = g;
  d.split[0] = d.split[1] = -1, d.batch = planes, d.nthreads = 1;
  SG_TRY(sg_fft_plan_create_comms(MPI_COMM_SELF, 0, NULL, &d, &b.fft));
  b.x = falloc(planes * g * g), b.dx = falloc(planes * g * g);
  b.y = falloc(2 * planes * g * (g / 2 + 1));
  if (!b.x || !b.dx || !b.y) SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  SG_TRY(time_kernel(comm, run_fft, &b, &k));
  PUT_RATE(hw, fft_flops, 2.0 * planes * 2.5 * g * g * log2((double)g * g), k);
  cal_free(&b);
  b.n = (quick ? 4 : 16) << 20;
  b.x = falloc(b.n), b.dx = falloc(b.n), b.y = falloc(b.n);
  if (!b.x || !b.dx || !b.y) SG_RAISE(SG_ERR_ALLOC, "calibrate: out of memory");
  SG_TRY(time_kernel(comm, run_stream, &b, &k));
  PUT_RATE(hw, mem_bw, 12.0 * (double)b.n, k);
fail:
  cal_free(&b);
  return st;
}

/* Every compute rate, single-stream and (more than one rank) shared. */
static sg_status compute_rates(MPI_Comm comm, int quick, sg_plan_hw *hw) {
  sg_status st = SG_OK;
  SG_TRY(mm_rates(comm, hw));
  SG_TRY(attn_rate(comm, hw));
  SG_TRY(elem_rates(comm, hw));
  SG_TRY(fft_mem_rates(comm, quick, hw));
  if (nranks > 1) MPI_Comm_size(comm, &hw->shared_ranks);
fail:
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

sg_status sg_plan_calibrate(MPI_Comm comm, unsigned flags, sg_plan_hw *out) {
  sg_status st = SG_OK;
  int size = 1;
  const int quick = (flags & SG_PLAN_CAL_QUICK) != 0;
  use_cpu_time = (flags & SG_PLAN_CAL_CPU_TIME) != 0;
  if (!out) SG_RAISE(SG_ERR_INVALID_ARG, "sg_plan_calibrate: NULL");
  memset(out, 0, sizeof *out);
  MPI_Comm_size(comm, &size);
  snprintf(out->name, sizeof out->name, "this machine (calibrated)");
  nranks = size, rounds = quick ? 5 : 7, sample_s = quick ? 0.05 : 0.1;
  const char *env = getenv("SG_PLAN_CAL_SAMPLE_S");
  if (env && atof(env) > 0) sample_s = atof(env);
  out->cal_rounds = rounds, out->cal_sample_s = sample_s;
  SG_TRY(compute_rates(comm, quick, out));
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
