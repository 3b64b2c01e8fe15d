/* Communication layer: every collective against a serial reference that
 * each rank computes locally from every rank's (generated) contributions,
 * on every group of a mesh (so groups of 1, 2, 3, 4 ranks), uneven counts,
 * every dtype (bf16 for moves), in place, non-blocking variants,
 * deterministic reductions (bit-identical to the rank-order reference, so
 * identical on every rank), errors on every rank, and failure agreement. */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include "sg_comm.h"
#include "sg_config.h"
#include "sg_mesh.h"
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const sg_dtype num_dtypes[] = {SG_DTYPE_F32, SG_DTYPE_F64, SG_DTYPE_I32,
                                      SG_DTYPE_I64};
static const sg_dtype all_dtypes[] = {SG_DTYPE_F32, SG_DTYPE_F64, SG_DTYPE_I32,
                                      SG_DTYPE_I64, SG_DTYPE_BF16};
#define NUM_DT 4
#define ALL_DT 5

/* Contribution of group rank r to global index i (values of many
 * magnitudes so that the order of a float sum matters). */
static void put(sg_dtype dt, void *buf, int64_t at, int r, int64_t i,
                int salt) {
  double s = sin(0.37 * (double)i + 1.3 * r + salt) *
             pow(10.0, (double)((i + r) % 7) - 3.0);
  switch (dt) {
  case SG_DTYPE_F32: ((float *)buf)[at] = (float)s; break;
  case SG_DTYPE_F64: ((double *)buf)[at] = s; break;
  case SG_DTYPE_I32:
    ((int32_t *)buf)[at] = (int32_t)((i * 2654435761ll + r * 40503ll + salt) %
                                     20001) -
                           10000;
    break;
  case SG_DTYPE_I64:
    ((int64_t *)buf)[at] = ((int64_t)(r + 1) << 34) -
                           (i * 7919 + salt) * (r % 2 ? 1 : -1);
    break;
  case SG_DTYPE_BF16: ((sg_bf16 *)buf)[at] = sg_bf16_from_f32((float)s); break;
  default: break;
  }
}

static void fill(sg_dtype dt, void *buf, int64_t n, int r, int64_t i0,
                 int salt) {
  for (int64_t k = 0; k < n; ++k) put(dt, buf, k, r, i0 + k, salt);
}

/* acc[k] = acc[k] op x[k] */
#define RED(T)                                               \
  for (int64_t k = 0; k < n; ++k) {                          \
    T a = ((T *)acc)[k], b = ((const T *)x)[k];              \
    ((T *)acc)[k] = op == SG_REDUCE_SUM   ? a + b            \
                    : op == SG_REDUCE_MAX ? (b > a ? b : a)  \
                                          : (b < a ? b : a); \
  }
static void reduce_into(sg_dtype dt, sg_reduce_op op, void *acc, const void *x,
                        int64_t n) {
  switch (dt) {
  case SG_DTYPE_F32: RED(float) break;
  case SG_DTYPE_F64: RED(double) break;
  case SG_DTYPE_I32: RED(int32_t) break;
  case SG_DTYPE_I64: RED(int64_t) break;
  default: break;
  }
}

/* Serial reference: reduction over ranks 0..p-1 in order of the
 * contributions to global indices [i0, i0+n). */
static void ref_reduce(sg_dtype dt, sg_reduce_op op, int p, int64_t i0,
                       int64_t n, int salt, void *out) {
  size_t es = sg_dtype_size(dt);
  void *x = malloc((size_t)n * es + 1);
  fill(dt, out, n, 0, i0, salt);
  for (int r = 1; r < p; ++r) {
    fill(dt, x, n, r, i0, salt);
    reduce_into(dt, op, out, x, n);
  }
  free(x);
}

/* Compare: bitwise for moves, integer and deterministic results; float
 * reductions by MPI's own algorithm within tolerance. */
