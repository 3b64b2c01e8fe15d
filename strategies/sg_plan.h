/* shardgrid — choosing a mesh (sg-plan; docs/choosing-a-mesh.md).
 *
 * A run is described without running it: the model and its config (the
 * same keys as sg-train), the grid and channels of the data, and a
 * candidate mesh. From that description this layer
 *   - checks the mesh against the model (sg_plan_check: every violation —
 *     divisibility, heads over tp, pieces over pp, a shard thinner than its
 *     halo, a patch larger than a shard, a strategy the model lacks — in one
 *     message, the same on every rank; sg-train calls it before it builds
 *     anything);
 *   - predicts the peak memory per rank from the same accounting a run
 *     reports (parameters, gradients, optimizer state, activations per op,
 *     workspaces: sg_plan_memory);
 *   - predicts the step time from a cost model: per-op FLOPs and bytes at a
 *     machine's calibrated rates, alpha + beta n per collective and halo
 *     message (sg_plan_time, with a hardware description sg_plan_hw).
 * None of it is collective: sg-plan runs on one process. */
#ifndef SG_PLAN_H
#define SG_PLAN_H

#include "sg_kv.h"
#include "sg_status.h"

#include <stddef.h>
#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { SG_PLAN_MAX_DIMS = 8 };

/* A candidate mesh: named dims (pp, dp, fsdp, tp, sp, h, w, ...) in
 * order, row-major like sg_mesh. */
typedef struct sg_plan_mesh {
  int ndims;
  char name[SG_PLAN_MAX_DIMS][8];
  int size[SG_PLAN_MAX_DIMS];
} sg_plan_mesh;

/* Parse "pp=2,fsdp=2,h=2" (the --mesh syntax of the drivers). */
sg_status sg_plan_mesh_parse(const char *spec, sg_plan_mesh *m);
/* The size of the named dim (1 when absent); the product of all sizes. */
int sg_plan_mesh_dim(const sg_plan_mesh *m, const char *name);
int sg_plan_mesh_ranks(const sg_plan_mesh *m);
/* 1 when the mesh names the dim (a size-1 pp dim still turns the pipeline
 * on, as in sg-train). */
int sg_plan_has_dim(const sg_plan_mesh *m, const char *name);
/* "pp=2,fsdp=2,h=2" into buf (cap bytes). */
void sg_plan_mesh_format(const sg_plan_mesh *m, char *buf, size_t cap);

/* The problem: sg-train's config (the model's keys, read by
 * sg_model_config_from_kv: model, width, modes, layers, blocks, levels,
 * heads, patch, depth, grid, ...; the run's: batch, history, zero,
 * microbatches, pp_schedule, param_dtype, ...; the keys and defaults of
 * sg-train) and the data's shape. */
typedef struct sg_plan_problem {
  sg_kv_t cfg;
  int64_t ny, nx; /* grid points */
  int64_t vars;   /* variables (channels per frame) */
  int ranks;      /* the run's rank count (0: any; the check then
                          leaves the product of the mesh sizes alone) */
  int threads;    /* OpenMP threads per rank: the kernels' workspaces
                          are per thread (0: 1) */
} sg_plan_problem;

/* Every way the mesh does not fit the problem, in one message (NULL-safe
 * buffer of cap bytes; "" when it fits). Returns SG_OK when it fits,
 * SG_ERR_CONFIG otherwise (the message also set as the error). */
sg_status sg_plan_check(const sg_plan_problem *pb, const sg_plan_mesh *m,
                        char *why, size_t cap);

/* Peak memory per rank (the largest over the ranks), bytes. */
typedef struct sg_plan_mem {
  double params, grads, optim, activations, workspace, peak;
} sg_plan_mem;
sg_status sg_plan_memory(const sg_plan_problem *pb, const sg_plan_mesh *m,
                         sg_plan_mem *out);

