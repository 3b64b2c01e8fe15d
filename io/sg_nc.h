/* shardgrid — parallel NetCDF access for sharded fields.
 *
 * One NetCDF file holds global-shaped variables; each rank reads or writes
 * its own hyperslab of them. A sharded array is described explicitly
 * (sg_nc_shard): its global shape, this rank's start and count in every dim
 * (a count may be 0 on some ranks) and its element type. The ShardTensor
 * wraps this description.
 *
 * Backends (sg_nc_backend), each compiled only when its library is:
 *  - PnetCDF (default when built): classic formats, CDF-5 by default (no
 *    4 GiB limit per variable), collective non-blocking puts/gets
 *    (iput/iget + wait_all), header space reserved at enddef so attributes
 *    added later do not move the data.
 *  - netCDF-4 parallel (HDF5): chunk shapes matching the ranks' slabs,
 *    optional deflate; collective access.
 *  - serial netCDF-C: reading only; every rank opens the file and reads
 *    its own hyperslab.
 * A backend that is not built returns SG_ERR_NOT_SUPPORTED.
 *
 * Collective entry points agree on failure: every rank of the file's
 * communicator returns the same status and message, none waits forever.
 * Dim and variable definitions must be made identically on all ranks.
 *
 *   sg_nc_t f = NULL;
 *   sg_nc_create_opts co = sg_nc_create_opts_default();
 *   SG_TRY(sg_nc_create(comm, "out.nc", &co, &f));
 *   int lat, lon, t, v;
 *   SG_TRY(sg_nc_def_coord(f, "time", 0, "hours since 2000-01-01", "time",
 *                          "T", NULL, &t));
 *   SG_TRY(sg_nc_def_coord(f, "lat", 90, "degrees_north", "latitude", "Y",
 *                          lat_values, &lat));
 *   SG_TRY(sg_nc_def_coord(f, "lon", 180, "degrees_east", "longitude", "X",
 *                          lon_values, &lon));
 *   const char *dims[] = {"time", "lat", "lon"};
 *   SG_TRY(sg_nc_def_var(f, "t2m", SG_DTYPE_F32, 3, dims, NULL, &v));
 *   SG_TRY(sg_nc_put_att_text(f, v, "units", "K"));
 *   SG_TRY(sg_nc_enddef(f));              // also writes coordinate values
 *   SG_TRY(sg_nc_write_frame(f, v, -1, &shard, data));   // append a frame
 *   SG_TRY(sg_nc_close(&f));
 */
#ifndef SG_NC_H
#define SG_NC_H

#include <mpi.h>
#include <stdint.h>

#include "sg_dtype.h"
#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SG_NC_MAX_DIMS 8
#define SG_NC_NAME_MAX 256
/* The varid of global attributes. */
#define SG_NC_GLOBAL (-1)
/* Length of an unlimited (record) dim in sg_nc_def_dim. */
#define SG_NC_UNLIMITED 0

typedef enum sg_nc_backend {
  SG_NC_BACKEND_AUTO = 0, /* PnetCDF if built, else netCDF-4 parallel, else
                             serial (reading only) */
  SG_NC_BACKEND_PNETCDF,
  SG_NC_BACKEND_NETCDF4, /* netCDF-4/HDF5, parallel */
  SG_NC_BACKEND_SERIAL,  /* netCDF-C, each rank on its own; read only */
  SG_NC_BACKEND_COUNT
} sg_nc_backend;

typedef enum sg_nc_format {
  SG_NC_FORMAT_AUTO = 0, /* PnetCDF: CDF-5; netCDF-4 backend: netCDF-4 */
  SG_NC_FORMAT_CDF2,     /* 64-bit offset (no i64 variables, none > 4 GiB
                            except the last) */
  SG_NC_FORMAT_CDF5,     /* 64-bit data */
  SG_NC_FORMAT_NETCDF4
} sg_nc_format;

