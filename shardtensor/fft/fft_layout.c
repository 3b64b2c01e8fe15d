/* shardgrid — layouts, box copies and the all-to-all-v transposes of the
 * distributed FFT. */
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fft_impl.h"
#include "sg_comm.h"
#include "sg_device.h"
#include "sg_shardtensor.h"

/* ---- layouts ------------------------------------------------------------ */

void sg_fft_layout_dim_box(const sg_fft_layout *l, int d, const int *axis_size,
                           const int *coords, int64_t *off, int64_t *len) {
  int64_t o = 0, n = l->shape[d];
  for (int s = 0; s < l->nsplit[d]; ++s) {
    int a = l->split[d][s];
    int64_t po, pn;
    sg_split_part(n, axis_size[a], coords[a], &po, &pn);
    o += po;
    n = pn;
  }
  *off = o;
  *len = n;
}

void sg_fft_layout_box(const sg_fft_layout *layout, const int *axis_size,
                       const int *coords, int64_t *offset, int64_t *shape) {
  for (int d = 0; d < layout->ndim; ++d)
    sg_fft_layout_dim_box(layout, d, axis_size, coords, &offset[d], &shape[d]);
}

sg_status sg_fft_axes_from_comms(sg_fft_axes *ax, int naxes,
                                 const MPI_Comm *axes) {
  sg_status st = SG_OK;
  if (naxes < 0 || naxes > SG_FFT_MAX_AXES)
    SG_RAISE(SG_ERR_INVALID_ARG, "naxes must be in [0, %d], got %d",
             SG_FFT_MAX_AXES, naxes);
  if (naxes > 0 && !axes)
    SG_RAISE(SG_ERR_INVALID_ARG, "axes is NULL with naxes = %d", naxes);
  memset(ax, 0, sizeof *ax);
  ax->naxes = naxes;
  for (int a = 0; a < SG_FFT_MAX_AXES; ++a) {
    ax->comm[a] = MPI_COMM_NULL;
    ax->size[a] = 1;
    ax->rank[a] = 0;
  }
  for (int a = 0; a < naxes; ++a) {
    ax->comm[a] = axes[a];
    if (axes[a] != MPI_COMM_NULL) {
      SG_MPI(MPI_Comm_size(axes[a], &ax->size[a]));
      SG_MPI(MPI_Comm_rank(axes[a], &ax->rank[a]));
    }
  }
fail:
  return st;
}

sg_status sg_fft_agree(MPI_Comm comm, sg_status local) {
  return sg_agree(comm, local);
}

sg_status sg_fft_axes_from_mesh(sg_fft_axes *ax, sg_mesh_t mesh) {
  sg_status st = SG_OK;
  MPI_Comm comms[SG_FFT_MAX_AXES];
  if (!mesh) SG_RAISE(SG_ERR_INVALID_ARG, "mesh is NULL");
  int nd = sg_mesh_ndims(mesh);
  for (int d = 0; d < nd; ++d) {
    sg_group_t g = NULL;
    SG_TRY(sg_mesh_group(mesh, 1u << d, &g));
    comms[d] = sg_group_comm(g);
  }
  SG_TRY(sg_fft_axes_from_comms(ax, nd, comms));
fail:
  return st;
}

/* ---- box copy ------------------------------------------------------------ */

static inline int64_t map_of(const sg_fft_map *m, int d, int64_t j) {
  return m ? sg_fft_map_index(m[d], j) : j;
}

