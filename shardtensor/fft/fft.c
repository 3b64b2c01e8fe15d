/* shardgrid — distributed real-to-complex FFT plans (FFTW on the host).
 *
 * A plan is a list of stages computed once: local FFT stages (one FFTW guru
 * plan over every dim that is whole on the rank and not yet transformed;
 * the first one is the r2c over the last dim) and transposes (one axis moves
 * from the next dim to transform to a dim already transformed). Truncated
 * modes are dropped when the next transpose packs its messages; the inverse
 * runs the stages backwards and zero-pads when it unpacks. */
#include <fftw3.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fft_impl.h"
#include "sg_config.h"
#include "sg_shardtensor.h"

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
  void *T;        /* tiles of the blocked stages, one per thread */
  size_t bytes_tile; /* bytes of one thread's tile */
  int nth;        /* FFTW / OpenMP threads */
  /* Cache blocking (host): the stages are planned for cb batch elements
   * and run chunk by chunk over the user's blocks (batch is their outer
   * dim), so a chunk's intermediate blocks, messages and tiles stay in the
   * cache between stages instead of streaming the whole block through
   * memory once per stage. cb divides batch and is the same on every
   * rank (it is derived from global sizes): each chunk's transposes are
   * collective. */
  int64_t cb, nchunk;
  void *W;        /* one chunk of spectral data (forward adjoint) */
  size_t bytes_ab;
  int cuda;                /* CUDA plan: x, y are device pointers */
  void *Ad, *Bd;           /* device scratch */
  sg_fft_cuda_stage *cst[SG_FFT_MAX_STAGES];
  double fwd_scale, inv_scale;
  double t_fft, t_xpose;
  int ntrans;
  int64_t bytes_moved;
};

/* ---- FFTW threads ---------------------------------------------------------- */

static pthread_once_t fftw_once = PTHREAD_ONCE_INIT;
static int fftw_threads_ok = 0;
static void fftw_threads_init(void) {
  fftw_threads_ok = fftw_init_threads() != 0 && fftwf_init_threads() != 0;
}

/* ---- small helpers ---------------------------------------------------------- */

static int64_t prod64(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= v[i];
  return p;
}

void sg_fft_desc_init(sg_fft_desc *desc) {
  memset(desc, 0, sizeof *desc);
  desc->dtype = SG_DTYPE_F64;
  desc->device = sg_device_host();
  desc->ndim = 2;
  desc->batch = 1;
  for (int d = 0; d < SG_FFT_MAX_DIMS; ++d) desc->split[d] = -1;
  desc->norm = SG_FFT_NORM_BACKWARD;
}

static int64_t halved(int64_t n) { return n / 2 + 1; }

/* Is dim d of the layout split by any axis? */
static int is_whole(const sg_fft_layout *l, int d) { return l->nsplit[d] == 0; }

/* ---- FFTW stage plans -------------------------------------------------------- */

static void strides_of(const int64_t *shape, int nd, int64_t *st) {
  st[nd - 1] = 1;
  for (int d = nd - 2; d >= 0; --d) st[d] = st[d + 1] * shape[d + 1];
}

/* Does stage s run blocked (see sg_fft_stage)? Sets its tile geometry and
 * returns the bytes of one thread's tile (0: not blocked). */
static size_t stage_block_geometry(sg_fft_plan_t p, sg_fft_stage *s) {
  const int nd = p->D + 1;
  s->blocked = 0;
  if (s->kind != STAGE_FFT || s->r2c || s->empty || s->nt != 1 ||
      s->tdims[0] >= nd - 1)
    return 0;
  const int t = s->tdims[0];
  const size_t cs = 2 * p->real_size;
  s->b_outer = prod64(s->in_shape, t);
  s->b_n = s->in_shape[t];
  s->b_inner = prod64(s->in_shape + t + 1, nd - t - 1);
  if (s->b_inner < 2) return 0;
  /* 128 bytes of columns (two cache lines per row read); rows of the tile
   * padded by 64 bytes so that walking down a column of the tile does not
   * hit one cache set */
  int64_t w = (int64_t)(128 / cs);
  s->b_w = w < s->b_inner ? w : s->b_inner;
  s->b_ld = s->b_n + (int64_t)(64 / cs);
  s->blocked = 1;
  /* the last tile takes the columns left over (b_w + inner % b_w wide), so
   * a rank with one column more than its peer (65 of 129) runs no extra
   * one-column pass over every row */
  size_t bytes = (size_t)((s->b_w + s->b_inner % s->b_w) * s->b_ld) * cs;
  return (bytes + 63) / 64 * 64;
}

static sg_status stage_make_blocked(sg_fft_plan_t p, sg_fft_stage *s) {
  sg_status st = SG_OK;
  const int64_t rest = s->b_inner % s->b_w;
  fftw_iodim64 dim = {s->b_n, 1, 1};
  fftw_iodim64 how = {s->b_w, s->b_ld, s->b_ld},
               hrest = {s->b_w + rest, s->b_ld, s->b_ld}; /* the last tile */
  unsigned flags = (p->desc.flags & SG_FFT_MEASURE) ? FFTW_MEASURE
                                                     : FFTW_ESTIMATE;
  /* threads run over tiles; each tile's transform is single-threaded */
  if (p->desc.dtype == SG_DTYPE_F64) {
    fftw_complex *t = p->T;
    fftw_plan_with_nthreads(1);
    SG_FFTW_PLAN(s->bpf, fftw_plan_guru64_dft(1, &dim, 1, &how, t, t,
                                              FFTW_FORWARD, flags));
    SG_FFTW_PLAN(s->bpb, fftw_plan_guru64_dft(1, &dim, 1, &how, t, t,
                                              FFTW_BACKWARD, flags));
    if (rest) {
      SG_FFTW_PLAN(s->brf, fftw_plan_guru64_dft(1, &dim, 1, &hrest, t, t,
                                                FFTW_FORWARD, flags));
      SG_FFTW_PLAN(s->brb, fftw_plan_guru64_dft(1, &dim, 1, &hrest, t, t,
                                                FFTW_BACKWARD, flags));
    }
  } else {
    fftwf_complex *t = p->T;
    fftwf_plan_with_nthreads(1);
    SG_FFTW_PLAN(s->bpf, fftwf_plan_guru64_dft(1, &dim, 1, &how, t, t,
                                               FFTW_FORWARD, flags));
    SG_FFTW_PLAN(s->bpb, fftwf_plan_guru64_dft(1, &dim, 1, &how, t, t,
                                               FFTW_BACKWARD, flags));
    if (rest) {
      SG_FFTW_PLAN(s->brf, fftwf_plan_guru64_dft(1, &dim, 1, &hrest, t, t,
                                                 FFTW_FORWARD, flags));
      SG_FFTW_PLAN(s->brb, fftwf_plan_guru64_dft(1, &dim, 1, &hrest, t, t,
                                                 FFTW_BACKWARD, flags));
    }
  }
fail:
  return st;
}

