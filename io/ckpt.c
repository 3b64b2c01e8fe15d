/* shardgrid — checkpoints on raw named global arrays. */
#include "sg_ckpt.h"

#include "io_impl.h"
#include "sg_comm.h"
#include "sg_device.h"
#include "sg_dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_FORMAT "shardgrid checkpoint 1"

/* ---- decomposition-independent checksum ---------------------------------- */

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

static inline uint64_t elem_hash(uint64_t gidx, const unsigned char *p,
                                 size_t sz) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
  for (size_t k = 0; k < sz; ++k) {
    h ^= p[k];
    h *= 0x100000001b3ull;
  }
  return mix64(h ^ mix64(gidx + 0x9e3779b97f4a7c15ull));
}

uint64_t sg_ckpt_shard_hash(const sg_nc_shard *s, const void *data) {
  if (!s || s->ndims < 1 || !sg_dtype_valid(s->dtype)) return 0;
  int nd = s->ndims;
  int64_t inner = s->count[nd - 1], rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= s->count[d];
  if (inner == 0 || rows == 0 || !data) return 0;
  size_t sz = sg_dtype_size(s->dtype);
  const unsigned char *b = data;
  uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) if (rows * inner > 65536) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, g = 0, mult = s->global_shape[nd - 1];
    for (int d = nd - 2; d >= 0; --d) {
      int64_t j = rem % s->count[d];
      rem /= s->count[d];
      g += (s->start[d] + j) * mult;
      mult *= s->global_shape[d];
    }
    g += s->start[nd - 1];
    uint64_t part = 0;
    for (int64_t i = 0; i < inner; ++i)
      part += elem_hash((uint64_t)(g + i), b + (size_t)(r * inner + i) * sz,
                        sz);
    sum += part;
  }
  return sum;
}

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t k = 0; k < n; ++k) {
    h ^= b[k];
    h *= 0x100000001b3ull;
  }
  return h;
}

static uint64_t meta_hash(const sg_ckpt_meta *m, const char *config) {
  uint64_t h = 0xcbf29ce484222325ull;
  h = fnv_bytes(h, &m->step, sizeof m->step);
  h = fnv_bytes(h, &m->rng_seed, sizeof m->rng_seed);
  h = fnv_bytes(h, &m->n_rng_state, sizeof m->n_rng_state);
  h = fnv_bytes(h, m->rng_state, (size_t)m->n_rng_state * sizeof(uint64_t));
  h = fnv_bytes(h, &m->data_position, sizeof m->data_position);
  h = fnv_bytes(h, m->mesh, strlen(m->mesh));
  if (config) h = fnv_bytes(h, config, strlen(config));
  return mix64(h);
}

/* ---- helpers ----------------------------------------------------------------- */

static int valid_name(const char *s) {
  if (!s || !*s) return 0;
  if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
    return 0;
  for (const char *p = s + 1; *p; ++p)
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
          (*p >= '0' && *p <= '9') || *p == '_' || *p == '.' || *p == '@' ||
          *p == '+' || *p == '-'))
      return 0;
  return strlen(s) < 200;
}

