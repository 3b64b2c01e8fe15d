/* shardgrid — op kernels: argument checks, geometry, workspaces, dispatch
 * to the typed kernels, statistics merges. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops_impl.h"
#include "sg_device.h"
#include "sg_ops_inl.h"

/* OpenBLAS's thread control, if the BLAS is OpenBLAS (weak: other BLAS
 * libraries simply leave them NULL). */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
#pragma weak openblas_set_num_threads
#pragma weak openblas_get_num_threads

/* sg_expf's clamp range, in its own object so the compiler cannot fold
 * it into vectorised loops (see sg_ops_inl.h). */
const float sg_expf_bounds[2] = {-87.0f, 88.0f};

int sg_blas_threads_begin(void) {
  if (!openblas_get_num_threads || !openblas_set_num_threads) return 0;
  int n = openblas_get_num_threads();
  if (n > 1) openblas_set_num_threads(1);
  return n;
}

void sg_blas_threads_end(int saved) {
  if (saved > 1 && openblas_set_num_threads) openblas_set_num_threads(saved);
}

static int sg_max_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/* ---- run-time CPU dispatch (ops_impl.h) ---------------------------------
 * The AVX-512 kernels are compiled with their own target flags, so a
 * library built on (or for) another CPU still has them; whether they run
 * is decided here, in a file compiled for the library's baseline target,
 * so that no AVX-512 instruction executes before the check. GCC's and
 * clang's __builtin_cpu_supports reads cpuid once (libgcc's constructor)
 * and reports avx512f only where the OS also saves the AVX-512 registers
 * (XCR0). SG_SIMD=portable forces the portable path (tests compare the
 * two; a user can rule out a kernel). Read on every call: cheap next to a
 * kernel, and a test may change it between calls. SG_SIMD=avx2 rules out
 * AVX-512 only (the AVX2 tier, sg_simd_avx2, where it has a kernel). */
