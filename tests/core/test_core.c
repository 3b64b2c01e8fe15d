/* Core runtime: status/errors, logging levels, dtypes and bf16, host device
 * memory and accounting, streams/events, device detection, timers and the
 * Chrome-trace writer. */
#include "sg_config.h"
#include "sg_device.h"
#include "sg_dtype.h"
#include "sg_log.h"
#include "sg_status.h"
#include "sg_test.h"
#include "sg_trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sg_status raise_twice(int *reached) {
  sg_status st = SG_OK;
  SG_RAISE(SG_ERR_SHAPE, "shape %d != %d", 3, 4);
  *reached = 1; /* never */
fail:
  return st;
}

static void test_status(void) {
  int reached = 0;
  SG_CHECK_STATUS(raise_twice(&reached), SG_ERR_SHAPE);
  SG_CHECK(!reached, "code after SG_RAISE ran");
  SG_CHECK(strstr(sg_last_error(), "shape 3 != 4") != NULL, "message: %s",
           sg_last_error());
  SG_CHECK(strstr(sg_last_error(), "test_core.c:") != NULL,
           "file:line missing: %s", sg_last_error());
  char want[32];
  snprintf(want, sizeof want, "[rank %d]", sg_test_rank);
  SG_CHECK(strstr(sg_last_error(), want) != NULL, "rank missing: %s",
           sg_last_error());
  for (int s = 0; s < SG_STATUS_COUNT; ++s) {
    SG_CHECK(strncmp(sg_status_name((sg_status)s), "SG_", 3) == 0, "name of %d",
             s);
    SG_CHECK(strcmp(sg_status_string((sg_status)s), "unknown status") != 0,
             "text of %d", s);
  }
  SG_CHECK(strcmp(sg_status_name((sg_status)999), "SG_ERR_UNKNOWN") == 0,
           "unknown name");
  sg_clear_error();
  SG_CHECK(sg_last_error()[0] == '\0', "clear");
}

static sg_status wrap_mpi(void) {
  sg_status st = SG_OK;
  int x = 0;
  /* an invalid count: MPI returns an error (errors return on WORLD) */
  SG_MPI(MPI_Bcast(&x, -1, MPI_INT, 0, MPI_COMM_WORLD));
fail:
  return st;
}

static void test_mpi_wrap(void) {
  SG_CHECK_STATUS(wrap_mpi(), SG_ERR_MPI);
  SG_CHECK(strstr(sg_last_error(), "MPI_Bcast") != NULL, "call recorded: %s",
           sg_last_error());
}

static void test_log(void) {
  SG_CHECK(sg_log_parse_level("debug") == SG_LOG_LEVEL_DEBUG, "debug");
  SG_CHECK(sg_log_parse_level("WARN") == SG_LOG_LEVEL_WARN, "WARN");
  SG_CHECK(sg_log_parse_level("3") == 3, "3");
  SG_CHECK(sg_log_parse_level("loud") == -1, "unknown");
  sg_log_set_level(SG_LOG_LEVEL_ERROR);
  SG_CHECK(sg_log_get_level() == SG_LOG_LEVEL_ERROR, "set");
  sg_log_info("not printed");
  sg_log_set_level(-1);
}

