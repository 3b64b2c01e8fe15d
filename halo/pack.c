/* shardgrid — host halo pack/unpack kernels. */
#include "sg_halo_pack.h"

#include <string.h>

/* Rows of at least this many elements in total go parallel. */
#define SG_HALO_OMP_MIN 32768

/* Loop over the rows of a box (a row runs along the last box dim): off is
 * the block offset of the row, r its index, e0 = r * n3 its first element.
 * Offsets are stepped, not divided out, so short rows stay cheap. */
#define ROW_LOOP(body)                                                                     \
  do {                                                                                     \
    const int64_t n3 = box->count[3], s3 = box->stride[3];                                 \
    const int64_t c0 = box->count[0], c1 = box->count[1], c2 = box->count[2];              \
    const int64_t t0 = box->stride[0], t1 = box->stride[1];                                \
    const int64_t t2 = box->stride[2], base = box->base;                                   \
    const int64_t rows = c0 * c1 * c2;                                                     \
    _Pragma(                                                                               \
        "omp parallel for collapse(2) schedule(static) if (rows * n3 >= SG_HALO_OMP_MIN)") \
    for (int64_t i0 = 0; i0 < c0; ++i0)                                                    \
      for (int64_t i1 = 0; i1 < c1; ++i1) {                                                \
        int64_t off = base + i0 * t0 + i1 * t1;                                            \
        int64_t r = (i0 * c1 + i1) * c2;                                                   \
        for (int64_t i2 = 0; i2 < c2; ++i2, off += t2, ++r) {                              \
          const int64_t e0 = r * n3;                                                       \
          body                                                                             \
        }                                                                                  \
      }                                                                                    \
  } while (0)

/* Strided element copy for the common element sizes. */
static inline void copy_strided(char *dst, int64_t ds, const char *src,
                                int64_t ss, int64_t n, size_t esize) {
  if (ds == 1 && ss == 1 && n > 16) {
    memcpy(dst, src, (size_t)n * esize);
    return;
  }
  switch (esize) {
  case 8: {
    uint64_t *d = (uint64_t *)(void *)dst;
    const uint64_t *s = (const uint64_t *)(const void *)src;
    for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
    break;
  }
  case 4: {
    uint32_t *d = (uint32_t *)(void *)dst;
    const uint32_t *s = (const uint32_t *)(const void *)src;
    for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
    break;
  }
  case 2: {
    uint16_t *d = (uint16_t *)(void *)dst;
    const uint16_t *s = (const uint16_t *)(const void *)src;
    for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
    break;
  }
  default:
    for (int64_t i = 0; i < n; ++i)
      memcpy(dst + (size_t)(i * ds) * esize, src + (size_t)(i * ss) * esize,
             esize);
  }
}

/* Short rows (1-4, 6, 8, 12 or 16 elements, contiguous within the row: the
 * halo of the innermost dim, times the fields when they are innermost): a loop over the rows of each (i0, i1) plane with the row
 * length a compile-time constant, so a row is one or two plain moves and
 * the loop has no per-row call, switch or inner loop. */
#define SHORT_PLANES(N, body)                                                                          \
  do {                                                                                                 \
    const int64_t c0 = box->count[0], c1 = box->count[1], c2 = box->count[2];                          \
    const int64_t t0 = box->stride[0], t1 = box->stride[1];                                            \
    const int64_t t2 = box->stride[2], base = box->base, rowlen = N;                                   \
    _Pragma(                                                                                           \
        "omp parallel for collapse(2) schedule(static) if (c0 * c1 * c2 * rowlen >= SG_HALO_OMP_MIN)") \
    for (int64_t i0 = 0; i0 < c0; ++i0)                                                                \
      for (int64_t i1 = 0; i1 < c1; ++i1) {                                                            \
        const int64_t off0 = base + i0 * t0 + i1 * t1;                                                 \
        const int64_t e00 = (i0 * c1 + i1) * c2 * N;                                                   \
        body                                                                                           \
      }                                                                                                \
  } while (0)

#define SHORT_PACK(T, N)                                   \
  do {                                                     \
    const T *restrict bb = (const T *)block;               \
    T *restrict oo = (T *)buf;                             \
    SHORT_PLANES(N, {                                      \
      const T *restrict s = bb + off0;                     \
      T *restrict d = oo + e00;                            \
      for (int64_t i2 = 0; i2 < c2; ++i2, s += t2, d += N) \
        for (int k = 0; k < N; ++k) d[k] = s[k];           \
    });                                                    \
  } while (0)

