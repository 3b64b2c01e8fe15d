/* shardgrid — the registry of the built-in ops (sg_op_registry.h). A new
 * built-in op goes into ops_of() below (and into the case table of
 * tests/ops/test_op_table.c and the device table of models/op_device.c,
 * whose tests fail without it). */
#include "sg_op_registry.h"

#include <string.h>

#include "op_registry_impl.h"

#define SG_OP_REGISTRY_MAX 64

/* The list, built on each call from the files' own tables (constant). */
static int ops_of(const sg_op_def **ops) {
  int n = 0, k = 0;
  const sg_op_def *const *ag = sg_ag_ops_builtin(&k);
  for (int i = 0; i < k && n < SG_OP_REGISTRY_MAX; ++i) ops[n++] = ag[i];
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_dist_loss_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_spectral_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_linear_act_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_spectral_linear_act_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_linear_head_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_checkpoint_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_attention_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_attention_ulysses_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_attention_usp_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_add_field_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_tp_copy_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_tp_reduce_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_sp_share_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_roll_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_window_attention_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_ag_moe_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_fno3d_broadcast_t_op_def();
  if (n < SG_OP_REGISTRY_MAX) ops[n++] = sg_fno3d_time_window_op_def();
  return n;
}

int sg_ag_op_count(void) {
  const sg_op_def *ops[SG_OP_REGISTRY_MAX];
  return ops_of(ops);
}

const sg_op_def *sg_ag_op(int i) {
  const sg_op_def *ops[SG_OP_REGISTRY_MAX];
  int n = ops_of(ops);
  return i >= 0 && i < n ? ops[i] : NULL;
}

const sg_op_def *sg_ag_op_find(const char *name) {
  const sg_op_def *ops[SG_OP_REGISTRY_MAX];
  int n = ops_of(ops);
  if (!name) return NULL;
  for (int i = 0; i < n; ++i)
    if (ops[i] && ops[i]->name && !strcmp(ops[i]->name, name)) return ops[i];
  return NULL;
}