static void test_dtype(void) {
  SG_CHECK(sg_dtype_size(SG_DTYPE_F32) == 4 &&
               sg_dtype_size(SG_DTYPE_F64) == 8 &&
               sg_dtype_size(SG_DTYPE_I32) == 4 &&
               sg_dtype_size(SG_DTYPE_I64) == 8 &&
               sg_dtype_size(SG_DTYPE_BF16) == 2,
           "sizes");
  sg_dtype dt;
  SG_CHECK_OK(sg_dtype_parse("bf16", &dt));
  SG_CHECK(dt == SG_DTYPE_BF16, "parse bf16");
  SG_CHECK_STATUS(sg_dtype_parse("f16", &dt), SG_ERR_INVALID_ARG);
  /* bf16: exact for values with 8 significant bits, round to nearest even */
  float exact[] = {0.0f, 1.0f, -2.5f, 0x1.fep127f, 1.0f / 128.0f};
  for (int i = 0; i < 5; ++i)
    SG_CHECK(sg_bf16_to_f32(sg_bf16_from_f32(exact[i])) == exact[i],
             "bf16 exact %g", exact[i]);
  /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even -> 1 */
  SG_CHECK(sg_bf16_to_f32(sg_bf16_from_f32(1.0f + 0x1.0p-8f)) == 1.0f,
           "tie to even");
  SG_CHECK(sg_bf16_to_f32(sg_bf16_from_f32(1.0f + 0x1.8p-8f)) ==
               1.0f + 0x1.0p-7f,
           "round up");
  SG_CHECK(isnan(sg_bf16_to_f32(sg_bf16_from_f32(NAN))), "NaN stays NaN");
  SG_CHECK(isinf(sg_bf16_to_f32(sg_bf16_from_f32(INFINITY))), "inf");
  /* conversions */
  double d[4] = {1.5, -2.25, 1e6, 7.0};
  float f[4];
  int32_t i32[4];
  int64_t i64[4];
  sg_bf16 b[4];
  double back[4];
  SG_CHECK_OK(sg_dtype_convert(d, SG_DTYPE_F64, f, SG_DTYPE_F32, 4));
  SG_CHECK(f[0] == 1.5f && f[1] == -2.25f && f[2] == 1e6f, "f64->f32");
  SG_CHECK_OK(sg_dtype_convert(d, SG_DTYPE_F64, i32, SG_DTYPE_I32, 4));
  SG_CHECK(i32[0] == 1 && i32[1] == -2 && i32[2] == 1000000,
           "f64->i32 truncates");
  SG_CHECK_OK(sg_dtype_convert(i32, SG_DTYPE_I32, i64, SG_DTYPE_I64, 4));
  SG_CHECK(i64[2] == 1000000 && i64[1] == -2, "i32->i64");
  SG_CHECK_OK(sg_dtype_convert(f, SG_DTYPE_F32, b, SG_DTYPE_BF16, 4));
  SG_CHECK_OK(sg_dtype_convert(b, SG_DTYPE_BF16, back, SG_DTYPE_F64, 4));
  SG_CHECK(back[0] == 1.5 && back[1] == -2.25 && back[3] == 7.0,
           "bf16 round trip");
  SG_CHECK_STATUS(sg_dtype_convert(d, (sg_dtype)42, f, SG_DTYPE_F32, 4),
                  SG_ERR_INVALID_ARG);
  /* the vector rounding is the scalar conversion, bit for bit: a sweep of
   * bit patterns (every sign, exponent, ties, denormals, inf, NaN) */
  enum { NR = 1 << 16 };
  static float r[NR], want[NR];
  for (uint32_t k = 0; k < NR; ++k) {
    const uint32_t u = k * 65537u + (k & 3u) * 0x7fffu; /* hits the tie bits */
    memcpy(&r[k], &u, sizeof u);
    want[k] = sg_bf16_to_f32(sg_bf16_from_f32(r[k]));
  }
  sg_round_bf16(r, NR);
  int diff = 0;
  for (int k = 0; k < NR; ++k)
    diff += isnan(want[k]) ? !isnan(r[k])
                           : memcmp(&r[k], &want[k], sizeof r[k]) != 0;
  SG_CHECK(
      diff == 0,
      "sg_round_bf16 differs from the scalar conversion in %d of %d values",
      diff, NR);
}

