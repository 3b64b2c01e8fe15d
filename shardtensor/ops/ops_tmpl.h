/* shardgrid — typed op kernels, instantiated twice (ops_f32.c, ops_f64.c).
 * Before including define R (element type), S (suffix), SG_GEMM (cblas
 * xgemm), SG_ACT and SG_ACT_GRAD (sg_ops_inl.h functions). Internal. */
#define SG_CAT2_(a, b) a##_##b
#define SG_CAT_(a, b) SG_CAT2_(a, b)
#define FN(name) SG_CAT_(name, S)

#define SG_OMP_MIN 32768 /* elements below which loops stay serial */

static inline R *FN(thread_ws)(const sg_conv_geom *g, void *ws, int tid) {
  return (R *)((char *)ws + (size_t)tid * g->ws_per_thread);
}

/* The bf16 storage policy's rounding of n outputs a kernel has just
 * written (still in cache): f32 only, a no-op for f64. */
static inline void FN(round_out)(int rnd, R *p, int64_t n) {
  if (rnd && sizeof(R) == sizeof(float)) sg_round_bf16((float *)(void *)p, n);
}

/* This thread's number in the enclosing parallel region (0 without OpenMP). */
static inline int FN(thread_id)(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/* Sums in a fixed order that vectorises: SG_VL interleaved partial sums (lane
 * l takes the elements j = l mod SG_VL), combined in lane order at the end.
 * The same bits for every call and thread count; a plain `s += p[j]` loop
 * stays scalar without reassociation (a conv bias gradient was 5% of an
 * FNO step). */
#ifndef SG_VL
#define SG_VL 16
#endif
static inline R FN(vsum)(const R *p, int64_t n) {
  R acc[SG_VL] = {0};
  int64_t j = 0;
  for (; j + SG_VL <= n; j += SG_VL)
    for (int l = 0; l < SG_VL; ++l) acc[l] += p[j + l];
  R t = 0;
  for (; j < n; ++j) t += p[j];
  for (int l = 0; l < SG_VL; ++l) t += acc[l];
  return t;
}

/* sum in double, and the sum of squared deviations from mean, both in the
 * same lane order */
static inline double FN(vsum_d)(const R *p, int64_t n) {
  double acc[SG_VL] = {0};
  int64_t j = 0;
  for (; j + SG_VL <= n; j += SG_VL)
    for (int l = 0; l < SG_VL; ++l) acc[l] += (double)p[j + l];
  double t = 0;
  for (; j < n; ++j) t += (double)p[j];
  for (int l = 0; l < SG_VL; ++l) t += acc[l];
  return t;
}

static inline double FN(vdev2_d)(const R *p, int64_t n, double mean) {
  double acc[SG_VL] = {0};
  int64_t j = 0;
  for (; j + SG_VL <= n; j += SG_VL)
    for (int l = 0; l < SG_VL; ++l) {
      double dv = (double)p[j + l] - mean;
      acc[l] += dv * dv;
    }
  double t = 0;
  for (; j < n; ++j) {
    double dv = (double)p[j] - mean;
    t += dv * dv;
  }
  for (int l = 0; l < SG_VL; ++l) t += acc[l];
  return t;
}

/* The walk shared by im2col and its adjoint over output rows [r0, r1) of
 * dim g->t, in the same loops and order for both: for each row of the
 * column matrix (channel c, kernel offset (a, b, e); row stride LD) and each
 * output row (o0, o1) of the tile, the body sees xp, the first input
 * element (the image X is (C, in...); input stride s2), and cp, the n2
 * columns of that output row (column matrix COL). XT, CT: their types. */
#define SG_COL_WALK(XT, X, CT, COL, LD, ...)                                  \
  int64_t lo[3] = {0, 0, 0}, hi[3] = {g->out[0], g->out[1], g->out[2]};       \
  lo[g->t] = r0;                                                              \
  hi[g->t] = r1;                                                              \
  const int64_t n2 = hi[2] - lo[2];                                           \
  const int64_t s2 = g->str[2];                                               \
  int64_t row = 0;                                                            \
  for (int64_t c = 0; c < g->c; ++c) {                                        \
    XT *xc = (X) + c * g->sin;                                                \
    for (int64_t a = 0; a < g->ker[0]; ++a)                                   \
      for (int64_t b = 0; b < g->ker[1]; ++b)                                 \
        for (int64_t e = 0; e < g->ker[2]; ++e, ++row) {                      \
          CT *cp = (COL) + row * (LD);                                        \
          for (int64_t o0 = lo[0]; o0 < hi[0]; ++o0) {                        \
            int64_t i0 = o0 * g->str[0] + a * g->dil[0];                      \
            for (int64_t o1 = lo[1]; o1 < hi[1]; ++o1) {                      \
              int64_t i1 = o1 * g->str[1] + b * g->dil[1];                    \
              XT *xp = xc + (i0 * g->in[1] + i1) * g->in[2] + e * g->dil[2] + \
                       lo[2] * s2;                                            \
              __VA_ARGS__                                                     \
              cp += n2;                                                       \
            }                                                                 \
          }                                                                   \
        }                                                                     \
  }

static inline int64_t FN(col_ld)(int64_t ncol) {
  return sg_col_ld(ncol, sizeof(R));
}

/* Tile rows [r0, r1) of image x (C, in...) as columns: col[ckk][ld]. */
static void FN(im2col)(const sg_conv_geom *g, const R *x, int64_t r0,
                       int64_t r1, R *col, int64_t ld) {
  SG_COL_WALK(const R, x, R, col, ld, {
    if (s2 == 1) {
      memcpy(cp, xp, (size_t)n2 * sizeof(R));
    } else {
      for (int64_t o2 = 0; o2 < n2; ++o2) cp[o2] = xp[o2 * s2];
    }
  })
}

/* The adjoint: dx (C, in...) += col2im(dcol). */
static void FN(col2im)(const sg_conv_geom *g, const R *dcol, int64_t r0,
                       int64_t r1, R *dx, int64_t ld) {
  SG_COL_WALK(R, dx, const R, dcol, ld, {
    for (int64_t o2 = 0; o2 < n2; ++o2) xp[o2 * s2] += cp[o2];
  })
}
#undef SG_COL_WALK

/* The end of the output rows of dim g->t in the tile starting at row r0. */
static inline int64_t FN(tile_end)(const sg_conv_geom *g, int64_t r0) {
  return r0 + g->rows < g->out[g->t] ? r0 + g->rows : g->out[g->t];
}

/* The GEMM operand of image xn (C, in...) for output rows [r0, r1) of dim
 * g->t: xn itself when pointwise, else its im2col in col; *ld: its row
 * stride. */
static const R *FN(conv_operand)(const sg_conv_geom *g, const R *xn, int64_t r0,
                                 int64_t r1, R *col, int64_t *ld) {
  if (g->pointwise) {
    *ld = g->sin;
    return xn + r0 * g->inner;
  }
  *ld = FN(col_ld)((r1 - r0) * g->inner);
  FN(im2col)(g, xn, r0, r1, col, *ld);
  return col;
}

#ifdef SG_GEMM_OFF
/* ---- direct convolution (g->direct: 2-D, stride 1; f32 on AVX-512) ------
 * Output pixel (i, j) is computed at flat position i*in2 + j of the input
 * grid, where kernel offset (a, b) of channel c is the constant shift
 * c*sin + a*d1*in2 + b*d2: the GEMM reads the image in place (no im2col).
 * The in2 - out2 positions past each output row are computed too and
 * dropped when the tile is copied out (or, on AVX2 where g->rowsout, by
 * the kernel, which stores y's rows in place: sg_c2_gemm_rows_f32). dx is the same product with the
 * transposed weights over dy, zero-extended by the kernel span on each side
 * (so every input pixel sees all K k^2 terms: no col2im, no zeroing). */

/* off[ch * kk + a * ker2 + b] = ch * plane + (o1 + s * a * d1) * ld + o2 +
 * s * b * d2, for nch channels */
static void FN(direct_shifts)(const sg_conv_geom *g, int64_t nch, int64_t plane,
                              int64_t ld, int64_t o1, int64_t o2, int64_t s,
                              int64_t *off) {
  for (int64_t ch = 0, r = 0; ch < nch; ++ch)
    for (int64_t a = 0; a < g->ker[1]; ++a)
      for (int64_t b = 0; b < g->ker[2]; ++b, ++r)
        off[r] = ch * plane + (o1 + s * a * g->dil[1]) * ld + o2 +
                 s * b * g->dil[2];
}

/* rows r0..r1 of the (nrow x ld) tile product t, each in2 -> n2 long, to
 * dst (row stride n2 within a plane of size dplane, one plane per tile
 * row of t), rounded to bf16 values when rnd */
static void FN(direct_copy_out)(int64_t nrow, const R *t, int64_t ld,
                                int64_t rows, int64_t w, int64_t n2, R *dst,
                                int64_t dplane, int rnd) {
  for (int64_t k = 0; k < nrow; ++k)
    for (int64_t i = 0; i < rows; ++i) {
      R *d = dst + k * dplane + i * n2;
      memcpy(d, t + k * ld + i * w, (size_t)n2 * sizeof(R));
      FN(round_out)(rnd, d, n2);
    }
}

static void FN(direct_fwd)(const sg_conv_geom *g, const R *x, const R *w,
                           const R *b, R *y, void *ws) {
  const int64_t items = g->n * g->ntile, in2 = g->in[2], out2 = g->out[2];
  const int nth = g->nthreads;
#ifdef SG_GEMM_ROWS
  const int rows = SG_GEMM_ROWS_OK(g);
#endif
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    char *base = (char *)FN(thread_ws)(g, ws, FN(thread_id)());
    int64_t *off = (int64_t *)base;
    R *tmp = (R *)(base + sg_direct_off_bytes(g));
    FN(direct_shifts)(g, g->c, g->sin, in2, 0, 0, 1, off);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      int64_t n = it / g->ntile, r0 = (it % g->ntile) * g->rows;
      int64_t r1 = FN(tile_end)(g, r0);
      int64_t np = (r1 - r0 - 1) * in2 + out2, ld = FN(col_ld)(np);
#ifdef SG_GEMM_ROWS
      if (rows) { /* the kernel drops the junk columns itself */
        SG_GEMM_ROWS(g->ckk, g->k, np, w, g->ckk, 1,
                     x + n * g->c * g->sin + r0 * in2, off, b,
                     y + n * g->k * g->sout + r0 * out2, g->sout, in2, out2);
        continue;
      }
#endif
      SG_GEMM_OFF(g->ckk, g->k, np, w, g->ckk, 1,
                  x + n * g->c * g->sin + r0 * in2, off, b, tmp, ld);
      FN(direct_copy_out)
      (g->k, tmp, ld, r1 - r0, in2, out2, y + n * g->k * g->sout + r0 * out2,
       g->sout, g->round);
    }
  }
}

/* dx rows [r0, r1) of sample n: dy's rows r0 - (sp1 - 1) .. r1 - 1, each
 * zero-extended by sp2 - 1 on both sides (zero rows outside dy), as the
 * planes (stride plane, row stride wg) of dyp */
