/* Distributed losses: the loss of a prediction split over a domain group
 * (y) and a data group (batch) equals the one-process loss, its gradient
 * equals the one-process gradient, and both match central finite
 * differences in double precision. Meshes: every dp x h that fits. A NaN
 * or Inf at an unmasked point held by one rank is an error on every rank
 * (loss and evaluation metric); at masked points it is ignored.
 * The device path (issue 22): the loss on the tape's faked cuda:0
 * (ag_fake_cuda: "CUDA" buffers are host memory; the node runs its device
 * entries, saves and copies through the device helpers, reduces over the
 * mesh as host doubles) equals the host run bit for bit on every mesh, f32
 * and f64, with and without a mask, sg_dist_loss_value read back from the
 * device; and the SG_HD pieces the CUDA kernels run (dist_loss_inl.h:
 * sg_dloss_sample_sums, sg_dloss_coef, sg_dloss_grad) on odd sizes with
 * masks and NaN/Inf at masked and unmasked points against a plain
 * reference loop (f64 exact, f32 data widened: exact too) and the host
 * op's gradient (the same bits). */
#include "autograd_impl.h" /* ag_fake_cuda */
#include "dist_loss_inl.h"
#include "sg_dist_loss.h"
#include "sg_mesh.h"
#include "sg_rng.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 4, C = 2, NY = 7, NX = 5 };

static double whole_loss(sg_loss_kind k, const double *p, const double *t,
                         const double *m) {
  if (k == SG_LOSS_MSE) {
    double s = 0, c = 0;
    for (int i = 0; i < B * C * NY * NX; ++i) {
      s += m[i] * (p[i] - t[i]) * (p[i] - t[i]);
      c += m[i];
    }
    return s / c;
  }
  double r = 0;
  for (int b = 0; b < B; ++b) {
    double a = 0, d = 0;
    for (int i = b * C * NY * NX; i < (b + 1) * C * NY * NX; ++i) {
      a += m[i] * (p[i] - t[i]) * (p[i] - t[i]);
      d += m[i] * t[i] * t[i];
    }
    r += sqrt(a / d);
  }
  return r / B;
}

