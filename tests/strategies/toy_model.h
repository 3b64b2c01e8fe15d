/* The toy model of the parallel-plan tests: y = W2 gelu(W1 x + b1) + b2
 * with awkward parameter shapes (W1 7x15: uneven ZeRO pieces on 2, 3, 4
 * ranks; b1 7, W2 5x7, b2 5), MSE loss over a global batch of GB samples
 * split over the plan's data ranks, AdamW through the plan. */
#ifndef SG_TEST_TOY_MODEL_H
#define SG_TEST_TOY_MODEL_H

#include "sg_parallel.h"

enum { CIN = 15, HID = 7, COUT = 5, S = 3, GB = 12, NP = 4 };
enum {
  NTOT = HID * CIN + HID + COUT * HID + COUT,
  NTOT_W1 = HID * CIN,
  NTOT_W2 = COUT * HID
};

typedef struct toy {
  sg_parallel_t plan;
  sg_tape_t tape;
  sg_var v[NP];
  sg_var *pv[NP];
  sg_group_t data;
  int dsize, dindex;
  int ckpt; /* the first layer (linear, gelu) is a checkpointed block */
} toy;

/* The model under a plan made with pc on mesh, parameters initialised
 * alike on every mesh. Collective. */
sg_status toy_create_cfg(sg_mesh_t mesh, const sg_parallel_config *pc, toy *t);
void toy_destroy(toy *t);
/* Elements of parameter i. */
int64_t toy_numel(int i);
/* One step (forward, backward, reduce, AdamW lr 1e-2) on this rank's share
 * of the global batch of step `step`; the global gradient norm and loss.
 * hidden (may be NULL): the first layer's output of this rank's share,
 * GB * HID * S floats, copied after the forward. Collective. */
sg_status toy_step(toy *t, int64_t step, double *gnorm, double *loss_out,
                   float *hidden);
/* Micro-batch k of K of this rank's share of the global batch of step
 * `step`: forward, loss (mse, 1/K of it: the K add up to the step's mean)
 * and backward; the loss added to *loss_out; hidden as for toy_step.
 * Collective. */
sg_status toy_micro(toy *t, int64_t step, int k, int K, double *loss_out,
                    float *hidden);
/* One step of K micro-batches (toy_micro, reduce, AdamW lr 1e-2). */
sg_status toy_step_k(toy *t, int64_t step, int K, double *gnorm,
                     double *loss_out);
/* Every parameter, whole, in table order (NTOT floats). Collective. */
sg_status toy_params(toy *t, float *out);

#endif