static void compare(const char *what, sg_dtype dt, const void *got,
                    const void *want, int64_t n, int exact) {
  if (exact || dt == SG_DTYPE_I32 || dt == SG_DTYPE_I64 ||
      dt == SG_DTYPE_BF16) {
    SG_CHECK(sg_test_cmp_bytes(what, got, want,
                               (size_t)n * sg_dtype_size(dt)) == 0,
             "%s", what);
  } else if (dt == SG_DTYPE_F32) {
    SG_CHECK(sg_test_cmp_f32(what, got, want, n, 1e-5, 1e-6) == 0, "%s", what);
  } else {
    SG_CHECK(sg_test_cmp_f64(what, got, want, n, 1e-12, 1e-13) == 0, "%s",
             what);
  }
}

static const char *opname(sg_reduce_op op) {
  return op == SG_REDUCE_SUM ? "sum" : op == SG_REDUCE_MAX ? "max" : "min";
}

/* ---- all-reduce -----------------------------------------------------------*/

static void test_allreduce(sg_group_t g, const char *gname) {
  int p = sg_group_size(g), me = sg_group_rank(g);
  const int64_t counts[] = {0, 1, 7, 1003};
  char what[320];
  for (int di = 0; di < NUM_DT; ++di) {
    sg_dtype dt = num_dtypes[di];
    size_t es = sg_dtype_size(dt);
    for (int oi = 0; oi < 3; ++oi) {
      sg_reduce_op op = (sg_reduce_op)oi;
      for (int ci = 0; ci < 4; ++ci) {
        int64_t n = counts[ci];
        void *send = malloc((size_t)n * es + 8),
             *recv = malloc((size_t)n * es + 8),
             *ref = malloc((size_t)n * es + 8),
             *root = malloc((size_t)n * es + 8);
        ref_reduce(dt, op, p, 0, n, ci, ref);
        /* mode 0: default (MPI), 1: default in place, 2: _det, 3: _det in
         * place, 4: default set deterministic, 5: non-blocking, 6:
         * non-blocking deterministic */
        for (int mode = 0; mode < 7; ++mode) {
          fill(dt, send, n, me, 0, ci);
          memset(recv, 0xab, (size_t)n * es + 8);
          void *in = send;
          if (mode == 1 || mode == 3) {
            memcpy(recv, send, (size_t)n * es);
            in = recv;
          }
          sg_status st = SG_OK;
          sg_request_t req = NULL;
          sg_comm_set_deterministic(mode == 4 || mode == 6);
          if (mode == 2 || mode == 3)
            st = sg_allreduce_det(g, in, recv, n, dt, op);
          else if (mode >= 5) {
            st = sg_iallreduce(g, in, recv, n, dt, op, &req);
            if (st == SG_OK) {
              if (mode == 5) {
                st = sg_wait(&req);
              } else {
                int done = 0;
                while (st == SG_OK && !done) st = sg_test(&req, &done);
              }
              SG_CHECK(req == NULL, "request not freed");
            }
          } else
            st = sg_allreduce(g, in, recv, n, dt, op);
          sg_comm_set_deterministic(0);
          snprintf(what, sizeof what, "%s allreduce %s %s n=%lld mode %d",
                   gname, sg_dtype_name(dt), opname(op), (long long)n, mode);
          SG_CHECK(st == SG_OK, "%s: %s", what, sg_last_error());
          int det = mode >= 2 && mode != 5;
          compare(what, dt, recv, ref, n, det);
          SG_CHECK(((unsigned char *)recv)[n * (int64_t)es] == 0xab,
                   "%s: wrote past end", what);
          if (det || mode == 0) {
            /* identical bits on every rank */
            memcpy(root, recv, (size_t)n * es);
            MPI_Bcast(root, (int)(n * (int64_t)es), MPI_BYTE, 0,
                      sg_group_comm(g));
            int same = memcmp(root, recv, (size_t)n * es) == 0;
            if (det) SG_CHECK(same, "%s: bits differ from group rank 0", what);
          }
        }
        free(send);
        free(recv);
        free(ref);
        free(root);
      }
    }
  }
  /* bf16 reductions are refused, on every rank */
  sg_bf16 b[4] = {{0}};
  SG_CHECK_STATUS(sg_allreduce(g, b, b, 4, SG_DTYPE_BF16, SG_REDUCE_SUM),
                  SG_ERR_NOT_SUPPORTED);
  SG_CHECK(strstr(sg_last_error(), "bf16") != NULL, "%s", sg_last_error());
  float f = 0;
  SG_CHECK_STATUS(sg_allreduce(g, &f, &f, -1, SG_DTYPE_F32, SG_REDUCE_SUM),
                  SG_ERR_SHAPE);
  SG_CHECK_STATUS(sg_allreduce(g, &f, &f, 1, SG_DTYPE_F32, (sg_reduce_op)9),
                  SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_allreduce(g, &f, &f, 1, (sg_dtype)42, SG_REDUCE_SUM),
                  SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_allreduce(NULL, &f, &f, 1, SG_DTYPE_F32, SG_REDUCE_SUM),
                  SG_ERR_INVALID_ARG);
}

