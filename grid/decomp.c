/* shardgrid — domain decomposition: balanced splits, shard tables, halos of
 * window ops by the output-partition rule, thin-shard checks. */
#include "sg_decomp.h"

#include <stdlib.h>
#include <string.h>

static const char *const boundary_names[SG_BOUNDARY_COUNT] = {
    "zero", "periodic", "reflect", "replicate"};

const char *sg_boundary_name(sg_boundary b) {
  if ((int)b < 0 || b >= SG_BOUNDARY_COUNT) return "invalid";
  return boundary_names[b];
}

sg_status sg_boundary_parse(const char *name, sg_boundary *b) {
  sg_status st = SG_OK;
  for (int i = 0; name && i < SG_BOUNDARY_COUNT; ++i) {
    if (strcmp(name, boundary_names[i]) == 0) {
      *b = (sg_boundary)i;
      return SG_OK;
    }
  }
  SG_RAISE(SG_ERR_INVALID_ARG,
           "unknown boundary kind '%s' (expected zero, periodic, reflect or "
           "replicate)",
           name ? name : "(null)");
fail:
  return st;
}

sg_status sg_split_table(int64_t n, int p, int allow_empty, int64_t *sizes,
                         int64_t *offsets) {
  sg_status st = SG_OK;
  if (p < 1) SG_RAISE(SG_ERR_INVALID_ARG, "split over %d parts (need >= 1)", p);
  if (n < 0) SG_RAISE(SG_ERR_INVALID_ARG, "split of %lld cells", (long long)n);
  if (n < p && !allow_empty)
    SG_RAISE(SG_ERR_SHAPE,
             "%lld cells split over %d parts leaves %lld part(s) empty "
             "(empty shards are not allowed here)",
             (long long)n, p, (long long)(p - n));
  for (int r = 0; r < p; ++r) {
    if (sizes) sizes[r] = sg_split_size(n, p, r);
    if (offsets) offsets[r] = sg_split_offset(n, p, r);
  }
fail:
  return st;
}

static sg_status window_check(sg_window w) {
  sg_status st = SG_OK;
  if (w.kernel < 1 || w.stride < 1 || w.dilation < 1 || w.up < 1 ||
      w.pad[0] < 0 || w.pad[1] < 0 || (int)w.boundary < 0 ||
      w.boundary >= SG_BOUNDARY_COUNT)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "bad window: kernel %lld, stride %lld, dilation %lld, padding "
             "(%lld, %lld), up-sampling %lld, boundary %d (need kernel, "
             "stride, dilation, up-sampling >= 1, padding >= 0 and a "
             "boundary kind)",
             (long long)w.kernel, (long long)w.stride, (long long)w.dilation,
             (long long)w.pad[0], (long long)w.pad[1], (long long)w.up,
             (int)w.boundary);
fail:
  return st;
}

sg_status sg_window_output_size(sg_window w, int64_t n, int64_t *n_out) {
  sg_status st = SG_OK;
  w = sg_window_normal(w);
  SG_TRY(window_check(w));
  int64_t span = n + w.pad[0] + w.pad[1] - w.dilation * (w.kernel - 1) - 1;
  if (n < 1 || span < 0)
    SG_RAISE(SG_ERR_SHAPE,
             "window (kernel %lld, dilation %lld, padding (%lld, %lld)) does "
             "not fit in %lld cells",
             (long long)w.kernel, (long long)w.dilation, (long long)w.pad[0],
             (long long)w.pad[1], (long long)n);
  *n_out = w.up * (span / w.stride + 1);
fail:
  return st;
}

