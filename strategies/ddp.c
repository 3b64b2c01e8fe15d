/* shardgrid — data-parallel gradient reduction (DDP). */
#include "sg_ddp.h"

#include "autograd_impl.h" /* ag_sum_det, ag_dev_scale: device buffers */
#include "sg_comm.h"
#include "sg_device.h"

#include <stdlib.h>

struct sg_ddp {
  sg_group_t group;
  float *grad;
  int64_t n, bucket;
  int64_t nbuckets;
  int64_t *ready;         /* elements marked ready, per bucket */
  sg_request_t *reqs;     /* in flight, per bucket */
  unsigned char *started; /* reduction started, per bucket */
  int deterministic;
  sg_device dev; /* where grad lives (sg_ddp_set_buffer) */
};

unsigned sg_ddp_reduce_dims(sg_mesh_t mesh, const sg_placement *act) {
  unsigned mask = 0;
  for (int d = 0; d < sg_mesh_ndims(mesh); ++d)
    if (act[d].kind == SG_PLACEMENT_SHARD ||
        act[d].kind == SG_PLACEMENT_PARTIAL)
      mask |= 1u << d;
  return mask;
}

sg_status sg_ddp_create(sg_mesh_t mesh, unsigned dim_mask, float *grad,
                        int64_t n, int64_t bucket_elems, int deterministic,
                        sg_ddp_t *out) {
  sg_status st = SG_OK;
  struct sg_ddp *d = NULL;
  if (!mesh || !out || n < 0 || (n > 0 && !grad))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_ddp_create: bad arguments (n = %lld)",
             (long long)n);
  *out = NULL;
  d = calloc(1, sizeof *d);
  if (!d) SG_RAISE(SG_ERR_ALLOC, "sg_ddp_create: out of memory");
  SG_TRY(sg_mesh_group(mesh, dim_mask, &d->group));
  d->grad = grad;
  d->n = n;
  d->bucket = bucket_elems > 0 ? bucket_elems : (int64_t)1 << 20;
  d->nbuckets = (n + d->bucket - 1) / d->bucket;
  d->deterministic = deterministic;
  d->dev = sg_device_host();
  size_t nb = (size_t)(d->nbuckets ? d->nbuckets : 1);
  d->ready = calloc(nb, sizeof *d->ready);
  d->reqs = calloc(nb, sizeof *d->reqs);
  d->started = calloc(nb, 1);
  if (!d->ready || !d->reqs || !d->started)
    SG_RAISE(SG_ERR_ALLOC, "sg_ddp_create: out of memory");
  *out = d;
  return SG_OK;
fail:
  sg_ddp_destroy(&d);
  return st;
}

sg_status sg_ddp_destroy(sg_ddp_t *ddp) {
  if (!ddp || !*ddp) return SG_OK;
  struct sg_ddp *d = *ddp;
  sg_status st = SG_OK;
  if (d->reqs) st = sg_waitall((int)d->nbuckets, d->reqs);
  free(d->ready);
  free(d->reqs);
  free(d->started);
  free(d);
  *ddp = NULL;
  return st;
}

sg_status sg_ddp_set_buffer(sg_ddp_t d, float *grad, sg_device dev) {
  sg_status st = SG_OK;
  if (!d || (d->n > 0 && !grad))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_ddp_set_buffer: NULL reducer or buffer");
  for (int64_t b = 0; b < d->nbuckets; ++b)
    if (d->reqs[b])
      SG_RAISE(SG_ERR_INVALID_ARG,
               "sg_ddp_set_buffer: a reduction is in flight");
  if (dev.kind != SG_DEVICE_HOST)
    SG_TRY(ag_dev_comm_ok(d->group, dev, "the DDP gradient reduction"));
  d->grad = grad;
  d->dev = dev;
fail:
  return st;
}

int sg_ddp_group_size(sg_ddp_t ddp) {
  return ddp ? sg_group_size(ddp->group) : 0;
}

