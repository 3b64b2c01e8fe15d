/* shardgrid — device backends: dispatch, accounting and the host backend. */
#include "device_impl.h"

#include "sg_config.h"
#include "sg_trace.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define SG_HOST_ALIGN 64
/* host copies and fills from this size on are split across the OpenMP
 * threads in chunks (nested inside a parallel region: serial) */
#define SG_HOST_SPLIT_MIN ((size_t)1 << 20)
#define SG_HOST_SPLIT_CHUNK ((size_t)1 << 18)
#define SG_MAX_DEVICES 16

/* Accounting per (kind, index). */
typedef struct sg_mem_counter {
  _Atomic size_t current;
  _Atomic size_t peak;
  _Atomic int64_t allocations;
} sg_mem_counter;

static sg_mem_counter sg_mem[SG_DEVICE_KIND_COUNT][SG_MAX_DEVICES];

static void sg_mem_add(sg_device dev, size_t bytes) {
  sg_mem_counter *c = &sg_mem[dev.kind][dev.index];
  size_t now = atomic_fetch_add(&c->current, bytes) + bytes;
  size_t peak = atomic_load(&c->peak);
  while (now > peak && !atomic_compare_exchange_weak(&c->peak, &peak, now)) {}
  atomic_fetch_add(&c->allocations, 1);
}

static void sg_mem_sub(sg_device dev, size_t bytes) {
  atomic_fetch_sub(&sg_mem[dev.kind][dev.index].current, bytes);
}

/* ---- host backend -------------------------------------------------------
 * Each host block carries a 64-byte header holding its size, so sg_free can
 * account without a table. */

static sg_status host_count(int *count) {
  *count = 1;
  return SG_OK;
}

static sg_status host_alloc(int index, size_t bytes, void **ptr) {
  (void)index;
  sg_status st = SG_OK;
  void *raw = NULL;
  if (bytes > SIZE_MAX - SG_HOST_ALIGN)
    SG_RAISE(SG_ERR_ALLOC, "host allocation of %zu bytes is too large", bytes);
  size_t total = (bytes + SG_HOST_ALIGN + SG_HOST_ALIGN - 1) / SG_HOST_ALIGN *
                 SG_HOST_ALIGN;
  raw = aligned_alloc(SG_HOST_ALIGN, total);
  if (!raw)
    SG_RAISE(SG_ERR_ALLOC, "host allocation of %zu bytes failed", bytes);
  memcpy(raw, &bytes, sizeof bytes);
  *ptr = (char *)raw + SG_HOST_ALIGN;
fail:
  return st;
}

static size_t host_block_size(const void *ptr) {
  size_t bytes;
  memcpy(&bytes, (const char *)ptr - SG_HOST_ALIGN, sizeof bytes);
  return bytes;
}

static sg_status host_release(int index, void *ptr) {
  (void)index;
  free((char *)ptr - SG_HOST_ALIGN);
  return SG_OK;
}

