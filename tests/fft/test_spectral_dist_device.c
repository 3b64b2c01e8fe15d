/* The spectral convolution's device path on a split domain (issue 22:
 * sg_spectral_conv_forward_dev / _backward_dev) on the host: the device
 * steps on host memory (the faked device: FFTW for cuFFT, the SG_HD box
 * copies, weights and contractions of fft_dev_inl.h / sg_spec_inl.h in
 * host loops, the transposes' messages through the comm layer, MPI)
 * against the host's split path (sg_spectral_conv_forward / _backward) on
 * every mesh of 1-4 ranks (ft_layouts: 1; p = 2, 3 (uneven), 4; 2x2) and
 * every way of splitting the dims over them: y, the saved spectrum, dx and
 * dW (accumulated onto a non-zero dW), W replicated (dW Partial) and
 * sharded by modes (dW the local box), f64 within 1e-12 and f32 within
 * 2e-5 normwise (the device plan's FFTW r2c against the host plan's kept-
 * mode product: rounding; the contractions are the host's products summed
 * in the same order), the count of bit-equal values printed. And the
 * device transforms alone (sg_fft_dev_run on an SG_FFT_DEVICE_STAGES
 * plan): forward and inverse against the host plan (1e-12) and the
 * adjoint identities <F x, y> = <x, F^T y>, <G y, x> = <y, G^T x> over the
 * ranks (f64, 1e-12): the device transpose's reverse is the adjoint of its
 * forward. 2-D and 3-D, odd and even lengths, cin != cout both ways,
 * batch > 1. Needs no GPU; runs in every build. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fft_plan_impl.h" /* sg_fft_dev_run */
#include "fft_testutil.h"
#include "sg_comm.h" /* sg_mesh_enable_nccl */
#include "sg_config.h"
#include "sg_fft.h"
#include "sg_mesh.h"
#include "sg_spectral.h"
#include "sg_test.h"
#include "sg_threads.h" /* sg_cuda_device_local */
#if SG_HAVE_CUDA
#include "autograd_impl.h" /* ag_fake_cuda */
#include "sg_autograd.h"
#endif

static int64_t prodn(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= v[i];
  return p;
}

/* normwise error of got against want (n values, dtype dt), max over the
 * ranks: max |got - want| / max(1, max |want|); *same: bit-equal count */
static double nerr(const void *got, const void *want, int64_t n, sg_dtype dt,
                   int64_t *same) {
  double m = 1, e = 0;
  int64_t s = 0;
  for (int64_t i = 0; i < n; ++i) {
    double a, b;
    if (dt == SG_DTYPE_F64) {
      a = ((const double *)got)[i];
      b = ((const double *)want)[i];
    } else {
      a = ((const float *)got)[i];
      b = ((const float *)want)[i];
    }
    s += a == b;
    if (fabs(b) > m) m = fabs(b);
    const double d = fabs(a - b);
    if (!(d <= e)) e = d;
  }
  double loc[2] = {e, m}, glob[2];
  MPI_Allreduce(loc, glob, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  int64_t gs = 0, gn = 0;
  MPI_Allreduce(&s, &gs, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&n, &gn, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (same) {
    same[0] = gs;
    same[1] = gn;
  }
  return glob[0] / glob[1];
}

static void check(const char *what, const char *part, const void *got,
                  const void *want, int64_t n, sg_dtype dt) {
  int64_t same[2];
  const double tol = dt == SG_DTYPE_F64 ? 1e-12 : 2e-5;
  const double e = nerr(got, want, n, dt, same);
  SG_CHECK(e <= tol, "%s %s: device vs host %.2e > %.0e", what, part, e, tol);
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (r == 0)
    printf("%-58s %-5s err %.2e  bits equal %lld/%lld\n", what, part, e,
           (long long)same[0], (long long)same[1]);
}

static void *alloc(size_t n, size_t es) {
  void *p = calloc(n > 0 ? n : 1, es);
  if (!p) exit(1);
  return p;
}

static void fill(void *x, int64_t n, uint64_t seed, sg_dtype dt) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = ft_value(seed, i);
    if (dt == SG_DTYPE_F64)
      ((double *)x)[i] = v;
    else
      ((float *)x)[i] = (float)v;
  }
}