static void run(const char *spec, int ndp, sg_loss_kind kind) {
  sg_mesh_t mesh = NULL;
  sg_tape_t tape = NULL;
  double *lp = NULL, *lt = NULL, *lm = NULL;
  sg_var vp, vt, vm, *loss = NULL;
  memset(&vp, 0, sizeof vp);
  memset(&vt, 0, sizeof vt);
  memset(&vm, 0, sizeof vm);
  double p[B * C * NY * NX], t[B * C * NY * NX], m[B * C * NY * NX];
  SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 1, 0, 0, B * C * NY * NX,
                          SG_DTYPE_F64, p));
  SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 1, 1, 0, B * C * NY * NX,
                          SG_DTYPE_F64, t));
  for (int i = 0; i < B * C * NY * NX; ++i) m[i] = (i % 7) ? 1.0 : 0.0;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  int nh = sg_test_size / ndp, cd = sg_mesh_coord(mesh, 0),
      ch = sg_mesh_coord(mesh, 1);
  int64_t lb = B / ndp, b0 = cd * lb;
  int64_t y0 = (int64_t)ch * (NY / nh) + (ch < NY % nh ? ch : NY % nh),
          ny = NY / nh + (ch < NY % nh);
  int64_t n = lb * C * ny * NX;
  lp = malloc((size_t)(n + 1) * sizeof *lp);
  lt = malloc((size_t)(n + 1) * sizeof *lt);
  lm = malloc((size_t)(n + 1) * sizeof *lm);
  for (int64_t b = 0; b < lb; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < ny; ++j)
        for (int64_t i = 0; i < NX; ++i) {
          int64_t g = (((b0 + b) * C + c) * NY + y0 + j) * NX + i,
                  l = ((b * C + c) * ny + j) * NX + i;
          lp[l] = p[g], lt[l] = t[g], lm[l] = m[g];
        }
  sg_group_t dom = NULL, dat = NULL;
  SG_REQUIRE_OK(sg_mesh_group(mesh, 2u, &dom));
  SG_REQUIRE_OK(sg_mesh_group(mesh, 1u, &dat));
  sg_dist_loss_ctx ctx = {dom, dat, B};
  int64_t shape[4] = {lb, C, ny, NX};
  SG_REQUIRE_OK(sg_tape_create(&tape));
  SG_REQUIRE_OK(sg_var_init(&vp, "p", SG_DTYPE_F64, 4, shape, lp, 1));
  SG_REQUIRE_OK(sg_var_init(&vt, "t", SG_DTYPE_F64, 4, shape, lt, 0));
  SG_REQUIRE_OK(sg_var_init(&vm, "m", SG_DTYPE_F64, 4, shape, lm, 0));
  SG_REQUIRE_OK(sg_ag_dist_loss(tape, kind, &vp, &vt, &vm, &ctx, &loss));
  double val = sg_dist_loss_value(loss), ref = whole_loss(kind, p, t, m);
  SG_CHECK(fabs(val - ref) <= 1e-13 * fabs(ref),
           "%s kind %d: loss %.17g vs one process %.17g", spec, kind, val, ref);
  SG_REQUIRE_OK(sg_tape_backward(tape, loss));
  /* gradient vs central differences of the one-process loss */
  const double h = 1e-6;
  int64_t bad = 0;
  for (int64_t l = 0; l < n; l += 3) {
    int64_t b = l / (C * ny * NX), r = l % (C * ny * NX), c = r / (ny * NX),
            j = (r / NX) % ny, i = r % NX;
    int64_t g = (((b0 + b) * C + c) * NY + y0 + j) * NX + i;
    double keep = p[g];
    p[g] = keep + h;
    double up = whole_loss(kind, p, t, m);
    p[g] = keep - h;
    double dn = whole_loss(kind, p, t, m);
    p[g] = keep;
    double fd = (up - dn) / (2 * h), an = ((double *)vp.grad.data)[l];
    if (fabs(fd - an) > 1e-7 + 1e-6 * fabs(fd)) {
      if (!bad)
        sg_test_fail_at(
            __FILE__, __LINE__,
            "%s kind %d: dL/dp[%lld] = %.10g, finite difference %.10g", spec,
            kind, (long long)g, an, fd);
      ++bad;
    }
  }
  SG_CHECK(bad == 0, "%lld gradient mismatches", (long long)bad);
  /* evaluation helper: per-sample relative L2 over the domain */
  double rel[B];
  SG_CHECK_OK(
      sg_dist_rel_l2(SG_DTYPE_F64, lb, C * ny * NX, lp, lt, lm, dom, rel));
done:
  sg_tape_destroy(&tape);
  sg_var_release(&vp);
  sg_var_release(&vt);
  sg_var_release(&vm);
  free(lp);
  free(lt);
  free(lm);
  sg_mesh_destroy(&mesh);
}

/* The loss of (p, t, m) on a fresh tape: its status, and its value. */
static sg_status loss_of(sg_loss_kind kind, const int64_t *shape, double *p,
                         double *t, double *m, const sg_dist_loss_ctx *ctx,
                         double *value) {
  sg_tape_t tape = NULL;
  sg_var vp, vt, vm, *loss = NULL;
  memset(&vp, 0, sizeof vp);
  memset(&vt, 0, sizeof vt);
  memset(&vm, 0, sizeof vm);
  sg_status st = sg_tape_create(&tape);
  if (st == SG_OK) st = sg_var_init(&vp, "p", SG_DTYPE_F64, 4, shape, p, 1);
  if (st == SG_OK) st = sg_var_init(&vt, "t", SG_DTYPE_F64, 4, shape, t, 0);
  if (st == SG_OK) st = sg_var_init(&vm, "m", SG_DTYPE_F64, 4, shape, m, 0);
  if (st == SG_OK) st = sg_ag_dist_loss(tape, kind, &vp, &vt, &vm, ctx, &loss);
  *value = st == SG_OK ? sg_dist_loss_value(loss) : NAN;
  if (st ==
      SG_OK) { /* backward: a masked NaN gets gradient 0, no NaN anywhere */
    st = sg_tape_backward(tape, loss);
    int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    for (int64_t i = 0; st == SG_OK && i < n; ++i)
      if (!isfinite(((double *)vp.grad.data)[i])) {
        sg_test_fail_at(__FILE__, __LINE__, "gradient %lld is %g", (long long)i,
                        ((double *)vp.grad.data)[i]);
        break;
      }
  }
  sg_tape_destroy(&tape);
  sg_var_release(&vp);
  sg_var_release(&vt);
  sg_var_release(&vm);
  return st;
}

