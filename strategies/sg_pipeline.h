/* shardgrid — pipeline schedules as data (issue 18, section 2).
 *
 * A schedule says, for every stage (a coordinate of the `pp` mesh dim), the
 * ordered list of actions it performs in one training step: forward (F),
 * backward (B), weight gradient (W, zero-bubble only) of a micro-batch on
 * one of its model chunks, and the point-to-point transfers between
 * neighbouring stages (SEND_F/RECV_F: activations, SEND_B/RECV_B:
 * gradients). Runs will execute the lists as they are; everything about a
 * schedule that can be proved without running a model is proved here, on
 * the lists:
 *
 *   sg_pp_schedule_create   generators: GPipe, 1F1B, interleaved 1F1B,
 *                           ZB-H1 (see docs/pipeline.md for each)
 *   sg_pp_schedule_check    invariants + a no-deadlock proof + peak memory
 *   sg_pp_simulate          simulated time: per-action start/end, bubble
 *
 * Only the schedules exist today: no stage executes them yet (the `pp` mesh
 * dim is still refused by the parallel plan).
 *
 * Chunks (virtual stages). With v chunks per stage the model is cut into
 * p*v pieces; chunk c of stage s is virtual stage g = c*p + s (Megatron's
 * layout), so activations flow s -> s+1 and from stage p-1 chunk c to
 * stage 0 chunk c+1. v = 1 for every kind but interleaved.
 *
 * Transfers. Every F of a virtual stage g > 0 is preceded by RECV_F of the
 * same (micro-batch, chunk); every F of g < p*v-1 is followed by SEND_F;
 * every B of g < p*v-1 is preceded by RECV_B and every B of g > 0 followed
 * by SEND_B. The action's chunk is the local chunk; its peer is the stage
 * holding virtual stage g-1 or g+1 (sg_pp_peer). A SEND_F of (mb, g)
 * matches the RECV_F of (mb, g+1), a SEND_B of (mb, g) the RECV_B of
 * (mb, g-1). Sends are non-blocking (posted as soon as the data exist),
 * receives block: the semantics under which the checker proves that every
 * list runs to its end. With p = 1 there are no transfers.
 *
 * Everything here is pure logic: no MPI, not collective, the same result on
 * every rank.
 */
#ifndef SG_PIPELINE_H
#define SG_PIPELINE_H

#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sg_pp_kind {
  SG_PP_GPIPE,       /* all forwards, then all backwards */
  SG_PP_1F1B,        /* PipeDream-flush: warm-up, one F one B, cool-down */
  SG_PP_INTERLEAVED, /* Megatron's interleaved 1F1B, v >= 2 chunks */
  SG_PP_ZB_H1,       /* zero bubble H1: B (input grad) and W split */
  SG_PP_KIND_COUNT
} sg_pp_kind;

typedef enum sg_pp_op {
  SG_PP_F,      /* forward of (mb, chunk) */
  SG_PP_B,      /* backward: input gradient (ZB-H1), full backward else */
  SG_PP_W,      /* weight gradient (ZB-H1 only) */
  SG_PP_SEND_F, /* activations of (mb, chunk) to the next virtual stage */
  SG_PP_RECV_F, /* activations of (mb, chunk) from the previous one */
  SG_PP_SEND_B, /* input gradient of (mb, chunk) to the previous one */
  SG_PP_RECV_B, /* output gradient of (mb, chunk) from the next one */
  SG_PP_OP_COUNT
} sg_pp_op;

typedef struct sg_pp_action {
  sg_pp_op op;
  int mb;    /* micro-batch, 0..m-1 */
  int chunk; /* local chunk, 0..v-1 */
} sg_pp_action;

/* Stage s's actions are act[off[s] .. off[s+1]). */
typedef struct sg_pp_schedule {
  sg_pp_kind kind;
  int p, m, v;
  int *off;          /* p + 1 offsets */
  sg_pp_action *act; /* off[p] actions */
} sg_pp_schedule;

/* "gpipe", "1f1b", "interleaved", "zb-h1" (the sg-train pp_schedule
 * values); "?" for an invalid kind. Op names: "F", "B", "W", "SEND_F", ... */
const char *sg_pp_kind_name(sg_pp_kind kind);
const char *sg_pp_op_name(sg_pp_op op);
sg_status sg_pp_kind_parse(const char *name, sg_pp_kind *kind);