/* nw_layouts: 1 W replicated, 2 also sharded by modes */
static void run_conv(int D, const int64_t *shape, const int64_t *keep,
                     int64_t nb, int64_t ci, int64_t co, sg_dtype dt,
                     const ft_layout *L, int nl, int nw_layouts) {
  const int64_t nr = prodn(shape, D);
  const size_t es = sg_dtype_size(dt);
  int64_t K[3];
  ft_kept_shape(D, shape, keep, K);
  const int64_t nw = 2 * ci * co * prodn(K, D);
  double *x = alloc((size_t)(nb * ci * nr), sizeof(double));
  double *r = alloc((size_t)(nb * co * nr), sizeof(double));
  double *w = alloc((size_t)nw, sizeof(double));
  ft_fill(x, nb * ci * nr, 41);
  ft_fill(r, nb * co * nr, 42);
  ft_fill(w, nw, 43);
  sg_fft_desc desc;
  sg_fft_desc_init(&desc);
  desc.dtype = dt;
  desc.ndim = D;
  desc.batch = nb;
  desc.nthreads = 1;
  for (int d = 0; d < D; ++d) {
    desc.shape[d] = shape[d];
    desc.keep[d] = keep[d];
  }
  for (int li = 0; li < nl; ++li) {
    for (int d = 0; d < D; ++d) desc.split[d] = L[li].split[d];
    for (int sharded = 0; sharded < nw_layouts; ++sharded) {
      char what[200];
      snprintf(what, sizeof what, "%dD %lldx%lldx%lld %s %lld->%lld b%lld %s%s",
               D, (long long)shape[0], (long long)shape[1],
               (long long)(D == 3 ? shape[2] : 1), sg_dtype_name(dt),
               (long long)ci, (long long)co, (long long)nb, L[li].name,
               sharded ? " W box" : "");
      sg_spectral_conv_t conv = NULL;
      SG_CHECK_OK(sg_spectral_conv_create(L[li].mesh, &desc, ci, co, &conv));
      if (!conv) continue;
      if (sharded)
        SG_CHECK_OK(sg_spectral_conv_set_weight_layout(
            conv, SG_SPECTRAL_WEIGHT_SHARD_MODES));
      sg_fft_plan_t pin = sg_spectral_conv_plan(conv, 0);
      int64_t ro[3], rl[3];
      sg_fft_plan_local_box(pin, SG_FFT_SPACE_REAL, ro, rl);
      const int64_t nx = nb * ci * prodn(rl, D), ny = nb * co * prodn(rl, D),
                    nh = sg_spectral_conv_spectrum_count(conv),
                    nwl = sharded ? sg_spectral_conv_local_weight_count(conv)
                                  : nw;
      void *xl = alloc((size_t)nx, es), *rl_ = alloc((size_t)ny, es),
           *wl = alloc((size_t)nwl, es);
      void *yh = alloc((size_t)ny, es), *yd = alloc((size_t)ny, es),
           *hh = alloc((size_t)nh, es), *hd = alloc((size_t)nh, es),
           *dxh = alloc((size_t)nx, es), *dxd = alloc((size_t)nx, es),
           *dwh = alloc((size_t)nwl, es), *dwd = alloc((size_t)nwl, es);
      ft_extract(x, D, shape, nb * ci, 1, ro, rl, xl, dt);
      ft_extract(r, D, shape, nb * co, 1, ro, rl, rl_, dt);
      if (sharded) {
        int64_t kept[3], off[3], ext[3];
        sg_spectral_conv_weight_box(conv, kept, off, ext);
        /* W (ci*co, K...) complex: this rank's box of modes */
        ft_extract(w, D, kept, ci * co, 2, off, ext, wl, dt);
      } else {
        for (int64_t i = 0; i < nw; ++i) {
          if (dt == SG_DTYPE_F64)
            ((double *)wl)[i] = w[i];
          else
            ((float *)wl)[i] = (float)w[i];
        }
      }
      fill(dwh, nwl, 44, dt);
      memcpy(dwd, dwh, (size_t)nwl * es);
      SG_CHECK_OK(sg_spectral_conv_forward(conv, xl, wl, yh, hh));
      SG_CHECK_OK(sg_spectral_conv_forward_dev(
          conv, L[li].mesh, sg_device_host(), xl, wl, yd, hd));
      check(what, "y", yd, yh, ny, dt);
      check(what, "xhat", hd, hh, nh, dt);
      SG_CHECK_OK(sg_spectral_conv_backward(conv, xl, hh, wl, rl_, dxh, dwh));
      SG_CHECK_OK(sg_spectral_conv_backward_dev(
          conv, L[li].mesh, sg_device_host(), xl, hd, wl, rl_, dxd, dwd));
      check(what, "dx", dxd, dxh, nx, dt);
      check(what, "dW", dwd, dwh, nwl, dt);
      /* the spectrum recomputed (xhat NULL), dx skipped */
      memcpy(dwd, dwh, (size_t)nwl * es);
      SG_CHECK_OK(
          sg_spectral_conv_backward(conv, xl, NULL, wl, rl_, NULL, dwh));
      SG_CHECK_OK(sg_spectral_conv_backward_dev(
          conv, L[li].mesh, sg_device_host(), xl, NULL, wl, rl_, NULL, dwd));
      check(what, "dW2", dwd, dwh, nwl, dt);
      sg_spectral_conv_destroy(&conv);
      void *bufs[] = {xl, rl_, wl, yh, yd, hh, hd, dxh, dxd, dwh, dwd};
      for (size_t i = 0; i < sizeof bufs / sizeof *bufs; ++i) free(bufs[i]);
    }
  }
  free(x);
  free(r);
  free(w);
}