void sg_fft_box_copy(char *dst, const int64_t *dshape, const int64_t *doff,
                     const sg_fft_map *dmap, const char *src,
                     const int64_t *sshape, const int64_t *soff,
                     const sg_fft_map *smap, const int64_t *box, int nd,
                     size_t esize) {
  int64_t dst_st[SG_FFT_ND], src_st[SG_FFT_ND];
  int64_t nouter = 1;
  dst_st[nd - 1] = src_st[nd - 1] = 1;
  for (int d = nd - 2; d >= 0; --d) {
    dst_st[d] = dst_st[d + 1] * dshape[d + 1];
    src_st[d] = src_st[d + 1] * sshape[d + 1];
  }
  for (int d = 0; d < nd - 1; ++d) nouter *= box[d];
  int64_t inner = box[nd - 1];
  if (nouter <= 0 || inner <= 0) return;
  /* the innermost run splits where either map jumps */
  int64_t cut[4];
  int ncut = 0;
  cut[ncut++] = 0;
  int il = nd - 1;
  if (smap && smap[il].m > 0) {
    int64_t c = smap[il].m - soff[il];
    if (c > 0 && c < inner) cut[ncut++] = c;
  }
  if (dmap && dmap[il].m > 0) {
    int64_t c = dmap[il].m - doff[il];
    if (c > 0 && c < inner) cut[ncut++] = c;
  }
  if (ncut == 3 && cut[1] > cut[2]) {
    int64_t t = cut[1];
    cut[1] = cut[2];
    cut[2] = t;
  }
  cut[ncut] = inner;
  const int64_t total = nouter * inner;
  (void)total;
#pragma omp parallel for schedule(static) if (total * (int64_t)esize > \
                                              (1 << 18))
  for (int64_t o = 0; o < nouter; ++o) {
    int64_t rem = o, so = 0, dof = 0;
    for (int d = nd - 2; d >= 0; --d) {
      int64_t i = rem % box[d];
      rem /= box[d];
      so += map_of(smap, d, soff[d] + i) * src_st[d];
      dof += map_of(dmap, d, doff[d] + i) * dst_st[d];
    }
    for (int c = 0; c < ncut; ++c) {
      int64_t j0 = cut[c], len = cut[c + 1] - cut[c];
      if (len <= 0) continue;
      memcpy(dst + (size_t)(dof + map_of(dmap, il, doff[il] + j0)) * esize,
             src + (size_t)(so + map_of(smap, il, soff[il] + j0)) * esize,
             (size_t)len * esize);
    }
  }
}

/* ---- redistribution ------------------------------------------------------ */

static int64_t prod(const int64_t *v, int n) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= v[i];
  return p;
}

/* ---- shared-memory synchronisation ----------------------------------------- */

/* One cache line after the two halves of each segment: its rank's arrival
 * count. */
#define SHM_CTL_BYTES 64
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
               "the shared-memory transpose needs lock-free 64-bit atomics");

static _Atomic unsigned long long *shm_ctl(const sg_fft_redist *rd, int q) {
  return (_Atomic unsigned long long *)(void *)(rd->peer_seg[q] + 2 * rd->half);
}

/* SG_FFT_SHM_SYNC=mpi: MPI_Barrier (the previous behaviour) */
static int shm_sync_flags(void) {
  const char *e = getenv("SG_FFT_SHM_SYNC");
  return !(e && strcmp(e, "mpi") == 0);
}

/* SG_FFT_SPIN_US: microseconds a waiting rank polls before it starts
 * yielding the CPU between polls (default 1000; -1: never yield). Waits
 * between ranks on their own cores are tens of microseconds; a longer wait
 * means the peer is not running (preempted, or on this rank's core). 20 us
 * rescued the co-located case as well, but on the 2-vCPU VM under load the
 * scheduler then put both ranks on one vCPU far more often (in 6 of 8
 * launches against 0 of 8 with MPI_Barrier). */
static long shm_spin_ns(void) {
  long us = 1000;
  const char *e = getenv("SG_FFT_SPIN_US");
  if (e && *e) {
    char *end = NULL;
    long v = strtol(e, &end, 10);
    if (end && *end == '\0' && v >= -1) us = v;
  }
  return us < 0 ? -1 : us * 1000;
}

static long elapsed_ns(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long)(t.tv_sec - t0->tv_sec) * 1000000000L +
         (long)(t.tv_nsec - t0->tv_nsec);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Publish this rank's arrival and wait for every peer's. The packed
 * blocks are written before the release store and read after the acquire
 * loads; MPI_Win_sync keeps MPI's view of the window in step. A rank can be
 * at most one arrival ahead of a peer, and it then writes the other half
 * of its segment, so the peer's reads of the previous half are safe. */