int sg_simd_avx512(void) {
  const char *env = getenv("SG_SIMD");
  if (env && (!strcmp(env, "portable") || !strcmp(env, "avx2"))) return 0;
#if (defined(__x86_64__) || defined(__i386__)) && \
    (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx512f") != 0;
#else
  return 0;
#endif
}

/* AVX2 with FMA (Haswell, Zen 1-3 and newer): the tier between AVX-512 and
 * the portable C, for kernels compiled with their own -mavx2 -mfma flags.
 * SG_SIMD=portable rules it out as it does AVX-512. */
int sg_simd_avx2(void) {
  const char *env = getenv("SG_SIMD");
  if (env && !strcmp(env, "portable")) return 0;
#if (defined(__x86_64__) || defined(__i386__)) && \
    (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx2") != 0 &&
         __builtin_cpu_supports("fma") != 0;
#else
  return 0;
#endif
}

int sg_pw_f32_available(void) { return sg_pw_f32_built() && sg_simd_avx512(); }

/* The direct convolution's AVX2 kernels (conv_avx2.c): where the AVX-512
 * ones are not available (or SG_SIMD=avx2 rules them out). */
int sg_c2_conv_available(void) {
  return sg_c2_conv_built() && !sg_pw_f32_available() && sg_simd_avx2();
}

/* 2: the AVX-512 1x1 kernels (pointwise.c), 1: the AVX2 ones
 * (pointwise_avx2.c), 0: BLAS. */
int sg_pw_tier(void) {
  if (sg_pw_f32_available()) return 2;
  return sg_pw2_f32_built() && sg_simd_avx2() ? 1 : 0;
}

int sg_gelu_tier(void) {
  if (sg_gelu_simd_built() && sg_simd_avx512()) return 2;
  return sg_gelu2_built() && sg_simd_avx2() ? 1 : 0;
}

int sg_gelu_simd_available(void) { return sg_gelu_tier() > 0; }

/* The 1x1 kernels of tier t (1 or 2). */
static void pw_apply(int t, int64_t n, int64_t cin, int64_t cout, int64_t s,
                     const float *w, int64_t wr, int64_t wc, const float *x,
                     const float *b, float *y, int accumulate, int nthreads) {
  if (t == 2)
    sg_pw_apply_f32(n, cin, cout, s, w, wr, wc, x, b, y, accumulate, nthreads);
  else
    sg_pw2_apply_f32(n, cin, cout, s, w, wr, wc, x, b, y, accumulate, nthreads);
}

/* GELU forward / backward of tier t (1 or 2); seq: on the calling thread */
static void gelu_fwd(int t, int seq, int64_t n, const float *x, float *y) {
  if (t == 2)
    (seq ? sg_gelu_fwd_seq_f32 : sg_gelu_fwd_simd_f32)(n, x, y);
  else
    (seq ? sg_gelu2_fwd_seq_f32 : sg_gelu2_fwd_f32)(n, x, y);
}

static void gelu_bwd(int t, int64_t n, const float *x, const float *dy,
                     float *dx) {
  if (t == 2)
    sg_gelu_bwd_simd_f32(n, x, dy, dx);
  else
    sg_gelu2_bwd_f32(n, x, dy, dx);
}

/* AVX512_BF16 (vdpbf16ps) besides AVX-512F; SG_CONV_BF16=0 turns the bf16
 * kernels off (the f32 ones run on the same bf16 values: A/B runs). The
 * vdpbf16ps kernel multiplies at half the f32 FMA rate on Sapphire Rapids
 * (conv_amx.c), so the convolution takes it only where asked
 * (SG_CONV_BF16=avx512); by default AMX where present, else f32. */
int sg_bf16_conv_available(void) {
  const char *env = getenv("SG_CONV_BF16");
  if (env && env[0] == '0') return 0;
  if (!sg_bf16_conv_built() || !sg_simd_avx512()) return 0;
#if (defined(__x86_64__) || defined(__i386__)) && \
    (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx512bf16") != 0;
#else
  return 0;
#endif
}

int sg_amx_conv_available(void) {
  const char *env = getenv("SG_CONV_BF16");
  if (env && strcmp(env, "amx") && strcmp(env, "1")) return 0;
  return sg_amx_conv_built() && sg_bf16_conv_available() &&
         sg_amx_conv_supported();
}

/* Whether the n floats at p all hold bf16 values (low 16 bits zero): the
 * bf16 kernels run only on such operands, so that they compute the f32
 * kernels' sums (bf16 products are exact) and a caller's f32 data (a
 * model's input under the bf16 policy) is not rounded. One pass, a small
 * fraction of a convolution's work. */
static int sg_bf16_valued(const void *p, int64_t n) {
  const uint32_t *u = p;
  uint32_t acc = 0;
  for (int64_t i = 0; i < n; ++i) acc |= u[i] & 0xffffu;
  return acc == 0;
}

/* The bf16 kernel of a direct convolution: 2 AMX, 1 vdpbf16ps, 0 none. */
static int sg_conv_bf16_kind(void) {
  if (sg_amx_conv_available()) return 2;
  const char *env = getenv("SG_CONV_BF16");
  return env && !strcmp(env, "avx512") && sg_bf16_conv_available() ? 1 : 0;
}

static uint32_t sg_bf16_pair(float lo, float hi) {
  return (uint32_t)sg_bf16_from_f32(lo).bits |
         (uint32_t)sg_bf16_from_f32(hi).bits << 16;
}

void sg_bf16_pack_weights(int64_t nr, int64_t nch, int64_t kk, const float *w,
                          int64_t rs, int64_t cs, uint32_t *dst) {
  const int64_t np = (nch + 1) / 2;
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t j = 0; j < np; ++j)
      for (int64_t a = 0; a < kk; ++a) {
        const float *lo = w + r * rs + 2 * j * cs + a;
        dst[(r * np + j) * kk + a] = sg_bf16_pair(*lo, 2 * j + 1 < nch ? lo[cs]
                                                                       : 0.0f);
      }
}

void sg_amx_pack_weights(int64_t nr, int64_t nch, int64_t kk, const float *w,
                         int64_t rs, int64_t cs, sg_amx_dims a, uint32_t *dst) {
  const int64_t np = (nch + 1) / 2;
  for (int64_t o = 0; o < kk; ++o)
    for (int64_t jb = 0; jb < a.npb; ++jb)
      for (int64_t r = 0; r < a.kp; ++r)
        for (int64_t jj = 0; jj < 16; ++jj) {
          const int64_t j = jb * a.pb + jj;
          uint32_t v = 0;
          if (r < nr && jj < a.pb && j < np) {
            const float *lo = w + r * rs + 2 * j * cs + o;
            v = sg_bf16_pair(*lo, 2 * j + 1 < nch ? lo[cs] : 0.0f);
          }
          dst[((o * a.npb + jb) * a.kp + r) * 16 + jj] = v;
        }
}

#define SG_CHECK_DT(dt)                                                    \
  do {                                                                     \
    if ((dt) != SG_DTYPE_F32 && (dt) != SG_DTYPE_F64)                      \
      SG_RAISE(SG_ERR_NOT_SUPPORTED, "op kernels take f32 or f64, not %s", \
               sg_dtype_name(dt));                                         \
  } while (0)

#define SG_CHECK_PTR(p)                                       \
  do {                                                        \
    if (!(p)) SG_RAISE(SG_ERR_INVALID_ARG, "%s is NULL", #p); \
  } while (0)

/* Call the f32 or the f64 instance (ops_tmpl.h) of typed kernel fn, for a
 * dtype SG_CHECK_DT accepted. */
#define SG_DISPATCH(dt, fn, ...) \
  do {                           \
    if ((dt) == SG_DTYPE_F32)    \
      fn##_f32(__VA_ARGS__);     \
    else                         \
      fn##_f64(__VA_ARGS__);     \
  } while (0)

/* Allocate a workspace if the caller gave none. */
static sg_status sg_ws_get(void *given, size_t bytes, void **ws, void **own) {
  *own = NULL;
  if (given || bytes == 0) {
    *ws = given;
    return SG_OK;
  }
  sg_status st = sg_malloc(sg_device_host(), bytes, own);
  *ws = *own;
  return st;
}

static void sg_ws_put(void **own) {
  if (*own) sg_free(sg_device_host(), own);
}

/* ---- geometry ----------------------------------------------------------- */

#define SG_CONV_TILE_COLS 1024 /* target GEMM columns per tile */

/* Whether the convolution runs direct (ops_tmpl.h: 2-D, stride 1, f32 with
 * the AVX-512 kernels available, or else the AVX2 ones (g->avx2), at most a
 * quarter of the computed row wasted on the kernel's margin;
 * SG_CONV_DIRECT=0 turns it off), whether its forward and
 * dx run in bf16 (bf16: the caller's values are bf16, and the kernels are
 * available), and its workspace (*per, bytes per thread, raised to fit). */
static void sg_conv_direct_make(sg_conv_geom *g, int excluded, int bf16,
                                size_t *per) {
  const char *env = getenv("SG_CONV_DIRECT");
  const int avx512 = sg_pw_f32_available();
  g->avx2 = !avx512 && sg_c2_conv_available();
  g->direct = !excluded && !g->pointwise && (avx512 || g->avx2) &&
              !(env && env[0] == '0') && g->t == 1 && g->in[0] == 1 &&
              g->str[1] == 1 && g->str[2] == 1 &&
              4 * (g->in[2] - g->out[2]) <= g->out[2];
  if (!g->direct) {
    g->avx2 = 0;
    return;
  }
  const char *rows_env = getenv("SG_CONV_ROWS");
  g->rowsout = g->avx2 && !(rows_env && rows_env[0] == '0') &&
               sg_c2_gemm_rows_ok(g->in[2], g->out[2]);
  const int64_t sp1 = g->in[1] - g->out[1] + 1, wg = 2 * g->in[2] - g->out[2];
  const int64_t fwd = g->k * sg_col_ld(g->rows * g->in[2], sizeof(float));
  const int64_t bwd = g->c * g->k * g->kk + g->k * (g->rows + sp1 - 1) * wg +
                      g->c * sg_col_ld(g->rows * wg, sizeof(float));
  size_t need = sg_direct_off_bytes(g) +
                (size_t)(fwd > bwd ? fwd : bwd) * sizeof(float) + 128;
  g->bf16 = bf16 ? sg_conv_bf16_kind() : 0;
  if (g->bf16) {
    const size_t b = g->bf16 == 2 ? sg_amx_direct_bytes(g)
                                  : sg_bf16_direct_bytes(g);
    if (b > need) need = b;
  }
  if (need > *per) *per = need;
}

static sg_status sg_conv_geom_make(const sg_conv_desc *d, int pool, int trans,
                                   sg_dtype dt, sg_conv_geom *g) {
  sg_status st = SG_OK;
  SG_CHECK_DT(dt);
  SG_CHECK_PTR(d);
  memset(g, 0, sizeof *g);
  if (d->nsp < 1 || d->nsp > SG_OPS_MAX_SPATIAL)
    SG_RAISE(SG_ERR_INVALID_ARG, "nsp must be 1..3, got %d", d->nsp);
  if (d->batch < 0 || d->cin < 1 || (!pool && d->cout < 1))
    SG_RAISE(SG_ERR_SHAPE, "bad batch/channels (%lld, %lld, %lld)",
             (long long)d->batch, (long long)d->cin, (long long)d->cout);
  g->n = d->batch;
  g->c = d->cin;
  g->k = pool ? d->cin : d->cout;
  int off = SG_OPS_MAX_SPATIAL - d->nsp;
  for (int i = 0; i < 3; ++i) {
    g->in[i] = g->out[i] = g->ker[i] = g->str[i] = g->dil[i] = 1;
  }
  for (int i = 0; i < d->nsp; ++i) {
    int j = off + i;
    g->in[j] = d->in[i];
    g->ker[j] = d->kernel[i];
    g->str[j] = trans ? d->kernel[i] : d->stride[i];
    g->dil[j] = trans ? 1 : d->dilation[i];
    if (g->ker[j] < 1 || g->str[j] < 1 || g->dil[j] < 1)
      SG_RAISE(SG_ERR_INVALID_ARG,
               "dim %d: kernel, stride and dilation must be >= 1 "
               "(%lld, %lld, %lld)",
               i, (long long)g->ker[j], (long long)g->str[j],
               (long long)g->dil[j]);
    if (g->in[j] < 1)
      SG_RAISE(SG_ERR_SHAPE, "dim %d: input extent %lld", i,
               (long long)g->in[j]);
    if (trans) {
      g->out[j] = g->in[j] * g->ker[j];
    } else {
      int64_t span = g->dil[j] * (g->ker[j] - 1) + 1;
      if (g->in[j] < span)
        SG_RAISE(SG_ERR_SHAPE,
                 "dim %d: input extent %lld (with margins) is smaller than "
                 "the window span %lld",
                 i, (long long)g->in[j], (long long)span);
      g->out[j] = (g->in[j] - span) / g->str[j] + 1;
    }
  }
  g->sin = g->in[0] * g->in[1] * g->in[2];
  g->sout = g->out[0] * g->out[1] * g->out[2];
  g->kk = g->ker[0] * g->ker[1] * g->ker[2];
  g->ckk = g->c * g->kk;
  g->t = 2;
  for (int i = 0; i < 3; ++i)
    if (g->out[i] > 1) {
      g->t = i;
      break;
    }
  g->inner = 1;
  for (int i = g->t + 1; i < 3; ++i) g->inner *= g->out[i];
  int64_t rows = (SG_CONV_TILE_COLS + g->inner - 1) / g->inner;
  int64_t minrows = g->dil[g->t] * (g->ker[g->t] - 1) / g->str[g->t] + 1;
  if (rows < minrows) rows = minrows;
  if (rows > g->out[g->t]) rows = g->out[g->t];
  g->rows = rows;
  g->ntile = (g->out[g->t] + rows - 1) / rows;
  g->cols = rows * g->inner;
  g->pointwise = !trans && g->kk == 1 && g->str[0] * g->str[1] * g->str[2] == 1;
  if (trans) g->cols = g->sin < SG_CONV_TILE_COLS ? g->sin : SG_CONV_TILE_COLS;
  if (g->ckk > INT_MAX / 4 || g->sout > INT_MAX / 4 || g->sin > INT_MAX / 4 ||
      g->k * g->kk > INT_MAX / 4)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "block too large for 32-bit BLAS indices");
  g->nthreads = sg_max_threads();
  size_t es = sg_dtype_size(dt);
  size_t per;
  if (trans)
    per = (size_t)(g->k * g->kk * g->cols + g->c * g->k * g->kk) * es;
  else
    per = (size_t)((2 * g->ckk + g->k) * sg_col_ld(g->cols, es) +
                   g->k * g->ckk) *
          es;
  sg_conv_direct_make(g, pool || trans || dt != SG_DTYPE_F32, d->bf16, &per);
  g->ws_per_thread = (per + 63) / 64 * 64;
fail:
  return st;
}

static sg_status sg_window_out_shape(const sg_conv_desc *d, int pool,
                                     int64_t *out) {
  sg_status st = SG_OK;
  sg_conv_geom g;
  SG_TRY(sg_conv_geom_make(d, pool, 0, SG_DTYPE_F32, &g));
  for (int i = 0; i < d->nsp; ++i)
    out[i] = g.out[SG_OPS_MAX_SPATIAL - d->nsp + i];
fail:
  return st;
}

sg_status sg_conv_out_shape(const sg_conv_desc *d, int64_t *out) {
  return sg_window_out_shape(d, 0, out);
}

sg_status sg_pool_out_shape(const sg_conv_desc *d, int64_t *out) {
  return sg_window_out_shape(d, 1, out);
}

size_t sg_conv_workspace_bytes(const sg_conv_desc *d, sg_dtype dt) {
  sg_conv_geom g;
  if (sg_conv_geom_make(d, 0, 0, dt, &g) != SG_OK) {
    sg_clear_error();
    return 0;
  }
  return g.ws_per_thread * (size_t)g.nthreads;
}

/* The tier of the pointwise kernels a 1x1 convolution runs on (sg_pw_tier:
 * 2 AVX-512, 1 AVX2; no workspace), 0: im2col and BLAS. */
static int conv_pw_tier(const sg_conv_geom *g, sg_dtype dt) {
  return dt == SG_DTYPE_F32 && g->pointwise ? sg_pw_tier() : 0;
}

/* Bytes of the pointwise kernels' dW scratch: the lane partials (16 on
 * AVX-512, 8 on AVX2) per weight and bias. */
static size_t conv_pw_part_bytes(const sg_conv_geom *g, int tier) {
  const int64_t lanes = tier == 2 ? 16 : 8;
  return (size_t)((g->k * g->c + g->k) * lanes) * sizeof(float);
}

/* The f32 lanes per weight of the weight gradient's slot partials: 16 for
 * the AVX-512 register-blocked kernels (direct or im2col), 8 for the AVX2
 * direct ones, 0: the BLAS GEMM's partials (ops_impl.h
 * sg_conv_dw_part_bytes). */
static int conv_dw_lanes(const sg_conv_geom *g, sg_dtype dt) {
  if (dt != SG_DTYPE_F32) return 0;
  if (g->direct && g->avx2) return 8;
  return sg_pw_f32_available() ? 16 : 0;
}

/* Bytes of the weight gradient's slot partials (wbf16: dW on the bf16
 * kernels, none). */
static size_t conv_wpart_bytes(const sg_conv_geom *g, sg_dtype dt, int wbf16) {
  if (wbf16) return 0;
  return sg_conv_dw_part_bytes(g, sg_dtype_size(dt), conv_dw_lanes(g, dt));
}

size_t sg_conv_alloc_bytes(const sg_conv_desc *d, sg_dtype dt, int trans,
                           int backward, int nthreads) {
  sg_conv_geom g;
  memset(&g, 0, sizeof g);
  if (sg_conv_geom_make(d, 0, trans != 0, dt, &g) != SG_OK) {
    sg_clear_error();
    return 0;
  }
  if (nthreads > 0) g.nthreads = nthreads;
  const int tier = trans ? 0 : conv_pw_tier(&g, dt);
  if (tier) return backward ? conv_pw_part_bytes(&g, tier) : 0;
  size_t b = g.ws_per_thread * (size_t)g.nthreads;
  if (backward) /* the transposed one's dW: the BLAS GEMM's slots */
    b += trans ? sg_conv_dw_part_bytes(&g, sg_dtype_size(dt), 0)
               : conv_wpart_bytes(&g, dt, 0);
  return b;
}

sg_status sg_conv_forward(const sg_conv_desc *d, sg_dtype dt, const void *x,
                          const void *w, const void *b, void *y, void *ws) {
  sg_status st = SG_OK;
  void *own = NULL, *buf = NULL;
  sg_conv_geom g;
  SG_TRY(sg_conv_geom_make(d, 0, 0, dt, &g));
  if (g.n == 0) goto fail;
  SG_CHECK_PTR(x);
  SG_CHECK_PTR(w);
  SG_CHECK_PTR(y);
  g.round = d->round_out && dt == SG_DTYPE_F32;
  const int tier = conv_pw_tier(&g, dt);
  if (tier) {
    pw_apply(tier, g.n, g.c, g.k, g.sout, w, g.ckk, 1, x, b, y,
             g.round ? SG_PW_ROUND : 0, g.nthreads);
    goto fail;
  }
  SG_TRY(sg_ws_get(ws, g.ws_per_thread * (size_t)g.nthreads, &buf, &own));
  if (g.bf16 &&
      !(sg_bf16_valued(x, g.n * g.c * g.sin) && sg_bf16_valued(w, g.k * g.ckk)))
    g.bf16 = 0;
  SG_DISPATCH(dt, sg_conv_fwd, &g, x, w, b, y, buf);
fail:
  sg_ws_put(&own);
  return st;
}

sg_status sg_conv_backward(const sg_conv_desc *d, sg_dtype dt, const void *x,
                           const void *w, const void *dy, void *dx, void *dw,
                           void *db, void *ws) {
  sg_status st = SG_OK;
  void *own = NULL, *buf = NULL, *wpart = NULL;
  sg_conv_geom g;
  SG_TRY(sg_conv_geom_make(d, 0, 0, dt, &g));
  if (g.n == 0) goto fail;
  SG_CHECK_PTR(dy);
  if (dw) SG_CHECK_PTR(x);
  if (dx) SG_CHECK_PTR(w);
  const int tier = conv_pw_tier(&g, dt);
  if (tier) {
    /* dx = W^T dy, and dW += dy x^T with db in the same pass, in place */
    if (db && !dw) sg_conv_bwd_f32(&g, x, w, dy, NULL, NULL, db, NULL, NULL, 0);
    if (dx)
      pw_apply(tier, g.n, g.k, g.c, g.sout, w, 1, g.ckk, dy, NULL, dx, 0,
               g.nthreads);
    if (dw) {
      SG_TRY(sg_malloc(sg_device_host(), conv_pw_part_bytes(&g, tier), &own));
      (tier == 2 ? sg_pw_wgrad_f32 : sg_pw2_wgrad_f32)(g.n, g.c, g.k, g.sout, x,
                                                       dy, dw, db, own,
                                                       g.nthreads);
    }
    goto fail;
  }
  SG_TRY(sg_ws_get(ws, g.ws_per_thread * (size_t)g.nthreads, &buf, &own));
  /* the bf16 kernels on bf16 values only: dx needs dy and w, the weight
   * gradient (AMX only: vdpbf16ps multiplies slower than f32 FMAs here)
   * dy and x; SG_CONV_BF16_DW=0 keeps the weight gradient f32 (A/B runs) */
  const char *env = getenv("SG_CONV_BF16_DW");
  const int dyv = g.bf16 && sg_bf16_valued(dy, g.n * g.k * g.sout);
  g.wbf16 = dw && g.bf16 == 2 && dyv && !(env && env[0] == '0') &&
            sg_bf16_valued(x, g.n * g.c * g.sin);
  if (g.bf16 && dx && !(dyv && sg_bf16_valued(w, g.k * g.ckk))) g.bf16 = 0;
  /* the weight gradient's slot partials: f32 lanes for the register-blocked
   * kernels, else the BLAS GEMM's (ops_impl.h) */
  const int lanes = conv_dw_lanes(&g, dt);
  if (dw && conv_wpart_bytes(&g, dt, g.wbf16))
    SG_TRY(
        sg_malloc(sg_device_host(), conv_wpart_bytes(&g, dt, g.wbf16), &wpart));
  SG_DISPATCH(dt, sg_conv_bwd, &g, x, w, dy, dx, dw, db, buf, wpart, lanes);
fail:
  sg_ws_put(&wpart);
  sg_ws_put(&own);
  return st;
}

static sg_conv_desc sg_linear_desc(int64_t batch, int64_t cin, int64_t cout,
                                   int64_t spatial) {
  sg_conv_desc d = {.nsp = 1,
                    .batch = batch,
                    .cin = cin,
                    .cout = cout,
                    .in = {spatial},
                    .kernel = {1},
                    .stride = {1},
                    .dilation = {1}};
  return d;
}

sg_status sg_linear_forward(sg_dtype dt, int64_t batch, int64_t cin,
                            int64_t cout, int64_t spatial, const void *x,
                            const void *w, const void *b, void *y) {
  sg_conv_desc d = sg_linear_desc(batch, cin, cout, spatial);
  return sg_conv_forward(&d, dt, x, w, b, y, NULL);
}

sg_status sg_linear_forward_bf16(sg_dtype dt, int64_t batch, int64_t cin,
                                 int64_t cout, int64_t spatial, const void *x,
                                 const void *w, const void *b, void *y) {
  sg_conv_desc d = sg_linear_desc(batch, cin, cout, spatial);
  d.round_out = 1;
  return sg_conv_forward(&d, dt, x, w, b, y, NULL);
}

sg_status sg_linear_backward(sg_dtype dt, int64_t batch, int64_t cin,
                             int64_t cout, int64_t spatial, const void *x,
                             const void *w, const void *dy, void *dx, void *dw,
                             void *db) {
  sg_conv_desc d = sg_linear_desc(batch, cin, cout, spatial);
  return sg_conv_backward(&d, dt, x, w, dy, dx, dw, db, NULL);
}

/* A buffer of n elements of dt for the composed (unfused) paths. */
static sg_status linear_tmp(sg_dtype dt, int64_t n, void **tmp) {
  return sg_malloc(sg_device_host(), (size_t)n * sg_dtype_size(dt), tmp);
}

sg_status sg_linear_act_forward(sg_dtype dt, int64_t batch, int64_t cin,
                                int64_t cout, int64_t spatial, const void *x,
                                const void *w, const void *b, int add, int act,
                                void *z, void *a) {
  sg_status st = SG_OK;
  void *tmp = NULL;
  const int64_t nz = batch * cout * spatial;
  if (a && (act < 0 || act >= SG_ACT_COUNT))
    SG_RAISE(SG_ERR_INVALID_ARG, "linear_act: unknown activation %d", act);
  if (nz == 0) goto fail;
  const int tier = dt == SG_DTYPE_F32 ? sg_pw_tier() : 0;
  if (tier && (!a || (act == SG_ACT_GELU && sg_gelu_tier() == tier))) {
    SG_CHECK_PTR(x);
    SG_CHECK_PTR(w);
    SG_CHECK_PTR(z);
    (tier == 2 ? sg_pw_apply_act_f32 : sg_pw2_apply_act_f32)(
        batch, cin, cout, spatial, w, x, b, add, z, a, sg_max_threads());
    goto fail;
  }
  if (add) SG_TRY(linear_tmp(dt, nz, &tmp));
  SG_TRY(
      sg_linear_forward(dt, batch, cin, cout, spatial, x, w, b, add ? tmp : z));
  if (add) SG_TRY(sg_binary_forward(SG_BINARY_ADD, dt, nz, z, tmp, z));
  if (a) SG_TRY(sg_act_forward((sg_act)act, dt, nz, z, a));
fail:
  sg_free(sg_device_host(), &tmp);
  return st;
}

/* The one-pass backwards of the AVX2 tier (sg_pw2_backward_gelu_f32: dx
 * and dW over the same chunks of dy, with act'(z) formed in them when
 * fused): which calls take them. sg_linear_alloc_bytes follows the same
 * tests. */
static int linear_add_one_pass(sg_dtype dt, int dw, int db) {
  return dt == SG_DTYPE_F32 && sg_pw_tier() == 1 && (dw || !db);
}
static int linear_act_one_pass(sg_dtype dt, int act, int dx, int dw, int db) {
  return dt == SG_DTYPE_F32 && sg_pw_tier() == 1 && act == SG_ACT_GELU &&
         sg_gelu_tier() == 1 && (dw || !db) && (dx || dw);
}

sg_status sg_linear_backward_add(sg_dtype dt, int64_t batch, int64_t cin,
                                 int64_t cout, int64_t spatial, const void *x,
                                 const void *w, const void *dy, void *dx,
                                 void *dw, void *db) {
  sg_status st = SG_OK;
  void *tmp = NULL;
  const int64_t nx = batch * cin * spatial;
  if (!dx || nx == 0)
    return sg_linear_backward(dt, batch, cin, cout, spatial, x, w, dy, NULL, dw,
                              db);
  SG_CHECK_PTR(w);
  SG_CHECK_PTR(dy);
  const int tier = dt == SG_DTYPE_F32 ? sg_pw_tier() : 0;
  if (linear_add_one_pass(dt, dw != NULL, db != NULL)) {
    /* dx and dW over the same chunks of dy */
    if (dw) SG_CHECK_PTR(x);
    SG_TRY(sg_malloc(sg_device_host(), sg_pw2_backward_gelu_scratch(cin, cout),
                     &tmp));
    sg_pw2_backward_gelu_f32(batch, cin, cout, spatial, x, w, NULL, dy, dx, 1,
                             dw, db, tmp, sg_max_threads());
    goto fail;
  }
  if (tier) {
    SG_TRY(sg_linear_backward(dt, batch, cin, cout, spatial, x, w, dy, NULL, dw,
                              db));
    pw_apply(tier, batch, cout, cin, spatial, w, 1, cin, dy, NULL, dx,
             SG_PW_ADD, sg_max_threads());
    goto fail;
  }
  SG_TRY(linear_tmp(dt, nx, &tmp));
  SG_TRY(
      sg_linear_backward(dt, batch, cin, cout, spatial, x, w, dy, tmp, dw, db));
  SG_TRY(sg_binary_forward(SG_BINARY_ADD, dt, nx, dx, tmp, dx));
fail:
  sg_free(sg_device_host(), &tmp);
  return st;
}

sg_status sg_linear_act_backward(sg_dtype dt, int64_t batch, int64_t cin,
                                 int64_t cout, int64_t spatial, const void *x,
                                 const void *w, int act, const void *z,
                                 const void *dy, int add, void *dx, void *dw,
                                 void *db) {
  sg_status st = SG_OK;
  void *tmp = NULL;
  const int64_t nz = batch * cout * spatial;
  if (act < 0 || act >= SG_ACT_COUNT)
    SG_RAISE(SG_ERR_INVALID_ARG, "linear_act_backward: unknown activation %d",
             act);
  if (nz == 0 || !(dx || dw || db)) goto fail;
  SG_CHECK_PTR(z);
  SG_CHECK_PTR(dy);
  /* fused on the AVX2 tier (db alone keeps the composed path's sum) */
  if (linear_act_one_pass(dt, act, dx != NULL, dw != NULL, db != NULL)) {
    if (dx) SG_CHECK_PTR(w);
    if (dw) SG_CHECK_PTR(x);
    SG_TRY(sg_malloc(sg_device_host(), sg_pw2_backward_gelu_scratch(cin, cout),
                     &tmp));
    sg_pw2_backward_gelu_f32(batch, cin, cout, spatial, x, w, z, dy, dx, add,
                             dw, db, tmp, sg_max_threads());
    goto fail;
  }
  SG_TRY(linear_tmp(dt, nz, &tmp));
  SG_TRY(sg_act_backward((sg_act)act, dt, nz, z, dy, tmp));
  SG_TRY((add ? sg_linear_backward_add : sg_linear_backward)(
      dt, batch, cin, cout, spatial, x, w, tmp, dx, dw, db));
fail:
  sg_free(sg_device_host(), &tmp);
  return st;
}

/* ---- the projection head: y = w2 act(w1 x + b1) + b2 ---------------------
 * Fused (sg_pw2_head_*: a = act(z) only per cache-sized chunk, never
 * stored) on the AVX2 tier with GELU; elsewhere the ops composed, a kept
 * by the caller. */
int sg_linear_head_fused(sg_dtype dt, int act) {
  return dt == SG_DTYPE_F32 && sg_pw_tier() == 1 && act == SG_ACT_GELU &&
         sg_gelu_tier() == 1;
}

sg_status sg_linear_head_forward(sg_dtype dt, int64_t batch, int64_t cin,
                                 int64_t cmid, int64_t cout, int64_t spatial,
                                 const void *x, const void *w1, const void *b1,
                                 int act, const void *w2, const void *b2,
                                 void *z, void *a, void *y) {
  sg_status st = SG_OK;
  void *tmp = NULL;
  if (act < 0 || act >= SG_ACT_COUNT)
    SG_RAISE(SG_ERR_INVALID_ARG, "linear_head: unknown activation %d", act);
  if (batch * cmid * spatial == 0) goto fail;
  SG_CHECK_PTR(x);
  SG_CHECK_PTR(w1);
  SG_CHECK_PTR(w2);
  SG_CHECK_PTR(z);
  SG_CHECK_PTR(y);
  if (sg_linear_head_fused(dt, act)) {
    const int nt = sg_max_threads();
    SG_TRY(sg_malloc(sg_device_host(),
                     sg_pw2_head_scratch(cin, cmid, cout, 0, nt), &tmp));
    sg_pw2_head_forward_f32(batch, cin, cmid, cout, spatial, w1, b1, w2, b2, x,
                            z, y, tmp, nt);
    goto fail;
  }
  SG_CHECK_PTR(a);
  SG_TRY(sg_linear_act_forward(dt, batch, cin, cmid, spatial, x, w1, b1, 0, act,
                               z, a));
  SG_TRY(sg_linear_forward(dt, batch, cmid, cout, spatial, a, w2, b2, y));
fail:
  sg_free(sg_device_host(), &tmp);
  return st;
}

sg_status sg_linear_head_backward(sg_dtype dt, int64_t batch, int64_t cin,
                                  int64_t cmid, int64_t cout, int64_t spatial,
                                  const void *x, const void *w1, int act,
                                  const void *w2, const void *z, const void *a,
                                  const void *dy, void *dx, void *dw1,
                                  void *db1, void *dw2, void *db2) {
  sg_status st = SG_OK;
  void *tmp = NULL;
  if (act < 0 || act >= SG_ACT_COUNT)
    SG_RAISE(SG_ERR_INVALID_ARG, "linear_head: unknown activation %d", act);
  if (batch * cmid * spatial == 0 || !(dx || dw1 || db1 || dw2 || db2))
    goto fail;
  SG_CHECK_PTR(x);
  SG_CHECK_PTR(w1);
  SG_CHECK_PTR(w2);
  SG_CHECK_PTR(z);
  SG_CHECK_PTR(dy);
  if (sg_linear_head_fused(dt, act)) {
    SG_TRY(sg_malloc(sg_device_host(),
                     sg_pw2_head_scratch(cin, cmid, cout, 1, 1), &tmp));
    sg_pw2_head_backward_f32(batch, cin, cmid, cout, spatial, x, w1, w2, z, dy,
                             dx, dw1, db1, dw2, db2, tmp, sg_max_threads());
    goto fail;
  }
  SG_CHECK_PTR(a);
  SG_TRY(linear_tmp(dt, batch * cmid * spatial, &tmp));
  SG_TRY(sg_linear_backward(dt, batch, cmid, cout, spatial, a, w2, dy, tmp, dw2,
                            db2));
  SG_TRY(sg_linear_act_backward(dt, batch, cin, cmid, spatial, x, w1, act, z,
                                tmp, 0, dx, dw1, db1));
fail:
  sg_free(sg_device_host(), &tmp);
  return st;
}

size_t sg_linear_head_alloc_bytes(sg_dtype dt, int64_t batch, int64_t cin,
                                  int64_t cmid, int64_t cout, int64_t spatial,
                                  int act, int backward, int nthreads) {
  if (batch * cmid * spatial <= 0 || cin <= 0 || cout <= 0) return 0;
  if (sg_linear_head_fused(dt, act))
    return sg_pw2_head_scratch(cin, cmid, cout, backward,
                               backward ? 1 : nthreads);
  if (!backward) { /* sg_linear_act_forward (no add), sg_linear_forward */
    const sg_conv_desc d1 = sg_linear_desc(batch, cin, cmid, spatial),
                       d2 = sg_linear_desc(batch, cmid, cout, spatial);
    const size_t f1 = sg_conv_alloc_bytes(&d1, dt, 0, 0, nthreads),
                 f2 = sg_conv_alloc_bytes(&d2, dt, 0, 0, nthreads);
    return f1 > f2 ? f1 : f2;
  }
  const size_t b2 = sg_linear_alloc_bytes(dt, batch, cmid, cout, spatial, -1, 0,
                                          nthreads),
               b1 = sg_linear_alloc_bytes(dt, batch, cin, cmid, spatial, act, 0,
                                          nthreads);
  return (size_t)(batch * cmid * spatial) * sg_dtype_size(dt) +
         (b1 > b2 ? b1 : b2);
}

size_t sg_linear_alloc_bytes(sg_dtype dt, int64_t batch, int64_t cin,
                             int64_t cout, int64_t spatial, int act, int add,
                             int nthreads) {
  const sg_conv_desc d = sg_linear_desc(batch, cin, cout, spatial);
  const size_t es = sg_dtype_size(dt);
  const size_t nz = (size_t)(batch * cout * spatial),
               nx = (size_t)(batch * cin * spatial);
  if (nz == 0 || cin <= 0) return 0;
  if (act >= 0) { /* sg_linear_act_backward */
    if (linear_act_one_pass(dt, act, 1, 1, 1))
      return sg_pw2_backward_gelu_scratch(cin, cout);
    return nz * es + sg_linear_alloc_bytes(dt, batch, cin, cout, spatial, -1,
                                           add, nthreads);
  }
  if (add) { /* sg_linear_backward_add */
    if (linear_add_one_pass(dt, 1, 1))
      return sg_pw2_backward_gelu_scratch(cin, cout);
    const int tier = dt == SG_DTYPE_F32 ? sg_pw_tier() : 0;
    return (tier ? 0 : nx * es) + sg_conv_alloc_bytes(&d, dt, 0, 1, nthreads);
  }
  return sg_conv_alloc_bytes(&d, dt, 0, 1, nthreads); /* sg_linear_backward */
}

sg_status sg_convt_forward(const sg_conv_desc *d, sg_dtype dt, const void *x,
                           const void *w, const void *b, void *y) {
  sg_status st = SG_OK;
  void *own = NULL, *buf = NULL;
  sg_conv_geom g;
  SG_TRY(sg_conv_geom_make(d, 0, 1, dt, &g));
  if (g.n == 0) goto fail;
  SG_CHECK_PTR(x);
  SG_CHECK_PTR(w);
  SG_CHECK_PTR(y);
  SG_TRY(sg_ws_get(NULL, g.ws_per_thread * (size_t)g.nthreads, &buf, &own));
  SG_DISPATCH(dt, sg_convt_fwd, &g, x, w, b, y, buf);
fail:
  sg_ws_put(&own);
  return st;
}

sg_status sg_convt_backward(const sg_conv_desc *d, sg_dtype dt, const void *x,
                            const void *w, const void *dy, void *dx, void *dw,
                            void *db) {
  sg_status st = SG_OK;
  void *own = NULL, *buf = NULL, *part = NULL;
  sg_conv_geom g;
  SG_TRY(sg_conv_geom_make(d, 0, 1, dt, &g));
  if (g.n == 0) goto fail;
  SG_CHECK_PTR(dy);
  if (dw) SG_CHECK_PTR(x);
  if (dx) SG_CHECK_PTR(w);
  SG_TRY(sg_ws_get(NULL, g.ws_per_thread * (size_t)g.nthreads, &buf, &own));
  if (dw)
    SG_TRY(sg_malloc(sg_device_host(),
                     sg_conv_dw_part_bytes(&g, sg_dtype_size(dt), 0), &part));
  SG_DISPATCH(dt, sg_convt_bwd, &g, x, w, dy, dx, dw, db, buf, part);
fail:
  sg_ws_put(&part);
  sg_ws_put(&own);
  return st;
}

sg_status sg_pool_forward(sg_pool_kind kind, const sg_conv_desc *d, sg_dtype dt,
                          const void *x, void *y) {
  sg_status st = SG_OK;
  sg_conv_geom g;
  SG_TRY(sg_conv_geom_make(d, 1, 0, dt, &g));
  if (g.n == 0) goto fail;
  SG_CHECK_PTR(x);
  SG_CHECK_PTR(y);
  SG_DISPATCH(dt, sg_pool_fwd, kind, &g, x, y);
fail:
  return st;
}

sg_status sg_pool_win_make(const sg_conv_desc *d, sg_dtype dt, sg_pool_win *w,
                           int64_t *planes) {
  sg_status st = SG_OK;
  sg_conv_geom g;
  SG_TRY(sg_conv_geom_make(d, 1, 0, dt, &g));
  *w = sg_pool_win_of(&g);
  *planes = g.n * g.c;
fail:
  return st;
}

sg_status sg_conv_win_make(const sg_conv_desc *d, int trans, sg_dtype dt,
                           sg_pool_win *w) {
  sg_status st = SG_OK;
  sg_conv_geom g;
  SG_TRY(sg_conv_geom_make(d, 0, trans, dt, &g));
  *w = sg_pool_win_of(&g);
fail:
  return st;
}

sg_status sg_pool_backward(sg_pool_kind kind, const sg_conv_desc *d,
                           sg_dtype dt, const void *x, const void *dy,
                           void *dx) {
  sg_status st = SG_OK;
  sg_conv_geom g;
  SG_TRY(sg_conv_geom_make(d, 1, 0, dt, &g));
  if (g.n == 0) goto fail;
  SG_CHECK_PTR(dy);
  SG_CHECK_PTR(dx);
  if (kind == SG_POOL_MAX) SG_CHECK_PTR(x);
  SG_DISPATCH(dt, sg_pool_bwd, kind, &g, x, dy, dx);
fail:
  return st;
}

/* The arguments the padding kernels share: dtype, spatial dims, planes. */
static sg_status plane_args_check(sg_dtype dt, int nsp, int64_t planes) {
  sg_status st = SG_OK;
  SG_CHECK_DT(dt);
  if (nsp < 1 || nsp > SG_OPS_MAX_SPATIAL)
    SG_RAISE(SG_ERR_INVALID_ARG, "nsp must be 1..3, got %d", nsp);
  if (planes < 0) SG_RAISE(SG_ERR_SHAPE, "planes %lld", (long long)planes);
fail:
  return st;
}

sg_status sg_pad_fill_outside(sg_dtype dt, int nsp, int64_t planes,
                              const int64_t *box, const int64_t *origin,
                              const int64_t *extent, const sg_pad_mode *mode,
                              double value, void *x) {
  sg_status st = SG_OK;
  int64_t b3[3], lo[3], hi[3];
  int zero[SG_OPS_MAX_SPATIAL];
  SG_TRY(plane_args_check(dt, nsp, planes));
  SG_CHECK_PTR(box);
  SG_CHECK_PTR(origin);
  SG_CHECK_PTR(extent);
  SG_CHECK_PTR(mode);
  for (int i = 0; i < nsp; ++i) {
    if (box[i] < 0 || extent[i] < 1)
      SG_RAISE(SG_ERR_SHAPE, "dim %d: box %lld, domain %lld", i,
               (long long)box[i], (long long)extent[i]);
    zero[i] = mode[i] == SG_PAD_ZERO;
  }
  /* box cells [lo, hi) are inside the domain (or filled with data); the
   * CUDA fill (sg_pad_fill_outside_cuda) takes the same geometry */
  const int any = sg_fill_outside_geom(nsp, box, origin, extent, zero, b3, lo,
                                       hi);
  const int64_t n = b3[0] * b3[1] * b3[2];
  if (!any || planes == 0 || n == 0) goto fail;
  SG_CHECK_PTR(x);
  const size_t es = sg_dtype_size(dt);
  const float vf = (float)value;
#pragma omp parallel for schedule(static) if (planes * n > 65536)
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i0 = 0; i0 < b3[0]; ++i0)
      for (int64_t i1 = 0; i1 < b3[1]; ++i1) {
        const int out01 = i0 < lo[0] || i0 >= hi[0] || i1 < lo[1] ||
                          i1 >= hi[1];
        char *row = (char *)x + (size_t)((p * b3[0] + i0) * b3[1] + i1) *
                                    (size_t)b3[2] * es;
        for (int64_t i2 = 0; i2 < b3[2]; ++i2) {
          if (!out01 && i2 >= lo[2] && i2 < hi[2]) continue;
          if (dt == SG_DTYPE_F32)
            ((float *)row)[i2] = vf;
          else
            ((double *)row)[i2] = value;
        }
      }
fail:
  return st;
}

/* ---- up-sampling -------------------------------------------------------- */

sg_status sg_up_geom_make(sg_upsample_kind kind, int nsp, int64_t planes,
                          const int64_t *in, const int64_t *scale, sg_dtype dt,
                          sg_up_geom *g) {
  sg_status st = SG_OK;
  memset(g, 0, sizeof *g);
  SG_CHECK_DT(dt);
  if (nsp < 1 || nsp > SG_OPS_MAX_SPATIAL)
    SG_RAISE(SG_ERR_INVALID_ARG, "nsp must be 1..3, got %d", nsp);
  if (kind != SG_UPSAMPLE_NEAREST && kind != SG_UPSAMPLE_LINEAR)
    SG_RAISE(SG_ERR_INVALID_ARG, "unknown up-sampling kind %d", (int)kind);
  if (planes < 0) SG_RAISE(SG_ERR_SHAPE, "planes %lld", (long long)planes);
  SG_CHECK_PTR(in);
  SG_CHECK_PTR(scale);
  g->planes = planes;
  int off = SG_OPS_MAX_SPATIAL - nsp;
  for (int i = 0; i < 3; ++i) g->in[i] = g->out[i] = g->scale[i] = 1;
  for (int i = 0; i < nsp; ++i) {
    int j = off + i;
    if (scale[i] < 1)
      SG_RAISE(SG_ERR_INVALID_ARG, "scale %lld", (long long)scale[i]);
    int lin = kind == SG_UPSAMPLE_LINEAR;
    if (in[i] < (lin ? 3 : 1))
      SG_RAISE(SG_ERR_SHAPE, "dim %d: extent %lld too small%s", i,
               (long long)in[i],
               lin ? " (linear needs a 1-cell margin per side)" : "");
    g->in[j] = in[i];
    g->scale[j] = scale[i];
    g->linear[j] = lin;
    g->out[j] = scale[i] * (in[i] - (lin ? 2 : 0));
  }
fail:
  return st;
}

sg_status sg_upsample_forward(sg_upsample_kind kind, int nsp, int64_t planes,
                              const int64_t *in, const int64_t *scale,
                              sg_dtype dt, const void *x, void *y) {
  sg_status st = SG_OK;
  sg_up_geom g;
  SG_TRY(sg_up_geom_make(kind, nsp, planes, in, scale, dt, &g));
  if (planes == 0) goto fail;
  SG_CHECK_PTR(x);
  SG_CHECK_PTR(y);
  SG_DISPATCH(dt, sg_up_fwd, kind == SG_UPSAMPLE_LINEAR, &g, x, y);
fail:
  return st;
}

sg_status sg_upsample_backward(sg_upsample_kind kind, int nsp, int64_t planes,
                               const int64_t *in, const int64_t *scale,
                               sg_dtype dt, const void *dy, void *dx) {
  sg_status st = SG_OK;
  sg_up_geom g;
  SG_TRY(sg_up_geom_make(kind, nsp, planes, in, scale, dt, &g));
  if (planes == 0) goto fail;
  SG_CHECK_PTR(dy);
  SG_CHECK_PTR(dx);
  SG_DISPATCH(dt, sg_up_bwd, kind == SG_UPSAMPLE_LINEAR, &g, dy, dx);
fail:
  return st;
}

/* ---- padding ------------------------------------------------------------ */

const char *sg_pad_mode_name(sg_pad_mode mode) {
  return sg_boundary_name(mode);
}

sg_status sg_pad_geom(sg_dtype dt, int nsp, int64_t planes, const int64_t *in,
                      const int64_t (*pad)[2], const sg_pad_mode *mode,
                      int64_t *in3, int64_t *out3, int64_t *lo3, int *mode3) {
  sg_status st = SG_OK;
  SG_TRY(plane_args_check(dt, nsp, planes));
  SG_CHECK_PTR(in);
  SG_CHECK_PTR(pad);
  SG_CHECK_PTR(mode);
  for (int i = 0; i < 3; ++i) {
    in3[i] = out3[i] = 1;
    lo3[i] = 0;
    mode3[i] = 0;
  }
  int off = SG_OPS_MAX_SPATIAL - nsp;
  for (int i = 0; i < nsp; ++i) {
    int j = off + i;
    if (pad[i][0] < 0 || pad[i][1] < 0)
      SG_RAISE(SG_ERR_INVALID_ARG, "dim %d: negative padding", i);
    if ((int)mode[i] < 0 || mode[i] > SG_PAD_REPLICATE)
      SG_RAISE(SG_ERR_INVALID_ARG, "dim %d: unknown padding mode %d", i,
               (int)mode[i]);
    if (in[i] < 1)
      SG_RAISE(SG_ERR_SHAPE, "dim %d: extent %lld cannot be padded", i,
               (long long)in[i]);
    if (mode[i] == SG_PAD_REFLECT && (pad[i][0] >= in[i] || pad[i][1] >= in[i]))
      SG_RAISE(SG_ERR_SHAPE,
               "dim %d: reflect padding (%lld, %lld) needs pad < extent %lld",
               i, (long long)pad[i][0], (long long)pad[i][1], (long long)in[i]);
    in3[j] = in[i];
    lo3[j] = pad[i][0];
    out3[j] = in[i] + pad[i][0] + pad[i][1];
    mode3[j] = (int)mode[i];
  }
fail:
  return st;
}

sg_status sg_pad_forward(sg_dtype dt, int nsp, int64_t planes,
                         const int64_t *in, const int64_t (*pad)[2],
                         const sg_pad_mode *mode, const void *src, void *dst) {
  sg_status st = SG_OK;
  int64_t in3[3], out3[3], lo3[3];
  int mode3[3];
  SG_TRY(sg_pad_geom(dt, nsp, planes, in, pad, mode, in3, out3, lo3, mode3));
  SG_CHECK_PTR(src);
  SG_CHECK_PTR(dst);
  SG_DISPATCH(dt, sg_pad_fwd, in3, out3, lo3, mode3, planes, src, dst);
fail:
  return st;
}

sg_status sg_pad_backward(sg_dtype dt, int nsp, int64_t planes,
                          const int64_t *in, const int64_t (*pad)[2],
                          const sg_pad_mode *mode, const void *dpadded,
                          void *dsrc) {
  sg_status st = SG_OK;
  int64_t in3[3], out3[3], lo3[3];
  int mode3[3];
  SG_TRY(sg_pad_geom(dt, nsp, planes, in, pad, mode, in3, out3, lo3, mode3));
  SG_CHECK_PTR(dpadded);
  SG_CHECK_PTR(dsrc);
  SG_DISPATCH(dt, sg_pad_bwd, in3, out3, lo3, mode3, planes, dpadded, dsrc);
fail:
  return st;
}

/* ---- pointwise ---------------------------------------------------------- */

const char *sg_act_name(sg_act act) {
  static const char *names[] = {"relu", "gelu", "silu", "tanh"};
  return (int)act >= 0 && act < SG_ACT_COUNT ? names[act] : "invalid";
}

/* The checks of an element-wise kernel over n elements: the dtype, the kind
 * when `what` names one (0 <= kind < nkinds), then n. */
static sg_status sg_elementwise_check(sg_dtype dt, const char *what, int kind,
                                      int nkinds, int64_t n) {
  sg_status st = SG_OK;
  SG_CHECK_DT(dt);
  if (what && (kind < 0 || kind >= nkinds))
    SG_RAISE(SG_ERR_INVALID_ARG, "unknown %s %d", what, kind);
  if (n < 0) SG_RAISE(SG_ERR_SHAPE, "n = %lld", (long long)n);
fail:
  return st;
}

sg_status sg_act_forward(sg_act act, sg_dtype dt, int64_t n, const void *x,
                         void *y) {
  sg_status st = SG_OK;
  SG_TRY(sg_elementwise_check(dt, "activation", (int)act, SG_ACT_COUNT, n));
  if (n == 0) goto fail;
  SG_CHECK_PTR(x);
  SG_CHECK_PTR(y);
  const int tier = dt == SG_DTYPE_F32 && act == SG_ACT_GELU ? sg_gelu_tier()
                                                            : 0;
  if (tier)
    gelu_fwd(tier, 0, n, x, y);
  else
    SG_DISPATCH(dt, sg_act_fwd, (int)act, n, x, y);
fail:
  return st;
}

sg_status sg_act_backward(sg_act act, sg_dtype dt, int64_t n, const void *x,
                          const void *dy, void *dx) {
  sg_status st = SG_OK;
  SG_TRY(sg_elementwise_check(dt, "activation", (int)act, SG_ACT_COUNT, n));
  if (n == 0) goto fail;
  SG_CHECK_PTR(x);
  SG_CHECK_PTR(dy);
  SG_CHECK_PTR(dx);
  const int tier = dt == SG_DTYPE_F32 && act == SG_ACT_GELU ? sg_gelu_tier()
                                                            : 0;
  if (tier)
    gelu_bwd(tier, n, x, dy, dx);
  else
    SG_DISPATCH(dt, sg_act_bwd, (int)act, n, x, dy, dx);
fail:
  return st;
}

/* ---- element-wise ops with the bf16 policy's rounding fused ------------ */

/* Elements per chunk: 64 KiB of f32, still in L2 when rounded after the op;
 * below SG_OMP_MIN (ops_tmpl.h), so each chunk's kernel runs serially
 * inside the one parallel loop over chunks. */
enum { SG_ROUND_CHUNK = 16384, SG_ROUND_OMP_MIN = 32768 };

typedef struct sg_ew_call {
  int kind, code; /* 0: activation, 1: binary op, 2: activation's backward
                     (a: x, b: dy); its code */
  const float *a, *b;
  float *y;
} sg_ew_call;

static void sg_ew_chunk(const sg_ew_call *c, int64_t i0, int64_t n) {
  const int tier = c->kind != 1 && c->code == SG_ACT_GELU ? sg_gelu_tier() : 0;
  if (c->kind == 1)
    sg_binary_fwd_f32(c->code, n, c->a + i0, c->b + i0, c->y + i0);
  else if (c->kind == 2 && tier)
    gelu_bwd(tier, n, c->a + i0, c->b + i0, c->y + i0);
  else if (c->kind == 2)
    sg_act_bwd_f32(c->code, n, c->a + i0, c->b + i0, c->y + i0);
  else if (tier)
    gelu_fwd(tier, 1, n, c->a + i0, c->y + i0);
  else
    sg_act_fwd_f32(c->code, n, c->a + i0, c->y + i0);
  sg_round_bf16(c->y + i0, n);
}

/* The op per chunk, each chunk rounded right after: the same values as
 * the op over all n and sg_round_bf16 over y, one pass. */
static void sg_ew_rounded(const sg_ew_call *c, int64_t n) {
  const int64_t nc = (n + SG_ROUND_CHUNK - 1) / SG_ROUND_CHUNK;
#pragma omp parallel for schedule(static) if (n > SG_ROUND_OMP_MIN)
  for (int64_t k = 0; k < nc; ++k) {
    const int64_t i0 = k * SG_ROUND_CHUNK;
    sg_ew_chunk(c, i0, n - i0 < SG_ROUND_CHUNK ? n - i0 : SG_ROUND_CHUNK);
  }
}

sg_status sg_act_forward_bf16(sg_act act, sg_dtype dt, int64_t n, const void *x,
                              void *y) {
  if (dt != SG_DTYPE_F32 || n <= 0 || !x || !y)
    return sg_act_forward(act, dt, n, x, y); /* its checks, or no rounding */
  sg_status st = SG_OK;
  SG_TRY(sg_elementwise_check(dt, "activation", (int)act, SG_ACT_COUNT, n));
  sg_ew_call c = {.kind = 0, .code = (int)act, .a = x, .y = y};
  sg_ew_rounded(&c, n);
fail:
  return st;
}

sg_status sg_act_backward_bf16(sg_act act, sg_dtype dt, int64_t n,
                               const void *x, const void *dy, void *dx) {
  if (dt != SG_DTYPE_F32 || n <= 0 || !x || !dy || !dx)
    return sg_act_backward(act, dt, n, x, dy, dx);
  sg_status st = SG_OK;
  SG_TRY(sg_elementwise_check(dt, "activation", (int)act, SG_ACT_COUNT, n));
  sg_ew_call c = {.kind = 2, .code = (int)act, .a = x, .b = dy, .y = dx};
  sg_ew_rounded(&c, n);
fail:
  return st;
}

sg_status sg_binary_forward_bf16(sg_binary op, sg_dtype dt, int64_t n,
                                 const void *a, const void *b, void *y) {
  if (dt != SG_DTYPE_F32 || n <= 0 || !a || !b || !y)
    return sg_binary_forward(op, dt, n, a, b, y);
  sg_status st = SG_OK;
  SG_TRY(sg_elementwise_check(dt, "binary op", (int)op, SG_BINARY_MUL + 1, n));
  sg_ew_call c = {.kind = 1, .code = (int)op, .a = a, .b = b, .y = y};
  sg_ew_rounded(&c, n);
fail:
  return st;
}

sg_status sg_binary_forward(sg_binary op, sg_dtype dt, int64_t n, const void *a,
                            const void *b, void *y) {
  sg_status st = SG_OK;
  SG_TRY(sg_elementwise_check(dt, "binary op", (int)op, SG_BINARY_MUL + 1, n));
  if (n == 0) goto fail;
  SG_CHECK_PTR(a);
  SG_CHECK_PTR(b);
  SG_CHECK_PTR(y);
  SG_DISPATCH(dt, sg_binary_fwd, (int)op, n, a, b, y);
fail:
  return st;
}

sg_status sg_binary_backward(sg_binary op, sg_dtype dt, int64_t n,
                             const void *a, const void *b, const void *dy,
                             void *da, void *db) {
  sg_status st = SG_OK;
  SG_TRY(sg_elementwise_check(dt, "binary op", (int)op, SG_BINARY_MUL + 1, n));
  if (n == 0) goto fail;
  SG_CHECK_PTR(dy);
  if (op == SG_BINARY_MUL) {
    if (da) SG_CHECK_PTR(b);
    if (db) SG_CHECK_PTR(a);
  }
  SG_DISPATCH(dt, sg_binary_bwd, (int)op, n, a, b, dy, da, db);
fail:
  return st;
}

sg_status sg_scale(sg_dtype dt, int64_t n, double alpha, const void *x,
                   void *y) {
  sg_status st = SG_OK;
  SG_TRY(sg_elementwise_check(dt, NULL, 0, 0, n));
  if (n == 0) goto fail;
  SG_CHECK_PTR(x);
  SG_CHECK_PTR(y);
  SG_DISPATCH(dt, sg_scale, n, alpha, x, y);
fail:
  return st;
}

static sg_status sg_bias_check(sg_dtype dt, int64_t batch, int64_t channels,
                               int64_t spatial) {
  sg_status st = SG_OK;
  SG_CHECK_DT(dt);
  if (batch < 0 || channels < 1 || spatial < 0)
    SG_RAISE(SG_ERR_SHAPE, "bias-add on (%lld, %lld, %lld)", (long long)batch,
             (long long)channels, (long long)spatial);
fail:
  return st;
}

sg_status sg_bias_forward(sg_dtype dt, int64_t batch, int64_t channels,
                          int64_t spatial, const void *x, const void *b,
                          void *y) {
  sg_status st = SG_OK;
  SG_TRY(sg_bias_check(dt, batch, channels, spatial));
  SG_CHECK_PTR(x);
  SG_CHECK_PTR(b);
  SG_CHECK_PTR(y);
  SG_DISPATCH(dt, sg_bias_fwd, batch, channels, spatial, x, b, y);
fail:
  return st;
}

sg_status sg_bias_backward(sg_dtype dt, int64_t batch, int64_t channels,
                           int64_t spatial, const void *dy, void *db) {
  sg_status st = SG_OK;
  SG_TRY(sg_bias_check(dt, batch, channels, spatial));
  SG_CHECK_PTR(dy);
  SG_CHECK_PTR(db);
  SG_DISPATCH(dt, sg_bias_bwd, batch, channels, spatial, dy, db);
fail:
  return st;
}

static sg_status sg_concat_split(int split, sg_dtype dt, int64_t batch,
                                 int64_t spatial, int k,
                                 const int64_t *channels, void *const *parts,
                                 void *whole) {
  sg_status st = SG_OK;
  SG_CHECK_DT(dt);
  if (k < 1 || batch < 0 || spatial < 0)
    SG_RAISE(SG_ERR_SHAPE, "concat/split of %d parts on (%lld, *, %lld)", k,
             (long long)batch, (long long)spatial);
  SG_CHECK_PTR(channels);
  SG_CHECK_PTR(parts);
  SG_CHECK_PTR(whole);
  int64_t total = 0;
  for (int i = 0; i < k; ++i) {
    if (channels[i] < 0)
      SG_RAISE(SG_ERR_SHAPE, "part %d: %lld channels", i,
               (long long)channels[i]);
    if (!split && channels[i] > 0 && batch * spatial > 0 && !parts[i])
      SG_RAISE(SG_ERR_INVALID_ARG, "part %d is NULL", i);
    total += channels[i];
  }
  size_t es = sg_dtype_size(dt);
  int64_t cells = batch * k;
#pragma omp parallel for schedule(static) if (batch * total * spatial > 32768)
  for (int64_t it = 0; it < cells; ++it) {
    int64_t n = it / k;
    int i = (int)(it % k);
    int64_t c0 = 0;
    for (int j = 0; j < i; ++j) c0 += channels[j];
    size_t bytes = (size_t)(channels[i] * spatial) * es;
    if (bytes == 0 || !parts[i]) continue;
    char *w = (char *)whole + (size_t)((n * total + c0) * spatial) * es;
    char *p = (char *)parts[i] + (size_t)(n * channels[i] * spatial) * es;
    if (split)
      memcpy(p, w, bytes);
    else
      memcpy(w, p, bytes);
  }
fail:
  return st;
}

sg_status sg_concat(sg_dtype dt, int64_t batch, int64_t spatial, int k,
                    const int64_t *channels, const void *const *parts,
                    void *y) {
  return sg_concat_split(0, dt, batch, spatial, k, channels,
                         (void *const *)parts, y);
}

sg_status sg_split(sg_dtype dt, int64_t batch, int64_t spatial, int k,
                   const int64_t *channels, const void *x, void *const *parts) {
  return sg_concat_split(1, dt, batch, spatial, k, channels, parts, (void *)x);
}

/* ---- normalisation ------------------------------------------------------ */

sg_status sg_norm_nstat(const sg_norm_desc *d, int64_t *nstat) {
  sg_status st = SG_OK;
  SG_CHECK_PTR(d);
  if (d->batch < 0 || d->channels < 1 || d->spatial < 0)
    SG_RAISE(SG_ERR_SHAPE, "norm on (%lld, %lld, %lld)", (long long)d->batch,
             (long long)d->channels, (long long)d->spatial);
  if (!(d->eps >= 0)) SG_RAISE(SG_ERR_INVALID_ARG, "eps must be >= 0");
  switch (d->kind) {
  case SG_NORM_BATCH: *nstat = d->channels; break;
  case SG_NORM_INSTANCE: *nstat = d->batch * d->channels; break;
  case SG_NORM_GROUP:
    if (d->groups < 1 || d->channels % d->groups)
      SG_RAISE(SG_ERR_SHAPE, "%lld channels in %lld groups",
               (long long)d->channels, (long long)d->groups);
    *nstat = d->batch * d->groups;
    break;
  case SG_NORM_LAYER: *nstat = d->batch * d->spatial; break;
  default: SG_RAISE(SG_ERR_INVALID_ARG, "unknown norm kind %d", (int)d->kind);
  }
fail:
  return st;
}

void sg_moments_merge(sg_moments *a, const sg_moments *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double na = a[i].count, nb = b[i].count, nn = na + nb;
    if (nb == 0) continue;
    if (na == 0) {
      a[i] = b[i];
      continue;
    }
    double delta = b[i].mean - a[i].mean;
    a[i].mean += delta * (nb / nn);
    a[i].m2 += b[i].m2 + delta * delta * (na * nb / nn);
    a[i].count = nn;
  }
}