static sg_status check_arrays(int n, const sg_ckpt_array *a, int for_write) {
  sg_status st = SG_OK;
  if (n < 0 || (n > 0 && !a))
    SG_RAISE(SG_ERR_INVALID_ARG, "checkpoint: %d arrays", n);
  for (int i = 0; i < n; ++i) {
    const sg_nc_shard *s = &a[i].shard;
    if (!valid_name(a[i].name))
      SG_RAISE(SG_ERR_INVALID_ARG,
               "checkpoint: array %d has an invalid name "
               "'%s' ([A-Za-z_][A-Za-z0-9_.@+-]*)",
               i, a[i].name ? a[i].name : "(null)");
    for (int k = 0; k < i; ++k)
      if (strcmp(a[k].name, a[i].name) == 0)
        SG_RAISE(SG_ERR_INVALID_ARG, "checkpoint: array name %s used twice",
                 a[i].name);
    if (s->ndims < 1 || s->ndims > SG_NC_MAX_DIMS || !sg_dtype_valid(s->dtype))
      SG_RAISE(SG_ERR_INVALID_ARG,
               "checkpoint: array %s: ndims %d (1..%d) "
               "or dtype invalid",
               a[i].name, s->ndims, SG_NC_MAX_DIMS);
    for (int d = 0; d < s->ndims; ++d)
      if (s->global_shape[d] < 1 || s->start[d] < 0 || s->count[d] < 0 ||
          s->start[d] + s->count[d] > s->global_shape[d])
        SG_RAISE(SG_ERR_SHAPE,
                 "checkpoint: array %s dim %d: slab [%lld, %lld) "
                 "of %lld",
                 a[i].name, d, (long long)s->start[d],
                 (long long)(s->start[d] + s->count[d]),
                 (long long)s->global_shape[d]);
    if (sg_nc_shard_numel(s) > 0 && !a[i].data)
      SG_RAISE(SG_ERR_INVALID_ARG, "checkpoint: array %s: data is NULL",
               a[i].name);
  }
  (void)for_write;
fail:
  return st;
}

static int64_t global_numel(const sg_nc_shard *s) {
  int64_t n = 1;
  for (int d = 0; d < s->ndims; ++d) n *= s->global_shape[d];
  return n;
}

/* fsync a file, and the directory holding it. */
static sg_status sync_path(const char *path, int is_dir) {
  sg_status st = SG_OK;
  int fd = open(path, is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0)
    SG_RAISE(SG_ERR_IO, "cannot open %s to sync: %s", path, strerror(errno));
  if (fsync(fd) != 0 && !is_dir) {
    int e = errno;
    close(fd);
    SG_RAISE(SG_ERR_IO, "fsync %s: %s", path, strerror(e));
  }
  close(fd);
fail:
  return st;
}

/* ---- write --------------------------------------------------------------------- */