static sg_status stage_make_fftw(sg_fft_plan_t p, sg_fft_stage *s, void *in,
                                 void *out) {
  sg_status st = SG_OK;
  const int nd = p->D + 1;
  if (s->blocked) return stage_make_blocked(p, s);
  fftw_iodim64 dims[SG_FFT_MAX_DIMS], how[SG_FFT_ND];
  int64_t ist[SG_FFT_ND], ost[SG_FFT_ND];
  strides_of(s->in_shape, nd, ist);
  strides_of(s->out_shape, nd, ost);
  int nh = 0, is_t[SG_FFT_ND] = {0};
  for (int i = 0; i < s->nt; ++i) {
    int d = s->tdims[i];
    is_t[d] = 1;
    dims[i].n = s->in_shape[d];
    dims[i].is = ist[d];
    dims[i].os = ost[d];
  }
  for (int d = 0; d < nd; ++d) {
    if (is_t[d]) continue;
    how[nh].n = s->in_shape[d];
    how[nh].is = ist[d];
    how[nh].os = ost[d];
    ++nh;
  }
  /* backward dims: in/out strides swapped */
  fftw_iodim64 bdims[SG_FFT_MAX_DIMS], bhow[SG_FFT_ND];
  for (int i = 0; i < s->nt; ++i) {
    bdims[i] = dims[i];
    bdims[i].is = dims[i].os;
    bdims[i].os = dims[i].is;
  }
  for (int i = 0; i < nh; ++i) {
    bhow[i] = how[i];
    bhow[i].is = how[i].os;
    bhow[i].os = how[i].is;
  }
  unsigned flags = (p->desc.flags & SG_FFT_MEASURE) ? FFTW_MEASURE
                                                     : FFTW_ESTIMATE;
  int nth = p->nth;
  if (p->desc.dtype == SG_DTYPE_F64) {
    fftw_plan_with_nthreads(nth);
    if (s->r2c) {
      SG_FFTW_PLAN(s->pf, fftw_plan_guru64_dft_r2c(s->nt, dims, nh, how, in,
                                                   out, flags));
      SG_FFTW_PLAN(s->pb, fftw_plan_guru64_dft_c2r(
                              s->nt, bdims, nh, bhow, out, in,
                              flags | FFTW_DESTROY_INPUT));
    } else {
      SG_FFTW_PLAN(s->pf, fftw_plan_guru64_dft(s->nt, dims, nh, how, in, out,
                                               FFTW_FORWARD, flags));
      SG_FFTW_PLAN(s->pb, fftw_plan_guru64_dft(s->nt, bdims, nh, bhow, out,
                                               in, FFTW_BACKWARD, flags));
    }
  } else {
    fftwf_plan_with_nthreads(nth);
    if (s->r2c) {
      SG_FFTW_PLAN(s->pf, fftwf_plan_guru64_dft_r2c(s->nt, dims, nh, how, in,
                                                    out, flags));
      SG_FFTW_PLAN(s->pb, fftwf_plan_guru64_dft_c2r(
                              s->nt, bdims, nh, bhow, out, in,
                              flags | FFTW_DESTROY_INPUT));
    } else {
      SG_FFTW_PLAN(s->pf, fftwf_plan_guru64_dft(s->nt, dims, nh, how, in, out,
                                                FFTW_FORWARD, flags));
      SG_FFTW_PLAN(s->pb, fftwf_plan_guru64_dft(s->nt, bdims, nh, bhow, out,
                                                in, FFTW_BACKWARD, flags));
    }
  }
fail:
  return st;
}

static void stage_free(sg_fft_plan_t p, sg_fft_stage *s) {
  if (s->kind == STAGE_FFT) {
    void **pl[6] = {&s->pf, &s->pb, &s->bpf, &s->bpb, &s->brf, &s->brb};
    for (int i = 0; i < 6; ++i) {
      if (!*pl[i]) continue;
      if (p->desc.dtype == SG_DTYPE_F64) fftw_destroy_plan((fftw_plan)*pl[i]);
      else fftwf_destroy_plan((fftwf_plan)*pl[i]);
      *pl[i] = NULL;
    }
  } else {
    sg_fft_redist_free(&s->rd);
  }
}

static int misaligned(sg_fft_plan_t p, const void *ptr) {
  if (p->desc.dtype == SG_DTYPE_F64)
    return fftw_alignment_of((double *)(uintptr_t)ptr) != 0;
  return fftwf_alignment_of((float *)(uintptr_t)ptr) != 0;
}

/* Tile gather / scatter of a blocked stage: nb columns of an (n, inner)
 * slice (row stride `inner` elements) to / from nb tile rows of length n
 * (stride ld). E is the complex element type. */
#define SG_FFT_TILE_FNS(E, sfx)                                               \
  static void tile_gather_##sfx(E *restrict tile, const E *restrict src,    \
                                int64_t n, int64_t inner, int64_t nb,       \
                                int64_t ld) {                               \
    for (int64_t i = 0; i < n; ++i) {                                       \
      const E *row = src + i * inner;                                       \
      for (int64_t k = 0; k < nb; ++k) tile[k * ld + i] = row[k];           \
    }                                                                       \
  }                                                                         \
  static void tile_scatter_##sfx(E *restrict dst, const E *restrict tile,   \
                                 int64_t n, int64_t inner, int64_t nb,      \
                                 int64_t ld) {                              \
    for (int64_t i = 0; i < n; ++i) {                                       \
      E *row = dst + i * inner;                                             \
      for (int64_t k = 0; k < nb; ++k) row[k] = tile[k * ld + i];           \
    }                                                                       \
  }
typedef struct { float re, im; } sg_fft_c32;
typedef struct { double re, im; } sg_fft_c64;
SG_FFT_TILE_FNS(sg_fft_c32, c32)
SG_FFT_TILE_FNS(sg_fft_c64, c64)

/* A blocked c2c stage (in may equal out: tiles are disjoint columns). */
static void stage_exec_blocked(sg_fft_plan_t p, const sg_fft_stage *s,
                               int fwd, const void *in, void *out) {
  const int64_t n = s->b_n, inner = s->b_inner, bw = s->b_w, ld = s->b_ld;
  const int64_t nblk = inner / bw, ntask = s->b_outer * nblk;
  const int f64 = p->desc.dtype == SG_DTYPE_F64;
  const size_t cs = 2 * p->real_size;
  void *full = fwd ? s->bpf : s->bpb, *part = fwd ? s->brf : s->brb;
#pragma omp parallel for schedule(static) num_threads(p->nth) \
    if (p->nth > 1 && ntask > 1 && n * inner * s->b_outer > 32768)
  for (int64_t task = 0; task < ntask; ++task) {
    const int64_t o = task / nblk, j0 = (task % nblk) * bw;
    const int64_t nb = task % nblk == nblk - 1 ? inner - j0 : bw;
    char *tile = (char *)p->T + (size_t)omp_get_thread_num() * p->bytes_tile;
    const size_t at = (size_t)(o * n * inner + j0) * cs;
    void *plan = nb == bw ? full : part;
    if (f64) {
      tile_gather_c64((sg_fft_c64 *)tile,
                      (const sg_fft_c64 *)((const char *)in + at), n, inner,
                      nb, ld);
      fftw_execute_dft((fftw_plan)plan, (fftw_complex *)tile,
                       (fftw_complex *)tile);
      tile_scatter_c64((sg_fft_c64 *)((char *)out + at),
                       (const sg_fft_c64 *)tile, n, inner, nb, ld);
    } else {
      tile_gather_c32((sg_fft_c32 *)tile,
                      (const sg_fft_c32 *)((const char *)in + at), n, inner,
                      nb, ld);
      fftwf_execute_dft((fftwf_plan)plan, (fftwf_complex *)tile,
                        (fftwf_complex *)tile);
      tile_scatter_c32((sg_fft_c32 *)((char *)out + at),
                       (const sg_fft_c32 *)tile, n, inner, nb, ld);
    }
  }
}