/* ---- moves: bcast, allgather(v), alltoall(v), send/recv --------------------*/

static void test_bcast(sg_group_t g, const char *gname) {
  int p = sg_group_size(g), me = sg_group_rank(g);
  char what[320];
  for (int di = 0; di < ALL_DT; ++di) {
    sg_dtype dt = all_dtypes[di];
    size_t es = sg_dtype_size(dt);
    int64_t n = 37;
    void *buf = malloc((size_t)n * es), *ref = malloc((size_t)n * es);
    for (int root = 0; root < p; ++root) {
      for (int nb = 0; nb < 2; ++nb) {
        fill(dt, ref, n, root, 0, 5);
        if (me == root)
          fill(dt, buf, n, me, 0, 5);
        else
          memset(buf, 0, (size_t)n * es);
        if (nb) {
          sg_request_t req = NULL;
          SG_CHECK_OK(sg_ibcast(g, buf, n, dt, root, &req));
          SG_CHECK_OK(sg_wait(&req));
        } else {
          SG_CHECK_OK(sg_bcast(g, buf, n, dt, root));
        }
        snprintf(what, sizeof what, "%s bcast %s root %d nb %d", gname,
                 sg_dtype_name(dt), root, nb);
        compare(what, dt, buf, ref, n, 1);
      }
    }
    SG_CHECK_STATUS(sg_bcast(g, buf, n, dt, p), SG_ERR_INVALID_ARG);
    SG_CHECK(strstr(sg_last_error(), "root") != NULL, "%s", sg_last_error());
    free(buf);
    free(ref);
  }
}