/* The device transforms of an SG_FFT_DEVICE_STAGES plan against the host
 * plan, and their adjoint identities (f64). */
static double dot(const double *a, const double *b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  double g = 0;
  MPI_Allreduce(&s, &g, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return g;
}

static void run_fft(int D, const int64_t *shape, const int64_t *keep,
                    int64_t batch, const ft_layout *L, int nl) {
  for (int li = 0; li < nl; ++li) {
    sg_fft_desc d;
    sg_fft_desc_init(&d);
    d.ndim = D;
    d.batch = batch;
    d.nthreads = 1;
    for (int k = 0; k < D; ++k) {
      d.shape[k] = shape[k];
      d.keep[k] = keep[k];
      d.split[k] = L[li].split[k];
    }
    char what[160];
    snprintf(what, sizeof what,
             "fft %dD %lldx%lldx%lld keep %lld,%lld b%lld %s", D,
             (long long)shape[0], (long long)shape[1],
             (long long)(D == 3 ? shape[2] : 1), (long long)keep[0],
             (long long)keep[1], (long long)batch, L[li].name);
    sg_fft_plan_t ph = NULL, pd = NULL;
    SG_CHECK_OK(sg_fft_plan_create(L[li].mesh, &d, &ph));
    d.flags |= SG_FFT_DEVICE_STAGES;
    SG_CHECK_OK(sg_fft_plan_create(L[li].mesh, &d, &pd));
    if (!ph || !pd) {
      sg_fft_plan_destroy(&pd);
      sg_fft_plan_destroy(&ph);
      continue;
    }
    sg_group_t grp[SG_FFT_MAX_AXES] = {NULL};
    for (int a = 0; a < sg_mesh_ndims(L[li].mesh); ++a)
      SG_CHECK_OK(sg_mesh_group(L[li].mesh, 1u << a, &grp[a]));
    const int64_t nr = sg_fft_plan_local_count(pd, SG_FFT_SPACE_REAL),
                  ns = sg_fft_plan_local_count(pd, SG_FFT_SPACE_SPECTRAL);
    SG_CHECK(nr == sg_fft_plan_local_count(ph, SG_FFT_SPACE_REAL) &&
                 ns == sg_fft_plan_local_count(ph, SG_FFT_SPACE_SPECTRAL),
             "%s: the device plan's blocks are the host's", what);
    double *x = alloc((size_t)nr, 8), *y = alloc((size_t)ns, 8),
           *fx = alloc((size_t)ns, 8), *fh = alloc((size_t)ns, 8),
           *gy = alloc((size_t)nr, 8), *gh = alloc((size_t)nr, 8),
           *ft = alloc((size_t)nr, 8), *gt = alloc((size_t)ns, 8);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    ft_fill(x, nr, 51 + (uint64_t)rank);
    ft_fill(y, ns, 61 + (uint64_t)rank);
    SG_CHECK_OK(sg_fft_dev_run(pd, grp, 0, x, fx));
    SG_CHECK_OK(sg_fft_forward(ph, x, fh));
    check(what, "F", fx, fh, ns, SG_DTYPE_F64);
    SG_CHECK_OK(sg_fft_dev_run(pd, grp, 1, y, gy));
    SG_CHECK_OK(sg_fft_inverse(ph, y, gh));
    check(what, "G", gy, gh, nr, SG_DTYPE_F64);
    SG_CHECK_OK(sg_fft_dev_run(pd, grp, 2, y, ft));
    SG_CHECK_OK(sg_fft_dev_run(pd, grp, 3, x, gt));
    const double a1 = dot(fx, y, ns), b1 = dot(x, ft, nr);
    const double a2 = dot(gy, x, nr), b2 = dot(y, gt, ns);
    const double e1 = fabs(a1 - b1) / fmax(1, fabs(a1)),
                 e2 = fabs(a2 - b2) / fmax(1, fabs(a2));
    SG_CHECK(e1 <= 1e-12 && e2 <= 1e-12, "%s adjoint: %.2e %.2e", what, e1, e2);
    if (rank == 0)
      printf("%-58s adjoint <Fx,y>-<x,F'y> %.1e  <Gy,x>-<y,G'x> %.1e\n", what,
             e1, e2);
    sg_fft_plan_destroy(&pd);
    sg_fft_plan_destroy(&ph);
    double *bufs[] = {x, y, fx, fh, gy, gh, ft, gt};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; ++i) free(bufs[i]);
  }
}