/* Execute an FFT stage; forward or backward. The plans were made on the
 * aligned scratch; misaligned user buffers bounce through a free scratch. */
static void stage_exec_fft(sg_fft_plan_t p, const sg_fft_stage *s, int fwd,
                           const void *in, void *out) {
  if (s->empty) return;
  if (s->blocked) {
    stage_exec_blocked(p, s, fwd, in, out);
    return;
  }
  const int nd = p->D + 1;
  size_t in_bytes, out_bytes;
  if (fwd) {
    in_bytes = (size_t)prod64(s->in_shape, nd) * p->real_size * (s->r2c ? 1 : 2);
    out_bytes = (size_t)prod64(s->out_shape, nd) * p->real_size * 2;
  } else {
    in_bytes = (size_t)prod64(s->out_shape, nd) * p->real_size * 2;
    out_bytes = (size_t)prod64(s->in_shape, nd) * p->real_size * (s->r2c ? 1 : 2);
  }
  void *scr[3] = {p->A, p->B, p->S};
  void *tin = (void *)(uintptr_t)in, *tout = out;
  int bounce_out = 0;
  if (misaligned(p, in)) {
    for (int i = 0; i < 3; ++i)
      if (scr[i] != out) { tin = scr[i]; break; }
    memcpy(tin, in, in_bytes);
  }
  if (misaligned(p, out)) {
    for (int i = 0; i < 3; ++i)
      if (scr[i] != tin) { tout = scr[i]; break; }
    bounce_out = 1;
  }
  if (p->desc.dtype == SG_DTYPE_F64) {
    if (s->r2c) {
      if (fwd) fftw_execute_dft_r2c((fftw_plan)s->pf, tin, tout);
      else fftw_execute_dft_c2r((fftw_plan)s->pb, tin, tout);
    } else {
      fftw_execute_dft(fwd ? (fftw_plan)s->pf : (fftw_plan)s->pb, tin, tout);
    }
  } else {
    if (s->r2c) {
      if (fwd) fftwf_execute_dft_r2c((fftwf_plan)s->pf, tin, tout);
      else fftwf_execute_dft_c2r((fftwf_plan)s->pb, tin, tout);
    } else {
      fftwf_execute_dft(fwd ? (fftwf_plan)s->pf : (fftwf_plan)s->pb, tin,
                        tout);
    }
  }
  if (bounce_out) memcpy(out, tout, out_bytes);
}

/* ---- planning ------------------------------------------------------------- */

static sg_status validate(const sg_fft_desc *d, const sg_fft_axes *ax) {
  sg_status st = SG_OK;
  if (d->dtype != SG_DTYPE_F32 && d->dtype != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_INVALID_ARG, "FFT dtype must be f32 or f64, got %s",
             sg_dtype_name(d->dtype));
  if (d->device.kind == SG_DEVICE_CUDA) {
#if !SG_HAVE_CUDA
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "distributed FFT on CUDA: shardgrid was "
             "built without CUDA (configure with -DSG_ENABLE_CUDA=ON)");
#endif
  } else if (d->device.kind != SG_DEVICE_HOST) {
    SG_RAISE(SG_ERR_INVALID_ARG, "unknown device kind %d", (int)d->device.kind);
  }
  if (d->ndim != 2 && d->ndim != 3)
    SG_RAISE(SG_ERR_INVALID_ARG, "FFT ndim must be 2 or 3, got %d", d->ndim);
  if (d->batch < 1)
    SG_RAISE(SG_ERR_INVALID_ARG, "FFT batch must be >= 1, got %lld",
             (long long)d->batch);
  if (d->chunk < 0 || (d->chunk > 0 && d->batch % d->chunk != 0))
    SG_RAISE(SG_ERR_INVALID_ARG,
             "FFT chunk %lld must divide the batch %lld (0: automatic)",
             (long long)d->chunk, (long long)d->batch);
  if (d->norm != SG_FFT_NORM_BACKWARD && d->norm != SG_FFT_NORM_NONE &&
      d->norm != SG_FFT_NORM_ORTHO)
    SG_RAISE(SG_ERR_INVALID_ARG, "unknown FFT norm %d", (int)d->norm);
  for (int i = 0; i < d->ndim; ++i) {
    if (d->shape[i] < 1)
      SG_RAISE(SG_ERR_SHAPE, "FFT shape[%d] must be >= 1, got %lld", i,
               (long long)d->shape[i]);
    int64_t maxk = i == d->ndim - 1 ? halved(d->shape[i]) : d->shape[i] / 2;
    if (d->keep[i] < 0 || d->keep[i] > maxk)
      SG_RAISE(SG_ERR_SHAPE,
               "FFT keep[%d] = %lld out of range [0, %lld] for length %lld%s",
               i, (long long)d->keep[i], (long long)maxk,
               (long long)d->shape[i],
               i == d->ndim - 1 ? " (halved dim)"
                                : " (keeps keep positive and keep negative)");
    int a = d->split[i];
    if (a < -1 || a >= ax->naxes)
      SG_RAISE(SG_ERR_INVALID_ARG, "FFT split[%d] = %d is not an axis", i, a);
    if (a >= 0 && ax->comm[a] == MPI_COMM_NULL)
      SG_RAISE(SG_ERR_INVALID_ARG, "FFT split[%d]: axis %d has no "
               "communicator", i, a);
    for (int j = 0; j < i; ++j)
      if (a >= 0 && d->split[j] == a)
        SG_RAISE(SG_ERR_INVALID_ARG, "FFT dims %d and %d are both split by "
                 "axis %d", j, i, a);
  }
fail:
  return st;
}

static int64_t kept_len(const sg_fft_desc *d, int i, int64_t full) {
  if (d->keep[i] == 0) return full;
  return i == d->ndim - 1 ? d->keep[i] : 2 * d->keep[i];
}

static void local_extents(sg_fft_plan_t p, const sg_fft_layout *l,
                          int64_t *len) {
  int64_t off[SG_FFT_MAX_DIMS], sh[SG_FFT_MAX_DIMS];
  sg_fft_layout_box(l, p->axes.size, p->axes.rank, off, sh);
  len[0] = p->cb;
  for (int d = 0; d < p->D; ++d) len[d + 1] = sh[d];
}

