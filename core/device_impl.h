/* shardgrid — internal device backend table (not installed). */
#ifndef SG_DEVICE_IMPL_H
#define SG_DEVICE_IMPL_H

#include "sg_device.h"

typedef struct sg_device_ops {
  const char *name;
  sg_status (*count)(int *count);
  sg_status (*alloc)(int index, size_t bytes, void **ptr);
  sg_status (*release)(int index, void *ptr);
  /* copy within this backend or between it and the host */
  sg_status (*copy)(sg_device dst_dev, void *dst, sg_device src_dev,
                    const void *src, size_t bytes);
  sg_status (*set)(int index, void *ptr, int value, size_t bytes);
  sg_status (*stream_create)(int index, void **native);
  sg_status (*stream_destroy)(void *native);
  sg_status (*stream_sync)(void *native);
  sg_status (*event_create)(int index, void **native);
  sg_status (*event_destroy)(void *native);
  sg_status (*event_record)(void *event, void *stream);
  sg_status (*stream_wait)(void *stream, void *event);
  sg_status (*event_sync)(void *event);
  sg_status (*event_elapsed)(void *start, void *end, float *ms);
  /* name (n bytes with the terminator) and total memory */
  sg_status (*describe)(int index, char *name, size_t n, size_t *bytes);
} sg_device_ops;

struct sg_stream {
  sg_device dev;
  void *native;
};

struct sg_event {
  sg_device dev;
  void *native;
  double host_time; /* host backend: wall time at record */
};

/* The CUDA backend's table; NULL when CUDA is not built. */
const sg_device_ops *sg_device_ops_cuda(void);

#endif /* SG_DEVICE_IMPL_H */
