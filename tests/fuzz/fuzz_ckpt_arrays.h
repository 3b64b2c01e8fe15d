/* The arrays of the checkpoint fuzz target and of its seed (fuzz_ckpt.c,
 * make_ckpt_seed.c): one of each stored kind. */
#ifndef SG_FUZZ_CKPT_ARRAYS_H
#define SG_FUZZ_CKPT_ARRAYS_H

#include <string.h>

#include "sg_ckpt.h"

#define FZ_CKPT_N 3
static float fz_w[12];
static double fz_b[5];
static int64_t fz_n[2];

static inline void fz_ckpt_arrays(sg_ckpt_array *a) {
  memset(a, 0, FZ_CKPT_N * sizeof *a);
  a[0].name = "layer0.w";
  a[0].shard.ndims = 2;
  a[0].shard.global_shape[0] = a[0].shard.count[0] = 3;
  a[0].shard.global_shape[1] = a[0].shard.count[1] = 4;
  a[0].shard.dtype = SG_DTYPE_F32;
  a[0].data = fz_w;
  a[1].name = "layer0.b";
  a[1].shard.ndims = 1;
  a[1].shard.global_shape[0] = a[1].shard.count[0] = 5;
  a[1].shard.dtype = SG_DTYPE_F64;
  a[1].data = fz_b;
  a[2].name = "adam.t";
  a[2].shard.ndims = 1;
  a[2].shard.global_shape[0] = a[2].shard.count[0] = 2;
  a[2].shard.dtype = SG_DTYPE_I64;
  a[2].data = fz_n;
}

#endif
