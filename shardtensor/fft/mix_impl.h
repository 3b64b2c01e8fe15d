/* shardgrid — internal: the spectral convolution's planar mixing block
 * (spectral.c) shared with its AVX2 kernel (mix_avx2.c). */
#ifndef SG_MIX_IMPL_H
#define SG_MIX_IMPL_H

#include <stdint.h>

#define SG_MIX_CH 16 /* modes per register block (one AVX-512 f32 vector) */
#define SG_MIX_Q 4   /* output rows per register block */

/* One planar block product of Q output rows on modes [j0, j0 + SG_MIX_CH):
 * out[q] = sum_s a(s) * op(b(q, s)), a(s) = a + s sa, b(q, s) = b + q bq +
 * s sb, op = conj when conj_b; rows hold re[Mp] then im[Mp]; out[q] at out
 * + q oq. Repeated for N independent (a, out) pairs n (a + n an, out + n
 * on) sharing b: b's block (S x Q rows of one mode block, 8-16 KiB) then
 * stays in L1 across n, where a loop over n outside the mode blocks
 * streamed all of W (2.4 MB at width 32) from memory per sample. */
typedef struct sg_mix_blk {
  int64_t Mp, S, sa, sb, bq, oq, N, an, on;
  int conj_b;
} sg_mix_blk;

/* mix_avx2.c: built with -mavx2, and the whole run (every mode block, all
 * Q rows) on AVX2 with the portable kernel's results bit for bit. */
int sg_mix_avx2_built(void);
void sg_mix_run_avx2_f32(const sg_mix_blk *k, int64_t Q, const float *a,
                         const float *b, float *out);

#endif
