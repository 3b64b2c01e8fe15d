/* shardgrid — multi-step (autoregressive) training: the loss over K
 * steps of a model fed its own predictions, for any driver.
 *
 * The FNO paper's recipe: the model predicts the next frame from a window
 * of `history` frames, its prediction becomes the window's newest frame,
 * K times, and the loss is the mean of the K steps' losses
 * (sg_ag_dist_loss: exact over the domain and data groups), with the
 * gradient through all of them ("full") or through the last only
 * ("pushforward": the first K - 1 steps run without a tape). Each step may
 * be checkpointed (sg_ag_checkpoint: memory of one step, the same bits).
 * sg-train drives it (rollout_train, rollout_grad, rollout_curriculum);
 * a user's driver fills an sg_train_ar and calls, per micro-batch:
 *
 *   sg_train_ar_detached(&a);                  // pushforward: steps 0..K-2
 *   sg_train_ar_loss(&a, leaves, &loss, &v);   // recorded steps + loss
 *   sg_tape_backward(tape, loss, ...);         // the driver's backward
 *   sg_train_ar_release(leaves, a.steps);
 *
 * Every parallel configuration computes the same loss and gradient as
 * one process (the model's ops and the distributed loss are exact).
 */
#ifndef SG_ROLLOUT_TRAIN_H
#define SG_ROLLOUT_TRAIN_H

#include <stdint.h>

#include "sg_autograd.h"
#include "sg_dist_loss.h"
#include "sg_model.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One micro-batch of n examples: x (n, history*nvars, ny, nx) its inputs
 * (the `history` newest frames of `nvars` variables, oldest first), y and m
 * (steps, n, nvars, ny, nx) the targets of its steps and their masks
 * (sg-train: sg_dataset_fill_steps). Step k + 1's input is step k's shifted by one
 * frame with step k's prediction (times the mask of its target, as the
 * data hold 0 at masked points) as its newest frame. */
typedef struct sg_train_ar {
  sg_model_t model; /* marks the leaves (sg_model_mark); NULL: none */
  sg_block_fn step; /* a step's forward (ctx: step_ctx); NULL: the model's */
  void *step_ctx;
  sg_dtype dtype; /* of x, y, m: f32 (pushforward: f32 only) or f64 */
  sg_tape_t tape;
  int64_t n, nvars, history, ny, nx;
  /* channels of the model's output and of y and m (0: nvars); more (several
   * frames predicted at once, sg-train's out_frames) with steps = 1 only:
   * y and m are then (n, cout, ny, nx) */
  int64_t cout;
  int64_t steps;   /* K >= 1 */
  int pushforward; /* 0: gradient through every step, the loss their mean;
                    * 1: steps 0 .. K-2 without gradient, the loss step
                    * K-1's (sg_train_ar_detached first) */
  int ckpt;        /* checkpoint each step (sg_ag_checkpoint) */
  int masked;      /* m masks the loss and the feedback */
  /* NULL, or loss weights (n, nvars, ny, nx) of a->dtype, a leaf the caller
   * keeps (e.g. cos(latitude), sg_lat_weights): every step's loss weighs
   * its points by them (times m when masked); the feedback does not. */
  sg_var *weight;
  sg_loss_kind loss;
  sg_dist_loss_ctx lc;
  int64_t div; /* the loss is divided by this too (mse: micro-batches) */
  void *x, *y, *m;
  /* The model's device (zero-initialised: the host). Another one (one
   * process, issue 22): sg_train_ar_loss copies x and the K targets y
   * (host buffers, as above) to the caller's device buffers dx, dy of the
   * same sizes, makes the leaves there and takes the loss on the device
   * (sg_ag_loss; rel_l2 scaled by n / lc.global_batch), only its value
   * read back; checkpointed steps replay there. Masks, loss weights,
   * pushforward and a split domain or batch are SG_ERR_NOT_SUPPORTED
   * there, named. */
  sg_device device;
  void *dx, *dy;
} sg_train_ar;
/* K (rollout_train) at optimizer step `step` (1-based) with a curriculum
 * of `curriculum` steps per increment (0: none): min(K, 1 + (step-1)/S). */
int64_t sg_train_ar_steps_at(int64_t steps, int64_t curriculum, int64_t step);
/* Pushforward: run steps 0 .. K-2 without a tape and leave step K-1's
 * input in a->x (nothing when !pushforward). Collective. */
sg_status sg_train_ar_detached(const sg_train_ar *a);
/* The recorded steps and the loss on the tape (*loss; *lval its value in
 * double). leaves: 1 + 2K variables the caller keeps until the backward,
 * then sg_train_ar_release. K = 1: the one-step loss of sg_ag_dist_loss,
 * the same ops as before multi-step training. Collective. */
sg_status sg_train_ar_loss(const sg_train_ar *a, sg_var *leaves, sg_var **loss,
                           double *lval);
void sg_train_ar_release(sg_var *leaves, int64_t steps);
/* Shift the input window x (n, history*frame) of each example by one
 * frame and append pred (n, frame), times mask (NULL: none): the rollout's
 * feedback, the values of the recorded one. */
void sg_train_feed_back(float *x, const float *pred, const float *mask,
                        int64_t n, int64_t history, int64_t frame);

#ifdef __cplusplus
}
#endif
#endif /* SG_ROLLOUT_TRAIN_H */