static sg_status shm_flag_barrier(sg_fft_redist *rd) {
  const uint64_t e = ++rd->epoch;
  sg_deadline dl;
  sg_deadline_start(&dl);
  MPI_Win_sync(rd->win);
  atomic_store_explicit(shm_ctl(rd, rd->r), (unsigned long long)e,
                        memory_order_release);
  struct timespec t0;
  int timing = 0;
  for (int q = 0; q < rd->P; ++q) {
    if (q == rd->r) continue;
    _Atomic unsigned long long *c = shm_ctl(rd, q);
    unsigned spins = 0;
    while (atomic_load_explicit(c, memory_order_acquire) < e) {
      if (sg_deadline_passed(&dl)) /* the peer never arrived */
        return sg_timeout_error(&dl, "FFT transpose (shared-memory barrier)",
                                rd->comm, q);
      if (rd->spin_ns < 0 || ++spins < 64) {
        cpu_relax();
        continue;
      }
      spins = 0;
      if (!timing) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        timing = 1;
      } else if (elapsed_ns(&t0) >= rd->spin_ns) {
        sched_yield();
      }
    }
  }
  MPI_Win_sync(rd->win);
  return SG_OK;
}

sg_status sg_fft_redist_init(sg_fft_redist *rd, const sg_fft_axes *axes, int nd,
                             size_t esize, int axis, int from, int to,
                             const int64_t *src_phys, const int64_t *src_log,
                             const sg_fft_map *src_map, int use_shm,
                             const int64_t *from_parent_len) {
  sg_status st = SG_OK;
  memset(rd, 0, sizeof *rd);
  rd->win = MPI_WIN_NULL;
  rd->nd = nd;
  rd->esize = esize;
  rd->axis = axis;
  rd->from = from;
  rd->to = to;
  rd->comm = MPI_COMM_NULL;
  rd->etype = MPI_DATATYPE_NULL;
  for (int d = 0; d < nd; ++d) {
    rd->src_phys[d] = src_phys[d];
    rd->src_log[d] = src_log[d];
    rd->src_map[d] = src_map ? src_map[d] : (sg_fft_map){0, 0};
    rd->dst_shape[d] = src_log[d];
  }
  if (axis < 0) {
    rd->P = 1;
    rd->r = 0;
  } else {
    rd->P = axes->size[axis];
    rd->r = axes->rank[axis];
    rd->comm = axes->comm[axis];
    rd->dst_shape[from] = *from_parent_len;
    int64_t o, n;
    sg_split_part(src_log[to], rd->P, rd->r, &o, &n);
    rd->dst_shape[to] = n;
  }
  int P = rd->P;
  rd->send_off = calloc((size_t)P * nd, sizeof(int64_t));
  rd->send_len = calloc((size_t)P * nd, sizeof(int64_t));
  rd->recv_off = calloc((size_t)P * nd, sizeof(int64_t));
  rd->recv_len = calloc((size_t)P * nd, sizeof(int64_t));
  rd->scount = calloc((size_t)P, sizeof(int));
  rd->sdispl = calloc((size_t)P, sizeof(int));
  rd->rcount = calloc((size_t)P, sizeof(int));
  rd->rdispl = calloc((size_t)P, sizeof(int));
  if (!rd->send_off || !rd->send_len || !rd->recv_off || !rd->recv_len ||
      !rd->scount || !rd->sdispl || !rd->rcount || !rd->rdispl)
    SG_RAISE(SG_ERR_ALLOC, "out of memory for a transpose of %d ranks", P);
  int64_t sacc = 0, racc = 0;
  for (int q = 0; q < P; ++q) {
    int64_t *so = rd->send_off + (size_t)q * nd,
            *sl = rd->send_len + (size_t)q * nd;
    int64_t *ro = rd->recv_off + (size_t)q * nd,
            *rl = rd->recv_len + (size_t)q * nd;
    for (int d = 0; d < nd; ++d) {
      so[d] = 0;
      sl[d] = src_log[d];
      ro[d] = 0;
      rl[d] = rd->dst_shape[d];
    }
    if (axis >= 0) {
      sg_split_part(src_log[to], P, q, &so[to], &sl[to]);
      sg_split_part(*from_parent_len, P, q, &ro[from], &rl[from]);
    }
    int64_t sc = prod(sl, nd), rc = prod(rl, nd);
    if (q == rd->r) sc = rc = 0; /* own block: copied directly */
    if (sc > INT_MAX || rc > INT_MAX || sacc + sc > INT_MAX ||
        racc + rc > INT_MAX)
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "transpose blocks over %d elements per rank are not supported",
               INT_MAX);
    rd->scount[q] = (int)sc;
    rd->rcount[q] = (int)rc;
    rd->sdispl[q] = (int)sacc;
    rd->rdispl[q] = (int)racc;
    sacc += sc;
    racc += rc;
  }
  rd->send_total = sacc;
  rd->recv_total = racc;
  if (axis >= 0) {
    SG_MPI(MPI_Type_contiguous((int)esize, MPI_BYTE, &rd->etype));
    SG_MPI(MPI_Type_commit(&rd->etype));
  }
  if (axis >= 0 && P > 1) {
    /* the same decision on every rank of the group */
    MPI_Comm node = MPI_COMM_NULL;
    int nsize = 0;
    SG_MPI(MPI_Comm_split_type(rd->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                               &node));
    MPI_Comm_size(node, &nsize);
    MPI_Comm_free(&node);
    rd->shm = use_shm && nsize == P;
  }
  if (rd->shm) {
    /* one half size for the whole group: peers index each other's
     * segments with it */
    int64_t m = sacc > racc ? sacc : racc, mmax = 0;
    SG_MPI(MPI_Allreduce(&m, &mmax, 1, MPI_INT64_T, MPI_MAX, rd->comm));
    rd->half = ((size_t)mmax * esize + 63) / 64 * 64;
    if (rd->half == 0) rd->half = 64;
    rd->peer_seg = calloc((size_t)P, sizeof(char *));
    rd->peer_sdispl = calloc((size_t)P, sizeof(int));
    rd->peer_rdispl = calloc((size_t)P, sizeof(int));
    int *mine = calloc(2 * (size_t)P, sizeof(int));
    int *theirs = calloc(2 * (size_t)P, sizeof(int));
    if (!rd->peer_seg || !rd->peer_sdispl || !rd->peer_rdispl || !mine ||
        !theirs) {
      free(mine);
      free(theirs);
      SG_RAISE(SG_ERR_ALLOC, "out of memory for a transpose of %d ranks", P);
    }
    for (int q = 0; q < P; ++q) {
      mine[2 * q] = rd->sdispl[q];
      mine[2 * q + 1] = rd->rdispl[q];
    }
    int rc = MPI_Alltoall(mine, 2, MPI_INT, theirs, 2, MPI_INT, rd->comm);
    for (int q = 0; q < P && rc == MPI_SUCCESS; ++q) {
      rd->peer_sdispl[q] = theirs[2 * q];
      rd->peer_rdispl[q] = theirs[2 * q + 1];
    }
    free(mine);
    free(theirs);
    SG_MPI(rc);
    /* the same synchronisation on every rank (the environment could
     * differ between ranks): flags unless any rank asks for MPI_Barrier;
     * the longest spin asked for */
    long cfg[2] = {shm_sync_flags() ? 0 : 1, shm_spin_ns()}, agreed[2];
    SG_MPI(MPI_Allreduce(cfg, agreed, 2, MPI_LONG, MPI_MAX, rd->comm));
    rd->flag_sync = agreed[0] == 0;
    rd->spin_ns = agreed[1];
    SG_MPI(MPI_Win_allocate_shared((MPI_Aint)(2 * rd->half + SHM_CTL_BYTES), 1,
                                   MPI_INFO_NULL, rd->comm, &rd->seg,
                                   &rd->win));
    for (int q = 0; q < P; ++q) {
      MPI_Aint sz;
      int du;
      SG_MPI(MPI_Win_shared_query(rd->win, q, &sz, &du, &rd->peer_seg[q]));
    }
    SG_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, rd->win));
    /* arrival counts start at zero on every rank before anyone polls */
    atomic_store_explicit(shm_ctl(rd, rd->r), 0, memory_order_relaxed);
    SG_MPI(MPI_Win_sync(rd->win));
    SG_MPI(MPI_Barrier(rd->comm));
    SG_MPI(MPI_Win_sync(rd->win));
  }
  return SG_OK;