/* Pruned first stage: when the halved (last) dim is truncated and other
 * dims are whole in the real layout, the first stage transforms the last
 * dim alone, the kept prefix of it is cut out, and the following stages
 * transform only the kept columns (12 of 33 in a 64^2 FNO layer: about a
 * third less FFT work). Host plans only (on CUDA the cut would bounce
 * through the host). */
static int prune_first(const sg_fft_plan_t p) {
  const int D = p->D;
  if (p->cuda || D < 2) return 0;
  int64_t k = p->desc.keep[D - 1];
  if (k <= 0 || k >= halved(p->desc.shape[D - 1])) return 0;
  if (!is_whole(&p->real_layout, D - 1)) return 0;
  for (int d = 0; d < D - 1; ++d)
    if (is_whole(&p->real_layout, d)) return 1;
  return 0;
}

/* Batch elements per chunk: the largest divisor of batch whose chunk of
 * complex data (per rank, from global sizes so every rank agrees) fits in
 * SG_FFT_CHUNK_BYTES (default 512 KiB, a quarter of a core's L2; 0: one
 * chunk). Unsplit and CUDA plans run whole. */
static int64_t chunk_batch(const sg_fft_plan_t p) {
  const int64_t B = p->desc.batch;
  if (p->cuda || B <= 1) return B;
  if (p->desc.chunk > 0) return p->desc.chunk;
  /* unsplit and unpruned: one local FFT stage, which FFTW already blocks
   * itself */
  int split = prune_first(p);
  for (int d = 0; d < p->D; ++d) split |= p->real_layout.nsplit[d] > 0;
  if (!split) return B;
  double budget = 1 << 19;
  const char *e = getenv("SG_FFT_CHUNK_BYTES");
  if (e && *e) {
    char *end = NULL;
    double v = strtod(e, &end);
    if (end && *end == '\0' && v >= 0) budget = v;
  }
  if (budget <= 0) return B;
  double per = 2.0 * (double)p->real_size;
  for (int d = 0; d < p->D; ++d) per *= (double)p->desc.shape[d];
  for (int a = 0; a < p->axes.naxes; ++a) per /= (double)p->axes.size[a];
  int64_t target = (int64_t)(budget / per);
  if (target >= B) return B;
  if (target < 1) target = 1;
  for (int64_t c = target; c > 1; --c)
    if (B % c == 0) return c;
  return 1;
}

static sg_status plan_stages(sg_fft_plan_t p) {
  sg_status st = SG_OK;
  const int D = p->D, nd = D + 1;
  sg_fft_layout L = p->real_layout;
  int done[SG_FFT_MAX_DIMS] = {0}, first = 1;
  /* pending truncation from the last FFT stage: physical > logical */
  int pending = 0;
  int64_t phys[SG_FFT_ND];
  sg_fft_map pmap[SG_FFT_ND];
  memset(pmap, 0, sizeof pmap);
  size_t es = p->real_size; /* bytes per element: real, then complex */
  size_t maxab = 0, maxs = 0, maxr = 0;
  local_extents(p, &L, phys);
  maxab = (size_t)prod64(phys, nd) * es;
  for (;;) {
    int ndone = 0;
    for (int d = 0; d < D; ++d) ndone += done[d];
    if (ndone == D) break;
    if (p->nstages >= SG_FFT_MAX_STAGES - 1)
      SG_RAISE(SG_ERR_INTERNAL, "FFT planner made too many stages");
    int target = -1;
    if (first) {
      target = D - 1;
    } else {
      for (int d = 0; d < D; ++d)
        if (!done[d] && is_whole(&L, d)) target = d;
      if (target < 0) {
        int best = 1 << 30;
        for (int d = 0; d < D; ++d)
          if (!done[d] && L.nsplit[d] <= best) { best = L.nsplit[d]; target = d; }
      }
    }
    sg_fft_stage *s = &p->st[p->nstages];
    memset(s, 0, sizeof *s);
    if (is_whole(&L, target) && pending) {
      /* cut the kept modes out before transforming more dims locally */
      int64_t log[SG_FFT_ND];
      local_extents(p, &L, log);
      s->kind = STAGE_REDIST;
      SG_TRY(sg_fft_redist_init(&s->rd, &p->axes, nd, es, -1, 0, 0, phys, log,
                                pmap, 0, NULL));
      for (int d = 0; d < nd; ++d) phys[d] = log[d];
      memset(pmap, 0, sizeof pmap);
      pending = 0;
      p->nstages++;
      continue;
    }
    if (is_whole(&L, target)) {
      s->kind = STAGE_FFT;
      s->r2c = first;
      if (first && prune_first(p))
        s->tdims[s->nt++] = D;
      else
        for (int d = 0; d < D; ++d)
          if (!done[d] && is_whole(&L, d)) s->tdims[s->nt++] = d + 1;
      int64_t log[SG_FFT_ND];
      local_extents(p, &L, log);
      for (int d = 0; d < nd; ++d) s->in_shape[d] = s->out_shape[d] = log[d];
      if (first) s->out_shape[D] = halved(p->desc.shape[D - 1]);
      s->empty = prod64(s->in_shape, nd) == 0 || prod64(s->out_shape, nd) == 0;
      es = 2 * p->real_size;
      size_t ob = (size_t)prod64(s->out_shape, nd) * es;
      if (ob > maxab) maxab = ob;
      for (int d = 0; d < nd; ++d) phys[d] = s->out_shape[d];
      for (int i = 0; i < s->nt; ++i) {
        int d = s->tdims[i] - 1;
        done[d] = 1;
        int64_t full = (d == D - 1) ? halved(p->desc.shape[d]) : p->desc.shape[d];
        L.shape[d] = kept_len(&p->desc, d, full);
        if (d != D - 1 && p->desc.keep[d] > 0)
          pmap[d + 1] = (sg_fft_map){p->desc.keep[d], p->desc.shape[d]};
        if (L.shape[d] != full) pending = 1;
      }
      first = 0;
    } else {
      int g = L.split[target][L.nsplit[target] - 1];
      int dest = -1, best = 1 << 30;
      for (int d = 0; d < D; ++d)
        if (done[d] && L.nsplit[d] < best) { best = L.nsplit[d]; dest = d; }
      if (dest < 0) {
        best = 1 << 30;
        for (int d = 0; d < D; ++d)
          if (d != target && L.nsplit[d] <= best) { best = L.nsplit[d]; dest = d; }
      }
      if (dest < 0 || L.nsplit[dest] >= SG_FFT_MAX_DIMS)
        SG_RAISE(SG_ERR_INTERNAL, "FFT planner found no dim to transpose to");
      int64_t log[SG_FFT_ND];
      local_extents(p, &L, log);
      sg_fft_layout L2 = L;
      L2.nsplit[target]--;
      L2.split[dest][L2.nsplit[dest]++] = g;
      int64_t po, plen;
      sg_fft_layout_dim_box(&L2, target, p->axes.size, p->axes.rank, &po, &plen);
      s->kind = STAGE_REDIST;
      SG_TRY(sg_fft_redist_init(&s->rd, &p->axes, nd, es, g, target + 1,
                                dest + 1, phys, log, pmap,
                                !(p->desc.flags & SG_FFT_MPI_ALLTOALL), &plen));
      size_t ob = (size_t)prod64(s->rd.dst_shape, nd) * es;
      if (ob > maxab) maxab = ob;
      if ((size_t)s->rd.send_total * es > maxs) maxs = (size_t)s->rd.send_total * es;
      if ((size_t)s->rd.recv_total * es > maxr) maxr = (size_t)s->rd.recv_total * es;
      p->ntrans++;
      p->bytes_moved += (int64_t)((size_t)s->rd.send_total * es);
      for (int d = 0; d < nd; ++d) phys[d] = s->rd.dst_shape[d];
      memset(pmap, 0, sizeof pmap);
      pending = 0;
      L = L2;
    }
    p->nstages++;
  }
  if (pending) {
    sg_fft_stage *s = &p->st[p->nstages];
    memset(s, 0, sizeof *s);
    int64_t log[SG_FFT_ND];
    local_extents(p, &L, log);
    s->kind = STAGE_REDIST;
    SG_TRY(sg_fft_redist_init(&s->rd, &p->axes, nd, es, -1, 0, 0, phys, log,
                              pmap, 0, NULL));
    p->nstages++;
  }
  p->spec_layout = L;
  /* scratch: A/B hold any stage's block; S/R the messages (S also bounces) */
  if (maxs < maxab) maxs = maxab;
  if (maxr < 64) maxr = 64;
  p->bytes_ab = maxab < 64 ? 64 : maxab;
  SG_TRY(sg_malloc(sg_device_host(), p->bytes_ab, &p->A));
  SG_TRY(sg_malloc(sg_device_host(), p->bytes_ab, &p->B));
  SG_TRY(sg_malloc(sg_device_host(), maxs, &p->S));
  SG_TRY(sg_malloc(sg_device_host(), maxr, &p->R));
  if (p->cuda) {
#if SG_HAVE_CUDA
    SG_TRY(sg_malloc(p->desc.device, p->bytes_ab, &p->Ad));
    SG_TRY(sg_malloc(p->desc.device, p->bytes_ab, &p->Bd));
    for (int i = 0; i < p->nstages; ++i) {
      sg_fft_stage *s = &p->st[i];
      if (s->kind != STAGE_FFT || s->empty) continue;
      SG_TRY(sg_fft_cuda_stage_create(p->desc.dtype == SG_DTYPE_F64, s->r2c,
                                      nd, s->in_shape, s->out_shape, s->nt,
                                      s->tdims, &p->cst[i]));
    }
#endif
  } else {
    size_t tile = 0;
    for (int i = 0; i < p->nstages; ++i) {
      size_t b = stage_block_geometry(p, &p->st[i]);
      if (b > tile) tile = b;
    }
    p->bytes_tile = tile;
    if (tile)
      SG_TRY(sg_malloc(sg_device_host(), tile * (size_t)p->nth, &p->T));
    for (int i = 0; i < p->nstages; ++i)
      if (p->st[i].kind == STAGE_FFT && !p->st[i].empty)
        SG_TRY(stage_make_fftw(p, &p->st[i], p->A, p->B));
  }
fail:
  return st;
}

