/* shardgrid — local op kernels (host, f32 and f64).
 *
 * These are the LOCAL halves of the sharded ops: each works on one block of
 * memory with raw pointers and shapes. Layout is always "NC + spatial",
 * row-major and contiguous: (N, C, S0[, S1[, S2]]) with 1 to 3 spatial dims,
 * the last fastest.
 *
 * Window ops (convolution, pooling, bilinear up-sampling) compute a VALID
 * window over an input block that already carries the margins it needs:
 * padding and halos are added by the caller (the halo layer on a sharded
 * tensor, sg_pad_forward for one process), never by the kernel. So for a
 * window (kernel k, stride s, dilation d) an input block of extent n gives
 * out = (n - d(k-1) - 1) / s + 1 outputs along that dim.
 *
 * Forward/backward pairs follow one rule (llm.c): PARAMETER gradients
 * (weights, biases, norm scale/shift) ACCUMULATE (+=) into the caller's
 * buffer; ACTIVATION gradients (dx of the block, including its margins)
 * are OVERWRITTEN. A NULL gradient pointer means "not needed" and is skipped.
 *
 * Every function takes the element type (SG_DTYPE_F32 or SG_DTYPE_F64); all
 * data pointers then point to that type, except the normalisation
 * statistics and loss partial sums, which are always double. Functions that
 * need scratch memory take a workspace of at least *_workspace_bytes() (the
 * size depends on omp_get_max_threads()); NULL makes them allocate it once
 * per call through sg_malloc.
 *
 * Threading: OpenMP over batch and tiles; inside a parallel region BLAS is
 * called single-threaded (OpenBLAS's thread count is set to 1 for the
 * duration of the call and restored), so OMP_NUM_THREADS decides the
 * parallelism and there is no double threading.
 *
 * Determinism: for a fixed OMP_NUM_THREADS every kernel gives the same bits
 * run after run. Reductions (statistics, loss sums) use a fixed blocking that
 * does not depend on the thread count.
 *
 * None of these functions is collective, except sg_norm_stats_allreduce and
 * sg_sum_allreduce (collective over the communicator given).
 */
#ifndef SG_OPS_H
#define SG_OPS_H

#include <mpi.h>
#include <stdint.h>

#include "sg_decomp.h"
#include "sg_dtype.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_OPS_MAX_SPATIAL 3

/* ---- padding (boundary) modes ------------------------------------------- */

/* The boundary kinds of the decomposition (sg_boundary, grid/sg_decomp.h),
 * so the one-process padding and the halo layer's edge fills agree. */
typedef sg_boundary sg_pad_mode;
#define SG_PAD_ZERO SG_BOUNDARY_ZERO /* zeros outside */
#define SG_PAD_PERIODIC \
  SG_BOUNDARY_PERIODIC /* circular: x[-1] = x[n-1]
                                                (pad may exceed n) */
#define SG_PAD_REFLECT \
  SG_BOUNDARY_REFLECT                          /* mirror without the edge:
                                                x[-1] = x[1] (pad < n) */
#define SG_PAD_REPLICATE SG_BOUNDARY_REPLICATE /* edge repeated: x[-1] = x[0] */

/* "zero", "periodic", "reflect", "replicate". */
const char *sg_pad_mode_name(sg_pad_mode mode);

/* Pad `planes` independent planes of spatial shape in[0..nsp) by
 * pad[i][0] (low) and pad[i][1] (high) per dim, per dim mode.
 * dst has shape in[i] + pad[i][0] + pad[i][1]. Pads must be >= 0; reflect
 * needs pad < in, the others need in >= 1. */
sg_status sg_pad_forward(sg_dtype dt, int nsp, int64_t planes,
                         const int64_t *in, const int64_t (*pad)[2],
                         const sg_pad_mode *mode, const void *src, void *dst);
/* The adjoint: dsrc (OVERWRITTEN) = sum of every dpadded element over the
 * source element it was copied from (zero mode: the interior crop). */
sg_status sg_pad_backward(sg_dtype dt, int nsp, int64_t planes,
                          const int64_t *in, const int64_t (*pad)[2],
                          const sg_pad_mode *mode, const void *dpadded,
                          void *dsrc);