/* "pnetcdf", "netcdf4", "serial", "auto". Not collective. */
const char *sg_nc_backend_name(sg_nc_backend b);
/* Parse the names above; SG_ERR_INVALID_ARG otherwise. Not collective. */
sg_status sg_nc_backend_parse(const char *name, sg_nc_backend *b);
/* 1 if backend b is built (AUTO: if any is); for writing, SERIAL is 0.
 * Not collective. */
int sg_nc_backend_available(sg_nc_backend b, int for_writing);

typedef struct sg_nc_t_ *sg_nc_t;

typedef struct sg_nc_create_opts {
  sg_nc_backend backend;  /* default AUTO */
  sg_nc_format format;    /* default AUTO */
  int overwrite;          /* 0 (default): an existing file is an error and
                             stays untouched */
  int64_t header_reserve; /* PnetCDF: bytes of free header space kept at
                             enddef (default 64 KiB) */
  /* MPI-IO / library hints, "key=value,key=value" (';' also separates),
   * given to the library as an MPI_Info at create: ROMIO's cb_buffer_size,
   * romio_cb_write, romio_ds_write, striping_unit, ...; PnetCDF's
   * nc_in_place_swap, nc_ibuf_size, nc_var_align_size, ... Keys a layer
   * does not know are ignored by it. NULL or "": the libraries' defaults
   * (which the ROMIO_HINTS / PNETCDF_HINTS environment variables still
   * override). See docs/io.md for measured effects. */
  const char *hints;
  /* netCDF-4: independent instead of collective data access (each rank
   * writes its own chunks; no two-phase aggregation). Default 0. */
  int independent;
  /* PnetCDF backend: when every rank's slab of a fixed-size variable
   * stored in the caller's type (f32, f64, i32, i64) is one contiguous run
   * of the file, sg_nc_write goes straight through MPI-IO: 8 MiB at a time
   * swapped to big-endian in a cache-sized buffer and written at the
   * variable's offset (PnetCDF would swap the whole buffer in place, write,
   * and swap it back: two extra passes over memory). 1 disables this.
   * Default 0. */
  int no_direct_write;
  /* 1: the file is written as "<path>.partial" and renamed to path by a
   * sg_nc_close that agrees every rank succeeded; after any failed call on
   * the file (a write that ran out of space, ...) sg_nc_close removes it
   * and returns the error. A run killed before close leaves only the
   * ".partial" file: path never holds a file that reads as valid but is
   * incomplete. overwrite is checked against path. Default 0. */
  int atomic;
} sg_nc_create_opts;

typedef struct sg_nc_open_opts {
  sg_nc_backend backend; /* default AUTO */
  int writable;          /* open for appending/attributes (not SERIAL) */
  /* Map non-CF dim names to CF ones, "FROM=to,...", e.g.
   * "COADSX=lon,COADSY=lat,TIME=time". Names are then reported and looked
   * up under the mapped names. NULL or "" maps nothing. */
  const char *dim_map;
  /* MPI-IO / library hints as in sg_nc_create_opts.hints (romio_cb_read,
   * romio_ds_read, cb_buffer_size, ...); also used by the direct reads. */
  const char *hints;
  /* netCDF-4: independent instead of collective data access. Default 0. */
  int independent;
  /* PnetCDF backend, file opened read-only: a slab read without halo
   * boxes, of a variable stored in the caller's type (f32, f64, i32, i64),
   * goes straight through MPI-IO on the variable's bytes (offsets from
   * PnetCDF) into the caller's buffer, followed by one threaded in-place
   * byte swap; PnetCDF itself would swap in a single-threaded pass that
   * took 40% of a read. 1 disables this (every read through
   * ncmpi_iget_vara + wait_all). Default 0. */
  int no_direct_read;
} sg_nc_open_opts;

sg_nc_create_opts sg_nc_create_opts_default(void);
sg_nc_open_opts sg_nc_open_opts_default(void);