#if SG_HAVE_CUDA
/* The tape's spectral_conv on sharded variables (the CUDA build: the op
 * has device entries): host variables against faked cuda:0 variables
 * (ag_fake_cuda: host memory, so the node's device entry runs the split
 * domain's device path on host memory), y, dx and dW within 1e-12 (f64),
 * outputs and x's gradient on cuda:0. */
static sg_status tape_run(sg_spectral_conv_t conv, const ft_layout *L, int D,
                          const int64_t *lshape, const int64_t *gshape,
                          int64_t nw, const double *xb, const double *wb,
                          const double *seed, int cuda, double *y, double *dx,
                          double *dw, int *on_cuda) {
  sg_status st = SG_OK;
  const sg_device dev = {cuda ? SG_DEVICE_CUDA : SG_DEVICE_HOST, 0};
  sg_tape_t tape = NULL;
  sg_var x, w, *out = NULL;
  memset(&x, 0, sizeof x);
  memset(&w, 0, sizeof w);
  const int nd = 2 + D;
  int64_t nx = 1;
  for (int d = 0; d < nd; ++d) nx *= lshape[d];
  double *xv = alloc((size_t)nx, 8), *wv = alloc((size_t)nw, 8);
  memcpy(xv, xb, (size_t)nx * 8);
  memcpy(wv, wb, (size_t)nw * 8);
  memset(dw, 0, (size_t)nw * 8);
  sg_placement pl[SG_MESH_MAX_DIMS];
  for (int a = 0; a < SG_MESH_MAX_DIMS; ++a) pl[a] = sg_replicate();
  for (int d = 0; d < D; ++d)
    if (L->split[d] >= 0) pl[L->split[d]] = sg_shard(2 + d);
  ag_fake_cuda = cuda;
  SG_TRY(sg_var_init(&x, "x", SG_DTYPE_F64, nd, lshape, xv, 1));
  SG_TRY(sg_var_set_sharding(&x, L->mesh, pl, gshape));
  const int64_t ws[1] = {nw};
  SG_TRY(sg_var_init_param(&w, "W", SG_DTYPE_F64, 1, ws, wv, dw));
  if (cuda) {
    SG_TRY(sg_var_set_device(&x, dev));
    SG_TRY(sg_var_set_device(&w, dev));
  }
  SG_TRY(sg_tape_create(&tape));
  SG_TRY(sg_ag_spectral_conv(tape, conv, &x, &w, &out));
  const int64_t ny = sg_tensor_numel(&out->value);
  memcpy(y, out->value.data, (size_t)ny * 8);
  *on_cuda = out->value.device.kind == SG_DEVICE_CUDA;
  {
    const sg_tensor sd = sg_tensor_wrap((void *)(uintptr_t)seed, SG_DTYPE_F64,
                                        dev, out->value.ndim, out->value.shape);
    SG_TRY(sg_tape_backward_from(tape, 1, &out, &sd));
  }
  memcpy(dx, x.grad.data, (size_t)nx * 8);
  *on_cuda += 2 * (x.grad.device.kind == SG_DEVICE_CUDA);
fail:
  sg_tape_destroy(&tape);
  sg_var_release(&x);
  sg_var_release(&w);
  ag_fake_cuda = 0;
  free(xv);
  free(wv);
  return st;
}