sg_status sg_window_halos(int64_t n, int p, sg_window w, int64_t *halo,
                          int64_t *out_sizes, int64_t *out_offsets) {
  sg_status st = SG_OK;
  int64_t n_out = 0;
  w = sg_window_normal(w);
  SG_TRY(sg_window_output_size(w, n, &n_out));
  if (p < 1) SG_RAISE(SG_ERR_INVALID_ARG, "split over %d parts (need >= 1)", p);
  if (n < p)
    SG_RAISE(SG_ERR_SHAPE,
             "%lld input cells over %d parts: some shard would be empty",
             (long long)n, p);
  if (n_out < p)
    SG_RAISE(SG_ERR_SHAPE,
             "the window op has %lld outputs over %d parts: some output "
             "shard would be empty",
             (long long)n_out, p);
  for (int r = 0; r < p; ++r) {
    int64_t x0 = sg_split_offset(n, p, r);
    int64_t x1 = x0 + sg_split_size(n, p, r) - 1;
    int64_t y0 = sg_split_offset(n_out, p, r);
    int64_t y1 = y0 + sg_split_size(n_out, p, r) - 1;
    int64_t need0 = w.stride * (y0 / w.up) - w.pad[0];
    int64_t need1 = w.stride * (y1 / w.up) - w.pad[0] +
                    w.dilation * (w.kernel - 1);
    if (halo) {
      halo[2 * r] = x0 - need0;
      halo[2 * r + 1] = need1 - x1;
    }
    if (out_sizes) out_sizes[r] = y1 - y0 + 1;
    if (out_offsets) out_offsets[r] = y0;
  }
fail:
  return st;
}

void sg_halo_widths(int p, const int64_t *halo, int64_t *width) {
  for (int i = 0; i < 2 * p; ++i) width[i] = halo[i] > 0 ? halo[i] : 0;
}

/* Cells a fill at a physical edge needs from the edge part itself. */
static int64_t edge_need(sg_boundary b, int64_t h) {
  switch (b) {
  case SG_BOUNDARY_REFLECT: return h + 1; /* cells 0..h */
  case SG_BOUNDARY_REPLICATE: return 1;
  case SG_BOUNDARY_PERIODIC: return h; /* local wrap */
  default: return 0;
  }
}

sg_status sg_halo_check(int dim, int p, const int64_t *sizes, sg_boundary b,
                        const int64_t *halo) {
  sg_status st = SG_OK;
  if (p < 1) SG_RAISE(SG_ERR_INVALID_ARG, "halo check over %d parts", p);
  if ((int)b < 0 || b >= SG_BOUNDARY_COUNT)
    SG_RAISE(SG_ERR_INVALID_ARG, "dim %d: invalid boundary kind %d", dim,
             (int)b);
  for (int r = 0; r < p; ++r) {
    for (int side = 0; side < 2; ++side) {
      int64_t h = halo[2 * r + side];
      const char *sname = side ? "upper" : "lower";
      if (h < 0 && -h > sizes[r])
        SG_RAISE(SG_ERR_HALO,
                 "dim %d: part %d (shard size %lld) has a %s halo of %lld: "
                 "the cells it needs do not touch its own shard",
                 dim, r, (long long)sizes[r], sname, (long long)h);
      if (h <= 0) continue;
      int nb = side ? r + 1 : r - 1;
      int at_edge = nb < 0 || nb >= p;
      if (at_edge && b == SG_BOUNDARY_PERIODIC && p > 1) {
        nb = (nb + p) % p;
        at_edge = 0;
      }
      if (!at_edge) {
        if (h > sizes[nb])
          SG_RAISE(SG_ERR_HALO,
                   "dim %d: shard of part %d has %lld cells but must supply a "
                   "halo of width %lld to part %d (its %s halo): a neighbour "
                   "would need data from two ranks away; use fewer ranks "
                   "along this dim or a larger grid",
                   dim, nb, (long long)sizes[nb], (long long)h, r, sname);
      } else {
        int64_t need = edge_need(b, h);
        if (need > sizes[r])
          SG_RAISE(SG_ERR_HALO,
                   "dim %d: shard of part %d has %lld cells but its %s %s "
                   "boundary halo of width %lld needs %lld of its own cells",
                   dim, r, (long long)sizes[r], sname, sg_boundary_name(b),
                   (long long)h, (long long)need);
      }
    }
  }
fail:
  return st;
}

