/* shardgrid — internals of the distributed FFT (not installed).
 *
 * Index arithmetic for packing is in static inline SG_HD functions so a
 * CUDA pack kernel uses the same arithmetic as the tested host loops. */
#ifndef SG_FFT_IMPL_H
#define SG_FFT_IMPL_H

#include <mpi.h>
#include <stdint.h>

#include "fft_dev_inl.h"
#include "sg_dtype.h"
#include "sg_fft.h"

#define SG_FFT_ND (SG_FFT_MAX_DIMS + 1) /* batch + spatial */

/* sg_fft_map, sg_fft_map_index: fft_dev_inl.h */

/* The axes a plan or transpose runs on. */
typedef struct sg_fft_axes {
  int naxes;
  MPI_Comm comm[SG_FFT_MAX_AXES];
  int size[SG_FFT_MAX_AXES];
  int rank[SG_FFT_MAX_AXES];
} sg_fft_axes;

/* One all-to-all-v inside one axis (or a local copy when the axis has one
 * rank or no move is made), from the "source" layout to the "destination"
 * layout. The source block may be wider than its logical extent (a
 * truncated dim: its logical index j lives at sg_fft_map_index(map, j)).
 * Sizes are in elements of esize bytes; all dims include batch as dim 0. */
typedef struct sg_fft_redist {
  int nd;       /* 1 + spatial dims */
  size_t esize; /* bytes per element */
  int axis;     /* -1: local copy only */
  int from, to; /* array dims (1-based with batch at 0) */
  int P, r;     /* group size and own index */
  MPI_Comm comm;
  int64_t src_phys[SG_FFT_ND]; /* source buffer shape */
  int64_t src_log[SG_FFT_ND];  /* logical (kept) source extents */
  sg_fft_map src_map[SG_FFT_ND];
  int64_t dst_shape[SG_FFT_ND];
  /* per peer: box of the source (logical coords) sent to it and box of the
   * destination received from it */
  int64_t *send_off, *send_len;           /* P x nd */
  int64_t *recv_off, *recv_len;           /* P x nd */
  int *scount, *sdispl, *rcount, *rdispl; /* in elements */
  int64_t send_total, recv_total;
  MPI_Datatype etype;
  /* Shared-memory path (every rank of the group on one node): each rank
   * packs into its own segment of a shared window (two halves used in
   * turn), one barrier, then every rank unpacks straight from its peers'
   * segments; no MPI message copies and one synchronisation per
   * transpose. */
  int shm;
  int phase;   /* which half of the segments the next call uses */
  size_t half; /* bytes of one half */
  /* Synchronisation of the shared-memory path: every segment ends in a
   * 64-byte line holding its rank's arrival count; a rank publishes its
   * count and waits until every peer's has reached it, spinning for
   * spin_ns and then yielding the CPU between polls (a waiting rank
   * gives its core to a peer that shares it instead of spinning through
   * the scheduler's time slice). flag_sync = 0: MPI_Barrier instead
   * (SG_FFT_SHM_SYNC=mpi). */
  int flag_sync;
  long spin_ns;
  uint64_t epoch; /* arrivals so far (same on every rank) */
  MPI_Win win;
  char *seg;
  char **peer_seg;  /* P: base of each rank's segment */
  int *peer_sdispl; /* P: where rank q keeps its forward block for me */
  int *peer_rdispl; /* P: where rank q keeps its reverse block for me */
} sg_fft_redist;

/* Copy a box between two arrays with maps (NULL: identity), nd dims, the
 * innermost contiguous. Not collective. */
void sg_fft_box_copy(char *dst, const int64_t *dshape, const int64_t *doff,
                     const sg_fft_map *dmap, const char *src,
                     const int64_t *sshape, const int64_t *soff,
                     const sg_fft_map *smap, const int64_t *box, int nd,
                     size_t esize);

sg_status sg_fft_redist_init(sg_fft_redist *rd, const sg_fft_axes *axes, int nd,
                             size_t esize, int axis, int from, int to,
                             const int64_t *src_phys, const int64_t *src_log,
                             const sg_fft_map *src_map, int use_shm,
                             const int64_t *from_parent_len);
/* Free what rd holds and reset it; NULL and reset redistributions are
 * fine (SG_OK). Not collective. */
sg_status sg_fft_redist_free(sg_fft_redist *rd);
/* Collective over the axis's group when axis >= 0 (the shared window).
 * Forward: src -> dst using send/recv scratch (send_total / recv_total
 * elements). Reverse: dst -> src (src zero-filled where logical < phys). */
sg_status sg_fft_redist_forward(const sg_fft_redist *rd, const void *src,
                                void *dst, void *sbuf, void *rbuf);
sg_status sg_fft_redist_reverse(const sg_fft_redist *rd, const void *dst,
                                void *src, void *sbuf, void *rbuf);

/* Balanced local extent of a layout dim for given coords. */
void sg_fft_layout_dim_box(const sg_fft_layout *l, int d, const int *axis_size,
                           const int *coords, int64_t *off, int64_t *len);

sg_status sg_fft_axes_from_comms(sg_fft_axes *ax, int naxes,
                                 const MPI_Comm *axes);
sg_status sg_fft_axes_from_mesh(sg_fft_axes *ax, sg_mesh_t mesh);
/* Agree on a status over comm (all return the lowest failing rank's
 * status; the others get SG_ERR_PEER with that rank's message). */
sg_status sg_fft_agree(MPI_Comm comm, sg_status st);

/* cuFFT local stages (cuda/fft_cuda.c, CUDA builds only). tdims are array
 * dims (batch at 0), ascending. Exec: device pointers; the backward
 * destroys its input. Not collective. */
typedef struct sg_fft_cuda_stage sg_fft_cuda_stage;
sg_status sg_fft_cuda_stage_create(int f64, int r2c, int nd,
                                   const int64_t *in_shape,
                                   const int64_t *out_shape, int nt,
                                   const int *tdims, sg_fft_cuda_stage **out);
sg_status sg_fft_cuda_stage_exec(sg_fft_cuda_stage *s, int fwd, void *in,
                                 void *out);
/* NULL and *s == NULL are fine (SG_OK); sets *s to NULL. */
sg_status sg_fft_cuda_stage_destroy(sg_fft_cuda_stage **s);

#endif /* SG_FFT_IMPL_H */
