/* shardgrid — the device mesh: spec parsing, layout, groups. */
#include "mesh_impl.h"
#include "sg_mesh.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- spec parsing ---------------------------------------------------------*/

static const char *trim(const char *s, const char *e, const char **end) {
  while (s < e && isspace((unsigned char)*s)) ++s;
  while (e > s && isspace((unsigned char)e[-1])) --e;
  *end = e;
  return s;
}

static int valid_name(const char *s, size_t n) {
  if (n == 0) return 0;
  if (!(isalpha((unsigned char)s[0]) || s[0] == '_')) return 0;
  for (size_t i = 1; i < n; ++i)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return 0;
  return 1;
}

sg_status sg_mesh_spec_parse(const char *text, sg_mesh_spec *spec) {
  sg_status st = SG_OK;
  if (!spec) SG_RAISE(SG_ERR_INVALID_ARG, "sg_mesh_spec_parse: spec is NULL");
  memset(spec, 0, sizeof *spec);
  if (!text) SG_RAISE(SG_ERR_MESH, "mesh spec is NULL");
  const char *te;
  const char *t0 = trim(text, text + strlen(text), &te);
  if (t0 == te)
    SG_RAISE(SG_ERR_MESH,
             "mesh spec is empty (expected name=size,... e.g. 'dp=2,tp=2')");
  const char *p = text;
  const char *end = text + strlen(text);
  int index = 0;
  for (;;) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *tok_end = comma ? comma : end;
    const char *e;
    const char *s = trim(p, tok_end, &e);
    ++index;
    if (s == e)
      SG_RAISE(SG_ERR_MESH, "mesh spec '%.200s': entry %d is empty", text,
               index);
    int tl = (int)(e - s);
    const char *eq = memchr(s, '=', (size_t)(e - s));
    if (!eq)
      SG_RAISE(SG_ERR_MESH, "mesh spec '%.200s': '%.*s' is not name=size", text,
               tl, s);
    const char *ne, *ve;
    const char *ns = trim(s, eq, &ne);
    const char *vs = trim(eq + 1, e, &ve);
    int nl = (int)(ne - ns), vl = (int)(ve - vs);
    if (!valid_name(ns, (size_t)nl))
      SG_RAISE(SG_ERR_MESH,
               "mesh spec '%.200s': bad dim name '%.*s' in '%.*s' (names "
               "are letters, digits and _, not starting with a digit)",
               text, nl, ns, tl, s);
    if (nl >= SG_MESH_NAME_MAX)
      SG_RAISE(SG_ERR_MESH,
               "mesh spec '%.200s': dim name '%.*s' is longer than %d "
               "characters",
               text, nl, ns, SG_MESH_NAME_MAX - 1);
    for (int d = 0; d < spec->ndims; ++d)
      if ((int)strlen(spec->names[d]) == nl &&
          strncmp(spec->names[d], ns, (size_t)nl) == 0)
        SG_RAISE(SG_ERR_MESH,
                 "mesh spec '%.200s': dim name '%.*s' appears "
                 "twice",
                 text, nl, ns);
    int digits = vl > 0;
    for (int i = 0; i < vl; ++i)
      if (!isdigit((unsigned char)vs[i])) digits = 0;
    long v = 0;
    if (digits) {
      char buf[32];
      if (vl >= (int)sizeof buf) {
        v = LONG_MAX;
      } else {
        memcpy(buf, vs, (size_t)vl);
        buf[vl] = '\0';
        errno = 0;
        v = strtol(buf, NULL, 10);
        if (errno == ERANGE) v = LONG_MAX;
      }
    }
    if (!digits)
      SG_RAISE(SG_ERR_MESH,
               "mesh spec '%.200s': size '%.*s' of dim '%.*s' is not a "
               "positive integer",
               text, vl, vs, nl, ns);
    if (v < 1)
      SG_RAISE(SG_ERR_MESH,
               "mesh spec '%.200s': dim '%.*s' has size %ld; sizes must be "
               ">= 1",
               text, nl, ns, v);
    if (v > INT_MAX)
      SG_RAISE(SG_ERR_MESH,
               "mesh spec '%.200s': size '%.*s' of dim '%.*s' "
               "is too large",
               text, vl, vs, nl, ns);
    if (spec->ndims == SG_MESH_MAX_DIMS)
      SG_RAISE(SG_ERR_MESH, "mesh spec '%.200s': more than %d dims", text,
               SG_MESH_MAX_DIMS);
    memcpy(spec->names[spec->ndims], ns, (size_t)nl);
    spec->names[spec->ndims][nl] = '\0';
    spec->sizes[spec->ndims] = (int)v;
    ++spec->ndims;
    if (!comma) break;
    p = comma + 1;
  }
  return SG_OK;