/* ---- N-D decomposition -------------------------------------------------- */

struct sg_decomp {
  int ndims;
  int64_t global[SG_DECOMP_MAX_DIMS];
  int parts[SG_DECOMP_MAX_DIMS];
  int coord[SG_DECOMP_MAX_DIMS];
  int mesh_dim[SG_DECOMP_MAX_DIMS];
  sg_boundary boundary[SG_DECOMP_MAX_DIMS];
  int allow_empty;
};

sg_status sg_decomp_create_parts(const sg_decomp_desc *desc, const int *parts,
                                 const int *coords, sg_decomp_t *dec) {
  sg_status st = SG_OK;
  struct sg_decomp *d = NULL;
  if (!desc || !parts || !dec)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_decomp_create_parts: NULL argument");
  *dec = NULL;
  if (desc->ndims < 1 || desc->ndims > SG_DECOMP_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG, "decomposition of %d spatial dims (1..%d)",
             desc->ndims, SG_DECOMP_MAX_DIMS);
  d = calloc(1, sizeof *d);
  if (!d) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  d->ndims = desc->ndims;
  d->allow_empty = desc->allow_empty;
  for (int i = 0; i < desc->ndims; ++i) {
    if (desc->global[i] < 0)
      SG_RAISE(SG_ERR_INVALID_ARG, "dim %d: global extent %lld", i,
               (long long)desc->global[i]);
    if (parts[i] < 1)
      SG_RAISE(SG_ERR_INVALID_ARG, "dim %d: %d parts (need >= 1)", i, parts[i]);
    int c = coords ? coords[i] : 0;
    if (c < 0 || c >= parts[i])
      SG_RAISE(SG_ERR_INVALID_ARG, "dim %d: coordinate %d outside 0..%d", i, c,
               parts[i] - 1);
    if ((int)desc->boundary[i] < 0 || desc->boundary[i] >= SG_BOUNDARY_COUNT)
      SG_RAISE(SG_ERR_INVALID_ARG, "dim %d: invalid boundary kind %d", i,
               (int)desc->boundary[i]);
    if (desc->global[i] < parts[i] && !desc->allow_empty)
      SG_RAISE(SG_ERR_SHAPE,
               "dim %d: %lld cells over %d ranks leaves %d shard(s) empty "
               "(set allow_empty to accept that)",
               i, (long long)desc->global[i], parts[i],
               (int)(parts[i] - desc->global[i]));
    d->global[i] = desc->global[i];
    d->parts[i] = parts[i];
    d->coord[i] = c;
    d->mesh_dim[i] = desc->mesh_dim[i];
    d->boundary[i] = desc->boundary[i];
  }
  *dec = d;
  return SG_OK;
fail:
  free(d);
  return st;
}

sg_status sg_decomp_create(sg_mesh_t mesh, const sg_decomp_desc *desc,
                           sg_decomp_t *dec) {
  sg_status st = SG_OK;
  int parts[SG_DECOMP_MAX_DIMS] = {1, 1, 1};
  int coords[SG_DECOMP_MAX_DIMS] = {0, 0, 0};
  if (!mesh || !desc || !dec)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_decomp_create: NULL argument");
  if (desc->ndims < 1 || desc->ndims > SG_DECOMP_MAX_DIMS)
    SG_RAISE(SG_ERR_INVALID_ARG, "decomposition of %d spatial dims (1..%d)",
             desc->ndims, SG_DECOMP_MAX_DIMS);
  for (int i = 0; i < desc->ndims; ++i) {
    int m = desc->mesh_dim[i];
    if (m < 0) continue;
    if (m >= sg_mesh_ndims(mesh))
      SG_RAISE(SG_ERR_INVALID_ARG,
               "spatial dim %d: mesh dim %d out of range (mesh has %d dims)", i,
               m, sg_mesh_ndims(mesh));
    for (int j = 0; j < i; ++j)
      if (desc->mesh_dim[j] == m)
        SG_RAISE(SG_ERR_INVALID_ARG,
                 "spatial dims %d and %d are both split by mesh dim %d (%s)", j,
                 i, m, sg_mesh_dim_name(mesh, m));
    parts[i] = sg_mesh_dim_size(mesh, m);
    coords[i] = sg_mesh_coord(mesh, m);
  }
  SG_TRY(sg_decomp_create_parts(desc, parts, coords, dec));
fail:
  return st;
}

