/* shardgrid — the fused attention's per-row arithmetic as SG_HD functions:
 * one query row of one head (forward, dq) or one key row (dk, dv), in the
 * host kernel's layout and conventions (sg_ops.h "attention"): q, o
 * (Nq, d), k, v (Nk, d) of one head, row-major; query i sees key j where
 * j <= i + offset (causal); lse the base-e log-sum-exp of the scaled
 * scores; a row that sees no key gets o = 0 and lse = -inf. The CUDA
 * launchers (shardtensor/ops/cuda/attention_cuda.cu) run one thread per
 * row over these; the host test (tests/ops/test_attn_device.c) runs them
 * on the host against sg_attention_forward/backward. Internal.
 *
 * A FlashAttention-style loop over key (or query) blocks of SG_ATTN_HD_B:
 * the block's scores in a local array, the running max and sum in
 * registers, the output row (d values, in the caller's memory) rescaled
 * and accumulated once a block, so a row costs O(d) memory and the whole
 * op O(N d). The backward is FA2's: D_i = rowsum(dO_i * O_i), p_ij =
 * e^{s_ij - lse_i}, ds_ij = p_ij (dO_i . v_j - D_i) scale; dq_i = sum_j
 * ds_ij k_j (a query row's thread), dk_j = sum_i ds_ij q_i and dv_j =
 * sum_i p_ij dO_i (a key row's thread: no atomics). */
#ifndef SG_ATTN_INL_H
#define SG_ATTN_INL_H

#include <math.h>
#include <stdint.h>

#include "sg_ops_inl.h" /* SG_HD, sg_expf */

#ifndef SG_ATTN_HD_B
#define SG_ATTN_HD_B 32 /* scores of a block kept per thread */
#endif

/* One head's geometry (the host's sg_attn_geom without the threading):
 * scale already resolved (1/sqrt(d) for a descriptor's 0). */
typedef struct sg_attn_rows {
  int64_t nq, nk, d;
  double scale;
  int causal;
  int64_t offset; /* 0 when not causal */
} sg_attn_rows;

/* Keys [0, end) that query i sees. */
static inline SG_HD int64_t sg_attn_row_kend(const sg_attn_rows *g, int64_t i) {
  if (!g->causal) return g->nk;
  const int64_t e = i + 1 + g->offset;
  return e < 0 ? 0 : e > g->nk ? g->nk : e;
}

/* The first query that sees key j (nq: none). */
static inline SG_HD int64_t sg_attn_row_qbegin(const sg_attn_rows *g,
                                               int64_t j) {
  if (!g->causal) return 0;
  const int64_t i = j - g->offset;
  return i < 0 ? 0 : i > g->nq ? g->nq : i;
}

/* Element i of the kernel layout y (B, H, T, d) is element
 * sg_attn_heads_src(i) of the op's x (B, H*d, T) (ag_heads_copy). */
static inline SG_HD int64_t sg_attn_heads_src(int64_t i, int64_t T, int64_t d) {
  const int64_t c = i % d, t = (i / d) % T, bh = i / (d * T);
  return (bh * d + c) * T + t;
}