static sg_status plan_create_axes(MPI_Comm comm, const sg_fft_axes *axes,
                                  const sg_fft_desc *desc,
                                  sg_fft_plan_t *out) {
  sg_status st = SG_OK;
  struct sg_fft_plan *p = NULL;
  int agreed = 0;
  if (!out || !desc) SG_RAISE(SG_ERR_INVALID_ARG, "plan or desc is NULL");
  *out = NULL;
  SG_TRY(validate(desc, axes));
  pthread_once(&fftw_once, fftw_threads_init);
  if (!fftw_threads_ok)
    SG_RAISE(SG_ERR_FFTW, "fftw_init_threads failed");
  p = calloc(1, sizeof *p);
  if (!p) SG_RAISE(SG_ERR_ALLOC, "out of memory for an FFT plan");
  p->desc = *desc;
  p->axes = *axes;
  p->cuda = desc->device.kind == SG_DEVICE_CUDA;
  if (p->cuda) SG_TRY(sg_device_check(desc->device));
  p->D = desc->ndim;
  p->nth = desc->nthreads > 0 ? desc->nthreads : omp_get_max_threads();
  if (p->nth < 1) p->nth = 1;
  p->real_size = sg_dtype_size(desc->dtype);
  p->real_layout.ndim = p->D;
  for (int d = 0; d < p->D; ++d) {
    p->real_layout.shape[d] = desc->shape[d];
    int a = desc->split[d];
    if (a >= 0 && axes->size[a] > 1) {
      p->real_layout.nsplit[d] = 1;
      p->real_layout.split[d][0] = a;
    }
    int64_t full = d == p->D - 1 ? halved(desc->shape[d]) : desc->shape[d];
    p->kmap[d] = (d != p->D - 1 && desc->keep[d] > 0)
                     ? (sg_fft_map){desc->keep[d], desc->shape[d]}
                     : (sg_fft_map){0, full};
  }
  double n = 1;
  for (int d = 0; d < p->D; ++d) n *= (double)desc->shape[d];
  p->fwd_scale = desc->norm == SG_FFT_NORM_ORTHO ? 1.0 / sqrt(n) : 1.0;
  p->inv_scale = desc->norm == SG_FFT_NORM_NONE
                     ? 1.0
                     : (desc->norm == SG_FFT_NORM_ORTHO ? 1.0 / sqrt(n) : 1.0 / n);
  /* planning makes collective calls (shared windows): agree first, so a
   * rank with a bad description cannot leave its peers waiting there */
  st = sg_fft_agree(comm, st);
  agreed = 1;
  if (st != SG_OK) goto fail;
  agreed = 0;
  p->cb = chunk_batch(p);
  p->nchunk = p->desc.batch / p->cb;
  SG_TRY(plan_stages(p));
  p->bytes_moved *= p->nchunk;
  if (p->nchunk > 1)
    SG_TRY(sg_malloc(sg_device_host(), p->bytes_ab, &p->W));
  sg_fft_layout_box(&p->real_layout, p->axes.size, p->axes.rank, p->real_off,
                    p->real_len);
  sg_fft_layout_box(&p->spec_layout, p->axes.size, p->axes.rank, p->spec_off,
                    p->spec_len);
fail:
  if (!agreed) st = sg_fft_agree(comm, st);
  if (st != SG_OK) {
    sg_fft_plan_destroy(&p);
    return st;
  }
  *out = p;
  return st;
}

sg_status sg_fft_plan_create_comms(MPI_Comm comm, int naxes,
                                   const MPI_Comm *axes,
                                   const sg_fft_desc *desc,
                                   sg_fft_plan_t *plan) {
  sg_fft_axes ax;
  sg_status st = sg_fft_axes_from_comms(&ax, naxes, axes);
  if (st != SG_OK) return sg_fft_agree(comm, st);
  return plan_create_axes(comm, &ax, desc, plan);
}

