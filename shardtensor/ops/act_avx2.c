/* shardgrid — f32 GELU (tanh approximation) forward and backward on AVX2
 * with FMA: act_simd.c's scheme in 8-float vectors, for CPUs without
 * AVX-512 (Haswell, Zen 1-3).
 *
 * gelu(x) = x s, s = 1 / (1 + e), e = exp(-2u), 2u = x (A + B x^2);
 * gelu'(x) = s + (e s) s x (A + 3 B x^2) (act_simd.c has the derivation).
 * exp: n = round(w / ln2), r = w - n ln2 (two FMAs, Cody-Waite), the
 * degree-6 Taylor polynomial on FMAs, and 2^n built in the exponent bits
 * (AVX2 has no vscalefps): -2u is clamped to [-87, 80], so n lies in
 * [-126, 116] and 2^n is a normal number. 1 / (1 + e) by vrcpps (12 bits)
 * and one Newton step (relative error ~2e-7, about one f32 ulp).
 * Elementwise: results do not depend on the split across ranks or threads.
 * Compiled with -mavx2 -mfma by this file's own flags where the compiler
 * can; entered only when ops.c's GELU tier says AVX2. */
#include <stdint.h>

#include "ops_impl.h"

#define SG_OMP_MIN 32768 /* elements below which loops stay serial */

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

int sg_gelu2_built(void) { return 1; }

typedef struct gelu2_k {
  __m256 a, b3, nb, na, lo, hi, log2e, ln2hi, ln2lo, one, two, c[7];
  __m256i bias;
} gelu2_k;

static inline gelu2_k gelu2_consts(void) {
  const float A = 2.0f * 0.7978845608028654f, B = A * 0.044715f;
  gelu2_k k;
  k.a = _mm256_set1_ps(A);
  k.b3 = _mm256_set1_ps(3.0f * B);
  k.nb = _mm256_set1_ps(-B);
  k.na = _mm256_set1_ps(-A);
  k.lo = _mm256_set1_ps(-87.0f);
  k.hi = _mm256_set1_ps(80.0f);
  k.log2e = _mm256_set1_ps(1.44269504088896341f);
  k.ln2hi = _mm256_set1_ps(0.693359375f);
  k.ln2lo = _mm256_set1_ps(-2.12194440e-4f);
  k.one = _mm256_set1_ps(1.0f);
  k.two = _mm256_set1_ps(2.0f);
  k.bias = _mm256_set1_epi32(127);
  const float c[7] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6,
                      0.5f,       1.0f,       1.0f};
  for (int i = 0; i < 7; ++i) k.c[i] = _mm256_set1_ps(c[i]);
  return k;
}

/* e = exp(-2u) (clamped) and s = 1 / (1 + e) for x */
static inline void gelu2_es(const gelu2_k *k, __m256 x, __m256 x2, __m256 *e,
                            __m256 *s) {
  __m256 w = _mm256_mul_ps(x, _mm256_fmadd_ps(x2, k->nb, k->na)); /* -2u */
  w = _mm256_max_ps(_mm256_min_ps(w, k->hi), k->lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(w, k->log2e),
                                   _MM_FROUND_TO_NEAREST_INT |
                                       _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, k->ln2hi, w);
  r = _mm256_fnmadd_ps(n, k->ln2lo, r);
  __m256 p = k->c[0];
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, k->c[i]);
  const __m256i en = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), k->bias), 23); /* 2^n */
  *e = _mm256_mul_ps(p, _mm256_castsi256_ps(en));
  const __m256 d = _mm256_add_ps(*e, k->one);
  const __m256 r0 = _mm256_rcp_ps(d);
  *s = _mm256_mul_ps(r0, _mm256_fnmadd_ps(d, r0, k->two)); /* r0 (2 - d r0) */
}

static inline __m256i tail_mask(int64_t len) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)len), idx);
}

static inline __m256 ld(const float *p, int full, __m256i m) {
  return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}
static inline void st(float *p, __m256 v, int full, __m256i m) {
  if (full)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, m, v);
}

static inline void gelu2_fwd_vec(const gelu2_k *k, const float *x, float *y,
                                 int full, __m256i m) {
  const __m256 xv = ld(x, full, m);
  __m256 e, s;
  gelu2_es(k, xv, _mm256_mul_ps(xv, xv), &e, &s);
  st(y, _mm256_mul_ps(xv, s), full, m);
}

static inline void gelu2_bwd_vec(const gelu2_k *k, const float *x,
                                 const float *dy, float *dx, int full,
                                 __m256i m) {
  const __m256 xv = ld(x, full, m);
  const __m256 x2 = _mm256_mul_ps(xv, xv);
  __m256 e, s;
  gelu2_es(k, xv, x2, &e, &s);
  const __m256 du = _mm256_fmadd_ps(x2, k->b3, k->a);
  /* (e s) s first: e s <= 1, so no overflow where x e would */
  __m256 t = _mm256_mul_ps(_mm256_mul_ps(e, s), s);
  t = _mm256_mul_ps(_mm256_mul_ps(t, xv), du);
  st(dx, _mm256_mul_ps(ld(dy, full, m), _mm256_add_ps(t, s)), full, m);
}