/* Set the cells of a padded block that lie outside the domain to `value`
 * along the dims whose mode is SG_PAD_ZERO (the other modes fill their
 * margins with data, which stays). The block is `planes` contiguous planes
 * of spatial shape box[0..nsp); its cell i along dim d is cell origin[d] + i
 * of a domain of extent[d] cells (one process padded by pad: origin = -pad
 * low, extent = the unpadded extent; a sharded box: sg_exchange_info's
 * box_origin and the global extent). Max pooling fills its zero padding
 * with -INFINITY so (the identity of max: PyTorch's convention). */
sg_status sg_pad_fill_outside(sg_dtype dt, int nsp, int64_t planes,
                              const int64_t *box, const int64_t *origin,
                              const int64_t *extent, const sg_pad_mode *mode,
                              double value, void *x);

/* ---- convolution ---------------------------------------------------------
 * y[n,k,o] = b[k] + sum_{c,j} w[k,c,j] x[n,c, o*s + j*d]   (per spatial dim)
 * x: (N, Cin, in...) padded block; w: (Cout, Cin, kernel...); b: (Cout) or
 * NULL; y: (N, Cout, out...). im2col on tiles + GEMM, OpenMP over
 * (batch, tile); a 1x1 stride-1 convolution is a plain GEMM (channel-wise
 * linear) on the activations in place. The f32 GEMMs run on register-blocked
 * AVX-512 kernels (pointwise.c) where the build targets AVX-512F, else on
 * the BLAS; f64 always on the BLAS. */
typedef struct sg_conv_desc {
  int nsp; /* spatial dims: 1, 2 or 3 */
  int64_t batch, cin, cout;
  int64_t in[SG_OPS_MAX_SPATIAL]; /* padded input extent */
  int64_t kernel[SG_OPS_MAX_SPATIAL];
  int64_t stride[SG_OPS_MAX_SPATIAL];   /* >= 1 */
  int64_t dilation[SG_OPS_MAX_SPATIAL]; /* >= 1 */
  /* 1: the caller holds bf16 values in its f32 buffers (the bf16 policy),
   * and f32 convolutions may multiply in bf16 with f32 accumulation: where
   * the CPU has AMX-BF16 the 2-D stride-1 direct path computes the forward
   * and dx on AMX tiles (SG_CONV_BF16=avx512: with vdpbf16ps instead; =0:
   * f32) when x and w (dx: dy and w) do hold bf16 values (checked, one
   * pass; else f32), so the result is the f32 kernels' up to the order of
   * the f32 sums and bf16's flushing of denormals; dw stays f32.
   * 0 (the default): f32 products. */
  int bf16;
  /* 1 (f32 only): the output's values rounded to the nearest bf16
   * (sg_round_bf16) by the kernel, per tile while it is in cache, instead
   * of a second pass over memory: the bf16 storage policy's rounding of an
   * op's output, the same bits. 0 (the default): f32 values. */
  int round_out;
} sg_conv_desc;

/* Check a descriptor and give the output extent per spatial dim. */
sg_status sg_conv_out_shape(const sg_conv_desc *d, int64_t *out);
size_t sg_conv_workspace_bytes(const sg_conv_desc *d, sg_dtype dt);
/* The bytes sg_conv_forward (backward 0) or sg_conv_backward with dW
 * (backward 1) — trans 1: sg_convt_* — take from sg_malloc on THIS CPU when
 * given no workspace, with nthreads OpenMP threads (<= 0: the current
 * maximum): the kernels chosen at run time (im2col, direct, pointwise)
 * need different scratch. For memory models (sg_plan_memory); 0 on a bad
 * descriptor. */
size_t sg_conv_alloc_bytes(const sg_conv_desc *d, sg_dtype dt, int trans,
                           int backward, int nthreads);
sg_status sg_conv_forward(const sg_conv_desc *d, sg_dtype dt, const void *x,
                          const void *w, const void *b, void *y, void *ws);
/* dx (padded block, OVERWRITTEN), dw (+=), db (+=); each may be NULL. */
sg_status sg_conv_backward(const sg_conv_desc *d, sg_dtype dt, const void *x,
                           const void *w, const void *dy, void *dx, void *dw,
                           void *db, void *ws);

