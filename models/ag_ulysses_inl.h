/* shardgrid — the index arithmetic of Ulysses' all-to-all packing
 * (models/ag_ulysses.c) as SG_HD functions: the host's row copies and the
 * CUDA kernels (models/cuda/ulysses_cuda.cu) call the same code, so the
 * host tests (a faked device) verify the device path's layout.
 *
 * The token side of an exchange of nt tensors: x[t] (B, H, T, d) in the
 * attention kernel's layout <-> buf (P, nt, B, Hl, T, d), the part for
 * rank p first; with n = Hl T d, rank p's part of x[t] is B rows of n
 * elements. The head side: y[t] (B, Hl, N, d) <-> buf whose part from
 * rank p, (nt, B, Hl, tok[p], d), starts at nt B Hl off[p] d; with
 * m = tok[p] d, rank p's part of y[t] is B Hl rows of m elements.
 * The launchers of the device path are declared at the end (CUDA
 * builds). */
#ifndef SG_AG_ULYSSES_INL_H
#define SG_AG_ULYSSES_INL_H

#include <stdint.h>

#include "sg_config.h" /* SG_HAVE_CUDA */
#include "sg_dtype.h"  /* SG_HD */
#include "sg_status.h"

/* Token side: the first element of rank p's part of tensor t in buf. */
static inline SG_HD int64_t sg_uly_tok_base(int64_t p, int64_t t, int64_t nt,
                                            int64_t B, int64_t n) {
  return ((p * nt + t) * B) * n;
}

/* Token side: element j (of B n) of rank p's part is element
 * sg_uly_tok_x(j, ...) of x[t] (P ranks). */
static inline SG_HD int64_t sg_uly_tok_x(int64_t j, int64_t n, int64_t P,
                                         int64_t p) {
  return ((j / n) * P + p) * n + j % n;
}

/* Head side: the first element of rank p's part of tensor t in buf (off_p
 * the rank's first token, rows = B Hl, m = tok[p] d). */
static inline SG_HD int64_t sg_uly_head_base(int64_t t, int64_t nt,
                                             int64_t rows, int64_t off_p,
                                             int64_t d, int64_t m) {
  return nt * rows * off_p * d + t * rows * m;
}

/* Head side: element j (of rows m) of rank p's part is element
 * sg_uly_head_y(j, ...) of y[t] (N tokens in all). */
static inline SG_HD int64_t sg_uly_head_y(int64_t j, int64_t m, int64_t N,
                                          int64_t off_p, int64_t d) {
  return ((j / m) * N + off_p) * d + j % m;
}

#if defined(__CUDACC__) || SG_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif
/* One part of a Ulysses exchange on the device (x, buf device memory, es
 * bytes an element: 4 or 8). Token side: rank p's part of tensor t, B rows
 * of n elements, x[sg_uly_tok_x(j)] <-> buf[base + j] (base =
 * sg_uly_tok_base); back = 0: x -> buf. */
sg_status sg_uly_tok_pack_cuda(size_t es, int64_t B, int64_t n, int64_t P,
                               int64_t p, void *x, void *buf, int back,
                               void *stream);
/* Head side: rows x m elements, y[sg_uly_head_y(j)] <-> buf[j] (buf at the
 * part's base); back = 0: buf -> y, 1: y -> buf. */
sg_status sg_uly_head_pack_cuda(size_t es, int64_t rows, int64_t m, int64_t N,
                                int64_t off_p, int64_t d, void *y, void *buf,
                                int back, void *stream);
#ifdef __cplusplus
}
#endif
#endif

#endif
