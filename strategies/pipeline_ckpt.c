/* shardgrid — one checkpoint for a whole pipeline (sg_pipeline.h,
 * "checkpoints"): every rank of the mesh takes part in one file, in the
 * format of a run without a pipeline, so a checkpoint loads on any mesh. */
#include "sg_pipeline.h"

#include "sg_comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The arrays and their names, one allocation (sg_pipe_ckpt_arrays_free). */
typedef struct pp_ck_block {
  sg_ckpt_array *arr;
  char (*names)[96];
} pp_ck_block;

/* The plan's array called name, NULL if the stage does not hold it. */
static const sg_ckpt_array *pp_ck_find(const sg_ckpt_array *mine, int nmine,
                                       const char *name) {
  for (int k = 0; k < nmine; ++k)
    if (strcmp(mine[k].name, name) == 0) return &mine[k];
  return NULL;
}

/* Table entry i's array of state s: the stage's own (its box, its writer
 * rule) or, for another stage's parameter, the global shape with count 0. */
static void pp_ck_entry(const sg_param_info *info, const char *state,
                        const sg_ckpt_array *mine, int nmine, char *name,
                        sg_ckpt_array *a, int *found) {
  static float none; /* a valid address for an empty slab */
  snprintf(name, 96, "%s.%s", state, info->name);
  const sg_ckpt_array *own = pp_ck_find(mine, nmine, name);
  *found += own != NULL;
  if (own) {
    *a = *own;
  } else {
    memset(a, 0, sizeof *a);
    a->shard.ndims = info->ndim;
    a->shard.dtype = SG_DTYPE_F32;
    for (int d = 0; d < info->ndim; ++d)
      a->shard.global_shape[d] = info->global_shape[d];
    a->data = &none;
  }
  a->name = name;
}

static sg_status pp_ck_union(sg_parallel_t plan, int nparams,
                             const sg_param_info *table, int writing,
                             pp_ck_block *b) {
  sg_status st = SG_OK;
  static const char *const states[3] = {"params", "adam_m", "adam_v"};
  sg_ckpt_array *mine = NULL;
  int nmine = 0, found = 0;
  /* collective over the stage mesh: every rank of the stage gets here */
  SG_TRY(sg_parallel_ckpt_arrays(plan, writing, &mine, &nmine));
  const size_t na = (size_t)(3 * nparams) + 1;
  char *mem = malloc(na * (sizeof *b->arr + sizeof *b->names));
  if (!mem) SG_RAISE(SG_ERR_ALLOC, "pipeline checkpoint: out of memory");
  b->arr = (sg_ckpt_array *)mem;
  b->names = (char(*)[96])(mem + na * sizeof *b->arr);
  for (int i = 0; i < nparams; ++i)
    for (int s = 0; s < 3; ++s)
      pp_ck_entry(&table[i], states[s], mine, nmine, b->names[3 * i + s],
                  &b->arr[3 * i + s], &found);
  if (found != nmine)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "pipeline checkpoint: the stage's plan holds %d arrays, %d of "
             "them are in the model's table (a parameter the table lacks)",
             nmine, found);
fail:
  return st;
}

sg_status sg_pipe_ckpt_arrays(sg_pipe_t pipe, sg_parallel_t plan, int nparams,
                              const sg_param_info *table, int writing,
                              sg_ckpt_array **arrays, int *n) {
  sg_status st = SG_OK;
  pp_ck_block b = {NULL, NULL};
  if (!pipe || !plan || !arrays || !n || nparams < 0 || (nparams > 0 && !table))
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_pipe_ckpt_arrays: NULL or bad argument");
  *arrays = NULL;
  *n = 0;
  st = sg_agree(sg_mesh_comm(sg_pipe_mesh(pipe)),
                pp_ck_union(plan, nparams, table, writing, &b));
  if (st != SG_OK) {
    free(b.arr);
    return st;
  }
  *arrays = b.arr;
  *n = 3 * nparams;
  return SG_OK;
}

sg_status sg_pipe_model_ckpt_arrays(sg_pipe_t pipe, sg_parallel_t plan,
                                    sg_model_t model, int writing,
                                    sg_ckpt_array **arrays, int *n) {
  sg_status st = SG_OK;
  sg_var **vars = NULL;
  if (!pipe || !model)
    return sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                        "sg_pipe_model_ckpt_arrays: NULL argument");
  const int np = sg_model_params(model, &vars);
  sg_param_info *tab = calloc((size_t)np + 1, sizeof *tab);
  if (!tab)
    st = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  for (int i = 0; i < np && st == SG_OK; ++i)
    st = sg_model_param_info(model, i, &tab[i]);
  SG_TRY(sg_agree(sg_mesh_comm(sg_pipe_mesh(pipe)), st));
  SG_TRY(sg_pipe_ckpt_arrays(pipe, plan, np, tab, writing, arrays, n));
fail:
  free(tab);
  return st;
}

sg_status sg_pipe_ckpt_arrays_free(sg_ckpt_array **arrays) {
  if (arrays) {
    free(*arrays);
    *arrays = NULL;
  }
  return SG_OK;
}
