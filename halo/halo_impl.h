/* shardgrid — internals of the halo exchange plans (not installed).
 * Shared by halo.c (plan creation), halo_shm.c (the on-node path) and
 * halo_exchange.c (the exchange state machine). */
#ifndef SG_HALO_IMPL_H
#define SG_HALO_IMPL_H

#include <mpi.h>
#include <stdint.h>

#include "sg_comm.h"
#include "sg_halo.h"
#include "sg_halo_pack.h"

enum { PHASE_IDLE = 0, PHASE_FWD, PHASE_ADJ };

/* Forward message paths (SG_HALO_PATH=auto|pack|direct; SG_HALO_DTYPES=1 is
 * the older spelling of direct). auto: a slab that is one contiguous run of
 * the block goes direct (no pack, no unpack: MPI reads the block and writes
 * the margin), the rest is packed. direct: every slab goes through an MPI
 * datatype; MPICH 4.0 (built without yaksa) moves a datatype of several
 * runs 10-40x slower than pack + contiguous message + unpack, even when
 * the runs are 16 KiB long (bench/RESULTS.md, halo), so auto does not. */
enum {
  HALO_PATH_AUTO = 0,
  HALO_PATH_PACK,
  HALO_PATH_DIRECT,
  HALO_PATH_MPI, /* auto's MPI choice: direct for one run, else pack */
  HALO_PATH_SHM  /* on-node shared window (falls back to mpi off-node) */
};

/* On-node path (SG_HALO_PATH=auto or shm, when every neighbour of every
 * rank shares the node): each rank owns a segment of an MPI-3 shared
 * window (halo_win, pooled on the halo communicator) laid out as
 *   [SHM_READY]  6 cache lines: ready[d][s], the sequence number of the
 *                last message this rank put on channel (d, s), i.e. to
 *                its neighbour nb[s] along dim d;
 *   [SHM_ACK]    6 cache lines: ack[d][s], the sequence number of the last
 *                message from nb[s] along dim d that this rank consumed;
 *   [SHM_TABLE]  per channel the byte offset and size of its slot;
 *   [SHM_MODE]   per channel and buffer parity, how message k was sent:
 *                0 packed into the slot, j + 1 left in place in the
 *                plan's shared block j (single copy, below);
 *   [SHM_BOX]    per channel the boxes this rank sends forward (its owned
 *                slab) and in the adjoint (its halo slab), in its block;
 *   [SHM_HDR..]  the slots: two buffers per channel (message k uses buffer
 *                k & 1), each large enough for the forward slab and the
 *                adjoint slab of that side.
 * Each flag has one writer (the segment's owner); readers poll it with
 * acquire loads, writers publish with MPI_Win_sync + release stores (the
 * window is in the unified model, locked once with lock_all). A message is
 * one copy into the own segment (pack, or memcpy for one run) and one copy
 * out of the peer's segment (unpack, or unpack-add for the adjoint); the
 * sender waits for ack >= k - 2 before reusing a buffer. Forward and
 * adjoint messages share the channels and their sequence numbers.
 *
 * Single copy: when the block passed to start is one the plan allocated in
 * a shared window (sg_halo_plan_alloc_block; every rank has the same
 * number of them, so block j of a neighbour is mapped here as pblk[j]),
 * the sender publishes no data, only "message k is block j" in its MODE
 * word, and the receiver copies (or, in the adjoint, adds) the slab
 * straight from the neighbour's block, using the neighbour's box from its
 * SHM_BOX table. The sender then must not touch that slab until the
 * receiver acknowledges message k: its step (and so finish) waits for the
 * ack, and in the adjoint it zeroes its halo slab only then. Each side
 * chooses per message, so ranks may mix shared and private blocks. Slabs
 * whose contiguous runs are shorter than SG_HALO_SHM_DIRECT_MIN bytes
 * (default 64, a cache line) are packed all the same: reading short rows
 * across cores moves a whole line per row, and gathering them locally
 * into one contiguous message is cheaper (bench/RESULTS.md, halo). */
