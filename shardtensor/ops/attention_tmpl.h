/* shardgrid — typed attention kernels, instantiated twice by attention.c.
 * Before including define R (element type), S (suffix), SG_AGEMM (cblas
 * xgemm), SG_AEXP (e^x of an R, vectorisable for f32) and SG_ALOG. Internal.
 *
 * Tiles: SG_ATTN_BQ queries x SG_ATTN_BK keys. The score tile s lives in
 * the thread's workspace with row stride SG_ATTN_BK; q, k, v, o rows are
 * read and written in place (a tile of rows of a head is contiguous). */
#define SG_ACAT2_(a, b) a##_##b
#define SG_ACAT_(a, b) SG_ACAT2_(a, b)
#define AFN(name) SG_ACAT_(name, S)

/* Max and sum over n elements in SG_ATTN_VL interleaved lanes, combined in
 * lane order: a plain reduction loop stays scalar without reassociation;
 * this vectorises and gives the same bits on every call. */
static inline R AFN(attn_vmax)(const R *p, int64_t n) {
  R acc[SG_ATTN_VL];
  for (int l = 0; l < SG_ATTN_VL; ++l) acc[l] = -INFINITY;
  int64_t j = 0;
  for (; j + SG_ATTN_VL <= n; j += SG_ATTN_VL)
    for (int l = 0; l < SG_ATTN_VL; ++l) acc[l] = p[j + l] > acc[l] ? p[j + l] : acc[l];
  R t = -INFINITY;
  for (; j < n; ++j) t = p[j] > t ? p[j] : t;
  for (int l = 0; l < SG_ATTN_VL; ++l) t = acc[l] > t ? acc[l] : t;
  return t;
}

static inline R AFN(attn_vsum)(const R *p, int64_t n) {
  R acc[SG_ATTN_VL] = {0};
  int64_t j = 0;
  for (; j + SG_ATTN_VL <= n; j += SG_ATTN_VL)
    for (int l = 0; l < SG_ATTN_VL; ++l) acc[l] += p[j + l];
  R t = 0;
  for (; j < n; ++j) t += p[j];
  for (int l = 0; l < SG_ATTN_VL; ++l) t += acc[l];
  return t;
}

static inline R AFN(attn_vdot)(const R *a, const R *b, int64_t n) {
  R acc[SG_ATTN_VL] = {0};
  int64_t j = 0;
  for (; j + SG_ATTN_VL <= n; j += SG_ATTN_VL)
    for (int l = 0; l < SG_ATTN_VL; ++l) acc[l] += a[j + l] * b[j + l];
  R t = 0;
  for (; j < n; ++j) t += a[j] * b[j];
  for (int l = 0; l < SG_ATTN_VL; ++l) t += acc[l];
  return t;
}

/* p[j] = e^{p[j] - m} for j < cnt, 0 for cnt <= j < bk (masked keys are
 * exactly 0, not SG_AEXP's clamped floor). */
static inline void AFN(attn_exp_row)(R *p, int64_t cnt, int64_t bk, R m) {
  for (int64_t j = 0; j < cnt; ++j) p[j] = SG_AEXP(p[j] - m);
  for (int64_t j = cnt; j < bk; ++j) p[j] = 0;
}

/* One row of the online softmax: fold the scores p[0..cnt) into the running
 * max *m and sum *l; p becomes the unnormalised probabilities e^{p - m_new}.
 * Returns the factor the row's output accumulator must be rescaled by. */
static inline R AFN(attn_online_row)(R *p, int64_t cnt, int64_t bk, R *m, R *l) {
  if (cnt == 0) {
    AFN(attn_exp_row)(p, 0, bk, 0);
    return 1;
  }
  R mx = AFN(attn_vmax)(p, cnt);
  R mnew = mx > *m ? mx : *m;
  R alpha = *m == -INFINITY ? 0 : SG_AEXP(*m - mnew);
  AFN(attn_exp_row)(p, cnt, bk, mnew);
  *l = *l * alpha + AFN(attn_vsum)(p, cnt);
  *m = mnew;
  return alpha;
}

/* Forward of one query tile (rows i0 .. i0+bq of one head; q, o point at
 * the tile, k, v at the head). w: BQ*BK scores + BQ maxima + BQ sums. */