/* Create a file for writing, in define mode. Collective over comm (which is
 * duplicated). Fails on every rank if the file exists and overwrite is 0,
 * if the backend is not built, or the library fails. */
sg_status sg_nc_create(MPI_Comm comm, const char *path,
                       const sg_nc_create_opts *opts, sg_nc_t *file);

/* Open an existing file (data mode). Collective over comm. A missing or
 * unreadable file is SG_ERR_IO on every rank. */
sg_status sg_nc_open(MPI_Comm comm, const char *path,
                     const sg_nc_open_opts *opts, sg_nc_t *file);

/* Flush and close; accepts NULL and sets *file to NULL. A file created
 * with atomic is renamed to its path here when every call on it succeeded
 * and removed otherwise (returning the first failure, with the file's name;
 * a full disk says "no space left on device"). Collective. */
sg_status sg_nc_close(sg_nc_t *file);

/* Close a file after a failure of the caller's own (collective, like
 * sg_nc_close): a file made by sg_nc_create is removed (atomic: its
 * ".partial" file; path is untouched), so no incomplete file is left
 * behind; an opened file is just closed. Accepts NULL and sets *file to
 * NULL. Returns the close's status. Collective. */
sg_status sg_nc_discard(sg_nc_t *file);

/* Flush written data to storage (ncmpi_sync / nc_sync; a PnetCDF file
 * written only by direct writes: MPI_File_sync of every rank's own
 * handle). Collective. */
sg_status sg_nc_sync(sg_nc_t file);

/* The backend in use and the file's format. Not collective. */
sg_nc_backend sg_nc_backend_of(sg_nc_t file);
sg_nc_format sg_nc_format_of(sg_nc_t file);
MPI_Comm sg_nc_comm(sg_nc_t file);

/* ---- define mode (all collective, identical arguments on every rank) --- */

/* Define a dim; len SG_NC_UNLIMITED (0) makes the record dim. */
sg_status sg_nc_def_dim(sg_nc_t file, const char *name, int64_t len,
                        int *dimid);

typedef struct sg_nc_var_opts {
  /* netCDF-4: chunk shape; NULL takes slab_count if given, else the
   * library default. */
  const int64_t *chunk;
  /* netCDF-4: this rank's slab count in every dim (may differ per rank);
   * the chunk is the largest slab over the ranks, so each rank's slab of a
   * balanced split lies in few chunks. */
  const int64_t *slab_count;
  int deflate; /* netCDF-4: 0 (none) to 9 */
  int shuffle; /* netCDF-4: byte shuffle before deflate */
} sg_nc_var_opts;

/* Define a variable of type dtype over ndims named dims (outermost first;
 * bf16 is stored as 16-bit integer bits with attribute sg_dtype="bf16").
 * opts may be NULL. */
sg_status sg_nc_def_var(sg_nc_t file, const char *name, sg_dtype dtype,
                        int ndims, const char *const *dim_names,
                        const sg_nc_var_opts *opts, int *varid);

/* Define a 1-D coordinate variable and its dim of the same name (len
 * SG_NC_UNLIMITED for time) with units, standard_name and axis (each may
 * be NULL). values (len doubles, may be NULL) are copied and written at
 * sg_nc_enddef; a record coordinate is written with sg_nc_write_frame. */
sg_status sg_nc_def_coord(sg_nc_t file, const char *name, int64_t len,
                          const char *units, const char *standard_name,
                          const char *axis, const double *values, int *varid);

/* Attributes; varid SG_NC_GLOBAL for global ones. Collective in define
 * mode (or a writable file: they enter define mode and leave it). n values
 * of type dtype (bf16 not supported). */
sg_status sg_nc_put_att_text(sg_nc_t file, int varid, const char *name,
                             const char *text);
sg_status sg_nc_put_att(sg_nc_t file, int varid, const char *name,
                        sg_dtype dtype, int64_t n, const void *values);