static sg_status host_copy(sg_device dst_dev, void *dst, sg_device src_dev,
                           const void *src, size_t bytes) {
  (void)dst_dev;
  (void)src_dev;
  if (bytes >= SG_HOST_SPLIT_MIN) {
    /* large copies: split across threads */
    const size_t chunk = SG_HOST_SPLIT_CHUNK;
    const int64_t nchunk = (int64_t)((bytes + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunk; ++c) {
      size_t off = (size_t)c * chunk;
      size_t len = bytes - off < chunk ? bytes - off : chunk;
      memcpy((char *)dst + off, (const char *)src + off, len);
    }
  } else {
    memmove(dst, src, bytes);
  }
  return SG_OK;
}

static sg_status host_set(int index, void *ptr, int value, size_t bytes) {
  (void)index;
  if (bytes >= SG_HOST_SPLIT_MIN) {
    /* large fills (the tape's zeroed activations and gradients): split
     * across threads, as copies are, not serial between parallel ops */
    const size_t chunk = SG_HOST_SPLIT_CHUNK;
    const int64_t nchunk = (int64_t)((bytes + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunk; ++c) {
      size_t off = (size_t)c * chunk;
      size_t len = bytes - off < chunk ? bytes - off : chunk;
      memset((char *)ptr + off, value, len);
    }
  } else {
    memset(ptr, value, bytes);
  }
  return SG_OK;
}

static sg_status host_noop_create(int index, void **native) {
  (void)index;
  *native = NULL;
  return SG_OK;
}
static sg_status host_noop1(void *native) {
  (void)native;
  return SG_OK;
}
static sg_status host_noop2(void *a, void *b) {
  (void)a;
  (void)b;
  return SG_OK;
}

static sg_status host_describe(int index, char *name, size_t n, size_t *bytes) {
  (void)index;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (n) snprintf(name, n, "host");
  *bytes = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
  return SG_OK;
}

static const sg_device_ops sg_host_ops = {
    .name = "host",
    .count = host_count,
    .alloc = host_alloc,
    .release = host_release,
    .copy = host_copy,
    .set = host_set,
    .stream_create = host_noop_create,
    .stream_destroy = host_noop1,
    .stream_sync = host_noop1,
    .event_create = host_noop_create,
    .event_destroy = host_noop1,
    .event_record = host_noop2,
    .stream_wait = host_noop2,
    .event_sync = host_noop1,
    .event_elapsed = NULL, /* handled with host_time */
    .describe = host_describe,
};

/* ---- dispatch ----------------------------------------------------------- */

const char *sg_device_kind_name(sg_device_kind kind) {
  switch (kind) {
  case SG_DEVICE_HOST: return "host";
  case SG_DEVICE_CUDA: return "cuda";
  default: return "invalid";
  }
}

static const sg_device_ops *sg_ops(sg_device_kind kind) {
  if (kind == SG_DEVICE_HOST) return &sg_host_ops;
  if (kind == SG_DEVICE_CUDA) return sg_device_ops_cuda();
  return NULL;
}

sg_status sg_device_count(sg_device_kind kind, int *count) {
  sg_status st = SG_OK;
  if (!count) SG_RAISE(SG_ERR_INVALID_ARG, "sg_device_count: NULL count");
  *count = 0;
  const sg_device_ops *ops = sg_ops(kind);
  if (!ops) return SG_OK;
  SG_TRY(ops->count(count));
fail:
  return st;
}

sg_status sg_device_check(sg_device dev) {
  sg_status st = SG_OK;
  int n = 0;
  if ((int)dev.kind < 0 || dev.kind >= SG_DEVICE_KIND_COUNT)
    SG_RAISE(SG_ERR_INVALID_ARG, "invalid device kind %d", (int)dev.kind);
  if (dev.index < 0 || dev.index >= SG_MAX_DEVICES)
    SG_RAISE(SG_ERR_INVALID_ARG, "invalid device index %d", dev.index);
  if (!sg_ops(dev.kind))
    SG_RAISE(SG_ERR_NO_DEVICE, "%s backend not built into this shardgrid",
             sg_device_kind_name(dev.kind));
  SG_TRY(sg_device_count(dev.kind, &n));
  if (dev.index >= n)
    SG_RAISE(SG_ERR_NO_DEVICE, "no %s device %d (%d available)",
             sg_device_kind_name(dev.kind), dev.index, n);
fail:
  return st;
}

sg_status sg_device_describe(sg_device dev, char *name, size_t n,
                             size_t *total_bytes) {
  sg_status st = SG_OK;
  size_t bytes = 0;
  if ((n && !name) || !total_bytes)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_device_describe: NULL argument");
  SG_TRY(sg_device_check(dev));
  SG_TRY(sg_ops(dev.kind)->describe(dev.index, name, n, &bytes));
  *total_bytes = bytes;
fail:
  return st;
}

sg_status sg_malloc(sg_device dev, size_t bytes, void **ptr) {
  sg_status st = SG_OK;
  if (!ptr) SG_RAISE(SG_ERR_INVALID_ARG, "sg_malloc: NULL ptr");
  *ptr = NULL;
  if (bytes == 0) return SG_OK;
  if (dev.kind != SG_DEVICE_HOST) SG_TRY(sg_device_check(dev));
  SG_TRY(sg_ops(dev.kind)->alloc(dev.index, bytes, ptr));
  sg_mem_add(dev, bytes);
fail:
  return st;
}

sg_status sg_host_keep_memory(void) {
#ifdef __GLIBC__
  /* 32 MiB is glibc's largest mmap threshold on 64-bit systems */
  if (mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024) != 1 ||
      mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024) != 1)
    /* another allocator took malloc's place (a sanitizer's, jemalloc,
     * tcmalloc): glibc's settings do not apply */
    return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                        "sg_host_keep_memory: the malloc in use does not take "
                        "glibc's heap settings");
  return SG_OK;
