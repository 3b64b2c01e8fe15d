/* shardgrid — distributed FFTs on sharded grids (slab and pencil layouts).
 *
 * The data is a raw description of a sharded array, so that a ShardTensor
 * can wrap it: a global spatial shape (2-D or 3-D), for every spatial dim
 * the mesh dim that splits it (or -1), the balanced split rule
 * (sg_split_part: the first n % p ranks get one more), and leading
 * batch x channel dims carried along whole ("batch", their product). The
 * local block of a rank is row-major (batch, n0, n1[, n2]); real data holds
 * one scalar per element, complex data two (re, im interleaved), in the
 * plan's dtype (f32 or f64).
 *
 * Forward is a real-to-complex transform equal to one-process FFTW
 * (fftw_plan_dft_r2c over the spatial dims): the last spatial dim is halved
 * to n/2+1 modes. It runs as local FFTW transforms along the dims that are
 * whole on a rank, and all-to-all(-v) transposes inside one mesh dim's group
 * that make the next dim whole. Inverse is the complex-to-real transform
 * (the exact reverse of the forward stages). Both have an adjoint (for
 * autograd: the gradient of a real loss with respect to a complex value is
 * d/dRe + i d/dIm, the adjoint under the real inner product
 * Re sum conj(a) b).
 *
 * Mode truncation (sg_fft_desc.keep): a spectral (FNO) layer keeping modes
 * drops the others right after each local transform, before the next
 * transpose, so only the kept modes travel; the inverse zero-pads them back.
 * In a non-halved dim keep[d] = m keeps frequencies 0..m-1 and -m..-1
 * (2m entries, stored in that order); in the halved (last) dim it keeps the
 * first m. keep[d] = 0 keeps everything.
 *
 * Layouts: the plan reports which rank owns which modes (the spectral
 * layout) and the real layout, as sg_fft_layout values (splitting mesh
 * dims per array dim, outer first) and as boxes per rank. The spectral
 * layout generally differs from the real one (slab split on dim 0 in real
 * space is split on dim 1 in spectral space).
 *
 * A plan is created once (FFTW plans in float or double, with FFTW's OpenMP
 * threads; FFTW_ESTIMATE unless SG_FFT_MEASURE is given, so results are
 * deterministic) and reused; it owns its scratch buffers, so executing it
 * allocates nothing. A plan is not thread safe: one execution at a time.
 */
#ifndef SG_FFT_H
#define SG_FFT_H

#include <mpi.h>
#include <stdint.h>

#include "sg_device.h"
#include "sg_dtype.h"
#include "sg_mesh.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_FFT_MAX_DIMS 3 /* spatial dims */
#define SG_FFT_MAX_AXES SG_MESH_MAX_DIMS

typedef struct sg_fft_plan *sg_fft_plan_t;
typedef struct sg_fft_transpose *sg_fft_transpose_t;

/* Normalisation. BACKWARD (the default, as numpy/torch): forward unscaled,
 * inverse scaled by 1/N (N = product of the real spatial shape), so the
 * inverse of the forward is the identity. NONE: both unscaled (FFTW).
 * ORTHO: both scaled by 1/sqrt(N). */
typedef enum sg_fft_norm {
  SG_FFT_NORM_BACKWARD = 0,
  SG_FFT_NORM_NONE,
  SG_FFT_NORM_ORTHO
} sg_fft_norm;

/* Flags. */
#define SG_FFT_MEASURE 1u /* FFTW_MEASURE instead of FFTW_ESTIMATE */
/* Transposes through MPI_Alltoallv even when every rank of a group shares
 * a node (by default such groups exchange through an MPI shared-memory
 * window: pack into one's own segment, one barrier, unpack from the
 * peers' segments). */
#define SG_FFT_MPI_ALLTOALL 2u
/* The stages a device plan runs (sg_spectral_conv_forward_dev on a split
 * domain): no pruned first stage, no matrix-product DFT, no chunks, the
 * r2c over the last dim alone, transposes without shared-memory windows.
 * On a host plan: that stage list with FFTW (the device path's structure
 * on the host; its transposes still run as usual through the plan's own
 * calls). CUDA plans always plan this way. */
#define SG_FFT_DEVICE_STAGES 4u

typedef enum sg_fft_space {
  SG_FFT_SPACE_REAL = 0, /* the real input of the forward transform */
  SG_FFT_SPACE_SPECTRAL  /* the (kept) modes, complex */
} sg_fft_space;

