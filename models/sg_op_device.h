/* shardgrid — the op device table: for every built-in op of the tape
 * (sg_op_registry.h), where it can run.
 *
 * An op either names its CUDA forward and backward entry points (the
 * launchers of sg_ops_cuda.h, or sg_spectral.h's device entries for the
 * spectral ops, built in the cuda preset, which run the same
 * SG_HD element functions as the host loops) or is host-only with a
 * one-line reason. tests/ops/test_op_device.c fails when an op of the
 * registry is missing here, listed twice, or host-only without a reason,
 * and prints the coverage. A CUDA entry says the op's arithmetic runs on
 * device pointers and the op's sg_op_def has CUDA entry points (in the
 * cuda build): the tape runs it on device variables (sg_var_set_device;
 * see README "The GPU path").
 *
 * Sharded device variables (a mesh: sg_var_set_sharding): every op on
 * cuda is listed once more (sg_op_device_sharded_at) with NULL, it runs
 * on them (its kernels are local to the shard, or its collectives run on
 * device buffers through the comm layer: NCCL on a GPU), or the reason the
 * tape refuses it by name (SG_ERR_NOT_SUPPORTED on every rank of the mesh,
 * ag_node_device).
 *
 *   for (int i = 0; i < sg_op_device_count(); ++i) {
 *     const sg_op_device *d = sg_op_device_at(i);
 *     printf("%s: %s\n", d->op, d->host_only ? d->host_only : d->cuda_fwd);
 *   }
 *
 * Not collective; the table is constant. */
#ifndef SG_OP_DEVICE_H
#define SG_OP_DEVICE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_op_device {
  const char *op;        /* the registry name (sg_op_def.name) */
  const char *cuda_fwd;  /* CUDA forward entry point(s), NULL if host-only */
  const char *cuda_bwd;  /* CUDA backward entry point(s), NULL if host-only */
  const char *host_only; /* why there is no CUDA path; NULL with one */
} sg_op_device;

/* Number of entries. */
int sg_op_device_count(void);
/* Entry i (0 <= i < sg_op_device_count()), NULL out of range. */
const sg_op_device *sg_op_device_at(int i);
/* The first entry of that op, NULL if none. */
const sg_op_device *sg_op_device_find(const char *op);
/* 1 when the entry has both CUDA entry points. */
int sg_op_device_on_cuda(const sg_op_device *d);
/* The list of the ops on cuda on sharded device variables: the number,
 * and entry i's op name (NULL out of range) with in *why NULL (it runs
 * there) or the reason it is refused. */
int sg_op_device_sharded_count(void);
const char *sg_op_device_sharded_at(int i, const char **why);
/* NULL when op runs on sharded device variables (on cuda, listed with
 * NULL), else why not: the listed reason, its host-only reason, or that
 * it is not listed. */
const char *sg_op_device_sharded_why(const char *op);

#ifdef __cplusplus
}
#endif
#endif /* SG_OP_DEVICE_H */