static void AFN(attn_fwd_tile)(const sg_attn_geom *g, const R *q, const R *k,
                               const R *v, R *o, R *lse, int64_t i0, int64_t bq,
                               R *w) {
  const int64_t d = g->d, BK = SG_ATTN_BK;
  R *s = w, *m = w + SG_ATTN_BQ * BK, *l = m + SG_ATTN_BQ;
  memset(o, 0, (size_t)(bq * d) * sizeof *o);
  for (int64_t r = 0; r < bq; ++r) {
    m[r] = -INFINITY;
    l[r] = 0;
  }
  const int64_t kend = sg_attn_key_end(g, i0 + bq);
  for (int64_t j0 = 0; j0 < kend; j0 += BK) {
    const int64_t bk = kend - j0 < BK ? kend - j0 : BK;
    SG_AGEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)bq, (int)bk, (int)d,
             (R)g->scale, q, (int)d, k + j0 * d, (int)d, 0, s, (int)BK);
    for (int64_t r = 0; r < bq; ++r) {
      R alpha = AFN(attn_online_row)(s + r * BK, sg_attn_visible(g, i0 + r, j0, bk),
                                     bk, m + r, l + r);
      if (alpha != 1)
        for (int64_t c = 0; c < d; ++c) o[r * d + c] *= alpha;
    }
    SG_AGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)bq, (int)d, (int)bk, 1, s,
             (int)BK, v + j0 * d, (int)d, 1, o, (int)d);
  }
  for (int64_t r = 0; r < bq; ++r) {
    /* no visible key: o stays 0, lse = -inf (an empty part for the merge) */
    R inv = l[r] > 0 ? 1 / l[r] : 0;
    for (int64_t c = 0; c < d; ++c) o[r * d + c] *= inv;
    if (lse) lse[r] = l[r] > 0 ? m[r] + SG_ALOG(l[r]) : -INFINITY;
  }
}

static void AFN(attn_fwd)(const sg_attn_geom *g, const R *q, const R *k, const R *v,
                          R *o, R *lse, void *ws) {
  const int64_t nqb = (g->nq + SG_ATTN_BQ - 1) / SG_ATTN_BQ, ntask = g->bh * nqb;
  const int saved = sg_blas_threads_begin();
#pragma omp parallel num_threads(g->nthreads) if (g->nthreads > 1 && ntask > 1)
  {
    R *w = (R *)sg_attn_thread_ws(g, ws);
    /* dynamic: causal tiles differ in cost; every tile is independent, so
     * the bits do not depend on the schedule. Last tiles (the most keys
     * under a causal mask) first. */
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < ntask; ++t) {
      const int64_t h = t / nqb, i0 = (nqb - 1 - t % nqb) * SG_ATTN_BQ;
      const int64_t bq = g->nq - i0 < SG_ATTN_BQ ? g->nq - i0 : SG_ATTN_BQ;
      AFN(attn_fwd_tile)(g, q + (h * g->nq + i0) * g->d, k + h * g->nk * g->d,
                         v + h * g->nk * g->d, o + (h * g->nq + i0) * g->d,
                         lse ? lse + h * g->nq + i0 : NULL, i0, bq, w);
    }
  }
  sg_blas_threads_end(saved);
}

/* Backward of one (query tile, key tile) pair of one head: the tile's
 * probabilities recomputed from the scores and lse, then
 * dv += p^T dout, ds = p (dout v^T - D), dq += scale ds k,
 * dk += scale ds^T q. Pointers at the tiles; s, dp: BQ*BK scratch. */
static void AFN(attn_bwd_tile)(const sg_attn_geom *g, const R *q, const R *k,
                               const R *v, const R *lse, const R *dout,
                               const R *dd, R *dq, R *dk, R *dv, int64_t i0,
                               int64_t bq, int64_t j0, int64_t bk, R *s, R *dp) {
  const int d = (int)g->d, BK = SG_ATTN_BK;
  const R sc = (R)g->scale;
  SG_AGEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)bq, (int)bk, d, sc, q, d, k, d, 0,
           s, BK);
  for (int64_t r = 0; r < bq; ++r) {
    int64_t cnt = lse[r] == -INFINITY ? 0 : sg_attn_visible(g, i0 + r, j0, bk);
    AFN(attn_exp_row)(s + r * BK, cnt, bk, lse[r]);
  }
  if (dv)
    SG_AGEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)bk, d, (int)bq, 1, s, BK, dout,
             d, 1, dv, d);
  if (!dq && !dk) return;
  SG_AGEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)bq, (int)bk, d, 1, dout, d, v, d,
           0, dp, BK);
  for (int64_t r = 0; r < bq; ++r)
    for (int64_t j = 0; j < bk; ++j) dp[r * BK + j] = s[r * BK + j] * (dp[r * BK + j] - dd[r]);
  if (dq)
    SG_AGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)bq, d, (int)bk, sc, dp, BK, k,
             d, 1, dq, d);
  if (dk)
    SG_AGEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)bk, d, (int)bq, sc, dp, BK, q, d,
             1, dk, d);
}

