/* shardgrid — a device-staged FFT plan on device buffers (issue 22): the
 * stages of a CUDA plan (cuFFT) with its transposes on the device: each
 * peer's box packed by the box-copy kernel (sg_fft_xbox_copy of
 * fft_dev_inl.h, the index arithmetic of the host's transposes), one
 * all-to-all-v of the messages through the comm layer over the group of
 * the transpose's axis (NCCL on device buffers), the boxes unpacked; the
 * scaling, the halved dim's weights of the adjoints and the c2r's
 * self-conjugate columns by kernels too. Nothing goes through the host.
 *
 * A host plan made with SG_FFT_DEVICE_STAGES runs the same steps on host
 * memory: FFTW for cuFFT, the SG_HD functions in host loops, MPI through
 * the comm layer. That is what the tests (and the tape's faked device)
 * run: the device path's structure and arithmetic without a GPU. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fft_plan_impl.h"
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_device.h"

static int f64_of(sg_fft_plan_t p) { return p->desc.dtype == SG_DTYPE_F64; }

#if SG_HAVE_CUDA
#define DEV_OR(call) return (call)
#else
#define DEV_OR(call)                                            \
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__, \
                      "the FFT on a device: built without CUDA")
#endif

/* ---- the element passes: host loops or CUDA kernels ----------------------- */

static sg_status xbox_run(sg_fft_plan_t p, const sg_fft_xbox *b,
                          const void *src, void *dst) {
  if (b->n <= 0) return SG_OK;
  if (!p->cuda) {
    const int64_t n = b->n;
    if (f64_of(p)) {
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t e = 0; e < n; ++e)
        sg_fft_xbox_copy_f64(b, (const double *)src, (double *)dst, e);
    } else {
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t e = 0; e < n; ++e)
        sg_fft_xbox_copy_f32(b, (const float *)src, (float *)dst, e);
    }
    return SG_OK;
  }
  DEV_OR(sg_fft_xbox_cuda(f64_of(p), b, src, dst));
}

/* y *= f over n scalars (f rounded to the dtype: the host's scale_buf) */
static sg_status scale_run(sg_fft_plan_t p, void *y, int64_t n, double f) {
  if (f == 1.0 || n <= 0) return SG_OK;
  if (!p->cuda) {
    if (f64_of(p)) {
      double *x = y;
      for (int64_t i = 0; i < n; ++i) x[i] *= f;
    } else {
      float *x = y;
      const float ff = (float)f;
      for (int64_t i = 0; i < n; ++i) x[i] *= ff;
    }
    return SG_OK;
  }
  DEV_OR(sg_fft_scale_cuda(f64_of(p), n, f, y));
}

/* The spectral block y times the halved dim's factors (w on the pair
 * modes, 1 on the self-conjugate ones), times s: the host's
 * weight_halved. */
static sg_status weight_run(sg_fft_plan_t p, void *y, double w, double s) {
  const int D = p->D;
  const int64_t nl = p->spec_len[D - 1], ol = p->spec_off[D - 1],
                n = p->desc.shape[D - 1];
  const int64_t rows = p->desc.batch * sg_fft_prod64(p->spec_len, D - 1);
  if (nl == 0 || rows == 0) return SG_OK;
  if (!p->cuda) {
    if (f64_of(p))
      for (int64_t e = 0; e < rows * nl; ++e)
        sg_fft_weight_f64((double *)y, e, nl, ol, n, w, s);
    else
      for (int64_t e = 0; e < rows * nl; ++e)
        sg_fft_weight_f32((float *)y, e, nl, ol, n, w, s);
    return SG_OK;
  }
  DEV_OR(sg_fft_weight_cuda(f64_of(p), rows, nl, ol, n, w, s, y));
}

