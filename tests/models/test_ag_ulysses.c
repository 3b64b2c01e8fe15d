/* Ulysses attention (models/ag_ulysses.c) against one process, f64:
 * loss = mse(attention(q, k, v), target); the loss, o and dq, dk, dv
 * (gathered) equal one process's (sg_ag_attention on unsharded tensors) at
 * relative 1e-10, on
 *  - 2 ranks: h=2, w=2, dp=2; 3 ranks: h=3, w=3; 4 ranks: h=2,w=2, h=4,
 *    dp=2,h=2 — 7x5 tokens, 12 heads of 2 (uneven token blocks);
 *  - 4 ranks: a 45x90 token grid (the example) on h=4 (12, 11, 11,
 *    11 token rows), 4 heads of 1 (4050 tokens: the one-process reference
 *    alone is ~1 s, so one mesh);
 * the bytes this rank received in the four all-to-alls equal the formulas
 * (docs/transformers.md, "Ulysses"); heads not divisible by the ranks that
 * split the tokens are refused with SG_ERR_CONFIG on every rank. USP
 * (sg_ag_attention_usp: Ulysses over w, ring over h) on the same small
 * meshes: the same checks, the ring's bytes too (on h=2,w=2 both run; on
 * h alone it is the ring, on w alone Ulysses).
 *
 * The device path (ag_fake_cuda: "cuda:0" variables are host memory, so
 * the nodes' device entries run the device body's structure on it: the
 * all-to-alls on the device buffers through the comm layer, the packing
 * by the SG_HD index maps of ag_ulysses_inl.h): o and dq, dk, dv on faked
 * cuda:0 equal the host's on the same mesh bit for bit (f64 and f32;
 * 7x5 tokens split unevenly over 2, 3 and 4 ranks), outputs and gradients
 * on cuda:0; USP with a ring (a split of h) is refused by name on every
 * rank (the ring's K/V send/recv on device buffers is not built); the
 * plain attention of one process on faked cuda:0 = the host's. --gpu:
 * real devices (gpu_case). */
#include "autograd_impl.h" /* ag_fake_cuda, ag_mem_copy */
#include "sg_autograd.h"
#include "sg_comm.h" /* sg_mesh_enable_nccl */
#include "sg_mesh.h"
#include "sg_threads.h" /* sg_cuda_device_local */
#include "sg_test.h"
#include "sg_test_tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NV = 4 }; /* q, k, v, target */

typedef struct prob {
  int64_t shape[4]; /* (B, C, HY, WX) */
  int64_t heads;
  double *g[NV]; /* global values */
} prob;

typedef struct ref {
  double loss, *o, *d[3];
} ref;

static int64_t numel(const prob *p) { return sg_test_numel(4, p->shape); }

static void prob_init(prob *p, int64_t b, int64_t c, int64_t hy, int64_t wx,
                      int64_t heads) {
  const int64_t s[4] = {b, c, hy, wx};
  memcpy(p->shape, s, sizeof s);
  p->heads = heads;
  for (int i = 0; i < NV; ++i) {
    p->g[i] = malloc(sizeof(double) * (size_t)numel(p));
    sg_test_rand_fill(p->g[i], numel(p), 30 + (uint64_t)i, -1, 1);
  }
}

static void prob_free(prob *p) {
  for (int i = 0; i < NV; ++i) free(p->g[i]);
}

/* The leaves of p on mesh (NULL: one process), attention by `mode`, the
 * loss and its backward; o and dq, dk, dv gathered into r (allocated). */
static sg_status run(const prob *p, sg_mesh_t mesh, const sg_placement *pl,
                     sg_sp_mode mode, ref *r) {
  sg_status st = SG_OK;
  sg_var v[NV], *o = NULL, *l = NULL;
  sg_test_buf val[NV], grad[NV];
  sg_tape_t t = NULL;
  memset(v, 0, sizeof v), memset(val, 0, sizeof val),
      memset(grad, 0, sizeof grad);
  for (int i = 0; i < NV; ++i)
    SG_TRY(sg_test_var_scatter(&v[i], &val[i], &grad[i], "x", SG_DTYPE_F64,
                               mesh, pl, 4, p->shape, p->g[i], i < 3));
  SG_TRY(sg_tape_create(&t));
  SG_TRY(sg_ag_attention_sp(t, mode, p->heads, &v[0], &v[1], &v[2], &o));
  SG_TRY(sg_ag_loss(t, SG_LOSS_MSE, o, &v[3], &l));
  r->loss = sg_var_item(l);
  r->o = malloc(sizeof(double) * (size_t)numel(p));
  SG_TRY(sg_test_var_gather(o, 0, r->o)); /* before backward frees it */
  SG_TRY(sg_tape_backward(t, l));
  for (int i = 0; i < 3; ++i) {
    r->d[i] = malloc(sizeof(double) * (size_t)numel(p));
    SG_TRY(sg_test_var_gather(&v[i], 1, r->d[i]));
  }
fail:
  sg_tape_destroy(&t);
  for (int i = 0; i < NV; ++i) {
    sg_var_release(&v[i]);
    sg_test_buf_free(&val[i]), sg_test_buf_free(&grad[i]);
  }
  return st;
}