/* NaN/Inf at unmasked points: an error on every rank (one rank holds it),
 * no hang; at masked points: ignored. */
static void run_nonfinite(const char *spec, int ndp, sg_loss_kind kind) {
  sg_mesh_t mesh = NULL;
  double *p = NULL, *t = NULL, *m = NULL;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  int nh = sg_test_size / ndp, ch = sg_mesh_coord(mesh, 1);
  int64_t lb = B / ndp, ny = NY / nh + (ch < NY % nh), n = lb * C * ny * NX;
  p = malloc((size_t)n * sizeof *p);
  t = malloc((size_t)n * sizeof *t);
  m = malloc((size_t)n * sizeof *m);
  if (!p || !t || !m) {
    SG_CHECK(0, "out of memory");
    goto done;
  }
  SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 3, (uint64_t)sg_test_rank, 0, n,
                          SG_DTYPE_F64, p));
  SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 4, (uint64_t)sg_test_rank, 0, n,
                          SG_DTYPE_F64, t));
  for (int64_t i = 0; i < n; ++i) m[i] = i % 5 == 2 ? 0.0 : 1.0;
  sg_group_t dom = NULL, dat = NULL;
  SG_REQUIRE_OK(sg_mesh_group(mesh, 2u, &dom));
  SG_REQUIRE_OK(sg_mesh_group(mesh, 1u, &dat));
  sg_dist_loss_ctx ctx = {dom, dat, B};
  int64_t shape[4] = {lb, C, ny, NX};
  double clean = 0, v = 0;
  SG_CHECK_OK(loss_of(kind, shape, p, t, m, &ctx, &clean));
  /* NaN and Inf at masked points of every rank: the same loss */
  p[2] = NAN;
  t[7] = INFINITY;
  sg_status st = loss_of(kind, shape, p, t, m, &ctx, &v);
  SG_CHECK(st == SG_OK && v == clean,
           "%s kind %d: masked NaN/Inf: %s, loss %.17g vs %.17g (%s)", spec,
           kind, sg_status_name(st), v, clean, sg_last_error());
  /* a NaN prediction on the last rank only, an Inf target on rank 0 only */
  for (int c = 0; c < 2; ++c) {
    int who = c == 0 ? sg_test_size - 1 : 0;
    double *arr = c == 0 ? p : t, keep = arr[1];
    if (sg_test_rank == who) arr[1] = c == 0 ? NAN : -INFINITY;
    st = loss_of(kind, shape, p, t, m, &ctx, &v);
    SG_CHECK(st == SG_ERR_INVALID_ARG && strstr(sg_last_error(), "NaN/Inf"),
             "%s kind %d: %s on rank %d: %s (%s), loss %g", spec, kind,
             c == 0 ? "NaN prediction" : "Inf target", who, sg_status_name(st),
             sg_last_error(), v);
    /* the evaluation metric too, agreed over both groups */
    double rel[B];
    st = sg_dist_rel_l2_ctx(SG_DTYPE_F64, lb, C * ny * NX, p, t, m, &ctx, rel);
    SG_CHECK(st == SG_ERR_INVALID_ARG,
             "%s: sg_dist_rel_l2_ctx with a %s on rank %d: %s", spec,
             c == 0 ? "NaN" : "Inf", who, sg_status_name(st));
    st = sg_dist_rel_l2(SG_DTYPE_F64, lb, C * ny * NX, p, t, m, dom, rel);
    SG_CHECK(sg_test_rank != who || st == SG_ERR_INVALID_ARG,
             "%s: sg_dist_rel_l2 with a NaN here: %s", spec,
             sg_status_name(st));
    arr[1] = keep;
  }
  /* and the ranks are still in step: the clean loss again */
  p[2] = 0.0;
  t[7] = 0.0;
  SG_CHECK_OK(loss_of(kind, shape, p, t, m, &ctx, &v));