#define HALO_SHM_DIRECT_MIN 64
enum {
  SHM_READY = 0,
  SHM_ACK = 384,
  SHM_TABLE = 768,
  SHM_MODE = 896,
  SHM_BOX = 1024,
  SHM_HDR = 2048
};
#define HALO_POOL 64
#define HALO_SHM_CHUNK 262144 /* default bytes per piece of a message */

typedef struct piece_plan {
  int k;                   /* box dim cut into pieces */
  int64_t m, nk, n, inner; /* slices per piece, pieces per row of dim k,
                              pieces, elements per slice */
} piece_plan;

typedef struct hdim {
  int64_t n;           /* owned cells */
  int64_t h[2];        /* halo widths this rank fills (lo, hi) */
  int64_t s[2];        /* widths this rank supplies to its lo/hi neighbour */
  int nb[2];           /* neighbour ranks, MPI_PROC_NULL at an edge */
  int local[2];        /* side filled locally (edge or local wrap) */
  sg_halo_box sbox[2]; /* owned slabs sent to the neighbours */
  sg_halo_box rbox[2]; /* halo slabs received */
  void *sbuf[2], *rbuf[2];
  MPI_Request frecv[2], fsend[2]; /* persistent, forward, packed sides */
  MPI_Request areq[4];            /* persistent, adjoint (always packed) */
  int na;
  /* forward without packing (direct sides): the message goes straight
   * from the block and into the margin, described by stype/rtype (one
   * contiguous run: MPI_BYTE x scount/rcount bytes; several runs: an MPI
   * datatype, count 1) */
  int sdirect[2], rdirect[2];
  MPI_Datatype stype[2], rtype[2];
  int scount[2], rcount[2];
  MPI_Request req[8]; /* the current forward step's requests */
  int unpack[8];      /* side to unpack when req[i] completes, or -1 */
  int nreq, pending;
  /* shared-memory path: my slot towards nb[s] (offset of buffer 0 in my
   * segment, bytes per buffer), nb[s]'s segment and its slot towards me,
   * the sequence numbers sent on / received from side s, and the sides
   * still to receive in the current step */
  size_t soff[2], ssize[2], poff[2], psize[2];
  char *pseg[2];
  uint64_t nsent[2], nrecv[2];      /* messages sent / received per side */
  uint64_t pub[2], got[2];          /* pieces published / consumed per side */
  struct piece_plan spp[2], rpp[2]; /* the current messages' pieces */
  int64_t spos[2], rpos[2];         /* pieces done of them */
  int sending[2], want[2];          /* sides with a message out / in */
  /* single copy: nb[s]'s shared blocks as mapped here, its boxes towards
   * me (forward: its owned slab; adjoint: its halo slab), and the sides
   * whose message left in place waits for its ack */
  char *pblk[SG_HALO_MAX_BLOCKS][2];
  sg_halo_box psbox[2], prbox[2];
  int dsend[2];
  /* whether a slab of side s may be left in place ([0] forward: its rows
   * are long enough; [1] adjoint), and whether the current message is */
  int dok[2][2], sdir[2];
} hdim;

