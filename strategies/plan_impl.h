/* shardgrid — sg-plan's internal helpers shared by plan_check.c and
 * plan_mem.c (facts of a problem read from its config). */
#ifndef SG_PLAN_IMPL_H
#define SG_PLAN_IMPL_H

#include "sg_plan.h"

/* The model kind (sg_model_kind) of the config. */
sg_status sg_plan_model_kind(const sg_plan_problem *pb, int *kind);
/* An integer key of the config. */
int64_t sg_plan_int(const sg_plan_problem *pb, const char *key);
/* The model's pipeline pieces (sg_model nblocks), 0 for an unknown model. */
int sg_plan_pieces(const sg_plan_problem *pb);
/* dp x fsdp: the ranks the global batch is split over. */
int sg_plan_data_ranks(const sg_plan_mesh *m);
/* Micro-batches of a step: microbatches under pp, grad_accum otherwise. */
int64_t sg_plan_micro(const sg_plan_problem *pb, const sg_plan_mesh *m);

/* activation_checkpointing: 0 none, K every K-th block (blocks: 1), -1
 * not a value sg-train takes. */
int64_t sg_plan_ckpt_every(const sg_plan_problem *pb);

#endif
