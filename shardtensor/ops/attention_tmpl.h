/* shardgrid — typed attention kernels, instantiated twice by attention.c.
 * Before including define R (element type), S (suffix), SG_AEXP (e^x of an
 * R, vectorisable for f32), SG_AMEXP (libm's e^x) and SG_ALOG, and the
 * tile GEMM attn_gemm_<S>; optionally SG_ASOFTMAX, a kernel replacing
 * attn_fwd_softmax_<S> (same arguments, same result), and SG_ABASE2 if
 * that kernel works in base 2 (scores times log2 e, m their max, p =
 * 2^{s - m}; then SG_ABWDPROBS too, the backward's probabilities from
 * base-2 scores), and SG_ATRANSPOSE, a kernel replacing
 * attn_transpose_<S>; SG_APV(bq, d, bk, st, v, o, al), the forward's
 * o = al o + p v in one kernel (the rescale folded into the GEMM's
 * accumulator load); SG_ANO_MERGE leaves attn_merge_<S> out. Internal.
 *
 * Scores are kept KEY-major: a tile st[j * BQ + i] holds key j's score for
 * query i, so the per-query softmax statistics (running max, sum, lse, D)
 * are vectors over the query lanes and every row pass vectorises, and the
 * tile GEMMs read q transposed (copied once per query tile in the forward,
 * once per head in the backward) and k, v, o, dout in place. */
#define SG_ACAT2_(a, b) a##_##b
#define SG_ACAT_(a, b) SG_ACAT2_(a, b)
#define AFN(name) SG_ACAT_(name, S)

#ifdef SG_ATRANSPOSE
#define AT_TRANSPOSE SG_ATRANSPOSE
#else
#define AT_TRANSPOSE AFN(attn_transpose)
/* xt[c * ldt + r] = scale * x[r * d + c] for r < rows, c < d. */
static void AFN(attn_transpose)(const R *x, int64_t rows, int64_t d, R scale,
                                R *xt, int64_t ldt) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16)
    for (int64_t c = 0; c < d; ++c)
      for (int64_t r = r0; r < rows && r < r0 + 16; ++r)
        xt[c * ldt + r] = scale * x[r * d + c];
}
#endif

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

#ifndef SG_ASOFTMAX
/* The online softmax over one score tile st (bk keys x bq queries): m, l
 * (per query: running max and sum) updated, st replaced by the
 * unnormalised probabilities e^{st - m_new} (exactly 0 where masked), and
 * al[i] the factor query i's output accumulator must be rescaled by. Key
 * j is visible to query i where i >= t_j = j0 + j - offset - i0 (causal). */
static void AFN(attn_fwd_softmax)(const sg_attn_geom *g, R *st, int64_t bk,
                                  int64_t bq, int64_t i0, int64_t j0, R *m,
                                  R *l, R *al) {
  const int64_t BQ = SG_ATTN_BQ;
  /* the whole tile visible: query i0 (the most restricted) sees the last key */
  const int full = !g->causal || j0 + bk - 1 <= i0 + g->offset;
  const int64_t t0 = j0 - g->offset - i0;
  for (int64_t i = 0; i < bq; ++i) al[i] = -INFINITY; /* the tile's max first */
  for (int64_t j = 0; j < bk; ++j) {
    const R *row = st + j * BQ;
    const int64_t t = full ? 0 : t0 + j;
    for (int64_t i = 0; i < bq; ++i) {
      R x = i >= t ? row[i] : -INFINITY;
      al[i] = x > al[i] ? x : al[i];
    }
  }
  for (int64_t i = 0; i < bq; ++i) {
    R mnew = al[i] > m[i] ? al[i] : m[i];
    al[i] = m[i] == -INFINITY ? 0 : SG_AEXP(m[i] - mnew);
    l[i] *= al[i];
    m[i] = mnew;
  }
  for (int64_t j = 0; j < bk; ++j) {
    R *row = st + j * BQ;
    const int64_t t = full ? 0 : t0 + j;
    for (int64_t i = 0; i < bq; ++i) {
      R p = SG_AEXP(row[i] - m[i]);
      p = i >= t ? p : 0;
      row[i] = p;
      l[i] += p;
    }
  }
}

#endif

/* Forward of one query tile (rows i0 .. i0+bq of one head; q, o point at
 * the tile, k, v at the head). w: qt (d x BQ), st (BK x BQ), m, l, al. */