/* T element type, S suffix, EXP / LOG of a T. */
#define SG_ATTN_HD(T, S, EXP, LOG)                                              \
  static inline SG_HD T sg_attn_dot_##S(const T *a, const T *b, int64_t n) {    \
    T t = 0;                                                                    \
    for (int64_t c = 0; c < n; ++c) t += a[c] * b[c];                           \
    return t;                                                                   \
  }                                                                             \
  /* Query row i: o (d, OVERWRITTEN) and *lse (if lse) from q (its row), k,  \
   * v (the head's). */  \
  static inline SG_HD void sg_attn_row_fwd_##S(const sg_attn_rows *g,           \
                                               int64_t i, const T *q,           \
                                               const T *k, const T *v, T *o,    \
                                               T *lse) {                        \
    const int64_t d = g->d, kend = sg_attn_row_kend(g, i);                      \
    const T sc = (T)g->scale;                                                   \
    T s[SG_ATTN_HD_B];                                                          \
    T m = -INFINITY, l = 0;                                                     \
    for (int64_t c = 0; c < d; ++c) o[c] = 0;                                   \
    for (int64_t j0 = 0; j0 < kend; j0 += SG_ATTN_HD_B) {                       \
      const int64_t bk = kend - j0 < SG_ATTN_HD_B ? kend - j0                   \
                                                  : (int64_t)SG_ATTN_HD_B;      \
      T bm = -INFINITY;                                                         \
      for (int64_t j = 0; j < bk; ++j) {                                        \
        s[j] = sc * sg_attn_dot_##S(q, k + (j0 + j) * d, d);                    \
        bm = s[j] > bm ? s[j] : bm;                                             \
      }                                                                         \
      const T mn = bm > m ? bm : m;                                             \
      const T al = m == -INFINITY ? (T)0 : EXP(m - mn);                         \
      l *= al;                                                                  \
      for (int64_t j = 0; j < bk; ++j) {                                        \
        s[j] = EXP(s[j] - mn);                                                  \
        l += s[j];                                                              \
      }                                                                         \
      for (int64_t c = 0; c < d; ++c) {                                         \
        T a = o[c] * al;                                                        \
        for (int64_t j = 0; j < bk; ++j) a += s[j] * v[(j0 + j) * d + c];       \
        o[c] = a;                                                               \
      }                                                                         \
      m = mn;                                                                   \
    }                                                                           \
    const T inv = l > 0 ? 1 / l : (T)0;                                         \
    for (int64_t c = 0; c < d; ++c) o[c] *= inv;                                \
    if (lse) *lse = l > 0 ? m + LOG(l) : (T)-INFINITY;                          \
  }                                                                             \
  /* Query row i's dq (d, OVERWRITTEN) from its q, dout rows, lse, D =       \
   * rowsum(dout * o) and the head's k, v. */  \
  static inline SG_HD void sg_attn_row_dq_##S(const sg_attn_rows *g,            \
                                              int64_t i, const T *q,            \
                                              const T *k, const T *v, T lse,    \
                                              T dd, const T *dout, T *dq) {     \
    const int64_t d = g->d;                                                     \
    const int64_t kend = lse == -INFINITY ? 0 : sg_attn_row_kend(g, i);         \
    const T sc = (T)g->scale;                                                   \
    T s[SG_ATTN_HD_B];                                                          \
    for (int64_t c = 0; c < d; ++c) dq[c] = 0;                                  \
    for (int64_t j0 = 0; j0 < kend; j0 += SG_ATTN_HD_B) {                       \
      const int64_t bk = kend - j0 < SG_ATTN_HD_B ? kend - j0                   \
                                                  : (int64_t)SG_ATTN_HD_B;      \
      for (int64_t j = 0; j < bk; ++j) {                                        \
        const T *kj = k + (j0 + j) * d, *vj = v + (j0 + j) * d;                 \
        const T p = EXP(sc * sg_attn_dot_##S(q, kj, d) - lse);                  \
        s[j] = p * (sg_attn_dot_##S(dout, vj, d) - dd) * sc;                    \
      }                                                                         \
      for (int64_t c = 0; c < d; ++c) {                                         \
        T a = dq[c];                                                            \
        for (int64_t j = 0; j < bk; ++j) a += s[j] * k[(j0 + j) * d + c];       \
        dq[c] = a;                                                              \
      }                                                                         \
    }                                                                           \
  }                                                                             \
  /* Key row j's dk, dv (d each, OVERWRITTEN; either may be NULL) from its k, \
   * v rows and the head's q, dout, lse, D. */ \
  static inline SG_HD void sg_attn_row_dkv_##S(                                 \
      const sg_attn_rows *g, int64_t j, const T *q, const T *kj, const T *vj,   \
      const T *lse, const T *dd, const T *dout, T *dk, T *dv) {                 \
    const int64_t d = g->d;                                                     \
    const T sc = (T)g->scale;                                                   \
    T p[SG_ATTN_HD_B], s[SG_ATTN_HD_B];                                         \
    for (int64_t c = 0; c < d; ++c) {                                           \
      if (dk) dk[c] = 0;                                                        \
      if (dv) dv[c] = 0;                                                        \
    }                                                                           \
    for (int64_t i0 = sg_attn_row_qbegin(g, j); i0 < g->nq;                     \
         i0 += SG_ATTN_HD_B) {                                                  \
      const int64_t bq = g->nq - i0 < SG_ATTN_HD_B ? g->nq - i0                 \
                                                   : (int64_t)SG_ATTN_HD_B;     \
      for (int64_t r = 0; r < bq; ++r) {                                        \
        const int64_t i = i0 + r;                                               \
        const T *qi = q + i * d, *oi = dout + i * d;                            \
        const T x = sc * sg_attn_dot_##S(qi, kj, d) - lse[i];                   \
        p[r] = lse[i] == -INFINITY ? (T)0 : EXP(x);                             \
        s[r] = dk ? p[r] * (sg_attn_dot_##S(oi, vj, d) - dd[i]) * sc : (T)0;    \
      }                                                                         \
      for (int64_t c = 0; c < d; ++c) {                                         \
        if (dv) {                                                               \
          T a = dv[c];                                                          \
          for (int64_t r = 0; r < bq; ++r) a += p[r] * dout[(i0 + r) * d + c];  \
          dv[c] = a;                                                            \
        }                                                                       \
        if (dk) {                                                               \
          T a = dk[c];                                                          \
          for (int64_t r = 0; r < bq; ++r) a += s[r] * q[(i0 + r) * d + c];     \
          dk[c] = a;                                                            \
        }                                                                       \
      }                                                                         \
    }                                                                           \
  }

SG_ATTN_HD(float, f32, sg_expf, logf)
SG_ATTN_HD(double, f64, exp, log)
#undef SG_ATTN_HD

#endif /* SG_ATTN_INL_H */