static void FN(direct_dy_tile)(const sg_conv_geom *g, const R *dyn, int64_t r0,
                               int64_t r1, int64_t plane, int64_t wg, R *dyp) {
  const int64_t out1 = g->out[1], out2 = g->out[2];
  const int64_t sp1 = g->in[1] - out1 + 1, sp2 = g->in[2] - out2 + 1;
  for (int64_t k = 0; k < g->k; ++k)
    for (int64_t i = r0 - (sp1 - 1); i < r1; ++i) {
      R *d = dyp + k * plane + (i - r0 + sp1 - 1) * wg;
      memset(d, 0, (size_t)wg * sizeof(R));
      if (i >= 0 && i < out1)
        memcpy(d + sp2 - 1, dyn + k * g->sout + i * out2,
               (size_t)out2 * sizeof(R));
    }
}

/* dy's output rows [r0, r1) of sample n laid out like the forward's
 * product: rows in2 apart, zero past out2 (np positions), then zero up to
 * npad; K rows at stride ld. */
static void FN(direct_dy_rows)(const sg_conv_geom *g, const R *dyn, int64_t r0,
                               int64_t r1, R *dyc, int64_t ld, int64_t npad) {
  const int64_t in2 = g->in[2], out2 = g->out[2];
  const int64_t np = (r1 - r0 - 1) * in2 + out2;
  for (int64_t k = 0; k < g->k; ++k) {
    for (int64_t i = r0; i < r1; ++i) {
      R *d = dyc + k * ld + (i - r0) * in2;
      memcpy(d, dyn + k * g->sout + i * out2, (size_t)out2 * sizeof(R));
      if (i + 1 < r1) memset(d + out2, 0, (size_t)(in2 - out2) * sizeof(R));
    }
    memset(dyc + k * ld + np, 0, (size_t)(npad - np) * sizeof(R));
  }
}

/* One tile's weight gradient, output rows [r0, r1) of sample n: dy's tile
 * (direct_dy_rows) in dyc, against the image read in place through the
 * forward's shifts off. */
static void FN(direct_wgrad)(const sg_conv_geom *g, const R *xn, const R *dyn,
                             int64_t r0, int64_t r1, const int64_t *off, R *dyc,
                             float *wp, int first) {
  const int64_t in2 = g->in[2];
#ifdef SG_WGRAD_ROWS
  if (g->avx2) { /* dy read in place, row by row; first: wp overwritten */
    SG_WGRAD_ROWS(g->ckk, g->k, r1 - r0, g->out[2], xn + r0 * in2, in2, off,
                  dyn + r0 * g->out[2], g->sout, g->out[2], wp, first);
    return;
  }
#else
  (void)first;
#endif
  const int64_t np = (r1 - r0 - 1) * in2 + g->out[2], ld = FN(col_ld)(np);
  FN(direct_dy_rows)(g, dyn, r0, r1, dyc, ld, np);
  SG_WGRAD_OFF(g->ckk, g->k, np, xn + r0 * in2, 0, off, dyc, ld, wp);
}

/* dy's rows r0 - (sp1 - 1) .. r1 - 1 of sample n for the dx product written
 * straight into dx: one slot of in2 floats per row, sp2 - 1 zeros then
 * the row's out2 values (zero slots outside dy), and sp2 - 1 zeros after
 * the last slot, per plane (stride plane) of dyp. A shift past a slot's
 * end reads the next slot's leading zeros, so the product's rows are in2
 * apart like dx's: no junk columns, no tile to copy out. */
static void FN(direct_dy_slots)(const sg_conv_geom *g, const R *dyn, int64_t r0,
                                int64_t r1, int64_t plane, R *dyp) {
  const int64_t out1 = g->out[1], out2 = g->out[2], in2 = g->in[2];
  const int64_t sp1 = g->in[1] - out1 + 1, z = in2 - out2;
  for (int64_t k = 0; k < g->k; ++k) {
    R *d = dyp + k * plane;
    for (int64_t i = r0 - (sp1 - 1); i < r1; ++i, d += in2) {
      const int in = i >= 0 && i < out1;
      memset(d, 0, (size_t)(in ? z : in2) * sizeof(R));
      if (in)
        memcpy(d + z, dyn + k * g->sout + i * out2, (size_t)out2 * sizeof(R));
    }
    memset(d, 0, (size_t)z * sizeof(R));
  }
}

static void FN(direct_dx)(const sg_conv_geom *g, const R *w, const R *dy, R *dx,
                          void *ws) {
  const int64_t in1 = g->in[1], in2 = g->in[2], kk = g->kk, kkk = g->k * kk;
  const int64_t sp1 = in1 - g->out[1] + 1, sp2 = in2 - g->out[2] + 1;
  const int64_t plane = (g->rows + sp1 - 1) * in2 + sp2 - 1;
  const int64_t ntile = (in1 + g->rows - 1) / g->rows, items = g->n * ntile;
  const int nth = g->nthreads;
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    char *base = (char *)FN(thread_ws)(g, ws, FN(thread_id)());
    int64_t *off = (int64_t *)base;
    R *wt = (R *)(base + sg_direct_off_bytes(g)); /* wt[c][k kk] */
    R *dyp = wt + g->c * kkk;
    FN(direct_shifts)(g, g->k, plane, in2, sp1 - 1, sp2 - 1, -1, off);
    for (int64_t k = 0; k < g->k; ++k)
      for (int64_t c = 0; c < g->c; ++c)
        memcpy(wt + c * kkk + k * kk, w + k * g->ckk + c * kk,
               (size_t)kk * sizeof(R));
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      int64_t n = it / ntile, r0 = (it % ntile) * g->rows;
      int64_t r1 = r0 + g->rows < in1 ? r0 + g->rows : in1;
      FN(direct_dy_slots)(g, dy + n * g->k * g->sout, r0, r1, plane, dyp);
      SG_GEMM_OFF(kkk, g->c, (r1 - r0) * in2, wt, kkk, 1, dyp, off, NULL,
                  dx + n * g->c * g->sin + r0 * in2, g->sin);
    }
  }
}
#endif /* SG_GEMM_OFF */

#ifdef SG_BF16_DIRECT
/* ---- the direct convolution in bf16 (g->bf16; conv_bf16.c) --------------
 * The f32 direct path's shifts and tiles, with channel pairs: each tile's
 * input rows (the forward's image, dx's zero-extended dy) are packed to
 * pairs interleaved per pixel, one plane per pair, and the weights to pairs
 * once per call and thread; the kernel accumulates in f32 into the same
 * tile product, copied out as before. */
static void FN(direct_fwd_bf16)(const sg_conv_geom *g, const R *x, const R *w,
                                const R *b, R *y, void *ws) {
  const int64_t items = g->n * g->ntile, in2 = g->in[2], out2 = g->out[2];
  const int64_t c2 = (g->c + 1) / 2, sp1 = g->in[1] - g->out[1] + 1;
  const int64_t pl = sg_bf16_fwd_plane(g), npr = c2 * g->kk;
  const int nth = g->nthreads;
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    char *base = (char *)FN(thread_ws)(g, ws, FN(thread_id)());
    int64_t *off = (int64_t *)base;
    uint32_t *xp = (uint32_t *)(base + sg_direct_off_bytes(g));
    R *tmp = (R *)(xp + sg_al16(c2 * pl));
    uint32_t *wp = (uint32_t *)(tmp +
                                sg_al16(g->k * FN(col_ld)(g->rows * in2)));
    FN(direct_shifts)(g, c2, pl, in2, 0, 0, 1, off);
    sg_bf16_pack_weights(g->k, g->c, g->kk, w, g->ckk, g->kk, wp);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      int64_t n = it / g->ntile, r0 = (it % g->ntile) * g->rows;
      int64_t r1 = FN(tile_end)(g, r0);
      int64_t np = (r1 - r0 - 1) * in2 + out2, ld = FN(col_ld)(np);
      sg_bf16_pack_pairs(g->c, (r1 - r0 + sp1 - 1) * in2,
                         x + n * g->c * g->sin + r0 * in2, g->sin, xp, pl);
      sg_bf16_gemm_off(npr, g->k, np, wp, npr, xp, off, b, tmp, ld);
      FN(direct_copy_out)
      (g->k, tmp, ld, r1 - r0, in2, out2, y + n * g->k * g->sout + r0 * out2,
       g->sout, g->round);
    }
  }
}

static void FN(direct_dx_bf16)(const sg_conv_geom *g, const R *w, const R *dy,
                               R *dx, void *ws) {
  const int64_t in1 = g->in[1], in2 = g->in[2], k2 = (g->k + 1) / 2;
  const int64_t sp1 = in1 - g->out[1] + 1, sp2 = in2 - g->out[2] + 1;
  const int64_t wg = in2 + sp2 - 1, plane = sg_bf16_dx_plane(g);
  const int64_t ntile = (in1 + g->rows - 1) / g->rows, items = g->n * ntile;
  const int64_t npr = k2 * g->kk;
  const int nth = g->nthreads;
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    char *base = (char *)FN(thread_ws)(g, ws, FN(thread_id)());
    int64_t *off = (int64_t *)base;
    uint32_t *wt = (uint32_t *)(base + sg_direct_off_bytes(g)); /* c x k2 kk */
    R *dyp = (R *)(wt + sg_al16(g->c * npr));
    uint32_t *dyq = (uint32_t *)(dyp + sg_al16(g->k * plane));
    R *tmp = (R *)(dyq + sg_al16(k2 * plane));
    FN(direct_shifts)(g, k2, plane, wg, sp1 - 1, sp2 - 1, -1, off);
    sg_bf16_pack_weights(g->c, g->k, g->kk, w, g->kk, g->ckk, wt);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      int64_t n = it / ntile, r0 = (it % ntile) * g->rows;
      int64_t r1 = r0 + g->rows < in1 ? r0 + g->rows : in1;
      int64_t np = (r1 - r0 - 1) * wg + in2, ld = FN(col_ld)(np);
      FN(direct_dy_tile)(g, dy + n * g->k * g->sout, r0, r1, plane, wg, dyp);
      sg_bf16_pack_pairs(g->k, (r1 - r0 + sp1 - 1) * wg, dyp, plane, dyq,
                         plane);
      sg_bf16_gemm_off(npr, g->c, np, wt, npr, dyq, off, NULL, tmp, ld);
      FN(direct_copy_out)
      (g->c, tmp, ld, r1 - r0, wg, in2, dx + n * g->c * g->sin + r0 * in2,
       g->sin, 0);
    }
  }
}

/* ---- the same on AMX tiles (g->bf16 == 2; conv_amx.c) ------------------
 * The packed planes as before (zero planes up to whole blocks of pairs,
 * slack for the last 32-pixel block), one shift per kernel offset, the
 * weights per offset and pair block, the bias as a tile. */