/* Generate a schedule for p stages, m micro-batches, v chunks per stage.
 * Errors (SG_ERR_INVALID_ARG, message says which): p < 1, m < 1, v < 1,
 * v > 1 for a kind without chunks; interleaved with p < 2, v < 2, m < p or
 * m not a multiple of p (Megatron's rule: micro-batches go round in groups
 * of p). Free with sg_pp_schedule_destroy. */
sg_status sg_pp_schedule_create(sg_pp_kind kind, int p, int m, int v,
                                sg_pp_schedule **out);
/* The same from a spec "pp=4,m=8,kind=1f1b[,v=2]" (keys in any order; p is
 * an alias of pp; v defaults to 1; pp, m and kind are required). */
sg_status sg_pp_schedule_parse(const char *spec, sg_pp_schedule **out);
void sg_pp_schedule_destroy(sg_pp_schedule **s);

/* Virtual stage of (stage, chunk) and the stage a transfer goes to or comes
 * from (-1 for a compute action). */
int sg_pp_virtual_stage(const sg_pp_schedule *s, int stage, int chunk);
int sg_pp_peer(const sg_pp_schedule *s, int stage, const sg_pp_action *a);

/* The peak number of (micro-batch, chunk) pairs a stage holds between F
 * and B, as the schedule's formula says (docs/pipeline.md):
 *   gpipe m;  1f1b and zb-h1 min(m, p - s);
 *   interleaved min(m v, (v - 1) p + 2 (p - 1 - s) + 1). */
int sg_pp_peak_formula(const sg_pp_schedule *s, int stage);
/* The peak number of pairs between F and W (a pair whose B is done but not
 * its W still holds the weight gradient's inputs): ZB-H1 min(m, p) on every
 * stage, the peak of 1F1B's first stage; the F..B peak for the others. */
int sg_pp_peak_fw_formula(const sg_pp_schedule *s, int stage);

/* Check a schedule (any list, generated or not):
 *  - every action well formed (op, micro-batch, chunk, no transfer past the
 *    first or last virtual stage, no W outside ZB-H1);
 *  - per (stage, chunk, micro-batch) exactly one F and one B (and one W for
 *    ZB-H1); B after its F, W after its B; RECV_F before the F that needs
 *    it, SEND_F after it, RECV_B before B, SEND_B after it; no transfer
 *    twice;
 *  - every SEND has its RECV on the peer stage and the other way round, and
 *    the lists, run with non-blocking sends and blocking receives, all
 *    complete (no deadlock: a stuck run names the stages and what they wait
 *    for);
 *  - per stage the peak of pairs between F and B equals
 *    sg_pp_peak_formula, the peak between F and W sg_pp_peak_fw_formula.
 * peak_fb[s] (may be NULL): that peak; peak_fw[s] (may be NULL): the peak
 * of pairs between F and W (the weight gradient's inputs are still held;
 * equal to peak_fb for kinds without W). Arrays of p ints.
 * SG_ERR_INVALID_ARG with the first violation found. */
sg_status sg_pp_schedule_check(const sg_pp_schedule *s, int *peak_fb,
                               int *peak_fw);

/* Durations of one action (per chunk): F, B (the full backward for kinds
 * without W), W, and the latency of a transfer (from its send to the
 * earliest end of the matching receive). Transfers cost their stage no
 * time. */
typedef struct sg_pp_costs {
  double f, b, w, p2p;
} sg_pp_costs;

/* The result of a simulated run: start/end of every action (indexed like
 * act), per stage its busy time (F, B, W) and its bubble = 1 - busy /
 * makespan (the idle fraction of the step), and the makespan (the end of
 * the last action; every stage starts at 0). */
typedef struct sg_pp_sim {
  double makespan;
  double *start, *end; /* off[p] each */
  double *busy, *bubble; /* p each */
} sg_pp_sim;

/* Execute the lists in simulated time: a compute action starts when its
 * stage is free, a receive ends when its stage reaches it and the message
 * has arrived (send time + p2p). Fails like the deadlock part of
 * sg_pp_schedule_check. Free with sg_pp_sim_free. */
sg_status sg_pp_simulate(const sg_pp_schedule *s, const sg_pp_costs *costs,
                         sg_pp_sim *out);
void sg_pp_sim_free(sg_pp_sim *sim);

#ifdef __cplusplus
}
#endif
#endif /* SG_PIPELINE_H */
