/* A user kernel for shardgrid's autograd tape: the periodic 5-point
 * Laplacian y = x[i-1,j] + x[i+1,j] + x[i,j-1] + x[i,j+1] - 4 x[i,j] on
 * (N, C, H, W) variables, one process or sharded (docs/user-kernels.md).
 * Records on the tape; collective over the mesh when x is sharded. */
#ifndef LAPLACIAN_H
#define LAPLACIAN_H

#include <sg_autograd.h>

sg_status ag_laplacian(sg_tape_t t, sg_var *x, sg_var **y);

#endif
