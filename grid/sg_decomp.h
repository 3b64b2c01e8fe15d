/* shardgrid — domain decomposition of a global grid.
 *
 * A global grid of up to SG_DECOMP_MAX_DIMS spatial dims (batch and channel
 * dims are not split here) is split along each spatial dim over the ranks of
 * one mesh dim (or not split). The split is balanced: n cells over p ranks,
 * the first n % p ranks get one more (721 over 4 -> 181,180,180,180). Every
 * rank can compute the full table of shard shapes and offsets, so nothing
 * here communicates and no code needs to assume even splits.
 *
 * Halos come from the output partition of a window op (kernel k, stride s,
 * padding (lo, hi), dilation d, up-sampling u; sg_window): the op's n_out
 * outputs are split with the same balanced rule; a rank owning outputs
 * [y0, y1] computes the coarse outputs [z0, z1] = [y0/u, y1/u] and needs
 * inputs [s*z0 - lo, s*z1 - lo + d*(k-1)]; its halo on each side is what
 * lies outside its own inputs [x0, x1]:
 *     halo_lo = x0 - (s*z0 - lo),   halo_hi = (s*z1 - lo + d*(k-1)) - x1.
 * A halo may be negative (the rank holds inputs it does not need) and may
 * differ per side and per rank. The exchanged width is max(0, halo). Cells
 * outside [0, n) (the op's padding) are filled by the dim's boundary kind.
 *
 * A shard thinner than the halo it must supply (a neighbour would need data
 * from two ranks away) is an SG_ERR_HALO naming the dim, the shard size and
 * the halo width. Since the check is a pure function of the tables, every
 * rank finds the same error without sending a message.
 *
 * Nothing in this header is collective.
 */
#ifndef SG_DECOMP_H
#define SG_DECOMP_H

#include <stdint.h>

#include "sg_mesh.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_DECOMP_MAX_DIMS 3

/* What lies beyond a physical edge of the global grid. */
typedef enum sg_boundary {
  SG_BOUNDARY_ZERO = 0,  /* zeros (conv zero padding) */
  SG_BOUNDARY_PERIODIC,  /* wrap around: cell -i is cell n-i (longitude) */
  SG_BOUNDARY_REFLECT,   /* mirror without the edge: cell -i is cell i */
  SG_BOUNDARY_REPLICATE, /* repeat the edge: cell -i is cell 0 */
  SG_BOUNDARY_COUNT
} sg_boundary;

/* "zero", "periodic", "reflect", "replicate"; "invalid" otherwise. */
const char *sg_boundary_name(sg_boundary b);
/* Parse a name as above; SG_ERR_INVALID_ARG if unknown. */
sg_status sg_boundary_parse(const char *name, sg_boundary *b);

/* ---- balanced 1-D split ------------------------------------------------- */

/* Cells of part r when n cells are split over p parts (p >= 1, n >= 0). */
static inline int64_t sg_split_size(int64_t n, int p, int r) {
  return n / p + (r < n % p ? 1 : 0);
}
/* First global cell of part r. */
static inline int64_t sg_split_offset(int64_t n, int p, int r) {
  int64_t q = n / p, m = n % p;
  return (int64_t)r * q + (r < m ? r : m);
}
/* Both at once: the one balanced split of the library (ShardTensor boxes,
 * the FFT's slabs and the halos all use it). */
static inline void sg_split_part(int64_t n, int p, int r, int64_t *offset,
                                 int64_t *size) {
  *offset = sg_split_offset(n, p, r);
  *size = sg_split_size(n, p, r);
}
/* The part owning global cell i (0 <= i < n). */
static inline int sg_split_owner(int64_t n, int p, int64_t i) {
  int64_t q = n / p, m = n % p;
  if (i < m * (q + 1)) return (int)(i / (q + 1));
  return (int)(m + (i - m * (q + 1)) / q);
}

/* The full table of sizes and offsets (p entries each; either may be NULL).
 * SG_ERR_SHAPE if p > n and allow_empty is 0 (some part would be empty). */
sg_status sg_split_table(int64_t n, int p, int allow_empty, int64_t *sizes,
                         int64_t *offsets);

/* ---- halos of a window op ----------------------------------------------- */

/* A window op along one spatial dim: the one window struct of the library
 * (the halos here, the halo exchange of the sharded ops, the tape's window
 * ops and their arguments; arrays of it, one per spatial dim, describe an
 * N-D window). Kernel k, stride s, dilation d, padding (lo, hi) and an
 * up-sampling factor u: the op has nc = (n + lo + hi - d(k-1) - 1) / s + 1
 * "coarse" outputs, coarse output z reads inputs s*z - lo + d*j (j < k) and
 * gives the u outputs u*z .. u*z+u-1 (u = 1: a plain window; nearest
 * up-sampling and the transposed convolution k = s are {k 1, up s}).
 * `boundary` says how the padding is filled at the global edges. Zero
 * means 1 for kernel, stride, dilation and up, so a zeroed struct is the
 * identity window (nothing read beyond the cell itself). */
typedef struct sg_window {
  int64_t kernel;       /* >= 1 (0: 1) */
  int64_t stride;       /* >= 1 (0: 1) */
  int64_t dilation;     /* >= 1 (0: 1) */
  int64_t pad[2];       /* padding (lo, hi) >= 0 */
  int64_t up;           /* up-sampling factor >= 1 (0: 1) */
  sg_boundary boundary; /* fill beyond the global edges */
} sg_window;

/* An initializer of the common symmetric window (kernel, stride, padding
 * on both sides, dilation; zero boundary, no up-sampling). */
