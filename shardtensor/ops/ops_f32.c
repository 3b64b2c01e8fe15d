/* shardgrid — op kernels, f32 instantiation of ops_tmpl.h. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops_impl.h"
#include "sg_ops_inl.h"

/* y (m x n, row stride ldy) = bias + A B with A's element (r, c) at
 * a[r*ar + c*ac], B (k x n, row stride ldb): the register-blocked AVX-512
 * kernels where built (pointwise.c; 1 returned), else 0 and the caller
 * uses the BLAS. */
static inline int sg_gemm_fast(int64_t m, int64_t n, int64_t k, const float *a,
                               int64_t ar, int64_t ac, const float *b,
                               int64_t ldb, const float *bias, float *y,
                               int64_t ldy) {
  if (!sg_pw_f32_available()) return 0;
  sg_pw_gemm_f32(k, m, n, a, ar, ac, b, ldb, bias, y, ldy);
  return 1;
}
#define SG_GEMM_FAST sg_gemm_fast
#define SG_GEMM_OFF sg_pw_gemm_off_f32 /* direct convolution */
#define SG_WGRAD_OFF sg_pw_wgrad_acc_off_f32
#define SG_WGRAD_ACC sg_pw_wgrad_acc_f32
#define SG_WGRAD_SUM sg_pw_wgrad_sum_f32
#define SG_BF16_DIRECT 1 /* bf16 forward and dx (conv_bf16.c) */
#define R float
#define S f32
#define SG_GEMM cblas_sgemm
#define SG_ACT sg_act_f32
#define SG_ACT_GRAD sg_act_grad_f32
#include "ops_tmpl.h"