fail:
  sg_fft_redist_free(rd);
  return st;
}

sg_status sg_fft_redist_free(sg_fft_redist *rd) {
  if (!rd) return SG_OK;
  free(rd->send_off);
  free(rd->send_len);
  free(rd->recv_off);
  free(rd->recv_len);
  free(rd->scount);
  free(rd->sdispl);
  free(rd->rcount);
  free(rd->rdispl);
  if (rd->etype != MPI_DATATYPE_NULL) MPI_Type_free(&rd->etype);
  if (rd->win != MPI_WIN_NULL) {
    MPI_Win_unlock_all(rd->win);
    MPI_Win_free(&rd->win);
  }
  free(rd->peer_seg);
  free(rd->peer_sdispl);
  free(rd->peer_rdispl);
  memset(rd, 0, sizeof *rd);
  rd->etype = MPI_DATATYPE_NULL;
  rd->win = MPI_WIN_NULL;
  return SG_OK;
}

static int needs_zero(const sg_fft_redist *rd) {
  for (int d = 0; d < rd->nd; ++d)
    if (rd->src_log[d] != rd->src_phys[d]) return 1;
  return 0;
}

/* Zero the source block where the kept (logical) extent is smaller. */
static void zero_src(const sg_fft_redist *rd, void *src) {
  if (!needs_zero(rd)) return;
  size_t bytes = (size_t)prod(rd->src_phys, rd->nd) * rd->esize;
  char *s = src;
  const size_t chunk = (size_t)1 << 20;
  int64_t nchunks = (int64_t)((bytes + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) if (nchunks > 1)
  for (int64_t c = 0; c < nchunks; ++c) {
    size_t b0 = (size_t)c * chunk;
    size_t len = bytes - b0 < chunk ? bytes - b0 : chunk;
    memset(s + b0, 0, len);
  }
}

static sg_status shm_sync(sg_fft_redist *rd) {
  sg_status st = SG_OK;
  if (rd->flag_sync) return shm_flag_barrier(rd);
  SG_MPI(MPI_Win_sync(rd->win));
  if (sg_comm_timeout() > 0) {
    MPI_Request r = MPI_REQUEST_NULL;
    SG_MPI(MPI_Ibarrier(rd->comm, &r));
    SG_TRY(sg_wait_timed(&r, NULL, 0, "FFT transpose (barrier)", rd->comm));
  } else {
    SG_MPI(MPI_Barrier(rd->comm));
  }
  SG_MPI(MPI_Win_sync(rd->win));
fail:
  return st;
}

static sg_status shm_forward(const sg_fft_redist *rdc, const void *src,
                             void *dst) {
  sg_status st = SG_OK;
  sg_fft_redist *rd = (sg_fft_redist *)(uintptr_t)rdc; /* the phase */
  const int nd = rd->nd, P = rd->P;
  const size_t es = rd->esize, h = (size_t)rd->phase * rd->half;
  static const int64_t zero[SG_FFT_ND] = {0, 0, 0, 0};
  for (int q = 0; q < P; ++q) {
    const int64_t *so = rd->send_off + (size_t)q * nd;
    const int64_t *sl = rd->send_len + (size_t)q * nd;
    if (q == rd->r)
      sg_fft_box_copy(dst, rd->dst_shape, rd->recv_off + (size_t)q * nd, NULL,
                      src, rd->src_phys, so, rd->src_map, sl, nd, es);
    else
      sg_fft_box_copy(rd->seg + h + (size_t)rd->sdispl[q] * es, sl, zero, NULL,
                      src, rd->src_phys, so, rd->src_map, sl, nd, es);
  }
  SG_TRY(shm_sync(rd));
  for (int q = 0; q < P; ++q) {
    if (q == rd->r) continue;
    const int64_t *rl = rd->recv_len + (size_t)q * nd;
    sg_fft_box_copy(dst, rd->dst_shape, rd->recv_off + (size_t)q * nd, NULL,
                    rd->peer_seg[q] + h + (size_t)rd->peer_sdispl[q] * es, rl,
                    zero, NULL, rl, nd, es);
  }
  rd->phase ^= 1;
fail:
  return st;
}

static sg_status shm_reverse(const sg_fft_redist *rdc, const void *dst,
                             void *src) {
  sg_status st = SG_OK;
  sg_fft_redist *rd = (sg_fft_redist *)(uintptr_t)rdc;
  const int nd = rd->nd, P = rd->P;
  const size_t es = rd->esize, h = (size_t)rd->phase * rd->half;
  static const int64_t zero[SG_FFT_ND] = {0, 0, 0, 0};
  zero_src(rd, src);
  for (int q = 0; q < P; ++q) {
    const int64_t *ro = rd->recv_off + (size_t)q * nd;
    const int64_t *rl = rd->recv_len + (size_t)q * nd;
    if (q == rd->r)
      sg_fft_box_copy(src, rd->src_phys, rd->send_off + (size_t)q * nd,
                      rd->src_map, dst, rd->dst_shape, ro, NULL, rl, nd, es);
    else
      sg_fft_box_copy(rd->seg + h + (size_t)rd->rdispl[q] * es, rl, zero, NULL,
                      dst, rd->dst_shape, ro, NULL, rl, nd, es);
  }
  SG_TRY(shm_sync(rd));
  for (int q = 0; q < P; ++q) {
    if (q == rd->r) continue;
    const int64_t *sl = rd->send_len + (size_t)q * nd;
    sg_fft_box_copy(src, rd->src_phys, rd->send_off + (size_t)q * nd,
                    rd->src_map,
                    rd->peer_seg[q] + h + (size_t)rd->peer_rdispl[q] * es, sl,
                    zero, NULL, sl, nd, es);
  }
  rd->phase ^= 1;
fail:
  return st;
}

/* The transpose's all-to-all-v; with a timeout set (sg_comm_set_timeout)
 * the non-blocking one and a wait that gives up. */
static sg_status alltoallv_timed(const void *sb, const int *sc, const int *sd,
                                 void *rb, const int *rc, const int *rdp,
                                 const sg_fft_redist *rd) {
  sg_status st = SG_OK;
  if (sg_comm_timeout() > 0) {
    MPI_Request r = MPI_REQUEST_NULL;
    SG_MPI(MPI_Ialltoallv(sb, sc, sd, rd->etype, rb, rc, rdp, rd->etype,
                          rd->comm, &r));
    SG_TRY(
        sg_wait_timed(&r, NULL, 0, "FFT transpose (MPI_Alltoallv)", rd->comm));
  } else {
    SG_MPI(
        MPI_Alltoallv(sb, sc, sd, rd->etype, rb, rc, rdp, rd->etype, rd->comm));
  }
fail:
  return st;
}

sg_status sg_fft_redist_forward(const sg_fft_redist *rd, const void *src,
                                void *dst, void *sbuf, void *rbuf) {
  sg_status st = SG_OK;
  if (rd->shm) return shm_forward(rd, src, dst);
  const int nd = rd->nd, P = rd->P;
  const size_t es = rd->esize;
  static const int64_t zero[SG_FFT_ND] = {0, 0, 0, 0};
  for (int q = 0; q < P; ++q) {
    const int64_t *so = rd->send_off + (size_t)q * nd;
    const int64_t *sl = rd->send_len + (size_t)q * nd;
    if (q == rd->r)
      sg_fft_box_copy(dst, rd->dst_shape, rd->recv_off + (size_t)q * nd, NULL,
                      src, rd->src_phys, so, rd->src_map, sl, nd, es);
    else
      sg_fft_box_copy((char *)sbuf + (size_t)rd->sdispl[q] * es, sl, zero, NULL,
                      src, rd->src_phys, so, rd->src_map, sl, nd, es);
  }
  if (P > 1) {
    SG_TRY(alltoallv_timed(sbuf, rd->scount, rd->sdispl, rbuf, rd->rcount,
                           rd->rdispl, rd));
    for (int q = 0; q < P; ++q) {
      if (q == rd->r) continue;
      const int64_t *rl = rd->recv_len + (size_t)q * nd;
      sg_fft_box_copy(dst, rd->dst_shape, rd->recv_off + (size_t)q * nd, NULL,
                      (const char *)rbuf + (size_t)rd->rdispl[q] * es, rl, zero,
                      NULL, rl, nd, es);
    }
  }
fail:
  return st;
}

sg_status sg_fft_redist_reverse(const sg_fft_redist *rd, const void *dst,
                                void *src, void *sbuf, void *rbuf) {
  sg_status st = SG_OK;
  const int nd = rd->nd, P = rd->P;
  const size_t es = rd->esize;
  static const int64_t zero[SG_FFT_ND] = {0, 0, 0, 0};
  if (rd->shm) return shm_reverse(rd, dst, src);
  zero_src(rd, src);
  for (int q = 0; q < P; ++q) {
    const int64_t *ro = rd->recv_off + (size_t)q * nd;
    const int64_t *rl = rd->recv_len + (size_t)q * nd;
    if (q == rd->r)
      sg_fft_box_copy(src, rd->src_phys, rd->send_off + (size_t)q * nd,
                      rd->src_map, dst, rd->dst_shape, ro, NULL, rl, nd, es);
    else
      sg_fft_box_copy((char *)rbuf + (size_t)rd->rdispl[q] * es, rl, zero, NULL,
                      dst, rd->dst_shape, ro, NULL, rl, nd, es);
  }
  if (P > 1) {
    SG_TRY(alltoallv_timed(rbuf, rd->rcount, rd->rdispl, sbuf, rd->scount,
                           rd->sdispl, rd));
    for (int q = 0; q < P; ++q) {
      if (q == rd->r) continue;
      const int64_t *sl = rd->send_len + (size_t)q * nd;
      sg_fft_box_copy(src, rd->src_phys, rd->send_off + (size_t)q * nd,
                      rd->src_map,
                      (const char *)sbuf + (size_t)rd->sdispl[q] * es, sl, zero,
                      NULL, sl, nd, es);
    }
  }
fail:
  return st;
}

/* ---- public transposes ---------------------------------------------------- */

struct sg_fft_transpose {
  sg_fft_axes axes;
  sg_fft_layout before, after;
  int ncomp;
  sg_dtype dtype;
  int64_t batch;
  sg_fft_redist rd;
  void *sbuf, *rbuf;
};

sg_status sg_fft_transpose_create_comms(MPI_Comm comm, int naxes,
                                        const MPI_Comm *axes, sg_dtype dtype,
                                        int ncomp, int64_t batch,
                                        const sg_fft_layout *from, int axis,
                                        int to, sg_fft_transpose_t *out) {
  sg_status st = SG_OK;
  struct sg_fft_transpose *t = NULL;
  int agreed = 0;
  if (!out) SG_RAISE(SG_ERR_INVALID_ARG, "tr is NULL");
  *out = NULL;
  t = calloc(1, sizeof *t);
  if (!t) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  t->rd.etype = MPI_DATATYPE_NULL;
  SG_TRY(sg_fft_axes_from_comms(&t->axes, naxes, axes));
  if (dtype != SG_DTYPE_F32 && dtype != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_INVALID_ARG, "dtype must be f32 or f64, got %s",
             sg_dtype_name(dtype));
  if (ncomp != 1 && ncomp != 2)
    SG_RAISE(SG_ERR_INVALID_ARG, "ncomp must be 1 or 2, got %d", ncomp);
  if (batch < 1) SG_RAISE(SG_ERR_INVALID_ARG, "batch must be >= 1");
  if (!from || from->ndim < 1 || from->ndim > SG_FFT_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG, "layout must have 1..%d dims",
             SG_FFT_MAX_DIMS);
  if (axis < 0 || axis >= naxes || t->axes.comm[axis] == MPI_COMM_NULL)
    SG_RAISE(SG_ERR_INVALID_ARG, "axis %d has no communicator", axis);
  if (to < 0 || to >= from->ndim)
    SG_RAISE(SG_ERR_INVALID_ARG, "target dim %d out of range", to);
  int fd = -1;
  for (int d = 0; d < from->ndim; ++d) {
    if (from->shape[d] < 0) SG_RAISE(SG_ERR_INVALID_ARG, "negative extent");
    if (from->nsplit[d] < 0 || from->nsplit[d] > SG_FFT_MAX_DIMS)
      SG_RAISE(SG_ERR_INVALID_ARG, "bad nsplit");
    for (int s = 0; s < from->nsplit[d]; ++s) {
      int a = from->split[d][s];
      if (a < 0 || a >= naxes || t->axes.comm[a] == MPI_COMM_NULL)
        SG_RAISE(SG_ERR_INVALID_ARG,
                 "dim %d split by axis %d with no "
                 "communicator",
                 d, a);
      if (a == axis) {
        if (s != from->nsplit[d] - 1)
          SG_RAISE(SG_ERR_INVALID_ARG,
                   "axis %d is not the innermost "
                   "splitter of dim %d",
                   axis, d);
        fd = d;
      }
    }
  }
  if (fd < 0) SG_RAISE(SG_ERR_INVALID_ARG, "axis %d splits no dim", axis);
  if (fd == to) SG_RAISE(SG_ERR_INVALID_ARG, "from and to are both dim %d", to);
  if (from->nsplit[to] >= SG_FFT_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG, "dim %d has too many splitters", to);
  t->before = *from;
  t->after = *from;
  t->after.nsplit[fd]--;
  t->after.split[to][t->after.nsplit[to]++] = axis;
  t->ncomp = ncomp;
  t->dtype = dtype;
  t->batch = batch;
  /* the transpose's setup is collective: agree on the checks first */
  st = sg_fft_agree(comm, st);
  agreed = 1;
  if (st != SG_OK) goto fail;
  agreed = 0;
  {
    int nd = from->ndim + 1;
    int64_t off[SG_FFT_MAX_DIMS], len[SG_FFT_MAX_DIMS];
    int64_t shp[SG_FFT_ND];
    sg_fft_layout_box(from, t->axes.size, t->axes.rank, off, len);
    shp[0] = batch;
    for (int d = 0; d < from->ndim; ++d) shp[d + 1] = len[d];
    int64_t ppo, pplen;
    sg_fft_layout_dim_box(&t->after, fd, t->axes.size, t->axes.rank, &ppo,
                          &pplen);
    SG_TRY(sg_fft_redist_init(&t->rd, &t->axes, nd,
                              sg_dtype_size(dtype) * (size_t)ncomp, axis,
                              fd + 1, to + 1, shp, shp, NULL, 1, &pplen));
    SG_TRY(sg_malloc(sg_device_host(), (size_t)t->rd.send_total * t->rd.esize,
                     &t->sbuf));
    SG_TRY(sg_malloc(sg_device_host(), (size_t)t->rd.recv_total * t->rd.esize,
                     &t->rbuf));
  }
fail:
  if (!agreed) st = sg_fft_agree(comm, st);
  if (st != SG_OK) {
    sg_fft_transpose_destroy(&t);
    return st;
  }
  *out = t;
  return st;
}

sg_status sg_fft_transpose_create(sg_mesh_t mesh, sg_dtype dtype, int ncomp,
                                  int64_t batch, const sg_fft_layout *from,
                                  int axis, int to, sg_fft_transpose_t *tr) {
  sg_fft_axes ax;
  if (!mesh)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_fft_transpose_create: mesh is NULL");
  sg_status st = sg_fft_axes_from_mesh(&ax, mesh);
  if (st != SG_OK) return sg_agree(sg_mesh_comm(mesh), st);
  return sg_fft_transpose_create_comms(sg_mesh_comm(mesh), ax.naxes, ax.comm,
                                       dtype, ncomp, batch, from, axis, to, tr);
}

sg_status sg_fft_transpose_destroy(sg_fft_transpose_t *tr) {
  if (!tr || !*tr) return SG_OK;
  struct sg_fft_transpose *t = *tr;
  sg_fft_redist_free(&t->rd);
  sg_free(sg_device_host(), &t->sbuf);
  sg_free(sg_device_host(), &t->rbuf);
  free(t);
  *tr = NULL;
  return SG_OK;
}

void sg_fft_transpose_layout(sg_fft_transpose_t tr, int after,
                             sg_fft_layout *layout) {
  *layout = after ? tr->after : tr->before;
}

int64_t sg_fft_transpose_local_count(sg_fft_transpose_t tr, int after) {
  int64_t off[SG_FFT_MAX_DIMS], len[SG_FFT_MAX_DIMS];
  const sg_fft_layout *l = after ? &tr->after : &tr->before;
  sg_fft_layout_box(l, tr->axes.size, tr->axes.rank, off, len);
  return tr->batch * tr->ncomp * prod(len, l->ndim);
}

sg_status sg_fft_transpose_execute(sg_fft_transpose_t tr, const void *in,
                                   void *out) {
  return sg_fft_redist_forward(&tr->rd, in, out, tr->sbuf, tr->rbuf);
}

sg_status sg_fft_transpose_adjoint(sg_fft_transpose_t tr, const void *out,
                                   void *in) {
  return sg_fft_redist_reverse(&tr->rd, out, in, tr->sbuf, tr->rbuf);
}