#define SG_WINDOW_SYM(k, s, p, d)                                     \
  {                                                                   \
    .kernel = (k), .stride = (s), .dilation = (d), .pad = {(p), (p) } \
  }

/* w with the zeros that mean 1 replaced by 1. */
static inline sg_window sg_window_normal(sg_window w) {
  if (w.kernel == 0) w.kernel = 1;
  if (w.stride == 0) w.stride = 1;
  if (w.dilation == 0) w.dilation = 1;
  if (w.up == 0) w.up = 1;
  return w;
}

/* Number of outputs: u * (floor((n + lo + hi - d(k-1) - 1) / s) + 1).
 * SG_ERR_INVALID_ARG for a bad window, SG_ERR_SHAPE when it does not fit
 * (no output). */
sg_status sg_window_output_size(sg_window w, int64_t n, int64_t *n_out);

/* Halos of every part for a window op on n cells split over p parts:
 * halo[2*r] (lo) and halo[2*r+1] (hi), signed. out_sizes/out_offsets
 * (p entries, may be NULL) receive the op's output shard table. SG_ERR_SHAPE
 * if an input or output part would be empty. */
sg_status sg_window_halos(int64_t n, int p, sg_window w, int64_t *halo,
                          int64_t *out_sizes, int64_t *out_offsets);

/* Exchanged widths: width[i] = max(0, halo[i]) for 2*p entries. */
void sg_halo_widths(int p, const int64_t *halo, int64_t *width);

/* Thin-shard check along one dim: parts of sizes[] (p entries) with signed
 * halos halo[2*r], halo[2*r+1] and the dim's boundary kind. Fails with
 * SG_ERR_HALO naming the dim, the part, its shard size and the halo width
 * when a part must supply more cells than it has (a neighbour would need
 * data from two ranks away), when a reflect/replicate/periodic fill at an
 * edge needs more cells than the edge part owns, or when a part's needed
 * range does not touch its own cells. `dim` is only used in the message. */
sg_status sg_halo_check(int dim, int p, const int64_t *sizes, sg_boundary b,
                        const int64_t *halo);

/* ---- N-D decomposition -------------------------------------------------- */

typedef struct sg_decomp_desc {
  int ndims;                          /* spatial dims, 1..3 */
  int64_t global[SG_DECOMP_MAX_DIMS]; /* global extent per dim */
  int mesh_dim[SG_DECOMP_MAX_DIMS];   /* mesh dim splitting it, or -1 */
  sg_boundary boundary[SG_DECOMP_MAX_DIMS];
  int allow_empty; /* accept empty shards (p > n) */
} sg_decomp_desc;

typedef struct sg_decomp *sg_decomp_t;

/* A decomposition over a mesh: parts and this rank's coordinates come from
 * the mesh. SG_ERR_INVALID_ARG for a bad desc (two spatial dims on the same
 * mesh dim, a mesh dim out of range), SG_ERR_SHAPE for empty shards that
 * are not allowed. Not collective (every rank computes the same tables). */
sg_status sg_decomp_create(sg_mesh_t mesh, const sg_decomp_desc *desc,
                           sg_decomp_t *dec);
/* The same without a mesh: parts[d] ranks along spatial dim d (1: not
 * split) and this rank's coords[d] (NULL: all 0). desc->mesh_dim is only
 * recorded. Not collective. */
sg_status sg_decomp_create_parts(const sg_decomp_desc *desc, const int *parts,
                                 const int *coords, sg_decomp_t *dec);
/* NULL and *dec == NULL are fine (SG_OK); sets *dec to NULL. */
sg_status sg_decomp_destroy(sg_decomp_t *dec);

int sg_decomp_ndims(sg_decomp_t dec);
int64_t sg_decomp_global(sg_decomp_t dec, int d);
int sg_decomp_parts(sg_decomp_t dec, int d);
int sg_decomp_mesh_dim(sg_decomp_t dec, int d);
sg_boundary sg_decomp_boundary(sg_decomp_t dec, int d);
/* This rank's coordinate along spatial dim d (0 if not split). */
int sg_decomp_coord(sg_decomp_t dec, int d);
/* Shard size / first global cell of part `part` along spatial dim d. */
int64_t sg_decomp_shard_size(sg_decomp_t dec, int d, int part);
int64_t sg_decomp_shard_offset(sg_decomp_t dec, int d, int part);
/* Shape and offset of the shard at coords (NULL: this rank's), ndims
 * entries each. */
void sg_decomp_shard(sg_decomp_t dec, const int *coords, int64_t *shape,
                     int64_t *offset);
/* Cells of this rank's shard (product of its shape). */
int64_t sg_decomp_local_count(sg_decomp_t dec);

/* Halos of a window op along spatial dim d for every part (2*parts entries,
 * signed), plus the op's output shard table (parts entries each; may be
 * NULL), then the thin-shard check (sg_halo_check). SG_ERR_HALO, identical
 * on every rank, if a shard is too thin. */
sg_status sg_decomp_window_halos(sg_decomp_t dec, int d, sg_window w,
                                 int64_t *halo, int64_t *out_sizes,
                                 int64_t *out_offsets);

/* This rank's exchanged widths width[d][0..1] (= max(0, halo)) for a
 * window op per dim (w[d]), after the thin-shard check on every dim. */
sg_status sg_decomp_local_halo(sg_decomp_t dec, const sg_window *w,
                               int64_t (*width)[2]);

#ifdef __cplusplus
}
#endif
#endif /* SG_DECOMP_H */