sg_status sg_fft_mesh_axes(sg_mesh_t mesh, int n, const char *const *dims,
                           MPI_Comm *axes, int *split, MPI_Comm *comm, unsigned *mask) {
  sg_status st = SG_OK;
  unsigned found = 0;
  sg_group_t g = NULL;
  if (!mesh || !dims || !axes || !split || !comm || n < 1 || n > SG_FFT_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_fft_mesh_axes: NULL argument or %d dims (1..%d)", n,
             SG_FFT_MAX_DIMS);
  for (int d = 0; d < n; ++d) {
    int m = dims[d] ? sg_mesh_find_dim(mesh, dims[d]) : -1;
    axes[d] = MPI_COMM_NULL;
    split[d] = -1;
    if (m < 0) continue;
    SG_TRY(sg_mesh_group(mesh, 1u << m, &g));
    axes[d] = sg_group_comm(g);
    split[d] = d;
    found |= 1u << m;
  }
  SG_TRY(sg_mesh_group(mesh, found, &g));
  *comm = sg_group_comm(g);
  if (mask) *mask = found;
fail:
  return st;
}

sg_status sg_fft_plan_create(sg_mesh_t mesh, const sg_fft_desc *desc,
                             sg_fft_plan_t *plan) {
  sg_fft_axes ax;
  if (!mesh) return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                                 "sg_fft_plan_create: mesh is NULL");
  sg_status st = sg_fft_axes_from_mesh(&ax, mesh);
  if (st != SG_OK) return sg_fft_agree(sg_mesh_comm(mesh), st);
  return plan_create_axes(sg_mesh_comm(mesh), &ax, desc, plan);
}

sg_status sg_fft_plan_destroy(sg_fft_plan_t *plan) {
  if (!plan || !*plan) return SG_OK;
  struct sg_fft_plan *p = *plan;
  for (int i = 0; i < p->nstages; ++i) {
    if (!p->cuda) stage_free(p, &p->st[i]);
    else if (p->st[i].kind == STAGE_REDIST) sg_fft_redist_free(&p->st[i].rd);
#if SG_HAVE_CUDA
    sg_fft_cuda_stage_destroy(&p->cst[i]);
#endif
  }
  if (p->cuda) {
    sg_free(p->desc.device, &p->Ad);
    sg_free(p->desc.device, &p->Bd);
  }
  sg_free(sg_device_host(), &p->A);
  sg_free(sg_device_host(), &p->B);
  sg_free(sg_device_host(), &p->S);
  sg_free(sg_device_host(), &p->R);
  sg_free(sg_device_host(), &p->T);
  sg_free(sg_device_host(), &p->W);
  free(p);
  *plan = NULL;
  return SG_OK;
}

/* ---- queries ---------------------------------------------------------------- */

const sg_fft_desc *sg_fft_plan_desc(sg_fft_plan_t plan) { return &plan->desc; }

void sg_fft_plan_layout(sg_fft_plan_t plan, sg_fft_space space,
                        sg_fft_layout *layout) {
  *layout = space == SG_FFT_SPACE_REAL ? plan->real_layout : plan->spec_layout;
}

void sg_fft_plan_local_box(sg_fft_plan_t plan, sg_fft_space space,
                           int64_t *offset, int64_t *shape) {
  for (int d = 0; d < plan->D; ++d) {
    offset[d] = space == SG_FFT_SPACE_REAL ? plan->real_off[d] : plan->spec_off[d];
    shape[d] = space == SG_FFT_SPACE_REAL ? plan->real_len[d] : plan->spec_len[d];
  }
}

int64_t sg_fft_plan_local_count(sg_fft_plan_t plan, sg_fft_space space) {
  if (space == SG_FFT_SPACE_REAL)
    return plan->desc.batch * prod64(plan->real_len, plan->D);
  return 2 * plan->desc.batch * prod64(plan->spec_len, plan->D);
}

void sg_fft_plan_box_of(sg_fft_plan_t plan, sg_fft_space space,
                        const int *coords, int64_t *offset, int64_t *shape) {
  sg_fft_layout_box(space == SG_FFT_SPACE_REAL ? &plan->real_layout
                                               : &plan->spec_layout,
                    plan->axes.size, coords, offset, shape);
}

int64_t sg_fft_plan_freq(sg_fft_plan_t plan, int d, int64_t j) {
  int64_t n = plan->desc.shape[d];
  int64_t i = sg_fft_map_index(plan->kmap[d], j);
  if (d == plan->D - 1) return i;
  return i <= n / 2 ? i : i - n;
}

int sg_fft_plan_ntransposes(sg_fft_plan_t plan) { return plan->ntrans; }
int64_t sg_fft_plan_bytes_moved(sg_fft_plan_t plan) { return plan->bytes_moved; }

void sg_fft_plan_times(sg_fft_plan_t plan, double *fft_seconds,
                       double *transpose_seconds) {
  if (fft_seconds) *fft_seconds = plan->t_fft;
  if (transpose_seconds) *transpose_seconds = plan->t_xpose;
}

void sg_fft_plan_reset_times(sg_fft_plan_t plan) {
  plan->t_fft = plan->t_xpose = 0;
}

sg_status sg_fft_plan_describe(sg_fft_plan_t p, char *buf, size_t n) {
  sg_status st = SG_OK;
  size_t used = 0;
  if (!buf || n == 0) SG_RAISE(SG_ERR_INVALID_ARG, "empty buffer");
  buf[0] = '\0';
  for (int i = 0; i < p->nstages && used < n; ++i) {
    const sg_fft_stage *s = &p->st[i];
    int w;
    if (s->kind == STAGE_FFT) {
      char dl[32] = "";
      for (int k = 0; k < s->nt; ++k) {
        size_t l = strlen(dl);
        snprintf(dl + l, sizeof dl - l, "%s%d", k ? "," : "", s->tdims[k] - 1);
      }
      w = snprintf(buf + used, n - used, "%d: %s over dims {%s}\n", i,
                   s->r2c ? "r2c" : "c2c", dl);
    } else if (s->rd.axis < 0) {
      w = snprintf(buf + used, n - used, "%d: truncate (local copy)\n", i);
    } else {
      w = snprintf(buf + used, n - used,
                   "%d: transpose axis %d (%d ranks) dim %d -> dim %d, "
                   "%lld elements sent\n",
                   i, s->rd.axis, s->rd.P, s->rd.from - 1, s->rd.to - 1,
                   (long long)s->rd.send_total);
    }
    if (w < 0) break;
    used += (size_t)w;
  }
  if (p->nchunk > 1 && used < n)
    snprintf(buf + used, n - used,
             "stages run in %lld chunks of %lld batch elements (sizes above "
             "per chunk)\n", (long long)p->nchunk, (long long)p->cb);
fail:
  return st;
}

/* ---- execution ------------------------------------------------------------- */

static void *other(sg_fft_plan_t p, const void *cur) {
  return cur == p->A ? p->B : p->A;
}

static void scale_buf(void *buf, int64_t n, double f, sg_dtype dt) {
  if (f == 1.0) return;
  if (dt == SG_DTYPE_F64) {
    double *x = buf;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) x[i] *= f;
  } else {
    float *x = buf;
    float ff = (float)f;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) x[i] *= ff;
  }
}

