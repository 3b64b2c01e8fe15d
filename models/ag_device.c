/* shardgrid — autograd tape: where a node runs and the memory of device
 * variables (outputs, gradients and saved state on the inputs' device).
 *
 * The decisions (the node's device, its kernels, the refusals) are plain
 * host code; the memory goes through sg_malloc/sg_memcpy on the device and
 * the gradient sums through the CUDA add launcher. ag_fake_cuda (tests
 * only) keeps "CUDA" tensors in host memory, so the whole device path of
 * the tape runs and is checked without a GPU (tests/ops/test_op_device.c).
 *
 * Collectives on device buffers go through the comm layer (sg_comm.h),
 * which picks NCCL by the pointer (sg_nccl_is_device: CUDA device or
 * managed memory, on a mesh with sg_mesh_enable_nccl) and MPI otherwise:
 * faked "CUDA" buffers are host malloc memory, so they take the MPI path
 * with no hook of their own, and the device path's collectives run under
 * mpiexec on the host (tests/models/test_tp_device.c). */
#include "autograd_impl.h"

#include <stdlib.h>
#include <string.h>

#include "sg_comm.h"
#include "sg_config.h"
#include "sg_device.h"
#include "sg_op_device.h"
#include "sg_op_registry.h"
#if SG_HAVE_CUDA
#include "sg_ops_cuda.h"
#endif

int ag_fake_cuda;
int64_t ag_fake_cuda_allocs;
int ag_fake_cuda_kernels;

/* A node of op on a faked device runs the op's host kernels (tests:
 * ag_fake_cuda_kernels; a built-in op listed on cuda). */
static int ag_fake_kernels(const sg_op_def *op) {
  return ag_fake_cuda && ag_fake_cuda_kernels &&
         sg_ag_op_find(op->name) == op &&
         sg_op_device_on_cuda(sg_op_device_find(op->name));
}

/* A device tensor lives in host memory: the host or a faked device. */
static int ag_host_memory(sg_device dev) {
  return dev.kind == SG_DEVICE_HOST || ag_fake_cuda;
}

sg_status ag_mem_alloc(sg_device dev, size_t bytes, int zero, void **p) {
  if (dev.kind != SG_DEVICE_HOST && ag_fake_cuda) {
    ag_fake_cuda_allocs += bytes > 0;
    dev = sg_device_host();
  }
  return (zero ? sg_calloc : sg_malloc)(dev, bytes, p);
}

void ag_mem_free(sg_device dev, void **p) {
  sg_free(ag_host_memory(dev) ? sg_device_host() : dev, p);
}

sg_status ag_mem_copy(sg_device dst_dev, void *dst, sg_device src_dev,
                      const void *src, size_t bytes) {
  if (ag_host_memory(dst_dev) && ag_host_memory(src_dev)) {
    if (bytes) memcpy(dst, src, bytes);
    return SG_OK;
  }
  return sg_memcpy(dst_dev, dst, src_dev, src, bytes);
}

sg_status ag_mem_zero(sg_device dev, void *p, size_t bytes) {
  if (ag_host_memory(dev)) {
    if (bytes) memset(p, 0, bytes);
    return SG_OK;
  }
  return sg_memset(dev, p, 0, bytes);
}

/* y += x on y's device (x on the same device). */
sg_status ag_grad_add(sg_tensor *y, const sg_tensor *x) {
  sg_status st = SG_OK;
  if (ag_host_memory(y->device)) {
    ag_add_into(y, x);
    goto fail;
  }
#if SG_HAVE_CUDA
  /* in place on the legacy default stream, ordered with the copies */
  SG_TRY(sg_binary_fwd_cuda(SG_BINARY_ADD, y->dtype, ag_numel(y), y->data,
                            x->data, y->data, NULL));
#else
  SG_RAISE(SG_ERR_NOT_SUPPORTED, "gradient sum on %s: built without CUDA",
           sg_device_kind_name(y->device.kind));
#endif
fail:
  return st;
}

/* y = a + b, n elements of dt on dev (y may be a or b): the CUDA binary
 * add, or the host loop on host memory (a faked device). IEEE addition in
 * dt either way: the same bits. */
sg_status ag_dev_add(sg_device dev, sg_dtype dt, int64_t n, const void *a,
                     const void *b, void *y) {
  sg_status st = SG_OK;
  if (n <= 0) goto fail;
  if (dt != SG_DTYPE_F32 && dt != SG_DTYPE_F64)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "device sum on %s (f32 or f64)",
             sg_dtype_name(dt));
  if (ag_host_memory(dev)) {
    if (dt == SG_DTYPE_F64)
      for (int64_t i = 0; i < n; ++i)
        ((double *)y)[i] = ((const double *)a)[i] + ((const double *)b)[i];
    else
      for (int64_t i = 0; i < n; ++i)
        ((float *)y)[i] = ((const float *)a)[i] + ((const float *)b)[i];
    goto fail;
  }