static void gelu2_fwd_tail(int64_t n, const float *x, float *y) {
  const int64_t nv = n / 8;
  if (n > 8 * nv) {
    const gelu2_k k = gelu2_consts();
    gelu2_fwd_vec(&k, x + 8 * nv, y + 8 * nv, 0, tail_mask(n - 8 * nv));
  }
}

void sg_gelu2_fwd_f32(int64_t n, const float *x, float *y) {
  const int64_t nv = n / 8;
#pragma omp parallel if (n > SG_OMP_MIN)
  {
    const gelu2_k k = gelu2_consts();
#pragma omp for schedule(static)
    for (int64_t v = 0; v < nv; ++v)
      gelu2_fwd_vec(&k, x + 8 * v, y + 8 * v, 1, k.bias);
  }
  gelu2_fwd_tail(n, x, y);
}

void sg_gelu2_fwd_seq_f32(int64_t n, const float *x, float *y) {
  const gelu2_k k = gelu2_consts();
  for (int64_t v = 0; v < n / 8; ++v)
    gelu2_fwd_vec(&k, x + 8 * v, y + 8 * v, 1, k.bias);
  gelu2_fwd_tail(n, x, y);
}

void sg_gelu2_bwd_f32(int64_t n, const float *x, const float *dy, float *dx) {
  const int64_t nv = n / 8;
#pragma omp parallel if (n > SG_OMP_MIN)
  {
    const gelu2_k k = gelu2_consts();
#pragma omp for schedule(static)
    for (int64_t v = 0; v < nv; ++v)
      gelu2_bwd_vec(&k, x + 8 * v, dy + 8 * v, dx + 8 * v, 1, k.bias);
  }
  if (n > 8 * nv) {
    const gelu2_k k = gelu2_consts();
    gelu2_bwd_vec(&k, x + 8 * nv, dy + 8 * nv, dx + 8 * nv, 0,
                  tail_mask(n - 8 * nv));
  }
}

/* sg_gelu2_bwd_f32 on the calling thread (the fused linear backward's
 * chunks): the same values element for element */
void sg_gelu2_bwd_seq_f32(int64_t n, const float *x, const float *dy,
                          float *dx) {
  const gelu2_k k = gelu2_consts();
  const int64_t nv = n / 8;
  for (int64_t v = 0; v < nv; ++v)
    gelu2_bwd_vec(&k, x + 8 * v, dy + 8 * v, dx + 8 * v, 1, k.bias);
  if (n > 8 * nv)
    gelu2_bwd_vec(&k, x + 8 * nv, dy + 8 * nv, dx + 8 * nv, 0,
                  tail_mask(n - 8 * nv));
}

/* The projection head's backward (pointwise_avx2.c): from z and the
 * upstream gradient g (in io) on the calling thread, a = gelu(z) and, in
 * place over io, gelu'(z) g: the values of sg_gelu2_fwd_seq_f32 and
 * sg_gelu2_bwd_seq_f32, element for element (one exp for both). */
static inline void gelu2_both_vec(const gelu2_k *k, const float *x, float *io,
                                  float *a, int full, __m256i m) {
  const __m256 xv = ld(x, full, m);
  const __m256 x2 = _mm256_mul_ps(xv, xv);
  __m256 e, s;
  gelu2_es(k, xv, x2, &e, &s);
  st(a, _mm256_mul_ps(xv, s), full, m);
  const __m256 du = _mm256_fmadd_ps(x2, k->b3, k->a);
  __m256 t = _mm256_mul_ps(_mm256_mul_ps(e, s), s);
  t = _mm256_mul_ps(_mm256_mul_ps(t, xv), du);
  st(io, _mm256_mul_ps(ld(io, full, m), _mm256_add_ps(t, s)), full, m);
}

void sg_gelu2_both_seq_f32(int64_t n, const float *x, float *io, float *a) {
  const gelu2_k k = gelu2_consts();
  const int64_t nv = n / 8;
  for (int64_t v = 0; v < nv; ++v)
    gelu2_both_vec(&k, x + 8 * v, io + 8 * v, a + 8 * v, 1, k.bias);
  if (n > 8 * nv)
    gelu2_both_vec(&k, x + 8 * nv, io + 8 * nv, a + 8 * nv, 0,
                   tail_mask(n - 8 * nv));
}

#else

int sg_gelu2_built(void) { return 0; }
void sg_gelu2_fwd_f32(int64_t n, const float *x, float *y) {
  (void)n, (void)x, (void)y;
}
void sg_gelu2_fwd_seq_f32(int64_t n, const float *x, float *y) {
  (void)n, (void)x, (void)y;
}
void sg_gelu2_bwd_f32(int64_t n, const float *x, const float *dy, float *dx) {
  (void)n, (void)x, (void)dy, (void)dx;
}
void sg_gelu2_bwd_seq_f32(int64_t n, const float *x, const float *dy,
                          float *dx) {
  (void)n, (void)x, (void)dy, (void)dx;
}
void sg_gelu2_both_seq_f32(int64_t n, const float *x, float *io, float *a) {
  (void)n, (void)x, (void)io, (void)a;
}

#endif
