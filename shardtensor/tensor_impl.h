/* shardgrid — internal: merged strided layouts for copy, fill and packing.
 *
 * A layout describes nop operands of one shape after merging: size-1 dims
 * dropped, adjacent dims merged where every operand is contiguous across
 * them. Its innermost dim is a run; the outer dims enumerate rows. The index
 * arithmetic is SG_HD so a CUDA pack kernel computes the same offsets.
 */
#ifndef SG_TENSOR_IMPL_H
#define SG_TENSOR_IMPL_H

#include <stdint.h>

#include "sg_dtype.h"
#include "sg_tensor.h"

#define SG_LAYOUT_MAX_OPS 2

typedef struct sg_layout {
  int nd;                                                /* >= 1 */
  int64_t shape[SG_TENSOR_MAX_DIMS];                     /* merged shape */
  int64_t stride[SG_LAYOUT_MAX_OPS][SG_TENSOR_MAX_DIMS]; /* per operand */
} sg_layout;

/* Merge the dims of a shape seen through nop stride vectors. */
void sg_layout_merge(int ndim, const int64_t *shape, int nop,
                     const int64_t *const *strides, sg_layout *out);

/* Element offset of row r (outer dims, row-major) for operand op. */
static inline SG_HD int64_t sg_layout_row_offset(const sg_layout *L, int op,
                                                 int64_t r) {
  int64_t o = 0;
  for (int k = L->nd - 2; k >= 0; --k) {
    o += (r % L->shape[k]) * L->stride[op][k];
    r /= L->shape[k];
  }
  return o;
}

/* Walking rows in order without a division per row: an odometer over the
 * outer dims and the running offset of each operand. */
typedef struct sg_rows_iter {
  int64_t idx[SG_TENSOR_MAX_DIMS];
  int64_t off[SG_LAYOUT_MAX_OPS];
} sg_rows_iter;

static inline SG_HD void sg_rows_iter_init(sg_rows_iter *it, const sg_layout *L,
                                           int nop, int64_t r) {
  for (int o = 0; o < nop; ++o) it->off[o] = 0;
  for (int k = L->nd - 2; k >= 0; --k) {
    it->idx[k] = r % L->shape[k];
    r /= L->shape[k];
    for (int o = 0; o < nop; ++o) it->off[o] += it->idx[k] * L->stride[o][k];
  }
}

static inline SG_HD void sg_rows_iter_next(sg_rows_iter *it, const sg_layout *L,
                                           int nop) {
  for (int k = L->nd - 2; k >= 0; --k) {
    ++it->idx[k];
    for (int o = 0; o < nop; ++o) it->off[o] += L->stride[o][k];
    if (it->idx[k] < L->shape[k]) return;
    for (int o = 0; o < nop; ++o) it->off[o] -= L->shape[k] * L->stride[o][k];
    it->idx[k] = 0;
  }
}

#endif /* SG_TENSOR_IMPL_H */