sg_status sg_decomp_destroy(sg_decomp_t *dec) {
  if (!dec) return SG_OK;
  free(*dec);
  *dec = NULL;
  return SG_OK;
}

int sg_decomp_ndims(sg_decomp_t dec) { return dec->ndims; }
int64_t sg_decomp_global(sg_decomp_t dec, int d) { return dec->global[d]; }
int sg_decomp_parts(sg_decomp_t dec, int d) { return dec->parts[d]; }
int sg_decomp_mesh_dim(sg_decomp_t dec, int d) { return dec->mesh_dim[d]; }
sg_boundary sg_decomp_boundary(sg_decomp_t dec, int d) {
  return dec->boundary[d];
}
int sg_decomp_coord(sg_decomp_t dec, int d) { return dec->coord[d]; }

int64_t sg_decomp_shard_size(sg_decomp_t dec, int d, int part) {
  return sg_split_size(dec->global[d], dec->parts[d], part);
}
int64_t sg_decomp_shard_offset(sg_decomp_t dec, int d, int part) {
  return sg_split_offset(dec->global[d], dec->parts[d], part);
}

void sg_decomp_shard(sg_decomp_t dec, const int *coords, int64_t *shape,
                     int64_t *offset) {
  for (int d = 0; d < dec->ndims; ++d) {
    int c = coords ? coords[d] : dec->coord[d];
    if (shape) shape[d] = sg_decomp_shard_size(dec, d, c);
    if (offset) offset[d] = sg_decomp_shard_offset(dec, d, c);
  }
}

int64_t sg_decomp_local_count(sg_decomp_t dec) {
  int64_t n = 1;
  for (int d = 0; d < dec->ndims; ++d)
    n *= sg_decomp_shard_size(dec, d, dec->coord[d]);
  return n;
}

sg_status sg_decomp_window_halos(sg_decomp_t dec, int d, sg_window w,
                                 int64_t *halo, int64_t *out_sizes,
                                 int64_t *out_offsets) {
  sg_status st = SG_OK;
  int64_t *sizes = NULL;
  if (d < 0 || d >= dec->ndims)
    SG_RAISE(SG_ERR_INVALID_ARG, "spatial dim %d out of range (0..%d)", d,
             dec->ndims - 1);
  int p = dec->parts[d];
  sizes = malloc((size_t)p * sizeof *sizes);
  if (!sizes) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  SG_TRY(sg_split_table(dec->global[d], p, 1, sizes, NULL));
  SG_TRY(sg_window_halos(dec->global[d], p, w, halo, out_sizes, out_offsets));
  SG_TRY(sg_halo_check(d, p, sizes, dec->boundary[d], halo));
fail:
  free(sizes);
  return st;
}

sg_status sg_decomp_local_halo(sg_decomp_t dec, const sg_window *w,
                               int64_t (*width)[2]) {
  sg_status st = SG_OK;
  int64_t *halo = NULL;
  for (int d = 0; d < dec->ndims; ++d) {
    int p = dec->parts[d];
    free(halo);
    halo = malloc(2 * (size_t)p * sizeof *halo);
    if (!halo) SG_RAISE(SG_ERR_ALLOC, "out of memory");
    SG_TRY(sg_decomp_window_halos(dec, d, w[d], halo, NULL, NULL));
    int c = dec->coord[d];
    width[d][0] = halo[2 * c] > 0 ? halo[2 * c] : 0;
    width[d][1] = halo[2 * c + 1] > 0 ? halo[2 * c + 1] : 0;
  }
fail:
  free(halo);
  return st;
}
