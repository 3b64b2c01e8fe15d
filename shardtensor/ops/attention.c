/* shardgrid — fused, blocked scaled dot-product attention (FlashAttention-2
 * tiling with an online softmax) on the host: argument checks, geometry,
 * workspace, dispatch, and the f32 and f64 kernels (attention_tmpl.h).
 * The algorithm, its memory and its use by ring attention: docs/attention.md. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops_impl.h"
#include "sg_device.h"
#include "sg_ops_inl.h"

/* 64 x 64 tiles: a d = 64 tile of q, k, v, o and the score tile are 16 KiB
 * each in f32, so a query tile's working set (q, o, s) stays in L1/L2 while
 * key tiles stream through; the tile GEMMs (64 x 64 x d) are large enough
 * for the BLAS's small-matrix kernels. */
#define SG_ATTN_BQ 64
#define SG_ATTN_BK 64
#define SG_ATTN_VL 16 /* lanes of the vectorised row reductions */

typedef struct sg_attn_geom {
  int64_t bh, nq, nk, d; /* batch * heads, tokens, head_dim */
  double scale;
  int causal;
  int64_t offset;
  int nthreads;
  size_t ws_per_thread; /* bytes, multiple of 64 */
} sg_attn_geom;

/* Keys [0, end) that some query of rows [0, i_end) sees. */
static inline int64_t sg_attn_key_end(const sg_attn_geom *g, int64_t i_end) {
  if (!g->causal) return g->nk;
  int64_t e = i_end + g->offset; /* query i_end - 1 sees keys <= i_end - 1 + offset */
  return e < 0 ? 0 : e > g->nk ? g->nk : e;
}

/* Keys of the tile [j0, j0 + bk) that query i sees: the first count. */
static inline int64_t sg_attn_visible(const sg_attn_geom *g, int64_t i, int64_t j0,
                                      int64_t bk) {
  if (!g->causal) return bk;
  int64_t c = i + g->offset - j0 + 1;
  return c < 0 ? 0 : c > bk ? bk : c;
}

/* First query that sees key j0. */
static inline int64_t sg_attn_query_begin(const sg_attn_geom *g, int64_t j0) {
  if (!g->causal) return 0;
  int64_t i = j0 - g->offset;
  return i < 0 ? 0 : i > g->nq ? g->nq : i;
}

static inline void *sg_attn_thread_ws(const sg_attn_geom *g, void *ws) {
#ifdef _OPENMP
  int tid = omp_get_thread_num();
#else
  int tid = 0;
#endif
  return (char *)ws + (size_t)tid * g->ws_per_thread;
}

#define R float
#define S f32
#define SG_AGEMM cblas_sgemm
#define SG_AEXP sg_expf
#define SG_AMEXP expf
#define SG_ALOG logf
#include "attention_tmpl.h"
#undef R
#undef S
#undef SG_AGEMM
#undef SG_AEXP
#undef SG_AMEXP
#undef SG_ALOG

#define R double
#define S f64
#define SG_AGEMM cblas_dgemm
#define SG_AEXP exp
#define SG_AMEXP exp
#define SG_ALOG log
#include "attention_tmpl.h"
#undef R
#undef S
#undef SG_AGEMM
#undef SG_AEXP
#undef SG_AMEXP
#undef SG_ALOG

/* ---- checks, geometry, dispatch ----------------------------------------- */

static sg_status sg_attn_check_dt(sg_dtype dt) {
  sg_status st = SG_OK;
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "attention takes f32 or f64, not %s (bf16 storage: "
             "not yet)", sg_dtype_name(dt));
fail:
  return st;
}

static sg_status sg_attn_geom_make(const sg_attn_desc *d, sg_dtype dt, sg_attn_geom *g) {
  sg_status st = SG_OK;
  memset(g, 0, sizeof *g);
  if (!d) SG_RAISE(SG_ERR_INVALID_ARG, "attention descriptor is NULL");
  SG_TRY(sg_attn_check_dt(dt));
  if (d->batch < 0 || d->heads < 0 || d->nq < 0 || d->nk < 0)
    SG_RAISE(SG_ERR_INVALID_ARG, "attention: negative size (batch %lld, heads %lld, "
             "nq %lld, nk %lld)", (long long)d->batch, (long long)d->heads,
             (long long)d->nq, (long long)d->nk);
  /* the tile GEMMs take int leading dimensions and sizes */
  if (d->head_dim < 1 || d->head_dim > INT_MAX / SG_ATTN_BK)
    SG_RAISE(SG_ERR_INVALID_ARG, "attention: head_dim must be 1..%d, got %lld",
             INT_MAX / SG_ATTN_BK, (long long)d->head_dim);
  if (!isfinite(d->scale))
    SG_RAISE(SG_ERR_INVALID_ARG, "attention: scale must be finite, got %g", d->scale);
  if (d->causal != 0 && d->causal != 1)
    SG_RAISE(SG_ERR_INVALID_ARG, "attention: causal must be 0 or 1, got %d", d->causal);
  g->bh = d->batch * d->heads;
  g->nq = d->nq;
  g->nk = d->nk;
  g->d = d->head_dim;
  g->scale = d->scale != 0 ? d->scale : 1 / sqrt((double)d->head_dim);
  g->causal = d->causal;
  g->offset = d->causal ? d->causal_offset : 0;
#ifdef _OPENMP
  g->nthreads = omp_get_max_threads();
#else
  g->nthreads = 1;
#endif
  size_t esz = sg_dtype_size(dt);
  size_t fwd = (size_t)(SG_ATTN_BQ * SG_ATTN_BK + 2 * SG_ATTN_BQ);
  size_t bwd = (size_t)(2 * SG_ATTN_BQ * SG_ATTN_BK) + (size_t)d->nq;
  g->ws_per_thread = ((fwd > bwd ? fwd : bwd) * esz + 63) / 64 * 64;
fail:
  return st;
}