sg_status sg_norm_stats_allreduce(sg_moments *stats, int64_t n, MPI_Comm comm) {
  sg_status st = SG_OK;
  sg_moments *all = NULL;
  int size = 1, rank = 0;
  SG_MPI(MPI_Comm_size(comm, &size));
  SG_MPI(MPI_Comm_rank(comm, &rank));
  if (size == 1 || n == 0) goto fail;
  if (3 * n > INT_MAX)
    SG_RAISE(SG_ERR_NOT_SUPPORTED, "%lld statistics too many", (long long)n);
  all = malloc((size_t)size * (size_t)n * sizeof *all);
  if (!all) SG_RAISE(SG_ERR_ALLOC, "statistics buffer");
  SG_MPI(MPI_Allgather(stats, (int)(3 * n), MPI_DOUBLE, all, (int)(3 * n),
                       MPI_DOUBLE, comm));
  memcpy(stats, all, (size_t)n * sizeof *all);
  for (int r = 1; r < size; ++r)
    sg_moments_merge(stats, all + (size_t)r * n, n);
fail:
  free(all);
  return st;
}

sg_status sg_sum_allreduce(double *v, int64_t n, MPI_Comm comm) {
  sg_status st = SG_OK;
  double *all = NULL;
  int size = 1;
  SG_MPI(MPI_Comm_size(comm, &size));
  if (size == 1 || n == 0) goto fail;
  if (n > INT_MAX) SG_RAISE(SG_ERR_NOT_SUPPORTED, "%lld sums", (long long)n);
  all = malloc((size_t)size * (size_t)n * sizeof *all);
  if (!all) SG_RAISE(SG_ERR_ALLOC, "sum buffer");
  SG_MPI(MPI_Allgather(v, (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE, comm));
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int r = 0; r < size; ++r) s += all[(size_t)r * n + i];
    v[i] = s;
  }