/* Channel-wise linear (a 1x1 convolution): y[n,k,s] = b[k] + sum_c
 * w[k,c] x[n,c,s] over `spatial` positions; a BLAS GEMM per batch item. */
sg_status sg_linear_forward(sg_dtype dt, int64_t batch, int64_t cin,
                            int64_t cout, int64_t spatial, const void *x,
                            const void *w, const void *b, void *y);
/* The same, y's f32 values rounded to bf16 in the kernel (round_out). */
sg_status sg_linear_forward_bf16(sg_dtype dt, int64_t batch, int64_t cin,
                                 int64_t cout, int64_t spatial, const void *x,
                                 const void *w, const void *b, void *y);
/* dx OVERWRITTEN; dw, db (+=); each may be NULL. */
sg_status sg_linear_backward(sg_dtype dt, int64_t batch, int64_t cin,
                             int64_t cout, int64_t spatial, const void *x,
                             const void *w, const void *dy, void *dx, void *dw,
                             void *db);
/* The bytes the backward of a linear takes from sg_malloc on THIS CPU with
 * dx, dW and db wanted (sg_conv_alloc_bytes's counterpart): act >= 0
 * sg_linear_act_backward, else add 1 sg_linear_backward_add, add 0
 * sg_linear_backward; nthreads as there. For memory models
 * (sg_plan_memory). */
size_t sg_linear_alloc_bytes(sg_dtype dt, int64_t batch, int64_t cin,
                             int64_t cout, int64_t spatial, int act, int add,
                             int nthreads);
/* The linear fused with an addend and an activation (one pass over the
 * output where the f32 kernels allow, else the ops composed):
 * z = (b + W x) + z_in when add (z's contents on entry, e.g. the spectral
 * part of an FNO layer), else b + W x; then a = act(z) when a is not NULL.
 * The same values as sg_linear_forward, sg_binary_forward and
 * sg_act_forward in a row. */
sg_status sg_linear_act_forward(sg_dtype dt, int64_t batch, int64_t cin,
                                int64_t cout, int64_t spatial, const void *x,
                                const void *w, const void *b, int add, int act,
                                void *z, void *a);
/* sg_linear_backward with dx (+=): dx = dx + W^T dy, as the sum of the two
 * gradients would round; dw, db (+=); each may be NULL. */
sg_status sg_linear_backward_add(sg_dtype dt, int64_t batch, int64_t cin,
                                 int64_t cout, int64_t spatial, const void *x,
                                 const void *w, const void *dy, void *dx,
                                 void *dw, void *db);
/* The backward of sg_linear_act_forward from its saved z: dz = act'(z) dy,
 * then sg_linear_backward (add: sg_linear_backward_add) with dz; dz itself
 * is not returned. The same values as sg_act_backward and the linear's
 * backward in a row; on the AVX2 tier (GELU, f32) dz stays in cache-sized
 * chunks instead of a pass over memory. dx, dw, db may each be NULL. */
sg_status sg_linear_act_backward(sg_dtype dt, int64_t batch, int64_t cin,
                                 int64_t cout, int64_t spatial, const void *x,
                                 const void *w, int act, const void *z,
                                 const void *dy, int add, void *dx, void *dw,
                                 void *db);

/* The projection head, two linears with an activation between them:
 * z = w1 x + b1 (cin -> cmid), y = w2 act(z) + b2 (cmid -> cout); b1, b2
 * may be NULL. sg_linear_head_fused(dt, act): f32 GELU on the AVX2 tier,
 * where act(z) is formed per cache-sized chunk and never stored (a may be
 * NULL; backward recomputes it from z); elsewhere the linears composed,
 * with a = act(z) written to a (batch, cmid, spatial) and read back.
 * Backward: dx = w1^T dz (written), dw1 += dz x^T, db1 += sum dz, dw2 +=
 * dy a^T, db2 += sum dy, dz = act'(z) w2^T dy; any gradient may be NULL.
 * The values of sg_linear_act_forward + sg_linear_forward and of
 * sg_linear_backward + sg_linear_act_backward bit for bit.
 * sg_linear_head_alloc_bytes: what forward (backward 0) or backward takes
 * from sg_malloc with nthreads threads (sg_plan_memory). */