#if SG_HAVE_CUDA
  SG_TRY(sg_binary_fwd_cuda(SG_BINARY_ADD, dt, n, a, b, y, NULL));
#else
  SG_RAISE(SG_ERR_NOT_SUPPORTED, "device sum on %s: built without CUDA",
           sg_device_kind_name(dev.kind));
#endif
fail:
  return st;
}

/* y = alpha x on dev: the scale op's kernel (sg_scale, sg_scale_cuda: alpha
 * rounded to dt, one multiplication). */
sg_status ag_dev_scale(sg_device dev, sg_dtype dt, int64_t n, double alpha,
                       const void *x, void *y) {
  if (n <= 0) return SG_OK;
  if (ag_host_memory(dev)) return sg_scale(dt, n, alpha, x, y);
#if SG_HAVE_CUDA
  return sg_scale_cuda(dt, n, alpha, x, y, NULL);
#else
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "device scale on %s: built without CUDA",
                      sg_device_kind_name(dev.kind));
#endif
}

/* dst = the sum over g of src, n elements of dt on dev, bitwise the host's
 * sg_allreduce_det (NCCL's own all-reduce is not fixed-order, and the comm
 * layer refuses deterministic reductions of device buffers): the same
 * balanced blocks, an all-to-all-v of them (device buffers: NCCL), each
 * rank sums its block in group-rank order with the add kernel, an
 * all-gather-v spreads the sums. On the host, sg_allreduce_det itself. A
 * failed scratch allocation is agreed before the first message. */
sg_status ag_dev_comm_ok(sg_group_t g, sg_device dev, const char *what) {
  if (ag_host_memory(dev) || !g || sg_group_size(g) <= 1 || sg_group_nccl(g) ||
      sg_mpi_cuda_aware() == 1)
    return SG_OK;
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "%s on %s:%d over %d ranks: device buffers need NCCL on "
                      "the mesh (sg_mesh_enable_nccl) or a CUDA-aware MPI",
                      what, sg_device_kind_name(dev.kind), dev.index,
                      sg_group_size(g));
}

sg_status ag_sum_det(sg_group_t g, sg_device dev, sg_dtype dt, int64_t n,
                     const void *src, void *dst) {
  sg_status st = SG_OK;
  const int P = g ? sg_group_size(g) : 1;
  const size_t es = sg_dtype_size(dt);
  int64_t *cnt = NULL;
  char *scr = NULL;
  if (P <= 1 || n == 0) {
    if (dst != src && n > 0)
      SG_TRY(ag_mem_copy(dev, dst, dev, src, (size_t)n * es));
    goto fail;
  }
  if (dev.kind == SG_DEVICE_HOST)
    return sg_allreduce_det(g, src, dst, n, dt, SG_REDUCE_SUM);
  SG_TRY(ag_dev_comm_ok(g, dev, "the fixed-order sum"));
  const int me = sg_group_rank(g);
  cnt = malloc(4 * (size_t)P * sizeof *cnt);
  int64_t *dsp = cnt ? cnt + P : NULL, *rc = cnt ? cnt + 2 * P : NULL,
          *rd = cnt ? cnt + 3 * P : NULL;
  int64_t off = 0;
  for (int r = 0; cnt && r < P; ++r) {
    cnt[r] = n / P + (r < n % P);
    dsp[r] = off;
    off += cnt[r];
  }
  const int64_t mine = cnt ? cnt[me] : 0;
  for (int r = 0; cnt && r < P; ++r) rc[r] = mine, rd[r] = r * mine;
  st = cnt ? SG_OK : SG_ERR_ALLOC;
  if (st == SG_OK)
    st = ag_mem_alloc(dev, mine > 0 ? (size_t)(P * mine) * es : 1, 0,
                      (void **)&scr);
  st = sg_group_agree(g, st);
  SG_TRY(st);
  SG_TRY(sg_alltoallv(g, src, cnt, dsp, scr, rc, rd, dt));
  char *out = (char *)dst + (size_t)dsp[me] * es;
  if (mine > 0) {
    SG_TRY(ag_mem_copy(dev, out, dev, scr, (size_t)mine * es));
    for (int r = 1; r < P; ++r)
      SG_TRY(
          ag_dev_add(dev, dt, mine, out, scr + (size_t)(r * mine) * es, out));
  }
  SG_TRY(sg_allgatherv(g, out, mine, dst, cnt, dsp, dt));
fail:
  if (scr) ag_mem_free(dev, (void **)&scr);
  free(cnt);
  return st;
}

