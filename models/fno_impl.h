/* shardgrid — internal: the reshaping ops of FNO-3D (fno3d_ops.c), on the
 * model's plain local blocks. Not installed. */
#ifndef SG_FNO_IMPL_H
#define SG_FNO_IMPL_H

#include "sg_autograd.h"

/* x (N, C, ny, nx) -> y (N, C, nt, ny, nx), the same field at every time
 * step; backward sums over the steps. */
sg_status sg_fno3d_broadcast_t(sg_tape_t t, sg_var *x, int64_t nt, sg_var **y);
/* x (N, C, T, ny, nx) -> y (N, C, nt, ny, nx): the first min(T, nt) steps,
 * zeros after them (nt > T pads, nt < T crops); squeeze (C = 1): y is
 * (N, nt, ny, nx). Backward is the adjoint (crop / zero-pad). */
sg_status sg_fno3d_time_window(sg_tape_t t, sg_var *x, int64_t nt, int squeeze,
                               sg_var **y);

#endif /* SG_FNO_IMPL_H */
