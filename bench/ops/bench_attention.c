/* bench/ops: fused attention (sg_attention_forward/backward, f32) against
 * the naive materialised version (the Nq x Nk score matrix of a head in
 * memory, cblas_sgemm for its GEMMs with OpenBLAS's threads, the same
 * vectorised exp) and the machine's SGEMM rate measured in the same run: a
 * cblas_sgemm with the forward's FLOP count (M = N = tokens,
 * K = 2 B H d), timed between the repetitions so every number sees the
 * same machine load.
 *
 *   OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 bench_attention [--reps R]
 *       [--n N[,N...]] [--batch B] [--heads H] [--dim d] [--causal]
 *       [--no-naive] [--bf16]
 *
 * FLOPs (FlashAttention-2's convention): forward 4 B H N^2 d (two GEMMs),
 * backward 10 B H N^2 d (five, with the recomputed scores); causal counts
 * half of each. Times are medians of R runs. One JSON line per case.
 * --bf16: the fused kernel on bf16 q, k, v, o, dout and gradients (lse f32;
 * the same inputs rounded), the naive and SGEMM columns stay f32.
 * Each repetition pauses 0.3 s after its SGEMM (sgemm_same_flops below);
 * SG_BENCH_NO_PARK=1 leaves the pause out (the bench as it was before). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

#include "sg_ops.h"
#include "sg_ops_inl.h"


typedef struct bench_case {
  sg_attn_desc d;
  int64_t nqe, nke;
  float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
  float *p,
      *dp; /* naive: one head's Nq x Nk probabilities and their gradient */
  /* --bf16: q, k, v, o, dout, dq, dk, dv in bf16 */
  sg_bf16 *b[8];
} bench_case;

static int use_bf16;

/* The fused kernel's operands in c's dtype: the f32 arrays or their bf16
 * copies (made here on first use). */
static void fused_ptrs(bench_case *c, void *ptr[8]) {
  float *f[8] = {c->q, c->k, c->v, c->o, c->dout, c->dq, c->dk, c->dv};
  const int64_t n[8] = {c->nqe, c->nke, c->nke, c->nqe,
                        c->nqe, c->nqe, c->nke, c->nke};
  for (int i = 0; i < 8; ++i) {
    ptr[i] = f[i];
    if (!use_bf16) continue;
    if (!c->b[i]) {
      c->b[i] = malloc((size_t)n[i] * sizeof(sg_bf16));
      for (int64_t e = 0; e < n[i]; ++e) c->b[i][e] = sg_bf16_from_f32(f[i][e]);
    }
    ptr[i] = c->b[i];
  }
}

/* Naive scores of head h: p = softmax(scale q k^T) (row-wise, causal
 * rows masked), lse kept. */
static void naive_probs(const bench_case *c, int64_t h, float scale) {
  const sg_attn_desc *d = &c->d;
  const int n = (int)d->nq, m = (int)d->nk, hd = (int)d->head_dim;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, hd, scale,
              c->q + h * n * hd, hd, c->k + h * m * hd, hd, 0, c->p, m);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; ++i) {
    float *row = c->p + (int64_t)i * m, mx = -INFINITY, sum = 0;
    int cnt = d->causal ? (i + 1 < m ? i + 1 : m) : m;
    for (int j = 0; j < cnt; ++j) mx = row[j] > mx ? row[j] : mx;
    for (int j = 0; j < cnt; ++j) row[j] = sg_expf(row[j] - mx);
    for (int j = cnt; j < m; ++j) row[j] = 0;
    for (int j = 0; j < cnt; ++j) sum += row[j];
    for (int j = 0; j < cnt; ++j) row[j] /= sum;
    c->lse[h * n + i] = mx + logf(sum);
  }
}

static void naive_forward(const bench_case *c, float scale) {
  const int n = (int)c->d.nq, m = (int)c->d.nk, hd = (int)c->d.head_dim;
  for (int64_t h = 0; h < c->d.batch * c->d.heads; ++h) {
    naive_probs(c, h, scale);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, m, 1, c->p, m,
                c->v + h * m * hd, hd, 0, c->o + h * n * hd, hd);
  }
}

/* The same five GEMMs as the fused backward, on whole heads (the
 * probabilities recomputed, as the fused one does). */
