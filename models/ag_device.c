/* shardgrid — autograd tape: where a node runs and the memory of device
 * variables (outputs, gradients and saved state on the inputs' device).
 *
 * The decisions (the node's device, its kernels, the refusals) are plain
 * host code; the memory goes through sg_malloc/sg_memcpy on the device and
 * the gradient sums through the CUDA add launcher. ag_fake_cuda (tests
 * only) keeps "CUDA" tensors in host memory, so the whole device path of
 * the tape runs and is checked without a GPU (tests/ops/test_op_device.c). */
#include "autograd_impl.h"

#include <string.h>

#include "sg_config.h"
#include "sg_device.h"
#if SG_HAVE_CUDA
#include "sg_ops_cuda.h"
#endif

int ag_fake_cuda;
int64_t ag_fake_cuda_allocs;

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

/* The refusals of device inputs, in the order a caller meets them: mixed
 * devices, an op without CUDA entry points (never a silent host copy), and
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
  if (!op->forward_cuda || !op->backward_cuda)
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "op %s has no cuda implementation (input '%s' is on %s:%d; "
             "the tape does not copy it to the host)",
             op->name, in[0]->name, sg_device_kind_name(dev->kind), dev->index);
  for (int i = 0; i < nin && !why; ++i)
    if (in[i]->mesh) why = "sharded device variables need NCCL";
  if (!why && tape->store_dt == SG_DTYPE_BF16)
    why = "the bf16 storage policy rounds on the host";
  if (!why && tape->collecting) why = "checkpointed blocks replay on the host";
  if (why)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "op %s on %s:%d: %s (issue 22)", op->name,
             sg_device_kind_name(dev->kind), dev->index, why);
fail:
  return st;
}

sg_status ag_node_forward(sg_node *node) {
  return node->device.kind == SG_DEVICE_HOST ? node->op->forward(node)
                                             : node->op->forward_cuda(node);
}

sg_status ag_node_backward_kernel(sg_node *node) {
  return node->device.kind == SG_DEVICE_HOST ? node->op->backward(node)
                                             : node->op->backward_cuda(node);
}
