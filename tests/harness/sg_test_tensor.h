/* shardgrid — test helpers for tensors and sharded variables: deterministic
 * random inputs, the box of a rank, box copies between a global array and a
 * local block, sharded leaves from a global array (scatter) and back
 * (gather), buffers with guard values around them, and comparisons scaled
 * by dtype.
 *
 * Global arrays are double on every rank (the same values everywhere: the
 * generator is counter-based); local blocks have the variable's dtype. */
#ifndef SG_TEST_TENSOR_H
#define SG_TEST_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "sg_autograd.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- deterministic inputs --------------------------------------------------- */
/* Value i of stream `seed`, uniform in [lo, hi) (a counter-based hash: the
 * same on every rank, independent of the order of calls). */
double sg_test_rand(uint64_t seed, int64_t i, double lo, double hi);
void sg_test_rand_fill(double *a, int64_t n, uint64_t seed, double lo,
                       double hi);

/* ---- elements and boxes ------------------------------------------------------ */
int64_t sg_test_numel(int nd, const int64_t *shape);
double sg_test_get(const void *p, sg_dtype dt, int64_t i);
void sg_test_set(void *p, sg_dtype dt, int64_t i, double v);
/* Copy the box [off, off + shape) of the global (gshape, row-major) double
 * array into the contiguous local block of dtype dt (to_global 0), or the
 * block into the box (to_global 1). */
void sg_test_box_copy(int nd, const int64_t *gshape, const int64_t *off,
                      const int64_t *shape, double *global, void *local,
                      sg_dtype dt, int to_global);
/* This rank's box of v: of its global shape under its placements when v is
 * sharded (sg_shardtensor_box), the whole tensor otherwise. Not
 * collective. */
sg_status sg_test_var_box(const sg_var *v, int64_t *off, int64_t *shape);

/* The placements of a batch of NCHW fields on `mesh`, from the dims' names:
 * "dp" and "ep" split the samples (dim 0), "c" the channels, "h" and "w"
 * the rows and columns; every other dim (tp, sp, fsdp, ...) replicates. */
void sg_test_nchw_placements(sg_mesh_t mesh, sg_placement *pl);

/* ---- guarded buffers ---------------------------------------------------------- */
/* n elements (zero-filled) with SG_TEST_GUARD elements before and after,
 * filled with a signalling-NaN sentinel; a kernel writing out of bounds
 * changes them. */
#define SG_TEST_GUARD 16
typedef struct sg_test_buf {
  void *data; /* the n elements */
  void *base; /* the allocation */
  int64_t n;
  sg_dtype dtype;
} sg_test_buf;
sg_status sg_test_buf_alloc(sg_test_buf *b, sg_dtype dt, int64_t n);
/* 1 if both guards still hold the sentinel (1 for a buffer never
 * allocated). */
int sg_test_buf_guards_ok(const sg_test_buf *b);
/* Free b's memory and reset it; NULL and reset buffers are fine (SG_OK). */
sg_status sg_test_buf_free(sg_test_buf *b);

/* ---- sharded leaves ----------------------------------------------------------- */
/* v: a leaf holding this rank's block of the global double array (nd,
 * gshape) in dtype dt, in the guarded buffer *val; with requires_grad its
 * gradient lives in the guarded, zeroed buffer *grad (the tape adds into
 * it). mesh NULL: the whole array, not sharded. With a mesh: collective
 * over it (sg_var_set_sharding). Release with sg_var_release and free the
 * buffers after. */
sg_status sg_test_var_scatter(sg_var *v, sg_test_buf *val, sg_test_buf *grad,
                              const char *name, sg_dtype dt, sg_mesh_t mesh,
                              const sg_placement *pl, int nd,
                              const int64_t *gshape, const double *global,
                              int requires_grad);
/* The whole of v's value (grad 0) or gradient (grad 1) as a global double
 * array on every rank (sg_var_gather; a plain v: its own tensor). global
 * holds the global shape's elements. Collective over v's mesh. */
sg_status sg_test_var_gather(const sg_var *v, int grad, double *global);

/* ---- comparisons ---------------------------------------------------------------- */
/* Tolerance by dtype for results of a few hundred operations: f32 1e-5,
 * f64 1e-11 (relative). */
double sg_test_rel_tol(sg_dtype dt);
/* Compare n values a (dtype dt) with ref: element i passes when
 * |a_i - ref_i| <= rel * (|ref_i| + max_j |ref_j|) and both are finite (NaN
 * and Inf never pass). Returns the number of mismatches; the first one is
 * described in msg (msg_size bytes; may be NULL). Counts nothing in the
 * test's verdict: the caller checks the result. */
int64_t sg_test_cmp_ref(const void *a, sg_dtype dt, const double *ref,
                        int64_t n, double rel, char *msg, size_t msg_size);

#ifdef __cplusplus
}
#endif
#endif /* SG_TEST_TENSOR_H */