/* Backward of one head: key tiles outside, query tiles inside (FA2), so
 * dk and dv of a key tile accumulate in place in the outputs. w: 2 BQ*BK
 * scratch + nq for D. */
static void AFN(attn_bwd_head)(const sg_attn_geom *g, const R *q, const R *k, const R *v,
                               const R *o, const R *lse, const R *dout, R *dq, R *dk,
                               R *dv, R *w) {
  const int64_t d = g->d, BK = SG_ATTN_BK, BQ = SG_ATTN_BQ;
  R *s = w, *dp = w + BQ * BK, *dd = dp + BQ * BK;
  for (int64_t i = 0; i < g->nq; ++i) dd[i] = AFN(attn_vdot)(dout + i * d, o + i * d, d);
  if (dq) memset(dq, 0, (size_t)(g->nq * d) * sizeof *dq);
  if (dk) memset(dk, 0, (size_t)(g->nk * d) * sizeof *dk);
  if (dv) memset(dv, 0, (size_t)(g->nk * d) * sizeof *dv);
  for (int64_t j0 = 0; j0 < g->nk; j0 += BK) {
    const int64_t bk = g->nk - j0 < BK ? g->nk - j0 : BK;
    for (int64_t i0 = sg_attn_query_begin(g, j0); i0 < g->nq; i0 += BQ) {
      const int64_t bq = g->nq - i0 < BQ ? g->nq - i0 : BQ;
      AFN(attn_bwd_tile)(g, q + i0 * d, k + j0 * d, v + j0 * d, lse + i0, dout + i0 * d,
                         dd + i0, dq ? dq + i0 * d : NULL, dk ? dk + j0 * d : NULL,
                         dv ? dv + j0 * d : NULL, i0, bq, j0, bk, s, dp);
    }
  }
}

static void AFN(attn_bwd)(const sg_attn_geom *g, const R *q, const R *k, const R *v,
                          const R *o, const R *lse, const R *dout, R *dq, R *dk, R *dv,
                          void *ws) {
  const int saved = sg_blas_threads_begin();
  const int64_t qs = g->nq * g->d, ks = g->nk * g->d;
#pragma omp parallel num_threads(g->nthreads) if (g->nthreads > 1 && g->bh > 1)
  {
    R *w = (R *)sg_attn_thread_ws(g, ws);
#pragma omp for schedule(dynamic, 1)
    for (int64_t h = 0; h < g->bh; ++h)
      AFN(attn_bwd_head)(g, q + h * qs, k + h * ks, v + h * ks, o + h * qs, lse + h * g->nq,
                         dout + h * qs, dq ? dq + h * qs : NULL, dk ? dk + h * ks : NULL,
                         dv ? dv + h * ks : NULL, w);
  }
  sg_blas_threads_end(saved);
}

/* (o, lse) (+)= (ob, lb) over rows of width d. */
static void AFN(attn_merge)(int64_t rows, int64_t d, R *o, R *lse, const R *ob,
                            const R *lb) {
#pragma omp parallel for schedule(static) if (rows * d > 65536)
  for (int64_t i = 0; i < rows; ++i) {
    R la = lse[i], b = lb[i];
    if (b == -INFINITY) continue; /* empty part: nothing to add */
    if (la == -INFINITY) {
      memcpy(o + i * d, ob + i * d, (size_t)d * sizeof *o);
      lse[i] = b;
      continue;
    }
    R m = la > b ? la : b;
    R wa = SG_AMEXP(la - m), wb = SG_AMEXP(b - m), sum = wa + wb;
    wa /= sum;
    wb /= sum;
    for (int64_t c = 0; c < d; ++c) o[i * d + c] = wa * o[i * d + c] + wb * ob[i * d + c];
    lse[i] = m + SG_ALOG(sum);
  }
}

#undef AFN
#undef SG_ACAT_
#undef SG_ACAT2_
