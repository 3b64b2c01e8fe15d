/* shardgrid — the op kernels on CUDA device pointers (built only with the
 * CUDA backend; shardtensor/ops/cuda/ops_cuda.cu).
 *
 * Each launcher runs the SG_HD element functions the host loops use
 * (sg_ops_inl.h, models/optim_inl.h), in grid-stride kernels on the given
 * cudaStream_t (passed as void *, e.g. sg_stream_native(); NULL is the
 * legacy default stream). Asynchronous on the stream; argument errors and
 * launch errors are returned, kernel faults show at the next sync. The
 * arguments mean what the host functions' do (sg_ops.h, sg_optim.h); the
 * op device table (models/sg_op_device.h) names these entry points.
 * Numerics: f64 matches the host to rounding (1e-12 relative, tested);
 * f32 may differ by a few ulp (the device uses expf/tanhf and contracts
 * to FMA where the host does not: tests/cuda/test_cuda_kernels.c). */
#ifndef SG_OPS_CUDA_H
#define SG_OPS_CUDA_H

#include <stdint.h>

#include "sg_config.h"
#include "sg_ops.h"
#include "sg_optim.h"

#ifdef __cplusplus
extern "C" {
#endif

#if SG_HAVE_CUDA
sg_status sg_act_fwd_cuda(sg_act act, sg_dtype dt, int64_t n, const void *x,
                          void *y, void *stream);
sg_status sg_act_bwd_cuda(sg_act act, sg_dtype dt, int64_t n, const void *x,
                          const void *dy, void *dx, void *stream);
sg_status sg_binary_fwd_cuda(sg_binary op, sg_dtype dt, int64_t n,
                             const void *a, const void *b, void *y,
                             void *stream);
/* da, db OVERWRITTEN (either may be NULL); a, b read for MUL only. */
sg_status sg_binary_bwd_cuda(sg_binary op, sg_dtype dt, int64_t n,
                             const void *a, const void *b, const void *dy,
                             void *da, void *db, void *stream);
sg_status sg_scale_cuda(sg_dtype dt, int64_t n, double alpha, const void *x,
                        void *y, void *stream);
sg_status sg_bias_fwd_cuda(sg_dtype dt, int64_t batch, int64_t channels,
                           int64_t spatial, const void *x, const void *b,
                           void *y, void *stream);
/* db[c] += sum_{n,s} dy. */
sg_status sg_bias_bwd_cuda(sg_dtype dt, int64_t batch, int64_t channels,
                           int64_t spatial, const void *dy, void *db,
                           void *stream);
/* Pooling (sg_pool_forward/backward): d on the host, data on the device;
 * dx OVERWRITTEN. The backward gathers per input cell (no atomics). */
sg_status sg_pool_fwd_cuda(sg_pool_kind kind, const sg_conv_desc *d,
                           sg_dtype dt, const void *x, void *y, void *stream);
sg_status sg_pool_bwd_cuda(sg_pool_kind kind, const sg_conv_desc *d,
                           sg_dtype dt, const void *x, const void *dy, void *dx,
                           void *stream);
/* Up-sampling (sg_upsample_forward/backward): in, scale on the host, data
 * on the device; dx OVERWRITTEN. The backward gathers per input cell. */
sg_status sg_upsample_fwd_cuda(sg_upsample_kind kind, int nsp, int64_t planes,
                               const int64_t *in, const int64_t *scale,
                               sg_dtype dt, const void *x, void *y,
                               void *stream);
sg_status sg_upsample_bwd_cuda(sg_upsample_kind kind, int nsp, int64_t planes,
                               const int64_t *in, const int64_t *scale,
                               sg_dtype dt, const void *dy, void *dx,
                               void *stream);
/* Channel-wise linear (sg_linear_forward/backward) on cuBLAS
 * (linear_cublas.cu): strided-batched GEMMs over the batch, one cuBLAS
 * handle per process (made on first use on the current device; not
 * thread-safe). b, dx, dw, db may be NULL; dx OVERWRITTEN, dw and db +=.
 * Extents up to INT32_MAX. */
sg_status sg_linear_fwd_cuda(sg_dtype dt, int64_t batch, int64_t cin,
                             int64_t cout, int64_t spatial, const void *x,
                             const void *w, const void *b, void *y,
                             void *stream);
sg_status sg_linear_bwd_cuda(sg_dtype dt, int64_t batch, int64_t cin,
                             int64_t cout, int64_t spatial, const void *x,
                             const void *w, const void *dy, void *dx, void *dw,
                             void *db, void *stream);
/* Convolution (sg_conv_forward/backward) on cuBLAS (conv_cublas.cu): per
 * chunk of batch items the column matrix (sg_im2col_src), one
 * strided-batched GEMM, the bias kernel; the backward's dx as W^T dy and
 * the col2im gather (sg_col2im_cell, no atomics), dW += dy col^T item by
 * item. d on the host, data on the device; valid windows on the padded
 * block d->in (the tape pads), d->bf16 ignored (f32 products), round_out
 * refused (host only). ws must be NULL (the column matrices are allocated
 * stream-ordered, at most 2^26 elements a chunk). dx OVERWRITTEN, dw and
 * db +=; each may be NULL. Extents within cuBLAS's int. */
sg_status sg_conv_fwd_cuda(const sg_conv_desc *d, sg_dtype dt, const void *x,
                           const void *w, const void *b, void *y, void *ws,
                           void *stream);
sg_status sg_conv_bwd_cuda(const sg_conv_desc *d, sg_dtype dt, const void *x,
                           const void *w, const void *dy, void *dx, void *dw,
                           void *db, void *ws, void *stream);
/* Transposed convolution, kernel == stride (sg_convt_forward/backward):
 * T = W^T x on cuBLAS, y gathered from T by sg_convt_src plus b; the
 * backward gathers dy into T's shape, dx = W T, dW += x T^T item by item.
 * dx OVERWRITTEN, dw and db +=; each may be NULL. */
sg_status sg_convt_fwd_cuda(const sg_conv_desc *d, sg_dtype dt, const void *x,
                            const void *w, const void *b, void *y,
                            void *stream);
sg_status sg_convt_bwd_cuda(const sg_conv_desc *d, sg_dtype dt, const void *x,
                            const void *w, const void *dy, void *dx, void *dw,
                            void *db, void *stream);
/* Layout ops (layout_cuda.cu), one thread per element over sg_ops_inl.h's
 * maps. concat's part: to_whole 1 copies the part (batch, ch, spatial)
 * src into dst, the concatenation of ctot channels, at channel off;
 * to_whole 0 reads it back (split). */
sg_status sg_cat_part_cuda(sg_dtype dt, int64_t batch, int64_t spatial,
                           int64_t ch, int64_t ctot, int64_t off, int to_whole,
                           const void *src, void *dst, void *stream);
/* fno3d_broadcast_t: y (planes, nt, spatial) = x (planes, spatial) at every
 * t; the backward's dx (OVERWRITTEN) is the sum over t in t order. */
sg_status sg_bcast_t_fwd_cuda(sg_dtype dt, int64_t planes, int64_t nt,
                              int64_t spatial, const void *x, void *y,
                              void *stream);
sg_status sg_bcast_t_bwd_cuda(sg_dtype dt, int64_t planes, int64_t nt,
                              int64_t spatial, const void *dy, void *dx,
                              void *stream);
/* fno3d_time_window: out (planes, t2, spatial) holds in's (planes, t1,
 * spatial) first min(t1, t2) steps, zeros after (its own adjoint). */
sg_status sg_time_window_cuda(sg_dtype dt, int64_t planes, int64_t spatial,
                              int64_t t1, int64_t t2, const void *in, void *out,
                              void *stream);
/* roll of lead planes of extent ext[3] by shift[3] (each in (-ext, ext)):
 * fwd dst[i] = src[(i + shift) mod ext], else its transpose. */
sg_status sg_roll_cuda(sg_dtype dt, int64_t lead, const int64_t *ext,
                       const int64_t *shift, int fwd, const void *src,
                       void *dst, void *stream);
/* add_field: y[b, i] = x[b, i] + p[i] over batch samples of m; the
 * backward's dp[i] += dy[0, i] + dy[1, i] + ... in batch order. */
sg_status sg_add_field_fwd_cuda(sg_dtype dt, int64_t batch, int64_t m,
                                const void *x, const void *p, void *y,
                                void *stream);
sg_status sg_add_field_bwd_cuda(sg_dtype dt, int64_t batch, int64_t m,
                                const void *dy, void *dp, void *stream);
/* Padding (sg_pad_forward/backward) on the device: in, pad, mode on the
 * host; one thread per padded cell (sg_pad_src_cell), the adjoint a gather
 * per source cell (sg_pad_grad_cell, no atomics); dsrc OVERWRITTEN. The
 * tape pads device inputs of window ops with these. */
sg_status sg_pad_fwd_cuda(sg_dtype dt, int nsp, int64_t planes,
                          const int64_t *in, const int64_t (*pad)[2],
                          const sg_pad_mode *mode, const void *src, void *dst,
                          void *stream);
sg_status sg_pad_bwd_cuda(sg_dtype dt, int nsp, int64_t planes,
                          const int64_t *in, const int64_t (*pad)[2],
                          const sg_pad_mode *mode, const void *dpad, void *dsrc,
                          void *stream);
/* Fused attention (sg_attention_forward/backward; attention_cuda.cu): d on
 * the host, data on the device, the host's layout and conventions (causal
 * offset, Nq != Nk, lse = -inf for a row without keys, lse may be NULL in
 * the forward); f32 or f64 (bf16 storage: host only). One thread per query
 * row (o, lse; D; dq) or key row (dk, dv, no atomics) over sg_attn_inl.h's
 * SG_HD row functions, O(N d) memory (the backward allocates D, B*H*Nq
 * values, stream-ordered). dq, dk, dv OVERWRITTEN, each may be NULL. */
sg_status sg_attention_fwd_cuda(const sg_attn_desc *d, sg_dtype dt,
                                const void *q, const void *k, const void *v,
                                void *o, void *lse, void *stream);
sg_status sg_attention_bwd_cuda(const sg_attn_desc *d, sg_dtype dt,
                                const void *q, const void *k, const void *v,
                                const void *o, const void *lse,
                                const void *dout, void *dq, void *dk, void *dv,
                                void *stream);
/* Window attention (the Swin op, models/ag_swin.c; attention_cuda.cu): g
 * (sg_wattn_inl.h) on the host, data on the device, arithmetic in f64 as
 * the host op's. The forward writes o and P (the softmax rows of every
 * window and head, windows * T * T doubles, the op's saved state); the
 * backward (from P) OVERWRITES dq, dk, dv and adds to dbias (each may be
 * NULL): one thread per query row (r_i and dq), per key row (dk, dv) and
 * per bias entry (a gather over the windows: no atomics); it allocates r
 * (windows * T doubles) stream-ordered. */
struct sg_wattn_geo;
sg_status sg_wattn_fwd_cuda(sg_dtype dt, const struct sg_wattn_geo *g,
                            const void *q, const void *k, const void *v,
                            const void *bias, double *P, void *o, void *stream);
sg_status sg_wattn_bwd_cuda(sg_dtype dt, const struct sg_wattn_geo *g,
                            const void *q, const void *k, const void *v,
                            const void *dout, const double *P, void *dq,
                            void *dk, void *dv, void *dbias, void *stream);
/* The attention op's layout copy (ag_heads_copy): x (b, h*d, t) -> y (b, h,
 * t, d), back = 1 the other way. */
sg_status sg_heads_copy_cuda(sg_dtype dt, int64_t b, int64_t h, int64_t t,
                             int64_t d, void *x, void *y, int back,
                             void *stream);
/* sg_pad_fill_outside on the device (max pooling's -inf margins): box,
 * origin, extent, mode on the host, x on the device; the cells of each
 * plane outside the domain along zero-padded dims set to value (the
 * geometry sg_fill_outside_geom, the cell test sg_fill_outside_cell). */
sg_status sg_pad_fill_outside_cuda(sg_dtype dt, int nsp, int64_t planes,
                                   const int64_t *box, const int64_t *origin,
                                   const int64_t *extent,
                                   const sg_pad_mode *mode, double value,
                                   void *x, void *stream);
/* partial: sg_loss_npartial(kind, batch) doubles in DEVICE memory. */
sg_status sg_loss_partial_cuda(sg_loss_kind kind, sg_dtype dt, int64_t batch,
                               int64_t n, const void *p, const void *t,
                               double *partial, void *stream);
/* partial: the GLOBAL partials in DEVICE memory. */
sg_status sg_loss_bwd_cuda(sg_loss_kind kind, sg_dtype dt, int64_t batch,
                           int64_t n, const void *p, const void *t,
                           const double *partial, double g, void *dp,
                           void *dt_grad, void *stream);
/* Normalisation (sg_norm_stats/forward/backward_sums/backward): d on the
 * host, data, stats and sums on the device; instance, group and layer
 * norm (batch norm: SG_ERR_NOT_SUPPORTED, its statistics span the batch;
 * host only). The partial statistics and sums of this block, as on the
 * host (a sharded caller merges them over the shards). Instance/group: one
 * block per statistic group (its planes are contiguous), warp reductions;
 * layer: one thread per token, the channel sums in the host's order.
 * dx OVERWRITTEN; dgamma, dbeta (+=) may be NULL. */
sg_status sg_norm_stats_cuda(const sg_norm_desc *d, sg_dtype dt, const void *x,
                             sg_moments *stats, void *stream);
sg_status sg_norm_fwd_cuda(const sg_norm_desc *d, sg_dtype dt, const void *x,
                           const sg_moments *stats, const void *gamma,
                           const void *beta, void *y, void *stream);
sg_status sg_norm_sums_cuda(const sg_norm_desc *d, sg_dtype dt, const void *x,
                            const sg_moments *stats, const void *gamma,
                            const void *dy, double *sums, void *stream);
sg_status sg_norm_bwd_cuda(const sg_norm_desc *d, sg_dtype dt, const void *x,
                           const sg_moments *stats, const void *gamma,
                           const void *dy, const double *sums, void *dx,
                           void *dgamma, void *dbeta, void *stream);
/* *out = sum x[i]^2 in double (fixed blocking: the same bits every run; a
 * different order from the host's sg_sumsq_f32), synchronous. */
sg_status sg_sumsq_f32_cuda(const float *x, int64_t n, double *out,
                            void *stream);
sg_status sg_adamw_step_f32_cuda(float *param, const float *grad, float *m,
                                 float *v, int64_t n, int64_t t, double lr,
                                 double grad_scale, const sg_adamw_config *cfg,
                                 void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif /* SG_OPS_CUDA_H */