static void FN(direct_fwd_amx)(const sg_conv_geom *g, const R *x, const R *w,
                               const R *b, R *y, void *ws) {
  const int64_t items = g->n * g->ntile, in2 = g->in[2], out2 = g->out[2];
  const int64_t c2 = (g->c + 1) / 2, sp1 = g->in[1] - g->out[1] + 1;
  const sg_amx_dims a = sg_amx_dims_of(g->c, g->k);
  const int64_t pl = sg_amx_fwd_plane(g), ldt = sg_amx_ld(g->rows * in2);
  const int nth = g->nthreads;
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    char *base = (char *)FN(thread_ws)(g, ws, FN(thread_id)());
    int64_t *ooff = (int64_t *)base;
    uint32_t *xp = (uint32_t *)(base + sg_direct_off_bytes(g));
    R *tmp = (R *)(xp + sg_al16(a.c2p * pl));
    uint32_t *wa = (uint32_t *)(tmp + sg_al16(a.kp * ldt));
    R *bt = (R *)(wa + sg_al16(g->kk * a.npb * a.kp * 16));
    FN(direct_shifts)(g, 1, 0, in2, 0, 0, 1, ooff);
    sg_amx_pack_weights(g->k, g->c, g->kk, w, g->ckk, g->kk, a, wa);
    for (int64_t k = 0; b && k < a.kp; ++k)
      for (int l = 0; l < 16; ++l) bt[k * 16 + l] = k < g->k ? b[k] : 0;
    memset(xp + c2 * pl, 0, (size_t)((a.c2p - c2) * pl) * sizeof *xp);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      int64_t n = it / g->ntile, r0 = (it % g->ntile) * g->rows;
      int64_t r1 = FN(tile_end)(g, r0);
      int64_t np = (r1 - r0 - 1) * in2 + out2;
      sg_bf16_pack_pairs(g->c, (r1 - r0 + sp1 - 1) * in2,
                         x + n * g->c * g->sin + r0 * in2, g->sin, xp, pl);
      sg_amx_gemm_off(g->kk, a.npb, a.pb, a.kp, np, wa, xp, pl, ooff,
                      b ? bt : NULL, tmp, ldt);
      FN(direct_copy_out)
      (g->k, tmp, ldt, r1 - r0, in2, out2, y + n * g->k * g->sout + r0 * out2,
       g->sout, g->round);
    }
  }
}

static void FN(direct_dx_amx)(const sg_conv_geom *g, const R *w, const R *dy,
                              R *dx, void *ws) {
  const int64_t in1 = g->in[1], in2 = g->in[2], k2 = (g->k + 1) / 2;
  const int64_t sp1 = in1 - g->out[1] + 1, sp2 = in2 - g->out[2] + 1;
  const int64_t wg = in2 + sp2 - 1, pd = sg_bf16_dx_plane(g), pq = pd + 32;
  const int64_t ntile = (in1 + g->rows - 1) / g->rows, items = g->n * ntile;
  const sg_amx_dims a = sg_amx_dims_of(g->k, g->c);
  const int64_t ldt = sg_amx_ld(g->rows * wg);
  const int nth = g->nthreads;
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    char *base = (char *)FN(thread_ws)(g, ws, FN(thread_id)());
    int64_t *ooff = (int64_t *)base;
    uint32_t *wa = (uint32_t *)(base + sg_direct_off_bytes(g));
    R *dyp = (R *)(wa + sg_al16(g->kk * a.npb * a.kp * 16));
    uint32_t *dyq = (uint32_t *)(dyp + sg_al16(g->k * pd));
    R *tmp = (R *)(dyq + sg_al16(a.c2p * pq));
    FN(direct_shifts)(g, 1, 0, wg, sp1 - 1, sp2 - 1, -1, ooff);
    sg_amx_pack_weights(g->c, g->k, g->kk, w, g->kk, g->ckk, a, wa);
    memset(dyq + k2 * pq, 0, (size_t)((a.c2p - k2) * pq) * sizeof *dyq);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      int64_t n = it / ntile, r0 = (it % ntile) * g->rows;
      int64_t r1 = r0 + g->rows < in1 ? r0 + g->rows : in1;
      int64_t np = (r1 - r0 - 1) * wg + in2;
      FN(direct_dy_tile)(g, dy + n * g->k * g->sout, r0, r1, pd, wg, dyp);
      sg_bf16_pack_pairs(g->k, (r1 - r0 + sp1 - 1) * wg, dyp, pd, dyq, pq);
      sg_amx_gemm_off(g->kk, a.npb, a.pb, a.kp, np, wa, dyq, pq, ooff, NULL,
                      tmp, ldt);
      FN(direct_copy_out)
      (g->c, tmp, ldt, r1 - r0, wg, in2, dx + n * g->c * g->sin + r0 * in2,
       g->sin, 0);
    }
  }
}

/* ---- the weight gradient on AMX tiles (g->wbf16; conv_amx.c) ----------- */

/* Thread t's pieces of its workspace (sg_amx_wgrad_elems). */
typedef struct FN(amx_wws) {
  int64_t *ooff;
  uint16_t *xb;
  R *dyc;
  uint32_t *dyt;
  float *part;
} FN(amx_wws);
static FN(amx_wws) FN(amx_wws_of)(const sg_conv_geom *g, const sg_amx_wdims *a,
                                  void *ws, int t) {
  FN(amx_wws) w;
  char *base = (char *)FN(thread_ws)(g, ws, t);
  w.ooff = (int64_t *)base;
  w.xb = (uint16_t *)(base + sg_direct_off_bytes(g));
  w.dyc = (R *)((uint32_t *)w.xb + sg_al16(a->cp * a->xpl / 2));
  w.dyt = (uint32_t *)(w.dyc + sg_al16(a->kp * a->ldc));
  w.part = (float *)(w.dyt + sg_al16(a->npad / 2 * a->kp));
  return w;
}

/* A reduction over pixels, so pixels are the tile product's inner
 * dimension: per (sample, tile of output rows) the tile's input rows as
 * bf16 planes (zero planes up to cp channels; the A tiles read them at
 * every kernel offset's shift, odd or even), dy laid out like the
 * forward's product (zero in the margins, past the tile and past cout)
 * packed to B tiles of pixel pairs. Each thread sums into its partials
 * (offset x cp x kp f32, in the tiles across its items; zeroed before the
 * region, so a thread OpenMP did not start adds zeros), added to dw in
 * thread order. */
static void FN(direct_wgrad_amx)(const sg_conv_geom *g, const R *x, const R *dy,
                                 R *dw, void *ws) {
  const int64_t items = g->n * g->ntile, in2 = g->in[2], kk = g->kk;
  const int64_t sp1 = g->in[1] - g->out[1] + 1;
  const sg_amx_wdims a = sg_amx_wdims_of(g);
  const int nth = g->nthreads;
  for (int t = 0; t < nth; ++t)
    memset(FN(amx_wws_of)(g, &a, ws, t).part, 0,
           (size_t)(kk * a.cp * a.kp) * sizeof(float));
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    const FN(amx_wws) w = FN(amx_wws_of)(g, &a, ws, FN(thread_id)());
    FN(direct_shifts)(g, 1, 0, in2, 0, 0, 1, w.ooff);
    memset(w.xb + g->c * a.xpl, 0,
           (size_t)((a.cp - g->c) * a.xpl) * sizeof *w.xb);
    memset(w.dyc + g->k * a.ldc, 0,
           (size_t)((a.kp - g->k) * a.ldc) * sizeof *w.dyc);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      int64_t n = it / g->ntile, r0 = (it % g->ntile) * g->rows;
      int64_t r1 = FN(tile_end)(g, r0);
      int64_t np = (r1 - r0 - 1) * in2 + g->out[2], npad = (np + 31) / 32 * 32;
      sg_bf16_pack_planes(g->c, (r1 - r0 + sp1 - 1) * in2,
                          x + n * g->c * g->sin + r0 * in2, g->sin, w.xb,
                          a.xpl);
      FN(direct_dy_rows)
      (g, dy + n * g->k * g->sout, r0, r1, w.dyc, a.ldc, npad);
      sg_bf16_pack_dy_tiles(a.kp, npad, w.dyc, a.ldc, w.dyt);
      sg_amx_wgrad_off(kk, a.cp, a.kp, npad, w.xb, a.xpl, w.ooff, w.dyt,
                       w.part);
    }
  }
  for (int t = 0; t < nth; ++t) { /* thread order */
    const float *part = FN(amx_wws_of)(g, &a, ws, t).part;
    for (int64_t k = 0; k < g->k; ++k)
      for (int64_t c = 0; c < g->c; ++c)
        for (int64_t o = 0; o < kk; ++o)
          dw[k * g->ckk + c * kk + o] += part[(o * a.cp + c) * a.kp + k];
  }
}
#endif /* SG_BF16_DIRECT */

void FN(sg_conv_fwd)(const sg_conv_geom *g, const R *x, const R *w, const R *b,
                     R *y, void *ws) {
#ifdef SG_GEMM_OFF
  if (g->direct) {
#ifdef SG_BF16_DIRECT
    if (g->bf16) {
      if (g->bf16 == 2)
        FN(direct_fwd_amx)(g, x, w, b, y, ws);
      else
        FN(direct_fwd_bf16)(g, x, w, b, y, ws);
      return;
    }
#endif
    FN(direct_fwd)(g, x, w, b, y, ws);
    return;
  }
#endif
  const int64_t items = g->n * g->ntile;
  const int nth = g->nthreads;
  int saved = sg_blas_threads_begin();
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    int tid = FN(thread_id)();
    R *col = FN(thread_ws)(g, ws, tid);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      int64_t n = it / g->ntile, tile = it % g->ntile;
      int64_t r0 = tile * g->rows, r1 = FN(tile_end)(g, r0);
      int64_t ncol = (r1 - r0) * g->inner;
      R *yt = y + n * g->k * g->sout + r0 * g->inner;
      int64_t ldb;
      const R *bm = FN(conv_operand)(g, x + n * g->c * g->sin, r0, r1, col,
                                     &ldb);
      /* f32 on AVX-512: register-blocked kernel, bias as its start */
      if (!SG_GEMM_FAST(g->k, ncol, g->ckk, w, g->ckk, 1, bm, ldb, b, yt,
                        g->sout)) {
        R beta = 0;
        if (b) {
          for (int64_t k = 0; k < g->k; ++k)
            for (int64_t j = 0; j < ncol; ++j) yt[k * g->sout + j] = b[k];
          beta = 1;
        }
        SG_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g->k, (int)ncol,
                (int)g->ckk, 1, w, (int)g->ckk, bm, (int)ldb, beta, yt,
                (int)g->sout);
      }
      for (int64_t k = 0; g->round && k < g->k; ++k)
        FN(round_out)(1, yt + k * g->sout, ncol);
    }
  }
  sg_blas_threads_end(saved);
}

/* part (NULL when dw is): the weight gradient's SG_DW_SLOTS slot partials
 * (sg_conv_dw_part_bytes): `lanes` f32 lane partials per weight for the
 * register-blocked kernels (16: sg_pw_wgrad_acc_f32 on AVX-512; 8: the AVX2
 * direct sg_c2_wgrad_acc_rows_f32), else (0) R partials (ckk x k) for the
 * BLAS GEMM. Threads take whole slots: dx's tiles are
 * disjoint within a phase, and each slot's partial sums its tiles in a
 * fixed order, so dx and dw are the same bits for every thread count and
 * schedule. (A dynamic schedule of the slots and of the forward's tiles
 * measured a 7-15% longer 2-thread CNN critical path: bench/RESULTS.md,
 * "Two threads per rank".) */
