/* shardgrid — data in and out of the tape: sharded variables from a global
 * array or a NetCDF slab, and gathered back (sg_autograd.h). */
#include "sg_autograd.h"

#include "sg_comm.h"
#include "sg_nc.h"

#include <string.h>

/* A sharded leaf over an allocation it owns, with the block `local` (this
 * rank's box of the global tensor) copied in. Collective over the mesh
 * (sg_var_set_sharding). */
static sg_status var_from_block(sg_var *v, const char *name, sg_mesh_t mesh,
                                const sg_placement *pl, int ndim,
                                const int64_t *global_shape,
                                const sg_tensor *local, int requires_grad) {
  sg_status st = SG_OK;
  st = sg_var_init(v, name, local->dtype, ndim, local->shape, NULL,
                   requires_grad);
  if (st == SG_OK) st = sg_tensor_copy(&v->value, local);
  SG_TRY(sg_agree(sg_mesh_comm(mesh), st));
  SG_TRY(sg_var_set_sharding(v, mesh, pl, global_shape));
fail:
  if (st != SG_OK) sg_var_release(v);
  return st;
}

sg_status sg_var_scatter(sg_var *v, const char *name, sg_mesh_t mesh,
                         const sg_placement *placements, sg_dtype dtype,
                         int ndim, const int64_t *global_shape,
                         const sg_tensor *global, int root, int requires_grad) {
  sg_status st = SG_OK;
  sg_shardtensor x;
  memset(&x, 0, sizeof x);
  if (!v || !mesh || !placements || !global_shape)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_var_scatter: NULL argument");
  memset(v, 0, sizeof *v);
  st = sg_shardtensor_create(&x, mesh, dtype, ndim, global_shape, placements,
                             NULL);
  SG_TRY(sg_agree(sg_mesh_comm(mesh), st));
  SG_TRY(sg_shardtensor_scatter(&x, global, root));
  sg_tensor in = sg_shardtensor_interior(&x);
  SG_TRY(var_from_block(v, name, mesh, placements, ndim, global_shape, &in,
                        requires_grad));
fail:
  sg_shardtensor_destroy(&x);
  return st;
}

sg_status sg_var_gather(const sg_var *v, int grad, sg_tensor *global,
                        int root) {
  sg_status st = SG_OK;
  sg_shardtensor x;
  memset(&x, 0, sizeof x);
  if (!v || !v->mesh)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_var_gather: the variable is not sharded");
  const sg_tensor *src = grad ? &v->grad : &v->value;
  st = sg_shardtensor_create(&x, v->mesh, v->value.dtype, v->value.ndim,
                             v->global_shape, v->placements, NULL);
  if (st == SG_OK && grad && !src->data && sg_tensor_numel(&v->value) > 0)
    st = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                      "sg_var_gather: '%s' has no gradient", v->name);
  if (st == SG_OK && sg_tensor_numel(&v->value) > 0) {
    sg_tensor in = sg_shardtensor_interior(&x);
    st = sg_tensor_copy(&in, src);
  }
  SG_TRY(sg_agree(sg_mesh_comm(v->mesh), st));
  SG_TRY(sg_shardtensor_gather(&x, global, root));
fail:
  sg_shardtensor_destroy(&x);
  return st;
}

sg_status sg_var_read_nc(sg_var *v, const char *name, sg_mesh_t mesh,
                         const sg_placement *placements, sg_nc_t file,
                         const char *varname, sg_dtype dtype,
                         int requires_grad) {
  sg_status st = SG_OK;
  sg_nc_var_info info;
  sg_shardtensor x;
  memset(&x, 0, sizeof x);
  memset(&info, 0, sizeof info);
  if (!v || !mesh || !placements || !file || !varname)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_var_read_nc: NULL argument");
  memset(v, 0, sizeof *v);
  st = sg_nc_inq_var(file, varname, &info);
  if (st == SG_OK && (info.ndims < 1 || info.ndims > SG_TENSOR_MAX_DIMS))
    st = sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                      "sg_var_read_nc: '%s' has %d dims", varname, info.ndims);
  if (st == SG_OK)
    st = sg_shardtensor_create(&x, mesh, dtype, info.ndims, info.shape,
                               placements, NULL);
  SG_TRY(sg_agree(sg_mesh_comm(mesh), st));
  sg_nc_shard sh;
  memset(&sh, 0, sizeof sh);
  sh.ndims = info.ndims;
  sh.dtype = dtype;
  for (int d = 0; d < info.ndims; ++d) {
    sh.global_shape[d] = info.shape[d];
    sh.start[d] = x.local_offset[d];
    sh.count[d] = x.local_shape[d];
  }
  sg_tensor in = sg_shardtensor_interior(&x);
  SG_TRY(
      sg_nc_read(file, info.varid, &sh, NULL, in.data, NULL)); /* collective */
  SG_TRY(var_from_block(v, name, mesh, placements, info.ndims, info.shape, &in,
                        requires_grad));
fail:
  sg_shardtensor_destroy(&x);
  return st;
}