fail:
  free(all);
  return st;
}

/* The checks every norm kernel starts with: dtype, descriptor, statistics. */
static sg_status sg_norm_check(const sg_norm_desc *d, sg_dtype dt,
                               const sg_moments *stats) {
  sg_status st = SG_OK;
  int64_t nstat = 0;
  SG_CHECK_DT(dt);
  SG_TRY(sg_norm_nstat(d, &nstat));
  SG_CHECK_PTR(stats);
fail:
  return st;
}

sg_status sg_norm_stats(const sg_norm_desc *d, sg_dtype dt, const void *x,
                        sg_moments *stats) {
  sg_status st = SG_OK;
  void *scratch = NULL;
  SG_TRY(sg_norm_check(d, dt, stats));
  if (d->batch * d->spatial > 0) SG_CHECK_PTR(x);
  scratch = malloc((size_t)(d->batch * d->channels + 1) * sizeof(sg_moments));
  if (!scratch) SG_RAISE(SG_ERR_ALLOC, "norm scratch");
  SG_DISPATCH(dt, sg_norm_stats, d, x, stats, scratch);
fail:
  free(scratch);
  return st;
}

sg_status sg_norm_forward(const sg_norm_desc *d, sg_dtype dt, const void *x,
                          const sg_moments *stats, const void *gamma,
                          const void *beta, void *y) {
  sg_status st = SG_OK;
  SG_TRY(sg_norm_check(d, dt, stats));
  if (d->batch * d->spatial > 0) {
    SG_CHECK_PTR(x);
    SG_CHECK_PTR(y);
  }
  SG_DISPATCH(dt, sg_norm_fwd, d, x, stats, gamma, beta, y);
fail:
  return st;
}