int sg_linear_head_fused(sg_dtype dt, int act);
sg_status sg_linear_head_forward(sg_dtype dt, int64_t batch, int64_t cin,
                                 int64_t cmid, int64_t cout, int64_t spatial,
                                 const void *x, const void *w1, const void *b1,
                                 int act, const void *w2, const void *b2,
                                 void *z, void *a, void *y);
sg_status sg_linear_head_backward(sg_dtype dt, int64_t batch, int64_t cin,
                                  int64_t cmid, int64_t cout, int64_t spatial,
                                  const void *x, const void *w1, int act,
                                  const void *w2, const void *z, const void *a,
                                  const void *dy, void *dx, void *dw1,
                                  void *db1, void *dw2, void *db2);
size_t sg_linear_head_alloc_bytes(sg_dtype dt, int64_t batch, int64_t cin,
                                  int64_t cmid, int64_t cout, int64_t spatial,
                                  int act, int backward, int nthreads);

/* Transposed convolution with kernel == stride (no halo needed):
 * y[n,k, i*s + a] = b[k] + sum_c x[n,c,i] w[c,k,a]   (per spatial dim)
 * x: (N, Cin, in...), w: (Cin, Cout, kernel...), y: (N, Cout, in*kernel...).
 * d->stride and d->dilation are ignored (stride = kernel). */
sg_status sg_convt_forward(const sg_conv_desc *d, sg_dtype dt, const void *x,
                           const void *w, const void *b, void *y);
sg_status sg_convt_backward(const sg_conv_desc *d, sg_dtype dt, const void *x,
                            const void *w, const void *dy, void *dx, void *dw,
                            void *db);

/* ---- pooling -------------------------------------------------------------
 * Valid windows (kernel k, stride s, dilation d: y[o] reads x[o*s + j*d],
 * j < k, per spatial dim) over `planes` = N*C planes of the padded extent
 * in[]. Average divides by the full window size k (padding counts:
 * PyTorch's count_include_pad=True; with zero padding the zeros count).
 * Max backward sends the gradient to the first maximum of each window
 * (recomputed from x); a NaN is the maximum. The kernels take the margins
 * as they are: max pooling with zero padding wants -INFINITY there (the
 * identity of max, PyTorch's convention), which the sharded op and the
 * tape's pool put there (sg_pad_fill_outside) and a caller that pads
 * itself must too. */
typedef enum sg_pool_kind { SG_POOL_AVG = 0, SG_POOL_MAX } sg_pool_kind;

/* Output extent per spatial dim (validates d for pooling). */
sg_status sg_pool_out_shape(const sg_conv_desc *d, int64_t *out);
sg_status sg_pool_forward(sg_pool_kind kind, const sg_conv_desc *d, sg_dtype dt,
                          const void *x, void *y);
/* dx (padded block) OVERWRITTEN. d->batch * d->cin planes; cout ignored. */
sg_status sg_pool_backward(sg_pool_kind kind, const sg_conv_desc *d,
                           sg_dtype dt, const void *x, const void *dy,
                           void *dx);

/* ---- up-sampling by integer factors --------------------------------------
 * NEAREST: y[o] = x[o / s] (no margin; x has extent in[]).
 * LINEAR (bi-/tri-linear, align_corners=False as PyTorch's
 * interpolate(scale_factor=s, align_corners=False)): the source coordinate
 * of output o is (o + 0.5)/s - 0.5 in the unpadded input; x must carry a
 * margin of ONE cell on each side of every spatial dim (in[] includes it),
 * and PyTorch's clamping at the border is exactly a replicate margin.
 * The output extent is s * in (nearest) or s * (in - 2) (linear). */
typedef enum sg_upsample_kind {
  SG_UPSAMPLE_NEAREST = 0,
  SG_UPSAMPLE_LINEAR
} sg_upsample_kind;

sg_status sg_upsample_forward(sg_upsample_kind kind, int nsp, int64_t planes,
                              const int64_t *in, const int64_t *scale,
                              sg_dtype dt, const void *x, void *y);
/* dx (block with margins) OVERWRITTEN. */
sg_status sg_upsample_backward(sg_upsample_kind kind, int nsp, int64_t planes,
                               const int64_t *in, const int64_t *scale,
                               sg_dtype dt, const void *dy, void *dx);

