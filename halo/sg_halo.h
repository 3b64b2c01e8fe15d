/* shardgrid — halo exchange plans.
 *
 * A plan serves one local block layout: a carried-along leading dim (batch
 * times channels, all fields of a block; `lead` elements with their own
 * stride) and up to 3 spatial dims, each with an owned interior, halo widths
 * (lo, hi) to fill and allocated margins (>= the widths). For each spatial
 * dim the plan knows the mesh dim that splits it (or -1) and its boundary
 * kind (sg_decomp.h).
 *
 * Forward (sg_halo_exchange, or sg_halo_start ... sg_halo_finish) fills the
 * halo cells, one spatial dim after another so that corners arrive without
 * diagonal messages: along a dim the exchanged slabs span the halos of the
 * dims exchanged before it and the interior of the dims after it. Dims
 * filled locally on both sides (not split: local wrap or edge fills) go
 * first, then the split dims in order; the result does not depend on the
 * order. Each neighbour gets one
 * message per dim holding all leading elements. Across the mesh the data
 * comes from the neighbours (periodic dims wrap around the mesh); at a
 * physical edge zero, reflect or replicate fill locally; a periodic dim that
 * is not split wraps locally.
 *
 * Adjoint (sg_halo_adjoint, or sg_halo_adjoint_start ... _finish) is the
 * transpose of the forward map (from interior to interior + halo): dims in
 * reverse order, every halo cell's value is sent back to the cell it was
 * copied from and added there (the neighbour's edge cells; the reflected or
 * replicated owned cells at a physical edge; nothing for zero fills), and the
 * halo cells are zeroed. Backward of every window op uses it.
 *
 * Non-blocking use, overlapping a stencil's interior with the messages:
 *     sg_halo_start(plan, block);
 *     for (chunks of the interior) { compute; sg_halo_progress(plan, NULL); }
 *     sg_halo_finish(plan);
 *     compute the cells next to the halo;
 * sg_halo_progress tests the messages in flight, unpacks each side as it
 * lands and, when a dim is complete, starts the next dim; calling it in the
 * interior loop keeps MPI progressing (MPICH progresses mostly inside MPI
 * calls). Between start and finish the block's halo cells and the owned
 * cells within the halo widths of an edge must not be written. When
 * sg_halo_start returns, the halo cells of the locally filled dims beside
 * the interior of the split dims are already filled (only the cells in the
 * halos of split dims, corners included, wait for messages).
 *
 * Message paths (SG_HALO_PATH=auto|shm|mpi|pack|direct in the environment
 * at plan creation; sg_halo_plan_path tells which one a plan took):
 *  - shm (auto's choice when every neighbour of every rank shares the
 *    node): the plan borrows a segment of an MPI-3 shared window (pooled
 *    on the mesh; allocated collectively at plan creation when none is
 *    free); a message is packed (a memcpy for a one-run slab) into the
 *    sender's segment and unpacked by the receiver straight from it, two
 *    copies in all, signalled per neighbour and direction by sequence
 *    numbers in the window (MPI_Win_sync + release/acquire atomics; no
 *    barrier). Two buffers per direction and an acknowledgement counter
 *    make back-to-back exchanges safe. Messages move in pieces of
 *    SG_HALO_SHM_CHUNK bytes (default 256 KiB); start and progress move
 *    one piece per side per call, finish the rest. Off-node, shm falls back
 *    to mpi.
 *  - mpi (auto off-node): a slab that is one contiguous run of the block
 *    (an outer dim split with the fields innermost, or one field) is sent
 *    straight from the block and received straight into the margin; other
 *    slabs are packed into a buffer and unpacked. pack / direct force one
 *    way for every slab (direct uses MPI datatypes).
 *
 * MPI buffers are allocated once at plan creation; packed slabs use
 * persistent MPI requests, direct slabs MPI_Isend/Irecv on the block passed
 * to start, all on a duplicate of the mesh communicator (made once per mesh
 * and cached on it; every plan has its own tags and its own window
 * segment, so several plans may be in flight at once). Blocks are host
 * memory (the CUDA pack kernels are in sg_halo_pack.h).
 */