sg_status sg_norm_backward_sums(const sg_norm_desc *d, sg_dtype dt,
                                const void *x, const sg_moments *stats,
                                const void *gamma, const void *dy,
                                double *sums) {
  sg_status st = SG_OK;
  void *scratch = NULL;
  SG_TRY(sg_norm_check(d, dt, stats));
  SG_CHECK_PTR(sums);
  if (d->batch * d->spatial > 0) {
    SG_CHECK_PTR(x);
    SG_CHECK_PTR(dy);
  }
  scratch = malloc((size_t)(2 * d->batch * d->channels + 1) * sizeof(double));
  if (!scratch) SG_RAISE(SG_ERR_ALLOC, "norm scratch");
  SG_DISPATCH(dt, sg_norm_sums, d, x, stats, gamma, dy, sums, scratch);
fail:
  free(scratch);
  return st;
}

sg_status sg_norm_backward(const sg_norm_desc *d, sg_dtype dt, const void *x,
                           const sg_moments *stats, const void *gamma,
                           const void *dy, const double *sums, void *dx,
                           void *dgamma, void *dbeta) {
  sg_status st = SG_OK;
  SG_TRY(sg_norm_check(d, dt, stats));
  SG_CHECK_PTR(sums);
  if (d->batch * d->spatial > 0) {
    SG_CHECK_PTR(x);
    SG_CHECK_PTR(dy);
  }
  SG_DISPATCH(dt, sg_norm_bwd, d, x, stats, gamma, dy, sums, dx, dgamma, dbeta);
fail:
  return st;
}

