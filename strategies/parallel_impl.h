/* shardgrid — the parallel plan's internals (parallel.c: creation,
 * reduction, step, checkpoints; parallel_hooks.c: the tape hooks, ZeRO-3
 * gathers and prefetch, the overlapped reduce-scatters). Not installed. */
#ifndef SG_PARALLEL_IMPL_H
#define SG_PARALLEL_IMPL_H

#include "sg_parallel.h"

#include "precision_impl.h"

#include "sg_comm.h"
#include "sg_ddp.h"

/* One parameter: its table entry and its ZeRO piece. */
typedef struct pl_param {
  sg_param_info info;
  char name[64];
  int layout;
  int64_t row;      /* elements per dim-0 row of the local box */
  int64_t own_row0; /* first owned row of the local box */
  int64_t own_rows; /* owned rows (ZeRO piece; the whole box when zero = 0) */
  int64_t moff;     /* offset of the piece in the optimizer state */
  sg_var *var;      /* its variable (sg_parallel_attach) */
  float *vfull;     /* zero 3: the gathered value while in use */
  sg_bf16 *vfull16; /* zero 3 under the bf16 policy: what the gather receives */
  float *gfull;     /* zero >= 2: the full gradient during backward */
  int64_t *pcount,
      *pdispl;         /* zero >= 1: every ZeRO-group rank's piece (elements) */
  sg_request_t rs_req; /* zero >= 1: its reduce-scatter in flight */
  int rs_started;      /* zero 1: started in this step */
} pl_param;

/* A span: a contiguous run of the flat buffer whose parameters share a
 * layout, with its DDP reducer. */
typedef struct pl_span {
  int64_t off, n;
  int layout; /* its parameters' layout */
  sg_ddp_t ddp;
} pl_span;

/* Parameters that share (shard_dims): the same groups. */
typedef struct pl_layout {
  unsigned shard_dims, reduce_dims, zero_dims;
  sg_group_t reduce_g; /* gradient reduction: data dims \ shard */
  sg_group_t zero_g;   /* ZeRO pieces: zero dims \ shard (NULL: none) */
  sg_group_t rest_g;   /* reduce \ zero: all-reduce of the pieces */
  sg_group_t norm_g;   /* zero \cup shard: the norm's distinct parts */
  int *members;        /* parameter indices, table order */
  int nmembers;
  int64_t *counts; /* per ZeRO-group rank: elements of its pieces */
  int64_t npack;   /* elements of all members (the pack buffer) */
} pl_layout;

struct sg_parallel {
  sg_mesh_t mesh;
  sg_parallel_config cfg;
  sg_dim_role role[SG_MESH_MAX_DIMS];
  unsigned data_dims, zero_dims_all, domain_dims;
  unsigned seq_dims; /* sp/cp: summed over like data, not a batch dim */
  int data_size, data_index;
  int np;
  pl_param *p;
  int nl;
  pl_layout *l;
  int nspan;
  pl_span *span;
  int64_t nlocal, nstate;
  float *params, *grads, *m, *v; /* params/grads: full local boxes (for
                                    zero 3 / zero >= 2 only until attach) */
  float *ppiece, *gpiece;        /* zero 3 / zero >= 2: the pieces */
  sg_var **var_sorted;           /* attached variables by address */
  int *var_index;
  int attached;
  float *pack, *piece;           /* ZeRO scratch: npack max, counts max */
  int64_t npack_max, npiece_max; /* their sizes (floats) */
  int micro, nmicro;
  int hooked_reductions; /* DDP reducers get grad-ready marks */
  int hooked_rs; /* zero >= 1, not deterministic: grad-ready starts reduce-scatters */
  int *
      rs_order; /* reduce-scatters in flight, in start order: [rs_head, rs_tail) */
  int rs_head, rs_tail;
  int64_t rs_inflight; /* zero >= 2: floats of full gradients in flight */
  int *uses; /* zero 3: the parameters' use order (first micro-batch) */
  int nuses, cap_uses, uses_done;
  int in_window,
      use_pos; /* between begin_micro and the end of backward; the next event */
  int in_backward; /* in the window, backward has begun */
  int pf;          /* zero 3: the parameter prefetched (-1: none) */
  sg_request_t pf_req;
  int64_t gathered, gathered_peak; /* zero 3: floats of gathered values held */
  sg_ckpt_array *ck;
  char (*ck_names)[96];
  pl_precision prec; /* mixed precision (precision_impl.h) */
  /* sg_parallel_to_device: params, grads, m, v are dev's memory, hparams,
   * hm, hv their host copies for checkpoints (dev.kind host: none) */
  sg_device dev;
  float *hparams, *hm, *hv;
};

/* DDP bucket size in floats; also the bound on the full gradients of zero
 * >= 2 whose reduce-scatter is in flight (parallel.c). */
int64_t pl_bucket_elems(const struct sg_parallel *p);
/* zero 3: the whole local box of q (master values) from the pieces of its
 * ZeRO group. Collective over the group (parallel_hooks.c). */
sg_status pl_gather_value(struct sg_parallel *p, pl_param *q, float *out);
/* Start parameter i's reduce-scatter (non-blocking, over its ZeRO group);
 * wait for every one in flight (parallel_hooks.c). */
sg_status pl_rs_start(struct sg_parallel *p, int i);
sg_status pl_rs_drain(struct sg_parallel *p);

#endif /* SG_PARALLEL_IMPL_H */