fail:
  if (spec) memset(spec, 0, sizeof *spec);
  return st;
}

/* Canonical text of a spec ("pp=2,tp=2"). */
static void spec_format(const sg_mesh_spec *spec, char *out, size_t n) {
  size_t len = 0;
  out[0] = '\0';
  for (int d = 0; d < spec->ndims && len < n; ++d) {
    int w = snprintf(out + len, n - len, "%s%s=%d", d ? "," : "",
                     spec->names[d], spec->sizes[d]);
    if (w < 0) break;
    len += (size_t)w;
  }
}

/* ---- creation -------------------------------------------------------------*/

/* Validate a spec without the communicator (same verdict on every rank). */
static sg_status spec_check(const sg_mesh_spec *spec, int comm_size,
                            const char *text) {
  sg_status st = SG_OK;
  if (spec->ndims < 1 || spec->ndims > SG_MESH_MAX_DIMS)
    SG_RAISE(SG_ERR_MESH, "mesh '%s' has %d dims; 1 to %d are allowed", text,
             spec->ndims, SG_MESH_MAX_DIMS);
  int64_t product = 1;
  for (int d = 0; d < spec->ndims; ++d) {
    if (!valid_name(spec->names[d],
                    strnlen(spec->names[d], SG_MESH_NAME_MAX)) ||
        strnlen(spec->names[d], SG_MESH_NAME_MAX) >= SG_MESH_NAME_MAX)
      SG_RAISE(SG_ERR_MESH, "mesh '%s': dim %d has an invalid name", text, d);
    for (int e = 0; e < d; ++e)
      if (strcmp(spec->names[e], spec->names[d]) == 0)
        SG_RAISE(SG_ERR_MESH, "mesh '%s': dim name '%s' appears twice", text,
                 spec->names[d]);
    if (spec->sizes[d] < 1)
      SG_RAISE(SG_ERR_MESH,
               "mesh '%s': dim '%s' has size %d; sizes must be "
               ">= 1",
               text, spec->names[d], spec->sizes[d]);
    product *= spec->sizes[d];
    if (product > INT_MAX)
      SG_RAISE(SG_ERR_MESH, "mesh '%s' has more than %d ranks", text, INT_MAX);
  }
  if (product != comm_size)
    SG_RAISE(SG_ERR_MESH,
             "mesh '%s' has %lld ranks but the communicator has "
             "%d",
             text, (long long)product, comm_size);
fail:
  return st;
}

static void group_free(struct sg_group **gp) {
  struct sg_group *g = *gp;
  if (!g) return;
#if SG_HAVE_NCCL
  if (g->nccl) sg_nccl_group_free(g);
#endif
  if (g->comm != MPI_COMM_NULL) MPI_Comm_free(&g->comm);
  free(g->mesh_ranks);
  free(g);
  *gp = NULL;
}

/* Which groups a mesh creates eagerly. */
static int mask_is_eager(int ndims, unsigned mask) {
  if (ndims <= SG_MESH_EAGER_ALL_DIMS) return 1;
  unsigned full = (1u << ndims) - 1u;
  return mask == 0 || mask == full || (mask & (mask - 1u)) == 0;
}

/* Group over the dims in mask: color from the coords outside the mask, key
 * from those inside (both mixed radix, row-major). Collective over the mesh
 * communicator. */