typedef struct sg_fft_desc {
  sg_dtype dtype;                 /* SG_DTYPE_F32 or SG_DTYPE_F64 */
  sg_device device;               /* host (default) or CUDA */
  int ndim;                       /* spatial dims, 2 or 3 */
  int64_t shape[SG_FFT_MAX_DIMS]; /* global real spatial shape */
  int split[SG_FFT_MAX_DIMS];     /* mesh dim (or axis) splitting each
                                     spatial dim in real space, or -1 */
  int64_t batch;                  /* product of the leading dims, >= 1 */
  int64_t keep[SG_FFT_MAX_DIMS];  /* kept modes per dim (see above); 0: all */
  sg_fft_norm norm;
  int nthreads;   /* FFTW threads; 0: omp_get_max_threads() */
  unsigned flags; /* SG_FFT_MEASURE, SG_FFT_MPI_ALLTOALL,
                     SG_FFT_DEVICE_STAGES */
  int64_t chunk;  /* host: batch elements run through all
                                     stages at a time (cache blocking); must
                                     divide batch; 0: chosen so a chunk's
                                     complex block is about
                                     SG_FFT_CHUNK_BYTES (default 512 KiB) */
} sg_fft_desc;

/* A layout of an array over the axes (mesh dims): for every array dim its
 * global length and the axes splitting it, outer first (the outer axis
 * splits the dim by the balanced rule, the next one splits each piece
 * again). */
typedef struct sg_fft_layout {
  int ndim;
  int64_t shape[SG_FFT_MAX_DIMS];
  int nsplit[SG_FFT_MAX_DIMS];
  int split[SG_FFT_MAX_DIMS][SG_FFT_MAX_DIMS];
} sg_fft_layout;

/* Defaults: f64, host, batch 1, no splits, keep all, BACKWARD norm.
 * Not collective. */
void sg_fft_desc_init(sg_fft_desc *desc);

/* The box (offset, shape per dim) of a layout for the rank with
 * coordinates coords[axis] on axes of sizes axis_size[axis]. Not
 * collective. */
void sg_fft_layout_box(const sg_fft_layout *layout, const int *axis_size,
                       const int *coords, int64_t *offset, int64_t *shape);

/* Create a plan over a mesh: desc->split[d] names mesh dims. Ranks that
 * differ in other mesh dims (data parallel, ...) run independent
 * transforms. Collective over the mesh's communicator; every rank passes
 * the same desc; a bad desc fails on every rank with the same message. */
sg_status sg_fft_plan_create(sg_mesh_t mesh, const sg_fft_desc *desc,
                             sg_fft_plan_t *plan);
/* Same over plain communicators: axes[a] is the communicator of axis a
 * (ranks differing only in their coordinate along a; the coordinate is the
 * rank in axes[a]; MPI_COMM_NULL for unused axes); desc->split[d] names an
 * axis. comm spans all ranks taking part (failures are agreed on it).
 * Collective over comm. */
sg_status sg_fft_plan_create_comms(MPI_Comm comm, int naxes,
                                   const MPI_Comm *axes,
                                   const sg_fft_desc *desc,
                                   sg_fft_plan_t *plan);
/* The axes of a transform whose dim d is split along the mesh dim named
 * dims[d] (n dims): axes[d] is the communicator along that mesh dim, or
 * MPI_COMM_NULL when the mesh has no such dim; split[d] is d or -1
 * accordingly (ready for desc->split); *comm spans the named dims that
 * exist, so ranks differing in other mesh dims (data parallel, ...) run
 * independent transforms; *mask (may be NULL) gets those mesh dims as a
 * dim mask. The communicators belong to the mesh. Pass the results to
 * sg_fft_plan_create_comms / sg_spectral_conv_create_comms. Collective
 * over the mesh (the first use of a group creates it). */
sg_status sg_fft_mesh_axes(sg_mesh_t mesh, int n, const char *const *dims,
                           MPI_Comm *axes, int *split, MPI_Comm *comm,
                           unsigned *mask);
/* Free; accepts NULL and sets *plan to NULL. Collective over the plan's
 * axes (it frees the shared-memory windows of its transposes); the
 * communicators belong to the caller or mesh and must outlive the plan. */
sg_status sg_fft_plan_destroy(sg_fft_plan_t *plan);

/* Queries; not collective. Shapes are spatial (batch not included).
 * local_count is in scalars: batch*prod(shape) for real space,
 * 2*batch*prod(shape) for spectral space. */
const sg_fft_desc *sg_fft_plan_desc(sg_fft_plan_t plan);
void sg_fft_plan_layout(sg_fft_plan_t plan, sg_fft_space space,
                        sg_fft_layout *layout);