static void test_device(void) {
  sg_device host = sg_device_host();
  sg_mem_info before, mid, after;
  SG_CHECK_OK(sg_mem_get_info(host, &before));
  void *p = NULL, *q = NULL;
  SG_CHECK_OK(sg_malloc(host, 1000, &p));
  SG_CHECK(p != NULL && ((uintptr_t)p % 64) == 0, "64-byte aligned");
  SG_CHECK_OK(sg_calloc(host, 1 << 23, &q));
  SG_CHECK_OK(sg_mem_get_info(host, &mid));
  SG_CHECK(mid.current_bytes == before.current_bytes + 1000 + (1 << 23),
           "current %zu", mid.current_bytes);
  SG_CHECK(mid.peak_bytes >= mid.current_bytes, "peak");
  SG_CHECK(mid.allocations == before.allocations + 2, "allocations");
  int zero = 1;
  for (size_t i = 0; i < (1u << 23); ++i) zero &= ((unsigned char *)q)[i] == 0;
  SG_CHECK(zero, "calloc zero-filled");
  SG_CHECK_OK(sg_memset(host, q, 7, 1 << 23));
  SG_CHECK_OK(sg_memcpy(host, p, host, q, 1000));
  SG_CHECK(((unsigned char *)p)[999] == 7, "memcpy");
  SG_CHECK_OK(sg_free(host, &q));
  SG_CHECK(q == NULL, "free sets NULL");
  SG_CHECK_OK(sg_free(host, &q)); /* NULL is fine */
  SG_CHECK_OK(sg_mem_reset_peak(host));
  SG_CHECK_OK(sg_mem_get_info(host, &after));
  SG_CHECK(after.current_bytes == before.current_bytes + 1000, "after free");
  SG_CHECK(after.peak_bytes == after.current_bytes, "reset peak");
  SG_CHECK_OK(sg_free(host, &p));
  void *z = (void *)1;
  SG_CHECK_OK(sg_malloc(host, 0, &z));
  SG_CHECK(z == NULL, "zero bytes gives NULL");
  /* keeping freed memory in the heap: a freed 16 MiB block is reused and
   * sg_calloc still zero-fills it */
  {
    sg_status ks = sg_host_keep_memory();
    SG_CHECK(ks == SG_OK || ks == SG_ERR_NOT_SUPPORTED, "keep memory: %s",
             sg_last_error());
    void *a = NULL;
    SG_CHECK_OK(sg_malloc(host, (size_t)16 << 20, &a));
    memset(a, 0x5a, (size_t)16 << 20);
    SG_CHECK_OK(sg_free(host, &a));
    SG_CHECK_OK(sg_calloc(host, (size_t)16 << 20, &a));
    int zz = 1;
    for (size_t i = 0; i < ((size_t)16 << 20); i += 4093)
      zz &= ((unsigned char *)a)[i] == 0;
    SG_CHECK(zz, "calloc of reused memory zero-filled");
    SG_CHECK_OK(sg_free(host, &a));
  }

  int n = -1;
  SG_CHECK_OK(sg_device_count(SG_DEVICE_HOST, &n));
  SG_CHECK(n == 1, "one host");
  SG_CHECK_OK(sg_device_count(SG_DEVICE_CUDA, &n));
  SG_CHECK(n >= 0, "cuda count");
  sg_device gpu = {SG_DEVICE_CUDA, 0};
  char dname[64] = "";
  size_t dbytes = 0;
  SG_CHECK_OK(sg_device_describe(host, dname, sizeof dname, &dbytes));
  SG_CHECK(!strcmp(dname, "host") && dbytes > 0, "host: '%s', %zu bytes", dname,
           dbytes);
  if (n > 0) {
    SG_CHECK_OK(sg_device_describe(gpu, dname, sizeof dname, &dbytes));
    SG_CHECK(dname[0] && dbytes > 0, "gpu 0: '%s', %zu bytes", dname, dbytes);
  }
  if (n == 0) {
    SG_CHECK_STATUS(sg_device_describe(gpu, dname, sizeof dname, &dbytes),
                    SG_ERR_NO_DEVICE);
    SG_CHECK_STATUS(sg_device_check(gpu), SG_ERR_NO_DEVICE);
    SG_CHECK_STATUS(sg_malloc(gpu, 16, &z), SG_ERR_NO_DEVICE);
    sg_stream_t s = NULL;
    SG_CHECK_STATUS(sg_stream_create(gpu, &s), SG_ERR_NO_DEVICE);
  }

  sg_stream_t s = NULL;
  sg_event_t e0 = NULL, e1 = NULL;
  SG_CHECK_OK(sg_stream_create(host, &s));
  SG_CHECK_OK(sg_event_create(host, &e0));
  SG_CHECK_OK(sg_event_create(host, &e1));
  SG_CHECK_OK(sg_event_record(e0, s));
  SG_CHECK_OK(sg_stream_wait_event(s, e0));
  SG_CHECK_OK(sg_event_record(e1, s));
  SG_CHECK_OK(sg_event_synchronize(e1));
  SG_CHECK_OK(sg_stream_synchronize(s));
  float ms = -1.0f;
  SG_CHECK_OK(sg_event_elapsed_ms(e0, e1, &ms));
  SG_CHECK(ms >= 0.0f, "elapsed %g", ms);
  SG_CHECK_OK(sg_event_destroy(&e0));
  SG_CHECK_OK(sg_event_destroy(&e1));
  SG_CHECK_OK(sg_stream_destroy(&s));
  SG_CHECK(s == NULL && e0 == NULL, "destroy sets NULL");
}