static sg_status group_create(sg_mesh_t m, unsigned mask,
                              struct sg_group **out) {
  sg_status st = SG_OK;
  struct sg_group *g = calloc(1, sizeof *g);
  if (!g) SG_RAISE(SG_ERR_ALLOC, "out of memory for a mesh group");
  g->mesh = m;
  g->dims = mask;
  g->comm = MPI_COMM_NULL;
  int color = 0, key = 0, size = 1;
  for (int d = 0; d < m->ndims; ++d) {
    if (mask & (1u << d)) {
      key = key * m->sizes[d] + m->coords[d];
      size *= m->sizes[d];
    } else {
      color = color * m->sizes[d] + m->coords[d];
    }
  }
  g->size = size;
  g->rank = key;
  g->mesh_ranks = malloc((size_t)size * sizeof *g->mesh_ranks);
  if (!g->mesh_ranks) SG_RAISE(SG_ERR_ALLOC, "out of memory for a mesh group");
  for (int r = 0; r < size; ++r) {
    /* decode r over the dims of mask, last dim fastest */
    int rest = r, mr = 0;
    for (int d = m->ndims - 1; d >= 0; --d) {
      int c = m->coords[d];
      if (mask & (1u << d)) {
        c = rest % m->sizes[d];
        rest /= m->sizes[d];
      }
      mr += c * m->strides[d];
    }
    g->mesh_ranks[r] = mr;
  }
  SG_MPI(MPI_Comm_split(m->comm, color, key, &g->comm));
  int grank = -1, gsize = -1;
  SG_MPI(MPI_Comm_rank(g->comm, &grank));
  SG_MPI(MPI_Comm_size(g->comm, &gsize));
  if (grank != key || gsize != size)
    SG_RAISE(SG_ERR_INTERNAL,
             "group 0x%x: MPI_Comm_split gave rank %d of %d,"
             " expected %d of %d",
             mask, grank, gsize, key, size);
  *out = g;
  return SG_OK;
fail:
  group_free(&g);
  return st;
}

/* spec is NULL when parsing failed with parse_st on this rank; every rank
 * still takes part in the consistency check so none is left waiting. */
static sg_status mesh_create(MPI_Comm comm, const sg_mesh_spec *spec,
                             sg_status parse_st, const char *raw,
                             sg_mesh_t *mesh) {
  sg_status st = SG_OK;
  sg_mesh_t m = NULL;
  *mesh = NULL;
  if (comm == MPI_COMM_NULL)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_mesh_create: comm is MPI_COMM_NULL");
  int size = 0, rank = 0;
  SG_MPI(MPI_Comm_size(comm, &size));
  SG_MPI(MPI_Comm_rank(comm, &rank));
  char text[sizeof m->spec];
  if (spec)
    spec_format(spec, text, sizeof text);
  else
    snprintf(text, sizeof text, "%s", raw ? raw : "(null)");
  /* Local checks give the same verdict on every rank that got the same
   * spec; a rank that got another spec must not leave its peers waiting:
   * compare a checksum of the spec (one collective, before anything else). */
  sg_status local = spec ? spec_check(spec, size, text) : parse_st;
  char saved[1024] = "";
  if (local != SG_OK) snprintf(saved, sizeof saved, "%s", sg_last_error());
  {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *c = text; *c; ++c) h = (h ^ (uint8_t)*c) * 16777619u;
    long long in[2] = {(long long)h, -(long long)h}, out[2];
    SG_MPI(MPI_Allreduce(in, out, 2, MPI_LONG_LONG, MPI_MAX, comm));
    if (out[0] != -out[1])
      SG_RAISE(SG_ERR_MESH,
               "sg_mesh_create: the ranks passed different mesh "
               "specs (this rank: '%.200s')",
               text);
  }
  if (local != SG_OK) {
    sg_error_set_raw(saved);
    return local;
  }

  m = calloc(1, sizeof *m);
  if (!m) SG_RAISE(SG_ERR_ALLOC, "out of memory for a mesh");
  m->comm = MPI_COMM_NULL;
  m->size = size;
  m->rank = rank;
  m->ndims = spec->ndims;
  memcpy(m->spec, text, sizeof m->spec);
  for (int d = 0; d < m->ndims; ++d) {
    memcpy(m->names[d], spec->names[d], SG_MESH_NAME_MAX);
    m->sizes[d] = spec->sizes[d];
  }
  int stride = 1;
  for (int d = m->ndims - 1; d >= 0; --d) {
    m->strides[d] = stride;
    m->coords[d] = (rank / stride) % m->sizes[d];
    stride *= m->sizes[d];
  }
  SG_MPI(MPI_Comm_dup(comm, &m->comm));
  /* The library reports MPI failures as statuses on its own communicators
   * (groups inherit the handler through MPI_Comm_split). */
  SG_MPI(MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN));
  unsigned nmasks = 1u << m->ndims;
  for (unsigned mask = 0; mask < nmasks; ++mask) {
    if (!mask_is_eager(m->ndims, mask)) continue;
    SG_TRY(group_create(m, mask, &m->groups[mask]));
  }
  *mesh = m;
  return SG_OK;
