/* shardgrid — spectral layers on sharded grids: the FNO spectral
 * convolution and spectral derivatives on a periodic box.
 *
 * Both run on the distributed FFT (sg_fft.h) and take the same raw
 * description of a sharded array (sg_fft_desc: global shape, the mesh dim
 * splitting each spatial dim, the balanced split rule), so a ShardTensor
 * op can wrap them. Data blocks are the local blocks of sg_fft.h:
 * row-major (batch, channels, local spatial box), real, in the desc's dtype.
 */
#ifndef SG_SPECTRAL_H
#define SG_SPECTRAL_H

#include <mpi.h>
#include <stdint.h>

#include "sg_fft.h"
#include "sg_mesh.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- spectral convolution (the FNO layer) ---------------------------------
 *
 *   y = irfftn( pad( W . trunc( rfftn(x) ) ) )
 *
 * x: (nbatch, cin, spatial) real; y: (nbatch, cout, spatial) real.
 * trunc keeps desc->keep[d] modes per dim (sg_fft.h: 2*keep positive and
 * negative frequencies in non-halved dims, the first keep in the halved
 * one; every keep[d] must be >= 1), and only kept modes travel in the
 * transposes. W is complex, (cin, cout, K0, K1[, K2]) with K the kept
 * lengths, in the kept-mode order of sg_fft_plan_freq, re/im interleaved:
 *   yhat[b, o, k] = sum_i xhat[b, i, k] * W[i, o, k].
 * The inverse is normalised by 1/N (desc->norm is ignored: BACKWARD).
 *
 * W has one of two layouts (sg_spectral_conv_set_weight_layout):
 * - REPLICATE (the default): every rank holds all of W and uses the modes
 *   it owns. Its gradient from sg_spectral_conv_backward is a local partial
 *   sum (the rank's modes and batch): the caller must sum it over every
 *   rank of the FFT's mesh dims (and the data-parallel dims), i.e.
 *   Partial(sum) there, like any weight used by sharded activations.
 * - SHARD_MODES: each rank holds only the modes of its spectral box
 *   (sg_spectral_conv_weight_box), W_local = W[:, :, box] as a contiguous
 *   (cin, cout, extent...) complex array, i.e. W is Shard over the FFT's
 *   mesh dims, split the way the spectrum is. Nothing is gathered, and the
 *   gradient of each local mode is complete over the domain: it is Partial
 *   only over the data-parallel dims. Parameters, gradients and optimizer
 *   state of the spectral weights then shrink with the domain ranks. */
typedef struct sg_spectral_conv *sg_spectral_conv_t;

typedef enum sg_spectral_weight_layout {
  SG_SPECTRAL_WEIGHT_REPLICATE = 0,
  SG_SPECTRAL_WEIGHT_SHARD_MODES
} sg_spectral_weight_layout;

/* desc->batch is the number of samples (nbatch). Collective over the mesh
 * (or comm); the same desc on every rank; errors agree. */
sg_status sg_spectral_conv_create(sg_mesh_t mesh, const sg_fft_desc *desc,
                                  int64_t cin, int64_t cout,
                                  sg_spectral_conv_t *conv);
sg_status sg_spectral_conv_create_comms(MPI_Comm comm, int naxes,
                                        const MPI_Comm *axes,
                                        const sg_fft_desc *desc, int64_t cin,
                                        int64_t cout, sg_spectral_conv_t *conv);
/* Accepts NULL, sets *conv to NULL. Collective (as sg_fft_plan_destroy). */
sg_status sg_spectral_conv_destroy(sg_spectral_conv_t *conv);
/* The layout of the W and dW passed to forward and backward from now on.
 * Not collective, but every rank of the FFT must use the same layout.
 * SHARD_MODES frees the buffer that gathers replicated W on a split
 * spectrum; going back to REPLICATE allocates it again (SG_ERR_ALLOC). */
sg_status sg_spectral_conv_set_weight_layout(sg_spectral_conv_t conv,
                                             sg_spectral_weight_layout layout);

/* Queries; not collective. */
/* Scalars of W: 2 * cin * cout * prod(K). */
int64_t sg_spectral_conv_weight_count(sg_spectral_conv_t conv);
/* Scalars of this rank's W in the SHARD_MODES layout:
 * 2 * cin * cout * (local modes); may be 0 (a rank owning no kept mode). */
int64_t sg_spectral_conv_local_weight_count(sg_spectral_conv_t conv);
/* This rank's box of kept modes: kept[d] the global kept lengths K (W's
 * mode dims), offset[d] and extent[d] the box (any may be NULL). Returns
 * the number of spatial dims. W_local[i, o, j...] = W[i, o, offset + j...]
 * (re/im interleaved). */
int sg_spectral_conv_weight_box(sg_spectral_conv_t conv, int64_t *kept,
                                int64_t *offset, int64_t *extent);
/* Scalars of the saved spectrum xhat: 2 * nbatch * cin * local modes. */
int64_t sg_spectral_conv_spectrum_count(sg_spectral_conv_t conv);
/* The FFT plans for the input (batch nbatch*cin) and output (nbatch*cout)
 * channels; they share the real and spectral layouts. */
sg_fft_plan_t sg_spectral_conv_plan(sg_spectral_conv_t conv, int output);

/* Forward. xhat, if not NULL, receives the truncated spectrum of x
 * (spectrum_count scalars) to hand to backward. Collective over the FFT's
 * axes. */
sg_status sg_spectral_conv_forward(sg_spectral_conv_t conv, const void *x,
                                   const void *w, void *y, void *xhat);
/* Backward. dx (NULL: not computed) is overwritten; dw (NULL: not
 * computed) is accumulated (+=) with this rank's partial sum — with
 * REPLICATE weights reduce it over the FFT's mesh dims (and data-parallel
 * dims) before use; with SHARD_MODES over the data-parallel dims only (dw
 * is the local box, like w). xhat is the
 * spectrum saved by forward, or NULL to recompute it from x. Collective
 * over the FFT's axes, whatever is NULL (every rank makes the calls). */
sg_status sg_spectral_conv_backward(sg_spectral_conv_t conv, const void *x,
                                    const void *xhat, const void *w,
                                    const void *dy, void *dx, void *dw);

/* The same two on CUDA device pointers (x, w, y, xhat, dy, dx, dw in the
 * memory of the current device), for one process: the plans must hold the
 * whole domain and every kept mode on this rank (else
 * SG_ERR_NOT_SUPPORTED; a split domain: the _dev pair below); W in either layout (they coincide there). cuFFT's
 * r2c and c2r over the spatial dims, the kept modes gathered, the per-mode
 * channel contraction and the scatter back run the host's arithmetic
 * (f64 to rounding); the cuFFT plans and the device scratch are made on
 * first use (SG_ERR_CUFFT / SG_ERR_CUDA) and freed with the convolution.
 * Asynchronous on the legacy default stream. Not collective. Built without
 * CUDA: SG_ERR_NOT_SUPPORTED. */
sg_status sg_spectral_conv_forward_cuda(sg_spectral_conv_t conv, const void *x,
                                        const void *w, void *y, void *xhat);
sg_status sg_spectral_conv_backward_cuda(sg_spectral_conv_t conv, const void *x,
                                         const void *xhat, const void *w,
                                         const void *dy, void *dx, void *dw);

/* The same two on a split domain, on dev's buffers (issue 22): the
 * convolution's transforms re-planned with device stages
 * (SG_FFT_DEVICE_STAGES) over the same communicators, their transposes
 * packed and unpacked on the device and moved by the comm layer over
 * mesh's groups (NCCL on device buffers; each FFT axis must be one mesh
 * dim of mesh), cuFFT per pencil, the kept-mode contraction of this
 * rank's modes (sg_spec_inl.h; a replicated W's local modes gathered, dW
 * added back) as the host's split path; W in either layout, with the
 * host's gradients (Partial or the local box). dev host: the same steps on
 * host memory (FFTW for cuFFT, the SG_HD passes in host loops, MPI): the
 * device path's arithmetic, what the tests and the tape's faked device
 * run. On a GPU with the whole domain on this rank: the one-process path
 * above. Plans and scratch on first use (again for another dev or mesh),
 * freed with the convolution. Collective over the convolution's ranks
 * (every rank, whatever is NULL). */
sg_status sg_spectral_conv_forward_dev(sg_spectral_conv_t conv, sg_mesh_t mesh,
                                       sg_device dev, const void *x,
                                       const void *w, void *y, void *xhat);
sg_status sg_spectral_conv_backward_dev(sg_spectral_conv_t conv, sg_mesh_t mesh,
                                        sg_device dev, const void *x,
                                        const void *xhat, const void *w,
                                        const void *dy, void *dx, void *dw);

/* ---- spectral derivatives on a periodic box -------------------------------
 *
 * The box has lengths L[d] (NULL: 2*pi for every dim); wavenumbers are
 * kappa_d = 2*pi*k_d / L[d] with k_d = sg_fft_plan_freq. On a spectral block
 * of a plan (in place):
 *   SG_SPECTRAL_DERIV        multiply by i*kappa_dim (0 at the Nyquist mode
 *                            of an even length, which has no real odd
 *                            derivative);
 *   SG_SPECTRAL_LAPLACIAN    multiply by -|kappa|^2;
 *   SG_SPECTRAL_INV_LAPLACIAN multiply by -1/|kappa|^2 and set the mean
 *                            mode to 0 (the zero-mean solution of
 *                            lap u = f - mean f).
 * Not collective (purely local). */
typedef enum sg_spectral_op {
  SG_SPECTRAL_DERIV = 0,
  SG_SPECTRAL_LAPLACIAN,
  SG_SPECTRAL_INV_LAPLACIAN
} sg_spectral_op;

sg_status sg_spectral_apply(sg_fft_plan_t plan, sg_spectral_op op, int dim,
                            const double *lengths, void *yhat);

/* Real-space helpers: out = op(x) for every batch entry (forward, apply,
 * inverse; any norm). work is a spectral scratch of
 * sg_fft_plan_local_count(plan, SG_FFT_SPACE_SPECTRAL) scalars (NULL: one
 * is allocated for the call). With a plan that keeps fewer modes, the
 * result is that of the low-passed field. Collective over the plan's axes. */
sg_status sg_spectral_derivative(sg_fft_plan_t plan, int dim,
                                 const double *lengths, const void *x,
                                 void *out, void *work);
sg_status sg_spectral_laplacian(sg_fft_plan_t plan, const double *lengths,
                                const void *x, void *out, void *work);
sg_status sg_spectral_inv_laplacian(sg_fft_plan_t plan, const double *lengths,
                                    const void *x, void *out, void *work);

#ifdef __cplusplus
}
#endif
#endif /* SG_SPECTRAL_H */
