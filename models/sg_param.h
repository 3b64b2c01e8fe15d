/* shardgrid — where a model parameter lives.
 *
 * A model keeps its parameters in one flat f32 buffer (gradients and
 * optimizer state alike). Each parameter is a global array; a rank holds
 * either all of it (Replicate on every mesh dim) or a box of it (Shard over
 * the mesh dims in shard_dims, e.g. the FNO's spectral weights split by
 * the modes each domain rank owns). From this description a driver derives
 * everything that depends on the layout:
 *   - the gradient reduction group: the mesh dims where the data is split
 *     (data-parallel, domain, sequence; not tp, whose ranks see the same
 *     data) minus shard_dims;
 *   - the replica group (ranks that must hold identical values): every mesh
 *     dim not in shard_dims;
 *   - the global gradient norm: Replicate parameters counted once, sharded
 *     ones summed over shard_dims;
 *   - checkpoints: one global variable per parameter, this rank's box being
 *     (start, count), readable on any other mesh.
 */
#ifndef SG_PARAM_H
#define SG_PARAM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SG_PARAM_MAX_DIMS 8

typedef struct sg_param_info {
  const char *name; /* unique within the model, a valid NetCDF name */
  int ndim;         /* 1..SG_PARAM_MAX_DIMS */
  int64_t global_shape[SG_PARAM_MAX_DIMS];
  int64_t start[SG_PARAM_MAX_DIMS]; /* this rank's box of the global array */
  int64_t count[SG_PARAM_MAX_DIMS]; /* (may be empty: a count of 0) */
  int64_t offset;                   /* first element in the flat buffer */
  int64_t numel;                    /* local elements: the product of count */
  unsigned shard_dims; /* mesh dims the parameter is Shard over (mask) */
} sg_param_info;

#ifdef __cplusplus
}
#endif
#endif /* SG_PARAM_H */