static void test_allgather(sg_group_t g, const char *gname) {
  int p = sg_group_size(g), me = sg_group_rank(g);
  char what[320];
  int64_t *counts = malloc((size_t)p * sizeof *counts),
          *displs = malloc((size_t)p * sizeof *displs);
  for (int di = 0; di < ALL_DT; ++di) {
    sg_dtype dt = all_dtypes[di];
    size_t es = sg_dtype_size(dt);
    /* allgather: 11 each, out of place and in place */
    int64_t n = 11;
    char *recv = malloc((size_t)(n * p) * es),
         *ref = malloc((size_t)(n * p) * es);
    char *send = malloc((size_t)n * es);
    for (int r = 0; r < p; ++r)
      fill(dt, ref + (size_t)(r * n) * es, n, r, 0, 3);
    for (int inplace = 0; inplace < 2; ++inplace) {
      memset(recv, 0, (size_t)(n * p) * es);
      fill(dt, send, n, me, 0, 3);
      const void *in = send;
      if (inplace) {
        memcpy(recv + (size_t)(me * n) * es, send, (size_t)n * es);
        in = recv + (size_t)(me * n) * es;
      }
      SG_CHECK_OK(sg_allgather(g, in, n, recv, dt));
      snprintf(what, sizeof what, "%s allgather %s inplace %d", gname,
               sg_dtype_name(dt), inplace);
      compare(what, dt, recv, ref, n * p, 1);
    }
    free(recv);
    free(ref);
    free(send);
    /* allgatherv: uneven (some zero) counts, packed and with gaps */
    int64_t total = 0;
    for (int r = 0; r < p; ++r) {
      counts[r] = (r * 5 + 3) % 4; /* 3, 0, 1, 2 */
      total += counts[r];
    }
    for (int gaps = 0; gaps < 2; ++gaps) {
      int64_t off = 0;
      for (int r = 0; r < p; ++r) {
        displs[r] = off + (gaps ? 2 : 0);
        off = displs[r] + counts[r];
      }
      int64_t extent = gaps ? off : total;
      recv = malloc((size_t)extent * es + 1);
      ref = malloc((size_t)extent * es + 1);
      send = malloc((size_t)counts[me] * es + 1);
      memset(ref, 0x5a, (size_t)extent * es);
      for (int r = 0; r < p; ++r)
        fill(dt, ref + (size_t)displs[r] * es, counts[r], r, displs[r], 4);
      for (int mode = 0; mode < 3;
           ++mode) { /* blocking, in place, non-blocking */
        memset(recv, 0x5a, (size_t)extent * es);
        fill(dt, send, counts[me], me, displs[me], 4);
        const void *in = send;
        if (mode == 1) {
          memcpy(recv + (size_t)displs[me] * es, send, (size_t)counts[me] * es);
          in = recv + (size_t)displs[me] * es;
        }
        const int64_t *d = gaps ? displs : NULL;
        if (mode == 2) {
          sg_request_t req = NULL;
          SG_CHECK_OK(
              sg_iallgatherv(g, in, counts[me], recv, counts, d, dt, &req));
          SG_CHECK_OK(sg_wait(&req));
        } else {
          SG_CHECK_OK(sg_allgatherv(g, in, counts[me], recv, counts, d, dt));
        }
        snprintf(what, sizeof what, "%s allgatherv %s gaps %d mode %d", gname,
                 sg_dtype_name(dt), gaps, mode);
        compare(what, dt, recv, ref, extent, 1);
      }
      SG_CHECK_STATUS(sg_allgatherv(g, send, counts[me] + 1, recv, counts, NULL,
                                    dt),
                      SG_ERR_SHAPE);
      free(recv);
      free(ref);
      free(send);
    }
  }
  free(counts);
  free(displs);
}

/* rank j sends c(j, r) elements to rank r */
static int64_t a2a_count(int j, int r) { return (j + 2 * r) % 4; }

