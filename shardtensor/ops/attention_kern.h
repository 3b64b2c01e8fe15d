/* shardgrid — what the fused attention's translation units share:
 * attention.c (checks, geometry, workspace, dispatch; the portable f32
 * kernel on BLAS tiles and the f64 kernel), attention_avx512.c and
 * attention_avx2.c (the f32 kernel on AVX-512F / AVX2 + FMA, each compiled
 * with its own target flags and entered only after the run-time check of
 * sg_simd_avx512 / sg_simd_avx2). All four instantiate attention_tmpl.h:
 * the tiling, the schedule and the workspace layouts (the backward's q^T
 * and dout^T in d x BQ blocks per query tile) are that file's, the same
 * code for every kernel; a kernel file supplies only primitives that take
 * explicit leading dimensions (the tile GEMM, the transpose into a d x BQ
 * block with ldt = BQ, the softmax and probability passes over a BK x BQ
 * score tile). The backward's transposes and score GEMMs take the
 * forward's arguments (a d x BQ block, ldb = BQ; only the block's address
 * differs), so the blocked layout is template code that the portable and
 * AVX2 tests run; the AVX-512 primitives themselves run only on an
 * AVX-512 CPU (test_attention there). Internal. */
#ifndef SG_ATTENTION_KERN_H
#define SG_ATTENTION_KERN_H

#include <stddef.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Tiles of 64 queries x 128 keys: at d = 64 in f32 a query tile's q^T and
 * output (16 KiB each) and the score tile (32 KiB) stay in L1/L2 while the
 * key and value tiles (32 KiB each) stream through. 64 x 64 and 128 x 128
 * measured within 5% (bench/RESULTS.md); 64 x 128 was a little ahead. */
#ifndef SG_ATTN_BQ
#define SG_ATTN_BQ 64
#endif
#ifndef SG_ATTN_BK
#define SG_ATTN_BK 128
#endif
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
  /* query i_end - 1 sees keys <= i_end - 1 + offset */
  int64_t e = i_end + g->offset;
  return e < 0 ? 0 : e > g->nk ? g->nk : e;
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

/* The f32 kernel on AVX-512F (attention_avx512.c): built() is 0 where the
 * compiler or the target has no AVX-512 (then the two kernels are empty);
 * the caller checks built() && sg_simd_avx512() before calling. The same
 * contract as the portable attn_fwd_f32 / attn_bwd_f32 of attention.c. */
int sg_attn_avx512_built(void);
void sg_attn_fwd_f32_avx512(const sg_attn_geom *g, const float *q,
                            const float *k, const float *v, float *o,
                            float *lse, void *ws);
void sg_attn_bwd_f32_avx512(const sg_attn_geom *g, const float *q,
                            const float *k, const float *v, const float *o,
                            const float *lse, const float *dout, float *dq,
                            float *dk, float *dv, void *ws);

/* The f32 kernel on AVX2 + FMA (attention_avx2.c), the same contract:
 * built() is 0 where the compiler cannot target AVX2 and FMA; the caller
 * checks built() && sg_simd_avx2() (and takes AVX-512 first). */
int sg_attn_avx2_built(void);
void sg_attn_fwd_f32_avx2(const sg_attn_geom *g, const float *q, const float *k,
                          const float *v, float *o, float *lse, void *ws);
void sg_attn_bwd_f32_avx2(const sg_attn_geom *g, const float *q, const float *k,
                          const float *v, const float *o, const float *lse,
                          const float *dout, float *dq, float *dk, float *dv,
                          void *ws);

/* The bf16 forward on bf16 tiles (attention_avx512.c): q, k, v, o bf16
 * (sg_bf16 bits), lse f32 (or NULL). mode() is 0 (use the widening path),
 * 1 (vdpbf16ps register tiles) or 2 (AMX tiles): never 1 or 2 where the
 * file was built without AVX-512, SG_SIMD=portable, or the CPU lacks
 * avx512_bf16; SG_ATTN_BF16=widen|tiles overrides. Its workspace per
 * thread: sg_attn_bf16_ws_bytes(nk, d). */
int sg_attn_bf16_avx512_mode(void);
size_t sg_attn_bf16_ws_bytes(int64_t nk, int64_t d);
void sg_attn_fwd_bf16_avx512(const sg_attn_geom *g, int mode, const void *q,
                             const void *k, const void *v, void *o, float *lse,
                             void *ws);

#endif /* SG_ATTENTION_KERN_H */