/* ---- losses ------------------------------------------------------------- */

int64_t sg_loss_npartial(sg_loss_kind kind, int64_t batch) {
  switch (kind) {
  case SG_LOSS_SUM: return 1;
  case SG_LOSS_MEAN:
  case SG_LOSS_MSE: return 2;
  case SG_LOSS_REL_L2: return 2 * batch;
  }
  return 0;
}

static sg_status sg_loss_check(sg_loss_kind kind, int64_t batch, int64_t n,
                               const void *p, const void *t) {
  sg_status st = SG_OK;
  if ((int)kind < 0 || kind > SG_LOSS_REL_L2)
    SG_RAISE(SG_ERR_INVALID_ARG, "unknown loss %d", (int)kind);
  if (n < 0 || batch < 1 || n % batch)
    SG_RAISE(SG_ERR_SHAPE, "%lld elements in %lld batch items", (long long)n,
             (long long)batch);
  if (n > 0) SG_CHECK_PTR(p);
  if (n > 0 && (kind == SG_LOSS_MSE || kind == SG_LOSS_REL_L2)) SG_CHECK_PTR(t);
fail:
  return st;
}

sg_status sg_loss_partial(sg_loss_kind kind, sg_dtype dt, int64_t batch,
                          int64_t n, const void *p, const void *t,
                          double *partial) {
  sg_status st = SG_OK;
  void *scratch = NULL;
  SG_CHECK_DT(dt);
  SG_TRY(sg_loss_check(kind, batch, n, p, t));
  SG_CHECK_PTR(partial);
  int64_t rows = kind == SG_LOSS_REL_L2 ? batch : 1;
  int64_t len = kind == SG_LOSS_REL_L2 ? n / batch : n;
  int64_t nblk = (len + SG_SUM_BLOCK - 1) / SG_SUM_BLOCK;
  for (int64_t i = 0; i < sg_loss_npartial(kind, batch); ++i) partial[i] = 0;
  if (kind == SG_LOSS_MEAN || kind == SG_LOSS_MSE) partial[1] = (double)n;
  if (n == 0) goto fail;
  scratch = malloc((size_t)(2 * rows * nblk + 1) * sizeof(double));
  if (!scratch) SG_RAISE(SG_ERR_ALLOC, "loss scratch");
  SG_DISPATCH(dt, sg_loss_partial, (int)kind, batch, n, p, t, partial, scratch);
fail:
  free(scratch);
  return st;
}