/* Multiply spectral block y by w(k) along the halved dim: 1 for the
 * self-conjugate modes (k = 0, k = n/2 for even n), else `w` — then by s. */
static void weight_halved_n(sg_fft_plan_t p, void *y, int64_t batch,
                            double w, double s) {
  const int D = p->D;
  int64_t n = p->desc.shape[D - 1];
  int64_t nl = p->spec_len[D - 1], ol = p->spec_off[D - 1];
  int64_t rows = batch * prod64(p->spec_len, D - 1);
  if (nl == 0 || rows == 0) return;
  double *wt = malloc((size_t)nl * sizeof *wt);
  if (!wt) { /* tiny; fall back to direct evaluation */
    wt = NULL;
  }
  for (int64_t j = 0; wt && j < nl; ++j) {
    int64_t k = ol + j;
    int self = k == 0 || (n % 2 == 0 && k == n / 2);
    wt[j] = (self ? 1.0 : w) * s;
  }
  if (p->desc.dtype == SG_DTYPE_F64) {
    double *x = y;
#pragma omp parallel for schedule(static) if (rows * nl > 32768)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < nl; ++j) {
        int64_t k = ol + j;
        double f = wt ? wt[j] : ((k == 0 || (n % 2 == 0 && k == n / 2)) ? 1.0 : w) * s;
        x[2 * (r * nl + j)] *= f;
        x[2 * (r * nl + j) + 1] *= f;
      }
  } else {
    float *x = y;
#pragma omp parallel for schedule(static) if (rows * nl > 32768)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < nl; ++j) {
        int64_t k = ol + j;
        float f = (float)(wt ? wt[j] : ((k == 0 || (n % 2 == 0 && k == n / 2)) ? 1.0 : w) * s);
        x[2 * (r * nl + j)] *= f;
        x[2 * (r * nl + j) + 1] *= f;
      }
  }
  free(wt);
}

static void weight_halved(sg_fft_plan_t p, void *y, double w, double s) {
  weight_halved_n(p, y, p->desc.batch, w, s);
}

/* Bytes of one chunk of the user's real and spectral blocks. */
static size_t chunk_bytes(sg_fft_plan_t p, sg_fft_space space) {
  return (size_t)(sg_fft_plan_local_count(p, space) / p->nchunk) * p->real_size;
}

/* The forward stages from x (real, user) into y (spectral, user), one
 * chunk of cb batch elements. */
static sg_status run_forward_chunk(sg_fft_plan_t p, const void *x, void *y) {
  sg_status st = SG_OK;
  const void *cur = x;
  for (int i = 0; i < p->nstages; ++i) {
    const sg_fft_stage *s = &p->st[i];
    void *out = i == p->nstages - 1 ? y : other(p, cur);
    double t0 = MPI_Wtime();
    if (s->kind == STAGE_FFT) {
      stage_exec_fft(p, s, 1, cur, out);
      p->t_fft += MPI_Wtime() - t0;
    } else {
      SG_TRY(sg_fft_redist_forward(&s->rd, cur, out, p->S, p->R));
      p->t_xpose += MPI_Wtime() - t0;
    }
    cur = out;
  }
fail:
  return st;
}

/* The stages backwards from y (spectral) into x (real), one chunk. y is
 * preserved unless it is one of the plan's scratch buffers. */
static sg_status run_backward_chunk(sg_fft_plan_t p, const void *y, void *x) {
  sg_status st = SG_OK;
  const void *cur = y;
  for (int i = p->nstages - 1; i >= 0; --i) {
    const sg_fft_stage *s = &p->st[i];
    void *out = i == 0 ? x : other(p, cur);
    double t0 = MPI_Wtime();
    if (s->kind == STAGE_FFT) {
      const void *in = cur;
      if (s->r2c && !s->empty && cur != p->A && cur != p->B) {
        /* c2r destroys its input: work on a copy */
        void *tmp = out == p->A ? p->B : p->A;
        memcpy(tmp, cur, (size_t)prod64(s->out_shape, p->D + 1) * 2 * p->real_size);
        in = tmp;
      }
      stage_exec_fft(p, s, 0, in, out);
      p->t_fft += MPI_Wtime() - t0;
    } else {
      SG_TRY(sg_fft_redist_reverse(&s->rd, cur, out, p->S, p->R));
      p->t_xpose += MPI_Wtime() - t0;
    }
    cur = out;
  }
fail:
  return st;
}

static sg_status run_forward(sg_fft_plan_t p, const void *x, void *y) {
  sg_status st = SG_OK;
  const size_t rb = chunk_bytes(p, SG_FFT_SPACE_REAL),
               sb = chunk_bytes(p, SG_FFT_SPACE_SPECTRAL);
  for (int64_t c = 0; c < p->nchunk; ++c)
    SG_TRY(run_forward_chunk(p, (const char *)x + (size_t)c * rb,
                             (char *)y + (size_t)c * sb));
fail:
  return st;
}

static sg_status run_backward(sg_fft_plan_t p, const void *y, void *x) {
  sg_status st = SG_OK;
  const size_t rb = chunk_bytes(p, SG_FFT_SPACE_REAL),
               sb = chunk_bytes(p, SG_FFT_SPACE_SPECTRAL);
  for (int64_t c = 0; c < p->nchunk; ++c)
    SG_TRY(run_backward_chunk(p, (const char *)y + (size_t)c * sb,
                              (char *)x + (size_t)c * rb));
fail:
  return st;
}

#if SG_HAVE_CUDA
/* CUDA: local stages with cuFFT on the device; transposes staged through
 * the host scratch (device -> host, host transpose, host -> device). */
static void *other_d(sg_fft_plan_t p, const void *cur) {
  return cur == p->Ad ? p->Bd : p->Ad;
}

static sg_status run_forward_cuda(sg_fft_plan_t p, const void *x, void *y) {
  sg_status st = SG_OK;
  const sg_device h = sg_device_host(), dv = p->desc.device;
  const int nd = p->D + 1;
  const void *cur = x;
  for (int i = 0; i < p->nstages; ++i) {
    const sg_fft_stage *s = &p->st[i];
    void *out = i == p->nstages - 1 ? y : other_d(p, cur);
    double t0 = MPI_Wtime();
    if (s->kind == STAGE_FFT) {
      if (!s->empty)
        SG_TRY(sg_fft_cuda_stage_exec(p->cst[i], 1, (void *)(uintptr_t)cur, out));
      p->t_fft += MPI_Wtime() - t0;
    } else {
      size_t sb = (size_t)prod64(s->rd.src_phys, nd) * s->rd.esize;
      size_t db = (size_t)prod64(s->rd.dst_shape, nd) * s->rd.esize;
      SG_TRY(sg_memcpy(h, p->A, dv, cur, sb));
      SG_TRY(sg_fft_redist_forward(&s->rd, p->A, p->B, p->S, p->R));
      SG_TRY(sg_memcpy(dv, out, h, p->B, db));
      p->t_xpose += MPI_Wtime() - t0;
    }
    cur = out;
  }
fail:
  return st;
}