sg_status sg_ckpt_write(MPI_Comm comm, const char *path, int n,
                        const sg_ckpt_array *a, const sg_ckpt_meta *meta,
                        const sg_ckpt_opts *opts) {
  sg_status st = SG_OK;
  sg_nc_t f = NULL;
  char *tmp = NULL;
  uint64_t *red = NULL;
  int *vids = NULL;
  sg_nc_shard *shards = NULL;
  const void **data = NULL;
  int rank = 0, tmp_made = 0;
  MPI_Comm_rank(comm, &rank);
  /* PnetCDF's MPI-IO collectives cannot time out: a rank lost in the
   * write would leave the others there for good */
  sg_watchdog_begin("checkpoint write");

  sg_status lst = SG_OK;
  if (!path || !*path)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "checkpoint: path is empty");
  else if (!meta)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "checkpoint: meta is NULL");
  else if (meta->n_rng_state < 0 || meta->n_rng_state > SG_CKPT_RNG_MAX)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "checkpoint: n_rng_state %d (0..%d)", meta->n_rng_state,
                       SG_CKPT_RNG_MAX);
  else if (memchr(meta->mesh, '\0', sizeof meta->mesh) == NULL)
    lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                       "checkpoint: mesh spec not terminated");
  if (lst == SG_OK) lst = check_arrays(n, a, 1);
  int nn = lst == SG_OK ? n : 0;
  /* element counts and checksums of all arrays, in one reduction */
  red = calloc((size_t)(2 * (n > 0 ? n : 1)), sizeof *red);
  if (!red) {
    lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
    nn = 0;
  }
  for (int i = 0; i < nn; ++i) {
    red[i] = (uint64_t)sg_nc_shard_numel(&a[i].shard);
    red[n + i] = sg_ckpt_shard_hash(&a[i].shard, a[i].data);
  }
  SG_TRY(sg_io_agree(comm, lst));
  SG_TRY(sg_io_allreduce(comm, red, 2 * n, MPI_UINT64_T, MPI_SUM));
  for (int i = 0; i < n && lst == SG_OK; ++i)
    if ((int64_t)red[i] != global_numel(&a[i].shard))
      lst = sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                         "checkpoint: the shards of %s cover %lld elements of "
                         "%lld: they must partition the array (replicas pass "
                         "count 0) and agree on its global shape",
                         a[i].name, (long long)red[i],
                         (long long)global_numel(&a[i].shard));
  SG_TRY(sg_io_agree(comm, lst));

  tmp = malloc(strlen(path) + 8);
  if (!tmp) SG_RAISE(SG_ERR_ALLOC, "out of memory");
  sprintf(tmp, "%s.tmp", path);
  sg_nc_create_opts co = sg_nc_create_opts_default();
  co.backend = opts ? opts->backend : SG_NC_BACKEND_AUTO;
  co.overwrite = 1; /* the temporary file of an earlier, killed write */
  SG_TRY(sg_nc_create(comm, tmp, &co, &f));
  tmp_made = 1;
  vids = calloc((size_t)(n > 0 ? n : 1), sizeof *vids);
  shards = calloc((size_t)(n > 0 ? n : 1), sizeof *shards);
  data = calloc((size_t)(n > 0 ? n : 1), sizeof *data);
  lst = (vids && shards && data)
            ? SG_OK
            : sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  SG_TRY(sg_io_agree(comm, lst));
  for (int i = 0; i < n; ++i) {
    const sg_nc_shard *s = &a[i].shard;
    char dn[SG_NC_MAX_DIMS][256];
    const char *dnp[SG_NC_MAX_DIMS];
    for (int d = 0; d < s->ndims; ++d) {
      snprintf(dn[d], sizeof dn[d], "%s_d%d", a[i].name, d);
      dnp[d] = dn[d];
      SG_TRY(sg_nc_def_dim(f, dn[d], s->global_shape[d], NULL));
    }
    sg_nc_var_opts vo;
    memset(&vo, 0, sizeof vo);
    vo.slab_count = s->count;
    SG_TRY(sg_nc_def_var(f, a[i].name, s->dtype, s->ndims, dnp, &vo, &vids[i]));
    char sum[64];
    snprintf(sum, sizeof sum, "%016" PRIx64, red[n + i]);
    SG_TRY(sg_nc_put_att_text(f, vids[i], "sg_checksum", sum));
    if (s->dtype != SG_DTYPE_BF16)
      SG_TRY(
          sg_nc_put_att_text(f, vids[i], "sg_dtype", sg_dtype_name(s->dtype)));
    shards[i] = *s;
    data[i] = a[i].data;
  }
  int64_t iv[2 + SG_CKPT_RNG_MAX];
  SG_TRY(sg_nc_put_att_text(f, SG_NC_GLOBAL, "sg_format", CKPT_FORMAT));
  SG_TRY(sg_nc_put_att(f, SG_NC_GLOBAL, "step", SG_DTYPE_I64, 1, &meta->step));
  memcpy(&iv[0], &meta->rng_seed, sizeof iv[0]);
  SG_TRY(sg_nc_put_att(f, SG_NC_GLOBAL, "rng_seed", SG_DTYPE_I64, 1, iv));
  if (meta->n_rng_state > 0) {
    memcpy(iv, meta->rng_state, (size_t)meta->n_rng_state * sizeof(int64_t));
    SG_TRY(sg_nc_put_att(f, SG_NC_GLOBAL, "rng_state", SG_DTYPE_I64,
                         meta->n_rng_state, iv));
  }
  SG_TRY(sg_nc_put_att(f, SG_NC_GLOBAL, "data_position", SG_DTYPE_I64, 1,
                       &meta->data_position));
  SG_TRY(sg_nc_put_att_text(f, SG_NC_GLOBAL, "mesh", meta->mesh));
  SG_TRY(sg_nc_put_att_text(f, SG_NC_GLOBAL, "config",
                            meta->config ? meta->config : ""));
  {
    char mh[64];
    snprintf(mh, sizeof mh, "%016" PRIx64,
             meta_hash(meta, meta->config ? meta->config : ""));
    SG_TRY(sg_nc_put_att_text(f, SG_NC_GLOBAL, "sg_meta_checksum", mh));
  }
  SG_TRY(sg_nc_enddef(f));
  SG_TRY(sg_nc_write_many(f, n, vids, shards, data));
  SG_TRY(sg_nc_sync(f));
  SG_TRY(sg_nc_close(&f));
  tmp_made = 0; /* complete: from here on it is renamed, not removed */
  /* complete and on disk: make it the checkpoint */
  lst = SG_OK;
  if (rank == 0) {
    lst = sync_path(tmp, 0);
    if (lst == SG_OK && rename(tmp, path) != 0)
      lst = sg_error_set(SG_ERR_IO, __FILE__, __LINE__, "rename %s -> %s: %s",
                         tmp, path, strerror(errno));
    if (lst == SG_OK) {
      char *dcopy = strdup(path);
      if (dcopy) {
        sync_path(dirname(dcopy), 1);
        free(dcopy);
      }
    }
  }
  SG_TRY(sg_io_agree(comm, lst));
