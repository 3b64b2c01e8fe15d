/* The op-table test (test_op_table.c) and its runners of the FFT ops
 * (op_table_fft.c: the spectral convolution alone and in the FNO): the
 * case table's types and the helpers both files use. */
#ifndef SG_OP_TABLE_H
#define SG_OP_TABLE_H

#include <mpi.h>
#include <stdint.h>

#include "sg_autograd.h"
#include "sg_mesh.h"

#define MAXA 3 /* activation inputs */
#define MAXP 5 /* parameters */
#define MAXO 4 /* outputs */
#define MAXL 8 /* layouts per rank count */

enum { IN_DATA = 0, IN_NOGRAD, IN_MASK };

struct op_case;
typedef struct run_ctx {
  sg_mesh_t mesh; /* NULL: one process */
  const sg_placement *pl;
  sg_dtype dt;
} run_ctx;
typedef sg_status (*op_fn)(sg_tape_t t, const struct op_case *c,
                           const run_ctx *rc, sg_var **a, sg_var **p,
                           sg_var **out);

typedef struct op_case {
  const char *op;    /* the registry name of the op it exercises */
  const char *label; /* unique */
  int nd;            /* dims of the activation inputs */
  int nact;
  int64_t act[MAXA][5];
  int act_kind[MAXA];
  int npar;
  int par_nd[MAXP];
  int64_t par[MAXP][5];
  int nout;
  op_fn fn;
  int iattr; /* an op code (activation, binary op, kind...) */
  double lo; /* inputs uniform in [lo, lo + 2) */
  int fno;   /* 1: the FNO, 2: the spectral convolution alone (own runners) */
  int par_field; /* 1: the parameters are (C, spatial...) fields Shard like
                    activation 0 (sg_ag_add_field): each rank holds its
                    block, the gradient is Partial over the batch split */
} op_case;

/* Local failure notes of one run (the first few are printed by the rank). */
typedef struct verdict {
  int bad;
  char first[600];
} verdict;

/* The one-process results of an FFT case (filled by the reference run). */
typedef struct fno_ref {
  int64_t np;
  double *y, *dx, *dp; /* dp: the global parameters' gradients, in the
                          reference's flat order */
  int ok;
} fno_ref;

/* test_op_table.c */
/* The backward of a run: one pass, or (split) the tape's split backward, B
 * then W (ZB-H1's, sg_tape_backward_from_split and
 * sg_tape_backward_weights). The one-process reference runs one pass; the
 * meshes run split for f64 (f32: one pass; the f32-only FNO: every other
 * mesh), so every op's backward is checked with the parameters' and the
 * activations' gradient targets NULL in turn. */
sg_status op_table_backward(sg_tape_t tape, int n, sg_var *const *out,
                            const sg_tensor *seeds, int split);
void note(verdict *v, const char *fmt, const char *what, const char *detail);
void mark_seen(const sg_var *v, int depth);
void sum_all(double *v, int64_t n, MPI_Comm comm);

/* op_table_fft.c: one run of an FFT case on mesh (NULL: the one-process
 * reference, which fills ref); 1 when it matches on every rank. */
int run_fno(const op_case *c, sg_mesh_t mesh, fno_ref *ref, const double *gx,
            verdict *vd);
int run_spectral(const op_case *c, sg_dtype dt, sg_mesh_t mesh, fno_ref *ref,
                 const double *gx, verdict *vd);

#endif /* SG_OP_TABLE_H */
