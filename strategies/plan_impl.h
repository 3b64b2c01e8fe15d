/* shardgrid — sg-plan's internal helpers shared by plan_check.c and
 * plan_mem.c (facts of a problem read from its config). */
#ifndef SG_PLAN_IMPL_H
#define SG_PLAN_IMPL_H

#include "sg_model.h"
#include "sg_plan.h"

/* The model's config: sg_model_config_from_kv over the problem's config
 * (the one reader of the model keys), cin and cout from the data. On an
 * unknown model mc->kind is -1; on invalid values the error names them and
 * *mc holds the rest. */
sg_status sg_plan_model(const sg_plan_problem *pb, sg_model_config *mc);
/* An integer key of the run's config (batch, history, zero, ...). */
int64_t sg_plan_int(const sg_plan_problem *pb, const char *key);
/* The model's layers or blocks as pieces (sg_model nblocks without tp), 0
 * for an unknown model. */
int sg_plan_pieces(const sg_model_config *mc);
/* The FNO's tp split of the spectral layers (fno.c fno_tp_init): layer l
 * is column-parallel (1), row-parallel (2) or replicated (0). */
int sg_plan_fno_role(const sg_model_config *mc, int tp, int l);
/* The pipeline's units: pieces, but a column/row pair of FNO layers under
 * tp is one unit (fno.c fno_units); the first piece of unit u. */
int sg_plan_units(const sg_model_config *mc, int tp);
int sg_plan_unit_start(const sg_model_config *mc, int tp, int u);
/* dp x fsdp: the ranks the global batch is split over. */
int sg_plan_data_ranks(const sg_plan_mesh *m);
/* Micro-batches of a step: microbatches under pp, grad_accum otherwise. */
int64_t sg_plan_micro(const sg_plan_problem *pb, const sg_plan_mesh *m);

#endif