struct sg_halo_plan {
  MPI_Comm comm; /* cached on the mesh communicator; not owned */
  int id;        /* plan number on that communicator (tag range) */
  int ndims;
  sg_dtype dtype;
  size_t esize;
  int64_t lead;
  int64_t strides[1 + SG_HALO_MAX_DIMS];
  int64_t origin, count;
  sg_boundary bnd[SG_HALO_MAX_DIMS];
  hdim dim[SG_HALO_MAX_DIMS];
  size_t send_bytes;
  int path; /* HALO_PATH_*: how forward messages are formed */
  int order[SG_HALO_MAX_DIMS]; /* forward step -> dim: dims filled locally
                                  on both sides first, then the split dims */
  int pos[SG_HALO_MAX_DIMS];   /* dim -> forward step */
  int perm[SG_HALO_BOX_DIMS];  /* box dims outermost first: (lead, d0, d1,
                                  d2) sorted by stride, so that a slab is
                                  enumerated in memory order (one run when
                                  it is contiguous, e.g. channels-last) */
  int phase, step;
  char *block;
  /* shared-memory path (path SHM once agreed; else shm = 0) */
  int shm;
  struct halo_comm_cache *cache;
  int win;      /* pool index */
  char *seg;    /* own segment */
  size_t chunk; /* bytes per piece (SG_HALO_SHM_CHUNK, same on all ranks) */
  /* blocks from sg_halo_plan_alloc_block: in pool windows bwin[] on the
   * shm path (bwin = -1: private memory, freed with the plan); the index
   * of the block of the exchange in flight, or -1 */
  int nblk;
  void *blk[SG_HALO_MAX_BLOCKS];
  int bwin[SG_HALO_MAX_BLOCKS];
  int cur;
  /* private staging for pieces gathered from several runs (one piece) */
  void *stage;
  size_t stage_bytes;
};


/* Halo messages travel on one duplicate of the mesh communicator, cached on
 * it as an attribute (freed with it), so creating a plan needs no
 * MPI_Comm_dup; each plan gets its own tag range. The cache also holds the
 * ranks sharing this rank's node (node, and each comm rank's rank in it or
 * MPI_UNDEFINED) and the pool of shared windows of the on-node path: a
 * window is allocated (collectively) by a plan creation that finds no free
 * one large enough on every rank, lent to one plan at a time, returned by
 * sg_halo_plan_destroy (not collective) and freed with the communicator,
 * in allocation order on every rank. */
typedef struct halo_win {
  MPI_Win win;
  char *seg;
  size_t bytes;
  int in_use;
} halo_win;

typedef struct halo_comm_cache {
  MPI_Comm comm;
  int next_id;
  MPI_Comm node;
  int *node_rank; /* comm rank -> node rank, or MPI_UNDEFINED */
  int nwin;
  int early_yield; /* more ranks on the node than cores (SG_HALO_YIELD) */
  halo_win pool[HALO_POOL];
} halo_comm_cache;

/* ---- halo.c -------------------------------------------------------------- */

/* The region of the block along dim d from local index a, width w; dims
 * exchanged before d span their halos, dims after d their interior. */
sg_halo_box sg_halo_make_box(const struct sg_halo_plan *p, int d, int64_t a,
                             int64_t w);
/* The MPI tag of a message along dim d (up: towards the higher neighbour). */
int sg_halo_tag(const struct sg_halo_plan *p, int d, int up, int adjoint);

/* ---- halo_shm.c: the on-node path ---------------------------------------- */

/* Decide the on-node path and lay out this rank's slots. Collective over
 * the mesh. */
sg_status sg_halo_setup_shm(struct sg_halo_plan *p);
/* Start a step on the shm path, and move it along (see halo_shm.c). */
sg_status sg_halo_shm_begin(struct sg_halo_plan *p, int d);
sg_status sg_halo_shm_pump(struct sg_halo_plan *p, int d, int wait, int lazy,
                           int *done);

/* ---- halo_exchange.c ----------------------------------------------------- */

/* Fill side s of dim d locally (physical edge or local wrap); the adjoint
 * adds the halo back into the cells it came from. */
sg_status sg_halo_fill_local(struct sg_halo_plan *p, int d, int s, int adjoint);
/* The error of a halo wait past the timeout on dim d (side -1: either
 * neighbour). */
sg_status sg_halo_timeout(const struct sg_halo_plan *p, const sg_deadline *dl,
                          int d, int side, const char *how);

#endif /* SG_HALO_IMPL_H */