/* The token slice [off, off + cnt) of rows rows of tot elements of dt on
 * dev: to_whole copies part (rows, cnt) into whole (rows, tot), else back
 * (sg_cat_part_cuda on a device: concat's part copy, one spatial cell). */
sg_status ag_dev_slice(sg_device dev, sg_dtype dt, int64_t rows, int64_t cnt,
                       int64_t tot, int64_t off, int to_whole, void *whole,
                       void *part) {
  const size_t es = sg_dtype_size(dt), len = (size_t)cnt * es;
  if (rows <= 0 || cnt <= 0) return SG_OK;
  if (ag_host_memory(dev)) {
    for (int64_t i = 0; i < rows; ++i) {
      char *w = (char *)whole + (size_t)(i * tot + off) * es,
           *p = (char *)part + (size_t)(i * cnt) * es;
      memcpy(to_whole ? w : p, to_whole ? p : w, len);
    }
    return SG_OK;
  }
#if SG_HAVE_CUDA
  return sg_cat_part_cuda(dt, rows, 1, cnt, tot, off, to_whole,
                          to_whole ? part : whole, to_whole ? whole : part,
                          NULL);
#else
  return sg_error_set(SG_ERR_NOT_SUPPORTED, __FILE__, __LINE__,
                      "device slice on %s: built without CUDA",
                      sg_device_kind_name(dev.kind));
#endif
}

/* Why op may not run on sharded device inputs, NULL if it may: a
 * built-in op per the device table (sg_op_device_sharded_why); a user op
 * unless its outputs are Partial (summed over the mesh by host code). Its
 * window's exchange runs on the device buffers (ag_halo.c). */
static const char *ag_sharded_why(const sg_op_def *op) {
  if (sg_ag_op_find(op->name) == op) return sg_op_device_sharded_why(op->name);
  if (op->rule.out == SG_OUT_PARTIAL)
    return "Partial outputs are summed over the mesh on the host (issue 22)";
  return NULL;
}

/* The refusals of device inputs, in the order a caller meets them: mixed
 * devices, sharded inputs of an op whose device path on a mesh is not
 * built (by name, from global information: every rank of the mesh refuses
 * alike), an op without CUDA entry points (never a silent host copy), and
 * the parts of the tape that are host-only so far. */
sg_status ag_node_device(sg_tape_t tape, const sg_op_def *op, int nin,
                         sg_var *const *in, sg_device *dev) {
  sg_status st = SG_OK;
  *dev = in[0]->value.device;
  for (int i = 0; i < nin; ++i) {
    const sg_device d = in[i]->value.device;
    if (d.kind == dev->kind && d.index == dev->index) continue;
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "op %s: input 0 '%s' is on %s:%d, input %d '%s' on %s:%d (the "
             "tape does not copy between devices)",
             op->name, in[0]->name, sg_device_kind_name(dev->kind), dev->index,
             i, in[i]->name, sg_device_kind_name(d.kind), d.index);
  }
  if (dev->kind == SG_DEVICE_HOST) goto fail;
  const char *why = NULL;
  for (int i = 0; i < nin && !why; ++i)
    if (in[i]->mesh && (why = ag_sharded_why(op)) != NULL)
      SG_RAISE(SG_ERR_NOT_SUPPORTED,
               "op %s on %s:%d with sharded input '%s' (a mesh): %s", op->name,
               sg_device_kind_name(dev->kind), dev->index, in[i]->name, why);
  if ((!op->forward_cuda || !op->backward_cuda) && !ag_fake_kernels(op))
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "op %s has no cuda implementation (input '%s' is on %s:%d; "
             "the tape does not copy it to the host)",
             op->name, in[0]->name, sg_device_kind_name(dev->kind), dev->index);
  if (tape->store_dt == SG_DTYPE_BF16)
    why = "the bf16 storage policy rounds on the host";
  if (why)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "op %s on %s:%d: %s (issue 22)", op->name,
             sg_device_kind_name(dev->kind), dev->index, why);
fail:
  return st;
}

sg_status ag_node_forward(sg_node *node) {
  return node->device.kind == SG_DEVICE_HOST || ag_fake_kernels(node->op)
             ? node->op->forward(node)
             : node->op->forward_cuda(node);
}

sg_status ag_node_backward_kernel(sg_node *node) {
  return node->device.kind == SG_DEVICE_HOST || ag_fake_kernels(node->op)
             ? node->op->backward(node)
             : node->op->backward_cuda(node);
}