/* ---- pointwise -----------------------------------------------------------
 * n elements, contiguous. Out-of-place or in place (y == x allowed).
 * Backward overwrites dx (and da/db). */
typedef enum sg_act {
  SG_ACT_RELU = 0,
  SG_ACT_GELU, /* tanh approximation: 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))
                  (PyTorch gelu(approximate="tanh")) */
  SG_ACT_SILU, /* x * sigmoid(x) */
  SG_ACT_TANH,
  SG_ACT_COUNT
} sg_act;

const char *sg_act_name(sg_act act);
sg_status sg_act_forward(sg_act act, sg_dtype dt, int64_t n, const void *x,
                         void *y);
/* The same with y's f32 values rounded to the nearest bf16 (sg_round_bf16:
 * the bf16 storage policy) per cache-hot chunk, in the kernel's pass rather
 * than a second pass over memory; other dtypes as sg_act_forward. */
sg_status sg_act_forward_bf16(sg_act act, sg_dtype dt, int64_t n, const void *x,
                              void *y);
/* dx = dy * act'(x). */
sg_status sg_act_backward(sg_act act, sg_dtype dt, int64_t n, const void *x,
                          const void *dy, void *dx);
/* The same, dx's f32 values rounded to bf16 as sg_act_forward_bf16's. */
sg_status sg_act_backward_bf16(sg_act act, sg_dtype dt, int64_t n,
                               const void *x, const void *dy, void *dx);

typedef enum sg_binary {
  SG_BINARY_ADD = 0,
  SG_BINARY_SUB,
  SG_BINARY_MUL
} sg_binary;

/* y = a (op) b. */
sg_status sg_binary_forward(sg_binary op, sg_dtype dt, int64_t n, const void *a,
                            const void *b, void *y);
/* The same, y's f32 values rounded to bf16 as sg_act_forward_bf16's. */
sg_status sg_binary_forward_bf16(sg_binary op, sg_dtype dt, int64_t n,
                                 const void *a, const void *b, void *y);
/* da, db OVERWRITTEN (either may be NULL); a, b needed for MUL only. */
sg_status sg_binary_backward(sg_binary op, sg_dtype dt, int64_t n,
                             const void *a, const void *b, const void *dy,
                             void *da, void *db);
/* y = alpha * x; backward dx = alpha * dy (the same call). */
sg_status sg_scale(sg_dtype dt, int64_t n, double alpha, const void *x,
                   void *y);
/* y[n,c,s] = x[n,c,s] + b[c]. */
sg_status sg_bias_forward(sg_dtype dt, int64_t batch, int64_t channels,
                          int64_t spatial, const void *x, const void *b,
                          void *y);
/* db[c] += sum_{n,s} dy (dx = dy is the caller's, usually no copy). */
sg_status sg_bias_backward(sg_dtype dt, int64_t batch, int64_t channels,
                           int64_t spatial, const void *dy, void *db);

/* Concatenate k tensors (N, c_i, S) along channels into (N, sum c_i, S);
 * split is the inverse (and each is the other's backward); split skips
 * NULL parts. */
sg_status sg_concat(sg_dtype dt, int64_t batch, int64_t spatial, int k,
                    const int64_t *channels, const void *const *parts, void *y);
sg_status sg_split(sg_dtype dt, int64_t batch, int64_t spatial, int k,
                   const int64_t *channels, const void *x, void *const *parts);

/* ---- normalisation -------------------------------------------------------
 * x: (N, C, S) with S the local spatial size. Statistic groups:
 *   BATCH     one per channel c, over (N, S)            nstat = C
 *   INSTANCE  one per (n, c), over S                    nstat = N*C
 *   GROUP     one per (n, g), over (C/G channels, S)    nstat = N*G
 *   LAYER     one per (n, s), over C ("channels-first"  nstat = N*S
 *             layer norm as in ConvNeXt)
 * Partial statistics (count, mean, M2) of a block merge with Chan's formula
 * (order-dependent in rounding only; sg_norm_stats_allreduce merges in rank
 * order, so it is deterministic). With merged statistics,
 * y = (x - mean) / sqrt(M2/count + eps) * gamma[c] + beta[c]
 * (biased variance, as PyTorch normalisation layers); gamma/beta may be NULL
 * (no affine). */