static sg_status run_backward_cuda(sg_fft_plan_t p, const void *y, void *x) {
  sg_status st = SG_OK;
  const sg_device h = sg_device_host(), dv = p->desc.device;
  const int nd = p->D + 1;
  const void *cur = y;
  for (int i = p->nstages - 1; i >= 0; --i) {
    const sg_fft_stage *s = &p->st[i];
    void *out = i == 0 ? x : other_d(p, cur);
    double t0 = MPI_Wtime();
    if (s->kind == STAGE_FFT) {
      if (!s->empty) {
        void *in = (void *)(uintptr_t)cur;
        if (cur != p->Ad && cur != p->Bd) { /* the backward destroys its input */
          void *tmp = out == p->Ad ? p->Bd : p->Ad;
          SG_TRY(sg_memcpy(dv, tmp, dv, cur,
                           (size_t)prod64(s->out_shape, nd) * 2 * p->real_size));
          in = tmp;
        }
        SG_TRY(sg_fft_cuda_stage_exec(p->cst[i], 0, in, out));
      }
      p->t_fft += MPI_Wtime() - t0;
    } else {
      size_t sb = (size_t)prod64(s->rd.src_phys, nd) * s->rd.esize;
      size_t db = (size_t)prod64(s->rd.dst_shape, nd) * s->rd.esize;
      SG_TRY(sg_memcpy(h, p->B, dv, cur, db));
      SG_TRY(sg_fft_redist_reverse(&s->rd, p->B, p->A, p->S, p->R));
      SG_TRY(sg_memcpy(dv, out, h, p->A, sb));
      p->t_xpose += MPI_Wtime() - t0;
    }
    cur = out;
  }
fail:
  return st;
}

/* Element-wise passes on device data go through the host scratch. */
static sg_status cuda_scale(sg_fft_plan_t p, void *buf, int64_t n, double f) {
  sg_status st = SG_OK;
  if (f == 1.0) return SG_OK;
  SG_TRY(sg_memcpy(sg_device_host(), p->A, p->desc.device, buf, (size_t)n * p->real_size));
  scale_buf(p->A, n, f, p->desc.dtype);
  SG_TRY(sg_memcpy(p->desc.device, buf, sg_device_host(), p->A, (size_t)n * p->real_size));
fail:
  return st;
}

static sg_status cuda_weight(sg_fft_plan_t p, void *buf, double w, double f) {
  sg_status st = SG_OK;
  size_t b = (size_t)sg_fft_plan_local_count(p, SG_FFT_SPACE_SPECTRAL) * p->real_size;
  SG_TRY(sg_memcpy(sg_device_host(), p->A, p->desc.device, buf, b));
  weight_halved(p, p->A, w, f);
  SG_TRY(sg_memcpy(p->desc.device, buf, sg_device_host(), p->A, b));
fail:
  return st;
}

static sg_status cuda_dispatch(sg_fft_plan_t p, int which, const void *in,
                               void *out) {
  sg_status st = SG_OK;
  switch (which) {
  case 0:
    SG_TRY(run_forward_cuda(p, in, out));
    SG_TRY(cuda_scale(p, out, sg_fft_plan_local_count(p, SG_FFT_SPACE_SPECTRAL), p->fwd_scale));
    break;
  case 1:
    SG_TRY(run_backward_cuda(p, in, out));
    SG_TRY(cuda_scale(p, out, sg_fft_plan_local_count(p, SG_FFT_SPACE_REAL), p->inv_scale));
    break;
  case 2: {
    size_t b = (size_t)sg_fft_plan_local_count(p, SG_FFT_SPACE_SPECTRAL) * p->real_size;
    SG_TRY(sg_memcpy(p->desc.device, p->Ad, p->desc.device, in, b));
    SG_TRY(cuda_weight(p, p->Ad, 0.5, p->fwd_scale));
    SG_TRY(run_backward_cuda(p, p->Ad, out));
    break;
  }
  default:
    SG_TRY(run_forward_cuda(p, in, out));
    SG_TRY(cuda_weight(p, out, 2.0, p->inv_scale));
    break;
  }
fail:
  return st;
}
#define SG_FFT_CUDA_DISPATCH(p, which, in, out)                               \
  do {                                                                        \
    if ((p)->cuda) return cuda_dispatch((p), (which), (in), (out));           \
  } while (0)
#else
#define SG_FFT_CUDA_DISPATCH(p, which, in, out) ((void)0)
#endif

sg_status sg_fft_forward(sg_fft_plan_t p, const void *x, void *y) {
  sg_status st = SG_OK;
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "plan is NULL");
  SG_FFT_CUDA_DISPATCH(p, 0, x, y);
  SG_TRY(run_forward(p, x, y));
  scale_buf(y, sg_fft_plan_local_count(p, SG_FFT_SPACE_SPECTRAL), p->fwd_scale,
            p->desc.dtype);
fail:
  return st;
}

sg_status sg_fft_inverse(sg_fft_plan_t p, const void *y, void *x) {
  sg_status st = SG_OK;
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "plan is NULL");
  SG_FFT_CUDA_DISPATCH(p, 1, y, x);
  SG_TRY(run_backward(p, y, x));
  scale_buf(x, sg_fft_plan_local_count(p, SG_FFT_SPACE_REAL), p->inv_scale,
            p->desc.dtype);
fail:
  return st;
}

sg_status sg_fft_forward_adjoint(sg_fft_plan_t p, const void *dy, void *dx) {
  sg_status st = SG_OK;
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "plan is NULL");
  SG_FFT_CUDA_DISPATCH(p, 2, dy, dx);
  /* F^T = G o diag(w): w = 1/2 on the modes of the halved dim that stand for
   * a conjugate pair, 1 on the self-conjugate ones; G the unnormalised
   * inverse. */
  if (p->nchunk == 1) {
    memcpy(p->A, dy, chunk_bytes(p, SG_FFT_SPACE_SPECTRAL));
    weight_halved(p, p->A, 0.5, p->fwd_scale);
    SG_TRY(run_backward_chunk(p, p->A, dx));
  } else {
    const size_t rb = chunk_bytes(p, SG_FFT_SPACE_REAL),
                 sb = chunk_bytes(p, SG_FFT_SPACE_SPECTRAL);
    for (int64_t c = 0; c < p->nchunk; ++c) {
      memcpy(p->W, (const char *)dy + (size_t)c * sb, sb);
      weight_halved_n(p, p->W, p->cb, 0.5, p->fwd_scale);
      SG_TRY(run_backward_chunk(p, p->W, (char *)dx + (size_t)c * rb));
    }
  }
fail:
  return st;
}

sg_status sg_fft_inverse_adjoint(sg_fft_plan_t p, const void *dx, void *dy) {
  sg_status st = SG_OK;
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "plan is NULL");
  SG_FFT_CUDA_DISPATCH(p, 3, dx, dy);
  /* G^T = diag(c) o F: c = 2 on pair modes of the halved dim, 1 on
   * self-conjugate ones. */
  SG_TRY(run_forward(p, dx, dy));
  weight_halved(p, dy, 2.0, p->inv_scale);
fail:
  return st;
}
