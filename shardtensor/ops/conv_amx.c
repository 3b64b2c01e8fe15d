/* shardgrid — the bf16 direct convolution on AMX tiles (AMX-BF16
 * `tdpbf16ps`, f32 accumulation).
 *
 * The channel-pair layout of conv_bf16.c is AMX's too: a B tile is 16 rows
 * (channel pairs) x 16 pixels of bf16 pairs, and for a fixed kernel offset
 * the rows of consecutive pairs are one packed plane apart, so a B tile is
 * a strided load of the packed image; the A tile is 16 output rows x 16
 * pairs of weights (packed per offset and block of 16 pairs). Per 32 output
 * rows x 32 pixels four C tiles accumulate over every offset and pair
 * block, then are stored to the tile product. tdpbf16ps sums the products
 * in f32 in an order of its own (flushing bf16 denormals), so the result is
 * the vdpbf16ps kernel's up to the order of the f32 sums.
 *
 * The weight gradient (sg_amx_wgrad_off) reduces over pixels instead: its
 * A tiles are 16 input channels x 32 pixels of bf16 planes (read at the
 * kernel offset's shift, any pixel), its B tiles 16 pixel pairs x 16
 * output channels of dy, packed by sg_bf16_pack_dy_tiles (conv_bf16.c).
 *
 * Measured on this machine's CPU (Sapphire Rapids, one core): vdpbf16ps
 * retires one instruction per two cycles (32 products), half the f32 FMA
 * rate, while tdpbf16ps reaches ~840 G products/s against ~88 G for f32
 * FMAs: hence AMX where present.
 *
 * Compiled with -mamx-tile -mamx-bf16 (shardtensor/ops/CMakeLists.txt);
 * entered only when sg_amx_conv_available() (cpuid AMX-TILE and AMX-BF16,
 * and Linux granted the tile data state to the process). */
#define _DEFAULT_SOURCE /* syscall */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops_impl.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

int sg_amx_conv_built(void) { return 1; }

/* cpuid leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE; then ask Linux for
 * the tile data state (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18), once
 * per process (a tile instruction without it faults). */
int sg_amx_conv_supported(void) {
  static int state = -1; /* benign race: every thread computes the same */
  if (state >= 0) return state;
  unsigned a, b, c, d;
  int ok = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u) &&
           (d >> 24 & 1u);
  if (ok) ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  state = ok;
  return state;
}

typedef struct amx_cfg {
  uint8_t palette, start;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_cfg;

/* tiles 0-3: C (16 x 16 f32); 4, 5: A (16 rows x pb pairs); 6, 7: B (pb
 * rows x 16 pixel pairs) */
static void amx_config(int pb) {
  amx_cfg c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = (uint8_t)(t >= 6 ? pb : 16);
    c.colsb[t] = (uint16_t)(t == 4 || t == 5 ? 4 * pb : 64);
  }
  _tile_loadconfig(&c);
}

void sg_amx_gemm_off(int64_t nkk, int64_t npb, int64_t pb, int64_t kp,
                     int64_t np, const uint32_t *wa, const uint32_t *x,
                     int64_t xpl, const int64_t *ooff, const float *bt,
                     float *y, int64_t ldy) {
  amx_config((int)pb);
  const int64_t xs = 4 * xpl, ys = 4 * ldy;
  for (int64_t p0 = 0; p0 < np; p0 += 32)
    for (int64_t k0 = 0; k0 < kp; k0 += 32) {
      if (bt) { /* the bias: rows of 16 equal values */
        _tile_loadd(0, bt + k0 * 16, 64);
        _tile_loadd(1, bt + k0 * 16, 64);
        _tile_loadd(2, bt + (k0 + 16) * 16, 64);
        _tile_loadd(3, bt + (k0 + 16) * 16, 64);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      for (int64_t o = 0; o < nkk; ++o)
        for (int64_t jb = 0; jb < npb; ++jb) {
          const uint32_t *wb = wa + ((o * npb + jb) * kp + k0) * 16;
          const uint32_t *xb = x + jb * 16 * xpl + ooff[o] + p0;
          _tile_loadd(4, wb, 64);
          _tile_loadd(5, wb + 16 * 16, 64);
          _tile_loadd(6, xb, xs);
          _tile_loadd(7, xb + 16, xs);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      float *yb = y + k0 * ldy + p0;
      _tile_stored(0, yb, ys);
      _tile_stored(1, yb + 16, ys);
      _tile_stored(2, yb + 16 * ldy, ys);
      _tile_stored(3, yb + 16 * ldy + 16, ys);
    }
  _tile_release();
}

/* The weight gradient: per kernel offset, C (32 input x 32 output channels
 * in four tiles, the thread's partial sums) += A (the bf16 planes shifted
 * by the offset: 16 channels x 32 pixels, a strided load at any pixel) x B
 * (dy's pixel pairs x 16 output channels, packed once per tile of rows). */
void sg_amx_wgrad_off(int64_t nkk, int64_t cp, int64_t kp, int64_t npad,
                      const uint16_t *xb, int64_t xpl, const int64_t *ooff,
                      const uint32_t *dyt, float *part) {
  amx_config(16);
  const int64_t xs = 2 * xpl, ps = 4 * kp, nkb = kp / 16;
  for (int64_t o = 0; o < nkk; ++o)
    for (int64_t c0 = 0; c0 < cp; c0 += 32)
      for (int64_t k0 = 0; k0 < kp; k0 += 32) {
        float *cb = part + (o * cp + c0) * kp + k0;
        _tile_loadd(0, cb, ps);
        _tile_loadd(1, cb + 16, ps);
        _tile_loadd(2, cb + 16 * kp, ps);
        _tile_loadd(3, cb + 16 * kp + 16, ps);
        const uint16_t *xa = xb + c0 * xpl + ooff[o];
        for (int64_t p0 = 0; p0 < npad; p0 += 32) {
          const uint32_t *bb = dyt + ((p0 / 32) * nkb + k0 / 16) * 256;
          _tile_loadd(4, xa + p0, xs);
          _tile_loadd(5, xa + 16 * xpl + p0, xs);
          _tile_loadd(6, bb, 64);
          _tile_loadd(7, bb + 256, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, cb, ps);
        _tile_stored(1, cb + 16, ps);
        _tile_stored(2, cb + 16 * kp, ps);
        _tile_stored(3, cb + 16 * kp + 16, ps);
      }
  _tile_release();
}

#else /* no AMX: callers take the other kernels */

int sg_amx_conv_built(void) { return 0; }
int sg_amx_conv_supported(void) { return 0; }

void sg_amx_gemm_off(int64_t nkk, int64_t npb, int64_t pb, int64_t kp,
                     int64_t np, const uint32_t *wa, const uint32_t *x,
                     int64_t xpl, const int64_t *ooff, const float *bt,
                     float *y, int64_t ldy) {
  (void)nkk, (void)npb, (void)pb, (void)kp, (void)np, (void)wa, (void)x;
  (void)xpl, (void)ooff, (void)bt, (void)y, (void)ldy;
}

void sg_amx_wgrad_off(int64_t nkk, int64_t cp, int64_t kp, int64_t npad,
                      const uint16_t *xb, int64_t xpl, const int64_t *ooff,
                      const uint32_t *dyt, float *part) {
  (void)nkk, (void)cp, (void)kp, (void)npad, (void)xb, (void)xpl, (void)ooff;
  (void)dyt, (void)part;
}

#endif