/* CF metadata of a data variable: any NULL field is left out; fill is
 * written (as _FillValue, in the variable's type) when has_fill. */
typedef struct sg_nc_cf {
  const char *units;
  const char *long_name;
  const char *standard_name;
  int has_fill;
  double fill_value;
} sg_nc_cf;
sg_status sg_nc_put_cf(sg_nc_t file, int varid, const sg_nc_cf *cf);
/* Global CF attributes: title, history, Conventions (NULL: "CF-1.8"). */
sg_status sg_nc_put_global_cf(sg_nc_t file, const char *title,
                              const char *history, const char *conventions);

/* Leave define mode (PnetCDF: keeping header_reserve bytes free) and write
 * the values given to sg_nc_def_coord. Collective. */
sg_status sg_nc_enddef(sg_nc_t file);
/* Re-enter define mode to add dims, variables or attributes. Collective. */
sg_status sg_nc_redef(sg_nc_t file);

/* ---- inquiry (not collective unless said) ----------------------------- */

typedef struct sg_nc_var_info {
  int varid;
  int ndims;
  int64_t shape[SG_NC_MAX_DIMS]; /* record dim: current number of records */
  char dim_names[SG_NC_MAX_DIMS][SG_NC_NAME_MAX]; /* after dim_map */
  int unlimited0; /* 1 if dim 0 is the record dim */
  int nc_type;    /* the file's type code (NC_FLOAT, ...) */
  sg_dtype dtype; /* the nearest shardgrid dtype (i8/i16 report i32) */
} sg_nc_var_info;

/* Find a variable by name; SG_ERR_INVALID_ARG naming the variable and the
 * file if it does not exist. Not collective (reads the header in memory);
 * a record dim's length is as of the last collective call. */
sg_status sg_nc_inq_var(sg_nc_t file, const char *name, sg_nc_var_info *info);
/* Length of a dim by (mapped) name. Not collective. */
sg_status sg_nc_inq_dim(sg_nc_t file, const char *name, int64_t *len);
/* 1 if the attribute exists. Not collective. */
int sg_nc_has_att(sg_nc_t file, int varid, const char *name);
/* Length of an attribute (characters for text). SG_ERR_INVALID_ARG if it
 * does not exist. Not collective. */
sg_status sg_nc_inq_att(sg_nc_t file, int varid, const char *name,
                        int64_t *len);
/* Read a text attribute into buf (NUL-terminated, truncated to cap).
 * Not collective. */
sg_status sg_nc_get_att_text(sg_nc_t file, int varid, const char *name,
                             char *buf, size_t cap);
/* Read up to cap numeric values converted to f64 or i64; *n gets the
 * attribute's length. Not collective. */
sg_status sg_nc_get_att_f64(sg_nc_t file, int varid, const char *name,
                            double *values, int64_t cap, int64_t *n);
sg_status sg_nc_get_att_i64(sg_nc_t file, int varid, const char *name,
                            int64_t *values, int64_t cap, int64_t *n);

/* ---- sharded data ------------------------------------------------------ */

/* This rank's part of a global array: dims outermost first. */
typedef struct sg_nc_shard {
  int ndims;
  int64_t global_shape[SG_NC_MAX_DIMS];
  int64_t start[SG_NC_MAX_DIMS];
  int64_t count[SG_NC_MAX_DIMS]; /* may be 0 */
  sg_dtype dtype;                /* of the caller's buffer */
} sg_nc_shard;

/* Fill a shard description for a balanced split of dim `dim` of a global
 * shape over `parts` parts (the first n % parts get one more), taking part
 * `index`; other dims whole. Not collective. */
sg_status sg_nc_shard_split(int ndims, const int64_t *global_shape,
                            sg_dtype dtype, int dim, int parts, int index,
                            sg_nc_shard *shard);
/* Number of elements of a shard (product of counts). */
int64_t sg_nc_shard_numel(const sg_nc_shard *shard);