typedef enum sg_norm_kind {
  SG_NORM_BATCH = 0,
  SG_NORM_INSTANCE,
  SG_NORM_GROUP,
  SG_NORM_LAYER
} sg_norm_kind;

typedef struct sg_norm_desc {
  sg_norm_kind kind;
  int64_t batch, channels, spatial;
  int64_t groups; /* GROUP only; channels % groups == 0 */
  double eps;
  /* 1 (f32 only): sg_norm_forward rounds y's values (sg_norm_backward:
   * dx's) to the nearest bf16 per plane (block) while in cache, as
   * sg_conv_desc.round_out. */
  int round_out;
} sg_norm_desc;

typedef struct sg_moments {
  double count, mean, m2;
} sg_moments;

/* Number of statistic groups of a descriptor (validates it). */
sg_status sg_norm_nstat(const sg_norm_desc *d, int64_t *nstat);
/* Partial statistics of this block (overwrites stats[nstat]). */
sg_status sg_norm_stats(const sg_norm_desc *d, sg_dtype dt, const void *x,
                        sg_moments *stats);
/* Chan's merge: a = a (+) b, element-wise over n groups. */
void sg_moments_merge(sg_moments *a, const sg_moments *b, int64_t n);
/* Merge partial statistics over comm in rank order (all ranks get the same
 * bits). Collective over comm. */
sg_status sg_norm_stats_allreduce(sg_moments *stats, int64_t n, MPI_Comm comm);
sg_status sg_norm_forward(const sg_norm_desc *d, sg_dtype dt, const void *x,
                          const sg_moments *stats, const void *gamma,
                          const void *beta, void *y);
/* Backward in two steps. First the partial sums of this block,
 * sums[2*nstat] = (sum dy*gamma, sum dy*gamma*xhat) per group (overwritten);
 * a sharded caller sums them over the shards (sg_sum_allreduce), then: */
sg_status sg_norm_backward_sums(const sg_norm_desc *d, sg_dtype dt,
                                const void *x, const sg_moments *stats,
                                const void *gamma, const void *dy,
                                double *sums);
/* dx OVERWRITTEN; dgamma, dbeta (+=; per channel) may be NULL. */
sg_status sg_norm_backward(const sg_norm_desc *d, sg_dtype dt, const void *x,
                           const sg_moments *stats, const void *gamma,
                           const void *dy, const double *sums, void *dx,
                           void *dgamma, void *dbeta);

/* Sum n doubles over comm: every rank's array gathered and summed in rank
 * order (deterministic; same bits on every rank). Collective over comm. */
sg_status sg_sum_allreduce(double *v, int64_t n, MPI_Comm comm);

/* ---- reductions and losses -----------------------------------------------
 * Local partial sums (double, fixed blocking) plus a finish step that a
 * sharded caller runs after summing the partials over the shards.
 *   SUM      partial[0] = sum x                       value = partial[0]
 *   MEAN     partial = (sum x, count)                 value = sum/count
 *   MSE      partial = (sum (p-t)^2, count)           value = sum/count
 *   REL_L2   per batch item i (x: (N, rest)):
 *            partial[2i] = sum (p-t)^2, partial[2i+1] = sum t^2
 *            value = mean_i sqrt(partial[2i] / partial[2i+1])
 *            (the FNO paper's relative L2 loss, LpLoss(p=2) averaged).
 * npartial: 1, 2, 2, 2*batch. t is ignored for SUM/MEAN. */
typedef enum sg_loss_kind {
  SG_LOSS_SUM = 0,
  SG_LOSS_MEAN,
  SG_LOSS_MSE,
  SG_LOSS_REL_L2
} sg_loss_kind;

int64_t sg_loss_npartial(sg_loss_kind kind, int64_t batch);
/* x: (batch, n/batch) elements; t same shape (MSE, REL_L2). */
sg_status sg_loss_partial(sg_loss_kind kind, sg_dtype dt, int64_t batch,
                          int64_t n, const void *p, const void *t,
                          double *partial);
sg_status sg_loss_finish(sg_loss_kind kind, int64_t batch,
                         const double *partial, double *value);