void FN(sg_conv_bwd)(const sg_conv_geom *g, const R *x, const R *w, const R *dy,
                     R *dx, R *dw, R *db, void *ws, void *part, int lanes) {
  const int nth = g->nthreads;
  const int64_t wsz = g->k * g->ckk;
  if (db) FN(sg_bias_bwd)(g->n, g->k, g->sout, dy, db);
#ifdef SG_BF16_DIRECT
  if (dw && g->direct && g->wbf16) { /* dw done: the loop below is dx's */
    FN(direct_wgrad_amx)(g, x, dy, dw, ws);
    dw = NULL;
  }
#endif
  if (!dx && !dw) return;
#ifdef SG_GEMM_OFF
  R *dx_direct = NULL; /* dx after the weight gradient's loop */
  if (g->direct) {
    dx_direct = dx;
    dx = NULL;
  }
#endif
  const int64_t total = dx ? g->n * g->c * g->sin : 0;
  int saved = sg_blas_threads_begin();
  /* Two phases (even tiles, then odd tiles): the input rows of tiles i and
   * i + 2 never overlap, so col2im needs no atomics. */
  const int64_t half[2] = {(g->ntile + 1) / 2, g->ntile / 2};
  unsigned char touched[SG_DW_SLOTS] = {0}; /* slot partial started */
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    int tid = FN(thread_id)();
    R *col = FN(thread_ws)(g, ws, tid);
    R *dcol = col + g->ckk * FN(col_ld)(g->cols);
    R *dyc = dcol + g->ckk * FN(col_ld)(g->cols) + wsz;
#ifdef SG_GEMM_OFF
    int64_t *doff = (int64_t *)col; /* direct: the forward's shifts, then */
    R *ddy = (R *)((char *)col + sg_direct_off_bytes(g)); /* dy's tile */
    if (g->direct) FN(direct_shifts)(g, g->c, g->sin, g->in[2], 0, 0, 1, doff);
#endif
    if (total) {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < total; ++i) dx[i] = 0;
    }
    for (int phase = 0; phase < 2; ++phase) {
      const int64_t items = g->n * half[phase];
#pragma omp for schedule(static)
      for (int s = 0; s < SG_DW_SLOTS; ++s) {
        const int64_t i0 = items * s / SG_DW_SLOTS;
        const int64_t i1 = items * (s + 1) / SG_DW_SLOTS;
        if (i0 == i1) continue;
        float *wp = NULL;
        R *dwp = NULL;
        int first = 0;
        if (dw) {
          first = !touched[s];
          touched[s] = 1;
          if (lanes) {
            wp = (float *)part + (size_t)s * (size_t)(wsz * lanes);
            /* the AVX2 kernel's first tile of a slot overwrites it */
            if (first && !g->avx2)
              memset(wp, 0, (size_t)(wsz * lanes) * sizeof *wp);
          } else {
            dwp = (R *)part + (size_t)s * (size_t)wsz;
          }
        }
        for (int64_t it = i0; it < i1; ++it, first = 0) {
          int64_t n = it / half[phase];
          int64_t tile = 2 * (it % half[phase]) + phase;
          int64_t r0 = tile * g->rows, r1 = FN(tile_end)(g, r0);
          int64_t ncol = (r1 - r0) * g->inner;
#ifdef SG_GEMM_OFF
          if (g->direct) { /* dx comes after this loop */
            if (wp) FN(direct_wgrad)
            (g, x + n * g->c * g->sin, dy + n * g->k * g->sout, r0, r1, doff,
             ddy, wp, first);
            continue;
          }
#endif
          const R *dyt = dy + n * g->k * g->sout + r0 * g->inner;
          int64_t ldd = g->sout;
          if (!g->pointwise) {
            /* dy's tile at the column matrix's stride: g->sout is often a
             * multiple of 4 KiB, and the kernels' strips down its k rows then
             * shared a few L1 sets (dx GEMM 1.3x slower) */
            ldd = FN(col_ld)(ncol);
            for (int64_t k = 0; k < g->k; ++k)
              memcpy(dyc + k * ldd, dyt + k * g->sout,
                     (size_t)ncol * sizeof(R));
            dyt = dyc;
          }
          if (dw) {
            int64_t ldb;
            const R *bm = FN(conv_operand)(g, x + n * g->c * g->sin, r0, r1,
                                           col, &ldb);
            /* dw^T (ckk x k) += col dy^T: with the long ncol axis as the
             * inner dimension of both operands OpenBLAS packs them without
             * a transposing copy (dw = dy col^T ran at 48 GF/s, this at 83
             * on 32 x 288 x 1024, one AVX-512 core). The slot's first tile
             * overwrites its partial. */
            if (wp)
              SG_WGRAD_ACC(g->ckk, g->k, ncol, bm, ldb, dyt, ldd, wp);
            else
              SG_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->ckk,
                      (int)g->k, (int)ncol, 1, bm, (int)ldb, dyt, (int)ldd,
                      first ? 0 : 1, dwp, (int)g->k);
          }
          if (dx) {
            if (g->pointwise) {
              SG_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)g->ckk,
                      (int)ncol, (int)g->k, 1, w, (int)g->ckk, dyt,
                      (int)g->sout, 0, dx + n * g->c * g->sin + r0 * g->inner,
                      (int)g->sin);
            } else {
              const int64_t ldc = FN(col_ld)(ncol);
              if (!SG_GEMM_FAST(g->ckk, ncol, g->k, w, 1, g->ckk, dyt, ldd,
                                NULL, dcol, ldc))
                SG_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)g->ckk,
                        (int)ncol, (int)g->k, 1, w, (int)g->ckk, dyt, (int)ldd,
                        0, dcol, (int)ldc);
              FN(col2im)(g, dcol, r0, r1, dx + n * g->c * g->sin, ldc);
            }
          }
        }
      }
    }
  }
  sg_blas_threads_end(saved);
#ifdef SG_GEMM_OFF
#ifdef SG_BF16_DIRECT
  if (dx_direct && g->bf16 == 2)
    FN(direct_dx_amx)(g, w, dy, dx_direct, ws);
  else if (dx_direct && g->bf16)
    FN(direct_dx_bf16)(g, w, dy, dx_direct, ws);
  else
#endif
      if (dx_direct)
    FN(direct_dx)(g, w, dy, dx_direct, ws);
#endif
#ifdef SG_WGRAD_SUM_SLOTS
  if (dw && lanes && g->avx2) {
    /* the slots in slot order per weight, output-channel blocks over the
     * threads (serial here, it was 2.6% of the U-Net's step) */
    const int64_t nkb = SG_WGRAD_KBLOCKS(g->k);
#pragma omp parallel for schedule(static) num_threads(nth) if (nth > 1)
    for (int64_t kb = 0; kb < nkb; ++kb)
      SG_WGRAD_SUM_SLOTS(g->ckk, g->k, kb, (const float *)part, wsz * lanes,
                         SG_DW_SLOTS, touched, dw);
    return;
  }
#endif
  if (dw && lanes) {
    for (int s = 0; s < SG_DW_SLOTS; ++s) /* slot order */
      if (touched[s])
        SG_WGRAD_SUM(g->ckk, g->k,
                     (float *)part + (size_t)s * (size_t)(wsz * lanes), dw);
  } else if (dw) {
    /* Sum the slot partials (transposed, ckk x k) in slot order. */
    const R *pt = part;
#pragma omp parallel for schedule(static) if (wsz * SG_DW_SLOTS > SG_OMP_MIN)
    for (int64_t k = 0; k < g->k; ++k)
      for (int64_t i = 0; i < g->ckk; ++i) {
        R acc = 0;
        for (int s = 0; s < SG_DW_SLOTS; ++s)
          if (touched[s]) acc += pt[(size_t)s * (size_t)wsz + i * g->k + k];
        dw[k * g->ckk + i] += acc;
      }
  }
}

/* ---- transposed convolution, kernel == stride --------------------------- */

/* Output flat index of input column j and kernel offset (a0, a1, a2). */
static inline int64_t FN(convt_index)(const sg_conv_geom *g, int64_t j,
                                      int64_t a0, int64_t a1, int64_t a2) {
  int64_t i2 = j % g->in[2], r = j / g->in[2];
  int64_t i1 = r % g->in[1], i0 = r / g->in[1];
  return ((i0 * g->ker[0] + a0) * g->out[1] + (i1 * g->ker[1] + a1)) *
             g->out[2] +
         i2 * g->ker[2] + a2;
}

void FN(sg_convt_fwd)(const sg_conv_geom *g, const R *x, const R *w, const R *b,
                      R *y, void *ws) {
  const int nth = g->nthreads;
  const int64_t ntile = (g->sin + g->cols - 1) / g->cols;
  const int64_t items = g->n * ntile, kk = g->kk, m = g->k * kk;
  int saved = sg_blas_threads_begin();
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    int tid = FN(thread_id)();
    R *tbuf = FN(thread_ws)(g, ws, tid);
#pragma omp for schedule(static)
    for (int64_t it = 0; it < items; ++it) {
      int64_t n = it / ntile, j0 = (it % ntile) * g->cols;
      int64_t ncol = j0 + g->cols < g->sin ? g->cols : g->sin - j0;
      /* T[(k, a), j] = sum_c w[c, (k, a)] x[c, j] */
      SG_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m, (int)ncol,
              (int)g->c, 1, w, (int)m, x + n * g->c * g->sin + j0, (int)g->sin,
              0, tbuf, (int)ncol);
      R *yn = y + n * g->k * g->sout;
      for (int64_t k = 0; k < g->k; ++k) {
        R bk = b ? b[k] : 0;
        for (int64_t a = 0; a < kk; ++a) {
          int64_t a2 = a % g->ker[2], a1 = (a / g->ker[2]) % g->ker[1],
                  a0 = a / (g->ker[2] * g->ker[1]);
          const R *src = tbuf + (k * kk + a) * ncol;
          R *yk = yn + k * g->sout;
          for (int64_t j = 0; j < ncol; ++j)
            yk[FN(convt_index)(g, j0 + j, a0, a1, a2)] = src[j] + bk;
        }
      }
    }
  }
  sg_blas_threads_end(saved);
}

/* dwpart (NULL when dw is): SG_DW_SLOTS partials of the weight gradient
 * (sg_conv_dw_part_bytes), each over a fixed run of the column tiles, summed
 * in slot order: the same bits for every thread count. */
