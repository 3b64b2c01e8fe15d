/* shardgrid — element-wise arithmetic of the op kernels, shared by host loops
 * and (later) CUDA kernels. Internal; included by the op sources. */
#ifndef SG_OPS_INL_H
#define SG_OPS_INL_H

#include <math.h>

#include "sg_dtype.h" /* SG_HD */

#define SG_GELU_K0 0.7978845608028654 /* sqrt(2/pi) */
#define SG_GELU_K1 0.044715

/* act: 0 relu, 1 gelu (tanh approximation), 2 silu, 3 tanh. */
static inline SG_HD double sg_act_f64(int act, double x) {
  switch (act) {
  case 0: return x > 0 ? x : 0;
  case 1: return 0.5 * x * (1 + tanh(SG_GELU_K0 * (x + SG_GELU_K1 * x * x * x)));
  case 2: return x / (1 + exp(-x));
  default: return tanh(x);
  }
}
static inline SG_HD double sg_act_grad_f64(int act, double x) {
  switch (act) {
  case 0: return x > 0 ? 1 : 0;
  case 1: {
    double u = SG_GELU_K0 * (x + SG_GELU_K1 * x * x * x);
    double th = tanh(u);
    double du = SG_GELU_K0 * (1 + 3 * SG_GELU_K1 * x * x);
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * du;
  }
  case 2: {
    double sg = 1 / (1 + exp(-x));
    return sg * (1 + x * (1 - sg));
  }
  default: {
    double th = tanh(x);
    return 1 - th * th;
  }
  }
}
static inline SG_HD float sg_act_f32(int act, float x) {
  switch (act) {
  case 0: return x > 0 ? x : 0.0f;
  case 1: return 0.5f * x * (1 + tanhf((float)SG_GELU_K0 * (x + (float)SG_GELU_K1 * x * x * x)));
  case 2: return x / (1 + expf(-x));
  default: return tanhf(x);
  }
}
static inline SG_HD float sg_act_grad_f32(int act, float x) {
  switch (act) {
  case 0: return x > 0 ? 1.0f : 0.0f;
  case 1: {
    float u = (float)SG_GELU_K0 * (x + (float)SG_GELU_K1 * x * x * x);
    float th = tanhf(u);
    float du = (float)SG_GELU_K0 * (1 + 3 * (float)SG_GELU_K1 * x * x);
    return 0.5f * (1 + th) + 0.5f * x * (1 - th * th) * du;
  }
  case 2: {
    float sg = 1 / (1 + expf(-x));
    return sg * (1 + x * (1 - sg));
  }
  default: {
    float th = tanhf(x);
    return 1 - th * th;
  }
  }
}

/* Source index of padded index i (in [-lo, n + hi)) for a boundary mode
 * (0 zero: -1 outside, 1 periodic, 2 reflect, 3 replicate). */
static inline SG_HD int64_t sg_pad_src_index(int mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
  case 0: return -1;
  case 1: { int64_t r = i % n; return r < 0 ? r + n : r; }
  case 2: {
    if (n == 1) return 0;
    int64_t period = 2 * (n - 1);
    int64_t r = i % period;
    if (r < 0) r += period;
    return r < n ? r : period - r;
  }
  default: return i < 0 ? 0 : n - 1;
  }
}
#endif /* SG_OPS_INL_H */
