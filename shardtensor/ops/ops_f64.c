/* shardgrid — op kernels, f64 instantiation of ops_tmpl.h. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops_impl.h"
#include "sg_ops_inl.h"

#define SG_GEMM_FAST(m, n, k, a, ar, ac, b, ldb, bias, y, ldy) 0
#define SG_WGRAD_ACC(cin, cout, np, x, ldx, dy, ldd, part) ((void)0)
#define SG_WGRAD_SUM(cin, cout, part, dw) ((void)0)
#define R double
#define S f64
#define SG_GEMM cblas_dgemm
#define SG_ACT sg_act_f64
#define SG_ACT_GRAD sg_act_grad_f64
#include "ops_tmpl.h"