fail:
  sg_mesh_destroy(&m);
  return st;
}

sg_status sg_mesh_create_from_spec(MPI_Comm comm, const sg_mesh_spec *spec,
                                   sg_mesh_t *mesh) {
  sg_status st = SG_OK;
  if (!mesh) SG_RAISE(SG_ERR_INVALID_ARG, "sg_mesh_create: mesh is NULL");
  *mesh = NULL;
  if (!spec) SG_RAISE(SG_ERR_INVALID_ARG, "sg_mesh_create: spec is NULL");
  SG_TRY(mesh_create(comm, spec, SG_OK, NULL, mesh));
fail:
  return st;
}

sg_status sg_mesh_create(MPI_Comm comm, const char *spec, sg_mesh_t *mesh) {
  sg_status st = SG_OK;
  sg_mesh_spec parsed;
  if (!mesh) SG_RAISE(SG_ERR_INVALID_ARG, "sg_mesh_create: mesh is NULL");
  *mesh = NULL;
  sg_status pst = sg_mesh_spec_parse(spec, &parsed);
  SG_TRY(mesh_create(comm, pst == SG_OK ? &parsed : NULL, pst, spec, mesh));
fail:
  return st;
}

sg_status sg_mesh_destroy(sg_mesh_t *mesh) {
  if (!mesh || !*mesh) return SG_OK;
  sg_mesh_t m = *mesh;
  for (unsigned mask = 0; mask < (1u << SG_MESH_MAX_DIMS); ++mask)
    group_free(&m->groups[mask]);
  if (m->comm != MPI_COMM_NULL) MPI_Comm_free(&m->comm);
  free(m);
  *mesh = NULL;
  return SG_OK;
}

/* ---- queries --------------------------------------------------------------*/

int sg_mesh_ndims(sg_mesh_t m) { return m ? m->ndims : 0; }
int sg_mesh_size(sg_mesh_t m) { return m ? m->size : 0; }
int sg_mesh_rank(sg_mesh_t m) { return m ? m->rank : -1; }
MPI_Comm sg_mesh_comm(sg_mesh_t m) { return m ? m->comm : MPI_COMM_NULL; }

const char *sg_mesh_dim_name(sg_mesh_t m, int dim) {
  if (!m || dim < 0 || dim >= m->ndims) return NULL;
  return m->names[dim];
}

int sg_mesh_dim_size(sg_mesh_t m, int dim) {
  if (!m || dim < 0 || dim >= m->ndims) return 0;
  return m->sizes[dim];
}

int sg_mesh_find_dim(sg_mesh_t m, const char *name) {
  if (!m || !name) return -1;
  for (int d = 0; d < m->ndims; ++d)
    if (strcmp(m->names[d], name) == 0) return d;
  return -1;
}

int sg_mesh_coord(sg_mesh_t m, int dim) {
  if (!m || dim < 0 || dim >= m->ndims) return -1;
  return m->coords[dim];
}

void sg_mesh_coords(sg_mesh_t m, int *coords) {
  if (!m || !coords) return;
  memcpy(coords, m->coords, (size_t)m->ndims * sizeof *coords);
}

sg_status sg_mesh_coords_of(sg_mesh_t m, int rank, int *coords) {
  sg_status st = SG_OK;
  if (!m || !coords)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_mesh_coords_of: NULL argument");
  if (rank < 0 || rank >= m->size)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_mesh_coords_of: rank %d is not in "
             "mesh '%s' (0..%d)",
             rank, m->spec, m->size - 1);
  for (int d = 0; d < m->ndims; ++d)
    coords[d] = (rank / m->strides[d]) % m->sizes[d];
fail:
  return st;
}