void sg_fft_plan_local_box(sg_fft_plan_t plan, sg_fft_space space,
                           int64_t *offset, int64_t *shape);
int64_t sg_fft_plan_local_count(sg_fft_plan_t plan, sg_fft_space space);
/* Box of any rank given by its coordinates on the axes (coords[a] for
 * every axis a the plan uses; entries of other axes are ignored). */
void sg_fft_plan_box_of(sg_fft_plan_t plan, sg_fft_space space,
                        const int *coords, int64_t *offset, int64_t *shape);
/* The signed integer frequency of global spectral index j along dim d. */
int64_t sg_fft_plan_freq(sg_fft_plan_t plan, int d, int64_t j);
/* Number of transposes in the forward transform (0 on one rank). */
int sg_fft_plan_ntransposes(sg_fft_plan_t plan);
/* Bytes this rank sends in one forward transform (all transposes). */
int64_t sg_fft_plan_bytes_moved(sg_fft_plan_t plan);
/* Accumulated seconds spent in local FFTs and in transposes (pack,
 * all-to-all, unpack) since creation or the last reset. */
void sg_fft_plan_times(sg_fft_plan_t plan, double *fft_seconds,
                       double *transpose_seconds);
void sg_fft_plan_reset_times(sg_fft_plan_t plan);
/* One line per stage, for logs. Not collective. */
sg_status sg_fft_plan_describe(sg_fft_plan_t plan, char *buf, size_t n);

/* Forward: x, the real local block (batch, real local shape), to y, the
 * complex local block (batch, spectral local shape). x is not modified.
 * Collective over the plan's axes. */
sg_status sg_fft_forward(sg_fft_plan_t plan, const void *x, void *y);
/* Inverse (complex to real, zero-padding truncated modes); y is not
 * modified. Only the Hermitian part of y contributes (as FFTW c2r: the
 * imaginary part of self-conjugate modes of the halved dim is ignored).
 * Collective over the plan's axes. */
sg_status sg_fft_inverse(sg_fft_plan_t plan, const void *y, void *x);
/* Adjoints under the real inner product: forward_adjoint maps a spectral
 * block dy to a real block dx with <forward(x), dy> = <x, dx>; it is the
 * backward of sg_fft_forward. inverse_adjoint maps a real block to a
 * spectral block; it is the backward of sg_fft_inverse. Inputs are not
 * modified; outputs are overwritten. Collective over the plan's axes. */
sg_status sg_fft_forward_adjoint(sg_fft_plan_t plan, const void *dy, void *dx);
sg_status sg_fft_inverse_adjoint(sg_fft_plan_t plan, const void *dx, void *dy);

/* ---- transposes ---------------------------------------------------------
 * A transpose moves one axis from being the innermost splitter of array
 * dim `from` (taken from the layout) to being the innermost splitter of
 * dim `to`, by one all-to-all-v inside that axis's group; batch dims travel
 * in the same messages. Elements are ncomp scalars of dtype (1 real,
 * 2 complex). Its adjoint (the backward) is the reverse transpose. */

/* Collective over the mesh (or comm). */
sg_status sg_fft_transpose_create(sg_mesh_t mesh, sg_dtype dtype, int ncomp,
                                  int64_t batch, const sg_fft_layout *from,
                                  int axis, int to, sg_fft_transpose_t *tr);
sg_status sg_fft_transpose_create_comms(MPI_Comm comm, int naxes,
                                        const MPI_Comm *axes, sg_dtype dtype,
                                        int ncomp, int64_t batch,
                                        const sg_fft_layout *from, int axis,
                                        int to, sg_fft_transpose_t *tr);
/* Accepts NULL and sets *tr to NULL. Collective over the axis's group
 * (shared-memory window). */
sg_status sg_fft_transpose_destroy(sg_fft_transpose_t *tr);
/* The layout after the move. Not collective. */
void sg_fft_transpose_layout(sg_fft_transpose_t tr, int after,
                             sg_fft_layout *layout);
/* Local element counts (scalars) before / after. Not collective. */
int64_t sg_fft_transpose_local_count(sg_fft_transpose_t tr, int after);
/* Move (in: layout before, out: after); adjoint: out -> in. Collective
 * over the axis's group. */
sg_status sg_fft_transpose_execute(sg_fft_transpose_t tr, const void *in,
                                   void *out);
sg_status sg_fft_transpose_adjoint(sg_fft_transpose_t tr, const void *out,
                                   void *in);

#ifdef __cplusplus
}
#endif
#endif /* SG_FFT_H */