/* A machine: rates and link costs (sg-plan --calibrate writes one). */
typedef struct sg_plan_hw {
  char name[64];
  double gemm_flops, conv_flops, fft_flops, mem_bw; /* per rank, /s */
  /* Hockney's half-performance length of the GEMM and conv rates in the
   * GEMM's smaller dim (channels): a GEMM over n of them runs at
   * rate n / (n + n_half); 0: one rate for every shape */
  double gemm_nhalf, conv_nhalf;
  /* fused attention (forward + backward, flops counted as 4 B H Nq Nk d
   * forward and 2.5x that backward) per rank, /s; 0: gemm_flops */
  double attn_flops;
  /* elements per second of the library's element-wise kernels that are
   * not memory-bound at activation sizes, forward + backward: the
   * activation (GELU), GroupNorm, LayerNorm and the linear 2x up-sample
   * (counted per output element); 0: the memory roofline */
  double act_rate, norm_rate, lnorm_rate, up_rate;
  double mem_bytes; /* memory per rank */
  /* alpha (s) and beta (s/byte) for messages inside a node and between
   * nodes; ranks_per_node decides which a group uses */
  double alpha_intra, beta_intra, alpha_inter, beta_inter;
  int ranks_per_node;
  /* cores per node (0: as many as ranks): more ranks than cores on a node
   * share them, and the compute stretches by ranks / cores */
  int cores_per_node;
  double io_bw; /* bytes/s per rank reading the data (0: I/O not costed) */
  /* The same rates per rank while `shared_ranks` ranks of a node run the
   * same kernel at once (sg-plan --calibrate measures both; the keys
   * gemm_flops_shared, ...): ranks on one node share its memory system,
   * so a memory-bound kernel runs slower per rank than alone. The step
   * time uses them when more than one rank of the mesh is on a node
   * (docs/choosing-a-mesh-time.md); 0: the single-stream rate. */
  struct sg_plan_rates {
    double gemm_flops, conv_flops, fft_flops, mem_bw, attn_flops, act_rate,
        norm_rate, lnorm_rate, up_rate;
  } shared;
  int shared_ranks; /* ranks that ran at once for `shared` (0: none) */
  /* sg_plan_calibrate's spread of each rate over its rounds (interquartile
   * range / median), single-stream and shared, the rounds and the least
   * seconds per sample; written into the file as comments, not read back
   * (cal_rounds 0: not a calibration) */
  struct sg_plan_rates spread, shared_spread;
  int cal_rounds;
  double cal_sample_s;
} sg_plan_hw;
sg_status sg_plan_hw_load(const char *path, sg_plan_hw *hw);
sg_status sg_plan_hw_save(const char *path, const sg_plan_hw *hw);

/* A step's predicted time, seconds, and its split. */
typedef struct sg_plan_time {
  double compute, halo, allreduce, reduce_scatter, allgather, alltoall, p2p,
      bubble, io, total;
  double ring; /* ring attention's K/V (and dK/dV) passes */
} sg_plan_time;
sg_status sg_plan_step_time(const sg_plan_problem *pb, const sg_plan_mesh *m,
                            const sg_plan_hw *hw, sg_plan_time *out);

/* The counted work of one micro-batch on one rank (forward + backward):
 * FLOPs by rate class, bytes of the memory-bound ops, the parameters the
 * rank holds (per pp stage), and the bytes of the op outputs a forward
 * keeps for backward (a rough activation estimate: sg_plan_memory is the
 * accounting). */
typedef struct sg_plan_flops {
  double gemm, conv, fft, bytes, params, act;
} sg_plan_flops;
sg_status sg_plan_step_time_ex(const sg_plan_problem *pb, const sg_plan_mesh *m,
                               const sg_plan_hw *hw, sg_plan_time *out,
                               sg_plan_flops *work);
sg_status sg_plan_flops_of(const sg_plan_problem *pb, const sg_plan_mesh *m,
                           const sg_plan_hw *hw, sg_plan_flops *out);

/* The ring algorithm's alpha-beta costs (seconds): an all-reduce of
 * `bytes` over p ranks, 2 (p - 1) alpha + 2 (p - 1) / p bytes beta; a
 * reduce-scatter or all-gather of `bytes` in all, or an all-to-all of
 * `bytes` per rank, (p - 1) alpha + (p - 1) / p bytes beta; one message,
 * alpha + bytes beta. */
double sg_plan_allreduce_s(int p, double bytes, double alpha, double beta);
double sg_plan_scatter_s(int p, double bytes, double alpha, double beta);
double sg_plan_p2p_s(double bytes, double alpha, double beta);

/* The hardware a mesh of `on_node` ranks per node sees: *out = *hw with
 * every rate that has a shared value moved towards it, 1 / rate
 * interpolated linearly in (on_node - 1) / (shared_ranks - 1) and held at
 * the shared value beyond shared_ranks; on_node <= 1 (or no shared
 * values): *hw. */
void sg_plan_hw_on_node(const sg_plan_hw *hw, int on_node, sg_plan_hw *out);

