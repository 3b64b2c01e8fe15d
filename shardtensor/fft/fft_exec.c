/* shardgrid — distributed FFT plans: the FFTW stage plans and the
 * execution (forward, inverse and their adjoints; host and CUDA). Planning
 * is in fft.c. */
#include <fftw3.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fft_plan_impl.h"
#include "sg_config.h"
#include "sg_shardtensor.h"

/* ---- FFTW stage plans -------------------------------------------------------- */

static void strides_of(const int64_t *shape, int nd, int64_t *st) {
  st[nd - 1] = 1;
  for (int d = nd - 2; d >= 0; --d) st[d] = st[d + 1] * shape[d + 1];
}

/* Does stage s run blocked (see sg_fft_stage)? Sets its tile geometry and
 * returns the bytes of one thread's tile (0: not blocked). */
size_t sg_fft_stage_block_geometry(sg_fft_plan_t p, sg_fft_stage *s) {
  const int nd = p->D + 1;
  s->blocked = 0;
  if (s->kind != STAGE_FFT || s->r2c || s->empty || s->nt != 1 ||
      s->tdims[0] >= nd - 1)
    return 0;
  const int t = s->tdims[0];
  const size_t cs = 2 * p->real_size;
  s->b_outer = sg_fft_prod64(s->in_shape, t);
  s->b_n = s->in_shape[t];
  s->b_inner = sg_fft_prod64(s->in_shape + t + 1, nd - t - 1);
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

sg_status sg_fft_stage_make_fftw(sg_fft_plan_t p, sg_fft_stage *s, void *in,
                                 void *out) {
  sg_status st = SG_OK;
  const int nd = p->D + 1;
  if (s->dft) return sg_fft_stage_make_dft(p, s);
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
      SG_FFTW_PLAN(s->pb,
                   fftw_plan_guru64_dft_c2r(s->nt, bdims, nh, bhow, out, in,
                                            flags | FFTW_DESTROY_INPUT));
    } else {
      SG_FFTW_PLAN(s->pf, fftw_plan_guru64_dft(s->nt, dims, nh, how, in, out,
                                               FFTW_FORWARD, flags));
      SG_FFTW_PLAN(s->pb, fftw_plan_guru64_dft(s->nt, bdims, nh, bhow, out, in,
                                               FFTW_BACKWARD, flags));
    }
  } else {
    fftwf_plan_with_nthreads(nth);
    if (s->r2c) {
      SG_FFTW_PLAN(s->pf, fftwf_plan_guru64_dft_r2c(s->nt, dims, nh, how, in,
                                                    out, flags));
      SG_FFTW_PLAN(s->pb,
                   fftwf_plan_guru64_dft_c2r(s->nt, bdims, nh, bhow, out, in,
                                             flags | FFTW_DESTROY_INPUT));
    } else {
      SG_FFTW_PLAN(s->pf, fftwf_plan_guru64_dft(s->nt, dims, nh, how, in, out,
                                                FFTW_FORWARD, flags));
      SG_FFTW_PLAN(s->pb, fftwf_plan_guru64_dft(s->nt, bdims, nh, bhow, out, in,
                                                FFTW_BACKWARD, flags));
    }
  }
fail:
  return st;
}