static void ref_free(ref *r) {
  free(r->o);
  for (int i = 0; i < 3; ++i) free(r->d[i]);
  memset(r, 0, sizeof *r);
}

/* The bytes this rank receives (per call; docs/transformers.md): with P
 * ranks in the all-to-all, splitting Nu tokens (this rank T of them), B
 * local samples and C channels, every all-to-all moves C/P channels of
 * the other ranks' tokens to this rank (token -> head), or this rank's T
 * tokens of the other ranks' C/P channels (head -> token). Ulysses: P
 * the ranks that split space, Nu = N. USP: P those of w, Nu the tokens of
 * this rank's mesh row (its h rows, every column); the ring over h moves
 * the K/V of the other rows (Cl = C/P channels) in forward and backward,
 * and all of dK/dV. e: the 4 all-to-alls, then the ring's 3. */
static void expected_bytes(const prob *p, sg_mesh_t mesh, int usp,
                           long long *e) {
  int64_t off[4], box[4], P = 1, R = 1;
  sg_placement pl[SG_MESH_MAX_DIMS];
  sg_test_nchw_placements(mesh, pl);
  sg_shardtensor_box(mesh, 4, p->shape, pl, sg_mesh_rank(mesh), off, box);
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m)
    if (pl[m].kind == SG_PLACEMENT_SHARD && pl[m].dim >= 2) {
      if (usp && pl[m].dim == 2)
        R *= sg_mesh_dim_size(mesh, m);
      else
        P *= sg_mesh_dim_size(mesh, m);
    }
  const int64_t N = p->shape[2] * p->shape[3], T = box[2] * box[3],
                Nu = usp ? box[2] * p->shape[3] : N, cp = p->shape[1] / P,
                es = (int64_t)sizeof(double);
  const int64_t in = box[0] * cp * (Nu - T) * es,
                out = box[0] * T * cp * (P - 1) * es,
                kv = R > 1 ? 2 * box[0] * cp * es : 0;
  e[SG_ULYSSES_FWD_QKV] = 3 * in, e[SG_ULYSSES_FWD_O] = out;
  e[SG_ULYSSES_BWD_DO] = in, e[SG_ULYSSES_BWD_DQKV] = 3 * out;
  long long *ring = e + SG_ULYSSES_NBYTES;
  ring[SG_RING_FWD_KV] = ring[SG_RING_BWD_KV] = kv * (N - Nu);
  ring[SG_RING_BWD_DKV] = kv * N;
}

static void check_mesh(const char *spec, sg_sp_mode mode, const prob *p,
                       const ref *r1) {
  sg_mesh_t mesh = NULL;
  sg_placement pl[SG_MESH_MAX_DIMS];
  ref r;
  char msg[256];
  enum { NBYTES = SG_ULYSSES_NBYTES + 3 };
  long long got[NBYTES], want[NBYTES];
  memset(&r, 0, sizeof r);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_test_nchw_placements(mesh, pl);
  sg_ag_attention_ulysses_bytes(NULL, 1);
  sg_ag_attention_ring_bytes(NULL, 1);
  SG_REQUIRE_OK(run(p, mesh, pl, mode, &r));
  sg_ag_attention_ulysses_bytes(got, 1);
  sg_ag_attention_ring_bytes(got + SG_ULYSSES_NBYTES, 1);
  SG_CHECK(fabs(r.loss - r1->loss) <= 1e-10 * fabs(r1->loss),
           "%s: loss %.17g, one process %.17g", spec, r.loss, r1->loss);
  SG_CHECK(sg_test_cmp_ref(r.o, SG_DTYPE_F64, r1->o, numel(p), 1e-10, msg,
                           sizeof msg) == 0,
           "%s: o: %s", spec, msg);
  for (int i = 0; i < 3; ++i)
    SG_CHECK(sg_test_cmp_ref(r.d[i], SG_DTYPE_F64, r1->d[i], numel(p), 1e-10,
                             msg, sizeof msg) == 0,
             "%s: gradient of %c: %s", spec, "qkv"[i], msg);
  expected_bytes(p, mesh, mode == SG_SP_USP, want);
  for (int i = 0; i < NBYTES; ++i)
    SG_CHECK(got[i] == want[i],
             "%s, %s: %s %d: received %lld bytes, the formula says %lld", spec,
             mode == SG_SP_USP ? "usp" : "ulysses",
             i < SG_ULYSSES_NBYTES ? "all-to-all" : "ring",
             i % SG_ULYSSES_NBYTES, got[i], want[i]);
done:
  ref_free(&r);
  sg_mesh_destroy(&mesh);
}

