/* sg_exp2_512_ps (shardtensor/ops/sg_exp512.h), the fused attention's
 * vectorised 2^x: against exp2 in double, rounded to f32, over every 64th
 * f32 in [-150, 129] (the softmax feeds it s - max <= 0, down to -inf;
 * the rest is for other callers), plus the special values. At most 1 ulp
 * where 2^x is a normal float, exactly 0 below -126 up to the subnormal
 * it would round to, +inf from 128, NaN for NaN; and
 * the same result in every lane. Skipped (exit 77) where the build does
 * not target AVX-512F. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sg_exp512.h"

#if defined(__AVX512F__)
static float bits2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static int32_t f2ord(float f) { /* monotone integer order of the floats */
  int32_t i;
  memcpy(&i, &f, sizeof i);
  return i < 0 ? (int32_t)(0x80000000u - (uint32_t)i) : i;
}

typedef struct {
  long n, bad;
  double max_ulp;
} stats;

/* checks y = e^x for one value */
static void check(stats *s, float x, float y) {
  const double e = exp2((double)x);
  const float ref = (float)e;
  int ok;
  ++s->n;
  if (isnan(x))
    ok = isnan(y);
  else if (ref > FLT_MAX)
    ok = isinf(y) || (float)(e * (1 - 1e-7)) <= FLT_MAX; /* at the edge */
  else if (ref < FLT_MIN) /* 0, or the subnormal it would be */
    ok = y >= 0 && y <= FLT_MIN;
  else {
    const double ulp = fabs((double)(f2ord(y) - f2ord(ref)));
    if (ulp > s->max_ulp) s->max_ulp = ulp;
    ok = ulp <= 1;
  }
  if (!ok && s->bad++ < 10)
    printf("  exp2_512(%.9g) = %.9g, exp2 = %.9g\n", x, y, e);
}

static void check16(stats *s, const float x[16]) {
  float y[16];
  _mm512_storeu_ps(y, sg_exp2_512_ps(_mm512_loadu_ps(x)));
  for (int l = 0; l < 16; ++l) check(s, x[l], y[l]);
}

int main(void) {
  stats s = {0, 0, 0};
  float x[16];
  /* sweep [-104, 89] by bit patterns: negatives from -0 down, positives */
  const uint32_t neg_end = 0xC3160000u; /* -150 */
  const uint32_t pos_end = 0x43010000u; /* 129 */
  int k = 0;
  for (uint32_t u = 0x80000000u; u <= neg_end; u += 64) {
    x[k++] = bits2f(u);
    if (k == 16) check16(&s, x), k = 0;
  }
  for (uint32_t u = 0; u <= pos_end; u += 64) {
    x[k++] = bits2f(u);
    if (k == 16) check16(&s, x), k = 0;
  }
  const float sp[] = {-INFINITY,   INFINITY,   NAN,         -FLT_MAX,
                      FLT_MAX,     -1e30f,     -87.33654f,  -87.3365f,
                      -87.34f,     -103.9f,    88.72283f,   88.7229f,
                      0.0f,        -0.0f,      FLT_MIN,     -FLT_MIN,
                      1e-30f,      -1e-30f,    0.34657359f, -0.34657359f,
                      -0.3465736f, 0.3465736f, 1.0f,        -1.0f};
  const int nsp = (int)(sizeof sp / sizeof sp[0]);
  for (int i = 0; i < nsp; ++i) {
    x[k++] = sp[i];
    if (k == 16) check16(&s, x), k = 0;
  }
  for (; k && k < 16; ++k) x[k] = 0;
  if (k) check16(&s, x);
  /* lanes independent: one value in each lane position gives one result */
  for (int l = 0; l < 16; ++l) {
    float a[16], y[16];
    for (int i = 0; i < 16; ++i) a[i] = i == l ? -3.25f : -50.0f + (float)i;
    _mm512_storeu_ps(y, sg_exp2_512_ps(_mm512_loadu_ps(a)));
    float y1[16];
    for (int i = 0; i < 16; ++i) a[i] = -3.25f;
    _mm512_storeu_ps(y1, sg_exp2_512_ps(_mm512_loadu_ps(a)));
    if (y[l] != y1[0]) ++s.bad;
  }
  printf("exp2_512: %ld values, max %.0f ulp where normal, %ld bad\n", s.n,
         s.max_ulp, s.bad);
  return s.bad ? 1 : 0;
}
#else
int main(void) {
  printf("exp2_512: not built for AVX-512F, skipped\n");
  return 77;
}
#endif
