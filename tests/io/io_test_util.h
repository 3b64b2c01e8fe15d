/* Helpers shared by the io tests: process-grid decompositions and global
 * index arithmetic. */
#ifndef SG_IO_TEST_UTIL_H
#define SG_IO_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sg_nc.h"

#define IOT_MAX_DECOMP 64

/* A process grid: p[d] ranks along dim d, product = number of ranks. */
typedef struct iot_decomp {
  int nd;
  int p[SG_NC_MAX_DIMS];
} iot_decomp;

/* Every process grid over nd dims with product `size`, dims in `which`
 * (others get 1). Returns the count. */
static inline int iot_all_decomps(int nd, int size, const int *which,
                                  iot_decomp *out) {
  int n = 0;
  int p[SG_NC_MAX_DIMS];
  /* enumerate by recursion unrolled as an odometer over divisors */
  for (int d = 0; d < nd; ++d) p[d] = 1;
  for (;;) {
    int prod = 1;
    for (int d = 0; d < nd; ++d) prod *= p[d];
    if (prod == size && n < IOT_MAX_DECOMP) {
      out[n].nd = nd;
      memcpy(out[n].p, p, sizeof p);
      ++n;
    }
    int d = nd - 1;
    for (; d >= 0; --d) {
      if (!which[d]) continue;
      if (p[d] < size) {
        ++p[d];
        break;
      }
      p[d] = 1;
    }
    if (d < 0) break;
  }
  return n;
}

/* This rank's shard of a global shape under process grid dc (row-major
 * rank layout, balanced splits). */
static inline void iot_shard(const iot_decomp *dc, int rank,
                             const int64_t *gshape, sg_dtype dt,
                             sg_nc_shard *s) {
  memset(s, 0, sizeof *s);
  s->ndims = dc->nd;
  s->dtype = dt;
  int rem = rank;
  int coord[SG_NC_MAX_DIMS];
  for (int d = dc->nd - 1; d >= 0; --d) {
    coord[d] = rem % dc->p[d];
    rem /= dc->p[d];
  }
  for (int d = 0; d < dc->nd; ++d) {
    int64_t n = gshape[d], q = n / dc->p[d], r = n % dc->p[d];
    int c = coord[d];
    s->global_shape[d] = n;
    s->start[d] = c * q + (c < r ? c : r);
    s->count[d] = q + (c < r ? 1 : 0);
  }
}

static inline const char *iot_decomp_str(const iot_decomp *dc, char *buf,
                                         size_t cap) {
  size_t k = 0;
  buf[0] = '\0';
  for (int d = 0; d < dc->nd && k + 8 < cap; ++d)
    k += (size_t)snprintf(buf + k, cap - k, d ? "x%d" : "%d", dc->p[d]);
  return buf;
}

/* Global row-major linear index of local element i of a box. */
static inline int64_t iot_global_index(int nd, const int64_t *gshape,
                                       const int64_t *start,
                                       const int64_t *count, int64_t i) {
  int64_t g = 0, mult = 1;
  for (int d = nd - 1; d >= 0; --d) {
    int64_t j = i % count[d];
    i /= count[d];
    g += (start[d] + j) * mult;
    mult *= gshape[d];
  }
  return g;
}

static inline long long iot_file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

#endif