void FN(sg_convt_bwd)(const sg_conv_geom *g, const R *x, const R *w,
                      const R *dy, R *dx, R *dw, R *db, void *ws,
                      void *dwpart) {
  const int nth = g->nthreads;
  const int64_t ntile = (g->sin + g->cols - 1) / g->cols;
  const int64_t items = g->n * ntile, kk = g->kk, m = g->k * kk;
  const int64_t wsz = g->c * m;
  if (db) FN(sg_bias_bwd)(g->n, g->k, g->sout, dy, db);
  if (!dx && !dw) return;
  int saved = sg_blas_threads_begin();
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    int tid = FN(thread_id)();
    R *tbuf = FN(thread_ws)(g, ws, tid);
#pragma omp for schedule(static)
    for (int s = 0; s < SG_DW_SLOTS; ++s) {
      const int64_t i0 = items * s / SG_DW_SLOTS;
      const int64_t i1 = items * (s + 1) / SG_DW_SLOTS;
      R *dwp = dw ? (R *)dwpart + (size_t)s * (size_t)wsz : NULL;
      for (int64_t it = i0; it < i1; ++it) {
        int64_t n = it / ntile, j0 = (it % ntile) * g->cols;
        int64_t ncol = j0 + g->cols < g->sin ? g->cols : g->sin - j0;
        const R *dyn = dy + n * g->k * g->sout;
        for (int64_t k = 0; k < g->k; ++k)
          for (int64_t a = 0; a < kk; ++a) {
            int64_t a2 = a % g->ker[2], a1 = (a / g->ker[2]) % g->ker[1],
                    a0 = a / (g->ker[2] * g->ker[1]);
            R *dst = tbuf + (k * kk + a) * ncol;
            const R *dk = dyn + k * g->sout;
            for (int64_t j = 0; j < ncol; ++j)
              dst[j] = dk[FN(convt_index)(g, j0 + j, a0, a1, a2)];
          }
        if (dx)
          SG_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)g->c,
                  (int)ncol, (int)m, 1, w, (int)m, tbuf, (int)ncol, 0,
                  dx + n * g->c * g->sin + j0, (int)g->sin);
        if (dw) /* the slot's first tile overwrites its partial */
          SG_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g->c, (int)m,
                  (int)ncol, 1, x + n * g->c * g->sin + j0, (int)g->sin, tbuf,
                  (int)ncol, it == i0 ? 0 : 1, dwp, (int)m);
      }
    }
  }
  sg_blas_threads_end(saved);
  if (dw) {
    const R *pt = dwpart;
    for (int64_t i = 0; i < wsz; ++i) {
      R acc = 0;
      for (int s = 0; s < SG_DW_SLOTS; ++s) /* slot order, non-empty slots */
        if (items * s / SG_DW_SLOTS < items * (s + 1) / SG_DW_SLOTS)
          acc += pt[(size_t)s * (size_t)wsz + i];
      dw[i] += acc;
    }
  }
}

/* ---- pooling ------------------------------------------------------------ */

/* A 2-D average pooling of 2 x 2 windows at stride 2 (the U-Net's): the
 * kernels' loops with the window unrolled, the same sums in the same
 * order (each input cell in one window). */
static inline int FN(pool_avg22)(int kind, const sg_pool_win *w) {
  return kind == SG_POOL_AVG && w->out[0] == 1 && w->ker[0] == 1 &&
         w->ker[1] == 2 && w->ker[2] == 2 && w->str[1] == 2 && w->str[2] == 2 &&
         w->dil[1] == 1 && w->dil[2] == 1;
}

void FN(sg_pool_fwd)(int kind, const sg_conv_geom *g, const R *x, R *y) {
  const int64_t planes = g->n * g->c;
  const R inv = (R)(1.0 / (double)g->kk);
  const sg_pool_win w = sg_pool_win_of(g);
  const int avg22 = FN(pool_avg22)(kind, &w);
#pragma omp parallel for schedule(static) if (planes * g->sout * g->kk > \
                                              SG_OMP_MIN)
  for (int64_t p = 0; p < planes; ++p) {
    const R *xp = x + p * g->sin;
    R *yp = y + p * g->sout;
    if (avg22) { /* sg_pool_out's sum: 0, then the window's cells in order */
      for (int64_t o1 = 0; o1 < g->out[1]; ++o1) {
        const R *r0 = xp + 2 * o1 * g->in[2], *r1 = r0 + g->in[2];
        R *yr = yp + o1 * g->out[2];
        for (int64_t o2 = 0; o2 < g->out[2]; ++o2) {
          R acc = 0;
          acc += r0[2 * o2];
          acc += r0[2 * o2 + 1];
          acc += r1[2 * o2];
          acc += r1[2 * o2 + 1];
          yr[o2] = acc * inv;
        }
      }
      continue;
    }
    for (int64_t o0 = 0; o0 < g->out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g->out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g->out[2]; ++o2)
          yp[(o0 * g->out[1] + o1) * g->out[2] + o2] = FN(
              sg_pool_out)(kind, &w, inv, xp, o0, o1, o2);
  }
}

void FN(sg_pool_bwd)(int kind, const sg_conv_geom *g, const R *x, const R *dy,
                     R *dx) {
  const int64_t planes = g->n * g->c;
  const R inv = (R)(1.0 / (double)g->kk);
  const sg_pool_win w = sg_pool_win_of(g);
  const int avg22 = FN(pool_avg22)(kind, &w);
#pragma omp parallel for schedule(static) if (planes * g->sout * g->kk > \
                                              SG_OMP_MIN)
  for (int64_t p = 0; p < planes; ++p) {
    const R *xp = x + p * g->sin;
    const R *dyp = dy + p * g->sout;
    R *dxp = dx + p * g->sin;
    for (int64_t i = 0; i < g->sin; ++i) dxp[i] = 0;
    if (avg22) { /* the loop below's additions, window unrolled */
      for (int64_t o1 = 0; o1 < g->out[1]; ++o1) {
        R *d0 = dxp + 2 * o1 * g->in[2], *d1 = d0 + g->in[2];
        const R *gr = dyp + o1 * g->out[2];
        for (int64_t o2 = 0; o2 < g->out[2]; ++o2) {
          const R gi = gr[o2] * inv;
          d0[2 * o2] += gi;
          d0[2 * o2 + 1] += gi;
          d1[2 * o2] += gi;
          d1[2 * o2 + 1] += gi;
        }
      }
      continue;
    }
    for (int64_t o0 = 0; o0 < g->out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g->out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g->out[2]; ++o2) {
          R gy = dyp[(o0 * g->out[1] + o1) * g->out[2] + o2];
          if (kind == SG_POOL_MAX) {
            dxp[FN(sg_pool_argmax)(&w, xp, o0, o1, o2)] += gy;
            continue;
          }
          for (int64_t a = 0; a < g->ker[0]; ++a)
            for (int64_t b = 0; b < g->ker[1]; ++b) {
              const int64_t base = sg_pool_row(&w, o0, o1, o2, a, b);
              for (int64_t e = 0; e < g->ker[2]; ++e)
                dxp[base + e * g->dil[2]] += gy * inv;
            }
        }
  }
}

/* ---- up-sampling -------------------------------------------------------- */

/* Source cell and weight of output o along one dim (linear mode). */
static inline void FN(up_src)(const sg_up_geom *g, int d, int64_t o,
                              int64_t *i0, int64_t *i1, R *lam) {
  *lam = (R)sg_up_src(g->linear[d], g->scale[d], o, i0, i1);
}

/* The last dim's first source column and weight of every output column
 * (linear mode: the second source is the next column), once per call: the
 * same sg_up_src values the rows' loops computed per element (a double
 * division and a floor: the U-Net's up-sampling was 12% of its step). Up
 * to SG_UP_TAB columns; wider rows compute them per element. */
#define SG_UP_TAB 4096
static int FN(up_tab)(const sg_up_geom *g, int32_t *c0, R *lc) {
  if (!g->linear[2] || g->out[2] > SG_UP_TAB) return 0;
  for (int64_t o2 = 0; o2 < g->out[2]; ++o2) {
    int64_t i0, i1;
    FN(up_src)(g, 2, o2, &i0, &i1, &lc[o2]);
    c0[o2] = (int32_t)i0;
  }
  return 1;
}

void FN(sg_up_fwd)(int linear, const sg_up_geom *g, const R *x, R *y) {
  const int64_t sin = g->in[0] * g->in[1] * g->in[2];
  const int64_t sout = g->out[0] * g->out[1] * g->out[2];
  int32_t ct[SG_UP_TAB];
  R lt[SG_UP_TAB];
  const int tab = linear && FN(up_tab)(g, ct, lt);
#pragma omp parallel for schedule(static) if (g->planes * sout > SG_OMP_MIN)
  for (int64_t p = 0; p < g->planes; ++p) {
    const R *xp = x + p * sin;
    R *yp = y + p * sout;
    for (int64_t o0 = 0; o0 < g->out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g->out[1]; ++o1) {
        R *yr = yp + (o0 * g->out[1] + o1) * g->out[2];
        if (!linear) {
          const R *xr = xp +
                        ((o0 / g->scale[0]) * g->in[1] + o1 / g->scale[1]) *
                            g->in[2];
          for (int64_t o2 = 0; o2 < g->out[2]; ++o2)
            yr[o2] = xr[o2 / g->scale[2]];
          continue;
        }
        int64_t a0, a1, b0, b1;
        R la, lb;
        FN(up_src)(g, 0, o0, &a0, &a1, &la);
        FN(up_src)(g, 1, o1, &b0, &b1, &lb);
        const R *r00 = xp + (a0 * g->in[1] + b0) * g->in[2];
        const R *r01 = xp + (a0 * g->in[1] + b1) * g->in[2];
        const R *r10 = xp + (a1 * g->in[1] + b0) * g->in[2];
        const R *r11 = xp + (a1 * g->in[1] + b1) * g->in[2];
        R w[4];
        FN(sg_up_w4)(la, lb, w);
        if (tab) {
          /* the four rows' blend of each source column once (sg_up_lerp's
           * v0 / v1, the same expression), then the columns' lerp: the same
           * values, and each column blended once, not at every output
           * that reads it */
          R v[SG_UP_TAB + 2];
          const int64_t cl = ct[0], ch = ct[g->out[2] - 1] + 1;
          for (int64_t c = cl; c <= ch; ++c)
            v[c - cl] = w[0] * r00[c] + w[1] * r01[c] + w[2] * r10[c] +
                        w[3] * r11[c];
          for (int64_t o2 = 0; o2 < g->out[2]; ++o2) {
            const R lc = lt[o2];
            yr[o2] = (1 - lc) * v[ct[o2] - cl] + lc * v[ct[o2] + 1 - cl];
          }
          continue;
        }
        for (int64_t o2 = 0; o2 < g->out[2]; ++o2) {
          int64_t c0, c1;
          R lc;
          FN(up_src)(g, 2, o2, &c0, &c1, &lc);
          yr[o2] = FN(sg_up_lerp)(w, lc, r00, r01, r10, r11, c0, c1);
        }
      }
  }
}

/* The scatter of one output row's gradient (n columns, first sources ct,
 * weights lt) into its nr distinct input rows row[r], each taking the nw
 * weights wl[r] (in the order of the four corners: rows alias where a dim
 * is nearest, e.g. the first of a 2-D up-sampling). Every input element
 * receives the same additions in the same order as the corner-by-corner
 * loop (per output column: the weights' g0 terms at its first source, then
 * their g1 terms at the next), but the two live columns of each row are
 * carried in registers: the loop's read-modify-writes of one element ran
 * as a chain through memory (7% of the U-Net's step). nr, nw: constants
 * at each call. */