void sg_fft_stage_free(sg_fft_plan_t p, sg_fft_stage *s) {
  if (s->kind == STAGE_FFT) {
    sg_fft_stage_free_dft(s);
    void **pl[6] = {&s->pf, &s->pb, &s->bpf, &s->bpb, &s->brf, &s->brb};
    for (int i = 0; i < 6; ++i) {
      if (!*pl[i]) continue;
      if (p->desc.dtype == SG_DTYPE_F64)
        fftw_destroy_plan((fftw_plan)*pl[i]);
      else
        fftwf_destroy_plan((fftwf_plan)*pl[i]);
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
#define SG_FFT_TILE_FNS(E, sfx)                                           \
  static void tile_gather_##sfx(E *restrict tile, const E *restrict src,  \
                                int64_t n, int64_t inner, int64_t nb,     \
                                int64_t ld) {                             \
    for (int64_t i = 0; i < n; ++i) {                                     \
      const E *row = src + i * inner;                                     \
      for (int64_t k = 0; k < nb; ++k) tile[k * ld + i] = row[k];         \
    }                                                                     \
  }                                                                       \
  static void tile_scatter_##sfx(E *restrict dst, const E *restrict tile, \
                                 int64_t n, int64_t inner, int64_t nb,    \
                                 int64_t ld) {                            \
    for (int64_t i = 0; i < n; ++i) {                                     \
      E *row = dst + i * inner;                                           \
      for (int64_t k = 0; k < nb; ++k) row[k] = tile[k * ld + i];         \
    }                                                                     \
  }
typedef struct {
  float re, im;
} sg_fft_c32;
typedef struct {
  double re, im;
} sg_fft_c64;
SG_FFT_TILE_FNS(sg_fft_c32, c32)
SG_FFT_TILE_FNS(sg_fft_c64, c64)

/* A blocked c2c stage (in may equal out: tiles are disjoint columns). */
static void stage_exec_blocked(sg_fft_plan_t p, const sg_fft_stage *s, int fwd,
                               const void *in, void *out) {
  const int64_t n = s->b_n, inner = s->b_inner, bw = s->b_w, ld = s->b_ld;
  const int64_t nblk = inner / bw, ntask = s->b_outer * nblk;
  const int f64 = p->desc.dtype == SG_DTYPE_F64;
  const size_t cs = 2 * p->real_size;
  void *full = fwd ? s->bpf : s->bpb, *part = fwd ? s->brf : s->brb;
#pragma omp parallel for schedule(static) num_threads( \
    p->nth) if (p->nth > 1 && ntask > 1 && n * inner * s->b_outer > 32768)
  for (int64_t task = 0; task < ntask; ++task) {
    const int64_t o = task / nblk, j0 = (task % nblk) * bw;
    const int64_t nb = task % nblk == nblk - 1 ? inner - j0 : bw;
    char *tile = (char *)p->T + (size_t)omp_get_thread_num() * p->bytes_tile;
    const size_t at = (size_t)(o * n * inner + j0) * cs;
    void *plan = nb == bw ? full : part;
    if (f64) {
      tile_gather_c64((sg_fft_c64 *)tile,
                      (const sg_fft_c64 *)((const char *)in + at), n, inner, nb,
                      ld);
      fftw_execute_dft((fftw_plan)plan, (fftw_complex *)tile,
                       (fftw_complex *)tile);
      tile_scatter_c64((sg_fft_c64 *)((char *)out + at),
                       (const sg_fft_c64 *)tile, n, inner, nb, ld);
    } else {
      tile_gather_c32((sg_fft_c32 *)tile,
                      (const sg_fft_c32 *)((const char *)in + at), n, inner, nb,
                      ld);
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
  if (s->dft) {
    sg_fft_stage_exec_dft(p, s, fwd, in, out);
    return;
  }
  if (s->blocked) {
    stage_exec_blocked(p, s, fwd, in, out);
    return;
  }
  const int nd = p->D + 1;
  size_t in_bytes, out_bytes;
  if (fwd) {
    in_bytes = (size_t)sg_fft_prod64(s->in_shape, nd) * p->real_size *
               (s->r2c ? 1 : 2);
    out_bytes = (size_t)sg_fft_prod64(s->out_shape, nd) * p->real_size * 2;
  } else {
    in_bytes = (size_t)sg_fft_prod64(s->out_shape, nd) * p->real_size * 2;
    out_bytes = (size_t)sg_fft_prod64(s->in_shape, nd) * p->real_size *
                (s->r2c ? 1 : 2);
  }
  void *scr[3] = {p->A, p->B, p->S};
  void *tin = (void *)(uintptr_t)in, *tout = out;
  int bounce_out = 0;
  if (misaligned(p, in)) {
    for (int i = 0; i < 3; ++i)
      if (scr[i] != out) {
        tin = scr[i];
        break;
      }
    memcpy(tin, in, in_bytes);
  }
  if (misaligned(p, out)) {
    for (int i = 0; i < 3; ++i)
      if (scr[i] != tin) {
        tout = scr[i];
        break;
      }
    bounce_out = 1;
  }
  if (p->desc.dtype == SG_DTYPE_F64) {
    if (s->r2c) {
      if (fwd)
        fftw_execute_dft_r2c((fftw_plan)s->pf, tin, tout);
      else
        fftw_execute_dft_c2r((fftw_plan)s->pb, tin, tout);
    } else {
      fftw_execute_dft(fwd ? (fftw_plan)s->pf : (fftw_plan)s->pb, tin, tout);
    }
  } else {
    if (s->r2c) {
      if (fwd)
        fftwf_execute_dft_r2c((fftwf_plan)s->pf, tin, tout);
      else
        fftwf_execute_dft_c2r((fftwf_plan)s->pb, tin, tout);
    } else {
      fftwf_execute_dft(fwd ? (fftwf_plan)s->pf : (fftwf_plan)s->pb, tin, tout);
    }
  }
  if (bounce_out) memcpy(out, tout, out_bytes);
}

void sg_fft_stage_exec_host(sg_fft_plan_t p, const sg_fft_stage *s, int fwd,
                            const void *in, void *out) {
  stage_exec_fft(p, s, fwd, in, out);
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
static void weight_halved_n(sg_fft_plan_t p, void *y, int64_t batch, double w,
                            double s) {
  const int D = p->D;
  int64_t n = p->desc.shape[D - 1];
  int64_t nl = p->spec_len[D - 1], ol = p->spec_off[D - 1];
  int64_t rows = batch * sg_fft_prod64(p->spec_len, D - 1);
  if (nl == 0 || rows == 0) return;
  double *wt = malloc((size_t)nl * sizeof *wt);
  if (!wt) { /* tiny; fall back to direct evaluation */
    wt = NULL;
  }
  for (int64_t j = 0; wt && j < nl; ++j)
    wt[j] = sg_fft_halved_factor(ol + j, n, w, s);
  if (p->desc.dtype == SG_DTYPE_F64) {
    double *x = y;
#pragma omp parallel for schedule(static) if (rows * nl > 32768)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < nl; ++j) {
        int64_t k = ol + j;
        double f = wt ? wt[j]
                      : ((k == 0 || (n % 2 == 0 && k == n / 2)) ? 1.0 : w) * s;
        x[2 * (r * nl + j)] *= f;
        x[2 * (r * nl + j) + 1] *= f;
      }
  } else {
    float *x = y;
#pragma omp parallel for schedule(static) if (rows * nl > 32768)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < nl; ++j) {
        int64_t k = ol + j;
        float f = (float)(wt ? wt[j]
                             : ((k == 0 || (n % 2 == 0 && k == n / 2)) ? 1.0
                                                                       : w) *
                                   s);
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
      if (s->r2c && !s->dft && !s->empty && cur != p->A && cur != p->B) {
        /* c2r destroys its input: work on a copy */
        void *tmp = out == p->A ? p->B : p->A;
        memcpy(tmp, cur,
               (size_t)sg_fft_prod64(s->out_shape, p->D + 1) * 2 *
                   p->real_size);
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
        SG_TRY(
            sg_fft_cuda_stage_exec(p->cst[i], 1, (void *)(uintptr_t)cur, out));
      p->t_fft += MPI_Wtime() - t0;
    } else {
      size_t sb = (size_t)sg_fft_prod64(s->rd.src_phys, nd) * s->rd.esize;
      size_t db = (size_t)sg_fft_prod64(s->rd.dst_shape, nd) * s->rd.esize;
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
        if (cur != p->Ad &&
            cur != p->Bd) { /* the backward destroys its input */
          void *tmp = out == p->Ad ? p->Bd : p->Ad;
          SG_TRY(sg_memcpy(dv, tmp, dv, cur,
                           (size_t)sg_fft_prod64(s->out_shape, nd) * 2 *
                               p->real_size));
          in = tmp;
        }
        SG_TRY(sg_fft_cuda_stage_exec(p->cst[i], 0, in, out));
      }
      p->t_fft += MPI_Wtime() - t0;
    } else {
      size_t sb = (size_t)sg_fft_prod64(s->rd.src_phys, nd) * s->rd.esize;
      size_t db = (size_t)sg_fft_prod64(s->rd.dst_shape, nd) * s->rd.esize;
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
  SG_TRY(sg_memcpy(sg_device_host(), p->A, p->desc.device, buf,
                   (size_t)n * p->real_size));
  scale_buf(p->A, n, f, p->desc.dtype);
  SG_TRY(sg_memcpy(p->desc.device, buf, sg_device_host(), p->A,
                   (size_t)n * p->real_size));
fail:
  return st;
}

static sg_status cuda_weight(sg_fft_plan_t p, void *buf, double w, double f) {
  sg_status st = SG_OK;
  size_t b = (size_t)sg_fft_plan_local_count(p, SG_FFT_SPACE_SPECTRAL) *
             p->real_size;
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
    SG_TRY(cuda_scale(p, out, sg_fft_plan_local_count(p, SG_FFT_SPACE_SPECTRAL),
                      p->fwd_scale));
    break;
  case 1:
    SG_TRY(run_backward_cuda(p, in, out));
    SG_TRY(cuda_scale(p, out, sg_fft_plan_local_count(p, SG_FFT_SPACE_REAL),
                      p->inv_scale));
    break;
  case 2: {
    size_t b = (size_t)sg_fft_plan_local_count(p, SG_FFT_SPACE_SPECTRAL) *
               p->real_size;
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
#define SG_FFT_CUDA_DISPATCH(p, which, in, out)                     \
  do {                                                              \
    if ((p)->cuda) return cuda_dispatch((p), (which), (in), (out)); \
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
