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

#include "fft_plan_impl.h"
#include "sg_config.h"
#include "sg_shardtensor.h"

/* ---- FFTW threads ---------------------------------------------------------- */

static pthread_once_t fftw_once = PTHREAD_ONCE_INIT;
static int fftw_threads_ok = 0;
static void fftw_threads_init(void) {
  fftw_threads_ok = fftw_init_threads() != 0 && fftwf_init_threads() != 0;
}

/* ---- small helpers ---------------------------------------------------------- */

void sg_fft_desc_init(sg_fft_desc *desc) {
  memset(desc, 0, sizeof *desc);
  desc->dtype = SG_DTYPE_F64;
  desc->device = sg_device_host();
  desc->ndim = 2;
  desc->batch = 1;
  for (int d = 0; d < SG_FFT_MAX_DIMS; ++d) desc->split[d] = -1;
  desc->norm = SG_FFT_NORM_BACKWARD;
}

/* Is dim d of the layout split by any axis? */
static int is_whole(const sg_fft_layout *l, int d) { return l->nsplit[d] == 0; }

/* ---- planning ------------------------------------------------------------- */

static sg_status validate(const sg_fft_desc *d, const sg_fft_axes *ax) {
  sg_status st = SG_OK;
  if (d->dtype != SG_DTYPE_F32 && d->dtype != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_INVALID_ARG, "FFT dtype must be f32 or f64, got %s",
             sg_dtype_name(d->dtype));
  if (d->device.kind == SG_DEVICE_CUDA) {
#if !SG_HAVE_CUDA
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "distributed FFT on CUDA: shardgrid was "
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
    int64_t maxk = i == d->ndim - 1 ? sg_fft_halved(d->shape[i])
                                    : d->shape[i] / 2;
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
      SG_RAISE(SG_ERR_INVALID_ARG,
               "FFT split[%d]: axis %d has no "
               "communicator",
               i, a);
    for (int j = 0; j < i; ++j)
      if (a >= 0 && d->split[j] == a)
        SG_RAISE(SG_ERR_INVALID_ARG,
                 "FFT dims %d and %d are both split by "
                 "axis %d",
                 j, i, a);
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
/* The halved dim keeps fewer than all its modes (host plans). */
static int keeps_fewer_last(const sg_fft_plan_t p) {
  const int D = p->D;
  if (p->devst || D < 2) return 0;
  int64_t k = p->desc.keep[D - 1];
  return k > 0 && k < sg_fft_halved(p->desc.shape[D - 1]);
}

static int prune_first(const sg_fft_plan_t p) {
  const int D = p->D;
  if (!keeps_fewer_last(p)) return 0;
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
  if (p->devst || B <= 1) return B;
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
  maxab = (size_t)sg_fft_prod64(phys, nd) * es;
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
          if (!done[d] && L.nsplit[d] <= best) {
            best = L.nsplit[d];
            target = d;
          }
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
      if (first && (prune_first(p) || p->devst)) {
        /* a device plan's r2c is 1-D too: its c2r then reads only rows of
         * the halved dim, whose self-conjugate columns the device path
         * makes real first (fft_dev.c), so cuFFT computes FFTW's function */
        s->tdims[s->nt++] = D;
        s->dft = !p->devst &&
                 sg_fft_dft_wanted(p->desc.shape[D - 1], p->desc.keep[D - 1]);
      } else {
        for (int d = 0; d < D; ++d)
          if (!done[d] && is_whole(&L, d)) s->tdims[s->nt++] = d + 1;
        /* the last dim was split: after the redistribution that made it
         * whole it is transformed alone, and the kept modes come from the
         * same product as an unsplit plan's pruned stage (the same
         * arithmetic per row, so the same bits on every mesh) */
        if (first && s->nt == 1 && s->tdims[0] == D && keeps_fewer_last(p))
          s->dft = sg_fft_dft_wanted(p->desc.shape[D - 1], p->desc.keep[D - 1]);
      }
      int64_t log[SG_FFT_ND];
      local_extents(p, &L, log);
      for (int d = 0; d < nd; ++d) s->in_shape[d] = s->out_shape[d] = log[d];
      if (first)
        s->out_shape[D] = s->dft ? p->desc.keep[D - 1]
                                 : sg_fft_halved(p->desc.shape[D - 1]);
      s->empty = sg_fft_prod64(s->in_shape, nd) == 0 ||
                 sg_fft_prod64(s->out_shape, nd) == 0;
      es = 2 * p->real_size;
      size_t ob = (size_t)sg_fft_prod64(s->out_shape, nd) * es;
      if (ob > maxab) maxab = ob;
      for (int d = 0; d < nd; ++d) phys[d] = s->out_shape[d];
      for (int i = 0; i < s->nt; ++i) {
        int d = s->tdims[i] - 1;
        done[d] = 1;
        int64_t full = (d == D - 1) ? sg_fft_halved(p->desc.shape[d])
                                    : p->desc.shape[d];
        L.shape[d] = kept_len(&p->desc, d, full);
        if (d != D - 1 && p->desc.keep[d] > 0)
          pmap[d + 1] = (sg_fft_map){p->desc.keep[d], p->desc.shape[d]};
        /* the product writes only the kept modes: nothing to cut */
        if (L.shape[d] != full && !s->dft) pending = 1;
      }
      first = 0;
    } else {
      int g = L.split[target][L.nsplit[target] - 1];
      int dest = -1, best = 1 << 30;
      for (int d = 0; d < D; ++d)
        if (done[d] && L.nsplit[d] < best) {
          best = L.nsplit[d];
          dest = d;
        }
      if (dest < 0) {
        best = 1 << 30;
        for (int d = 0; d < D; ++d)
          if (d != target && L.nsplit[d] <= best) {
            best = L.nsplit[d];
            dest = d;
          }
      }
      if (dest < 0 || L.nsplit[dest] >= SG_FFT_MAX_DIMS)
        SG_RAISE(SG_ERR_INTERNAL, "FFT planner found no dim to transpose to");
      int64_t log[SG_FFT_ND];
      local_extents(p, &L, log);
      sg_fft_layout L2 = L;
      L2.nsplit[target]--;
      L2.split[dest][L2.nsplit[dest]++] = g;
      int64_t po, plen;
      sg_fft_layout_dim_box(&L2, target, p->axes.size, p->axes.rank, &po,
                            &plen);
      s->kind = STAGE_REDIST;
      SG_TRY(sg_fft_redist_init(
          &s->rd, &p->axes, nd, es, g, target + 1, dest + 1, phys, log, pmap,
          !(p->desc.flags & SG_FFT_MPI_ALLTOALL) && !p->devst, &plen));
      size_t ob = (size_t)sg_fft_prod64(s->rd.dst_shape, nd) * es;
      if (ob > maxab) maxab = ob;
      if ((size_t)s->rd.send_total * es > maxs)
        maxs = (size_t)s->rd.send_total * es;
      if ((size_t)s->rd.recv_total * es > maxr)
        maxr = (size_t)s->rd.recv_total * es;
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
    /* the messages of the transposes on the device (fft_dev.c) */
    SG_TRY(sg_malloc(p->desc.device, maxs, &p->Sd));
    SG_TRY(sg_malloc(p->desc.device, maxr, &p->Rd));
    for (int i = 0; i < p->nstages; ++i) {
      sg_fft_stage *s = &p->st[i];
      if (s->kind != STAGE_FFT || s->empty) continue;
      SG_TRY(sg_fft_cuda_stage_create(p->desc.dtype == SG_DTYPE_F64, s->r2c, nd,
                                      s->in_shape, s->out_shape, s->nt,
                                      s->tdims, &p->cst[i]));
    }
#endif
  } else {
    size_t tile = 0;
    for (int i = 0; i < p->nstages; ++i) {
      size_t b = sg_fft_stage_block_geometry(p, &p->st[i]);
      if (b > tile) tile = b;
    }
    p->bytes_tile = tile;
    if (tile) SG_TRY(sg_malloc(sg_device_host(), tile * (size_t)p->nth, &p->T));
    for (int i = 0; i < p->nstages; ++i)
      if (p->st[i].kind == STAGE_FFT && !p->st[i].empty)
        SG_TRY(sg_fft_stage_make_fftw(p, &p->st[i], p->A, p->B));
  }
fail:
  return st;
}

static sg_status plan_create_axes(MPI_Comm comm, const sg_fft_axes *axes,
                                  const sg_fft_desc *desc, sg_fft_plan_t *out) {
  sg_status st = SG_OK;
  struct sg_fft_plan *p = NULL;
  int agreed = 0;
  if (!out || !desc) SG_RAISE(SG_ERR_INVALID_ARG, "plan or desc is NULL");
  *out = NULL;
  SG_TRY(validate(desc, axes));
  pthread_once(&fftw_once, fftw_threads_init);
  if (!fftw_threads_ok) SG_RAISE(SG_ERR_FFTW, "fftw_init_threads failed");
  p = calloc(1, sizeof *p);
  if (!p) SG_RAISE(SG_ERR_ALLOC, "out of memory for an FFT plan");
  p->desc = *desc;
  p->axes = *axes;
  p->cuda = desc->device.kind == SG_DEVICE_CUDA;
  p->devst = p->cuda || (desc->flags & SG_FFT_DEVICE_STAGES) != 0;
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
    int64_t full = d == p->D - 1 ? sg_fft_halved(desc->shape[d])
                                 : desc->shape[d];
    p->kmap[d] = (d != p->D - 1 && desc->keep[d] > 0)
                     ? (sg_fft_map){desc->keep[d], desc->shape[d]}
                     : (sg_fft_map){0, full};
  }
  double n = 1;
  for (int d = 0; d < p->D; ++d) n *= (double)desc->shape[d];
  p->fwd_scale = desc->norm == SG_FFT_NORM_ORTHO ? 1.0 / sqrt(n) : 1.0;
  p->inv_scale = desc->norm == SG_FFT_NORM_NONE
                     ? 1.0
                     : (desc->norm == SG_FFT_NORM_ORTHO ? 1.0 / sqrt(n)
                                                        : 1.0 / n);
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
  if (p->nchunk > 1) SG_TRY(sg_malloc(sg_device_host(), p->bytes_ab, &p->W));
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
                           MPI_Comm *axes, int *split, MPI_Comm *comm,
                           unsigned *mask) {
  sg_status st = SG_OK;
  unsigned found = 0;
  sg_group_t g = NULL;
  if (!mesh || !dims || !axes || !split || !comm || n < 1 ||
      n > SG_FFT_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_fft_mesh_axes: NULL argument or %d dims (1..%d)", n,
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
  if (!mesh)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_fft_plan_create: mesh is NULL");
  sg_status st = sg_fft_axes_from_mesh(&ax, mesh);
  if (st != SG_OK) return sg_fft_agree(sg_mesh_comm(mesh), st);
  return plan_create_axes(sg_mesh_comm(mesh), &ax, desc, plan);
}

sg_status sg_fft_plan_destroy(sg_fft_plan_t *plan) {
  if (!plan || !*plan) return SG_OK;
  struct sg_fft_plan *p = *plan;
  for (int i = 0; i < p->nstages; ++i) {
    if (!p->cuda)
      sg_fft_stage_free(p, &p->st[i]);
    else if (p->st[i].kind == STAGE_REDIST)
      sg_fft_redist_free(&p->st[i].rd);
#if SG_HAVE_CUDA
    sg_fft_cuda_stage_destroy(&p->cst[i]);
#endif
  }
  if (p->cuda) {
    sg_free(p->desc.device, &p->Ad);
    sg_free(p->desc.device, &p->Bd);
    sg_free(p->desc.device, &p->Sd);
    sg_free(p->desc.device, &p->Rd);
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
    offset[d] = space == SG_FFT_SPACE_REAL ? plan->real_off[d]
                                           : plan->spec_off[d];
    shape[d] = space == SG_FFT_SPACE_REAL ? plan->real_len[d]
                                          : plan->spec_len[d];
  }
}

int64_t sg_fft_plan_local_count(sg_fft_plan_t plan, sg_fft_space space) {
  if (space == SG_FFT_SPACE_REAL)
    return plan->desc.batch * sg_fft_prod64(plan->real_len, plan->D);
  return 2 * plan->desc.batch * sg_fft_prod64(plan->spec_len, plan->D);
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
int64_t sg_fft_plan_bytes_moved(sg_fft_plan_t plan) {
  return plan->bytes_moved;
}

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
                   s->dft ? "r2c (kept modes, matrix product)"
                          : (s->r2c ? "r2c" : "c2c"),
                   dl);
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
             "per chunk)\n",
             (long long)p->nchunk, (long long)p->cb);
fail:
  return st;
}