static inline __attribute__((always_inline)) void FN(up_bwd_rows)(
    int nr, int nw, R *const *row, const R (*wl)[4], const R *yr, int64_t n,
    const int32_t *ct, const R *lt) {
  R vl[4], vh[4];
  int64_t lo = ct[0];
  for (int r = 0; r < nr; ++r) {
    vl[r] = row[r][lo];
    vh[r] = row[r][lo + 1];
  }
  for (int64_t o2 = 0; o2 < n; ++o2) {
    for (; lo < ct[o2]; ++lo) /* the lower column is done */
      for (int r = 0; r < nr; ++r) {
        row[r][lo] = vl[r];
        vl[r] = vh[r];
        vh[r] = row[r][lo + 2];
      }
    const R g0 = (1 - lt[o2]) * yr[o2], g1 = lt[o2] * yr[o2];
    for (int r = 0; r < nr; ++r) {
      for (int k = 0; k < nw; ++k) vl[r] += wl[r][k] * g0;
      for (int k = 0; k < nw; ++k) vh[r] += wl[r][k] * g1;
    }
  }
  for (int r = 0; r < nr; ++r) {
    row[r][lo] = vl[r];
    row[r][lo + 1] = vh[r];
  }
}

void FN(sg_up_bwd)(int linear, const sg_up_geom *g, const R *dy, R *dx) {
  const int64_t sin = g->in[0] * g->in[1] * g->in[2];
  const int64_t sout = g->out[0] * g->out[1] * g->out[2];
  int32_t ct[SG_UP_TAB];
  R lt[SG_UP_TAB];
  const int tab = linear && FN(up_tab)(g, ct, lt);
#pragma omp parallel for schedule(static) if (g->planes * sout > SG_OMP_MIN)
  for (int64_t p = 0; p < g->planes; ++p) {
    R *xp = dx + p * sin;
    const R *yp = dy + p * sout;
    for (int64_t i = 0; i < sin; ++i) xp[i] = 0;
    for (int64_t o0 = 0; o0 < g->out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g->out[1]; ++o1) {
        const R *yr = yp + (o0 * g->out[1] + o1) * g->out[2];
        if (!linear) {
          R *xr = xp +
                  ((o0 / g->scale[0]) * g->in[1] + o1 / g->scale[1]) * g->in[2];
          for (int64_t o2 = 0; o2 < g->out[2]; ++o2)
            xr[o2 / g->scale[2]] += yr[o2];
          continue;
        }
        int64_t a0, a1, b0, b1;
        R la, lb;
        FN(up_src)(g, 0, o0, &a0, &a1, &la);
        FN(up_src)(g, 1, o1, &b0, &b1, &lb);
        R *r00 = xp + (a0 * g->in[1] + b0) * g->in[2];
        R *r01 = xp + (a0 * g->in[1] + b1) * g->in[2];
        R *r10 = xp + (a1 * g->in[1] + b0) * g->in[2];
        R *r11 = xp + (a1 * g->in[1] + b1) * g->in[2];
        R w[4];
        FN(sg_up_w4)(la, lb, w);
        if (tab) { /* the corners' distinct rows and their weights */
          R *const crn[4] = {r00, r01, r10, r11};
          R *row[4];
          R wl[4][4];
          int nr = 0, nw[4] = {0, 0, 0, 0};
          for (int i = 0; i < 4; ++i) {
            int r = 0;
            while (r < nr && row[r] != crn[i]) ++r;
            if (r == nr) row[nr++] = crn[i];
            wl[r][nw[r]++] = w[i];
          }
          if (nr == 2 && nw[0] == 2 && nw[1] == 2) { /* 2-D */
            FN(up_bwd_rows)
            (2, 2, row, (const R(*)[4])wl, yr, g->out[2], ct, lt);
            continue;
          }
          if (nr == 4) { /* 3-D */
            FN(up_bwd_rows)
            (4, 1, row, (const R(*)[4])wl, yr, g->out[2], ct, lt);
            continue;
          }
          if (nr == 1) { /* 1-D */
            FN(up_bwd_rows)
            (1, 4, row, (const R(*)[4])wl, yr, g->out[2], ct, lt);
            continue;
          }
        }
        const R w00 = w[0], w01 = w[1], w10 = w[2], w11 = w[3];
        for (int64_t o2 = 0; o2 < g->out[2]; ++o2) {
          int64_t c0, c1;
          R lc;
          if (tab) {
            c0 = ct[o2];
            c1 = c0 + 1;
            lc = lt[o2];
          } else {
            FN(up_src)(g, 2, o2, &c0, &c1, &lc);
          }
          R g0 = (1 - lc) * yr[o2], g1 = lc * yr[o2];
          r00[c0] += w00 * g0;
          r01[c0] += w01 * g0;
          r10[c0] += w10 * g0;
          r11[c0] += w11 * g0;
          r00[c1] += w00 * g1;
          r01[c1] += w01 * g1;
          r10[c1] += w10 * g1;
          r11[c1] += w11 * g1;
        }
      }
  }
}

/* ---- padding ------------------------------------------------------------ */

/* One row of the last dim: dst's out2 = lo2 + in2 + hi2 elements from src's
 * in2. The margins element by element (sg_pad_src_index), the interior as
 * one copy; bwd adds in the same increasing o2 order as an element loop,
 * so the sums are unchanged. */
static void FN(pad_row_fwd)(int mode, int64_t lo, int64_t in, int64_t out,
                            const R *sr, R *dr) {
  for (int64_t o2 = 0; o2 < lo; ++o2) {
    int64_t i2 = sg_pad_src_index(mode, o2 - lo, in);
    dr[o2] = i2 < 0 ? 0 : sr[i2];
  }
  memcpy(dr + lo, sr, (size_t)in * sizeof(R));
  for (int64_t o2 = lo + in; o2 < out; ++o2) {
    int64_t i2 = sg_pad_src_index(mode, o2 - lo, in);
    dr[o2] = i2 < 0 ? 0 : sr[i2];
  }
}

static void FN(pad_row_bwd)(int mode, int64_t lo, int64_t in, int64_t out,
                            const R *dr, R *restrict sr) {
  for (int64_t o2 = 0; o2 < lo; ++o2) {
    int64_t i2 = sg_pad_src_index(mode, o2 - lo, in);
    if (i2 >= 0) sr[i2] += dr[o2];
  }
  const R *restrict di = dr + lo;
  for (int64_t i2 = 0; i2 < in; ++i2) sr[i2] += di[i2];
  for (int64_t o2 = lo + in; o2 < out; ++o2) {
    int64_t i2 = sg_pad_src_index(mode, o2 - lo, in);
    if (i2 >= 0) sr[i2] += dr[o2];
  }
}

/* pad_row_bwd onto a row not yet touched (no zero fill first): the
 * interior as 0 + value, then the margins added. The same bits as the
 * zeroed row's lo margin, interior, hi margin: an element's one lo-margin
 * term and its interior term commute exactly onto zero ((0 + a) + b ==
 * (0 + b) + a, signed zeros included), and the hi margin still comes
 * last. Only where the lo margin's sources are distinct (pad_lo_distinct). */
static void FN(pad_row_bwd_first)(int mode, int64_t lo, int64_t in, int64_t out,
                                  const R *dr, R *restrict sr) {
  const R *restrict di = dr + lo;
  for (int64_t i2 = 0; i2 < in; ++i2) sr[i2] = (R)0 + di[i2];
  for (int64_t o2 = 0; o2 < lo; ++o2) {
    int64_t i2 = sg_pad_src_index(mode, o2 - lo, in);
    if (i2 >= 0) sr[i2] += dr[o2];
  }
  for (int64_t o2 = lo + in; o2 < out; ++o2) {
    int64_t i2 = sg_pad_src_index(mode, o2 - lo, in);
    if (i2 >= 0) sr[i2] += dr[o2];
  }
}

/* 1 where the lo margin of the last dim takes each source element at
 * most once (periodic with lo <= in, reflect, zero; replicate with lo <=
 * 1), so pad_row_bwd_first gives pad_row_bwd's bits */
static int FN(pad_lo_distinct)(int mode, int64_t lo, int64_t in) {
  if (lo > 64) return 0;
  for (int64_t a = 0; a < lo; ++a) {
    const int64_t ia = sg_pad_src_index(mode, a - lo, in);
    for (int64_t b = a + 1; ia >= 0 && b < lo; ++b)
      if (sg_pad_src_index(mode, b - lo, in) == ia) return 0;
  }
  return 1;
}

void FN(sg_pad_fwd)(const int64_t *in, const int64_t *out, const int64_t *lo,
                    const int *mode, int64_t planes, const R *src, R *dst) {
  const int64_t sin = in[0] * in[1] * in[2], sout = out[0] * out[1] * out[2];
#pragma omp parallel for schedule(static) if (planes * sout > SG_OMP_MIN)
  for (int64_t p = 0; p < planes; ++p) {
    const R *sp = src + p * sin;
    R *dp = dst + p * sout;
    for (int64_t o0 = 0; o0 < out[0]; ++o0) {
      int64_t i0 = sg_pad_src_index(mode[0], o0 - lo[0], in[0]);
      for (int64_t o1 = 0; o1 < out[1]; ++o1) {
        int64_t i1 = sg_pad_src_index(mode[1], o1 - lo[1], in[1]);
        R *dr = dp + (o0 * out[1] + o1) * out[2];
        if (i0 < 0 || i1 < 0) {
          memset(dr, 0, (size_t)out[2] * sizeof(R));
        } else {
          const R *sr = sp + (i0 * in[1] + i1) * in[2];
          FN(pad_row_fwd)(mode[2], lo[2], in[2], out[2], sr, dr);
        }
      }
    }
  }
}

void FN(sg_pad_bwd)(const int64_t *in, const int64_t *out, const int64_t *lo,
                    const int *mode, int64_t planes, const R *dpad, R *dsrc) {
  const int64_t sin = in[0] * in[1] * in[2], sout = out[0] * out[1] * out[2];
  enum { MAXROWS = 4096 };
  /* no zero fill where each source row's first padded row can write it
   * (pad_row_bwd_first): a row's zeros are written with its values */
  const int first = in[0] * in[1] <= MAXROWS &&
                    FN(pad_lo_distinct)(mode[2], lo[2], in[2]);
#pragma omp parallel for schedule(static) if (planes * sout > SG_OMP_MIN)
  for (int64_t p = 0; p < planes; ++p) {
    R *sp = dsrc + p * sin;
    const R *dp = dpad + p * sout;
    unsigned char seen[MAXROWS];
    if (first)
      memset(seen, 0, (size_t)(in[0] * in[1]));
    else
      memset(sp, 0, (size_t)sin * sizeof(R));
    for (int64_t o0 = 0; o0 < out[0]; ++o0) {
      int64_t i0 = sg_pad_src_index(mode[0], o0 - lo[0], in[0]);
      if (i0 < 0) continue;
      for (int64_t o1 = 0; o1 < out[1]; ++o1) {
        int64_t i1 = sg_pad_src_index(mode[1], o1 - lo[1], in[1]);
        if (i1 < 0) continue;
        const int64_t row = i0 * in[1] + i1;
        const R *dr = dp + (o0 * out[1] + o1) * out[2];
        if (first && !seen[row]) {
          seen[row] = 1;
          FN(pad_row_bwd_first)
          (mode[2], lo[2], in[2], out[2], dr, sp + row * in[2]);
        } else {
          FN(pad_row_bwd)(mode[2], lo[2], in[2], out[2], dr, sp + row * in[2]);
        }
      }
    }
    for (int64_t row = 0; first && row < in[0] * in[1]; ++row)
      if (!seen[row]) /* no padded row reads it (none so far) */
        memset(sp + row * in[2], 0, (size_t)in[2] * sizeof(R));
  }
}

