/* shardgrid — internals of the host FFT plan (not installed): the plan and
 * its stages, shared by fft.c (planning, queries) and fft_exec.c (FFTW
 * stage plans, execution). fft_impl.h holds what the CUDA code shares. */
#ifndef SG_FFT_PLAN_IMPL_H
#define SG_FFT_PLAN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "fft_impl.h"
#include "sg_config.h"

#define SG_FFT_MAX_STAGES 16

enum { STAGE_FFT = 0, STAGE_REDIST = 1 };

typedef struct sg_fft_stage {
  int kind;
  /* FFT */
  int nt, tdims[SG_FFT_MAX_DIMS]; /* array dims (1-based) transformed */
  int r2c;                        /* the first stage: real <-> complex */
  int64_t in_shape[SG_FFT_ND], out_shape[SG_FFT_ND]; /* elements */
  int empty;
  void *pf, *pb; /* fftw(f)_plan: forward (r2c / c2c -1), backward */
  /* The pruned first stage as a matrix product (fft_dft.c): out_shape's
   * last dim is then the kept modes, not n/2 + 1. dft_f: n x 2K (padded),
   * dft_b: 2K x n (padded), in the plan's dtype. */
  int dft;
  void *dft_f, *dft_b;
  /* Blocked c2c over one dim that is not innermost, viewed as
   * (outer, n, inner): `bw` columns at a time are gathered into a
   * thread's tile (bw rows of n, leading dimension ld), transformed there
   * contiguously and scattered back. A strided FFTW plan over the whole
   * block instead walks columns with a stride of inner elements, which for
   * a power-of-two inner (64 complex f32 = 512 bytes) thrashes the caches:
   * 256 x (32, 256, 64) took 7-11 ms strided vs 0.7 ms blocked. */
  int blocked;
  int64_t b_outer, b_n, b_inner, b_w, b_ld;
  void *bpf, *bpb, *brf, *brb; /* plans for bw columns and for the last
                                  * tile (bw + inner % bw columns) */
  /* REDIST */
  sg_fft_redist rd;
} sg_fft_stage;

struct sg_fft_plan {
  sg_fft_desc desc;
  sg_fft_axes axes;
  int D;
  size_t real_size; /* bytes of one scalar */
  sg_fft_layout real_layout, spec_layout;
  int64_t real_off[SG_FFT_MAX_DIMS], real_len[SG_FFT_MAX_DIMS];
  int64_t spec_off[SG_FFT_MAX_DIMS], spec_len[SG_FFT_MAX_DIMS];
  sg_fft_map kmap[SG_FFT_MAX_DIMS];
  int nstages;
  sg_fft_stage st[SG_FFT_MAX_STAGES];
  void *A, *B, *S, *R;
  void *T;           /* tiles of the blocked stages, one per thread */
  size_t bytes_tile; /* bytes of one thread's tile */
  int nth;           /* FFTW / OpenMP threads */
  /* Cache blocking (host): the stages are planned for cb batch elements
   * and run chunk by chunk over the user's blocks (batch is their outer
   * dim), so a chunk's intermediate blocks, messages and tiles stay in the
   * cache between stages instead of streaming the whole block through
   * memory once per stage. cb divides batch and is the same on every
   * rank (it is derived from global sizes): each chunk's transposes are
   * collective. */
  int64_t cb, nchunk;
  void *W; /* one chunk of spectral data (forward adjoint) */
  size_t bytes_ab;
  int cuda;      /* CUDA plan: x, y are device pointers */
  int devst;     /* planned as a device plan (SG_FFT_DEVICE_STAGES, CUDA) */
  void *Ad, *Bd; /* device scratch */
  void *Sd, *Rd; /* device messages of the transposes (fft_dev.c) */
  sg_fft_cuda_stage *cst[SG_FFT_MAX_STAGES];
  double fwd_scale, inv_scale;
  double t_fft, t_xpose;
  int ntrans;
  int64_t bytes_moved;
};

/* ---- small helpers ------------------------------------------------------- */

static inline int64_t sg_fft_prod64(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= v[i];
  return p;
}

static inline int64_t sg_fft_halved(int64_t n) { return n / 2 + 1; }

/* ---- fft_exec.c: FFTW stage plans ---------------------------------------- */

/* Does stage s run blocked (see sg_fft_stage)? Sets its tile geometry and
 * returns the bytes of one thread's tile (0: not blocked). */
size_t sg_fft_stage_block_geometry(sg_fft_plan_t p, sg_fft_stage *s);
/* The FFTW plans of FFT stage s (in, out: the buffers it runs between). */
sg_status sg_fft_stage_make_fftw(sg_fft_plan_t p, sg_fft_stage *s, void *in,
                                 void *out);
/* Free the FFTW plans (or the redistribution) of stage s. */
void sg_fft_stage_free(sg_fft_plan_t p, sg_fft_stage *s);

/* Execute FFT stage s on host memory (FFTW, or the DFT product). */
void sg_fft_stage_exec_host(sg_fft_plan_t p, const sg_fft_stage *s, int fwd,
                            const void *in, void *out);

/* ---- fft_dev.c: a device-staged plan on device buffers -------------------- */

/* which: 0 forward, 1 inverse, 2 forward adjoint, 3 inverse adjoint (the
 * plan's scaling and weights included), from in to out (in preserved).
 * grp[a]: the comm layer's group of axis a (its communicator the plan's
 * axis; NULL where the axis has one rank). A CUDA plan runs cuFFT and the
 * kernels of cuda/fft_dev.cu on device pointers and moves the transposes'
 * messages through the groups (NCCL on device buffers); a host plan made
 * with SG_FFT_DEVICE_STAGES runs the same steps on host memory (FFTW, the
 * SG_HD functions in host loops, MPI through the comm layer). Collective
 * over the plan's axes. */
sg_status sg_fft_dev_run(sg_fft_plan_t p, sg_group_t const *grp, int which,
                         const void *in, void *out);

/* ---- fft_dft.c: the pruned first stage as a matrix product --------------- */

/* Should the pruned r2c of a dim of length n keeping keep modes run as a
 * product (SG_FFT_DFT=0 / 1 overrides)? */
int sg_fft_dft_wanted(int64_t n, int64_t keep);
/* Its matrices (s->dft set, shapes planned). */
sg_status sg_fft_stage_make_dft(sg_fft_plan_t p, sg_fft_stage *s);
void sg_fft_stage_free_dft(sg_fft_stage *s);
/* The f32 product on AVX2 + FMA (dft_avx2.c), the portable kernel's bits:
 * out[r, j] = sum_s in[r, s] m[s, j] for r < rows, j < w; m's rows wp
 * (>= w, a multiple of 16, zero padded) apart. */
int sg_dft_avx2_built(void);
void sg_dft_apply_avx2_f32(int nth, int64_t rows, int64_t S, int64_t w,
                           int64_t wp, const float *in, int64_t is,
                           const float *m, float *out, int64_t os);
/* Forward: real rows -> kept modes; backward: kept modes -> real rows. */
void sg_fft_stage_exec_dft(sg_fft_plan_t p, const sg_fft_stage *s, int fwd,
                           const void *in, void *out);

#endif /* SG_FFT_PLAN_IMPL_H */