#ifndef SG_HALO_H
#define SG_HALO_H

#include <stdint.h>

#include "sg_decomp.h"
#include "sg_dtype.h"
#include "sg_halo_pack.h"
#include "sg_mesh.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_HALO_MAX_DIMS SG_DECOMP_MAX_DIMS
#define SG_HALO_MAX_BLOCKS 4 /* sg_halo_plan_alloc_block per plan */

typedef struct sg_halo_desc {
  int ndims;                           /* spatial dims, 1..3 */
  int64_t interior[SG_HALO_MAX_DIMS];  /* owned cells per spatial dim */
  int64_t halo[SG_HALO_MAX_DIMS][2];   /* widths to fill (lo, hi), >= 0 */
  int64_t margin[SG_HALO_MAX_DIMS][2]; /* allocated margins >= halo; a
                                            margin below the width is taken
                                            to equal the width */
  int64_t lead;                        /* leading elements (batch*channels) */
  /* Element strides: [0] of the leading dim, [1 + d] of spatial dim d. All
   * zero: packed row-major (lead, d0, d1, d2) with the margins. */
  int64_t strides[1 + SG_HALO_MAX_DIMS];
  sg_dtype dtype;
  int mesh_dim[SG_HALO_MAX_DIMS]; /* mesh dim splitting it, or -1 */
  sg_boundary boundary[SG_HALO_MAX_DIMS];
} sg_halo_desc;

/* Defaults: 1 spatial dim, lead 1, f32, packed, not split, zero boundary,
 * no halo. Not collective. */
void sg_halo_desc_init(sg_halo_desc *desc);

/* A desc for this rank's shard of a decomposition with lead leading
 * elements, filled from the window op per dim (w[d]; halo widths by the
 * output-partition rule, margins equal to the widths). SG_ERR_HALO,
 * identical on every rank, for thin shards. Not collective. */
sg_status sg_halo_desc_from_decomp(sg_decomp_t dec, const sg_window *w,
                                   int64_t lead, sg_dtype dtype,
                                   sg_halo_desc *desc);

typedef struct sg_halo_plan *sg_halo_plan_t;

/* Create a plan. Collective over the mesh: every rank passes its own desc
 * (interiors and widths may differ per rank; ndims, mesh dims, boundaries,
 * dtype must agree). Before any halo message is sent, the ranks along each
 * split dim share their interiors and widths and check that no shard is
 * thinner than the halo it must supply (and that edge fills have the cells
 * they need); a failure is SG_ERR_HALO on every rank of the mesh, with the
 * dim, the shard size and the halo width in the message. Other argument
 * errors are also returned on every rank. */
sg_status sg_halo_plan_create(sg_mesh_t mesh, const sg_halo_desc *desc,
                              sg_halo_plan_t *plan);
/* Free a plan (not while an exchange is in flight); accepts NULL, sets
 * *plan to NULL. Not collective (a shm plan's window goes back to the
 * mesh's pool; the windows are freed with the mesh). Plans must be
 * destroyed before their mesh. */
sg_status sg_halo_plan_destroy(sg_halo_plan_t *plan);

/* Block geometry: total elements of the block with margins, and the
 * element offset of interior cell (lead 0, 0, 0, 0). Not collective. */
int64_t sg_halo_plan_block_count(sg_halo_plan_t plan);
int64_t sg_halo_plan_origin(sg_halo_plan_t plan);
/* Element strides ([0] lead, [1+d] spatial). Not collective. */
void sg_halo_plan_strides(sg_halo_plan_t plan, int64_t *strides);
/* Bytes this rank sends in one forward exchange (all dims). */
size_t sg_halo_plan_send_bytes(sg_halo_plan_t plan);
/* The message path the plan chose (the same on every rank): "shm" (on-node
 * shared window), "mpi" (direct for one-run slabs, else packed), "pack" or
 * "direct" (forced by SG_HALO_PATH). Not collective. */
