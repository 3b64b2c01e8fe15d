/* libFuzzer target: mesh specs ("dp=2,h=2,w=1"), grid/mesh.c
 * sg_mesh_spec_parse. A parsed spec must satisfy what the parser promises
 * (1..SG_MESH_MAX_DIMS dims, valid unique NUL-terminated names, sizes
 * >= 1); a broken promise aborts, which the fuzzer reports. */
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sg_mesh.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096) return 0;
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  sg_mesh_spec spec;
  if (sg_mesh_spec_parse(text, &spec) == SG_OK) {
    if (spec.ndims < 1 || spec.ndims > SG_MESH_MAX_DIMS) abort();
    for (int d = 0; d < spec.ndims; ++d) {
      size_t nl = strnlen(spec.names[d], SG_MESH_NAME_MAX);
      if (nl == 0 || nl == SG_MESH_NAME_MAX) abort();
      if (isdigit((unsigned char)spec.names[d][0])) abort();
      for (size_t i = 0; i < nl; ++i)
        if (!isalnum((unsigned char)spec.names[d][i]) &&
            spec.names[d][i] != '_')
          abort();
      if (spec.sizes[d] < 1) abort();
      for (int e = 0; e < d; ++e)
        if (strcmp(spec.names[d], spec.names[e]) == 0) abort();
    }
  }
  (void)sg_mesh_spec_parse(NULL, &spec);
  free(text);
  return 0;
}