static void run_tape(int D, const int64_t *shape, const int64_t *keep,
                     int64_t nb, int64_t ci, int64_t co, const ft_layout *L,
                     int nl) {
  const int64_t nr = prodn(shape, D);
  int64_t K[3];
  ft_kept_shape(D, shape, keep, K);
  const int64_t nw = 2 * ci * co * prodn(K, D);
  double *x = alloc((size_t)(nb * ci * nr), 8),
         *r = alloc((size_t)(nb * co * nr), 8), *w = alloc((size_t)nw, 8);
  ft_fill(x, nb * ci * nr, 71);
  ft_fill(r, nb * co * nr, 72);
  ft_fill(w, nw, 73);
  sg_fft_desc desc;
  sg_fft_desc_init(&desc);
  desc.ndim = D;
  desc.batch = nb;
  desc.nthreads = 1;
  for (int d = 0; d < D; ++d) {
    desc.shape[d] = shape[d];
    desc.keep[d] = keep[d];
  }
  for (int li = 0; li < nl; ++li) {
    for (int d = 0; d < D; ++d) desc.split[d] = L[li].split[d];
    char what[160];
    snprintf(what, sizeof what, "tape %dD %lldx%lldx%lld %lld->%lld %s", D,
             (long long)shape[0], (long long)shape[1],
             (long long)(D == 3 ? shape[2] : 1), (long long)ci, (long long)co,
             L[li].name);
    sg_spectral_conv_t conv = NULL;
    SG_CHECK_OK(sg_spectral_conv_create(L[li].mesh, &desc, ci, co, &conv));
    if (!conv) continue;
    int64_t ro[3], rl[3], ls[5], gs[5];
    sg_fft_plan_local_box(sg_spectral_conv_plan(conv, 0), SG_FFT_SPACE_REAL, ro,
                          rl);
    ls[0] = gs[0] = nb;
    ls[1] = gs[1] = ci;
    for (int d = 0; d < D; ++d) ls[2 + d] = rl[d], gs[2 + d] = shape[d];
    const int64_t nx = nb * ci * prodn(rl, D), ny = nb * co * prodn(rl, D);
    double *xl = alloc((size_t)nx, 8), *rr = alloc((size_t)ny, 8);
    ft_extract(x, D, shape, nb * ci, 1, ro, rl, xl, SG_DTYPE_F64);
    ft_extract(r, D, shape, nb * co, 1, ro, rl, rr, SG_DTYPE_F64);
    double *y[2], *dx[2], *dw[2];
    int on[2] = {0, 0};
    for (int c = 0; c < 2; ++c) {
      y[c] = alloc((size_t)ny, 8);
      dx[c] = alloc((size_t)nx, 8);
      dw[c] = alloc((size_t)nw, 8);
      SG_CHECK_OK(tape_run(conv, &L[li], D, ls, gs, nw, xl, w, rr, c, y[c],
                           dx[c], dw[c], &on[c]));
    }
    SG_CHECK(on[1] == 3, "%s: the device run's y and dx are on cuda:0 (%d)",
             what, on[1]);
    check(what, "y", y[1], y[0], ny, SG_DTYPE_F64);
    check(what, "dx", dx[1], dx[0], nx, SG_DTYPE_F64);
    check(what, "dW", dw[1], dw[0], nw, SG_DTYPE_F64);
    for (int c = 0; c < 2; ++c) free(y[c]), free(dx[c]), free(dw[c]);
    free(xl);
    free(rr);
    sg_spectral_conv_destroy(&conv);
  }
  free(x);
  free(r);
  free(w);
}
#endif

/* --gpu (tools/test-gpu: one rank per GPU, 1-4 ranks): the convolution on
 * x (2, 3, 10, 9) split over "h=P" (dim 0) on real device buffers, cuFFT
 * and NCCL on the mesh, against the host's split path on host buffers,
 * W replicated and sharded: y, dx, dW within 1e-10 (f64). One rank: the
 * one-process cuFFT path. Compile-verified until a GPU machine runs it. */