size_t sg_attention_workspace_bytes(const sg_attn_desc *d, sg_dtype dt) {
  sg_attn_geom g;
  if (sg_attn_geom_make(d, dt, &g) != SG_OK) return 0;
  return (size_t)g.nthreads * g.ws_per_thread;
}

static sg_status sg_attn_ws_get(const sg_attn_geom *g, void *given, void **ws, void **own) {
  *own = NULL;
  *ws = given;
  if (given) return SG_OK;
  sg_status st = sg_malloc(sg_device_host(), (size_t)g->nthreads * g->ws_per_thread, own);
  *ws = *own;
  return st;
}

#define SG_ATTN_PTR(p)                                                        \
  do {                                                                        \
    if (!(p)) SG_RAISE(SG_ERR_INVALID_ARG, "attention: %s is NULL", #p);      \
  } while (0)

sg_status sg_attention_forward(const sg_attn_desc *d, sg_dtype dt, const void *q,
                               const void *k, const void *v, void *o, void *lse, void *ws) {
  sg_status st = SG_OK;
  sg_attn_geom g;
  void *own = NULL;
  SG_TRY(sg_attn_geom_make(d, dt, &g));
  SG_ATTN_PTR(q);
  SG_ATTN_PTR(k);
  SG_ATTN_PTR(v);
  SG_ATTN_PTR(o);
  if (g.bh == 0 || g.nq == 0) goto fail;
  SG_TRY(sg_attn_ws_get(&g, ws, &ws, &own));
  if (dt == SG_DTYPE_F32)
    attn_fwd_f32(&g, q, k, v, o, lse, ws);
  else
    attn_fwd_f64(&g, q, k, v, o, lse, ws);
fail:
  if (own) sg_free(sg_device_host(), &own);
  return st;
}

sg_status sg_attention_backward(const sg_attn_desc *d, sg_dtype dt, const void *q,
                                const void *k, const void *v, const void *o,
                                const void *lse, const void *dout, void *dq, void *dk,
                                void *dv, void *ws) {
  sg_status st = SG_OK;
  sg_attn_geom g;
  void *own = NULL;
  SG_TRY(sg_attn_geom_make(d, dt, &g));
  SG_ATTN_PTR(q);
  SG_ATTN_PTR(k);
  SG_ATTN_PTR(v);
  SG_ATTN_PTR(o);
  SG_ATTN_PTR(lse);
  SG_ATTN_PTR(dout);
  if (g.bh == 0 || (!dq && !dk && !dv)) goto fail;
  SG_TRY(sg_attn_ws_get(&g, ws, &ws, &own));
  if (dt == SG_DTYPE_F32)
    attn_bwd_f32(&g, q, k, v, o, lse, dout, dq, dk, dv, ws);
  else
    attn_bwd_f64(&g, q, k, v, o, lse, dout, dq, dk, dv, ws);
fail:
  if (own) sg_free(sg_device_host(), &own);
  return st;
}

sg_status sg_attention_merge(sg_dtype dt, int64_t rows, int64_t head_dim, void *o, void *lse,
                             const void *o_b, const void *lse_b) {
  sg_status st = SG_OK;
  SG_TRY(sg_attn_check_dt(dt));
  if (rows < 0 || head_dim < 1)
    SG_RAISE(SG_ERR_INVALID_ARG, "attention merge: rows must be >= 0 and head_dim >= 1, "
             "got %lld, %lld", (long long)rows, (long long)head_dim);
  SG_ATTN_PTR(o);
  SG_ATTN_PTR(lse);
  SG_ATTN_PTR(o_b);
  SG_ATTN_PTR(lse_b);
  if (dt == SG_DTYPE_F32)
    attn_merge_f32(rows, head_dim, o, lse, o_b, lse_b);
  else
    attn_merge_f64(rows, head_dim, o, lse, o_b, lse_b);
fail:
  return st;
}
