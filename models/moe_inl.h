/* shardgrid — the routing arithmetic of the mixture-of-experts op
 * (ag_moe.c) as SG_HD functions, host loops and (when the MoE gets its
 * device path, issue 22) CUDA kernels alike: one token's router
 * (softmax(Wr x), top-k, gates) and one sample's expert queues (each
 * pair's place, the fractions of pairs per expert). Double arithmetic. */
#ifndef SG_MOE_INL_H
#define SG_MOE_INL_H

#include <math.h>
#include <stdint.h>

#include "sg_dtype.h" /* SG_HD */

/* One token x (C values): pm (E) = softmax(Wr x) (Wr: E x C), sm (k) the
 * top-k experts (ties: the lower index), gate (k) their gates (k = 2
 * renormalised over the two). */
static inline SG_HD void sg_moe_route_token(int64_t E, int64_t C, int64_t k,
                                            const double *Wr, const double *x,
                                            double *pm, int *sm, double *gate) {
  double mx = -INFINITY, s = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    double z = 0.0;
    for (int64_t c = 0; c < C; ++c) z += Wr[e * C + c] * x[c];
    pm[e] = z, mx = z > mx ? z : mx;
  }
  for (int64_t e = 0; e < E; ++e) s += pm[e] = exp(pm[e] - mx);
  for (int64_t e = 0; e < E; ++e) pm[e] /= s;
  double gs = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < (int)E; ++e)
      if ((j == 0 || e != sm[0]) && (best < 0 || pm[e] > pm[best])) best = e;
    sm[j] = best, gs += pm[best];
  }
  for (int64_t j = 0; j < k; ++j) gate[j] = k == 1 ? pm[sm[j]] : pm[sm[j]] / gs;
}

/* One sample's T tokens x k choices (G: T x k expert ids, token-major):
 * Q (T x k) each pair's place in its expert's queue (slot-major, then
 * global token order), f (E) the sample's fraction of pairs per expert. */
static inline SG_HD void sg_moe_queue_sample(int64_t E, int64_t T, int64_t k,
                                             const int *G, int *Q, double *f) {
  for (int64_t e = 0; e < E; ++e) f[e] = 0.0;
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = t * k + j;
      Q[i] = (int)f[G[i]];
      f[G[i]] += 1.0;
    }
  for (int64_t e = 0; e < E; ++e) f[e] /= (double)(T * k);
}

#endif