sg_status sg_ddp_begin(sg_ddp_t d) {
  sg_status st = SG_OK;
  if (!d) SG_RAISE(SG_ERR_INVALID_ARG, "sg_ddp_begin: NULL reducer");
  for (int64_t b = 0; b < d->nbuckets; ++b) {
    if (d->reqs[b])
      SG_RAISE(SG_ERR_INVALID_ARG,
               "sg_ddp_begin: previous backward not finished");
    d->ready[b] = 0;
    d->started[b] = 0;
  }
fail:
  return st;
}

static int64_t bucket_len(const struct sg_ddp *d, int64_t b) {
  int64_t e = (b + 1) * d->bucket < d->n ? (b + 1) * d->bucket : d->n;
  return e - b * d->bucket;
}

static sg_status start_bucket(struct sg_ddp *d, int64_t b) {
  sg_status st = SG_OK;
  d->started[b] = 1;
  if (sg_group_size(d->group) == 1 || d->deterministic)
    return SG_OK; /* at finish */
  float *p = d->grad + b * d->bucket;
  SG_TRY(sg_iallreduce(d->group, p, p, bucket_len(d, b), SG_DTYPE_F32,
                       SG_REDUCE_SUM, &d->reqs[b]));
fail:
  return st;
}

sg_status sg_ddp_mark_ready(sg_ddp_t d, int64_t offset, int64_t count) {
  sg_status st = SG_OK;
  if (!d || offset < 0 || count < 0 || offset + count > d->n)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_ddp_mark_ready: range [%lld, %lld) outside [0, %lld)",
             (long long)offset, (long long)(offset + count),
             (long long)(d ? d->n : 0));
  int64_t end = offset + count;
  for (int64_t i = offset; i < end;) {
    int64_t b = i / d->bucket;
    int64_t bend = (b + 1) * d->bucket < end ? (b + 1) * d->bucket : end;
    d->ready[b] += bend - i;
    if (d->ready[b] > bucket_len(d, b))
      SG_RAISE(SG_ERR_INVALID_ARG,
               "sg_ddp_mark_ready: elements of bucket %lld marked twice",
               (long long)b);
    if (d->ready[b] == bucket_len(d, b) && !d->started[b])
      SG_TRY(start_bucket(d, b));
    i = bend;
  }
fail:
  return st;
}

sg_status sg_ddp_finish(sg_ddp_t d, double scale) {
  sg_status st = SG_OK;
  if (!d) SG_RAISE(SG_ERR_INVALID_ARG, "sg_ddp_finish: NULL reducer");
  for (int64_t b = 0; b < d->nbuckets; ++b)
    if (!d->started[b]) {
      d->ready[b] = bucket_len(d, b);
      SG_TRY(start_bucket(d, b));
    }
  SG_TRY(sg_waitall((int)d->nbuckets, d->reqs));
  /* the fixed-order sum: sg_allreduce_det on the host; on a device its
   * same blocks and rank-order adds on the device buffers (ag_sum_det:
   * the host's bits; NCCL's own all-reduce is not fixed-order) */
  if (d->deterministic && sg_group_size(d->group) > 1)
    for (int64_t b = 0; b < d->nbuckets; ++b) {
      float *p = d->grad + b * d->bucket;
      SG_TRY(
          ag_sum_det(d->group, d->dev, SG_DTYPE_F32, bucket_len(d, b), p, p));
    }
  if (scale != 1.0 && d->dev.kind != SG_DEVICE_HOST) {
    SG_TRY(ag_dev_scale(d->dev, SG_DTYPE_F32, d->n, scale, d->grad, d->grad));
  } else if (scale != 1.0) {
    const float s = (float)scale;
#pragma omp parallel for schedule(static) if (d->n > 65536)
    for (int64_t i = 0; i < d->n; ++i) d->grad[i] *= s;
  }
fail:
  return st;
}