static void AFN(attn_fwd_tile)(const sg_attn_geom *g, const R *q, const R *k,
                               const R *v, R *o, R *lse, int64_t i0, int64_t bq,
                               R *w) {
  const int64_t d = g->d, BQ = SG_ATTN_BQ, BK = SG_ATTN_BK;
  R *qt = w, *st = qt + d * BQ, *m = st + BK * BQ, *l = m + BQ, *al = l + BQ;
#ifdef SG_ABASE2 /* scores in base 2: log2(e) folded into q's scale */
  AT_TRANSPOSE(q, bq, d, (R)(g->scale * 1.4426950408889634), qt, BQ);
#else
  AT_TRANSPOSE(q, bq, d, (R)g->scale, qt, BQ);
#endif
  memset(o, 0, (size_t)(bq * d) * sizeof *o);
  for (int64_t i = 0; i < bq; ++i) {
    m[i] = -INFINITY;
    l[i] = 0;
  }
  const int64_t kend = sg_attn_key_end(g, i0 + bq);
  for (int64_t j0 = 0; j0 < kend; j0 += BK) {
    const int64_t bk = kend - j0 < BK ? kend - j0 : BK;
    AFN(attn_gemm)
    (bk, bq, d, k + j0 * d, d, 1, qt, BQ, st, BQ, 0); /* st = k q^T */
#ifdef SG_ASOFTMAX
    SG_ASOFTMAX(g, st, bk, bq, i0, j0, m, l, al);
#else
    AFN(attn_fwd_softmax)(g, st, bk, bq, i0, j0, m, l, al);
#endif
#ifdef SG_APV /* o = al o + p v in one pass */
    SG_APV(bq, d, bk, st, v + j0 * d, o, al);
#else
    for (int64_t i = 0; i < bq; ++i) {
      const R a = al[i]; /* a local: o may alias al for the compiler */
      if (a != 1)        /* the row's max unchanged: nothing to rescale */
        for (int64_t c = 0; c < d; ++c) o[i * d + c] *= a;
    }
    AFN(attn_gemm)(bq, d, bk, st, 1, BQ, v + j0 * d, d, o, d, 1); /* o += p v */
#endif
  }
  for (int64_t i = 0; i < bq; ++i) {
    /* no visible key: o stays 0, lse = -inf (an empty part for the merge) */
    R inv = l[i] > 0 ? 1 / l[i] : 0;
    for (int64_t c = 0; c < d; ++c) o[i * d + c] *= inv;
#ifdef SG_ABASE2
    const R mi = m[i] * (R)0.69314718055994531; /* back to base e */
#else
    const R mi = m[i];
#endif
    if (lse) lse[i] = l[i] > 0 ? mi + SG_ALOG(l[i]) : -INFINITY;
  }
}

static void AFN(attn_fwd)(const sg_attn_geom *g, const R *q, const R *k,
                          const R *v, R *o, R *lse, void *ws) {
  const int64_t nqb = (g->nq + SG_ATTN_BQ - 1) / SG_ATTN_BQ,
                ntask = g->bh * nqb;
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
      AFN(attn_fwd_tile)
      (g, q + (h * g->nq + i0) * g->d, k + h * g->nk * g->d,
       v + h * g->nk * g->d, o + (h * g->nq + i0) * g->d,
       lse ? lse + h * g->nq + i0 : NULL, i0, bq, w);
    }
  }
  sg_blas_threads_end(saved);
}

/* The backward's per-tile arrays of one head: qt = scale q^T and dot =
 * dout^T, each in blocks of d x BQ per query tile (query tile i0's block
 * at i0 * d, row stride BQ; nqr = nq rounded up to BQ columns in all),
 * dd = D (nq), and two BK x BQ tiles. Blocked rather than d x nq: rows
 * nq apart (4 KiB at nq = 1024 in f32) alias in L1 and the score GEMMs
 * read d of them per tile. */
typedef struct AFN(attn_bwd_ws) {
  R *qt, *dot, *dd, *st, *dpt;
} AFN(attn_bwd_ws);

/* Backward of one (key tile, query tile) pair of one head, key-major:
 * pt = e^{st - lse} (the forward's probabilities, recomputed),
 * dv += p^T dout, dst = pt (v dout^T - D) scale, dq += ds k, dk += ds^T q.
 * q, dout, dq, lse at the query tile; k, v, dk, dv at the key tile. */
static void AFN(attn_bwd_tile)(const sg_attn_geom *g,
                               const AFN(attn_bwd_ws) * w, const R *q,
                               const R *k, const R *v, const R *lse,
                               const R *dout, R *dq, R *dk, R *dv, int64_t i0,
                               int64_t bq, int64_t j0, int64_t bk) {
  const int64_t d = g->d, BQ = SG_ATTN_BQ;
  const int full = !g->causal || j0 + bk - 1 <= i0 + g->offset;
  const int64_t t0 = j0 - g->offset - i0;
  R *st = w->st, *dpt = w->dpt;
  const R *dd = w->dd + i0, sc = (R)g->scale;
  AFN(attn_gemm)(bk, bq, d, k, d, 1, w->qt + i0 * d, BQ, st, BQ, 0);
#ifdef SG_ABASE2
  SG_ABWDPROBS(st, bk, bq, t0, full, lse);
#else
  for (int64_t j = 0; j < bk; ++j) {
    R *row = st + j * BQ;
    const int64_t t = full ? 0 : t0 + j;
    for (int64_t i = 0; i < bq; ++i) {
      R p = SG_AEXP(row[i] - lse[i]);
      row[i] = i >= t && lse[i] != -INFINITY ? p : 0; /* a row with no key: 0 */
    }
  }
#endif
  if (dv) AFN(attn_gemm)(bk, d, bq, st, BQ, 1, dout, d, dv, d, 1);
  if (!dq && !dk) return;
  AFN(attn_gemm)(bk, bq, d, v, d, 1, w->dot + i0 * d, BQ, dpt, BQ, 0);
  for (int64_t j = 0; j < bk; ++j)
    for (int64_t i = 0; i < bq; ++i)
      dpt[j * BQ + i] = st[j * BQ + i] * (dpt[j * BQ + i] - dd[i]) * sc;
  if (dq) AFN(attn_gemm)(bq, d, bk, dpt, 1, BQ, k, d, dq, d, 1);
  if (dk) AFN(attn_gemm)(bk, d, bq, dpt, BQ, 1, q, d, dk, d, 1);
}