/* The c2r stage's input (rows of n/2 + 1): self-conjugate modes real. */
static sg_status c2r_cols_run(sg_fft_plan_t p, const sg_fft_stage *s, void *y) {
  const int nd = p->D + 1;
  const int64_t n = s->in_shape[nd - 1],
                rows = sg_fft_prod64(s->out_shape, nd - 1);
  if (rows == 0) return SG_OK;
  if (!p->cuda) {
    if (f64_of(p))
      for (int64_t r = 0; r < rows; ++r) sg_fft_c2r_cols_f64((double *)y, r, n);
    else
      for (int64_t r = 0; r < rows; ++r) sg_fft_c2r_cols_f32((float *)y, r, n);
    return SG_OK;
  }
  DEV_OR(sg_fft_c2r_cols_cuda(f64_of(p), rows, n, y));
}

static sg_status copy_run(sg_fft_plan_t p, void *dst, const void *src,
                          size_t bytes) {
  if (!bytes || dst == src) return SG_OK;
  if (!p->cuda) {
    memcpy(dst, src, bytes);
    return SG_OK;
  }
  return sg_memcpy(p->desc.device, dst, p->desc.device, src, bytes);
}

static sg_status zero_run(sg_fft_plan_t p, void *dst, size_t bytes) {
  if (!bytes) return SG_OK;
  if (!p->cuda) {
    memset(dst, 0, bytes);
    return SG_OK;
  }
  return sg_memset(p->desc.device, dst, 0, bytes);
}

/* ---- the transposes -------------------------------------------------------- */

static void strides(const int64_t *shape, int nd, int64_t *st) {
  st[nd - 1] = 1;
  for (int d = nd - 2; d >= 0; --d) st[d] = st[d + 1] * shape[d + 1];
}

/* The copy of box (lengths len) from src (shape ss, at soff, map sm or
 * NULL) to dst (shape ds, at doff, map dm or NULL). */
static sg_fft_xbox xbox(const sg_fft_redist *rd, int ncomp, const int64_t *len,
                        const int64_t *ss, const int64_t *soff,
                        const sg_fft_map *sm, const int64_t *ds,
                        const int64_t *doff, const sg_fft_map *dm) {
  static const int64_t zero[SG_FFT_ND] = {0, 0, 0, 0};
  sg_fft_xbox b;
  memset(&b, 0, sizeof b);
  b.nd = rd->nd;
  b.ncomp = ncomp;
  b.n = sg_fft_prod64(len, rd->nd);
  strides(ss, rd->nd, b.sst);
  strides(ds, rd->nd, b.dst);
  for (int d = 0; d < rd->nd; ++d) {
    b.box[d] = len[d];
    b.soff[d] = soff ? soff[d] : zero[d];
    b.doff[d] = doff ? doff[d] : zero[d];
    if (sm) b.smap[d] = sm[d];
    if (dm) b.dmap[d] = dm[d];
  }
  return b;
}

/* Forward (fwd = 1): in is the source block (src_phys, logical boxes at
 * send_off through src_map), out the destination (dst_shape). Reverse:
 * in is the destination layout, out the source one (zeroed where the
 * kept extent is smaller). The own box is copied directly; the others
 * are packed into the send buffer in peer order, moved by one
 * all-to-all-v over g, and unpacked: the host's redistribution. */
