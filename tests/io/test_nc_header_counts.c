/* The classic header check (io/nc_check.c) refuses every count that asks
 * for more bytes than the file has, wherever it stands in the header: not
 * only up to the first value the parser cannot use. Found by fuzzing
 * (tests/fuzz/regress/ckpt/oom_numrecs_attr_2gb): a record count past 2^62
 * made the check give up on the rest of the header ("the library
 * decides"), so a global attribute of 352 million int64 values (2.8 GB in
 * a 1 KB file) went to PnetCDF, which allocated 2.2 GB before refusing the
 * file. The same held after a dim
 * length or a begin past 2^62, a dim id out of range, a variable of an
 * unknown type, or any count of 2^62 or more. Every case here is a small
 * CDF-5 header in memory (sg_io_classic_extent_mem); values no file can
 * hold saturate to INT64_MAX (the truncation check then refuses a read).
 *   test_nc_header_counts   (one process) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io_impl.h"
#include "sg_test.h"

/* What a case changes in the header; zero fields keep the default. */
typedef struct hdr {
  uint64_t numrecs; /* default 2 */
  uint64_t xlen;    /* dim x; default 3 */
  uint64_t gcount;  /* values of global attribute g; default 1 */
  uint64_t a_dimid; /* var a's dim; default 0 (time: a record variable) */
  uint32_t a_type;  /* var a's type; default float (5) */
  uint64_t a_begin; /* default 536 */
  uint64_t bcount;  /* values of var b's attribute; default 1 */
  uint64_t namelen; /* of var b's name; default 1 */
  int a_dimid_set;
} hdr;

typedef struct buf {
  unsigned char b[512];
  size_t n;
} buf;

static void be(buf *o, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i)
    o->b[o->n++] = (unsigned char)(v >> (8 * i));
}

static void name(buf *o, const char *s, uint64_t len) {
  be(o, len, 8);
  size_t n = strlen(s);
  memcpy(o->b + o->n, s, n);
  o->n += (n + 3) & ~(size_t)3;
}

/* one attribute of one int64 value written, whatever count it states */
static void att_list(buf *o, const char *nm, uint64_t count) {
  be(o, 0x0C, 4);
  be(o, 1, 8);
  name(o, nm, strlen(nm));
  be(o, 10, 4); /* int64 */
  be(o, count, 8);
  be(o, 42, 8);
}

/* CDF-5: dims time (record) and x; global attribute g; var a(time) and
 * var b(x) of doubles with attribute c; 64 bytes of data follow. */
static size_t build(const hdr *c, unsigned char *out) {
  buf o = {{0}, 0};
  memcpy(o.b, "CDF\5", 4);
  o.n = 4;
  be(&o, c->numrecs ? c->numrecs : 2, 8);
  be(&o, 0x0A, 4);
  be(&o, 2, 8);
  name(&o, "time", 4);
  be(&o, 0, 8);
  name(&o, "x", 1);
  be(&o, c->xlen ? c->xlen : 3, 8);
  att_list(&o, "g", c->gcount ? c->gcount : 1);
  be(&o, 0x0B, 4);
  be(&o, 2, 8);
  name(&o, "a", 1);
  be(&o, 1, 8);
  be(&o, c->a_dimid_set ? c->a_dimid : 0, 8);
  be(&o, 0, 4); /* no attributes */
  be(&o, 0, 8);
  be(&o, c->a_type ? c->a_type : 5, 4);
  be(&o, 4, 8);
  be(&o, c->a_begin ? c->a_begin : 536, 8);
  name(&o, "b", c->namelen ? c->namelen : 1);
  be(&o, 1, 8);
  be(&o, 1, 8);
  att_list(&o, "c", c->bcount ? c->bcount : 1);
  be(&o, 6, 4);
  be(&o, 24, 8);
  be(&o, 512, 8);
  memcpy(out, o.b, o.n);
  memset(out + o.n, 0, 64);
  return o.n + 64;
}

static void check_refused(const char *what, const hdr *c) {
  unsigned char b[600];
  size_t n = build(c, b);
  int64_t need = 0, *ends = NULL;
  int nends = 0;
  sg_status st = sg_io_classic_extent_mem(b, n, &need, NULL, 0, &ends, &nends);
  SG_CHECK(st == SG_ERR_CORRUPT, "%s: %s (need %lld): %s", what,
           sg_status_name(st), (long long)need, sg_last_error());
  SG_CHECK(strstr(sg_last_error(), "corrupt NetCDF header"), "%s: %s", what,
           sg_last_error());
  SG_CHECK(!ends && nends == 0, "%s: nothing handed out", what);
  free(ends);
}

static void check_extent(const char *what, const hdr *c, int64_t ea,
                         int64_t eb) {
  unsigned char b[600];
  size_t n = build(c, b);
  int64_t need = 0, *ends = NULL;
  int nends = 0;
  sg_status st = sg_io_classic_extent_mem(b, n, &need, NULL, 0, &ends, &nends);
  SG_CHECK(st == SG_OK, "%s: %s: %s", what, sg_status_name(st),
           sg_last_error());
  SG_CHECK(nends == 2 && ends && ends[0] == ea && ends[1] == eb,
           "%s: ends %lld %lld, expected %lld %lld", what,
           (long long)(ends && nends == 2 ? ends[0] : -1),
           (long long)(ends && nends == 2 ? ends[1] : -1), (long long)ea,
           (long long)eb);
  SG_CHECK(need == (ea > eb ? ea : eb), "%s: need %lld", what, (long long)need);
  free(ends);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  const uint64_t huge = 0x15000001; /* the finding's: 2.8 GB of int64 */
  const uint64_t past = ((uint64_t)1 << 62) + 1;
  /* a: 2 records of 4 bytes from 536, alone (unpadded); b: 3 doubles */
  check_extent("well formed", &(hdr){0}, 544, 536);
  check_extent("records past 2^62", &(hdr){.numrecs = (uint64_t)0xff01 << 48},
               INT64_MAX, 536);
  check_extent("dim past 2^62", &(hdr){.xlen = past}, 544, INT64_MAX);
  check_extent("begin past 2^62", &(hdr){.a_begin = (uint64_t)1 << 63},
               INT64_MAX, 536);

  /* the fuzz finding: a huge record count, then a huge attribute */
  check_refused("records past 2^62, global attribute",
                &(hdr){.numrecs = (uint64_t)0xff01 << 48, .gcount = huge});
  check_refused("global attribute count 2^64 - 1",
                &(hdr){.gcount = UINT64_MAX});
  check_refused("variable attribute count 2^63",
                &(hdr){.bcount = (uint64_t)1 << 63});
  check_refused("name length 2^40", &(hdr){.namelen = (uint64_t)1 << 40});
  check_refused("dim past 2^62, then an attribute",
                &(hdr){.xlen = past, .bcount = huge});
  check_refused("begin past 2^62, then an attribute",
                &(hdr){.a_begin = (uint64_t)1 << 63, .bcount = huge});
  check_refused("dim id out of range, then an attribute",
                &(hdr){.a_dimid = 7, .a_dimid_set = 1, .bcount = huge});
  check_refused("unknown type, then an attribute",
                &(hdr){.a_type = 99, .bcount = huge});
  return sg_test_finish();
}