/* Measure this machine (collective over comm: GEMM, conv, FFT and memory
 * rates on rank 0 alone (the single-stream rates) and on every rank at
 * once (the shared ones, the slowest rank's kept), the two alternating
 * round by round, each rate the median of several rounds of samples of
 * at least cal_sample_s; MPI latency and bandwidth between ranks 0 and 1
 * by message size, fitted to alpha + beta n) into *out; ranks_per_node
 * and cores_per_node from the machine. Flags: SG_PLAN_CAL_QUICK takes
 * fewer, shorter samples (5 rounds of >= 50 ms; else 7 of >= 100 ms;
 * the environment's SG_PLAN_CAL_SAMPLE_S overrides the sample length);
 * SG_PLAN_CAL_CPU_TIME times the kernels in thread CPU time instead of
 * wall time (the rates of a core of one's own on a machine shared with
 * other jobs). */
enum { SG_PLAN_CAL_QUICK = 1, SG_PLAN_CAL_CPU_TIME = 2 };
sg_status sg_plan_calibrate(MPI_Comm comm, unsigned flags, sg_plan_hw *out);

/* ---- calibration from the model's own steps
 * (docs/choosing-a-mesh-time.md, "Calibrating from the model") ----
 *
 * The op classes the time model costs at one rate each: the tape's ops
 * by name (linear: GEMM; conv, convt: conv; spectral_conv: FFT, its mode
 * mix included; the attention ops; act; norm (GroupNorm and LayerNorm);
 * upsample_linear) and OTHER, the rest of a step's compute (copies,
 * element-wise ops, the loss, the optimizer, the data: the memory-bound
 * work costed at mem_bw). */
enum {
  SG_PLAN_OP_GEMM,
  SG_PLAN_OP_CONV,
  SG_PLAN_OP_FFT,
  SG_PLAN_OP_ATTN,
  SG_PLAN_OP_ACT,
  SG_PLAN_OP_NORM,
  SG_PLAN_OP_UP,
  SG_PLAN_OP_OTHER,
  SG_PLAN_NOPS
};
/* "gemm", "conv", "fft", "attn", "act", "norm", "up", "other". */
const char *sg_plan_op_class_name(int cls);

/* A run's seconds per step by op class (the median over its timed steps)
 * and their spread (interquartile range / median over the steps); compute
 * is the step's compute time (sg-train's: the step less its halo and
 * collectives), t[SG_PLAN_OP_OTHER] what the classes leave of it. */
typedef struct sg_plan_op_times {
  int steps; /* timed steps */
  double compute, spread_compute;
  double t[SG_PLAN_NOPS], spread[SG_PLAN_NOPS];
} sg_plan_op_times;

/* Per-step recording (sg-train with op_times; the tape's op timers on,
 * sg_tape_time_ops): sg_plan_op_rec_step after each step takes the
 * seconds the op classes' timers gained (sg_timer_total of their ops) and
 * the step's compute seconds; sg_plan_op_rec_times the medians over the
 * steps after the first `skip`. */
typedef struct sg_plan_op_rec {
  int n, cap;
  double *v; /* n rows of SG_PLAN_NOPS: the classes, then compute */
  double last[SG_PLAN_NOPS];
} sg_plan_op_rec;
sg_status sg_plan_op_rec_step(sg_plan_op_rec *r, double compute_s);
sg_status sg_plan_op_rec_times(const sg_plan_op_rec *r, int skip,
                               sg_plan_op_times *out);
void sg_plan_op_rec_free(sg_plan_op_rec *r);

/* The op-times file ("key = value": steps, compute, gemm, conv, ...,
 * spread_<class>): written by sg-train (op_times), read by sg-plan. */
sg_status sg_plan_op_times_save(const char *path, const sg_plan_op_times *t);
sg_status sg_plan_op_times_load(const char *path, sg_plan_op_times *t);

/* The machine as the model's own steps measured it: *out = *base (its
 * links, memory, nodes) with each op class's rates (gemm_flops,
 * conv_flops, fft_flops, attn_flops, act_rate, norm_rate and lnorm_rate,
 * up_rate; OTHER: mem_bw) set so that sg_plan_step_time on mesh m (one
 * rank: the mesh of the measured run) predicts each class's measured
 * seconds (one's single-stream run), solved by fixed-point iteration on
 * the classes' shares of the predicted compute (finite differences of
 * sg_plan_step_time in each rate); with `shared` (the same run on
 * nshared ranks of the node at once, the slowest's times; NULL: none) the
 * *_shared rates the same way. A class the run did not time keeps base's
 * rate; a class the model's time model does not cost adds its time to
 * OTHER. Spreads from the runs' step-to-step spreads. The half-performance
 * lengths are base's. */
sg_status sg_plan_hw_from_model(const sg_plan_problem *pb,
                                const sg_plan_mesh *m, const sg_plan_hw *base,
                                const sg_plan_op_times *one,
                                const sg_plan_op_times *shared, int nshared,
                                sg_plan_hw *out);

#ifdef __cplusplus
}
#endif
#endif /* SG_PLAN_H */