#else
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "sg_host_keep_memory: not a glibc system");
#endif
}

sg_status sg_calloc(sg_device dev, size_t bytes, void **ptr) {
  sg_status st = SG_OK;
  SG_TRY(sg_malloc(dev, bytes, ptr));
  if (bytes) {
    st = sg_memset(dev, *ptr, 0, bytes);
    if (st != SG_OK) sg_free(dev, ptr);
  }
fail:
  return st;
}

/* CUDA blocks are sized by the backend; it reports through this hook. */
size_t sg_device_cuda_block_size(const void *ptr);

sg_status sg_free(sg_device dev, void **ptr) {
  sg_status st = SG_OK;
  if (!ptr || !*ptr) return SG_OK;
  const sg_device_ops *ops = sg_ops(dev.kind);
  if (!ops)
    SG_RAISE(SG_ERR_NO_DEVICE, "sg_free: %s backend not built",
             sg_device_kind_name(dev.kind));
  size_t bytes = dev.kind == SG_DEVICE_HOST ? host_block_size(*ptr)
                                            : sg_device_cuda_block_size(*ptr);
  SG_TRY(ops->release(dev.index, *ptr));
  sg_mem_sub(dev, bytes);
  *ptr = NULL;
fail:
  return st;
}

sg_status sg_memcpy(sg_device dst_dev, void *dst, sg_device src_dev,
                    const void *src, size_t bytes) {
  sg_status st = SG_OK;
  if (bytes == 0) return SG_OK;
  if (!dst || !src) SG_RAISE(SG_ERR_INVALID_ARG, "sg_memcpy: NULL buffer");
  sg_device_kind k = dst_dev.kind != SG_DEVICE_HOST ? dst_dev.kind
                                                    : src_dev.kind;
  const sg_device_ops *ops = sg_ops(k);
  if (!ops)
    SG_RAISE(SG_ERR_NO_DEVICE, "sg_memcpy: %s backend not built",
             sg_device_kind_name(k));
  SG_TRY(ops->copy(dst_dev, dst, src_dev, src, bytes));
fail:
  return st;
}

sg_status sg_memset(sg_device dev, void *ptr, int value, size_t bytes) {
  sg_status st = SG_OK;
  if (bytes == 0) return SG_OK;
  if (!ptr) SG_RAISE(SG_ERR_INVALID_ARG, "sg_memset: NULL buffer");
  const sg_device_ops *ops = sg_ops(dev.kind);
  if (!ops)
    SG_RAISE(SG_ERR_NO_DEVICE, "sg_memset: %s backend not built",
             sg_device_kind_name(dev.kind));
  SG_TRY(ops->set(dev.index, ptr, value, bytes));
fail:
  return st;
}

sg_status sg_mem_get_info(sg_device dev, sg_mem_info *info) {
  sg_status st = SG_OK;
  if (!info) SG_RAISE(SG_ERR_INVALID_ARG, "sg_mem_get_info: NULL info");
  if ((int)dev.kind < 0 || dev.kind >= SG_DEVICE_KIND_COUNT || dev.index < 0 ||
      dev.index >= SG_MAX_DEVICES)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_mem_get_info: invalid device");
  sg_mem_counter *c = &sg_mem[dev.kind][dev.index];
  info->current_bytes = atomic_load(&c->current);
  info->peak_bytes = atomic_load(&c->peak);
  info->allocations = atomic_load(&c->allocations);
fail:
  return st;
}

sg_status sg_mem_reset_peak(sg_device dev) {
  sg_status st = SG_OK;
  if ((int)dev.kind < 0 || dev.kind >= SG_DEVICE_KIND_COUNT || dev.index < 0 ||
      dev.index >= SG_MAX_DEVICES)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_mem_reset_peak: invalid device");
  sg_mem_counter *c = &sg_mem[dev.kind][dev.index];
  atomic_store(&c->peak, atomic_load(&c->current));
fail:
  return st;
}