sg_status sg_loss_finish(sg_loss_kind kind, int64_t batch,
                         const double *partial, double *value) {
  sg_status st = SG_OK;
  SG_CHECK_PTR(partial);
  SG_CHECK_PTR(value);
  switch (kind) {
  case SG_LOSS_SUM: *value = partial[0]; break;
  case SG_LOSS_MEAN:
  case SG_LOSS_MSE:
    if (partial[1] <= 0) SG_RAISE(SG_ERR_SHAPE, "mean over zero elements");
    *value = partial[0] / partial[1];
    break;
  case SG_LOSS_REL_L2: {
    if (batch < 1) SG_RAISE(SG_ERR_SHAPE, "batch %lld", (long long)batch);
    double s = 0;
    for (int64_t i = 0; i < batch; ++i)
      s += sqrt(partial[2 * i]) / sqrt(partial[2 * i + 1]);
    *value = s / (double)batch;
    break;
  }
  default: SG_RAISE(SG_ERR_INVALID_ARG, "unknown loss %d", (int)kind);
  }
fail:
  return st;
}

sg_status sg_loss_backward(sg_loss_kind kind, sg_dtype dt, int64_t batch,
                           int64_t n, const void *p, const void *t,
                           const double *partial, double g, void *dp,
                           void *dt_grad) {
  sg_status st = SG_OK;
  SG_CHECK_DT(dt);
  SG_TRY(sg_loss_check(kind, batch, n, p, t));
  SG_CHECK_PTR(partial);
  if (n == 0) goto fail;
  SG_DISPATCH(dt, sg_loss_bwd, (int)kind, batch, n, p, t, partial, g, dp,
              dt_grad);
fail:
  return st;
}