static void test_alltoall(sg_group_t g, const char *gname) {
  int p = sg_group_size(g), me = sg_group_rank(g);
  char what[320];
  int64_t *sc = malloc(4 * (size_t)p * sizeof *sc), *sd = sc + p,
          *rc = sc + 2 * p, *rd = sc + 3 * p;
  for (int di = 0; di < ALL_DT; ++di) {
    sg_dtype dt = all_dtypes[di];
    size_t es = sg_dtype_size(dt);
    /* alltoall: block r of rank j holds global index (j * p + r) * n.. */
    int64_t n = 5;
    char *send = malloc((size_t)(n * p) * es),
         *recv = malloc((size_t)(n * p) * es),
         *ref = malloc((size_t)(n * p) * es);
    for (int r = 0; r < p; ++r) {
      fill(dt, send + (size_t)(r * n) * es, n, me, (int64_t)r * 100, 6);
      fill(dt, ref + (size_t)(r * n) * es, n, r, (int64_t)me * 100, 6);
    }
    SG_CHECK_OK(sg_alltoall(g, send, recv, n, dt));
    snprintf(what, sizeof what, "%s alltoall %s", gname, sg_dtype_name(dt));
    compare(what, dt, recv, ref, n * p, 1);
    free(send);
    free(recv);
    free(ref);
    /* alltoallv, uneven (some zero), packed and with gaps, blocking and not */
    for (int gaps = 0; gaps < 2; ++gaps) {
      int64_t so = 0, ro = 0;
      for (int r = 0; r < p; ++r) {
        sc[r] = a2a_count(me, r);
        rc[r] = a2a_count(r, me);
        sd[r] = so + gaps;
        rd[r] = ro + 2 * gaps;
        so = sd[r] + sc[r];
        ro = rd[r] + rc[r];
      }
      send = malloc((size_t)so * es + 1);
      recv = malloc((size_t)ro * es + 1);
      ref = malloc((size_t)ro * es + 1);
      memset(send, 0, (size_t)so * es);
      memset(ref, 0x77, (size_t)ro * es);
      for (int r = 0; r < p; ++r) {
        fill(dt, send + (size_t)sd[r] * es, sc[r], me, (int64_t)r * 100, 7);
        fill(dt, ref + (size_t)rd[r] * es, rc[r], r, (int64_t)me * 100, 7);
      }
      for (int nb = 0; nb < 2; ++nb) {
        memset(recv, 0x77, (size_t)ro * es);
        const int64_t *psd = gaps ? sd : NULL, *prd = gaps ? rd : NULL;
        if (nb) {
          sg_request_t req = NULL;
          SG_CHECK_OK(sg_ialltoallv(g, send, sc, psd, recv, rc, prd, dt, &req));
          SG_CHECK_OK(sg_waitall(1, &req));
          SG_CHECK(req == NULL, "waitall frees");
        } else {
          SG_CHECK_OK(sg_alltoallv(g, send, sc, psd, recv, rc, prd, dt));
        }
        snprintf(what, sizeof what, "%s alltoallv %s gaps %d nb %d", gname,
                 sg_dtype_name(dt), gaps, nb);
        compare(what, dt, recv, ref, ro, 1);
      }
      free(send);
      free(recv);
      free(ref);
    }
  }
  sc[0] = -1;
  float f[64];
  SG_CHECK_STATUS(sg_alltoallv(g, f, sc, NULL, f + 32, sc, NULL, SG_DTYPE_F32),
                  SG_ERR_SHAPE);
  free(sc);
}

static void test_p2p(sg_group_t g, const char *gname) {
  int p = sg_group_size(g), me = sg_group_rank(g);
  int next = (me + 1) % p, prev = (me + p - 1) % p;
  char what[320];
  for (int di = 0; di < ALL_DT; ++di) {
    sg_dtype dt = all_dtypes[di];
    size_t es = sg_dtype_size(dt);
    int64_t n = 19 + me, nprev = 19 + prev;
    char *send = malloc((size_t)n * es), *recv = malloc((size_t)nprev * es),
         *ref = malloc((size_t)nprev * es);
    fill(dt, send, n, me, 0, 8);
    fill(dt, ref, nprev, prev, 0, 8);
    /* non-blocking ring */
    sg_request_t reqs[2] = {NULL, NULL};
    SG_CHECK_OK(sg_irecv(g, recv, nprev, dt, prev, 3, &reqs[0]));
    SG_CHECK_OK(sg_isend(g, send, n, dt, next, 3, &reqs[1]));
    SG_CHECK_OK(sg_waitall(2, reqs));
    snprintf(what, sizeof what, "%s isend/irecv %s", gname, sg_dtype_name(dt));
    compare(what, dt, recv, ref, nprev, 1);
    /* blocking, even ranks send first (p == 1 sends to itself: skip) */
    if (p > 1) {
      memset(recv, 0, (size_t)nprev * es);
      if (me % 2 == 0) {
        SG_CHECK_OK(sg_send(g, send, n, dt, next, 4));
        SG_CHECK_OK(sg_recv(g, recv, nprev, dt, prev, 4));
      } else {
        SG_CHECK_OK(sg_recv(g, recv, nprev, dt, prev, 4));
        SG_CHECK_OK(sg_send(g, send, n, dt, next, 4));
      }
      /* odd p: the last even rank sends to rank 0 which sent first too; the
       * eager protocol covers these small messages */
      snprintf(what, sizeof what, "%s send/recv %s", gname, sg_dtype_name(dt));
      compare(what, dt, recv, ref, nprev, 1);
    }
    free(send);
    free(recv);
    free(ref);
  }
  float f = 1;
  SG_CHECK_OK(sg_send(g, &f, 1, SG_DTYPE_F32, MPI_PROC_NULL, 0));
  SG_CHECK_STATUS(sg_send(g, &f, 1, SG_DTYPE_F32, p, 0), SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_send(g, &f, 1, SG_DTYPE_F32, 0, -2), SG_ERR_INVALID_ARG);
  SG_CHECK_STATUS(sg_recv(g, &f, -1, SG_DTYPE_F32, 0, 0), SG_ERR_SHAPE);
}