static void naive_backward(const bench_case *c, float scale) {
  const int n = (int)c->d.nq, m = (int)c->d.nk, hd = (int)c->d.head_dim;
  for (int64_t h = 0; h < c->d.batch * c->d.heads; ++h) {
    const float *q = c->q + h * n * hd, *k = c->k + h * m * hd,
                *v = c->v + h * m * hd;
    const float *o = c->o + h * n * hd, *g = c->dout + h * n * hd;
    naive_probs(c, h, scale);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, hd, n, 1, c->p, m,
                g, hd, 0, c->dv + h * m * hd, hd);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, hd, 1, g, hd, v,
                hd, 0, c->dp, m);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; ++i) {
      float dd = 0;
      for (int t = 0; t < hd; ++t)
        dd += g[(int64_t)i * hd + t] * o[(int64_t)i * hd + t];
      float *pr = c->p + (int64_t)i * m, *dr = c->dp + (int64_t)i * m;
      for (int j = 0; j < m; ++j) dr[j] = pr[j] * (dr[j] - dd);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, m, scale,
                c->dp, m, k, hd, 0, c->dq + h * n * hd, hd);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, hd, n, scale, c->dp,
                m, q, hd, 0, c->dk + h * m * hd, hd);
  }
}

/* A cblas_sgemm of `flops` FLOPs: M = N = tokens, K = flops / (2 N^2).
 * Then a pause of 0.3 s (a sleep: no CPU time, outside every timed span)
 * before the fused forward is timed: OpenBLAS's pthread workers spin
 * (sched_yield) for OPENBLAS_THREAD_TIMEOUT = 2^28 cycles (~0.1 s) after
 * a threaded call before they sleep, and without the pause they spun
 * through the timed forward, beside its two OpenMP threads on two cores:
 * the forward at N = 1024 with 2 threads (~45 ms) measured 0.67-0.71x
 * SDPA while its backward, which follows no BLAS call, measured 1.0-1.7x
 * (bench/RESULTS.md, issue 17 §4). */
static float *gem_a, *gem_b, *gem_c;
static double sgemm_same_flops(int64_t n, double flops) {
  int64_t kk = (int64_t)(flops / (2.0 * (double)n * (double)n) + 0.5);
  if (kk < 1) kk = 1;
  double t0 = now();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n,
              (int)kk, 1, gem_a, (int)kk, gem_b, (int)n, 0, gem_c, (int)n);
  const double gf = 2.0 * (double)n * (double)n * (double)kk / (now() - t0) /
                    1e9;
  if (!getenv("SG_BENCH_NO_PARK")) {
    const struct timespec park = {0, 300000000};
    nanosleep(&park, NULL);
  }
  return gf;
}