static sg_status dev_redist(sg_fft_plan_t p, const sg_fft_redist *rd,
                            sg_group_t g, int fwd, const void *in, void *out) {
  sg_status st = SG_OK;
  const int nd = rd->nd, P = rd->P, me = rd->r;
  const int ncomp = (int)(rd->esize / p->real_size);
  const size_t es = rd->esize;
  int64_t *cnt = NULL;
  char *sb = p->cuda ? p->Sd : p->S, *rb = p->cuda ? p->Rd : p->R;
  /* the own side's messages (fwd: sbuf; reverse: rbuf) and the peers' */
  char *mine = fwd ? sb : rb, *theirs = fwd ? rb : sb;
  const int *mdsp = fwd ? rd->sdispl : rd->rdispl,
            *tdsp = fwd ? rd->rdispl : rd->sdispl;
  if (P > 1 && (!g || sg_group_size(g) != P || sg_group_rank(g) != me))
    SG_RAISE(SG_ERR_INTERNAL,
             "FFT transpose on a device: axis %d has no group of its %d ranks",
             rd->axis, P);
  if (!fwd) {
    int pad = 0;
    for (int d = 0; d < nd; ++d) pad |= rd->src_log[d] != rd->src_phys[d];
    if (pad)
      SG_TRY(zero_run(p, out, (size_t)sg_fft_prod64(rd->src_phys, nd) * es));
  }
  for (int q = 0; q < P; ++q) {
    const int64_t *so = rd->send_off + (size_t)q * nd,
                  *sl = rd->send_len + (size_t)q * nd,
                  *ro = rd->recv_off + (size_t)q * nd,
                  *rl = rd->recv_len + (size_t)q * nd;
    sg_fft_xbox b;
    if (fwd)
      b = q == me ? xbox(rd, ncomp, sl, rd->src_phys, so, rd->src_map,
                         rd->dst_shape, ro, NULL)
                  : xbox(rd, ncomp, sl, rd->src_phys, so, rd->src_map, sl, NULL,
                         NULL);
    else
      b = q == me
              ? xbox(rd, ncomp, rl, rd->dst_shape, ro, NULL, rd->src_phys, so,
                     rd->src_map)
              : xbox(rd, ncomp, rl, rd->dst_shape, ro, NULL, rl, NULL, NULL);
    SG_TRY(xbox_run(p, &b, in, q == me ? out : mine + (size_t)mdsp[q] * es));
  }
  if (P <= 1) goto fail;
  cnt = malloc(4 * (size_t)P * sizeof *cnt);
  if (!cnt) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  {
    const int *mc = fwd ? rd->scount : rd->rcount,
              *tc = fwd ? rd->rcount : rd->scount;
    for (int q = 0; q < P; ++q) { /* in scalars of the dtype */
      cnt[q] = (int64_t)mc[q] * ncomp;
      cnt[P + q] = (int64_t)mdsp[q] * ncomp;
      cnt[2 * P + q] = (int64_t)tc[q] * ncomp;
      cnt[3 * P + q] = (int64_t)tdsp[q] * ncomp;
    }
  }
  SG_TRY(sg_alltoallv(g, mine, cnt, cnt + P, theirs, cnt + 2 * P, cnt + 3 * P,
                      p->desc.dtype));
  for (int q = 0; q < P; ++q) {
    if (q == me) continue;
    const int64_t *so = rd->send_off + (size_t)q * nd,
                  *sl = rd->send_len + (size_t)q * nd,
                  *ro = rd->recv_off + (size_t)q * nd,
                  *rl = rd->recv_len + (size_t)q * nd;
    const sg_fft_xbox b = fwd ? xbox(rd, ncomp, rl, rl, NULL, NULL,
                                     rd->dst_shape, ro, NULL)
                              : xbox(rd, ncomp, sl, sl, NULL, NULL,
                                     rd->src_phys, so, rd->src_map);
    SG_TRY(xbox_run(p, &b, theirs + (size_t)tdsp[q] * es, out));
  }
fail:
  free(cnt);
  return st;
}

/* ---- the stages ------------------------------------------------------------ */

static void *scr_a(sg_fft_plan_t p) { return p->cuda ? p->Ad : p->A; }
static void *scr_b(sg_fft_plan_t p) { return p->cuda ? p->Bd : p->B; }
static void *other(sg_fft_plan_t p, const void *cur) {
  return cur == scr_a(p) ? scr_b(p) : scr_a(p);
}

static sg_status group_of(sg_group_t const *grp, const sg_fft_redist *rd,
                          sg_group_t *g) {
  *g = rd->axis >= 0 && rd->P > 1 && grp ? grp[rd->axis] : NULL;
  return SG_OK;
}

static sg_status fft_stage(sg_fft_plan_t p, int i, int fwd, const void *in,
                           void *out) {
  const sg_fft_stage *s = &p->st[i];
  if (s->empty) return SG_OK;
  if (!p->cuda) {
    sg_fft_stage_exec_host(p, s, fwd, in, out);
    return SG_OK;
  }
#if SG_HAVE_CUDA
  return sg_fft_cuda_stage_exec(p->cst[i], fwd, (void *)(uintptr_t)in, out);
#else
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "the FFT on a device: built without CUDA");
#endif
}

