/* shardgrid — checkpoints that load on any decomposition.
 *
 * A checkpoint is one NetCDF file (PnetCDF CDF-5 when built, else
 * netCDF-4): every named array is a global variable written collectively by
 * its shards, with its checksum as an attribute; step, RNG seed and state,
 * data position, the config text and the mesh spec are global attributes
 * (with their own checksum). Loading onto any other decomposition reads
 * the matching hyperslabs.
 *
 * Writing is crash-safe: the file is written as "<path>.tmp", synced
 * (sg_nc_sync, then fsync of the file by rank 0), and renamed to
 * path only when complete (then the directory is fsync'd). A run killed
 * before the rename leaves the previous checkpoint at path untouched; a
 * stale "<path>.tmp" is simply overwritten by the next write. A write that
 * fails (a full disk, a read-only file system) removes its "<path>.tmp"
 * and leaves path untouched too.
 *
 * Checksums are decomposition-independent: the 64-bit sum (mod 2^64) over
 * all elements of a per-element hash of (global linear index, element
 * bytes). Any decomposition computes the same value, so a checkpoint read
 * on any mesh is verified; a truncated or corrupted file is SG_ERR_CORRUPT
 * on every rank.
 */
#ifndef SG_CKPT_H
#define SG_CKPT_H

#include <mpi.h>
#include <stdint.h>

#include "sg_nc.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_CKPT_RNG_MAX 16
#define SG_CKPT_MESH_MAX 256

/* One named global array and this rank's part of it. Names must be valid
 * NetCDF names ([A-Za-z_][A-Za-z0-9_.@+-]*) and unique. For writing, the
 * shards of the ranks must partition the array (a rank holding a replica
 * passes count 0); for reading, any slabs (replicas allowed). */
typedef struct sg_ckpt_array {
  const char *name;
  sg_nc_shard shard; /* ndims >= 1, global shape, start, count, dtype */
  void *data;        /* count elements, row-major */
} sg_ckpt_array;

typedef struct sg_ckpt_meta {
  int64_t step;
  uint64_t rng_seed;
  int n_rng_state; /* <= SG_CKPT_RNG_MAX */
  uint64_t rng_state[SG_CKPT_RNG_MAX];
  int64_t data_position;       /* e.g. samples consumed in the epoch */
  char mesh[SG_CKPT_MESH_MAX]; /* mesh spec, e.g. "dp=2,h=2,w=1" */
  /* write: the config text (NULL: none); read: allocated with malloc by
   * sg_ckpt_read (free it) */
  char *config;
} sg_ckpt_meta;

typedef struct sg_ckpt_opts {
  sg_nc_backend backend; /* AUTO: PnetCDF (CDF-5) when built */
} sg_ckpt_opts;

/* Write n arrays and meta to path as described above. Collective over
 * comm; on any failure every rank returns the same error and path is
 * unchanged. opts may be NULL. */
sg_status sg_ckpt_write(MPI_Comm comm, const char *path, int n,
                        const sg_ckpt_array *arrays, const sg_ckpt_meta *meta,
                        const sg_ckpt_opts *opts);

/* Read n arrays (each rank its slab, by name; global shape and dtype must
 * match the file: SG_ERR_SHAPE otherwise) and meta (may be NULL), verifying
 * every checksum. A missing file is SG_ERR_IO, a missing array
 * SG_ERR_INVALID_ARG, a truncated or corrupted file SG_ERR_CORRUPT: on
 * every rank. Collective over comm. */
sg_status sg_ckpt_read(MPI_Comm comm, const char *path, int n,
                       sg_ckpt_array *arrays, sg_ckpt_meta *meta);

/* The checksum contribution of one shard (sum over its elements of the
 * element hashes, mod 2^64); the global checksum is the sum over a set of
 * shards that partitions the array. Not collective. */
uint64_t sg_ckpt_shard_hash(const sg_nc_shard *shard, const void *data);

#ifdef __cplusplus
}
#endif
#endif /* SG_CKPT_H */