fail:
  /* a failed write (a full disk, say) removes its incomplete temporary
   * file: it frees the space and nothing mistakes it for a checkpoint */
  if (f)
    sg_nc_discard(&f);
  else if (st != SG_OK && tmp_made) { /* the close failed, on every rank */
    if (rank == 0) remove(tmp);
    char msg[1400];
    snprintf(msg, sizeof msg, "%.1100s; the incomplete %.250s was removed",
             sg_last_error(), tmp);
    sg_error_set_raw(msg);
  }
  sg_watchdog_end();
  free(tmp);
  free(red);
  free(vids);
  free(shards);
  free(data);
  return st;
}

/* ---- read ---------------------------------------------------------------------- */

static int parse_hex64(const char *s, uint64_t *v) {
  char *end = NULL;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 16);
  if (errno || !end || end == s || *end) return 0;
  *v = (uint64_t)x;
  return 1;
}

sg_status sg_ckpt_read(MPI_Comm comm, const char *path, int n, sg_ckpt_array *a,
                       sg_ckpt_meta *meta) {
  sg_status st = SG_OK, lst = SG_OK;
  sg_nc_t f = NULL;
  uint64_t *want = NULL, *red = NULL;
  int *vids = NULL;
  void *tmpbuf = NULL;
  char *config = NULL;
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  sg_watchdog_begin("checkpoint read"); /* as in sg_ckpt_write */

  lst = path ? check_arrays(n, a, 0)
             : sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                            "checkpoint: path is NULL");
  SG_TRY(sg_io_agree(comm, lst));
  st = sg_nc_open(comm, path, NULL, &f);
  if (st != SG_OK) {
    if (st != SG_ERR_IO && st != SG_ERR_CORRUPT) {
      char msg[1100];
      snprintf(msg, sizeof msg,
               "checkpoint %.400s is unreadable (truncated or "
               "corrupted): %.600s",
               path, sg_last_error());
      sg_error_set_raw(msg);
      st = SG_ERR_CORRUPT;
    }
    goto fail;
  }
  want = calloc((size_t)(n > 0 ? n : 1), sizeof *want);
  red = calloc((size_t)(2 * (n > 0 ? n : 1)), sizeof *red);
  vids = calloc((size_t)(n > 0 ? n : 1), sizeof *vids);
  if (!want || !red || !vids)
    lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
  char fmt[64] = "";
  if (lst == SG_OK && (sg_nc_get_att_text(f, SG_NC_GLOBAL, "sg_format", fmt,
                                          sizeof fmt) != SG_OK ||
                       strcmp(fmt, CKPT_FORMAT) != 0))
    lst = sg_error_set(SG_ERR_CORRUPT, __FILE__, __LINE__,
                       "%s is not a shardgrid checkpoint (sg_format '%s')",
                       path, fmt);
  for (int i = 0; lst == SG_OK && i < n; ++i) {
    sg_nc_var_info vi;
    const sg_nc_shard *s = &a[i].shard;
    if (sg_nc_inq_var(f, a[i].name, &vi) != SG_OK) {
      lst = sg_error_set(SG_ERR_INVALID_ARG, __FILE__, __LINE__,
                         "checkpoint %s has no array '%s'", path, a[i].name);
      break;
    }
    vids[i] = vi.varid;
    char dts[16] = "";
    sg_dtype fdt = vi.dtype;
    if (sg_nc_get_att_text(f, vi.varid, "sg_dtype", dts, sizeof dts) == SG_OK)
      sg_dtype_parse(dts, &fdt);
    if (fdt != s->dtype) {
      lst = sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                         "checkpoint array %s is %s, the caller asks for %s",
                         a[i].name, sg_dtype_name(fdt),
                         sg_dtype_name(s->dtype));
      break;
    }
    int same = vi.ndims == s->ndims;
    for (int d = 0; same && d < s->ndims; ++d)
      same = vi.shape[d] == s->global_shape[d];
    if (!same) {
      char fs[160] = "", cs[160] = "";
      for (int d = 0; d < vi.ndims; ++d)
        snprintf(fs + strlen(fs), sizeof fs - strlen(fs), "%s%lld",
                 d ? "x" : "", (long long)vi.shape[d]);
      for (int d = 0; d < s->ndims; ++d)
        snprintf(cs + strlen(cs), sizeof cs - strlen(cs), "%s%lld",
                 d ? "x" : "", (long long)s->global_shape[d]);
      lst = sg_error_set(SG_ERR_SHAPE, __FILE__, __LINE__,
                         "checkpoint array %s has shape %s, the caller's is %s",
                         a[i].name, fs, cs);
      break;
    }
    char sum[64] = "";
    if (sg_nc_get_att_text(f, vi.varid, "sg_checksum", sum, sizeof sum) !=
            SG_OK ||
        !parse_hex64(sum, &want[i]))
      lst = sg_error_set(SG_ERR_CORRUPT, __FILE__, __LINE__,
                         "checkpoint array %s has no valid checksum",
                         a[i].name);
  }
  SG_TRY(sg_io_agree(comm, lst));

  /* the data: each rank its slab */
  sg_nc_read_opts ro = sg_nc_read_opts_default();
  ro.no_mask = 1;
  ro.no_unpack = 1;
  for (int i = 0; i < n; ++i) {
    st = sg_nc_read(f, vids[i], &a[i].shard, &ro, a[i].data, NULL);
    if (st == SG_ERR_PNETCDF || st == SG_ERR_NETCDF || st == SG_ERR_IO) {
      char msg[1100];
      snprintf(msg, sizeof msg,
               "checkpoint %.400s: array %.100s unreadable "
               "(truncated or corrupted): %.500s",
               path, a[i].name, sg_last_error());
      sg_error_set_raw(msg);
      st = SG_ERR_CORRUPT;
    }
    if (st != SG_OK) goto fail;
  }
  for (int i = 0; i < n; ++i) {
    red[i] = (uint64_t)sg_nc_shard_numel(&a[i].shard);
    red[n + i] = sg_ckpt_shard_hash(&a[i].shard, a[i].data);
  }
  SG_TRY(sg_io_allreduce(comm, red, 2 * n, MPI_UINT64_T, MPI_SUM));
  for (int i = 0; i < n; ++i) {
    const sg_nc_shard *s = &a[i].shard;
    uint64_t got = red[n + i];
    if ((int64_t)red[i] != global_numel(s)) {
      /* the caller's slabs do not partition the array (replicas): verify
       * with a balanced split of dim 0 instead */
      sg_nc_shard cs;
      SG_TRY(sg_nc_shard_split(s->ndims, s->global_shape, s->dtype, 0, size,
                               rank, &cs));
      int64_t cn = sg_nc_shard_numel(&cs);
      lst = sg_malloc(sg_device_host(),
                      (size_t)(cn ? cn : 1) * sg_dtype_size(s->dtype), &tmpbuf);
      if (lst != SG_OK) cs.count[0] = 0;
      SG_TRY(sg_io_agree(comm, lst));
      SG_TRY(sg_nc_read(f, vids[i], &cs, &ro, tmpbuf, NULL));
      got = sg_ckpt_shard_hash(&cs, tmpbuf);
      SG_TRY(sg_io_allreduce(comm, &got, 1, MPI_UINT64_T, MPI_SUM));
      sg_free(sg_device_host(), &tmpbuf);
    }
    if (got != want[i])
      SG_RAISE(SG_ERR_CORRUPT,
               "checkpoint %s: array %s fails its checksum "
               "(stored %016" PRIx64 ", read %016" PRIx64 "): the file is "
               "truncated or corrupted",
               path, a[i].name, want[i], got);
  }

  /* meta */
  if (meta) {
    sg_ckpt_meta m;
    memset(&m, 0, sizeof m);
    int64_t k = 0, iv[SG_CKPT_RNG_MAX];
    char mh[64] = "";
    uint64_t mwant = 0;
    lst = sg_nc_get_att_i64(f, SG_NC_GLOBAL, "step", &m.step, 1, &k);
    if (lst == SG_OK)
      lst = sg_nc_get_att_i64(f, SG_NC_GLOBAL, "rng_seed", iv, 1, &k);
    if (lst == SG_OK) memcpy(&m.rng_seed, iv, sizeof m.rng_seed);
    if (lst == SG_OK && sg_nc_has_att(f, SG_NC_GLOBAL, "rng_state")) {
      lst = sg_nc_get_att_i64(f, SG_NC_GLOBAL, "rng_state", iv, SG_CKPT_RNG_MAX,
                              &k);
      m.n_rng_state = (int)(k < SG_CKPT_RNG_MAX ? k : SG_CKPT_RNG_MAX);
      memcpy(m.rng_state, iv, (size_t)m.n_rng_state * sizeof(uint64_t));
    }
    if (lst == SG_OK)
      lst = sg_nc_get_att_i64(f, SG_NC_GLOBAL, "data_position",
                              &m.data_position, 1, &k);
    if (lst == SG_OK)
      lst = sg_nc_get_att_text(f, SG_NC_GLOBAL, "mesh", m.mesh, sizeof m.mesh);
    int64_t alen = 0;
    if (lst == SG_OK) lst = sg_nc_inq_att(f, SG_NC_GLOBAL, "config", &alen);
    size_t clen = (size_t)alen + 1;
    if (lst == SG_OK && !(config = malloc(clen)))
      lst = sg_error_set(SG_ERR_ALLOC, __FILE__, __LINE__, "out of memory");
    if (lst == SG_OK)
      lst = sg_nc_get_att_text(f, SG_NC_GLOBAL, "config", config, clen);
    if (lst == SG_OK &&
        (sg_nc_get_att_text(f, SG_NC_GLOBAL, "sg_meta_checksum", mh,
                            sizeof mh) != SG_OK ||
         !parse_hex64(mh, &mwant) || mwant != meta_hash(&m, config)))
      lst = sg_error_set(SG_ERR_CORRUPT, __FILE__, __LINE__,
                         "checkpoint %s: step/RNG/data position/config/mesh "
                         "fail their checksum",
                         path);
    else if (lst != SG_OK) {
      char prev[600];
      snprintf(prev, sizeof prev, "%s", sg_last_error());
      lst = sg_error_set(SG_ERR_CORRUPT, __FILE__, __LINE__,
                         "checkpoint %s: metadata missing: %s", path, prev);
    }
    SG_TRY(sg_io_agree(comm, lst));
    m.config = config;
    config = NULL;
    *meta = m;
  }
  SG_TRY(sg_nc_close(&f));
fail:
  if (f) sg_nc_close(&f);
  sg_watchdog_end();
  sg_free(sg_device_host(), &tmpbuf);
  free(config);
  free(want);
  free(red);
  free(vids);
  return st;
}
