/* shardgrid — cuFFT local transforms of the distributed FFT (CUDA builds).
 *
 * A stage of the host planner (the dims whole on a rank) runs as 1-D cuFFT
 * transforms: the r2c (c2r) along the last dim and c2c along every other
 * transformed dim, each a cufftPlanMany over the rows of the block (one
 * call when the dim is innermost, else one call per outer index with the
 * inner elements as the batch). Transposes are staged through the host
 * (fft.c). Compiled only with SG_ENABLE_CUDA; on a machine without a GPU the
 * plan reports SG_ERR_NO_DEVICE before any of this runs. */
#include <cuda_runtime_api.h>
#include <cufft.h>
#include <stdlib.h>
#include <string.h>

#include "fft_impl.h"

typedef struct sg_fft_cuda_sub {
  cufftHandle h, hb; /* hb: the c2r of a kind-0 sub */
  int kind;          /* 0 r2c/c2r (last dim), 1 c2c */
  int64_t outer;     /* calls (1 when the dim is innermost) */
  int64_t step;      /* elements between consecutive calls (in and out) */
  int64_t step_out;
} sg_fft_cuda_sub;

struct sg_fft_cuda_stage {
  int f64, r2c, nsub;
  sg_fft_cuda_sub sub[SG_FFT_MAX_DIMS];
  size_t in_bytes; /* complex input bytes of the backward (for the copy) */
};

static int64_t prodr(const int64_t *v, int a, int b) {
  int64_t p = 1;
  for (int i = a; i < b; ++i) p *= v[i];
  return p;
}

sg_status sg_fft_cuda_stage_create(int f64, int r2c, int nd,
                                   const int64_t *in_shape,
                                   const int64_t *out_shape, int nt,
                                   const int *tdims, sg_fft_cuda_stage **out) {
  sg_status st = SG_OK;
  sg_fft_cuda_stage *s = calloc(1, sizeof *s);
  if (!s) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  s->f64 = f64;
  s->r2c = r2c;
  s->in_bytes = (size_t)prodr(out_shape, 0, nd) * (f64 ? 16 : 8);
  for (int i = nt - 1; i >= 0; --i) { /* last dim first (the r2c) */
    int d = tdims[i];
    sg_fft_cuda_sub *u = &s->sub[s->nsub];
    u->h = 0;
    u->hb = 0;
    int64_t n = in_shape[d];
    int64_t inner = prodr(out_shape, d + 1, nd), outer = prodr(out_shape, 0, d);
    if (n > 0x7fffffff || inner > 0x7fffffff || outer > 0x7fffffff)
      SG_RAISE(SG_ERR_NOT_SUPPORTED, "cuFFT stage too large for int sizes");
    int ni = (int)n;
    SG_CUFFT(cufftCreate(&u->h));
    ++s->nsub;
    if (r2c && d == nd - 1) {
      int nh = (int)(n / 2 + 1);
      int rows = (int)outer;
      u->kind = 0;
      u->outer = 1;
      SG_CUFFT(cufftPlanMany(&u->h, 1, &ni, &ni, 1, ni, &nh, 1, nh,
                             f64 ? CUFFT_D2Z : CUFFT_R2C, rows));
      SG_CUFFT(cufftCreate(&u->hb));
      SG_CUFFT(cufftPlanMany(&u->hb, 1, &ni, &nh, 1, nh, &ni, 1, ni,
                             f64 ? CUFFT_Z2D : CUFFT_C2R, rows));
    } else {
      u->kind = 1;
      if (inner == 1) {
        u->outer = 1;
        SG_CUFFT(cufftPlanMany(&u->h, 1, &ni, &ni, 1, ni, &ni, 1, ni,
                               f64 ? CUFFT_Z2Z : CUFFT_C2C, (int)outer));
      } else {
        u->outer = outer;
        u->step = n * inner;
        u->step_out = n * inner;
        SG_CUFFT(cufftPlanMany(&u->h, 1, &ni, &ni, (int)inner, 1, &ni,
                               (int)inner, 1, f64 ? CUFFT_Z2Z : CUFFT_C2C,
                               (int)inner));
      }
    }
  }
  *out = s;
  return SG_OK;
fail:
  sg_fft_cuda_stage_destroy(&s);
  return st;
}

sg_status sg_fft_cuda_stage_destroy(sg_fft_cuda_stage **sp) {
  if (!sp || !*sp) return SG_OK;
  sg_fft_cuda_stage *s = *sp;
  for (int i = 0; i < s->nsub; ++i) {
    if (s->sub[i].h) cufftDestroy(s->sub[i].h);
    if (s->sub[i].hb) cufftDestroy(s->sub[i].hb);
  }
  free(s);
  *sp = NULL;
  return SG_OK;
}

static sg_status c2c(const sg_fft_cuda_stage *s, const sg_fft_cuda_sub *u,
                     void *in, void *out, int dir) {
  sg_status st = SG_OK;
  size_t es = s->f64 ? sizeof(cufftDoubleComplex) : sizeof(cufftComplex);
  for (int64_t o = 0; o < u->outer; ++o) {
    char *pi = (char *)in + (size_t)(o * u->step) * es;
    char *po = (char *)out + (size_t)(o * u->step_out) * es;
    if (s->f64)
      SG_CUFFT(cufftExecZ2Z(u->h, (cufftDoubleComplex *)pi,
                            (cufftDoubleComplex *)po, dir));
    else
      SG_CUFFT(cufftExecC2C(u->h, (cufftComplex *)pi, (cufftComplex *)po, dir));
  }
fail:
  return st;
}

sg_status sg_fft_cuda_stage_exec(sg_fft_cuda_stage *s, int fwd, void *in,
                                 void *out) {
  sg_status st = SG_OK;
  if (fwd) {
    for (int i = 0; i < s->nsub; ++i) {
      sg_fft_cuda_sub *u = &s->sub[i];
      void *src = i == 0 ? in : out;
      if (u->kind == 0) {
        if (s->f64)
          SG_CUFFT(cufftExecD2Z(u->h, (cufftDoubleReal *)src,
                                (cufftDoubleComplex *)out));
        else
          SG_CUFFT(cufftExecR2C(u->h, (cufftReal *)src, (cufftComplex *)out));
      } else {
        SG_TRY(c2c(s, u, src, out, CUFFT_FORWARD));
      }
    }
  } else {
    /* c2c inverses in place on the (scratch) input, then the c2r or a copy */
    for (int i = s->nsub - 1; i >= 0; --i) {
      sg_fft_cuda_sub *u = &s->sub[i];
      if (u->kind == 1) SG_TRY(c2c(s, u, in, in, CUFFT_INVERSE));
    }
    if (s->r2c) {
      const sg_fft_cuda_sub *u = &s->sub[0];
      if (s->f64)
        SG_CUFFT(cufftExecZ2D(u->hb, (cufftDoubleComplex *)in,
                              (cufftDoubleReal *)out));
      else
        SG_CUFFT(cufftExecC2R(u->hb, (cufftComplex *)in, (cufftReal *)out));
    } else {
      SG_CUDA(cudaMemcpy(out, in, s->in_bytes, cudaMemcpyDeviceToDevice));
    }
  }
fail:
  return st;
}