const char *sg_halo_plan_path(sg_halo_plan_t plan);

/* The plan's steps, for a caller that moves the slabs itself (device
 * buffers: models/ag_halo.c packs them with the CUDA kernels of
 * sg_halo_pack.h and sends them through the comm layer, NCCL on a GPU).
 * Forward step k (0 <= k < sg_halo_plan_ndims) fills spatial dim
 * sg_halo_plan_step_dim(plan, k); the adjoint runs the steps in reverse.
 * Per dim and side s (0 lo, 1 hi): `local` (an edge fill or a local wrap:
 * sg_halo_plan_box gives the one-cell boxes of sg_halo_fill_local's rule,
 * sg_halo_edge_source), else the neighbour's rank in the mesh
 * communicator; the owned slab sent to it (sbox, width s) and the halo
 * slab received from it (rbox, width h). A neighbour's side-s message
 * fills this rank's side 1 - s. None of these is collective. */
typedef struct sg_halo_side {
  int local;              /* filled locally (edge or local wrap) */
  int peer;               /* neighbour's mesh rank (when not local) */
  int64_t n;              /* owned cells along the dim */
  int64_t h, s;           /* widths filled / supplied on this side */
  sg_boundary boundary;   /* the dim's boundary kind */
  sg_halo_box sbox, rbox; /* owned slab sent, halo slab received */
} sg_halo_side;
int sg_halo_plan_ndims(sg_halo_plan_t plan);
int sg_halo_plan_step_dim(sg_halo_plan_t plan, int step);
void sg_halo_plan_side(sg_halo_plan_t plan, int d, int s, sg_halo_side *side);
/* The region of the block along dim d from local index a, width w (dims
 * filled before d span their halos, later dims their interior). */
sg_halo_box sg_halo_plan_box(sg_halo_plan_t plan, int d, int64_t a, int64_t w);

/* A block for this plan (sg_halo_plan_block_count elements of the plan's
 * dtype, zeroed), owned by the plan and freed with it; at most
 * SG_HALO_MAX_BLOCKS per plan. On the shm path it lives in a node-shared
 * window, and exchanges on it (forward and adjoint) move each slab with a
 * single copy: the neighbour reads it straight from this block instead of
 * a packed message (the exchange then also waits, per dim, until the
 * neighbours have read it). Elsewhere it is private memory and exchanges
 * work as on any block. Collective over the mesh (no exchange in flight);
 * errors are returned on every rank. */
sg_status sg_halo_plan_alloc_block(sg_halo_plan_t plan, void **block);

/* Forward exchange. Collective with the neighbours along every split dim
 * (all ranks of the mesh call it with their plans). start begins it on
 * block (the whole block, margins included); progress advances it
 * (*done = 1 once every dim has arrived; done may be NULL); finish
 * completes it. */
sg_status sg_halo_start(sg_halo_plan_t plan, void *block);
sg_status sg_halo_progress(sg_halo_plan_t plan, int *done);
sg_status sg_halo_finish(sg_halo_plan_t plan);
/* start + finish. */
sg_status sg_halo_exchange(sg_halo_plan_t plan, void *block);

/* Adjoint exchange (reverse, summing), same calling rules. On return the
 * halo cells (within the widths) are zero and the owners' cells hold the
 * sums. Supports f32, f64, i32, i64 and bf16 (added in f32). */
sg_status sg_halo_adjoint_start(sg_halo_plan_t plan, void *block);
sg_status sg_halo_adjoint_finish(sg_halo_plan_t plan);
sg_status sg_halo_adjoint(sg_halo_plan_t plan, void *block);

#ifdef __cplusplus
}
#endif
#endif /* SG_HALO_H */