/* Given the GLOBAL (summed) partials and the upstream gradient g of the
 * value: dp (and dt for MSE/REL_L2, may be NULL) OVERWRITTEN. */
sg_status sg_loss_backward(sg_loss_kind kind, sg_dtype dt, int64_t batch,
                           int64_t n, const void *p, const void *t,
                           const double *partial, double g, void *dp,
                           void *dt_grad);

/* ---- attention (fused, blocked; docs/attention.md) -----------------------
 * Scaled dot-product attention per (batch, head) without the Nq x Nk score
 * matrix in memory: FlashAttention-2's tiling with an online softmax.
 * Layout (batch, heads, tokens, head_dim), row-major and contiguous:
 * q, o: (B, H, Nq, d); k, v: (B, H, Nk, d); lse: (B, H, Nq), the per-row
 * log-sum-exp of the scaled scores, lse[i] = log sum_j e^{scale q_i.k_j},
 * kept for the backward and for merging partial results (ring attention).
 * lse has the element type (f32 or f64), like q.
 *
 * Causal masking: query i sees key j only where j <= i + causal_offset
 * (causal_offset 0: PyTorch's is_causal, top-left aligned; Nk - Nq: the
 * last query sees every key; for a K/V block of a longer sequence, the
 * query block's first global position minus the key block's). A query row
 * that sees no key (all masked, or Nk == 0) gets o = 0 and lse = -inf,
 * which sg_attention_merge treats as empty.
 *
 * Threading: forward OpenMP over (batch, head, query block); backward over
 * (batch, head) (each thread owns a head's dk, dv and dq, no atomics); BLAS
 * single-threaded inside. Both give the same bits for any thread count. */
typedef struct sg_attn_desc {
  int64_t batch, heads; /* B, H >= 0 */
  int64_t nq, nk;       /* query and key/value tokens per head, >= 0 */
  int64_t head_dim;     /* d >= 1 */
  double scale;         /* softmax scale; 0 means 1/sqrt(head_dim) */
  int causal;           /* 1: mask keys j > i + causal_offset */
  int64_t causal_offset;
} sg_attn_desc;

/* dt: f32, f64, or bf16 storage (q, k, v, o, dout, dq, dk, dv as sg_bf16,
 * lse f32; computed in f32 and rounded once: docs/attention.md).
 * Workspace of forward and backward (both fit; depends on the thread
 * count and on nq). 0 for a bad descriptor. */
size_t sg_attention_workspace_bytes(const sg_attn_desc *d, sg_dtype dt);
/* o = softmax(scale q k^T [masked]) v, and lse (may be NULL: not kept). */
sg_status sg_attention_forward(const sg_attn_desc *d, sg_dtype dt,
                               const void *q, const void *k, const void *v,
                               void *o, void *lse, void *ws);
/* The FlashAttention-2 backward: scores recomputed per tile from q, k and
 * lse; D = rowsum(dout * o). dq, dk, dv OVERWRITTEN (each may be NULL: not
 * needed). For a K/V block of ring attention pass the MERGED o and lse of
 * the whole sequence: dk, dv are then that block's and dq its share (the
 * caller sums dq over the blocks). */
sg_status sg_attention_backward(const sg_attn_desc *d, sg_dtype dt,
                                const void *q, const void *k, const void *v,
                                const void *o, const void *lse,
                                const void *dout, void *dq, void *dk, void *dv,
                                void *ws);
/* Merge partial attention over disjoint key sets, row by row (rows =
 * B*H*Nq, each head_dim wide): (o, lse) = (o, lse) (+) (o_b, lse_b), with
 * w = e^{lse - m}, w_b = e^{lse_b - m}, m = max(lse, lse_b):
 * o = (w o + w_b o_b) / (w + w_b), lse = m + log(w + w_b); an lse of -inf
 * is an empty part. Attention over [K1; K2] = merge(attn(K1), attn(K2)) up
 * to rounding: what ring attention does with each K/V block it receives. */
sg_status sg_attention_merge(sg_dtype dt, int64_t rows, int64_t head_dim,
                             void *o, void *lse, const void *o_b,
                             const void *lse_b);

#ifdef __cplusplus
}
#endif
#endif /* SG_OPS_H */