static void gpu_case(void) {
  const int D = 2;
  const int64_t shape[2] = {10, 9}, keep[2] = {3, 4}, nb = 2, ci = 3, co = 2;
  sg_mesh_t mesh = NULL;
  int di = -1;
  SG_CHECK_OK(sg_cuda_device_local(MPI_COMM_WORLD, &di));
  SG_CHECK(di >= 0, "--gpu: no CUDA device on rank %d", sg_test_rank);
  if (di < 0) return;
  char spec[32];
  snprintf(spec, sizeof spec, "h=%d", sg_test_size);
  SG_CHECK_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  if (!mesh) return;
  SG_CHECK_OK(sg_mesh_enable_nccl(mesh));
  const sg_device host = sg_device_host(), dev = {SG_DEVICE_CUDA, di};
  sg_fft_desc desc;
  sg_fft_desc_init(&desc);
  desc.ndim = D;
  desc.batch = nb;
  desc.shape[0] = shape[0], desc.shape[1] = shape[1];
  desc.keep[0] = keep[0], desc.keep[1] = keep[1];
  desc.split[0] = sg_test_size > 1 ? 0 : -1;
  int64_t K[3];
  ft_kept_shape(D, shape, keep, K);
  const int64_t nw = 2 * ci * co * prodn(K, D), nr = prodn(shape, D);
  double *x = alloc((size_t)(nb * ci * nr), 8),
         *r = alloc((size_t)(nb * co * nr), 8), *w = alloc((size_t)nw, 8);
  ft_fill(x, nb * ci * nr, 81);
  ft_fill(r, nb * co * nr, 82);
  ft_fill(w, nw, 83);
  for (int sharded = 0; sharded < 2; ++sharded) {
    sg_spectral_conv_t conv = NULL;
    SG_CHECK_OK(sg_spectral_conv_create(mesh, &desc, ci, co, &conv));
    if (!conv) break;
    if (sharded)
      SG_CHECK_OK(sg_spectral_conv_set_weight_layout(
          conv, SG_SPECTRAL_WEIGHT_SHARD_MODES));
    int64_t ro[3], rl[3], kept[3], off[3], ext[3];
    sg_fft_plan_local_box(sg_spectral_conv_plan(conv, 0), SG_FFT_SPACE_REAL, ro,
                          rl);
    sg_spectral_conv_weight_box(conv, kept, off, ext);
    const int64_t nx = nb * ci * prodn(rl, D), ny = nb * co * prodn(rl, D),
                  nh = sg_spectral_conv_spectrum_count(conv),
                  nwl = sharded ? sg_spectral_conv_local_weight_count(conv)
                                : nw;
    double *xl = alloc((size_t)nx, 8), *rl_ = alloc((size_t)ny, 8),
           *wl = alloc((size_t)nwl, 8), *yh = alloc((size_t)ny, 8),
           *dxh = alloc((size_t)nx, 8), *dwh = alloc((size_t)nwl, 8),
           *hh = alloc((size_t)nh, 8), *yd = alloc((size_t)ny, 8),
           *dxd = alloc((size_t)nx, 8), *dwd = alloc((size_t)nwl, 8);
    ft_extract(x, D, shape, nb * ci, 1, ro, rl, xl, SG_DTYPE_F64);
    ft_extract(r, D, shape, nb * co, 1, ro, rl, rl_, SG_DTYPE_F64);
    if (sharded)
      ft_extract(w, D, kept, ci * co, 2, off, ext, wl, SG_DTYPE_F64);
    else
      memcpy(wl, w, (size_t)nw * 8);
    SG_CHECK_OK(sg_spectral_conv_forward(conv, xl, wl, yh, hh));
    SG_CHECK_OK(sg_spectral_conv_backward(conv, xl, hh, wl, rl_, dxh, dwh));
    void *dx_ = NULL, *dr = NULL, *dw_ = NULL, *dy = NULL, *ddx = NULL,
         *ddw = NULL, *dh = NULL;
    sg_status st = sg_malloc(dev, (size_t)nx * 8 + 8, &dx_);
    if (st == SG_OK) st = sg_malloc(dev, (size_t)ny * 8 + 8, &dr);
    if (st == SG_OK) st = sg_malloc(dev, (size_t)nwl * 8 + 8, &dw_);
    if (st == SG_OK) st = sg_malloc(dev, (size_t)ny * 8 + 8, &dy);
    if (st == SG_OK) st = sg_malloc(dev, (size_t)nx * 8 + 8, &ddx);
    if (st == SG_OK) st = sg_calloc(dev, (size_t)nwl * 8 + 8, &ddw);
    if (st == SG_OK) st = sg_malloc(dev, (size_t)nh * 8 + 8, &dh);
    if (st == SG_OK) st = sg_memcpy(dev, dx_, host, xl, (size_t)nx * 8);
    if (st == SG_OK) st = sg_memcpy(dev, dr, host, rl_, (size_t)ny * 8);
    if (st == SG_OK) st = sg_memcpy(dev, dw_, host, wl, (size_t)nwl * 8);
    if (st == SG_OK)
      st = sg_spectral_conv_forward_dev(conv, mesh, dev, dx_, dw_, dy, dh);
    if (st == SG_OK)
      st = sg_spectral_conv_backward_dev(conv, mesh, dev, dx_, dh, dw_, dr, ddx,
                                         ddw);
    if (st == SG_OK) st = sg_memcpy(host, yd, dev, dy, (size_t)ny * 8);
    if (st == SG_OK) st = sg_memcpy(host, dxd, dev, ddx, (size_t)nx * 8);
    if (st == SG_OK) st = sg_memcpy(host, dwd, dev, ddw, (size_t)nwl * 8);
    SG_CHECK_OK(st);
    const double *got[3] = {yd, dxd, dwd}, *want[3] = {yh, dxh, dwh};
    const int64_t cnt[3] = {ny, nx, nwl};
    for (int k = 0; k < 3 && st == SG_OK; ++k)
      for (int64_t i = 0; i < cnt[k]; ++i)
        SG_CHECK(fabs(got[k][i] - want[k][i]) <= 1e-10,
                 "--gpu: spectral conv%s %s[%lld]: device %.17g, host %.17g",
                 sharded ? " (W box)" : "",
                 k == 0   ? "y"
                 : k == 1 ? "dx"
                          : "dW",
                 (long long)i, got[k][i], want[k][i]);
    void *dbuf[] = {dx_, dr, dw_, dy, ddx, ddw, dh};
    for (size_t i = 0; i < sizeof dbuf / sizeof *dbuf; ++i)
      sg_free(dev, &dbuf[i]);
    double *hbuf[] = {xl, rl_, wl, yh, dxh, dwh, hh, yd, dxd, dwd};
    for (size_t i = 0; i < sizeof hbuf / sizeof *hbuf; ++i) free(hbuf[i]);
    sg_spectral_conv_destroy(&conv);
  }
  if (sg_test_rank == 0)
    printf("--gpu: spectral conv on a split domain (%d ranks) = host\n",
           sg_test_size);
  free(x);
  free(r);
  free(w);
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], "--gpu")) {
      gpu_case();
      return sg_test_finish();
    }
  ft_layout L2[FT_MAX_LAYOUTS], L3[FT_MAX_LAYOUTS];
  const int n2 = ft_layouts(2, L2), n3 = ft_layouts(3, L3);
  {
    const int64_t s[2] = {10, 9}, k[2] = {3, 4};
    run_fft(2, s, k, 2, L2, n2);
    const int64_t s3[3] = {6, 7, 8}, k3[3] = {2, 3, 3};
    run_fft(3, s3, k3, 1, L3, n3);
  }
  {
    const int64_t s[2] = {10, 9}, k[2] = {3, 4};
    run_conv(2, s, k, 2, 3, 2, SG_DTYPE_F64, L2, n2, 2);
    run_conv(2, s, k, 2, 3, 2, SG_DTYPE_F32, L2, n2, 1);
    const int64_t s2[2] = {8, 12}, k2[2] = {2, 7}; /* Nyquist kept */
    run_conv(2, s2, k2, 1, 2, 3, SG_DTYPE_F64, L2, n2, 1);
    const int64_t s3[3] = {6, 7, 8}, k3[3] = {2, 3, 3};
    run_conv(3, s3, k3, 1, 2, 2, SG_DTYPE_F64, L3, n3, 2);
  }
#if SG_HAVE_CUDA
  {
    const int64_t s[2] = {10, 9}, k[2] = {3, 4};
    run_tape(2, s, k, 2, 3, 2, L2, n2);
  }
#endif
  ft_layouts_free();
  return sg_test_finish();
}