done:
  free(p);
  free(t);
  free(m);
  sg_mesh_destroy(&mesh);
}

/* The loss and gradient of local (p, t, m) on a fresh tape, the variables
 * on dev (a faked cuda:0 or the host): value, gradient (n of dt). */
static sg_status dev_loss(sg_device dev, sg_dtype dt, sg_loss_kind kind,
                          const int64_t *shape, void *p, void *t, void *m,
                          const sg_dist_loss_ctx *ctx, double *value,
                          void *grad) {
  sg_tape_t tape = NULL;
  sg_var vp, vt, vm, *loss = NULL;
  memset(&vp, 0, sizeof vp);
  memset(&vt, 0, sizeof vt);
  memset(&vm, 0, sizeof vm);
  const size_t bytes = (size_t)(shape[0] * shape[1] * shape[2] * shape[3]) *
                       sg_dtype_size(dt);
  sg_status st = sg_tape_create(&tape);
  if (st == SG_OK) st = sg_var_init(&vp, "p", dt, 4, shape, p, 1);
  if (st == SG_OK) st = sg_var_init(&vt, "t", dt, 4, shape, t, 0);
  if (st == SG_OK && m) st = sg_var_init(&vm, "m", dt, 4, shape, m, 0);
  if (st == SG_OK) st = sg_var_set_device(&vp, dev);
  if (st == SG_OK) st = sg_var_set_device(&vt, dev);
  if (st == SG_OK && m) st = sg_var_set_device(&vm, dev);
  if (st == SG_OK)
    st = sg_ag_dist_loss(tape, kind, &vp, &vt, m ? &vm : NULL, ctx, &loss);
  if (st == SG_OK) {
    *value = sg_dist_loss_value(loss);
    if (loss->value.device.kind != dev.kind ||
        loss->producer->device.kind != dev.kind)
      st = sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__,
                        "the loss is not on the inputs' device");
  }
  if (st == SG_OK) st = sg_tape_backward(tape, loss);
  if (st == SG_OK && vp.grad.device.kind != dev.kind)
    st = sg_error_set(SG_ERR_INTERNAL, __FILE__, __LINE__,
                      "the gradient is not on the device");
  if (st == SG_OK && bytes) memcpy(grad, vp.grad.data, bytes);
  sg_tape_destroy(&tape);
  sg_var_release(&vp);
  sg_var_release(&vt);
  if (m) sg_var_release(&vm);
  return st;
}

/* The loss on faked cuda:0 against the host, bit for bit, on this mesh:
 * f32/f64, mask or none, both kinds. */