/* Write this rank's hyperslab (data: count elements, row-major, in
 * shard->dtype; converted to the variable's type by the library) into a
 * variable whose shape equals shard->global_shape (the record dim may
 * have any current length: start[0] picks the record). Collective; a
 * shape mismatch on any rank is SG_ERR_SHAPE on every rank. */
sg_status sg_nc_write(sg_nc_t file, int varid, const sg_nc_shard *shard,
                      const void *data);

/* Several variables in one collective operation (PnetCDF: all iputs, one
 * wait_all). Collective. */
sg_status sg_nc_write_many(sg_nc_t file, int n, const int *varids,
                           const sg_nc_shard *shards, const void *const *data);

/* Write record `frame` (-1: append after the last record) of a variable
 * whose dim 0 is the record dim; shard describes the other dims (a 1-D
 * record coordinate takes a shard with ndims 0: one value, written by
 * rank 0). *frame_out (may be NULL) gets the record written. Collective. */
sg_status sg_nc_write_frame(sg_nc_t file, int varid, int64_t frame,
                            const sg_nc_shard *shard, const void *data,
                            int64_t *frame_out);

typedef struct sg_nc_read_opts {
  /* Halo widths below and above the slab in every dim (>= 0). The output
   * then has count[d] + halo_lo[d] + halo_hi[d] elements in dim d. */
  int64_t halo_lo[SG_NC_MAX_DIMS];
  int64_t halo_hi[SG_NC_MAX_DIMS];
  /* Periodic dims: the halo beyond one edge comes from the other side of
   * the file. periodic_lon marks the dim named "lon" (after dim_map). */
  int periodic[SG_NC_MAX_DIMS];
  int periodic_lon;
  /* Halo beyond a non-periodic edge gets outside_value, mask 0. */
  double outside_value;
  /* Masked elements (_FillValue, missing_value) get masked_value. */
  double masked_value;
  int no_mask; /* 1: do not mask */
  /* 1: NaN and +-Inf values (of a float variable, before unpacking) are
   * masked too, like _FillValue (files often mark missing points with NaN
   * while declaring another _FillValue). Default 0: they are returned as
   * they are (the dataset loaders set it). */
  int mask_nonfinite;
  int no_unpack; /* 1: do not apply scale_factor/add_offset */
  /* 1: if the dim named "lat" has a descending coordinate variable, read
   * it flipped, so the caller's indices run south to north. */
  int flip_lat;
} sg_nc_read_opts;

sg_nc_read_opts sg_nc_read_opts_default(void);

/* Read this rank's hyperslab (plus halo) of a variable whose shape equals
 * shard->global_shape. out holds prod(count + halo) elements of
 * shard->dtype: f32/f64 get unpacking and masking, i32/i64 the raw values
 * (with masking; an integer output of a packed variable is an error).
 * mask (may be NULL) gets 1 for valid, 0 for masked or outside elements.
 * Collective (the serial backend: local). */
sg_status sg_nc_read(sg_nc_t file, int varid, const sg_nc_shard *shard,
                     const sg_nc_read_opts *opts, void *out, uint8_t *mask);

/* Read record `frame` of a variable with a record dim; shard describes the
 * other dims. Collective. */
sg_status sg_nc_read_frame(sg_nc_t file, int varid, int64_t frame,
                           const sg_nc_shard *shard,
                           const sg_nc_read_opts *opts, void *out,
                           uint8_t *mask);

/* The latitudes (degrees) of a file's "lat" dim: its 1-D coordinate
 * variable (the file's name of "lat" after dim_map) read whole into lat
 * (nlat values). *found = 0 and SG_OK when the file has no such variable;
 * SG_ERR_SHAPE when it is not 1-D of length nlat. Collective (the same
 * verdict on every rank: it depends on the header only). */
sg_status sg_nc_read_lat(sg_nc_t file, int64_t nlat, double *lat, int *found);

#ifdef __cplusplus
}
#endif
#endif /* SG_NC_H */
