/* sg_exp2_256_ps (shardtensor/ops/sg_exp256.h), the AVX2 attention
 * kernel's 2^x: against exp2 in double, rounded to f32, over every 64th
 * f32 in [-150, 127.5) (the softmax feeds it s - max <= 0, down to -inf),
 * plus the special values. At most 1 ulp where 2^x is a normal float, 0
 * or a subnormal below -126, NaN for NaN, 0 for -inf; the same result in
 * every lane (the harness: exp2_check.h). This file is compiled with
 * -mavx2 -mfma (tests/ops/CMakeLists.txt); skipped (exit 77) where the
 * compiler cannot target AVX2 or the CPU running it lacks AVX2 or FMA. */
#include <stdio.h>

#include "sg_exp256.h"

#if defined(__AVX2__) && defined(__FMA__)
#include "exp2_check.h"

static void exp2_256(const float *x, float *y) {
  _mm256_storeu_ps(y, sg_exp2_256_ps(_mm256_loadu_ps(x)));
}

int main(void) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    printf("exp2_256: the CPU has no AVX2 + FMA, skipped\n");
    return 77;
  }
  const float sp[] = {-INFINITY,   NAN,          -FLT_MAX, -1e30f,  -126.0f,
                      -126.25f,    -126.5f,      -126.75f, -127.0f, -127.5f,
                      -149.0f,     127.0f,       0.0f,     -0.0f,   FLT_MIN,
                      -FLT_MIN,    1e-30f,       -1e-30f,  0.5f,    -0.5f,
                      0.49999997f, -0.49999997f, 1.0f,     -1.0f};
  return exp2_check_run("exp2_256", 8, exp2_256,
                        0x42FEFFFFu /* just under 127.5 */, sp,
                        (int)(sizeof sp / sizeof sp[0]));
}
#else
int main(void) {
  printf("exp2_256: not built for AVX2 + FMA, skipped\n");
  return 77;
}
#endif