static void run_device(const char *spec, int ndp) {
  sg_mesh_t mesh = NULL;
  double *p = NULL, *t = NULL, *m = NULL, *gh = NULL, *gd = NULL;
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  const int nh = sg_test_size / ndp, ch = sg_mesh_coord(mesh, 1);
  const int64_t lb = B / ndp, ny = NY / nh + (ch < NY % nh),
                n = lb * C * ny * NX;
  const int64_t shape[4] = {lb, C, ny, NX};
  sg_group_t dom = NULL, dat = NULL;
  SG_REQUIRE_OK(sg_mesh_group(mesh, 2u, &dom));
  SG_REQUIRE_OK(sg_mesh_group(mesh, 1u, &dat));
  const sg_dist_loss_ctx ctx = {dom, dat, B};
  const sg_device host = sg_device_host(), cu = {SG_DEVICE_CUDA, 0};
  const size_t cap = (size_t)(n + 1) * sizeof(double);
  p = malloc(cap), t = malloc(cap), m = malloc(cap), gh = malloc(cap),
  gd = malloc(cap);
  if (!p || !t || !m || !gh || !gd) {
    SG_CHECK(0, "out of memory");
    goto done;
  }
  for (int d = 0; d < 2; ++d) {
    const sg_dtype dt = d ? SG_DTYPE_F32 : SG_DTYPE_F64;
    SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 5, (uint64_t)sg_test_rank, 0,
                            n, dt, p));
    SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 6, (uint64_t)sg_test_rank, 0,
                            n, dt, t));
    for (int64_t i = 0; i < n; ++i)
      if (dt == SG_DTYPE_F32)
        ((float *)m)[i] = i % 3 ? (float)(0.5 + (double)(i % 4)) : 0.0f;
      else
        m[i] = i % 3 ? 0.5 + (double)(i % 4) : 0.0;
    for (int k = 0; k < 2; ++k)
      for (int mk = 0; mk < 2; ++mk) {
        const sg_loss_kind kind = k ? SG_LOSS_REL_L2 : SG_LOSS_MSE;
        double vh = 0, vd = 0;
        SG_CHECK_OK(dev_loss(host, dt, kind, shape, p, t, mk ? m : NULL, &ctx,
                             &vh, gh));
        ag_fake_cuda = 1;
        SG_CHECK_OK(
            dev_loss(cu, dt, kind, shape, p, t, mk ? m : NULL, &ctx, &vd, gd));
        ag_fake_cuda = 0;
        SG_CHECK(vd == vh && isfinite(vh) &&
                     !memcmp(gh, gd, (size_t)n * sg_dtype_size(dt)),
                 "%s %s kind %d mask %d: faked cuda:0 loss %.17g, host "
                 "%.17g, gradients %s",
                 spec, sg_dtype_name(dt), kind, mk, vd, vh,
                 memcmp(gh, gd, (size_t)n * sg_dtype_size(dt)) ? "differ"
                                                               : "equal");
      }
  }
  /* a NaN at an unmasked point of one rank: refused on every rank on the
   * device too */
  SG_CHECK_OK(sg_rng_fill(SG_RNG_NORMAL, 0, 1, 5, (uint64_t)sg_test_rank, 0, n,
                          SG_DTYPE_F64, p));
  for (int64_t i = 0; i < n; ++i) m[i] = 1.0;
  if (sg_test_rank == sg_test_size - 1) p[n - 1] = NAN;
  double v = 0;
  ag_fake_cuda = 1;
  sg_status st = dev_loss(cu, SG_DTYPE_F64, SG_LOSS_MSE, shape, p, t, m, &ctx,
                          &v, gd);
  ag_fake_cuda = 0;
  SG_CHECK(st == SG_ERR_INVALID_ARG && strstr(sg_last_error(), "NaN/Inf"),
           "%s: a NaN on the faked device: %s (%s)", spec, sg_status_name(st),
           sg_last_error());
done:
  free(p), free(t), free(m), free(gh), free(gd);
  sg_mesh_destroy(&mesh);
}

/* The SG_HD pieces the CUDA kernels run, on the host: odd sizes, masks,
 * NaN/Inf at masked and unmasked points. */
