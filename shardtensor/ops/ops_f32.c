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
 * kernels where built (pointwise.c; 1 returned), or the AVX2 direct
 * convolution's (conv_avx2.c), else 0 and the caller uses the BLAS. */
static inline int sg_gemm_fast(int64_t m, int64_t n, int64_t k, const float *a,
                               int64_t ar, int64_t ac, const float *b,
                               int64_t ldb, const float *bias, float *y,
                               int64_t ldy) {
  if (sg_pw_f32_available()) {
    sg_pw_gemm_f32(k, m, n, a, ar, ac, b, ldb, bias, y, ldy);
    return 1;
  }
  /* On the AVX2 tier the direct convolution's kernel with the column
   * matrix's rows as its shifts: the same products summed in the same
   * order as the direct path, so a layer gives the same bits whichever
   * path its shard's shape picks (a forecast on w=3 equals one rank's:
   * the narrow shards take im2col). Up to 4096 rows (c <= 455 at 3x3),
   * else BLAS. */
  enum { MAXK = 4096 };
  if (k > MAXK || !sg_c2_conv_available()) return 0;
  int64_t off[MAXK];
  for (int64_t i = 0; i < k; ++i) off[i] = i * ldb;
  sg_c2_gemm_off_f32(k, m, n, a, ar, ac, b, off, bias, y, ldy);
  return 1;
}
#define SG_GEMM_FAST sg_gemm_fast
/* The direct convolution's kernels: AVX-512 (pointwise.c), or AVX2 + FMA
 * (conv_avx2.c) where g->avx2 (ops.c chose at the geometry: g in scope at
 * every use in ops_tmpl.h). The weight gradient's partials of a call come
 * from one tier and are summed by it. */
#define SG_GEMM_OFF(...) \
  (g->avx2 ? sg_c2_gemm_off_f32(__VA_ARGS__) : sg_pw_gemm_off_f32(__VA_ARGS__))
/* the AVX2 forward stores its rows where they go (no copy-out) */
#define SG_GEMM_ROWS_OK(g) ((g)->rowsout && !(g)->round)
#define SG_GEMM_ROWS sg_c2_gemm_rows_f32
#define SG_WGRAD_OFF sg_pw_wgrad_acc_off_f32
#define SG_WGRAD_ROWS sg_c2_wgrad_acc_rows_f32       /* where g->avx2 */
#define SG_WGRAD_ACC sg_pw_wgrad_acc_f32             /* im2col: AVX-512 only */
#define SG_WGRAD_KBLOCKS sg_c2_wgrad_kblocks         /* where g->avx2 */
#define SG_WGRAD_SUM_SLOTS sg_c2_wgrad_sum_slots_f32 /* where g->avx2 */
#define SG_WGRAD_SUM(...)                     \
  (g->avx2 ? sg_c2_wgrad_sum_f32(__VA_ARGS__) \
           : sg_pw_wgrad_sum_f32(__VA_ARGS__))
#define SG_BF16_DIRECT 1 /* bf16 forward and dx (conv_bf16.c) */
#define R float
#define S f32
#define SG_GEMM cblas_sgemm
#define SG_ACT sg_act_f32
#define SG_ACT_GRAD sg_act_grad_f32
#include "ops_tmpl.h"
