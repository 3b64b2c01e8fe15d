/* shardgrid — halo pack/unpack: shared index arithmetic and host kernels.
 *
 * A box is a rectangular region of a local block: up to SG_HALO_BOX_DIMS
 * dims (the carried-along leading dim, then up to 3 spatial dims), each with
 * a count and an element stride, from an element offset `base`. Element e
 * of a box (row-major over the counts, last dim fastest) lives at
 * sg_halo_box_offset(box, e). Host loops and CUDA kernels both use these
 * inline functions, so the host tests check the arithmetic the GPU runs.
 *
 * None of these functions is collective.
 */
#ifndef SG_HALO_PACK_H
#define SG_HALO_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "sg_config.h"
#include "sg_decomp.h"
#include "sg_dtype.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_HALO_BOX_DIMS 4

typedef struct sg_halo_box {
  int64_t count[SG_HALO_BOX_DIMS];  /* extents; unused dims have count 1 */
  int64_t stride[SG_HALO_BOX_DIMS]; /* element strides in the block */
  int64_t base;                     /* element offset of element 0 */
} sg_halo_box;

/* Number of elements of a box. */
static inline SG_HD int64_t sg_halo_box_size(const sg_halo_box *b) {
  return b->count[0] * b->count[1] * b->count[2] * b->count[3];
}

/* Block offset (in elements) of element e of the box. */
static inline SG_HD int64_t sg_halo_box_offset(const sg_halo_box *b,
                                               int64_t e) {
  int64_t off = b->base;
  for (int k = SG_HALO_BOX_DIMS - 1; k >= 0; --k) {
    int64_t c = b->count[k];
    off += (e % c) * b->stride[k];
    e /= c;
  }
  return off;
}

/* Block offset of the first element of row r (a row runs along the last
 * box dim). */
static inline SG_HD int64_t sg_halo_box_row(const sg_halo_box *b, int64_t r) {
  int64_t off = b->base;
  for (int k = SG_HALO_BOX_DIMS - 2; k >= 0; --k) {
    int64_t c = b->count[k];
    off += (r % c) * b->stride[k];
    r /= c;
  }
  return off;
}

/* The same box with count-1 dims dropped (moved to the front) and, when
 * merge is set, adjacent dims that are contiguous in memory merged, so the
 * last dim (a row) is as long as possible. Element order is unchanged, so
 * a packed buffer does not depend on it. */
static inline SG_HD sg_halo_box sg_halo_box_simplify(sg_halo_box b, int merge) {
  if (sg_halo_box_size(&b) == 0) return b;
  sg_halo_box o;
  int j = SG_HALO_BOX_DIMS - 1;
  o.base = b.base;
  for (int i = SG_HALO_BOX_DIMS - 1; i >= 0; --i) {
    if (b.count[i] == 1) continue;
    if (merge && j < SG_HALO_BOX_DIMS - 1 &&
        o.stride[j + 1] * o.count[j + 1] == b.stride[i]) {
      o.count[j + 1] *= b.count[i];
      continue;
    }
    o.count[j] = b.count[i];
    o.stride[j] = b.stride[i];
    --j;
  }
  for (; j >= 0; --j) {
    o.count[j] = 1;
    o.stride[j] = 0;
  }
  return o;
}

/* Boundary fill at a physical edge along one dim with n owned cells:
 * the owned cell whose value halo cell i (i < 0 or i >= n) takes, or -1
 * for a zero fill. Periodic here is the local wrap of a dim that is not
 * split. */
static inline SG_HD int64_t sg_halo_edge_source(sg_boundary b, int64_t n,
                                                int64_t i) {
  switch (b) {
  case SG_BOUNDARY_PERIODIC: return i < 0 ? i + n : i - n;
  case SG_BOUNDARY_REFLECT: return i < 0 ? -i : 2 * (n - 1) - i;
  case SG_BOUNDARY_REPLICATE: return i < 0 ? 0 : n - 1;
  default: return -1;
  }
}

/* Host kernels (OpenMP over rows when large; contiguous rows are copied
 * with memcpy). esize is the element size in bytes. */

/* buf[e] = block[box(e)] */
void sg_halo_pack_host(const void *block, const sg_halo_box *box, size_t esize,
                       void *buf);
/* block[box(e)] = buf[e] */
void sg_halo_unpack_host(void *block, const sg_halo_box *box, size_t esize,
                         const void *buf);
/* block[box(e)] += buf[e] (f32, f64, i32, i64, bf16 via f32). */
sg_status sg_halo_unpack_add_host(void *block, const sg_halo_box *box,
                                  sg_dtype dt, const void *buf);
/* block[box(e)] = 0 */
void sg_halo_zero_host(void *block, const sg_halo_box *box, size_t esize);
/* block[dst(e)] = block[src(e)] (same counts; regions must not overlap). */
void sg_halo_copy_host(void *block, const sg_halo_box *dst,
                       const sg_halo_box *src, size_t esize);
/* dblock[dst(e)] = sblock[src(e)]: two blocks (e.g. a neighbour's in a
 * shared window), same counts, any strides. */
void sg_halo_copy2_host(void *dblock, const sg_halo_box *dst,
                        const void *sblock, const sg_halo_box *src,
                        size_t esize);
/* dblock[dst(e)] += sblock[src(e)] (dtypes as sg_halo_unpack_add_host). */
sg_status sg_halo_add2_host(void *dblock, const sg_halo_box *dst, sg_dtype dt,
                            const void *sblock, const sg_halo_box *src);
/* block[dst(e)] += block[src(e)]; then block[src(e)] = 0. */
sg_status sg_halo_move_add_host(void *block, const sg_halo_box *dst,
                                const sg_halo_box *src, sg_dtype dt);

#if SG_HAVE_CUDA
/* CUDA versions of pack / unpack / unpack-add / zero on a cudaStream_t
 * (passed as void *); the block and buf are device pointers. Asynchronous
 * on the stream. */
sg_status sg_halo_pack_cuda(const void *block, const sg_halo_box *box,
                            size_t esize, void *buf, void *stream);
sg_status sg_halo_unpack_cuda(void *block, const sg_halo_box *box, size_t esize,
                              const void *buf, void *stream);
sg_status sg_halo_unpack_add_cuda(void *block, const sg_halo_box *box,
                                  sg_dtype dt, const void *buf, void *stream);
sg_status sg_halo_zero_cuda(void *block, const sg_halo_box *box, size_t esize,
                            void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif /* SG_HALO_PACK_H */