static void check_meshes(const prob *p, const char *const *specs, int n,
                         int usp_too) {
  ref r1;
  memset(&r1, 0, sizeof r1);
  /* the one-process reference on rank 0 only (it costs P times a rank's
   * share), broadcast */
  sg_status st = SG_OK;
  if (sg_test_rank == 0) st = run(p, NULL, NULL, SG_SP_RING, &r1);
  MPI_Bcast(&st, 1, MPI_INT, 0, MPI_COMM_WORLD);
  SG_REQUIRE_OK(st);
  MPI_Bcast(&r1.loss, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  for (int i = 0; i < 4; ++i) {
    double **a = i ? &r1.d[i - 1] : &r1.o;
    if (!*a) *a = malloc(sizeof(double) * (size_t)numel(p));
    MPI_Bcast(*a, (int)numel(p), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  for (int k = 0; k < n; ++k) {
    check_mesh(specs[k], SG_SP_ULYSSES, p, &r1);
    if (usp_too) check_mesh(specs[k], SG_SP_USP, p, &r1);
  }
done:
  ref_free(&r1);
}

/* The attention of p by `mode` on mesh on the host (cuda 0), faked cuda:0
 * (cuda 1) or the real cuda:di (cuda 2), backward from the target as the
 * seed: o and dq, dk, dv (this rank's shards, dt) copied into out[0..3]
 * (4 x nloc values), on_cuda the count of those on the device. */
static sg_status run_dev(const prob *p, sg_mesh_t mesh, const sg_placement *pl,
                         sg_sp_mode mode, sg_dtype dt, int cuda, int di,
                         char *out, int64_t *nloc, int *on_cuda) {
  sg_status st = SG_OK;
  const sg_device dev = {cuda ? SG_DEVICE_CUDA : SG_DEVICE_HOST, di},
                  host = sg_device_host();
  const size_t es = sg_dtype_size(dt);
  sg_var v[NV], *o = NULL;
  sg_test_buf val[NV], grad[NV];
  sg_tape_t t = NULL;
  memset(v, 0, sizeof v), memset(val, 0, sizeof val),
      memset(grad, 0, sizeof grad);
  *on_cuda = 0;
  ag_fake_cuda = cuda == 1;
  for (int i = 0; i < NV; ++i) {
    SG_TRY(sg_test_var_scatter(&v[i], &val[i], &grad[i], "x", dt, mesh, pl, 4,
                               p->shape, p->g[i], i < 3));
    if (cuda) SG_TRY(sg_var_set_device(&v[i], dev));
  }
  SG_TRY(sg_tape_create(&t));
  SG_TRY(sg_ag_attention_sp(t, mode, p->heads, &v[0], &v[1], &v[2], &o));
  const int64_t n = sg_tensor_numel(&o->value);
  *nloc = n;
  SG_TRY(ag_mem_copy(host, out, dev, o->value.data, (size_t)n * es));
  *on_cuda += o->value.device.kind == SG_DEVICE_CUDA;
  {
    const sg_tensor sd = sg_tensor_wrap(v[3].value.data, dt, dev, o->value.ndim,
                                        o->value.shape);
    SG_TRY(sg_tape_backward_from(t, 1, &o, &sd));
  }
  for (int i = 0; i < 3; ++i) {
    SG_TRY(ag_mem_copy(host, out + (size_t)(i + 1) * (size_t)n * es, dev,
                       v[i].grad.data, (size_t)n * es));
    *on_cuda += v[i].grad.device.kind == SG_DEVICE_CUDA;
  }
fail:
  sg_tape_destroy(&t);
  for (int i = 0; i < NV; ++i) {
    sg_var_release(&v[i]);
    sg_test_buf_free(&val[i]), sg_test_buf_free(&grad[i]);
  }
  ag_fake_cuda = 0;
  return st;
}

/* Faked cuda:0 = the host on mesh spec, bit for bit (f64, f32); a USP
 * whose mesh splits h (a ring) refused by name on every rank. */
static void check_device(const char *spec, sg_sp_mode mode, const prob *p) {
  sg_mesh_t mesh = NULL;
  sg_placement pl[SG_MESH_MAX_DIMS];
  const size_t cap = (size_t)(4 * numel(p)) * sizeof(double);
  char *h = malloc(cap), *d = malloc(cap);
  const char *mn = mode == SG_SP_USP ? "usp" : "ulysses";
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_test_nchw_placements(mesh, pl);
  int ring = 0;
  for (int m = 0; m < sg_mesh_ndims(mesh); ++m)
    ring |= pl[m].kind == SG_PLACEMENT_SHARD && pl[m].dim == 2 &&
            sg_mesh_dim_size(mesh, m) > 1;
  for (int k = 0; k < 2; ++k) {
    const sg_dtype dt = k ? SG_DTYPE_F32 : SG_DTYPE_F64;
    int64_t nh = 0, nd = 0;
    int ch = 0, cd = 0;
    SG_CHECK_OK(run_dev(p, mesh, pl, mode, dt, 0, 0, h, &nh, &ch));
    if (mode == SG_SP_USP && ring) {
      SG_CHECK_STATUS(run_dev(p, mesh, pl, mode, dt, 1, 0, d, &nd, &cd),
                      SG_ERR_NOT_SUPPORTED);
      SG_CHECK(strstr(sg_last_error(), "K/V send/recv") != NULL,
               "%s usp on cuda: unclear refusal '%s'", spec, sg_last_error());
      continue;
    }
    SG_CHECK_OK(run_dev(p, mesh, pl, mode, dt, 1, 0, d, &nd, &cd));
    SG_CHECK(nd == nh && cd == 4 && ch == 0,
             "%s %s: %lld / %lld values, %d on cuda", spec, mn, (long long)nd,
             (long long)nh, cd);
    for (int i = 0; i < 4; ++i) {
      const size_t b = (size_t)nh * sg_dtype_size(dt);
      SG_CHECK(memcmp(h + i * b, d + i * b, b) == 0,
               "%s %s %s: %s on faked cuda:0 differs from the host's", spec, mn,
               sg_dtype_name(dt), i ? "a gradient" : "o");
    }
  }
done:
  free(h), free(d);
  sg_mesh_destroy(&mesh);
}

/* The plain attention in one process (no mesh) on faked cuda:0: its
 * device entry runs the host's body on host memory (the same bits). */
static void check_plain_device(const prob *p) {
  const size_t cap = (size_t)(4 * numel(p)) * sizeof(double);
  char *h = malloc(cap), *d = malloc(cap);
  int64_t nh = 0, nd = 0;
  int ch = 0, cd = 0;
  SG_CHECK_OK(
      run_dev(p, NULL, NULL, SG_SP_RING, SG_DTYPE_F64, 0, 0, h, &nh, &ch));
  SG_CHECK_OK(
      run_dev(p, NULL, NULL, SG_SP_RING, SG_DTYPE_F64, 1, 0, d, &nd, &cd));
  SG_CHECK(nd == nh && cd == 4 && memcmp(h, d, (size_t)(4 * nh) * 8) == 0,
           "attention on faked cuda:0 (one process) differs from the host's");
  free(h), free(d);
}

static void check_devices(const prob *p, const char *const *specs, int n) {
  for (int k = 0; k < n; ++k) {
    check_device(specs[k], SG_SP_ULYSSES, p);
    check_device(specs[k], SG_SP_USP, p);
  }
}

/* --gpu (tools/test-gpu: one rank per GPU, 1-4 ranks): Ulysses and USP
 * (w split alone: no ring) on "w=P" on real device buffers (the packing
 * kernels, NCCL on the mesh for the all-to-alls, the attention kernel)
 * against the host on the same mesh: o, dq, dk, dv within 1e-12 (f64) and
 * 2e-5 (f32) relative to the largest value. Compile-verified until a GPU
 * machine runs it. */
static void gpu_case(const prob *p) {
  sg_mesh_t mesh = NULL;
  sg_placement pl[SG_MESH_MAX_DIMS];
  const size_t cap = (size_t)(4 * numel(p)) * sizeof(double);
  char *h = malloc(cap), *d = malloc(cap), spec[32];
  int di = -1;
  SG_CHECK_OK(sg_cuda_device_local(MPI_COMM_WORLD, &di));
  SG_CHECK(di >= 0, "--gpu: no CUDA device on rank %d", sg_test_rank);
  if (di < 0) goto done;
  snprintf(spec, sizeof spec, "w=%d", sg_test_size);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  if (sg_test_size > 1) SG_CHECK_OK(sg_mesh_enable_nccl(mesh));
  sg_test_nchw_placements(mesh, pl);
  for (int mode = 0; mode < 2; ++mode)
    for (int k = 0; k < 2; ++k) {
      const sg_sp_mode sm = mode ? SG_SP_USP : SG_SP_ULYSSES;
      const sg_dtype dt = k ? SG_DTYPE_F32 : SG_DTYPE_F64;
      const double tol = k ? 2e-5 : 1e-12;
      int64_t nh = 0, nd = 0;
      int ch = 0, cd = 0;
      SG_CHECK_OK(run_dev(p, mesh, pl, sm, dt, 0, 0, h, &nh, &ch));
      SG_CHECK_OK(run_dev(p, mesh, pl, sm, dt, 2, di, d, &nd, &cd));
      SG_CHECK(nd == nh && cd == 4, "--gpu %s: %lld / %lld values, %d on cuda",
               spec, (long long)nd, (long long)nh, cd);
      double big = 0, err = 0;
      for (int64_t i = 0; i < 4 * nh; ++i) {
        const double a = k ? ((float *)h)[i] : ((double *)h)[i],
                     b = k ? ((float *)d)[i] : ((double *)d)[i];
        big = fabs(a) > big ? fabs(a) : big;
        err = fabs(a - b) > err || b != b ? fabs(a - b) : err;
      }
      SG_CHECK(err <= tol * (big > 1 ? big : 1),
               "--gpu %s %s %s: device - host %.3g (largest %.3g)", spec,
               mode ? "usp" : "ulysses", sg_dtype_name(dt), err, big);
      if (sg_test_rank == 0)
        printf("--gpu: attention %s %s on %s: device - host %.3g\n",
               mode ? "usp" : "ulysses", sg_dtype_name(dt), spec, err);
    }
done:
  free(h), free(d);
  sg_mesh_destroy(&mesh);
}

/* heads % P != 0: SG_ERR_CONFIG on every rank, naming the constraint */
static void check_bad_heads(const char *spec, int64_t heads) {
  sg_mesh_t mesh = NULL;
  sg_placement pl[SG_MESH_MAX_DIMS];
  prob p;
  ref r;
  memset(&r, 0, sizeof r);
  prob_init(&p, 1, 24, 7, 5, heads);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &mesh));
  sg_test_nchw_placements(mesh, pl);
  SG_CHECK_STATUS(run(&p, mesh, pl, SG_SP_ULYSSES, &r), SG_ERR_CONFIG);
  SG_CHECK(strstr(sg_last_error(), "must be divisible") != NULL,
           "%s, %lld heads: unclear error '%s'", spec, (long long)heads,
           sg_last_error());
done:
  ref_free(&r);
  prob_free(&p);
  sg_mesh_destroy(&mesh);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  static const char *l2[] = {"h=2", "w=2", "dp=2"};
  static const char *l3[] = {"h=3", "w=3"};
  static const char *l4[] = {"h=2,w=2", "h=4", "dp=2,h=2"};
  static const char *big[] = {"h=4"};
  const int np = sg_test_size;
  prob p;
  prob_init(&p, 2, 24, 7, 5, 12);
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], "--gpu")) {
      gpu_case(&p);
      prob_free(&p);
      return sg_test_finish();
    }
  if (np == 1) { /* one process: the plain attention itself */
    check_meshes(&p, (const char *[]){"dp=1"}, 1, 1);
    check_devices(&p, (const char *[]){"dp=1"}, 1);
    check_plain_device(&p);
    sg_sp_mode m;
    SG_CHECK_STATUS(sg_sp_mode_parse("cp", &m), SG_ERR_CONFIG);
  }
  if (np == 2)
    check_meshes(&p, l2, 3, 1), check_devices(&p, l2, 3),
        check_bad_heads("h=2", 3);
  if (np == 3)
    check_meshes(&p, l3, 2, 1), check_devices(&p, l3, 2),
        check_bad_heads("w=3", 4);
  if (np == 4) {
    check_meshes(&p, l4, 3, 1), check_devices(&p, l4, 3),
        check_bad_heads("h=2,w=2", 6);
    prob q;
    prob_init(&q, 1, 4, 45, 90, 4);
    check_meshes(&q, big, 1, 0);
    prob_free(&q);
  }
  prob_free(&p);
  return sg_test_finish();
}