#define SHORT_UNPACK(T, N)                                 \
  do {                                                     \
    T *restrict bb = (T *)block;                           \
    const T *restrict ii = (const T *)buf;                 \
    SHORT_PLANES(N, {                                      \
      T *restrict d = bb + off0;                           \
      const T *restrict s = ii + e00;                      \
      for (int64_t i2 = 0; i2 < c2; ++i2, d += t2, s += N) \
        for (int k = 0; k < N; ++k) d[k] = s[k];           \
    });                                                    \
  } while (0)

#define SHORT_ZERO(T, N)                           \
  do {                                             \
    T *restrict bb = (T *)block;                   \
    SHORT_PLANES(N, {                              \
      T *restrict d = bb + off0;                   \
      (void)e00;                                   \
      for (int64_t i2 = 0; i2 < c2; ++i2, d += t2) \
        for (int k = 0; k < N; ++k) d[k] = 0;      \
    });                                            \
  } while (0)

#define SHORT_CASES(OP, T)      \
  switch (box->count[3]) {      \
  case 1: OP(T, 1); return 1;   \
  case 2: OP(T, 2); return 1;   \
  case 3: OP(T, 3); return 1;   \
  case 4: OP(T, 4); return 1;   \
  case 6: OP(T, 6); return 1;   \
  case 8: OP(T, 8); return 1;   \
  case 12: OP(T, 12); return 1; \
  case 16: OP(T, 16); return 1; \
  default: return 0;            \
  }

static int short_rows(const sg_halo_box *box, size_t esize) {
  return box->count[3] <= 16 && (box->stride[3] == 1 || box->count[3] == 1) &&
         box->count[2] > 1 && (esize == 4 || esize == 8 || esize == 2);
}

static int pack_short(const void *block, const sg_halo_box *box, size_t esize,
                      void *buf) {
  if (!short_rows(box, esize)) return 0;
  if (esize == 4) SHORT_CASES(SHORT_PACK, uint32_t);
  if (esize == 8) SHORT_CASES(SHORT_PACK, uint64_t);
  SHORT_CASES(SHORT_PACK, uint16_t);
}

static int unpack_short(void *block, const sg_halo_box *box, size_t esize,
                        const void *buf) {
  if (!short_rows(box, esize)) return 0;
  if (esize == 4) SHORT_CASES(SHORT_UNPACK, uint32_t);
  if (esize == 8) SHORT_CASES(SHORT_UNPACK, uint64_t);
  SHORT_CASES(SHORT_UNPACK, uint16_t);
}

static int zero_short(void *block, const sg_halo_box *box, size_t esize) {
  if (!short_rows(box, esize)) return 0;
  if (esize == 4) SHORT_CASES(SHORT_ZERO, uint32_t);
  if (esize == 8) SHORT_CASES(SHORT_ZERO, uint64_t);
  SHORT_CASES(SHORT_ZERO, uint16_t);
}

void sg_halo_pack_host(const void *block, const sg_halo_box *box_in,
                       size_t esize, void *buf) {
  const sg_halo_box sb = sg_halo_box_simplify(*box_in, 1), *box = &sb;
  if (pack_short(block, box, esize, buf)) return;
  const char *b = block;
  char *o = buf;
  ROW_LOOP(copy_strided(o + (size_t)e0 * esize, 1, b + (size_t)off * esize, s3,
                        n3, esize););
}

void sg_halo_unpack_host(void *block, const sg_halo_box *box_in, size_t esize,
                         const void *buf) {
  const sg_halo_box sb = sg_halo_box_simplify(*box_in, 1), *box = &sb;
  if (unpack_short(block, box, esize, buf)) return;
  char *b = block;
  const char *in = buf;
  ROW_LOOP(copy_strided(b + (size_t)off * esize, s3, in + (size_t)e0 * esize, 1,
                        n3, esize););
}

void sg_halo_zero_host(void *block, const sg_halo_box *box_in, size_t esize) {
  const sg_halo_box sb = sg_halo_box_simplify(*box_in, 1), *box = &sb;
  if (zero_short(block, box, esize)) return;
  char *b = block;
  ROW_LOOP({
    (void)e0;
    if (s3 == 1) {
      memset(b + (size_t)off * esize, 0, (size_t)n3 * esize);
    } else {
      for (int64_t i = 0; i < n3; ++i)
        memset(b + (size_t)(off + i * s3) * esize, 0, esize);
    }
  });
}

/* Two boxes with the same counts, for a loop over both at once: count-1
 * dims dropped and adjacent dims merged where they are contiguous in both
 * (so that a slab that is one run in both is one row). */
