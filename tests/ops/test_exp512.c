/* sg_exp2_512_ps (shardtensor/ops/sg_exp512.h), the fused attention's
 * vectorised 2^x: against exp2 in double, rounded to f32, over every 64th
 * f32 in [-150, 129] (the softmax feeds it s - max <= 0, down to -inf;
 * the rest is for other callers), plus the special values. At most 1 ulp
 * where 2^x is a normal float, exactly 0 below -126 up to the subnormal
 * it would round to, +inf from 128, NaN for NaN; and the same result in
 * every lane (the harness: exp2_check.h). Skipped (exit 77) where the
 * build does not target AVX-512F. */
#include <stdio.h>

#include "sg_exp512.h"

#if defined(__AVX512F__)
#include "exp2_check.h"

static void exp2_512(const float *x, float *y) {
  _mm512_storeu_ps(y, sg_exp2_512_ps(_mm512_loadu_ps(x)));
}

int main(void) {
  const float sp[] = {-INFINITY,   INFINITY,   NAN,         -FLT_MAX,
                      FLT_MAX,     -1e30f,     -87.33654f,  -87.3365f,
                      -87.34f,     -103.9f,    88.72283f,   88.7229f,
                      0.0f,        -0.0f,      FLT_MIN,     -FLT_MIN,
                      1e-30f,      -1e-30f,    0.34657359f, -0.34657359f,
                      -0.3465736f, 0.3465736f, 1.0f,        -1.0f};
  return exp2_check_run("exp2_512", 16, exp2_512, 0x43010000u /* 129 */, sp,
                        (int)(sizeof sp / sizeof sp[0]));
}
#else
int main(void) {
  printf("exp2_512: not built for AVX-512F, skipped\n");
  return 77;
}
#endif