static sg_status run_fwd(sg_fft_plan_t p, sg_group_t const *grp, const void *x,
                         void *y) {
  sg_status st = SG_OK;
  const void *cur = x;
  for (int i = 0; i < p->nstages; ++i) {
    const sg_fft_stage *s = &p->st[i];
    void *out = i == p->nstages - 1 ? y : other(p, cur);
    double t0 = MPI_Wtime();
    if (s->kind == STAGE_FFT) {
      SG_TRY(fft_stage(p, i, 1, cur, out));
      p->t_fft += MPI_Wtime() - t0;
    } else {
      sg_group_t g;
      SG_TRY(group_of(grp, &s->rd, &g));
      SG_TRY(dev_redist(p, &s->rd, g, 1, cur, out));
      p->t_xpose += MPI_Wtime() - t0;
    }
    cur = out;
  }
fail:
  return st;
}

/* y (spectral) to x (real); y is preserved: a stage's backward that
 * destroys its input (cuFFT's every stage, FFTW's c2r) reads a scratch
 * copy. */
static sg_status run_bwd(sg_fft_plan_t p, sg_group_t const *grp, const void *y,
                         void *x) {
  sg_status st = SG_OK;
  const int nd = p->D + 1;
  const void *cur = y;
  for (int i = p->nstages - 1; i >= 0; --i) {
    const sg_fft_stage *s = &p->st[i];
    void *out = i == 0 ? x : other(p, cur);
    double t0 = MPI_Wtime();
    if (s->kind == STAGE_FFT) {
      void *in = (void *)(uintptr_t)cur;
      if (!s->empty && (s->r2c || p->cuda) && cur != scr_a(p) &&
          cur != scr_b(p)) {
        void *tmp = out == scr_a(p) ? scr_b(p) : scr_a(p);
        SG_TRY(copy_run(p, tmp, cur,
                        (size_t)sg_fft_prod64(s->out_shape, nd) * 2 *
                            p->real_size));
        in = tmp;
      }
      if (!s->empty && s->r2c) SG_TRY(c2r_cols_run(p, s, in));
      SG_TRY(fft_stage(p, i, 0, in, out));
      p->t_fft += MPI_Wtime() - t0;
    } else {
      sg_group_t g;
      SG_TRY(group_of(grp, &s->rd, &g));
      SG_TRY(dev_redist(p, &s->rd, g, 0, cur, out));
      p->t_xpose += MPI_Wtime() - t0;
    }
    cur = out;
  }
fail:
  return st;
}

sg_status sg_fft_dev_run(sg_fft_plan_t p, sg_group_t const *grp, int which,
                         const void *in, void *out) {
  sg_status st = SG_OK;
  if (!p) SG_RAISE(SG_ERR_INVALID_ARG, "plan is NULL");
  if (!p->devst || p->nchunk != 1)
    SG_RAISE(SG_ERR_INTERNAL,
             "the FFT on a device needs a plan with device stages");
  const int64_t ns = sg_fft_plan_local_count(p, SG_FFT_SPACE_SPECTRAL),
                nr = sg_fft_plan_local_count(p, SG_FFT_SPACE_REAL);
  switch (which) {
  case 0:
    SG_TRY(run_fwd(p, grp, in, out));
    SG_TRY(scale_run(p, out, ns, p->fwd_scale));
    break;
  case 1:
    SG_TRY(run_bwd(p, grp, in, out));
    SG_TRY(scale_run(p, out, nr, p->inv_scale));
    break;
  case 2: /* F^T = G diag(w): w = 1/2 on the halved dim's pair modes */
    SG_TRY(copy_run(p, scr_a(p), in, (size_t)ns * p->real_size));
    SG_TRY(weight_run(p, scr_a(p), 0.5, p->fwd_scale));
    SG_TRY(run_bwd(p, grp, scr_a(p), out));
    break;
  case 3: /* G^T = diag(c) F: c = 2 on the pair modes */
    SG_TRY(run_fwd(p, grp, in, out));
    SG_TRY(weight_run(p, out, 2.0, p->inv_scale));
    break;
  default: SG_RAISE(SG_ERR_INVALID_ARG, "unknown FFT direction %d", which);
  }
fail:
  return st;
}