/* ---- pointwise ---------------------------------------------------------- */

/* One loop per activation (a constant `act` in each, so the inlined body
 * is straight-line code the compiler vectorises). */
#define SG_ACT_LOOP(K, BODY)                                         \
  {                                                                  \
    enum { A = K };                                                  \
    _Pragma("omp parallel for schedule(static) if (n > SG_OMP_MIN)") \
    for (int64_t i = 0; i < n; ++i) BODY;                            \
  }                                                                  \
  break;
#define SG_ACT_LOOPS(BODY)      \
  switch (act) {                \
  case 0: SG_ACT_LOOP(0, BODY)  \
  case 1: SG_ACT_LOOP(1, BODY)  \
  case 2: SG_ACT_LOOP(2, BODY)  \
  default: SG_ACT_LOOP(3, BODY) \
  }

void FN(sg_act_fwd)(int act, int64_t n, const R *x, R *y) {
  SG_ACT_LOOPS(y[i] = SG_ACT(A, x[i]))
}

void FN(sg_act_bwd)(int act, int64_t n, const R *x, const R *dy, R *dx) {
  SG_ACT_LOOPS(dx[i] = dy[i] * SG_ACT_GRAD(A, x[i]))
}
#undef SG_ACT_LOOPS
#undef SG_ACT_LOOP

/* one loop per op (a constant op in each: straight-line, vectorised) */
void FN(sg_binary_fwd)(int op, int64_t n, const R *a, const R *b, R *y) {
  if (op == SG_BINARY_ADD) {
#pragma omp parallel for schedule(static) if (n > SG_OMP_MIN)
    for (int64_t i = 0; i < n; ++i)
      y[i] = FN(sg_el_binary)(SG_BINARY_ADD, a[i], b[i]);
  } else if (op == SG_BINARY_SUB) {
#pragma omp parallel for schedule(static) if (n > SG_OMP_MIN)
    for (int64_t i = 0; i < n; ++i)
      y[i] = FN(sg_el_binary)(SG_BINARY_SUB, a[i], b[i]);
  } else {
#pragma omp parallel for schedule(static) if (n > SG_OMP_MIN)
    for (int64_t i = 0; i < n; ++i)
      y[i] = FN(sg_el_binary)(SG_BINARY_MUL, a[i], b[i]);
  }
}

void FN(sg_binary_bwd)(int op, int64_t n, const R *a, const R *b, const R *dy,
                       R *da, R *db) {
#pragma omp parallel for schedule(static) if (n > SG_OMP_MIN)
  for (int64_t i = 0; i < n; ++i) {
    if (da) da[i] = FN(sg_el_binary_grad_a)(op, dy[i], b ? b[i] : 0);
    if (db) db[i] = FN(sg_el_binary_grad_b)(op, dy[i], a ? a[i] : 0);
  }
}

void FN(sg_scale)(int64_t n, double alpha, const R *x, R *y) {
  const R al = (R)alpha;
#pragma omp parallel for schedule(static) if (n > SG_OMP_MIN)
  for (int64_t i = 0; i < n; ++i) y[i] = FN(sg_el_scale)(al, x[i]);
}

void FN(sg_bias_fwd)(int64_t nb, int64_t c, int64_t s, const R *x, const R *b,
                     R *y) {
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
  for (int64_t p = 0; p < nb * c; ++p) {
    R bv = b[sg_bias_channel(p * s, c, s)];
    for (int64_t j = 0; j < s; ++j)
      y[p * s + j] = FN(sg_el_bias_add)(x[p * s + j], bv);
  }
}

void FN(sg_bias_bwd)(int64_t nb, int64_t c, int64_t s, const R *dy, R *db) {
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
  for (int64_t k = 0; k < c; ++k) {
    double acc = 0;
    for (int64_t n = 0; n < nb; ++n) {
      const R *p = dy + (n * c + k) * s;
      acc += FN(vsum)(p, s);
    }
    db[k] += (R)acc;
  }
}

/* ---- normalisation ------------------------------------------------------ */

static int FN(norm_planar)(const sg_norm_desc *d) {
  return d->kind != SG_NORM_LAYER;
}

static inline double FN(rstd)(const sg_moments *m, double eps) {
  return sg_norm_rstd(m->count, m->m2, eps);
}

/* LayerNorm (SG_NORM_LAYER): statistics per token (n, j) over the C
 * channels of x (N, C, S), tokens contiguous. The kernels walk blocks of
 * SG_LN_J tokens of one sample: a token's mean and 1/std are looked up once
 * per block (not once per element, a sqrt and a division each) and the
 * channel loop runs over contiguous tokens, so it vectorises. Every
 * element's arithmetic and every sum's order are those of the
 * element-by-element form: the results are the same bits. */
#ifndef SG_LN_J
#define SG_LN_J 64
#define SG_LN_K 8 /* channels whose gamma/beta sums interleave */
#endif

static inline int64_t FN(ln_block)(int64_t s, int64_t b, int64_t nblk,
                                   int64_t *n, int64_t *j0) {
  *n = b / nblk;
  *j0 = (b % nblk) * SG_LN_J;
  return s - *j0 < SG_LN_J ? s - *j0 : SG_LN_J;
}

static inline void FN(ln_coef)(const sg_moments *sn, int64_t jn, double eps,
                               double *mean, double *rs) {
  for (int64_t j = 0; j < jn; ++j) {
    mean[j] = sn[j].mean;
    rs[j] = FN(rstd)(&sn[j], eps);
  }
}

static void FN(ln_stats)(const sg_norm_desc *d, const R *x, sg_moments *st) {
  const int64_t nb = d->batch, c = d->channels, s = d->spatial;
  const int64_t nblk = (s + SG_LN_J - 1) / SG_LN_J;
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
  for (int64_t b = 0; b < nb * nblk; ++b) {
    int64_t n, j0, jn = FN(ln_block)(s, b, nblk, &n, &j0);
    double mean[SG_LN_J] = {0}, m2[SG_LN_J] = {0};
    for (int64_t k = 0; k < c; ++k) {
      const R *xp = x + (n * c + k) * s + j0;
      for (int64_t j = 0; j < jn; ++j) mean[j] += xp[j];
    }
    for (int64_t j = 0; j < jn; ++j) mean[j] /= (double)c;
    for (int64_t k = 0; k < c; ++k) {
      const R *xp = x + (n * c + k) * s + j0;
      for (int64_t j = 0; j < jn; ++j) {
        double dv = xp[j] - mean[j];
        m2[j] += dv * dv;
      }
    }
    sg_moments *sn = st + n * s + j0;
    for (int64_t j = 0; j < jn; ++j) {
      sn[j].count = (double)c;
      sn[j].mean = mean[j];
      sn[j].m2 = m2[j];
    }
  }
}

static void FN(ln_fwd)(const sg_norm_desc *d, const R *x, const sg_moments *st,
                       const R *gamma, const R *beta, R *y) {
  const int64_t nb = d->batch, c = d->channels, s = d->spatial;
  const int64_t nblk = (s + SG_LN_J - 1) / SG_LN_J;
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
  for (int64_t b = 0; b < nb * nblk; ++b) {
    int64_t n, j0, jn = FN(ln_block)(s, b, nblk, &n, &j0);
    double mean[SG_LN_J], rs[SG_LN_J];
    FN(ln_coef)(st + n * s + j0, jn, d->eps, mean, rs);
    for (int64_t k = 0; k < c; ++k) {
      const R gk = gamma ? gamma[k] : 1, bk = beta ? beta[k] : 0;
      const R *xp = x + (n * c + k) * s + j0;
      R *yp = y + (n * c + k) * s + j0;
      for (int64_t j = 0; j < jn; ++j)
        yp[j] = (R)sg_norm_ln_y(xp[j], mean[j], rs[j], gk, bk);
      FN(round_out)(d->round_out, yp, jn);
    }
  }
}

/* Per token: sums[2 i] = sum_k dy gk, sums[2 i + 1] = sum_k dy gk xh. */
static void FN(ln_sums)(const sg_norm_desc *d, const R *x, const sg_moments *st,
                        const R *gamma, const R *dy, double *sums) {
  const int64_t nb = d->batch, c = d->channels, s = d->spatial;
  const int64_t nblk = (s + SG_LN_J - 1) / SG_LN_J;
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
  for (int64_t b = 0; b < nb * nblk; ++b) {
    int64_t n, j0, jn = FN(ln_block)(s, b, nblk, &n, &j0);
    double mean[SG_LN_J], rs[SG_LN_J], s0[SG_LN_J] = {0}, s1[SG_LN_J] = {0};
    FN(ln_coef)(st + n * s + j0, jn, d->eps, mean, rs);
    for (int64_t k = 0; k < c; ++k) {
      const double gk = gamma ? gamma[k] : 1;
      const R *xp = x + (n * c + k) * s + j0, *gp = dy + (n * c + k) * s + j0;
      for (int64_t j = 0; j < jn; ++j) {
        double g = gp[j] * gk;
        s0[j] += g;
        s1[j] += g * (xp[j] - mean[j]) * rs[j];
      }
    }
    double *sn = sums + 2 * (n * s + j0);
    for (int64_t j = 0; j < jn; ++j) {
      sn[2 * j] = s0[j];
      sn[2 * j + 1] = s1[j];
    }
  }
}

/* dx = rs (dy gk - S0 / cnt - xh S1 / cnt), xh = (x - mean) rs. */
static void FN(ln_dx)(const sg_norm_desc *d, const R *x, const sg_moments *st,
                      const R *gamma, const R *dy, const double *sums, R *dx) {
  const int64_t nb = d->batch, c = d->channels, s = d->spatial;
  const int64_t nblk = (s + SG_LN_J - 1) / SG_LN_J;
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
  for (int64_t b = 0; b < nb * nblk; ++b) {
    int64_t n, j0, jn = FN(ln_block)(s, b, nblk, &n, &j0);
    double mean[SG_LN_J], rs[SG_LN_J], a0[SG_LN_J], s1[SG_LN_J], cnt[SG_LN_J];
    const sg_moments *sn = st + n * s + j0;
    const double *su = sums + 2 * (n * s + j0);
    FN(ln_coef)(sn, jn, d->eps, mean, rs);
    for (int64_t j = 0; j < jn; ++j) {
      cnt[j] = sg_norm_count(sn[j].count);
      a0[j] = su[2 * j] / cnt[j];
      s1[j] = su[2 * j + 1];
    }
    for (int64_t k = 0; k < c; ++k) {
      const double gk = gamma ? gamma[k] : 1;
      const R *xp = x + (n * c + k) * s + j0, *gp = dy + (n * c + k) * s + j0;
      R *dp = dx + (n * c + k) * s + j0;
      for (int64_t j = 0; j < jn; ++j)
        dp[j] = (R)sg_norm_ln_dx(xp[j], gp[j], mean[j], rs[j], gk, a0[j], s1[j],
                                 cnt[j]);
      FN(round_out)(d->round_out, dp, jn);
    }
  }
}

