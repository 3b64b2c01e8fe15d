/* The harness of the vectorised 2^x tests (test_exp256.c, test_exp512.c):
 * a kernel of `lanes` f32 lanes against exp2 in double, rounded to f32,
 * over every 64th f32 from -0 down to -150 and from +0 up to `pos_end`
 * (bit patterns), plus the caller's special values. At most 1 ulp where
 * 2^x is a normal float, 0 or the subnormal it would round to below -126,
 * +inf above FLT_MAX (or at the edge), NaN for NaN; and the same result
 * in every lane. Header-only: each test includes it once. */
#ifndef SG_TESTS_EXP2_CHECK_H
#define SG_TESTS_EXP2_CHECK_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define EXP2_MAX_LANES 16

/* y[0..lanes) = 2^x[0..lanes) by the kernel under test */
typedef void (*exp2_vec_fn)(const float *x, float *y);

typedef struct {
  const char *name;
  int lanes;
  exp2_vec_fn fn;
  long n, bad;
  double max_ulp;
} exp2_stats;

static float exp2_bits2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static int32_t exp2_f2ord(float f) { /* monotone integer order of floats */
  int32_t i;
  memcpy(&i, &f, sizeof i);
  return i < 0 ? (int32_t)(0x80000000u - (uint32_t)i) : i;
}

/* checks y = 2^x for one value */
static void exp2_check1(exp2_stats *s, float x, float y) {
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
    const double ulp = fabs((double)(exp2_f2ord(y) - exp2_f2ord(ref)));
    if (ulp > s->max_ulp) s->max_ulp = ulp;
    ok = ulp <= 1;
  }
  if (!ok && s->bad++ < 10)
    printf("  %s(%.9g) = %.9g, exp2 = %.9g\n", s->name, x, y, e);
}

static void exp2_check_vec(exp2_stats *s, const float *x) {
  float y[EXP2_MAX_LANES];
  s->fn(x, y);
  for (int l = 0; l < s->lanes; ++l) exp2_check1(s, x[l], y[l]);
}

/* feeds one value into the lane buffer; checks when it is full */
static void exp2_push(exp2_stats *s, float *x, int *k, float v) {
  x[(*k)++] = v;
  if (*k == s->lanes) exp2_check_vec(s, x), *k = 0;
}

/* the whole test; returns the process exit status */
static int exp2_check_run(const char *name, int lanes, exp2_vec_fn fn,
                          uint32_t pos_end, const float *sp, int nsp) {
  exp2_stats s = {name, lanes, fn, 0, 0, 0};
  float x[EXP2_MAX_LANES];
  int k = 0;
  const uint32_t neg_end = 0xC3160000u; /* -150 */
  for (uint32_t u = 0x80000000u; u <= neg_end; u += 64)
    exp2_push(&s, x, &k, exp2_bits2f(u));
  for (uint32_t u = 0; u <= pos_end; u += 64)
    exp2_push(&s, x, &k, exp2_bits2f(u));
  for (int i = 0; i < nsp; ++i) exp2_push(&s, x, &k, sp[i]);
  for (; k && k < lanes; ++k) x[k] = 0;
  if (k) exp2_check_vec(&s, x);
  /* lanes independent: one value in each lane position gives one result */
  for (int l = 0; l < lanes; ++l) {
    float a[EXP2_MAX_LANES], y[EXP2_MAX_LANES], y1[EXP2_MAX_LANES];
    for (int i = 0; i < lanes; ++i) a[i] = i == l ? -3.25f : -50.0f + (float)i;
    fn(a, y);
    for (int i = 0; i < lanes; ++i) a[i] = -3.25f;
    fn(a, y1);
    if (y[l] != y1[0]) ++s.bad;
  }
  printf("%s: %ld values, max %.0f ulp where normal, %ld bad\n", name, s.n,
         s.max_ulp, s.bad);
  return s.bad ? 1 : 0;
}

#endif