static void test_trace(void) {
  sg_trace_clear();
  sg_trace_enable(1);
  for (int i = 0; i < 3; ++i) {
    sg_trace_begin("outer");
    sg_trace_begin("inner");
    double t = sg_wtime();
    while (sg_wtime() - t < 1e-4) {}
    sg_trace_end("inner");
    sg_trace_end("outer");
  }
  char added[16]; /* a name on the stack: sg_trace_add copies it */
  snprintf(added, sizeof added, "added%d", 7);
  sg_trace_add(added, sg_wtime() - 1e-3, sg_wtime());
  memset(added, 0, sizeof added);
  SG_CHECK(sg_timer_count("added7") == 0, "an added event has no timer");
  SG_CHECK(sg_timer_count("inner") == 3 && sg_timer_count("outer") == 3,
           "counts");
  SG_CHECK(sg_timer_total("outer") >= sg_timer_total("inner"), "nesting");
  SG_CHECK(sg_timer_total("inner") >= 3e-4, "inner total %g",
           sg_timer_total("inner"));
  SG_CHECK(sg_timer_total("missing") == 0.0, "missing");
  char path[256];
  snprintf(path, sizeof path, "test_core_trace_np%d.json", sg_test_size);
  SG_CHECK_OK(sg_trace_write(path, MPI_COMM_WORLD));
  if (sg_test_rank == 0) {
    FILE *f = fopen(path, "r");
    SG_CHECK(f != NULL, "trace file");
    if (f) {
      char buf[65536];
      size_t n = fread(buf, 1, sizeof buf - 1, f);
      buf[n] = '\0';
      fclose(f);
      SG_CHECK(strstr(buf, "\"traceEvents\"") != NULL, "header");
      char want[64];
      snprintf(want, sizeof want, "\"pid\": %d", sg_test_size - 1);
      SG_CHECK(strstr(buf, want) != NULL, "events of the last rank");
      SG_CHECK(strstr(buf, "\"name\": \"inner\"") != NULL, "inner event");
      SG_CHECK(strstr(buf, "\"name\": \"added7\"") != NULL, "added event");
      remove(path);
    }
  }
  SG_CHECK_STATUS(sg_trace_write("/nonexistent-dir/x.json", MPI_COMM_WORLD),
                  SG_ERR_IO);
  sg_timer_reset();
  SG_CHECK(sg_timer_total("inner") == 0.0, "reset");
  sg_trace_enable(0);
  sg_trace_clear();
}

/* The BLAS kernel query: a hint only for OpenBLAS, one of the coretypes
 * tools/env.sh exports, and none once that coretype is in use (CTest runs
 * under tools/env.sh's OPENBLAS_CORETYPE when tools/test runs it). */
static void test_blas_core(void) {
  const char *core = sg_blas_core(), *hint = sg_blas_coretype_hint();
  if (!core) {
    SG_CHECK(hint == NULL, "no OpenBLAS, no hint");
    return;
  }
  SG_CHECK(*core != 0, "OpenBLAS names its kernels");
  if (hint)
    SG_CHECK(!strcmp(hint, "Cooperlake") || !strcmp(hint, "SkylakeX") ||
                 !strcmp(hint, "Haswell"),
             "hint %s is one of the coretypes tools/env.sh sets", hint);
  const char *set = getenv("OPENBLAS_CORETYPE");
  if (set && !strcmp(set, core))
    SG_CHECK(hint == NULL,
             "kernels %s chosen by OPENBLAS_CORETYPE, yet hint %s", core,
             hint ? hint : "");
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  test_blas_core();
  test_status();
  test_mpi_wrap();
  test_log();
  test_dtype();
  test_device();
  test_trace();
  return sg_test_finish();
}