static void run_pieces(void) {
  enum { NB = 3, PER = 37, NN = NB * PER };
  for (int d = 0; d < 2; ++d) {
    const sg_dtype dt = d ? SG_DTYPE_F32 : SG_DTYPE_F64;
    const int f32 = d;
    double pd[NN], td[NN], md[NN];
    float pf[NN], tf[NN], mf[NN];
    SG_CHECK_OK(
        sg_rng_fill(SG_RNG_NORMAL, 0, 1, 9, 0, 0, NN, SG_DTYPE_F32, pf));
    SG_CHECK_OK(
        sg_rng_fill(SG_RNG_NORMAL, 0, 1, 10, 0, 0, NN, SG_DTYPE_F32, tf));
    SG_CHECK_OK(
        sg_rng_fill(SG_RNG_NORMAL, 0, 1, 9, 0, 0, NN, SG_DTYPE_F64, pd));
    SG_CHECK_OK(
        sg_rng_fill(SG_RNG_NORMAL, 0, 1, 10, 0, 0, NN, SG_DTYPE_F64, td));
    for (int i = 0; i < NN; ++i) {
      md[i] = i % 4 == 1 ? 0.0 : 0.25 * (i % 5 + 1);
      mf[i] = (float)md[i];
      if (f32) pd[i] = (double)pf[i], td[i] = (double)tf[i];
    }
    pd[5] = pf[5] = NAN, md[5] = mf[5] = 0.0f;   /* masked NaN: skipped */
    td[9] = tf[9] = INFINITY, md[9] = mf[9] = 0; /* masked Inf: skipped */
    pd[40] = pf[40] = NAN;                       /* unmasked: counted */
    td[80] = tf[80] = -INFINITY;                 /* unmasked: counted */
    const void *P = f32 ? (const void *)pf : pd,
               *T = f32 ? (const void *)tf : td,
               *M = f32 ? (const void *)mf : md;
    for (int rel = 0; rel < 2; ++rel)
      for (int mk = 0; mk < 2; ++mk) {
        double sums[2 * NB], bad = 0, rbad = 0;
        int ok = 1;
        for (int64_t i = 0; i < NB; ++i) {
          bad += sg_dloss_sample_sums(rel, f32, i * PER, (i + 1) * PER, P, T,
                                      mk ? M : NULL, &sums[2 * i],
                                      &sums[2 * i + 1]);
          double a = 0, b = 0; /* the reference: a plain loop */
          for (int64_t j = i * PER; j < (i + 1) * PER; ++j) {
            double w = mk ? md[j] : 1.0;
            if (w == 0.0) continue;
            if (!isfinite(pd[j]) || !isfinite(td[j])) {
              rbad += 1;
              continue;
            }
            a += w * (pd[j] - td[j]) * (pd[j] - td[j]);
            b += rel ? w * td[j] * td[j] : w;
          }
          ok &= a == sums[2 * i] && b == sums[2 * i + 1];
        }
        SG_CHECK(ok && bad == rbad && bad == (mk ? 2 : 4),
                 "%s rel %d mask %d: the SG_HD sums differ from the reference "
                 "(count %g, reference %g)",
                 sg_dtype_name(dt), rel, mk, bad, rbad);
      }
    /* the gradient pieces against the host op's (one rank): finite data */
    pd[40] = 0.5, td[80] = -0.5, pf[40] = 0.5f, tf[80] = -0.5f;
    for (int rel = 0; rel < 2; ++rel) {
      const sg_dist_loss_ctx ctx = {NULL, NULL, NB};
      const int64_t shape[4] = {NB, 1, 1, PER};
      double v = 0, gop[NN], sums[2 * NB + 1], S = 0, Mm = 0;
      SG_CHECK_OK(dev_loss(sg_device_host(), dt,
                           rel ? SG_LOSS_REL_L2 : SG_LOSS_MSE, shape, (void *)P,
                           (void *)T, (void *)M, &ctx, &v, gop));
      for (int64_t i = 0; i < NB; ++i) {
        sg_dloss_sample_sums(rel, f32, i * PER, (i + 1) * PER, P, T, M,
                             &sums[2 * i], &sums[2 * i + 1]);
        S += sums[2 * i], Mm += sums[2 * i + 1];
      }
      if (!rel) sums[0] = S, sums[1] = Mm; /* MSE: the global (S, M) */
      int same = 1;
      for (int64_t j = 0; j < NN; ++j) {
        const double c = sg_dloss_coef(rel, j / PER, sums, 1.0, NB);
        const double g = sg_dloss_grad(c, f32, j, P, T, M);
        same &= f32 ? (float)g == ((float *)gop)[j] : g == gop[j];
      }
      SG_CHECK(same, "%s rel %d: the SG_HD gradient differs from the host op",
               sg_dtype_name(dt), rel);
    }
  }
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  char spec[64];
  for (int dp = 1; dp <= sg_test_size; ++dp) {
    if (sg_test_size % dp || B % dp) continue;
    snprintf(spec, sizeof spec, "dp=%d,h=%d", dp, sg_test_size / dp);
    run(spec, dp, SG_LOSS_MSE);
    run(spec, dp, SG_LOSS_REL_L2);
    run_nonfinite(spec, dp, SG_LOSS_MSE);
    run_nonfinite(spec, dp, SG_LOSS_REL_L2);
    run_device(spec, dp);
  }
  run_pieces();
  return sg_test_finish();
}
