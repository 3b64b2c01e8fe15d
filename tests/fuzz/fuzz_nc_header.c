/* libFuzzer target: the classic NetCDF (CDF-1/2/5) header parser that
 * checks a dataset's length before it is read (io/nc_check.c,
 * sg_io_classic_extent_mem: the same parser as the file path version, on
 * bytes in memory). It must never read out of bounds, overflow or leak,
 * and what it reports must be sane. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "io_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 20) return 0;
  int64_t need = 0, *ends = NULL;
  int nends = 0;
  char var[SG_IO_NAME_BUF];
  sg_status st = sg_io_classic_extent_mem(data, size, &need, var, sizeof var,
                                          &ends, &nends);
  if (st == SG_OK && need >= 0) {
    if (nends < 0 || (nends > 0 && !ends)) abort();
    for (int i = 0; i < nends; ++i)
      if (ends[i] < 0) abort();
  } else if (ends || nends) {
    abort(); /* nothing is handed out on failure */
  }
  free(ends);
  /* and without the optional outputs */
  (void)sg_io_classic_extent_mem(data, size, &need, NULL, 0, NULL, NULL);
  return 0;
}
