/* libFuzzer target: checkpoint files as sg-train reads them on resume
 * (io/ckpt.c sg_ckpt_read on MPI_COMM_SELF: the NetCDF header, the format
 * tag, per-array dtype/shape/checksum attributes, the data, the metadata
 * attributes and their checksum, the config text). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_ckpt_arrays.h"
#include "fuzz_tmpfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 20) return 0;
  const char *path = sg_fuzz_write(data, size);
  if (!path) return 0;
  sg_ckpt_array a[FZ_CKPT_N];
  fz_ckpt_arrays(a);
  sg_ckpt_meta meta;
  memset(&meta, 0, sizeof meta);
  sg_status st = sg_ckpt_read(MPI_COMM_SELF, path, FZ_CKPT_N, a, &meta);
  if (getenv("SG_FUZZ_VERBOSE"))
    fprintf(stderr, "sg_ckpt_read: %s %s\n", sg_status_name(st),
            st == SG_OK ? "" : sg_last_error());
  if (st == SG_OK) {
    if (meta.n_rng_state < 0 || meta.n_rng_state > SG_CKPT_RNG_MAX) abort();
    if (!memchr(meta.mesh, '\0', sizeof meta.mesh)) abort();
    if (meta.config) (void)strlen(meta.config);
  }
  free(meta.config);
  /* metadata only */
  memset(&meta, 0, sizeof meta);
  (void)sg_ckpt_read(MPI_COMM_SELF, path, 0, NULL, &meta);
  free(meta.config);
  return 0;
}