sg_status sg_mesh_rank_of(sg_mesh_t m, const int *coords, int *rank) {
  sg_status st = SG_OK;
  if (!m || !coords || !rank)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_mesh_rank_of: NULL argument");
  int r = 0;
  for (int d = 0; d < m->ndims; ++d) {
    if (coords[d] < 0 || coords[d] >= m->sizes[d])
      SG_RAISE(SG_ERR_INVALID_ARG,
               "sg_mesh_rank_of: coordinate %d along "
               "dim '%s' is outside 0..%d",
               coords[d], m->names[d], m->sizes[d] - 1);
    r += coords[d] * m->strides[d];
  }
  *rank = r;
fail:
  return st;
}

sg_status sg_mesh_neighbor(sg_mesh_t m, int dim, int disp, int periodic,
                           int *rank) {
  sg_status st = SG_OK;
  if (!m || !rank)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_mesh_neighbor: NULL argument");
  if (dim < 0 || dim >= m->ndims)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_mesh_neighbor: dim %d is not in mesh "
             "'%s' (0..%d)",
             dim, m->spec, m->ndims - 1);
  long long n = m->sizes[dim];
  long long c = (long long)m->coords[dim] + disp;
  if (periodic) {
    c %= n;
    if (c < 0) c += n;
  } else if (c < 0 || c >= n) {
    *rank = MPI_PROC_NULL;
    return SG_OK;
  }
  *rank = m->rank + (int)(c - m->coords[dim]) * m->strides[dim];
fail:
  return st;
}

sg_status sg_mesh_group(sg_mesh_t m, unsigned dim_mask, sg_group_t *group) {
  sg_status st = SG_OK;
  if (!m || !group)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_mesh_group: NULL argument");
  *group = NULL;
  if (dim_mask >> m->ndims)
    SG_RAISE(SG_ERR_INVALID_ARG,
             "sg_mesh_group: mask 0x%x names dims "
             "beyond the %d of mesh '%s'",
             dim_mask, m->ndims, m->spec);
  if (!m->groups[dim_mask])
    SG_RAISE(SG_ERR_NOT_SUPPORTED,
             "sg_mesh_group: mesh '%s' has %d dims; "
             "beyond %d dims only single-dim groups and the whole mesh are "
             "created (mask 0x%x)",
             m->spec, m->ndims, SG_MESH_EAGER_ALL_DIMS, dim_mask);
  *group = m->groups[dim_mask];
fail:
  return st;
}

sg_status sg_mesh_group_named(sg_mesh_t m, const char *names,
                              sg_group_t *group) {
  sg_status st = SG_OK;
  if (!m || !names || !group)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_mesh_group_named: NULL argument");
  *group = NULL;
  unsigned mask = 0;
  const char *p = names, *end = names + strlen(names);
  const char *te;
  const char *t0 = trim(p, end, &te);
  if (t0 != te) {
    for (;;) {
      const char *comma = memchr(p, ',', (size_t)(end - p));
      const char *e;
      const char *s = trim(p, comma ? comma : end, &e);
      int n = (int)(e - s), found = -1;
      for (int d = 0; d < m->ndims; ++d)
        if ((int)strlen(m->names[d]) == n &&
            strncmp(m->names[d], s, (size_t)n) == 0)
          found = d;
      if (found < 0)
        SG_RAISE(SG_ERR_INVALID_ARG, "mesh '%s' has no dim named '%.*s'",
                 m->spec, n, s);
      mask |= 1u << found;
      if (!comma) break;
      p = comma + 1;
    }
  }
  SG_TRY(sg_mesh_group(m, mask, group));
fail:
  return st;
}

MPI_Comm sg_group_comm(sg_group_t g) { return g ? g->comm : MPI_COMM_NULL; }
int sg_group_size(sg_group_t g) { return g ? g->size : 0; }
int sg_group_rank(sg_group_t g) { return g ? g->rank : -1; }
unsigned sg_group_dims(sg_group_t g) { return g ? g->dims : 0; }
sg_mesh_t sg_group_mesh(sg_group_t g) { return g ? g->mesh : NULL; }

int sg_group_mesh_rank(sg_group_t g, int r) {
  if (!g || r < 0 || r >= g->size) return -1;
  return g->mesh_ranks[r];
}
