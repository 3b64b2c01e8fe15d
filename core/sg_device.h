/* shardgrid — device backends: memory, copies, streams and events.
 *
 * One interface over two backends. The host backend is always built:
 * 64-byte aligned allocations, OpenMP-parallel fill and copy, and streams and
 * events that are synchronous no-ops. The CUDA backend (SG_HAVE_CUDA) uses
 * cudaMalloc, CUDA streams and events. Every allocation made through
 * sg_malloc is accounted per device (current and peak bytes).
 *
 * None of these functions is collective.
 */
#ifndef SG_DEVICE_H
#define SG_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sg_device_kind {
  SG_DEVICE_HOST = 0,
  SG_DEVICE_CUDA = 1,
  SG_DEVICE_KIND_COUNT
} sg_device_kind;

typedef struct sg_device {
  sg_device_kind kind;
  int index; /* device ordinal within its kind (0 for the host) */
} sg_device;

static inline sg_device sg_device_host(void) {
  sg_device d = {SG_DEVICE_HOST, 0};
  return d;
}

/* "host" or "cuda". */
const char *sg_device_kind_name(sg_device_kind kind);

/* Number of devices of a kind: 1 for the host; for CUDA the number of
 * usable GPUs, 0 when CUDA is not built, no driver is loaded, or the driver
 * is older than the runtime ("driver version is insufficient"); that is
 * not an error. */
sg_status sg_device_count(sg_device_kind kind, int *count);

/* SG_OK if the device can be used, SG_ERR_NO_DEVICE (with a reason)
 * otherwise. */
sg_status sg_device_check(sg_device dev);

/* A device's name (at most n bytes with the terminator) and total memory in
 * bytes: CUDA's device properties; for the host "host" and the physical
 * memory. SG_ERR_NO_DEVICE as sg_device_check. */
sg_status sg_device_describe(sg_device dev, char *name, size_t n,
                             size_t *total_bytes);

/* Allocate bytes on dev (host: 64-byte aligned). bytes == 0 gives NULL. */
sg_status sg_malloc(sg_device dev, size_t bytes, void **ptr);
/* Same, zero-filled. */
sg_status sg_calloc(sg_device dev, size_t bytes, void **ptr);
/* Keep freed host memory in the process heap instead of returning it to
 * the kernel (glibc: blocks up to 32 MiB come from the heap, and the heap
 * is trimmed only above 1 GiB free). A training step frees and allocates
 * the same activation blocks every step; returned to the kernel, each
 * reuse page-faults and zero-fills again (FNO-2D step at 64^2: 20% of the
 * time in faults and zeroing; 33.7 -> 42.3 samples/s with this). Process
 * wide, so it is the driver's call (sg-train, sg-ns2d make it). Without
 * glibc's malloc (other libc, a sanitizer's or another allocator) a no-op
 * returning SG_ERR_NOT_SUPPORTED. Not collective. */
sg_status sg_host_keep_memory(void);
/* The host BLAS's kernels. OpenBLAS picks them at load time from a table of
 * CPU models; a CPU newer than the table gets its oldest kernels (Debian's
 * 0.3.21 runs the SSE3 "Prescott" kernels on Sapphire Rapids: SGEMM 4x
 * slower, bench/RESULTS.md) unless OPENBLAS_CORETYPE is set before the
 * process starts. sg_blas_core: the kernels in use ("Prescott",
 * "Cooperlake", ...; NULL when the BLAS is not OpenBLAS). sg_blas_coretype_hint:
 * the OPENBLAS_CORETYPE that would use this CPU's widest vectors, when the
 * kernels in use are narrower (NULL when they fit, or unknown). tools/env.sh
 * exports it for the project's scripts; sg-train and sg-info print it. */
const char *sg_blas_core(void);
const char *sg_blas_coretype_hint(void);
/* Free memory from sg_malloc and set *ptr to NULL; a NULL ptr or *ptr is fine. */
sg_status sg_free(sg_device dev, void **ptr);

/* Copy bytes between any two devices (synchronous). */
sg_status sg_memcpy(sg_device dst_dev, void *dst, sg_device src_dev,
                    const void *src, size_t bytes);
/* Set bytes to a byte value (synchronous). */
sg_status sg_memset(sg_device dev, void *ptr, int value, size_t bytes);

typedef struct sg_mem_info {
  size_t current_bytes; /* allocated now through sg_malloc */
  size_t peak_bytes;    /* highest current_bytes since start or reset */
  int64_t allocations;  /* number of sg_malloc calls that allocated */
} sg_mem_info;

/* Memory accounting of one device (this process). */
sg_status sg_mem_get_info(sg_device dev, sg_mem_info *info);
/* Set peak_bytes to current_bytes. */
sg_status sg_mem_reset_peak(sg_device dev);

/* Streams and events. On the host they are valid handles whose operations
 * complete at once. */
typedef struct sg_stream *sg_stream_t;
typedef struct sg_event *sg_event_t;

sg_status sg_stream_create(sg_device dev, sg_stream_t *stream);
sg_status sg_stream_destroy(sg_stream_t *stream);
sg_status sg_stream_synchronize(sg_stream_t stream);
/* The backend's native stream (cudaStream_t) or NULL on the host. */
void *sg_stream_native(sg_stream_t stream);

sg_status sg_event_create(sg_device dev, sg_event_t *event);
sg_status sg_event_destroy(sg_event_t *event);
/* Record the event at the current end of stream. */
sg_status sg_event_record(sg_event_t event, sg_stream_t stream);
/* Make stream wait for event (no host synchronisation). */
sg_status sg_stream_wait_event(sg_stream_t stream, sg_event_t event);
sg_status sg_event_synchronize(sg_event_t event);
/* Milliseconds between two recorded events. */
sg_status sg_event_elapsed_ms(sg_event_t start, sg_event_t end, float *ms);

#ifdef __cplusplus
}
#endif
#endif /* SG_DEVICE_H */