/* ---- reduce-scatter ---------------------------------------------------------*/

static void test_reduce_scatter(sg_group_t g, const char *gname) {
  int p = sg_group_size(g), me = sg_group_rank(g);
  char what[320];
  int64_t *counts = malloc((size_t)p * sizeof *counts);
  int64_t total = 0, off = 0;
  for (int r = 0; r < p; ++r) {
    counts[r] = (r * 7 + 2) % 5 * 3; /* 6, 0, 3, 9 */
    if (r < me) off += counts[r];
    total += counts[r];
  }
  for (int di = 0; di < NUM_DT; ++di) {
    sg_dtype dt = num_dtypes[di];
    size_t es = sg_dtype_size(dt);
    char *send = malloc((size_t)total * es + 1),
         *recv = malloc((size_t)total * es + 1),
         *ref = malloc((size_t)counts[me] * es + 1);
    for (int oi = 0; oi < 3; ++oi) {
      sg_reduce_op op = (sg_reduce_op)oi;
      ref_reduce(dt, op, p, off, counts[me], 9 + oi, ref);
      /* modes: 0 blocking, 1 in place, 2 non-blocking, 3 det, 4 det in
       * place, 5 det non-blocking */
      for (int mode = 0; mode < 6; ++mode) {
        int det = mode >= 3;
        fill(dt, send, total, me, 0, 9 + oi);
        memset(recv, 0x33, (size_t)total * es + 1);
        const void *in = send;
        if (mode == 1 || mode == 4) {
          memcpy(recv, send, (size_t)total * es);
          in = recv;
        }
        sg_comm_set_deterministic(det);
        if (mode == 2 || mode == 5) {
          sg_request_t req = NULL;
          SG_CHECK_OK(sg_ireduce_scatter(g, in, recv, counts, dt, op, &req));
          SG_CHECK_OK(sg_wait(&req));
        } else {
          SG_CHECK_OK(sg_reduce_scatter(g, in, recv, counts, dt, op));
        }
        sg_comm_set_deterministic(0);
        snprintf(what, sizeof what, "%s reduce_scatter %s %s mode %d", gname,
                 sg_dtype_name(dt), opname(op), mode);
        compare(what, dt, recv, ref, counts[me], det);
        if (mode != 1 && mode != 4)
          SG_CHECK(((unsigned char *)recv)[counts[me] * (int64_t)es] == 0x33,
                   "%s: past end", what);
      }
    }
    free(send);
    free(recv);
    free(ref);
  }
  float f[8] = {0};
  SG_CHECK_STATUS(sg_reduce_scatter(g, f, f, counts, SG_DTYPE_BF16,
                                    SG_REDUCE_SUM),
                  SG_ERR_NOT_SUPPORTED);
  free(counts);
}

/* ---- failure agreement ------------------------------------------------------*/

static sg_status local_step(int fail) {
  sg_status st = SG_OK;
  if (fail) SG_RAISE(SG_ERR_SHAPE, "local shape check failed here");
fail:
  return st;
}