/* ---- streams and events -------------------------------------------------- */

sg_status sg_stream_create(sg_device dev, sg_stream_t *stream) {
  sg_status st = SG_OK;
  struct sg_stream *s = NULL;
  if (!stream) SG_RAISE(SG_ERR_INVALID_ARG, "sg_stream_create: NULL stream");
  *stream = NULL;
  SG_TRY(sg_device_check(dev));
  s = calloc(1, sizeof *s);
  if (!s) SG_RAISE(SG_ERR_ALLOC, "sg_stream_create: out of memory");
  s->dev = dev;
  SG_TRY(sg_ops(dev.kind)->stream_create(dev.index, &s->native));
  *stream = s;
  return SG_OK;
fail:
  free(s);
  return st;
}

sg_status sg_stream_destroy(sg_stream_t *stream) {
  sg_status st = SG_OK;
  if (!stream || !*stream) return SG_OK;
  st = sg_ops((*stream)->dev.kind)->stream_destroy((*stream)->native);
  free(*stream);
  *stream = NULL;
  return st;
}

sg_status sg_stream_synchronize(sg_stream_t stream) {
  if (!stream) return SG_OK;
  return sg_ops(stream->dev.kind)->stream_sync(stream->native);
}

void *sg_stream_native(sg_stream_t stream) {
  return stream ? stream->native : NULL;
}

sg_status sg_event_create(sg_device dev, sg_event_t *event) {
  sg_status st = SG_OK;
  struct sg_event *e = NULL;
  if (!event) SG_RAISE(SG_ERR_INVALID_ARG, "sg_event_create: NULL event");
  *event = NULL;
  SG_TRY(sg_device_check(dev));
  e = calloc(1, sizeof *e);
  if (!e) SG_RAISE(SG_ERR_ALLOC, "sg_event_create: out of memory");
  e->dev = dev;
  SG_TRY(sg_ops(dev.kind)->event_create(dev.index, &e->native));
  *event = e;
  return SG_OK;
fail:
  free(e);
  return st;
}

sg_status sg_event_destroy(sg_event_t *event) {
  sg_status st = SG_OK;
  if (!event || !*event) return SG_OK;
  st = sg_ops((*event)->dev.kind)->event_destroy((*event)->native);
  free(*event);
  *event = NULL;
  return st;
}

sg_status sg_event_record(sg_event_t event, sg_stream_t stream) {
  sg_status st = SG_OK;
  if (!event) SG_RAISE(SG_ERR_INVALID_ARG, "sg_event_record: NULL event");
  event->host_time = sg_wtime();
  SG_TRY(sg_ops(event->dev.kind)
             ->event_record(event->native, stream ? stream->native : NULL));
fail:
  return st;
}

sg_status sg_stream_wait_event(sg_stream_t stream, sg_event_t event) {
  sg_status st = SG_OK;
  if (!event) SG_RAISE(SG_ERR_INVALID_ARG, "sg_stream_wait_event: NULL event");
  SG_TRY(sg_ops(event->dev.kind)
             ->stream_wait(stream ? stream->native : NULL, event->native));
fail:
  return st;
}

sg_status sg_event_synchronize(sg_event_t event) {
  sg_status st = SG_OK;
  if (!event) SG_RAISE(SG_ERR_INVALID_ARG, "sg_event_synchronize: NULL event");
  SG_TRY(sg_ops(event->dev.kind)->event_sync(event->native));
fail:
  return st;
}

sg_status sg_event_elapsed_ms(sg_event_t start, sg_event_t end, float *ms) {
  sg_status st = SG_OK;
  if (!start || !end || !ms)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_event_elapsed_ms: NULL argument");
  if (start->dev.kind != end->dev.kind)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_event_elapsed_ms: events of different devices");
  const sg_device_ops *ops = sg_ops(start->dev.kind);
  if (ops->event_elapsed)
    SG_TRY(ops->event_elapsed(start->native, end->native, ms));
  else
    *ms = (float)((end->host_time - start->host_time) * 1e3);
fail:
  return st;
}

#if !SG_HAVE_CUDA
const sg_device_ops *sg_device_ops_cuda(void) { return NULL; }
size_t sg_device_cuda_block_size(const void *ptr) {
  (void)ptr;
  return 0;
}
#endif