static void joint_simplify(sg_halo_box *a, sg_halo_box *b) {
  sg_halo_box x = *a, y = *b;
  int j = SG_HALO_BOX_DIMS - 1;
  for (int i = SG_HALO_BOX_DIMS - 1; i >= 0; --i) {
    if (x.count[i] == 1) continue;
    if (j < SG_HALO_BOX_DIMS - 1 &&
        a->stride[j + 1] * a->count[j + 1] == x.stride[i] &&
        b->stride[j + 1] * b->count[j + 1] == y.stride[i]) {
      a->count[j + 1] *= x.count[i];
      b->count[j + 1] *= x.count[i];
      continue;
    }
    a->count[j] = b->count[j] = x.count[i];
    a->stride[j] = x.stride[i];
    b->stride[j] = y.stride[i];
    --j;
  }
  for (; j >= 0; --j) {
    a->count[j] = b->count[j] = 1;
    a->stride[j] = b->stride[j] = 0;
  }
}

/* Loop over the rows of two boxes with the same counts: off / soff are the
 * row offsets in the destination / source box (ROW_LOOP's names for the
 * destination; ss the source's last stride). */
#define ROW2_LOOP(body)                                                                            \
  do {                                                                                             \
    const int64_t n3 = box->count[3], s3 = box->stride[3];                                         \
    const int64_t ss = src->stride[3];                                                             \
    const int64_t c0 = box->count[0], c1 = box->count[1], c2 = box->count[2];                      \
    const int64_t t0 = box->stride[0], t1 = box->stride[1];                                        \
    const int64_t t2 = box->stride[2], u0 = src->stride[0];                                        \
    const int64_t u1 = src->stride[1], u2 = src->stride[2];                                        \
    _Pragma(                                                                                       \
        "omp parallel for collapse(2) schedule(static) if (c0 * c1 * c2 * n3 >= SG_HALO_OMP_MIN)") \
    for (int64_t i0 = 0; i0 < c0; ++i0)                                                            \
      for (int64_t i1 = 0; i1 < c1; ++i1) {                                                        \
        int64_t off = box->base + i0 * t0 + i1 * t1;                                               \
        int64_t soff = src->base + i0 * u0 + i1 * u1;                                              \
        for (int64_t i2 = 0; i2 < c2; ++i2, off += t2, soff += u2) { body }                        \
      }                                                                                            \
  } while (0)

/* Rows of a compile-time length N, contiguous in both boxes. */
#define SHORT2_COPY(T, N)                                     \
  do {                                                        \
    T *restrict bb = (T *)dblock;                             \
    const T *restrict sb = (const T *)sblock;                 \
    ROW2_LOOP({                                               \
      (void)n3;                                               \
      (void)s3;                                               \
      (void)ss;                                               \
      for (int k = 0; k < N; ++k) bb[off + k] = sb[soff + k]; \
    });                                                       \
  } while (0)

static int copy2_short(void *dblock, const sg_halo_box *box, const void *sblock,
                       const sg_halo_box *src, size_t esize) {
  if (box->count[3] > 16 || box->stride[3] != 1 || src->stride[3] != 1 ||
      box->count[2] == 1 || esize != 4)
    return 0;
  switch (box->count[3]) {
  case 1: SHORT2_COPY(uint32_t, 1); return 1;
  case 2: SHORT2_COPY(uint32_t, 2); return 1;
  case 4: SHORT2_COPY(uint32_t, 4); return 1;
  case 8: SHORT2_COPY(uint32_t, 8); return 1;
  case 16: SHORT2_COPY(uint32_t, 16); return 1;
  default: return 0;
  }
}

void sg_halo_copy2_host(void *dblock, const sg_halo_box *dst_in,
                        const void *sblock, const sg_halo_box *src_in,
                        size_t esize) {
  sg_halo_box d = *dst_in, sq = *src_in;
  if (sg_halo_box_size(&d) == 0) return;
  joint_simplify(&d, &sq);
  const sg_halo_box *box = &d, *src = &sq;
  if (copy2_short(dblock, box, sblock, src, esize)) return;
  char *b = dblock;
  const char *sb = sblock;
  ROW2_LOOP(copy_strided(b + (size_t)off * esize, s3, sb + (size_t)soff * esize,
                         ss, n3, esize););
}

void sg_halo_copy_host(void *block, const sg_halo_box *dst,
                       const sg_halo_box *src, size_t esize) {
  sg_halo_copy2_host(block, dst, block, src, esize);
}

#define ADD_LOOP(T, CONV_IN, CONV_OUT)                            \
  do {                                                            \
    T *bb = (T *)block;                                           \
    const T *in = (const T *)buf;                                 \
    ROW_LOOP({                                                    \
      T *d = bb + off;                                            \
      const T *s = in + e0;                                       \
      for (int64_t i = 0; i < n3; ++i)                            \
        d[i * s3] = CONV_OUT(CONV_IN(d[i * s3]) + CONV_IN(s[i])); \
    });                                                           \
  } while (0)

#define ID(x) (x)
#define BF_IN(x) sg_bf16_to_f32(x)
#define BF_OUT(x) sg_bf16_from_f32(x)