static void test_agree(sg_group_t g, const char *gname) {
  int p = sg_group_size(g), me = sg_group_rank(g);
  char want[64];
  sg_clear_error();
  SG_CHECK_OK(sg_group_agree(g, SG_OK));
  /* the last group rank fails */
  int bad = p - 1, bad_world = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &bad_world);
  MPI_Bcast(&bad_world, 1, MPI_INT, bad, sg_group_comm(g));
  sg_clear_error();
  sg_status st = sg_group_agree(g, local_step(me == bad));
  SG_CHECK(st == SG_ERR_SHAPE, "%s agree: got %s", gname, sg_status_name(st));
  snprintf(want, sizeof want, "[rank %d] local shape check failed here",
           bad_world);
  SG_CHECK(strstr(sg_last_error(), want) != NULL,
           "%s agree: message '%s' lacks '%s'", gname, sg_last_error(), want);
  /* two fail: the lowest one's status and message win */
  if (p > 1) {
    sg_status mine = SG_OK;
    if (me == 0)
      mine = sg_error_set(SG_ERR_IO, "f.c", 1, "rank zero cannot read");
    if (me == 1)
      mine = sg_error_set(SG_ERR_HALO, "f.c", 1, "rank one is too thin");
    st = sg_group_agree(g, mine);
    SG_CHECK(st == SG_ERR_IO, "%s agree lowest: got %s", gname,
             sg_status_name(st));
    SG_CHECK(strstr(sg_last_error(), "rank zero cannot read") != NULL, "%s: %s",
             gname, sg_last_error());
  }
  /* a status without a message still tells which rank and what */
  sg_clear_error();
  st = sg_agree(sg_group_comm(g), me == bad ? SG_ERR_CORRUPT : SG_OK);
  SG_CHECK(st == SG_ERR_CORRUPT, "%s: got %s", gname, sg_status_name(st));
  SG_CHECK(strstr(sg_last_error(), "SG_ERR_CORRUPT") != NULL, "%s: %s", gname,
           sg_last_error());
  SG_CHECK_STATUS(sg_group_agree(NULL, SG_OK), SG_ERR_INVALID_ARG);
}

/* Displacements beyond INT_MAX elements take the MPI-4 large-count calls
 * (or say SG_ERR_NOT_SUPPORTED on MPI-3). The buffers are sparse: a
 * reserved-but-untouched mapping, of which only a few pages are used. */
static void test_large_displs(sg_group_t g, const char *gname) {
  int p = sg_group_size(g), me = sg_group_rank(g);
  const int64_t far = (int64_t)INT32_MAX + 1000; /* elements of f32 */
  size_t bytes = (size_t)(far + 64 * p) * sizeof(float);
  void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  int ok = map != MAP_FAILED;
  if (!sg_test_all(sg_group_comm(g), ok)) {
    if (ok) munmap(map, bytes);
    sg_test_skip(
        "cannot reserve 8 GiB of address space for the large-count test");
    return;
  }
  float *big = map, small[256], ref[256];
  int64_t *c = malloc(4 * (size_t)p * sizeof *c), *d = c + p, *c2 = c + 2 * p,
          *d2 = c + 3 * p;
  /* allgatherv: rank r's 3 elements land at far + 5 r */
  for (int r = 0; r < p; ++r) {
    c[r] = 3;
    d[r] = far + 5 * r;
  }
  fill(SG_DTYPE_F32, small, 3, me, 0, 11);
  sg_status st = sg_allgatherv(g, small, 3, big, c, d, SG_DTYPE_F32);
#if MPI_VERSION >= 4
  SG_CHECK(st == SG_OK, "%s large allgatherv: %s", gname, sg_last_error());
  for (int r = 0; r < p && st == SG_OK; ++r) {
    fill(SG_DTYPE_F32, ref, 3, r, 0, 11);
    SG_CHECK(sg_test_cmp_bytes("large allgatherv", big + far + 5 * r, ref,
                               3 * sizeof(float)) == 0,
             "%s large allgatherv block %d", gname, r);
  }
#else
  SG_CHECK(st == SG_ERR_NOT_SUPPORTED, "%s large allgatherv on MPI-3: %s",
           gname, sg_status_name(st));
#endif
  /* alltoallv: send 2 elements to each rank from far offsets, receive
   * packed into a small buffer */
  for (int r = 0; r < p; ++r) {
    c[r] = 2;
    d[r] = far + 7 * r;
    c2[r] = 2;
    d2[r] = 2 * r;
    fill(SG_DTYPE_F32, big + far + 7 * r, 2, me, r, 12);
  }
  st = sg_alltoallv(g, big, c, d, small, c2, d2, SG_DTYPE_F32);
#if MPI_VERSION >= 4
  SG_CHECK(st == SG_OK, "%s large alltoallv: %s", gname, sg_last_error());
  for (int r = 0; r < p && st == SG_OK; ++r) {
    fill(SG_DTYPE_F32, ref, 2, r, me, 12);
    SG_CHECK(sg_test_cmp_bytes("large alltoallv", small + 2 * r, ref,
                               2 * sizeof(float)) == 0,
             "%s large alltoallv block %d", gname, r);
  }
#else
  SG_CHECK(st == SG_ERR_NOT_SUPPORTED, "%s large alltoallv on MPI-3", gname);
#endif
  free(c);
  munmap(map, bytes);
}

