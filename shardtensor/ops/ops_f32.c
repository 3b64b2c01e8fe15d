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

#define R float
#define S f32
#define SG_GEMM cblas_sgemm
#define SG_ACT sg_act_f32
#define SG_ACT_GRAD sg_act_grad_f32
#include "ops_tmpl.h"