sg_status sg_halo_unpack_add_host(void *block, const sg_halo_box *box_in,
                                  sg_dtype dt, const void *buf) {
  sg_status st = SG_OK;
  const sg_halo_box sb = sg_halo_box_simplify(*box_in, 1), *box = &sb;
  switch (dt) {
  case SG_DTYPE_F32: ADD_LOOP(float, ID, ID); break;
  case SG_DTYPE_F64: ADD_LOOP(double, ID, ID); break;
  case SG_DTYPE_I32: ADD_LOOP(int32_t, ID, ID); break;
  case SG_DTYPE_I64: ADD_LOOP(int64_t, ID, ID); break;
  case SG_DTYPE_BF16: ADD_LOOP(sg_bf16, BF_IN, BF_OUT); break;
  default: SG_RAISE(SG_ERR_INVALID_ARG, "halo add: invalid dtype %d", (int)dt);
  }
fail:
  return st;
}

#define ADD2_LOOP(T, CONV_IN, CONV_OUT)                                \
  do {                                                                 \
    T *bb = (T *)dblock;                                               \
    const T *sb = (const T *)sblock;                                   \
    ROW2_LOOP({                                                        \
      T *d = bb + off;                                                 \
      const T *s = sb + soff;                                          \
      for (int64_t i = 0; i < n3; ++i)                                 \
        d[i * s3] = CONV_OUT(CONV_IN(d[i * s3]) + CONV_IN(s[i * ss])); \
    });                                                                \
  } while (0)

sg_status sg_halo_add2_host(void *dblock, const sg_halo_box *dst_in,
                            sg_dtype dt, const void *sblock,
                            const sg_halo_box *src_in) {
  sg_status st = SG_OK;
  sg_halo_box dq = *dst_in, sq = *src_in;
  if (sg_halo_box_size(&dq) == 0) return SG_OK;
  joint_simplify(&dq, &sq);
  const sg_halo_box *box = &dq, *src = &sq;
  switch (dt) {
  case SG_DTYPE_F32: ADD2_LOOP(float, ID, ID); break;
  case SG_DTYPE_F64: ADD2_LOOP(double, ID, ID); break;
  case SG_DTYPE_I32: ADD2_LOOP(int32_t, ID, ID); break;
  case SG_DTYPE_I64: ADD2_LOOP(int64_t, ID, ID); break;
  case SG_DTYPE_BF16: ADD2_LOOP(sg_bf16, BF_IN, BF_OUT); break;
  default: SG_RAISE(SG_ERR_INVALID_ARG, "halo add: invalid dtype %d", (int)dt);
  }
fail:
  return st;
}

#define MOVE_ADD_LOOP(T, CONV_IN, CONV_OUT)                            \
  do {                                                                 \
    T *bb = (T *)block;                                                \
    const sg_halo_box *box = dst;                                      \
    ROW_LOOP({                                                         \
      T *d = bb + off;                                                 \
      T *s = bb + sg_halo_box_row(src, r);                             \
      const int64_t ss = src->stride[3];                               \
      (void)e0;                                                        \
      for (int64_t i = 0; i < n3; ++i) {                               \
        d[i * s3] = CONV_OUT(CONV_IN(d[i * s3]) + CONV_IN(s[i * ss])); \
        s[i * ss] = zero;                                              \
      }                                                                \
    });                                                                \
  } while (0)

sg_status sg_halo_move_add_host(void *block, const sg_halo_box *dst_in,
                                const sg_halo_box *src_in, sg_dtype dt) {
  sg_status st = SG_OK;
  const sg_halo_box dq = sg_halo_box_simplify(*dst_in, 0);
  const sg_halo_box sq = sg_halo_box_simplify(*src_in, 0);
  const sg_halo_box *dst = &dq, *src = &sq;
  switch (dt) {
  case SG_DTYPE_F32: {
    const float zero = 0;
    MOVE_ADD_LOOP(float, ID, ID);
    break;
  }
  case SG_DTYPE_F64: {
    const double zero = 0;
    MOVE_ADD_LOOP(double, ID, ID);
    break;
  }
  case SG_DTYPE_I32: {
    const int32_t zero = 0;
    MOVE_ADD_LOOP(int32_t, ID, ID);
    break;
  }
  case SG_DTYPE_I64: {
    const int64_t zero = 0;
    MOVE_ADD_LOOP(int64_t, ID, ID);
    break;
  }
  case SG_DTYPE_BF16: {
    const sg_bf16 zero = {0};
    MOVE_ADD_LOOP(sg_bf16, BF_IN, BF_OUT);
    break;
  }
  default: SG_RAISE(SG_ERR_INVALID_ARG, "halo add: invalid dtype %d", (int)dt);
  }
fail:
  return st;
}