static void run_group(sg_group_t g, const char *gname) {
  test_allreduce(g, gname);
  test_bcast(g, gname);
  test_allgather(g, gname);
  test_alltoall(g, gname);
  test_p2p(g, gname);
  test_reduce_scatter(g, gname);
  test_agree(g, gname);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_mesh_t m = NULL;
  char spec[64];
  int n = sg_test_size;
  if (n == 4)
    snprintf(spec, sizeof spec, "a=2,b=2");
  else
    snprintf(spec, sizeof spec, "w=%d", n);
  SG_REQUIRE_OK(sg_mesh_create(MPI_COMM_WORLD, spec, &m));
  int nd = sg_mesh_ndims(m);
  for (unsigned mask = 0; mask < (1u << nd); ++mask) {
    sg_group_t g = NULL;
    SG_REQUIRE_OK(sg_mesh_group(m, mask, &g));
    char gname[96];
    snprintf(gname, sizeof gname, "[%s mask %x, %d ranks]", spec, mask,
             sg_group_size(g));
    run_group(g, gname);
  }
  {
    sg_group_t all = NULL;
    SG_REQUIRE_OK(sg_mesh_group(m, (1u << nd) - 1u, &all));
    test_large_displs(all, "[all]");
  }
  /* dtype mapping */
  int sz = 0;
  MPI_Type_size(sg_dtype_mpi(SG_DTYPE_BF16), &sz);
  SG_CHECK(sz == 2, "bf16 MPI type has %d bytes", sz);
  SG_CHECK(sg_dtype_mpi(SG_DTYPE_F64) == MPI_DOUBLE, "f64");
  SG_CHECK(sg_reduce_op_mpi(SG_REDUCE_MAX) == MPI_MAX, "max");
  SG_CHECK(sg_dtype_mpi((sg_dtype)99) == MPI_DATATYPE_NULL, "invalid dtype");
  /* NCCL: not built, or built without a GPU here */
  sg_status st = sg_mesh_enable_nccl(m);
#if SG_HAVE_NCCL
  SG_CHECK(st == SG_OK || st == SG_ERR_NO_DEVICE, "enable_nccl: %s",
           sg_status_name(st));
#else
  SG_CHECK(st == SG_ERR_NOT_SUPPORTED, "enable_nccl: %s", sg_status_name(st));
#endif
  SG_CHECK_OK(sg_mesh_destroy(&m));
done:
  sg_mesh_destroy(&m);
  return sg_test_finish();
}
