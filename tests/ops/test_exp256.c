/* sg_exp2_256_ps (shardtensor/ops/sg_exp256.h), the AVX2 attention
 * kernel's 2^x: against exp2 in double, rounded to f32, over every 64th
 * f32 in [-150, 127.5) (the softmax feeds it s - max <= 0, down to -inf),
 * plus the special values. At most 1 ulp where 2^x is a normal float, 0
 * or a subnormal below -126, NaN for NaN, 0 for -inf; the same result in
 * every lane. This file is compiled with -mavx2 -mfma
 * (tests/ops/CMakeLists.txt); skipped (exit 77) where the compiler cannot
 * target AVX2 or the CPU running it lacks AVX2 or FMA. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sg_exp256.h"

#if defined(__AVX2__) && defined(__FMA__)
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

static void check(stats *s, float x, float y) {
  const double e = exp2((double)x);
  const float ref = (float)e;
  int ok;
  ++s->n;
  if (isnan(x))
    ok = isnan(y);
  else if (ref < FLT_MIN) /* 0, or a subnormal */
    ok = y >= 0 && y <= FLT_MIN;
  else {
    const double ulp = fabs((double)(f2ord(y) - f2ord(ref)));
    if (ulp > s->max_ulp) s->max_ulp = ulp;
    ok = ulp <= 1;
  }
  if (!ok && s->bad++ < 10)
    printf("  exp2_256(%.9g) = %.9g, exp2 = %.9g\n", x, y, e);
}

static void check8(stats *s, const float x[8]) {
  float y[8];
  _mm256_storeu_ps(y, sg_exp2_256_ps(_mm256_loadu_ps(x)));
  for (int l = 0; l < 8; ++l) check(s, x[l], y[l]);
}

int main(void) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    printf("exp2_256: the CPU has no AVX2 + FMA, skipped\n");
    return 77;
  }
  stats s = {0, 0, 0};
  float x[8];
  const uint32_t neg_end = 0xC3160000u; /* -150 */
  const uint32_t pos_end = 0x42FEFFFFu; /* just under 127.5 */
  int k = 0;
  for (uint32_t u = 0x80000000u; u <= neg_end; u += 64) {
    x[k++] = bits2f(u);
    if (k == 8) check8(&s, x), k = 0;
  }
  for (uint32_t u = 0; u <= pos_end; u += 64) {
    x[k++] = bits2f(u);
    if (k == 8) check8(&s, x), k = 0;
  }
  const float sp[] = {-INFINITY,   NAN,          -FLT_MAX, -1e30f,  -126.0f,
                      -126.25f,    -126.5f,      -126.75f, -127.0f, -127.5f,
                      -149.0f,     127.0f,       0.0f,     -0.0f,   FLT_MIN,
                      -FLT_MIN,    1e-30f,       -1e-30f,  0.5f,    -0.5f,
                      0.49999997f, -0.49999997f, 1.0f,     -1.0f};
  const int nsp = (int)(sizeof sp / sizeof sp[0]);
  for (int i = 0; i < nsp; ++i) {
    x[k++] = sp[i];
    if (k == 8) check8(&s, x), k = 0;
  }
  for (; k && k < 8; ++k) x[k] = 0;
  if (k) check8(&s, x);
  /* lanes independent */
  for (int l = 0; l < 8; ++l) {
    float a[8], y[8], y1[8];
    for (int i = 0; i < 8; ++i) a[i] = i == l ? -3.25f : -50.0f + (float)i;
    _mm256_storeu_ps(y, sg_exp2_256_ps(_mm256_loadu_ps(a)));
    for (int i = 0; i < 8; ++i) a[i] = -3.25f;
    _mm256_storeu_ps(y1, sg_exp2_256_ps(_mm256_loadu_ps(a)));
    if (y[l] != y1[0]) ++s.bad;
  }
  printf("exp2_256: %ld values, max %.0f ulp where normal, %ld bad\n", s.n,
         s.max_ulp, s.bad);
  return s.bad ? 1 : 0;
}
#else
int main(void) {
  printf("exp2_256: not built for AVX2 + FMA, skipped\n");
  return 77;
}
#endif