static int run_case(sg_attn_desc d, int reps, int naive) {
  bench_case c = {.d = d};
  const int64_t bh = d.batch * d.heads;
  c.nqe = bh * d.nq * d.head_dim;
  c.nke = bh * d.nk * d.head_dim;
  c.q = frand(c.nqe);
  c.k = frand(c.nke);
  c.v = frand(c.nke);
  c.dout = frand(c.nqe);
  c.o = frand(c.nqe);
  c.dq = frand(c.nqe);
  c.dk = frand(c.nke);
  c.dv = frand(c.nke);
  c.lse = frand(bh * d.nq);
  const double frac = d.causal ? 0.5 : 1.0;
  const double ffwd = frac * 4.0 * (double)bh * (double)d.nq * (double)d.nk *
                      (double)d.head_dim;
  const double fbwd = 2.5 * ffwd;
  const float scale = (float)(1 / sqrt((double)d.head_dim));
  int64_t kk = (int64_t)(ffwd / (2.0 * (double)d.nq * (double)d.nq) + 0.5);
  gem_a = frand(d.nq * kk);
  gem_b = frand(kk * d.nq);
  gem_c = frand(d.nq * d.nq);
  if (naive) {
    c.p = frand(d.nq * d.nk);
    c.dp = frand(d.nq * d.nk);
  }
  size_t wsb = sg_attention_workspace_bytes(&d, SG_DTYPE_F32);
  void *ws = aligned_alloc(64, (wsb + 63) / 64 * 64);
  double *t[5];
  for (int i = 0; i < 5; ++i) t[i] = calloc((size_t)reps, sizeof(double));
  sg_status st = SG_OK;
  const sg_dtype dt = use_bf16 ? SG_DTYPE_BF16 : SG_DTYPE_F32;
  void *f[8]; /* q, k, v, o, dout, dq, dk, dv */
  fused_ptrs(&c, f);
  for (int r = -1; r < reps && st == SG_OK; ++r) { /* r = -1: warm-up */
    double pk = sgemm_same_flops(d.nq, ffwd);
    double t0 = now();
    st |= sg_attention_forward(&d, dt, f[0], f[1], f[2], f[3], c.lse, ws);
    double t1 = now();
    st |= sg_attention_backward(&d, dt, f[0], f[1], f[2], f[3], c.lse, f[4],
                                f[5], f[6], f[7], ws);
    double t2 = now(), t3 = t2, t4 = t2;
    if (naive) {
      naive_forward(&c, scale);
      t3 = now();
      naive_backward(&c, scale);
      t4 = now();
    }
    if (r < 0) continue;
    t[0][r] = pk;
    t[1][r] = t1 - t0;
    t[2][r] = t2 - t1;
    t[3][r] = t3 - t2;
    t[4][r] = t4 - t3;
  }
  if (st != SG_OK) {
    fprintf(stderr, "bench_attention: %s\n", sg_last_error());
  } else {
    double pk = median(t[0], reps), tf = median(t[1], reps),
           tb = median(t[2], reps);
    double nf = median(t[3], reps), nb = median(t[4], reps);
    printf(
        "{\"bench\":\"attention\",\"dtype\":\"%s\",\"batch\":%lld,\"heads\":%lld,"
        "\"tokens\":%lld,\"head_dim\":%lld,\"causal\":%d,\"threads\":%d,"
        "\"fwd_ms\":%.1f,\"bwd_ms\":%.1f,\"fwd_gflops\":%.1f,\"bwd_gflops\":%.1f,"
        "\"naive_fwd_ms\":%.1f,\"naive_bwd_ms\":%.1f,\"naive_fwd_gflops\":%.1f,"
        "\"naive_bwd_gflops\":%.1f,\"sgemm_gflops\":%.1f,\"fwd_of_sgemm\":%.2f,"
        "\"bwd_of_sgemm\":%.2f,\"workspace_kib\":%.1f,\"naive_scores_mib\":%.1f}\n",
        use_bf16 ? "bf16" : "f32", (long long)d.batch, (long long)d.heads,
        (long long)d.nq, (long long)d.head_dim, d.causal, omp_get_max_threads(),
        1e3 * tf, 1e3 * tb, ffwd / tf / 1e9, fbwd / tb / 1e9, 1e3 * nf,
        1e3 * nb, naive ? ffwd / nf / 1e9 : 0, naive ? fbwd / nb / 1e9 : 0, pk,
        ffwd / tf / 1e9 / pk, fbwd / tb / 1e9 / pk, (double)wsb / 1024,
        naive ? 2.0 * (double)(d.nq * d.nk) * 4 / 1048576 : 0);
    fflush(stdout);
  }
  free(c.q);
  free(c.k);
  free(c.v);
  free(c.dout);
  free(c.o);
  free(c.dq);
  free(c.dk);
  free(c.dv);
  free(c.lse);
  free(c.p);
  free(c.dp);
  free(ws);
  free(gem_a);
  free(gem_b);
  free(gem_c);
  for (int i = 0; i < 8; ++i) free(c.b[i]);
  for (int i = 0; i < 5; ++i) free(t[i]);
  return st != SG_OK;
}

int main(int argc, char **argv) {
  int reps = 3, naive = 1, causal = 0;
  int64_t batch = 4, heads = 8, dim = 64;
  const char *ns = "1024,4096";
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--n") && i + 1 < argc)
      ns = argv[++i];
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--heads") && i + 1 < argc)
      heads = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--dim") && i + 1 < argc)
      dim = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--causal"))
      causal = 1;
    else if (!strcmp(argv[i], "--no-naive"))
      naive = 0;
    else if (!strcmp(argv[i], "--bf16"))
      use_bf16 = 1;
    else {
      fprintf(stderr, "bench_attention: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  int rc = 0;
  for (const char *p = ns; *p;) {
    char *end;
    long long n = strtoll(p, &end, 10);
    if (end == p || n < 1) {
      fprintf(stderr, "bench_attention: bad --n '%s'\n", ns);
      return 2;
    }
    sg_attn_desc d = {.batch = batch,
                      .heads = heads,
                      .nq = n,
                      .nk = n,
                      .head_dim = dim,
                      .causal = causal};
    rc |= run_case(d, reps, naive);
    p = *end == ',' ? end + 1 : end;
  }
  return rc;
}