/* dgamma[k] += sum_{n, j} dy xh, dbeta[k] += sum_{n, j} dy: SG_LN_K
 * channels' sums side by side (independent chains, each in its (n, j)
 * order). */
static void FN(ln_dparams)(const sg_norm_desc *d, const R *x,
                           const sg_moments *st, const R *dy, R *dgamma,
                           R *dbeta) {
  const int64_t nb = d->batch, c = d->channels, s = d->spatial;
  const int64_t nkb = (c + SG_LN_K - 1) / SG_LN_K;
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
  for (int64_t kb = 0; kb < nkb; ++kb) {
    const int64_t k0 = kb * SG_LN_K, kn = c - k0 < SG_LN_K ? c - k0 : SG_LN_K;
    double sg[SG_LN_K] = {0}, sb[SG_LN_K] = {0};
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t j0 = 0; j0 < s; j0 += SG_LN_J) {
        const int64_t jn = s - j0 < SG_LN_J ? s - j0 : SG_LN_J;
        double mean[SG_LN_J], rs[SG_LN_J];
        FN(ln_coef)(st + n * s + j0, jn, d->eps, mean, rs);
        const R *xb = x + (n * c + k0) * s + j0,
                *gb = dy + (n * c + k0) * s + j0;
        for (int64_t j = 0; j < jn; ++j)
          for (int64_t k = 0; k < kn; ++k) {
            const R gv = gb[k * s + j];
            sg[k] += gv * (xb[k * s + j] - mean[j]) * rs[j];
            sb[k] += gv;
          }
      }
    for (int64_t k = 0; k < kn; ++k) {
      if (dgamma) dgamma[k0 + k] += (R)sg[k];
      if (dbeta) dbeta[k0 + k] += (R)sb[k];
    }
  }
}

void FN(sg_norm_stats)(const sg_norm_desc *d, const R *x, sg_moments *st,
                       void *scratch) {
  const int64_t nb = d->batch, c = d->channels, s = d->spatial;
  if (FN(norm_planar)(d)) {
    int64_t nstat = 0;
    sg_norm_nstat(d, &nstat);
    for (int64_t i = 0; i < nstat; ++i) st[i].count = st[i].mean = st[i].m2 = 0;
    sg_moments *pl = scratch;
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
    for (int64_t p = 0; p < nb * c; ++p) {
      const R *xp = x + p * s;
      double mean = s > 0 ? FN(vsum_d)(xp, s) / (double)s : 0;
      double m2 = FN(vdev2_d)(xp, s, mean);
      pl[p].count = (double)s;
      pl[p].mean = mean;
      pl[p].m2 = m2;
    }
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t k = 0; k < c; ++k)
        sg_moments_merge(&st[sg_norm_group(d, n, k, 0)], &pl[n * c + k], 1);
    return;
  }
  FN(ln_stats)(d, x, st);
}

void FN(sg_norm_fwd)(const sg_norm_desc *d, const R *x, const sg_moments *st,
                     const R *gamma, const R *beta, R *y) {
  const int64_t nb = d->batch, c = d->channels, s = d->spatial;
  if (FN(norm_planar)(d)) {
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
    for (int64_t p = 0; p < nb * c; ++p) {
      int64_t n = p / c, k = p % c;
      const sg_moments *m = &st[sg_norm_group(d, n, k, 0)];
      double a, b;
      sg_norm_plane_coef(m->mean, FN(rstd)(m, d->eps), gamma ? gamma[k] : 1,
                         beta ? beta[k] : 0, &a, &b);
      R ar = (R)a, br = (R)b;
      const R *xp = x + p * s;
      R *yp = y + p * s;
      for (int64_t j = 0; j < s; ++j) yp[j] = xp[j] * ar + br;
      FN(round_out)(d->round_out, yp, s);
    }
    return;
  }
  FN(ln_fwd)(d, x, st, gamma, beta, y);
}

void FN(sg_norm_sums)(const sg_norm_desc *d, const R *x, const sg_moments *st,
                      const R *gamma, const R *dy, double *sums,
                      void *scratch) {
  const int64_t nb = d->batch, c = d->channels, s = d->spatial;
  int64_t nstat = 0;
  sg_norm_nstat(d, &nstat);
  if (FN(norm_planar)(d)) {
    double *pl = scratch;
    for (int64_t i = 0; i < 2 * nstat; ++i) sums[i] = 0;
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
    for (int64_t p = 0; p < nb * c; ++p) {
      int64_t n = p / c, k = p % c;
      const sg_moments *m = &st[sg_norm_group(d, n, k, 0)];
      double rs = FN(rstd)(m, d->eps), gk = gamma ? gamma[k] : 1;
      const R *xp = x + p * s, *gp = dy + p * s;
      /* lanes as in vsum_d: sum(dy) gk, and sum(dy (x - mean)) gk rs */
      double a1[SG_VL] = {0}, a2[SG_VL] = {0}, s1 = 0, s2 = 0;
      const double mean = m->mean;
      int64_t j = 0;
      for (; j + SG_VL <= s; j += SG_VL)
        for (int l = 0; l < SG_VL; ++l) {
          a1[l] += (double)gp[j + l];
          a2[l] += (double)gp[j + l] * ((double)xp[j + l] - mean);
        }
      for (; j < s; ++j) {
        s1 += (double)gp[j];
        s2 += (double)gp[j] * ((double)xp[j] - mean);
      }
      for (int l = 0; l < SG_VL; ++l) {
        s1 += a1[l];
        s2 += a2[l];
      }
      pl[2 * p] = s1 * gk;
      pl[2 * p + 1] = s2 * gk * rs;
    }
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t k = 0; k < c; ++k) {
        int64_t gi = sg_norm_group(d, n, k, 0);
        sums[2 * gi] += pl[2 * (n * c + k)];
        sums[2 * gi + 1] += pl[2 * (n * c + k) + 1];
      }
    return;
  }
  FN(ln_sums)(d, x, st, gamma, dy, sums);
}

void FN(sg_norm_bwd)(const sg_norm_desc *d, const R *x, const sg_moments *st,
                     const R *gamma, const R *dy, const double *sums, R *dx,
                     R *dgamma, R *dbeta) {
  const int64_t nb = d->batch, c = d->channels, s = d->spatial;
  const int planar = FN(norm_planar)(d);
  if (dx && planar) {
    /* one group per (sample, channel) plane: its statistics and the
     * per-plane coefficients hoisted, the loop straight-line:
     * dx = rs (dy gk - S0/cnt - xh S1/cnt), xh = (x - mean) rs */
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
    for (int64_t p = 0; p < nb * c; ++p) {
      int64_t n = p / c, k = p % c;
      const int64_t gi = sg_norm_group(d, n, k, 0);
      const sg_moments *m = &st[gi];
      const double mean = m->mean;
      double a, b, cc;
      sg_norm_plane_dx_coef(FN(rstd)(m, d->eps), gamma ? gamma[k] : 1,
                            sg_norm_count(m->count), sums[2 * gi],
                            sums[2 * gi + 1], &a, &b, &cc);
      const R *xp = x + p * s, *gp = dy + p * s;
      R *dp = dx + p * s;
      for (int64_t j = 0; j < s; ++j)
        dp[j] = (R)sg_norm_plane_dx(a, b, cc, gp[j], xp[j], mean);
      FN(round_out)(d->round_out, dp, s);
    }
  }
  if ((dgamma || dbeta) && planar) {
#pragma omp parallel for schedule(static) if (nb * c * s > SG_OMP_MIN)
    for (int64_t k = 0; k < c; ++k) {
      double sg = 0, sb = 0;
      for (int64_t n = 0; n < nb; ++n) {
        const sg_moments *m = &st[sg_norm_group(d, n, k, 0)];
        const double mean = m->mean;
        const R *xp = x + (n * c + k) * s, *gp = dy + (n * c + k) * s;
        double pg = 0, pb = 0;
        for (int64_t j = 0; j < s; ++j) {
          pg += gp[j] * (xp[j] - mean);
          pb += gp[j];
        }
        sg += pg * FN(rstd)(m, d->eps);
        sb += pb;
      }
      if (dgamma) dgamma[k] += (R)sg;
      if (dbeta) dbeta[k] += (R)sb;
    }
  }
  if (planar) return;
  if (dx) FN(ln_dx)(d, x, st, gamma, dy, sums, dx);
  if (dgamma || dbeta) FN(ln_dparams)(d, x, st, dy, dgamma, dbeta);
}

/* ---- losses ------------------------------------------------------------- */

/* Deterministic sum over [0, n) of f(i), blocked by SG_SUM_BLOCK. */
void FN(sg_loss_partial)(int kind, int64_t batch, int64_t n, const R *p,
                         const R *t, double *partial, void *scratch) {
  const int64_t per = batch > 0 ? n / batch : 0;
  const int64_t rows = kind == SG_LOSS_REL_L2 ? batch : 1;
  const int64_t len = kind == SG_LOSS_REL_L2 ? per : n;
  const int64_t nblk = (len + SG_SUM_BLOCK - 1) / SG_SUM_BLOCK;
  double *blk = scratch;
#pragma omp parallel for schedule(static) if (n > SG_OMP_MIN)
  for (int64_t ib = 0; ib < rows * nblk; ++ib) {
    int64_t r = ib / nblk, b0 = (ib % nblk) * SG_SUM_BLOCK;
    int64_t b1 = b0 + SG_SUM_BLOCK < len ? b0 + SG_SUM_BLOCK : len;
    const R *pp = p + r * len, *tp = t ? t + r * len : NULL;
    double s0 = 0, s1 = 0;
    for (int64_t i = b0; i < b1; ++i) {
      if (kind == SG_LOSS_SUM || kind == SG_LOSS_MEAN) {
        s0 += pp[i];
      } else {
        s0 += sg_loss_sq_diff((double)pp[i], (double)tp[i]);
        s1 += (double)tp[i] * (double)tp[i];
      }
    }
    blk[2 * ib] = s0;
    blk[2 * ib + 1] = s1;
  }
  for (int64_t r = 0; r < rows; ++r)
    sg_loss_row_partials(kind, r, nblk, n, blk, partial);
}

void FN(sg_loss_bwd)(int kind, int64_t batch, int64_t n, const R *p, const R *t,
                     const double *partial, double g, R *dp, R *dt) {
  const int64_t per = batch > 0 ? n / batch : 0;
#pragma omp parallel for schedule(static) if (n > SG_OMP_MIN)
  for (int64_t i = 0; i < n; ++i) {
    double gt;
    double gp = sg_loss_grad(kind, i, batch, per, (double)p[i],
                             t ? (double)t[i] : 0.0, partial, g, &gt);
    if (dp) dp[i] = (R)gp;
    if (dt) dt[i] = (R)gt;
  }
}

#undef FN
#undef SG_CAT_
#undef SG_CAT2_
#undef SG_OMP_MIN
