/* shardgrid — the registry of the built-in ops of the autograd tape.
 *
 * Every sg_op_def the library records on a tape (models/ag_ops.c, the
 * distributed loss of models/dist_loss.c, the spectral convolution of
 * models/ag_spectral.c, attention and the added field of
 * models/ag_attention.c) is listed here, so that tests can check that each of them
 * is covered (tests/ops/test_op_table.c fails for an op of the registry
 * without a case in its table). A new built-in op is added to the list in
 * models/op_registry.c. User kernels (sg_tape_apply with the caller's own
 * table) are not listed.
 *
 *   for (int i = 0; i < sg_ag_op_count(); ++i)
 *     printf("%s\n", sg_ag_op(i)->name);
 *
 * Not collective; the tables are constant. */
#ifndef SG_OP_REGISTRY_H
#define SG_OP_REGISTRY_H

#include "sg_autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of built-in ops. */
int sg_ag_op_count(void);
/* Built-in op i (0 <= i < sg_ag_op_count()), NULL out of range. */
const sg_op_def *sg_ag_op(int i);
/* The built-in op of that name, NULL if none. */
const sg_op_def *sg_ag_op_find(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* SG_OP_REGISTRY_H */
