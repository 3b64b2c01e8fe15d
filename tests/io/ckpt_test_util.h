/* The arrays of the checkpoint tests: values are functions of the global
 * index, so any decomposition knows what it must read. */
#ifndef SG_CKPT_TEST_UTIL_H
#define SG_CKPT_TEST_UTIL_H

#include "io_test_util.h"
#include "sg_ckpt.h"
#include "sg_rng.h"

#define CKT_N 4

typedef struct ckt_def {
  const char *name;
  int nd;
  int64_t shape[3];
  sg_dtype dt;
} ckt_def;

static const ckt_def ckt_defs[CKT_N] = {
    {"enc.conv1.weight", 3, {7, 5, 3}, SG_DTYPE_F32},
    {"enc.conv1.bias", 1, {11, 0, 0}, SG_DTYPE_F64},
    {"adam.m.enc_conv1", 2, {6, 9, 0}, SG_DTYPE_BF16},
    {"sample_count", 2, {4, 3, 0}, SG_DTYPE_I64},
};

/* Expected values of array k over shard s into buf. */
static inline void ckt_fill(int k, const sg_nc_shard *s, void *buf) {
  int64_t n = sg_nc_shard_numel(s);
  if (n == 0) return;
  const ckt_def *d = &ckt_defs[k];
  if (d->dt == SG_DTYPE_F32 || d->dt == SG_DTYPE_F64) {
    sg_rng_fill_box(SG_RNG_NORMAL, 0.0, 1.0, 99, (uint64_t)k, s->ndims,
                    s->global_shape, s->start, s->count, d->dt, buf);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      int64_t g = iot_global_index(s->ndims, s->global_shape, s->start,
                                   s->count, i);
      if (d->dt == SG_DTYPE_BF16)
        ((sg_bf16 *)buf)[i] = sg_bf16_from_f32((float)g * 0.37f - 5.0f);
      else
        ((int64_t *)buf)[i] = g * 7 - 3 + ((int64_t)1 << 40);
    }
  }
}

/* Arrays for process grid dc (array dims split as far as dc has dims). */
static inline void ckt_arrays(int rank, int size, int grid2d, int whole,
                              sg_ckpt_array *a, void **bufs) {
  for (int k = 0; k < CKT_N; ++k) {
    const ckt_def *d = &ckt_defs[k];
    iot_decomp dc;
    memset(&dc, 0, sizeof dc);
    dc.nd = d->nd;
    for (int q = 0; q < d->nd; ++q) dc.p[q] = 1;
    if (!whole) {
      if (d->nd >= 2 && grid2d > 0 && size % grid2d == 0) {
        dc.p[0] = grid2d;
        dc.p[1] = size / grid2d;
      } else {
        dc.p[0] = size;
      }
    }
    a[k].name = d->name;
    iot_shard(&dc, whole ? 0 : rank, d->shape, d->dt, &a[k].shard);
    int64_t n = sg_nc_shard_numel(&a[k].shard);
    bufs[k] = calloc((size_t)(n ? n : 1), sg_dtype_size(d->dt));
    a[k].data = bufs[k];
  }
}

static inline void ckt_meta(sg_ckpt_meta *m, int64_t step, const char *mesh) {
  memset(m, 0, sizeof *m);
  m->step = step;
  m->rng_seed = 0xfeedfacecafebeefull;
  m->n_rng_state = 3;
  m->rng_state[0] = 1;
  m->rng_state[1] = (uint64_t)step * 1000003u;
  m->rng_state[2] = ~0ull;
  m->data_position = step * 32;
  snprintf(m->mesh, sizeof m->mesh, "%s", mesh);
  m->config = (char *)"model=unet\nlr=3e-4\nbatch=32\n";
}

#endif