/* Backward of one head: key tiles outside, query tiles inside (FA2), so
 * dk and dv of a key tile accumulate in place in the outputs. */
static void AFN(attn_bwd_head)(const sg_attn_geom *g, const R *q, const R *k,
                               const R *v, const R *o, const R *lse,
                               const R *dout, R *dq, R *dk, R *dv, R *ws) {
  const int64_t d = g->d, nq = g->nq, BK = SG_ATTN_BK, BQ = SG_ATTN_BQ;
  const int64_t nqr = (nq + BQ - 1) / BQ * BQ;
  AFN(attn_bwd_ws)
  w = {ws, ws + d * nqr, ws + 2 * d * nqr, ws + 2 * d * nqr + nq, NULL};
  w.dpt = w.st + BK * BQ;
#ifdef SG_ABASE2 /* scores in base 2, as in the forward */
  const R qs = (R)(g->scale * 1.4426950408889634);
#else
  const R qs = (R)g->scale;
#endif
  for (int64_t i0 = 0; i0 < nq; i0 += BQ) {
    const int64_t bq = nq - i0 < BQ ? nq - i0 : BQ;
    AT_TRANSPOSE(q + i0 * d, bq, d, qs, w.qt + i0 * d, BQ);
    AT_TRANSPOSE(dout + i0 * d, bq, d, 1, w.dot + i0 * d, BQ);
  }
  for (int64_t i = 0; i < nq; ++i)
    w.dd[i] = AFN(attn_vdot)(dout + i * d, o + i * d, d);
  if (dq) memset(dq, 0, (size_t)(nq * d) * sizeof *dq);
  if (dk) memset(dk, 0, (size_t)(g->nk * d) * sizeof *dk);
  if (dv) memset(dv, 0, (size_t)(g->nk * d) * sizeof *dv);
  for (int64_t j0 = 0; j0 < g->nk; j0 += BK) {
    const int64_t bk = g->nk - j0 < BK ? g->nk - j0 : BK;
    /* from the query tile holding the first query that sees key j0 (the
     * tile's earlier queries see none of these keys: masked to 0) */
    for (int64_t i0 = sg_attn_query_begin(g, j0) / BQ * BQ; i0 < nq; i0 += BQ) {
      const int64_t bq = nq - i0 < BQ ? nq - i0 : BQ;
      AFN(attn_bwd_tile)
      (g, &w, q + i0 * d, k + j0 * d, v + j0 * d, lse + i0, dout + i0 * d,
       dq ? dq + i0 * d : NULL, dk ? dk + j0 * d : NULL,
       dv ? dv + j0 * d : NULL, i0, bq, j0, bk);
    }
  }
}

static void AFN(attn_bwd)(const sg_attn_geom *g, const R *q, const R *k,
                          const R *v, const R *o, const R *lse, const R *dout,
                          R *dq, R *dk, R *dv, void *ws) {
  const int saved = sg_blas_threads_begin();
  const int64_t qs = g->nq * g->d, ks = g->nk * g->d;
#pragma omp parallel num_threads(g->nthreads) if (g->nthreads > 1 && g->bh > 1)
  {
    R *w = (R *)sg_attn_thread_ws(g, ws);
#pragma omp for schedule(dynamic, 1)
    for (int64_t h = 0; h < g->bh; ++h) AFN(attn_bwd_head)
    (g, q + h * qs, k + h * ks, v + h * ks, o + h * qs, lse + h * g->nq,
     dout + h * qs, dq ? dq + h * qs : NULL, dk ? dk + h * ks : NULL,
     dv ? dv + h * ks : NULL, w);
  }
  sg_blas_threads_end(saved);
}

#ifndef SG_ANO_MERGE /* attention_avx512.c: the merge is attention.c's */
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
    for (int64_t c = 0; c < d; ++c)
      o[i * d + c] = wa * o[i * d + c] + wb * ob[i * d + c];
    lse[i] = m + SG_ALOG(sum);
  }
}
#endif

#undef AT_TRANSPOSE
#undef AFN
#undef SG_ACAT_
#undef SG_ACAT2_
